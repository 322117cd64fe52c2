//! Keyword-by-keyword tests on small schemas, and a few objects through the real ones.

use serde_json::{Value, json};

use super::*;

fn run(schema: Value, mut value: Value) -> (Value, Vec<String>) {
    let schema = Schema::compile(&schema).unwrap();
    let mut errs = Vec::new();
    schema.apply(&mut value, &mut Path::default(), &mut errs);
    (value, errs.iter().map(ToString::to_string).collect())
}

fn errors(schema: Value, value: Value) -> Vec<String> {
    run(schema, value).1
}

#[test]
fn every_embedded_schema_compiles() {
    // 18 Gateway API kind versions and weir's three kinds.
    assert_eq!(compile_all(), Ok(21));
}

#[test]
fn types_enums_and_bounds() {
    let s = json!({"type": "object", "properties": {
        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
        "mode": {"type": "string", "enum": ["A", "B"]},
        "name": {"type": "string", "minLength": 1, "maxLength": 3, "pattern": "^[a-z]+$"},
        "weight": {"type": "integer", "minimum": 0, "exclusiveMaximum": true, "maximum": 10}
    }});
    assert!(
        errors(
            s.clone(),
            json!({"port": 80, "mode": "A", "name": "ab", "weight": 9})
        )
        .is_empty()
    );
    let e = errors(
        s.clone(),
        json!({"port": 0, "mode": "C", "name": "ABCD", "weight": 10}),
    );
    assert_eq!(
        e,
        [
            "mode: Unsupported value: \"C\": supported values: \"A\", \"B\"",
            "name: Too long: may not be more than 3 bytes",
            "name: Invalid value: \"ABCD\": should match '^[a-z]+$'",
            "port: Invalid value: 0: should be greater than or equal to 1",
            "weight: Invalid value: 10: should be less than 10",
        ]
    );
    assert_eq!(
        errors(s.clone(), json!({"port": "80"})),
        ["port: Invalid value: \"string\": must be of type integer"]
    );
    // Lengths count characters: three two-byte characters fit in maxLength 3.
    assert_eq!(
        errors(s, json!({"name": "ééé"})).len(),
        1,
        "only the pattern fails"
    );
}

#[test]
fn required_items_and_lists() {
    let s = json!({"type": "object", "required": ["refs"], "properties": {
        "refs": {"type": "array", "minItems": 1, "maxItems": 2,
                 "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                 "items": {"type": "object", "required": ["name"], "properties": {
                     "name": {"type": "string"}, "port": {"type": "integer"}}}},
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
    }});
    assert_eq!(errors(s.clone(), json!({})), ["refs: Required value"]);
    let e = errors(
        s.clone(),
        json!({"refs": [{"name": "a"}, {"name": "a", "port": 1}, {"port": 2}], "tags": ["x", "y", "x"]}),
    );
    assert_eq!(
        e,
        [
            "refs[2].name: Required value",
            "refs: Too many: 3: must have at most 2 items",
            "refs[1]: Duplicate value: {\"name\":\"a\"}",
            "tags[2]: Duplicate value: \"x\"",
        ]
    );
    assert_eq!(
        errors(s, json!({"refs": []})),
        ["refs: Invalid value: \"0\": should have at least 1 items"]
    );
}

