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

/// A claim's place on its listener: its side (see [`KindClaims::side`]), then its age.
type Claimant = (u8, SniOwner);

/// Claims per listener, ordered by side and then oldest first, and per route the
/// listeners it claims (the hosts are kept once, on the listener).
///
/// Most listeners hold one route (a ListenerSet's listener per domain): a listener keeps
/// one claim inline and becomes a `BTreeMap` from its second (a `BTreeMap` allocated a
/// node for eleven, 1 KiB per listener). Both sides share that one map: a pair of maps,
/// one of them nearly always empty, was 96 bytes more per listener in a table sized to a
/// power of two, and the route's copy of its hosts one more allocation per claim (4 MiB
/// together at 20,000 ListenerSets).
#[derive(Default)]
pub(crate) struct KindClaims {
    by_listener: HashMap<ListenerId, SmallOrdMap<Claimant, Vec<HostMatch>>>,
    by_route: HashMap<ObjectKey, (SniOwner, u8, Vec<ListenerId>)>,
}

impl KindClaims {
    /// The side of the rule a route kind is on; `None` for kinds it does not concern.
    pub(crate) fn side(kind: RouteKind) -> Option<u8> {
        match kind {
            RouteKind::Http => Some(0),
            RouteKind::Grpc => Some(1),
            _ => None,
        }
    }

    /// The older route of the other kind that keeps `owner` (of `kind`) from serving
    /// `hosts` on `listener`, if any: the oldest of them.
    pub(crate) fn older_rival(
        &self,
        kind: RouteKind,
        owner: &SniOwner,
        listener: &ListenerId,
        hosts: &[HostMatch],
    ) -> Option<&ObjectKey> {
        let other = 1 - Self::side(kind)?;
        self.by_listener
            .get(listener)?
            .range(..(other, owner.clone()))
            .rev()
            .take_while(|((side, _), _)| *side == other)
            .filter(|(_, theirs)| intersects(theirs, hosts))
            .last()
            .map(|((_, (_, key)), _)| key)
    }

    /// Whether `route` already claims exactly `claims` as `owner` on `side`.
    fn unchanged(&self, route: &ObjectKey, owner: &SniOwner, side: u8, claims: &[Claim]) -> bool {
        let Some((o, s, listeners)) = self.by_route.get(route) else {
            return false;
        };
        if o != owner || *s != side || listeners.len() != claims.len() {
            return false;
        }
        let at = (side, owner.clone());
        claims.iter().zip(listeners).all(|((l, hosts), known)| {
            l == known
                && self
                    .by_listener
                    .get(l)
                    .and_then(|m| m.get(&at))
                    .is_some_and(|h| h == hosts)
        })
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
        if self.unchanged(route, &owner, side, &claims) {
            return;
        }
        self.remove(route, affected);
        if claims.is_empty() {
            return;
        }
        let mut listeners = Vec::with_capacity(claims.len());
        for (l, hosts) in claims {
            let map = self.by_listener.entry(l.clone()).or_default();
            younger_rivals(map, 1 - side, &owner, &hosts, affected);
            map.insert((side, owner.clone()), hosts);
            listeners.push(l);
        }
        self.by_route
            .insert(route.clone(), (owner, side, listeners));
    }

    /// Forgets `route`'s claims, adding the routes whose outcome may change to `affected`.
    pub(crate) fn remove(&mut self, route: &ObjectKey, affected: &mut Vec<ObjectKey>) {
        let Some((owner, side, listeners)) = self.by_route.remove(route) else {
            return;
        };
        let at = (side, owner);
        for l in listeners {
            let Some(map) = self.by_listener.get_mut(&l) else {
                continue;
            };
            if let Some(hosts) = map.remove(&at) {
                younger_rivals(map, 1 - side, &at.1, &hosts, affected);
            }
            if map.is_empty() {
                self.by_listener.remove(&l);
            }
        }
    }
}

fn intersects(a: &[HostMatch], b: &[HostMatch]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.intersect(y).is_some()))
}

