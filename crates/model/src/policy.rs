//! Policies: settings attached to a Gateway, a route or one rule of a route, kept as
//! resources of their own and looked up by the data plane per request, so that editing
//! a policy that covers many routes is one delta.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::authz::Authorization;
use crate::backend_policy::{CircuitBreaker, HashOn, HealthCheck, LoadBalancer, OutlierDetection};
use crate::cluster::ClusterKey;
use crate::ext_auth::ExtAuth;
use crate::hash::{ContentHash, content_hash, eq_by_content_hash};
use crate::route::{Retry, RouteKind, RouteRef, Timeouts};

/// What a [`Policy`] applies to, as the data plane sees a request: every key is derived
/// from what the request already carries (its listener's Gateway, its rule's
/// [`RouteRef`]), so nothing else names a policy and attaching one changes no route.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum PolicyTarget {
    /// Every request on the listeners whose [`crate::Listener::gateway`] is this
    /// (`namespace/name`).
    Gateway(Arc<str>),
    /// Every rule of one route object.
    Route {
        /// Object kind.
        kind: RouteKind,
        /// Object namespace.
        namespace: Arc<str>,
        /// Object name.
        name: Arc<str>,
    },
    /// One rule of a route object (by its index, as in [`RouteRef::rule`]).
    Rule(RouteRef),
    /// Every cluster built from one Service or weir `Backend` (every port and protocol):
    /// the data plane derives it from a cluster's key ([`ClusterKey::backend_target`]),
    /// so the settings it carries (health checks, circuit breaking) apply to every route
    /// and listener that sends traffic there.
    Backend {
        /// Object kind.
        kind: BackendKind,
        /// Object namespace.
        namespace: Arc<str>,
        /// Object name.
        name: Arc<str>,
    },
    // Variants are only appended: the derived `Hash` writes the variant's index, which
    // every policy's content hash covers (older data planes check it).
    /// Every request one Gateway listener serves (a Gateway's by `sectionName`, or one
    /// of a ListenerSet's): the data plane finds it through the socket's
    /// [`crate::ListenerSection`] serving the request's host.
    Listener {
        /// The Gateway the listener belongs to, directly or through its ListenerSet
        /// (`namespace/name`, as [`crate::Listener::gateway`]).
        gateway: Arc<str>,
        /// The ListenerSet (`namespace/name`) the listener is part of; `None` for the
        /// Gateway's own listeners.
        set: Option<Arc<str>>,
        /// The listener's name.
        section: Arc<str>,
    },
    /// Every request on the listeners of one ListenerSet (attached to `gateway`).
    ListenerSet {
        /// The Gateway the set is attached to (`namespace/name`).
        gateway: Arc<str>,
        /// The ListenerSet (`namespace/name`).
        set: Arc<str>,
    },
}

/// The kinds of object a cluster is built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum BackendKind {
    /// A core `Service` (its EndpointSlices).
    Service,
    /// A weir.dev `Backend` (static endpoints).
    Backend,
}

impl ClusterKey {
    /// The Service port of a Service's cluster (`service/<ns>/<name>:<port>[/<suffix>]`).
    pub fn service_port(&self) -> Option<u16> {
        let rest = self.0.strip_prefix("service/")?;
        let (_, port) = rest.rsplit_once(':')?;
        let port = port.split('/').next()?;
        port.parse().ok()
    }

    /// The policy target of the Service or Backend this cluster was built from
    /// (`service/<ns>/<name>:<port>[/<suffix>]`, `backend/<ns>/<name>[/<suffix>]`, the
    /// keys the translator gives them); `None` for other clusters. Called once per
    /// cluster version, never per request.
    pub fn backend_target(&self) -> Option<PolicyTarget> {
        let (kind, rest) = if let Some(r) = self.0.strip_prefix("service/") {
            (BackendKind::Service, r)
        } else if let Some(r) = self.0.strip_prefix("backend/") {
            (BackendKind::Backend, r)
        } else {
            return None;
        };
        let (namespace, rest) = rest.split_once('/')?;
        let end = match kind {
            BackendKind::Service => rest.find(':')?,
            BackendKind::Backend => rest.find('/').unwrap_or(rest.len()),
        };
        let name = &rest[..end];
        if namespace.is_empty() || name.is_empty() {
            return None;
        }
        Some(PolicyTarget::Backend {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        })
    }
}

impl PolicyTarget {
    /// Whether this target is a listener or a ListenerSet (push protocol version 6).
    pub fn is_listener(&self) -> bool {
        matches!(
            self,
            PolicyTarget::Listener { .. } | PolicyTarget::ListenerSet { .. }
        )
    }

    /// The route-wide target of a rule's origin.
    pub fn route_of(r: &RouteRef) -> PolicyTarget {
        PolicyTarget::Route {
            kind: r.kind,
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        }
    }
}

impl std::fmt::Display for PolicyTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyTarget::Gateway(g) => write!(f, "gateway {g}"),
            PolicyTarget::Listener {
                gateway,
                set: None,
                section,
            } => write!(f, "gateway {gateway} listener {section}"),
            PolicyTarget::Listener {
                set: Some(set),
                section,
                ..
            } => write!(f, "listenerset {set} listener {section}"),
            PolicyTarget::ListenerSet { set, .. } => write!(f, "listenerset {set}"),
            PolicyTarget::Route {
                kind,
                namespace,
                name,
            } => write!(f, "{kind:?} {namespace}/{name}"),
            PolicyTarget::Rule(r) => {
                write!(f, "{:?} {}/{} rule {}", r.kind, r.namespace, r.name, r.rule)
            }
            PolicyTarget::Backend {
                kind,
                namespace,
                name,
            } => write!(f, "{kind:?} {namespace}/{name}"),
        }
    }
}

/// What a local rate limit counts requests by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum RateLimitKey {
    /// The client's IP address (one budget per client).
    ClientIp,
    /// The value of a request header (lower-case name); requests without it share one
    /// budget.
    Header(Arc<str>),
    /// Nothing: one budget for everything the policy's target serves.
    Target,
}

impl RateLimitKey {
    /// Whether `name` can be the header of [`RateLimitKey::Header`]: a non-empty HTTP
    /// token (RFC 9110 §5.1), checked by the translator and by the wire decode alike.
    pub fn is_header_name(name: &str) -> bool {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    }
}

/// A token bucket per key (GCRA): `requests` per `per` on average, at most `burst` at
/// once. A request over budget is answered `429` with `Retry-After`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct LocalRateLimit {
    /// Requests allowed per `per`.
    pub requests: u32,
    /// The window the rate is expressed in (one second, minute or hour).
    pub per: Duration,
    /// Requests allowed at once after an idle period (≥ 1).
    pub burst: u32,
    /// What one budget is kept for.
    pub key: RateLimitKey,
}

impl LocalRateLimit {
    /// The time one request's token takes to come back.
    pub fn interval(&self) -> Duration {
        self.per / self.requests.max(1)
    }
}

/// What a global rate limit does while its counters cannot be read or written (Redis
/// unreachable, or no Redis configured on the data plane).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum FailMode {
    /// Admit every request (the limit is off until Redis is back).
    Open,
    /// Refuse every request (`503`, naming the policy).
    Closed,
}

