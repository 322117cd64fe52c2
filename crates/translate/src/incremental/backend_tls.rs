//! BackendTLSPolicies by Service: which policy decides the TLS of each Service port, the
//! resulting [`BackendTls`] per Service, and the policies' statuses.
//!
//! Of several policies naming the same Service (and the same port, or none), the oldest
//! wins (GEP-713); a port's own entry (`sectionName`) wins over a Service-wide one, so
//! the two do not conflict. The result is a field of the Service's `Policy` resource
//! (`PolicyTarget::Backend`), so a policy change is one delta per Service, however many
//! routes use it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use foldhash::HashMap;

use weir_api::{
    Condition, ConditionType, Kind, ObjectKey, ObjectStatus, ParentReference, PolicyAncestorStatus,
    PolicyStatus, Reason,
};
use weir_model::{BackendTls, UpstreamTls};

use crate::compile::backend_tls::{BtlsTarget, CompiledBtls, RefProblem};
use crate::compile::order::Age;
use crate::store::{NsName, Store};

/// One policy as last compiled.
struct Entry {
    age: Age,
    compiled: CompiledBtls,
}

/// BackendTLSPolicies, by key and by the Services they name.
#[derive(Default)]
pub(crate) struct BtlsIndex {
    policies: HashMap<ObjectKey, Entry>,
    /// (namespace, Service) → the policies naming it, oldest first.
    by_service: HashMap<NsName, BTreeSet<(Age, ObjectKey)>>,
}

/// How one targetRef of a policy fared.
enum Outcome {
    /// It decides that port (or every port without its own).
    Applied,
    /// An older policy decides it.
    Lost(ObjectKey),
    /// Its Service, or the port it names, does not exist.
    NotFound(String),
    /// Not a core Service.
    Unsupported,
}

impl BtlsIndex {
    /// Replaces policy `key` by `new` (`None`: deleted); returns the Services whose
    /// settings may have changed (those it named before or now).
    pub(crate) fn set(&mut self, key: &ObjectKey, new: Option<(CompiledBtls, Age)>) -> Vec<NsName> {
        let mut touched = Vec::new();
        if let Some(old) = self.policies.remove(key) {
            for svc in services(&key.namespace, &old.compiled) {
                if let Some(set) = self.by_service.get_mut(&svc) {
                    set.remove(&(old.age.clone(), key.clone()));
                    if set.is_empty() {
                        self.by_service.remove(&svc);
                    }
                }
                touched.push(svc);
            }
        }
        if let Some((compiled, age)) = new {
            for svc in services(&key.namespace, &compiled) {
                self.by_service
                    .entry(svc.clone())
                    .or_default()
                    .insert((age.clone(), key.clone()));
                touched.push(svc);
            }
            self.policies.insert(key.clone(), Entry { age, compiled });
        }
        touched.sort();
        touched.dedup();
        touched
    }

    /// The policies naming Service `svc`.
    pub(crate) fn policies_on(&self, svc: &NsName) -> impl Iterator<Item = &ObjectKey> {
        self.by_service
            .get(svc)
            .into_iter()
            .flatten()
            .map(|(_, k)| k)
    }

    /// Whether any policy names a Service of namespace `ns` called `name`.
    pub(crate) fn names_service(&self, ns: &str, name: &str) -> bool {
        self.by_service
            .contains_key(&(Arc::from(ns), Arc::from(name)))
    }

    /// Which policy decides each slot of Service `svc` (`None`: every port without its
    /// own entry; `Some(port name)`), oldest first.
    fn winners(&self, svc: &NsName) -> BTreeMap<Option<Arc<str>>, (&ObjectKey, &Arc<UpstreamTls>)> {
        let mut slots = BTreeMap::new();
        for (_, k) in self.by_service.get(svc).into_iter().flatten() {
            let Some(e) = self.policies.get(k) else {
                continue;
            };
            let Ok(tls) = &e.compiled.tls else { continue };
            for t in &e.compiled.targets {
                if t.service.as_deref() == Some(&*svc.1) {
                    slots.entry(t.section.clone()).or_insert((k, tls));
                }
            }
        }
        slots
    }

