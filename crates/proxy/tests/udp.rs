//! UDP listeners on real sockets with hand-built IR: replies come back from the
//! listener's address, each client address is one session, sessions past the listener's
//! connection limit are refused and counted, and idle sessions end (freeing their place).

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use support::*;
use tokio::net::UdpSocket;
use weir_model::{
    ClusterKey, HostMatch, L4Backend, L4Route, ListenerSettings, Protocol, Resource, RouteKind,
    RouteRef, UpstreamProtocol,
};
use weir_proxy::{DataPlane, ProxyConfig};

async fn udp_echo(label: &'static str) -> SocketAddr {
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

fn route(clusters: &[(&str, u32)]) -> Resource {
    Resource::L4Route(Arc::new(L4Route::new(
        key(),
        HostMatch::ANY,
        RouteRef {
            kind: RouteKind::UdpRoute,
            namespace: "test".into(),
            name: "u".into(),
            rule: 0,
        },
        clusters
            .iter()
            .map(|(c, w)| L4Backend {
                cluster: ClusterKey((*c).into()),
                weight: *w,
            })
            .collect(),
    )))
}

/// Sends `msg` from `sock` to `to`; the answer from `to` within `wait`, if any.
async fn exchange(sock: &UdpSocket, to: SocketAddr, msg: &str, wait: Duration) -> Option<String> {
    sock.send_to(msg.as_bytes(), to).await.ok()?;
    let mut buf = vec![0u8; 65_536];
    let run = async {
        loop {
            let (n, from) = sock.recv_from(&mut buf).await.ok()?;
            if from == to {
                return Some(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
    };
    tokio::time::timeout(wait, run).await.ok().flatten()
}

fn metric(registry: &Registry, sample: &str) -> u64 {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
    out.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

async fn until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

const LABELS: &str = "{gateway=\"test/gw\",listener=\"web\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_sessions_relay_are_capped_and_expire() {
    let echo = udp_echo("e").await;
    let mut registry = Registry::default();
    let config = ProxyConfig {
        drain_timeout: Duration::from_secs(2),
        // Short, so that the test sees sessions end; what is asserted is only that they do.
        udp_session_idle_timeout: Duration::from_secs(1),
        ..ProxyConfig::default()
    };
    let dp = DataPlane::new(config, &mut registry).expect("workers");
    let mut settings = ListenerSettings::default();
    settings.limits.max_connections = 2;
    let report = dp
        .apply(&upserts(vec![
            listener_with(Protocol::Udp, settings),
            cluster("c", &[echo], UpstreamProtocol::Http1),
            route(&[("c", 1)]),
        ]))
        .await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    let addr = dp.bound_addr(&key()).expect("bound");
    let wait = Duration::from_secs(5);

    // Two clients, two sessions; each gets its replies from the listener's address.
    let (a, b, c) = (
        UdpSocket::bind("127.0.0.1:0").await.unwrap(),
        UdpSocket::bind("127.0.0.1:0").await.unwrap(),
        UdpSocket::bind("127.0.0.1:0").await.unwrap(),
    );
    assert_eq!(exchange(&a, addr, "1", wait).await.as_deref(), Some("e:1"));
    assert_eq!(exchange(&b, addr, "2", wait).await.as_deref(), Some("e:2"));
    assert_eq!(exchange(&a, addr, "3", wait).await.as_deref(), Some("e:3"));
    let open = format!("weir_l4_udp_open_sessions{LABELS}");
    assert_eq!(metric(&registry, &open), 2);
    assert_eq!(
        metric(&registry, &format!("weir_l4_udp_sessions_total{LABELS}")),
        2
    );

    // A third client is past the limit: dropped and counted.
    // (Only sent: waiting for a reply that never comes could outlast the idle timeout.)
    c.send_to(b"4", addr).await.unwrap();
    let refused = format!("weir_l4_udp_sessions_refused_total{LABELS}");
    assert!(
        until(wait, || metric(&registry, &refused) >= 1).await,
        "refused session not counted"
    );
    assert_eq!(metric(&registry, &open), 2);

    // Idle sessions end and give their places back: the third client gets in.
    assert!(
        until(wait, || metric(&registry, &open) == 0).await,
        "idle sessions did not end"
    );
    assert_eq!(exchange(&c, addr, "5", wait).await.as_deref(), Some("e:5"));
    // Counted right after the send that the client may already have read.
    let sent = format!("weir_l4_udp_datagrams_sent_total{LABELS}");
    assert!(until(wait, || metric(&registry, &sent) >= 4).await);
    assert!(metric(&registry, &format!("weir_l4_received_bytes_total{LABELS}")) >= 5);

    // No route: datagrams are dropped and counted.
    let unrouted = format!("weir_l4_udp_unrouted_datagrams_total{LABELS}");
    let report = dp
        .apply(&weir_model::DeltaBatch {
            deltas: vec![weir_model::Delta::Remove(weir_model::ResourceKey::L4Route(
                key(),
                HostMatch::ANY,
            ))],
        })
        .await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    let d = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let _ = exchange(&d, addr, "6", Duration::from_millis(200)).await;
    assert!(
        until(wait, || metric(&registry, &unrouted) >= 1).await,
        "unrouted datagram not counted"
    );
    dp.shutdown().await;
}
