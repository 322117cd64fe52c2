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
                "nginx.ingress.kubernetes.io/proxy-send-timeout": "20",
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
    assert_eq!(
        spec["timeouts"],
        json!({"backendRequest": "35s", "backendSend": "20s"})
    );
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

#[test]
fn canaries_passthrough_backend_tls_and_error_pages() {
    let ing = |name: &str, created: &str, annotations: Value, host: &str, svc: &str| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": "shop", "annotations": annotations,
            "creationTimestamp": created},
        "spec": {
            "ingressClassName": "nginx",
            "tls": [{"hosts": [host], "secretName": "cert"}],
            "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": svc, "port": {"number": 443}}}}]}}],
        }})
    };
    let ca_pem = "-----BEGIN CERTIFICATE-----\nMIIBezCCASGgAwIBAgIUbICzj2fwrA7AFxGL1R3ryw62YrwwCgYIKoZIzj0EAwIw\nEjEQMA4GA1UEAwwHdGVzdCBDQTAgFw0yNjExMjQyMzQyNDdaGA8yMTI2MTAzMTIz\nNDI0N1owEjEQMA4GA1UEAwwHdGVzdCBDQTBZMBMGByqGSM49AgEGCCqGSM49AwEH\nA0IABBTmTOcnZd0zIf5NhhnlQYSR4vSusc9X2eJAPhTWZVLDUam+Xzqqu2Ici3GM\n9uGo7L/50KEZhx7SkH4yc4PE5OKjUzBRMB0GA1UdDgQWBBS7mwn97IulMDvmMGVl\nV98CzOSB2TAfBgNVHSMEGDAWgBS7mwn97IulMDvmMGVlV98CzOSB2TAPBgNVHRMB\nAf8EBTADAQH/MAoGCCqGSM49BAMCA0gAMEUCIC2s6//4qIIL+DjLcsDC17s+wRaQ\n17/K1I6kRBjlWNCdAiEAyP9BaTk8ieXeTHUeK/n00hX2jVrmUGzu/iB44siMD8c=\n-----END CERTIFICATE-----\n";
    let input = objects(vec![
        ing(
            "main",
            "2026-01-01T00:00:00Z",
            json!({
                "nginx.ingress.kubernetes.io/backend-protocol": "HTTPS",
                "nginx.ingress.kubernetes.io/proxy-ssl-verify": "on",
                "nginx.ingress.kubernetes.io/proxy-ssl-secret": "shop/backend-ca",
                "nginx.ingress.kubernetes.io/proxy-ssl-name": "api.internal",
                "nginx.ingress.kubernetes.io/default-backend": "errors",
                "nginx.ingress.kubernetes.io/custom-http-errors": "503",
            }),
            "a.test",
            "api",
        ),
        ing(
            "next",
            "2026-01-02T00:00:00Z",
            json!({
                "nginx.ingress.kubernetes.io/canary": "true",
                "nginx.ingress.kubernetes.io/canary-by-header": "X-Canary",
                "nginx.ingress.kubernetes.io/canary-by-cookie": "beta",
                "nginx.ingress.kubernetes.io/canary-weight": "20",
            }),
            "a.test",
            "api-next",
        ),
        ing(
            "lost",
            "2026-01-02T00:00:00Z",
            json!({"nginx.ingress.kubernetes.io/canary": "true"}),
            "nowhere.test",
            "api-next",
        ),
        ing(
            "raw",
            "2026-01-03T00:00:00Z",
            json!({"nginx.ingress.kubernetes.io/ssl-passthrough": "true"}),
            "raw.test",
            "tls-app",
        ),
        ing(
            "loose",
            "2026-01-04T00:00:00Z",
            json!({"nginx.ingress.kubernetes.io/backend-protocol": "HTTPS"}),
            "loose.test",
            "api",
        ),
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "backend-ca", "namespace": "shop"},
            "stringData": {"ca.crt": ca_pem}}),
    ]);
    let mut m = Migration::default();
    migrate_objects(&opts(), &input, &mut m);
    let report = m.report();
    assert_eq!(m.ingresses, 5, "{report}");

    // The canary's rules are in the main Ingress's route, before its own.
    assert!(
        !m.objects
            .iter()
            .any(|o| o["kind"] == "HTTPRoute" && o["metadata"]["name"] == "next"),
        "{:#?}",
        m.objects
    );
    let rules = find(&m, "HTTPRoute", "main")["spec"]["rules"]
        .as_array()
        .unwrap()
        .clone();
    let to = |r: &Value| -> Vec<(String, Value)> {
        r["backendRefs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (b["name"].as_str().unwrap().to_owned(), b["weight"].clone()))
            .collect()
    };
    assert_eq!(rules.len(), 5, "{rules:#?}");
    assert_eq!(
        rules[0]["matches"][0]["headers"],
        json!([{"name": "x-canary", "value": "always"}])
    );
    assert_eq!(to(&rules[0]), [("api-next".to_owned(), Value::Null)]);
    assert_eq!(
        rules[1]["matches"][0]["headers"],
        json!([{"name": "x-canary", "value": "never"}])
    );
    assert_eq!(to(&rules[1]), [("api".to_owned(), Value::Null)]);
    assert_eq!(rules[2]["matches"][0]["headers"][0]["name"], "cookie");
    assert_eq!(
        rules[2]["matches"][0]["headers"][0]["type"],
        "RegularExpression"
    );
    assert_eq!(to(&rules[2]), [("api-next".to_owned(), Value::Null)]);
    assert_eq!(to(&rules[3]), [("api".to_owned(), Value::Null)]);
    assert_eq!(
        to(&rules[4]),
        [
            ("api".to_owned(), json!(80)),
            ("api-next".to_owned(), json!(20))
        ]
    );
    assert!(
        report.contains("Ingress shop/lost: not carried over: canary path \"/\""),
        "{report}"
    );

    // ssl-passthrough: a TLSRoute on a Passthrough listener; no TLS listener for the host.
    let gw = find(&m, "Gateway", "gw");
    let listeners = gw["spec"]["listeners"].as_array().unwrap();
    let pass = listeners
        .iter()
        .find(|l| l["name"] == "passthrough-0")
        .unwrap();
    assert_eq!(pass["tls"]["mode"], "Passthrough");
    assert_eq!(pass["hostname"], "raw.test");
    assert!(
        !listeners
            .iter()
            .any(|l| l["hostname"] == "raw.test" && l["protocol"] == "HTTPS")
    );
    let tls_route = find(&m, "TLSRoute", "raw-passthrough-0");
    assert_eq!(tls_route["spec"]["hostnames"], json!(["raw.test"]));
    assert_eq!(
        tls_route["spec"]["parentRefs"][0]["sectionName"],
        "passthrough-0"
    );
    assert_eq!(
        tls_route["spec"]["rules"][0]["backendRefs"][0]["name"],
        "tls-app"
    );

    // backend-protocol HTTPS with verification: a BackendTLSPolicy and its CA ConfigMap.
    let cm = find(&m, "ConfigMap", "main-backend-ca");
    assert_eq!(cm["data"]["ca.crt"], ca_pem);
    let btls = find(&m, "BackendTLSPolicy", "main-api");
    assert_eq!(btls["spec"]["targetRefs"][0]["name"], "api");
    assert_eq!(btls["spec"]["validation"]["hostname"], "api.internal");
    assert_eq!(
        btls["spec"]["validation"]["caCertificateRefs"][0]["name"],
        "main-backend-ca"
    );
    // Without verification, and the error pages: reported.
    assert!(
        report.contains(
            "Ingress shop/loose: not carried over: backend-protocol: HTTPS without proxy-ssl-verify"
        ),
        "{report}"
    );
    for a in ["default-backend", "custom-http-errors"] {
        assert!(
            report.contains(&format!(
                "annotation nginx.ingress.kubernetes.io/{a}: weir migrate does not carry it over"
            )),
            "{report}"
        );
    }
}