/// A limit shared by every data plane that reads the same Redis: at most `requests` per
/// `window` per key, over a sliding window (the previous fixed window's count weighted
/// by how much of it still overlaps, plus the current one's). Data planes count locally
/// and add their counts to Redis in batches, so the limit holds to within what the
/// data planes admit between two batches.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct GlobalRateLimit {
    /// Requests allowed per `window`.
    pub requests: u32,
    /// The window (one second, minute or hour).
    pub window: Duration,
    /// What one budget is kept for.
    pub key: RateLimitKey,
    /// What happens while Redis cannot be reached.
    pub fail_mode: FailMode,
}

/// API key authentication: a request must carry, in `header`, a key whose SHA-256 digest
/// is one of `keys` (the keys themselves are not kept: configuration dumps and the wire
/// carry digests only).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ApiKeyAuth {
    /// The request header carrying the key (lowercase).
    pub header: Arc<str>,
    /// The keys' digests with the client each identifies, sorted by digest, no duplicates.
    pub keys: Vec<([u8; 32], Arc<str>)>,
    /// Whether the key header is forwarded to the backend.
    pub forward_key: bool,
}

impl ApiKeyAuth {
    /// Builds it; sorts the keys by digest and keeps the first client of a digest.
    pub fn new(header: Arc<str>, mut keys: Vec<([u8; 32], Arc<str>)>, forward_key: bool) -> Self {
        keys.sort_by_key(|k| k.0);
        keys.dedup_by(|b, a| a.0 == b.0);
        ApiKeyAuth {
            header,
            keys,
            forward_key,
        }
    }

    /// The client a key digest identifies.
    pub fn client(&self, digest: &[u8; 32]) -> Option<&Arc<str>> {
        self.keys
            .binary_search_by(|(d, _)| d.cmp(digest))
            .ok()
            .map(|i| &self.keys[i].1)
    }
}

/// Basic authentication: a request must carry `Authorization: Basic` credentials of one
/// of `users`, checked against its htpasswd hash (bcrypt, apr1 or `{SHA}`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BasicAuth {
    /// The realm named in `WWW-Authenticate`.
    pub realm: Arc<str>,
    /// (user, htpasswd hash), sorted by user, no duplicates.
    pub users: Vec<(Arc<str>, Arc<str>)>,
}

impl BasicAuth {
    /// Builds it; sorts the users and keeps the first entry of a user.
    pub fn new(realm: Arc<str>, mut users: Vec<(Arc<str>, Arc<str>)>) -> Self {
        users.sort_by(|a, b| a.0.cmp(&b.0));
        users.dedup_by(|b, a| a.0 == b.0);
        BasicAuth { realm, users }
    }

    /// The stored hash of `user`.
    pub fn hash_of(&self, user: &str) -> Option<&Arc<str>> {
        self.users
            .binary_search_by(|(u, _)| (**u).cmp(user))
            .ok()
            .map(|i| &self.users[i].1)
    }
}

/// JWT authentication: a request must carry `Authorization: Bearer <token>` with a
/// token that one of `providers` verifies.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct JwtAuth {
    /// Token issuers, tried in order (those whose `issuer` matches the token's `iss`
    /// first).
    pub providers: Vec<JwtProvider>,
    /// Whether the `Authorization` header is forwarded once verified.
    pub forward_token: bool,
}

/// One token issuer: its public keys and what its tokens must claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JwtProvider {
    /// Its name.
    pub name: Arc<str>,
    /// The `iss` a token must carry, if set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<Arc<str>>,
    /// The token's `aud` must name one of these, if any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<Arc<str>>,
    /// Its public keys.
    pub keys: Vec<JwtKey>,
    /// (claim, accepted values — any when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub required_claims: Vec<(Arc<str>, Vec<Arc<str>>)>,
    /// (claim, request header, lowercase).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub claims_to_headers: Vec<(Arc<str>, Arc<str>)>,
    /// Keys fetched by the data plane from a URL instead of `keys` (push protocol
    /// version 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_jwks: Option<Arc<RemoteJwks>>,
}

/// By hand, as the derive of the release before `remote_jwks` hashed it (field by field,
/// in order), plus `remote_jwks` only when set: a provider without it keeps the hash
/// data planes of earlier releases compute (`Policy::rehash`).
impl std::hash::Hash for JwtProvider {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.name.hash(h);
        self.issuer.hash(h);
        self.audiences.hash(h);
        self.keys.hash(h);
        self.required_claims.hash(h);
        self.claims_to_headers.hash(h);
        if let Some(r) = &self.remote_jwks {
            r.hash(h);
        }
    }
}

/// A JWK Set the data plane fetches over HTTPS in the background, refreshes every
/// `refresh` (and sooner, rate-limited, for a token naming an unknown `kid`), and keeps
/// when a fetch fails.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct RemoteJwks {
    /// Where the set is fetched (`https`).
    pub url: crate::ExtAuthUrl,
    /// Time between fetches.
    pub refresh: Duration,
    /// How long one fetch may take.
    pub timeout: Duration,
    /// Extra trusted CA certificates (PEM), besides the system's roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_pem: Option<Arc<str>>,
}

/// A public key of a JWK Set.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JwtKey {
    /// Its `kid`: a token naming a `kid` is checked against the keys with that `kid`.
    pub kid: Option<Arc<str>>,
    /// Its `alg`, when the JWK names one: the only algorithm it verifies.
    pub alg: Option<Arc<str>>,
    /// The key.
    pub material: JwtKeyMaterial,
}

/// The public part of a signing key, as a JWK carries it (decoded from base64url).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum JwtKeyMaterial {
    /// RSA (RS256/384/512, PS256/384/512): modulus and exponent, big-endian.
    Rsa {
        /// Modulus.
        n: Arc<[u8]>,
        /// Public exponent.
        e: Arc<[u8]>,
    },
    /// ECDSA P-256 (ES256): the uncompressed point `04 || x || y`.
    EcP256(Arc<[u8]>),
    /// ECDSA P-384 (ES384): the uncompressed point.
    EcP384(Arc<[u8]>),
    /// Ed25519 (EdDSA): the 32-byte public key.
    Ed25519(Arc<[u8]>),
}

impl JwtKeyMaterial {
    /// Whether a token signed with `alg` (its JOSE name) may be checked with this key.
    pub fn verifies(&self, alg: &str) -> bool {
        match self {
            JwtKeyMaterial::Rsa { .. } => matches!(
                alg,
                "RS256" | "RS384" | "RS512" | "PS256" | "PS384" | "PS512"
            ),
            JwtKeyMaterial::EcP256(_) => alg == "ES256",
            JwtKeyMaterial::EcP384(_) => alg == "ES384",
            JwtKeyMaterial::Ed25519(_) => alg == "EdDSA",
        }
    }

    fn kind(&self) -> (&'static str, usize) {
        match self {
            JwtKeyMaterial::Rsa { n, .. } => ("RSA", n.len() * 8),
            JwtKeyMaterial::EcP256(_) => ("EC P-256", 256),
            JwtKeyMaterial::EcP384(_) => ("EC P-384", 384),
            JwtKeyMaterial::Ed25519(_) => ("Ed25519", 256),
        }
    }
}

