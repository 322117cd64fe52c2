//! L4: TLS passthrough by SNI (real TLS servers as backends, so the session is the
//! backend's), HTTPS and passthrough on one port, TCP with half-close and weights, and
//! route changes on each while a client loops on another route with zero failures.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rustls_pki_types::{ServerName, pem::PemObject};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::*;

/// Bound on every client exchange (a stuck exchange is a failure, not a hang).
const EXCHANGE: Duration = Duration::from_secs(5);

/// A TLS server (certificate for `names`, signed by `pki`) that answers each connection
/// with `label:` followed by everything the client sent, after the client's half-close.
pub(crate) async fn tls_backend(pki: &Pki, names: &[&str], label: &'static str) -> SocketAddr {
    let (crt, key) = pki.leaf(names);
    let certs = vec![der_of(&crt)];
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let mut got = Vec::new();
                if tls.read_to_end(&mut got).await.is_ok() {
                    let mut out = format!("{label}:").into_bytes();
                    out.extend_from_slice(&got);
                    let _ = tls.write_all(&out).await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    addr
}

/// A TCP server answering `label:` + what the client sent, after the client's half-close.
async fn tcp_backend(label: &'static str) -> SocketAddr {
    counted_tcp_backend(label).await.0
}

/// [`tcp_backend`], also counting the connections it accepted.
async fn counted_tcp_backend(label: &'static str) -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut got = Vec::new();
                if s.read_to_end(&mut got).await.is_ok() {
                    let mut out = format!("{label}:").into_bytes();
                    out.extend_from_slice(&got);
                    let _ = s.write_all(&out).await;
                    let _ = s.shutdown().await;
                }
            });
        }
    });
    (addr, accepted)
}

/// TLS to `addr` with SNI `sni` trusting `pki`; sends `msg`, half-closes, reads the
/// answer. Also returns the DNS names of the certificate the server presented.
pub(crate) async fn tls_exchange(
    addr: SocketAddr,
    pki: &Pki,
    sni: &str,
    msg: &str,
) -> Result<String, BoxError> {
    tls_exchange_after(addr, b"", pki, sni, msg).await
}

/// As [`tls_exchange`], on a connection whose first bytes are `prefix` (a PROXY
/// protocol header).
async fn tls_exchange_after(
    addr: SocketAddr,
    prefix: &[u8],
    pki: &Pki,
    sni: &str,
    msg: &str,
) -> Result<String, BoxError> {
    let run = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(prefix).await?;
        let connector = tokio_rustls::TlsConnector::from(pki.client_config(&[]));
        let mut tls = connector
            .connect(ServerName::try_from(sni.to_string())?, stream)
            .await?;
        tls.write_all(msg.as_bytes()).await?;
        tls.shutdown().await?;
        let mut out = String::new();
        tls.read_to_string(&mut out).await?;
        Ok::<_, BoxError>(out)
    };
    tokio::time::timeout(EXCHANGE, run).await?
}

/// Plain TCP: sends `msg`, half-closes, reads the answer.
async fn tcp_exchange(addr: SocketAddr, msg: &str) -> Result<String, BoxError> {
    let run = async {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(msg.as_bytes()).await?;
        s.shutdown().await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok::<_, BoxError>(out)
    };
    tokio::time::timeout(EXCHANGE, run).await?
}

/// Whether an exchange got an answer (closed or reset without one: no).
fn answered(r: &Result<String, BoxError>) -> bool {
    matches!(r, Ok(s) if !s.is_empty())
}

fn tls_route(name: &str, hosts: &[&str], backend: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {{name: {name}}}
spec:
  parentRefs: [{{name: gw, sectionName: pass}}]
  hostnames: [{}]
  rules: [{{backendRefs: [{{group: weir.dev, kind: Backend, name: {backend}}}]}}]
",
        hosts
            .iter()
            .map(|h| format!("'{h}'"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn tcp_route(name: &str, listener: &str, backends: &[(&str, u32)]) -> String {
    let refs: Vec<String> = backends
        .iter()
        .map(|(b, w)| format!("{{group: weir.dev, kind: Backend, name: {b}, weight: {w}}}"))
        .collect();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: {name}}}
spec:
  parentRefs: [{{name: gw, sectionName: {listener}}}]
  rules: [{{backendRefs: [{}]}}]
",
        refs.join(", ")
    )
}

