//! What was emitted: the IR by key, the certificates its SNI entries use, and the
//! statuses; turning dirty resource keys into an ordered [`DeltaBatch`].

use std::sync::Arc;

use foldhash::{HashMap, HashMapExt};

use weir_api::{ObjectKey, ObjectStatus};
use weir_model::{
    Certificate, ContentHash, Delta, DeltaBatch, L4Route, Resource, ResourceKey, SniCert,
    VirtualHost,
};

use crate::incremental::{DenseMap, DirtyResources, HostKey, RefCount};

/// Where the emitter reads the current version of a resource.
pub(crate) trait Desired {
    /// The version of `key` that should exist now, if any. Never asked for a
    /// certificate: the emitter derives those from the SNI entries it emits.
    fn desired(&self, key: &ResourceKey) -> Option<Resource>;
    /// The certificate SNI entry `hk` serves.
    fn sni_certificate(&self, hk: &HostKey) -> Option<Arc<Certificate>>;
}

/// The last emitted IR and statuses. Emits a resource only when its content hash
/// changed, and a certificate exactly while an emitted SNI entry uses it.
#[derive(Default)]
pub(crate) struct Emitter {
    /// Every emitted resource but the certificates.
    emitted: Emitted,
    /// Certificates the emitted SNI entries use: exactly the emitted certificates.
    cert_refs: RefCount<ContentHash, Arc<Certificate>>,
    /// Hashed, not ordered: every status set at the initial load was two ordered searches
    /// (string comparisons down ~17 levels at 100,000 objects); [`Emitter::statuses`],
    /// which is rare (`weir check`, a new leader's resync), sorts.
    ///
    /// Equal statuses share one allocation (see [`SharedStatuses`]): at 20,000 Ingresses
    /// of one class every status is the same, and an entry holds a pointer instead of
    /// the status (72 bytes fewer per bucket, and no clone of each).
    statuses: HashMap<ObjectKey, Arc<ObjectStatus>>,
    /// The statuses stored last, to share.
    recent: SharedStatuses,
}

/// The emitted resources other than certificates. The virtual host, SNI entry and L4
/// route of one (listener, host) share one entry: a table keyed by [`ResourceKey`] (64
/// bytes) held an entry for each, and with the certificates it needed 131,072 buckets at
/// 20,000 TLS domains (10.6 MiB) where this one needs 65,536 (5.2 MiB).
#[derive(Default)]
struct Emitted {
    hosts: DenseMap<HostKey, HostResources>,
    other: HashMap<ResourceKey, Resource>,
}

/// What was emitted for one (listener, host). Never all `None` (the entry is dropped).
#[derive(Default)]
struct HostResources {
    vhost: Option<Arc<VirtualHost>>,
    sni: Option<Arc<SniCert>>,
    l4: Option<Arc<L4Route>>,
}

impl Emitted {
    fn get(&self, key: &ResourceKey) -> Option<Resource> {
        match key {
            ResourceKey::VirtualHost(k, h) => {
                let e = self.hosts.get(&(*k, h.clone()))?;
                e.vhost.clone().map(Resource::VirtualHost)
            }
            ResourceKey::Sni(k, h) => {
                let e = self.hosts.get(&(*k, h.clone()))?;
                e.sni.clone().map(Resource::Sni)
            }
            ResourceKey::L4Route(k, h) => {
                let e = self.hosts.get(&(*k, h.clone()))?;
                e.l4.clone().map(Resource::L4Route)
            }
            _ => self.other.get(key).cloned(),
        }
    }

    /// Records `r` as the emitted version of `key` (its own key).
    fn insert(&mut self, key: &ResourceKey, r: Resource) {
        match (key, r) {
            (ResourceKey::VirtualHost(k, h), Resource::VirtualHost(v)) => {
                self.hosts.entry((*k, h.clone())).or_default().vhost = Some(v);
            }
            (ResourceKey::Sni(k, h), Resource::Sni(s)) => {
                self.hosts.entry((*k, h.clone())).or_default().sni = Some(s);
            }
            (ResourceKey::L4Route(k, h), Resource::L4Route(l)) => {
                self.hosts.entry((*k, h.clone())).or_default().l4 = Some(l);
            }
            (_, r) => {
                self.other.insert(key.clone(), r);
            }
        }
    }

