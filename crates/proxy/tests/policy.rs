//! Policies in the data plane: a Gateway-wide local rate limit answers 429 (HTTP and
//! gRPC shapes) per key, and a route policy's retry applies to a rule without its own.

mod support;

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use support::*;
use weir_model::{
    Delta, DeltaBatch, LocalRateLimit, Policy, PolicyTarget, Protocol, RateLimitKey, Resource,
    Retry, RouteKind, Timeouts, UpstreamProtocol,
};

fn limit_policy(target: PolicyTarget, burst: u32, key: RateLimitKey) -> Resource {
    Resource::Policy(Arc::new(Policy::new(
        target,
        Timeouts::default(),
        None,
        Some((
            "test/limit".into(),
            LocalRateLimit {
                // One request an hour comes back: nothing refills during the test.
                requests: 1,
                per: Duration::from_secs(3600),
                burst,
                key,
            },
        )),
    )))
}

fn gateway() -> PolicyTarget {
    PolicyTarget::Gateway("test/gw".into())
}

#[tokio::test]
async fn a_gateway_rate_limit_answers_429_per_key() {
    let backend = Backend::start("b").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("r.test"), vec![rule("/", forward(&[("c", 1)]))]),
        cluster("c", &[backend.addr], UpstreamProtocol::Http1),
        limit_policy(gateway(), 3, RateLimitKey::Header("x-api-key".into())),
    ])
    .await;
    let mut c = Conn::h1(p.addr).await;
    async fn get(c: &mut Conn, key: &str) -> Resp {
        c.request(Method::GET, "r.test", "/", &[("x-api-key", key)])
            .await
    }
    for i in 0..3 {
        assert_eq!(get(&mut c, "alice").await.status, 200, "request {i}");
    }
    let r = get(&mut c, "alice").await;
    assert_eq!(r.status, 429);
    let retry_after: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((3000..=3600).contains(&retry_after), "{retry_after}");
    assert_eq!(r.headers["ratelimit-limit"], "3");
    assert_eq!(r.headers["ratelimit-remaining"], "0");
    // Another key has its own budget.
    assert_eq!(get(&mut c, "bob").await.status, 200);
    // A gRPC request is refused the gRPC way.
    let r = c
        .request(
            Method::POST,
            "r.test",
            "/pkg.Svc/Call",
            &[("x-api-key", "alice"), ("content-type", "application/grpc")],
        )
        .await;
    assert_eq!(
        (r.status, r.headers["grpc-status"].to_str().unwrap()),
        (200, "8")
    );
    assert_eq!(p.metric("weir_ratelimit_limited_total"), 2);

    // Removing the policy lifts the limit at once; the next apply that brings it back
    // finds the bucket as it was (state lives beside the snapshot, keyed by target).
    let remove = DeltaBatch {
        deltas: vec![Delta::Remove(weir_model::ResourceKey::policy(gateway()))],
    };
    p.dp.apply(&remove).await;
    assert_eq!(get(&mut c, "alice").await.status, 200);
    p.dp.apply(&upserts(vec![limit_policy(
        gateway(),
        3,
        RateLimitKey::Header("x-api-key".into()),
    )]))
    .await;
    assert_eq!(get(&mut c, "alice").await.status, 429);
}

/// A route's policy gives its rules retries; a rule-level policy overrides it for that
/// rule; neither touches the route.
#[tokio::test]
async fn a_route_policy_retries_and_a_rule_policy_overrides_it() {
    let a = Switchable::start("a").await;
    let b = Switchable::start("b").await;
    a.fail(true);
    b.fail(true);
    let r = rule("/", forward(&[("c", 1)]));
    let retry = |attempts| {
        Some(Retry {
            attempts,
            codes: vec![503],
            backoff: Duration::from_millis(1),
            ..Retry::default()
        })
    };
    let route_policy = |attempts| {
        Resource::Policy(Arc::new(Policy::new(
            PolicyTarget::Route {
                kind: RouteKind::HttpRoute,
                namespace: "default".into(),
                name: "r".into(),
            },
            Timeouts::default(),
            retry(attempts),
            None,
        )))
    };
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("r.test"), vec![r.clone()]),
        cluster("c", &[a.addr, b.addr], UpstreamProtocol::Http1),
        route_policy(1),
    ])
    .await;
    let mut c = Conn::h1(p.addr).await;
    let served = || a.served() + b.served();
    assert_eq!(c.get("r.test", "/").await.status, 503);
    assert_eq!(served(), 2, "one attempt and the route policy's one retry");
    p.dp.apply(&upserts(vec![Resource::Policy(Arc::new(Policy::new(
        PolicyTarget::Rule(r.route.clone()),
        Timeouts::default(),
        retry(3),
        None,
    )))]))
    .await;
    assert_eq!(c.get("r.test", "/").await.status, 503);
    assert_eq!(served(), 6, "the rule policy's three retries");
}
