//! `weir echo`: a small, fast HTTP/1.1 and h2c (prior knowledge) backend for quickstarts,
//! tests and benchmarks. It answers every request with a JSON description of it.
//!
//! Response body (200, `application/json`):
//! `{"name", "method", "path", "query" (or null), "host" (Host header or URI authority, or
//! null), "protocol" ("HTTP/1.1", "HTTP/2.0", ...), "remote" (client ip:port), "headers"
//! (lower-case name → value, or an array of values when repeated), "body_bytes"}`.
//! Every response carries `x-echo-name: <name>`.
//!
//! Special paths:
//! - `/status/<code>`: answers with that status (200–599), JSON body as above (none for
//!   204 and 304).
//! - `/delay/<ms>`: waits that long (at most 60 s) before answering.
//! - `/bytes/<n>`: answers `n` bytes (at most 64 MiB) of `application/octet-stream`,
//!   streamed from a static buffer.
//!
//! The request body is read as it streams in and only counted. No lock is taken per
//! request.

use std::convert::Infallible;
use std::io::Write as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Version};
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// Longest `/delay/<ms>` honoured.
const MAX_DELAY: Duration = Duration::from_secs(60);
/// Largest `/bytes/<n>` honoured.
const MAX_BYTES: u64 = 64 << 20;
/// What `/bytes/<n>` bodies are cut from.
static FILL: [u8; 64 * 1024] = [b'x'; 64 * 1024];

/// Options of `weir echo`.
#[derive(Clone, Debug)]
pub struct EchoOptions {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Identity reported in every response (`name` field and `x-echo-name` header).
    pub name: String,
}

/// Binds `opts.listen` and serves until the future is dropped.
pub async fn run(opts: EchoOptions) -> std::io::Result<()> {
    let listener = TcpListener::bind(opts.listen).await?;
    serve(listener, opts.name.into()).await
}