    /// The upstream TLS of Service `svc`'s ports, `None` when no valid policy names it.
    pub(crate) fn service_tls(&self, svc: &NsName, store: &Store) -> Option<Arc<BackendTls>> {
        let winners = self.winners(svc);
        if winners.is_empty() {
            return None;
        }
        let service = store.service(&svc.0, &svc.1);
        let mut tls = BackendTls {
            all_ports: None,
            ports: Vec::new(),
        };
        for (section, (_, t)) in winners {
            match section {
                None => tls.all_ports = Some(t.clone()),
                Some(name) => {
                    let port = service.and_then(|s| {
                        s.spec
                            .ports
                            .iter()
                            .find(|p| p.name.as_deref() == Some(&*name))
                            .and_then(|p| u16::try_from(p.port).ok())
                    });
                    if let Some(port) = port {
                        tls.ports.push((port, t.clone()));
                    }
                }
            }
        }
        tls.ports.sort_by_key(|(p, _)| *p);
        tls.ports.dedup_by_key(|(p, _)| *p);
        (tls.all_ports.is_some() || !tls.ports.is_empty()).then(|| Arc::new(tls))
    }

    /// How targetRef `t` of policy `key` fared.
    fn outcome(&self, key: &ObjectKey, t: &BtlsTarget, store: &Store) -> Outcome {
        let Some(name) = &t.service else {
            return Outcome::Unsupported;
        };
        let Some(service) = store.service(&key.namespace, name) else {
            return Outcome::NotFound(format!("Service {}/{name} not found", key.namespace));
        };
        if let Some(section) = &t.section
            && !service
                .spec
                .ports
                .iter()
                .any(|p| p.name.as_deref() == Some(&**section))
        {
            return Outcome::NotFound(format!(
                "Service {}/{name} has no port named {section:?}",
                key.namespace
            ));
        }
        let svc: NsName = (key.namespace.clone(), name.clone());
        match self.winners(&svc).get(&t.section) {
            Some((winner, _)) if *winner != key => Outcome::Lost((*winner).clone()),
            _ => Outcome::Applied,
        }
    }

    /// The status of policy `key`: for each Gateway that routes to one of its Services
    /// (`gateways_of`; the Service itself when none does), `Accepted` and `ResolvedRefs`.
    pub(crate) fn status(
        &self,
        key: &ObjectKey,
        store: &Store,
        controller: &str,
        gateways_of: impl Fn(&NsName) -> Vec<ObjectKey>,
    ) -> Option<ObjectStatus> {
        let e = self.policies.get(key)?;
        let generation = store.get(key).and_then(|o| o.metadata().generation());
        let c = &e.compiled;
        let outcomes: Vec<Outcome> = c
            .targets
            .iter()
            .map(|t| self.outcome(key, t, store))
            .collect();
        let accepted = match &c.tls {
            Err(why) => (false, Reason::Invalid, why.clone()),
            Ok(_) if c.no_valid_ca => (
                false,
                Reason::NoValidCACertificate,
                c.ref_problem
                    .as_ref()
                    .map_or("no CA certificate".into(), |(_, m)| m.clone()),
            ),
            Ok(_) => {
                let applied = outcomes
                    .iter()
                    .filter(|o| matches!(o, Outcome::Applied))
                    .count();
                let lost: Vec<String> = outcomes
                    .iter()
                    .filter_map(|o| match o {
                        Outcome::Lost(k) => Some(format!("{}/{}", k.namespace, k.name)),
                        _ => None,
                    })
                    .collect();
                let missing: Vec<&str> = outcomes
                    .iter()
                    .filter_map(|o| match o {
                        Outcome::NotFound(m) => Some(m.as_str()),
                        _ => None,
                    })
                    .collect();
                if outcomes.iter().any(|o| matches!(o, Outcome::Unsupported)) {
                    (
                        false,
                        Reason::Invalid,
                        "targetRefs: a BackendTLSPolicy attaches to core Services (and their ports by sectionName)".into(),
                    )
                } else if applied > 0 {
                    (true, Reason::Accepted, "Accepted".into())
                } else if !lost.is_empty() {
                    (
                        false,
                        Reason::Conflicted,
                        format!(
                            "an older BackendTLSPolicy targets the same Service port: {}",
                            lost.join(", ")
                        ),
                    )
                } else {
                    (false, Reason::TargetNotFound, missing.join("; "))
                }
            }
        };
        let resolved = match &c.ref_problem {
            Some((RefProblem::InvalidKind, m)) => (false, Reason::InvalidKind, m.clone()),
            Some((RefProblem::InvalidCaCertificateRef, m)) => {
                (false, Reason::InvalidCACertificateRef, m.clone())
            }
            None => (true, Reason::ResolvedRefs, "ResolvedRefs".into()),
        };
        let conditions = vec![
            Condition::new(
                ConditionType::Accepted,
                accepted.0,
                accepted.1,
                accepted.2,
                generation,
            ),
            Condition::new(
                ConditionType::ResolvedRefs,
                resolved.0,
                resolved.1,
                resolved.2,
                generation,
            ),
        ];
        let mut ancestors: BTreeSet<ObjectKey> = BTreeSet::new();
        for svc in services(&key.namespace, c) {
            ancestors.extend(gateways_of(&svc));
        }
        let mut list: Vec<PolicyAncestorStatus> = ancestors
            .into_iter()
            .map(|g| PolicyAncestorStatus {
                ancestor_ref: ParentReference {
                    group: Some(Kind::Gateway.group().into()),
                    kind: Some(Kind::Gateway.name().into()),
                    namespace: Some(g.namespace.to_string().into()),
                    name: g.name.clone(),
                    section_name: None,
                    port: None,
                },
                controller_name: controller.to_owned(),
                conditions: conditions.clone(),
            })
            .collect();
        if list.is_empty() {
            // No Gateway routes to its Services (yet): the status still says whether
            // the policy is usable, with its first target as the ancestor.
            if let Some(t) = c.targets.first() {
                list.push(PolicyAncestorStatus {
                    ancestor_ref: ParentReference {
                        group: Some("".into()),
                        kind: Some(t.kind.to_string().into()),
                        namespace: Some(key.namespace.to_string().into()),
                        name: t.name.clone(),
                        section_name: None,
                        port: None,
                    },
                    controller_name: controller.to_owned(),
                    conditions,
                });
            }
        }
        // At most 16 ancestors, as the CRD allows.
        list.truncate(16);
        Some(ObjectStatus::Policy(PolicyStatus { ancestors: list }))
    }
}

