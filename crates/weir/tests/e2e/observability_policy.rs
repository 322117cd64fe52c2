//! Access-log and trace settings as a TrafficPolicy, in standalone mode: a Gateway-wide
//! policy turns the access log off, a rule policy turns it back on for its rule with
//! fields of its own; a route policy samples none of its traces while another route on
//! the same Gateway is traced (process flags: log every request, sample every trace).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use opentelemetry_proto::tonic::trace::v1::Span;
use weir_proxy::{AccessLogFields, AccessLogOutput, AccessLogSettings};

use crate::support::*;
use crate::traces::{collector, settings, spans_where, str_attr, upstream_traceparent};

const ROUTES: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: app}
spec:
  parentRefs: [{name: gw}]
  hostnames: [app.test]
  rules:
  - name: audited
    matches: [{path: {type: PathPrefix, value: /audited}}]
    backendRefs: [{group: weir.dev, kind: Backend, name: a}]
  - backendRefs: [{group: weir.dev, kind: Backend, name: a}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: quiet}
spec:
  parentRefs: [{name: gw}]
  hostnames: [quiet.test]
  rules:
  - backendRefs: [{group: weir.dev, kind: Backend, name: a}]
";

const POLICIES: &str = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: no-log}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  accessLog: {disabled: true}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: audit}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: app, sectionName: audited}]
  accessLog: {fields: [request_id, status, route]}
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: untraced}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: quiet}]
  tracing: {samplingRatio: 0}
";

async fn call(addr: SocketAddr, host: &str, path: &str, id: &str) -> Resp {
    let req = get(host, path).header("x-request-id", id);
    send_http1(addr, req.body(http_body_util::Empty::new()).unwrap())
        .await
        .unwrap()
}

fn records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn path_of(s: &Span) -> Option<&str> {
    s.attributes
        .iter()
        .any(|a| a.key == "url.path")
        .then(|| str_attr(s, "url.path"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_and_trace_policies_apply_per_gateway_route_and_rule() {
    let port = free_port();
    let a = echo("a").await;
    let (otlp, got) = collector().await;
    let logs = tempfile::tempdir().unwrap();
    let log_path = logs.path().join("access.log");
    let log = AccessLogSettings {
        output: AccessLogOutput::File {
            path: log_path.clone(),
            max_bytes: 0,
            every: None,
            keep: 0,
        },
        fields: AccessLogFields::all(),
        queue: 1024,
    };
    let traces = settings(format!("http://{otlp}"), "obs", 1.0);
    let manifests = [
        http_gateway(port),
        ROUTES.to_string(),
        backend("default", "a", &[a]),
    ]
    .join("---\n");
    let _gw = Gateway::start_edited(
        &[("app.yaml", manifests), ("policies.yaml", POLICIES.into())],
        |o| {
            o.access_log = Some(log);
            o.traces = Some(traces);
        },
    )
    .await;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // Live once the rule's record shows up (the policies arrive with the routes).
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, "app.test", "/audited/warmup", "warmup")
                .await
                .status
                == 200
                && records(&log_path)
                    .iter()
                    .any(|r| r["request_id"] == "warmup")
        })
        .await,
        "the audited rule is logged"
    );

    for i in 0..5 {
        assert_eq!(
            call(addr, "app.test", "/plain", &format!("plain-{i}"))
                .await
                .status,
            200
        );
        assert_eq!(
            call(addr, "app.test", "/audited/x", &format!("audited-{i}"))
                .await
                .status,
            200
        );
        let quiet = call(addr, "quiet.test", &format!("/q{i}"), &format!("quiet-{i}")).await;
        assert_eq!(quiet.status, 200);
        // The untraced route still passes a trace on, unsampled.
        assert!(!upstream_traceparent(&quiet).sampled());
    }
    // A marker after those requests: once its record is written, theirs are too (one
    // writer, in order).
    assert_eq!(
        call(addr, "app.test", "/audited/marker", "marker")
            .await
            .status,
        200
    );
    let mut all = Vec::new();
    for _ in 0..500 {
        all = records(&log_path);
        if all.iter().any(|r| r["request_id"] == "marker") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ids: Vec<&str> = all
        .iter()
        .filter_map(|r| r["request_id"].as_str())
        .collect();
    // The Gateway-wide policy leaves out the other rule and the other route…
    assert!(
        !ids.iter()
            .any(|i| i.starts_with("plain-") || i.starts_with("quiet-")),
        "{ids:?}"
    );
    // …and the rule's own policy logs its requests with its fields only.
    let audited: Vec<&serde_json::Value> = all
        .iter()
        .filter(|r| {
            r["request_id"]
                .as_str()
                .is_some_and(|i| i.starts_with("audited-"))
        })
        .collect();
    assert_eq!(audited.len(), 5, "{all:#?}");
    for r in audited {
        let mut keys: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["request_id", "route", "status"], "{r}");
        assert_eq!(r["route"], "HTTPRoute/default/app#0");
    }

    // Spans: the app route's requests are traced (both rules), the quiet route's not.
    spans_where(&got, 1, |(_, s)| path_of(s) == Some("/audited/marker")).await;
    spans_where(&got, 5, |(_, s)| path_of(s) == Some("/plain")).await;
    let quiet: Vec<String> = got
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(_, s)| {
            path_of(s)
                .filter(|p| p.starts_with("/q"))
                .map(str::to_owned)
        })
        .collect();
    assert!(
        quiet.is_empty(),
        "the untraced route exported spans: {quiet:?}"
    );
}
