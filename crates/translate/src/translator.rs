//! The incremental translator: change bookkeeping, recomputation of dirty objects and
//! emission of deltas.
//!
//! `Translator` only orchestrates: each of its fields owns one part of the state (see
//! `crate::incremental`), the pure per-object work is in `crate::compile`, and the
//! submodules recompute one kind of dirty object each: `gateways` (Gateways and
//! XListenerSets), `attach` (routes of every kind), `ingresses`.

use std::sync::Arc;

use foldhash::{HashMap, HashMapExt, HashSet};

use weir_api::{Kind, Object, ObjectKey, ObjectStatus};
use weir_model::{
    Certificate, ClusterKey, DeltaBatch, L4Mode, PolicyTarget, Resource, ResourceKey, RouteRule,
};

use crate::compile::backend::{self, ClusterSource};
use crate::compile::order::RuleOrder;
use crate::compile::policy;
use crate::compile::route_kind::{L4Target, RouteKind};
use crate::compile::status;
use crate::incremental::{
    BtlsIndex, ClusterRefs, DenseMap, DepIndex, Desired, DirtyResources, Emitter, GatewayIndex,
    HostKey, HostTable, KindClaims, L4Table, PolicyIndex, ServiceGateways, SniOwner, Sockets,
};
use crate::store::{Dep, NsName, Store};
use crate::{ObjectChange, TranslateOutput, TranslatorOptions};

mod attach;
mod gateways;
mod ingresses;

use ingresses::IngressState;

/// A batch at least this large (the initial load, a resync) pre-sizes the tables.
const BULK: usize = 1024;

/// What an L4 route asks of a host: its target and how to reach it.
type L4Entry = (Arc<L4Target>, L4Mode);

/// What one route or Ingress currently contributes, so that a change can be undone
/// exactly (and only where it applied). Boxed slices, not vectors: a contribution is
/// built once and only read until it is replaced, and each field is 8 bytes smaller
/// (40 bytes in each of 20,000 entries of the Ingress table at 20,000 domains).
#[derive(Default)]
struct Contribution {
    entries: Box<[(HostKey, Arc<RuleOrder>)]>,
    sni: Box<[(HostKey, SniOwner)]>,
    /// L4 routes (TLSRoute, TCPRoute): the hosts whose `L4Route` it asks for.
    l4: Box<[(HostKey, SniOwner)]>,
    /// The clusters it uses (the keys [`ClusterRefs`] holds, shared).
    clusters: Box<[ClusterKey]>,
    attachments: Box<[(ObjectKey, Arc<str>)]>,
}

/// Things to recompute in one [`Translator::apply`] (or one staged batch, kept across its parts).
#[derive(Default)]
struct Dirty {
    gateways: HashSet<ObjectKey>,
    routes: HashSet<ObjectKey>,
    ingresses: HashSet<ObjectKey>,
    gateway_status: HashSet<ObjectKey>,
    plain_status: HashSet<ObjectKey>,
    policy_status: HashSet<ObjectKey>,
    /// Policies to compile again (changed, or a Secret they read changed).
    policies: HashSet<ObjectKey>,
    /// BackendTLSPolicies to compile again (changed, or a ConfigMap they read changed).
    backend_tls: HashSet<ObjectKey>,
    /// Services whose upstream TLS may have changed (their policies or port names).
    tls_services: HashSet<crate::store::NsName>,
    /// BackendTLSPolicies whose status may have changed.
    backend_tls_status: HashSet<ObjectKey>,
    resources: DirtyResources,
    statuses: Vec<(ObjectKey, Arc<ObjectStatus>)>,
}

/// A batch being translated in parts ([`Translator::stage`]): what the parts made dirty,
/// and the statuses they set, until [`Translator::emit`].
#[derive(Default)]
pub struct Staged {
    d: Dirty,
    /// Whether the tables were sized for the batch (by its first large part).
    sized: bool,
}

