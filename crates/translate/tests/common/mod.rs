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
    objects.iter().cloned().map(ObjectChange::upsert).collect()
}

/// The IR and statuses as a reviewer reads them, one JSON value with status keys as
/// display strings: content hashes are left out (adding a field to a rule would
/// otherwise change every hash above it), a certificate is named `cert-<n>` by its first
/// SNI entry, and null or empty fields are skipped.
pub(crate) fn snapshot(
    resources: &[Resource],
    statuses: &[(ObjectKey, std::sync::Arc<ObjectStatus>)],
) -> serde_json::Value {
    // Certificates are known by content hash only: number them in SNI order (which
    // does not depend on the hashes), so that shared certificates show as shared.
    let mut certs: Vec<weir_model::ContentHash> = Vec::new();
    let sni = resources.iter().filter_map(|r| match r {
        Resource::Sni(s) => Some(s.cert),
        _ => None,
    });
    let orphans = resources.iter().filter_map(|r| match r {
        Resource::Certificate(c) => Some(c.hash()),
        _ => None,
    });
    for h in sni.chain(orphans) {
        if !certs.contains(&h) {
            certs.push(h);
        }
    }
    let cert_index =
        |h: weir_model::ContentHash| certs.iter().position(|c| *c == h).unwrap_or(certs.len()) + 1;
    let cert_name = |n: usize| serde_json::Value::String(format!("cert-{n}"));
    let mut named_certs = Vec::new();
    let mut out = Vec::new();
    for r in resources {
        match r {
            Resource::Certificate(c) => named_certs.push(cert_index(c.hash())),
            Resource::Sni(s) => {
                let mut v = serde_json::to_value(r).unwrap();
                v["Sni"]["cert"] = cert_name(cert_index(s.cert));
                out.push(v);
            }
            _ => out.push(serde_json::to_value(r).unwrap()),
        }
    }
    // Certificates (sorted by hash in the IR) go where they were, sorted by name.
    named_certs.sort();
    let at = out
        .iter()
        .position(|v| v.get("Sni").is_some())
        .unwrap_or(out.len());
    out.splice(
        at..at,
        named_certs
            .into_iter()
            .map(|n| serde_json::json!({ "Certificate": cert_name(n) })),
    );
    let mut resources = serde_json::Value::Array(out);
    strip(&mut resources, &|k| k == "hash");
    let mut statuses: serde_json::Value = statuses
        .iter()
        .map(|(k, s)| (k.to_string(), serde_json::to_value(s).unwrap()))
        .collect::<serde_json::Map<_, _>>()
        .into();
    strip(&mut statuses, &|_| false);
    serde_json::json!({ "resources": resources, "statuses": statuses })
}

/// Removes, at any depth, object fields named so that `drop` holds and fields that are
/// null, `[]` or `{}` (after their own fields were removed). Array elements stay: their
/// position means something.
fn strip(v: &mut serde_json::Value, drop: &dyn Fn(&str) -> bool) {
    match v {
        serde_json::Value::Object(m) => {
            m.retain(|k, v| {
                strip(v, drop);
                !drop(k) && !is_empty(v)
            });
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|v| strip(v, drop)),
        _ => {}
    }
}

fn is_empty(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Null => true,
        serde_json::Value::Array(a) => a.is_empty(),
        serde_json::Value::Object(m) => m.is_empty(),
        _ => false,
    }
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
                            !self
                                .resources
                                .keys()
                                .any(|x| x != k && x.listener() == Some(*l)),
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
            if **s == ObjectStatus::Problems(Vec::new()) {
                self.statuses.remove(k);
            } else {
                self.statuses.insert(k.clone(), ObjectStatus::clone(s));
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
