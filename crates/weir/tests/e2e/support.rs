//! Builders for end-to-end tests: a test PKI, echo backends, a gateway started from YAML
//! written to a temporary directory, and HTTP/1.1, h2c and TLS clients.

// Test helpers are `pub` for the test modules of this binary only.
#![allow(unreachable_pub)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls_pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir::standalone::{RunOptions, Standalone};

/// A throwaway certificate authority; every certificate of a test is signed by it.
pub struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    pub fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "weir test CA");
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Pki { ca }
    }

    /// A leaf certificate (PEM) and key (PEM) for these DNS names.
    pub fn leaf(&self, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// The CA's certificate (PEM), for configuration that names a CA to trust.
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// A client configuration trusting only this CA and presenting `cert` (PEM
    /// certificate and key) when the server asks for a client certificate.
    pub fn client_config_with_cert(
        &self,
        alpn: &[&[u8]],
        cert: (&str, &str),
    ) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let chain = vec![der_of(cert.0)];
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(cert.1.as_bytes()).unwrap();
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .unwrap();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(cfg)
    }

    /// A client configuration trusting only this CA.
    pub fn client_config(&self, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(cfg)
    }
}

/// A `kubernetes.io/tls` Secret manifest.
pub fn tls_secret(namespace: &str, name: &str, cert_pem: &str, key_pem: &str) -> String {
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {namespace}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        indent(cert_pem),
        indent(key_pem)
    )
}

/// A `weir.dev` Backend manifest with static endpoints.
pub fn backend(namespace: &str, name: &str, endpoints: &[SocketAddr]) -> String {
    let eps: String = endpoints
        .iter()
        .map(|e| format!("    - \"{e}\"\n"))
        .collect();
    format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Backend\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  endpoints:\n{eps}"
    )
}

/// A Gateway `gw` with one HTTP listener on 127.0.0.1:`port`.
pub fn http_gateway(port: u16) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{type: IPAddress, value: 127.0.0.1}}]
  listeners:
  - {{name: http, protocol: HTTP, port: {port}}}
"
    )
}

/// An HTTPRoute `name` of Gateway `gw` for `host`, one rule forwarding to the weir
/// Backend `backend`.
pub fn http_route(name: &str, host: &str, backend: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [{host}]
  rules:
  - backendRefs: [{{group: weir.dev, kind: Backend, name: {backend}}}]
"
    )
}

/// Starts an echo backend named `name` on 127.0.0.1 and returns its address.
pub async fn echo(name: &str) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(weir::echo::serve(l, name.into()));
    addr
}

/// Starts an HTTPS backend (HTTP/1.1 over TLS) on 127.0.0.1 presenting `cert` (PEM
/// certificate and key); every request is answered 200 with `sni=<the server name the
/// client sent, empty without one>`.
pub async fn https_backend(cert: (&str, &str)) -> SocketAddr {
    https_backend_on(LOCALHOST, cert, false).await
}

/// As [`https_backend`], speaking HTTP/2 (ALPN `h2`) as a gRPC server over TLS does.
pub async fn https_backend_h2(cert: (&str, &str)) -> SocketAddr {
    https_backend_on(LOCALHOST, cert, true).await
}

/// As [`https_backend`] (`h2`: [`https_backend_h2`]) on `ip`. Every answer also carries
/// the request's HTTP version in `x-request-version`.
pub async fn https_backend_on(ip: std::net::IpAddr, cert: (&str, &str), h2: bool) -> SocketAddr {
    tls_backend(ip, cert, h2, None).await
}

/// As [`https_backend`], refusing the handshake of a client without a certificate of
/// the CA `client_ca` (PEM).
pub async fn https_backend_mtls(cert: (&str, &str), client_ca: &str) -> SocketAddr {
    tls_backend(LOCALHOST, cert, false, Some(client_ca)).await
}

const LOCALHOST: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

