//! The controller side's state: the complete IR, indexed by the Gateway that owns each
//! listener, and one [`Session`] per connected data plane that tracks what that data
//! plane holds and computes the next update from the keys that changed since its last one.
//!
//! Work per change is O(keys changed × sessions of the owning Gateway); clusters,
//! certificates and route policies are looked at by every session but included only
//! where a virtual host or SNI entry of the session's Gateway references them; a
//! Gateway-wide policy goes to its Gateway's sessions (`ResourceKey::gateway`).

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use tokio::sync::{Notify, watch};
use weir_model::{Delta, DeltaBatch, ListenerKey, Resource, ResourceKey};

use crate::convert::{
    for_version, key_to_wire, resource_to_wire, sent_to_version, version_of, withheld,
};
use crate::proto as wire;

/// The IR every session reads, and who must hear about which change.
pub struct Hub {
    inner: Mutex<Inner>,
    synced: watch::Sender<bool>,
    /// Bumped whenever the refusals of some Gateway's data planes change.
    refusals: watch::Sender<u64>,
}

#[derive(Default)]
struct Inner {
    resources: HashMap<ResourceKey, Resource>,
    /// Listener → the Gateway label (`namespace/name`) of its owner.
    owner: HashMap<ListenerKey, Arc<str>>,
    /// Listener → its virtual-host and SNI keys.
    on_listener: HashMap<ListenerKey, HashSet<ResourceKey>>,
    /// Gateway → the keys of resources of the Gateway itself (Gateway-wide policies).
    on_gateway: HashMap<Arc<str>, HashSet<ResourceKey>>,
    sessions: HashMap<u64, Registered>,
    next_id: u64,
}

struct Registered {
    gateway: Arc<str>,
    node: Arc<str>,
    dirty: HashSet<ResourceKey>,
    notify: Arc<Notify>,
    /// What this data plane currently refuses, with its reasons.
    refused: HashMap<ResourceKey, String>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            inner: Mutex::new(Inner::default()),
            synced: watch::channel(false).0,
            refusals: watch::channel(0).0,
        }
    }
}

impl Hub {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies a batch of IR changes and wakes the sessions they concern.
    pub fn apply(&self, batch: &DeltaBatch) {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let mut touched: Vec<(Option<Arc<str>>, ResourceKey)> =
            Vec::with_capacity(batch.deltas.len());
        for d in &batch.deltas {
            let key = match d {
                Delta::Upsert(r) => r.key(),
                Delta::Remove(k) => k.clone(),
            };
            // The owner before the change (a listener may change hands).
            let before = owner_of(inner, &key);
            match d {
                Delta::Upsert(r) => {
                    // Ownership from the model's relations: a listener names its
                    // Gateway; every other resource under a listener hangs under it.
                    match (r, key.listener()) {
                        (Resource::Listener(l), _) => {
                            inner.owner.insert(l.key, l.gateway.clone());
                            // Turning the PROXY protocol or client certificate
                            // validation on or off decides whether older data planes get
                            // the listener's resources at all (`convert::withheld`): look
                            // at them again.
                            let guards = |r: &Resource| match r {
                                Resource::Listener(l) => (
                                    l.settings.proxy_protocol.is_some(),
                                    l.settings.client_validation.is_some(),
                                    !l.sections.is_empty(),
                                ),
                                _ => (false, false, false),
                            };
                            let before = inner.resources.get(&key).map(guards);
                            if before.is_some_and(|b| b != guards(r))
                                && let Some(keys) = inner.on_listener.get(&l.key)
                            {
                                let owner = Some(l.gateway.clone());
                                touched.extend(keys.iter().map(|k| (owner.clone(), k.clone())));
                            }
                        }
                        (_, Some(l)) => {
                            inner.on_listener.entry(l).or_default().insert(key.clone());
                        }
                        (_, None) => {
                            if let Some(g) = key.gateway() {
                                let keys = inner.on_gateway.entry(g.clone()).or_default();
                                keys.insert(key.clone());
                            }
                        }
                    }
                    inner.resources.insert(key.clone(), r.clone());
                }
                Delta::Remove(k) => {
                    inner.resources.remove(k);
                    match (k, k.listener()) {
                        (ResourceKey::Listener(l), _) => {
                            inner.owner.remove(l);
                        }
                        (_, Some(l)) => {
                            if let Some(set) = inner.on_listener.get_mut(&l) {
                                set.remove(k);
                                if set.is_empty() {
                                    inner.on_listener.remove(&l);
                                }
                            }
                        }
                        (_, None) => {
                            if let Some(g) = k.gateway()
                                && let Some(set) = inner.on_gateway.get_mut(g)
                            {
                                set.remove(k);
                                if set.is_empty() {
                                    inner.on_gateway.remove(g);
                                }
                            }
                        }
                    }
                }
            }
            let after = owner_of(inner, &key);
            if before.is_some() && before != after {
                touched.push((before, key.clone()));
            }
            touched.push((after, key));
        }
        for (owner, key) in touched {
            let shared = key.listener().is_none() && key.gateway().is_none();
            for s in inner.sessions.values_mut() {
                if shared || owner.as_ref() == Some(&s.gateway) {
                    s.dirty.insert(key.clone());
                }
            }
        }
        for s in inner.sessions.values() {
            if !s.dirty.is_empty() {
                s.notify.notify_one();
            }
        }
    }

