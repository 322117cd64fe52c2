//! TrafficPolicy `requestLimits` from a file: a declared body over the limit is refused
//! 413 before anything is forwarded, a chunked body is cut off past it (413), bodies
//! within it are forwarded whole, a head over its field limits is refused 431; removing
//! the policy lifts the limits.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

const POLICY: &str = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: size}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  requestLimits: {maxBodyBytes: 1000, maxHeaders: 20}
";

/// Sends `head` and then `body` on a new connection; the response's status and body.
pub(crate) async fn raw(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    // The gateway may answer and close before it read everything (413 up front).
    let _ = s.write_all(body).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

async fn declared(addr: SocketAddr, len: usize) -> (u16, String) {
    let head = format!(
        "POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    );
    raw(addr, &head, &vec![b'x'; len]).await
}

async fn chunked(addr: SocketAddr, chunks: usize) -> (u16, String) {
    let head = "POST / HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    let mut body = Vec::new();
    for _ in 0..chunks {
        body.extend_from_slice(b"100\r\n");
        body.extend_from_slice(&[b'y'; 256]);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\n\r\n");
    raw(addr, head, &body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_size_limits_refuse_large_bodies_and_heads() {
    let port = free_port();
    let a = echo("a").await;
    let gw = Gateway::start(&[
        (
            "app.yaml",
            crate::policies::manifests(port, &backend("default", "a", &[a])),
        ),
        ("policy.yaml", POLICY.to_string()),
    ])
    .await;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        eventually(Duration::from_secs(5), || async {
            declared(addr, 1001).await.0 == 413
        })
        .await,
        "the policy applies"
    );
    assert_eq!(declared(addr, 1000).await.0, 200, "at the limit");
    // 3 × 256 bytes chunked: within; 4 × 256: cut off.
    let (status, text) = chunked(addr, 3).await;
    assert_eq!(status, 200, "{text}");
    let (status, text) = chunked(addr, 4).await;
    assert_eq!(status, 413, "{text}");
    // Too many header fields: 431.
    let mut head = String::from("GET / HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n");
    for i in 0..25 {
        head += &format!("x-h{i}: v\r\n");
    }
    head += "\r\n";
    assert_eq!(raw(addr, &head, b"").await.0, 431);

    gw.remove("policy.yaml");
    assert!(
        eventually(Duration::from_secs(5), || async {
            declared(addr, 5000).await.0 == 200
        })
        .await,
        "removing the policy lifts the limit"
    );
    assert_eq!(chunked(addr, 8).await.0, 200);
}
