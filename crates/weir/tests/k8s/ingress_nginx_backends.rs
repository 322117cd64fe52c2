//! ingress-nginx annotations whose behaviour needs a backend the echo server is not:
//! `proxy-next-upstream` (an endpoint answering 503) and `enable-websockets` (a WebSocket
//! server). The test backends run in this process on the host side of backend `a`'s veth
//! pair (the API server refuses loopback endpoints), as the ssl-passthrough one does.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::Ctx;
use crate::build::{self, until_http};
use crate::cluster;
use crate::ingress_nginx::{ING, ingress};
use crate::support;

/// The host side of backend `a`'s veth pair.
fn host_side(ctx: &Ctx) -> Ipv4Addr {
    let [o1, o2, o3, _] = ctx.a.addr.octets();
    Ipv4Addr::new(o1, o2, o3, 1)
}

/// Reads an HTTP/1.1 request head (to the blank line), lower-cased; bounded.
async fn read_head(s: &mut TcpStream) -> Option<String> {
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
                while read_head(&mut s).await.is_some() {
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

/// `Sec-WebSocket-Accept` for `key` (RFC 6455 section 4.2.2).
fn websocket_accept(key: &str) -> String {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(key.as_bytes());
    ctx.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    base64::engine::general_purpose::STANDARD.encode(ctx.finish().as_ref())
}

/// A WebSocket server on `ip`: answers an upgrade request 101 with the accept key, then
/// answers each masked text frame (payload under 126 bytes) with an unmasked text frame
/// of the payload upper-cased. A request that is not a WebSocket upgrade gets 400.
async fn websocket_backend(ip: Ipv4Addr) -> SocketAddr {
    let l = TcpListener::bind((ip, 0)).await.unwrap();
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

/// A headless Service (port 80, named `http`) with one EndpointSlice per endpoint, each
/// with that endpoint's own port.
fn service(ns: &str, name: &str, endpoints: &[SocketAddr]) -> Vec<Value> {
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
    cluster::apply(c, &service(ns, "flaky", &[healthy, down])).await;
    cluster::apply(c, &service(ns, "flaky-too", &[healthy, down_too])).await;
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

/// A WebSocket exchange with `host` through `addr`: the upgrade answer's head, then the
/// server's answer to one masked text frame `hello` (or the error).
async fn websocket_exchange(addr: SocketAddr, host: &str) -> Result<(String, Vec<u8>), String> {
    let run = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let req = format!(
            "GET /chat HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dghlihnhbxbszsbub25jzq==\r\nSec-WebSocket-Version: 13\r\n\r\n"
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

/// `enable-websockets: "true"` through the API server: a WebSocket upgrade through the
/// Ingress reaches the test's WebSocket server, the 101 comes back with the accept key the
/// server computed from the client's key, and frames then flow both ways over the
/// connection. (weir relays upgrades whatever the annotation says, as ingress-nginx has
/// since 0.9; the annotation is read and not reported as unsupported.)
pub async fn ingress_nginx_websockets(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7k";
    let ws = websocket_backend(host_side(&ctx)).await;
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &service(ns, "chat", &[ws])).await;
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
    let (head, frame) = websocket_exchange(addr, "chat.t7k.test").await.unwrap();
    assert!(
        head.contains(&format!(
            "sec-websocket-accept: {}",
            websocket_accept("dghlihnhbxbszsbub25jzq==").to_ascii_lowercase()
        )),
        "{head}"
    );
    assert_eq!(frame, b"\x81\x05HELLO", "the server's frame comes back");
    cluster::delete(c, ING.0, ING.1, ns, "chat").await;
}
