//! The incremental translator: change bookkeeping, recomputation of dirty objects and
//! emission of deltas.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use weir_api::{Kind, Object, ObjectKey, ObjectStatus};
use weir_model::{
    Certificate, ClusterKey, ContentHash, DeltaBatch, HostMatch, Listener, ListenerKey, Protocol, Resource,
    ResourceKey, RouteRule, SniCert, VirtualHost,
};

use crate::backend::{self, ClusterSource};
use crate::gateway::{self, GatewayState, ListenerView};
use crate::order::{Age, RuleOrder};
use crate::status;
use crate::store::{Dep, NsName, Store};
use crate::{ObjectChange, TranslateOutput, TranslatorOptions};

mod attach;
mod emit;

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
    sni: Vec<(HostKey, SniOwner)>,
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
    deps: HashMap<Dep, HashSet<ObjectKey>>,
    deps_of: HashMap<ObjectKey, Vec<Dep>>,

    gateways: HashMap<ObjectKey, GatewayState>,
    gw_views: HashMap<ObjectKey, Vec<ListenerView>>,
    gw_claims: HashMap<ObjectKey, (Age, Vec<ListenerKey>)>,
    port_claims: HashMap<ListenerKey, BTreeSet<(Age, ObjectKey)>>,
    gw_outputs: HashMap<ObjectKey, GatewayOutputs>,
    attached: HashMap<ObjectKey, HashMap<Arc<str>, i32>>,

    routes: HashMap<ObjectKey, Contribution>,
    ingresses: HashMap<ObjectKey, Contribution>,
    ingress_count: usize,
    ingress_tls_hosts: usize,
    ingress_blocked: bool,

    listeners: HashMap<ListenerKey, Arc<Listener>>,
    hosts: HashMap<HostKey, BTreeMap<RuleOrder, Arc<RouteRule>>>,
    sni: HashMap<HostKey, BTreeMap<SniOwner, Arc<Certificate>>>,
    cluster_refs: HashMap<ClusterKey, (u32, ClusterSource)>,
    service_clusters: HashMap<NsName, BTreeSet<ClusterKey>>,

    emitted: HashMap<ResourceKey, Resource>,
    cert_refs: HashMap<ContentHash, (Arc<Certificate>, usize)>,
    statuses: BTreeMap<ObjectKey, ObjectStatus>,
}

impl Translator {
    /// A translator with no objects.
    pub fn new(options: TranslatorOptions) -> Self {
        Translator {
            opts: options,
            store: Store::default(),
            deps: HashMap::new(),
            deps_of: HashMap::new(),
            gateways: HashMap::new(),
            gw_views: HashMap::new(),
            gw_claims: HashMap::new(),
            port_claims: HashMap::new(),
            gw_outputs: HashMap::new(),
            attached: HashMap::new(),
            routes: HashMap::new(),
            ingresses: HashMap::new(),
            ingress_count: 0,
            ingress_tls_hosts: 0,
            ingress_blocked: false,
            listeners: HashMap::new(),
            hosts: HashMap::new(),
            sni: HashMap::new(),
            cluster_refs: HashMap::new(),
            service_clusters: HashMap::new(),
            emitted: HashMap::new(),
            cert_refs: HashMap::new(),
            statuses: BTreeMap::new(),
        }
    }

