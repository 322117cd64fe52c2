//! TrafficPolicy `loadBalancer` from files, with real backends: a consistent hash on a
//! generated cookie (set on the first response, honoured after, falling through a dead
//! endpoint), changed live to the source IP; LatencyAware keeping traffic off a slow
//! endpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::support::*;

/// The Gateway and route of `policies.rs`, to Backend `a` with `endpoints`.
fn manifests(port: u16, endpoints: &[std::net::SocketAddr]) -> String {
    crate::policies::manifests(port, &backend("default", "a", endpoints))
}

fn policy(load_balancer: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: balance}}
spec:
  targetRefs: [{{group: weir.dev, kind: Backend, name: a}}]
  healthCheck: {{type: TCP, interval: 100ms, timeout: 100ms, unhealthyThreshold: 1}}
  loadBalancer: {load_balancer}
"
    )
}

async fn with_cookie(addr: std::net::SocketAddr, cookie: Option<&str>) -> Resp {
    let mut req = get("app.test", "/");
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    send_http1(addr, req.body(http_body_util::Empty::new()).unwrap())
        .await
        .unwrap()
}

fn metric(metrics: &str, sample: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// A consistent hash on a cookie weir generates: the first response sets it, and
/// requests carrying it stay on one endpoint; requests whose key belongs to the Backend's
/// dead endpoint (taken out by a TCP health check) go to another, still one per key.
/// Edited live to the source IP, every request of this client goes to one endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consistent_hash_keeps_each_session_on_one_endpoint() {
    let port = free_port();
    let mut eps = Vec::new();
    for name in ["a", "b", "c", "d"] {
        eps.push(echo(name).await);
    }
    let dead = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    eps.push(dead);
    let cookie = "{type: ConsistentHash, consistentHash: {type: Cookie, cookie: \
                  {name: weir-s, generate: true, ttl: 1h}}}";
    let gw = Gateway::start(&[
        ("app.yaml", manifests(port, &eps)),
        ("policy.yaml", policy(cookie)),
    ])
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        eventually(Duration::from_secs(5), || async {
            let m = gw.admin_get("/metrics").await.body;
            metric(&m, "weir_upstream_unhealthy_endpoints") == Some(1.0)
        })
        .await,
        "the dead endpoint is taken out"
    );

    // The first response sets the cookie; the requests that send it back stay.
    let first = with_cookie(addr, None).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let set = first.headers["set-cookie"].to_str().unwrap().to_owned();
    assert!(set.starts_with("weir-s="), "{set}");
    assert!(set.contains("; Path=/; Max-Age=3600; HttpOnly"), "{set}");
    let value = set.split(';').next().unwrap().to_owned();
    let owner = first.echo_name().unwrap().to_owned();
    for _ in 0..20 {
        let r = with_cookie(addr, Some(&format!("other=1; {value}"))).await;
        assert_eq!(r.echo_name(), Some(owner.as_str()));
        assert!(r.headers.get("set-cookie").is_none(), "set once");
    }

    // Many sessions: each sticks to one endpoint, all of them answer (the dead
    // endpoint's keys fall through to the next on the ring), and they spread.
    let mut owners = BTreeMap::new();
    for k in 0..64 {
        let c = format!("weir-s=session-{k}");
        let names: BTreeSet<String> = {
            let mut s = BTreeSet::new();
            for _ in 0..3 {
                let r = with_cookie(addr, Some(&c)).await;
                assert_eq!(r.status, 200, "{}", r.body);
                s.insert(r.echo_name().unwrap().to_owned());
            }
            s
        };
        assert_eq!(names.len(), 1, "session {k} moved: {names:?}");
        *owners
            .entry(names.into_iter().next().unwrap())
            .or_insert(0u32) += 1;
    }
    assert!(owners.len() >= 3, "{owners:?}");
    let m = gw.admin_get("/metrics").await.body;
    assert!(
        metric(&m, "weir_upstream_hash_fallthrough_total").is_some_and(|n| n >= 1.0),
        "{m}"
    );
    assert!(
        metric(&m, "weir_upstream_hash_cookies_total").is_some_and(|n| n >= 1.0),
        "{m}"
    );

    // Live edit: by source IP, every request of this client (127.0.0.1) goes to one
    // endpoint, cookie or not, and no cookie is set.
    gw.write(
        "policy.yaml",
        &policy("{type: ConsistentHash, consistentHash: {type: SourceIP}}"),
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            let config = gw.admin_get("/config").await.body;
            config.contains("SourceIp")
        })
        .await,
        "the edit applies"
    );
    let mut names = BTreeSet::new();
    for k in 0..30 {
        let r = with_cookie(addr, Some(&format!("weir-s=session-{k}"))).await;
        assert_eq!(r.status, 200);
        assert!(r.headers.get("set-cookie").is_none());
        names.insert(r.echo_name().unwrap().to_owned());
    }
    assert_eq!(names.len(), 1, "{names:?}");
}

