//! The incremental translator: change bookkeeping, recomputation of dirty objects and
//! emission of deltas.

use std::collections::BTreeMap;
use std::sync::Arc;

use foldhash::{HashMap, HashMapExt, HashSet};

use weir_api::{Kind, Object, ObjectKey, ObjectStatus};
use weir_model::{
    Certificate, ClusterKey, ContentHash, DeltaBatch, HostMatch, Listener, ListenerKey, Protocol,
    Resource, ResourceKey, RouteRule, SniCert, VirtualHost,
};

use crate::backend::{self, ClusterSource};
use crate::gateway::{self, GatewayState, ListenerView};
use crate::incremental::{MultiIndex, OrdIndex, RefCount};
use crate::order::{Age, RuleOrder};
use crate::route_kind::RouteKind;
use crate::status;
use crate::store::{Dep, NsName, Store};
use crate::{ObjectChange, TranslateOutput, TranslatorOptions};

mod attach;
mod emit;
mod gateways;
mod ingresses;

/// The `gateway` label of the Ingress listeners (Gateway labels always hold a `/`).
const INGRESS_LABEL: &str = "ingress";

/// A batch at least this large (the initial load, a resync) pre-sizes the tables.
const BULK: usize = 1024;

/// A host on a listener: the key of a VirtualHost and of an SNI entry.
pub(crate) type HostKey = (ListenerKey, HostMatch);
/// Who contributed an SNI entry (oldest wins).
type SniOwner = (Age, ObjectKey);

/// What one route or Ingress currently contributes, so that a change can be undone
/// exactly (and only where it applied).
#[derive(Default)]
struct Contribution {
    entries: Vec<(HostKey, RuleOrder)>,
    sni: Vec<(HostKey, SniOwner)>,
    clusters: Vec<(ClusterKey, ClusterSource)>,
    attachments: Vec<(ObjectKey, Arc<str>)>,
    /// Valid TLS hosts (Ingress).
    tls_hosts: usize,
    /// Whether this is one of our Ingresses.
    ours: bool,
}

/// What one Gateway currently contributes.
#[derive(Default)]
struct GatewayOutputs {
    listeners: Vec<ListenerKey>,
    /// The listeners are an XListenerSet's share of its Gateway's sockets
    /// (`set_sockets`), not sockets of its own (`listeners`).
    shared: bool,
    sni: Vec<(HostKey, SniOwner)>,
    /// Virtual hosts that exist even without routes (listener isolation).
    isolated: Vec<HostKey>,
}

/// Things to recompute in one [`Translator::apply`].
#[derive(Default)]
struct Dirty {
    gateways: HashSet<ObjectKey>,
    routes: HashSet<ObjectKey>,
    ingresses: HashSet<ObjectKey>,
    gateway_status: HashSet<ObjectKey>,
    plain_status: HashSet<ObjectKey>,
    resources: HashSet<ResourceKey>,
    statuses: Vec<(ObjectKey, ObjectStatus)>,
}

/// Translates objects into IR incrementally. See the crate documentation.
pub struct Translator {
    opts: TranslatorOptions,
    store: Store,
    /// Per object that others are computed from, those others.
    deps: MultiIndex<Dep, ObjectKey>,
    deps_of: HashMap<ObjectKey, Vec<Dep>>,

