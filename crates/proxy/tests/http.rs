//! End-to-end tests of plaintext listeners: HTTP/1.1 and h2c clients, forwarding,
//! local answers, error statuses, weights and configuration changes under traffic.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Version};
use support::*;
use weir_model::{
    Action, Delta, DeltaBatch, DirectResponse, PathRewrite, Protocol, Redirect, ResourceKey,
    Timeouts, UpstreamProtocol,
};

#[tokio::test]
async fn http1_keep_alive_reuses_one_upstream_connection() {
    let b = Backend::start("b1").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("a.test"), vec![rule("/", forward(&[("c1", 1)]))]),
        cluster("c1", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let mut c = Conn::h1(p.addr).await;
    for path in ["/one", "/two?x=1"] {
        let r = c.get("a.test", path).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.backend(), "b1");
        assert_eq!(r.field("path"), Some(path));
        assert_eq!(r.field("version"), Some("HTTP/1.1"));
        assert_eq!(r.field("host"), Some("a.test"));
    }
    assert_eq!(b.connections(), 1, "the upstream connection is reused");
    assert!(
        p.metrics().contains("weir_upstream_connections 1"),
        "{}",
        p.metrics()
    );
}

#[tokio::test]
async fn h2c_client_and_h2c_upstream() {
    let b = Backend::start("b1").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("a.test"), vec![rule("/", forward(&[("c1", 1)]))]),
        cluster("c1", &[b.addr], UpstreamProtocol::H2c),
    ])
    .await;
    let mut c = Conn::h2c(p.addr).await;
    for _ in 0..3 {
        let r = c.get("a.test:8080", "/h2").await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.version, Version::HTTP_2);
        assert_eq!(r.backend(), "b1");
        assert_eq!(r.field("version"), Some("HTTP/2.0"));
        // the client's :authority reaches the upstream as Host
        assert_eq!(r.field("host"), Some("a.test:8080"));
        assert_eq!(r.field("x-forwarded-host"), Some("a.test:8080"));
    }
    assert_eq!(
        b.connections(),
        1,
        "one multiplexed h2c upstream connection"
    );
}

#[tokio::test]
async fn request_bodies_are_forwarded() {
    let b = Backend::start("b1").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("h1.test"), vec![rule("/", forward(&[("c1", 1)]))]),
        vhost(Some("h2.test"), vec![rule("/", forward(&[("c2", 1)]))]),
        cluster("c1", &[b.addr], UpstreamProtocol::Http1),
        cluster("c2", &[b.addr], UpstreamProtocol::H2c),
    ])
    .await;
    let body: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let sum = checksum(&body).to_string();
    let body = bytes::Bytes::from(body);
    for mut c in [Conn::h1(p.addr).await, Conn::h2c(p.addr).await] {
        for host in ["h1.test", "h2.test"] {
            let r = c.post(host, "/upload", body.clone()).await;
            assert_eq!(r.status, 200, "{}", r.body);
            assert_eq!(r.field("body-len"), Some("1000000"), "{host}");
            assert_eq!(r.field("body-sum"), Some(sum.as_str()), "{host}");
        }
    }
}

