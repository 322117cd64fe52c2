//! Route attachment, shared by every route kind: parentRefs and hostnames → the listeners
//! and hosts a route serves, the route's status, and its share of the virtual hosts.

use std::sync::Arc;

use weir_api::{
    Condition, ConditionType, Kind, Object, ObjectKey, ObjectStatus, ParentReference, Reason,
    RouteParentStatus, RouteStatus,
};
use weir_model::{HostMatch, L4Mode, PolicyTarget};

use super::{Dirty, Translator, tls_ancestry};
use crate::compile::listener::Allowed;
use crate::compile::policy::PolicySettings;
use crate::compile::route_kind::{
    CompiledRoute, EXPERIMENTAL_GROUP, GATEWAY_GROUP, RouteKind, RouteObject,
};
use crate::incremental::{Claim, HostKey, KindClaims};
use crate::store::Dep;

/// Whether a route attached to one parent, and if not why (the `Accepted` reason).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ParentOutcome {
    /// Attached to at least one listener.
    Attached,
    /// No listener matches the parentRef's sectionName/port.
    NoMatchingParent,
    /// No matching listener allows the route's namespace or kind.
    NotAllowedByListeners,
    /// No allowed listener's hostname intersects the route's hostnames.
    NoMatchingListenerHostname,
    /// Every listener it would attach to has an older route of the other kind (HTTPRoute
    /// or GRPCRoute) with an intersecting hostname, such as this one.
    KindConflict(ObjectKey),
}

/// Where a route attaches. Computed from its kind, namespace, parentRefs and hostnames
/// against the listeners' current views; never from its rules, so every route kind
/// shares it.
#[derive(Default)]
pub(super) struct Attachment {
    /// Per parentRef naming an existing Gateway or XListenerSet of ours, in order.
    pub(super) parents: Vec<(ParentReference, ParentOutcome)>,
    /// The (socket, host) pairs the route's rules are programmed on.
    pub(super) hosts: Vec<HostKey>,
    /// Those of `hosts` whose listener terminates TLS before an L4 route splices
    /// (TLS `Terminate` listeners).
    pub(super) terminated: Vec<HostKey>,
    /// The listeners (Gateway or set, listener name) the route counts as attached to.
    pub(super) listeners: Vec<(ObjectKey, Arc<str>)>,
    /// What the attachment depends on: the parents and the route's namespace.
    pub(super) deps: Vec<Dep>,
    /// HTTPRoute, GRPCRoute: the hostnames it would serve per listener, before the rule
    /// that of two routes of these kinds with intersecting hostnames only the older is
    /// accepted (`KindClaims`).
    pub(super) claims: Vec<Claim>,
}

impl Translator {
    /// Recomputes route `rk`, of any route kind (or removes what it contributed).
    pub(super) fn recompute_route(&mut self, rk: &ObjectKey, d: &mut Dirty) {
        // A clone of the `Arc`: the route is read while the translator changes.
        let obj = self.store.get(rk).cloned();
        match obj.as_deref() {
            Some(Object::HttpRoute(r)) => self.attach_route(rk, r, d),
            Some(Object::TlsRoute(r)) => self.attach_route(rk, r, d),
            Some(Object::TcpRoute(r)) => self.attach_route(rk, r, d),
            Some(Object::UdpRoute(r)) => self.attach_route(rk, r, d),
            Some(Object::GrpcRoute(r)) => self.attach_route(rk, r, d),
            _ => self.detach_route(rk, d),
        }
    }

    /// Undoes everything a deleted route contributed.
    fn detach_route(&mut self, rk: &ObjectKey, d: &mut Dirty) {
        let old = self.routes.swap_remove(rk);
        let ancestry = tls_ancestry(
            self.deps.of(rk),
            old.as_ref().map_or(&[][..], |o| &o.attachments),
        );
        self.set_tls_ancestry(ancestry, Default::default(), d);
        self.deps.set(rk, Vec::new());
        let mut affected = Vec::new();
        self.kind_claims.remove(rk, &mut affected);
        d.routes.extend(affected);
        if let Some(o) = &old {
            self.gateways
                .attach_route(&o.attachments, &[], &mut d.gateway_status);
        }
        self.program(old, Vec::new(), Vec::new(), Vec::new(), Vec::new(), d);
        self.set_sessions(rk, Vec::new(), d);
        self.set_status(rk, None, d);
    }

