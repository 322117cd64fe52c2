//! Test helpers: backends, clients, certificates and IR builders, all on 127.0.0.1.

#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use prometheus_client::registry::Registry;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use weir_model::{
    Action, Certificate, Cluster, ClusterKey, Delta, DeltaBatch, Endpoint, EndpointAddr, HostMatch,
    Listener, ListenerKey, ListenerSettings, PathMatch, Protocol, RequestMatch, Resource,
    RouteKind, RouteRef, RouteRule, SniCert, Timeouts, UpstreamProtocol, VirtualHost,
    WeightedBackend,
};
use weir_proxy::{DataPlane, ProxyConfig};

/// Upper bound for any single network step in a test.
pub const STEP: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------- backends

/// An HTTP/1.1 + h2c backend that answers with its name and what it received.
/// `GET /slow` waits 1 s before answering (the test proxies drain for 2 s).
pub struct Backend {
    pub name: &'static str,
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Backend {
    pub async fn start(name: &'static str) -> Backend {
        let tcp = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind backend");
        let addr = tcp.local_addr().expect("backend addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = tcp.accept().await else {
                    continue;
                };
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| answer(name, req));
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Backend {
            name,
            addr,
            accepted,
            task,
        }
    }

    /// Connections the backend accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

async fn answer(
    name: &'static str,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    match req.uri().path() {
        "/slow" => tokio::time::sleep(Duration::from_secs(1)).await,
        // A response that comes after the client's next frames on the stream (h2spec).
        "/after-100ms" => tokio::time::sleep(Duration::from_millis(100)).await,
        _ => {}
    }
    let (parts, body) = req.into_parts();
    let received = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let req = Request::from_parts(parts, ());
    let h = |n: &str| {
        req.headers()
            .get_all(n)
            .iter()
            .map(|v| v.to_str().unwrap_or("?").to_string())
            .collect::<Vec<_>>()
            .join("|")
    };
    let body = format!(
        "backend={name}\npath={}\nversion={:?}\nauthority={}\nhost={}\nx-forwarded-for={}\nx-forwarded-proto={}\nx-forwarded-host={}\nbody-len={}\nbody-sum={}\nx-request-id={}\nconnection={}\nx-hop={}\nkeep-alive={}\nproxy-connection={}\n",
        req.uri().path_and_query().map_or("", |p| p.as_str()),
        req.version(),
        req.uri().authority().map_or("", |a| a.as_str()),
        h("host"),
        h("x-forwarded-for"),
        h("x-forwarded-proto"),
        h("x-forwarded-host"),
        received.len(),
        checksum(&received),
        h("x-request-id"),
        h("connection"),
        h("x-hop"),
        h("keep-alive"),
        h("proxy-connection"),
    );
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    resp.headers_mut()
        .insert("x-backend", name.parse().expect("header"));
    Ok(resp)
}

/// A simple order-sensitive checksum of a body.
pub fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0u64, |acc, b| {
        acc.wrapping_mul(31).wrapping_add(u64::from(*b))
    })
}