#[tokio::test]
async fn error_statuses() {
    let refused = refused_addr().await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(
            Some("a.test"),
            vec![
                rule("/empty", forward(&[("empty", 1)])),
                rule("/refused", forward(&[("refused", 1)])),
                rule("/missing", forward(&[("nope", 1)])),
                rule("/zero", forward(&[("empty", 0)])),
            ],
        ),
        cluster("empty", &[], UpstreamProtocol::Http1),
        cluster("refused", &[refused], UpstreamProtocol::Http1),
    ])
    .await;
    let cases = [
        ("b.test", "/", 404, "no route"),
        ("a.test", "/other", 404, "no route"),
        ("a.test", "/empty", 503, "no healthy endpoints"),
        ("a.test", "/refused", 502, "upstream connect error"),
        ("a.test", "/missing", 500, "backend not found"),
        ("a.test", "/zero", 500, "backend not found"),
    ];
    let mut c = Conn::h1(p.addr).await;
    for (host, path, status, body) in cases {
        let r = c.get(host, path).await;
        assert_eq!((r.status, r.body.trim()), (status, body), "{host}{path}");
    }
    let m = p.metrics();
    assert!(m.contains("weir_upstream_connect_errors_total 1"), "{m}");
    assert!(
        m.contains(r#"weir_requests_total{gateway="test/gw",listener="web",class="5xx"} 4"#),
        "{m}"
    );
    assert!(
        m.contains(r#"weir_requests_total{gateway="test/gw",listener="web",class="4xx"} 2"#),
        "{m}"
    );
}

#[tokio::test]
async fn redirect_direct_response_and_fail() {
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(
            Some("a.test"),
            vec![
                rule(
                    "/old",
                    Action::Redirect(Box::new(Redirect {
                        scheme: Some("https".into()),
                        hostname: Some("b.test".into()),
                        path: Some(PathRewrite::Full("/new".into())),
                        port: None,
                        status: 301,
                    })),
                ),
                rule(
                    "/direct",
                    Action::DirectResponse(Box::new(DirectResponse {
                        status: 418,
                        headers: vec![("x-teapot".into(), "yes".into())],
                        body: "short and stout".into(),
                    })),
                ),
                rule(
                    "/fail",
                    Action::Fail {
                        status: 500,
                        reason: "invalid backend".into(),
                    },
                ),
            ],
        ),
    ])
    .await;
    let mut c = Conn::h1(p.addr).await;
    let r = c.get("a.test", "/old").await;
    assert_eq!(r.status, 301);
    let location = r.headers.get("location").and_then(|v| v.to_str().ok());
    assert_eq!(location, Some("https://b.test/new"));
    let r = c.get("a.test", "/direct").await;
    assert_eq!((r.status, r.body.as_str()), (418, "short and stout"));
    assert_eq!(
        r.headers.get("x-teapot").map(|v| v.as_bytes()),
        Some(&b"yes"[..])
    );
    let r = c.get("a.test", "/fail").await;
    assert_eq!((r.status, r.body.trim()), (500, "invalid backend"));
}

