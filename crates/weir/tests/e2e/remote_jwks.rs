//! JWTs against a JWK Set fetched over HTTPS: a server started by the test (rustls, a
//! certificate of a test CA that the policy names) serves the set; a token of its key is
//! accepted once the first fetch is done; the key rotated on the server, a token of the
//! new key is accepted after the refresh and the old key's is refused; with the server
//! failing, the last good keys keep being used.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::policies::{EcKey, claims, ec_key, manifests, with_token, with_token_to as call};
use crate::support::*;

/// What the JWKS server serves, and whether it fails (503).
struct Served {
    body: Mutex<String>,
    down: AtomicBool,
}

fn set(keys: &[&EcKey]) -> String {
    let keys: Vec<&str> = keys.iter().map(|k| k.jwk.as_str()).collect();
    format!("{{\"keys\": [{}]}}", keys.join(", "))
}

/// An HTTPS server on 127.0.0.1 with a certificate of `pki` for that address.
async fn jwks_server(pki: &Pki, served: Arc<Served>) -> SocketAddr {
    let (cert, key) = pki.leaf(&["127.0.0.1"]);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = l.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let served = Arc::clone(&served);
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |_req: Request<Incoming>| {
                    let served = Arc::clone(&served);
                    async move {
                        let resp = if served.down.load(Ordering::SeqCst) {
                            Response::builder()
                                .status(503)
                                .body(Full::new(Bytes::new()))
                        } else {
                            let body = served.body.lock().unwrap().clone();
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(body)))
                        };
                        Ok::<_, Infallible>(resp.unwrap())
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

fn policy(server: SocketAddr, ca_pem: &str) -> String {
    let ca: String = ca_pem.lines().map(|l| format!("          {l}\n")).collect();
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: jwt}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: app}}]
  jwtAuth:
    providers:
    - name: corp
      issuer: https://corp.test
      audiences: [app]
      remoteJwks:
        uri: https://{server}/.well-known/jwks.json
        refreshInterval: 1s
        timeout: 2s
        caCertificate: |
{ca}      claimsToHeaders: [{{claim: sub, header: x-user}}]
"
    )
}

fn metric(m: &str, name: &str) -> f64 {
    m.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_jwks_is_fetched_rotated_and_kept_when_the_server_fails() {
    let port = free_port();
    let a = echo("a").await;
    let pki = Pki::new();
    let (k1, k2) = (ec_key("k1"), ec_key("k2"));
    let served = Arc::new(Served {
        body: Mutex::new(set(&[&k1])),
        down: AtomicBool::new(false),
    });
    let server = jwks_server(&pki, Arc::clone(&served)).await;
    let gw = Gateway::start(&[
        ("app.yaml", manifests(port, &backend("default", "a", &[a]))),
        ("policy.yaml", policy(server, &pki.ca_pem())),
    ])
    .await;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let t1 = k1.token(claims("alice", 300));
    let t2 = k2.token(claims("bob", 300));
    assert!(
        eventually(Duration::from_secs(10), || async {
            with_token(addr, Some(&t1)).await.status == 200
        })
        .await,
        "a token of the served key is accepted"
    );
    let r = with_token(addr, Some(&t1)).await;
    assert_eq!(r.json()["headers"]["x-user"], "alice");
    assert_eq!(with_token(addr, Some(&t2)).await.status, 401);
    assert_eq!(with_token(addr, None).await.status, 401);

    // Rotation on the server: the new key's token passes after a refresh, the old one
    // is refused.
    *served.body.lock().unwrap() = set(&[&k2]);
    assert!(
        eventually(Duration::from_secs(10), || async {
            with_token(addr, Some(&t2)).await.status == 200
        })
        .await,
        "the rotated key is fetched"
    );
    assert_eq!(with_token(addr, Some(&t1)).await.status, 401);

    // The server fails: fetches fail, the last good keys stay.
    served.down.store(true, Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(10), || async {
            let m = gw.admin_get("/metrics").await.body;
            metric(&m, "weir_jwks_fetch_failures_total") >= 2.0
        })
        .await,
        "fetches fail"
    );
    assert_eq!(with_token(addr, Some(&t2)).await.status, 200);
    let m = gw.admin_get("/metrics").await.body;
    assert!(metric(&m, "weir_jwks_fetches_total") >= 2.0, "{m}");
    assert_eq!(metric(&m, "weir_jwks_keys"), 1.0, "{m}");
}

