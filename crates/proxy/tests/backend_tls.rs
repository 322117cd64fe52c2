//! Upstream TLS (BackendTLSPolicy) against real TLS backends on 127.0.0.1: the SNI is the
//! policy's hostname, the certificate is verified against the policy's CA and names (the
//! hostname, or DNS / URI subject alternative names), and every failed verification is an
//! error answer, never a plaintext or unverified request.

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType, string::Ia5String,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use support::*;
use tokio::net::TcpListener;
use weir_model::{
    BackendKind, BackendTls, HealthCheck, HealthProbe, Policy, PolicyTarget, Protocol, Resource,
    SubjectName, Timeouts, TrustAnchors, UpstreamProtocol, UpstreamTls,
};

const APP: &str = "service/default/app:443";

struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "backend test CA");
        Pki {
            ca: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    fn ca_pem(&self) -> Arc<[u8]> {
        Arc::from(self.ca.pem().into_bytes())
    }

    /// A leaf for DNS `names` and `uris`: (chain DER, key DER).
    fn leaf(
        &self,
        names: &[&str],
        uris: &[&str],
    ) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        for u in uris {
            params
                .subject_alt_names
                .push(SanType::URI(Ia5String::try_from(*u).unwrap()));
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let key = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap();
        (cert.der().clone(), key)
    }
}

/// An HTTPS backend (HTTP/1.1 over TLS) answering every request with
/// `sni=<the server name the client sent>`.
async fn https_backend(cert: CertificateDer<'static>, key: PrivateKeyDer<'static>) -> SocketAddr {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    serve_http1_tls(cfg, |conn| {
        format!("sni={}", conn.server_name().unwrap_or(""))
    })
    .await
}

/// Serves HTTP/1.1 over TLS with `cfg` on 127.0.0.1, answering every request of a
/// connection with `body(the connection's TLS state)`.
async fn serve_http1_tls(
    cfg: rustls::ServerConfig,
    body: fn(&rustls::ServerConnection) -> String,
) -> SocketAddr {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let text = body(tls.get_ref().1);
                let svc = hyper::service::service_fn(move |_req: Request<Incoming>| {
                    let text = text.clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                            text,
                        ))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    addr
}

fn tls_policy(tls: Option<UpstreamTls>) -> Resource {
    let target = PolicyTarget::Backend {
        kind: BackendKind::Service,
        namespace: "default".into(),
        name: "app".into(),
    };
    let tls = tls.map(|t| {
        Arc::new(BackendTls {
            all_ports: Some(Arc::new(t)),
            ports: Vec::new(),
        })
    });
    Resource::Policy(Arc::new(
        Policy::new(target, Timeouts::default(), None, None).with_backend_tls(tls),
    ))
}

fn upstream(sni: &str, trust: TrustAnchors, names: Vec<SubjectName>) -> UpstreamTls {
    UpstreamTls {
        sni: sni.into(),
        hide_sni: false,
        client_certificate: None,
        trust,
        subject_names: names,
        policy: "default/tls".into(),
    }
}

async fn proxy(backend: SocketAddr, tls: Option<UpstreamTls>) -> Proxy {
    let mut resources = vec![
        listener(Protocol::Http),
        vhost(Some("app.test"), vec![rule("/", forward(&[(APP, 1)]))]),
        cluster(APP, &[backend], UpstreamProtocol::Http1),
    ];
    if tls.is_some() {
        resources.push(tls_policy(tls));
    }
    Proxy::start(resources).await
}

async fn status_and_body(p: &Proxy) -> (u16, String) {
    let mut c = Conn::h1(p.addr).await;
    let r = c.get("app.test", "/").await;
    (r.status, r.body)
}

#[tokio::test]
async fn the_sni_is_the_policy_hostname_and_the_certificate_is_verified() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf(&["abc.example.com"], &[]);
    let b = https_backend(cert, key).await;
    let p = proxy(
        b,
        Some(upstream(
            "abc.example.com",
            TrustAnchors::Pem(pki.ca_pem()),
            vec![],
        )),
    )
    .await;
    let (status, body) = status_and_body(&p).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "sni=abc.example.com");
    // Keep-alive: the second request reuses the TLS connection.
    let mut c = Conn::h1(p.addr).await;
    for _ in 0..3 {
        assert_eq!(c.get("app.test", "/").await.status, 200);
    }
}