/// The Services a compiled policy names.
fn services(ns: &Arc<str>, c: &CompiledBtls) -> Vec<NsName> {
    let mut v: Vec<NsName> = c
        .targets
        .iter()
        .filter_map(|t| t.service.clone().map(|s| (ns.clone(), s)))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// For each Service, the Gateways that the routes sending to it attach to, each counted
/// once per route: a BackendTLSPolicy's ancestors. Kept as routes change (one route's
/// Services × Gateways, both few), so that a policy's status never walks the routes of its
/// Service (which made a policy edit, a CA rotation and every route change on a shared
/// Service cost O(routes)).
#[derive(Default)]
pub(crate) struct ServiceGateways {
    /// Service → (Gateway, routes to the Service attached to it), sorted by Gateway.
    by_service: HashMap<NsName, Vec<(ObjectKey, u32)>>,
}

impl ServiceGateways {
    /// Replaces one route's pairs: it sent to `old_services` through `old_gateways` and
    /// now sends to `new_services` through `new_gateways` (each without duplicates).
    /// Returns the Services whose set of Gateways changed.
    pub(crate) fn replace(
        &mut self,
        old_services: &[NsName],
        old_gateways: &[ObjectKey],
        new_services: &[NsName],
        new_gateways: &[ObjectKey],
    ) -> Vec<NsName> {
        let mut changed = Vec::new();
        let unchanged = old_services == new_services && old_gateways == new_gateways;
        if unchanged {
            return changed;
        }
        for svc in new_services {
            for g in new_gateways {
                if self.add(svc, g) {
                    changed.push(svc.clone());
                }
            }
        }
        for svc in old_services {
            for g in old_gateways {
                if self.remove(svc, g) {
                    changed.push(svc.clone());
                }
            }
        }
        changed.sort();
        changed.dedup();
        changed
    }

    /// Counts one more route from `svc` to `g`; whether `g` is new for `svc`.
    fn add(&mut self, svc: &NsName, g: &ObjectKey) -> bool {
        let list = self.by_service.entry(svc.clone()).or_default();
        match list.binary_search_by(|(k, _)| k.cmp(g)) {
            Ok(i) => {
                list[i].1 += 1;
                false
            }
            Err(i) => {
                list.insert(i, (g.clone(), 1));
                true
            }
        }
    }

    /// Counts one route fewer from `svc` to `g`; whether `g` is gone for `svc`.
    fn remove(&mut self, svc: &NsName, g: &ObjectKey) -> bool {
        let Some(list) = self.by_service.get_mut(svc) else {
            return false;
        };
        let Ok(i) = list.binary_search_by(|(k, _)| k.cmp(g)) else {
            return false;
        };
        list[i].1 -= 1;
        if list[i].1 > 0 {
            return false;
        }
        list.remove(i);
        if list.is_empty() {
            self.by_service.remove(svc);
        }
        true
    }

    /// The Gateways with a route to `svc`, in key order.
    pub(crate) fn of(&self, svc: &NsName) -> impl Iterator<Item = &ObjectKey> {
        self.by_service
            .get(svc)
            .into_iter()
            .flatten()
            .map(|(g, _)| g)
    }
}