/// `ca.crt` of a ConfigMap, for `caCertificateRef`.
fn ca_config_map(name: &str, ca_pem: &str) -> String {
    let ca: String = ca_pem.lines().map(|l| format!("    {l}\n")).collect();
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata:\n  ca.crt: |\n{ca}")
}

/// A JWK Set in a ConfigMap (`jwks.configMapRef`), for host `keys.test`.
fn jwks_config_map(keys: &[&EcKey]) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: jwks}}\ndata:\n  jwks: '{}'\n",
        set(keys)
    )
}

/// Public material read from ConfigMaps: a remote JWK Set whose server has a private CA
/// (`remoteJwks.caCertificateRef`); an `https` authorization service with that CA
/// (`extAuth.caCertificateRef`: 200 through it, 503 for the same service without the CA,
/// whose handshake fails); a JWK Set kept in a ConfigMap (`jwks.configMapRef`), rotated by
/// rewriting the ConfigMap's file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwks_and_cas_come_from_config_maps() {
    let port = free_port();
    let a = echo("a").await;
    let pki = Pki::new();
    let (k1, k2) = (ec_key("k1"), ec_key("k2"));
    let served = Arc::new(Served {
        body: Mutex::new(set(&[&k1])),
        down: AtomicBool::new(false),
    });
    // Serves the JWK Set, and answers 200 to an authorization call as well.
    let server = jwks_server(&pki, Arc::clone(&served)).await;
    let routes = [
        http_gateway(port),
        http_route("app", "app.test", "a"),
        http_route("auth", "auth.test", "a"),
        http_route("noca", "noca.test", "a"),
        http_route("keys", "keys.test", "a"),
        backend("default", "a", &[a]),
    ]
    .join("---\n");
    let policies = format!(
        "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: jwt}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: app}}]
  jwtAuth:
    providers:
    - name: corp
      issuer: https://corp.test
      audiences: [app]
      remoteJwks: {{uri: 'https://{server}/jwks.json', caCertificateRef: {{name: private-ca}}}}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: auth}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: auth}}]
  extAuth: {{url: 'https://{server}/check', timeout: 2s, caCertificateRef: {{name: private-ca}}}}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: noca}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: noca}}]
  extAuth: {{url: 'https://{server}/check', timeout: 2s}}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: keys}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: keys}}]
  jwtAuth:
    providers:
    - {{name: corp, issuer: https://corp.test, audiences: [app], jwks: {{configMapRef: {{name: jwks}}}}}}
"
    );
    let gw = Gateway::start(&[
        ("app.yaml", routes),
        ("policies.yaml", policies),
        ("ca.yaml", ca_config_map("private-ca", &pki.ca_pem())),
        ("jwks.yaml", jwks_config_map(&[&k1])),
    ])
    .await;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let t1 = k1.token(claims("alice", 300));
    let t2 = k2.token(claims("bob", 300));
    assert!(
        eventually(Duration::from_secs(10), || async {
            call(addr, "app.test", Some(&t1)).await.status == 200
        })
        .await,
        "the remote set is fetched with the ConfigMap's CA"
    );
    assert_eq!(call(addr, "app.test", Some(&t2)).await.status, 401);
    assert_eq!(call(addr, "auth.test", None).await.status, 200);
    assert_eq!(call(addr, "noca.test", None).await.status, 503);
    assert_eq!(call(addr, "keys.test", Some(&t1)).await.status, 200);
    assert_eq!(call(addr, "keys.test", Some(&t2)).await.status, 401);

    // The ConfigMap's set rotated: the new key passes, the old one is refused.
    gw.write("jwks.yaml", &jwks_config_map(&[&k2]));
    assert!(
        eventually(Duration::from_secs(10), || async {
            call(addr, "keys.test", Some(&t2)).await.status == 200
        })
        .await,
        "the rotated ConfigMap applies"
    );
    assert_eq!(call(addr, "keys.test", Some(&t1)).await.status, 401);
    // Without the CA ConfigMap the service's certificate is not trusted: refused.
    gw.write("ca.yaml", "");
    assert!(
        eventually(Duration::from_secs(10), || async {
            call(addr, "auth.test", None).await.status == 503
        })
        .await,
        "the CA's removal applies"
    );
}
