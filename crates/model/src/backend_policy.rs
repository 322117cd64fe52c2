//! Settings of policies on a Service or `Backend` ([`crate::PolicyTarget::Backend`]):
//! active health checks and circuit breaking. They belong to the endpoints, not to a
//! request, so the data plane applies them to every cluster built from the target,
//! whichever route or listener sends traffic there.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

/// An active health check: each endpoint is probed every `interval` (± `jitter`); after
/// `unhealthy_threshold` failed probes in a row it gets no traffic, after
/// `healthy_threshold` passed probes in a row it gets traffic again.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct HealthCheck {
    /// What one probe does.
    pub probe: HealthProbe,
    /// Time between the start of one probe and the next (before jitter).
    pub interval: Duration,
    /// A probe without an answer within this time failed.
    pub timeout: Duration,
    /// Each wait is `interval` plus a random time up to this, so that probers started
    /// together spread out.
    pub jitter: Duration,
    /// Passed probes in a row that make an unhealthy endpoint healthy (≥ 1).
    pub healthy_threshold: u32,
    /// Failed probes in a row that make a healthy endpoint unhealthy (≥ 1).
    pub unhealthy_threshold: u32,
}

/// What a probe checks.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum HealthProbe {
    /// An HTTP/1.1 `GET` of `path` (with `Host: host`, or the endpoint's address) that
    /// must answer one of `statuses`.
    Http {
        /// Request path (starts with `/`).
        path: Arc<str>,
        /// The `Host` header, if set.
        #[serde(skip_serializing_if = "Option::is_none")]
        host: Option<Arc<str>>,
        /// Inclusive status ranges that pass, sorted.
        statuses: Vec<(u16, u16)>,
    },
    /// A TCP connect.
    Tcp,
    /// A `grpc.health.v1.Health/Check` call over h2c that must answer `SERVING`.
    Grpc {
        /// The service name asked about (empty: the server as a whole).
        service: Arc<str>,
    },
}

impl HealthProbe {
    /// Whether an HTTP probe's `status` passes.
    pub fn passes(statuses: &[(u16, u16)], status: u16) -> bool {
        statuses.iter().any(|(a, b)| (*a..=*b).contains(&status))
    }
}

/// Admission limits of one cluster or one endpoint; `None` fields are unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Limits {
    /// Open upstream connections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Requests waiting for an upstream connection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pending_requests: Option<u32>,
    /// Requests sent whose response head has not arrived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u32>,
}

impl Limits {
    /// Whether it limits anything.
    pub fn is_set(&self) -> bool {
        self.max_connections.is_some()
            || self.max_pending_requests.is_some()
            || self.max_requests.is_some()
    }
}

/// Circuit breaking: a request over a limit is answered at once (503, with the limit
/// named), never queued.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct CircuitBreaker {
    /// Limits over all endpoints of a cluster.
    pub cluster: Limits,
    /// Limits of each endpoint.
    pub endpoint: Limits,
}

/// How the data plane chooses an endpoint of a cluster (a policy's `loadBalancer`).
/// Without one, the default balancer applies: smooth weighted round robin for one choice
/// and a random second choice, the one with fewer requests in flight taken. Every
/// algorithm passes over endpoints that outlier detection ejected or active health
/// checks found unhealthy (all of them: ignored, a chance rather than a certain 503).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum LoadBalancer {
    /// Smooth weighted round robin alone.
    RoundRobin,
    /// Two endpoints drawn at random in proportion to their weights; the one with fewer
    /// requests in flight is taken (power of two choices).
    LeastRequest,
    /// Two endpoints drawn as for `LeastRequest`; the one with the lower cost is taken:
    /// its peak-sensitive moving average of response time multiplied by its requests in
    /// flight plus one.
    LatencyAware,
    /// The endpoint owning a hash of the request on a consistent-hash ring (built once
    /// per cluster version); requests without the hashed value are balanced as by the
    /// default balancer.
    ConsistentHash(HashOn),
}

/// What a consistent hash is computed from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum HashOn {
    /// A request header's value (lowercase name).
    Header(Arc<str>),
    /// A cookie's value; generated when absent if `generate` says how.
    Cookie {
        /// The cookie's name.
        name: Arc<str>,
        /// When set, a request without the cookie gets a new random value (hashed to
        /// pick its endpoint) and the response sets it.
        #[serde(skip_serializing_if = "Option::is_none")]
        generate: Option<GeneratedCookie>,
    },
    /// The client's address (the peer, or through trusted proxies the client they name).
    SourceIp,
    /// A request header's value (lowercase name); a request without it gets a new random
    /// value, returned in the same response header for the client to send back (Gateway
    /// API `sessionPersistence` of type `Header`).
    GeneratedHeader(Arc<str>),
}

