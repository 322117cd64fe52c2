//! weir's data plane: listeners, TLS by SNI, HTTP/1.1 and HTTP/2 routing and proxying,
//! TLS passthrough and TCP splicing, over immutable IR snapshots.

#![warn(missing_docs)]

mod balance;
mod batch;
mod breaker;
mod endpoints;
mod filters;
mod health;
mod hosts;
mod latency;
mod ring;
mod router;
mod sharded;
mod snapshot;
mod tls;
mod trace;

mod access_log;
mod admin;
mod affinity;
mod authority;
mod authz;
mod basic_auth;
mod body;
mod client_cert;
mod concurrency;
mod cors;
mod dataplane;
mod drain;
mod error;
mod ext_auth;
mod global_ratelimit;
mod h1;
mod h2_server;
mod h2_tls;
mod idle;
mod intercept;
mod jwks;
mod jwt;
mod l4;
mod limits;
mod listeners;
mod metrics;
mod mirror;
mod normalize;
mod outbound;
mod policy;
mod pool;
mod protocol;
mod proxy_protocol;
mod ratelimit;
mod retry;
mod same_site;
mod server;
pub mod status;
mod upgrade;
mod upstream;
mod upstream_tls;
mod workers;

pub use access_log::{AccessLogFields, AccessLogOutput, AccessLogSettings};
pub use admin::serve_admin;
pub use authority::{InvalidHost, canonical_host};
pub use basic_auth::{credentials as basic_credentials, verify as verify_htpasswd};
pub use dataplane::{ApplyReport, DataPlane, ProxyConfig, SnapshotBuild, StaleBuild};
pub use global_ratelimit::RedisSettings;
pub use jwt::MAX_TOKEN_LEN as MAX_JWT_LEN;

/// Why a certificate could not serve a handshake (its chain, its key, or a key that does
/// not belong to the leaf), as the data plane would find at the first handshake; `None`
/// when it can serve. `weir check` runs it on every TLS Secret.
pub fn certificate_problem(cert: &weir_model::Certificate) -> Option<String> {
    tls::parse(cert).err().map(|e| e.to_string())
}

/// Whether `token` passes `auth` (a provider's key verifies it and its claims pass the
/// provider's checks): the check of a `jwtAuth` policy without the headers. Public for
/// the `jwt` fuzz target.
pub fn verify_jwt(auth: &weir_model::JwtAuth, token: &str) -> bool {
    jwt::verify(auth, token).is_some()
}
/// Whether a gRPC health-check answer (one message frame, from the endpoint: untrusted
/// bytes) holds a `HealthCheckResponse` with status `SERVING`: what an active gRPC probe
/// decides on (the fuzz target `grpc_health`).
pub fn grpc_health_serving(frame: &[u8]) -> bool {
    health::serving(bytes::Bytes::copy_from_slice(frame))
}

/// The value of cookie `name` in a request's `Cookie` fields (client bytes), as the
/// cookie-hash balancer and `sessionPersistence` read it: public for the `cookie` fuzz
/// target.
pub fn request_cookie<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a [u8]> {
    affinity::cookie(headers, name)
}

/// What weir's HTTP/1.1 client reads from an upstream's bytes (untrusted): the response
/// head and its body, fed in pieces; public for the `h1_response` fuzz target.
pub use h1::parse::{
    Read as UpstreamRead, check_head_scan as check_upstream_head_scan,
    read as read_upstream_response,
};
pub use h1::server::{
    Field as RequestField, Parsed as ParsedRequest, RequestFraming, check_request_scan,
    parse_request,
};
pub use l4::{ClientHello, InvalidClientHello, MAX_HELLO, parse_client_hello};
pub use normalize::{InvalidPath, normalize_path};
pub use protocol::{Opening, judge_opening};
pub use proxy_protocol::{
    MAX_V1 as MAX_PROXY_V1, MAX_V2 as MAX_PROXY_V2, Parsed as ProxyHeader,
    parse as parse_proxy_header,
};
pub use snapshot::{Snapshot, SnapshotStats};
pub use trace::context::{TRACEPARENT_LEN, TraceParent, parse_traceparent};
pub use trace::{OtlpProtocol, TraceSettings};
