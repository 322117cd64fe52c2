//! Gateway recomputation: socket ownership, Listener resources and SNI entries.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::sync::Arc;

use weir_api::{Kind, ObjectKey};
use weir_model::{Certificate, HostMatch, Listener, ListenerKey, Protocol, ResourceKey};

use super::{Dirty, GatewayOutputs, HostKey, SniOwner, Translator};
use crate::gateway;
use crate::store::Dep;

impl Translator {
    pub(super) fn recompute_gateways(&mut self, d: &mut Dirty) {
        if d.gateways.is_empty() {
            return;
        }
        let mut settle: HashSet<ObjectKey> = HashSet::new();
        let mut touched: HashSet<ListenerKey> = HashSet::new();
        for gk in std::mem::take(&mut d.gateways) {
            let mut deps = Vec::new();
            let state = match self.store.gateway(&gk) {
                Some(gw) => {
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
                            &gk,
                            self.store.age(&gk),
                            gw,
                            self.opts.gateway_address_pool.as_ref(),
                            &mut deps,
                        )
                    })
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
                        self.port_claims
                            .entry(*k)
                            .or_default()
                            .insert((age.clone(), gk.clone()));
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
                for hk in out.isolated {
                    if let Some(n) = self.isolated_hosts.get_mut(&hk) {
                        *n -= 1;
                        if *n == 0 {
                            self.isolated_hosts.remove(&hk);
                        }
                    }
                    d.resources.insert(ResourceKey::VirtualHost(hk.0, hk.1));
                }
            }
        }
        for gk in settle {
            self.settle_gateway(&gk, d);
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
                && let Some((_, o)) = self.port_claims.get(&k).and_then(|s| s.first())
            {
                let proto = if o == gk {
                    gateway::protocol_on(&state, &k)
                } else {
                    self.gateways
                        .get(o)
                        .and_then(|s| gateway::protocol_on(s, &k))
                };
                owners.insert(k, (o.clone(), proto));
            }
        }
        gateway::settle(&mut state, |k| owners.get(k).cloned());
        let mut out = GatewayOutputs::default();
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
            let names: Vec<&str> = on_key.iter().map(|l| &*l.name).collect();
            let label: Arc<str> = format!("{}/{}", gk.namespace, gk.name).into();
            self.listeners.insert(
                k,
                Arc::new(Listener::new(k, protocol, label, names.join(",").into())),
            );
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
                    *self.isolated_hosts.entry(hk.clone()).or_insert(0) += 1;
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

    pub(super) fn add_sni(
        &mut self,
        hk: HostKey,
        owner: SniOwner,
        cert: Arc<Certificate>,
        d: &mut Dirty,
    ) {
        d.resources.insert(ResourceKey::Sni(hk.0, hk.1.clone()));
        self.sni.entry(hk).or_default().insert(owner, cert);
    }

    pub(super) fn remove_sni(&mut self, hk: &HostKey, owner: &SniOwner, d: &mut Dirty) {
        if let Some(m) = self.sni.get_mut(hk) {
            m.remove(owner);
            if m.is_empty() {
                self.sni.remove(hk);
            }
        }
        d.resources.insert(ResourceKey::Sni(hk.0, hk.1.clone()));
    }
}