/// The attributes of a cookie weir sets for consistent hashing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GeneratedCookie {
    /// `Max-Age` (none: a session cookie).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<Duration>,
    /// `Path` (starts with `/`).
    pub path: Arc<str>,
    /// `SameSite` (none: the attribute is left out, the browser's default applies). Push
    /// protocol version 6.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same_site: Option<SameSite>,
    /// `Secure` on every response (ingress-nginx's `session-cookie-secure: "true"`).
    /// Without it the cookie is `Secure` when the request came over TLS, and with
    /// `SameSite=None`. Push protocol version 6.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub secure: bool,
}

/// Hashed as push protocol version 5 and earlier hash it (`ttl`, `path`), with
/// `same_site` and `secure` folded in only when set, so that a cookie without them keeps
/// the hash older releases compute.
impl std::hash::Hash for GeneratedCookie {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.ttl.hash(state);
        self.path.hash(state);
        if let Some(same_site) = &self.same_site {
            (3u32, same_site).hash(state);
        }
        if self.secure {
            5u32.hash(state);
        }
    }
}

/// The `SameSite` attribute of a generated cookie.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum SameSite {
    /// `SameSite=Strict`.
    Strict,
    /// `SameSite=Lax`.
    Lax,
    /// `SameSite=None`, always with `Secure` (browsers refuse `None` without it). With
    /// `unless_incompatible`, a client whose `User-Agent` names a browser known to
    /// mishandle `None` (some treat it as `Strict`, some refuse the cookie) gets the
    /// cookie without the attribute (ingress-nginx's
    /// `session-cookie-conditional-samesite-none`).
    None {
        /// Leave the attribute out for clients known not to support it.
        unless_incompatible: bool,
    },
}

impl LoadBalancer {
    /// The name of the algorithm (metric label, logs).
    pub fn name(&self) -> &'static str {
        match self {
            LoadBalancer::RoundRobin => "RoundRobin",
            LoadBalancer::LeastRequest => "LeastRequest",
            LoadBalancer::LatencyAware => "LatencyAware",
            LoadBalancer::ConsistentHash(_) => "ConsistentHash",
        }
    }
}

/// Whether `name` can be a cookie name (an HTTP token, RFC 6265 §4.1.1), checked by the
/// translator and by the wire decode alike.
pub fn is_cookie_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether `path` can be the `Path` of a generated cookie: starts with `/`, printable
/// ASCII without `;`.
pub fn is_cookie_path(path: &str) -> bool {
    path.starts_with('/')
        && path.len() <= 1024
        && path.bytes().all(|b| (0x21..0x7f).contains(&b) && b != b';')
}

/// Passive outlier detection and the panic threshold of a cluster (a policy's
/// `outlierDetection`). Without one, [`OutlierDetection::default`] applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct OutlierDetection {
    /// When endpoints are ejected; `None`: never (detection off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ejection: Option<Ejection>,
    /// When fewer than this percentage (0–100) of a cluster's endpoints are available
    /// (not ejected, not failing their health checks), the balancer uses all of them. 0:
    /// only when none is available.
    pub panic_threshold_percent: u32,
}

/// When an endpoint is ejected and for how long. Each threshold counts outcomes in a row
/// of the endpoint; 0 turns that trigger off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Ejection {
    /// 5xx answers, gateway errors and connect failures in a row (Envoy's
    /// `consecutive_5xx`); reset by an answer below 500.
    pub consecutive_5xx: u32,
    /// 502/503/504 answers, resets, timeouts and connect failures in a row; reset by any
    /// other answer.
    pub consecutive_gateway_errors: u32,
    /// Connect failures in a row (local-origin failures); reset by any answer.
    pub consecutive_local_origin_failures: u32,
    /// The first ejection's length; each ejection in a row doubles it.
    pub base_ejection: Duration,
    /// The longest ejection (at least `base_ejection`).
    pub max_ejection: Duration,
    /// At most this percentage (0–100) of a cluster's endpoints is ejected at once,
    /// rounded down; one endpoint of two or more may always be ejected.
    pub max_ejected_percent: u32,
}

impl Default for Ejection {
    /// weir's detection without any policy: 5 gateway errors in a row (as Envoy's
    /// `consecutive_5xx`, counting only the errors that say the endpoint is in trouble),
    /// ejections of 0.5 s doubling up to 2 s (short, so that without active health checks
    /// a recovered endpoint is back within 2 s; a still failing one costs one request per
    /// ejection), at most half of a cluster ejected.
    fn default() -> Self {
        Ejection {
            consecutive_5xx: 0,
            consecutive_gateway_errors: 5,
            consecutive_local_origin_failures: 0,
            base_ejection: Duration::from_millis(500),
            max_ejection: Duration::from_secs(2),
            max_ejected_percent: 50,
        }
    }
}

impl Default for OutlierDetection {
    /// Detection on with [`Ejection::default`], panic threshold 0.
    fn default() -> Self {
        OutlierDetection {
            ejection: Some(Ejection::default()),
            panic_threshold_percent: 0,
        }
    }
}