#[tokio::test]
async fn a_hostname_the_certificate_does_not_carry_fails() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf(&["abc.example.com"], &[]);
    let b = https_backend(cert, key).await;
    let p = proxy(
        b,
        Some(upstream(
            "other.example.com",
            TrustAnchors::Pem(pki.ca_pem()),
            vec![],
        )),
    )
    .await;
    let (status, body) = status_and_body(&p).await;
    assert!(status >= 500, "{status} {body}");
    assert!(
        p.metric("weir_upstream_connect_errors_total") >= 1,
        "{}",
        p.metrics()
    );
}

#[tokio::test]
async fn another_ca_and_no_ca_fail() {
    let pki = Pki::new();
    let other = Pki::new();
    let (cert, key) = pki.leaf(&["abc.example.com"], &[]);
    let b = https_backend(cert, key).await;
    let p = proxy(
        b,
        Some(upstream(
            "abc.example.com",
            TrustAnchors::Pem(other.ca_pem()),
            vec![],
        )),
    )
    .await;
    let (status, body) = status_and_body(&p).await;
    assert!(status >= 500, "another CA: {status} {body}");
    let p = proxy(
        b,
        Some(upstream("abc.example.com", TrustAnchors::Nothing, vec![])),
    )
    .await;
    let (status, body) = status_and_body(&p).await;
    assert!(status >= 500, "no CA: {status} {body}");
}

#[tokio::test]
async fn subject_alt_names_replace_the_hostname_check() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf(
        &["svc.internal"],
        &["spiffe://cluster.local/ns/default/sa/app"],
    );
    let b = https_backend(cert, key).await;
    let ca = || TrustAnchors::Pem(pki.ca_pem());
    // The SNI is not in the certificate, but a listed DNS name is.
    let p = proxy(
        b,
        Some(upstream(
            "abc.example.com",
            ca(),
            vec![SubjectName::Dns("svc.internal".into())],
        )),
    )
    .await;
    let (status, body) = status_and_body(&p).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "sni=abc.example.com");
    // A URI SAN, compared exactly.
    let uri = |u: &str| SubjectName::Uri(u.into());
    let p = proxy(
        b,
        Some(upstream(
            "abc.example.com",
            ca(),
            vec![uri("spiffe://cluster.local/ns/default/sa/app")],
        )),
    )
    .await;
    assert_eq!(status_and_body(&p).await.0, 200);
    // Names the certificate does not carry: refused, even though the chain is good.
    let p = proxy(
        b,
        Some(upstream(
            "abc.example.com",
            ca(),
            vec![
                SubjectName::Dns("abc.example.com".into()),
                uri("spiffe://cluster.local/ns/default/sa/other"),
            ],
        )),
    )
    .await;
    assert!(status_and_body(&p).await.0 >= 500);
}

#[tokio::test]
async fn without_a_policy_the_tls_port_is_spoken_to_in_plaintext_and_fails() {
    // The control case: the same backend, no policy. The backend refuses the plaintext
    // request, so the tests above pass only because of the policy.
    let pki = Pki::new();
    let (cert, key) = pki.leaf(&["abc.example.com"], &[]);
    let b = https_backend(cert, key).await;
    let p = proxy(b, None).await;
    let (status, _) = status_and_body(&p).await;
    assert!(status >= 500, "{status}");
}

// ---------------------------------------------------------------- HTTP/2, gRPC, mirrors,
// health probes over TLS

/// What a [`TlsBackend`] saw.
#[derive(Default)]
struct Seen {
    /// Requests other than health probes, as `version scheme sni path`.
    requests: std::sync::Mutex<Vec<String>>,
    /// Health probes answered (HTTP `/healthz` and gRPC `Health/Check`).
    probes: AtomicUsize,
    /// Connections whose first byte was not a TLS handshake record: plaintext.
    plaintext: AtomicUsize,
}