impl Serialize for JwtKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let (kind, bits) = self.material.kind();
        let mut st = s.serialize_struct("JwtKey", 4)?;
        st.serialize_field("kid", &self.kid.as_deref())?;
        st.serialize_field("alg", &self.alg.as_deref())?;
        st.serialize_field("kind", kind)?;
        st.serialize_field("bits", &bits)?;
        st.end()
    }
}

/// A network: an address and a prefix length (`10.0.0.0/8`); the address has no bits
/// set past the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpNet {
    addr: std::net::IpAddr,
    prefix: u8,
}

impl IpNet {
    /// Parses `addr/prefix` or a lone address (a host network). Bits past the prefix
    /// must be zero (`10.0.0.1/8` is refused: it is usually a mistake).
    pub fn parse(s: &str) -> Result<IpNet, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: std::net::IpAddr = a
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or CIDR"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to {max}"))?,
        };
        let net = IpNet { addr, prefix };
        if net.masked(addr) != bits(addr) {
            return Err(format!("{s:?} has bits set past its prefix length"));
        }
        Ok(net)
    }

    fn masked(&self, ip: std::net::IpAddr) -> u128 {
        let width: u32 = if ip.is_ipv4() { 32 } else { 128 };
        let host_bits = width - u32::from(self.prefix).min(width);
        let mask = if host_bits >= 128 {
            0
        } else {
            u128::MAX << host_bits
        };
        bits(ip) & mask
    }

    /// Whether `ip` is in the network (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
            v4 => v4,
        };
        ip.is_ipv4() == self.addr.is_ipv4() && self.masked(ip) == bits(self.addr)
    }
}

fn bits(ip: std::net::IpAddr) -> u128 {
    match ip {
        std::net::IpAddr::V4(a) => u128::from(u32::from(a)),
        std::net::IpAddr::V6(a) => u128::from(a),
    }
}

impl std::fmt::Display for IpNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Serialize for IpNet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Client address rules: `deny` wins; a non-empty `allow` admits only its networks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct IpRules {
    /// Only these networks (empty: any not denied).
    pub allow: Vec<IpNet>,
    /// Never these networks.
    pub deny: Vec<IpNet>,
}

impl IpRules {
    /// Rules that refuse every client (what an unusable list fails closed to).
    pub fn deny_all() -> IpRules {
        let any = |addr: std::net::IpAddr| IpNet { addr, prefix: 0 };
        IpRules {
            allow: Vec::new(),
            deny: vec![
                any(std::net::Ipv4Addr::UNSPECIFIED.into()),
                any(std::net::Ipv6Addr::UNSPECIFIED.into()),
            ],
        }
    }

    /// Whether a client at `ip` may send requests.
    pub fn admits(&self, ip: std::net::IpAddr) -> bool {
        !self.deny.iter().any(|n| n.contains(ip))
            && (self.allow.is_empty() || self.allow.iter().any(|n| n.contains(ip)))
    }
}

/// The htpasswd hash schemes weir checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PasswordScheme {
    /// `$2a$`, `$2b$`, `$2y$` (60 characters).
    Bcrypt,
    /// `$apr1$` (Apache's MD5 crypt, what `htpasswd` writes by default).
    Apr1,
    /// `{SHA}` (base64 of SHA-1).
    Sha1,
}

/// The highest bcrypt cost accepted: each check costs 2^cost rounds, and a cost above 12
/// (hundreds of milliseconds per uncached check) would let clients tie up the checkers.
pub const MAX_BCRYPT_COST: u32 = 12;

impl PasswordScheme {
    /// The scheme of an htpasswd hash weir checks, or why it does not.
    pub fn check(hash: &str) -> Result<PasswordScheme, String> {
        match PasswordScheme::of(hash) {
            Some(PasswordScheme::Bcrypt) => {
                let cost = hash.get(4..6).and_then(|c| c.parse::<u32>().ok());
                if cost.is_none_or(|c| c > MAX_BCRYPT_COST) {
                    return Err(format!("bcrypt cost above {MAX_BCRYPT_COST}"));
                }
                Ok(PasswordScheme::Bcrypt)
            }
            Some(s) => Ok(s),
            None => {
                Err("unsupported hash (weir checks bcrypt, apr1 and {SHA}: htpasswd -B)".into())
            }
        }
    }

    /// The scheme of an htpasswd hash, if weir checks it.
    pub fn of(hash: &str) -> Option<PasswordScheme> {
        if ["$2a$", "$2b$", "$2y$"].iter().any(|p| hash.starts_with(p)) && hash.len() == 60 {
            Some(PasswordScheme::Bcrypt)
        } else if hash.starts_with("$apr1$") {
            Some(PasswordScheme::Apr1)
        } else if hash.starts_with("{SHA}") {
            Some(PasswordScheme::Sha1)
        } else {
            None
        }
    }
}

/// Dumps show the realm and the users, never hashes.
impl Serialize for BasicAuth {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let users: Vec<&str> = self.users.iter().map(|(u, _)| &**u).collect();
        let mut st = s.serialize_struct("BasicAuth", 2)?;
        st.serialize_field("realm", &*self.realm)?;
        st.serialize_field("users", &users)?;
        st.end()
    }
}

/// Dumps show the header and the clients, never digests.
impl Serialize for ApiKeyAuth {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut clients: Vec<&str> = self.keys.iter().map(|(_, c)| &**c).collect();
        clients.sort_unstable();
        let mut st = s.serialize_struct("ApiKeyAuth", 3)?;
        st.serialize_field("header", &*self.header)?;
        st.serialize_field("clients", &clients)?;
        st.serialize_field("forward_key", &self.forward_key)?;
        st.end()
    }
}