    gateways: HashMap<ObjectKey, GatewayState>,
    gw_views: HashMap<ObjectKey, Vec<ListenerView>>,
    /// Sockets claimed by each Gateway and XListenerSet, with the age and key of the
    /// Gateway that owns them (the group: itself, or a set's parent).
    gw_claims: HashMap<ObjectKey, (Age, ObjectKey, Vec<ListenerKey>)>,
    /// Per socket, the groups claiming it (oldest owns it); `claim_counts` says how many
    /// members of each group claim it.
    port_claims: OrdIndex<ListenerKey, (Age, ObjectKey)>,
    claim_counts: RefCount<(ListenerKey, (Age, ObjectKey))>,
    /// Members (the Gateway and its XListenerSets) of each group that claim sockets.
    group_members: MultiIndex<ObjectKey, ObjectKey>,
    /// Sockets XListenerSets listen on: how many sets, protocol, Gateway label. The
    /// Listener resource comes from the Gateway's own listener there if it has one.
    set_sockets: RefCount<ListenerKey, (Protocol, Arc<str>)>,
    /// Per (socket, hostname), the XListenerSets asking for it (the oldest serves it), and
    /// what each set asks for.
    host_claims: OrdIndex<HostKey, (Age, ObjectKey)>,
    set_host_claims: HashMap<ObjectKey, (Age, Vec<HostKey>)>,
    /// Accepted XListenerSets → their Gateway, and how many each Gateway has.
    set_parents: HashMap<ObjectKey, ObjectKey>,
    sets_attached: RefCount<ObjectKey>,
    gw_outputs: HashMap<ObjectKey, GatewayOutputs>,
    /// Routes attached per (Gateway or XListenerSet, listener name).
    attached: RefCount<(ObjectKey, Arc<str>)>,

    routes: HashMap<ObjectKey, Contribution>,
    ingresses: HashMap<ObjectKey, Contribution>,
    ingress_count: usize,
    ingress_tls_hosts: usize,
    ingress_blocked: bool,

    listeners: HashMap<ListenerKey, Arc<Listener>>,
    hosts: OrdIndex<HostKey, RuleOrder, Arc<RouteRule>>,
    /// Listener hostnames that shadow a less specific listener on the same socket, with
    /// how many Gateways ask for them: their virtual host exists even with no routes, so
    /// that their hosts never fall through to the less specific listener's routes.
    isolated_hosts: RefCount<HostKey>,
    sni: OrdIndex<HostKey, SniOwner, Arc<Certificate>>,
    /// Clusters routes and Ingresses use, with how to build them.
    cluster_refs: RefCount<ClusterKey, ClusterSource>,
    /// The Service clusters of each Service.
    service_clusters: MultiIndex<NsName, ClusterKey>,

    emitted: HashMap<ResourceKey, Resource>,
    /// Certificates the emitted SNI entries use.
    cert_refs: RefCount<ContentHash, Arc<Certificate>>,
    statuses: BTreeMap<ObjectKey, ObjectStatus>,
}

impl Translator {
    /// A translator with no objects.
    pub fn new(options: TranslatorOptions) -> Self {
        Translator {
            opts: options,
            store: Store::default(),
            deps: MultiIndex::default(),
            deps_of: HashMap::new(),
            gateways: HashMap::new(),
            gw_views: HashMap::new(),
            gw_claims: HashMap::new(),
            port_claims: OrdIndex::default(),
            claim_counts: RefCount::default(),
            group_members: MultiIndex::default(),
            set_sockets: RefCount::default(),
            host_claims: OrdIndex::default(),
            set_host_claims: HashMap::new(),
            set_parents: HashMap::new(),
            sets_attached: RefCount::default(),
            gw_outputs: HashMap::new(),
            attached: RefCount::default(),
            routes: HashMap::new(),
            ingresses: HashMap::new(),
            ingress_count: 0,
            ingress_tls_hosts: 0,
            ingress_blocked: false,
            listeners: HashMap::new(),
            hosts: OrdIndex::default(),
            isolated_hosts: RefCount::default(),
            sni: OrdIndex::default(),
            cluster_refs: RefCount::default(),
            service_clusters: MultiIndex::default(),
            emitted: HashMap::new(),
            cert_refs: RefCount::default(),
            statuses: BTreeMap::new(),
        }
    }

    /// Applies a batch of object changes and returns what changed in the IR and in the
    /// statuses. A delete of an unknown key, or an upsert identical to the stored object,
    /// is a no-op.
    pub fn apply(&mut self, changes: impl IntoIterator<Item = ObjectChange>) -> TranslateOutput {
        let mut d = Dirty::default();
        let changes: Vec<ObjectChange> = changes.into_iter().collect();
        if changes.len() >= BULK {
            self.reserve_for(&changes, &mut d);
        }
        for change in changes {
            match change {
                ObjectChange::Upsert(obj) => {
                    let key = obj.key();
                    if let Ok(old) = self.store.upsert(&key, obj.clone()) {
                        self.on_change(&key, old.as_deref(), Some(&obj), &mut d);
                    }
                }
                ObjectChange::Delete(key) => {
                    if let Some(old) = self.store.delete(&key) {
                        self.on_change(&key, Some(&old), None, &mut d);
                    }
                }
            }
        }
        self.recompute(&mut d);
        let batch = self.emit(&d.resources);
        let mut statuses = std::mem::take(&mut d.statuses);
        statuses.sort_by(|a, b| a.0.cmp(&b.0));
        TranslateOutput { batch, statuses }
    }