#[tokio::test]
async fn proxy_headers() {
    let b = Backend::start("b1").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(None, vec![rule("/", forward(&[("c1", 1)]))]),
        cluster("c1", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let mut c = Conn::h1(p.addr).await;
    let r = c
        .request(
            Method::GET,
            "Any.Test:81",
            "/h",
            &[
                ("x-forwarded-for", "10.0.0.1"),
                ("connection", "x-hop"),
                ("x-hop", "secret"),
                ("keep-alive", "timeout=5"),
                ("proxy-connection", "keep-alive"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.field("host"),
        Some("Any.Test:81"),
        "the original Host is kept"
    );
    assert_eq!(r.field("x-forwarded-for"), Some("10.0.0.1, 127.0.0.1"));
    assert_eq!(r.field("x-forwarded-proto"), Some("http"));
    assert_eq!(r.field("x-forwarded-host"), Some("Any.Test:81"));
    assert_eq!(
        r.field("keep-alive"),
        Some(""),
        "hop-by-hop headers are removed"
    );
    assert_eq!(r.field("proxy-connection"), Some(""));
    assert_eq!(
        r.field("x-hop"),
        Some(""),
        "headers named in Connection are removed"
    );
    let id1 = r.field("x-request-id").unwrap_or_default().to_string();
    assert!(id1.len() > 8, "generated request id: {id1:?}");
    let r = c.get("any.test", "/h").await;
    let id2 = r.field("x-request-id").unwrap_or_default();
    assert!(!id2.is_empty() && id2 != id1, "ids differ: {id1} {id2}");
    let r = c
        .request(
            Method::GET,
            "any.test",
            "/h",
            &[("x-request-id", "given-1")],
        )
        .await;
    assert_eq!(r.field("x-request-id"), Some("given-1"));
}

#[tokio::test]
async fn weighted_backends() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(
            Some("w.test"),
            vec![rule("/", forward(&[("ca", 3), ("cb", 1), ("never", 0)]))],
        ),
        cluster("ca", &[a.addr], UpstreamProtocol::Http1),
        cluster("cb", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let mut c = Conn::h1(p.addr).await;
    let mut counts: HashMap<String, usize> = HashMap::new();
    for _ in 0..2000 {
        let r = c.get("w.test", "/").await;
        assert_eq!(r.status, 200, "{}", r.body);
        *counts.entry(r.backend().to_string()).or_default() += 1;
    }
    let na = counts.get("a").copied().unwrap_or(0);
    let nb = counts.get("b").copied().unwrap_or(0);
    assert_eq!(na + nb, 2000, "{counts:?}");
    // expected 1500 / 500; allow 5 % of the total either way
    assert!((1400..=1600).contains(&na), "{counts:?}");
}

#[tokio::test]
async fn endpoints_of_a_cluster_share_load() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("e.test"), vec![rule("/", forward(&[("c", 1)]))]),
        cluster("c", &[a.addr, b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let mut c = Conn::h1(p.addr).await;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for _ in 0..100 {
        *seen
            .entry(c.get("e.test", "/").await.backend().to_string())
            .or_default() += 1;
    }
    assert_eq!(seen.get("a"), Some(&50), "{seen:?}");
    assert_eq!(seen.get("b"), Some(&50), "{seen:?}");
}

#[tokio::test]
async fn timeouts_answer_504() {
    let b = Backend::start("slow").await;
    let short = Timeouts {
        request: Some(Duration::from_millis(200)),
        backend_request: None,
        backend_send: None,
    };
    let short_backend = Timeouts {
        request: None,
        backend_request: Some(Duration::from_millis(200)),
        backend_send: None,
    };
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(
            Some("t.test"),
            vec![rule_with("/", forward(&[("c", 1)]), short)],
        ),
        vhost(
            Some("u.test"),
            vec![rule_with("/", forward(&[("c", 1)]), short_backend)],
        ),
        cluster("c", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let r = get(p.addr, "t.test", "/slow").await;
    assert_eq!((r.status, r.body.trim()), (504, "upstream timeout"));
    let r = get(p.addr, "u.test", "/slow").await;
    assert_eq!(r.status, 504);
    let r = get(p.addr, "t.test", "/fast").await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_changes_do_not_fail_traffic_to_other_hosts() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("steady.test"), vec![rule("/", forward(&[("ca", 1)]))]),
        vhost(Some("churn.test"), vec![rule("/", forward(&[("ca", 1)]))]),
        cluster("ca", &[a.addr], UpstreamProtocol::Http1),
        cluster("cb", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let addr = p.addr;
    let client = tokio::spawn(async move {
        let mut c = Conn::h1(addr).await;
        let mut failures = 0;
        for i in 0..500 {
            let r = c.get("steady.test", &format!("/{i}")).await;
            if r.status != 200 || r.backend() != "a" {
                failures += 1;
            }
        }
        failures
    });
    let dp = Arc::clone(&p.dp);
    let mut version = 0;
    for i in 0..100 {
        let target = if i % 2 == 0 { "cb" } else { "ca" };
        let mut resources = vec![vhost(
            Some("churn.test"),
            vec![rule("/", forward(&[(target, 1)]))],
        )];
        if i % 10 == 0 {
            resources.push(vhost(
                Some(&format!("extra{i}.test")),
                vec![rule("/", forward(&[("cb", 1)]))],
            ));
        }
        let report = dp.apply(&upserts(resources)).await;
        assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        assert!(report.version > version);
        version = report.version;
        tokio::task::yield_now().await;
    }
    let failures = tokio::time::timeout(STEP * 6, client)
        .await
        .expect("client done")
        .expect("client");
    assert_eq!(failures, 0);
    // the last change routes churn.test to cluster ca (i = 99 is odd)
    assert_eq!(get(p.addr, "churn.test", "/").await.backend(), "a");
    let remove = DeltaBatch {
        deltas: vec![Delta::Remove(ResourceKey::VirtualHost(
            key(),
            host(Some("churn.test")),
        ))],
    };
    dp.apply(&remove).await;
    assert_eq!(get(p.addr, "churn.test", "/").await.status, 404);
    assert_eq!(get(p.addr, "extra10.test", "/").await.backend(), "b");
}

#[tokio::test]
async fn removing_a_listener_stops_accepting() {
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(
            None,
            vec![rule(
                "/",
                Action::Fail {
                    status: 503,
                    reason: "x".into(),
                },
            )],
        ),
    ])
    .await;
    assert_eq!(get(p.addr, "a.test", "/").await.status, 503);
    let report =
        p.dp.apply(&DeltaBatch {
            deltas: vec![Delta::Remove(ResourceKey::Listener(key()))],
        })
        .await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(p.dp.bound_addr(&key()), None);
    assert!(
        tokio::net::TcpStream::connect(p.addr).await.is_err(),
        "socket closed"
    );
}

#[tokio::test]
async fn shutdown_lets_in_flight_requests_finish() {
    let b = Backend::start("slow").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(None, vec![rule("/", forward(&[("c", 1)]))]),
        cluster("c", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let addr = p.addr;
    let in_flight = tokio::spawn(async move { get(addr, "a.test", "/slow").await.status });
    // wait until the request reached the backend
    for _ in 0..200 {
        if b.connections() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(b.connections(), 1);
    p.dp.shutdown().await;
    assert!(
        tokio::net::TcpStream::connect(p.addr).await.is_err(),
        "no longer accepting"
    );
    let status = tokio::time::timeout(STEP, in_flight)
        .await
        .expect("done")
        .expect("task");
    assert_eq!(status, 200);
}

#[tokio::test]
async fn bind_failures_are_reported_and_retried() {
    use prometheus_client::registry::Registry;
    use weir_model::{Listener, ListenerKey, Resource};
    use weir_proxy::{DataPlane, ProxyConfig};

    let blocker = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let taken = ListenerKey::new(blocker.local_addr().expect("addr"));
    let mut registry = Registry::default();
    let dp = DataPlane::new(ProxyConfig::default(), &mut registry).expect("workers");
    let l = Listener::new(taken, Protocol::Http, "test/gw".into(), "web".into());
    let report = dp
        .apply(&upserts(vec![Resource::Listener(Arc::new(l))]))
        .await;
    assert_eq!(report.rejected.len(), 1, "{:?}", report.rejected);
    assert_eq!(report.rejected[0].0, ResourceKey::Listener(taken));
    assert!(
        report.rejected[0].1.contains("cannot bind"),
        "{:?}",
        report.rejected
    );
    assert_eq!(dp.bound_addr(&taken), None);
    // the listener stays in the snapshot and is bound by a later apply once the port is free
    drop(blocker);
    let report = dp.apply(&DeltaBatch::default()).await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(dp.bound_addr(&taken), Some(taken.addr()));
    dp.shutdown().await;
    assert_eq!(dp.bound_addr(&taken), None);
}

#[tokio::test]
async fn a_snapshot_built_from_several_batches_serves_once_finished() {
    use prometheus_client::registry::Registry;
    use weir_proxy::{DataPlane, ProxyConfig};

    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let mut registry = Registry::default();
    let dp = DataPlane::new(ProxyConfig::default(), &mut registry).expect("workers");
    // The first load of `weir run`: batches applied one after the other, on another
    // thread, while the later ones are made; the second refers to the first's listener.
    let mut build = dp.begin_build();
    let first = upserts(vec![
        listener(Protocol::Http),
        cluster("c1", &[b1.addr], UpstreamProtocol::Http1),
        vhost(Some("a.test"), vec![rule("/", forward(&[("c1", 1)]))]),
    ]);
    build = std::thread::spawn(move || {
        build.apply(&first);
        build
    })
    .join()
    .expect("applied");
    build.apply(&upserts(vec![
        cluster("c2", &[b2.addr], UpstreamProtocol::Http1),
        vhost(Some("b.test"), vec![rule("/", forward(&[("c2", 1)]))]),
    ]));
    assert_eq!(build.deltas(), 5);
    assert_eq!(
        dp.bound_addr(&key()),
        None,
        "nothing serves before the build is published"
    );
    let report = dp.finish_build(build).await.expect("not stale");
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!((report.version, report.applied), (1, 5));
    let addr = dp.bound_addr(&key()).expect("listener bound");
    assert_eq!(get(addr, "a.test", "/").await.backend(), "b1");
    assert_eq!(get(addr, "b.test", "/").await.backend(), "b2");

    // A build that another apply overtook is refused: publishing it would undo that one.
    let mut stale = dp.begin_build();
    stale.apply(&DeltaBatch {
        deltas: vec![Delta::Remove(ResourceKey::VirtualHost(
            key(),
            host(Some("b.test")),
        ))],
    });
    dp.apply(&DeltaBatch::default()).await;
    let err = dp.finish_build(stale).await.expect_err("stale");
    assert!(err.to_string().contains("stale"), "{err}");
    assert_eq!(get(addr, "b.test", "/").await.backend(), "b2");
    dp.shutdown().await;
}

/// A backend that accepts one HTTP/1.1 upgrade, answers 101 and then echoes bytes.
async fn upgrade_echo_backend() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut byte).await.unwrap(), 1, "request head");
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
        assert!(head.contains("upgrade: echo"), "{head}");
        assert!(head.contains("connection: upgrade"), "{head}");
        s.write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n",
        )
        .await
        .unwrap();
        let mut buf = [0u8; 64];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                return;
            }
            s.write_all(&buf[..n]).await.unwrap();
        }
    });
    addr
}