impl Seen {
    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// A TLS backend offering `alpn` (HTTP/1.1 or HTTP/2 by what was negotiated), answering
/// `/healthz` 200, gRPC health checks SERVING, gRPC `echo.Echo` calls with trailers, and
/// anything else with `version=..;scheme=..;sni=..`.
struct TlsBackend {
    addr: SocketAddr,
    seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsBackend {
    async fn start(
        cert: CertificateDer<'static>,
        key: PrivateKeyDer<'static>,
        alpn: &[&[u8]],
    ) -> TlsBackend {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let s = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = l.accept().await {
                let (acceptor, seen) = (acceptor.clone(), Arc::clone(&s));
                tokio::spawn(async move {
                    let mut first = [0u8; 1];
                    if !matches!(tcp.peek(&mut first).await, Ok(1) if first[0] == 0x16) {
                        seen.plaintext.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let sni = tls.get_ref().1.server_name().unwrap_or("").to_owned();
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (sni, seen) = (sni.clone(), Arc::clone(&seen));
                        async move { Ok::<_, Infallible>(tls_answer(req, &sni, &seen).await) }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        TlsBackend { addr, seen, task }
    }
}

/// One gRPC message frame (uncompressed).
fn grpc_frame(msg: &[u8]) -> Bytes {
    let mut f = BytesMut::new();
    f.put_u8(0);
    f.put_u32(msg.len() as u32);
    f.put_slice(msg);
    f.freeze()
}

/// A gRPC response: `msg` then trailers `grpc-status: 0` and `grpc-message`.
fn grpc_response(msg: &[u8], message: &'static str) -> Response<BoxBody<Bytes, Infallible>> {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    trailers.insert("grpc-message", http::HeaderValue::from_static(message));
    let body = http_body_util::StreamBody::new(futures_util::stream::iter([
        Ok::<_, Infallible>(hyper::body::Frame::data(grpc_frame(msg))),
        Ok(hyper::body::Frame::trailers(trailers)),
    ]));
    Response::builder()
        .header("content-type", "application/grpc")
        .body(body.boxed())
        .unwrap()
}

async fn tls_answer(
    req: Request<Incoming>,
    sni: &str,
    seen: &Seen,
) -> Response<BoxBody<Bytes, Infallible>> {
    match req.uri().path() {
        "/healthz" => {
            seen.probes.fetch_add(1, Ordering::SeqCst);
            Response::new(Full::new(Bytes::new()).boxed())
        }
        "/grpc.health.v1.Health/Check" => {
            seen.probes.fetch_add(1, Ordering::SeqCst);
            // HealthCheckResponse { status: SERVING }.
            grpc_response(&[0x08, 0x01], "serving")
        }
        path => {
            let line = format!(
                "version={:?};scheme={};sni={sni};path={path}",
                req.version(),
                req.uri().scheme_str().unwrap_or("-"),
            );
            seen.requests.lock().unwrap().push(line.clone());
            if path.starts_with("/echo.Echo/") {
                let got = req.into_body().collect().await.unwrap().to_bytes();
                assert_eq!(&got[..], &grpc_frame(b"ping")[..], "the call's message");
                return grpc_response(b"pong", "from-tls-backend");
            }
            Response::new(Full::new(Bytes::from(line)).boxed())
        }
    }
}

const H2: &[&[u8]] = &[b"h2"];
const HTTP11: &[&[u8]] = &[b"http/1.1"];

/// A proxy whose route `/` goes to the `protocol` cluster [`APP`] at `backends`, with the
/// Service's policy carrying `tls` and `health`.
async fn proxy_to(
    backends: &[SocketAddr],
    protocol: UpstreamProtocol,
    tls: UpstreamTls,
    health: Option<HealthProbe>,
) -> Proxy {
    Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("app.test"), vec![rule("/", forward(&[(APP, 1)]))]),
        cluster(APP, backends, protocol),
        service_policy(Some(tls), health),
    ])
    .await
}

/// The policy of Service `default/app`: upstream TLS on every port, and a health check
/// probing every 100 ms.
fn service_policy(tls: Option<UpstreamTls>, health: Option<HealthProbe>) -> Resource {
    let Resource::Policy(p) = tls_policy(tls) else {
        unreachable!()
    };
    let check = health.map(|probe| {
        Arc::new(HealthCheck {
            probe,
            interval: Duration::from_millis(100),
            // Longer than the interval: a stalled test runtime is not a failed probe
            // (failing probes fail fast: refused, bad certificate).
            timeout: Duration::from_secs(2),
            jitter: Duration::ZERO,
            healthy_threshold: 1,
            unhealthy_threshold: 2,
        })
    });
    Resource::Policy(Arc::new((*p).clone().with_health_check(check)))
}

fn abc(pki: &Pki) -> UpstreamTls {
    upstream("abc.example.com", TrustAnchors::Pem(pki.ca_pem()), vec![])
}

#[tokio::test]
async fn an_http2_cluster_speaks_http2_over_tls_with_the_policy_sni() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf(&["abc.example.com"], &[]);
    let b = TlsBackend::start(cert, key, H2).await;
    let p = proxy_to(&[b.addr], UpstreamProtocol::H2c, abc(&pki), None).await;
    let mut c = Conn::h1(p.addr).await;
    for i in 0..3 {
        let r = c.get("app.test", &format!("/x{i}")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.body,
            format!("version=HTTP/2.0;scheme=https;sni=abc.example.com;path=/x{i}")
        );
    }
    assert_eq!(b.seen.plaintext.load(Ordering::SeqCst), 0);
    // Multiplexed: the three requests shared one upstream connection.
    assert_eq!(p.metric("weir_upstream_connections"), 1, "{}", p.metrics());
}

#[tokio::test]
async fn a_grpc_call_over_tls_gets_the_backend_trailers() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf(&["abc.example.com"], &[]);
    let b = TlsBackend::start(cert, key, H2).await;
    let p = proxy_to(&[b.addr], UpstreamProtocol::H2c, abc(&pki), None).await;
    let tcp = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = Request::post("http://app.test/echo.Echo/Say")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(grpc_frame(b"ping")))
        .unwrap();
    let resp = tokio::time::timeout(STEP, send.send_request(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/grpc");
    let body = tokio::time::timeout(STEP, resp.into_body().collect())
        .await
        .unwrap()
        .unwrap();
    let trailers = body.trailers().cloned().expect("trailers");
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(trailers["grpc-message"], "from-tls-backend");
    assert_eq!(&body.to_bytes()[..], &grpc_frame(b"pong")[..]);
    assert_eq!(
        b.seen.requests(),
        ["version=HTTP/2.0;scheme=https;sni=abc.example.com;path=/echo.Echo/Say"]
    );
}

#[tokio::test]
async fn an_http2_cluster_refuses_a_backend_that_does_not_select_h2() {
    let pki = Pki::new();
    for alpn in [HTTP11, &[]] {
        let (cert, key) = pki.leaf(&["abc.example.com"], &[]);
        let b = TlsBackend::start(cert, key, alpn).await;
        let p = proxy_to(&[b.addr], UpstreamProtocol::H2c, abc(&pki), None).await;
        let r = Conn::h1(p.addr).await.get("app.test", "/").await;
        assert!(
            r.status == 502 || r.status == 503,
            "ALPN {alpn:?}: {} {}",
            r.status,
            r.body
        );
        assert!(b.seen.requests().is_empty(), "ALPN {alpn:?}");
        assert_eq!(b.seen.plaintext.load(Ordering::SeqCst), 0, "ALPN {alpn:?}");
        assert!(
            p.metric("weir_upstream_connect_errors_total") >= 1,
            "ALPN {alpn:?}: {}",
            p.metrics()
        );
    }
}

#[tokio::test]
async fn an_http2_cluster_refuses_a_certificate_of_another_ca() {
    let (pki, other) = (Pki::new(), Pki::new());
    let (cert, key) = pki.leaf(&["abc.example.com"], &[]);
    let b = TlsBackend::start(cert, key, H2).await;
    let p = proxy_to(&[b.addr], UpstreamProtocol::H2c, abc(&other), None).await;
    let r = Conn::h1(p.addr).await.get("app.test", "/").await;
    assert!(r.status >= 500, "{} {}", r.status, r.body);
    assert!(b.seen.requests().is_empty());
    assert!(p.metric("weir_upstream_connect_errors_total") >= 1);
}

#[tokio::test]
async fn mirrors_to_tls_clusters_use_their_tls() {
    use weir_model::{ClusterKey, Filter, PathMatch, RequestMatch, RouteKind, RouteRef, RouteRule};
    let pki = Pki::new();
    let main = Backend::start("main").await;
    let (cert, key) = pki.leaf(&["abc.example.com"], &[]);
    let h1 = TlsBackend::start(cert.clone(), key.clone_key(), HTTP11).await;
    let h2 = TlsBackend::start(cert, key, H2).await;
    let mirror = |c: &str| Filter::Mirror {
        cluster: ClusterKey(c.into()),
        per_million: 1_000_000,
    };
    let rule = Arc::new(RouteRule::new(
        RouteRef {
            kind: RouteKind::HttpRoute,
            namespace: "default".into(),
            name: "r".into(),
            rule: 0,
        },
        RequestMatch {
            path: PathMatch::Prefix("/".into()),
            headers: vec![],
            query: vec![],
            method: None,
        },
        vec![
            mirror("service/default/app:443"),
            mirror("service/default/app:8443"),
        ],
        forward(&[("main", 1)]),
        Timeouts::default(),
    ));
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("app.test"), vec![rule]),
        cluster("main", &[main.addr], UpstreamProtocol::Http1),
        cluster(
            "service/default/app:443",
            &[h1.addr],
            UpstreamProtocol::Http1,
        ),
        cluster(
            "service/default/app:8443",
            &[h2.addr],
            UpstreamProtocol::H2c,
        ),
        service_policy(Some(abc(&pki)), None),
    ])
    .await;
    let r = Conn::h1(p.addr).await.get("app.test", "/copied").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.backend(), "main");
    // The copies go in the background: a bounded wait for both.
    for _ in 0..200 {
        if !h1.seen.requests().is_empty() && !h2.seen.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        h1.seen.requests(),
        ["version=HTTP/1.1;scheme=-;sni=abc.example.com;path=/copied"]
    );
    assert_eq!(
        h2.seen.requests(),
        ["version=HTTP/2.0;scheme=https;sni=abc.example.com;path=/copied"]
    );
    assert_eq!(h1.seen.plaintext.load(Ordering::SeqCst), 0);
    assert_eq!(h2.seen.plaintext.load(Ordering::SeqCst), 0);
}