/// Loops `exchange` until stopped (at most 100,000 times); returns (ok, failures).
fn looper<F, Fut>(
    stop: Arc<AtomicBool>,
    mut exchange: F,
) -> tokio::task::JoinHandle<(u32, Vec<String>)>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<bool, BoxError>> + Send,
{
    tokio::spawn(async move {
        let (mut ok, mut failed) = (0u32, Vec::new());
        while !stop.load(Ordering::Relaxed) && ok < 100_000 {
            match exchange().await {
                Ok(true) => ok += 1,
                Ok(false) => failed.push("wrong answer".to_string()),
                Err(e) => failed.push(e.to_string()),
            }
        }
        (ok, failed)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_passthrough_routes_by_sni_and_changes_live() {
    let pki = Arc::new(Pki::new());
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let a = tls_backend(&pki, &["a.test"], "a").await;
    let b = tls_backend(&pki, &["b.test", "exact.wild.test"], "b").await;
    let w = tls_backend(&pki, &["*.wild.test", "*.x.wild.test"], "w").await;
    let c1 = tls_backend(&pki, &["c.test"], "c1").await;
    let c2 = tls_backend(&pki, &["c.test"], "c2").await;
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  listeners:
  - {{name: pass, protocol: TLS, port: {port}, tls: {{mode: Passthrough}}}}
"
    );
    let backends = [
        backend("default", "a", &[a]),
        backend("default", "b", &[b]),
        backend("default", "w", &[w]),
        backend("default", "c1", &[c1]),
        backend("default", "c2", &[c2]),
    ]
    .join("---\n");
    let gw = Gateway::start(&[
        ("gw.yaml", gateway),
        ("backends.yaml", backends),
        ("a.yaml", tls_route("a", &["a.test"], "a")),
        (
            "b.yaml",
            tls_route("b", &["b.test", "exact.wild.test"], "b"),
        ),
        ("w.yaml", tls_route("w", &["*.wild.test"], "w")),
    ])
    .await;

    // Each name reaches its own backend, whose certificate the client verified.
    for (sni, want) in [
        ("a.test", "a:hi"),
        ("b.test", "b:hi"),
        ("x.wild.test", "w:hi"),
        ("deep.x.wild.test", "w:hi"),
        ("exact.wild.test", "b:hi"), // exact beats wildcard
    ] {
        assert_eq!(
            tls_exchange(addr, &pki, sni, "hi").await.unwrap(),
            want,
            "{sni}"
        );
    }
    // No route: the connection is closed, the handshake fails.
    assert!(tls_exchange(addr, &pki, "none.test", "hi").await.is_err());
    // Not TLS at all: closed without an answer (a reset when the request was unread).
    let r = tcp_exchange(addr, "GET / HTTP/1.1\r\n\r\n").await;
    assert!(!answered(&r), "{r:?}");

    let stop = Arc::new(AtomicBool::new(false));
    let loop_a = looper(stop.clone(), {
        let pki = pki.clone();
        move || {
            let pki = pki.clone();
            async move { Ok(tls_exchange(addr, &pki, "a.test", "x").await? == "a:x") }
        }
    });
    let limit = Duration::from_secs(10);
    gw.write("c.yaml", &tls_route("c", &["c.test"], "c1"));
    assert!(
        eventually(limit, || async {
            tls_exchange(addr, &pki, "c.test", "y")
                .await
                .ok()
                .as_deref()
                == Some("c1:y")
        })
        .await,
        "added TLSRoute not live"
    );
    gw.write("c.yaml", &tls_route("c", &["c.test"], "c2"));
    assert!(
        eventually(limit, || async {
            tls_exchange(addr, &pki, "c.test", "y")
                .await
                .ok()
                .as_deref()
                == Some("c2:y")
        })
        .await,
        "changed TLSRoute backend not live"
    );
    gw.remove("c.yaml");
    assert!(
        eventually(limit, || async {
            tls_exchange(addr, &pki, "c.test", "y").await.is_err()
        })
        .await,
        "removed TLSRoute still live"
    );
    stop.store(true, Ordering::Relaxed);
    let (ok, failed) = loop_a.await.unwrap();
    assert!(ok > 0);
    assert!(
        failed.is_empty(),
        "{} failures during changes, first: {:?}",
        failed.len(),
        failed.first()
    );

    let metrics = gw.admin_get("/metrics").await.body;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("weir_l4_connections_total{") && l.contains("listener=\"pass\""))
        .unwrap_or_else(|| panic!("no L4 connection counter in\n{metrics}"));
    let n: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= u64::from(ok), "{line}");
    assert!(metrics.contains("weir_l4_unrouted_connections_total{"));
    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_and_passthrough_share_a_port() {
    let pki = Pki::new();
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let web = echo("web").await;
    let pass = tls_backend(&pki, &["pass.test"], "p").await;
    let (crt, key) = pki.leaf(&["web.test", "other.test"]);
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  listeners:
  - {{name: https, protocol: HTTPS, port: {port}, tls: {{certificateRefs: [{{name: site}}]}}}}
  - {{name: pass, protocol: TLS, port: {port}, hostname: pass.test, tls: {{mode: Passthrough}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web}}
spec:
  parentRefs: [{{name: gw, sectionName: https}}]
  rules: [{{backendRefs: [{{group: weir.dev, kind: Backend, name: web}}]}}]
"
    );
    let gw = Gateway::start(&[
        ("gw.yaml", gateway),
        ("site.yaml", tls_secret("default", "site", &crt, &key)),
        ("web.yaml", backend("default", "web", &[web])),
        ("pass-backend.yaml", backend("default", "pass", &[pass])),
        ("pass.yaml", tls_route("pass", &["pass.test"], "pass")),
    ])
    .await;
    // The passthrough hostname reaches the backend's own TLS server...
    assert_eq!(
        tls_exchange(addr, &pki, "pass.test", "hi").await.unwrap(),
        "p:hi"
    );
    // ...every other name is terminated by weir with its certificate and routed as HTTP.
    for sni in ["web.test", "other.test"] {
        let r = https(addr, pki.client_config(&[b"http/1.1"]), sni, "/x")
            .await
            .unwrap();
        assert_eq!(r.resp.status, 200, "{sni}");
        assert_eq!(r.resp.echo_name(), Some("web"));
        assert_eq!(r.peer_cert, der_of(&crt));
    }
    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_routes_splice_with_half_close_weights_and_live_changes() {
    let (p1, p2) = (free_port(), free_port());
    let stable: SocketAddr = ([127, 0, 0, 1], p1).into();
    let changing: SocketAddr = ([127, 0, 0, 1], p2).into();
    let (s, t1, t2) = (
        tcp_backend("s").await,
        tcp_backend("t1").await,
        tcp_backend("t2").await,
    );
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  listeners:
  - {{name: stable, protocol: TCP, port: {p1}}}
  - {{name: changing, protocol: TCP, port: {p2}}}
"
    );
    let backends = [
        backend("default", "s", &[s]),
        backend("default", "t1", &[t1]),
        backend("default", "t2", &[t2]),
    ]
    .join("---\n");
    let gw = Gateway::start(&[
        ("gw.yaml", gateway),
        ("backends.yaml", backends),
        ("stable.yaml", tcp_route("stable", "stable", &[("s", 1)])),
    ])
    .await;
    // Half-close: the backend answers only after it saw the client's end of input.
    assert_eq!(tcp_exchange(stable, "ping").await.unwrap(), "s:ping");
    // No route on the other listener yet: closed without an answer (or reset).
    let r = tcp_exchange(changing, "ping").await;
    assert!(!answered(&r), "{r:?}");

    let stop = Arc::new(AtomicBool::new(false));
    let loop_s = looper(stop.clone(), move || async move {
        Ok(tcp_exchange(stable, "x").await? == "s:x")
    });
    let limit = Duration::from_secs(10);
    gw.write(
        "changing.yaml",
        &tcp_route("changing", "changing", &[("t1", 1)]),
    );
    assert!(
        eventually(limit, || async {
            tcp_exchange(changing, "y").await.ok().as_deref() == Some("t1:y")
        })
        .await,
        "added TCPRoute not live"
    );
    // Weights: both backends take connections.
    gw.write(
        "changing.yaml",
        &tcp_route("changing", "changing", &[("t1", 1), ("t2", 1)]),
    );
    let mut seen = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + limit;
    while seen.len() < 2 && tokio::time::Instant::now() < deadline {
        if let Ok(r) = tcp_exchange(changing, "z").await {
            seen.insert(r);
        }
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["t1:z", "t2:z"],
        "weighted backends"
    );
    gw.write(
        "changing.yaml",
        &tcp_route("changing", "changing", &[("t1", 0), ("t2", 1)]),
    );
    assert!(
        eventually(limit, || async {
            // Ten in a row on t2: weight 0 takes nothing.
            for _ in 0..10 {
                if tcp_exchange(changing, "w").await.ok().as_deref() != Some("t2:w") {
                    return false;
                }
            }
            true
        })
        .await,
        "changed TCPRoute weights not live"
    );
    stop.store(true, Ordering::Relaxed);
    let (ok, failed) = loop_s.await.unwrap();
    assert!(ok > 0);
    assert!(
        failed.is_empty(),
        "{} failures during changes, first: {:?}",
        failed.len(),
        failed.first()
    );
    gw.gw.stop().await;
}

/// The ClientHello of a passthrough connection is bounded by the listener's handshake
/// timeout: a silent client and one stalled mid-ClientHello are closed (default 10 s; set
/// to 200 ms here, and waited for at most 5 s), and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_hello_is_closed_by_the_handshake_timeout() {
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, annotations: {{weir.dev/handshake-timeout: 200ms}}}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  listeners:
  - {{name: pass, protocol: TLS, port: {port}, tls: {{mode: Passthrough}}}}
