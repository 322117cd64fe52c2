//! Ingress recomputation and the synthetic Ingress listeners.

use std::sync::Arc;
use weir_api::{Kind, ObjectKey, ObjectStatus};

use weir_model::{
    Action, HostMatch, L4Mode, Listener, ListenerKey, PolicyTarget, Protocol, Redirect, RouteKind,
    RouteRule, Timeouts,
};

use super::{Contribution, Dirty, Translator};
use crate::compile::ingress_nginx::SslRedirect;
use crate::incremental::DenseMap;
use crate::store::Dep;

/// The `gateway` label of the Ingress listeners (Gateway labels always hold a `/`).
const INGRESS_LABEL: &str = "ingress";

/// What the Ingresses contribute, and what decides whether the Ingress listeners exist.
#[derive(Default)]
pub(super) struct IngressState {
    /// Per stored Ingress: its share of hosts and clusters, whether it is ours, and how
    /// many valid TLS hosts it has.
    contributions: DenseMap<ObjectKey, (Contribution, bool, usize)>,
    /// Ingresses of ours: the HTTP listener exists while there is one.
    ours: usize,
    /// Valid TLS hosts of our Ingresses: the HTTPS listener exists while there is one.
    tls_hosts: usize,
    /// A Gateway claims an Ingress listener's socket: no Ingress is served.
    blocked: bool,
    /// What a class-less Ingress depends on: our IngressClass (built once, shared by
    /// every such Ingress's dependencies).
    class_dep: Option<Dep>,
    /// The keys of the Ingress HTTP and HTTPS listeners (interned once, not per Ingress).
    keys: [Option<ListenerKey>; 2],
    /// The addresses of those listeners, as an Ingress's status lists them (written
    /// once: formatting them for every Ingress was 8 % of a first load's translation
    /// instructions).
    addresses: Vec<String>,
}

impl IngressState {
    pub(super) fn new(opts: &crate::TranslatorOptions) -> Self {
        let keys = [
            opts.ingress_http.map(ListenerKey::new),
            opts.ingress_https.map(ListenerKey::new),
        ];
        let mut addresses = Vec::new();
        for k in keys.into_iter().flatten() {
            let ip = k.addr().ip().to_string();
            if !addresses.contains(&ip) {
                addresses.push(ip);
            }
        }
        IngressState {
            keys,
            addresses,
            ..IngressState::default()
        }
    }

    /// Makes room for `additional` more Ingresses.
    pub(super) fn reserve(&mut self, additional: usize) {
        self.contributions.reserve(additional);
    }
}

impl Translator {
    pub(super) fn ingress_keys(&self) -> [Option<ListenerKey>; 2] {
        self.ingress.keys
    }

    pub(super) fn check_ingress_blocked(&mut self, d: &mut Dirty) {
        let blocked = self
            .ingress_keys()
            .iter()
            .flatten()
            .any(|k| self.sockets.is_claimed(k));
        if blocked != self.ingress.blocked {
            self.ingress.blocked = blocked;
            d.ingresses
                .extend(self.ingress.contributions.keys().cloned());
        }
    }

    pub(super) fn update_ingress_listeners(&mut self, d: &mut Dirty) {
        let [http, https] = self.ingress_keys();
        let serve = !self.ingress.blocked;
        let want = [
            (http, serve && self.ingress.ours > 0, Protocol::Http, "http"),
            (
                https,
                serve && self.ingress.tls_hosts > 0,
                Protocol::Https,
                "https",
            ),
        ];
        for (key, on, protocol, name) in want {
            let Some(k) = key else { continue };
            if self.sockets.is_claimed(&k) {
                // A Gateway owns this socket and manages its Listener; drop ours if the
                // Gateway did not replace it.
                if self
                    .sockets
                    .listener(&k)
                    .is_some_and(|l| &*l.gateway == INGRESS_LABEL)
                {
                    self.sockets.remove_listener(k, &mut d.resources);
                }
                continue;
            }
            let has = self.sockets.listener(&k).is_some();
            if on && !has {
                let l = Listener::new(k, protocol, INGRESS_LABEL.into(), name.into());
                self.sockets.add_listener(l, &mut d.resources);
            } else if !on && has {
                self.sockets.remove_listener(k, &mut d.resources);
            }
        }
    }

