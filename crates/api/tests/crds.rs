//! `deploy/crds/weir.dev.yaml` is the output of the CRD generator (`weir crds`): this test
//! regenerates it and compares. `WEIR_BLESS=1` writes the file instead (then bless
//! `crates/validate/schemas/weir-dev.json` from it: `scripts/gen-api-schemas`).

use std::path::Path;

use serde_json::Value;

fn checked_in() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds/weir.dev.yaml")
}

#[test]
fn checked_in_crds_are_the_generators_output() {
    let generated = weir_api::crd::weir_dev_crds_yaml();
    let path = checked_in();
    if std::env::var_os("WEIR_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if current != generated {
        let first = current
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(current.lines().count().min(generated.lines().count()));
        panic!(
            "{} differs from `weir crds` from line {} (checked in: {:?}, generated: {:?}): \
             regenerate with WEIR_BLESS=1 cargo test -p weir-api --test crds and commit it",
            path.display(),
            first + 1,
            current.lines().nth(first),
            generated.lines().nth(first),
        );
    }
}

/// Walks every schema node (properties, items) with its path.
fn walk(path: &str, schema: &Value, f: &mut dyn FnMut(&str, &serde_json::Map<String, Value>)) {
    let obj = schema.as_object().expect("a schema is an object");
    f(path, obj);
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (k, v) in props {
            walk(&format!("{path}.{k}"), v, f);
        }
    }
    if let Some(items) = obj.get("items") {
        walk(&format!("{path}[]"), items, f);
    }
}

fn schema_of(kind: &str) -> Value {
    weir_api::crd::weir_dev_crds()
        .into_iter()
        .find(|c| c["spec"]["names"]["kind"] == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"))["spec"]["versions"][0]["schema"]
        ["openAPIV3Schema"]
        .clone()
}

/// The structural-schema rules of apiextensions.k8s.io/v1 that schemars output breaks
/// unless rewritten: every node has a type (or preserves unknown fields), no references,
/// no alternatives, no `null`, no defaults.
#[test]
fn schemas_are_structural() {
    for kind in ["TrafficPolicy", "Backend", "DirectResponse"] {
        let mut nodes = 0;
        walk(kind, &schema_of(kind), &mut |path, node| {
            nodes += 1;
            for key in [
                "$ref", "anyOf", "oneOf", "allOf", "const", "default", "nullable",
            ] {
                assert!(!node.contains_key(key), "{path} has {key}: {node:?}");
            }
            match node.get("type") {
                Some(Value::String(t)) => {
                    assert!(
                        ["object", "array", "string", "integer", "number", "boolean"]
                            .contains(&t.as_str()),
                        "{path}: {t}"
                    );
                    if t == "array" {
                        assert!(node.contains_key("items"), "{path}: an array without items");
                    }
                }
                other => panic!("{path} has type {other:?}"),
            }
            if let Some(Value::Array(required)) = node.get("required") {
                let props = node["properties"].as_object().unwrap();
                for r in required {
                    assert!(
                        props.contains_key(r.as_str().unwrap()),
                        "{path} requires unknown {r}"
                    );
                }
            }
        });
        assert!(nodes > 3, "{kind}: {nodes} nodes");
    }
}

/// The validations come from the Rust attributes, descriptions from the doc comments.
#[test]
fn schemas_carry_bounds_enums_rules_and_descriptions() {
    let tp = schema_of("TrafficPolicy");
    let spec = &tp["properties"]["spec"];
    assert_eq!(spec["required"], serde_json::json!(["targetRefs"]));
    assert_eq!(spec["properties"]["targetRefs"]["maxItems"], 16);
    assert_eq!(
        spec["properties"]["retry"]["properties"]["retryOn"]["items"]["enum"],
        serde_json::json!(["5xx", "gateway-error"])
    );
    let local = &spec["properties"]["rateLimit"]["properties"]["local"];
    assert_eq!(
        local["properties"]["unit"]["enum"],
        serde_json::json!(["Second", "Minute", "Hour"])
    );
    assert_eq!(local["properties"]["requests"]["minimum"], 1);
    let provider = &spec["properties"]["jwtAuth"]["properties"]["providers"]["items"];
    assert_eq!(
        provider["x-kubernetes-validations"][0]["rule"],
        "has(self.jwks) != has(self.remoteJwks)"
    );
    assert_eq!(
        spec["properties"]["jwtAuth"]["properties"]["providers"]["x-kubernetes-list-type"],
        "map"
    );
    let desc = spec["properties"]["basicAuth"]["properties"]["realm"]["description"]
        .as_str()
        .unwrap();
    assert!(desc.contains("WWW-Authenticate"), "{desc}");
    assert_eq!(
        tp["properties"]["metadata"],
        serde_json::json!({"type": "object"})
    );
    assert_eq!(
        tp["properties"]["status"]["properties"]["ancestors"]["items"]["properties"]["ancestorRef"]
            ["x-kubernetes-preserve-unknown-fields"],
        true
    );
    let backend = schema_of("Backend");
    assert_eq!(
        backend["properties"]["spec"]["properties"]["protocol"]["enum"],
        serde_json::json!(["HTTP", "H2C"])
    );
}