"
    );
    let gw = Gateway::start(&[("gw.yaml", gateway)]).await;
    // A record header announcing 512 bytes of handshake, then nothing.
    for first in [&b""[..], &[22, 3, 1, 2, 0, 1, 0][..]] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(first).await.unwrap();
        let mut buf = [0u8; 16];
        let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
        assert!(
            matches!(r, Ok(Ok(0)) | Ok(Err(_))),
            "not closed after {} bytes: {r:?}",
            first.len()
        );
    }
    let metrics = gw.admin_get("/metrics").await.body;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("weir_downstream_timeouts_total{state=\"handshake\"}"))
        .unwrap_or_else(|| panic!("no handshake timeout counter in\n{metrics}"));
    assert!(line.ends_with(" 2"), "{line}");
    gw.gw.stop().await;
}

/// TLS to `addr` offering ALPN `h2`: sends `msg`, half-closes (`close_notify`), reads the
/// answer; also returns the ALPN protocol agreed.
async fn tls_exchange_alpn(
    addr: SocketAddr,
    pki: &Pki,
    sni: &str,
    msg: &str,
) -> Result<(String, Option<Vec<u8>>), BoxError> {
    let run = async {
        let stream = TcpStream::connect(addr).await?;
        let connector = tokio_rustls::TlsConnector::from(pki.client_config(&[b"h2"]));
        let mut tls = connector
            .connect(ServerName::try_from(sni.to_string())?, stream)
            .await?;
        let alpn = tls.get_ref().1.alpn_protocol().map(|p| p.to_vec());
        tls.write_all(msg.as_bytes()).await?;
        tls.shutdown().await?;
        let mut out = String::new();
        tls.read_to_string(&mut out).await?;
        Ok::<_, BoxError>((out, alpn))
    };
    tokio::time::timeout(EXCHANGE, run).await?
}

