//! Retries (HTTPRoute `retry`): failed attempts go to another endpoint, within the
//! attempts, the request timeout and the retry budget, with their bodies up to the
//! retry's limit, and only when the method allows it.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use support::*;
use tokio::io::AsyncWriteExt;
use weir_model::{Protocol, Retry, RouteRule, UpstreamProtocol};

fn with_retry(rule: Arc<RouteRule>, attempts: u32, codes: &[u16]) -> Arc<RouteRule> {
    Arc::new((*rule).clone().with_retry(Some(Retry {
        attempts,
        codes: codes.to_vec(),
        backoff: Duration::from_millis(1),
        ..Retry::default()
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

/// Retries stop after `attempts`; a request of a method that is not idempotent (POST)
/// answered 503 is sent once, an idempotent one with a body (PUT) is retried with it.
#[tokio::test]
async fn attempts_are_bounded_and_only_idempotent_requests_are_retried_after_an_answer() {
    let (p, a, b) = failing_pair(2).await;
    let mut c = Conn::h1(p.addr).await;
    let served = || a.served() + b.served();
    let r = c.get("r.test", "/").await;
    assert_eq!(r.status, 503);
    assert_eq!(served(), 3, "one attempt and two retries");
    let r = c.post("r.test", "/", Bytes::from_static(b"payload")).await;
    assert_eq!(r.status, 503);
    assert_eq!(served(), 4, "a POST answered 503 is sent once");
    let r = c
        .with_body(Method::PUT, "r.test", "/", Bytes::from_static(b"payload"))
        .await;
    assert_eq!(r.status, 503);
    assert_eq!(served(), 7, "a PUT is retried, body and all");
}

/// A body up to the retry's limit is kept and sent whole by the retry that succeeds; a
/// POST is retried too when the retry allows it (`non_idempotent`), and after a connect
/// failure (it never reached an endpoint) whatever the retry says.
#[tokio::test]
async fn bodies_up_to_the_limit_are_sent_again() {
    let good = Switchable::start("good").await;
    let bad = Switchable::start("bad").await;
    bad.fail(true);
    let refused = refused_addr().await;
    let any_method = |rule: Arc<RouteRule>| {
        let retry = rule.retry.clone().expect("a retry");
        Arc::new((*rule).clone().with_retry(Some(Retry {
            non_idempotent: true,
            ..*retry
        })))
    };
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(
            Some("r.test"),
            vec![
                with_retry(rule("/put", forward(&[("c503", 1)])), 3, &[503]),
                any_method(with_retry(
                    rule("/post", forward(&[("c503", 1)])),
                    3,
                    &[503],
                )),
                with_retry(rule("/connect", forward(&[("refused", 1)])), 3, &[]),
            ],
        ),
        cluster("c503", &[bad.addr, good.addr], UpstreamProtocol::Http1),
        cluster("refused", &[refused, good.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let body: Bytes = (0..60_000u32)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    let expected = format!(
        "backend=good\nbody-len={}\nbody-sum={}\n",
        body.len(),
        checksum(&body)
    );
    for conn in [Conn::h1(p.addr).await, Conn::h2c(p.addr).await] {
        let mut c = conn;
        for (method, path) in [
            (Method::PUT, "/put"),
            (Method::POST, "/post"),
            (Method::POST, "/connect"),
        ] {
            for i in 0..10 {
                let r = c
                    .with_body(method.clone(), "r.test", path, body.clone())
                    .await;
                assert_eq!(
                    (r.status, r.body.as_str()),
                    (200, expected.as_str()),
                    "{method} {path} #{i}"
                );
            }
        }
    }
    assert!(bad.served() >= 1, "the failing endpoint was tried");
}

/// A body longer than the retry's limit is streamed to the first endpoint and not sent
/// again.
#[tokio::test]
async fn bodies_over_the_limit_are_sent_once() {
    let (p, a, b) = failing_pair(2).await;
    let mut c = Conn::h1(p.addr).await;
    let served = || a.served() + b.served();
    let big = Bytes::from(vec![7u8; (Retry::DEFAULT_REPLAY_BODY + 1) as usize]);
    let r = c.with_body(Method::PUT, "r.test", "/", big).await;
    assert_eq!(r.status, 503);
    assert_eq!(served(), 1, "one attempt: the body was not kept");
    let small = Bytes::from(vec![7u8; Retry::DEFAULT_REPLAY_BODY as usize]);
    let r = c.with_body(Method::PUT, "r.test", "/", small).await;
    assert_eq!(r.status, 503);
    assert_eq!(served(), 4, "a body of exactly the limit is kept");
}

/// The first attempt does not wait for the body: an endpoint sees the request while the
/// client is still sending it (a streaming call is never held back for retries).
#[tokio::test]
async fn a_retried_request_streams_its_body_to_the_first_attempt() {
    let (p, a, b) = failing_pair(2).await;
    a.fail(false);
    b.fail(false);
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    s.write_all(
        b"PUT / HTTP/1.1\r\nhost: r.test\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n",
    )
    .await
    .unwrap();
    let arrived = async {
        while a.served() + b.served() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(STEP, arrived)
        .await
        .expect("the request reached an endpoint before its body ended");
    s.write_all(b"6\r\n world\r\n0\r\n\r\n").await.unwrap();
    let resp = read_raw_response(&mut s).await.expect("a response");
    assert_eq!(resp.status, 200);
    let body = String::from_utf8_lossy(&resp.body);
    assert!(
        body.ends_with(&format!(
            "body-len=11\nbody-sum={}\n",
            checksum(b"hello world")
        )),
        "{body}"
    );
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

/// A retried request keeps what its first attempt was sent with: an actual CORS request
/// whose first endpoint answers 503 gets the other's answer with the CORS headers.
#[tokio::test]
async fn a_retried_answer_keeps_its_cors_headers() {
    use weir_model::{Cors, CorsNames, CorsOrigin, Filter, RouteKind, RouteRef, Timeouts};
    let good = Switchable::start("good").await;
    let bad = Switchable::start("bad").await;
    bad.fail(true);
    let cors = Cors {
        allow_origins: vec![CorsOrigin::Exact("https://app.test".into())],
        allow_methods: CorsNames::Any,
        allow_headers: CorsNames::Any,
        expose_headers: CorsNames::Listed(vec!["x-trace".into()]),
        allow_credentials: false,
        max_age: 5,
    };
    let with_cors = Arc::new(RouteRule::new(
        RouteRef {
            kind: RouteKind::HttpRoute,
            namespace: "default".into(),
            name: "cors".into(),
            rule: 0,
        },
        weir_model::RequestMatch {
            path: weir_model::PathMatch::Prefix("/".into()),
            headers: vec![],
            query: vec![],
            method: None,
        },
        vec![Filter::Cors(Arc::new(cors))],
        forward(&[("c", 1)]),
        Timeouts::default(),
    ));
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("r.test"), vec![with_retry(with_cors, 2, &[503])]),
        cluster("c", &[bad.addr, good.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let mut c = Conn::h1(p.addr).await;
    for i in 0..6 {
        let r = c
            .request(
                Method::GET,
                "r.test",
                "/",
                &[("origin", "https://app.test")],
            )
            .await;
        assert_eq!(r.status, 200, "#{i}");
        assert_eq!(
            r.headers.get("access-control-allow-origin").unwrap(),
            "https://app.test",
            "#{i}"
        );
        assert_eq!(
            r.headers.get("access-control-expose-headers").unwrap(),
            "x-trace",
            "#{i}"
        );
    }
    assert!(bad.served() >= 1, "some first attempts were answered 503");
}
