//! The objects the translator was given, with the few indexes lookups need.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use foldhash::HashMap;
use hashbrown::hash_map::Entry;

use weir_api::{
    Backend, DirectResponse, EndpointSlice, Gateway, GatewayClass, Ingress, IngressClass, Kind,
    ListenerSetSpec, Object, ObjectKey, ObjectMeta, ReferenceGrant, Service,
};
use weir_model::Certificate;

use crate::incremental::DenseMap;

use crate::compile::order::Age;
use crate::compile::route_kind::Referrer;
use crate::compile::tls;

/// The label that ties an EndpointSlice to its Service.
pub(crate) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A namespace and a name.
pub(crate) type NsName = (Arc<str>, Arc<str>);

/// A namespace and a name, borrowed: looks an [`NsName`] up without allocating its two
/// strings (derived `Hash` hashes the fields in order, as the tuple does).
#[derive(Hash)]
struct NsNameRef<'a>(&'a str, &'a str);

impl indexmap::Equivalent<NsName> for NsNameRef<'_> {
    fn equivalent(&self, key: &NsName) -> bool {
        *key.0 == *self.0 && *key.1 == *self.1
    }
}

/// An [`ObjectKey`]'s parts, borrowed: looks an object up without building its key
/// (three allocations, freed right after). Hashes as the key does.
struct KeyRef<'a> {
    kind: Kind,
    namespace: &'a str,
    name: &'a str,
}

impl std::hash::Hash for KeyRef<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(ObjectKey::hash_of(self.kind, self.namespace, self.name));
    }
}

impl hashbrown::Equivalent<ObjectKey> for KeyRef<'_> {
    fn equivalent(&self, key: &ObjectKey) -> bool {
        key.is(self.kind, self.namespace, self.name)
    }
}

/// Every stored object, by key, plus first-seen order and derived lookups.
#[derive(Default)]
pub(crate) struct Store {
    /// Every object with its first-seen sequence number (one map: one hash per lookup).
    /// (hashbrown's own map, not std's: its lookups take borrowed parts, [`KeyRef`].)
    objects: hashbrown::HashMap<ObjectKey, (Arc<Object>, u64), foldhash::fast::RandomState>,
    next_seq: u64,
    /// ReferenceGrants by namespace.
    grants: HashMap<Arc<str>, BTreeMap<Arc<str>, Arc<Object>>>,
    /// EndpointSlice names by (namespace, service name).
    slices: HashMap<NsName, BTreeSet<Arc<str>>>,
    /// Parsed TLS Secrets (parsed once per Secret version).
    certs: DenseMap<NsName, Result<Arc<Certificate>, String>>,
    /// CA bundles of ConfigMaps (`ca.crt`, checked once per ConfigMap version).
    cas: HashMap<NsName, Result<Arc<[u8]>, String>>,
    /// Ingress names by (namespace, host of one of their rules; `""`: none), sorted, for
    /// canary Ingresses to find their main Ingress. Nearly every host has one Ingress: a
    /// sorted `Vec` holds it in one small allocation (a `BTreeSet` allocates a node of 11).
    ingress_hosts: DenseMap<NsName, Vec<Arc<str>>>,
}

impl Store {
    /// Stores `obj`; returns the previous version, or `None` if the key is new.
    /// `Err(())` means the object is identical to the stored one.
    /// `key` must be `obj.key()`; passing it in spares building (allocating) it twice.
    pub(crate) fn upsert(
        &mut self,
        key: &ObjectKey,
        obj: Arc<Object>,
    ) -> Result<Option<Arc<Object>>, ()> {
        // One probe of the table (a cache miss per object at a large load).
        let old = match self.objects.entry(key.clone()) {
            Entry::Occupied(mut o) => {
                let (old, _) = o.get_mut();
                if Arc::ptr_eq(old, &obj) || **old == *obj {
                    return Err(());
                }
                Some(std::mem::replace(old, obj.clone()))
            }
            Entry::Vacant(v) => {
                v.insert((obj.clone(), self.next_seq));
                self.next_seq += 1;
                None
            }
        };
        if let Some(o) = &old {
            self.unindex(o);
        }
        self.index(key, &obj);
        Ok(old)
    }

    /// Makes room for `objects` more objects, of which `secrets` Secrets and `ingresses`
    /// Ingresses (a bulk load), so that the object table and the indexes of TLS Secrets
    /// and of Ingress hosts are not rehashed step by step while they grow: at 1,000,000
    /// TLS domains each doubling of those two indexes copied ~64 MiB into fresh pages.
    pub(crate) fn reserve(&mut self, objects: usize, secrets: usize, ingresses: usize) {
        self.objects.reserve(objects);
        self.certs.reserve(secrets);
        self.ingress_hosts.reserve(ingresses);
    }