/// Polls `cond` every 20 ms for up to 10 s.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting: {what}");
}

/// Two endpoints of a TLS cluster, one with a certificate of another CA: the probes
/// (over TLS) pass on the first and fail on the second, which then gets no traffic.
async fn probes_over_tls(protocol: UpstreamProtocol, probe: HealthProbe, alpn: &[&[u8]]) {
    let (pki, other) = (Pki::new(), Pki::new());
    let (cert, key) = pki.leaf(&["abc.example.com"], &[]);
    let good = TlsBackend::start(cert, key, alpn).await;
    let (cert, key) = other.leaf(&["abc.example.com"], &[]);
    let stranger = TlsBackend::start(cert, key, alpn).await;
    let p = proxy_to(
        &[good.addr, stranger.addr],
        protocol,
        abc(&pki),
        Some(probe),
    )
    .await;
    eventually("the stranger taken out", || {
        p.metric("weir_upstream_unhealthy_endpoints") == 1
    })
    .await;
    eventually("a passed probe", || {
        p.metric("weir_upstream_health_checks_total{result=\"passed\"}") >= 2
    })
    .await;
    assert!(good.seen.probes.load(Ordering::SeqCst) >= 2);
    assert_eq!(stranger.seen.probes.load(Ordering::SeqCst), 0);
    assert_eq!(good.seen.plaintext.load(Ordering::SeqCst), 0);
    assert_eq!(stranger.seen.plaintext.load(Ordering::SeqCst), 0);
    // Without the health check, about half of these would go to the stranger and fail.
    let mut c = Conn::h1(p.addr).await;
    for _ in 0..20 {
        let r = c.get("app.test", "/").await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(good.seen.requests().len(), 20);
    assert_eq!(p.metric("weir_upstream_unhealthy_endpoints"), 1);
}

#[tokio::test]
async fn http_probes_go_over_tls() {
    let probe = HealthProbe::Http {
        path: "/healthz".into(),
        host: None,
        statuses: vec![(200, 299)],
    };
    probes_over_tls(UpstreamProtocol::Http1, probe, HTTP11).await;
}

#[tokio::test]
async fn grpc_probes_go_over_tls() {
    let probe = HealthProbe::Grpc { service: "".into() };
    probes_over_tls(UpstreamProtocol::H2c, probe, H2).await;
}

// ------------------------------------------- a Gateway's backend client certificate

/// An HTTPS backend that requires a client certificate issued by `client_ca` and answers
/// `client=<base64 of the certificate the client presented>`.
async fn mtls_backend(
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
    client_ca: &Pki,
) -> SocketAddr {
    use base64::Engine as _;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(client_ca.ca.der().clone()).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert], key)
        .unwrap();
    serve_http1_tls(cfg, |conn| {
        let presented = conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| base64::engine::general_purpose::STANDARD.encode(c.as_ref()))
            .unwrap_or_default();
        format!("client={presented}")
    })
    .await
}