/// Serves HTTP/1.1 and h2c (detected per connection) on `listener` until the future is
/// dropped; dropping it also closes every open connection. A failed accept (e.g. out of
/// file descriptors) is logged and retried after a short pause, so the future never
/// completes on its own.
pub async fn serve(listener: TcpListener, name: Arc<str>) -> std::io::Result<()> {
    let header = match HeaderValue::from_str(&name) {
        Ok(v) => Some(v),
        Err(_) => {
            tracing::warn!(name = %name, "echo name is not a valid header value; x-echo-name omitted");
            None
        }
    };
    let identity = Arc::new(Identity { name, header });
    let builder = auto::Builder::new(TokioExecutor::new());
    // Owning the connection tasks means dropping this future stops them all.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, remote) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "echo: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let builder = builder.clone();
                let identity = identity.clone();
                connections.spawn(async move {
                    let service = service_fn(move |req| handle(req, identity.clone(), remote));
                    if let Err(e) = builder.serve_connection(TokioIo::new(stream), service).await {
                        tracing::debug!(error = %e, %remote, "echo: connection ended with an error");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

struct Identity {
    name: Arc<str>,
    header: Option<HeaderValue>,
}

/// What a special path asks for.
#[derive(Debug, PartialEq, Eq)]
enum Special {
    None,
    Status(StatusCode),
    Delay(Duration),
    Bytes(u64),
    /// A special path with an unusable argument.
    Bad(&'static str),
}

fn special(path: &str) -> Special {
    let arg = |prefix: &str| {
        path.strip_prefix(prefix)
            .map(|rest| rest.split('/').next().unwrap_or_default())
    };
    if let Some(a) = arg("/status/") {
        match a
            .parse::<u16>()
            .ok()
            .filter(|c| (200..=599).contains(c))
            .map(StatusCode::from_u16)
        {
            Some(Ok(code)) => Special::Status(code),
            _ => Special::Bad("/status/<code> takes a status code from 200 to 599"),
        }
    } else if let Some(a) = arg("/delay/") {
        match a.parse::<u64>() {
            Ok(ms) => Special::Delay(Duration::from_millis(ms).min(MAX_DELAY)),
            Err(_) => Special::Bad("/delay/<ms> takes a number of milliseconds"),
        }
    } else if let Some(a) = arg("/bytes/") {
        match a.parse::<u64>() {
            Ok(n) => Special::Bytes(n.min(MAX_BYTES)),
            Err(_) => Special::Bad("/bytes/<n> takes a number of bytes"),
        }
    } else {
        Special::None
    }
}

async fn handle(
    req: Request<Incoming>,
    identity: Arc<Identity>,
    remote: SocketAddr,
) -> Result<Response<EchoBody>, Infallible> {
    let (parts, mut body) = req.into_parts();
    // Count the body as it streams in; a client that goes away mid-body gets an answer
    // nobody reads, which is harmless.
    let mut body_bytes: u64 = 0;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    body_bytes += data.len() as u64;
                }
            }
            Err(_) => break,
        }
    }

    let mut status = StatusCode::OK;
    match special(parts.uri.path()) {
        Special::None => {}
        Special::Status(code) => status = code,
        Special::Delay(d) => tokio::time::sleep(d).await,
        Special::Bytes(n) => {
            let mut resp = Response::new(EchoBody::Repeat { remaining: n });
            let h = resp.headers_mut();
            h.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            h.insert(CONTENT_LENGTH, HeaderValue::from(n));
            if let Some(v) = &identity.header {
                h.insert("x-echo-name", v.clone());
            }
            return Ok(resp);
        }
        Special::Bad(msg) => {
            status = StatusCode::BAD_REQUEST;
            let mut out = Vec::with_capacity(msg.len() + 16);
            out.extend_from_slice(b"{\"error\":");
            json_str(&mut out, msg);
            out.push(b'}');
            return Ok(json_response(status, out, &identity));
        }
    }

    if status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        let mut resp = Response::new(EchoBody::Full(None));
        *resp.status_mut() = status;
        if let Some(v) = &identity.header {
            resp.headers_mut().insert("x-echo-name", v.clone());
        }
        return Ok(resp);
    }
    let out = describe(&parts, &identity.name, remote, body_bytes);
    Ok(json_response(status, out, &identity))
}

fn json_response(status: StatusCode, json: Vec<u8>, identity: &Identity) -> Response<EchoBody> {
    let len = json.len() as u64;
    let mut resp = Response::new(EchoBody::Full(Some(Bytes::from(json))));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(CONTENT_LENGTH, HeaderValue::from(len));
    if let Some(v) = &identity.header {
        h.insert("x-echo-name", v.clone());
    }
    resp
}

/// The JSON description of a request. Written directly (strings escaped by serde_json)
/// rather than through an intermediate `Value`, to keep the per-request cost low.
fn describe(
    parts: &http::request::Parts,
    name: &str,
    remote: SocketAddr,
    body_bytes: u64,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + 64 * parts.headers.len());
    out.extend_from_slice(b"{\"name\":");
    json_str(&mut out, name);
    out.extend_from_slice(b",\"method\":");
    json_str(&mut out, parts.method.as_str());
    out.extend_from_slice(b",\"path\":");
    json_str(&mut out, parts.uri.path());
    out.extend_from_slice(b",\"query\":");
    json_opt(&mut out, parts.uri.query());
    out.extend_from_slice(b",\"host\":");
    let host_header = parts
        .headers
        .get(HOST)
        .map(|v| String::from_utf8_lossy(v.as_bytes()));
    json_opt(
        &mut out,
        host_header
            .as_deref()
            .or(parts.uri.authority().map(|a| a.as_str())),
    );
    out.extend_from_slice(b",\"protocol\":");
    json_str(&mut out, version_str(parts.version));
    out.extend_from_slice(b",\"remote\":");
    json_str(&mut out, &remote.to_string());
    out.extend_from_slice(b",\"headers\":");
    json_headers(&mut out, &parts.headers);
    // Writing into a Vec cannot fail.
    let _ = write!(out, ",\"body_bytes\":{body_bytes}}}");
    out
}

