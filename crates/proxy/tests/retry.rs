//! Retries (HTTPRoute `retry`): failed attempts of requests without a body go to
//! another endpoint, within the attempts, the request timeout and the retry budget.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use support::*;
use weir_model::{Protocol, Retry, RouteRule, UpstreamProtocol};

fn with_retry(rule: Arc<RouteRule>, attempts: u32, codes: &[u16]) -> Arc<RouteRule> {
    Arc::new((*rule).clone().with_retry(Some(Retry {
        attempts,
        codes: codes.to_vec(),
        backoff: Duration::from_millis(1),
    })))
}

/// A proxy whose route `r.test/` retries 503s `attempts` times, to a cluster of two
/// endpoints that both answer 503.
async fn failing_pair(attempts: u32) -> (Proxy, Switchable, Switchable) {
    let a = Switchable::start("a").await;
    let b = Switchable::start("b").await;
    a.fail(true);
    b.fail(true);
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(
            Some("r.test"),
            vec![with_retry(
                rule("/", forward(&[("c", 1)])),
                attempts,
                &[503],
            )],
        ),
        cluster("c", &[a.addr, b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    (p, a, b)
}

/// One endpoint of two answers 503: with retries on 503, clients never see it.
#[tokio::test]
async fn failed_attempts_are_retried_on_another_endpoint() {
    let good = Switchable::start("good").await;
    let bad = Switchable::start("bad").await;
    bad.fail(true);
    let refused = refused_addr().await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(
            Some("r.test"),
            vec![
                with_retry(rule("/codes", forward(&[("c503", 1)])), 2, &[503]),
                with_retry(rule("/connect", forward(&[("refused", 1)])), 2, &[]),
                rule("/none", forward(&[("c503", 1)])),
            ],
        ),
        cluster("c503", &[bad.addr, good.addr], UpstreamProtocol::Http1),
        cluster("refused", &[refused, good.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let mut c = Conn::h1(p.addr).await;
    for path in ["/codes", "/connect"] {
        for i in 0..50 {
            let r = c.get("r.test", path).await;
            assert_eq!(
                (r.status, r.body.as_str()),
                (200, "backend=good\n"),
                "{path} #{i}"
            );
        }
    }
    assert!(bad.served() >= 1, "the failing endpoint was tried");
    assert!(p.metric("weir_upstream_retries_total") >= 2);
    // Without a retry, its failures reach the client (until outlier detection ejects it).
    let before = bad.served();
    let mut seen_503 = false;
    for _ in 0..4 {
        seen_503 |= c.get("r.test", "/none").await.status == 503;
    }
    assert!(seen_503 || bad.served() == before);
}

/// Retries stop after `attempts`, and only requests without a body are retried.
#[tokio::test]
async fn attempts_are_bounded_and_bodies_are_not_replayed() {
    let (p, a, b) = failing_pair(2).await;
    let mut c = Conn::h1(p.addr).await;
    let served = || a.served() + b.served();
    let r = c.get("r.test", "/").await;
    assert_eq!(r.status, 503);
    assert_eq!(served(), 3, "one attempt and two retries");
    let r = c.post("r.test", "/", Bytes::from_static(b"payload")).await;
    assert_eq!(r.status, 503);
    assert_eq!(served(), 4, "a request with a body is sent once");
}

/// A backend that always fails gets a bounded share of retries: the budget allows 20 %
/// of the requests plus 10 a second (10 in reserve), not `attempts` times the load.
#[tokio::test]
async fn the_retry_budget_bounds_retries() {
    let (p, a, b) = failing_pair(3).await;
    let mut c = Conn::h1(p.addr).await;
    let started = std::time::Instant::now();
    for _ in 0..100 {
        assert_eq!(c.get("r.test", "/").await.status, 503);
    }
    let retries = p.metric("weir_upstream_retries_total");
    let attempts = a.served() + b.served();
    assert_eq!(attempts as u64, 100 + retries);
    // 10 in reserve, 20 % of 100, and 10 a second (plus one for the second started).
    let by_time = (started.elapsed().as_secs_f64() * 10.0).ceil() as u64 + 1;
    assert!(
        (20..=30 + by_time).contains(&retries),
        "{retries} retries for 100 requests in {:?}",
        started.elapsed()
    );
    assert!(p.metric("weir_upstream_retry_budget_exhausted_total") > 0);
}