    /// Marks the hub as holding the controller's complete initial state; sessions send
    /// nothing before.
    pub fn set_synced(&self) {
        self.synced.send_replace(true);
    }

    /// Waits until [`Hub::set_synced`].
    pub async fn synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Registers a data plane for `gateway` (`namespace/name`) that already holds `held`
    /// (key → version). Its first update brings it to the complete current state.
    pub fn subscribe(
        self: &Arc<Self>,
        gateway: &str,
        node: &str,
        held: HashMap<ResourceKey, u64>,
    ) -> Session {
        self.subscribe_as(gateway, node, held, crate::PROTOCOL_VERSION)
    }

    /// [`Hub::subscribe`] for a data plane that announced push protocol
    /// `protocol_version`: what it would not enforce is sent in the form its version
    /// knows ([`crate::convert::for_version`]).
    pub fn subscribe_as(
        self: &Arc<Self>,
        gateway: &str,
        node: &str,
        held: HashMap<ResourceKey, u64>,
        protocol_version: u32,
    ) -> Session {
        let mut inner = self.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        let gateway: Arc<str> = gateway.into();
        let mut dirty: HashSet<ResourceKey> = held.keys().cloned().collect();
        let listeners: Vec<ListenerKey> = inner
            .owner
            .iter()
            .filter(|(_, g)| **g == gateway)
            .map(|(l, _)| *l)
            .collect();
        for l in listeners {
            dirty.insert(ResourceKey::Listener(l));
            if let Some(keys) = inner.on_listener.get(&l) {
                dirty.extend(keys.iter().cloned());
            }
        }
        // Resources of the Gateway itself (Gateway-wide policies).
        if let Some(keys) = inner.on_gateway.get(&gateway) {
            dirty.extend(keys.iter().cloned());
        }
        let notify = Arc::new(Notify::new());
        notify.notify_one();
        inner.sessions.insert(
            id,
            Registered {
                gateway: gateway.clone(),
                node: node.into(),
                dirty,
                notify: notify.clone(),
                refused: HashMap::new(),
            },
        );
        Session {
            id,
            hub: self.clone(),
            gateway,
            notify,
            sent: held,
            refs: HashMap::new(),
            view_refs: HashMap::new(),
            rejected: HashMap::new(),
            in_flight: None,
            next_nonce: 1,
            updates: 0,
            protocol_version,
        }
    }

    /// What the data planes of `gateway` (`namespace/name`) currently refuse, one line
    /// per data plane and resource, sorted.
    pub fn refusals(&self, gateway: &str) -> Vec<String> {
        let inner = self.lock();
        let mut out: Vec<String> = inner
            .sessions
            .values()
            .filter(|s| &*s.gateway == gateway)
            .flat_map(|s| {
                s.refused
                    .iter()
                    .map(move |(k, e)| format!("data plane {} refused {k:?}: {e}", s.node))
            })
            .collect();
        out.sort();
        out
    }

    /// Changes whenever some data plane's refusals change.
    pub fn refusal_changes(&self) -> watch::Receiver<u64> {
        self.refusals.subscribe()
    }

