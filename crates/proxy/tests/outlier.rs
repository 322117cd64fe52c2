//! Endpoint state across requests: passive outlier detection ejects an endpoint that
//! keeps failing and lets it back when it recovers; errors to gRPC clients are gRPC
//! statuses.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;
use weir_model::{
    BackendKind, Ejection, OutlierDetection, Policy, PolicyTarget, Protocol, Resource, Timeouts,
    UpstreamProtocol,
};

/// Four endpoints, one answering 503: round robin would send it a quarter of the
/// requests; outlier detection ejects it after 5 failures in a row, and once it answers
/// again it gets its share back.
#[tokio::test]
async fn failing_endpoint_is_ejected_and_readmitted() {
    let a = Switchable::start("a").await;
    let b = Switchable::start("b").await;
    let c = Switchable::start("c").await;
    let bad = Switchable::start("bad").await;
    bad.fail(true);
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("o.test"), vec![rule("/", forward(&[("c", 1)]))]),
        cluster(
            "c",
            &[a.addr, b.addr, bad.addr, c.addr],
            UpstreamProtocol::Http1,
        ),
    ])
    .await;
    let mut conn = Conn::h1(p.addr).await;
    let mut errors = 0;
    let started = Instant::now();
    for _ in 0..400 {
        if conn.get("o.test", "/").await.status != 200 {
            errors += 1;
        }
    }
    // Sequential requests: the 5 failures in a row that eject it, then one failure per
    // ejection's end (each ejection lasts at least 0.5 s); round robin would give 100.
    let ejections_ended = (started.elapsed().as_millis() / 500) as usize;
    eprintln!("{errors} of 400 requests failed in {:?}", started.elapsed());
    assert!(
        errors <= 5 + ejections_ended && errors < 50,
        "{errors} of 400 requests failed in {:?}",
        started.elapsed()
    );
    assert_eq!(
        errors,
        bad.served(),
        "every failure came from the failing endpoint"
    );
    assert!(p.metric("weir_upstream_ejections_total") >= 1);

    // Recovered: it gets traffic again once its ejection (at most 2 s) ends.
    bad.fail(false);
    let before = bad.served();
    let recovered = Instant::now();
    while bad.served() == before && recovered.elapsed() < Duration::from_secs(10) {
        assert_eq!(conn.get("o.test", "/").await.status, 200);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        bad.served() > before,
        "the recovered endpoint got no traffic"
    );
    eprintln!("readmitted {:?} after recovering", recovered.elapsed());
    // And, being healthy, its full share.
    let before = bad.served();
    for _ in 0..100 {
        assert_eq!(conn.get("o.test", "/").await.status, 200);
    }
    let share = bad.served() - before;
    assert!((20..=30).contains(&share), "{share} of 100 after recovery");
    assert_eq!(p.metric("weir_upstream_ejected_endpoints"), 0);
}

/// Outlier detection never ejects more than half of a cluster: with every endpoint
/// failing, clients see the backends' own answers rather than weir's 503.
#[tokio::test]
async fn at_most_half_of_a_cluster_is_ejected() {
    let a = Switchable::start("a").await;
    let b = Switchable::start("b").await;
    a.fail(true);
    b.fail(true);
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("o.test"), vec![rule("/", forward(&[("c", 1)]))]),
        cluster("c", &[a.addr, b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let mut conn = Conn::h1(p.addr).await;
    for _ in 0..50 {
        let r = conn.get("o.test", "/").await;
        assert_eq!((r.status, r.body.as_str()), (503, "failing\n"));
    }
    assert_eq!(a.served() + b.served(), 50);
    assert_eq!(p.metric("weir_upstream_ejected_endpoints"), 1);
    assert!(p.metric("weir_upstream_ejections_refused_total") >= 1);
}

/// A gRPC request that weir cannot serve gets a gRPC status (HTTP 200, `grpc-status`),
/// which is what gRPC clients read; others get the HTTP status.
#[tokio::test]
async fn grpc_requests_get_grpc_errors() {
    let refused = refused_addr().await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(
            Some("g.test"),
            vec![rule("/svc.Refused", forward(&[("refused", 1)]))],
        ),
        cluster("refused", &[refused], UpstreamProtocol::H2c),
    ])
    .await;
    let mut conn = Conn::h2c(p.addr).await;
    let grpc = [("content-type", "application/grpc"), ("te", "trailers")];
    let cases = [("/svc.Missing/Call", "12"), ("/svc.Refused/Call", "14")];
    for (path, code) in cases {
        let r = conn
            .request(http::Method::POST, "g.test", path, &grpc)
            .await;
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.headers["grpc-status"], code, "{path}");
        assert_eq!(r.headers["content-type"], "application/grpc");
        let plain = conn.get("g.test", path).await;
        assert!(plain.status >= 400, "{path}: {}", plain.status);
        assert!(plain.headers.get("grpc-status").is_none());
    }
}

const APP: &str = "service/default/app:80";

/// The policy of Service `default/app` with these outlier-detection settings.
fn outlier_policy(o: OutlierDetection) -> Resource {
    let target = PolicyTarget::Backend {
        kind: BackendKind::Service,
        namespace: "default".into(),
        name: "app".into(),
    };
    Resource::Policy(Arc::new(
        Policy::new(target, Timeouts::default(), None, None).with_outlier_detection(Some(o)),
    ))
}

