//! The rule loop shared by the route kinds that program virtual-host rules (HTTPRoute,
//! GRPCRoute): an empty `rules` list means one default rule; each rule compiles on its
//! own (an invalid rule is dropped with a problem naming its field, the others still
//! apply); each of its matches becomes one IR [`RouteRule`] with the rule's filters,
//! action, timeouts and retry, sorted by the route kind's precedence.
//!
//! A route kind supplies what differs: its rule type, how one rule compiles
//! ([`CompiledRule`]), and how one of its matches sorts ([`RuleMatch`]).

use std::sync::Arc;

use weir_api::ObjectKey;
use weir_model::{
    Action, Filter, LoadBalancer, RequestMatch, Retry, RouteRef, RouteRule, Timeouts,
};

use crate::compile::backend_ref::RouteCtx;
use crate::compile::order::{Age, RuleOrder, RuleOrigin};
use crate::compile::route_kind::{CompiledRoute, Referrer, RouteKind, route_hostnames};
use crate::store::Store;

/// One rule of a route, compiled: its matches (of the route kind's match type) and what
/// every one of them does.
pub(crate) struct CompiledRule<M> {
    pub(crate) matches: Vec<M>,
    pub(crate) filters: Vec<Filter>,
    pub(crate) action: Action,
    pub(crate) timeouts: Timeouts,
    pub(crate) retry: Option<Retry>,
    /// `sessionPersistence`, as the rule's load balancer.
    pub(crate) session: Option<LoadBalancer>,
}

/// A compiled match of some route kind: the request condition and where it sorts.
pub(crate) trait RuleMatch {
    /// The match's precedence among all the rules of a virtual host.
    fn order(&self, origin: &RuleOrigin<'_>, rule: u32, matcher: u32) -> RuleOrder;
    /// The request condition.
    fn into_request(self) -> RequestMatch;
}

/// An HTTPRoute match sorts by the HTTPRoute precedence.
impl RuleMatch for RequestMatch {
    fn order(&self, origin: &RuleOrigin<'_>, rule: u32, matcher: u32) -> RuleOrder {
        RuleOrder::new(origin, self, false, rule, matcher)
    }

    fn into_request(self) -> RequestMatch {
        self
    }
}

/// The route's identity for [`compile_rules`].
pub(crate) struct RouteId<'a> {
    pub(crate) store: &'a Store,
    pub(crate) key: &'a ObjectKey,
    pub(crate) age: &'a Age,
    pub(crate) kind: RouteKind,
}

/// Compiles a route's hostnames and rules (`compile_rule` compiles one rule, given the
/// context backend references resolve in and the rule's field path for errors).
pub(crate) fn compile_rules<R: Default, M: RuleMatch>(
    id: RouteId<'_>,
    hostnames: &[String],
    rules: &[R],
    mut compile_rule: impl FnMut(&mut RouteCtx<'_>, &R, &str) -> Result<CompiledRule<M>, String>,
) -> CompiledRoute {
    let mut out = CompiledRoute::default();
    route_hostnames(hostnames, &mut out);
    let default_rules = [R::default()];
    let rules: &[R] = if rules.is_empty() {
        &default_rules
    } else {
        rules
    };
    let origin = RuleOrigin {
        age: id.age,
        kind: id.kind.model(),
        namespace: &id.key.namespace,
        name: &id.key.name,
    };
    for (i, rule) in rules.iter().enumerate() {
        let field = format!("spec.rules[{i}]");
        let mut ctx = RouteCtx {
            store: id.store,
            referrer: Referrer::Route(id.kind),
            ns: &id.key.namespace,
            out: &mut out,
        };
        match compile_rule(&mut ctx, rule, &field) {
            Ok(c) => {
                let rule_idx = u32::try_from(i).unwrap_or(u32::MAX);
                let route_ref = RouteRef {
                    kind: id.kind.model(),
                    namespace: id.key.namespace.clone(),
                    name: id.key.name.clone(),
                    rule: rule_idx,
                };
                for (j, m) in c.matches.into_iter().enumerate() {
                    let order = m.order(&origin, rule_idx, u32::try_from(j).unwrap_or(u32::MAX));
                    let rr = RouteRule::new(
                        route_ref.clone(),
                        m.into_request(),
                        c.filters.clone(),
                        c.action.clone(),
                        c.timeouts.clone(),
                    )
                    .with_retry(c.retry.clone());
                    out.rules.push((Arc::new(order), Arc::new(rr)));
                }
                if let Some(lb) = c.session {
                    out.sessions.push((route_ref, lb));
                }
            }
            Err(e) => out
                .problems
                .push(format!("{e} (rule {i} dropped; other rules still apply)")),
        }
    }
    out
}
