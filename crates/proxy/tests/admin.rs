//! The admin server: readiness, metrics and config dump.

mod support;

use std::sync::Arc;

use support::*;
use weir_model::{Protocol, UpstreamProtocol};

#[tokio::test]
async fn ready_metrics_and_config() {
    let b = Backend::start("b1").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("a.test"), vec![rule("/", forward(&[("c1", 1)]))]),
        cluster("c1", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind admin");
    let admin_addr = admin.local_addr().expect("addr");
    let task = tokio::spawn(weir_proxy::serve_admin(
        admin,
        Arc::clone(&p.dp),
        Arc::clone(&p.registry),
    ));

    let r = get(admin_addr, "admin", "/ready").await;
    assert_eq!(r.status, 503);
    p.dp.set_ready();
    assert!(p.dp.is_ready());
    let r = get(admin_addr, "admin", "/ready").await;
    assert_eq!((r.status, r.body.trim()), (200, "ready"));
    assert_eq!(get(admin_addr, "admin", "/healthz").await.status, 200);

    assert_eq!(get(p.addr, "a.test", "/x").await.status, 200);
    let r = get(admin_addr, "admin", "/metrics").await;
    assert_eq!(r.status, 200);
    for needle in [
        r#"weir_requests_total{gateway="test/gw",listener="web",class="2xx"} 1"#,
        "weir_request_duration_seconds_count",
        "weir_config_applies_total 1",
        "weir_config_version 1",
        r#"weir_config_resources{kind="cluster"} 1"#,
        "weir_downstream_connections",
        "weir_upstream_connections 1",
    ] {
        assert!(r.body.contains(needle), "missing {needle} in\n{}", r.body);
    }

    let r = get(admin_addr, "admin", "/config").await;
    assert_eq!(r.status, 200);
    let json: serde_json::Value = serde_json::from_str(&r.body).expect("json");
    assert!(r.body.contains("a.test"), "{json:#}");
    assert!(r.body.contains("c1"), "{json:#}");
    assert_eq!(get(admin_addr, "admin", "/nope").await.status, 404);
    task.abort();
}
