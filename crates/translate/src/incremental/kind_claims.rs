//! HTTPRoutes and GRPCRoutes sharing a listener. The GRPCRoute spec (`hostnames`): when
//! an HTTPRoute and a GRPCRoute attach to one listener and their hostnames intersect,
//! exactly one is accepted, the older (then the first by namespace/name). Here: a route
//! of one kind is refused on a listener when an older route of the other kind claims an
//! intersecting hostname there (whether or not that one is itself refused, so the outcome
//! depends only on the set of claims, not on the order they arrived in).
//!
//! A change of one route's claims re-examines only the younger routes of the other kind
//! on the same listeners whose hostnames intersect the old or new ones: on a listener
//! with routes of one kind only, nothing.

use std::sync::Arc;

use foldhash::HashMap;
use weir_api::ObjectKey;
use weir_model::HostMatch;

use crate::compile::route_kind::RouteKind;
use crate::incremental::SniOwner;
use crate::incremental::small::SmallOrdMap;

/// A listener: its Gateway or listener set, and its name.
pub(crate) type ListenerId = (ObjectKey, Arc<str>);

/// The hostnames a route would serve on one listener (before this rule is applied).
pub(crate) type Claim = (ListenerId, Vec<HostMatch>);

/// Claims per listener, per side (HTTPRoute, GRPCRoute), oldest first. Most listeners
/// hold one route (a ListenerSet's listener per domain): a side keeps one claim inline,
/// where a `BTreeMap` allocated a node for eleven (1 KiB per listener, 21 MiB at 20,000
/// ListenerSets), and becomes a `BTreeMap` from its second claim on.
#[derive(Default)]
pub(crate) struct KindClaims {
    by_listener: HashMap<ListenerId, [SmallOrdMap<SniOwner, Vec<HostMatch>>; 2]>,
    by_route: HashMap<ObjectKey, (SniOwner, usize, Vec<Claim>)>,
}

impl KindClaims {
    /// The side of the rule a route kind is on; `None` for kinds it does not concern.
    pub(crate) fn side(kind: RouteKind) -> Option<usize> {
        match kind {
            RouteKind::Http => Some(0),
            RouteKind::Grpc => Some(1),
            _ => None,
        }
    }

    /// The older route of the other kind that keeps `owner` (of `kind`) from serving
    /// `hosts` on `listener`, if any.
    pub(crate) fn older_rival(
        &self,
        kind: RouteKind,
        owner: &SniOwner,
        listener: &ListenerId,
        hosts: &[HostMatch],
    ) -> Option<&ObjectKey> {
        let side = Self::side(kind)?;
        let other = &self.by_listener.get(listener)?[1 - side];
        other
            .range(..owner)
            .find(|(_, theirs)| intersects(theirs, hosts))
            .map(|((_, key), _)| key)
    }

    /// Replaces the claims of `route` (of `kind`, precedence `owner`) by `claims` (empty:
    /// forget the route) and adds to `affected` the routes whose outcome may change.
    pub(crate) fn set(
        &mut self,
        route: &ObjectKey,
        kind: RouteKind,
        owner: SniOwner,
        claims: Vec<Claim>,
        affected: &mut Vec<ObjectKey>,
    ) {
        let Some(side) = Self::side(kind) else {
            return self.remove(route, affected);
        };
        if let Some((o, s, c)) = self.by_route.get(route)
            && *o == owner
            && *s == side
            && *c == claims
        {
            return;
        }
        self.remove(route, affected);
        if claims.is_empty() {
            return;
        }
        for (l, hosts) in &claims {
            let sides = self.by_listener.entry(l.clone()).or_default();
            sides[side].insert(owner.clone(), hosts.clone());
            younger_rivals(&sides[1 - side], &owner, hosts, affected);
        }
        self.by_route.insert(route.clone(), (owner, side, claims));
    }

    /// Forgets `route`'s claims, adding the routes whose outcome may change to `affected`.
    pub(crate) fn remove(&mut self, route: &ObjectKey, affected: &mut Vec<ObjectKey>) {
        let Some((owner, side, claims)) = self.by_route.remove(route) else {
            return;
        };
        for (l, hosts) in claims {
            let Some(sides) = self.by_listener.get_mut(&l) else {
                continue;
            };
            sides[side].remove(&owner);
            younger_rivals(&sides[1 - side], &owner, &hosts, affected);
            if sides.iter().all(SmallOrdMap::is_empty) {
                self.by_listener.remove(&l);
            }
        }
    }
}

fn intersects(a: &[HostMatch], b: &[HostMatch]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.intersect(y).is_some()))
}

/// The routes of `other` younger than `owner` whose hostnames intersect `hosts`.
fn younger_rivals(
    other: &SmallOrdMap<SniOwner, Vec<HostMatch>>,
    owner: &SniOwner,
    hosts: &[HostMatch],
    affected: &mut Vec<ObjectKey>,
) {
    use std::ops::Bound::{Excluded, Unbounded};
    for ((_, key), theirs) in other.range((Excluded(owner), Unbounded)) {
        if intersects(theirs, hosts) {
            affected.push(key.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::order::Age;
    use weir_api::Kind;

    fn owner(seq: u64, kind: Kind, name: &str) -> SniOwner {
        (Age::new(None, seq), ObjectKey::new(kind, "ns", name))
    }

    fn host(h: &str) -> HostMatch {
        HostMatch::parse(Some(h)).unwrap()
    }

    #[test]
    fn older_route_of_the_other_kind_wins() {
        let l: ListenerId = (ObjectKey::new(Kind::Gateway, "ns", "gw"), "http".into());
        let mut c = KindClaims::default();
        let mut affected = Vec::new();
        let h = owner(1, Kind::HttpRoute, "h");
        let g = owner(2, Kind::GrpcRoute, "g");
        c.set(
            &h.1,
            RouteKind::Http,
            h.clone(),
            vec![(l.clone(), vec![host("*.test")])],
            &mut affected,
        );
        assert!(affected.is_empty());
        c.set(
            &g.1,
            RouteKind::Grpc,
            g.clone(),
            vec![(l.clone(), vec![host("a.test")])],
            &mut affected,
        );
        assert!(affected.is_empty(), "an older route is not affected");
        assert_eq!(
            c.older_rival(RouteKind::Grpc, &g, &l, &[host("a.test")]),
            Some(&h.1)
        );
        assert_eq!(
            c.older_rival(RouteKind::Http, &h, &l, &[host("*.test")]),
            None
        );
        assert_eq!(
            c.older_rival(RouteKind::Grpc, &g, &l, &[host("b.other")]),
            None
        );
        // The HTTPRoute moves away: the GRPCRoute is re-examined; then it is gone.
        c.set(
            &h.1,
            RouteKind::Http,
            h.clone(),
            vec![(l.clone(), vec![host("b.other")])],
            &mut affected,
        );
        assert_eq!(affected, std::slice::from_ref(&g.1));
        assert_eq!(
            c.older_rival(RouteKind::Grpc, &g, &l, &[host("a.test")]),
            None
        );
        affected.clear();
        c.remove(&h.1, &mut affected);
        assert!(affected.is_empty(), "no intersection any more");
        c.remove(&g.1, &mut affected);
        assert!(c.by_listener.is_empty() && c.by_route.is_empty());
    }
}