    /// Removes the object with `key`, returning it.
    pub(crate) fn delete(&mut self, key: &ObjectKey) -> Option<Arc<Object>> {
        let (old, _) = self.objects.remove(key)?;
        self.unindex(&old);
        Some(old)
    }

    /// Indexes `obj`, whose key is `key` (the indexes share its namespace and name).
    fn index(&mut self, key: &ObjectKey, obj: &Arc<Object>) {
        let ns = key.namespace.clone();
        let name = key.name.clone();
        match &**obj {
            Object::ReferenceGrant(_) => {
                self.grants.entry(ns).or_default().insert(name, obj.clone());
            }
            Object::EndpointSlice(s) => {
                if let Some(svc) = s.metadata.labels.get(SERVICE_NAME_LABEL) {
                    self.slices
                        .entry((ns, svc.as_str().into()))
                        .or_default()
                        .insert(name);
                }
            }
            Object::Secret(s) => {
                self.certs
                    .insert((ns, name), tls::certificate_from_secret(s));
            }
            Object::ConfigMap(cm) => {
                self.cas.insert((ns, name), tls::ca_from_config_map(cm));
            }
            Object::Ingress(i) => {
                for host in ingress_hosts(i) {
                    let names = self.ingress_hosts.entry((ns.clone(), host)).or_default();
                    if let Err(at) = names.binary_search(&name) {
                        // Nearly every host has one Ingress: no room for four (48
                        // bytes per host held for good).
                        names.reserve_exact(1);
                        names.insert(at, name.clone());
                    }
                }
            }
            _ => {}
        }
    }

