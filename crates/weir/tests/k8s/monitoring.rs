//! The Grafana dashboard and the Prometheus alerting rules in `deploy/monitoring/` use
//! only metrics weir exports: every `weir_*` name in their queries is checked against a
//! real `/metrics` scrape of a `weir controller` with the push server on (controller,
//! push-protocol and embedded data-plane metrics in one registry). The rules pass
//! `promtool check rules` and their unit tests (`promtool test rules`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::Value;
use weir::controller::{Controller, ControllerOptions};

use crate::{Ctx, support};

fn monitoring() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/monitoring")
}

/// Every `weir_…` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("weir_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        // Not part of a longer identifier (e.g. a label value like `my_weir_x`).
        let before = rest[..i].chars().next_back();
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}

/// The sample names a scrape exposes: from `# TYPE` lines (a family with no series yet
/// is still declared) and from the samples.
fn exposed(scrape: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in scrape.lines() {
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let mut it = t.split_whitespace();
            let (Some(name), Some(kind)) = (it.next(), it.next()) else {
                continue;
            };
            match kind {
                "counter" => {
                    out.insert(format!("{name}_total"));
                }
                "histogram" => {
                    for s in ["bucket", "sum", "count"] {
                        out.insert(format!("{name}_{s}"));
                    }
                }
                _ => {
                    out.insert(name.to_string());
                }
            }
        } else if !line.starts_with('#') {
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn exprs_of_dashboard(d: &Value, out: &mut Vec<String>) {
    match d {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "definition", Value::String(s)) => out.push(s.clone()),
                    _ => exprs_of_dashboard(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| exprs_of_dashboard(v, out)),
        _ => {}
    }
}

fn promtool(args: &[&str]) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(monitoring())
        .output()
        .expect("promtool (Debian package prometheus; .ci/run installs it)");
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub async fn dashboard_and_rules_use_exported_metrics(ctx: Arc<Ctx>) {
    let xds: std::net::SocketAddr = ([127, 0, 0, 1], support::free_port()).into();
    let controller = Controller::start(ControllerOptions {
        kubeconfig: Some(ctx.kubeconfig.clone()),
        controller_name: "weir.dev/monitoring-check".into(),
        admin: "127.0.0.1:0".parse().unwrap(),
        ingress_http: None,
        ingress_https: None,
        ingress_class: "weir-monitoring".into(),
        more_ingress_classes: Vec::new(),
        advertise: vec![],
        gateway_address_pool: None,
        access_log: None,
        traces: None,
        xds_listen: Some(xds),
        embedded_proxy: true,
        xds_auth: false,
        provision: None,
        leader_election: None,
        redis: None,
    })
    .await
    .expect("starting a controller with the push server");
    // A data plane connected to it (the per-data-plane series exist from then on).
    let proxy = weir::proxy::Proxy::start(weir::proxy::ProxyOptions {
        controllers: vec![format!("http://{xds}")],
        gateway: "default/monitoring".into(),
        admin: "127.0.0.1:0".parse().unwrap(),
        node: "monitoring-proxy".into(),
        token: None,
        access_log: None,
        traces: None,
        redis: None,
    })
    .await
    .expect("starting a data plane");
    let scrape = |addr| async move {
        let r = support::http1(addr, "localhost", "/metrics")
            .await
            .expect("scraping /metrics");
        assert_eq!(r.status, 200);
        exposed(&r.body)
    };
    let connected = support::eventually(std::time::Duration::from_secs(20), || async {
        scrape(controller.admin_addr)
            .await
            .contains("weir_xds_data_plane_connected")
    })
    .await;
    assert!(connected, "the data plane connects");
    let mut have = scrape(controller.admin_addr).await;
    have.extend(scrape(proxy.admin_addr).await);
    // The status page: the controller serves propagation, the split data plane its own
    // part (its apply times; no control-plane phase).
    let status = |addr| async move {
        let r = support::http1(addr, "localhost", "/api/v1/status")
            .await
            .expect("the status API");
        assert_eq!(r.status, 200);
        r.json()
    };
    let phases = |v: &serde_json::Value| -> Vec<String> {
        v["propagation"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["phase"].as_str().unwrap().to_string())
            .collect()
    };
    let c = status(controller.admin_addr).await;
    assert_eq!(c["mode"], "weir controller", "{c:#}");
    assert!(phases(&c).contains(&"end_to_end".to_string()), "{c:#}");
    assert!(c["propagation"][0]["count"].as_u64().unwrap() >= 1, "{c:#}");
    let p = status(proxy.admin_addr).await;
    assert_eq!(
        p["mode"], "weir proxy for Gateway default/monitoring",
        "{p:#}"
    );
    assert!(!phases(&p).contains(&"end_to_end".to_string()), "{p:#}");
    proxy.stop().await;
    controller.stop().await;
    // A data plane with a listener (request metrics are per listener).
    let port = support::free_port();
    let gw = support::Gateway::start(&[(
        "gw.yaml",
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: monitoring}}
spec:
  gatewayClassName: weir
  addresses: [{{type: IPAddress, value: 127.0.0.1}}]
  listeners: [{{name: http, protocol: HTTP, port: {port}}}]
"
        ),
    )])
    .await;
    have.extend(scrape(gw.gw.admin_addr).await);
    drop(gw);

    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(monitoring().join("weir-dashboard.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    exprs_of_dashboard(&dashboard, &mut exprs);
    let rules = std::fs::read_to_string(monitoring().join("weir-alerts.yaml")).unwrap();
    let rules: Value = serde_saphyr::from_str(&rules).expect("the rules are YAML");
    for g in rules["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            exprs.push(r["expr"].as_str().unwrap().to_string());
        }
    }
    let used: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
    let missing: Vec<&String> = used.iter().filter(|n| !have.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "not in a /metrics scrape of weir: {missing:?}\nexposed: {have:?}"
    );
    // What the dashboard is for: each of these is shown.
    for m in [
        "weir_propagation_seconds_bucket",
        "weir_config_rejected_resources_total",
        "weir_xds_data_plane_connected",
        "weir_requests_total",
        "weir_request_duration_seconds_bucket",
        "weir_upstream_unhealthy_endpoints",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(m)),
            "{m} is queried by the dashboard or the rules"
        );
    }
    promtool(&["check", "rules", "weir-alerts.yaml"]);
    promtool(&["test", "rules", "weir-alerts.test.yaml"]);
}
