//! Secrets and Ingresses read straight from the scanner's tree into their typed objects,
//! without a `serde_json::Value`: at startup a directory of TLS domains is nearly all
//! of these two kinds, and building, validating, reading and dropping the `Value` cost
//! more than scanning the YAML.
//!
//! [`read`] answers only when it is sure of the answer the usual path (`parse::to_object`:
//! the `Value`, `weir_validate::validate`, `Object::from_value_quick`) would give, and
//! that answer is a valid object: the same rules decide validity
//! (`weir_validate::core_verdict` runs the validators over the tree), and the fields are
//! read as serde reads them from the `Value` after `null` entries are dropped (absent
//! fields take their defaults, unknown fields are ignored, a namespace defaults to
//! `default`). Anything else — another kind, a field of an unexpected type, an invalid
//! object — is `None`, and the usual path reads the document and words its errors.

use std::borrow::Cow;
use std::sync::Arc;

use weir_api::{
    HttpIngressPath, HttpIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, IngressTls, Object, ObjectMeta, Secret, ServerMeta,
    ServiceBackendPort, TypedLocalObjectReference,
};

use crate::yaml::Node;

/// The valid Secret or Ingress `doc` is, or `None` when the usual path must decide.
pub(crate) fn read(doc: &Node<'_>) -> Option<Object> {
    let object = match (field_str(doc, "apiVersion")?, field_str(doc, "kind")?) {
        ("v1", "Secret") => Object::Secret(secret(doc)?),
        ("networking.k8s.io/v1", "Ingress") => Object::Ingress(ingress(doc)?),
        _ => return None,
    };
    weir_validate::core_verdict(doc)
        .unwrap_or(false)
        .then_some(object)
}

/// A mapping's entries, `null` values left out (`Object::from_value` drops them).
fn entries<'n, 'a>(node: &'n Node<'a>) -> Option<impl Iterator<Item = (&'n str, &'n Node<'a>)>> {
    match node {
        Node::Map(entries) => Some(
            entries
                .iter()
                .filter(|(_, v)| !matches!(v, Node::Null))
                .map(|(k, v)| (k.as_ref(), v)),
        ),
        _ => None,
    }
}

/// A field of a mapping: `None` when it is absent or `null`, or `node` is not a mapping.
fn field<'n, 'a>(node: &'n Node<'a>, key: &str) -> Option<&'n Node<'a>> {
    node.get(key).filter(|v| !matches!(v, Node::Null))
}

fn field_str<'n>(node: &'n Node<'_>, key: &str) -> Option<&'n str> {
    match field(node, key)? {
        Node::Str(s) => Some(s),
        _ => None,
    }
}

/// A string as serde reads it: `Err` for any other type.
fn string(node: &Node<'_>) -> Result<String, ()> {
    match node {
        Node::Str(s) => Ok(Cow::clone(s).into_owned()),
        _ => Err(()),
    }
}

/// A string as serde reads it, into a `Box<str>`.
fn boxed_str(node: &Node<'_>) -> Result<Box<str>, ()> {
    string(node).map(Box::from)
}

/// A string as serde reads it, into an `Arc<str>`.
fn arc_str(node: &Node<'_>) -> Result<Arc<str>, ()> {
    match node {
        Node::Str(s) => Ok(Arc::from(&**s)),
        _ => Err(()),
    }
}

/// A string shared with the reader's recent equal ones ([`weir_api::shared_str`]): a
/// namespace, and the values most Ingresses repeat (a path and its type, a backend
/// reference's group, kind and name).
fn shared(node: &Node<'_>) -> Result<Arc<str>, ()> {
    match node {
        Node::Str(s) => Ok(weir_api::shared_str(s)),
        _ => Err(()),
    }
}

/// An optional field read with `read` (absent or `null`: `None`).
fn opt<T>(
    node: &Node<'_>,
    key: &str,
    read: impl Fn(&Node<'_>) -> Result<T, ()>,
) -> Result<Option<T>, ()> {
    field(node, key).map(read).transpose()
}

/// A field with a default when absent or `null`.
fn or_default<T: Default>(
    node: &Node<'_>,
    key: &str,
    read: impl Fn(&Node<'_>) -> Result<T, ()>,
) -> Result<T, ()> {
    Ok(opt(node, key, read)?.unwrap_or_default())
}

fn list<T>(node: &Node<'_>, read: impl Fn(&Node<'_>) -> Result<T, ()>) -> Result<Vec<T>, ()> {
    match node {
        // A `null` item is not dropped: it is an error of the typed read. Sized exactly,
        // as serde sizes it (collecting a `Result` would start at four items: 600 bytes
        // more per Ingress held for good).
        Node::Seq(items) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(read(item)?);
            }
            Ok(out)
        }
        _ => Err(()),
    }
}

/// A mapping of strings (a `BTreeMap` or a `StrMap`), `null` values left out.
fn string_map<V, M: FromIterator<(String, V)>>(
    node: &Node<'_>,
    value: impl Fn(&str) -> V,
) -> Result<M, ()> {
    entries(node)
        .ok_or(())?
        .map(|(k, v)| match v {
            Node::Str(v) => Ok((k.to_owned(), value(v))),
            _ => Err(()),
        })
        .collect()
}

fn i64_of(node: &Node<'_>) -> Result<i64, ()> {
    match node {
        Node::Int(n) => n.as_i64().ok_or(()),
        _ => Err(()),
    }
}

