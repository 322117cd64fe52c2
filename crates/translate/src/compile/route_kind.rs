//! Route kinds: which Gateway API route kinds a listener accepts, who a ReferenceGrant's
//! `from` names, and what every route kind compiles to before it is attached.
//!
//! Each route kind plugs in here: a [`RouteKind`] variant, a [`RouteObject`] impl that
//! compiles its rules, and the protocols that carry it ([`RouteKinds::for_protocol`]).
//! Attachment to listeners, route status and bookkeeping are shared
//! (`Translator::attach_parents`).

use std::sync::Arc;

use weir_api::{Kind, ObjectKey, ParentReference, StatusRouteKind};
use weir_model::{HostMatch, L4Backend, Protocol, RouteRef, RouteRule};

use crate::compile::backend::{RefError, Resolved};
use crate::compile::order::{Age, RuleOrder};
use crate::store::{Dep, Store};

/// The API group of Gateway API routes and Gateways.
pub(crate) const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
/// The API group of experimental Gateway API kinds (XListenerSet).
pub(crate) const EXPERIMENTAL_GROUP: &str = "gateway.networking.x-k8s.io";

/// A Gateway API route kind (all in [`GATEWAY_GROUP`]).
///
/// Not to be confused with `weir_model::RouteKind`, which names where an IR rule came
/// from (an HTTPRoute or an Ingress) for ordering and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum RouteKind {
    /// HTTPRoute.
    Http,
    /// GRPCRoute.
    Grpc,
    /// TLSRoute.
    Tls,
    /// TCPRoute.
    Tcp,
    /// UDPRoute.
    Udp,
}

impl RouteKind {
    /// Every route kind, in the order listener status lists them.
    pub(crate) const ALL: [RouteKind; 5] = [
        RouteKind::Http,
        RouteKind::Grpc,
        RouteKind::Tls,
        RouteKind::Tcp,
        RouteKind::Udp,
    ];

    /// The `kind` as written in manifests.
    pub(crate) fn name(self) -> &'static str {
        match self {
            RouteKind::Http => "HTTPRoute",
            RouteKind::Grpc => "GRPCRoute",
            RouteKind::Tls => "TLSRoute",
            RouteKind::Tcp => "TCPRoute",
            RouteKind::Udp => "UDPRoute",
        }
    }

    /// The route kind named by `group`/`kind` (e.g. in `allowedRoutes.kinds`).
    pub(crate) fn from_group_kind(group: &str, kind: &str) -> Option<RouteKind> {
        if group != GATEWAY_GROUP {
            return None;
        }
        RouteKind::ALL.into_iter().find(|k| k.name() == kind)
    }

    /// What IR rules and L4 routes of this kind name as their origin.
    pub(crate) fn model(self) -> weir_model::RouteKind {
        match self {
            RouteKind::Http => weir_model::RouteKind::HttpRoute,
            RouteKind::Grpc => weir_model::RouteKind::GrpcRoute,
            RouteKind::Tls => weir_model::RouteKind::TlsRoute,
            RouteKind::Tcp => weir_model::RouteKind::TcpRoute,
            RouteKind::Udp => weir_model::RouteKind::UdpRoute,
        }
    }

    /// The route kind of objects of `kind`, if they are routes weir reads.
    pub(crate) fn of_object(kind: Kind) -> Option<RouteKind> {
        match kind {
            Kind::HttpRoute => Some(RouteKind::Http),
            Kind::GrpcRoute => Some(RouteKind::Grpc),
            Kind::TlsRoute => Some(RouteKind::Tls),
            Kind::TcpRoute => Some(RouteKind::Tcp),
            Kind::UdpRoute => Some(RouteKind::Udp),
            _ => None,
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of [`RouteKind`]s: what a listener accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct RouteKinds(u8);

impl RouteKinds {
    /// No kind.
    pub(crate) const NONE: RouteKinds = RouteKinds(0);

    /// The route kinds weir serves on a listener of `protocol` (when `allowedRoutes.kinds`
    /// is empty, a listener accepts all of them; otherwise only those it lists).
    pub(crate) fn for_protocol(protocol: Protocol) -> RouteKinds {
        match protocol {
            Protocol::Http | Protocol::Https => {
                RouteKinds::NONE.with(RouteKind::Http).with(RouteKind::Grpc)
            }
            Protocol::TlsPassthrough | Protocol::TlsTerminate => {
                RouteKinds::NONE.with(RouteKind::Tls)
            }
            Protocol::Tcp => RouteKinds::NONE.with(RouteKind::Tcp),
            Protocol::Udp => RouteKinds::NONE.with(RouteKind::Udp),
        }
    }

    /// This set plus `kind`.
    pub(crate) fn with(self, kind: RouteKind) -> RouteKinds {
        RouteKinds(self.0 | kind.bit())
    }

    /// Whether `kind` is in the set.
    pub(crate) fn contains(self, kind: RouteKind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// The kinds in the set, in [`RouteKind::ALL`] order.
    pub(crate) fn iter(self) -> impl Iterator<Item = RouteKind> {
        RouteKind::ALL
            .into_iter()
            .filter(move |k| self.contains(*k))
    }

    /// The set as listener status reports it (`supportedKinds`).
    pub(crate) fn to_status(self) -> Vec<StatusRouteKind> {
        self.iter()
            .map(|k| StatusRouteKind {
                group: GATEWAY_GROUP.into(),
                kind: k.name().into(),
            })
            .collect()
    }
}

/// An object that refers to another namespace, as a ReferenceGrant's `from` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Referrer {
    /// A Gateway (certificate refs).
    Gateway,
    /// A ListenerSet or an XListenerSet (certificate refs), by its kind.
    ListenerSet(Kind),
    /// A route (backend refs, mirrors).
    Route(RouteKind),
}

impl Referrer {
    /// The `from.group` a grant must name.
    pub(crate) fn group(self) -> &'static str {
        match self {
            Referrer::ListenerSet(k) => k.group(),
            Referrer::Gateway | Referrer::Route(_) => GATEWAY_GROUP,
        }
    }

    /// The `from.kind` a grant must name.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Referrer::Gateway => "Gateway",
            Referrer::ListenerSet(k) => k.name(),
            Referrer::Route(k) => k.name(),
        }
    }
}