    /// Makes each rule's `sessionPersistence` the implicit policy of that rule (its load
    /// balancer), removing those of rules that no longer have one.
    fn set_sessions(
        &mut self,
        rk: &ObjectKey,
        sessions: Vec<(weir_model::RouteRef, weir_model::LoadBalancer)>,
        d: &mut Dirty,
    ) {
        let targets: Vec<PolicyTarget> = sessions
            .iter()
            .map(|(r, _)| PolicyTarget::Rule(r.clone()))
            .collect();
        for old in self.sessions.remove(rk).unwrap_or_default() {
            if !targets.contains(&old) {
                self.policies.set_implicit(old, None, &mut d.resources);
            }
        }
        let name: Arc<str> = format!("{}/{} (sessionPersistence)", rk.namespace, rk.name).into();
        for (r, lb) in sessions {
            let settings = PolicySettings {
                name: name.clone(),
                load_balancer: Some(lb),
                ..PolicySettings::default()
            };
            self.policies.set_implicit(
                PolicyTarget::Rule(r),
                Some(Arc::new(settings)),
                &mut d.resources,
            );
        }
        if !targets.is_empty() {
            self.sessions.insert(rk.clone(), targets);
        }
    }

    /// Compiles route `rk`, attaches it to its parents and programs its rules on the
    /// hosts it attached to: the one path every route kind takes.
    fn attach_route<R: RouteObject>(&mut self, rk: &ObjectKey, route: &R, d: &mut Dirty) {
        let old = self.routes.swap_remove(rk);
        let mut compiled = route.compile(&self.store, rk, &self.store.age(rk));
        self.set_sessions(rk, std::mem::take(&mut compiled.sessions), d);
        let mut att = self.attach_parents(
            rk,
            R::KIND,
            route.parent_refs(),
            compiled.hostnames.as_deref(),
        );
        let mut affected = Vec::new();
        self.kind_claims.set(
            rk,
            R::KIND,
            (self.store.age(rk), rk.clone()),
            std::mem::take(&mut att.claims),
            &mut affected,
        );
        d.routes.extend(affected);
        let status = route_status(
            &att,
            &compiled,
            route.generation(),
            &self.opts.controller_name,
        );
        let mut deps = compiled.deps;
        deps.extend(att.deps);
        let old_ancestry = tls_ancestry(
            self.deps.of(rk),
            old.as_ref().map_or(&[][..], |o| &o.attachments),
        );
        let new_ancestry = tls_ancestry(&deps, &att.listeners);
        self.deps.set(rk, deps);
        self.set_tls_ancestry(old_ancestry, new_ancestry, d);
        let mut rules = Vec::with_capacity(att.hosts.len() * compiled.rules.len());
        for hk in &att.hosts {
            for (order, rule) in &compiled.rules {
                rules.push((hk.clone(), order.clone(), rule.clone()));
            }
        }
        let owner = (self.store.age(rk), rk.clone());
        let l4: Vec<_> = match &compiled.l4 {
            Some(target) => att
                .hosts
                .iter()
                .map(|hk| {
                    let mode = if att.terminated.contains(hk) {
                        L4Mode::Terminate
                    } else {
                        L4Mode::Passthrough
                    };
                    (hk.clone(), owner.clone(), (target.clone(), mode))
                })
                .collect(),
            None => Vec::new(),
        };
        let clusters = if att.hosts.is_empty() {
            Vec::new()
        } else {
            compiled.clusters
        };
        let old_attachments = old.as_ref().map(|o| &o.attachments[..]).unwrap_or(&[]);
        self.gateways
            .attach_route(old_attachments, &att.listeners, &mut d.gateway_status);
        let mut new = self.program(old, rules, Vec::new(), l4, clusters, d);
        new.attachments = att.listeners.into_boxed_slice();
        self.routes.insert(rk.clone(), new);
        self.set_status(rk, Some(ObjectStatus::Route(status)), d);
    }