fn i32_of(node: &Node<'_>) -> Result<i32, ()> {
    i32::try_from(i64_of(node)?).map_err(|_| ())
}

/// A mapping (serde reads a struct from a mapping only).
fn map<'n, 'a>(node: &'n Node<'a>) -> Result<&'n Node<'a>, ()> {
    match node {
        Node::Map(_) => Ok(node),
        _ => Err(()),
    }
}

/// `metadata` of a namespaced kind, with `Object::from_value`'s checks: a name, and
/// `default` for an empty namespace.
fn metadata(doc: &Node<'_>) -> Result<ObjectMeta, ()> {
    let m = map(field(doc, "metadata").ok_or(())?)?;
    let mut meta = ObjectMeta {
        name: or_default(m, "name", arc_str)?,
        namespace: or_default(m, "namespace", shared)?,
        labels: or_default(m, "labels", |n| string_map(n, str::to_owned))?,
        annotations: or_default(m, "annotations", |n| string_map(n, str::to_owned))?,
        server: ServerMeta {
            creation_timestamp: opt(m, "creationTimestamp", boxed_str)?,
            generation: opt(m, "generation", i64_of)?,
            uid: opt(m, "uid", boxed_str)?,
            resource_version: opt(m, "resourceVersion", boxed_str)?,
        }
        .boxed(),
    };
    if meta.name.is_empty() {
        return Err(());
    }
    if meta.namespace.is_empty() {
        meta.namespace = weir_api::shared_str("default");
    }
    Ok(meta)
}

fn secret(doc: &Node<'_>) -> Option<Secret> {
    let read = || -> Result<Secret, ()> {
        Ok(Secret {
            metadata: metadata(doc)?,
            type_: or_default(doc, "type", shared)?,
            data: or_default(doc, "data", |n| string_map(n, str::to_owned))?,
            string_data: or_default(doc, "stringData", |n| {
                string_map(n, |v| Arc::<str>::from(v))
            })?,
            tls: None,
        })
    };
    let mut s = read().ok()?;
    s.pack_tls();
    Some(s)
}

fn ingress(doc: &Node<'_>) -> Option<Ingress> {
    let read = || -> Result<Ingress, ()> {
        Ok(Ingress {
            metadata: metadata(doc)?,
            spec: or_default(doc, "spec", ingress_spec)?,
        })
    };
    read().ok()
}

fn ingress_spec(node: &Node<'_>) -> Result<IngressSpec, ()> {
    let spec = map(node)?;
    Ok(IngressSpec {
        ingress_class_name: opt(spec, "ingressClassName", boxed_str)?,
        default_backend: opt(spec, "defaultBackend", |n| backend(n).map(Box::new))?,
        tls: or_default(spec, "tls", |n| list(n, tls))?,
        rules: or_default(spec, "rules", |n| list(n, rule))?,
    })
}

fn tls(node: &Node<'_>) -> Result<IngressTls, ()> {
    let tls = map(node)?;
    Ok(IngressTls {
        hosts: or_default(tls, "hosts", |n| list(n, shared))?,
        secret_name: opt(tls, "secretName", string)?,
    })
}

fn rule(node: &Node<'_>) -> Result<IngressRule, ()> {
    let rule = map(node)?;
    Ok(IngressRule {
        host: opt(rule, "host", shared)?,
        http: opt(rule, "http", |n| {
            Ok(HttpIngressRuleValue {
                paths: or_default(map(n)?, "paths", |n| list(n, path))?,
            })
        })?,
    })
}

fn path(node: &Node<'_>) -> Result<HttpIngressPath, ()> {
    let path = map(node)?;
    Ok(HttpIngressPath {
        path: opt(path, "path", shared)?,
        path_type: or_default(path, "pathType", shared)?,
        backend: or_default(path, "backend", backend)?,
    })
}

fn backend(node: &Node<'_>) -> Result<IngressBackend, ()> {
    let b = map(node)?;
    Ok(IngressBackend {
        service: opt(b, "service", |n| {
            let s = map(n)?;
            Ok(IngressServiceBackend {
                name: or_default(s, "name", string)?,
                port: or_default(s, "port", |n| {
                    let p = map(n)?;
                    Ok(ServiceBackendPort {
                        number: opt(p, "number", i32_of)?,
                        name: opt(p, "name", string)?,
                    })
                })?,
            })
        })?,
        resource: opt(b, "resource", |n| {
            let r = map(n)?;
            Ok(TypedLocalObjectReference {
                api_group: opt(r, "apiGroup", shared)?,
                kind: or_default(r, "kind", shared)?,
                name: or_default(r, "name", shared)?,
            })
        })?,
    })
}

/// Checks [`read`] against the usual path on one document's text: when it reads an
/// object, the usual path (quick and precise) reads the identical object from the same
/// document. `Ok(true)` when it read one. For the tests and the `yaml_value` fuzz target.
pub(crate) fn check(text: &str) -> Result<bool, String> {
    let Some(node) = crate::yaml::scan_node(text) else {
        return Ok(false);
    };
    let Some(object) = read(&node) else {
        return Ok(false);
    };
    let value = node.into_value();
    for quick in [true, false] {
        match crate::parse::to_object(value.clone(), quick) {
            Some(Ok(usual)) if usual == object => {}
            other => {
                return Err(format!(
                    "typed read {object:?} but the usual path (quick: {quick}) {other:?} for {text:?}"
                ));
            }
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests;