/// What a route compiles to, independent of the listeners it attaches to. A route kind
/// that programs virtual-host rules fills `rules`; one that splices connections (TLSRoute,
/// TCPRoute) or relays datagrams (UDPRoute) fills `l4`.
#[derive(Default)]
pub(crate) struct CompiledRoute {
    /// `None` when the route has no hostnames (it takes the listener's).
    pub(crate) hostnames: Option<Vec<HostMatch>>,
    /// One entry per (rule × match), with its precedence.
    pub(crate) rules: Vec<(Arc<RuleOrder>, Arc<RouteRule>)>,
    /// Where an L4 route sends connections, programmed as one `L4Route` per host it
    /// attaches to.
    pub(crate) l4: Option<Arc<L4Target>>,
    /// Invalid fields (Accepted=False, UnsupportedValue); each names its field.
    pub(crate) problems: Vec<String>,
    /// Unusable references (ResolvedRefs=False).
    pub(crate) ref_errors: Vec<RefError>,
    /// Usable backend references.
    pub(crate) clusters: Vec<Resolved>,
    /// Objects the result depends on (besides parent Gateways).
    pub(crate) deps: Vec<Dep>,
    /// Rules with `sessionPersistence`: each becomes the implicit policy of that rule.
    pub(crate) sessions: Vec<(weir_model::RouteRef, weir_model::LoadBalancer)>,
}

/// The origin and weighted backends of an L4 route (the content of its `L4Route`
/// resources, whatever host they are keyed by).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct L4Target {
    pub(crate) route: RouteRef,
    pub(crate) backends: Vec<L4Backend>,
}

/// A route's `spec.hostnames` (`None` when empty: the route takes its listeners'); an
/// invalid entry is a problem and ignored.
pub(crate) fn route_hostnames(hostnames: &[String], out: &mut CompiledRoute) {
    if hostnames.is_empty() {
        return;
    }
    let mut hosts = Vec::new();
    for (i, h) in hostnames.iter().enumerate() {
        match HostMatch::parse(Some(h)) {
            Ok(HostMatch::ANY) | Err(_) => out.problems.push(format!(
                "spec.hostnames[{i}]: {h:?} is not a valid hostname; ignored"
            )),
            Ok(m) => {
                if !hosts.contains(&m) {
                    hosts.push(m)
                }
            }
        }
    }
    out.hostnames = Some(hosts);
}

/// A route object of one [`RouteKind`]: the only part of a route kind that is not shared.
pub(crate) trait RouteObject {
    /// The kind of these objects.
    const KIND: RouteKind;
    /// `metadata.generation`.
    fn generation(&self) -> Option<i64>;
    /// `spec.parentRefs`.
    fn parent_refs(&self) -> &[ParentReference];
    /// Compiles the route (stored under `key`, with precedence `age`).
    fn compile(&self, store: &Store, key: &ObjectKey, age: &Age) -> CompiledRoute;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_sets() {
        let http = RouteKinds::for_protocol(Protocol::Http);
        assert!(http.contains(RouteKind::Http) && !http.contains(RouteKind::Tcp));
        assert!(http.contains(RouteKind::Grpc));
        assert_eq!(RouteKind::of_object(Kind::GrpcRoute), Some(RouteKind::Grpc));
        assert_eq!(RouteKinds::NONE.iter().count(), 0);
        let s = RouteKinds::NONE.with(RouteKind::Udp).with(RouteKind::Grpc);
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            [RouteKind::Grpc, RouteKind::Udp]
        );
        assert_eq!(
            RouteKind::from_group_kind(GATEWAY_GROUP, "TLSRoute"),
            Some(RouteKind::Tls)
        );
        assert_eq!(RouteKind::from_group_kind("example.com", "HTTPRoute"), None);
        assert_eq!(RouteKind::from_group_kind(GATEWAY_GROUP, "Gateway"), None);
    }

    #[test]
    fn referrers() {
        assert_eq!(Referrer::Route(RouteKind::Grpc).kind(), "GRPCRoute");
        assert_eq!(
            Referrer::ListenerSet(Kind::XListenerSet).group(),
            EXPERIMENTAL_GROUP
        );
        assert_eq!(
            Referrer::ListenerSet(Kind::ListenerSet).group(),
            GATEWAY_GROUP
        );
        assert_eq!(
            Referrer::ListenerSet(Kind::ListenerSet).kind(),
            "ListenerSet"
        );
        assert_eq!(Referrer::Gateway.group(), GATEWAY_GROUP);
    }
}