/// The settings every policy object attached to one target contributes, merged field by
/// field (of several policies on one target, the oldest sets a field). The data plane
/// resolves a request's settings from the most specific target that sets each field:
/// rule, then route, then Gateway; a route's own `timeouts` and `retry` fields win over
/// every policy.
#[derive(Clone, Debug, Serialize)]
pub struct Policy {
    /// What it applies to (its key).
    pub target: PolicyTarget,
    /// Request and per-attempt timeouts (`None` fields: not set here).
    #[serde(skip_serializing_if = "timeouts_unset")]
    pub timeouts: Timeouts,
    /// Retries of failed attempts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
    /// A local rate limit, and the policy object (`namespace/name`) that set it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<(Arc<str>, LocalRateLimit)>,
    /// API key authentication, and the policy object (`namespace/name`) that set it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_auth: Option<(Arc<str>, Arc<ApiKeyAuth>)>,
    /// Basic authentication, and the policy object (`namespace/name`) that set it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<(Arc<str>, Arc<BasicAuth>)>,
    /// Client address rules, and the policy object (`namespace/name`) that set them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_rules: Option<(Arc<str>, Arc<IpRules>)>,
    /// JWT authentication, and the policy object (`namespace/name`) that set it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwt_auth: Option<(Arc<str>, Arc<JwtAuth>)>,
    /// An active health check of the endpoints (on a [`PolicyTarget::Backend`] only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_check: Option<Arc<HealthCheck>>,
    /// Admission limits (on a [`PolicyTarget::Backend`] only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub circuit_breaker: Option<CircuitBreaker>,
    /// External authorization, and the policy object (`namespace/name`) that set it
    /// (push protocol version 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ext_auth: Option<(Arc<str>, Arc<ExtAuth>)>,
    /// How an endpoint is chosen (on a [`PolicyTarget::Backend`] only; push protocol
    /// version 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancer>,
    /// A global (Redis-backed) rate limit, and the policy object (`namespace/name`) that
    /// set it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global_rate_limit: Option<(Arc<str>, GlobalRateLimit)>,
    /// Authorization rules, and the policy object (`namespace/name`) that set them (push
    /// protocol version 3; an access guard).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization: Option<(Arc<str>, Arc<Authorization>)>,
    /// CORS for the rules without a CORS filter of their own, and the policy object
    /// (`namespace/name`) that set it (push protocol version 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cors: Option<(Arc<str>, Arc<crate::Cors>)>,
    /// Request size limits, and the policy object (`namespace/name`) that set them (push
    /// protocol version 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_limits: Option<(Arc<str>, crate::RequestLimits)>,
    /// How many requests of one client address may be in progress at once, and the
    /// policy object (`namespace/name`) that set it (push protocol version 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency_limit: Option<(Arc<str>, ConcurrencyLimit)>,
    /// Passive outlier detection and the panic threshold (on a [`PolicyTarget::Backend`]
    /// only; push protocol version 4). Without it, [`OutlierDetection::default`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outlier_detection: Option<OutlierDetection>,
    /// TLS towards the endpoints, per Service port (BackendTLSPolicy; on a
    /// [`PolicyTarget::Backend`] only; push protocol version 4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_tls: Option<Arc<crate::BackendTls>>,
    /// The client certificate presented to backends that ask for one (a Gateway's
    /// `spec.tls.backend.clientCertificateRef`; on a [`PolicyTarget::Gateway`] only; push
    /// protocol version 4).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "cert_hash")]
    pub client_certificate: Option<Arc<crate::Certificate>>,
    /// Access-log settings of the requests it covers, and the policy object
    /// (`namespace/name`) that set them (push protocol version 5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_log: Option<(Arc<str>, crate::AccessLogPolicy)>,
    /// Trace settings of the requests it covers, and the policy object (`namespace/name`)
    /// that set them (push protocol version 5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracing: Option<(Arc<str>, crate::TracingPolicy)>,
    hash: ContentHash,
}

fn cert_hash<S: serde::Serializer>(
    c: &Option<Arc<crate::Certificate>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match c {
        Some(c) => s.serialize_str(&format!("{:016x}", c.hash().0)),
        None => s.serialize_none(),
    }
}

/// A bound on the requests of one client address in progress at once (ingress-nginx's
/// `limit-connections`, nginx's `limit_conn` keyed by the client address): a request
/// over it is answered 503. A request is in progress from its checks until its response
/// has been sent whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ConcurrencyLimit {
    /// The most requests of one client address at once (at least 1).
    pub per_client: u32,
}
eq_by_content_hash!(Policy);

fn timeouts_unset(t: &Timeouts) -> bool {
    !t.is_set() && t.backend_send.is_none()
}

impl Policy {
    /// Builds a policy and computes its content hash.
    pub fn new(
        target: PolicyTarget,
        timeouts: Timeouts,
        retry: Option<Retry>,
        rate_limit: Option<(Arc<str>, LocalRateLimit)>,
    ) -> Self {
        let mut p = Policy {
            target,
            timeouts,
            retry,
            rate_limit,
            api_key_auth: None,
            basic_auth: None,
            ip_rules: None,
            jwt_auth: None,
            health_check: None,
            circuit_breaker: None,
            ext_auth: None,
            load_balancer: None,
            global_rate_limit: None,
            authorization: None,
            cors: None,
            request_limits: None,
            concurrency_limit: None,
            outlier_detection: None,
            backend_tls: None,
            client_certificate: None,
            access_log: None,
            tracing: None,
            hash: ContentHash(0),
        };
        p.rehash();
        p
    }

    /// The content hash. A data plane checks it against the hash the controller sent, so
    /// a policy must hash alike in every release that can read it: the fields of push
    /// protocol version 1 are hashed as that release does (`jwt_auth` included when
    /// unset), and each field added since must be folded in only when set, so that a
    /// policy without it keeps its version-1 hash. Version 0 hashed fewer fields; a
    /// version-0 data plane is sent [`Policy::as_version_0`].
    fn rehash(&mut self) {
        let v1 = (
            &self.target,
            &self.timeouts,
            &self.retry,
            &self.rate_limit,
            &self.api_key_auth,
            &self.basic_auth,
            &self.ip_rules,
            &self.jwt_auth,
        );
        // Added after version 1: folded in only when set. They are only ever set on a
        // `PolicyTarget::Backend` policy, which no earlier release can decode anyway.
        let v2 = match (&self.health_check, &self.circuit_breaker) {
            (None, None) => content_hash(&v1),
            (health_check, circuit_breaker) => content_hash(&(v1, health_check, circuit_breaker)),
        };
        // Added in version 3, each folded in only when set (over the version-2 hash).
        let v3 = match &self.ext_auth {
            None => v2,
            Some(ext_auth) => content_hash(&(v2, ext_auth)),
        };
        let v3 = match &self.load_balancer {
            None => v3,
            Some(lb) => content_hash(&(v3, 11u32, lb)),
        };
        let v3 = match &self.global_rate_limit {
            None => v3,
            Some(global) => content_hash(&(v3.0, global)),
        };
        // Each tagged with its wire field number, so that two fields of equal content
        // cannot hash alike.
        let v3 = match &self.authorization {
            None => v3,
            Some(authorization) => content_hash(&(v3.0, 14u32, authorization)),
        };
        let v3 = match &self.cors {
            None => v3,
            Some(cors) => content_hash(&(v3.0, 15u32, cors)),
        };
        let v3 = match &self.request_limits {
            None => v3,
            Some(limits) => content_hash(&(v3.0, 16u32, limits)),
        };
        let v3 = match &self.concurrency_limit {
            None => v3,
            Some(limit) => content_hash(&(v3.0, 19u32, limit)),
        };
        // Added in version 4, each folded in only when set (over the version-3 hash) and
        // tagged with its wire field number.
        let v4 = match &self.outlier_detection {
            None => v3,
            Some(outlier) => content_hash(&(v3.0, 20u32, outlier)),
        };
        let v4 = match &self.backend_tls {
            None => v4,
            Some(tls) => content_hash(&(v4.0, 21u32, tls)),
        };
        let v4 = match &self.client_certificate {
            None => v4,
            Some(cert) => content_hash(&(v4.0, 22u32, cert.hash().0)),
        };
        // Added in version 5, each folded in only when set (over the version-4 hash) and
        // tagged with its wire field number.
        let v5 = match &self.access_log {
            None => v4,
            Some(log) => content_hash(&(v4.0, 17u32, log)),
        };
        self.hash = match &self.tracing {
            None => v5,
            Some(tracing) => content_hash(&(v5.0, 18u32, tracing)),
        };
    }

