//! Ingress recomputation and the synthetic Ingress listeners.

use std::sync::Arc;

use weir_api::{Kind, ObjectKey, ObjectStatus};
use weir_model::{HostMatch, Listener, ListenerKey, Protocol, ResourceKey};

use super::{Dirty, INGRESS_LABEL, Translator};
use crate::store::Dep;

impl Translator {
    pub(super) fn ingress_keys(&self) -> [Option<ListenerKey>; 2] {
        [
            self.opts.ingress_http.map(ListenerKey),
            self.opts.ingress_https.map(ListenerKey),
        ]
    }

    pub(super) fn check_ingress_blocked(&mut self, d: &mut Dirty) {
        let blocked = self
            .ingress_keys()
            .iter()
            .flatten()
            .any(|k| self.port_claims.contains_key(k));
        if blocked != self.ingress_blocked {
            self.ingress_blocked = blocked;
            d.ingresses.extend(self.ingresses.keys().cloned());
        }
    }

    pub(super) fn update_ingress_listeners(&mut self, d: &mut Dirty) {
        let [http, https] = self.ingress_keys();
        let serve = !self.ingress_blocked;
        let want = [
            (
                http,
                serve && self.ingress_count > 0,
                Protocol::Http,
                "http",
            ),
            (
                https,
                serve && self.ingress_tls_hosts > 0,
                Protocol::Https,
                "https",
            ),
        ];
        for (key, on, protocol, name) in want {
            let Some(k) = key else { continue };
            if self.port_claims.contains_key(&k) {
                // A Gateway owns this socket and manages its Listener; drop ours if the
                // Gateway did not replace it.
                if self
                    .listeners
                    .get(&k)
                    .is_some_and(|l| &*l.gateway == INGRESS_LABEL)
                {
                    self.listeners.remove(&k);
                    d.resources.insert(ResourceKey::Listener(k));
                }
                continue;
            }
            let has = self.listeners.contains_key(&k);
            if on && !has {
                self.listeners.insert(
                    k,
                    Arc::new(Listener::new(
                        k,
                        protocol,
                        INGRESS_LABEL.into(),
                        name.into(),
                    )),
                );
                d.resources.insert(ResourceKey::Listener(k));
            } else if !on && has {
                self.listeners.remove(&k);
                d.resources.insert(ResourceKey::Listener(k));
            }
        }
    }

    pub(super) fn recompute_ingress(&mut self, ik: &ObjectKey, d: &mut Dirty) {
        let old = self.ingresses.remove(ik);
        if let Some(o) = &old {
            if o.ours {
                self.ingress_count -= 1;
            }
            self.ingress_tls_hosts -= o.tls_hosts;
        }
        let mut rules = Vec::new();
        let mut sni = Vec::new();
        let mut clusters = Vec::new();
        let (mut ours, mut tls_hosts) = (false, 0);
        let mut status = None;
        let mut deps = Vec::new();
        let ing = self.store.ingress(ik);
        if ing.is_some_and(|i| i.spec.ingress_class_name.is_none()) {
            // A class-less Ingress is ours while our IngressClass is the default one.
            deps.push(Dep::Object(ObjectKey::new(
                Kind::IngressClass,
                "",
                &self.opts.ingress_class,
            )));
        }
        if let Some(ing) = ing.filter(|i| crate::ingress::is_ours(&self.store, &self.opts, i)) {
            let age = self.store.age(ik);
            let c = crate::ingress::compile(&self.store, ik, &age, ing);
            deps.extend(c.deps);
            ours = true;
            let mut problems = c.problems;
            let [http, https] = self.ingress_keys();
            let mut addresses = Vec::new();
            if self.ingress_blocked {
                problems.push(
                    "the Ingress listener address is used by a Gateway; Ingresses are not served"
                        .into(),
                );
            } else {
                for k in [http, https].into_iter().flatten() {
                    let ip = k.0.ip().to_string();
                    if !addresses.contains(&ip) {
                        addresses.push(ip);
                    }
                }
                let covered = |h: &HostMatch| {
                    c.tls.iter().any(|(t, _)| {
                        t == h
                            || *t == HostMatch::Any
                            || *h == HostMatch::Any
                            || matches!(h, HostMatch::Exact(e) if t.matches(e))
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
                    tls_hosts = c.tls.len();
                }
                clusters = c.clusters;
            }
            status = Some(ObjectStatus::Ingress {
                load_balancer: weir_api::IngressStatus { addresses },
                problems,
            });
            self.ingress_count += 1;
            self.ingress_tls_hosts += tls_hosts;
        }
        self.set_deps(ik, deps);
        let mut new = self.program(old, rules, sni, clusters, d);
        new.ours = ours;
        new.tls_hosts = tls_hosts;
        if self.store.ingress(ik).is_some() {
            self.ingresses.insert(ik.clone(), new);
        }
        self.set_status(ik, status, d);
    }
}