    /// Attaches a route of `kind` in `route`'s namespace to the listeners its
    /// `parent_refs` name, with its `hostnames` (`None`: it takes the listeners').
    pub(super) fn attach_parents(
        &self,
        route: &ObjectKey,
        kind: RouteKind,
        parent_refs: &[ParentReference],
        hostnames: Option<&[HostMatch]>,
    ) -> Attachment {
        let mut att = Attachment::default();
        let owner = KindClaims::side(kind).map(|_| (self.store.age(route), route.clone()));
        att.deps.push(Dep::Object(ObjectKey::new(
            Kind::Namespace,
            "",
            &route.namespace,
        )));
        for pr in parent_refs {
            let parent_kind = match (
                pr.group.as_deref().unwrap_or(GATEWAY_GROUP),
                pr.kind.as_deref().unwrap_or("Gateway"),
            ) {
                (GATEWAY_GROUP, "Gateway") => Kind::Gateway,
                (EXPERIMENTAL_GROUP, "XListenerSet") => Kind::XListenerSet,
                (GATEWAY_GROUP, "ListenerSet") => Kind::ListenerSet,
                _ => continue,
            };
            let gns = pr
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(&route.namespace);
            let gk = ObjectKey::new(parent_kind, gns, &pr.name);
            att.deps.push(Dep::Object(gk.clone()));
            let Some(views) = self.gateways.views(&gk) else {
                continue;
            };
            let mut candidates = 0;
            let mut allowed_any = false;
            let mut attached = false;
            let mut rival = None;
            for l in views {
                if pr.section_name.as_deref().is_some_and(|s| s != &*l.name)
                    || pr.port.is_some_and(|p| p != l.port)
                {
                    continue;
                }
                candidates += 1;
                if !l.routable || !l.kinds.contains(kind) {
                    continue;
                }
                let allowed = match &l.allowed {
                    Allowed::Same => *route.namespace == *gk.namespace,
                    Allowed::All => true,
                    Allowed::Selector(s) => {
                        s.matches(&self.store.namespace_labels(&route.namespace))
                    }
                    Allowed::Nothing => false,
                };
                if !allowed {
                    continue;
                }
                allowed_any = true;
                let effective: Vec<HostMatch> = match hostnames {
                    None => vec![l.hostname.clone()],
                    Some(hs) => hs.iter().filter_map(|h| l.hostname.intersect(h)).collect(),
                };
                if effective.is_empty() {
                    continue;
                }
                if let Some(owner) = &owner {
                    let lid = (gk.clone(), l.name.clone());
                    let older = self
                        .kind_claims
                        .older_rival(kind, owner, &lid, &effective)
                        .cloned();
                    if !att.claims.iter().any(|(x, _)| *x == lid) {
                        att.claims.push((lid, effective.clone()));
                    }
                    if let Some(older) = older {
                        rival = Some(older);
                        continue;
                    }
                }
                attached = true;
                let a = (gk.clone(), l.name.clone());
                if !att.listeners.contains(&a) {
                    att.listeners.push(a);
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
                        if l.l4_mode == L4Mode::Terminate && !att.terminated.contains(&hk) {
                            att.terminated.push(hk.clone());
                        }
                        if !att.hosts.contains(&hk) {
                            att.hosts.push(hk);
                        }
                    }
                }
            }
            let outcome = if attached {
                ParentOutcome::Attached
            } else if let Some(older) = rival {
                ParentOutcome::KindConflict(older)
            } else if candidates == 0 {
                ParentOutcome::NoMatchingParent
            } else if !allowed_any {
                ParentOutcome::NotAllowedByListeners
            } else {
                ParentOutcome::NoMatchingListenerHostname
            };
            att.parents.push((pr.clone(), outcome));
        }
        att
    }
}

/// A route's status: per parent, `Accepted` from its attachment and the route's
/// problems, and `ResolvedRefs` from its references.
fn route_status(
    att: &Attachment,
    compiled: &CompiledRoute,
    generation: Option<i64>,
    controller: &Arc<str>,
) -> RouteStatus {
    let resolved = match compiled.ref_errors.first() {
        None => Condition::new(
            ConditionType::ResolvedRefs,
            true,
            Reason::ResolvedRefs,
            "all references resolved",
            generation,
        ),
        Some(e) => {
            let msgs: Vec<&str> = compiled
                .ref_errors
                .iter()
                .map(|e| e.message.as_str())
                .collect();
            Condition::new(
                ConditionType::ResolvedRefs,
                false,
                e.reason,
                msgs.join("; "),
                generation,
            )
        }
    };
    let parents = att
        .parents
        .iter()
        .map(|(pr, outcome)| {
            let accepted = match outcome {
                ParentOutcome::Attached if compiled.problems.is_empty() => Condition::new(
                    ConditionType::Accepted,
                    true,
                    Reason::Accepted,
                    "route accepted",
                    generation,
                ),
                ParentOutcome::Attached => Condition::new(
                    ConditionType::Accepted,
                    false,
                    Reason::UnsupportedValue,
                    compiled.problems.join("; "),
                    generation,
                ),
                ParentOutcome::NoMatchingParent => Condition::new(
                    ConditionType::Accepted,
                    false,
                    Reason::NoMatchingParent,
                    "no listener matches the parentRef's sectionName/port",
                    generation,
                ),
                ParentOutcome::NotAllowedByListeners => Condition::new(
                    ConditionType::Accepted,
                    false,
                    Reason::NotAllowedByListeners,
                    "no listener allows this route (namespace or kind)",
                    generation,
                ),
                ParentOutcome::NoMatchingListenerHostname => Condition::new(
                    ConditionType::Accepted,
                    false,
                    Reason::NoMatchingListenerHostname,
                    "no listener hostname intersects the route's hostnames",
                    generation,
                ),
                ParentOutcome::KindConflict(older) => Condition::new(
                    ConditionType::Accepted,
                    false,
                    Reason::HostnameConflict,
                    format!(
                        "the older {older} has intersecting hostnames on the listeners this route would attach to (of an HTTPRoute and a GRPCRoute only the older is accepted)"
                    ),
                    generation,
                ),
            };
            RouteParentStatus {
                parent_ref: pr.clone(),
                controller_name: controller.clone(),
                conditions: vec![accepted, resolved.clone()],
            }
        })
        .collect();
    RouteStatus { parents }
}