fn json_headers(out: &mut Vec<u8>, headers: &HeaderMap) {
    out.push(b'{');
    for (i, name) in headers.keys().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        json_str(out, name.as_str());
        out.push(b':');
        let mut values = headers.get_all(name).iter();
        let first = values.next();
        let second = values.next();
        match (first, second) {
            (Some(v), None) => json_str(out, &String::from_utf8_lossy(v.as_bytes())),
            _ => {
                out.push(b'[');
                for (j, v) in headers.get_all(name).iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    json_str(out, &String::from_utf8_lossy(v.as_bytes()));
                }
                out.push(b']');
            }
        }
    }
    out.push(b'}');
}

fn json_str(out: &mut Vec<u8>, s: &str) {
    // Serializing a str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn json_opt(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => json_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

fn version_str(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/?",
    }
}

/// Response body: a whole buffer, or `remaining` bytes cut from a static buffer.
#[derive(Debug)]
enum EchoBody {
    Full(Option<Bytes>),
    Repeat { remaining: u64 },
}

impl Body for EchoBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        match this {
            EchoBody::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            EchoBody::Repeat { remaining } => {
                if *remaining == 0 {
                    return Poll::Ready(None);
                }
                let n = (*remaining).min(FILL.len() as u64) as usize;
                *remaining -= n as u64;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&FILL[..n])))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            EchoBody::Full(data) => data.is_none(),
            EchoBody::Repeat { remaining } => *remaining == 0,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            EchoBody::Full(data) => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            EchoBody::Repeat { remaining } => SizeHint::with_exact(*remaining),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};
    use hyper::client::conn::{http1, http2};
    use serde_json::Value;

    async fn start(name: &str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, name.into()));
        addr
    }

    async fn h1(addr: SocketAddr) -> http1::SendRequest<Full<Bytes>> {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (send, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        send
    }

    async fn h2(addr: SocketAddr) -> http2::SendRequest<Full<Bytes>> {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (send, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        send
    }

    async fn read(resp: Response<Incoming>) -> (StatusCode, HeaderMap, Bytes) {
        let (parts, body) = resp.into_parts();
        let bytes = tokio::time::timeout(Duration::from_secs(10), body.collect())
            .await
            .expect("body within 10 s")
            .unwrap()
            .to_bytes();
        (parts.status, parts.headers, bytes)
    }

    #[test]
    fn special_paths() {
        assert_eq!(
            special("/status/503"),
            Special::Status(StatusCode::SERVICE_UNAVAILABLE)
        );
        assert_eq!(
            special("/status/503/x"),
            Special::Status(StatusCode::SERVICE_UNAVAILABLE)
        );
        assert!(matches!(special("/status/99"), Special::Bad(_)));
        assert!(matches!(special("/status/abc"), Special::Bad(_)));
        assert_eq!(
            special("/delay/5"),
            Special::Delay(Duration::from_millis(5))
        );
        assert_eq!(special("/delay/999999999"), Special::Delay(MAX_DELAY));
        assert_eq!(special("/bytes/10"), Special::Bytes(10));
        assert_eq!(special("/bytes/99999999999"), Special::Bytes(MAX_BYTES));
        assert_eq!(special("/statusx/1"), Special::None);
        assert_eq!(special("/"), Special::None);
    }

    #[tokio::test]
    async fn http1_echoes_the_request() {
        let addr = start("be-1").await;
        let mut send = h1(addr).await;
        let req = Request::post("/some/path?a=1&b=%22")
            .header(HOST, "example.com")
            .header("x-one", "1")
            .header("x-multi", "a")
            .header("x-multi", "b")
            .header("x-quote", "say \"hi\"")
            .body(Full::new(Bytes::from_static(b"hello world")))
            .unwrap();
        let (status, headers, body) = read(send.send_request(req).await.unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(headers["x-echo-name"], "be-1");
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["name"], "be-1");
        assert_eq!(v["method"], "POST");
        assert_eq!(v["path"], "/some/path");
        assert_eq!(v["query"], "a=1&b=%22");
        assert_eq!(v["host"], "example.com");
        assert_eq!(v["protocol"], "HTTP/1.1");
        assert_eq!(v["body_bytes"], 11);
        assert_eq!(v["headers"]["x-one"], "1");
        assert_eq!(v["headers"]["x-multi"], serde_json::json!(["a", "b"]));
        assert_eq!(v["headers"]["x-quote"], "say \"hi\"");
        let remote: SocketAddr = v["remote"].as_str().unwrap().parse().unwrap();
        assert!(remote.ip().is_loopback());

        // Same connection: no query, special paths.
        let req = Request::get("/status/503")
            .header(HOST, "h")
            .body(Full::default())
            .unwrap();
        let (status, headers, body) = read(send.send_request(req).await.unwrap()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(headers["x-echo-name"], "be-1");
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["query"], Value::Null);
        assert_eq!(v["body_bytes"], 0);

        let req = Request::get("/bytes/10")
            .header(HOST, "h")
            .body(Full::default())
            .unwrap();
        let (status, headers, body) = read(send.send_request(req).await.unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers["content-length"], "10");
        assert_eq!(&body[..], b"xxxxxxxxxx");

        let req = Request::get("/status/nope")
            .header(HOST, "h")
            .body(Full::default())
            .unwrap();
        let (status, _, _) = read(send.send_request(req).await.unwrap()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn h2c_prior_knowledge() {
        let addr = start("be-2").await;
        let mut send = h2(addr).await;
        let req = Request::put("http://example.org/h2?x")
            .header("x-h2", "yes")
            .body(Full::new(Bytes::from(vec![0u8; 70_000])))
            .unwrap();
        let (status, headers, body) = read(send.send_request(req).await.unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers["x-echo-name"], "be-2");
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["protocol"], "HTTP/2.0");
        assert_eq!(v["host"], "example.org");
        assert_eq!(v["method"], "PUT");
        assert_eq!(v["query"], "x");
        assert_eq!(v["headers"]["x-h2"], "yes");
        assert_eq!(v["body_bytes"], 70_000);

        let req = Request::get("http://example.org/status/503")
            .body(Full::default())
            .unwrap();
        let (status, _, _) = read(send.send_request(req).await.unwrap()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

        // Larger than one chunk of the static buffer.
        let req = Request::get("http://example.org/bytes/200000")
            .body(Full::default())
            .unwrap();
        let (status, _, body) = read(send.send_request(req).await.unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body.len(), 200_000);
        assert!(body.iter().all(|b| *b == b'x'));

        let req = Request::get("http://example.org/status/204")
            .body(Full::default())
            .unwrap();
        let (status, _, body) = read(send.send_request(req).await.unwrap()).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert!(body.is_empty());
    }

    #[tokio::test]
    async fn delay_waits_then_answers() {
        let addr = start("be-3").await;
        let mut send = h1(addr).await;
        let req = Request::get("/delay/20")
            .header(HOST, "h")
            .body(Full::default())
            .unwrap();
        let (status, _, body) = read(send.send_request(req).await.unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["path"], "/delay/20");
    }

    #[tokio::test]
    async fn dropping_serve_closes_connections() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(listener, "be-4".into()));
        let mut send = h1(addr).await;
        let req = Request::get("/")
            .header(HOST, "h")
            .body(Full::default())
            .unwrap();
        assert_eq!(
            read(send.send_request(req).await.unwrap()).await.0,
            StatusCode::OK
        );
        server.abort();
        let _ = server.await;
        // The open keep-alive connection is closed with the server.
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            while send.ready().await.is_ok() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "connection still open after the server stopped"
        );
    }
}
