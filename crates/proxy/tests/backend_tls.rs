//! Upstream TLS (BackendTLSPolicy) against real TLS backends on 127.0.0.1: the SNI is the
//! policy's hostname, the certificate is verified against the policy's CA and names (the
//! hostname, or DNS / URI subject alternative names), and every failed verification is an
//! error answer, never a plaintext or unverified request.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType, string::Ia5String,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use support::*;
use tokio::net::TcpListener;
use weir_model::{
    BackendKind, BackendTls, Policy, PolicyTarget, Protocol, Resource, SubjectName, Timeouts,
    TrustAnchors, UpstreamProtocol, UpstreamTls,
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
                let sni = tls.get_ref().1.server_name().unwrap_or("").to_owned();
                let svc = hyper::service::service_fn(move |_req: Request<Incoming>| {
                    let body = format!("sni={sni}");
                    async move {
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                            body,
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