    /// Sizes the tables a large batch (the initial load) will fill, so that they are
    /// allocated once instead of being rehashed at every doubling. Estimates from the kinds
    /// of the upserted objects; an overestimate only costs spare capacity.
    fn reserve_for(&mut self, changes: &[ObjectChange], d: &mut Dirty) {
        let (mut ingresses, mut routes, mut other) = (0, 0, 0);
        for c in changes {
            match c {
                ObjectChange::Upsert(o) => match o.kind() {
                    Kind::Ingress => ingresses += 1,
                    k if RouteKind::of_object(k).is_some() => routes += 1,
                    _ => other += 1,
                },
                ObjectChange::Delete(_) => {}
            }
        }
        let derived = ingresses + routes;
        self.store.reserve(derived + other);
        d.ingresses.reserve(ingresses);
        d.routes.reserve(routes);
        d.plain_status.reserve(other);
        // An Ingress host yields a virtual host per listener (HTTP and HTTPS) and an SNI
        // entry; a route yields at least one virtual host.
        d.resources.reserve(3 * ingresses + routes);
        self.ingresses.reserve(ingresses);
        self.routes.reserve(routes);
        self.deps_of.reserve(derived);
        self.deps.reserve(other);
        self.hosts.reserve(2 * ingresses + routes);
        self.sni.reserve(ingresses);
        self.emitted.reserve(3 * ingresses + routes);
    }

    /// The complete current IR, sorted by [`ResourceKey`].
    pub fn resources(&self) -> Vec<Resource> {
        let mut v: Vec<(&ResourceKey, &Resource)> = self.emitted.iter().collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v.into_iter().map(|(_, r)| r.clone()).collect()
    }

    /// The current status of every object that has one, sorted by key.
    pub fn statuses(&self) -> Vec<(ObjectKey, ObjectStatus)> {
        self.statuses
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect()
    }

    fn on_change(
        &mut self,
        key: &ObjectKey,
        old: Option<&Object>,
        new: Option<&Object>,
        d: &mut Dirty,
    ) {
        match key.kind {
            Kind::Gateway | Kind::XListenerSet => {
                d.gateways.insert(key.clone());
            }
            Kind::HttpRoute => {
                d.routes.insert(key.clone());
            }
            Kind::Ingress => {
                d.ingresses.insert(key.clone());
            }
            Kind::IngressClass => self.mark_dependents(&Dep::Object(key.clone()), d),
            Kind::ReferenceGrant => self.mark_dependents(&Dep::GrantsIn(key.namespace.clone()), d),
            Kind::EndpointSlice => {
                d.plain_status.insert(key.clone());
                for o in [old, new].into_iter().flatten() {
                    if let Some(svc) = o.metadata().labels.get(crate::store::SERVICE_NAME_LABEL) {
                        self.mark_service_clusters(&key.namespace, svc, d);
                    }
                }
            }
            Kind::Service => {
                d.plain_status.insert(key.clone());
                self.mark_service_clusters(&key.namespace, &key.name, d);
                // Routes and Ingresses see a Service's existence and port numbers/names;
                // anything else (appProtocol, labels) reaches them only through clusters.
                let ports = |o: Option<&Object>| match o {
                    Some(Object::Service(s)) => Some(
                        s.spec
                            .ports
                            .iter()
                            .map(|p| (p.port, p.name.clone()))
                            .collect::<Vec<_>>(),
                    ),
                    _ => None,
                };
                if ports(old) != ports(new) {
                    self.mark_dependents(&Dep::Object(key.clone()), d);
                }
            }
            Kind::Backend => {
                d.plain_status.insert(key.clone());
                let ck = ClusterKey(format!("backend/{}/{}", key.namespace, key.name).into());
                if self.cluster_refs.contains_key(&ck) {
                    d.resources.insert(ResourceKey::Cluster(ck));
                }
                // Routes only see whether a Backend exists.
                if old.is_none() || new.is_none() {
                    self.mark_dependents(&Dep::Object(key.clone()), d);
                }
            }
            Kind::Namespace => {
                // Only labels matter (allowedRoutes selectors).
                if old.map(|o| &o.metadata().labels) != new.map(|o| &o.metadata().labels) {
                    self.mark_dependents(&Dep::Object(key.clone()), d);
                }
            }
            Kind::GatewayClass | Kind::Secret | Kind::DirectResponse => {
                d.plain_status.insert(key.clone());
                self.mark_dependents(&Dep::Object(key.clone()), d);
            }
        }
    }