/// A v1 TLSRoute needs hostnames (its schema's `minItems: 1`).
fn terminate_route(name: &str, listener: &str, host: &str, backend: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: {name}}}
spec:
  parentRefs: [{{name: gw, sectionName: {listener}}}]
  hostnames: [{host}]
  rules: [{{backendRefs: [{{group: weir.dev, kind: Backend, name: {backend}}}]}}]
"
    )
}

/// TLS `Terminate` listeners: weir terminates TLS with the listener's certificate and the
/// plaintext TCP backend gets the decrypted bytes (half-close passed on both ways, no ALPN
/// agreed on the backend's behalf); on one port a Terminate, a Passthrough and an HTTPS
/// listener each serve their hostnames (TLSRouteModeMixed); a route's backend changes
/// live and a removed route closes new connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_terminate_and_mixed_modes() {
    let pki = Pki::new();
    let (p1, p2) = (free_port(), free_port());
    let term_addr: SocketAddr = ([127, 0, 0, 1], p1).into();
    let mixed_addr: SocketAddr = ([127, 0, 0, 1], p2).into();
    let plain_a = tcp_backend("a").await;
    let plain_b = tcp_backend("b").await;
    let plain_m = tcp_backend("m").await;
    let pass = tls_backend(&pki, &["abc.test"], "p").await;
    let web = echo("web").await;
    let (crt, key) = pki.leaf(&["term.test", "tls.test", "web.test"]);
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  listeners:
  - {{name: term, protocol: TLS, port: {p1}, hostname: term.test, tls: {{mode: Terminate, certificateRefs: [{{name: site}}]}}}}
  - {{name: mixed-term, protocol: TLS, port: {p2}, hostname: tls.test, tls: {{mode: Terminate, certificateRefs: [{{name: site}}]}}}}
  - {{name: pass, protocol: TLS, port: {p2}, hostname: abc.test, tls: {{mode: Passthrough}}}}
  - {{name: https, protocol: HTTPS, port: {p2}, hostname: web.test, tls: {{certificateRefs: [{{name: site}}]}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web}}
spec:
  parentRefs: [{{name: gw, sectionName: https}}]
  rules: [{{backendRefs: [{{group: weir.dev, kind: Backend, name: web}}]}}]
"
    );
    let gw = Gateway::start(&[
        ("gw.yaml", gateway),
        ("site.yaml", tls_secret("default", "site", &crt, &key)),
        ("a.yaml", backend("default", "a", &[plain_a])),
        ("b.yaml", backend("default", "b", &[plain_b])),
        ("m.yaml", backend("default", "m", &[plain_m])),
        ("pass-backend.yaml", backend("default", "pass", &[pass])),
        ("web.yaml", backend("default", "web", &[web])),
        (
            "term.yaml",
            terminate_route("term", "term", "term.test", "a"),
        ),
        (
            "mixed.yaml",
            terminate_route("mixed", "mixed-term", "tls.test", "m"),
        ),
        ("pass.yaml", tls_route("pass", &["abc.test"], "pass")),
    ])
    .await;

    // Terminated: the client's TLS session ends at weir (its certificate verifies for the
    // name), the plain backend reads the plaintext and answers after the half-close.
    let (answer, alpn) = tls_exchange_alpn(term_addr, &pki, "term.test", "hello")
        .await
        .unwrap();
    assert_eq!(answer, "a:hello");
    assert_eq!(alpn, None, "no ALPN agreed for spliced bytes");
    // A name the listener does not serve: no route, closed.
    assert!(!answered(
        &tls_exchange(term_addr, &pki, "term.test.other", "x").await
    ));

    // Mixed port: each hostname by its listener's mode.
    assert_eq!(
        tls_exchange(mixed_addr, &pki, "tls.test", "hi")
            .await
            .unwrap(),
        "m:hi"
    );
    assert_eq!(
        tls_exchange(mixed_addr, &pki, "abc.test", "hi")
            .await
            .unwrap(),
        "p:hi"
    );
    let r = https(
        mixed_addr,
        pki.client_config(&[b"http/1.1"]),
        "web.test",
        "/x",
    )
    .await
    .unwrap();
    assert_eq!(r.resp.status, 200);
    assert_eq!(r.resp.echo_name(), Some("web"));
    assert_eq!(r.peer_cert, der_of(&crt));

    // The route's backend changes live; removing the route closes new connections.
    let pki = &pki;
    gw.write(
        "term.yaml",
        &terminate_route("term", "term", "term.test", "b"),
    );
    assert!(
        eventually(Duration::from_secs(5), move || async move {
            matches!(tls_exchange(term_addr, pki, "term.test", "x").await, Ok(s) if s == "b:x")
        })
        .await
    );
    gw.remove("term.yaml");
    assert!(
        eventually(Duration::from_secs(5), move || async move {
            !answered(&tls_exchange(term_addr, pki, "term.test", "x").await)
        })
        .await
    );
    // The mixed port is unaffected.
    assert_eq!(
        tls_exchange(mixed_addr, pki, "tls.test", "again")
            .await
            .unwrap(),
        "m:again"
    );
    gw.gw.stop().await;
}