/// A backend answering after `delay`, with `x-echo-name: name`.
async fn slow(name: &'static str, delay: Duration) -> std::net::SocketAddr {
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let svc = service_fn(move |_req| async move {
                    tokio::time::sleep(delay).await;
                    http::Response::builder()
                        .header("x-echo-name", name)
                        .body(http_body_util::Full::new(bytes::Bytes::from_static(b"ok")))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// LatencyAware: of a fast and a slow endpoint (250 ms), the slow one gets few requests
/// once its answers are measured; plain round robin gives it half. (At 80 ms the test
/// failed now and then on a loaded machine: a scheduling stall of the fast endpoint's
/// answer is a sample above its estimate, which replaces the estimate at once, and a
/// stall of 80 ms or more made the fast endpoint look as slow as the slow one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_aware_keeps_traffic_off_a_slow_endpoint() {
    let port = free_port();
    let fast = slow("fast", Duration::ZERO).await;
    let slow = slow("slow", Duration::from_millis(250)).await;
    let gw = Gateway::start(&[
        ("app.yaml", manifests(port, &[fast, slow])),
        ("policy.yaml", policy("{type: RoundRobin}")),
    ])
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let share = || async {
        let mut n = 0;
        for _ in 0..40 {
            let r = http1(addr, "app.test", "/").await.unwrap();
            assert_eq!(r.status, 200);
            n += usize::from(r.echo_name() == Some("slow"));
        }
        n
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            gw.admin_get("/config").await.body.contains("RoundRobin")
        })
        .await
    );
    assert_eq!(share().await, 20, "round robin: one in two");
    gw.write("policy.yaml", &policy("{type: LatencyAware}"));
    assert!(
        eventually(Duration::from_secs(5), || async {
            gw.admin_get("/config").await.body.contains("LatencyAware")
        })
        .await
    );
    // Sequential requests: the slow endpoint is tried again only once its estimate has
    // faded below the fast one's (seconds without samples, see the proxy's latency.rs),
    // however slow this machine is; round robin gave it 20.
    let slow_share = share().await;
    assert!(slow_share <= 10, "{slow_share} of 40 to the slow endpoint");
}

/// Gateway API `sessionPersistence` from a file: a cookie session over a rule with two
/// Backends of two endpoints each keeps its backend and endpoint; a header session hands
/// out its value in the response header and keeps the requests that send it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_persistence_keeps_a_session_on_one_backend_and_endpoint() {
    let port = free_port();
    let mut names = Vec::new();
    for n in ["a1", "a2", "b1", "b2"] {
        names.push(echo(n).await);
    }
    let route = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
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
  - matches: [{{path: {{type: PathPrefix, value: /api}}}}]
    backendRefs: [{{group: weir.dev, kind: Backend, name: a}}, {{group: weir.dev, kind: Backend, name: b}}]
    sessionPersistence: {{type: Header, sessionName: x-session}}
  - backendRefs: [{{group: weir.dev, kind: Backend, name: a}}, {{group: weir.dev, kind: Backend, name: b}}]
    sessionPersistence:
      sessionName: app-session
      absoluteTimeout: 30m
      cookieConfig: {{lifetimeType: Permanent}}
---
{}---
{}",
        backend("default", "a", &names[..2]),
        backend("default", "b", &names[2..]),
    );
    let gw = Gateway::start(&[("app.yaml", route)]).await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let first = with_cookie(addr, None).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let set = first.headers["set-cookie"].to_str().unwrap().to_owned();
    assert!(set.starts_with("app-session="), "{set}");
    assert!(set.contains("; Max-Age=1800"), "{set}");
    let value = set.split(';').next().unwrap().to_owned();
    let owner = first.echo_name().unwrap().to_owned();
    for _ in 0..20 {
        let r = with_cookie(addr, Some(&value)).await;
        assert_eq!(r.echo_name(), Some(owner.as_str()), "the session moved");
    }
    // Sessions spread over both backends and all four endpoints.
    let mut seen = BTreeSet::new();
    for k in 0..64 {
        let r = with_cookie(addr, Some(&format!("app-session=s{k}"))).await;
        seen.insert(r.echo_name().unwrap().to_owned());
    }
    assert!(seen.len() >= 3, "{seen:?}");

    // The header session: the value comes back in x-session.
    let api = |session: Option<String>| async move {
        let mut req = get("app.test", "/api");
        if let Some(s) = session {
            req = req.header("x-session", s);
        }
        send_http1(addr, req.body(http_body_util::Empty::new()).unwrap())
            .await
            .unwrap()
    };
    let first = api(None).await;
    let token = first.headers["x-session"].to_str().unwrap().to_owned();
    let owner = first.echo_name().unwrap().to_owned();
    for _ in 0..20 {
        let r = api(Some(token.clone())).await;
        assert_eq!(r.echo_name(), Some(owner.as_str()));
        assert!(r.headers.get("x-session").is_none(), "handed out once");
    }
    let config = gw.admin_get("/config").await.body;
    assert!(config.contains("GeneratedHeader"), "{config}");
}
