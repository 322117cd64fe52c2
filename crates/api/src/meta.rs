use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The subset of Kubernetes `metadata` weir uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    /// Object name (required). Shared: every [`crate::ObjectKey`] of the object (the
    /// provider's, the translator's, its status's) holds this buffer instead of a copy.
    pub name: Arc<str>,
    /// Namespace; empty means `default` for namespaced kinds (see [`crate::Object::from_value`]).
    /// Shared like the name; readers of many objects give equal namespaces one buffer.
    #[serde(deserialize_with = "shared_namespace")]
    pub namespace: Arc<str>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// RFC 3339 creation time; absent in files (then the order objects were first seen
    /// stands in for it).
    pub creation_timestamp: Option<Box<str>>,
    /// Spec generation, echoed as `observedGeneration` in status conditions.
    pub generation: Option<i64>,
    /// Server-assigned identity.
    pub uid: Option<Box<str>>,
    /// Server-assigned version.
    pub resource_version: Option<Box<str>>,
}

/// `s` as an `Arc<str>`, shared with the last equal strings this thread asked for (it
/// keeps the 16 most recent). For namespaces: a reader of 20,000 objects of one namespace
/// then holds its name once instead of 20,000 times (16–32 bytes plus a heap header
/// each), and the keys built from the objects share it too.
pub fn shared_str(s: &str) -> Arc<str> {
    use std::cell::RefCell;
    const KEEP: usize = 16;
    thread_local! {
        static RECENT: RefCell<Vec<Arc<str>>> = const { RefCell::new(Vec::new()) };
    }
    RECENT.with_borrow_mut(|recent| {
        if let Some(i) = recent.iter().position(|r| **r == *s) {
            let hit = recent[i].clone();
            // Most recent first: a lookup for the usual namespace stops at the first entry.
            recent[..=i].rotate_right(1);
            return hit;
        }
        let new: Arc<str> = s.into();
        if recent.len() == KEEP {
            recent.pop();
        }
        recent.insert(0, new.clone());
        new
    })
}

/// Reads a namespace into a buffer shared with the equal ones read before it.
fn shared_namespace<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
    shared(d)
}

/// Reads a string into a buffer shared with the equal ones read before it
/// ([`shared_str`]): for values most objects repeat (an Ingress path's type, a backend
/// reference's kind).
pub(crate) fn shared<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
    let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
    Ok(shared_str(&s))
}

/// [`shared`] for an optional string.
pub(crate) fn shared_opt<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Arc<str>>, D::Error> {
    let s = <Option<std::borrow::Cow<'de, str>>>::deserialize(d)?;
    Ok(s.map(|s| shared_str(&s)))
}

/// A list read to exactly its length. Read from JSON text (the Kubernetes provider),
/// serde grows a list without knowing its length, so a one-entry list holds room for
/// four: at 100,000 Ingresses the spare room of their `tls`, `hosts`, `rules` and
/// `paths` was about 85 MiB.
pub(crate) fn exact_vec<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    let mut v = Vec::<T>::deserialize(d)?;
    v.shrink_to_fit();
    Ok(v)
}

/// A Kubernetes label selector.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelector {
    /// Labels that must be equal.
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One set-based requirement of a [`LabelSelector`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelectorRequirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values for `In` / `NotIn`.
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector. An unknown operator never matches.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| {
                let got = labels.get(&e.key);
                match e.operator.as_str() {
                    "In" => got.is_some_and(|v| e.values.contains(v)),
                    "NotIn" => got.is_none_or(|v| !e.values.contains(v)),
                    "Exists" => got.is_some(),
                    "DoesNotExist" => got.is_none(),
                    _ => false,
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_str_gives_equal_strings_one_buffer() {
        let a = shared_str("default");
        let b = shared_str("default");
        assert!(Arc::ptr_eq(&a, &b));
        let other = shared_str("kube-system");
        assert_eq!(&*other, "kube-system");
        assert!(!Arc::ptr_eq(&a, &other));
        // Still shared after other namespaces were asked for, as long as fewer than 16.
        for i in 0..10 {
            shared_str(&format!("ns-{i}"));
        }
        assert!(Arc::ptr_eq(&a, &shared_str("default")));
        // Past the 16 most recent, a new buffer: equal content, never a wrong string.
        for i in 0..20 {
            shared_str(&format!("more-{i}"));
        }
        let c = shared_str("default");
        assert_eq!(&*c, "default");
        assert!(!Arc::ptr_eq(&a, &c));
    }

    #[test]
    fn typed_and_serde_reads_of_a_namespace_compare_equal() {
        let m: ObjectMeta =
            serde_json::from_value(serde_json::json!({"name": "a", "namespace": "ns"})).unwrap();
        let typed = ObjectMeta {
            name: "a".into(),
            namespace: shared_str("ns"),
            ..ObjectMeta::default()
        };
        assert_eq!(m, typed);
        let again: ObjectMeta =
            serde_json::from_value(serde_json::json!({"name": "b", "namespace": "ns"})).unwrap();
        assert!(Arc::ptr_eq(&m.namespace, &again.namespace));
    }
}