/// Translates objects into IR incrementally. See the crate documentation.
pub struct Translator {
    opts: TranslatorOptions,
    /// Every object, as given.
    store: Store,
    /// Which Gateways, routes and Ingresses were computed from which objects.
    deps: DepIndex,
    /// Gateways and XListenerSets: state, listener views, outputs, attached counts.
    gateways: GatewayIndex,
    /// Socket ownership between Gateways, and the Listener resources.
    sockets: Sockets,
    /// Virtual-host rules, isolated hosts and SNI entries.
    hosts: HostTable,
    /// L4 routes (TLS passthrough hostnames, TCP listeners).
    l4: L4Table,
    /// HTTPRoute and GRPCRoute hostnames per listener (only the older of two is accepted).
    kind_claims: KindClaims,
    /// The clusters in use and how to build them.
    clusters: ClusterRefs,
    /// What each route (of any kind) contributes.
    routes: DenseMap<ObjectKey, Contribution>,
    /// What each Ingress contributes, and the Ingress listeners.
    ingress: IngressState,
    /// Policies, their targets and the Policy resources.
    policies: PolicyIndex,
    /// BackendTLSPolicies by Service.
    backend_tls: BtlsIndex,
    /// The Gateways routing to each Service (BackendTLSPolicy ancestors).
    service_gateways: ServiceGateways,
    /// The rules of each route whose `sessionPersistence` is their implicit policy.
    sessions: HashMap<ObjectKey, Vec<PolicyTarget>>,
    /// The IR and statuses emitted so far.
    emitter: Emitter,
}

/// The tables resources are built from (everything but the emitter).
struct Sources<'a> {
    store: &'a Store,
    sockets: &'a Sockets,
    hosts: &'a HostTable,
    l4: &'a L4Table,
    clusters: &'a ClusterRefs,
    policies: &'a PolicyIndex,
}

impl Desired for Sources<'_> {
    fn desired(&self, key: &ResourceKey) -> Option<Resource> {
        match key {
            ResourceKey::Listener(k) => self.sockets.listener_resource(k),
            ResourceKey::VirtualHost(k, h) => self
                .hosts
                .virtual_host(*k, h)
                .map(|v| Resource::VirtualHost(Arc::new(v))),
            ResourceKey::Cluster(c) => {
                let src = self.clusters.source(c)?;
                backend::build_cluster(self.store, c, src).map(|c| Resource::Cluster(Arc::new(c)))
            }
            ResourceKey::Sni(k, h) => self
                .hosts
                .sni_entry(*k, h)
                .map(|s| Resource::Sni(Arc::new(s))),
            ResourceKey::L4Route(k, h) => {
                self.l4.route(*k, h).map(|r| Resource::L4Route(Arc::new(r)))
            }
            ResourceKey::Policy(t) => self
                .policies
                .resource(t)
                .map(|p| Resource::Policy(Arc::new(p))),
            ResourceKey::Certificate(_) => None,
        }
    }

    fn sni_certificate(&self, hk: &HostKey) -> Option<Arc<Certificate>> {
        self.hosts.sni_certificate(hk).cloned()
    }
}

impl Translator {
    /// A translator with no objects.
    pub fn new(options: TranslatorOptions) -> Self {
        let ingress = IngressState::new(&options);
        Translator {
            opts: options,
            store: Store::default(),
            deps: DepIndex::default(),
            gateways: GatewayIndex::default(),
            sockets: Sockets::default(),
            hosts: HostTable::default(),
            l4: L4Table::default(),
            kind_claims: KindClaims::default(),
            clusters: ClusterRefs::default(),
            routes: DenseMap::default(),
            ingress,
            policies: PolicyIndex::default(),
            backend_tls: BtlsIndex::default(),
            service_gateways: ServiceGateways::default(),
            sessions: HashMap::new(),
            emitter: Emitter::default(),
        }
    }

    /// Applies a batch of object changes and returns what changed in the IR and in the
    /// statuses. A delete of an unknown key, or an upsert identical to the stored object,
    /// is a no-op.
    pub fn apply(&mut self, changes: impl IntoIterator<Item = ObjectChange>) -> TranslateOutput {
        let changes: Vec<ObjectChange> = changes.into_iter().collect();
        let expected = changes.len();
        let mut staged = Staged::default();
        self.stage(&mut staged, changes, expected);
        self.emit(staged)
    }