/// A client certificate issued by `ca`, as a Gateway's Secret holds it (PEM), and the
/// body [`mtls_backend`] answers when it is presented.
fn client_cert(ca: &Pki, name: &str) -> (weir_model::Certificate, String) {
    use base64::Engine as _;
    let params = CertificateParams::new(vec![name.to_string()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.ca).unwrap();
    let expected = format!(
        "client={}",
        base64::engine::general_purpose::STANDARD.encode(cert.der().as_ref())
    );
    let c = weir_model::Certificate::new(
        Arc::from(cert.pem().into_bytes()),
        Arc::from(key.serialize_pem().into_bytes()),
    );
    (c, expected)
}

/// The Policy resource of Gateway `gateway` presenting `cert` to backends.
fn gateway_cert(gateway: &str, cert: weir_model::Certificate) -> Resource {
    Resource::Policy(Arc::new(
        Policy::new(
            PolicyTarget::Gateway(gateway.into()),
            Timeouts::default(),
            None,
            None,
        )
        .with_client_certificate(Some(Arc::new(cert))),
    ))
}

/// The second Gateway's listener (another address of 127.0.0.0/8, so another socket).
fn second_key() -> weir_model::ListenerKey {
    weir_model::ListenerKey::new("127.0.0.2:0".parse().unwrap())
}

#[tokio::test]
async fn each_gateway_presents_its_own_client_certificate() {
    let server_pki = Pki::new();
    let client_pki = Pki::new();
    let (cert, key) = server_pki.leaf(&["abc.example.com"], &[]);
    let b = mtls_backend(cert, key, &client_pki).await;
    let (cert_a, body_a) = client_cert(&client_pki, "gateway-a");
    let (cert_b, body_b) = client_cert(&client_pki, "gateway-b");
    let app = || vec![rule("/", forward(&[(APP, 1)]))];
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("app.test"), app()),
        Resource::Listener(Arc::new(weir_model::Listener::new(
            second_key(),
            Protocol::Http,
            "test/gw2".into(),
            "web".into(),
        ))),
        Resource::VirtualHost(Arc::new(weir_model::VirtualHost::new(
            second_key(),
            host(Some("app.test")),
            app(),
        ))),
        cluster(APP, &[b], UpstreamProtocol::Http1),
        tls_policy(Some(upstream(
            "abc.example.com",
            TrustAnchors::Pem(server_pki.ca_pem()),
            vec![],
        ))),
        gateway_cert("test/gw", cert_a),
        gateway_cert("test/gw2", cert_b),
    ])
    .await;
    let second =
        p.dp.bound_addr(&second_key())
            .expect("second listener bound");
    let mut a = Conn::h1(p.addr).await;
    let mut b = Conn::h1(second).await;
    // Alternating, each over a kept-alive client connection: the backend connections
    // each Gateway's requests leave idle are reused only by that Gateway's requests.
    for _ in 0..3 {
        let r = a.get("app.test", "/").await;
        assert_eq!((r.status, &r.body), (200, &body_a));
        let r = b.get("app.test", "/").await;
        assert_eq!((r.status, &r.body), (200, &body_b));
    }
}

