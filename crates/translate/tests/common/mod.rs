//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use weir_api::{Object, ObjectKey, ObjectStatus};
use weir_model::{Delta, Resource, ResourceKey};
use weir_translate::{ObjectChange, TranslateOutput, TranslatorOptions};

/// Options used by the golden and property tests: standalone, with Ingress listeners.
pub(crate) fn options(standalone: bool) -> TranslatorOptions {
    TranslatorOptions {
        standalone,
        ingress_http: Some("127.0.0.1:8080".parse().unwrap()),
        ingress_https: Some("127.0.0.1:8443".parse().unwrap()),
        ..TranslatorOptions::default()
    }
}

/// Parses a multi-document YAML string into objects (empty documents are skipped).
pub(crate) fn load(text: &str) -> Vec<Arc<Object>> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text).expect("valid YAML");
    docs.into_iter()
        .filter(|d| !d.is_null())
        .map(|d| Arc::new(Object::from_value(d).unwrap_or_else(|e| panic!("bad object: {e}"))))
        .collect()
}

/// Upserts of all `objects`, in order.
pub(crate) fn upserts(objects: &[Arc<Object>]) -> Vec<ObjectChange> {
    objects.iter().cloned().map(ObjectChange::Upsert).collect()
}

/// The IR and statuses, as one JSON value with status keys as display strings.
pub(crate) fn snapshot(
    resources: &[Resource],
    statuses: &[(ObjectKey, ObjectStatus)],
) -> serde_json::Value {
    let statuses: serde_json::Map<String, serde_json::Value> = statuses
        .iter()
        .map(|(k, s)| (k.to_string(), serde_json::to_value(s).unwrap()))
        .collect();
    serde_json::json!({ "resources": resources, "statuses": statuses })
}

/// A data plane's view: resources accumulated from batches, checking that no batch
/// leaves a dangling reference.
#[derive(Default)]
pub(crate) struct Accumulator {
    pub(crate) resources: BTreeMap<ResourceKey, Resource>,
    pub(crate) statuses: BTreeMap<ObjectKey, ObjectStatus>,
}

impl Accumulator {
    pub(crate) fn apply(&mut self, out: &TranslateOutput) {
        for d in &out.batch.deltas {
            match d {
                Delta::Upsert(r) => {
                    self.check_refs(r);
                    self.resources.insert(r.key(), r.clone());
                }
                Delta::Remove(k) => {
                    assert!(
                        self.resources.remove(k).is_some(),
                        "removal of absent {k:?}"
                    );
                    if let ResourceKey::Listener(l) = k {
                        assert!(
                            !self.resources.keys().any(|x| matches!(x, ResourceKey::VirtualHost(k2, _) | ResourceKey::Sni(k2, _) if k2 == l)),
                            "listener {l} removed while still referenced"
                        );
                    }
                    if let ResourceKey::Certificate(h) = k {
                        assert!(
                            !self
                                .resources
                                .values()
                                .any(|r| matches!(r, Resource::Sni(s) if s.cert == *h)),
                            "certificate {h} removed while still referenced"
                        );
                    }
                }
            }
        }
        for (k, s) in &out.statuses {
            if *s == ObjectStatus::Problems(Vec::new()) {
                self.statuses.remove(k);
            } else {
                self.statuses.insert(k.clone(), s.clone());
            }
        }
    }

    /// Everything `r` requires (the model's relations) is already held.
    fn check_refs(&self, r: &Resource) {
        for dep in r.required() {
            assert!(
                self.resources.contains_key(&dep),
                "{:?} before {dep:?}",
                r.key()
            );
        }
    }
}
