//! The validation the Kubernetes API server applies to the objects weir reads, for
//! standalone mode (`weir run`, `weir check`), where no API server stands between the
//! files and weir.
//!
//! - Gateway API and weir.dev kinds: their CRDs' structural OpenAPI schemas and CEL rules,
//!   from `schemas/*.json` — generated from the CRDs by `scripts/gen-api-schemas`, never
//!   written by hand — compiled once on first use. As the API server does, unknown fields
//!   are pruned and defaults applied (so weir reads the object the API server would
//!   store), then every keyword and rule is checked.
//! - Core kinds (Ingress, IngressClass, Service, Secret, EndpointSlice, Namespace): the
//!   rules of the API server's built-in validation for the fields that decide acceptance.
//! - `metadata` of every kind: name and namespace formats, label and annotation keys.
//!
//! Every problem of an object is reported, each with its field path, in the API server's
//! words.

#![warn(missing_docs)]

mod cel;
mod core;
mod doc;
mod error;
mod meta;
mod names;
mod schema;
mod unique;

use std::collections::HashMap;
use std::sync::{LazyLock, OnceLock};

use serde_json::Value;
use serde_json::value::RawValue;

pub use crate::cel::InvalidRule;
pub use crate::doc::Doc;
use crate::error::Path;
pub use crate::error::{ErrorType, FieldError};
use crate::meta::NameRule;
pub use crate::schema::InvalidSchema;
use crate::schema::Schema;

/// Gateway API v1.6.3 (experimental channel) and v1.4.0's XListenerSet.
const GATEWAY_API: &str = include_str!("../schemas/gateway-api-v1.6.3.json");
/// weir's own CRDs (`deploy/crds/weir.dev.yaml`).
const WEIR_DEV: &str = include_str!("../schemas/weir-dev.json");

/// API groups whose kinds come from CRDs: a version or kind of these groups that no
/// schema serves is refused, as the API server has no endpoint for it.
const CRD_GROUPS: [&str; 3] = [
    "gateway.networking.k8s.io",
    "gateway.networking.x-k8s.io",
    "weir.dev",
];

/// The validation of a core kind (its metadata aside).
type CoreCheck = fn(&Value, &mut Vec<FieldError>);

/// Every served `group/version/kind` with its schema, compiled on first use. The
/// schemas stay the embedded JSON text until then: read into `Value`s up front they held
/// ~1.2 MiB for good, though a configuration of Ingresses and Secrets uses one or two.
struct Catalog {
    kinds: HashMap<&'static str, (&'static RawValue, Compiled)>,
}

/// A kind's schema once compiled (or why it could not be).
type Compiled = OnceLock<Result<Schema, String>>;

static CATALOG: LazyLock<Catalog> = LazyLock::new(|| {
    let mut kinds = HashMap::new();
    for text in [GATEWAY_API, WEIR_DEV] {
        // `{"schemas": {"group/version/kind": schema, …}}`, read without copying.
        let doc: HashMap<&str, &RawValue> =
            serde_json::from_str(text).expect("the embedded schemas are JSON");
        let schemas: HashMap<&str, &RawValue> = serde_json::from_str(doc["schemas"].get())
            .expect("the embedded schemas are a JSON object");
        for (key, schema) in schemas {
            kinds.insert(key, (schema, OnceLock::new()));
        }
    }
    Catalog { kinds }
});

impl Catalog {
    /// The compiled schema of `apiVersion`/`kind`, when one is served.
    fn schema(&self, api_version: &str, kind: &str) -> Option<Result<&Schema, &str>> {
        let (source, compiled) = self.kinds.get(format!("{api_version}/{kind}").as_str())?;
        let compiled = compiled.get_or_init(|| {
            let source: Value = serde_json::from_str(source.get()).map_err(|e| e.to_string())?;
            Schema::compile(&source).map_err(|e| e.to_string())
        });
        Some(compiled.as_ref().map_err(String::as_str))
    }
}

/// Compiles every embedded schema now (regular expressions and CEL rules), instead of on
/// first use; fails on the first that does not compile. For tests and warm-up.
pub fn compile_all() -> Result<usize, String> {
    let mut n = 0;
    for key in CATALOG.kinds.keys() {
        let (gv, kind) = key.rsplit_once('/').expect("keys are group/version/kind");
        CATALOG
            .schema(gv, kind)
            .expect("listed")
            .map_err(|e| format!("{key}: {e}"))?;
        n += 1;
    }
    Ok(n)
}