    fn remove(&mut self, key: &ResourceKey) {
        let (ResourceKey::VirtualHost(k, h) | ResourceKey::Sni(k, h) | ResourceKey::L4Route(k, h)) =
            key
        else {
            self.other.remove(key);
            return;
        };
        let hk = (*k, h.clone());
        let Some(e) = self.hosts.get_mut(&hk) else {
            return;
        };
        match key {
            ResourceKey::VirtualHost(..) => e.vhost = None,
            ResourceKey::Sni(..) => e.sni = None,
            _ => e.l4 = None,
        }
        if e.vhost.is_none() && e.sni.is_none() && e.l4.is_none() {
            self.hosts.swap_remove(&hk);
        }
    }

    /// Every emitted resource with its key, in no particular order.
    fn iter(&self) -> impl Iterator<Item = (ResourceKey, Resource)> + '_ {
        let hosts = self.hosts.iter().flat_map(|((k, h), e)| {
            let vhost = e.vhost.clone().map(|v| {
                (
                    ResourceKey::VirtualHost(*k, h.clone()),
                    Resource::VirtualHost(v),
                )
            });
            let sni = e
                .sni
                .clone()
                .map(|s| (ResourceKey::Sni(*k, h.clone()), Resource::Sni(s)));
            let l4 =
                e.l4.clone()
                    .map(|l| (ResourceKey::L4Route(*k, h.clone()), Resource::L4Route(l)));
            vhost.into_iter().chain(sni).chain(l4)
        });
        let other = self.other.iter().map(|(k, r)| (k.clone(), r.clone()));
        hosts.chain(other)
    }
}

impl Emitter {
    /// Rebuilds every `dirty` resource from `source` and returns the changes, ordered so
    /// that a data plane never sees a dangling reference.
    pub(crate) fn emit(&mut self, dirty: &mut DirtyResources, source: &impl Desired) -> DeltaBatch {
        let dirty = dirty.sorted();
        // What changed, as (apply rank, key, new version), in key order: 32 bytes per
        // change, turned into the batch's deltas only once ordered. Collecting `(key,
        // delta)` pairs (128 bytes each) and copying them into the batch held both
        // vectors at the initial load's peak (10 + 5 MiB at 20,000 TLS domains).
        // Room for a certificate per dirty SNI entry as well: growing this vector at the
        // initial load would hold both buffers.
        let snis = dirty
            .iter()
            .filter(|k| matches!(k, ResourceKey::Sni(..)))
            .count();
        let mut changed: Vec<(u8, &ResourceKey, Option<Resource>)> =
            Vec::with_capacity(dirty.len() + snis);
        // Certificates touched by SNI changes, with whether they were emitted before.
        let mut certs: HashMap<ContentHash, bool> = HashMap::new();
        for key in dirty {
            debug_assert!(
                !matches!(key, ResourceKey::Certificate(_)),
                "certificates follow their SNI entries"
            );
            let new = source.desired(key);
            let old = self.emitted.get(key);
            if old.as_ref().map(Resource::hash) == new.as_ref().map(Resource::hash) {
                continue;
            }
            // Whether a certificate was emitted before this batch: whether it was used,
            // asked before this batch changes its count.
            if let Some(Resource::Sni(s)) = &old {
                let h = s.cert;
                certs
                    .entry(h)
                    .or_insert_with(|| self.cert_refs.contains_key(&h));
                self.cert_refs.dec(&h);
            }
            if let Some(Resource::Sni(s)) = &new {
                let h = s.cert;
                certs
                    .entry(h)
                    .or_insert_with(|| self.cert_refs.contains_key(&h));
                // The entry was built from this certificate: it is there.
                if let Some(cert) = source.sni_certificate(&(s.listener, s.host.clone())) {
                    self.cert_refs.inc(h, cert);
                }
            }
            match &new {
                Some(r) => self.emitted.insert(key, r.clone()),
                None => self.emitted.remove(key),
            }
            changed.push((key.apply_rank(new.is_some()), key, new));
        }
        let mut cert_changes: Vec<(ResourceKey, Option<Resource>)> =
            Vec::with_capacity(certs.len());
        for (h, was) in certs {
            let key = ResourceKey::Certificate(h);
            match self.cert_refs.get(&h) {
                Some(c) if !was => {
                    cert_changes.push((key, Some(Resource::Certificate(c.clone()))));
                }
                None if was => cert_changes.push((key, None)),
                _ => {}
            }
        }
        // Certificates have ranks of their own (no dirty key is a certificate), so with
        // them in key order too every rank's changes are in key order.
        cert_changes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        changed.extend(
            cert_changes
                .iter_mut()
                .map(|(k, r)| (k.apply_rank(r.is_some()), &*k, r.take())),
        );
        // In (rank, key) order, the order a data plane applies without dangling references
        // (the model's one list of relations): one pass per rank present over the changes,
        // which are in key order within each rank. No sort, no scratch buffer.
        let mut present = [false; 256];
        for c in &changed {
            present[usize::from(c.0)] = true;
        }
        let mut deltas = Vec::with_capacity(changed.len());
        for rank in (0..=u8::MAX).filter(|r| present[usize::from(*r)]) {
            for (r, k, new) in &mut changed {
                if *r == rank {
                    deltas.push(match new.take() {
                        Some(r) => Delta::Upsert(r),
                        None => Delta::Remove((*k).clone()),
                    });
                }
            }
        }
        DeltaBatch { deltas }
    }

