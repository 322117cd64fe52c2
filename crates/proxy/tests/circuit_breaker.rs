//! Circuit breaking against real backends on 127.0.0.1: requests over a Service's
//! limits are answered 503 at once, naming the limit (gRPC requests get UNAVAILABLE),
//! while the requests within the limits are still in flight; an endpoint at its own
//! limit is passed over for one with room.

mod support;

use std::sync::Arc;

use http::Method;
use support::*;
use weir_model::{
    BackendKind, CircuitBreaker, Limits, Policy, PolicyTarget, Protocol, Resource, Timeouts,
    UpstreamProtocol,
};

const APP: &str = "service/default/app:80";

fn breaker(b: CircuitBreaker) -> Resource {
    let target = PolicyTarget::Backend {
        kind: BackendKind::Service,
        namespace: "default".into(),
        name: "app".into(),
    };
    Resource::Policy(Arc::new(
        Policy::new(target, Timeouts::default(), None, None).with_circuit_breaker(Some(b)),
    ))
}

async fn proxy(backends: &[&Backend], protocol: UpstreamProtocol, b: CircuitBreaker) -> Proxy {
    let addrs: Vec<_> = backends.iter().map(|b| b.addr).collect();
    Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("app.test"), vec![rule("/", forward(&[(APP, 1)]))]),
        cluster(APP, &addrs, protocol),
        breaker(b),
    ])
    .await
}

/// Starts `n` requests for `/slow` (the backend answers after 1 s) on connections of
/// their own, and waits until the backends have accepted them.
async fn hold(p: &Proxy, backends: &[&Backend], n: usize) -> Vec<tokio::task::JoinHandle<Resp>> {
    let before: usize = backends.iter().map(|b| b.connections()).sum();
    let addr = p.addr;
    let held: Vec<_> = (0..n)
        .map(|_| {
            tokio::spawn(async move {
                let mut c = Conn::h1(addr).await;
                c.get("app.test", "/slow").await
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + STEP;
    while backends.iter().map(|b| b.connections()).sum::<usize>() < before + n {
        assert!(std::time::Instant::now() < deadline, "requests not held");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    held
}

#[tokio::test]
async fn requests_over_the_cluster_limit_are_refused_at_once() {
    let a = Backend::start("a").await;
    let p = proxy(
        &[&a],
        UpstreamProtocol::Http1,
        CircuitBreaker {
            cluster: Limits {
                max_requests: Some(2),
                ..Limits::default()
            },
            ..CircuitBreaker::default()
        },
    )
    .await;
    let held = hold(&p, &[&a], 2).await;
    let mut c = Conn::h1(p.addr).await;
    let r = c.get("app.test", "/").await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.headers["weir-circuit-open"], "cluster_max_requests");
    assert!(r.body.contains("cluster max requests"), "{}", r.body);
    assert!(
        held.iter().all(|h| !h.is_finished()),
        "refused while the admitted requests were still in flight"
    );
    // A gRPC request gets the gRPC shape.
    let mut g = Conn::h2c(p.addr).await;
    let r = g
        .request(
            Method::POST,
            "app.test",
            "/echo.Echo/Say",
            &[("content-type", "application/grpc")],
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["grpc-status"], "14", "UNAVAILABLE");
    assert_eq!(r.headers["weir-circuit-open"], "cluster_max_requests");
    assert_eq!(
        p.metric("weir_upstream_circuit_open_total{reason=\"cluster_max_requests\"}"),
        2
    );
    for h in held {
        assert_eq!(h.await.unwrap().status, 200);
    }
    // Room again.
    assert_eq!(c.get("app.test", "/").await.status, 200);
    // A refusal is no failure of the endpoint: nothing was ejected.
    assert_eq!(p.metric("weir_upstream_ejections_total"), 0);
}

#[tokio::test]
async fn an_endpoint_at_its_limit_is_passed_over_then_refused() {
    let (a, b) = (Backend::start("a").await, Backend::start("b").await);
    let p = proxy(
        &[&a, &b],
        UpstreamProtocol::Http1,
        CircuitBreaker {
            endpoint: Limits {
                max_requests: Some(1),
                ..Limits::default()
            },
            ..CircuitBreaker::default()
        },
    )
    .await;
    // Two held requests: one on each endpoint (the second pick passes over the full one).
    let held = hold(&p, &[&a, &b], 2).await;
    assert_eq!((a.connections(), b.connections()), (1, 1));
    let mut c = Conn::h1(p.addr).await;
    let r = c.get("app.test", "/").await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.headers["weir-circuit-open"], "endpoint_max_requests");
    for h in held {
        assert_eq!(h.await.unwrap().status, 200);
    }
    assert_eq!(c.get("app.test", "/").await.status, 200);
}

#[tokio::test]
async fn connections_bound_http1_requests_in_flight() {
    let a = Backend::start("a").await;
    let p = proxy(
        &[&a],
        UpstreamProtocol::Http1,
        CircuitBreaker {
            endpoint: Limits {
                max_connections: Some(3),
                ..Limits::default()
            },
            ..CircuitBreaker::default()
        },
    )
    .await;
    let held = hold(&p, &[&a], 3).await;
    let r = Conn::h1(p.addr).await.get("app.test", "/").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.headers["weir-circuit-open"], "endpoint_max_connections");
    assert_eq!(a.connections(), 3, "no fourth upstream connection");
    for h in held {
        assert_eq!(h.await.unwrap().status, 200);
    }
    // The three connections are reused; no new one is needed.
    let mut c = Conn::h1(p.addr).await;
    for _ in 0..10 {
        assert_eq!(c.get("app.test", "/").await.status, 200);
    }
    assert!(a.connections() <= 3, "{}", a.connections());
}
