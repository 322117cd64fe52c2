//! The CustomResourceDefinitions of weir's own kinds (group `weir.dev`), generated from
//! the types weir parses them with, so the API server validates exactly what weir reads.
//!
//! The schemas come from `#[derive(JsonSchema)]` (schemars) on the types of
//! [`crate::weir`] and the few Gateway API types they embed: descriptions from the doc
//! comments, bounds, patterns and CEL rules from `#[schemars(...)]` attributes on the
//! fields and types they constrain. [`structural`] then rewrites schemars' JSON Schema into
//! a Kubernetes structural schema (no `$ref`, no `null` types, enums instead of `oneOf`
//! constants, no defaults). `weir crds` prints [`weir_dev_crds_yaml`];
//! `deploy/crds/weir.dev.yaml` is its output, checked by `crates/api/tests/crds.rs`.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::status::PolicyStatus;
use crate::weir::{Backend, DirectResponse, TrafficPolicy};

/// A Gateway API duration (`Duration` of the Gateway API CRDs): 1 to 4 numbers with units.
pub(crate) const DURATION: &str = r"^([0-9]{1,5}(h|m|s|ms)){1,4}$";
/// An HTTP header name or method (an RFC 9110 token).
pub(crate) const TOKEN: &str = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$";
/// An `http://` or `https://` URL without a fragment or user info.
pub(crate) const HTTP_URL: &str = r"^https?://[^\s#@]+$";
/// An `https://` URL without a fragment or user info.
pub(crate) const HTTPS_URL: &str = r"^https://[^\s#@]+$";
/// A quoted-string of `WWW-Authenticate` without quotes, backslashes or controls.
pub(crate) const REALM: &str = r#"^[^"\\\x00-\x1f\x7f]*$"#;

/// The schema of an object kept as the API server receives it (`ancestorRef` and the
/// conditions of a policy status: written by weir and by other controllers).
pub(crate) fn opaque_object(_: &mut schemars::SchemaGenerator) -> Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// A list of at most 8 [`opaque_object`]s (the conditions of a status entry).
pub(crate) fn opaque_conditions(g: &mut schemars::SchemaGenerator) -> Schema {
    let item = opaque_object(g);
    schemars::json_schema!({"type": "array", "maxItems": 8, "items": item})
}

/// A `metadata` field: the API server owns its schema (replaced by `{type: object}`).
pub(crate) fn any_object(_: &mut schemars::SchemaGenerator) -> Schema {
    schemars::json_schema!({"type": "object"})
}

/// The methods of HTTPRoute's CORS filter (`allowMethods`).
pub(crate) fn cors_methods(schema: &mut Schema) {
    item_enum(
        schema,
        &[
            "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "*",
        ],
    );
}

/// The field names of a TrafficPolicy's `accessLog.fields`.
pub(crate) fn access_log_fields(schema: &mut Schema) {
    item_enum(schema, &crate::weir::ACCESS_LOG_FIELD_NAMES);
}

/// Restricts the items of a string list to `values` (an enum of the CRD; the Rust field
/// stays a string that the translator checks again).
pub(crate) fn item_enum(schema: &mut Schema, values: &[&str]) {
    if let Some(items) = schema.get_mut("items").and_then(Value::as_object_mut) {
        items.insert("enum".into(), json!(values));
    }
}

/// One kind of group `weir.dev`.
struct CrdKind {
    kind: &'static str,
    plural: &'static str,
    short_names: &'static [&'static str],
    /// The object's schema (`spec` from the Rust type).
    schema: Schema,
    /// The `status` subresource's schema, for kinds weir writes a status to.
    status: Option<Schema>,
}

fn schema_of<T: JsonSchema>() -> Schema {
    let mut settings = SchemaSettings::draft07();
    settings.inline_subschemas = true;
    settings.meta_schema = None;
    settings.into_generator().into_root_schema_for::<T>()
}

/// The CRDs of TrafficPolicy, Backend and DirectResponse, as JSON values (`apiVersion:
/// apiextensions.k8s.io/v1`), each with a structural schema.
pub fn weir_dev_crds() -> Vec<Value> {
    let kinds = [
        CrdKind {
            kind: "TrafficPolicy",
            plural: "trafficpolicies",
            short_names: &["wtp"],
            schema: schema_of::<TrafficPolicy>(),
            status: Some(schema_of::<PolicyStatus>()),
        },
        CrdKind {
            kind: "Backend",
            plural: "backends",
            short_names: &[],
            schema: schema_of::<Backend>(),
            status: None,
        },
        CrdKind {
            kind: "DirectResponse",
            plural: "directresponses",
            short_names: &[],
            schema: schema_of::<DirectResponse>(),
            status: None,
        },
    ];
    kinds.into_iter().map(crd).collect()
}

fn crd(k: CrdKind) -> Value {
    let mut schema = k.schema.to_value();
    structural(&mut schema);
    let root = schema.as_object_mut().expect("an object schema");
    let props = root
        .get_mut("properties")
        .and_then(Value::as_object_mut)
        .expect("an object with properties");
    // The API server owns the metadata schema; a CRD may not constrain more than name.
    props.insert("apiVersion".into(), json!({"type": "string"}));
    props.insert("kind".into(), json!({"type": "string"}));
    props.insert("metadata".into(), json!({"type": "object"}));
    let mut version = json!({
        "name": "v1alpha1",
        "served": true,
        "storage": true,
    });
    if let Some(status) = k.status {
        let mut status = status.to_value();
        structural(&mut status);
        props.insert("status".into(), status);
        version["subresources"] = json!({"status": {}});
        version["additionalPrinterColumns"] =
            json!([{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]);
    }
    version["schema"] = json!({"openAPIV3Schema": schema});
    let singular = k.kind.to_ascii_lowercase();
    let mut names = json!({
        "kind": k.kind,
        "listKind": format!("{}List", k.kind),
        "plural": k.plural,
        "singular": singular,
        "categories": ["weir"],
    });
    if !k.short_names.is_empty() {
        names["shortNames"] = json!(k.short_names);
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{}.weir.dev", k.plural),
            "labels": {"app.kubernetes.io/part-of": "weir"},
        },
        "spec": {
            "group": "weir.dev",
            "names": names,
            "scope": "Namespaced",
            "versions": [version],
        },
    })
}

