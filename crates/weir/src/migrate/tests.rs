//! The shape of a migration: what is written for TLS in another namespace, several hosts,
//! `backend-protocol` on a Service, another class, and what the report says.

use std::sync::Arc;

use serde_json::{Value, json};
use weir_api::Object;

use super::*;

fn opts() -> MigrateOptions {
    MigrateOptions {
        config: PathBuf::new(),
        gateway_name: "gw".into(),
        gateway_namespace: "infra".into(),
        gateway_class: "weir".into(),
        http_port: 80,
        https_port: 443,
        address: None,
        ingress_classes: vec!["nginx".into()],
    }
}

fn objects(values: Vec<Value>) -> Vec<Arc<Object>> {
    values
        .into_iter()
        .map(|v| Arc::new(Object::from_value(v).unwrap()))
        .collect()
}

fn find<'a>(m: &'a Migration, kind: &str, name: &str) -> &'a Value {
    m.objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {:#?}", m.objects))
}

#[test]
fn hosts_tls_grants_h2c_and_classes() {
    let ing = |name: &str, class: &str, annotations: Value, mut spec: Value| {
        spec["ingressClassName"] = json!(class);
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name, "namespace": "shop", "annotations": annotations},
            "spec": spec})
    };
    let svc = |port: i64| json!({"service": {"name": "api", "port": {"number": port}}});
    let input = objects(vec![
        ing(
            "web",
            "nginx",
            json!({
                "nginx.ingress.kubernetes.io/backend-protocol": "GRPC",
                "nginx.ingress.kubernetes.io/server-snippet": "x",
            }),
            json!({
                "tls": [{"hosts": ["a.test"], "secretName": "a-cert"}],
                "rules": [
                    {"host": "a.test", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": svc(8080)}]}},
                    {"host": "b.test", "http": {"paths": [{"path": "/x", "pathType": "Exact", "backend": svc(8080)}]}},
                ],
            }),
        ),
        ing("other", "traefik", json!({}), json!({})),
    ]);
    let mut m = Migration::default();
    migrate_objects(&opts(), &input, &mut m);
    assert_eq!(m.ingresses, 1);

    let gw = find(&m, "Gateway", "gw");
    assert_eq!(gw["metadata"]["namespace"], "infra");
    let https = &gw["spec"]["listeners"][1];
    assert_eq!(https["hostname"], "a.test");
    assert_eq!(https["tls"]["certificateRefs"][0]["namespace"], "shop");
    let grant = find(&m, "ReferenceGrant", "gw-tls");
    assert_eq!(grant["metadata"]["namespace"], "shop");
    assert_eq!(grant["spec"]["to"][0]["name"], "a-cert");

    // One route per host; the TLS host is also on its TLS listener.
    let a = find(&m, "HTTPRoute", "web-0");
    assert_eq!(a["spec"]["hostnames"], json!(["a.test"]));
    let sections: Vec<&str> = a["spec"]["parentRefs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["sectionName"].as_str().unwrap())
        .collect();
    assert_eq!(sections, ["http", "https-0"]);
    let b = find(&m, "HTTPRoute", "web-1");
    assert_eq!(b["spec"]["parentRefs"].as_array().unwrap().len(), 1);
    assert_eq!(b["spec"]["rules"][0]["matches"][0]["path"]["type"], "Exact");

    let report = m.report();
    assert!(
        report.contains("set appProtocol: kubernetes.io/h2c on port 8080 of Service shop/api"),
        "{report}"
    );
    assert!(report.contains("server-snippet"), "{report}");
    assert!(
        report.contains("Ingress shop/other: info: class \"traefik\""),
        "{report}"
    );
    // The YAML is one document per object.
    let yaml = m.yaml().unwrap();
    assert_eq!(yaml.matches("\n---\n").count(), m.objects.len(), "{yaml}");
}

#[test]
fn legacy_class_policy_fields_and_the_redirect_twin() {
    let ing = |name: &str, annotations: Value| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": "shop", "annotations": annotations},
        "spec": {
            "tls": [{"hosts": ["a.test"], "secretName": "a-cert"}],
            "rules": [{"host": "a.test", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "api", "port": {"number": 80}}}}]}}],
        }})
    };
    let input = objects(vec![
        ing(
            "web",
            json!({
                "kubernetes.io/ingress.class": "nginx",
                "nginx.ingress.kubernetes.io/ssl-redirect": "true",
                "nginx.ingress.kubernetes.io/limit-rps": "5",
                "nginx.ingress.kubernetes.io/proxy-read-timeout": "30",
                "nginx.ingress.kubernetes.io/proxy-body-size": "2m",
                "nginx.ingress.kubernetes.io/affinity": "cookie",
                "nginx.ingress.kubernetes.io/session-cookie-max-age": "60",
                "nginx.ingress.kubernetes.io/limit-connections": "3",
            }),
        ),
        ing("other", json!({"kubernetes.io/ingress.class": "traefik"})),
    ]);
    let mut m = Migration::default();
    migrate_objects(&opts(), &input, &mut m);
    let report = m.report();
    assert_eq!(m.ingresses, 1, "{report}");
    assert!(
        report.contains("Ingress shop/other: info: class \"traefik\""),
        "{report}"
    );
    assert!(!report.contains("not carried over:"), "{report}");

    let policy = find(&m, "TrafficPolicy", "web-nginx");
    let spec = &policy["spec"];
    // The redirecting twin is not a target: its redirect comes before the checks.
    find(&m, "HTTPRoute", "web-http");
    assert_eq!(
        spec["targetRefs"],
        json!([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "web"}])
    );
    assert_eq!(spec["timeouts"], json!({"backendRequest": "35s"}));
    assert_eq!(spec["requestLimits"], json!({"maxBodyBytes": 2 << 20}));
    assert_eq!(spec["concurrencyLimit"], json!({"perClient": 3}));
    assert!(spec.get("loadBalancer").is_none(), "{spec:#}");
    let route = find(&m, "HTTPRoute", "web");
    assert_eq!(
        route["spec"]["rules"][0]["sessionPersistence"],
        json!({"type": "Cookie", "sessionName": "INGRESSCOOKIE", "absoluteTimeout": "60s",
            "cookieConfig": {"lifetimeType": "Permanent"}})
    );
}
