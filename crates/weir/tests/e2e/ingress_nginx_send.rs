//! ingress-nginx's `proxy-send-timeout` through `weir run`: the time a write of the
//! request to the backend may stay pending. A backend that takes the request head and
//! then reads none of the body fails the attempt (504) after the timeout, long before the
//! attempt's own timeout (connect + read); a backend that reads the body slowly but
//! steadily is not cut off.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::support::*;

/// A listener on 127.0.0.1 whose accepted connections have a small receive buffer, so
/// that a backend that stops reading pushes back on weir soon.
fn small_buffer_listener() -> TcpListener {
    let s = TcpSocket::new_v4().unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    s.listen(16).unwrap()
}

/// A backend that reads each request's head and then nothing more, holding the
/// connection open.
async fn stuck_backend() -> SocketAddr {
    let l = small_buffer_listener();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = read_head(&mut s).await;
                tokio::time::sleep(Duration::from_secs(300)).await;
                drop(s);
            });
        }
    });
    addr
}

/// A backend that reads each request's body (its `Content-Length`) through its small
/// receive buffer with a pause of 5 ms after each read (some KiB at a time, so weir's
/// writes wait on it throughout), and then answers 200 with the number of bytes it read.
async fn slow_reading_backend() -> SocketAddr {
    let l = small_buffer_listener();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let Some(head) = read_head(&mut s).await else {
                    return;
                };
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                let mut buf = vec![0u8; 64 * 1024];
                let mut read = 0;
                while read < length {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => read += n,
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                let body = format!("read {read}");
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

/// Sends a POST of `size` bytes for `host` to `addr` (the body written alongside, and
/// given up when the connection fails), and reads the answer: its status and body.
async fn post(addr: SocketAddr, host: &str, size: usize) -> (u16, String) {
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let head = format!("POST /upload HTTP/1.1\r\nHost: {host}\r\nContent-Length: {size}\r\n\r\n");
    let writer = tokio::spawn(async move {
        wr.write_all(head.as_bytes()).await?;
        let chunk = vec![b'x'; 64 * 1024];
        let mut left = size;
        while left > 0 {
            let n = left.min(chunk.len());
            wr.write_all(&chunk[..n]).await?;
            left -= n;
        }
        // Keep the write half open until the answer is read.
        Ok::<_, std::io::Error>(wr)
    });
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match rd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&out);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse::<usize>().ok());
            if length.is_some_and(|n| body.len() >= n) {
                break;
            }
        }
    }
    writer.abort();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// `proxy-send-timeout: "1"` (with `proxy-read-timeout: "60"`, so the attempt may take
/// 65 s): a backend that reads the head and none of a 32 MiB body gets the request
/// cut off by the send timeout, answered 504 within seconds (the bound is generous: it
/// only has to tell the send timeout from the attempt's). With `proxy-send-timeout: "2"`,
/// a backend that reads an 8 MiB body slowly — seconds in all — but without a pause
/// anywhere near the timeout is answered in full (200).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_proxy_send_timeout() {
    let stuck = stuck_backend().await;
    let slow = slow_reading_backend().await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let n = "    nginx.ingress.kubernetes.io";
    let ingress = |name: &str, backend: &str, send: u32| {
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  annotations:
{n}/proxy-send-timeout: \"{send}\"
{n}/proxy-read-timeout: \"60\"
spec:
  rules:
  - host: {name}.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{resource: {{apiGroup: weir.dev, kind: Backend, name: {backend}}}}}}}
---
"
        )
    };
    let files = [
        (
            "ingress.yaml",
            [ingress("stuck", "stuck", 1), ingress("slow", "slow", 2)].concat(),
        ),
        (
            "backends.yaml",
            [
                backend("default", "stuck", &[stuck]),
                backend("default", "slow", &[slow]),
            ]
            .join("---\n"),
        ),
    ];
    let gw = Gateway::start_with(&files, Some(http_addr), None).await;
    send_timeout_probes(http_addr).await;

    // `weir migrate` carries the annotation over as the TrafficPolicy's
    // `timeouts.backendSend`: its output, served without the Ingresses, answers alike.
    let port = free_port();
    let migration = weir::migrate::migrate(&weir::migrate::MigrateOptions {
        config: gw.dir.path().to_path_buf(),
        gateway_name: "weir".into(),
        gateway_namespace: "default".into(),
        gateway_class: "weir".into(),
        http_port: port,
        https_port: free_port(),
        address: Some("127.0.0.1".into()),
        ingress_classes: vec!["weir".into()],
    });
    let report = migration.report();
    assert!(!report.contains("not carried over:"), "{report}");
    let yaml = migration.yaml().unwrap();
    assert!(yaml.contains("backendSend: 1s"), "{yaml}");
    drop(gw);
    let migrated = [("migrated.yaml", yaml), files[1].clone()];
    let _gw = Gateway::start(&migrated).await;
    send_timeout_probes(([127, 0, 0, 1], port).into()).await;
}

/// The answers `proxy-send-timeout` asks for, from weir at `http_addr`.
async fn send_timeout_probes(http_addr: SocketAddr) {
    // The route is served (a request without a body is not bounded by the send timeout
    // and reaches the slow backend, which answers it at once).
    let (status, body) = post(http_addr, "slow.test", 0).await;
    assert_eq!(status, 200, "{body}");

    let started = Instant::now();
    let (status, body) = post(http_addr, "stuck.test", 32 << 20).await;
    let took = started.elapsed();
    assert_eq!(status, 504, "{body}");
    assert!(
        took < Duration::from_secs(30),
        "cut off by the send timeout, not the attempt's 65 s: {took:?}"
    );

    let started = Instant::now();
    let (status, body) = post(http_addr, "slow.test", 8 << 20).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, format!("read {}", 8 << 20));
    // The backend's pauses alone (5 ms per read of at most its 8 KiB buffer) make the
    // transfer outlast the timeout: what counts is the time between two writes.
    assert!(
        started.elapsed() > Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}
