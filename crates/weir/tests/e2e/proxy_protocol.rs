//! PROXY protocol on a Gateway's listeners (`weir.dev/proxy-protocol`): a client sending
//! a version 1 or version 2 header is seen at the address the header names — by
//! `ipRules` and in the `X-Forwarded-For` the backend gets; a connection without a header
//! is closed; `weir.dev/proxy-protocol-sources` refuses headers from other peers.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;

fn manifests(port: u16, backend_yaml: &str, sources: Option<&str>) -> String {
    let sources = sources
        .map(|s| format!(", weir.dev/proxy-protocol-sources: \"{s}\""))
        .unwrap_or_default();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw
  annotations: {{weir.dev/proxy-protocol: \"true\"{sources}}}
spec:
  gatewayClassName: weir
  addresses: [{{type: IPAddress, value: 127.0.0.1}}]
  listeners:
  - {{name: http, protocol: HTTP, port: {port}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: app}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [app.test]
  rules:
  - backendRefs: [{{group: weir.dev, kind: Backend, name: a}}]
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: ips}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
  ipRules: {{deny: [198.51.100.0/24]}}
---
{backend_yaml}"
    )
}

fn v1(client: &str, port: u16) -> Vec<u8> {
    format!("PROXY TCP4 {client} 127.0.0.1 {port} 80\r\n").into_bytes()
}

/// A version 2 PROXY header for a TCP/IPv4 client, with a TLV after the addresses.
fn v2(client: [u8; 4], port: u16) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x21, 0x11, 0x00, 12 + 5]);
    h.extend_from_slice(&client);
    h.extend_from_slice(&[127, 0, 0, 1]);
    h.extend_from_slice(&port.to_be_bytes());
    h.extend_from_slice(&80u16.to_be_bytes());
    h.extend_from_slice(&[0x01, 0x00, 0x02, b'h', b'2']);
    h
}

async fn call(addr: SocketAddr, prefix: &[u8]) -> Option<Resp> {
    let req = get("app.test", "/")
        .body(http_body_util::Empty::new())
        .unwrap();
    send_http1_after(addr, prefix, req).await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_header_names_the_client() {
    let port = free_port();
    let a = echo("a").await;
    let backend_yaml = backend("default", "a", &[a]);
    let gw = Gateway::start(&[("app.yaml", manifests(port, &backend_yaml, None))]).await;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, &v1("203.0.113.5", 4000))
                .await
                .is_some_and(|r| r.status == 200)
        })
        .await,
        "the listener reads PROXY headers"
    );
    // Version 1 and 2: the backend is told the header's client.
    let r = call(addr, &v1("203.0.113.5", 4000))
        .await
        .expect("answered");
    assert_eq!(
        r.json()["headers"]["x-forwarded-for"],
        "203.0.113.5",
        "{}",
        r.body
    );
    let r = call(addr, &v2([192, 0, 2, 44], 5000))
        .await
        .expect("answered");
    assert_eq!(
        r.json()["headers"]["x-forwarded-for"],
        "192.0.2.44",
        "{}",
        r.body
    );
    // ipRules judge the header's client, not the peer (127.0.0.1).
    let r = call(addr, &v1("198.51.100.9", 4000))
        .await
        .expect("answered");
    assert_eq!(r.status, 403);
    let r = call(addr, &v2([198, 51, 100, 10], 5000))
        .await
        .expect("answered");
    assert_eq!(r.status, 403);
    // UNKNOWN (no client named): the peer is the client.
    let r = call(addr, b"PROXY UNKNOWN\r\n").await.expect("answered");
    assert_eq!(
        r.json()["headers"]["x-forwarded-for"],
        "127.0.0.1",
        "{}",
        r.body
    );
    // No header: the request is read as a header, refused, and the connection closed.
    assert!(
        call(addr, b"").await.is_none(),
        "a connection without a header is closed"
    );

    // Headers accepted only from the balancer's network: the test client is not in it.
    gw.write(
        "app.yaml",
        &manifests(port, &backend_yaml, Some("10.0.0.0/8")),
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, &v1("203.0.113.5", 4000)).await.is_none()
        })
        .await,
        "a peer outside the sources is closed"
    );
    gw.write(
        "app.yaml",
        &manifests(port, &backend_yaml, Some("127.0.0.0/8")),
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, &v1("203.0.113.5", 4000))
                .await
                .is_some_and(|r| r.status == 200)
        })
        .await,
        "a peer among the sources is served"
    );
}
