//! Gateway recomputation: socket ownership, Listener resources and SNI entries.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use weir_api::{Kind, ObjectKey};
use weir_model::{
    HostMatch, Listener, ListenerKey, ListenerSection, ListenerSettings, PolicyTarget, Protocol,
};

use super::{Dirty, Translator};
use crate::compile::listener::{self, ListenerState};
use crate::compile::{gateway, gateway_status};
use crate::incremental::{GatewayOutputs, SniOwner};
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
            self.deps.set(&gk, deps);
            if gk.kind == Kind::Gateway {
                // The backend client certificate is the Gateway's policy (by key): its
                // routes and clusters are untouched by a change to it.
                let cert = state
                    .as_ref()
                    .and_then(|s| s.backend_client.as_ref())
                    .and_then(|c| c.as_ref().ok().cloned());
                let target = PolicyTarget::Gateway(format!("{}/{}", gk.namespace, gk.name).into());
                self.policies
                    .set_client_certificate(target, cert, &mut d.resources);
                for k in self.deps.dependents(&Dep::Object(gk.clone())) {
                    if k.kind.is_listener_set() && queued.insert(k.clone()) {
                        todo.push(k.clone());
                    }
                }
            }
            if gk.kind.is_listener_set() {
                // Provisional: settling (conflicts with other sets) decides whether the
                // set has a valid listener and so is attached (`settle_gateway`).
                let parent = state
                    .as_ref()
                    .filter(|s| s.accepted.is_ok())
                    .map(|s| s.group.clone());
                self.gateways.set_parent(&gk, parent, &mut d.gateway_status);
                let hosts = state
                    .as_ref()
                    .map(|s| (s.age.clone(), gateway::host_claims(s)));
                self.sockets.claim_hosts(&gk, hosts, &mut settle);
            }
            let claim = state
                .as_ref()
                .map(|s| (s.group_age.clone(), s.group.clone(), gateway::claims(s)));
            self.sockets.claim(&gk, claim, &mut touched);
            self.gateways.set_state(&gk, state);
            d.gateway_status.insert(gk.clone());
            settle.insert(gk);
        }
        // A group newly claiming a socket, or leaving it, may move its ownership: every
        // member of every group on it is settled again.
        for k in &touched {
            settle.extend(self.sockets.members_on(k).cloned());
        }
        // Undo the old outputs of every settled Gateway first: socket ownership may move
        // from one of them to another.
        for gk in &settle {
            if let Some(out) = self.gateways.take_outputs(gk) {
                for lk in out.listeners {
                    if out.shared {
                        self.sockets.unshare(lk, &mut d.resources);
                    } else {
                        self.sockets.remove_listener(lk, &mut d.resources);
                    }
                }
                for (hk, owner) in out.sni {
                    self.hosts.remove_sni(hk, &owner, &mut d.resources);
                }
                for hk in out.isolated {
                    self.hosts.unisolate(hk, &mut d.resources);
                }
                for (k, order) in out.sections {
                    self.sockets.remove_section(k, &order, &mut d.resources);
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
        let (meta, set) = self.store.listener_set(sk)?;
        let pk = set.parent(&meta.namespace);
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
        let parent = self.gateways.state(&pk);
        Some(gateway::compile_set(
            &self.store,
            sk,
            self.store.age(sk),
            (meta, set),
            parent,
            deps,
        ))
    }

    pub(super) fn settle_gateway(&mut self, gk: &ObjectKey, d: &mut Dirty) {
        let Some(mut state) = self.gateways.take_state(gk) else {
            if self.gateways.set_views(gk, None) {
                self.mark_dependents(&Dep::Object(gk.clone()), d);
            }
            return;
        };
        let mut owners: HashMap<ListenerKey, (ObjectKey, Option<Protocol>)> = HashMap::new();
        for l in &state.listeners {
            if let Some(k) = l.key
                && let Some(o) = self.sockets.owner(&k)
            {
                let proto = if *o == state.key {
                    gateway::protocol_on(&state, &k)
                } else {
                    self.gateways
                        .state(o)
                        .and_then(|s| gateway::protocol_on(s, &k))
                };
                owners.insert(k, (o.clone(), proto));
            }
        }
        let is_set = gk.kind.is_listener_set();
        gateway::settle(
            &mut state,
            |k| owners.get(k).cloned(),
            |k, h| {
                if !is_set {
                    return None;
                }
                self.sockets.host_owner(&(*k, h.clone())).cloned()
            },
        );
        let shared = gk.kind.is_listener_set();
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
            let Some(protocol) =
                listener::socket_protocol(on_key.iter().filter_map(|l| l.protocol))
            else {
                continue;
            };
            // An HTTPS socket asks for client certificates when its port's frontend TLS
            // settings say so (TLS listeners are not concerned: Gateway API applies them
            // to HTTPS only).
            let settings = match protocol {
                Protocol::Https => match state.frontend.socket_validation(k.addr().port()) {
                    Some(v) => ListenerSettings {
                        client_validation: Some(v),
                        ..(*state.settings).clone()
                    },
                    None => (*state.settings).clone(),
                },
                _ => (*state.settings).clone(),
            };
            if shared {
                self.sockets
                    .share(k, protocol, state.label.clone(), settings, &mut d.resources);
            } else {
                let names: Vec<&str> = on_key.iter().map(|l| &*l.name).collect();
                self.sockets.add_listener(
                    Listener::with_settings(
                        k,
                        protocol,
                        state.label.clone(),
                        names.join(",").into(),
                        settings,
                    ),
                    &mut d.resources,
                );
            }
            out.listeners.push(k);
            // Listener isolation: a listener whose hostname a less specific listener on
            // the same socket also matches gets its virtual host even without routes, so
            // its hosts answer 404 rather than reach the other listener's routes.
            // Only among HTTP listeners: a passthrough or TCP listener has no virtual hosts.
            let http =
                |l: &&&ListenerState| matches!(l.protocol, Some(Protocol::Http | Protocol::Https));
            // Sections: which Gateway listener serves a host, for listener policies.
            let set: Option<std::sync::Arc<str>> =
                shared.then(|| format!("{}/{}", gk.namespace, gk.name).into());
            for l in on_key.iter().filter(http) {
                let order = (
                    l.hostname.clone(),
                    shared,
                    state.age.clone(),
                    gk.clone(),
                    l.name.clone(),
                );
                let section = ListenerSection {
                    hostname: l.hostname.clone(),
                    set: set.clone(),
                    name: l.name.clone(),
                };
                self.sockets
                    .add_section(k, order.clone(), section, &mut d.resources);
                out.sections.push((k, order));
            }
            for l in on_key.iter().filter(http) {
                let shadows = on_key
                    .iter()
                    .filter(http)
                    .any(|o| o.hostname != l.hostname && o.hostname.covers(&l.hostname));
                let hk = (k, l.hostname.clone());
                if shadows && !out.isolated.contains(&hk) {
                    self.hosts.isolate(hk.clone(), &mut d.resources);
                    out.isolated.push(hk);
                }
            }
            if listener::terminates_tls(protocol) {
                let mut seen: Vec<HostMatch> = Vec::new();
                for l in &on_key {
                    if let Some(c) = &l.cert
                        && !seen.contains(&l.hostname)
                    {
                        seen.push(l.hostname.clone());
                        out.sni.push(((k, l.hostname.clone()), owner.clone()));
                        let hk = (k, l.hostname.clone());
                        self.hosts
                            .add_sni(hk, owner.clone(), c.clone(), &mut d.resources);
                    }
                }
                // The certificate for clients that send no SNI comes from the Gateway's
                // own listeners only: one entry per set would make that entry O(sets).
                if !shared
                    && !seen.contains(&HostMatch::ANY)
                    && let Some(c) = on_key.iter().find_map(|l| l.cert.clone())
                {
                    out.sni.push(((k, HostMatch::ANY), owner.clone()));
                    self.hosts
                        .add_sni((k, HostMatch::ANY), owner.clone(), c, &mut d.resources);
                }
            }
        }
        if shared {
            // Attached to its Gateway (counted in `attachedListenerSets`) only when
            // accepted with at least one valid listener, which settling just decided.
            let parent = (state.accepted.is_ok()
                && state
                    .listeners
                    .iter()
                    .any(gateway_status::set_listener_valid))
            .then(|| state.group.clone());
            self.gateways.set_parent(gk, parent, &mut d.gateway_status);
        }
        // Kept until the next settle: a listener set's lists hold one entry each, and the
        // first push leaves room for four (12 + 10 MiB at 20,000 ListenerSets).
        out.listeners.shrink_to_fit();
        out.sni.shrink_to_fit();
        out.isolated.shrink_to_fit();
        out.sections.shrink_to_fit();
        self.gateways.set_outputs(gk, out);
        if self.gateways.set_views(gk, Some(gateway::views(&state))) {
            self.mark_dependents(&Dep::Object(gk.clone()), d);
        }
        d.gateway_status.insert(gk.clone());
        self.gateways.set_state(gk, Some(state));
    }
}