/// Validates one object (a document read from a file) as the API server would on create:
/// `Ok` when it would be accepted, otherwise every problem found.
///
/// The document is changed the way the API server changes it before storing it: for
/// kinds defined by CRDs, fields the schema does not declare are removed and defaults are
/// filled in. Documents of kinds weir does not read are left alone (`Ok`); naming them is
/// the reader's job.
pub fn validate(doc: &mut Value) -> Result<(), Vec<FieldError>> {
    let (Some(api_version), Some(kind)) = (
        doc.get("apiVersion").and_then(Value::as_str),
        doc.get("kind").and_then(Value::as_str),
    ) else {
        return Ok(());
    };
    let (api_version, kind) = (api_version.to_owned(), kind.to_owned());
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let mut errs = Vec::new();
    let core: Option<(CoreCheck, NameRule, bool)> = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Secret") => Some((core::secret, NameRule::Subdomain, true)),
        ("v1", "ConfigMap") => Some((core::config_map, NameRule::Subdomain, true)),
        ("v1", "Service") => Some((core::service, NameRule::Dns1035, true)),
        ("v1", "Namespace") => Some((core::namespace, NameRule::Label, false)),
        ("networking.k8s.io/v1", "Ingress") => Some((core::ingress, NameRule::Subdomain, true)),
        ("networking.k8s.io/v1", "IngressClass") => {
            Some((core::ingress_class, NameRule::Subdomain, false))
        }
        ("discovery.k8s.io/v1", "EndpointSlice") => {
            Some((core::endpoint_slice, NameRule::Subdomain, true))
        }
        _ => None,
    };
    if let Some((check, names, namespaced)) = core {
        meta::validate(&*doc, names, namespaced, &mut errs);
        check(doc, &mut errs);
    } else if let Some(schema) = CATALOG.schema(&api_version, &kind) {
        let namespaced = !matches!(kind.as_str(), "GatewayClass");
        meta::validate(doc, NameRule::Subdomain, namespaced, &mut errs);
        match schema {
            Ok(schema) => apply_schema(schema, doc, &mut errs),
            Err(e) => errs.push(FieldError::invalid(
                "",
                &kind,
                format!("schema unusable: {e}"),
            )),
        }
    } else if CRD_GROUPS.contains(&group)
        || matches!(
            kind.as_str(),
            "Secret"
                | "ConfigMap"
                | "Service"
                | "Namespace"
                | "Ingress"
                | "IngressClass"
                | "EndpointSlice"
        ) && matches!(group, "" | "networking.k8s.io" | "discovery.k8s.io")
    {
        errs.push(FieldError {
            field: "apiVersion".into(),
            kind: ErrorType::Unsupported(error::quote(&api_version)),
            detail: format!("no served version of {kind} in this group"),
        });
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

/// The verdict of [`validate`] on a `v1` Secret or a `networking.k8s.io/v1` Ingress read
/// into another document tree than `serde_json::Value`: `Some(true)` exactly when
/// `validate` accepts the `Value` that `doc` stands for (these kinds are not changed by
/// validation), `Some(false)` when it refuses it, `None` for every other kind. The same
/// rules run; for the error messages, call `validate` on the `Value`.
pub fn core_verdict<D: Doc>(doc: &D) -> Option<bool> {
    let field = |f: &str| doc.get(f).and_then(D::as_str);
    let mut errs = Vec::new();
    match (field("apiVersion")?, field("kind")?) {
        ("v1", "Secret") => {
            meta::validate(doc, NameRule::Subdomain, true, &mut errs);
            core::secret(doc, &mut errs);
        }
        ("networking.k8s.io/v1", "Ingress") => {
            meta::validate(doc, NameRule::Subdomain, true, &mut errs);
            core::ingress(doc, &mut errs);
        }
        _ => return None,
    }
    Some(errs.is_empty())
}

/// Runs a CRD schema over the object, leaving `metadata` to [`meta::validate`]: the API
/// server treats it as ObjectMeta, not as the schema's opaque `object`.
fn apply_schema(schema: &Schema, doc: &mut Value, errs: &mut Vec<FieldError>) {
    let metadata = doc.as_object_mut().and_then(|m| m.remove("metadata"));
    let mut path = Path::default();
    schema.apply(doc, &mut path, errs);
    if let (Some(m), Some(map)) = (metadata, doc.as_object_mut()) {
        map.insert("metadata".into(), m);
    }
}

#[cfg(test)]
mod tests;