async fn tls_backend(
    ip: std::net::IpAddr,
    cert: (&str, &str),
    h2: bool,
    client_ca: Option<&str>,
) -> SocketAddr {
    let chain = vec![der_of(cert.0)];
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(cert.1.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(der_of(ca)).unwrap();
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut cfg = builder.with_single_cert(chain, key).unwrap();
    if h2 {
        cfg.alpn_protocols = vec![b"h2".to_vec()];
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let sni = tls.get_ref().1.server_name().unwrap_or("").to_owned();
                let svc = hyper::service::service_fn(move |req: http::Request<_>| {
                    let body = format!("sni={sni}");
                    let version = format!("{:?}", req.version());
                    async move {
                        let mut resp =
                            http::Response::new(http_body_util::Full::new(Bytes::from(body)));
                        if let Ok(v) = http::HeaderValue::from_str(&version) {
                            resp.headers_mut().insert("x-request-version", v);
                        }
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                });
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                }
            });
        }
    });
    addr
}

/// A port that was free a moment ago on 127.0.0.1, for a listener weir binds later.
///
/// Taken below the kernel's ephemeral range (32768 and up by default) so that a socket
/// bound to port 0 meanwhile (an echo backend, a client connection of a test running in
/// parallel) can never be given the same port, and never the same port twice in this
/// process. Each process starts at its own offset, so test binaries do not collide.
/// The port is free for both TCP and UDP, so a UDP listener may take it too.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        (std::process::id() % 400) * 30,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = (FIRST + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
            && std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok()
        {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + SPAN);
}

/// A gateway started from manifests in a temporary directory.
pub struct Gateway {
    pub dir: tempfile::TempDir,
    pub gw: Standalone,
}

impl Gateway {
    /// Writes `files` (name → YAML) and starts weir on them, with the watcher on.
    pub async fn start(files: &[(&str, String)]) -> Gateway {
        Self::start_with(files, None, None).await
    }

    /// As `start`, with Ingress listener addresses.
    pub async fn start_with(
        files: &[(&str, String)],
        ingress_http: Option<SocketAddr>,
        ingress_https: Option<SocketAddr>,
    ) -> Gateway {
        Self::start_edited(files, |o| {
            o.ingress_http = ingress_http;
            o.ingress_https = ingress_https;
        })
        .await
    }

    /// As `start`, with the run options changed by `edit` (e.g. an access log).
    pub async fn start_edited(
        files: &[(&str, String)],
        edit: impl FnOnce(&mut RunOptions),
    ) -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        for (name, body) in files {
            write_atomic(&dir.path().join(name), body);
        }
        let mut opts = RunOptions {
            config: dir.path().to_path_buf(),
            admin: "127.0.0.1:0".parse().unwrap(),
            ingress_http: None,
            ingress_https: None,
            ingress_class: "weir".into(),
            more_ingress_classes: Vec::new(),
            access_log: None,
            traces: None,
            watch: true,
            redis: None,
            on_loaded: None,
        };
        edit(&mut opts);
        let gw = Standalone::start(opts).await.unwrap();
        Gateway { dir, gw }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Replaces a file the way editors and Kubernetes do: write a temporary file, rename.
    pub fn write(&self, name: &str, body: &str) {
        write_atomic(&self.path(name), body);
    }

    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.path(name)).unwrap();
    }

    pub async fn admin_get(&self, path: &str) -> Resp {
        http1(self.gw.admin_addr, "localhost", path).await.unwrap()
    }
}

pub fn write_atomic(path: &Path, body: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, body).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A response with its body read whole (test responses are small).
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
    pub version: http::Version,
}

impl Resp {
    /// The body as JSON (echo backend responses).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The echo backend's name, if an echo backend answered.
    pub fn echo_name(&self) -> Option<&str> {
        self.headers
            .get("x-echo-name")
            .and_then(|v| v.to_str().ok())
    }

    /// The value of response header `name`, or "".
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

async fn read(resp: http::Response<hyper::body::Incoming>) -> Result<Resp, hyper::Error> {
    let (parts, body) = resp.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Resp {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        version: parts.version,
    })
}