    fn mark_service_clusters(&self, ns: &Arc<str>, svc: &str, d: &mut Dirty) {
        let clusters = self.service_clusters.get(&(ns.clone(), Arc::from(svc)));
        d.resources
            .extend(clusters.map(|c| ResourceKey::Cluster(c.clone())));
    }

    fn mark_dependents(&self, dep: &Dep, d: &mut Dirty) {
        for k in self.deps.get(dep) {
            match k.kind {
                Kind::Gateway | Kind::XListenerSet => d.gateways.insert(k.clone()),
                Kind::Ingress => d.ingresses.insert(k.clone()),
                kind if RouteKind::of_object(kind).is_some() => d.routes.insert(k.clone()),
                _ => false,
            };
        }
    }

    fn set_deps(&mut self, key: &ObjectKey, mut deps: Vec<Dep>) {
        deps.sort();
        deps.dedup();
        if self.deps_of.get(key) == Some(&deps) {
            return;
        }
        if let Some(old) = self.deps_of.remove(key) {
            for dep in old {
                self.deps.remove(&dep, key);
            }
        }
        if deps.is_empty() {
            return;
        }
        for dep in &deps {
            self.deps.insert(dep.clone(), key.clone());
        }
        self.deps_of.insert(key.clone(), deps);
    }

    fn recompute(&mut self, d: &mut Dirty) {
        self.recompute_gateways(d);
        self.check_ingress_blocked(d);
        let routes: Vec<ObjectKey> = d.routes.drain().collect();
        for rk in routes {
            self.recompute_route(&rk, d);
        }
        let ingresses: Vec<ObjectKey> = d.ingresses.drain().collect();
        for ik in ingresses {
            self.recompute_ingress(&ik, d);
        }
        self.update_ingress_listeners(d);
        for gk in std::mem::take(&mut d.gateway_status) {
            let st = self.gateways.get(&gk).map(|s| {
                let attached = |l: &Arc<str>| self.attached.count(&(gk.clone(), l.clone()));
                if gk.kind == Kind::XListenerSet {
                    ObjectStatus::ListenerSet(gateway::set_status(s, attached))
                } else {
                    let sets = self.sets_attached.count(&gk);
                    ObjectStatus::Gateway(gateway::status(s, attached, sets))
                }
            });
            self.set_status(&gk, st, d);
        }
        for k in std::mem::take(&mut d.plain_status) {
            let st = self.store.get(&k).and_then(|o| {
                status::standalone_status(&self.store, &self.opts.controller_name, o)
            });
            self.set_status(&k, st, d);
        }
    }

    fn set_status(&mut self, key: &ObjectKey, new: Option<ObjectStatus>, d: &mut Dirty) {
        match new {
            Some(s) => {
                if self.statuses.get(key) != Some(&s) {
                    self.statuses.insert(key.clone(), s.clone());
                    d.statuses.push((key.clone(), s));
                }
            }
            None => {
                if let Some(ObjectStatus::Problems(_)) = self.statuses.remove(key)
                    && self.store.get(key).is_some()
                {
                    d.statuses
                        .push((key.clone(), ObjectStatus::Problems(Vec::new())));
                }
            }
        }
    }

