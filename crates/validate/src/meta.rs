//! `metadata` as the API server validates it for every kind (`ValidateObjectMeta`).

use crate::doc::Doc;
use crate::error::FieldError;
use crate::names;

/// The rule a kind's object names follow.
#[derive(Clone, Copy)]
pub(crate) enum NameRule {
    /// RFC 1123 subdomain: most kinds, custom resources included.
    Subdomain,
    /// RFC 1123 label: Namespaces.
    Label,
    /// RFC 1035 label: Services.
    Dns1035,
}

/// Annotations may hold at most this many bytes in all (keys and values).
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Checks `metadata`: the name, the namespace (for namespaced kinds), label and annotation
/// keys and values.
pub(crate) fn validate<D: Doc>(
    doc: &D,
    rule: NameRule,
    namespaced: bool,
    errs: &mut Vec<FieldError>,
) {
    let meta = doc.get("metadata");
    let field = |f: &str| meta.and_then(|m| m.get(f));
    match field("name").and_then(D::as_str) {
        None | Some("") => errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        )),
        Some(name) => {
            let problem = match rule {
                NameRule::Subdomain => names::dns1123_subdomain(name),
                NameRule::Label => names::dns1123_label(name),
                NameRule::Dns1035 => names::dns1035_label(name),
            };
            if let Some(p) = problem {
                errs.push(FieldError::invalid("metadata.name", name, p));
            }
        }
    }
    if namespaced
        && let Some(ns) = field("namespace").and_then(D::as_str)
        && let Some(p) = names::dns1123_label(ns)
    {
        errs.push(FieldError::invalid("metadata.namespace", ns, p));
    }
    if let Some(labels) = field("labels").and_then(D::entries) {
        for (k, v) in labels {
            let field = "metadata.labels";
            if let Some(p) = names::qualified_name(k) {
                errs.push(FieldError::invalid(field, k, p));
            }
            match v.as_str() {
                Some(v) => {
                    if let Some(p) = names::label_value(v) {
                        errs.push(FieldError::invalid(field, v, p));
                    }
                }
                None => errs.push(FieldError::invalid(field, &v.to_json(), "must be a string")),
            }
        }
    }
    if let Some(annotations) = field("annotations").and_then(D::entries) {
        let mut total = 0;
        for (k, v) in annotations {
            if let Some(p) = names::qualified_name(&k.to_ascii_lowercase()) {
                errs.push(FieldError::invalid("metadata.annotations", k, p));
            }
            match v.as_str() {
                Some(v) => total += k.len() + v.len(),
                None => errs.push(FieldError::invalid(
                    "metadata.annotations",
                    &v.to_json(),
                    "must be a string",
                )),
            }
        }
        if total > MAX_ANNOTATIONS_BYTES {
            errs.push(FieldError {
                field: "metadata.annotations".into(),
                kind: crate::error::ErrorType::TooLong,
                detail: format!("must have at most {MAX_ANNOTATIONS_BYTES} bytes"),
            });
        }
    }
}