/// A circuit breaker on a TCPRoute's Backend: with `maxConnections: 1`, a second
/// connection while the first is spliced is closed at once without reaching the backend;
/// once the first ends, connections go through again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_circuit_breaker_bounds_spliced_connections() {
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let (s, accepted) = counted_tcp_backend("s").await;
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  listeners:
  - {{name: tcp, protocol: TCP, port: {port}}}
"
    );
    let policy = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: one-at-a-time}
spec:
  targetRefs: [{group: weir.dev, kind: Backend, name: s}]
  circuitBreaker: {maxConnections: 1}
"
    .to_string();
    let gw = Gateway::start(&[
        ("gw.yaml", gateway),
        ("backend.yaml", backend("default", "s", &[s])),
        ("route.yaml", tcp_route("r", "tcp", &[("s", 1)])),
        ("policy.yaml", policy),
    ])
    .await;
    assert_eq!(tcp_exchange(addr, "a").await.unwrap(), "s:a");
    // One connection held open (the backend waits for the client's end of input). It
    // holds the one slot only once it reached the backend: the first exchange's slot may
    // still be in use for a moment after its answer arrived, and then this one is refused
    // and dialled again.
    let mut held = None;
    for _ in 0..10 {
        let before = accepted.load(Ordering::SeqCst);
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"held").await.unwrap();
        if eventually(Duration::from_secs(1), || async {
            accepted.load(Ordering::SeqCst) > before
        })
        .await
        {
            held = Some(c);
            break;
        }
    }
    let mut held = held.expect("a connection reaches the backend while no other is open");
    let refused = eventually(Duration::from_secs(5), || async {
        !answered(&tcp_exchange(addr, "b").await)
    })
    .await;
    assert!(
        refused,
        "a second connection while one is spliced is refused"
    );
    let m = gw.admin_get("/metrics").await.body;
    assert!(
        m.lines().any(|l| l
            .starts_with("weir_upstream_circuit_open_total{reason=\"cluster_max_connections\"}")
            && !l.ends_with(" 0")),
        "{m}"
    );
    // The held connection still works and, once it ends, there is room again.
    held.shutdown().await.unwrap();
    let mut out = String::new();
    held.read_to_string(&mut out).await.unwrap();
    assert_eq!(out, "s:held");
    assert!(
        eventually(Duration::from_secs(5), || async {
            tcp_exchange(addr, "c").await.ok().as_deref() == Some("s:c")
        })
        .await
    );
}