/// Ejections that outlast the test, so that every failure after an ejection would be a
/// wrong pick rather than a readmission.
fn long(f: impl FnOnce(&mut Ejection)) -> OutlierDetection {
    let mut e = Ejection {
        base_ejection: Duration::from_secs(600),
        max_ejection: Duration::from_secs(600),
        ..Ejection::default()
    };
    f(&mut e);
    OutlierDetection {
        ejection: Some(e),
        panic_threshold_percent: 0,
    }
}

async fn requests(p: &Proxy, n: usize) -> usize {
    let mut conn = Conn::h1(p.addr).await;
    let mut errors = 0;
    for _ in 0..n {
        if conn.get("o.test", "/").await.status != 200 {
            errors += 1;
        }
    }
    errors
}

/// A Service policy's `consecutive5xx: 1` ejects an endpoint answering 500 after its
/// first answer; without a policy, a 500 is an answer like any other and the endpoint
/// keeps its share (weir's default counts only gateway errors).
#[tokio::test]
async fn one_5xx_ejects_under_a_tuned_policy_and_never_by_default() {
    const ERROR: &[u8] =
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
    for tuned in [true, false] {
        let a = Switchable::start("a").await;
        let b = Switchable::start("b").await;
        let c = Switchable::start("c").await;
        let (bad, task) = raw_backend(ERROR, 200).await;
        let mut resources = vec![
            listener(Protocol::Http),
            vhost(Some("o.test"), vec![rule("/", forward(&[(APP, 1)]))]),
            cluster(APP, &[a.addr, b.addr, bad, c.addr], UpstreamProtocol::Http1),
        ];
        if tuned {
            resources.push(outlier_policy(long(|e| e.consecutive_5xx = 1)));
        }
        let p = Proxy::start(resources).await;
        let errors = requests(&p, 100).await;
        if tuned {
            assert_eq!(errors, 1, "ejected after its first 500");
            assert_eq!(p.metric("weir_upstream_ejections_total"), 1);
        } else {
            assert!(errors >= 20, "{errors} of 100: its full share");
            assert_eq!(p.metric("weir_upstream_ejections_total"), 0);
        }
        task.abort();
    }
}

/// `consecutiveGatewayErrors: 1` ejects a 503-answering endpoint at once, where the
/// default needs five in a row; `enabled: false` never ejects it.
#[tokio::test]
async fn gateway_error_threshold_and_detection_off() {
    let cases = [
        (Some(long(|e| e.consecutive_gateway_errors = 1)), 1..=1),
        (Some(long(|_| {})), 5..=5),
        (
            Some(OutlierDetection {
                ejection: None,
                panic_threshold_percent: 0,
            }),
            20..=30,
        ),
    ];
    for (outlier, expected) in cases {
        let a = Switchable::start("a").await;
        let b = Switchable::start("b").await;
        let c = Switchable::start("c").await;
        let bad = Switchable::start("bad").await;
        bad.fail(true);
        let mut resources = vec![
            listener(Protocol::Http),
            vhost(Some("o.test"), vec![rule("/", forward(&[(APP, 1)]))]),
            cluster(
                APP,
                &[a.addr, b.addr, bad.addr, c.addr],
                UpstreamProtocol::Http1,
            ),
        ];
        resources.extend(outlier.map(outlier_policy));
        let p = Proxy::start(resources).await;
        let errors = requests(&p, 100).await;
        assert!(expected.contains(&errors), "{errors} not in {expected:?}");
        assert_eq!(errors, bad.served());
    }
}

/// Three of four endpoints refuse connections and are ejected after one connect failure
/// each (every one may be ejected). With a panic threshold of 50 %, one available
/// endpoint of four is too few: traffic is spread over all four again, failures
/// included. With the default threshold of 0, the available one takes everything.
#[tokio::test]
async fn below_the_panic_threshold_traffic_goes_to_every_endpoint() {
    for panic in [50, 0] {
        let good = Switchable::start("good").await;
        let mut addrs = vec![good.addr];
        for _ in 0..3 {
            addrs.push(refused_addr().await);
        }
        let mut outlier = long(|e| {
            e.consecutive_gateway_errors = 0;
            e.consecutive_local_origin_failures = 1;
            e.max_ejected_percent = 100;
        });
        outlier.panic_threshold_percent = panic;
        let p = Proxy::start(vec![
            listener(Protocol::Http),
            vhost(Some("o.test"), vec![rule("/", forward(&[(APP, 1)]))]),
            cluster(APP, &addrs, UpstreamProtocol::Http1),
            outlier_policy(outlier),
        ])
        .await;
        let errors = requests(&p, 100).await;
        if panic == 50 {
            assert!(errors >= 40, "{errors} of 100 failed: spread over all four");
        } else {
            assert!(
                errors <= 3,
                "{errors} of 100 failed: one per refusing endpoint"
            );
            assert_eq!(good.served(), 100 - errors);
        }
        assert_eq!(p.metric("weir_upstream_ejected_endpoints"), 3);
    }
}