#[tokio::test]
async fn without_the_gateway_certificate_the_backend_refuses() {
    let server_pki = Pki::new();
    let client_pki = Pki::new();
    let (cert, key) = server_pki.leaf(&["abc.example.com"], &[]);
    let b = mtls_backend(cert, key, &client_pki).await;
    let upstream_tls = || {
        Some(upstream(
            "abc.example.com",
            TrustAnchors::Pem(server_pki.ca_pem()),
            vec![],
        ))
    };
    // No Gateway setting: no certificate is presented and the backend refuses.
    let p = proxy(b, upstream_tls()).await;
    let (status, body) = status_and_body(&p).await;
    assert!(status >= 500, "{status} {body}");
    // A certificate of another CA than the backend's: refused too.
    let other_ca = Pki::new();
    let (stranger, _) = client_cert(&other_ca, "stranger");
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("app.test"), vec![rule("/", forward(&[(APP, 1)]))]),
        cluster(APP, &[b], UpstreamProtocol::Http1),
        tls_policy(upstream_tls()),
        gateway_cert("test/gw", stranger),
    ])
    .await;
    let (status, body) = status_and_body(&p).await;
    assert!(status >= 500, "{status} {body}");
    // With the Gateway's certificate (the listener's Gateway is test/gw): served.
    let (good, expected) = client_cert(&client_pki, "gateway");
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("app.test"), vec![rule("/", forward(&[(APP, 1)]))]),
        cluster(APP, &[b], UpstreamProtocol::Http1),
        tls_policy(upstream_tls()),
        gateway_cert("test/gw", good),
    ])
    .await;
    let (status, body) = status_and_body(&p).await;
    assert_eq!((status, body), (200, expected));
}