    /// Gateways (`namespace/name`) of the connected data planes.
    pub fn gateways(&self) -> Vec<Arc<str>> {
        let mut v: Vec<Arc<str>> = self
            .lock()
            .sessions
            .values()
            .map(|s| s.gateway.clone())
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// How many data planes are connected.
    pub fn sessions(&self) -> usize {
        self.lock().sessions.len()
    }
}

fn owner_of(inner: &Inner, key: &ResourceKey) -> Option<Arc<str>> {
    match key.listener() {
        Some(l) => inner.owner.get(&l).cloned(),
        None => key.gateway().cloned(),
    }
}

/// What a resource needs a data plane to hold as well, beyond its Gateway's listeners
/// (which are sent by ownership): the model's relations.
fn refs_of(r: &Resource) -> Vec<ResourceKey> {
    r.references()
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| !matches!(k, ResourceKey::Listener(_)))
        .collect()
}

/// One connected data plane: what it holds, and what it was last sent.
pub struct Session {
    id: u64,
    hub: Arc<Hub>,
    gateway: Arc<str>,
    notify: Arc<Notify>,
    /// Key → version the data plane holds (as acknowledged).
    sent: HashMap<ResourceKey, u64>,
    /// Cluster/certificate → how many entries in the view reference it.
    refs: HashMap<ResourceKey, u32>,
    /// Virtual host / SNI in the view → what it references.
    view_refs: HashMap<ResourceKey, Vec<ResourceKey>>,
    /// Versions the data plane refused (not sent again).
    rejected: HashMap<ResourceKey, u64>,
    in_flight: Option<InFlight>,
    next_nonce: u64,
    updates: u64,
    /// The data plane's push protocol version.
    protocol_version: u32,
}

struct InFlight {
    nonce: u64,
    changes: Vec<(ResourceKey, Option<u64>)>,
}

/// A refusal reported by a data plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The resource.
    pub key: ResourceKey,
    /// The data plane's reason.
    pub error: String,
}

impl Drop for Session {
    fn drop(&mut self) {
        let had = self
            .hub
            .lock()
            .sessions
            .remove(&self.id)
            .is_some_and(|r| !r.refused.is_empty());
        if had {
            self.hub.refusals.send_modify(|n| *n += 1);
        }
    }
}

impl Session {
    /// The Gateway this session serves.
    pub fn gateway(&self) -> &str {
        &self.gateway
    }

    /// Woken when something this session may need changed.
    pub fn notify(&self) -> Arc<Notify> {
        self.notify.clone()
    }

    /// Whether an update awaits its acknowledgement (then nothing else is sent).
    pub fn waiting_for_ack(&self) -> bool {
        self.in_flight.is_some()
    }

