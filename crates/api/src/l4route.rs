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

/// UDPRoute spec. Read through [`UdpRouteSpec::check`], which refuses what the v1.6
/// CRD schema refuses, so `weir run` and `weir check` reject the same objects an API
/// server would.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default, try_from = "RawUdpRouteSpec")]
pub struct UdpRouteSpec {
    /// Gateways (and listeners) to attach to.
    pub parent_refs: Vec<ParentReference>,
    /// Rules.
    pub rules: Vec<L4RouteRule>,
}

/// [`UdpRouteSpec`] as written, before the schema checks.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawUdpRouteSpec {
    parent_refs: Vec<ParentReference>,
    rules: Option<Vec<L4RouteRule>>,
}

impl TryFrom<RawUdpRouteSpec> for UdpRouteSpec {
    type Error = String;

    fn try_from(raw: RawUdpRouteSpec) -> Result<Self, String> {
        let Some(rules) = raw.rules else {
            return Err("rules: required".into());
        };
        let spec = UdpRouteSpec {
            parent_refs: raw.parent_refs,
            rules,
        };
        spec.check()?;
        Ok(spec)
    }
}

impl UdpRouteSpec {
    /// The Gateway API v1.6 schema's bounds (the union of the served versions: v1 allows
    /// one rule, v1alpha2 up to 16; the version is not kept once read): 1–16 rules, each
    /// with 1–16 backendRefs, weights 0–1,000,000, ports 1–65535 and a port on every
    /// Service reference; at most 32 parentRefs.
    pub fn check(&self) -> Result<(), String> {
        if self.parent_refs.len() > 32 {
            return Err("parentRefs: at most 32".into());
        }
        for (i, p) in self.parent_refs.iter().enumerate() {
            if p.name.is_empty() {
                return Err(format!("parentRefs[{i}].name: required"));
            }
            if let Some(port) = p.port
                && !(1..=65535).contains(&port)
            {
                return Err(format!("parentRefs[{i}].port: {port} is not in 1-65535"));
            }
        }
        if self.rules.is_empty() || self.rules.len() > 16 {
            return Err(format!(
                "rules: {} rules; between 1 and 16 (1 in v1)",
                self.rules.len()
            ));
        }
        for (i, r) in self.rules.iter().enumerate() {
            if r.backend_refs.is_empty() || r.backend_refs.len() > 16 {
                return Err(format!(
                    "rules[{i}].backendRefs: {} backends; between 1 and 16",
                    r.backend_refs.len()
                ));
            }
            for (j, b) in r.backend_refs.iter().enumerate() {
                let f = format!("rules[{i}].backendRefs[{j}]");
                if b.name.is_empty() {
                    return Err(format!("{f}.name: required"));
                }
                if let Some(w) = b.weight
                    && !(0..=1_000_000).contains(&w)
                {
                    return Err(format!("{f}.weight: {w} is not in 0-1000000"));
                }
                match b.port {
                    Some(p) if !(1..=65535).contains(&p) => {
                        return Err(format!("{f}.port: {p} is not in 1-65535"));
                    }
                    None if b.group.as_deref().unwrap_or("").is_empty()
                        && b.kind.as_deref().unwrap_or("Service") == "Service" =>
                    {
                        return Err(format!("{f}.port: required for a Service"));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
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
