//! Immutable data-plane configuration, built by applying IR delta batches.
//!
//! A [`Snapshot`] is a few `Arc`s: a small map of listeners (each with its virtual-host,
//! SNI and L4-route [`HostTable`]s), and sharded maps of clusters and certificates. Applying a
//! batch clones the snapshot (pointer copies) and changes only the shards the deltas
//! touch, so its cost follows the batch, not the size of the configuration, and every
//! unchanged shard is shared with the previous version.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use serde::Serialize;
use serde_json::{Map, Value, json};
use weir_model::{
    ClusterKey, ContentHash, Delta, DeltaBatch, HostMatch, L4Route, Listener, ListenerKey, Policy,
    PolicyTarget, Resource, ResourceKey, SniCert, VirtualHost,
};

use crate::balance::ClusterState;
use crate::endpoints::EndpointRegistry;
use crate::hosts::{HostKeyed, HostTable};
use crate::router::{self, RequestView, RouteOutcome};
use crate::sharded::{ShardedMap, ShardedTable};
use crate::tls::CertEntry;

/// Why a delta was rejected (the rest of its batch still applies).
#[derive(Debug, thiserror::Error)]
enum Rejected {
    /// A virtual host or SNI entry names a listener the snapshot does not have.
    #[error("unknown listener {0}")]
    UnknownListener(ListenerKey),
    /// An SNI entry names a certificate the snapshot does not have.
    #[error("unknown certificate {0}")]
    UnknownCertificate(ContentHash),
    /// Another resource it requires is missing.
    #[error("missing {0:?}")]
    Missing(ResourceKey),
}

/// Counts for metrics and logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SnapshotStats {
    /// Listeners.
    pub listeners: usize,
    /// Virtual hosts over all listeners.
    pub virtual_hosts: usize,
    /// Clusters.
    pub clusters: usize,
    /// Distinct certificates (by content).
    pub certificates: usize,
    /// SNI entries over all listeners.
    pub sni_entries: usize,
    /// L4 routes (TLS passthrough hostnames, TCP routes) over all listeners.
    pub l4_routes: usize,
    /// Policies (one per target: Gateway, route or rule).
    pub policies: usize,
}

/// The kinds of object a policy targets ([`PolicyTarget`]'s variants).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PolicyKind {
    Gateway,
    Route,
    Rule,
    Backend,
    Listener,
    ListenerSet,
}

impl PolicyKind {
    fn of(t: &PolicyTarget) -> PolicyKind {
        match t {
            PolicyTarget::Gateway(_) => PolicyKind::Gateway,
            PolicyTarget::Route { .. } => PolicyKind::Route,
            PolicyTarget::Rule(_) => PolicyKind::Rule,
            PolicyTarget::Backend { .. } => PolicyKind::Backend,
            PolicyTarget::Listener { .. } => PolicyKind::Listener,
            PolicyTarget::ListenerSet { .. } => PolicyKind::ListenerSet,
        }
    }
}

/// The number of policies per [`PolicyKind`]: a request's settings are looked up only
/// at the levels some policy targets (an Ingress's annotations are one route policy:
/// one lookup, not one per level).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PolicyKinds([u32; 6]);

impl PolicyKinds {
    /// Whether some policy targets an object of `kind`.
    pub(crate) fn has(&self, kind: PolicyKind) -> bool {
        self.0[kind as usize] > 0
    }

    fn count(&mut self, t: &PolicyTarget, by: i32) {
        let n = &mut self.0[PolicyKind::of(t) as usize];
        *n = n.saturating_add_signed(by);
    }
}

