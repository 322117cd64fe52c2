//! weir's intermediate representation (IR).
//!
//! The IR is what the translator produces and what a data plane consumes. It is made of
//! a few kinds of *resources*, each addressed by a [`ResourceKey`]:
//!
//! - [`Listener`]: a socket the data plane binds (address + port + protocol).
//! - [`VirtualHost`]: the ordered routing rules for one host pattern on one listener.
//! - [`Cluster`]: a set of upstream endpoints that rules forward to, by name.
//! - [`Certificate`]: a PEM certificate chain and key, addressed by its content hash.
//! - [`SniCert`]: which certificate a listener presents for one host pattern.
//! - [`L4Route`]: where a TLS passthrough or TCP listener splices the connections for one
//!   host pattern (SNI), and where a UDP listener sends its clients' datagrams.
//! - [`Policy`]: the settings (timeouts, retries, rate limit) attached to a Gateway, a
//!   route or one rule, looked up per request by a key derived from the request.
//!
//! Every resource is immutable once built and carries a [`ContentHash`] computed in its
//! constructor from its own fields and its children's hashes (a Merkle hash). Two values
//! with equal hashes are treated as equal: nothing is ever serialized to be compared.
//! Changes travel as [`Delta`]s (upsert or remove one resource) grouped in a
//! [`DeltaBatch`] that a data plane applies atomically.
//!
//! This crate has no I/O dependencies.

#![warn(missing_docs)]

mod authz;
mod backend_policy;
mod cluster;
mod cors;
mod ct_base64;
mod delta;
mod ext_auth;
mod hash;
mod host;
mod jwks;
mod l4;
mod listener;
mod listener_addrs;
mod observability;
mod policy;
mod request_limits;
mod route;
mod tls;
mod upstream_tls;

pub use authz::{Authorization, AuthzAction, AuthzHeader, AuthzRule, ClaimMatch};
pub use backend_policy::{
    CircuitBreaker, Ejection, GeneratedCookie, HashOn, HealthCheck, HealthProbe, Limits,
    LoadBalancer, OutlierDetection, SameSite, is_cookie_name, is_cookie_path,
};
pub use cluster::{Cluster, ClusterKey, Endpoint, EndpointAddr, UpstreamProtocol};
pub use cors::{Cors, CorsNames, CorsOrigin};
pub use delta::{Delta, DeltaBatch, Reference, Resource, ResourceKey};
pub use ext_auth::{ExtAuth, ExtAuthCache, ExtAuthUrl};
pub use hash::{ContentHash, content_hash};
pub use host::{HostKind, HostMatch, InvalidHostname};
pub use jwks::{MAX_JWKS_KEYS, read_jwks};
pub use l4::{L4Backend, L4Mode, L4Route};
pub use listener::{
    ClientValidation, ClientValidationMode, ConnectionLimits, ConnectionTimeouts, Listener,
    ListenerKey, ListenerSection, ListenerSettings, PathNormalization, Protocol, ProxyProtocol,
};
pub use observability::{
    ACCESS_LOG_FIELDS, AccessLogPolicy, InvalidAccessLogField, SAMPLING_SCALE, TracingPolicy,
    access_log_field_bits, access_log_field_names,
};
pub use policy::{
    ApiKeyAuth, BackendKind, BasicAuth, ConcurrencyLimit, FailMode, GlobalRateLimit, IpNet,
    IpRules, JwtAuth, JwtKey, JwtKeyMaterial, JwtProvider, LocalRateLimit, MAX_BCRYPT_COST,
    PasswordScheme, Policy, PolicyTarget, RateLimitKey, RemoteJwks,
};
pub use request_limits::RequestLimits;
pub use route::{
    Action, DirectResponse, Filter, HeaderMatch, HeaderModifier, InterceptErrors, PathMatch,
    PathRewrite, Pattern, QueryMatch, Redirect, RequestMatch, Retry, RouteKind, RouteRef,
    RouteRule, RuleTimeouts, StringMatch, Timeouts, VirtualHost, WeightedBackend,
};
pub use tls::{Certificate, KeyKind, PackedTls, SniCert};
pub use upstream_tls::{BackendTls, SubjectName, TrustAnchors, UpstreamTls};
