//! TrafficPolicy `cors` from a file: preflights of the route's rules answered by weir,
//! actual responses given the CORS headers, a rule's own CORS filter winning over the
//! policy, and the policy's removal handing preflights back to the backend.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;

fn manifests(port: u16, backend_yaml: &str) -> String {
    http_gateway(port)
        + "---\n"
        + &format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: app}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [app.test]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /own}}}}]
    filters:
    - type: CORS
      cors: {{allowOrigins: [\"https://own.example\"], allowMethods: [GET]}}
    backendRefs: [{{group: weir.dev, kind: Backend, name: a}}]
  - backendRefs: [{{group: weir.dev, kind: Backend, name: a}}]
---
{backend_yaml}"
        )
}

const POLICY: &str = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: cors}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: app}]
  cors:
    allowOrigins: [\"https://*.example.com\"]
    allowMethods: [GET, PUT]
    maxAge: 600
";

async fn preflight(addr: SocketAddr, path: &str, origin: &str) -> Resp {
    let req = http::Request::builder()
        .method("OPTIONS")
        .uri(path)
        .header("host", "app.test")
        .header("origin", origin)
        .header("access-control-request-method", "PUT")
        .body(http_body_util::Empty::new())
        .unwrap();
    send_http1(addr, req).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cors_policy_answers_preflights_of_rules_without_a_filter() {
    let port = free_port();
    let a = echo("a").await;
    let gw = Gateway::start(&[
        ("app.yaml", manifests(port, &backend("default", "a", &[a]))),
        ("policy.yaml", POLICY.to_string()),
    ])
    .await;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let origin = "https://www.example.com";
    assert!(
        eventually(Duration::from_secs(5), || async {
            preflight(addr, "/x", origin).await.status == 204
        })
        .await,
        "the policy answers preflights"
    );
    let r = preflight(addr, "/x", origin).await;
    assert_eq!(r.headers["access-control-allow-origin"], origin);
    assert_eq!(r.headers["access-control-allow-methods"], "GET, PUT");
    assert_eq!(r.headers["access-control-max-age"], "600");
    assert_eq!(preflight(addr, "/x", "https://evil.test").await.status, 403);
    // An actual request: forwarded, its response given the CORS headers.
    let req = get("app.test", "/x")
        .header("origin", origin)
        .body(http_body_util::Empty::new())
        .unwrap();
    let r = send_http1(addr, req).await.unwrap();
    assert_eq!(r.status, 200);
    assert!(r.echo_name().is_some());
    assert_eq!(r.headers["access-control-allow-origin"], origin);
    // The rule's own filter wins: the policy's origin is not among its origins.
    assert_eq!(preflight(addr, "/own", origin).await.status, 403);
    assert_eq!(
        preflight(addr, "/own", "https://own.example").await.status,
        204
    );

    // Removed: the preflight goes to the backend like any request.
    gw.remove("policy.yaml");
    assert!(
        eventually(Duration::from_secs(5), || async {
            preflight(addr, "/x", origin).await.echo_name().is_some()
        })
        .await,
        "without the policy the backend answers"
    );
}
