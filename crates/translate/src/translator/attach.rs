//! HTTPRoute attachment to Gateway listeners and the route's status.

use std::sync::Arc;

use weir_api::{Condition, Kind, ObjectKey, ObjectStatus, RouteParentStatus, RouteStatus};
use weir_model::HostMatch;

use super::{Contribution, Dirty, HostKey, Translator};
use crate::gateway::Allowed;
use crate::route;
use crate::store::Dep;

const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
const SETS_GROUP: &str = "gateway.networking.x-k8s.io";

impl Translator {
    pub(super) fn recompute_route(&mut self, rk: &ObjectKey, d: &mut Dirty) {
        let old = self.routes.remove(rk);
        let Some(route) = self.store.route(rk) else {
            self.set_deps(rk, Vec::new());
            let old_att = old
                .as_ref()
                .map(|o| o.attachments.clone())
                .unwrap_or_default();
            self.update_attachments(&old_att, &[], d);
            self.swap_contribution(old, &Contribution::default(), &[], &[], d);
            self.set_status(rk, None, d);
            return;
        };
        let age = self.store.age(rk);
        let compiled = route::compile(&self.store, rk, &age, route);
        let mut deps = compiled.deps.clone();
        deps.push(Dep::Object(ObjectKey::new(
            Kind::Namespace,
            "",
            &rk.namespace,
        )));
        let generation = route.metadata.generation;
        let mut parents = Vec::new();
        let mut hosts: Vec<HostKey> = Vec::new();
        let mut attachments: Vec<(ObjectKey, Arc<str>)> = Vec::new();
        let resolved = match compiled.ref_errors.first() {
            None => Condition::new(
                "ResolvedRefs",
                true,
                "ResolvedRefs",
                "all references resolved",
                generation,
            ),
            Some(e) => {
                let msgs: Vec<&str> = compiled
                    .ref_errors
                    .iter()
                    .map(|e| e.message.as_str())
                    .collect();
                Condition::new("ResolvedRefs", false, e.reason, msgs.join("; "), generation)
            }
        };
        for pr in &route.spec.parent_refs {
            let kind = match (
                pr.group.as_deref().unwrap_or(GATEWAY_GROUP),
                pr.kind.as_deref().unwrap_or("Gateway"),
            ) {
                (GATEWAY_GROUP, "Gateway") => Kind::Gateway,
                (SETS_GROUP, "XListenerSet") => Kind::XListenerSet,
                _ => continue,
            };
            let gns = pr
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(&rk.namespace);
            let gk = ObjectKey::new(kind, gns, &pr.name);
            deps.push(Dep::Object(gk.clone()));
            let Some(views) = self.gw_views.get(&gk) else {
                continue;
            };
            let mut candidates = 0;
            let mut allowed_any = false;
            let mut attached = false;
            for l in views {
                if pr.section_name.as_deref().is_some_and(|s| s != &*l.name)
                    || pr.port.is_some_and(|p| p != l.port)
                {
                    continue;
                }
                candidates += 1;
                if !l.routable {
                    continue;
                }
                let allowed = match &l.allowed {
                    Allowed::Same => *rk.namespace == *gk.namespace,
                    Allowed::All => true,
                    Allowed::Selector(s) => s.matches(&self.store.namespace_labels(&rk.namespace)),
                    Allowed::Nothing => false,
                };
                if !allowed {
                    continue;
                }
                allowed_any = true;
                let effective: Vec<HostMatch> = match &compiled.hostnames {
                    None => vec![l.hostname.clone()],
                    Some(hs) => hs.iter().filter_map(|h| l.hostname.intersect(h)).collect(),
                };
                if effective.is_empty() {
                    continue;
                }
                attached = true;
                let a = (gk.clone(), l.name.clone());
                if !attachments.contains(&a) {
                    attachments.push(a);
                }
                if l.programmed
                    && let Some(k) = l.key
                {
                    // Listener isolation: hosts that a more specific listener on the same
                    // socket also matches belong to that listener, so this listener's
                    // routes do not serve them (e.g. a route on a catch-all listener with
                    // hostname `*.example.com` next to a listener for `*.example.com`).
                    let owned_elsewhere = |h: &HostMatch| {
                        views.iter().any(|o| {
                            o.programmed
                                && o.key == l.key
                                && o.hostname != l.hostname
                                && l.hostname.covers(&o.hostname)
                                && o.hostname.covers(h)
                        })
                    };
                    for h in effective.into_iter().filter(|h| !owned_elsewhere(h)) {
                        let hk = (k, h);
                        if !hosts.contains(&hk) {
                            hosts.push(hk);
                        }
                    }
                }
            }
            let accepted = if attached {
                if compiled.problems.is_empty() {
                    Condition::new("Accepted", true, "Accepted", "route accepted", generation)
                } else {
                    Condition::new(
                        "Accepted",
                        false,
                        "UnsupportedValue",
                        compiled.problems.join("; "),
                        generation,
                    )
                }
            } else if candidates == 0 {
                Condition::new(
                    "Accepted",
                    false,
                    "NoMatchingParent",
                    "no listener matches the parentRef's sectionName/port",
                    generation,
                )
            } else if !allowed_any {
                Condition::new(
                    "Accepted",
                    false,
                    "NotAllowedByListeners",
                    "no listener allows this route (namespace or kind)",
                    generation,
                )
            } else {
                Condition::new(
                    "Accepted",
                    false,
                    "NoMatchingListenerHostname",
                    "no listener hostname intersects the route's hostnames",
                    generation,
                )
            };
            parents.push(RouteParentStatus {
                parent_ref: pr.clone(),
                controller_name: self.opts.controller_name.clone(),
                conditions: vec![accepted, resolved.clone()],
            });
        }
        self.set_deps(rk, deps);
        let mut rules = Vec::with_capacity(hosts.len() * compiled.rules.len());
        for hk in &hosts {
            for (order, rule) in &compiled.rules {
                rules.push((hk.clone(), order.clone(), rule.clone()));
            }
        }
        let mut new = Contribution {
            entries: rules
                .iter()
                .map(|(hk, o, _)| (hk.clone(), o.clone()))
                .collect(),
            clusters: if hosts.is_empty() {
                Vec::new()
            } else {
                compiled.clusters
            },
            ..Contribution::default()
        };
        let old_att = old
            .as_ref()
            .map(|o| o.attachments.clone())
            .unwrap_or_default();
        self.update_attachments(&old_att, &attachments, d);
        new.attachments = attachments;
        self.swap_contribution(old, &new, &rules, &[], d);
        self.routes.insert(rk.clone(), new);
        self.set_status(rk, Some(ObjectStatus::Route(RouteStatus { parents })), d);
    }

    fn update_attachments(
        &mut self,
        old: &[(ObjectKey, Arc<str>)],
        new: &[(ObjectKey, Arc<str>)],
        d: &mut Dirty,
    ) {
        if old == new {
            return;
        }
        for (gk, l) in old {
            if let Some(m) = self.attached.get_mut(gk) {
                if let Some(n) = m.get_mut(l) {
                    *n -= 1;
                    if *n == 0 {
                        m.remove(l);
                    }
                }
                if m.is_empty() {
                    self.attached.remove(gk);
                }
            }
            d.gateway_status.insert(gk.clone());
        }
        for (gk, l) in new {
            *self
                .attached
                .entry(gk.clone())
                .or_default()
                .entry(l.clone())
                .or_insert(0) += 1;
            d.gateway_status.insert(gk.clone());
        }
    }
}