/// A raw-TCP backend that answers each of its first `max` connections with `response`
/// (written verbatim after the request head has been read) and then closes it: for
/// responses a well-behaved server library would not produce.
pub async fn raw_backend(response: &'static [u8], max: usize) -> (SocketAddr, JoinHandle<()>) {
    let tcp = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind raw backend");
    let addr = tcp.local_addr().expect("raw backend addr");
    let task = tokio::spawn(async move {
        for _ in 0..max {
            let Ok((mut stream, _)) = tcp.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream.write_all(response).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (addr, task)
}

/// Writes `request` on `stream` and reads until the peer closes (or resets) the
/// connection, or the step limit passes. Returns what was read.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    request: &[u8],
) -> Vec<u8> {
    let mut got = Vec::new();
    if stream.write_all(request).await.is_err() {
        return got;
    }
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(STEP, read).await;
    got
}

/// [`exchange`] on a new plain TCP connection to `addr`.
pub async fn raw(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    exchange(&mut tcp, request).await
}

/// The status code of a raw HTTP/1.x response (0 if there is none).
pub fn raw_status(response: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(response);
    text.strip_prefix("HTTP/1.1 ")
        .or_else(|| text.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// An address on 127.0.0.1 where nothing listens (bound, then closed).
pub async fn refused_addr() -> SocketAddr {
    let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    tcp.local_addr().expect("addr")
}

// ---------------------------------------------------------------- clients

/// A response, fully read.
pub struct Resp {
    pub status: u16,
    pub version: Version,
    pub headers: HeaderMap,
    pub body: String,
}

impl Resp {
    /// A `key=value` line of a backend's answer.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.body
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
    }

    pub fn backend(&self) -> &str {
        self.field("backend").unwrap_or("")
    }
}

/// One client connection, HTTP/1.1 or HTTP/2.
pub enum Conn {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>, &'static str),
}

impl Conn {
    /// HTTP/1.1 over plain TCP.
    pub async fn h1(addr: SocketAddr) -> Conn {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let (send, conn) = http1::handshake(TokioIo::new(tcp))
            .await
            .expect("h1 handshake");
        tokio::spawn(conn);
        Conn::H1(send)
    }

    /// HTTP/2 with prior knowledge over plain TCP.
    pub async fn h2c(addr: SocketAddr) -> Conn {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let (send, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
        tokio::spawn(conn);
        Conn::H2(send, "http")
    }

    /// TLS with `sni`, trusting `ca`, offering `alpn`; returns the connection and the leaf
    /// certificate the server presented. HTTP/2 is used when the server picked "h2".
    pub async fn tls(
        addr: SocketAddr,
        sni: &str,
        ca: &CertificateDer<'static>,
        alpn: &[&[u8]],
    ) -> Result<(Conn, CertificateDer<'static>), std::io::Error> {
        let tls = tls_stream(addr, sni, ca, alpn).await?;
        let (_, session) = tls.get_ref();
        let leaf = session
            .peer_certificates()
            .and_then(|c| c.first())
            .cloned()
            .expect("server certificate");
        let h2 = session.alpn_protocol() == Some(b"h2");
        let conn = if h2 {
            let (send, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .map_err(std::io::Error::other)?;
            tokio::spawn(conn);
            Conn::H2(send, "https")
        } else {
            let (send, conn) = http1::handshake(TokioIo::new(tls))
                .await
                .map_err(std::io::Error::other)?;
            tokio::spawn(conn);
            Conn::H1(send)
        };
        Ok((conn, leaf))
    }

    pub async fn get(&mut self, host: &str, path: &str) -> Resp {
        self.request(Method::GET, host, path, &[]).await
    }

    /// POSTs `body` to `host` `path`.
    pub async fn post(&mut self, host: &str, path: &str, body: Bytes) -> Resp {
        self.send(Method::POST, host, path, &[], body).await
    }

    /// Sends `method` with `body` to `host` `path`.
    pub async fn with_body(&mut self, method: Method, host: &str, path: &str, body: Bytes) -> Resp {
        self.send(method, host, path, &[], body).await
    }

    /// Sends a request for `host` (Host header for HTTP/1.1, :authority for HTTP/2).
    pub async fn request(
        &mut self,
        method: Method,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Resp {
        self.send(method, host, path, headers, Bytes::new()).await
    }

    async fn send(
        &mut self,
        method: Method,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Resp {
        let builder = match self {
            Conn::H1(_) => Request::builder().uri(path).header("host", host),
            Conn::H2(_, scheme) => Request::builder()
                .uri(format!("{scheme}://{host}{path}"))
                .version(Version::HTTP_2),
        };
        let mut req = builder
            .method(method)
            .body(Full::new(body))
            .expect("request");
        for (n, v) in headers {
            req.headers_mut().append(
                http::HeaderName::from_bytes(n.as_bytes()).expect("name"),
                v.parse().expect("value"),
            );
        }
        let fut = async {
            match self {
                Conn::H1(s) => s.send_request(req).await,
                Conn::H2(s, _) => s.send_request(req).await,
            }
        };
        let resp = tokio::time::timeout(STEP, fut)
            .await
            .expect("response within the step limit")
            .expect("response");
        read(resp).await
    }
}

/// A TLS session with `sni`, trusting `ca`, offering `alpn`, over which nothing was sent.
pub async fn tls_stream(
    addr: SocketAddr,
    sni: &str,
    ca: &CertificateDer<'static>,
    alpn: &[&[u8]],
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, std::io::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).expect("add root");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(sni.to_string()).expect("server name");
    connector.connect(name, tcp).await
}

pub async fn read(resp: Response<Incoming>) -> Resp {
    let (parts, body) = resp.into_parts();
    let body = tokio::time::timeout(STEP, body.collect())
        .await
        .expect("body within the step limit")
        .expect("body")
        .to_bytes();
    Resp {
        status: parts.status.as_u16(),
        version: parts.version,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// One-shot GET on a fresh HTTP/1.1 connection.
pub async fn get(addr: SocketAddr, host: &str, path: &str) -> Resp {
    Conn::h1(addr).await.get(host, path).await
}

// ---------------------------------------------------------------- certificates

/// A test CA and leaf certificates it signs.
pub struct Ca {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Ca {
    pub fn new() -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "weir test CA");
        let key = rcgen::KeyPair::generate().expect("key");
        Ca {
            issuer: rcgen::CertifiedIssuer::self_signed(params, key).expect("ca"),
        }
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// A leaf for `names`; returns the IR certificate and the leaf's DER.
    pub fn leaf(&self, names: &[&str]) -> (Arc<Certificate>, CertificateDer<'static>) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let params = rcgen::CertificateParams::new(names).expect("params");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let ir = Certificate::new(
            cert.pem().into_bytes().into(),
            key.serialize_pem().into_bytes().into(),
        );
        (Arc::new(ir), cert.der().clone())
    }
}

// ---------------------------------------------------------------- IR builders

pub fn key() -> ListenerKey {
    ListenerKey::new("127.0.0.1:0".parse().expect("addr"))
}

pub fn listener(protocol: Protocol) -> Resource {
    Resource::Listener(Arc::new(Listener::new(
        key(),
        protocol,
        "test/gw".into(),
        "web".into(),
    )))
}

/// The listener with `settings` (timeouts, limits, path normalization).
pub fn listener_with(protocol: Protocol, settings: ListenerSettings) -> Resource {
    Resource::Listener(Arc::new(Listener::with_settings(
        key(),
        protocol,
        "test/gw".into(),
        "web".into(),
        settings,
    )))
}

pub fn host(h: Option<&str>) -> HostMatch {
    HostMatch::parse(h).expect("host")
}

/// A rule matching a path prefix.
pub fn rule(prefix: &str, action: Action) -> Arc<RouteRule> {
    rule_with(prefix, action, Timeouts::default())
}

pub fn rule_with(prefix: &str, action: Action, timeouts: Timeouts) -> Arc<RouteRule> {
    Arc::new(RouteRule::new(
        RouteRef {
            kind: RouteKind::HttpRoute,
            namespace: "default".into(),
            name: "r".into(),
            rule: 0,
        },
        RequestMatch {
            path: PathMatch::Prefix(prefix.into()),
            headers: vec![],
            query: vec![],
            method: None,
        },
        vec![],
        action,
        timeouts,
    ))
}

pub fn forward(clusters: &[(&str, u32)]) -> Action {
    Action::Forward(
        clusters
            .iter()
            .map(|(c, w)| WeightedBackend {
                cluster: ClusterKey((*c).into()),
                weight: *w,
                filters: Vec::new(),
            })
            .collect(),
    )
}

pub fn vhost(h: Option<&str>, rules: Vec<Arc<RouteRule>>) -> Resource {
    Resource::VirtualHost(Arc::new(VirtualHost::new(key(), host(h), rules)))
}

pub fn cluster(name: &str, addrs: &[SocketAddr], protocol: UpstreamProtocol) -> Resource {
    let endpoints = addrs
        .iter()
        .map(|a| Endpoint {
            addr: EndpointAddr::Socket(*a),
            weight: 1,
        })
        .collect();
    Resource::Cluster(Arc::new(Cluster::new(
        ClusterKey(name.into()),
        endpoints,
        protocol,
    )))
}

pub fn sni(h: Option<&str>, cert: &Certificate) -> Resource {
    Resource::Sni(Arc::new(SniCert::new(key(), host(h), cert.hash())))
}

pub fn upserts(resources: Vec<Resource>) -> DeltaBatch {
    DeltaBatch {
        deltas: resources.into_iter().map(Delta::Upsert).collect(),
    }
}

// ---------------------------------------------------------------- the proxy

/// A data plane with one listener on 127.0.0.1:0.
pub struct Proxy {
    pub dp: Arc<DataPlane>,
    pub registry: Arc<Registry>,
    pub addr: SocketAddr,
}

impl Proxy {
    /// Starts a data plane and applies `resources` (which must include the listener).
    pub async fn start(resources: Vec<Resource>) -> Proxy {
        let mut registry = Registry::default();
        let config = ProxyConfig {
            drain_timeout: Duration::from_secs(2),
            ..ProxyConfig::default()
        };
        let dp = DataPlane::new(config, &mut registry).expect("workers");
        let report = dp.apply(&upserts(resources)).await;
        assert!(
            report.rejected.is_empty(),
            "rejected: {:?}",
            report.rejected
        );
        let addr = dp.bound_addr(&key()).expect("listener bound");
        Proxy {
            dp,
            registry: Arc::new(registry),
            addr,
        }
    }

    /// The proxy's metrics in text form.
    pub fn metrics(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("encode");
        out
    }

    /// The value of one metric sample, e.g. `weir_downstream_timeouts_total{state="idle"}`
    /// (0 when absent).
    pub fn metric(&self, sample: &str) -> u64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    }
}

// ---------------------------------------------------------------- raw HTTP/1.1

/// A response read off a raw socket: status, header block and body (by content-length).
pub struct RawResp {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

/// Reads one HTTP/1.1 response with a content-length body (within [`STEP`]); `None` when
/// the connection closed or failed first.
pub async fn read_raw_response(s: &mut TcpStream) -> Option<RawResp> {
    use tokio::io::AsyncReadExt;
    let read = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let status = head.get(9..12)?.parse().ok()?;
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        let mut body = buf[end..].to_vec();
        while body.len() < len {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        }
        Some(RawResp { status, head, body })
    };
    tokio::time::timeout(STEP, read).await.ok().flatten()
}

/// Waits up to [`STEP`] for the peer to close `s` (EOF or reset), discarding what it
/// sends; returns whether it did.
pub async fn closed_by_peer<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> bool {
    use tokio::io::AsyncReadExt;
    let mut chunk = [0u8; 4096];
    let closed = async {
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(STEP, closed).await.is_ok()
}

// ---------------------------------------------------------------- process limits

/// This process's open-files limit (soft, hard).
pub fn nofile() -> (u64, u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").expect("/proc/self/limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files");
    let mut n = line["Max open files".len()..]
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(u64::MAX));
    (n.next().expect("soft"), n.next().expect("hard"))
}

/// Sets this process's soft open-files limit (util-linux `prlimit`: no unsafe code here).
pub fn set_soft_nofile(soft: u64, hard: u64) {
    let pid = std::process::id().to_string();
    let arg = format!("--nofile={soft}:{hard}");
    let status = std::process::Command::new("prlimit")
        .args(["--pid", &pid, &arg])
        .status()
        .expect("run prlimit (util-linux)");
    assert!(status.success(), "prlimit {arg}");
}

/// The virtual host with one rule answering 200 "ok" by itself (no backend needed).
pub fn ok_rule() -> Resource {
    vhost(
        None,
        vec![rule(
            "/",
            Action::DirectResponse(Box::new(weir_model::DirectResponse {
                status: 200,
                headers: vec![],
                body: "ok".into(),
            })),
        )],
    )
}

// ---------------------------------------------------------------- a failing backend

/// An HTTP/1.1 + h2c backend that answers 200 with its name, or 503 while
/// [`Switchable::fail`] is set: an endpoint that fails and recovers on command.
pub struct Switchable {
    pub addr: SocketAddr,
    failing: Arc<std::sync::atomic::AtomicBool>,
    served: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for Switchable {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Switchable {
    pub async fn start(name: &'static str) -> Switchable {
        let tcp = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind backend");
        let addr = tcp.local_addr().expect("backend addr");
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let (f, s) = (Arc::clone(&failing), Arc::clone(&served));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = tcp.accept().await else {
                    continue;
                };
                let (f, s) = (Arc::clone(&f), Arc::clone(&s));
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        s.fetch_add(1, Ordering::SeqCst);
                        let fail = f.load(Ordering::SeqCst);
                        async move {
                            // The body is read whole and described (when there is one),
                            // so tests see what each attempt carried.
                            let received = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let (status, mut body) = if fail {
                                (503, "failing\n".to_string())
                            } else {
                                (200, format!("backend={name}\n"))
                            };
                            if !received.is_empty() {
                                body += &format!(
                                    "body-len={}\nbody-sum={}\n",
                                    received.len(),
                                    checksum(&received)
                                );
                            }
                            Ok::<_, Infallible>(
                                Response::builder()
                                    .status(status)
                                    .body(Full::new(Bytes::from(body)))
                                    .expect("response"),
                            )
                        }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Switchable {
            addr,
            failing,
            served,
            task,
        }
    }

    /// Makes the backend answer 503 (`true`) or 200 (`false`).
    pub fn fail(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// Requests answered so far (either way).
    pub fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }
}
