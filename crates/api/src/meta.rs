use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The subset of Kubernetes `metadata` weir uses.
///
/// The fields the API server sets (and files rarely do) are boxed together in
/// [`ServerMeta`]: an object read from a file holds 8 bytes for them instead of 64, which
/// took each stored object (`Object`, 232 bytes) into the allocator's next smaller class
/// (BENCHMARKS.md, "Session 30"). Read them with the accessors; equality treats an empty
/// box as none.
#[derive(Clone, Default, Deserialize)]
#[serde(from = "MetaFields")]
pub struct ObjectMeta {
    /// Object name (required). Shared: every [`crate::ObjectKey`] of the object (the
    /// provider's, the translator's, its status's) holds this buffer instead of a copy.
    pub name: Arc<str>,
    /// Namespace; empty means `default` for namespaced kinds (see [`crate::Object::from_value`]).
    /// Shared like the name; readers of many objects give equal namespaces one buffer.
    pub namespace: Arc<str>,
    /// Labels.
    pub labels: MetaMap,
    /// Annotations.
    pub annotations: MetaMap,
    /// Creation time, generation, identity and version, when any is set.
    pub server: Option<Box<ServerMeta>>,
}

/// The fields of [`ObjectMeta`] the API server assigns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerMeta {
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

/// Labels or annotations: a string map that takes one pointer while empty, as it is in
/// most objects a gateway reads at scale (one Ingress and one Secret per domain), and
/// reads as a `BTreeMap` (through `Deref`; `DerefMut` creates the map).
///
/// Why: two empty `BTreeMap`s were 48 of an object's 168 bytes. With these 16, an
/// `Arc<Object>` fits the allocator's 160-byte class instead of the 192-byte one (at
/// 1,000,000 TLS domains, 2,000,000 objects: ~60 MiB).
#[derive(Clone, Default)]
#[allow(
    clippy::box_collection,
    reason = "the box is the point: 8 bytes while empty"
)]
pub struct MetaMap(Option<Box<BTreeMap<String, String>>>);

/// What an empty [`MetaMap`] reads as.
static EMPTY_MAP: BTreeMap<String, String> = BTreeMap::new();

impl std::ops::Deref for MetaMap {
    type Target = BTreeMap<String, String>;
    fn deref(&self) -> &Self::Target {
        self.0.as_deref().unwrap_or(&EMPTY_MAP)
    }
}

impl std::ops::DerefMut for MetaMap {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0.get_or_insert_default()
    }
}

impl From<BTreeMap<String, String>> for MetaMap {
    /// Holds nothing for an empty map.
    fn from(m: BTreeMap<String, String>) -> Self {
        MetaMap((!m.is_empty()).then(|| Box::new(m)))
    }
}

impl FromIterator<(String, String)> for MetaMap {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        BTreeMap::from_iter(iter).into()
    }
}

impl<'a> IntoIterator for &'a MetaMap {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::btree_map::Iter<'a, String, String>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PartialEq for MetaMap {
    /// By contents: an emptied map equals one never filled.
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for MetaMap {}

impl std::fmt::Debug for MetaMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Serialize for MetaMap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for MetaMap {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        BTreeMap::deserialize(d).map(MetaMap::from)
    }
}

impl ServerMeta {
    const NONE: ServerMeta = ServerMeta {
        creation_timestamp: None,
        generation: None,
        uid: None,
        resource_version: None,
    };

    /// `self` boxed, or `None` when no field is set.
    pub fn boxed(self) -> Option<Box<ServerMeta>> {
        (self != ServerMeta::NONE).then(|| Box::new(self))
    }
}

impl ObjectMeta {
    /// The server-assigned fields (all `None` when there are none).
    pub fn server(&self) -> &ServerMeta {
        self.server.as_deref().unwrap_or(&ServerMeta::NONE)
    }

    /// RFC 3339 creation time.
    pub fn creation_timestamp(&self) -> Option<&str> {
        self.server().creation_timestamp.as_deref()
    }

    /// Spec generation.
    pub fn generation(&self) -> Option<i64> {
        self.server().generation
    }

    /// Server-assigned identity.
    pub fn uid(&self) -> Option<&str> {
        self.server().uid.as_deref()
    }

    /// Server-assigned version.
    pub fn resource_version(&self) -> Option<&str> {
        self.server().resource_version.as_deref()
    }
}

impl PartialEq for ObjectMeta {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.namespace == other.namespace
            && self.labels == other.labels
            && self.annotations == other.annotations
            && self.server() == other.server()
    }
}

impl Eq for ObjectMeta {}

