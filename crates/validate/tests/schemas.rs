//! The checked-in schemas (`schemas/*.json`) are generated from the CRDs and must match
//! them: this test regenerates each file and compares. `WEIR_BLESS=1` (what
//! `scripts/gen-api-schemas` sets) rewrites the files instead.
//!
//! The Gateway API CRDs are those `scripts/k8s-env install` caches (the v1.6.3 experimental
//! channel, a superset of the standard one, plus v1.4.0's XListenerSet CRD): exactly what
//! the Kubernetes test tier's API server runs. weir's own come from `deploy/crds/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Map, Value, json};

/// The kinds weir reads, by CRD group: only their schemas are kept.
const GATEWAY_KINDS: [&str; 10] = [
    "GatewayClass",
    "Gateway",
    "HTTPRoute",
    "GRPCRoute",
    "ReferenceGrant",
    "ListenerSet",
    "XListenerSet",
    "TLSRoute",
    "TCPRoute",
    "UDPRoute",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory of the cached experimental-channel CRDs, from `scripts/k8s-env paths`.
fn gateway_api_dir() -> PathBuf {
    let out = Command::new(root().join("scripts/k8s-env"))
        .arg("paths")
        .output()
        .expect("run scripts/k8s-env paths");
    let text = String::from_utf8_lossy(&out.stdout);
    let dir = text
        .lines()
        .find_map(|l| l.strip_prefix("GATEWAY_API_EXPERIMENTAL="))
        .expect("scripts/k8s-env paths prints GATEWAY_API_EXPERIMENTAL");
    let dir = PathBuf::from(dir);
    assert!(
        dir.join("../standard/.complete").exists(),
        "the Gateway API CRDs are not cached in {}: run `scripts/k8s-env install` \
         (fetches sigs.k8s.io/gateway-api@v1.6.3 and @v1.4.0 through the Go module proxy)",
        dir.display()
    );
    dir
}

/// Removes what validation does not need from a schema: prose (`description`), and the
/// `status` of a top-level schema (the API server ignores `status` on the main resource of
/// a kind with a status subresource).
fn strip(schema: &mut Value) {
    let Value::Object(map) = schema else { return };
    map.remove("description");
    for key in ["items", "additionalProperties", "not"] {
        if let Some(s) = map.get_mut(key) {
            strip(s);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(list)) = map.get_mut(key) {
            list.iter_mut().for_each(strip);
        }
    }
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        props.values_mut().for_each(strip);
    }
}

/// The served versions of every CRD in `files` whose kind is in `kinds`, as
/// `{"<group>/<version>/<kind>": schema}`.
fn extract(files: &[PathBuf], kinds: &[&str]) -> Map<String, Value> {
    let mut out = Map::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for crd in docs {
            if crd["kind"] != "CustomResourceDefinition" {
                continue;
            }
            let spec = &crd["spec"];
            let kind = spec["names"]["kind"].as_str().unwrap();
            if !kinds.contains(&kind) {
                continue;
            }
            let group = spec["group"].as_str().unwrap();
            for version in spec["versions"].as_array().unwrap() {
                if version["served"] != true {
                    continue;
                }
                let mut schema = version["schema"]["openAPIV3Schema"].clone();
                strip(&mut schema);
                if let Some(Value::Object(props)) = schema.get_mut("properties") {
                    props.remove("status");
                }
                let name = version["name"].as_str().unwrap();
                out.insert(format!("{group}/{name}/{kind}"), schema);
            }
        }
    }
    out
}

fn render(source: &str, licence: &str, schemas: Map<String, Value>) -> String {
    let doc = json!({ "source": source, "licence": licence, "schemas": schemas });
    let mut text = serde_json::to_string(&doc).unwrap();
    text.push('\n');
    text
}

fn compare_or_bless(name: &str, generated: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("schemas")
        .join(name);
    if std::env::var_os("WEIR_BLESS").is_some() {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == generated,
        "{} is out of date with its CRDs: run scripts/gen-api-schemas and commit the result",
        path.display()
    );
}

#[test]
fn gateway_api_schemas_match_the_crds() {
    let dir = gateway_api_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let schemas = extract(&files, &GATEWAY_KINDS);
    assert_eq!(
        schemas.keys().filter(|k| k.ends_with("/HTTPRoute")).count(),
        2,
        "{:?}",
        schemas.keys().collect::<Vec<_>>()
    );
    assert!(schemas.contains_key("gateway.networking.x-k8s.io/v1alpha1/XListenerSet"));
    let text = render(
        "sigs.k8s.io/gateway-api@v1.6.3 config/crd/experimental (XListenerSet: @v1.4.0), \
         served versions of the kinds weir reads, descriptions and status removed \
         (generated by scripts/gen-api-schemas)",
        "Apache-2.0, Copyright The Kubernetes Authors",
        schemas,
    );
    compare_or_bless("gateway-api-v1.6.3.json", &text);
}

#[test]
fn weir_schemas_match_the_crds() {
    let files = [root().join("deploy/crds/weir.dev.yaml")];
    let schemas = extract(&files, &["TrafficPolicy", "Backend", "DirectResponse"]);
    assert_eq!(schemas.len(), 3, "{:?}", schemas.keys().collect::<Vec<_>>());
    let text = render(
        "deploy/crds/weir.dev.yaml, descriptions and status removed (generated by scripts/gen-api-schemas)",
        "Apache-2.0 (weir)",
        schemas,
    );
    compare_or_bless("weir-dev.json", &text);
}
