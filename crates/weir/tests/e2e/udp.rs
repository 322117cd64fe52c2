//! UDP (UDPRoute): datagrams through weir to UDP echo backends, weights, a session pinned
//! to its endpoint while new sessions follow a route change, and route changes on one
//! UDP listener while a client loops on another with zero lost replies.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::UdpSocket;

use crate::support::*;

/// Bound on every exchange that must be answered (a lost reply is a failure, not a hang).
const EXCHANGE: Duration = Duration::from_secs(5);

/// A UDP server that answers each datagram with `label:` followed by the datagram.
async fn udp_backend(label: &'static str) -> SocketAddr {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = s.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok((n, from)) = s.recv_from(&mut buf).await {
            let mut out = format!("{label}:").into_bytes();
            out.extend_from_slice(&buf[..n]);
            let _ = s.send_to(&out, from).await;
        }
    });
    addr
}

/// A client socket: one socket is one session on weir's side.
async fn client() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").await.unwrap()
}

/// Sends `msg` to `to` from `sock` and waits up to `wait` for the answer from `to`.
async fn exchange_within(
    sock: &UdpSocket,
    to: SocketAddr,
    msg: &str,
    wait: Duration,
) -> Result<String, BoxError> {
    sock.send_to(msg.as_bytes(), to).await?;
    let mut buf = vec![0u8; 65_536];
    let run = async {
        loop {
            let (n, from) = sock.recv_from(&mut buf).await?;
            if from == to {
                return Ok::<_, BoxError>(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
    };
    tokio::time::timeout(wait, run).await?
}

async fn exchange(sock: &UdpSocket, to: SocketAddr, msg: &str) -> Result<String, BoxError> {
    exchange_within(sock, to, msg, EXCHANGE).await
}

/// One exchange from a new socket (a new session), bounded by `wait`.
async fn fresh(to: SocketAddr, msg: &str, wait: Duration) -> Option<String> {
    exchange_within(&client().await, to, msg, wait).await.ok()
}

fn udp_route(name: &str, listener: &str, backends: &[(&str, u32)]) -> String {
    let refs: Vec<String> = backends
        .iter()
        .map(|(b, w)| format!("{{group: weir.dev, kind: Backend, name: {b}, weight: {w}}}"))
        .collect();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: UDPRoute
metadata: {{name: {name}}}
spec:
  parentRefs: [{{name: gw, sectionName: {listener}}}]
  rules: [{{backendRefs: [{}]}}]
",
        refs.join(", ")
    )
}

/// The value of one metric sample from the admin `/metrics` (0 when absent).
async fn metric(gw: &Gateway, sample: &str) -> u64 {
    gw.admin_get("/metrics")
        .await
        .body
        .lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_routes_relay_with_weights_pinned_sessions_and_live_changes() {
    // Below the ephemeral range (`free_port`): a port the kernel picked for a socket bound
    // to port 0 could be handed to one of the echo backends before weir binds it.
    let (p1, p2) = (free_port(), free_port());
    let stable: SocketAddr = ([127, 0, 0, 1], p1).into();
    let changing: SocketAddr = ([127, 0, 0, 1], p2).into();
    let (s, u1, u2) = (
        udp_backend("s").await,
        udp_backend("u1").await,
        udp_backend("u2").await,
    );
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  listeners:
  - {{name: stable, protocol: UDP, port: {p1}}}
  - {{name: changing, protocol: UDP, port: {p2}}}
"
    );
    let backends = [
        backend("default", "s", &[s]),
        backend("default", "u1", &[u1]),
        backend("default", "u2", &[u2]),
    ]
    .join("---\n");
    let gw = Gateway::start(&[
        ("gw.yaml", gateway),
        ("backends.yaml", backends),
        ("stable.yaml", udp_route("stable", "stable", &[("s", 1)])),
    ])
    .await;
    // `/config` shows the UDP listener and its route.
    let config = gw.admin_get("/config").await.json();
    let l = &config["listeners"][stable.to_string()];
    assert_eq!(l["protocol"], "Udp", "{l:#}");
    assert_eq!(l["l4"]["*"][0]["cluster"], "backend/default/s", "{l:#}");
    let stable_client = client().await;
    assert_eq!(
        exchange(&stable_client, stable, "ping").await.unwrap(),
        "s:ping"
    );
    // The listener with no route drops what it gets, and counts it.
    let _ = fresh(changing, "lost", Duration::from_millis(200)).await;
    let limit = Duration::from_secs(10);
    let unrouted =
        "weir_l4_udp_unrouted_datagrams_total{gateway=\"default/gw\",listener=\"changing\"}";
    let mut counted = false;
    let deadline = tokio::time::Instant::now() + limit;
    while !counted && tokio::time::Instant::now() < deadline {
        counted = metric(&gw, unrouted).await >= 1;
    }
    assert!(counted, "an unrouted datagram is counted");

    // One client keeps one session on the stable listener throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let looper = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, Vec::new());
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) && ok < 100_000 {
                i += 1;
                let msg = format!("x{i}");
                match exchange(&stable_client, stable, &msg).await {
                    Ok(r) if r == format!("s:{msg}") => ok += 1,
                    Ok(r) => failed.push(format!("wrong answer {r:?}")),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (ok, failed)
        })
    };
    let wait = Duration::from_millis(500);
    gw.write(
        "changing.yaml",
        &udp_route("changing", "changing", &[("u1", 1)]),
    );
    assert!(
        eventually(limit, || async {
            fresh(changing, "y", wait).await.as_deref() == Some("u1:y")
        })
        .await,
        "added UDPRoute not live"
    );
    // A session started now stays with u1 after the route moves to u2, while new
    // sessions go to u2.
    let pinned = client().await;
    assert_eq!(exchange(&pinned, changing, "a").await.unwrap(), "u1:a");
    gw.write(
        "changing.yaml",
        &udp_route("changing", "changing", &[("u1", 0), ("u2", 1)]),
    );
    assert!(
        eventually(limit, || async {
            for _ in 0..10 {
                if fresh(changing, "w", wait).await.as_deref() != Some("u2:w") {
                    return false;
                }
            }
            true
        })
        .await,
        "changed UDPRoute weights not live for new sessions"
    );
    assert_eq!(exchange(&pinned, changing, "b").await.unwrap(), "u1:b");
    // Weights: new sessions reach both backends.
    gw.write(
        "changing.yaml",
        &udp_route("changing", "changing", &[("u1", 1), ("u2", 1)]),
    );
    let mut seen = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + limit;
    while seen.len() < 2 && tokio::time::Instant::now() < deadline {
        if let Some(r) = fresh(changing, "z", wait).await {
            seen.insert(r);
        }
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["u1:z", "u2:z"],
        "weighted backends"
    );
    // Removing the route: new sessions get nothing.
    gw.remove("changing.yaml");
    assert!(
        eventually(limit, || async {
            fresh(changing, "gone", Duration::from_millis(200))
                .await
                .is_none()
        })
        .await,
        "removed UDPRoute still answered"
    );
    stop.store(true, Ordering::Relaxed);
    let (ok, failed) = looper.await.unwrap();
    assert!(ok > 0);
    assert!(
        failed.is_empty(),
        "{} lost or wrong replies during changes, first: {:?}",
        failed.len(),
        failed.first()
    );
    let sessions = metric(
        &gw,
        "weir_l4_udp_sessions_total{gateway=\"default/gw\",listener=\"stable\"}",
    )
    .await;
    assert_eq!(sessions, 1, "the looping client kept one session");
    gw.gw.stop().await;
}
