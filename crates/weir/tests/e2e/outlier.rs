//! TrafficPolicy `outlierDetection` from files, with real backends: a Backend whose
//! policy sets `consecutive5xx: 1` stops sending to an endpoint answering 503 after its
//! first answer, where a Backend without a policy (weir's default, five gateway errors
//! in a row) sends it at least five.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

/// A backend on 127.0.0.1 that answers every request 503 and closes the connection
/// (at most 1000 connections); returns its address and the number of requests it
/// answered.
async fn failing() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    tokio::spawn(async move {
        for _ in 0..1000 {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                count.fetch_add(1, Ordering::Relaxed);
                let _ = s
                    .write_all(
                        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 8\r\nconnection: close\r\n\r\nfailing\n",
                    )
                    .await;
                let _ = s.shutdown().await;
            });
        }
    });
    (addr, served)
}

fn metric(metrics: &str, sample: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_503_ejects_under_consecutive_5xx_where_the_default_needs_five() {
    let port = free_port();
    let (a, b, c, d) = (
        echo("a").await,
        echo("b").await,
        echo("c").await,
        echo("d").await,
    );
    let (bad_tuned, tuned_served) = failing().await;
    let (bad_plain, plain_served) = failing().await;
    // Ejections of 10 minutes: the tuned endpoint cannot come back during the test.
    let policy = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: outlier}
spec:
  targetRefs: [{group: weir.dev, kind: Backend, name: tuned}]
  outlierDetection: {consecutive5xx: 1, baseEjectionTime: 10m, maxEjectionTime: 10m}
"
    .to_string();
    let app = [
        http_gateway(port),
        http_route("tuned", "tuned.test", "tuned"),
        http_route("plain", "plain.test", "plain"),
        backend("default", "tuned", &[a, b, bad_tuned]),
        backend("default", "plain", &[c, d, bad_plain]),
    ]
    .join("---\n");
    let gw = Gateway::start(&[("app.yaml", app), ("policy.yaml", policy)]).await;
    let config = gw.admin_get("/config").await.body;
    assert!(config.contains("outlier_detection"), "{config}");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut errors = [0, 0];
    for _ in 0..60 {
        for (i, host) in ["tuned.test", "plain.test"].into_iter().enumerate() {
            let r = http1(addr, host, "/").await.unwrap();
            if r.status != 200 {
                assert_eq!((r.status.as_u16(), r.body.as_str()), (503, "failing\n"));
                errors[i] += 1;
            }
        }
    }
    assert_eq!(errors[0], 1, "tuned: ejected after its first 503");
    assert_eq!(tuned_served.load(Ordering::Relaxed), 1);
    assert!(
        errors[1] >= 5,
        "plain: {} failures, the default ejects after five in a row",
        errors[1]
    );
    assert_eq!(plain_served.load(Ordering::Relaxed), errors[1]);
    let m = gw.admin_get("/metrics").await.body;
    assert!(
        metric(&m, "weir_upstream_ejections_total").is_some_and(|n| n >= 2.0),
        "{m}"
    );
    // Removing the policy does not forget the ejection (endpoint state outlives policy
    // edits), and the route keeps answering.
    gw.remove("policy.yaml");
    assert!(
        eventually(Duration::from_secs(5), || async {
            !gw.admin_get("/config")
                .await
                .body
                .contains("outlier_detection")
        })
        .await,
        "the policy is removed"
    );
    for _ in 0..20 {
        assert_eq!(http1(addr, "tuned.test", "/").await.unwrap().status, 200);
    }
    assert_eq!(tuned_served.load(Ordering::Relaxed), 1);
}
