//! Gateway API L4 routes: TLSRoute (v1alpha2, v1alpha3, v1), TCPRoute and UDPRoute
//! (v1alpha2, v1). Only the fields weir uses; every served version shares this shape.

use serde::{Deserialize, Serialize};

use crate::gateway::ParentReference;
use crate::meta::ObjectMeta;

/// TLSRoute: TLS connections routed by SNI (passed through to the backend).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TlsRoute {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: TlsRouteSpec,
}

/// TLSRoute spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TlsRouteSpec {
    /// Gateways (and listeners) to attach to.
    pub parent_refs: Vec<ParentReference>,
    /// SNI hostnames (wildcards allowed); empty means the listener's.
    pub hostnames: Vec<String>,
    /// Rules (v1alpha3 and v1 allow one; v1alpha2 up to 16).
    pub rules: Vec<L4RouteRule>,
}

/// TCPRoute: every TCP connection of a listener to the route's backends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TcpRoute {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: TcpRouteSpec,
}

/// TCPRoute spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TcpRouteSpec {
    /// Gateways (and listeners) to attach to.
    pub parent_refs: Vec<ParentReference>,
    /// Rules.
    pub rules: Vec<L4RouteRule>,
}

/// UDPRoute: every datagram of a UDP listener to the route's backends (a client
/// address's datagrams form a session pinned to one backend endpoint).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UdpRoute {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: UdpRouteSpec,
}

/// UDPRoute spec. Its schema's bounds (1–16 rules, 1–16 backendRefs, weights, ports, a
/// port on every Service reference) are the API server's to enforce, and in standalone mode
/// `weir-validate`'s, from the same CRD schema.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UdpRouteSpec {
    /// Gateways (and listeners) to attach to.
    pub parent_refs: Vec<ParentReference>,
    /// Rules.
    pub rules: Vec<L4RouteRule>,
}

/// A TLSRoute, TCPRoute or UDPRoute rule: weighted backends, no matches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct L4RouteRule {
    /// Optional rule name.
    pub name: Option<String>,
    /// Backends.
    pub backend_refs: Vec<L4BackendRef>,
}

/// A backend reference of an L4 route: an object reference with a weight (no filters).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct L4BackendRef {
    /// Group; empty for core (Service).
    pub group: Option<String>,
    /// Kind; default `Service`.
    pub kind: Option<String>,
    /// Name.
    pub name: String,
    /// Namespace; default the route's (other namespaces need a ReferenceGrant).
    pub namespace: Option<String>,
    /// Service port (required for Services).
    pub port: Option<i32>,
    /// Weight; default 1.
    pub weight: Option<i32>,
}