/// Immutable data-plane configuration. Cheap to clone (all parts behind `Arc`s or
/// sharded `Arc`s); versions built from one another share their unchanged parts.
#[derive(Clone)]
pub struct Snapshot {
    version: u64,
    /// Looked up for every request by its connection's listener key (a small interned
    /// number): hashed with foldhash, not std's keyed SipHash (in a callgrind profile of
    /// a plaintext request, session 42's build, the SipHash lookup took ~250
    /// instructions).
    listeners: Arc<HashMap<ListenerKey, Arc<ListenerState>, foldhash::fast::FixedState>>,
    clusters: ShardedMap<ClusterKey, Arc<ClusterState>>,
    /// By content hash (the entry holds it).
    certificates: ShardedTable<Arc<CertEntry>>,
    /// Policies by target, looked up per request (see [`crate::policy`]).
    policies: ShardedMap<PolicyTarget, Arc<Policy>>,
    /// How many of them target each kind of object: a request looks up only the kinds
    /// some policy targets (and its listener section only when one targets a listener).
    policy_kinds: PolicyKinds,
    /// The clusters built from each Service or Backend ([`PolicyTarget::Backend`], from
    /// the cluster key), so that a change of its policy rebuilds only their states.
    backend_clusters: ShardedMap<PolicyTarget, Arc<[ClusterKey]>>,
    /// Endpoint state (health, load), shared by every version derived from one another
    /// and kept across cluster changes (see [`crate::endpoints`]).
    endpoints: Arc<EndpointRegistry>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("version", &self.version)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Snapshot {
    /// The empty configuration, version 0.
    pub fn empty() -> Snapshot {
        Snapshot::with_endpoints(Arc::default())
    }

    /// The empty configuration, keeping endpoint state in `endpoints`.
    pub(crate) fn with_endpoints(endpoints: Arc<EndpointRegistry>) -> Snapshot {
        Snapshot {
            version: 0,
            listeners: Arc::default(),
            clusters: ShardedMap::new(),
            certificates: ShardedTable::default(),
            policies: ShardedMap::new(),
            policy_kinds: PolicyKinds::default(),
            backend_clusters: ShardedMap::new(),
            endpoints,
        }
    }

    /// Applies a batch in order, returning the new snapshot (version `self.version() + 1`)
    /// and the deltas it rejected with a reason. A rejected delta changes nothing; the
    /// others apply. Cost is proportional to the batch (times a shard size).
    pub fn apply(&self, batch: &DeltaBatch) -> (Snapshot, Vec<(ResourceKey, String)>) {
        let mut next = self.next();
        let mut rejected = Vec::new();
        next.apply_in_place(batch, &mut rejected);
        (next, rejected)
    }

    /// The next version: this one, with version `self.version() + 1`, to apply batches
    /// to in place ([`Snapshot::apply_in_place`]). Its parts are shared with this one
    /// until changed.
    pub(crate) fn next(&self) -> Snapshot {
        let mut next = self.clone();
        next.version = self.version + 1;
        next
    }

    /// Applies a batch in order to this snapshot, adding the deltas it rejected to
    /// `rejected`; the version is unchanged. Parts shared with other versions are
    /// copied when first changed, the others changed where they are: batches applied
    /// one after the other to a version no one else holds copy nothing twice.
    pub(crate) fn apply_in_place(
        &mut self,
        batch: &DeltaBatch,
        rejected: &mut Vec<(ResourceKey, String)>,
    ) {
        let next = self;
        for delta in &batch.deltas {
            let result = match delta {
                Delta::Upsert(resource) => next.upsert(resource),
                Delta::Remove(key) => {
                    next.remove(key);
                    Ok(())
                }
            };
            if let Err(why) = result {
                let key = match delta {
                    Delta::Upsert(resource) => resource.key(),
                    Delta::Remove(key) => key.clone(),
                };
                rejected.push((key, why.to_string()));
            }
        }
    }

    /// Whether the snapshot holds a resource with this key.
    fn holds(&self, key: &ResourceKey) -> bool {
        match key {
            ResourceKey::Listener(l) => self.listeners.contains_key(l),
            ResourceKey::VirtualHost(l, h) => self
                .listeners
                .get(l)
                .is_some_and(|s| s.hosts.get(h).is_some()),
            ResourceKey::Sni(l, h) => self
                .listeners
                .get(l)
                .is_some_and(|s| s.sni.get(h).is_some()),
            ResourceKey::L4Route(l, h) => {
                self.listeners.get(l).is_some_and(|s| s.l4.get(h).is_some())
            }
            ResourceKey::Cluster(c) => self.clusters.contains_key(c),
            ResourceKey::Certificate(h) => self.certificates.contains_key(h),
            ResourceKey::Policy(t) => self.policies.contains_key(t),
        }
    }

    fn upsert(&mut self, resource: &Resource) -> Result<(), Rejected> {
        // What the resource requires must be here first (the model's relations).
        for dep in resource.required() {
            if !self.holds(&dep) {
                return Err(match dep {
                    ResourceKey::Listener(l) => Rejected::UnknownListener(l),
                    ResourceKey::Certificate(h) => Rejected::UnknownCertificate(h),
                    other => Rejected::Missing(other),
                });
            }
        }
        match resource {
            Resource::Listener(l) => {
                let listeners = Arc::make_mut(&mut self.listeners);
                match listeners.get_mut(&l.key) {
                    Some(state) if state.listener == *l => {}
                    Some(state) => {
                        let state = Arc::make_mut(state);
                        if state.listener.sections != l.sections {
                            state.sections = sections_of(l);
                        }
                        state.listener = l.clone();
                    }
                    None => {
                        let state = ListenerState {
                            listener: l.clone(),
                            hosts: HostTable::new(),
                            sni: HostTable::new(),
                            l4: HostTable::new(),
                            sections: sections_of(l),
                        };
                        listeners.insert(l.key, Arc::new(state));
                    }
                }
            }
            Resource::VirtualHost(vh) => {
                // Unchanged content (e.g. a full resync) copies no shard.
                let state = self.listener(&vh.listener);
                let unchanged = state
                    .and_then(|st| st.hosts.get(&vh.host))
                    .is_some_and(|old| old == vh);
                if !unchanged {
                    self.listener_mut(&vh.listener)?.hosts.insert(vh.clone());
                }
            }
            Resource::Cluster(c) => {
                // Same content: keep the state (and its round-robin position).
                let unchanged = self.clusters.get(&c.key).is_some_and(|s| s.cluster == *c);
                if !unchanged {
                    let target = c.key.backend_target();
                    let policy = target.as_ref().and_then(|t| self.policies.get(t)).cloned();
                    let state = ClusterState::with_policy(c.clone(), &self.endpoints, policy);
                    if self
                        .clusters
                        .insert(c.key.clone(), Arc::new(state))
                        .is_none()
                        && let Some(t) = target
                    {
                        self.index_backend_cluster(t, &c.key, true);
                    }
                }
            }
            Resource::Certificate(c) => {
                // Same hash means same content: keep the entry and its parsed key.
                if !self.certificates.contains_key(&c.hash()) {
                    self.certificates
                        .insert(Arc::new(CertEntry::new(c.clone())));
                }
            }
            Resource::Sni(s) => {
                let cert = self
                    .certificates
                    .get(&s.cert)
                    .ok_or(Rejected::UnknownCertificate(s.cert))?;
                let unchanged = self
                    .listener(&s.listener)
                    .and_then(|st| st.sni.get(&s.host))
                    .is_some_and(|old| old.sni == *s && Arc::ptr_eq(&old.cert, cert));
                if !unchanged {
                    let entry = SniEntry {
                        sni: s.clone(),
                        cert: cert.clone(),
                    };
                    self.listener_mut(&s.listener)?.sni.insert(entry);
                }
            }
            Resource::L4Route(r) => {
                let unchanged = self
                    .listener(&r.listener)
                    .and_then(|st| st.l4.get(&r.host))
                    .is_some_and(|old| old == r);
                if !unchanged {
                    self.listener_mut(&r.listener)?.l4.insert(r.clone());
                }
            }
            Resource::Policy(p) => {
                if self.policies.get(&p.target) != Some(p) {
                    let old = self.policies.insert(p.target.clone(), p.clone());
                    if old.is_none() {
                        self.policy_kinds.count(&p.target, 1);
                    }
                    self.backend_policy_changed(&p.target);
                }
            }
        }
        Ok(())
    }

    fn remove(&mut self, key: &ResourceKey) {
        match key {
            ResourceKey::Listener(l) => {
                if self.listeners.contains_key(l) {
                    Arc::make_mut(&mut self.listeners).remove(l);
                }
            }
            ResourceKey::VirtualHost(l, host) => {
                if self
                    .listeners
                    .get(l)
                    .is_some_and(|s| s.hosts.get(host).is_some())
                    && let Ok(state) = self.listener_mut(l)
                {
                    state.hosts.remove(host);
                }
            }
            ResourceKey::Sni(l, host) => {
                if self
                    .listeners
                    .get(l)
                    .is_some_and(|s| s.sni.get(host).is_some())
                    && let Ok(state) = self.listener_mut(l)
                {
                    state.sni.remove(host);
                }
            }
            ResourceKey::L4Route(l, host) => {
                if self
                    .listeners
                    .get(l)
                    .is_some_and(|s| s.l4.get(host).is_some())
                    && let Ok(state) = self.listener_mut(l)
                {
                    state.l4.remove(host);
                }
            }
            ResourceKey::Cluster(c) => {
                if self.clusters.remove(c).is_some()
                    && let Some(t) = c.backend_target()
                {
                    self.index_backend_cluster(t, c, false);
                }
            }
            ResourceKey::Certificate(h) => {
                // SNI entries still naming it keep their own Arc and keep working.
                self.certificates.remove(h);
            }
            ResourceKey::Policy(t) => {
                if self.policies.remove(t).is_some() {
                    self.policy_kinds.count(t, -1);
                    self.backend_policy_changed(t);
                }
            }
        }
    }

    /// Adds (or removes) `cluster` to the clusters of Service or Backend `target`.
    fn index_backend_cluster(&mut self, target: PolicyTarget, cluster: &ClusterKey, add: bool) {
        let mut keys: Vec<ClusterKey> = self
            .backend_clusters
            .get(&target)
            .map(|k| k.to_vec())
            .unwrap_or_default();
        keys.retain(|k| k != cluster);
        if add {
            keys.push(cluster.clone());
        }
        if keys.is_empty() {
            self.backend_clusters.remove(&target);
        } else {
            self.backend_clusters.insert(target, keys.into());
        }
    }

    /// Rebuilds the states of the clusters of a Service or Backend whose policy changed
    /// (their endpoints keep their state; probers follow the new health check).
    fn backend_policy_changed(&mut self, target: &PolicyTarget) {
        if !matches!(target, PolicyTarget::Backend { .. }) {
            return;
        }
        let Some(keys) = self.backend_clusters.get(target).cloned() else {
            return;
        };
        let policy = self.policies.get(target).cloned();
        for k in keys.iter() {
            if let Some(old) = self.clusters.get(k) {
                let state =
                    ClusterState::with_policy(old.cluster.clone(), &self.endpoints, policy.clone());
                self.clusters.insert(k.clone(), Arc::new(state));
            }
        }
    }

    /// A listener's state, made unique to this snapshot for writing.
    fn listener_mut(&mut self, key: &ListenerKey) -> Result<&mut ListenerState, Rejected> {
        if !self.listeners.contains_key(key) {
            return Err(Rejected::UnknownListener(*key));
        }
        Arc::make_mut(&mut self.listeners)
            .get_mut(key)
            .map(Arc::make_mut)
            .ok_or(Rejected::UnknownListener(*key))
    }

    /// The version: 0 for [`Snapshot::empty`], +1 per applied batch.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Every listener, in no particular order.
    pub fn listeners(&self) -> impl Iterator<Item = &ListenerState> {
        self.listeners.values().map(|s| &**s)
    }

    /// One listener.
    pub fn listener(&self, key: &ListenerKey) -> Option<&ListenerState> {
        self.listeners.get(key).map(|s| &**s)
    }

    /// One cluster.
    pub fn cluster(&self, key: &ClusterKey) -> Option<&Arc<ClusterState>> {
        self.clusters.get(key)
    }

    /// The policy attached to `target`, if any.
    pub fn policy(&self, target: &PolicyTarget) -> Option<&Arc<Policy>> {
        self.policies.get(target)
    }

    /// Every cluster, in no particular order (the status page).
    pub(crate) fn clusters(&self) -> impl Iterator<Item = (&ClusterKey, &Arc<ClusterState>)> {
        self.clusters.iter()
    }

    /// Every certificate, in no particular order (the status page).
    pub(crate) fn certificates(&self) -> impl Iterator<Item = &Arc<CertEntry>> {
        self.certificates.iter()
    }

    /// Whether any policy is attached to anything (requests skip the lookups when not).
    pub fn has_policies(&self) -> bool {
        !self.policies.is_empty()
    }

    /// Whether any policy targets a listener or a ListenerSet (requests look their
    /// listener section up only then).
    pub fn has_listener_policies(&self) -> bool {
        self.policy_kinds.has(PolicyKind::Listener)
            || self.policy_kinds.has(PolicyKind::ListenerSet)
    }

    /// How many policies target each kind of object.
    pub(crate) fn policy_kinds(&self) -> PolicyKinds {
        self.policy_kinds
    }

    /// Counts of each kind of resource.
    pub fn stats(&self) -> SnapshotStats {
        SnapshotStats {
            listeners: self.listeners.len(),
            virtual_hosts: self.listeners.values().map(|s| s.hosts.len()).sum(),
            clusters: self.clusters.len(),
            certificates: self.certificates.len(),
            sni_entries: self.listeners.values().map(|s| s.sni.len()).sum(),
            l4_routes: self.listeners.values().map(|s| s.l4.len()).sum(),
            policies: self.policies.len(),
        }
    }

    /// JSON dump of the live IR for the admin `/config` endpoint: listeners with their
    /// virtual hosts (rules), SNI entries (certificate hashes) and L4 routes (backends),
    /// clusters, and the
    /// certificate hashes. Never key material. Object keys are sorted.
    pub fn to_json(&self) -> Value {
        let mut listeners = Map::new();
        for state in self.listeners.values() {
            let hosts: Map<String, Value> = state
                .hosts
                .iter()
                .map(|(host, vh)| (host.to_string(), to_value(&vh.rules)))
                .collect();
            let sni: Map<String, Value> = state
                .sni
                .iter()
                .map(|(host, e)| (host.to_string(), Value::String(e.sni.cert.to_string())))
                .collect();
            let l4: Map<String, Value> = state
                .l4
                .iter()
                .map(|(host, r)| (host.to_string(), to_value(&r.backends)))
                .collect();
            let l = &state.listener;
            let mut entry = json!({
                "protocol": to_value(&l.protocol),
                "gateway": &*l.gateway,
                "name": &*l.name,
                "hosts": hosts,
                "sni": sni,
            });
            if !l4.is_empty() {
                entry["l4"] = Value::Object(l4);
            }
            // The L4 hosts whose TLS is terminated here (the others pass through).
            let terminated: Vec<Value> = state
                .l4
                .iter()
                .filter(|(_, r)| r.mode == weir_model::L4Mode::Terminate)
                .map(|(host, _)| Value::String(host.to_string()))
                .collect();
            if !terminated.is_empty() {
                entry["l4_terminated"] = Value::Array(terminated);
            }
            listeners.insert(l.key.to_string(), entry);
        }
        let now = std::time::Instant::now();
        let clusters: Map<String, Value> = self
            .clusters
            .iter()
            .map(|(k, c)| {
                let state: Vec<Value> = c
                    .states()
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let mut v = s.to_json(now);
                        if let Some(p) = c.probers().get(i) {
                            v["health_check"] = p.to_json();
                        }
                        v
                    })
                    .collect();
                let mut v = json!({
                    "protocol": to_value(&c.cluster.protocol),
                    "endpoints": to_value(&c.cluster.endpoints),
                    "state": state,
                });
                if let Some(p) = c.policy() {
                    v["policy"] = to_value(&p.target);
                }
                (k.to_string(), v)
            })
            .collect();
        let mut certificates: Vec<String> = self
            .certificates
            .iter()
            .map(|c| c.hash().to_string())
            .collect();
        certificates.sort();
        let mut policies: Vec<(String, Value)> = self
            .policies
            .iter()
            .map(|(t, p)| (t.to_string(), to_value(&**p)))
            .collect();
        policies.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = json!({
            "version": self.version,
            "listeners": listeners,
            "clusters": clusters,
            "certificates": certificates,
        });
        if !policies.is_empty() {
            out["policies"] = Value::Object(policies.into_iter().collect());
        }
        out
    }
}