    /// Replaces the host entries, SNI entries and cluster references of one route or
    /// Ingress (`old`) by `rules`, `sni` and `clusters`, marking only the hosts and
    /// clusters it touched (before or after). Returns the new contribution (without
    /// attachments or Ingress counts, which the caller adds).
    fn program(
        &mut self,
        old: Option<Contribution>,
        rules: Vec<(HostKey, RuleOrder, Arc<RouteRule>)>,
        sni: Vec<(HostKey, SniOwner, Arc<Certificate>)>,
        clusters: Vec<(ClusterKey, ClusterSource)>,
        d: &mut Dirty,
    ) -> Contribution {
        for (ck, src) in &clusters {
            if self.cluster_refs.inc(ck.clone(), src.clone()) {
                d.resources.insert(ResourceKey::Cluster(ck.clone()));
                if let ClusterSource::Service { ns, name, .. } = src {
                    self.service_clusters
                        .insert((ns.clone(), name.clone()), ck.clone());
                }
            }
        }
        if let Some(old) = old {
            for (hk, order) in old.entries {
                self.hosts.remove(&hk, &order);
                d.resources.insert(ResourceKey::VirtualHost(hk.0, hk.1));
            }
            for (hk, owner) in old.sni {
                self.remove_sni(&hk, &owner, d);
            }
            for (ck, _) in old.clusters {
                if let Some(src) = self.cluster_refs.dec(&ck) {
                    if let ClusterSource::Service { ns, name, .. } = src {
                        self.service_clusters.remove(&(ns, name), &ck);
                    }
                    d.resources.insert(ResourceKey::Cluster(ck));
                }
            }
        }
        let mut new = Contribution {
            entries: Vec::with_capacity(rules.len()),
            sni: Vec::with_capacity(sni.len()),
            clusters,
            ..Contribution::default()
        };
        for (hk, order, rule) in rules {
            d.resources
                .insert(ResourceKey::VirtualHost(hk.0, hk.1.clone()));
            self.hosts.insert(hk.clone(), order.clone(), rule);
            new.entries.push((hk, order));
        }
        for (hk, owner, cert) in sni {
            self.add_sni(hk.clone(), owner.clone(), cert, d);
            new.sni.push((hk, owner));
        }
        new
    }

    /// Builds the current version of a resource, if it should exist.
    fn desired(&self, key: &ResourceKey) -> Option<Resource> {
        match key {
            ResourceKey::Listener(k) => match self.listeners.get(k) {
                Some(l) => Some(Resource::Listener(l.clone())),
                None => self.set_sockets.get(k).map(|(protocol, label)| {
                    Resource::Listener(Arc::new(Listener::new(
                        *k,
                        *protocol,
                        label.clone(),
                        "xlistenersets".into(),
                    )))
                }),
            },
            ResourceKey::VirtualHost(k, h) => {
                let hk = (*k, h.clone());
                let rules = match self.hosts.get(&hk) {
                    Some(rules) => rules.values().cloned().collect(),
                    None if self.isolated_hosts.contains_key(&hk) => Vec::new(),
                    None => return None,
                };
                Some(Resource::VirtualHost(Arc::new(VirtualHost::new(
                    *k,
                    h.clone(),
                    rules,
                ))))
            }
            ResourceKey::Cluster(c) => {
                let src = self.cluster_refs.get(c)?;
                backend::build_cluster(&self.store, c, src).map(|c| Resource::Cluster(Arc::new(c)))
            }
            ResourceKey::Sni(k, h) => {
                let (_, cert) = self.sni.first(&(*k, h.clone()))?;
                Some(Resource::Sni(Arc::new(SniCert::new(
                    *k,
                    h.clone(),
                    cert.hash(),
                ))))
            }
            ResourceKey::Certificate(h) => self
                .cert_refs
                .get(h)
                .map(|c| Resource::Certificate(c.clone())),
        }
    }

    fn emit(&mut self, dirty: &HashSet<ResourceKey>) -> DeltaBatch {
        emit::emit(self, dirty)
    }
}