/// PROXY protocol on a TCP listener (`weir.dev/proxy-protocol`): the header is read and
/// consumed before the connection is spliced — the backend sees only the client's bytes,
/// whether the header arrives with them or alone —, and a connection without one is
/// closed unanswered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_protocol_header_is_consumed_before_splicing() {
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let s = tcp_backend("s").await;
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw
  annotations: {{weir.dev/proxy-protocol: \"true\"}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  listeners:
  - {{name: tcp, protocol: TCP, port: {port}}}
"
    );
    let _gw = Gateway::start(&[
        ("gw.yaml", gateway),
        ("backends.yaml", backend("default", "s", &[s])),
        ("route.yaml", tcp_route("r", "tcp", &[("s", 1)])),
    ])
    .await;
    let exchange = |separate: bool| async move {
        let run = async {
            let mut c = TcpStream::connect(addr).await?;
            let header = b"PROXY TCP4 203.0.113.5 127.0.0.1 4000 80\r\n";
            if separate {
                c.write_all(header).await?;
                c.flush().await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                c.write_all(b"ping").await?;
            } else {
                let mut all = header.to_vec();
                all.extend_from_slice(b"ping");
                c.write_all(&all).await?;
            }
            c.shutdown().await?;
            let mut out = String::new();
            c.read_to_string(&mut out).await?;
            Ok::<_, BoxError>(out)
        };
        tokio::time::timeout(EXCHANGE, run).await?
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            exchange(false).await.ok().as_deref() == Some("s:ping")
        })
        .await,
        "the route serves PROXY protocol connections"
    );
    assert_eq!(exchange(true).await.unwrap(), "s:ping");
    let r = tcp_exchange(addr, "ping").await;
    assert!(!answered(&r), "no header: closed ({r:?})");
}

