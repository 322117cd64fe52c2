//! Gateway recomputation: socket ownership, Listener resources and SNI entries.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::sync::Arc;

use weir_api::{Kind, ObjectKey};
use weir_model::{Certificate, HostMatch, Listener, ListenerKey, Protocol, ResourceKey};

use super::{Dirty, GatewayOutputs, HostKey, SniOwner, Translator};
use crate::gateway;
use crate::incremental::OrdIndex;
use crate::order::Age;
use crate::store::Dep;

impl Translator {
    pub(super) fn recompute_gateways(&mut self, d: &mut Dirty) {
        if d.gateways.is_empty() {
            return;
        }
        let mut settle: HashSet<ObjectKey> = HashSet::new();
        let mut touched: HashSet<ListenerKey> = HashSet::new();
        // Gateways first: an XListenerSet is compiled against its parent's new state, and
        // every set of a recompiled Gateway is queued behind it.
        let mut todo: Vec<ObjectKey> = std::mem::take(&mut d.gateways).into_iter().collect();
        todo.sort_by_key(|k| k.kind != Kind::Gateway);
        let mut queued: HashSet<ObjectKey> = todo.iter().cloned().collect();
        let mut next = 0;
        while next < todo.len() {
            let gk = todo[next].clone();
            next += 1;
            let mut deps = Vec::new();
            let state = if gk.kind == Kind::Gateway {
                self.compile_gateway(&gk, &mut deps)
            } else {
                self.compile_listener_set(&gk, &mut deps)
            };
            self.set_deps(&gk, deps);
            if gk.kind == Kind::Gateway {
                for k in self.deps.get(&Dep::Object(gk.clone())) {
                    if k.kind == Kind::XListenerSet && queued.insert(k.clone()) {
                        todo.push(k.clone());
                    }
                }
            }
            if gk.kind == Kind::XListenerSet {
                let parent = state
                    .as_ref()
                    .filter(|s| s.accepted.is_ok())
                    .map(|s| s.group.clone());
                self.set_attached_parent(&gk, parent, d);
                let hosts = state
                    .as_ref()
                    .map(|s| (s.age.clone(), gateway::host_claims(s)));
                self.set_host_claims_of(&gk, hosts, &mut settle);
            }
            let new_claims = state
                .as_ref()
                .map(|s| (s.group_age.clone(), s.group.clone(), gateway::claims(s)));
            let old_claims = self.gw_claims.remove(&gk);
            if old_claims != new_claims {
                // A group claims a socket while at least one of its members does.
                if let Some((age, group, keys)) = &old_claims {
                    let entry = (age.clone(), group.clone());
                    for k in keys {
                        if self.claim_counts.dec(&(*k, entry.clone())).is_some() {
                            self.port_claims.remove(k, &entry);
                            touched.insert(*k);
                        }
                    }
                    self.group_members.remove(group, &gk);
                }
                if let Some((age, group, keys)) = &new_claims {
                    let entry = (age.clone(), group.clone());
                    for k in keys {
                        if self.claim_counts.inc((*k, entry.clone()), ()) {
                            self.port_claims.insert(*k, entry.clone(), ());
                            touched.insert(*k);
                        }
                    }
                    self.group_members.insert(group.clone(), gk.clone());
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
        // A group newly claiming a socket, or leaving it, may move its ownership: every
        // member of every group on it is settled again.
        for k in &touched {
            for (_, group) in self.port_claims.keys(k) {
                settle.extend(self.group_members.get(group).cloned());
            }
        }
        // Undo the old outputs of every settled Gateway first: socket ownership may move
        // from one of them to another.
        for gk in &settle {
            if let Some(out) = self.gw_outputs.remove(gk) {
                for lk in out.listeners {
                    if out.shared {
                        self.set_sockets.dec(&lk);
                    } else {
                        self.listeners.remove(&lk);
                    }
                    d.resources.insert(ResourceKey::Listener(lk));
                }
                for (hk, owner) in out.sni {
                    self.remove_sni(&hk, &owner, d);
                }
                for hk in out.isolated {
                    self.isolated_hosts.dec(&hk);
                    d.resources.insert(ResourceKey::VirtualHost(hk.0, hk.1));
                }
            }
        }
        for gk in settle {
            self.settle_gateway(&gk, d);
        }
    }

    fn compile_gateway(
        &self,
        gk: &ObjectKey,
        deps: &mut Vec<Dep>,
    ) -> Option<gateway::GatewayState> {
        let gw = self.store.gateway(gk)?;
        deps.push(Dep::Object(ObjectKey::new(
            Kind::GatewayClass,
            "",
            &gw.spec.gateway_class_name,
        )));
        gateway::is_ours(
            &self.store,
            &self.opts.controller_name,
            self.opts.standalone,
            gw,
        )
        .then(|| {
            gateway::compile(
                &self.store,
                gk,
                self.store.age(gk),
                gw,
                self.opts.gateway_address_pool.as_ref(),
                deps,
            )
        })
    }

    /// An XListenerSet is ours when its parent Gateway is (or, in standalone mode, when
    /// the parent does not exist: its status then says so).
    fn compile_listener_set(
        &self,
        sk: &ObjectKey,
        deps: &mut Vec<Dep>,
    ) -> Option<gateway::GatewayState> {
        let set = self.store.listener_set(sk)?;
        let pk = set.parent();
        match self.store.gateway(&pk) {
            Some(gw)
                if !gateway::is_ours(
                    &self.store,
                    &self.opts.controller_name,
                    self.opts.standalone,
                    gw,
                ) =>
            {
                deps.push(Dep::Object(pk));
                return None;
            }
            None if !self.opts.standalone => {
                deps.push(Dep::Object(pk));
                return None;
            }
            _ => {}
        }
        let parent = self.gateways.get(&pk);
        Some(gateway::compile_set(
            &self.store,
            sk,
            self.store.age(sk),
            set,
            parent,
            deps,
        ))
    }

    /// Records which (socket, hostname) pairs set `sk` asks for; where that changes which
    /// set is the oldest claimant, the old one and every claimant are settled again.
    fn set_host_claims_of(
        &mut self,
        sk: &ObjectKey,
        new: Option<(Age, Vec<HostKey>)>,
        settle: &mut HashSet<ObjectKey>,
    ) {
        let old = self.set_host_claims.remove(sk);
        if old != new {
            let changes = old
                .iter()
                .flat_map(|(age, hosts)| hosts.iter().map(move |hk| (age, hk, false)))
                .chain(
                    new.iter()
                        .flat_map(|(age, hosts)| hosts.iter().map(move |hk| (age, hk, true))),
                );
            let oldest = |claims: &OrdIndex<HostKey, (Age, ObjectKey)>, hk: &HostKey| {
                claims.first(hk).map(|((_, k), _)| k.clone())
            };
            for (age, hk, insert) in changes {
                let before = oldest(&self.host_claims, hk);
                let entry = (age.clone(), sk.clone());
                if insert {
                    self.host_claims.insert(hk.clone(), entry, ());
                } else {
                    self.host_claims.remove(hk, &entry);
                }
                if before != oldest(&self.host_claims, hk) {
                    // Every claimant names the one that serves the hostname.
                    settle.extend(before);
                    settle.extend(self.host_claims.keys(hk).map(|(_, k)| k.clone()));
                }
            }
        }
        if let Some(n) = new.filter(|(_, v)| !v.is_empty()) {
            self.set_host_claims.insert(sk.clone(), n);
        }
    }

    /// Keeps the count of accepted XListenerSets per Gateway (its `AttachedListenerSets`
    /// condition changes only when the count leaves or reaches zero).
    fn set_attached_parent(&mut self, sk: &ObjectKey, parent: Option<ObjectKey>, d: &mut Dirty) {
        let old = self.set_parents.remove(sk);
        if old != parent {
            if let Some(p) = &old
                && self.sets_attached.dec(p).is_some()
            {
                d.gateway_status.insert(p.clone());
            }
            if let Some(p) = &parent
                && self.sets_attached.inc(p.clone(), ())
            {
                d.gateway_status.insert(p.clone());
            }
        }
        if let Some(p) = parent {
            self.set_parents.insert(sk.clone(), p);
        }
    }

    pub(super) fn settle_gateway(&mut self, gk: &ObjectKey, d: &mut Dirty) {
        let Some(mut state) = self.gateways.remove(gk) else {
            if self.gw_views.remove(gk).is_some() {
                self.mark_dependents(&Dep::Object(gk.clone()), d);
            }
            return;
        };
        let mut owners: HashMap<ListenerKey, (ObjectKey, Option<Protocol>)> = HashMap::new();
        for l in &state.listeners {
            if let Some(k) = l.key
                && let Some(((_, o), _)) = self.port_claims.first(&k)
            {
                let proto = if *o == state.key {
                    gateway::protocol_on(&state, &k)
                } else {
                    self.gateways
                        .get(o)
                        .and_then(|s| gateway::protocol_on(s, &k))
                };
                owners.insert(k, (o.clone(), proto));
            }
        }
        let is_set = gk.kind == Kind::XListenerSet;
        gateway::settle(
            &mut state,
            |k| owners.get(k).cloned(),
            |k, h| {
                if !is_set {
                    return None;
                }
                self.host_claims
                    .first(&(*k, h.clone()))
                    .map(|((_, o), _)| o.clone())
            },
        );
        let shared = gk.kind == Kind::XListenerSet;
        let mut out = GatewayOutputs {
            shared,
            ..GatewayOutputs::default()
        };
        let owner: SniOwner = (state.age.clone(), gk.clone());
        for k in gateway::claims(&state) {
            let on_key: Vec<_> = state
                .listeners
                .iter()
                .filter(|l| l.programmed && l.key == Some(k))
                .collect();
            let Some(first) = on_key.first() else {
                continue;
            };
            let Some(protocol) = first.protocol else {
                continue;
            };
            if shared {
                self.set_sockets.inc(k, (protocol, state.label.clone()));
            } else {
                let names: Vec<&str> = on_key.iter().map(|l| &*l.name).collect();
                self.listeners.insert(
                    k,
                    Arc::new(Listener::new(
                        k,
                        protocol,
                        state.label.clone(),
                        names.join(",").into(),
                    )),
                );
            }
            d.resources.insert(ResourceKey::Listener(k));
            out.listeners.push(k);
            // Listener isolation: a listener whose hostname a less specific listener on
            // the same socket also matches gets its virtual host even without routes, so
            // its hosts answer 404 rather than reach the other listener's routes.
            for l in &on_key {
                let shadows = on_key
                    .iter()
                    .any(|o| o.hostname != l.hostname && o.hostname.covers(&l.hostname));
                let hk = (k, l.hostname.clone());
                if shadows && !out.isolated.contains(&hk) {
                    self.isolated_hosts.inc(hk.clone(), ());
                    d.resources
                        .insert(ResourceKey::VirtualHost(k, l.hostname.clone()));
                    out.isolated.push(hk);
                }
            }
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
                // The certificate for clients that send no SNI comes from the Gateway's
                // own listeners only: one entry per set would make that entry O(sets).
                if !shared
                    && !seen.contains(&HostMatch::Any)
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

    pub(super) fn add_sni(
        &mut self,
        hk: HostKey,
        owner: SniOwner,
        cert: Arc<Certificate>,
        d: &mut Dirty,
    ) {
        d.resources.insert(ResourceKey::Sni(hk.0, hk.1.clone()));
        self.sni.insert(hk, owner, cert);
    }

    pub(super) fn remove_sni(&mut self, hk: &HostKey, owner: &SniOwner, d: &mut Dirty) {
        self.sni.remove(hk, owner);
        d.resources.insert(ResourceKey::Sni(hk.0, hk.1.clone()));
    }
}