fn to_value<T: Serialize + ?Sized>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or_else(|e| json!({ "error": e.to_string() }))
}

/// One SNI table entry: the IR entry and the certificate it resolved to when applied.
#[derive(Clone, Debug)]
struct SniEntry {
    sni: Arc<SniCert>,
    cert: Arc<CertEntry>,
}

impl crate::sharded::Counted for SniEntry {
    fn counts(&self) -> usize {
        Arc::strong_count(&self.sni).wrapping_add(Arc::strong_count(&self.cert))
    }
}

impl HostKeyed for SniEntry {
    fn host(&self) -> &HostMatch {
        &self.sni.host
    }
}

impl HostKeyed for Arc<VirtualHost> {
    fn host(&self) -> &HostMatch {
        &self.host
    }
}

impl HostKeyed for Arc<L4Route> {
    fn host(&self) -> &HostMatch {
        &self.host
    }
}

impl HostKeyed for Arc<SectionKeys> {
    fn host(&self) -> &HostMatch {
        &self.host
    }
}

/// One listener's configuration: the IR listener, its virtual hosts, SNI table and L4
/// routes.
#[derive(Clone, Debug)]
pub struct ListenerState {
    /// The IR listener (address, protocol, labels).
    pub listener: Arc<Listener>,
    hosts: HostTable<Arc<VirtualHost>>,
    sni: HostTable<SniEntry>,
    l4: HostTable<Arc<L4Route>>,
    /// The listener's sections by hostname, with their policy keys built once per
    /// Listener version; `None` when it has none.
    sections: Sections,
}