/// PROXY protocol before TLS: on a Passthrough listener the header is consumed before the
/// ClientHello is read and the connection spliced (the backend's TLS session sees only
/// the client's bytes); on an HTTPS listener of the same Gateway it is read before the
/// handshake, and the backend is told the header's client in `X-Forwarded-For`. Without
/// a header, neither completes a handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_protocol_header_precedes_tls_on_passthrough_and_https_listeners() {
    let pki = Arc::new(Pki::new());
    let (pass_port, web_port) = (free_port(), free_port());
    let pass: SocketAddr = ([127, 0, 0, 1], pass_port).into();
    let web: SocketAddr = ([127, 0, 0, 1], web_port).into();
    let a = tls_backend(&pki, &["a.test"], "a").await;
    let e = echo("e").await;
    let (crt, key) = pki.leaf(&["web.test"]);
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw
  annotations: {{weir.dev/proxy-protocol: \"true\"}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  listeners:
  - {{name: pass, protocol: TLS, port: {pass_port}, tls: {{mode: Passthrough}}}}
  - {{name: web, protocol: HTTPS, port: {web_port}, hostname: web.test, tls: {{certificateRefs: [{{name: web}}]}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web}}
spec:
  parentRefs: [{{name: gw, sectionName: web}}]
  rules: [{{backendRefs: [{{group: weir.dev, kind: Backend, name: e}}]}}]
"
    );
    let _gw = Gateway::start(&[
        ("gw.yaml", gateway),
        (
            "backends.yaml",
            [backend("default", "a", &[a]), backend("default", "e", &[e])].join("---\n"),
        ),
        ("secret.yaml", tls_secret("default", "web", &crt, &key)),
        ("a.yaml", tls_route("a", &["a.test"], "a")),
    ])
    .await;
    let v1 = b"PROXY TCP4 203.0.113.7 127.0.0.1 4000 443\r\n";
    assert!(
        eventually(Duration::from_secs(5), || async {
            tls_exchange_after(pass, v1, &pki, "a.test", "hi")
                .await
                .ok()
                .as_deref()
                == Some("a:hi")
        })
        .await,
        "the passthrough listener reads the header, then routes by SNI"
    );
    assert!(
        tls_exchange(pass, &pki, "a.test", "hi").await.is_err(),
        "passthrough without a header: no handshake"
    );
    let r = https_after(web, v1, pki.client_config(&[b"http/1.1"]), "web.test", "/")
        .await
        .expect("HTTPS after a PROXY header");
    assert_eq!(r.resp.status, 200);
    assert_eq!(
        r.resp.json()["headers"]["x-forwarded-for"],
        "203.0.113.7",
        "{}",
        r.resp.body
    );
    // Version 2, HTTP/2 over TLS: the same client, whatever the protocol.
    let mut v2 = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    v2.extend_from_slice(&[0x21, 0x11, 0x00, 12]);
    v2.extend_from_slice(&[192, 0, 2, 44, 127, 0, 0, 1]);
    v2.extend_from_slice(&5000u16.to_be_bytes());
    v2.extend_from_slice(&443u16.to_be_bytes());
    let r = https_after(web, &v2, pki.client_config(&[b"h2"]), "web.test", "/")
        .await
        .expect("h2 after a PROXY header");
    assert_eq!(r.alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(
        r.resp.json()["headers"]["x-forwarded-for"],
        "192.0.2.44",
        "{}",
        r.resp.body
    );
    assert!(
        https(web, pki.client_config(&[]), "web.test", "/")
            .await
            .is_err(),
        "HTTPS without a header: no handshake"
    );
}