/// Rewrites a schemars schema (inlined subschemas) into a Kubernetes structural schema:
/// `Option`'s `null` alternatives go (an absent field is how Kubernetes says "unset"),
/// unit enums become `enum`s of strings, `const` an `enum` of one, and keys the API server
/// refuses or would act on (`$schema`, `title`, `format`, `default`) are dropped. A
/// default would be written into stored objects, and the Rust defaults (`""`, `[]`) are
/// "unset", not values.
pub fn structural(schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    // An `Option<Enum>` is `anyOf: [{oneOf: [constants]}, null]`: merge until neither is left.
    while merge_alternatives(obj) {}
    for key in ["$schema", "title", "format", "default", "definitions"] {
        obj.remove(key);
    }
    if let Some(c) = obj.remove("const") {
        obj.insert("enum".into(), json!([c]));
    }
    if let Some(Value::Array(types)) = obj.get("type") {
        let rest: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if let [one] = rest.as_slice() {
            obj.insert("type".into(), one.clone());
        }
    }
    for (key, value) in obj.iter_mut() {
        match key.as_str() {
            "properties" => {
                if let Value::Object(props) = value {
                    props.values_mut().for_each(structural);
                }
            }
            "items" | "additionalProperties" => structural(value),
            _ => {}
        }
    }
}

/// Replaces one `anyOf`/`oneOf` of `obj` by what it means without `null`: an `enum` of
/// string constants, or the one remaining alternative merged in (the keys `obj` already
/// has, such as a field's own description, win). Returns whether it changed anything.
fn merge_alternatives(obj: &mut Map<String, Value>) -> bool {
    for key in ["anyOf", "oneOf"] {
        let Some(Value::Array(alts)) = obj.remove(key) else {
            continue;
        };
        let alts: Vec<Value> = alts
            .into_iter()
            .filter(|a| a.get("type") != Some(&json!("null")))
            .collect();
        if let Some(values) = constants(&alts) {
            obj.insert("type".into(), json!("string"));
            obj.insert("enum".into(), Value::Array(values));
        } else if let [Value::Object(inner)] = alts.as_slice() {
            for (k, v) in inner {
                obj.entry(k.clone()).or_insert_with(|| v.clone());
            }
        } else {
            panic!("a schema with {key} alternatives has no structural form: {alts:?}");
        }
        return true;
    }
    false
}

/// The string constants of a unit enum's alternatives (`{const}` or `{enum}` each).
fn constants(alts: &[Value]) -> Option<Vec<Value>> {
    let mut out = Vec::new();
    for alt in alts {
        match (alt.get("const"), alt.get("enum")) {
            (Some(c @ Value::String(_)), None) => out.push(c.clone()),
            (None, Some(Value::Array(values))) if values.iter().all(Value::is_string) => {
                out.extend(values.iter().cloned())
            }
            _ => return None,
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The CRDs as one YAML stream, the content of `deploy/crds/weir.dev.yaml`.
pub fn weir_dev_crds_yaml() -> String {
    let mut out = String::from(
        "# weir's own kinds (group weir.dev, version v1alpha1): TrafficPolicy, Backend and\n\
         # DirectResponse. GENERATED by `weir crds` from the types in crates/api/src/weir.rs\n\
         # (their doc comments and #[schemars] attributes): do not edit; regenerate with\n\
         # WEIR_BLESS=1 cargo test -p weir-api --test crds. Apply beside the Gateway API CRDs:\n\
         # kubectl apply -f deploy/crds/\n",
    );
    for crd in weir_dev_crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&Ordered(&crd)).expect("a JSON value is YAML"));
    }
    out
}

/// A JSON value serialized with its keys in reading order (what an object is before
/// how it is constrained), independent of serde_json's map order.
struct Ordered<'a>(&'a Value);

fn rank(key: &str) -> (u8, &str) {
    const FIRST: &[&str] = &[
        "apiVersion",
        "kind",
        "metadata",
        "name",
        "description",
        "type",
        "spec",
        "group",
        "names",
        "scope",
        "versions",
        "served",
        "storage",
        "subresources",
        "additionalPrinterColumns",
        "required",
    ];
    const LAST: &[&str] = &["properties", "items", "schema"];
    match FIRST.iter().position(|k| *k == key) {
        Some(i) => (i as u8, ""),
        None => match LAST.iter().position(|k| *k == key) {
            Some(i) => (200 + i as u8, ""),
            None => (100, key),
        },
    }
}

impl Serialize for Ordered<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort_by_key(|k| rank(k));
                let mut m = s.serialize_map(Some(keys.len()))?;
                for k in keys {
                    m.serialize_entry(k, &Ordered(&map[k]))?;
                }
                m.end()
            }
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Ordered(item))?;
                }
                seq.end()
            }
            other => other.serialize(s),
        }
    }
}