/// The request `req` (no body) over HTTP/1.1 on a new connection; panics on failure.
pub async fn send(addr: SocketAddr, req: http::request::Builder) -> Resp {
    send_http1(addr, req.body(Empty::new()).unwrap())
        .await
        .unwrap()
}

/// The ingress-nginx `cors-*` annotations' answers, as both tiers configure them on host
/// `cors.{domain}` (allowed origins `https://one.{domain}` and `https://two.{domain}`,
/// methods GET and PUT, header `X-Custom-Header`, credentials, max age 600, exposed
/// `X-Trace`): a preflight from a listed origin answered by weir with those, one from
/// another origin without them, and an actual request relayed to echo backend `echo`
/// with the origin and the exposed headers. Returns the actual request's response.
pub async fn check_ingress_nginx_cors(addr: SocketAddr, domain: &str, echo: &str) -> Resp {
    let host = format!("cors.{domain}");
    let preflight = |origin: &str| {
        Request::options("/api")
            .header("host", host.as_str())
            .header("origin", origin)
            .header("access-control-request-method", "PUT")
            .header("access-control-request-headers", "x-custom-header")
    };
    let two = format!("https://two.{domain}");
    let r = send(addr, preflight(&two)).await;
    assert_eq!(r.status, 204, "{r:?}");
    assert!(r.echo_name().is_none(), "the preflight is answered by weir");
    assert_eq!(r.header("access-control-allow-origin"), two);
    let methods = r.header("access-control-allow-methods");
    assert!(
        methods.contains("PUT") && methods.contains("GET") && !methods.contains("DELETE"),
        "{methods:?}"
    );
    assert!(
        r.header("access-control-allow-headers")
            .to_ascii_lowercase()
            .contains("x-custom-header"),
        "{r:?}"
    );
    assert_eq!(r.header("access-control-allow-credentials"), "true");
    assert_eq!(r.header("access-control-max-age"), "600");
    let r = send(addr, preflight(&format!("https://three.{domain}"))).await;
    assert!(
        r.headers.get("access-control-allow-origin").is_none() && r.echo_name().is_none(),
        "an origin not listed is not allowed: {r:?}"
    );
    let one = format!("https://one.{domain}");
    let r = send(addr, get(&host, "/api").header("origin", one.as_str())).await;
    assert_eq!(r.echo_name(), Some(echo));
    assert_eq!(r.header("access-control-allow-origin"), one);
    assert!(
        r.header("access-control-expose-headers")
            .to_ascii_lowercase()
            .contains("x-trace"),
        "{r:?}"
    );
    r
}

/// An HTTP/1.1 request builder for `path` with `Host: host`.
pub fn get(host: &str, path: &str) -> http::request::Builder {
    Request::get(path).header("host", host)
}

/// One request on a new HTTP/1.1 connection.
pub async fn http1(addr: SocketAddr, host: &str, path: &str) -> Result<Resp, BoxError> {
    send_http1(addr, get(host, path).body(Empty::new())?).await
}

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Sends `req` on a new HTTP/1.1 connection.
pub async fn send_http1(addr: SocketAddr, req: Request<Empty<Bytes>>) -> Result<Resp, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(read(tx.send_request(req).await?).await?)
}

/// One HTTP/1.1 request on a new connection whose first bytes are `prefix` (a PROXY
/// protocol header, as a load balancer sends it).
pub async fn send_http1_after(
    addr: SocketAddr,
    prefix: &[u8],
    req: Request<Empty<Bytes>>,
) -> Result<Resp, BoxError> {
    use tokio::io::AsyncWriteExt;
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(prefix).await?;
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(read(tx.send_request(req).await?).await?)
}

/// One request over h2c (HTTP/2 with prior knowledge) on a new connection.
pub async fn h2c(addr: SocketAddr, host: &str, path: &str) -> Result<Resp, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    let (mut tx, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = Request::get(format!("http://{host}{path}")).body(Empty::<Bytes>::new())?;
    Ok(read(tx.send_request(req).await?).await?)
}

