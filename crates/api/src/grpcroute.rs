//! Gateway API GRPCRoute (`gateway.networking.k8s.io/v1`). Only the fields weir uses.
//! Header modifiers, mirrors and extension references share HTTPRoute's types, as the
//! API does.

use serde::{Deserialize, Serialize};

use crate::gateway::{
    HttpHeaderFilter, HttpRequestMirrorFilter, LocalObjectReference, ParentReference,
};
use crate::meta::ObjectMeta;

/// GRPCRoute: gRPC requests routed by service, method and headers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcRoute {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: GrpcRouteSpec,
}

/// GRPCRoute spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcRouteSpec {
    /// Gateways (and listeners) to attach to.
    pub parent_refs: Vec<ParentReference>,
    /// Hostnames; empty means the listener's.
    pub hostnames: Vec<String>,
    /// Rules; empty means one rule matching every gRPC request, with no backends.
    pub rules: Vec<GrpcRouteRule>,
}

/// A GRPCRoute rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcRouteRule {
    /// Optional rule name.
    pub name: Option<String>,
    /// Matches (OR); empty matches every request.
    pub matches: Vec<GrpcRouteMatch>,
    /// Filters.
    pub filters: Vec<GrpcRouteFilter>,
    /// Backends.
    pub backend_refs: Vec<GrpcBackendRef>,
    /// Session persistence (experimental channel in Gateway API v1.6).
    pub session_persistence: Option<crate::gateway::SessionPersistence>,
}

/// A GRPCRoute match (AND of its conditions).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcRouteMatch {
    /// Service and method; absent matches every service and method.
    pub method: Option<GrpcMethodMatch>,
    /// Header conditions (AND).
    pub headers: Vec<GrpcHeaderMatch>,
}

/// A service/method condition: at least one of the two is set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcMethodMatch {
    /// `Exact` (default) or `RegularExpression`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Fully qualified service name (e.g. `pkg.Service`); absent or empty: any.
    pub service: Option<String>,
    /// Method name; absent or empty: any.
    pub method: Option<String>,
}

/// A header condition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcHeaderMatch {
    /// `Exact` (default) or `RegularExpression`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Header name (case-insensitive).
    pub name: String,
    /// Value.
    pub value: String,
}

/// A GRPCRoute filter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcRouteFilter {
    /// `RequestHeaderModifier`, `ResponseHeaderModifier`, `RequestMirror`,
    /// `ExtensionRef`.
    #[serde(rename = "type")]
    pub type_: String,
    /// For `RequestHeaderModifier`.
    pub request_header_modifier: Option<HttpHeaderFilter>,
    /// For `ResponseHeaderModifier`.
    pub response_header_modifier: Option<HttpHeaderFilter>,
    /// For `RequestMirror`.
    pub request_mirror: Option<HttpRequestMirrorFilter>,
    /// For `ExtensionRef` (weir: `DirectResponse`).
    pub extension_ref: Option<LocalObjectReference>,
}

/// A backend reference of a GRPCRoute rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcBackendRef {
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
    /// Per-backend filters.
    pub filters: Vec<GrpcRouteFilter>,
}
