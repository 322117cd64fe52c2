use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The subset of Kubernetes `metadata` weir uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    /// Object name (required).
    pub name: String,
    /// Namespace; empty means `default` for namespaced kinds (see [`crate::Object::from_value`]).
    pub namespace: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// RFC 3339 creation time; absent in files (then the order objects were first seen
    /// stands in for it).
    pub creation_timestamp: Option<String>,
    /// Spec generation, echoed as `observedGeneration` in status conditions.
    pub generation: Option<i64>,
    /// Server-assigned identity.
    pub uid: Option<String>,
    /// Server-assigned version.
    pub resource_version: Option<String>,
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