impl std::fmt::Debug for ObjectMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.server();
        f.debug_struct("ObjectMeta")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("labels", &self.labels)
            .field("annotations", &self.annotations)
            .field("creation_timestamp", &s.creation_timestamp)
            .field("generation", &s.generation)
            .field("uid", &s.uid)
            .field("resource_version", &s.resource_version)
            .finish()
    }
}

/// [`ObjectMeta`] as Kubernetes writes it: what serde reads.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct MetaFields {
    name: Arc<str>,
    #[serde(deserialize_with = "shared_namespace")]
    namespace: Arc<str>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    creation_timestamp: Option<Box<str>>,
    generation: Option<i64>,
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
}

impl From<MetaFields> for ObjectMeta {
    fn from(m: MetaFields) -> Self {
        ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            labels: m.labels.into(),
            annotations: m.annotations.into(),
            server: ServerMeta {
                creation_timestamp: m.creation_timestamp,
                generation: m.generation,
                uid: m.uid,
                resource_version: m.resource_version,
            }
            .boxed(),
        }
    }
}

/// [`ObjectMeta`] as Kubernetes writes it, borrowed: what serde writes.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MetaFieldsRef<'a> {
    name: &'a str,
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    annotations: &'a BTreeMap<String, String>,
    creation_timestamp: Option<&'a str>,
    generation: Option<i64>,
    uid: Option<&'a str>,
    resource_version: Option<&'a str>,
}

impl Serialize for ObjectMeta {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        MetaFieldsRef {
            name: &self.name,
            namespace: &self.namespace,
            labels: &self.labels,
            annotations: &self.annotations,
            creation_timestamp: self.creation_timestamp(),
            generation: self.generation(),
            uid: self.uid(),
            resource_version: self.resource_version(),
        }
        .serialize(s)
    }
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

/// A list of strings read to exactly its length, each shared ([`shared_str`]).
pub(crate) fn shared_vec<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<Arc<str>>, D::Error> {
    let v = Vec::<std::borrow::Cow<'de, str>>::deserialize(d)?;
    Ok(v.iter().map(|s| shared_str(s)).collect())
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
    fn a_stored_object_fits_its_allocator_class() {
        // With its `Arc` counts, 160 bytes: a class of every allocator weir builds with
        // (BENCHMARKS.md, "Session 30" and "Session 31"); 64 more per object with the
        // server fields inline, 32 more with labels and annotations as two `BTreeMap`s.
        assert!(std::mem::size_of::<crate::Object>() <= 144);
        assert_eq!(std::mem::size_of::<ObjectMeta>(), 56);
    }

    #[test]
    fn an_empty_label_map_holds_nothing_and_equals_an_emptied_one() {
        let mut a = MetaMap::default();
        assert!(a.0.is_none() && a.is_empty() && a.get("x").is_none());
        a.insert("k".into(), "v".into());
        assert_eq!(a.get("k").map(String::as_str), Some("v"));
        a.remove("k");
        assert_eq!(a, MetaMap::default());
        assert!(MetaMap::from(BTreeMap::new()).0.is_none());
        let m: MetaMap = serde_json::from_str(r#"{"a":"1"}"#).unwrap();
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"a":"1"}"#);
        assert_eq!((&m).into_iter().count(), 1);
        let none: MetaMap = serde_json::from_str("{}").unwrap();
        assert!(none.0.is_none());
    }

    #[test]
    fn server_fields_are_boxed_only_when_set() {
        let file: ObjectMeta =
            serde_json::from_value(serde_json::json!({"name": "a", "namespace": "ns"})).unwrap();
        assert!(file.server.is_none());
        let json = serde_json::json!({"name": "a", "namespace": "ns",
            "creationTimestamp": "2026-12-03T00:00:00Z", "generation": 3, "uid": "u-1",
            "resourceVersion": "42"});
        let api: ObjectMeta = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(api.creation_timestamp(), Some("2026-12-03T00:00:00Z"));
        assert_eq!(api.generation(), Some(3));
        assert_eq!(api.uid(), Some("u-1"));
        assert_eq!(api.resource_version(), Some("42"));
        let mut back = serde_json::to_value(&api).unwrap();
        back.as_object_mut()
            .unwrap()
            .retain(|_, v| !v.is_null() && v != &serde_json::json!({}));
        assert_eq!(back, json);
        // An emptied box equals none, whichever side holds it.
        let mut emptied = file.clone();
        emptied.server.get_or_insert_default().generation = Some(1);
        assert_ne!(emptied, file);
        emptied.server.get_or_insert_default().generation = None;
        assert!(emptied.server.is_some());
        assert_eq!(emptied, file);
        assert_eq!(file, emptied);
        assert_eq!(format!("{emptied:?}"), format!("{file:?}"));
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
