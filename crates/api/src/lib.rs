//! The Kubernetes-style objects weir reads, as plain serde types with the real field
//! names of Kubernetes and Gateway API v1, and the statuses weir reports for them.
//!
//! Both providers (files and the Kubernetes API) produce [`Object`]s from JSON-shaped
//! values with [`Object::from_value`]; the translator consumes them. Only the fields weir
//! uses are modelled; unknown fields are ignored, as the API server would keep them.

#![warn(missing_docs)]

mod core;
pub mod crd;
mod gateway;
mod grpcroute;
mod ingress;
mod l4route;
mod listenerset;
mod meta;
mod object;
mod status;
mod str_map;
mod weir;

pub use crate::core::{
    ConfigMap, EndpointConditions, EndpointPort, EndpointSlice, EndpointSliceEndpoint, Namespace,
    Secret, Service, ServicePort, ServiceSpec,
};
pub use crate::gateway::*;
pub use crate::grpcroute::{
    GrpcBackendRef, GrpcHeaderMatch, GrpcMethodMatch, GrpcRoute, GrpcRouteFilter, GrpcRouteMatch,
    GrpcRouteRule, GrpcRouteSpec,
};
pub use crate::ingress::*;
pub use crate::l4route::{
    L4BackendRef, L4RouteRule, TcpRoute, TcpRouteSpec, TlsRoute, TlsRouteSpec, UdpRoute,
    UdpRouteSpec,
};
pub use crate::listenerset::ListenerSet;
pub use crate::meta::{
    LabelSelector, LabelSelectorRequirement, MetaMap, ObjectMeta, ServerMeta, shared_str,
};
pub use crate::object::{InvalidObject, KeyParts, Kind, Object, ObjectKey};
pub use crate::status::*;
pub use crate::str_map::StrMap;
pub use crate::weir::{ACCESS_LOG_FIELD_NAMES, AccessLogPolicySpec, Ratio, TracingPolicySpec};
pub use crate::weir::{
    ApiKeyAuthSpec, Backend, BackendSpec, BasicAuthSpec, CircuitBreakerSpec, ClaimToHeader,
    DirectResponse, DirectResponseSpec, EndpointLimitsSpec, ExtAuthCacheSpec, ExtAuthSpec,
    GlobalRateLimitSpec, GrpcHealthCheckSpec, HeaderValue, HealthCheckSpec, HealthCheckType,
    HttpHealthCheckSpec, IpRulesSpec, JwksSpec, JwtAuthSpec, JwtProviderSpec,
    LocalConfigMapReference, LocalRateLimitSpec, LocalSecretReference, PolicyRetry,
    PolicyTargetReference, PolicyTimeouts, RateLimitFailMode, RateLimitKeySpec, RateLimitKeyType,
    RateLimitSpec, RateLimitUnit, RemoteJwksSpec, RequiredClaim, RetryOn, SecretKeyReference,
    TrafficPolicy, TrafficPolicySpec,
};
pub use crate::weir::{
    AuthorizationAction, AuthorizationClaimSpec, AuthorizationHeaderMatchType,
    AuthorizationHeaderSpec, AuthorizationRuleSpec, AuthorizationSpec, RequestLimitsSpec,
};
pub use crate::weir::{
    ConsistentHashSpec, HashCookieSpec, HashHeaderSpec, HashType, LoadBalancerSpec,
    LoadBalancerType, OutlierDetectionSpec,
};