    /// Applies one part of a batch that is read while it is translated (the initial
    /// load: files are parsed on other threads meanwhile). Every part is recomputed as
    /// it comes, as [`Translator::apply`] would; nothing is emitted until
    /// [`Translator::emit`], which returns what the whole batch changed, as one `apply`
    /// of all the parts would have. `expected` is how many changes the whole batch is
    /// expected to hold: the first part large enough sizes the tables for all of it.
    pub fn stage(&mut self, staged: &mut Staged, changes: Vec<ObjectChange>, expected: usize) {
        let d = &mut staged.d;
        if !staged.sized && expected >= BULK && !changes.is_empty() {
            staged.sized = true;
            self.reserve_for(&changes, expected.div_ceil(changes.len()).max(1), d);
        }
        for change in changes {
            match change {
                ObjectChange::Upsert(key, obj) => {
                    if let Ok(old) = self.store.upsert(&key, obj.clone()) {
                        self.on_change(&key, old.as_deref(), Some(&obj), d);
                    }
                }
                ObjectChange::Delete(key) => {
                    if let Some(old) = self.store.delete(&key) {
                        self.on_change(&key, Some(&old), None, d);
                    }
                }
            }
        }
        self.recompute(d);
    }

    /// Emits the IR that the parts staged so far changed, and forgets it, keeping their
    /// statuses for [`Translator::emit`]: the batches of every `emit_part` and the final
    /// `emit`, applied in order, build what the one batch of `emit` would have (each is
    /// what an incremental cycle of its parts emits, so none refers to a resource not
    /// delivered before it). A data plane can build its next snapshot from them while
    /// the later parts are read and translated, and publish it once, after the last.
    pub fn emit_part(&mut self, staged: &mut Staged) -> DeltaBatch {
        let batch = self.emit_resources(&mut staged.d.resources);
        staged.d.resources.clear();
        batch
    }

    fn emit_resources(&mut self, dirty: &mut DirtyResources) -> DeltaBatch {
        let sources = Sources {
            store: &self.store,
            sockets: &self.sockets,
            hosts: &self.hosts,
            l4: &self.l4,
            clusters: &self.clusters,
            policies: &self.policies,
        };
        self.emitter.emit(dirty, &sources)
    }

    /// Emits what the parts staged in `staged` changed (see [`Translator::stage`]), after
    /// the batches [`Translator::emit_part`] returned, with the statuses of every part.
    pub fn emit(&mut self, staged: Staged) -> TranslateOutput {
        let mut d = staged.d;
        let batch = self.emit_resources(&mut d.resources);
        let mut statuses = std::mem::take(&mut d.statuses);
        // In key order, the last status set for a key kept (several parts may set one).
        crate::key_order::sort_keep_last(&mut statuses);
        TranslateOutput { batch, statuses }
    }

    /// Sizes the tables a large batch (the initial load) will fill, so that they are
    /// allocated once instead of being rehashed at every doubling. Estimates from the kinds
    /// of the upserted objects; an overestimate only costs spare capacity.
    /// `scale`: the whole batch is about that many times `changes` (a part staged first);
    /// the per-cycle sets of `d` are sized for `changes` alone.
    fn reserve_for(&mut self, changes: &[ObjectChange], scale: usize, d: &mut Dirty) {
        let (mut ingresses, mut routes, mut other, mut secrets) = (0, 0, 0, 0);
        for c in changes {
            match c {
                ObjectChange::Upsert(_, o) => match o.kind() {
                    Kind::Ingress => ingresses += 1,
                    k if RouteKind::of_object(k).is_some() => routes += 1,
                    k => {
                        other += 1;
                        secrets += usize::from(k == Kind::Secret);
                    }
                },
                ObjectChange::Delete(_) => {}
            }
        }
        d.ingresses.reserve(ingresses);
        d.routes.reserve(routes);
        d.plain_status.reserve(other);
        let (ingresses, routes, other) = (ingresses * scale, routes * scale, other * scale);
        let derived = ingresses + routes;
        self.store
            .reserve(derived + other, secrets * scale, ingresses);
        self.ingress.reserve(ingresses);
        self.routes.reserve(routes);
        self.deps.reserve(derived, other);
        // An Ingress host is a (listener, host) on the HTTP and on the HTTPS listener,
        // with a virtual host each and an SNI entry on one; a route is at least one.
        self.hosts.reserve(2 * ingresses + routes, ingresses);
        // Routes and Ingresses have a status each; of the other kinds, some do (a
        // Gateway, a TLS Secret with problems): an overestimate only costs room.
        self.emitter.reserve(2 * ingresses + routes, derived);
    }

    /// The complete current IR, sorted by [`ResourceKey`].
    pub fn resources(&self) -> Vec<Resource> {
        self.emitter.resources()
    }