/// What a TLS request saw: the response and the certificate the server presented.
pub struct TlsResp {
    pub resp: Resp,
    pub alpn: Option<Vec<u8>>,
    pub peer_cert: CertificateDer<'static>,
}

/// One request over TLS with SNI `sni` (HTTP/2 if ALPN picks it, else HTTP/1.1).
pub async fn https(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    sni: &str,
    path: &str,
) -> Result<TlsResp, BoxError> {
    https_after(addr, b"", config, sni, path).await
}

/// As [`https`], on a connection whose first bytes are `prefix` (a PROXY protocol
/// header, sent before the ClientHello as a load balancer does).
pub async fn https_after(
    addr: SocketAddr,
    prefix: &[u8],
    config: Arc<rustls::ClientConfig>,
    sni: &str,
    path: &str,
) -> Result<TlsResp, BoxError> {
    use tokio::io::AsyncWriteExt;
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(prefix).await?;
    let connector = tokio_rustls::TlsConnector::from(config);
    let tls = connector
        .connect(ServerName::try_from(sni.to_string())?, stream)
        .await?;
    let (_, session) = tls.get_ref();
    let alpn = session.alpn_protocol().map(|p| p.to_vec());
    let peer_cert = session
        .peer_certificates()
        .and_then(|c| c.first())
        .cloned()
        .ok_or("no peer certificate")?;
    let resp = if alpn.as_deref() == Some(b"h2") {
        let (mut tx, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        let req = Request::get(format!("https://{sni}{path}")).body(Empty::<Bytes>::new())?;
        read(tx.send_request(req).await?).await?
    } else {
        let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        read(
            tx.send_request(get(sni, path).body(Empty::<Bytes>::new())?)
                .await?,
        )
        .await?
    };
    Ok(TlsResp {
        resp,
        alpn,
        peer_cert,
    })
}

/// One HTTP/1.1 request `req` over TLS with SNI `sni` (`config` should offer no ALPN
/// protocol other than `http/1.1`).
pub async fn https_send(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    sni: &str,
    req: Request<Empty<Bytes>>,
) -> Result<Resp, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    let connector = tokio_rustls::TlsConnector::from(config);
    let tls = connector
        .connect(ServerName::try_from(sni.to_string())?, stream)
        .await?;
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(conn);
    Ok(read(tx.send_request(req).await?).await?)
}

