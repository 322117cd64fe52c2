//! Endpoint state across requests: passive outlier detection ejects an endpoint that
//! keeps failing and lets it back when it recovers; errors to gRPC clients are gRPC
//! statuses.

mod support;

use std::time::{Duration, Instant};

use support::*;
use weir_model::{Protocol, UpstreamProtocol};

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