#[test]
fn pruning_defaults_and_nulls() {
    let s = json!({"type": "object", "properties": {
        "kind": {"type": "string", "default": "Service"},
        "nested": {"type": "object", "default": {}, "properties": {
            "mode": {"type": "string", "default": "Terminate"}}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "keep": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "maybe": {"type": "string", "nullable": true},
        "gone": {"type": "string"}
    }});
    let (v, e) = run(
        s,
        json!({"unknown": 1, "labels": {"a": "b"}, "keep": {"x": 1}, "maybe": null, "gone": null}),
    );
    assert!(e.is_empty(), "{e:?}");
    assert_eq!(
        v,
        json!({"kind": "Service", "nested": {"mode": "Terminate"}, "labels": {"a": "b"},
               "keep": {"x": 1}, "maybe": null})
    );
}

#[test]
fn one_of_any_of_not_and_formats() {
    // The shape of a Gateway address: an IPAddress value must be an IP.
    let s = json!({"type": "object",
    "properties": {"type": {"type": "string"}, "value": {"type": "string"}},
    "oneOf": [
        {"properties": {"type": {"enum": ["IPAddress"]},
                        "value": {"anyOf": [{"format": "ipv4"}, {"format": "ipv6"}]}}},
        {"properties": {"type": {"not": {"enum": ["IPAddress"]}}}}
    ]});
    assert!(errors(s.clone(), json!({"type": "IPAddress", "value": "10.0.0.1"})).is_empty());
    assert!(errors(s.clone(), json!({"type": "Hostname", "value": "a.test"})).is_empty());
    assert_eq!(
        errors(s, json!({"type": "IPAddress", "value": "a.test"})),
        ["<root>: Invalid value: \"object\": must validate one and only one schema (oneOf)"]
    );
}

#[test]
fn cel_rules_see_defaults_and_report_field_paths() {
    let s = json!({"type": "object", "properties": {
        "listeners": {"type": "array", "items": {"type": "object", "properties": {
            "protocol": {"type": "string"},
            "tls": {"type": "object", "properties": {"mode": {"type": "string", "default": "Terminate"}}}}},
            "x-kubernetes-validations": [
                {"rule": "self.all(l, l.protocol == 'TLS' ? l.tls.mode == 'Passthrough' : true)",
                 "message": "TLS listeners pass through"}]},
        "port": {"type": "integer", "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "immutable"}]}
    }, "x-kubernetes-validations": [
        {"rule": "!has(self.port) || self.port > 0", "message": "port must be positive", "fieldPath": ".port"}]});
    assert!(
        errors(
            s.clone(),
            json!({"listeners": [{"protocol": "HTTP"}], "port": 5})
        )
        .is_empty()
    );
    assert_eq!(
        errors(
            s,
            json!({"listeners": [{"protocol": "TLS", "tls": {}}], "port": 0})
        ),
        [
            "listeners: Invalid value: \"array\": TLS listeners pass through",
            "port: Invalid value: \"object\": port must be positive",
        ]
    );
}

fn check(yaml_json: Value) -> Vec<String> {
    let mut doc = yaml_json;
    match validate(&mut doc) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn real_schemas_and_core_kinds() {
    let route = |path: &str, hosts: Value| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": "r", "namespace": "ns"},
               "spec": {"hostnames": hosts, "parentRefs": [{"name": "gw"}],
                        "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": path}}],
                                   "backendRefs": [{"name": "svc", "port": 80}]}]}})
    };
    assert_eq!(check(route("/a", json!(["a.test"]))), Vec::<String>::new());
    let e = check(route("a//b", json!(["A.test", "10.0.0.1"])));
    assert!(e.iter().any(|e| e.starts_with("spec.rules[0].matches[0].path: Invalid value: \"object\": value must be an absolute path")), "{e:?}");
    assert!(
        e.iter().any(|e| e.contains("must not contain '//'")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| e.starts_with("spec.hostnames[0]: Invalid value: \"A.test\": should match")),
        "{e:?}"
    );
    // An IP matches HTTPRoute's hostname pattern: the API server accepts it there.
    assert_eq!(e.len(), 3, "{e:?}");
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                        "metadata": {"name": "Bad_Name"}, "data": {"tls.crt": "!!"}});
    assert_eq!(
        check(secret),
        [
            "metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            "data[tls.crt]: Invalid value: \"<value omitted>\": illegal base64 data",
            "data[tls.key]: Required value",
        ]
    );
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ca"},
                            "data": {"ca.crt": "PEM", "bad key": "x", "n": 1}});
    assert_eq!(
        check(config_map),
        [
            "data[bad key]: Invalid value: \"bad key\": a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "data[n]: Invalid value: \"<value omitted>\": must be a string",
        ]
    );
    let unserved = json!({"apiVersion": "gateway.networking.k8s.io/v9", "kind": "HTTPRoute", "metadata": {"name": "r"}});
    assert_eq!(check(unserved).len(), 1);
    let other =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "_"}});
    assert!(
        check(other).is_empty(),
        "kinds weir does not read are the reader's to name"
    );
}