    /// Records the status of `key` (`None`: it has none; `exists`: the object still
    /// exists). Returns the status to report when it changed: a status that disappears
    /// because its problems were fixed is reported once as an empty
    /// [`ObjectStatus::Problems`].
    pub(crate) fn set_status(
        &mut self,
        key: &ObjectKey,
        new: Option<ObjectStatus>,
        exists: bool,
    ) -> Option<Arc<ObjectStatus>> {
        match new {
            Some(s) => match self.statuses.get_mut(key) {
                Some(old) if **old == s => None,
                Some(old) => {
                    *old = self.recent.share(s);
                    Some(old.clone())
                }
                None => {
                    let s = self.recent.share(s);
                    self.statuses.insert(key.clone(), s.clone());
                    Some(s)
                }
            },
            None => match self.statuses.remove(key).as_deref() {
                Some(ObjectStatus::Problems(_)) if exists => {
                    Some(Arc::new(ObjectStatus::Problems(Vec::new())))
                }
                _ => None,
            },
        }
    }

    /// The complete emitted IR, sorted by [`ResourceKey`].
    pub(crate) fn resources(&self) -> Vec<Resource> {
        let certs = self.cert_refs.iter().map(|(h, c)| {
            (
                ResourceKey::Certificate(*h),
                Resource::Certificate(c.clone()),
            )
        });
        let mut v: Vec<(ResourceKey, Resource)> = self.emitted.iter().chain(certs).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.into_iter().map(|(_, r)| r).collect()
    }

    /// The current status of every object that has one, sorted by key.
    pub(crate) fn statuses(&self) -> Vec<(ObjectKey, Arc<ObjectStatus>)> {
        let mut v: Vec<(ObjectKey, Arc<ObjectStatus>)> = self
            .statuses
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        v.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Makes room for `hosts` more (listener, host) pairs and `statuses` more statuses.
    pub(crate) fn reserve(&mut self, hosts: usize, statuses: usize) {
        self.emitted.hosts.reserve(hosts);
        self.statuses.reserve(statuses);
    }
}

/// The last few distinct statuses stored of each kind of status, so that an equal one is
/// stored as the same `Arc`. Most objects of a batch have the status of the one before of
/// their kind (all Ingresses of a class, all accepted listener sets): kept per kind, the
/// distinct status of each route (its parent's name) does not push out the status all
/// the listener sets share. A status seen nowhere else costs one comparison per kept
/// status of its kind.
#[derive(Default)]
struct SharedStatuses([Vec<Arc<ObjectStatus>>; 7]);

impl SharedStatuses {
    const KEEP: usize = 4;