/// A cluster's own TLS (an Ingress's `backend-protocol: HTTPS`: unverified, no SNI) is
/// used when the Service has no BackendTLSPolicy; a policy on the Service port wins over
/// it, its SNI sent and its CA checked (another CA fails rather than falling back to the
/// cluster's unverified setting).
#[tokio::test]
async fn a_clusters_own_tls_yields_to_the_services_policy() {
    let pki = Pki::new();
    let other = Pki::new();
    let (cert, key) = pki.leaf(&["abc.example.com"], &[]);
    let b = https_backend(cert, key).await;
    let own = || {
        let Resource::Cluster(c) = cluster(APP, &[b], UpstreamProtocol::Http1) else {
            unreachable!()
        };
        let tls = UpstreamTls {
            hide_sni: true,
            ..upstream("app.default.svc", TrustAnchors::Unverified, vec![])
        };
        Resource::Cluster(Arc::new(c.as_ref().clone().with_tls(Some(Arc::new(tls)))))
    };
    let start = |policy: Option<UpstreamTls>| {
        let mut resources = vec![
            listener(Protocol::Http),
            vhost(Some("app.test"), vec![rule("/", forward(&[(APP, 1)]))]),
            own(),
        ];
        if policy.is_some() {
            resources.push(tls_policy(policy));
        }
        Proxy::start(resources)
    };
    let p = start(None).await;
    assert_eq!(status_and_body(&p).await, (200, "sni=".to_owned()));
    let p = start(Some(upstream(
        "abc.example.com",
        TrustAnchors::Pem(pki.ca_pem()),
        vec![],
    )))
    .await;
    assert_eq!(
        status_and_body(&p).await,
        (200, "sni=abc.example.com".to_owned())
    );
    let p = start(Some(upstream(
        "abc.example.com",
        TrustAnchors::Pem(other.ca_pem()),
        vec![],
    )))
    .await;
    let (status, body) = status_and_body(&p).await;
    assert!(status >= 500, "{status} {body}");
}