    /// The policy as a data plane of push protocol version 4 or older rebuilds it: without
    /// the fields added in version 5, so with the hash those releases compute
    /// (`weir_xds::convert::for_version` applies the older strippings after it). Fields
    /// added in version 5: `access_log` (field 17) and `tracing` (field 18). Neither
    /// guards access: an older data plane logs and traces the requests as its flags say.
    pub fn as_version_4(mut self) -> Self {
        if self.access_log.is_some() || self.tracing.is_some() {
            self.access_log = None;
            self.tracing = None;
            self.rehash();
        }
        self
    }

    /// The policy as a data plane of push protocol version 5 or older rebuilds it: without
    /// the settings added in version 6, so with the hash those releases compute
    /// (`weir_xds::convert::for_version` applies the older strippings after it). Added in
    /// version 6, inside fields older releases know: `timeouts.backend_send` and the
    /// `SameSite` and `Secure` of a generated affinity cookie (`load_balancer`). None
    /// guards access: an older data plane bounds sending by the attempt's timeout alone
    /// and sets the cookie without the attributes.
    pub fn as_version_5(mut self) -> Self {
        if self.has_version_6_settings() {
            self.timeouts.backend_send = None;
            if let Some(LoadBalancer::ConsistentHash(HashOn::Cookie {
                generate: Some(g), ..
            })) = &mut self.load_balancer
            {
                g.same_site = None;
                g.secure = false;
            }
            self.rehash();
        }
        self
    }

    /// Whether the policy has a setting a data plane of push protocol version 5 or older
    /// does not know ([`Policy::as_version_5`]).
    pub fn has_version_6_settings(&self) -> bool {
        self.timeouts.backend_send.is_some()
            || matches!(
                &self.load_balancer,
                Some(LoadBalancer::ConsistentHash(HashOn::Cookie {
                    generate: Some(g),
                    ..
                })) if g.same_site.is_some() || g.secure
            )
    }

    /// This policy with access-log settings.
    pub fn with_access_log(mut self, log: Option<(Arc<str>, crate::AccessLogPolicy)>) -> Self {
        self.access_log = log;
        self.rehash();
        self
    }

    /// This policy with trace settings.
    pub fn with_tracing(mut self, tracing: Option<(Arc<str>, crate::TracingPolicy)>) -> Self {
        self.tracing = tracing;
        self.rehash();
        self
    }

    /// The policy as a data plane of push protocol version 3 or older rebuilds it: without
    /// the fields added in version 4, so with the hash those releases compute (the caller,
    /// `weir_xds::convert::for_version`, applies [`Policy::as_version_2`] after it for a
    /// data plane older still). Fields added in version 4: `outlier_detection` (field 20;
    /// not an access guard: an older data plane keeps its default detection),
    /// `backend_tls` (field 21) and `client_certificate` (field 22). Neither of the last two
    /// guards access on the client side; an older data plane that loses `backend_tls`
    /// would speak plaintext to a TLS port, which fails (the backend refuses it) rather
    /// than exposing anything, and one that loses `client_certificate` is refused by
    /// backends that require one. Also `ext_auth.ca_pem`: without it the authorization
    /// service's private CA is not trusted, its handshake fails and requests are refused
    /// (`status_on_error`) unless the policy fails open.
    pub fn as_version_3(mut self) -> Self {
        if self.outlier_detection.is_some() {
            self.outlier_detection = None;
            self.rehash();
        }
        if self.backend_tls.is_some() {
            self.backend_tls = None;
            self.rehash();
        }
        if self.client_certificate.is_some() {
            self.client_certificate = None;
            self.rehash();
        }
        if let Some((by, ext)) = &self.ext_auth
            && ext.ca_pem.is_some()
        {
            let mut ext = (**ext).clone();
            ext.ca_pem = None;
            self.ext_auth = Some((by.clone(), Arc::new(ext)));
            self.rehash();
        }
        self
    }

    /// This policy with upstream TLS settings per Service port.
    pub fn with_backend_tls(mut self, tls: Option<Arc<crate::BackendTls>>) -> Self {
        self.backend_tls = tls;
        self.rehash();
        self
    }

    /// This policy with the client certificate presented to backends.
    pub fn with_client_certificate(mut self, cert: Option<Arc<crate::Certificate>>) -> Self {
        self.client_certificate = cert;
        self.rehash();
        self
    }

    /// The policy as a data plane of push protocol version 2 or older rebuilds it: without
    /// the fields added in version 3, so with the hash those releases compute. A field that
    /// guards access (authentication, authorization) must not simply vanish — the routes it
    /// guards would be served unchecked — so the caller (`weir_xds::convert::for_version`)
    /// replaces such a policy by one that refuses every client first. Fields added in
    /// version 3, each folded into the hash only when set: `retry.replay_body` and
    /// `retry.non_idempotent` (see [`crate::Retry::as_version_2`]), `ext_auth`, a JWT
    /// provider's `remote_jwks` (hashed by [`JwtProvider`]'s own `Hash` only when set),
    /// `load_balancer` (field 11; not an access guard: an older data plane balances by its
    /// default) and `global_rate_limit` (not an access guard either: an older data plane
    /// serves the routes without the global limit; any local limit still applies) and
    /// `authorization` (field 14, an access guard) and `cors` (field 15, not one: an older
    /// data plane answers without CORS headers, which browsers then refuse) and
    /// `request_limits` (field 16, not one either: an older data plane serves requests of
    /// any size up to the listener's limits) and `concurrency_limit` (field 19, not one:
    /// an older data plane serves a client's requests without the bound).
    pub fn as_version_2(mut self) -> Self {
        if let Some(r) = self.retry.take() {
            self.retry = Some(r.as_version_2());
            self.rehash();
        }
        if self.ext_auth.is_some() {
            self.ext_auth = None;
            self.rehash();
        }
        if self.load_balancer.is_some() {
            self.load_balancer = None;
            self.rehash();
        }
        if self.global_rate_limit.is_some() {
            self.global_rate_limit = None;
            self.rehash();
        }
        if self.authorization.is_some() {
            self.authorization = None;
            self.rehash();
        }
        if self.cors.is_some() {
            self.cors = None;
            self.rehash();
        }
        if self.request_limits.is_some() {
            self.request_limits = None;
            self.rehash();
        }
        if self.concurrency_limit.is_some() {
            self.concurrency_limit = None;
            self.rehash();
        }
        if let Some((name, jwt)) = &self.jwt_auth
            && jwt.providers.iter().any(|p| p.remote_jwks.is_some())
        {
            let mut jwt = JwtAuth::clone(jwt);
            for p in &mut jwt.providers {
                p.remote_jwks = None;
            }
            self.jwt_auth = Some((name.clone(), Arc::new(jwt)));
            self.rehash();
        }
        self
    }

    /// Whether the policy has a field added in version 3 that guards access, which an
    /// older data plane would drop (see [`Policy::as_version_2`]): `ext_auth`,
    /// `authorization`, and a JWT provider's `remote_jwks`.
    pub fn guards_with_version_3_fields(&self) -> bool {
        self.ext_auth.is_some()
            || self.authorization.is_some()
            || self
                .jwt_auth
                .as_ref()
                .is_some_and(|(_, j)| j.providers.iter().any(|p| p.remote_jwks.is_some()))
    }