#[tokio::test]
async fn http1_upgrade_is_tunnelled_to_the_backend() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backend = upgrade_echo_backend().await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("a.test"), vec![rule("/", forward(&[("c1", 1)]))]),
        cluster("c1", &[backend], UpstreamProtocol::Http1),
    ])
    .await;
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    s.write_all(
        b"GET /ws HTTP/1.1\r\nhost: a.test\r\nconnection: Upgrade\r\nupgrade: echo\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    let read_head = async {
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut byte).await.unwrap(), 1, "response head");
            head.push(byte[0]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read_head)
        .await
        .expect("101 within 10 s");
    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: echo"), "{head}");
    for msg in [&b"ping"[..], b"second message"] {
        s.write_all(msg).await.unwrap();
        let mut got = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut got))
            .await
            .expect("echo within 10 s")
            .unwrap();
        assert_eq!(got, msg);
    }
}

#[tokio::test]
async fn request_mirror_sends_a_copy_and_answers_from_the_backend() {
    use weir_model::{ClusterKey, Filter, PathMatch, RequestMatch, RouteKind, RouteRef, RouteRule};
    let main = Backend::start("main").await;
    let mirror = Backend::start("mirror").await;
    let rule = Arc::new(RouteRule::new(
        RouteRef {
            kind: RouteKind::HttpRoute,
            namespace: "default".into(),
            name: "r".into(),
            rule: 0,
        },
        RequestMatch {
            path: PathMatch::Prefix("/".into()),
            headers: vec![],
            query: vec![],
            method: None,
        },
        vec![Filter::Mirror {
            cluster: ClusterKey("c2".into()),
            per_million: 1_000_000,
        }],
        forward(&[("c1", 1)]),
        Timeouts::default(),
    ));
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("a.test"), vec![rule]),
        cluster("c1", &[main.addr], UpstreamProtocol::Http1),
        cluster("c2", &[mirror.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let r = get(p.addr, "a.test", "/copied").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.backend(),
        "main",
        "the response comes from the backend, not the mirror"
    );
    // The copy is sent in the background: bounded wait for the mirror's connection.
    for _ in 0..100 {
        if mirror.connections() > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the mirror backend got no request within 5 s");
}