    /// The current status of every object that has one, sorted by key.
    pub fn statuses(&self) -> Vec<(ObjectKey, Arc<ObjectStatus>)> {
        self.emitter.statuses()
    }

    fn on_change(
        &mut self,
        key: &ObjectKey,
        old: Option<&Object>,
        new: Option<&Object>,
        d: &mut Dirty,
    ) {
        match key.kind {
            Kind::Gateway | Kind::XListenerSet | Kind::ListenerSet => {
                d.gateways.insert(key.clone());
                self.policies.object_changed(
                    key,
                    &self.store,
                    &mut d.resources,
                    &mut d.policy_status,
                );
            }
            Kind::HttpRoute
            | Kind::TlsRoute
            | Kind::TcpRoute
            | Kind::UdpRoute
            | Kind::GrpcRoute => {
                d.routes.insert(key.clone());
                self.policies.object_changed(
                    key,
                    &self.store,
                    &mut d.resources,
                    &mut d.policy_status,
                );
            }
            Kind::TrafficPolicy => {
                d.policies.insert(key.clone());
            }
            Kind::BackendTlsPolicy => {
                d.backend_tls.insert(key.clone());
            }
            // CA certificates (BackendTLSPolicy, client validation) read the data; a
            // Gateway's `parametersRef` only that it exists. Dependents are compiled again
            // either way and what did not change sends nothing.
            Kind::ConfigMap => self.mark_dependents(&Dep::Object(key.clone()), d),
            Kind::Ingress => {
                d.ingresses.insert(key.clone());
                // Canary Ingresses of the hosts it had or has find their main Ingress anew.
                let mut hosts = std::collections::BTreeSet::new();
                for o in [old, new].into_iter().flatten() {
                    if let Object::Ingress(i) = o {
                        hosts.extend(crate::store::ingress_hosts(i));
                    }
                }
                for host in hosts {
                    let dep = Dep::IngressHost(Box::new((key.namespace.clone(), host)));
                    self.mark_dependents(&dep, d);
                }
            }
            Kind::IngressClass => self.mark_dependents(&Dep::Object(key.clone()), d),
            Kind::ReferenceGrant => self.mark_dependents(&Dep::grants_in(key.namespace.clone()), d),
            Kind::EndpointSlice => {
                d.plain_status.insert(key.clone());
                for o in [old, new].into_iter().flatten() {
                    if let Some(svc) = o.metadata().labels.get(crate::store::SERVICE_NAME_LABEL) {
                        self.clusters
                            .mark_service(&key.namespace, svc, &mut d.resources);
                    }
                }
            }
            Kind::Service => {
                d.plain_status.insert(key.clone());
                if old.is_none() != new.is_none() {
                    self.policies.object_changed(
                        key,
                        &self.store,
                        &mut d.resources,
                        &mut d.policy_status,
                    );
                }
                self.clusters
                    .mark_service(&key.namespace, &key.name, &mut d.resources);
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
                // BackendTLSPolicies name its ports; their statuses name it.
                if self.backend_tls.names_service(&key.namespace, &key.name) {
                    let svc = (key.namespace.clone(), key.name.clone());
                    d.backend_tls_status
                        .extend(self.backend_tls.policies_on(&svc).cloned());
                    d.tls_services.insert(svc);
                }
            }
            Kind::Backend => {
                d.plain_status.insert(key.clone());
                for ck in backend::backend_cluster_keys(&key.namespace, &key.name) {
                    if self.clusters.source(&ck).is_some() {
                        d.resources.insert(ResourceKey::Cluster(ck));
                    }
                }
                // Routes and policies only see whether a Backend exists.
                if old.is_none() || new.is_none() {
                    self.mark_dependents(&Dep::Object(key.clone()), d);
                    self.policies.object_changed(
                        key,
                        &self.store,
                        &mut d.resources,
                        &mut d.policy_status,
                    );
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

    /// Compiles the dirty policies again (from the store: a deleted one is removed).
    fn recompute_policies(&mut self, d: &mut Dirty) {
        let keys: Vec<ObjectKey> = d.policies.drain().collect();
        for key in keys {
            let compiled = match self.store.get(&key).map(|o| &**o) {
                Some(Object::TrafficPolicy(p)) => {
                    let c = policy::compile(p, &self.store);
                    self.deps.set(&key, c.deps.clone());
                    Some((c, self.store.age(&key)))
                }
                _ => {
                    self.deps.set(&key, Vec::new());
                    None
                }
            };
            self.policies.set(
                &key,
                compiled,
                &self.store,
                &mut d.resources,
                &mut d.policy_status,
            );
        }
    }

    fn mark_dependents(&self, dep: &Dep, d: &mut Dirty) {
        for k in self.deps.dependents(dep) {
            match k.kind {
                Kind::Gateway | Kind::XListenerSet | Kind::ListenerSet => {
                    d.gateways.insert(k.clone())
                }
                Kind::Ingress => d.ingresses.insert(k.clone()),
                Kind::TrafficPolicy => d.policies.insert(k.clone()),
                Kind::BackendTlsPolicy => d.backend_tls.insert(k.clone()),
                kind if RouteKind::of_object(kind).is_some() => d.routes.insert(k.clone()),
                _ => false,
            };
        }
    }

    /// Compiles the dirty BackendTLSPolicies again and sets the upstream TLS of the
    /// Services they name (before or now).
    fn recompute_backend_tls(&mut self, d: &mut Dirty) {
        let keys: Vec<ObjectKey> = d.backend_tls.drain().collect();
        for key in keys {
            let compiled = match self.store.get(&key).map(|o| &**o) {
                Some(Object::BackendTlsPolicy(p)) => {
                    let c = crate::compile::backend_tls::compile(p, &key, &self.store);
                    self.deps.set(&key, c.deps.clone());
                    Some((c, self.store.age(&key)))
                }
                _ => {
                    self.deps.set(&key, Vec::new());
                    None
                }
            };
            for svc in self.backend_tls.set(&key, compiled) {
                d.backend_tls_status
                    .extend(self.backend_tls.policies_on(&svc).cloned());
                d.tls_services.insert(svc);
            }
            d.backend_tls_status.insert(key);
        }
        for svc in std::mem::take(&mut d.tls_services) {
            let tls = self.backend_tls.service_tls(&svc, &self.store);
            let target = PolicyTarget::Backend {
                kind: weir_model::BackendKind::Service,
                namespace: svc.0,
                name: svc.1,
            };
            self.policies.set_backend_tls(target, tls, &mut d.resources);
        }
    }

    /// Replaces one route's part in the BackendTLSPolicy ancestors (the Gateways it
    /// attaches to, for each Service it sends to): `old` before the change, `new` after
    /// (see [`tls_ancestry`]). Marks the statuses of the policies on a Service only when
    /// its set of Gateways changed.
    fn set_tls_ancestry(
        &mut self,
        old: (Vec<NsName>, Vec<ObjectKey>),
        new: (Vec<NsName>, Vec<ObjectKey>),
        d: &mut Dirty,
    ) {
        for svc in self
            .service_gateways
            .replace(&old.0, &old.1, &new.0, &new.1)
        {
            d.backend_tls_status
                .extend(self.backend_tls.policies_on(&svc).cloned());
        }
    }

    /// The Gateways with a route to Service `svc` (for BackendTLSPolicy statuses).
    fn gateways_of(&self, svc: &NsName) -> Vec<ObjectKey> {
        self.service_gateways.of(svc).cloned().collect()
    }

    fn recompute(&mut self, d: &mut Dirty) {
        self.recompute_policies(d);
        self.recompute_backend_tls(d);
        self.recompute_gateways(d);
        self.check_ingress_blocked(d);
        // Recomputing a route may mark others (HTTPRoute/GRPCRoute hostname claims); a
        // route whose claims do not change marks nothing, so this ends.
        while !d.routes.is_empty() {
            let routes: Vec<ObjectKey> = d.routes.drain().collect();
            for rk in routes {
                self.recompute_route(&rk, d);
            }
        }
        // Taken, not drained: the set (sized for the whole initial load) is freed here
        // rather than held, empty, through the emission.
        for ik in std::mem::take(&mut d.ingresses) {
            self.recompute_ingress(&ik, d);
        }
        self.update_ingress_listeners(d);
        // A Gateway's first or last listener policy adds or removes its sockets' sections.
        for label in self.policies.take_flipped() {
            let on = self.policies.has_listener_targets(&label);
            self.sockets.set_sectioned(label, on, &mut d.resources);
        }
        for gk in std::mem::take(&mut d.gateway_status) {
            let st = self.gateways.status(&gk);
            self.set_status(&gk, st, d);
        }
        for k in std::mem::take(&mut d.policy_status) {
            let generation = self.store.get(&k).and_then(|o| o.metadata().generation());
            let st = self
                .policies
                .status(&k, &self.opts.controller_name, generation);
            self.set_status(&k, st, d);
        }
        for k in std::mem::take(&mut d.backend_tls_status) {
            let st = self
                .backend_tls
                .status(&k, &self.store, &self.opts.controller_name, |svc| {
                    self.gateways_of(svc)
                });
            self.set_status(&k, st, d);
        }
        for k in std::mem::take(&mut d.plain_status) {
            let st = self
                .store
                .get(&k)
                .and_then(|o| status::standalone_status(&self.store, &self.opts, o));
            self.set_status(&k, st, d);
        }
    }

    fn set_status(&mut self, key: &ObjectKey, new: Option<ObjectStatus>, d: &mut Dirty) {
        let exists = self.store.get(key).is_some();
        if let Some(s) = self.emitter.set_status(key, new, exists) {
            d.statuses.push((key.clone(), s));
        }
    }

    /// Replaces the host entries, SNI entries, L4 routes and cluster references of one
    /// route or Ingress (`old`) by `rules`, `sni`, `l4` and `clusters`, marking only the
    /// hosts and clusters it touched (before or after). Returns the new contribution (without
    /// attachments, which a route adds).
    fn program(
        &mut self,
        old: Option<Contribution>,
        rules: Vec<(HostKey, Arc<RuleOrder>, Arc<RouteRule>)>,
        sni: Vec<(HostKey, SniOwner, Arc<Certificate>)>,
        l4: Vec<(HostKey, SniOwner, L4Entry)>,
        clusters: Vec<(ClusterKey, ClusterSource)>,
        d: &mut Dirty,
    ) -> Contribution {
        // New references first, so that a cluster both contributions use stays. The
        // contribution keeps only the table's key, not the compiled key and source (an
        // Ingress's vector of them had room for four).
        let clusters: Box<[ClusterKey]> = clusters
            .iter()
            .map(|(ck, src)| self.clusters.acquire(ck, src, &mut d.resources))
            .collect();
        if let Some(old) = old {
            for (hk, order) in old.entries {
                self.hosts.remove_rule(hk, &order, &mut d.resources);
            }
            for (hk, owner) in old.sni {
                self.hosts.remove_sni(hk, &owner, &mut d.resources);
            }
            for (hk, owner) in old.l4 {
                self.l4.remove(hk, &owner, &mut d.resources);
            }
            for ck in old.clusters {
                self.clusters.release(ck, &mut d.resources);
            }
        }
        let entries = rules
            .into_iter()
            .map(|(hk, order, rule)| {
                self.hosts
                    .add_rule(hk.clone(), order.clone(), rule, &mut d.resources);
                (hk, order)
            })
            .collect();
        let sni = sni
            .into_iter()
            .map(|(hk, owner, cert)| {
                self.hosts
                    .add_sni(hk.clone(), owner.clone(), cert, &mut d.resources);
                (hk, owner)
            })
            .collect();
        let l4 = l4
            .into_iter()
            .map(|(hk, owner, target)| {
                self.l4
                    .add(hk.clone(), owner.clone(), target, &mut d.resources);
                (hk, owner)
            })
            .collect();
        Contribution {
            entries,
            sni,
            l4,
            clusters,
            attachments: Box::default(),
        }
    }
}

/// A route's part in the BackendTLSPolicy ancestors: the Services among its dependencies
/// `deps` and the Gateways among its `attachments`, each sorted and without duplicates.
fn tls_ancestry(
    deps: &[Dep],
    attachments: &[(ObjectKey, Arc<str>)],
) -> (Vec<NsName>, Vec<ObjectKey>) {
    let mut services: Vec<NsName> = deps
        .iter()
        .filter_map(|dep| match dep {
            Dep::Object(k) if k.kind == Kind::Service => {
                Some((k.namespace.clone(), k.name.clone()))
            }
            _ => None,
        })
        .collect();
    services.sort();
    services.dedup();
    if services.is_empty() {
        return (services, Vec::new());
    }
    let mut gateways: Vec<ObjectKey> = attachments
        .iter()
        .filter(|(g, _)| g.kind == Kind::Gateway)
        .map(|(g, _)| g.clone())
        .collect();
    gateways.sort();
    gateways.dedup();
    (services, gateways)
}
