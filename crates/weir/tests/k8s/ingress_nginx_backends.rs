//! ingress-nginx annotations whose behaviour needs a backend the echo server is not:
//! `proxy-next-upstream` (an endpoint answering 503), `enable-websockets` (a WebSocket
//! server) and `backend-protocol: HTTPS`/`GRPCS` (TLS servers, HTTP/1.1 and h2). The test backends run in this process on the host side of backend `a`'s veth
//! pair (the API server refuses loopback endpoints), as the ssl-passthrough one does.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::Ctx;
use crate::build::{self, until_http};
use crate::cluster;
use crate::ingress_nginx::{ING, ingress};
use crate::support::{self, eventually};

/// The host side of backend `a`'s veth pair.
pub fn host_side(ctx: &Ctx) -> Ipv4Addr {
    let [o1, o2, o3, _] = ctx.a.addr.octets();
    Ipv4Addr::new(o1, o2, o3, 1)
}

/// A backend on `ip` answering every request 503; counts the requests it gets.
async fn unavailable_backend(ip: Ipv4Addr) -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let hits = counted.clone();
            tokio::spawn(async move {
                while support::read_head(&mut s).await.is_some() {
                    hits.fetch_add(1, Ordering::Relaxed);
                    let answer =
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\n\r\ndown";
                    if s.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, hits)
}

/// A headless Service (port 80, named `http`) with one EndpointSlice per endpoint, each
/// with that endpoint's own port.
pub fn endpoint_service(ns: &str, name: &str, endpoints: &[SocketAddr]) -> Vec<Value> {
    let mut out = vec![
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
               "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80}]}}),
    ];
    for (i, e) in endpoints.iter().enumerate() {
        out.push(
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-{i}"), "namespace": ns,
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [e.ip().to_string()], "conditions": {"ready": true}}],
            "ports": [{"name": "http", "port": e.port(), "protocol": "TCP"}]}),
        );
    }
    out
}

/// `proxy-next-upstream: "error timeout http_503"` through the API server, on a Service
/// of two endpoints, one of which answers every request 503: 20 requests are all served
/// by the healthy one, and the 503 endpoint was asked meanwhile (the retries went past
/// it). An Ingress without the annotation, on a Service of its own with another 503
/// endpoint (so that weir's ejection of failing endpoints, which is per endpoint, does
/// not carry over), passes a 503 to the client.
pub async fn ingress_nginx_next_upstream(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7j";
    let (down, hits) = unavailable_backend(host_side(&ctx)).await;
    let (down_too, _) = unavailable_backend(host_side(&ctx)).await;
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    let healthy = SocketAddr::from((ctx.a.addr, ctx.a.port));
    cluster::apply(c, &endpoint_service(ns, "flaky", &[healthy, down])).await;
    cluster::apply(c, &endpoint_service(ns, "flaky-too", &[healthy, down_too])).await;
    let retrying = ingress(
        ns,
        "retrying",
        "retrying.t7j.test",
        "flaky",
        json!({"nginx.ingress.kubernetes.io/proxy-next-upstream": "error timeout http_503"}),
    );
    let once = ingress(ns, "once", "once.t7j.test", "flaky-too", json!({}));
    cluster::apply(c, &[retrying, once]).await;
    let addr = ctx.ingress_http;
    // Without the annotation: a 503 of the failing endpoint reaches the client.
    until_http(addr, "once.t7j.test", "/", Err(503)).await;

    until_http(addr, "retrying.t7j.test", "/", Ok("echo-a")).await;
    let before = hits.load(Ordering::Relaxed);
    for i in 0..20 {
        let r = support::http1(addr, "retrying.t7j.test", "/")
            .await
            .unwrap();
        assert_eq!(r.status, 200, "request {i}: {}", r.body);
        assert_eq!(r.echo_name(), Some("echo-a"));
    }
    assert!(
        hits.load(Ordering::Relaxed) > before,
        "the 503 endpoint was tried and passed over"
    );
    for name in ["retrying", "once"] {
        cluster::delete(c, ING.0, ING.1, ns, name).await;
    }
}