    /// The policy as a data plane of push protocol version 0 rebuilds it, with the hash
    /// that release computes (it knows no `jwt_auth`, which must have been replaced
    /// before: see `weir_xds::convert::for_version`). Only for sending to such a data
    /// plane: its hash is not this release's.
    pub fn as_version_0(mut self) -> Self {
        debug_assert!(self.jwt_auth.is_none(), "version 0 has no jwt_auth");
        self.hash = content_hash(&(
            &self.target,
            &self.timeouts,
            &self.retry,
            &self.rate_limit,
            &self.api_key_auth,
            &self.basic_auth,
            &self.ip_rules,
        ));
        self
    }

    /// This policy with API key authentication (`namespace/name` of the policy object
    /// that set it).
    pub fn with_api_key_auth(mut self, auth: Option<(Arc<str>, Arc<ApiKeyAuth>)>) -> Self {
        self.api_key_auth = auth;
        self.rehash();
        self
    }

    /// This policy with basic authentication (`namespace/name` of the policy object that
    /// set it).
    pub fn with_basic_auth(mut self, auth: Option<(Arc<str>, Arc<BasicAuth>)>) -> Self {
        self.basic_auth = auth;
        self.rehash();
        self
    }

    /// This policy with client address rules (`namespace/name` of the policy object that
    /// set them).
    pub fn with_ip_rules(mut self, rules: Option<(Arc<str>, Arc<IpRules>)>) -> Self {
        self.ip_rules = rules;
        self.rehash();
        self
    }

    /// This policy with JWT authentication (`namespace/name` of the policy object that
    /// set it).
    pub fn with_jwt_auth(mut self, auth: Option<(Arc<str>, Arc<JwtAuth>)>) -> Self {
        self.jwt_auth = auth;
        self.rehash();
        self
    }

    /// This policy with an active health check.
    pub fn with_health_check(mut self, check: Option<Arc<HealthCheck>>) -> Self {
        self.health_check = check;
        self.rehash();
        self
    }

    /// This policy with a global rate limit (`namespace/name` of the policy object that
    /// set it).
    pub fn with_global_rate_limit(mut self, limit: Option<(Arc<str>, GlobalRateLimit)>) -> Self {
        self.global_rate_limit = limit;
        self.rehash();
        self
    }

    /// This policy with authorization rules (`namespace/name` of the policy object that
    /// set them).
    pub fn with_authorization(mut self, rules: Option<(Arc<str>, Arc<Authorization>)>) -> Self {
        self.authorization = rules;
        self.rehash();
        self
    }

    /// This policy with CORS settings (`namespace/name` of the policy object that set
    /// them).
    pub fn with_cors(mut self, cors: Option<(Arc<str>, Arc<crate::Cors>)>) -> Self {
        self.cors = cors;
        self.rehash();
        self
    }

    /// This policy with request size limits (`namespace/name` of the policy object that
    /// set them).
    pub fn with_request_limits(mut self, limits: Option<(Arc<str>, crate::RequestLimits)>) -> Self {
        self.request_limits = limits;
        self.rehash();
        self
    }

    /// This policy with a bound on each client's requests in progress (`namespace/name`
    /// of the policy object that set it).
    pub fn with_concurrency_limit(mut self, limit: Option<(Arc<str>, ConcurrencyLimit)>) -> Self {
        self.concurrency_limit = limit;
        self.rehash();
        self
    }

    /// This policy with circuit breaking.
    pub fn with_circuit_breaker(mut self, breaker: Option<CircuitBreaker>) -> Self {
        self.circuit_breaker = breaker;
        self.rehash();
        self
    }

    /// This policy with external authorization (`namespace/name` of the policy object
    /// that set it).
    pub fn with_ext_auth(mut self, auth: Option<(Arc<str>, Arc<ExtAuth>)>) -> Self {
        self.ext_auth = auth;
        self.rehash();
        self
    }

    /// This policy with outlier-detection settings.
    pub fn with_outlier_detection(mut self, outlier: Option<OutlierDetection>) -> Self {
        self.outlier_detection = outlier;
        self.rehash();
        self
    }

    /// This policy with a load-balancing algorithm.
    pub fn with_load_balancer(mut self, lb: Option<LoadBalancer>) -> Self {
        self.load_balancer = lb;
        self.rehash();
        self
    }

    /// Whether it sets nothing (such a policy is not emitted).
    pub fn is_empty(&self) -> bool {
        !self.timeouts.is_set()
            && self.timeouts.backend_send.is_none()
            && self.retry.is_none()
            && self.rate_limit.is_none()
            && self.api_key_auth.is_none()
            && self.basic_auth.is_none()
            && self.ip_rules.is_none()
            && self.jwt_auth.is_none()
            && self.health_check.is_none()
            && self.circuit_breaker.is_none()
            && self.ext_auth.is_none()
            && self.load_balancer.is_none()
            && self.global_rate_limit.is_none()
            && self.authorization.is_none()
            && self.cors.is_none()
            && self.request_limits.is_none()
            && self.concurrency_limit.is_none()
            && self.outlier_detection.is_none()
            && self.backend_tls.is_none()
            && self.client_certificate.is_none()
            && self.access_log.is_none()
            && self.tracing.is_none()
    }