    /// The next update, or `None` when the data plane is up to date or an update is in
    /// flight. The first update of a session is sent even when empty: it tells the data
    /// plane it holds the complete state.
    pub fn next_update(&mut self) -> Option<wire::Update> {
        if self.in_flight.is_some() {
            return None;
        }
        let hub = self.hub.clone();
        let mut inner = hub.lock();
        let dirty = match inner.sessions.get_mut(&self.id) {
            Some(r) => std::mem::take(&mut r.dirty),
            None => return None,
        };
        let mut work: VecDeque<ResourceKey> = dirty.into_iter().collect();
        let mut seen: HashSet<ResourceKey> = HashSet::with_capacity(work.len());
        // A key can be looked at twice (a reference count changed after it was seen): the
        // last look decides.
        let mut changes: HashMap<ResourceKey, Option<Cow<'_, Resource>>> = HashMap::new();
        while let Some(k) = work.pop_front() {
            if !seen.insert(k.clone()) {
                continue;
            }
            let mine = |l: &ListenerKey| inner.owner.get(l) == Some(&self.gateway);
            // A resource under a listener is this data plane's when its Gateway owns the
            // listener; one of a Gateway (a Gateway-wide policy) when it is its Gateway;
            // a shared one (cluster, certificate, route policy) while something it holds
            // references it.
            let desired = inner
                .resources
                .get(&k)
                .filter(|_| match (k.listener(), k.gateway()) {
                    (Some(l), _) => mine(&l),
                    (None, Some(g)) => *g == self.gateway,
                    (None, None) => self.refs.get(&k).is_some_and(|n| *n > 0),
                })
                .filter(|_| sent_to_version(&k, self.protocol_version))
                .filter(|_| {
                    // A listener this release cannot serve, and everything under it.
                    let listener = k
                        .listener()
                        .and_then(|l| inner.resources.get(&ResourceKey::Listener(l)));
                    let held = listener.is_some_and(|l| withheld(l, self.protocol_version));
                    if held && matches!(k, ResourceKey::Listener(_)) {
                        tracing::warn!(
                            gateway = %self.gateway,
                            listener = ?k,
                            version = self.protocol_version,
                            "not sending a listener this data plane's push protocol version cannot serve (PROXY protocol: < 3, client certificates: < 4, listener policies: < 6); upgrade it to serve the listener"
                        );
                    }
                    !held
                })
                .map(|r| for_version(r, self.protocol_version));
            if k.listener().is_some() && !matches!(k, ResourceKey::Listener(_)) {
                let old = self.view_refs.remove(&k).unwrap_or_default();
                let new = desired.as_deref().map(refs_of).unwrap_or_default();
                for r in &new {
                    let n = self.refs.entry(r.clone()).or_insert(0);
                    *n += 1;
                    if *n == 1 {
                        seen.remove(r);
                        work.push_back(r.clone());
                    }
                }
                for r in &old {
                    if let Some(n) = self.refs.get_mut(r) {
                        *n -= 1;
                        if *n == 0 {
                            self.refs.remove(r);
                            seen.remove(r);
                            work.push_back(r.clone());
                        }
                    }
                }
                if desired.is_some() {
                    self.view_refs.insert(k.clone(), new);
                }
            }
            let want = desired.as_deref().map(version_of);
            let held = self.sent.get(&k).copied();
            let unchanged = want == held
                || (want.is_some() && self.rejected.get(&k).copied() == want)
                || (want.is_none() && held.is_none());
            if unchanged {
                changes.remove(&k);
            } else {
                changes.insert(k, desired);
            }
        }
        let mut changes: Vec<(ResourceKey, Option<Cow<'_, Resource>>)> =
            changes.into_iter().collect();
        let first = self.updates == 0;
        if changes.is_empty() && !first {
            return None;
        }
        changes.sort_by(|(a, ra), (b, rb)| {
            (a.apply_rank(ra.is_some()), a).cmp(&(b.apply_rank(rb.is_some()), b))
        });
        let nonce = self.next_nonce;
        self.next_nonce += 1;
        self.updates += 1;
        let mut update = wire::Update {
            nonce,
            complete: true,
            upserts: Vec::new(),
            removes: Vec::new(),
            protocol_version: crate::PROTOCOL_VERSION,
        };
        let mut recorded = Vec::with_capacity(changes.len());
        for (k, r) in changes {
            match r {
                Some(r) => {
                    update.upserts.push(resource_to_wire(&r));
                    recorded.push((k, Some(version_of(&r))));
                }
                None => {
                    update.removes.push(key_to_wire(&k));
                    recorded.push((k, None));
                }
            }
        }
        self.in_flight = Some(InFlight {
            nonce,
            changes: recorded,
        });
        Some(update)
    }

    /// Records the data plane's answer to update `nonce`: refused resources keep what the
    /// data plane held before (and the refused version is not offered again); the rest is
    /// held as sent. Returns the refusals.
    pub fn ack(&mut self, nonce: u64, refused: Vec<Refused>) -> Vec<Refused> {
        let Some(f) = self.in_flight.take_if(|f| f.nonce == nonce) else {
            return Vec::new();
        };
        for (k, v) in f.changes {
            if refused.iter().any(|r| r.key == k) {
                if let Some(v) = v {
                    self.rejected.insert(k, v);
                }
                continue;
            }
            self.rejected.remove(&k);
            match v {
                Some(v) => self.sent.insert(k, v),
                None => self.sent.remove(&k),
            };
        }
        // What the data plane refuses now: add the new refusals, drop those it accepted
        // (or that were removed) in this update.
        let changed = {
            let mut inner = self.hub.lock();
            match inner.sessions.get_mut(&self.id) {
                Some(reg) => {
                    let before = reg.refused.len();
                    let mut changed = false;
                    reg.refused.retain(|k, _| {
                        let keep = self.rejected.contains_key(k);
                        changed |= !keep;
                        keep
                    });
                    for r in &refused {
                        changed |= reg.refused.insert(r.key.clone(), r.error.clone()).as_ref()
                            != Some(&r.error);
                    }
                    changed || before != reg.refused.len()
                }
                None => false,
            }
        };
        if changed {
            self.hub.refusals.send_modify(|n| *n += 1);
        }
        refused
    }
}
