//! The client against real sockets: scripted upstreams that record what they read and
//! answer raw bytes, and, for request bodies (which come from a client connection), a
//! hyper server in front that forwards through the pool.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use weir_model::EndpointAddr;

use http::HeaderMap;

use super::*;

/// What a scripted upstream does with the `n`th request (from 0, over all connections) it
/// read: the bytes it answers, and whether it closes the connection afterwards.
type Script = Box<dyn Fn(usize, &[u8]) -> (Vec<u8>, bool) + Send + Sync>;

struct Upstream {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    /// Every request read, in full (head and body).
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

/// The end of a request in `got`: after its head, and its body by Content-Length or
/// chunked framing (enough for these tests' requests).
fn request_end(got: &[u8]) -> Option<usize> {
    let head = got.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = String::from_utf8_lossy(&got[..head]).to_ascii_lowercase();
    if let Some(l) = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
    {
        let n: usize = l.trim().parse().ok()?;
        return (got.len() >= head + n).then_some(head + n);
    }
    if text.contains("transfer-encoding: chunked") {
        let end = got[head..].windows(5).position(|w| w == b"0\r\n\r\n")?;
        return Some(head + end + 5);
    }
    Some(head)
}

async fn upstream(script: Script) -> Upstream {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let script = Arc::new(script);
    let (a, s) = (Arc::clone(&accepted), Arc::clone(&seen));
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = l.accept().await.unwrap();
            a.fetch_add(1, Ordering::SeqCst);
            let (script, seen) = (Arc::clone(&script), Arc::clone(&s));
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = vec![0u8; 65536];
                loop {
                    while request_end(&got).is_none() {
                        match sock.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let end = request_end(&got).unwrap();
                    let req: Vec<u8> = got.drain(..end).collect();
                    let n = {
                        let mut seen = seen.lock().unwrap();
                        seen.push(req.clone());
                        seen.len() - 1
                    };
                    let (answer, close) = script(n, &req);
                    if sock.write_all(&answer).await.is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    Upstream {
        addr,
        accepted,
        seen,
    }
}

fn pool() -> Arc<Http1Pool> {
    Arc::new(Http1Pool::new(
        Duration::from_secs(2),
        Duration::from_secs(30),
        Gauge::default(),
        Counter::default(),
    ))
}

fn get(path: &str) -> Request<RequestBody> {
    Request::builder()
        .uri(path)
        .header("host", "app.test")
        .body(RequestBody::empty())
        .unwrap()
}

/// Sends `req` through `pool` to `addr`: the status, the headers and the whole body.
async fn exchange(
    pool: &Arc<Http1Pool>,
    addr: SocketAddr,
    req: Request<RequestBody>,
) -> Result<(StatusCode, HeaderMap, Vec<u8>), String> {
    let resp = pool
        .send(&EndpointAddr::Socket(addr), None, req, None)
        .await
        .map_err(|e| e.to_string())?;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((parts.status, parts.headers, body.to_vec()))
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

#[tokio::test]
async fn one_connection_carries_sequential_requests_with_their_heads_as_sent() {
    let up = upstream(Box::new(|_, _| (OK.to_vec(), false))).await;
    let p = pool();
    for path in ["/a", "/b?x=1", "/c"] {
        let (status, _, body) = exchange(&p, up.addr, get(path)).await.unwrap();
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"ok"[..]));
    }
    assert_eq!(up.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(p.idle_count(), 1);
    let seen = up.seen.lock().unwrap();
    assert_eq!(seen[1], b"GET /b?x=1 HTTP/1.1\r\nhost: app.test\r\n\r\n");
}

#[tokio::test]
async fn bodies_by_length_chunks_and_close_are_read_whole() {
    let up = upstream(Box::new(|n, _| match n {
        0 => (b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nhello world".to_vec(), false),
        1 => (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n"
                .to_vec(),
            false,
        ),
        _ => (b"HTTP/1.1 200 OK\r\n\r\nuntil the end".to_vec(), true),
    }))
    .await;
    let p = pool();
    let (_, _, body) = exchange(&p, up.addr, get("/")).await.unwrap();
    assert_eq!(body, b"hello world");
    let (_, _, body) = exchange(&p, up.addr, get("/")).await.unwrap();
    assert_eq!(body, b"hello world");
    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        1,
        "both on one connection"
    );
    let (_, _, body) = exchange(&p, up.addr, get("/")).await.unwrap();
    assert_eq!(body, b"until the end");
    assert_eq!(
        p.idle_count(),
        0,
        "a body ended by the close leaves no connection"
    );
}

#[tokio::test]
async fn informational_answers_are_skipped_and_head_answers_have_no_body() {
    let up = upstream(Box::new(|n, _| match n {
        0 => (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n"
                .to_vec(),
            false,
        ),
        1 => (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n".to_vec(), false),
        _ => (OK.to_vec(), false),
    }))
    .await;
    let p = pool();
    let (status, _, _) = exchange(&p, up.addr, get("/")).await.unwrap();
    assert_eq!(status, StatusCode::CREATED);
    let head = Request::head("/")
        .header("host", "x")
        .body(RequestBody::empty())
        .unwrap();
    let (status, headers, body) = exchange(&p, up.addr, head).await.unwrap();
    assert_eq!((status, body.len()), (StatusCode::OK, 0));
    assert_eq!(headers["content-length"], "5");
    // The connection is reused after the bodiless answer.
    exchange(&p, up.addr, get("/")).await.unwrap();
    assert_eq!(up.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_reused_connection_closed_before_answering_sends_a_get_again() {
    // The second request's connection is closed as it arrives (the keep-alive race: the
    // upstream closed an idle connection as weir reused it).
    let up = upstream(Box::new(|n, _| match n {
        1 => (Vec::new(), true),
        _ => (OK.to_vec(), false),
    }))
    .await;
    let p = pool();
    exchange(&p, up.addr, get("/")).await.unwrap();
    let (status, _, _) = exchange(&p, up.addr, get("/")).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2);
    assert_eq!(up.seen.lock().unwrap().len(), 3, "sent twice");
}

#[tokio::test]
async fn a_post_is_not_sent_again_and_a_new_connection_is_not_either() {
    let up = upstream(Box::new(|n, _| match n {
        0 => (OK.to_vec(), false),
        _ => (Vec::new(), true),
    }))
    .await;
    let p = pool();
    exchange(&p, up.addr, get("/")).await.unwrap();
    let post = Request::post("/")
        .header("host", "x")
        .body(RequestBody::empty())
        .unwrap();
    let err = exchange(&p, up.addr, post).await.unwrap_err();
    assert!(err.contains("closed"), "{err}");
    // A GET on a new connection that closes is an error too (sent once).
    let err = exchange(&p, up.addr, get("/")).await.unwrap_err();
    assert!(err.contains("closed"), "{err}");
    assert_eq!(up.seen.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn malformed_answers_are_upstream_errors_and_close_the_connection() {
    for bad in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab"[..],
        b"HTTP/1.1 200 OK\r\nx-a: b\r\n folded\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\ncontent-length: 0\n\n",
        b"NOT HTTP\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n",
    ] {
        let bad = bad.to_vec();
        let up = upstream(Box::new(move |_, _| (bad.clone(), false))).await;
        let p = pool();
        let resp = p
            .send(&EndpointAddr::Socket(up.addr), None, get("/"), None)
            .await;
        assert!(
            matches!(resp, Err(ProxyError::Upstream(_))),
            "{:?}",
            resp.err()
        );
        assert_eq!(p.idle_count(), 0);
    }
}

#[tokio::test]
async fn a_malformed_chunked_body_fails_and_its_connection_is_closed() {
    let up = upstream(Box::new(|_, _| {
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n".to_vec(),
            false,
        )
    }))
    .await;
    let p = pool();
    let err = exchange(&p, up.addr, get("/")).await.unwrap_err();
    assert!(err.contains("chunk"), "{err}");
    assert_eq!(p.idle_count(), 0);
}

#[tokio::test]
async fn both_framings_at_once_are_read_as_chunked_and_the_connection_is_not_reused() {
    let up = upstream(Box::new(|_, _| {
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec(),
            false,
        )
    }))
    .await;
    let p = pool();
    let (_, _, body) = exchange(&p, up.addr, get("/")).await.unwrap();
    assert_eq!(body, b"abc");
    assert_eq!(p.idle_count(), 0);
}

/// A hyper server in front of `pool` that forwards each request (its body as the
/// client sends it) to `target` and streams the answer back.
async fn front(pool: Arc<Http1Pool>, target: SocketAddr) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let pool = Arc::clone(&pool);
                    async move {
                        let req = req.map(RequestBody::unlimited);
                        match pool
                            .send(&EndpointAddr::Socket(target), None, req, None)
                            .await
                        {
                            Ok(resp) => Ok::<_, String>(resp.map(|b| b.boxed())),
                            Err(e) => Ok(Response::builder()
                                .status(502)
                                .body(
                                    http_body_util::Full::new(Bytes::from(e.to_string()))
                                        .map_err(|never| match never {})
                                        .boxed(),
                                )
                                .unwrap()),
                        }
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

/// Writes `raw` to `addr` and reads until the connection closes.
async fn raw(addr: SocketAddr, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(raw).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn request_bodies_keep_their_length_or_go_chunked() {
    let up = upstream(Box::new(|_, _| (OK.to_vec(), false))).await;
    let addr = front(pool(), up.addr).await;
    let answer = raw(
        addr,
        b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let answer = raw(
        addr,
        b"POST /b HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let seen = up.seen.lock().unwrap();
    assert_eq!(
        seen[0],
        b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello"
    );
    let chunked = String::from_utf8_lossy(&seen[1]);
    assert!(
        chunked.contains("transfer-encoding: chunked\r\n"),
        "{chunked}"
    );
    assert!(!chunked.contains("content-length"), "{chunked}");
    assert!(
        chunked.ends_with("\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"),
        "{chunked}"
    );
}

#[tokio::test]
async fn an_early_answer_is_taken_while_the_body_is_still_coming() {
    // The upstream answers 413 to the head and closes without reading the body, while
    // the client still sends it slowly.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        s.write_all(
            b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 3\r\nconnection: close\r\n\r\nbig",
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
    });
    let p = pool();
    let addr = front(Arc::clone(&p), up).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\nfirst part")
        .await
        .unwrap();
    let mut out = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut out))
        .await
        .expect("the answer comes before the body ends")
        .unwrap();
    let answer = String::from_utf8_lossy(&out[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(p.idle_count(), 0);
}

#[tokio::test]
async fn an_idle_connection_closed_by_the_upstream_is_not_taken() {
    let up = upstream(Box::new(|_, _| (OK.to_vec(), true))).await;
    let p = pool();
    exchange(&p, up.addr, get("/")).await.unwrap();
    // The response had no `connection: close`: the connection went back to the pool,
    // then the upstream closed it; the runtime sees the end.
    assert_eq!(p.idle_count(), 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let key = (EndpointAddr::Socket(up.addr), 0, usize::MAX);
    assert!(p.take(&key).is_none());
    exchange(&p, up.addr, get("/")).await.unwrap();
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2);
    assert_eq!(
        up.seen.lock().unwrap().len(),
        2,
        "no request was lost on the closed one"
    );
}

#[test]
fn chunk_size_lines_are_hex() {
    let mut line = [0u8; 24];
    for (n, want) in [
        (0, "0\r\n"),
        (1, "1\r\n"),
        (15, "f\r\n"),
        (16, "10\r\n"),
        (0x1234abc, "1234abc\r\n"),
    ] {
        let len = hex_line(n, &mut line);
        assert_eq!(&line[..len], want.as_bytes());
    }
    let mut digits = [0u8; 20];
    assert_eq!(decimal(0, &mut digits), b"0");
    assert_eq!(decimal(u64::MAX, &mut digits), b"18446744073709551615");
}