    pub(super) fn recompute_ingress(&mut self, ik: &ObjectKey, d: &mut Dirty) {
        let old = self
            .ingress
            .contributions
            .swap_remove(ik)
            .map(|(c, ours, tls)| {
                self.ingress.ours -= usize::from(ours);
                self.ingress.tls_hosts -= tls;
                c
            });
        let mut rules = Vec::new();
        let mut sni = Vec::new();
        let mut clusters = Vec::new();
        let mut l4 = Vec::new();
        let (mut ours, mut tls_hosts) = (false, 0);
        let mut status = None;
        let mut deps = Vec::new();
        let mut policy = None;
        let ing = self.store.ingress(ik);
        if ing.is_some_and(|i| i.class().is_none()) {
            // A class-less Ingress is ours while our IngressClass is the default one.
            let class = &self.opts.ingress_class;
            let dep = self
                .ingress
                .class_dep
                .get_or_insert_with(|| Dep::Object(ObjectKey::new(Kind::IngressClass, "", class)));
            deps.push(dep.clone());
        }
        if let Some(ing) =
            ing.filter(|i| crate::compile::ingress::is_ours(&self.store, &self.opts, i))
        {
            let age = self.store.age(ik);
            let c = crate::compile::ingress::compile(&self.store, &self.opts, ik, &age, ing);
            deps.extend(c.deps);
            policy = c.policy;
            ours = true;
            let mut problems = c.problems;
            let [http, https] = self.ingress_keys();
            let mut addresses = Vec::new();
            if self.ingress.blocked {
                problems.push(
                    "the Ingress listener address is used by a Gateway; Ingresses are not served"
                        .into(),
                );
            } else {
                addresses.clone_from(&self.ingress.addresses);
                let covered = |h: &HostMatch| {
                    c.tls.iter().any(|(t, _)| {
                        t == h
                            || *t == HostMatch::ANY
                            || *h == HostMatch::ANY
                            || h.as_exact().is_some_and(|e| t.matches(e))
                    })
                };
                for (h, order, rule) in &c.rules {
                    if let Some(k) = http {
                        // `ssl-redirect`: the plaintext listener answers with a 308 to
                        // https for every rule (the same match, nothing forwarded).
                        let redirect = match c.ssl_redirect {
                            SslRedirect::Off => false,
                            SslRedirect::TlsHosts => https.is_some() && covered(h),
                            SslRedirect::All => true,
                        };
                        let plain = if redirect {
                            Arc::new(RouteRule::new(
                                rule.route.clone(),
                                rule.matcher.clone(),
                                Vec::new(),
                                Action::Redirect(Box::new(Redirect {
                                    scheme: Some("https".into()),
                                    hostname: None,
                                    path: None,
                                    // The Ingress HTTPS listener's port (none: 443).
                                    port: https.map(|k| k.addr().port()).filter(|p| *p != 443),
                                    status: 308,
                                })),
                                Timeouts::default(),
                            ))
                        } else {
                            rule.clone()
                        };
                        rules.push(((k, h.clone()), order.clone(), plain));
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
                    // `ssl-passthrough`: the host's TLS connections are spliced to its
                    // backend by SNI, as a TLSRoute's on a Passthrough listener sharing
                    // the HTTPS socket (older Ingresses and TLSRoutes win a host).
                    for (h, target, _) in &c.passthrough {
                        l4.push((
                            (k, h.clone()),
                            (age.clone(), ik.clone()),
                            (target.clone(), L4Mode::Passthrough),
                        ));
                    }
                    // The HTTPS listener exists while there is a TLS or passthrough host.
                    tls_hosts = c.tls.len() + c.passthrough.len();
                }
                clusters = c.clusters;
            }
            status = Some(ObjectStatus::Ingress {
                load_balancer: weir_api::IngressStatus { addresses },
                problems,
            });
            self.ingress.ours += 1;
            self.ingress.tls_hosts += tls_hosts;
        }
        self.deps.set(ik, deps);
        // The ingress-nginx annotations' policy, keyed by the Ingress as the data plane
        // derives it from the Ingress's rules.
        let target = PolicyTarget::Route {
            kind: RouteKind::Ingress,
            namespace: ik.namespace.clone(),
            name: ik.name.clone(),
        };
        self.policies.set_implicit(target, policy, &mut d.resources);
        let new = self.program(old, rules, sni, l4, clusters, d);
        if self.store.ingress(ik).is_some() {
            self.ingress
                .contributions
                .insert(ik.clone(), (new, ours, tls_hosts));
        }
        self.set_status(ik, status, d);
    }
}