    fn unindex(&mut self, obj: &Object) {
        let m = obj.metadata();
        let ns: Arc<str> = m.namespace.as_ref().into();
        match obj {
            Object::ReferenceGrant(_) => {
                if let Some(g) = self.grants.get_mut(&ns) {
                    g.remove(m.name.as_ref());
                    if g.is_empty() {
                        self.grants.remove(&ns);
                    }
                }
            }
            Object::EndpointSlice(s) => {
                if let Some(svc) = s.metadata.labels.get(SERVICE_NAME_LABEL) {
                    let k: NsName = (ns, svc.as_str().into());
                    if let Some(set) = self.slices.get_mut(&k) {
                        set.remove(m.name.as_ref());
                        if set.is_empty() {
                            self.slices.remove(&k);
                        }
                    }
                }
            }
            Object::Secret(_) => {
                self.certs.swap_remove(&(ns, m.name.as_ref().into()));
            }
            Object::ConfigMap(_) => {
                self.cas.remove(&(ns, m.name.as_ref().into()));
            }
            Object::Ingress(i) => {
                for host in ingress_hosts(i) {
                    let k: NsName = (ns.clone(), host);
                    if let Some(set) = self.ingress_hosts.get_mut(&k) {
                        if let Ok(at) = set.binary_search_by(|n| (**n).cmp(m.name.as_ref())) {
                            set.remove(at);
                        }
                        if set.is_empty() {
                            self.ingress_hosts.swap_remove(&k);
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// The stored object with `key`.
    pub(crate) fn get(&self, key: &ObjectKey) -> Option<&Arc<Object>> {
        self.objects.get(key).map(|(o, _)| o)
    }

    /// A dependency on the object of these parts. When it is stored, the dependency
    /// holds the object's own key: a reference its referrer holds (for as long as the
    /// referrer exists) then shares the object's key instead of holding a copy of it (at
    /// 1,000,000 Ingresses naming their Secret and one Backend, 150 MiB of copies). The
    /// key is looked up by its borrowed parts ([`KeyRef`]): one is built (three
    /// allocations) only for a reference to an object that is not there.
    pub(crate) fn dep_on_ref(&self, kind: Kind, ns: &str, name: &str) -> Dep {
        let key = self
            .stored_key(kind, ns, name)
            .unwrap_or_else(|| ObjectKey::new(kind, ns, name));
        Dep::Object(key)
    }

    /// [`Store::dep_on_ref`] for a referrer's own namespace: a reference to an object
    /// that is not there holds a key sharing the referrer's namespace string (and the
    /// name's, when `name` is an `Arc`), as [`ObjectKey::in_namespace`] does.
    pub(crate) fn dep_in(
        &self,
        kind: Kind,
        ns: &Arc<str>,
        name: impl AsRef<str> + Into<Arc<str>>,
    ) -> Dep {
        let key = match self.stored_key(kind, ns, name.as_ref()) {
            Some(key) => key,
            None => ObjectKey::in_namespace_shared(kind, ns, name.into()),
        };
        Dep::Object(key)
    }

    /// The stored object's own key for these parts, if there is one.
    fn stored_key(&self, kind: Kind, ns: &str, name: &str) -> Option<ObjectKey> {
        self.lookup(kind, ns, name)
            .map(|(stored, _)| stored.clone())
    }

    fn get_ns(&self, kind: Kind, ns: &str, name: &str) -> Option<&Object> {
        self.lookup(kind, ns, name).map(|(_, o)| o)
    }

    /// The stored key and object of these parts, found without building a key.
    fn lookup(&self, kind: Kind, namespace: &str, name: &str) -> Option<(&ObjectKey, &Object)> {
        let parts = KeyRef {
            kind,
            namespace,
            name,
        };
        let (key, (object, _)) = self.objects.get_key_value(&parts)?;
        Some((key, object))
    }

    /// Precedence age of the object with `key` (creation time, then first-seen order).
    pub(crate) fn age(&self, key: &ObjectKey) -> Age {
        match self.objects.get(key) {
            Some((o, seq)) => Age::new(o.metadata().creation_timestamp(), *seq),
            None => Age::new(None, u64::MAX),
        }
    }

    pub(crate) fn gateway_class(&self, name: &str) -> Option<&GatewayClass> {
        match self.get_ns(Kind::GatewayClass, "", name)? {
            Object::GatewayClass(c) => Some(c),
            _ => None,
        }
    }

    pub(crate) fn ingress_class(&self, name: &str) -> Option<&IngressClass> {
        match self.get_ns(Kind::IngressClass, "", name)? {
            Object::IngressClass(c) => Some(c),
            _ => None,
        }
    }

    pub(crate) fn gateway(&self, key: &ObjectKey) -> Option<&Gateway> {
        match &*self.objects.get(key)?.0 {
            Object::Gateway(g) => Some(g),
            _ => None,
        }
    }

    /// A ListenerSet or an XListenerSet (both read the same).
    pub(crate) fn listener_set(&self, key: &ObjectKey) -> Option<(&ObjectMeta, &ListenerSetSpec)> {
        self.objects.get(key)?.0.as_listener_set()
    }

    /// The Ingresses of namespace `ns` with a rule for `host` (`""`: no host), by name.
    pub(crate) fn ingresses_with_host(&self, ns: &str, host: &str) -> Vec<(ObjectKey, &Ingress)> {
        let Some(names) = self.ingress_hosts.get(&NsNameRef(ns, host)) else {
            return Vec::new();
        };
        names
            .iter()
            .filter_map(|n| match self.lookup(Kind::Ingress, ns, n)? {
                (key, Object::Ingress(i)) => Some((key.clone(), i)),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn ingress(&self, key: &ObjectKey) -> Option<&Ingress> {
        match &*self.objects.get(key)?.0 {
            Object::Ingress(i) => Some(i),
            _ => None,
        }
    }

    pub(crate) fn service(&self, ns: &str, name: &str) -> Option<&Service> {
        match self.get_ns(Kind::Service, ns, name)? {
            Object::Service(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn backend(&self, ns: &str, name: &str) -> Option<&Backend> {
        match self.get_ns(Kind::Backend, ns, name)? {
            Object::Backend(b) => Some(b),
            _ => None,
        }
    }

    pub(crate) fn direct_response(&self, ns: &str, name: &str) -> Option<&DirectResponse> {
        match self.get_ns(Kind::DirectResponse, ns, name)? {
            Object::DirectResponse(d) => Some(d),
            _ => None,
        }
    }

    /// Labels of a namespace, including the `kubernetes.io/metadata.name` label the API
    /// server adds to every namespace (so selectors work without Namespace objects).
    pub(crate) fn namespace_labels(&self, ns: &str) -> BTreeMap<String, String> {
        let mut labels = match self.get_ns(Kind::Namespace, "", ns) {
            Some(Object::Namespace(n)) => (*n.metadata.labels).clone(),
            _ => BTreeMap::new(),
        };
        labels.insert("kubernetes.io/metadata.name".into(), ns.into());
        labels
    }

    /// The EndpointSlices of a Service, by name.
    pub(crate) fn slices_of(&self, ns: &str, service: &str) -> Vec<&EndpointSlice> {
        let Some(names) = self.slices.get(&(Arc::from(ns), Arc::from(service))) else {
            return Vec::new();
        };
        names
            .iter()
            .filter_map(|n| match self.get_ns(Kind::EndpointSlice, ns, n)? {
                Object::EndpointSlice(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    /// The parsed certificate of a Secret; `None` if the Secret does not exist.
    /// The CA bundle of ConfigMap (`secret`: Secret) `ns/name`: `None` when it does not
    /// exist, the reason when it holds no usable `ca.crt`.
    pub(crate) fn ca_bundle(
        &self,
        secret: bool,
        ns: &str,
        name: &str,
    ) -> Option<Result<Arc<[u8]>, String>> {
        if secret {
            match self.get_ns(Kind::Secret, ns, name)? {
                Object::Secret(s) => Some(tls::ca_from_secret(s)),
                _ => None,
            }
        } else {
            self.cas.get(&(Arc::from(ns), Arc::from(name))).cloned()
        }
    }

    pub(crate) fn certificate(
        &self,
        ns: &str,
        name: &str,
    ) -> Option<&Result<Arc<Certificate>, String>> {
        self.certs.get(&NsNameRef(ns, name))
    }

    /// Whether a ReferenceGrant in `to_ns` lets `from` objects of `from_ns` refer to the
    /// `to_group`/`to_kind` object named `to_name`.
    pub(crate) fn grant_allows(
        &self,
        from: Referrer,
        from_ns: &str,
        to_ns: &str,
        to_group: &str,
        to_kind: &str,
        to_name: &str,
    ) -> bool {
        let Some(grants) = self.grants.get(to_ns) else {
            return false;
        };
        grants.values().any(|g| {
            let Object::ReferenceGrant(ReferenceGrant { spec, .. }) = &**g else {
                return false;
            };
            spec.from
                .iter()
                .any(|f| f.group == from.group() && f.kind == from.kind() && f.namespace == from_ns)
                && spec.to.iter().any(|t| {
                    t.group == to_group
                        && t.kind == to_kind
                        && t.name
                            .as_deref()
                            .is_none_or(|n| n.is_empty() || n == to_name)
                })
        })
    }
}

/// Something a derived object (Gateway, HTTPRoute, Ingress) was computed from; when it
/// changes, the dependents are recomputed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Dep {
    /// An object by key (it may not exist yet).
    Object(ObjectKey),
    /// The ReferenceGrants of a namespace (boxed like [`Dep::IngressHost`]; see
    /// [`Dep::grants_in`]).
    GrantsIn(Box<Arc<str>>),
    /// The Ingresses of a namespace with a rule for a host (`""`: none): what a canary
    /// Ingress looks for its main Ingress in. Boxed: the other kinds are 16 bytes, and
    /// every derived object keeps a list of its dependencies and the index an entry per
    /// dependency (40 bytes each with the pair inline).
    IngressHost(Box<NsName>),
}

impl Dep {
    /// The ReferenceGrants of namespace `ns`.
    pub(crate) fn grants_in(ns: impl Into<Arc<str>>) -> Dep {
        Dep::GrantsIn(Box::new(ns.into()))
    }
}

/// The hosts of an Ingress's rules (`""` for a rule without one), deduplicated.
pub(crate) fn ingress_hosts(i: &Ingress) -> BTreeSet<Arc<str>> {
    i.spec
        .rules
        .iter()
        .map(|r| r.host.clone().unwrap_or_else(|| Arc::from("")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dependency_is_two_words() {
        // Every derived object lists its dependencies and the index holds one entry per
        // dependency: a variant with more inline grows all of them (see `Dep`).
        assert_eq!(std::mem::size_of::<Dep>(), 16);
    }

    fn secret(name: &str) -> Arc<Object> {
        Arc::new(Object::Secret(weir_api::Secret {
            metadata: ObjectMeta {
                name: name.into(),
                namespace: "ns".into(),
                ..ObjectMeta::default()
            },
            ..weir_api::Secret::default()
        }))
    }

    #[test]
    fn a_reference_to_a_stored_object_shares_its_key() {
        let mut store = Store::default();
        let obj = secret("s");
        let stored = obj.key();
        store.upsert(&stored, obj).unwrap();
        let same = |a: &ObjectKey, b: &ObjectKey| std::ptr::eq::<weir_api::KeyParts>(&**a, &**b);
        let ns: Arc<str> = "ns".into();
        let key = |d: Dep| match d {
            Dep::Object(k) => k,
            other => panic!("{other:?}"),
        };
        for reference in [
            key(store.dep_on_ref(Kind::Secret, "ns", "s")),
            key(store.dep_in(Kind::Secret, &ns, "s")),
        ] {
            assert!(same(&reference, &stored), "the stored key, not a copy");
        }
        // Not stored (another name, another kind): a key of these parts; `dep_in`'s
        // shares the referrer's namespace string.
        for (kind, name) in [(Kind::Secret, "t"), (Kind::Service, "s")] {
            let got = key(store.dep_on_ref(kind, "ns", name));
            assert!(got.is(kind, "ns", name) && !same(&got, &stored));
            let got = key(store.dep_in(kind, &ns, name));
            assert!(got.is(kind, "ns", name) && !same(&got, &stored));
            assert!(Arc::ptr_eq(&got.namespace, &ns));
        }
    }
}