/// The policy keys of one Gateway listener ([`weir_model::ListenerSection`]): its own,
/// and its ListenerSet's when it comes from one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SectionKeys {
    /// The listener's hostname (what the section table finds it by).
    pub(crate) host: HostMatch,
    /// [`PolicyTarget::Listener`].
    pub(crate) listener: PolicyTarget,
    /// [`PolicyTarget::ListenerSet`], for a listener of a ListenerSet.
    pub(crate) set: Option<PolicyTarget>,
}

/// A socket's Gateway listeners by hostname.
type Sections = Option<Arc<HostTable<Arc<SectionKeys>>>>;

/// The sections of `l`, keyed as policies target them.
fn sections_of(l: &Listener) -> Sections {
    if l.sections.is_empty() {
        return None;
    }
    let mut table = HostTable::new();
    for s in l.sections.iter() {
        let keys = SectionKeys {
            host: s.hostname.clone(),
            listener: PolicyTarget::Listener {
                gateway: l.gateway.clone(),
                set: s.set.clone(),
                section: s.name.clone(),
            },
            set: s.set.as_ref().map(|set| PolicyTarget::ListenerSet {
                gateway: l.gateway.clone(),
                set: set.clone(),
            }),
        };
        // Hostnames are unique on a socket; should two come, the first serves.
        if table.get(&s.hostname).is_none() {
            table.insert(Arc::new(keys));
        }
    }
    Some(Arc::new(table))
}

impl ListenerState {
    /// The Gateway listener serving `host` (normalized as for [`ListenerState::route`]):
    /// the most specific listener hostname matching it, as Gateway API matches a request
    /// to a listener. `None` when the listener carries no sections.
    pub(crate) fn section(&self, host: &str) -> Option<&SectionKeys> {
        self.sections.as_ref()?.lookup(host).map(|k| &**k)
    }

    /// Finds the rule for a request (host normalized by [`router::normalize_host`]): the
    /// best virtual host (exact, longest wildcard, catch-all), then its first rule whose
    /// conditions all hold. No fallback to a less specific virtual host.
    pub fn route(&self, req: &RequestView<'_>) -> RouteOutcome<'_> {
        let Some(vh) = self.hosts.lookup(req.host) else {
            return RouteOutcome::NoHost;
        };
        match router::first_match(&vh.rules, req) {
            Some(rule) => RouteOutcome::Matched(rule),
            None => RouteOutcome::NoRoute,
        }
    }

    /// Certificate for a TLS ClientHello SNI: exact, then wildcard (longest suffix), then
    /// the listener default ([`weir_model::HostMatch::ANY`], also used without SNI).
    /// Parsed once per certificate content and shared by every SNI entry with the same
    /// hash and across snapshots. `None` when no entry matches or the chosen certificate
    /// is unusable (no fallback to a less specific entry).
    pub fn certificate(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let entry = match sni {
            Some(name) => self.sni.lookup(&router::normalize_host(name)),
            None => self.sni.any(),
        }?;
        entry.cert.certified_key()
    }

    /// The L4 route (TLS passed through or terminated) for a ClientHello with server name
    /// `sni`: the best L4 pattern (exact, then the longest wildcard, then
    /// [`weir_model::HostMatch::ANY`]; no SNI: only the catch-all), unless the listener's
    /// SNI table (HTTPS terminated here, on a socket with HTTPS and TLS listeners) has a
    /// more specific pattern for it. On equally specific patterns the L4 route wins: the
    /// terminating side's catch-all is the certificate for clients without a match, not a
    /// listener's own hostname, and a TLS `Terminate` listener's hostname has both an SNI
    /// entry (its certificate) and its L4 route.
    pub fn l4_route(&self, sni: Option<&str>) -> Option<&Arc<L4Route>> {
        let name = sni.map(router::normalize_host);
        let route = match &name {
            Some(n) => self.l4.lookup(n),
            None => self.l4.any(),
        }?;
        let terminated = match &name {
            Some(n) => self.sni.lookup(n),
            None => self.sni.any(),
        };
        match terminated {
            Some(t) if specificity(&t.sni.host) > specificity(&route.host) => None,
            _ => Some(route),
        }
    }

    /// Whether a request for `host` on a TLS connection whose server name was `sni`
    /// (both normalized) is misdirected: the SNI entries (one per HTTPS listener
    /// hostname, plus the catch-all) pick a different pattern, that is another listener,
    /// for the host than for the server name. A host no entry covers differs from a
    /// server name one covers, and the other way round; two names both left to the
    /// catch-all do not.
    pub fn misdirected(&self, sni: &str, host: &str) -> bool {
        let pattern = |name: &str| self.sni.lookup(name).map(|e| &e.sni.host);
        pattern(sni) != pattern(host)
    }

    /// Every virtual host, in no particular order (the status page).
    pub(crate) fn virtual_hosts(&self) -> impl Iterator<Item = (HostMatch, &Arc<VirtualHost>)> {
        self.hosts.iter()
    }

    /// Every SNI entry and the hash of its certificate, in no particular order.
    pub(crate) fn sni_entries(&self) -> impl Iterator<Item = (HostMatch, ContentHash)> + '_ {
        self.sni.iter().map(|(h, e)| (h, e.sni.cert))
    }