/// `enable-websockets: "true"` through the API server: a WebSocket upgrade through the
/// Ingress reaches the test's WebSocket server, the 101 comes back with the accept key the
/// server computed from the client's key, and frames then flow both ways over the
/// connection. (weir relays upgrades whatever the annotation says, as ingress-nginx has
/// since 0.9; the annotation is read and not reported as unsupported.)
pub async fn ingress_nginx_websockets(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7k";
    let ws = support::websocket_backend(host_side(&ctx).into()).await;
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &endpoint_service(ns, "chat", &[ws])).await;
    cluster::apply(
        c,
        &[ingress(
            ns,
            "chat",
            "chat.t7k.test",
            "chat",
            json!({"nginx.ingress.kubernetes.io/enable-websockets": "true"}),
        )],
    )
    .await;
    let addr = ctx.ingress_http;
    until_http(addr, "chat.t7k.test", "/", Err(400)).await;
    let (head, frame) = support::websocket_exchange(addr, "chat.t7k.test")
        .await
        .unwrap();
    assert!(
        head.contains(&format!(
            "sec-websocket-accept: {}",
            support::websocket_accept(support::WEBSOCKET_KEY).to_ascii_lowercase()
        )),
        "{head}"
    );
    assert_eq!(frame, b"\x81\x05HELLO", "the server's frame comes back");
    cluster::delete(c, ING.0, ING.1, ns, "chat").await;
}

/// `backend-protocol: HTTPS` and `GRPCS` through the API server, each to a TLS server of
/// its own on the host side of the veth pair: the HTTPS Ingress's request reaches its
/// server over TLS as HTTP/1.1 (the server answers only after a handshake; unverified and
/// without SNI, ingress-nginx's defaults) and the answer comes back; the GRPCS one reaches
/// an h2 server (ALPN `h2`) as HTTP/2. With `proxy-ssl-verify: "on"` and the test CA in
/// `proxy-ssl-secret`, the certificate is checked for `<service>.<namespace>.svc`, sent
/// as SNI with `proxy-ssl-server-name: "on"`; the same Service without `backend-protocol`
/// is spoken to in plaintext, which the TLS server refuses (502).
pub async fn ingress_nginx_tls_backends(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7m";
    let (crt, key) = ctx.pki.leaf(&["web.t7m.svc"]);
    let ip = host_side(&ctx).into();
    let https = support::https_backend_on(ip, (&crt, &key), false).await;
    let grpcs = support::https_backend_on(ip, (&crt, &key), true).await;
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &endpoint_service(ns, "web", &[https])).await;
    cluster::apply(c, &endpoint_service(ns, "grpc", &[grpcs])).await;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ca = json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "backend-ca", "namespace": ns},
                    "data": {"ca.crt": b64(&ctx.pki.ca_pem())}});
    let n = "nginx.ingress.kubernetes.io";
    let ingresses = [
        ingress(
            ns,
            "https",
            "https.t7m.test",
            "web",
            json!({format!("{n}/backend-protocol"): "HTTPS"}),
        ),
        ingress(
            ns,
            "grpcs",
            "grpcs.t7m.test",
            "grpc",
            json!({format!("{n}/backend-protocol"): "GRPCS"}),
        ),
        ingress(
            ns,
            "verified",
            "verified.t7m.test",
            "web",
            json!({format!("{n}/backend-protocol"): "HTTPS",
                   format!("{n}/proxy-ssl-verify"): "on",
                   format!("{n}/proxy-ssl-secret"): format!("{ns}/backend-ca"),
                   format!("{n}/proxy-ssl-server-name"): "on"}),
        ),
        ingress(ns, "plaintext", "plaintext.t7m.test", "web", json!({})),
    ];
    cluster::apply(c, &[vec![ca], ingresses.to_vec()].concat()).await;
    let addr = ctx.ingress_http;
    let served = |host: &'static str, want: &'static str| async move {
        eventually(Duration::from_secs(20), || async {
            support::http1(addr, host, "/")
                .await
                .is_ok_and(|r| r.status == 200 && r.body == want)
        })
        .await
    };
    assert!(
        served("https.t7m.test", "sni=").await,
        "HTTPS: answered by the TLS server, no SNI"
    );
    let r = support::http1(addr, "https.t7m.test", "/").await.unwrap();
    assert_eq!(r.header("x-request-version"), "HTTP/1.1", "{r:?}");
    assert!(
        served("verified.t7m.test", "sni=web.t7m.svc").await,
        "verified for, and SNI of, <service>.<namespace>.svc"
    );
    let grpc = eventually(Duration::from_secs(20), || async {
        support::h2c(addr, "grpcs.t7m.test", "/pkg.Svc/Call")
            .await
            .is_ok_and(|r| r.status == 200 && r.body == "sni=")
    })
    .await;
    assert!(grpc, "GRPCS: answered by the h2 TLS server");
    let r = support::h2c(addr, "grpcs.t7m.test", "/pkg.Svc/Call")
        .await
        .unwrap();
    assert_eq!(r.header("x-request-version"), "HTTP/2.0", "{r:?}");
    until_http(addr, "plaintext.t7m.test", "/", Err(502)).await;
    for name in ["https", "grpcs", "verified", "plaintext"] {
        cluster::delete(c, ING.0, ING.1, ns, name).await;
    }
}