/// The routes on side `other` of `map` younger than `owner` whose hostnames intersect
/// `hosts`.
fn younger_rivals(
    map: &SmallOrdMap<Claimant, Vec<HostMatch>>,
    other: u8,
    owner: &SniOwner,
    hosts: &[HostMatch],
    affected: &mut Vec<ObjectKey>,
) {
    use std::ops::Bound::{Excluded, Unbounded};
    let after = (other, owner.clone());
    for ((_, (_, key)), theirs) in map
        .range((Excluded(after), Unbounded))
        .take_while(|((side, _), _)| *side == other)
    {
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

    /// Sets `o`'s claim (of `kind`) on `l` to the one host `h`.
    fn claim(
        c: &mut KindClaims,
        o: &SniOwner,
        kind: RouteKind,
        l: &ListenerId,
        h: &str,
        affected: &mut Vec<ObjectKey>,
    ) {
        c.set(
            &o.1,
            kind,
            o.clone(),
            vec![(l.clone(), vec![host(h)])],
            affected,
        );
    }

    #[test]
    fn older_route_of_the_other_kind_wins() {
        let l: ListenerId = (ObjectKey::new(Kind::Gateway, "ns", "gw"), "http".into());
        let mut c = KindClaims::default();
        let mut affected = Vec::new();
        let h = owner(1, Kind::HttpRoute, "h");
        let g = owner(2, Kind::GrpcRoute, "g");
        claim(&mut c, &h, RouteKind::Http, &l, "*.test", &mut affected);
        assert!(affected.is_empty());
        claim(&mut c, &g, RouteKind::Grpc, &l, "a.test", &mut affected);
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
        claim(&mut c, &h, RouteKind::Http, &l, "b.other", &mut affected);
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

    #[test]
    fn both_kinds_on_one_listener_name_the_oldest_rival_and_the_younger_ones() {
        let l: ListenerId = (ObjectKey::new(Kind::Gateway, "ns", "gw"), "http".into());
        let mut c = KindClaims::default();
        let mut affected = Vec::new();
        let g1 = owner(1, Kind::GrpcRoute, "g1");
        let h2 = owner(2, Kind::HttpRoute, "h2");
        let h3 = owner(3, Kind::HttpRoute, "h3");
        let g4 = owner(4, Kind::GrpcRoute, "g4");
        let all = [
            (&g1, RouteKind::Grpc),
            (&h2, RouteKind::Http),
            (&h3, RouteKind::Http),
            (&g4, RouteKind::Grpc),
        ];
        for (o, kind) in all {
            claim(&mut c, o, kind, &l, "*.test", &mut affected);
        }
        assert!(affected.is_empty(), "each arrived after its rivals");
        let a = [host("a.test")];
        assert_eq!(c.older_rival(RouteKind::Http, &h3, &l, &a), Some(&g1.1));
        assert_eq!(c.older_rival(RouteKind::Grpc, &g4, &l, &a), Some(&h2.1));
        assert_eq!(c.older_rival(RouteKind::Grpc, &g1, &l, &a), None);
        // Setting the same claims again changes nothing.
        claim(&mut c, &g1, RouteKind::Grpc, &l, "*.test", &mut affected);
        assert!(affected.is_empty());
        // g1 narrows: the younger HTTPRoutes are re-examined, not the younger GRPCRoute.
        claim(&mut c, &g1, RouteKind::Grpc, &l, "b.test", &mut affected);
        // (Each once per intersection, with the old hosts and with the new: the caller
        // recomputes each route once.)
        affected.sort();
        affected.dedup();
        assert_eq!(affected, vec![h2.1.clone(), h3.1.clone()]);
        assert_eq!(c.older_rival(RouteKind::Http, &h3, &l, &a), None);
        assert_eq!(
            c.older_rival(RouteKind::Http, &h3, &l, &[host("b.test")]),
            Some(&g1.1)
        );
        affected.clear();
        // h2 leaves: g4 is re-examined (h2 was older and intersecting), g1 is not.
        c.remove(&h2.1, &mut affected);
        assert_eq!(affected, vec![g4.1.clone()]);
        assert_eq!(c.older_rival(RouteKind::Grpc, &g4, &l, &a), Some(&h3.1));
        for o in [&g1, &h3, &g4] {
            c.remove(&o.1, &mut affected);
        }
        assert!(c.by_listener.is_empty() && c.by_route.is_empty());
    }
}