    fn kind(s: &ObjectStatus) -> usize {
        match s {
            ObjectStatus::GatewayClass(_) => 0,
            ObjectStatus::Gateway(_) => 1,
            ObjectStatus::ListenerSet(_) => 2,
            ObjectStatus::Route(_) => 3,
            ObjectStatus::Policy(_) => 4,
            ObjectStatus::Ingress { .. } => 5,
            ObjectStatus::Problems(_) => 6,
        }
    }

    /// `s` as an `Arc`, the kept one when equal.
    fn share(&mut self, s: ObjectStatus) -> Arc<ObjectStatus> {
        let kept = &mut self.0[Self::kind(&s)];
        if let Some(i) = kept.iter().position(|r| **r == s) {
            // Most recent first.
            kept[..=i].rotate_right(1);
            return kept[0].clone();
        }
        let new = Arc::new(s);
        if kept.len() == Self::KEEP {
            kept.pop();
        }
        kept.insert(0, new.clone());
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(p: &str) -> ObjectStatus {
        ObjectStatus::Problems(vec![p.to_owned()])
    }

    #[test]
    fn equal_statuses_share_one_allocation() {
        let mut shared = SharedStatuses::default();
        let a = shared.share(problems("a"));
        let b = shared.share(problems("b"));
        assert!(Arc::ptr_eq(&a, &shared.share(problems("a"))));
        assert!(!Arc::ptr_eq(&a, &b));
        // Four other statuses later, "b" (not asked for since) is no longer kept.
        for p in ["c", "d", "e", "f"] {
            shared.share(problems(p));
        }
        let b2 = shared.share(problems("b"));
        assert_eq!(*b2, *b);
        assert!(!Arc::ptr_eq(&b, &b2));
        // Statuses of another kind, each distinct (routes naming their own parents), do
        // not push it out.
        for r in ["r1", "r2", "r3", "r4", "r5"] {
            let parent = weir_api::ParentReference {
                name: r.into(),
                ..Default::default()
            };
            shared.share(ObjectStatus::Route(weir_api::RouteStatus {
                parents: vec![weir_api::RouteParentStatus {
                    parent_ref: parent,
                    controller_name: "c".into(),
                    conditions: Vec::new(),
                }],
            }));
        }
        assert!(Arc::ptr_eq(&b2, &shared.share(problems("b"))));
    }

    #[test]
    fn a_status_is_emitted_when_it_changes_and_kept_shared() {
        let mut e = Emitter::default();
        let k1 = ObjectKey::new(weir_api::Kind::Secret, "ns", "one");
        let k2 = ObjectKey::new(weir_api::Kind::Secret, "ns", "two");
        let x1 = e.set_status(&k1, Some(problems("x")), true);
        assert_eq!(x1.as_deref(), Some(&problems("x")));
        let x2 = e.set_status(&k2, Some(problems("x")), true);
        // The batch's status is the one kept, and equal ones are one allocation.
        assert!(Arc::ptr_eq(x2.as_ref().unwrap(), &e.statuses[&k2]));
        assert!(Arc::ptr_eq(x1.as_ref().unwrap(), x2.as_ref().unwrap()));
        assert_eq!(e.set_status(&k1, Some(problems("x")), true), None);
        assert!(Arc::ptr_eq(&e.statuses[&k1], &e.statuses[&k2]));
        assert_eq!(
            e.set_status(&k1, Some(problems("y")), true).as_deref(),
            Some(&problems("y"))
        );
        assert_eq!(*e.statuses[&k2], problems("x"));
        // Problems cleared on an object that still exists: an empty list is written.
        assert_eq!(
            e.set_status(&k1, None, true).as_deref(),
            Some(&ObjectStatus::Problems(Vec::new()))
        );
        assert_eq!(e.statuses().len(), 1);
    }
}