/// UDPRoute's bounds come from its CRD schema (the union of the served versions: v1
/// allows one rule, v1alpha2 sixteen).
#[test]
fn udp_route_bounds_come_from_the_schema() {
    let route = |version: &str, spec: Value| {
        check(
            json!({"apiVersion": format!("gateway.networking.k8s.io/{version}"), "kind": "UDPRoute",
                     "metadata": {"name": "u", "namespace": "ns"}, "spec": spec}),
        )
    };
    let ok = json!({"parentRefs": [{"name": "gw"}],
                    "rules": [{"backendRefs": [{"name": "dns", "port": 53, "weight": 2}]}]});
    assert!(route("v1", ok).is_empty());
    let backend = json!({"rules": [{"backendRefs": [{"group": "weir.dev", "kind": "Backend", "name": "b"}]}]});
    assert!(route("v1", backend).is_empty(), "a Backend needs no port");
    let two_rules = json!({"rules": [{"backendRefs": [{"name": "a", "port": 53}]},
                                     {"backendRefs": [{"name": "b", "port": 53}]}]});
    assert!(route("v1alpha2", two_rules.clone()).is_empty());
    assert_eq!(
        route("v1", two_rules),
        ["spec.rules: Too many: 2: must have at most 1 items"]
    );
    for (spec, field) in [
        (
            json!({"parentRefs": [{"name": "gw"}]}),
            "spec.rules: Required value",
        ),
        (json!({"rules": []}), "spec.rules: Invalid value: \"0\""),
        (
            json!({"rules": [{"backendRefs": [{"name": "dns"}]}]}),
            "Must have port for Service reference",
        ),
        (
            json!({"rules": [{"backendRefs": [{"name": "dns", "port": 53, "weight": -1}]}]}),
            "spec.rules[0].backendRefs[0].weight: Invalid value: -1",
        ),
        (
            json!({"rules": [{"backendRefs": []}]}),
            "spec.rules[0].backendRefs: Invalid value: \"0\"",
        ),
    ] {
        let e = route("v1alpha2", spec);
        assert!(e.iter().any(|e| e.contains(field)), "{field}: {e:?}");
    }
}

/// ConfigMaps (read for a Gateway's `parametersRef`) and a Gateway's `infrastructure`
/// labels and annotations (key formats and the CRD's bounds).
#[test]
fn config_maps_and_gateway_infrastructure() {
    let cm = |data: Value, binary: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p", "namespace": "ns"},
               "data": data, "binaryData": binary})
    };
    assert!(check(cm(json!({"replicas": "2"}), json!({"b": "AAEC"}))).is_empty());
    let e = check(cm(json!({"a b": "x", "k": "v"}), json!({"k": "!!"})));
    assert!(
        e.iter().any(|e| e.starts_with("data[a b]: Invalid value")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| e.contains("binaryData[k]") && e.contains("illegal base64")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| e.contains("duplicate of key present in binaryData")),
        "{e:?}"
    );
    let gw = |infra: Value| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "gw", "namespace": "ns"},
               "spec": {"gatewayClassName": "weir", "infrastructure": infra,
                        "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}})
    };
    assert!(
        check(gw(
            json!({"labels": {"example.com/team": "a"}, "annotations": {"k": "any value"}})
        ))
        .is_empty()
    );
    let nine: serde_json::Map<String, Value> = (0..9)
        .map(|i| (format!("l{i}"), Value::from("v")))
        .collect();
    let e = check(gw(json!({"labels": nine})));
    assert!(
        e.iter()
            .any(|e| e.starts_with("spec.infrastructure.labels: Too many")),
        "{e:?}"
    );
    let e = check(gw(json!({"labels": {"-bad": "v", "ok": "bad value"}})));
    assert_eq!(e.len(), 2, "{e:?}");
}
