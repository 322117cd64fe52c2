//! The admin server: /ready, /metrics, /config.

use std::net::SocketAddr;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_reports_readiness_metrics_and_config() {
    let port = free_port();
    let a = echo("a").await;
    let gw = Gateway::start(&[(
        "all.yaml",
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  listeners: [{{name: http, protocol: HTTP, port: {port}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r}}
spec:
  parentRefs: [{{name: gw}}]
  rules: [{{backendRefs: [{{group: weir.dev, kind: Backend, name: a}}]}}]
---
{}",
            backend("default", "a", &[a])
        ),
    )])
    .await;
    let ready = gw.admin_get("/ready").await;
    assert_eq!(ready.status, 200);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    assert_eq!(http1(addr, "x.test", "/").await.unwrap().status, 200);

    let metrics = gw.admin_get("/metrics").await.body;
    for name in [
        "weir_requests_total",
        "weir_request_duration_seconds",
        "weir_upstream_connections",
        "weir_config_applies_total",
        "weir_config_apply_duration_seconds",
        "weir_propagation_seconds",
    ] {
        assert!(
            metrics.contains(name),
            "{name} missing from /metrics:\n{metrics}"
        );
    }
    assert!(metrics.contains("class=\"2xx\""), "{metrics}");

    let config = gw.admin_get("/config").await;
    assert_eq!(config.status, 200);
    let text = config.body;
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.contains("backend/default/a"), "{text}");
    gw.gw.stop().await;
}