    /// The content hash computed at construction.
    pub fn hash(&self) -> ContentHash {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend_policy::GeneratedCookie;

    #[test]
    fn interval_divides_the_window() {
        let l = LocalRateLimit {
            requests: 4,
            per: Duration::from_secs(1),
            burst: 4,
            key: RateLimitKey::ClientIp,
        };
        assert_eq!(l.interval(), Duration::from_millis(250));
    }

    #[test]
    fn hash_covers_target_and_settings() {
        let t = |g: &str| PolicyTarget::Gateway(g.into());
        let timeouts = Timeouts {
            request: Some(Duration::from_secs(1)),
            backend_request: None,
            backend_send: None,
        };
        let a = Policy::new(t("ns/a"), timeouts.clone(), None, None);
        assert_eq!(a, Policy::new(t("ns/a"), timeouts.clone(), None, None));
        assert_ne!(a, Policy::new(t("ns/b"), timeouts, None, None));
        assert!(Policy::new(t("ns/a"), Timeouts::default(), None, None).is_empty());
    }

    /// Version 6's settings (`timeouts.backend_send`, a generated cookie's `SameSite` and
    /// `Secure`)
    /// change the hash only when set, and the version-5 form drops them, back to the hash
    /// of the policy without them.
    #[test]
    fn version_6_settings_fold_in_only_when_set() {
        let target = PolicyTarget::Gateway("ns/gw".into());
        let cookie = |same_site, secure| {
            Some(LoadBalancer::ConsistentHash(HashOn::Cookie {
                name: "sid".into(),
                generate: Some(GeneratedCookie {
                    ttl: Some(Duration::from_secs(60)),
                    path: "/".into(),
                    same_site,
                    secure,
                }),
            }))
        };
        let timeouts = |send| Timeouts {
            request: None,
            backend_request: Some(Duration::from_secs(65)),
            backend_send: send,
        };
        let plain = Policy::new(target.clone(), timeouts(None), None, None)
            .with_load_balancer(cookie(None, false));
        assert!(!plain.has_version_6_settings());
        assert_eq!(plain.clone().as_version_5().hash(), plain.hash());
        let sending = Policy::new(
            target.clone(),
            timeouts(Some(Duration::from_secs(3))),
            None,
            None,
        )
        .with_load_balancer(cookie(None, false));
        let same_site =
            Policy::new(target.clone(), timeouts(None), None, None).with_load_balancer(cookie(
                Some(crate::SameSite::None {
                    unless_incompatible: true,
                }),
                false,
            ));
        let secure =
            Policy::new(target, timeouts(None), None, None).with_load_balancer(cookie(None, true));
        assert_ne!(secure.hash(), same_site.hash());
        for p in [&sending, &same_site, &secure] {
            assert!(p.has_version_6_settings());
            assert_ne!(p.hash(), plain.hash());
            let old = p.clone().as_version_5();
            assert_eq!(old, plain);
            assert_eq!(old.hash(), plain.hash());
        }
    }

    /// What data planes of earlier releases compute for the policy `for_version` sends
    /// them in place of a JWT check (version 0, the release before JWTs) and for the same
    /// policy as this release holds it (version 1): a change to either makes such data
    /// planes refuse every policy (the Kubernetes test
    /// `compat::previous_release_binary_is_served` runs both releases' binaries).
    #[test]
    fn policies_keep_the_hashes_of_earlier_releases() {
        let target = PolicyTarget::Route {
            kind: RouteKind::HttpRoute,
            namespace: "ns".into(),
            name: "r".into(),
        };
        let deny = Policy::new(target.clone(), Timeouts::default(), None, None)
            .with_ip_rules(Some(("ns/jwt".into(), Arc::new(IpRules::deny_all()))));
        assert_eq!(deny.hash(), ContentHash(0x0499_c1f4_476d_3152));
        // Fields added since version 1 change the hash only when set.
        let unchanged = deny
            .clone()
            .with_health_check(None)
            .with_circuit_breaker(None)
            .with_ext_auth(None);
        assert_eq!(unchanged.hash(), deny.hash());
        let limited = deny.clone().with_circuit_breaker(Some(Default::default()));
        assert_ne!(limited.hash(), deny.hash());
        // Version 3's global rate limit: no change when unset; set, it changes the hash,
        // and the version-2 form drops it, back to the hash version 2 computes.
        assert_eq!(
            deny.clone().with_global_rate_limit(None).hash(),
            deny.hash()
        );
        let global = deny.clone().with_global_rate_limit(Some((
            "ns/g".into(),
            GlobalRateLimit {
                requests: 10,
                window: Duration::from_secs(1),
                key: RateLimitKey::Target,
                fail_mode: FailMode::Open,
            },
        )));
        assert_ne!(global.hash(), deny.hash());
        let old = global.as_version_2();
        assert!(old.global_rate_limit.is_none());
        assert_eq!(old.hash(), ContentHash(0x0499_c1f4_476d_3152));
        assert_eq!(
            deny.clone().as_version_0().hash(),
            ContentHash(0x8ec8_9027_376d_211e)
        );
        let with_jwt = deny.clone().with_jwt_auth(Some((
            "ns/jwt".into(),
            Arc::new(JwtAuth {
                providers: Vec::new(),
                forward_token: false,
            }),
        )));
        assert_ne!(with_jwt.hash(), deny.hash());
        // A retry as releases before version 3 built it (no body replay limit, no
        // non-idempotent setting): the same hash.
        let retry = crate::Retry {
            attempts: 2,
            codes: vec![503],
            backoff: std::time::Duration::from_millis(25),
            ..crate::Retry::default()
        };
        let retrying = Policy::new(
            target.clone(),
            Timeouts::default(),
            Some(retry.clone()),
            None,
        );
        assert_eq!(retrying.hash(), ContentHash(0xc720_53aa_f9f3_5b77));
        let replaying = |r: crate::Retry| {
            Policy::new(target.clone(), Timeouts::default(), Some(r), None).hash()
        };
        assert_ne!(
            replaying(crate::Retry {
                replay_body: 1024,
                ..retry.clone()
            }),
            retrying.hash()
        );
        assert_ne!(
            replaying(crate::Retry {
                non_idempotent: true,
                ..retry.clone()
            }),
            retrying.hash()
        );
        assert_eq!(
            Policy::new(
                target.clone(),
                Timeouts::default(),
                Some(crate::Retry {
                    replay_body: 1024,
                    non_idempotent: true,
                    ..retry
                }),
                None
            )
            .as_version_2()
            .hash(),
            retrying.hash()
        );
        // Version 3's external authorization: changes the hash when set, and a data plane
        // of version 2 is sent the policy without it (after `for_version` made it
        // deny-all), which hashes as before.
        let ext = crate::ExtAuth {
            url: crate::ExtAuthUrl::parse("http://auth.example/check").unwrap(),
            headers_to_send: vec!["authorization".into()],
            response_headers: Vec::new(),
            timeout: Duration::from_secs(1),
            cache: None,
            fail_open: false,
            status_on_error: 503,
            signin_url: None,
            ca_pem: None,
        };
        let with_ext = deny
            .clone()
            .with_ext_auth(Some(("ns/ext".into(), Arc::new(ext))));
        assert_ne!(with_ext.hash(), deny.hash());
        assert!(with_ext.guards_with_version_3_fields());
        assert!(!deny.guards_with_version_3_fields());
        assert_eq!(with_ext.as_version_2().hash(), deny.hash());
        // Version 3's authorization rules: an access guard, folded in only when set and
        // gone (with the hash of before) for a data plane of version 2.
        assert_eq!(deny.clone().with_authorization(None).hash(), deny.hash());
        let authz = deny.clone().with_authorization(Some((
            "ns/authz".into(),
            Arc::new(crate::Authorization {
                rules: Vec::new(),
                default: crate::AuthzAction::Deny,
            }),
        )));
        assert_ne!(authz.hash(), deny.hash());
        assert!(authz.guards_with_version_3_fields());
        assert_eq!(
            authz.as_version_2().hash(),
            ContentHash(0x0499_c1f4_476d_3152)
        );
        // Version 3's CORS: not a guard; stripped for version 2 with the hash of before.
        assert_eq!(deny.clone().with_cors(None).hash(), deny.hash());
        let cors = deny.clone().with_cors(Some((
            "ns/cors".into(),
            Arc::new(crate::Cors {
                allow_origins: vec![crate::CorsOrigin::Any],
                allow_methods: crate::CorsNames::Any,
                allow_headers: crate::CorsNames::Any,
                expose_headers: crate::CorsNames::Listed(Vec::new()),
                allow_credentials: false,
                max_age: 5,
            }),
        )));
        assert_ne!(cors.hash(), deny.hash());
        assert!(!cors.guards_with_version_3_fields());
        assert_eq!(cors.as_version_2().hash(), deny.hash());
        // Version 3's request limits: likewise.
        assert_eq!(deny.clone().with_request_limits(None).hash(), deny.hash());
        let limited = deny.clone().with_request_limits(Some((
            "ns/size".into(),
            crate::RequestLimits {
                max_body_bytes: Some(1024),
                ..Default::default()
            },
        )));
        assert_ne!(limited.hash(), deny.hash());
        assert!(!limited.guards_with_version_3_fields());
        assert_eq!(limited.as_version_2().hash(), deny.hash());
        // Version 3's concurrency limit: likewise (not a guard: an older data plane
        // serves without the bound).
        assert_eq!(
            deny.clone().with_concurrency_limit(None).hash(),
            deny.hash()
        );
        let bounded = deny
            .clone()
            .with_concurrency_limit(Some(("ns/conn".into(), ConcurrencyLimit { per_client: 2 })));
        assert_ne!(bounded.hash(), deny.hash());
        assert!(!bounded.guards_with_version_3_fields());
        assert_eq!(bounded.as_version_2().hash(), deny.hash());
        assert_eq!(deny.clone().as_version_2().hash(), deny.hash());
        // Version 3's remote JWK Set: a provider without one hashes as before (the hash
        // of `with_jwt` above is pinned by its value below), with one differently, and a
        // version-2 data plane is sent the provider without it.
        let provider = |remote: Option<Arc<RemoteJwks>>| JwtProvider {
            name: "corp".into(),
            issuer: None,
            audiences: Vec::new(),
            keys: Vec::new(),
            required_claims: Vec::new(),
            claims_to_headers: Vec::new(),
            remote_jwks: remote,
        };
        let jwt = |remote| {
            deny.clone().with_jwt_auth(Some((
                "ns/jwt".into(),
                Arc::new(JwtAuth {
                    providers: vec![provider(remote)],
                    forward_token: false,
                }),
            )))
        };
        let local = jwt(None);
        assert_eq!(local.hash(), ContentHash(LOCAL_JWT_HASH));
        assert!(!local.guards_with_version_3_fields());
        let remote = jwt(Some(Arc::new(RemoteJwks {
            url: crate::ExtAuthUrl::parse("https://idp.example/jwks").unwrap(),
            refresh: Duration::from_secs(300),
            timeout: Duration::from_secs(5),
            ca_pem: None,
        })));
        assert_ne!(remote.hash(), local.hash());
        assert!(remote.guards_with_version_3_fields());
        assert_eq!(remote.as_version_2().hash(), local.hash());
        // Version 3's load balancer: folded in only when set, and gone (with the hash of
        // before) for a data plane of version 2.
        assert_eq!(deny.clone().with_load_balancer(None).hash(), deny.hash());
        let backend = PolicyTarget::Backend {
            kind: BackendKind::Service,
            namespace: "ns".into(),
            name: "svc".into(),
        };
        let checked = Policy::new(backend, Timeouts::default(), None, None)
            .with_circuit_breaker(Some(Default::default()));
        for lb in [
            LoadBalancer::RoundRobin,
            LoadBalancer::LatencyAware,
            LoadBalancer::ConsistentHash(crate::HashOn::SourceIp),
        ] {
            let balanced = checked.clone().with_load_balancer(Some(lb));
            assert_ne!(balanced.hash(), checked.hash());
            let older = balanced.as_version_2();
            assert_eq!(older.load_balancer, None);
            assert_eq!(older.hash(), checked.hash());
        }
        assert_eq!(checked.clone().as_version_2().hash(), checked.hash());
        // Version 4's outlier detection: folded in only when set, and gone (with the hash
        // of before) for a data plane of version 3 or older.
        let before = checked.hash();
        assert_eq!(checked.clone().with_outlier_detection(None).hash(), before);
        for outlier in [
            crate::OutlierDetection::default(),
            crate::OutlierDetection {
                ejection: None,
                panic_threshold_percent: 50,
            },
        ] {
            let tuned = checked.clone().with_outlier_detection(Some(outlier));
            assert_ne!(tuned.hash(), before);
            let older = tuned.clone().as_version_3();
            assert_eq!(older.outlier_detection, None);
            assert_eq!(older.hash(), before);
            assert_eq!(tuned.as_version_3().as_version_2().hash(), before);
        }
        assert_eq!(checked.clone().as_version_3().hash(), before);
    }

    /// The hash of a JWT policy with one provider and no keys, as computed before
    /// `remote_jwks` existed (derived `Hash` of `JwtProvider`).
    const LOCAL_JWT_HASH: u64 = 0xde4b_411d_7982_7f60;

    #[test]
    fn networks_parse_and_contain() {
        let n = |s: &str| IpNet::parse(s).unwrap();
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert!(n("10.0.0.0/8").contains(ip("10.255.1.2")));
        assert!(!n("10.0.0.0/8").contains(ip("11.0.0.1")));
        assert!(n("192.0.2.7").contains(ip("192.0.2.7")));
        assert!(!n("192.0.2.7").contains(ip("192.0.2.6")));
        assert!(n("0.0.0.0/0").contains(ip("203.0.113.9")));
        assert!(!n("0.0.0.0/0").contains(ip("2001:db8::1")));
        assert!(n("2001:db8::/32").contains(ip("2001:db8:ffff::1")));
        assert!(!n("2001:db8::/32").contains(ip("2001:db9::1")));
        assert!(n("::/0").contains(ip("::1")));
        // An IPv4-mapped IPv6 client is its IPv4 address.
        assert!(n("127.0.0.0/8").contains(ip("::ffff:127.0.0.1")));
        for bad in ["10.0.0.1/8", "10.0.0.0/33", "nope", "10.0.0.0/", "::1/129"] {
            assert!(IpNet::parse(bad).is_err(), "{bad}");
        }
        let rules = IpRules {
            allow: vec![n("10.0.0.0/8")],
            deny: vec![n("10.1.0.0/16")],
        };
        assert!(rules.admits(ip("10.2.0.1")));
        assert!(!rules.admits(ip("10.1.0.1")), "deny wins");
        assert!(!rules.admits(ip("192.0.2.1")), "not allowed");
        assert!(IpRules::default().admits(ip("192.0.2.1")));
        assert!(!IpRules::deny_all().admits(ip("192.0.2.1")));
        assert!(!IpRules::deny_all().admits(ip("2001:db8::1")));
    }

    #[test]
    fn cluster_keys_name_their_service_or_backend() {
        let t = |k: &str| ClusterKey(k.into()).backend_target();
        let svc = |ns: &str, name: &str| PolicyTarget::Backend {
            kind: crate::BackendKind::Service,
            namespace: ns.into(),
            name: name.into(),
        };
        assert_eq!(t("service/default/echo:8080"), Some(svc("default", "echo")));
        assert_eq!(
            t("service/default/echo:8080/h2c"),
            Some(svc("default", "echo"))
        );
        assert_eq!(t("service/ns/dns:53/udp"), Some(svc("ns", "dns")));
        let be = PolicyTarget::Backend {
            kind: crate::BackendKind::Backend,
            namespace: "default".into(),
            name: "static".into(),
        };
        assert_eq!(t("backend/default/static"), Some(be.clone()));
        assert_eq!(t("backend/default/static/h2c"), Some(be));
        for other in ["invalid/x", "service/default/echo", "service//x:1", "x"] {
            assert_eq!(t(other), None, "{other}");
        }
    }
}