/// Parses a PEM certificate (for comparisons).
pub fn der_of(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

/// Polls `f` every 2 ms until it returns true, for at most `limit`. Returns whether it did.
pub async fn eventually<F, Fut>(limit: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    false
}

/// A keep-alive HTTP/1.1 client on one connection (re-dials if the server closes it, and
/// counts that as a failure).
pub struct KeepAlive {
    addr: SocketAddr,
    tx: Option<hyper::client::conn::http1::SendRequest<Empty<Bytes>>>,
    pub reconnects: usize,
}

impl KeepAlive {
    pub fn new(addr: SocketAddr) -> Self {
        KeepAlive {
            addr,
            tx: None,
            reconnects: 0,
        }
    }

    pub async fn get(&mut self, host: &str, path: &str) -> Result<Resp, BoxError> {
        if self.tx.as_ref().is_none_or(|t| t.is_closed()) {
            if self.tx.is_some() {
                self.reconnects += 1;
            }
            let stream = TcpStream::connect(self.addr).await?;
            let (tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            self.tx = Some(tx);
        }
        let tx = self.tx.as_mut().ok_or("no connection")?;
        tx.ready().await?;
        Ok(read(tx.send_request(get(host, path).body(Empty::new())?).await?).await?)
    }
}

/// Reads an HTTP/1.1 request head (to the blank line), lower-cased; bounded.
pub async fn read_head(s: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 16 * 1024 || s.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    Some(String::from_utf8_lossy(&head).to_ascii_lowercase())
}

/// A backend on `ip` that answers `/hold` only once the returned sender says `true`
/// (counting in the returned counter the requests it holds) and anything else at once,
/// 200 `ok` each.
pub async fn holding_backend(
    ip: std::net::IpAddr,
) -> (
    SocketAddr,
    tokio::sync::watch::Sender<bool>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    let (release, rx) = tokio::sync::watch::channel(false);
    let waiting = Arc::new(AtomicUsize::new(0));
    let counted = waiting.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let (mut rx, waiting) = (rx.clone(), counted.clone());
            tokio::spawn(async move {
                while let Some(head) = read_head(&mut s).await {
                    if head.starts_with("get /hold ") {
                        waiting.fetch_add(1, Ordering::SeqCst);
                        let _ = rx.wait_for(|open| *open).await;
                        waiting.fetch_sub(1, Ordering::SeqCst);
                    }
                    let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if s.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, release, waiting)
}

/// `Sec-WebSocket-Accept` for `key` (RFC 6455 section 4.2.2).
pub fn websocket_accept(key: &str) -> String {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(key.as_bytes());
    ctx.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(ctx.finish().as_ref())
}

/// A WebSocket server on `ip`: answers an upgrade request 101 with the accept key, then
/// answers each masked text frame (payload under 126 bytes) with an unmasked text frame
/// of the payload upper-cased. A request that is not a WebSocket upgrade gets 400.
pub async fn websocket_backend(ip: std::net::IpAddr) -> SocketAddr {
    let l = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let Some(head) = read_head(&mut s).await else {
                    return;
                };
                let key = head
                    .lines()
                    .find_map(|l| l.strip_prefix("sec-websocket-key:"))
                    .map(str::trim);
                let (true, Some(key)) = (head.contains("upgrade: websocket"), key) else {
                    let _ = s
                        .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                        .await;
                    return;
                };
                // The key was lower-cased with the head; base64 is case-sensitive, so the
                // client sends an all-lower-case key.
                let answer = format!(
                    "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: {}\r\n\r\n",
                    websocket_accept(key)
                );
                if s.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
                loop {
                    let mut h = [0u8; 6];
                    if s.read_exact(&mut h).await.is_err() {
                        return;
                    }
                    let len = usize::from(h[1] & 0x7f);
                    let mut payload = vec![0u8; len];
                    if len >= 126 || s.read_exact(&mut payload).await.is_err() {
                        return;
                    }
                    for (i, b) in payload.iter_mut().enumerate() {
                        *b ^= h[2 + i % 4];
                    }
                    let mut frame = vec![0x81, len as u8];
                    frame.extend(payload.to_ascii_uppercase());
                    if s.write_all(&frame).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// The `Sec-WebSocket-Key` of [`websocket_exchange`], all lower case (the test server
/// reads request heads lower-cased).
pub const WEBSOCKET_KEY: &str = "dghlihnhbxbszsbub25jzq==";

/// A WebSocket exchange with `host` through `addr`: the upgrade answer's head, then the
/// server's answer to one masked text frame `hello` (or the error).
pub async fn websocket_exchange(addr: SocketAddr, host: &str) -> Result<(String, Vec<u8>), String> {
    let run = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let req = format!(
            "GET /chat HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {WEBSOCKET_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let head = read_head(&mut s).await.ok_or("no answer")?;
        if !head.starts_with("http/1.1 101") {
            return Err(head);
        }
        let mask = [0x12, 0x34, 0x56, 0x78];
        let mut frame = vec![0x81, 0x80 | 5];
        frame.extend(mask);
        frame.extend(b"hello".iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        s.write_all(&frame).await.map_err(|e| e.to_string())?;
        let mut answer = [0u8; 7];
        s.read_exact(&mut answer).await.map_err(|e| e.to_string())?;
        Ok((head, answer.to_vec()))
    };
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .map_err(|_| "timed out".to_string())?
}