    /// Every L4 route, in no particular order.
    pub(crate) fn l4_routes(&self) -> impl Iterator<Item = (HostMatch, &Arc<L4Route>)> {
        self.l4.iter()
    }

    /// Counts of virtual hosts, SNI entries and L4 routes.
    pub(crate) fn table_sizes(&self) -> (usize, usize, usize) {
        (self.hosts.len(), self.sni.len(), self.l4.len())
    }

    /// A TCP or UDP listener's route (its catch-all L4 entry).
    pub fn socket_route(&self) -> Option<&Arc<L4Route>> {
        self.l4.any()
    }

    /// Whether the listener has any L4 route (an HTTPS socket then checks each
    /// ClientHello for a passthrough hostname before terminating TLS).
    pub fn has_l4_routes(&self) -> bool {
        self.l4.len() > 0
    }
}

/// How specific a host pattern is: exact names, then wildcards by suffix length, then the
/// catch-all.
fn specificity(h: &weir_model::HostMatch) -> (u8, usize) {
    match h.kind() {
        weir_model::HostKind::Exact(n) => (2, n.len()),
        weir_model::HostKind::Wildcard(s) => (1, s.len()),
        weir_model::HostKind::Any => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use weir_model::{
        Action, Certificate, HostMatch, PathMatch, Protocol, RequestMatch, RouteKind, RouteRef,
        RouteRule, Timeouts,
    };

    use super::*;
    use crate::balance::tests::cluster;
    use crate::tls::test_certs::{broken, self_signed};

    fn lk(port: u16) -> ListenerKey {
        ListenerKey::new(([0, 0, 0, 0], port).into())
    }

    fn host(h: &str) -> HostMatch {
        HostMatch::parse(Some(h)).unwrap()
    }

    fn listener(port: u16, name: &str) -> Resource {
        Resource::Listener(Arc::new(Listener::new(
            lk(port),
            Protocol::Https,
            "ns/gw".into(),
            name.into(),
        )))
    }

    fn rule(name: &str, path: &str) -> Arc<RouteRule> {
        Arc::new(RouteRule::new(
            RouteRef {
                kind: RouteKind::HttpRoute,
                namespace: "ns".into(),
                name: name.into(),
                rule: 0,
            },
            RequestMatch {
                path: PathMatch::Prefix(path.into()),
                headers: vec![],
                query: vec![],
                method: None,
            },
            vec![],
            Action::Fail {
                status: 503,
                reason: "test".into(),
            },
            Timeouts::default(),
        ))
    }

    fn vhost(port: u16, h: HostMatch, rule_name: &str) -> Resource {
        Resource::VirtualHost(Arc::new(VirtualHost::new(
            lk(port),
            h,
            vec![rule(rule_name, "/api")],
        )))
    }

    fn sni(port: u16, h: HostMatch, cert: &Certificate) -> Resource {
        Resource::Sni(Arc::new(SniCert::new(lk(port), h, cert.hash())))
    }

    fn apply(s: &Snapshot, deltas: Vec<Delta>) -> Snapshot {
        let (next, rejected) = s.apply(&DeltaBatch { deltas });
        assert!(rejected.is_empty(), "{rejected:?}");
        next
    }

    fn up(r: Resource) -> Delta {
        Delta::Upsert(r)
    }

    fn routed(s: &Snapshot, port: u16, h: &str, path: &str) -> Option<String> {
        let headers = http::HeaderMap::new();
        let req = RequestView {
            host: h,
            path,
            query: None,
            method: &http::Method::GET,
            headers: &headers,
        };
        match s.listener(&lk(port))?.route(&req) {
            RouteOutcome::NoHost => Some("no-host".into()),
            RouteOutcome::NoRoute => Some("no-route".into()),
            RouteOutcome::Matched(r) => Some(r.route.name.to_string()),
        }
    }

    #[test]
    fn upsert_and_remove_every_kind() {
        let cert = self_signed(&["a.test"]);
        let s = apply(
            &Snapshot::empty(),
            vec![
                up(listener(443, "https")),
                up(vhost(443, host("a.test"), "ra")),
                up(vhost(443, HostMatch::ANY, "rany")),
                up(Resource::Cluster(cluster("c1", &[1]))),
                up(Resource::Certificate(cert.clone())),
                up(sni(443, host("a.test"), &cert)),
            ],
        );
        assert_eq!(s.version(), 1);
        assert_eq!(
            s.stats(),
            SnapshotStats {
                listeners: 1,
                virtual_hosts: 2,
                clusters: 1,
                certificates: 1,
                sni_entries: 1,
                l4_routes: 0,
                policies: 0,
            }
        );
        assert_eq!(s.listeners().count(), 1);
        assert_eq!(routed(&s, 443, "a.test", "/api/x").as_deref(), Some("ra"));
        assert_eq!(routed(&s, 443, "b.test", "/api").as_deref(), Some("rany"));
        assert_eq!(
            routed(&s, 443, "a.test", "/other").as_deref(),
            Some("no-route")
        );
        assert!(s.cluster(&ClusterKey("c1".into())).is_some());
        assert!(
            s.listener(&lk(443))
                .unwrap()
                .certificate(Some("a.test"))
                .is_some()
        );

        let s2 = apply(
            &s,
            vec![
                Delta::Remove(ResourceKey::VirtualHost(lk(443), HostMatch::ANY)),
                Delta::Remove(ResourceKey::Cluster(ClusterKey("c1".into()))),
                Delta::Remove(ResourceKey::Sni(lk(443), host("a.test"))),
                Delta::Remove(ResourceKey::Certificate(cert.hash())),
                // Removing what is absent is a no-op.
                Delta::Remove(ResourceKey::VirtualHost(lk(9), HostMatch::ANY)),
                Delta::Remove(ResourceKey::Cluster(ClusterKey("nope".into()))),
            ],
        );
        assert_eq!(s2.version(), 2);
        assert_eq!(
            s2.stats(),
            SnapshotStats {
                listeners: 1,
                virtual_hosts: 1,
                clusters: 0,
                certificates: 0,
                sni_entries: 0,
                l4_routes: 0,
                policies: 0,
            }
        );
        assert_eq!(
            routed(&s2, 443, "b.test", "/api").as_deref(),
            Some("no-host")
        );
        assert!(
            s2.listener(&lk(443))
                .unwrap()
                .certificate(Some("a.test"))
                .is_none()
        );
        // The previous version is untouched.
        assert_eq!(s.stats().virtual_hosts, 2);
        assert_eq!(routed(&s, 443, "b.test", "/api").as_deref(), Some("rany"));

        let s3 = apply(&s2, vec![Delta::Remove(ResourceKey::Listener(lk(443)))]);
        assert_eq!(s3.stats(), SnapshotStats::default());
        assert!(s3.listener(&lk(443)).is_none());
        // A listener that comes back starts with empty tables.
        let s4 = apply(&s3, vec![up(listener(443, "https"))]);
        assert_eq!(s4.stats().virtual_hosts, 0);
    }

    #[test]
    fn listener_upsert_keeps_tables() {
        let s = apply(
            &Snapshot::empty(),
            vec![up(listener(80, "old")), up(vhost(80, host("a.test"), "ra"))],
        );
        let s2 = apply(&s, vec![up(listener(80, "new"))]);
        let state = s2.listener(&lk(80)).unwrap();
        assert_eq!(&*state.listener.name, "new");
        assert_eq!(s2.stats().virtual_hosts, 1);
        assert_eq!(routed(&s2, 80, "a.test", "/api").as_deref(), Some("ra"));
    }

    #[test]
    fn rejections_are_local() {
        let cert = self_signed(&["a.test"]);
        let batch = DeltaBatch {
            deltas: vec![
                up(listener(443, "https")),
                up(vhost(8443, host("a.test"), "orphan")),
                up(sni(443, host("a.test"), &cert)),
                up(Resource::Certificate(cert.clone())),
                up(sni(8443, host("a.test"), &cert)),
                up(vhost(443, host("a.test"), "ok")),
                up(sni(443, host("b.test"), &cert)),
            ],
        };
        let (s, rejected) = Snapshot::empty().apply(&batch);
        let reasons: Vec<(ResourceKey, String)> = rejected;
        assert_eq!(
            reasons,
            [
                (
                    ResourceKey::VirtualHost(lk(8443), host("a.test")),
                    "unknown listener 0.0.0.0:8443".to_string()
                ),
                (
                    ResourceKey::Sni(lk(443), host("a.test")),
                    format!("unknown certificate {}", cert.hash())
                ),
                (
                    ResourceKey::Sni(lk(8443), host("a.test")),
                    "unknown listener 0.0.0.0:8443".to_string()
                ),
            ]
        );
        assert_eq!(routed(&s, 443, "a.test", "/api").as_deref(), Some("ok"));
        assert_eq!(s.stats().sni_entries, 1);
        assert!(
            s.listener(&lk(443))
                .unwrap()
                .certificate(Some("b.test"))
                .is_some()
        );
        assert!(
            s.listener(&lk(443))
                .unwrap()
                .certificate(Some("a.test"))
                .is_none()
        );
    }

    #[test]
    fn one_change_among_ten_thousand_shares_the_rest() {
        let mut deltas = vec![
            up(listener(80, "http")),
            up(Resource::Cluster(cluster("c", &[1]))),
        ];
        deltas.extend((0..10_000).map(|i| up(vhost(80, host(&format!("h{i}.example.com")), "v1"))));
        let s1 = apply(&Snapshot::empty(), deltas);
        assert_eq!(s1.stats().virtual_hosts, 10_000);

        let s2 = apply(&s1, vec![up(vhost(80, host("h42.example.com"), "v2"))]);
        let (t1, t2) = (
            &s1.listener(&lk(80)).unwrap().hosts,
            &s2.listener(&lk(80)).unwrap().hosts,
        );
        let total = t2.exact_map().shard_count();
        assert_eq!(t2.exact_map().shared_shards(t1.exact_map()), total - 1);
        assert_eq!(s2.clusters.shared_shards(&s1.clusters), total);
        assert_eq!(s2.certificates.shared_shards(&s1.certificates), total);
        assert_eq!(
            routed(&s2, 80, "h42.example.com", "/api").as_deref(),
            Some("v2")
        );
        assert_eq!(
            routed(&s1, 80, "h42.example.com", "/api").as_deref(),
            Some("v1")
        );
        assert_eq!(
            routed(&s2, 80, "h43.example.com", "/api").as_deref(),
            Some("v1")
        );

        // Re-sending unchanged content (a resync) copies no shard.
        let resync = apply(
            &s2,
            vec![
                up(listener(80, "http")),
                up(vhost(80, host("h7.example.com"), "v1")),
            ],
        );
        let t3 = &resync.listener(&lk(80)).unwrap().hosts;
        assert_eq!(t3.exact_map().shared_shards(t2.exact_map()), total);

        // Same-content cluster upsert keeps the state object (and its cursor).
        let s3 = apply(&s2, vec![up(Resource::Cluster(cluster("c", &[1])))]);
        let key = ClusterKey("c".into());
        assert!(Arc::ptr_eq(
            s3.cluster(&key).unwrap(),
            s2.cluster(&key).unwrap()
        ));
        let s4 = apply(&s3, vec![up(Resource::Cluster(cluster("c", &[1, 1])))]);
        assert!(!Arc::ptr_eq(
            s4.cluster(&key).unwrap(),
            s3.cluster(&key).unwrap()
        ));
    }

    fn l4(port: u16, h: HostMatch, name: &str) -> Resource {
        Resource::L4Route(Arc::new(L4Route::new(
            lk(port),
            h,
            RouteRef {
                kind: RouteKind::TlsRoute,
                namespace: "ns".into(),
                name: name.into(),
                rule: 0,
            },
            vec![weir_model::L4Backend {
                cluster: ClusterKey("c".into()),
                weight: 1,
            }],
        )))
    }

    /// On a socket with HTTPS and passthrough listeners, the more specific pattern of
    /// the two tables decides; passthrough wins ties; L4 routes apply and go like hosts.
    #[test]
    fn passthrough_against_terminated_names() {
        let cert = self_signed(&["a.test"]);
        let s = apply(
            &Snapshot::empty(),
            vec![
                up(listener(443, "mixed")),
                up(Resource::Certificate(cert.clone())),
                up(sni(443, HostMatch::ANY, &cert)),
                up(sni(443, host("web.pass.test"), &cert)),
                up(sni(443, host("*.deep.pass.test"), &cert)),
                up(l4(443, host("*.pass.test"), "wild")),
                up(l4(443, host("exact.test"), "exact")),
            ],
        );
        let l = s.listener(&lk(443)).unwrap();
        assert!(l.has_l4_routes());
        let via = |sni: Option<&str>| l.l4_route(sni).map(|r| r.route.name.to_string());
        assert_eq!(via(Some("exact.test")).as_deref(), Some("exact"));
        assert_eq!(via(Some("EXACT.test.")).as_deref(), Some("exact"));
        assert_eq!(via(Some("x.pass.test")).as_deref(), Some("wild"));
        // A terminated exact name beats the passthrough wildcard, a longer terminated
        // wildcard too; the terminating catch-all does not.
        assert_eq!(via(Some("web.pass.test")), None);
        assert_eq!(via(Some("a.deep.pass.test")), None);
        assert_eq!(via(Some("other.test")), None);
        assert_eq!(via(None), None);
        assert_eq!(s.stats().l4_routes, 2);

        let s = apply(
            &s,
            vec![
                up(l4(443, HostMatch::ANY, "any")),
                Delta::Remove(ResourceKey::L4Route(lk(443), host("exact.test"))),
            ],
        );
        let l = s.listener(&lk(443)).unwrap();
        let via = |sni: Option<&str>| l.l4_route(sni).map(|r| r.route.name.to_string());
        // Equally specific (both catch-alls): passthrough.
        assert_eq!(via(Some("other.test")).as_deref(), Some("any"));
        assert_eq!(via(None).as_deref(), Some("any"));
        assert_eq!(via(Some("exact.test")).as_deref(), Some("any"));
        assert_eq!(l.socket_route().map(|r| &*r.route.name), Some("any"));
        assert_eq!(s.stats().l4_routes, 2);
        assert!(s.to_json()["listeners"]["0.0.0.0:443"]["l4"]["*.pass.test"].is_array());

        // An L4 route needs its listener.
        let (_, rejected) = s.apply(&DeltaBatch {
            deltas: vec![up(l4(444, HostMatch::ANY, "orphan"))],
        });
        assert_eq!(rejected.len(), 1, "{rejected:?}");
    }

    /// A TLS Terminate listener's hostname has an SNI entry (its certificate) and an L4
    /// route in `Terminate` mode of the same pattern: the route wins the tie, and the
    /// certificate is found for the same name; `/config` lists the terminated hosts.
    #[test]
    fn terminated_l4_routes_beside_their_certificates() {
        let cert = self_signed(&["tls.test"]);
        let terminate = |h: HostMatch, name: &str| {
            let base = match l4(443, h, name) {
                Resource::L4Route(r) => r,
                _ => unreachable!(),
            };
            Resource::L4Route(Arc::new(L4Route::with_mode(
                base.listener,
                base.host.clone(),
                base.route.clone(),
                base.backends.clone(),
                weir_model::L4Mode::Terminate,
            )))
        };
        let s = apply(
            &Snapshot::empty(),
            vec![
                up(listener(443, "mixed")),
                up(Resource::Certificate(cert.clone())),
                up(sni(443, HostMatch::ANY, &cert)),
                up(sni(443, host("tls.test"), &cert)),
                up(sni(443, host("web.tls.test"), &cert)),
                up(terminate(host("tls.test"), "term")),
                up(terminate(host("*.tls.test"), "term-wild")),
                up(l4(443, host("abc.test"), "pass")),
            ],
        );
        let l = s.listener(&lk(443)).unwrap();
        let via = |sni: Option<&str>| l.l4_route(sni).map(|r| (r.route.name.to_string(), r.mode));
        use weir_model::L4Mode::{Passthrough, Terminate};
        assert_eq!(via(Some("tls.test")), Some(("term".into(), Terminate)));
        assert!(l.certificate(Some("tls.test")).is_some());
        assert_eq!(
            via(Some("x.tls.test")),
            Some(("term-wild".into(), Terminate))
        );
        // An HTTPS name more specific than the terminated wildcard stays HTTPS.
        assert_eq!(via(Some("web.tls.test")), None);
        assert_eq!(via(Some("abc.test")), Some(("pass".into(), Passthrough)));
        let json = s.to_json();
        let terminated = &json["listeners"]["0.0.0.0:443"]["l4_terminated"];
        assert_eq!(
            terminated.as_array().map(|a| a.len()),
            Some(2),
            "{terminated}"
        );
    }

    /// The server name and the host must fall to the same SNI entry (listener).
    #[test]
    fn misdirected_when_host_and_server_name_pick_different_entries() {
        let cert = self_signed(&["a.test"]);
        let s = apply(
            &Snapshot::empty(),
            vec![
                up(listener(443, "https")),
                up(Resource::Certificate(cert.clone())),
                up(sni(443, HostMatch::ANY, &cert)),
                up(sni(443, host("second.test"), &cert)),
                up(sni(443, host("*.wild.test"), &cert)),
            ],
        );
        let l = s.listener(&lk(443)).unwrap();
        assert!(!l.misdirected("a.test", "b.test"), "both the catch-all's");
        assert!(!l.misdirected("x.wild.test", "y.wild.test"));
        assert!(l.misdirected("a.test", "second.test"));
        assert!(l.misdirected("second.test", "a.test"));
        assert!(l.misdirected("x.wild.test", "second.test"));
    }

    #[test]
    fn certificate_selection() {
        let exact = self_signed(&["a.example.com"]);
        let wild = self_signed(&["*.example.com"]);
        let deflt = self_signed(&["default.test"]);
        let bad = broken();
        let s = apply(
            &Snapshot::empty(),
            vec![
                up(listener(443, "https")),
                up(Resource::Certificate(exact.clone())),
                up(Resource::Certificate(wild.clone())),
                up(Resource::Certificate(deflt.clone())),
                up(Resource::Certificate(bad.clone())),
                up(sni(443, host("a.example.com"), &exact)),
                up(sni(443, host("*.example.com"), &wild)),
                up(sni(443, HostMatch::ANY, &deflt)),
                up(sni(443, host("bad.example.com"), &bad)),
                // Same certificate content under two names.
                up(sni(443, host("b.example.com"), &exact)),
            ],
        );
        let l = s.listener(&lk(443)).unwrap();
        let leaf = |name: Option<&str>| l.certificate(name).map(|k| k.cert[0].clone());
        let der = |c: &Certificate| {
            let k = CertEntry::new(Arc::new(c.clone())).certified_key().unwrap();
            k.cert[0].clone()
        };
        assert_eq!(leaf(Some("a.example.com")), Some(der(&exact)));
        assert_eq!(leaf(Some("A.Example.COM")), Some(der(&exact)));
        assert_eq!(leaf(Some("x.y.example.com")), Some(der(&wild)));
        assert_eq!(leaf(Some("example.com")), Some(der(&deflt)));
        assert_eq!(leaf(None), Some(der(&deflt)));
        // The bad certificate fails its own name only.
        assert_eq!(leaf(Some("bad.example.com")), None);
        assert_eq!(leaf(Some("c.example.com")), Some(der(&wild)));

        // One parse per content: shared by entries and by later snapshots.
        let a = l.certificate(Some("a.example.com")).unwrap();
        let b = l.certificate(Some("b.example.com")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let s2 = apply(
            &s,
            vec![
                up(Resource::Certificate(exact.clone())),
                up(sni(443, host("c.example.com"), &exact)),
            ],
        );
        let c = s2
            .listener(&lk(443))
            .unwrap()
            .certificate(Some("c.example.com"))
            .unwrap();
        assert!(Arc::ptr_eq(&a, &c));
    }

    #[test]
    fn json_dump_has_no_key_material() {
        let cert = self_signed(&["a.test"]);
        let s = apply(
            &Snapshot::empty(),
            vec![
                up(listener(443, "https")),
                up(vhost(443, host("*.test"), "rw")),
                up(Resource::Cluster(cluster("c1", &[3]))),
                up(Resource::Certificate(cert.clone())),
                up(sni(443, host("a.test"), &cert)),
            ],
        );
        let v = s.to_json();
        let l = &v["listeners"]["0.0.0.0:443"];
        assert_eq!(l["name"], "https");
        assert_eq!(l["hosts"]["*.test"][0]["route"]["name"], "rw");
        assert_eq!(l["sni"]["a.test"], cert.hash().to_string());
        assert_eq!(v["clusters"]["c1"]["endpoints"][0]["weight"], 3);
        assert_eq!(v["certificates"][0], cert.hash().to_string());
        let text = v.to_string();
        assert!(
            !text.contains("PRIVATE KEY") && !text.contains("BEGIN"),
            "{text}"
        );
    }

    /// A policy on a Service reaches the states of its clusters whether it comes before
    /// or after them, follows edits, and its probers stop when it goes.
    #[tokio::test]
    async fn service_policies_reach_their_clusters_states() {
        use weir_model::{BackendKind, HealthCheck, HealthProbe};
        let target = PolicyTarget::Backend {
            kind: BackendKind::Service,
            namespace: "ns".into(),
            name: "app".into(),
        };
        let policy = |ms: u64| {
            let check = HealthCheck {
                probe: HealthProbe::Tcp,
                interval: std::time::Duration::from_millis(ms),
                timeout: std::time::Duration::from_millis(ms),
                jitter: std::time::Duration::ZERO,
                healthy_threshold: 1,
                unhealthy_threshold: 1,
            };
            Resource::Policy(Arc::new(
                Policy::new(target.clone(), Timeouts::default(), None, None)
                    .with_health_check(Some(Arc::new(check))),
            ))
        };
        let http = ClusterKey("service/ns/app:80".into());
        let h2c = ClusterKey("service/ns/app:80/h2c".into());
        let other = ClusterKey("service/ns/other:80".into());
        let c = |k: &ClusterKey| Resource::Cluster(cluster(&k.0, &[1, 1]));
        let probers = |s: &Snapshot, k: &ClusterKey| s.cluster(k).unwrap().probers().len();
        // Policy first, then clusters; then one more cluster of the Service.
        let mut s = apply(&Snapshot::empty(), vec![up(policy(60_000)), up(c(&http))]);
        assert_eq!(probers(&s, &http), 2);
        s = apply(&s, vec![up(c(&h2c)), up(c(&other))]);
        assert_eq!(probers(&s, &h2c), 2);
        assert_eq!(probers(&s, &other), 0, "another Service's cluster");
        // The same addresses and settings: one prober each for both clusters.
        assert_eq!(s.endpoints.probers().len(), 2);
        // An edit gives new probers (new settings); removing the policy stops them.
        s = apply(&s, vec![up(policy(30_000))]);
        assert!(s.cluster(&http).unwrap().policy().is_some());
        s = apply(&s, vec![Delta::Remove(ResourceKey::policy(target.clone()))]);
        assert_eq!(probers(&s, &http) + probers(&s, &h2c), 0);
        assert!(s.cluster(&http).unwrap().policy().is_none());
        assert_eq!(s.endpoints.probers().len(), 0, "no snapshot holds a prober");
        // A removed cluster leaves the Service's index.
        s = apply(&s, vec![Delta::Remove(ResourceKey::Cluster(h2c.clone()))]);
        s = apply(&s, vec![up(policy(60_000))]);
        assert_eq!(probers(&s, &http), 2);
        assert!(s.cluster(&h2c).is_none());
    }
}