    /// Applies a batch of object changes and returns what changed in the IR and in the
    /// statuses. A delete of an unknown key, or an upsert identical to the stored object,
    /// is a no-op.
    pub fn apply(&mut self, changes: impl IntoIterator<Item = ObjectChange>) -> TranslateOutput {
        let mut d = Dirty::default();
        for change in changes {
            match change {
                ObjectChange::Upsert(obj) => {
                    let key = obj.key();
                    if let Ok(old) = self.store.upsert(obj.clone()) {
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

    /// The complete current IR, sorted by [`ResourceKey`].
    pub fn resources(&self) -> Vec<Resource> {
        let mut v: Vec<(&ResourceKey, &Resource)> = self.emitted.iter().collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v.into_iter().map(|(_, r)| r.clone()).collect()
    }

    /// The current status of every object that has one, sorted by key.
    pub fn statuses(&self) -> Vec<(ObjectKey, ObjectStatus)> {
        self.statuses.iter().map(|(k, s)| (k.clone(), s.clone())).collect()
    }

    fn on_change(&mut self, key: &ObjectKey, old: Option<&Object>, new: Option<&Object>, d: &mut Dirty) {
        match key.kind {
            Kind::Gateway => {
                d.gateways.insert(key.clone());
            }
            Kind::HttpRoute => {
                d.routes.insert(key.clone());
            }
            Kind::Ingress => {
                d.ingresses.insert(key.clone());
            }
            Kind::IngressClass => {}
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
                    Some(Object::Service(s)) => {
                        Some(s.spec.ports.iter().map(|p| (p.port, p.name.clone())).collect::<Vec<_>>())
                    }
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
        if let Some(set) = self.service_clusters.get(&(ns.clone(), Arc::from(svc))) {
            d.resources.extend(set.iter().map(|c| ResourceKey::Cluster(c.clone())));
        }
    }

    fn mark_dependents(&self, dep: &Dep, d: &mut Dirty) {
        let Some(set) = self.deps.get(dep) else { return };
        for k in set {
            match k.kind {
                Kind::Gateway => d.gateways.insert(k.clone()),
                Kind::HttpRoute => d.routes.insert(k.clone()),
                Kind::Ingress => d.ingresses.insert(k.clone()),
                _ => false,
            };
        }
    }

    fn set_deps(&mut self, key: &ObjectKey, mut deps: Vec<Dep>) {
        deps.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        deps.dedup();
        if self.deps_of.get(key) == Some(&deps) {
            return;
        }
        if let Some(old) = self.deps_of.remove(key) {
            for dep in old {
                if let Some(set) = self.deps.get_mut(&dep) {
                    set.remove(key);
                    if set.is_empty() {
                        self.deps.remove(&dep);
                    }
                }
            }
        }
        if deps.is_empty() {
            return;
        }
        for dep in &deps {
            self.deps.entry(dep.clone()).or_default().insert(key.clone());
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
            let st = self.gateways.get(&gk).map(|s| ObjectStatus::Gateway(gateway::status(s, self.attached.get(&gk))));
            self.set_status(&gk, st, d);
        }
        for k in std::mem::take(&mut d.plain_status) {
            let st = self.store.get(&k).and_then(|o| status::standalone_status(&self.store, &self.opts.controller_name, o));
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
                    d.statuses.push((key.clone(), ObjectStatus::Problems(Vec::new())));
                }
            }
        }
    }

    fn recompute_gateways(&mut self, d: &mut Dirty) {
        if d.gateways.is_empty() {
            return;
        }
        let mut settle: HashSet<ObjectKey> = HashSet::new();
        let mut touched: HashSet<ListenerKey> = HashSet::new();
        for gk in std::mem::take(&mut d.gateways) {
            let mut deps = Vec::new();
            let state = match self.store.gateway(&gk) {
                Some(gw) => {
                    deps.push(Dep::Object(ObjectKey::new(Kind::GatewayClass, "", &gw.spec.gateway_class_name)));
                    gateway::is_ours(&self.store, &self.opts.controller_name, self.opts.standalone, gw)
                        .then(|| gateway::compile(&self.store, &gk, self.store.age(&gk), gw, &mut deps))
                }
                None => None,
            };
            self.set_deps(&gk, deps);
            let new_claims = state.as_ref().map(|s| (s.age.clone(), gateway::claims(s)));
            let old_claims = self.gw_claims.remove(&gk);
            if old_claims != new_claims {
                if let Some((age, keys)) = &old_claims {
                    for k in keys {
                        touched.insert(*k);
                        if let Some(set) = self.port_claims.get_mut(k) {
                            set.remove(&(age.clone(), gk.clone()));
                            if set.is_empty() {
                                self.port_claims.remove(k);
                            }
                        }
                    }
                }
                if let Some((age, keys)) = &new_claims {
                    for k in keys {
                        touched.insert(*k);
                        self.port_claims.entry(*k).or_default().insert((age.clone(), gk.clone()));
                    }
                }
            }
            if let Some(c) = new_claims {
                self.gw_claims.insert(gk.clone(), c);
            }
            match state {
                Some(s) => self.gateways.insert(gk.clone(), s),
                None => self.gateways.remove(&gk),
            };
            d.gateway_status.insert(gk.clone());
            settle.insert(gk);
        }
        for k in &touched {
            if let Some(set) = self.port_claims.get(k) {
                settle.extend(set.iter().map(|(_, g)| g.clone()));
            }
        }
        // Undo the old outputs of every settled Gateway first: socket ownership may move
        // from one of them to another.
        for gk in &settle {
            if let Some(out) = self.gw_outputs.remove(gk) {
                for lk in out.listeners {
                    self.listeners.remove(&lk);
                    d.resources.insert(ResourceKey::Listener(lk));
                }
                for (hk, owner) in out.sni {
                    self.remove_sni(&hk, &owner, d);
                }
            }
        }
        for gk in settle {
            self.settle_gateway(&gk, d);
        }
    }

    fn settle_gateway(&mut self, gk: &ObjectKey, d: &mut Dirty) {
        let Some(mut state) = self.gateways.remove(gk) else {
            if self.gw_views.remove(gk).is_some() {
                self.mark_dependents(&Dep::Object(gk.clone()), d);
            }
            return;
        };
        let mut owners: HashMap<ListenerKey, (ObjectKey, Option<Protocol>)> = HashMap::new();
        for l in &state.listeners {
            if let Some(k) = l.key
                && let Some((_, o)) = self.port_claims.get(&k).and_then(|s| s.first())
            {
                let proto = if o == gk { gateway::protocol_on(&state, &k) } else { self.gateways.get(o).and_then(|s| gateway::protocol_on(s, &k)) };
                owners.insert(k, (o.clone(), proto));
            }
        }
        gateway::settle(&mut state, |k| owners.get(k).cloned());
        let mut out = GatewayOutputs::default();
        let owner: SniOwner = (state.age.clone(), gk.clone());
        for k in gateway::claims(&state) {
            let on_key: Vec<_> = state.listeners.iter().filter(|l| l.programmed && l.key == Some(k)).collect();
            let Some(first) = on_key.first() else { continue };
            let Some(protocol) = first.protocol else { continue };
            let names: Vec<&str> = on_key.iter().map(|l| &*l.name).collect();
            let label: Arc<str> = format!("{}/{}", gk.namespace, gk.name).into();
            self.listeners.insert(k, Arc::new(Listener::new(k, protocol, label, names.join(",").into())));
            d.resources.insert(ResourceKey::Listener(k));
            out.listeners.push(k);
            if protocol == Protocol::Https {
                let mut seen: Vec<HostMatch> = Vec::new();
                for l in &on_key {
                    if let Some(c) = &l.cert
                        && !seen.contains(&l.hostname)
                    {
                        seen.push(l.hostname.clone());
                        out.sni.push(((k, l.hostname.clone()), owner.clone()));
                        self.add_sni((k, l.hostname.clone()), owner.clone(), c.clone(), d);
                    }
                }
                if !seen.contains(&HostMatch::Any)
                    && let Some(c) = on_key.iter().find_map(|l| l.cert.clone())
                {
                    out.sni.push(((k, HostMatch::Any), owner.clone()));
                    self.add_sni((k, HostMatch::Any), owner.clone(), c, d);
                }
            }
        }
        self.gw_outputs.insert(gk.clone(), out);
        let views = gateway::views(&state);
        if self.gw_views.get(gk) != Some(&views) {
            self.gw_views.insert(gk.clone(), views);
            self.mark_dependents(&Dep::Object(gk.clone()), d);
        }
        d.gateway_status.insert(gk.clone());
        self.gateways.insert(gk.clone(), state);
    }

    fn add_sni(&mut self, hk: HostKey, owner: SniOwner, cert: Arc<Certificate>, d: &mut Dirty) {
        d.resources.insert(ResourceKey::Sni(hk.0, hk.1.clone()));
        self.sni.entry(hk).or_default().insert(owner, cert);
    }

    fn remove_sni(&mut self, hk: &HostKey, owner: &SniOwner, d: &mut Dirty) {
        if let Some(m) = self.sni.get_mut(hk) {
            m.remove(owner);
            if m.is_empty() {
                self.sni.remove(hk);
            }
        }
        d.resources.insert(ResourceKey::Sni(hk.0, hk.1.clone()));
    }

    fn ingress_keys(&self) -> [Option<ListenerKey>; 2] {
        [self.opts.ingress_http.map(ListenerKey), self.opts.ingress_https.map(ListenerKey)]
    }

    fn check_ingress_blocked(&mut self, d: &mut Dirty) {
        let blocked = self.ingress_keys().iter().flatten().any(|k| self.port_claims.contains_key(k));
        if blocked != self.ingress_blocked {
            self.ingress_blocked = blocked;
            d.ingresses.extend(self.ingresses.keys().cloned());
        }
    }

    fn update_ingress_listeners(&mut self, d: &mut Dirty) {
        let [http, https] = self.ingress_keys();
        let serve = !self.ingress_blocked;
        let want = [
            (http, serve && self.ingress_count > 0, Protocol::Http, "http"),
            (https, serve && self.ingress_tls_hosts > 0, Protocol::Https, "https"),
        ];
        for (key, on, protocol, name) in want {
            let Some(k) = key else { continue };
            if self.port_claims.contains_key(&k) {
                // A Gateway owns this socket and manages its Listener.
                continue;
            }
            let has = self.listeners.contains_key(&k);
            if on && !has {
                self.listeners.insert(k, Arc::new(Listener::new(k, protocol, "ingress".into(), name.into())));
                d.resources.insert(ResourceKey::Listener(k));
            } else if !on && has {
                self.listeners.remove(&k);
                d.resources.insert(ResourceKey::Listener(k));
            }
        }
    }

    /// Replaces the host entries, SNI entries and cluster references of one route or
    /// Ingress, marking only the hosts and clusters it touched (before or after).
    fn swap_contribution(&mut self, old: Option<Contribution>, new: &Contribution, rules: &[(HostKey, RuleOrder, Arc<RouteRule>)], sni: &[(HostKey, SniOwner, Arc<Certificate>)], d: &mut Dirty) {
        for (ck, src) in &new.clusters {
            let e = self.cluster_refs.entry(ck.clone()).or_insert((0, src.clone()));
            e.0 += 1;
            if e.0 == 1 {
                d.resources.insert(ResourceKey::Cluster(ck.clone()));
                if let ClusterSource::Service { ns, name, .. } = src {
                    self.service_clusters.entry((ns.clone(), name.clone())).or_default().insert(ck.clone());
                }
            }
        }
        if let Some(old) = old {
            for (hk, order) in old.entries {
                if let Some(m) = self.hosts.get_mut(&hk) {
                    m.remove(&order);
                    if m.is_empty() {
                        self.hosts.remove(&hk);
                    }
                }
                d.resources.insert(ResourceKey::VirtualHost(hk.0, hk.1));
            }
            for (hk, owner) in old.sni {
                self.remove_sni(&hk, &owner, d);
            }
            for (ck, _) in old.clusters {
                let gone = match self.cluster_refs.get_mut(&ck) {
                    Some(e) => {
                        e.0 -= 1;
                        e.0 == 0
                    }
                    None => false,
                };
                if gone {
                    if let Some((_, ClusterSource::Service { ns, name, .. })) = self.cluster_refs.remove(&ck) {
                        let k = (ns, name);
                        if let Some(set) = self.service_clusters.get_mut(&k) {
                            set.remove(&ck);
                            if set.is_empty() {
                                self.service_clusters.remove(&k);
                            }
                        }
                    } else {
                        self.cluster_refs.remove(&ck);
                    }
                    d.resources.insert(ResourceKey::Cluster(ck));
                }
            }
        }
        for (hk, order, rule) in rules {
            self.hosts.entry(hk.clone()).or_default().insert(order.clone(), rule.clone());
            d.resources.insert(ResourceKey::VirtualHost(hk.0, hk.1.clone()));
        }
        for (hk, owner, cert) in sni {
            self.add_sni(hk.clone(), owner.clone(), cert.clone(), d);
        }
    }

    fn recompute_ingress(&mut self, ik: &ObjectKey, d: &mut Dirty) {
        let old = self.ingresses.remove(ik);
        if let Some(o) = &old {
            if o.ours {
                self.ingress_count -= 1;
            }
            self.ingress_tls_hosts -= o.tls_hosts;
        }
        let mut new = Contribution::default();
        let mut rules = Vec::new();
        let mut sni = Vec::new();
        let mut status = None;
        let mut deps = Vec::new();
        if let Some(ing) = self.store.ingress(ik).filter(|i| crate::ingress::is_ours(&self.opts, i)) {
            let age = self.store.age(ik);
            let c = crate::ingress::compile(&self.store, ik, &age, ing);
            deps = c.deps;
            new.ours = true;
            let mut problems = c.problems;
            let [http, https] = self.ingress_keys();
            let mut addresses = Vec::new();
            if self.ingress_blocked {
                problems.push("the Ingress listener address is used by a Gateway; Ingresses are not served".into());
            } else {
                for k in [http, https].into_iter().flatten() {
                    let ip = k.0.ip().to_string();
                    if !addresses.contains(&ip) {
                        addresses.push(ip);
                    }
                }
                let covered = |h: &HostMatch| {
                    c.tls.iter().any(|(t, _)| {
                        t == h || *t == HostMatch::Any || *h == HostMatch::Any || matches!(h, HostMatch::Exact(e) if t.matches(e))
                    })
                };
                for (h, order, rule) in &c.rules {
                    if let Some(k) = http {
                        rules.push(((k, h.clone()), order.clone(), rule.clone()));
                    }
                    if let Some(k) = https
                        && covered(h)
                    {
                        rules.push(((k, h.clone()), order.clone(), rule.clone()));
                    }
                }
                if let Some(k) = https {
                    for (h, cert) in &c.tls {
                        sni.push(((k, h.clone()), (age.clone(), ik.clone()), cert.clone()));
                    }
                    new.tls_hosts = c.tls.len();
                }
                new.clusters = c.clusters;
            }
            new.entries = rules.iter().map(|(hk, o, _)| (hk.clone(), o.clone())).collect();
            new.sni = sni.iter().map(|(hk, o, _)| (hk.clone(), o.clone())).collect();
            status = Some(ObjectStatus::Ingress { load_balancer: weir_api::IngressStatus { addresses }, problems });
            self.ingress_count += 1;
            self.ingress_tls_hosts += new.tls_hosts;
        }
        self.set_deps(ik, deps);
        self.swap_contribution(old, &new, &rules, &sni, d);
        if self.store.ingress(ik).is_some() {
            self.ingresses.insert(ik.clone(), new);
        }
        self.set_status(ik, status, d);
    }

    /// Builds the current version of a resource, if it should exist.
    fn desired(&self, key: &ResourceKey) -> Option<Resource> {
        match key {
            ResourceKey::Listener(k) => self.listeners.get(k).map(|l| Resource::Listener(l.clone())),
            ResourceKey::VirtualHost(k, h) => {
                let rules = self.hosts.get(&(*k, h.clone()))?;
                Some(Resource::VirtualHost(Arc::new(VirtualHost::new(*k, h.clone(), rules.values().cloned().collect()))))
            }
            ResourceKey::Cluster(c) => {
                let (_, src) = self.cluster_refs.get(c)?;
                backend::build_cluster(&self.store, c, src).map(|c| Resource::Cluster(Arc::new(c)))
            }
            ResourceKey::Sni(k, h) => {
                let cert = self.sni.get(&(*k, h.clone()))?.values().next()?;
                Some(Resource::Sni(Arc::new(SniCert::new(*k, h.clone(), cert.hash()))))
            }
            ResourceKey::Certificate(h) => self.cert_refs.get(h).filter(|(_, n)| *n > 0).map(|(c, _)| Resource::Certificate(c.clone())),
        }
    }

    fn emit(&mut self, dirty: &HashSet<ResourceKey>) -> DeltaBatch {
        emit::emit(self, dirty)
    }
}
