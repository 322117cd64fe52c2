//! weir.dev/v1alpha1 kinds: static backends, direct responses and traffic policies.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::ObjectMeta;

/// A static backend outside Kubernetes, referenced from a route's `backendRefs` (group
/// `weir.dev`, kind `Backend`): `endpoints` are `host:port` strings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct Backend {
    /// Metadata.
    #[schemars(schema_with = "crate::crd::any_object")]
    pub metadata: ObjectMeta,
    /// The endpoints and their protocol.
    pub spec: BackendSpec,
}

/// Backend spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct BackendSpec {
    /// `host:port` (IP literal or DNS name; IPv6 as `[::1]:80`).
    #[schemars(length(max = 256), inner(length(min = 3, max = 261)))]
    pub endpoints: Vec<String>,
    /// `HTTP` (HTTP/1.1, default) or `H2C` (HTTP/2 prior knowledge).
    #[schemars(extend("enum" = ["HTTP", "H2C"]))]
    pub protocol: Option<String>,
}

/// A fixed response, used from an HTTPRoute filter
/// `{type: ExtensionRef, extensionRef: {group: weir.dev, kind: DirectResponse, name}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct DirectResponse {
    /// Metadata.
    #[schemars(schema_with = "crate::crd::any_object")]
    pub metadata: ObjectMeta,
    /// The response.
    pub spec: DirectResponseSpec,
}

/// DirectResponse spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct DirectResponseSpec {
    /// Status code; default 200.
    #[schemars(range(min = 100, max = 599))]
    pub status: Option<i32>,
    /// Response headers.
    #[schemars(length(max = 32))]
    pub headers: Vec<HeaderValue>,
    /// Body text.
    #[schemars(length(max = 65536))]
    pub body: Option<String>,
}

/// A header name and value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["name", "value"]))]
pub struct HeaderValue {
    /// Name.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Value.
    #[schemars(length(max = 4096))]
    pub value: String,
}

/// Settings for the requests of a Gateway, a route or one rule of a route, or for the
/// endpoints of a Service or Backend, attached by `targetRefs` (GEP-713 "direct" policy
/// attachment). Several policies may target one object: per field, the oldest wins (the
/// others are `Conflicted` for that field).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct TrafficPolicy {
    /// Metadata.
    #[schemars(schema_with = "crate::crd::any_object")]
    pub metadata: ObjectMeta,
    /// What the policy applies to and the settings it gives them.
    pub spec: TrafficPolicySpec,
}

/// TrafficPolicy spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["targetRefs"]))]
pub struct TrafficPolicySpec {
    /// What the policy applies to, in its own namespace: a `Gateway` or a `ListenerSet`
    /// (`sectionName`: one listener, by its `name`), an `HTTPRoute` or a `GRPCRoute`
    /// (`sectionName`: one rule, by its `name`), or a core `Service` or a weir.dev
    /// `Backend` (for `healthCheck` and `circuitBreaker`, which only they take). Per
    /// field, the most specific wins: rule, route, listener, ListenerSet, Gateway.
    #[schemars(length(min = 1, max = 16))]
    pub target_refs: Vec<PolicyTargetReference>,
    /// Request and per-attempt timeouts (HTTPRoute `timeouts`), and a send timeout.
    /// (Boxed with the other rarely set fields: `Object` holds every kind inline, and its
    /// largest variant sets its size.)
    pub timeouts: Option<Box<PolicyTimeouts>>,
    /// Retries of failed attempts.
    pub retry: Option<Box<PolicyRetry>>,
    /// Rate limits.
    pub rate_limit: Option<RateLimitSpec>,
    /// Requests must carry one of the API keys of these Secrets.
    pub api_key_auth: Option<ApiKeyAuthSpec>,
    /// Requests must carry the credentials of a user of an htpasswd Secret.
    pub basic_auth: Option<BasicAuthSpec>,
    /// Which client addresses may send requests.
    pub ip_rules: Option<IpRulesSpec>,
    /// Requests must carry a JSON Web Token signed by one of these providers.
    pub jwt_auth: Option<JwtAuthSpec>,
    /// Active health checks of the endpoints (a policy on a `Service` or `Backend`).
    pub health_check: Option<Box<HealthCheckSpec>>,
    /// Admission limits of the endpoints (a policy on a `Service` or `Backend`).
    pub circuit_breaker: Option<Box<CircuitBreakerSpec>>,
    /// Requests must be allowed by an external authorization service (forward auth).
    pub ext_auth: Option<Box<ExtAuthSpec>>,
    /// How an endpoint is chosen (a policy on a `Service` or `Backend`; default: the
    /// default balancer, which prefers healthy endpoints with fewer requests in flight).
    pub load_balancer: Option<Box<LoadBalancerSpec>>,
    /// Allow/deny rules over the method, path, headers, client address and JWT claims of
    /// a request, tried in order (the first that matches decides).
    pub authorization: Option<Box<AuthorizationSpec>>,
    /// CORS (as the HTTPRoute `CORS` filter) for the rules that have no CORS filter of
    /// their own.
    pub cors: Option<Box<crate::gateway::HttpCorsFilter>>,
    /// How large a request's body and head may be.
    pub request_limits: Option<RequestLimitsSpec>,
    /// How many requests of one client address may be in progress at once.
    pub concurrency_limit: Option<ConcurrencyLimitSpec>,
    /// Passive outlier detection and the panic threshold of the endpoints (a policy on a
    /// `Service` or `Backend`; default: detection on, 5 gateway errors in a row, panic
    /// threshold 0).
    pub outlier_detection: Option<Box<OutlierDetectionSpec>>,
    /// What the access log records of the requests covered (default: the process flags).
    pub access_log: Option<Box<AccessLogPolicySpec>>,
    /// Whether and how much the requests covered are traced (default: the process flags).
    pub tracing: Option<TracingPolicySpec>,
}

/// Access-log settings of the requests a policy covers. Of a Gateway's, a route's and a
/// rule's policies, the most specific that sets `accessLog` decides (the whole field).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct AccessLogPolicySpec {
    /// `true`: no access-log record for these requests.
    pub disabled: Option<bool>,
    /// The fields of their records (the names of `--access-log-fields`, or `all`);
    /// default: the process's list.
    #[schemars(length(min = 1, max = 22), transform = crate::crd::access_log_fields)]
    pub fields: Option<Vec<String>>,
    /// `true`: only the requests answered with a status of 400 or more are recorded.
    pub errors_only: Option<bool>,
}

/// Trace settings of the requests a policy covers. Of a Gateway's, a route's and a rule's
/// policies, the most specific that sets `tracing` decides (the whole field).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct TracingPolicySpec {
    /// `true`: no spans for these requests, whatever the caller's `traceparent` says.
    pub disabled: Option<bool>,
    /// The share of the traces weir starts for these requests that are sampled (0 to 1;
    /// default: `--trace-sampling-ratio`). A caller's sampling decision is still followed
    /// unless the data plane runs with `--trace-ignore-parent`.
    #[schemars(range(min = 0, max = 1))]
    pub sampling_ratio: Option<Ratio>,
}

/// A number from the configuration compared by its bits, so that the types holding it
/// stay `Eq` (a NaN equals itself; ranges are checked when the policy is compiled).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize)]
#[serde(transparent)]
pub struct Ratio(pub f64);

impl PartialEq for Ratio {
    fn eq(&self, other: &Ratio) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Ratio {}

impl JsonSchema for Ratio {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Ratio".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "number"})
    }
}

/// The names `accessLog.fields` accepts: `all` and the access-log field names of
/// `weir-model` (`ACCESS_LOG_FIELDS`, in record order; a translator test keeps the two
/// lists equal).
pub const ACCESS_LOG_FIELD_NAMES: [&str; 22] = [
    "all",
    "time",
    "method",
    "host",
    "path",
    "status",
    "duration_ms",
    "route",
    "listener",
    "client",
    "request_id",
    "upstream",
    "attempts",
    "fault",
    "decision",
    "policy",
    "check",
    "reason",
    "checks",
    "identity",
    "rate_limit",
    "trace_id",
];

/// Passive outlier detection: an endpoint whose requests fail several times in a row gets
/// no traffic for a while (an ejection, doubling with each one in a row up to a cap).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct OutlierDetectionSpec {
    /// `false` turns ejection off (default `true`); `panicThresholdPercent` still applies
    /// to active health checks.
    pub enabled: Option<bool>,
    /// 5xx answers (and gateway errors and connect failures) in a row that eject an
    /// endpoint (0 to 1000, 0 off; default 0).
    #[serde(rename = "consecutive5xx")]
    #[schemars(range(min = 0, max = 1000))]
    pub consecutive_5xx: Option<i64>,
    /// 502/503/504 answers, resets, timeouts and connect failures in a row that eject an
    /// endpoint (0 to 1000, 0 off; default 5).
    #[schemars(range(min = 0, max = 1000))]
    pub consecutive_gateway_errors: Option<i64>,
    /// Connect failures in a row that eject an endpoint (0 to 1000, 0 off; default 0).
    #[schemars(range(min = 0, max = 1000))]
    pub consecutive_local_origin_failures: Option<i64>,
    /// The first ejection's length (a Gateway API duration, 10ms to 1h; default 500ms).
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub base_ejection_time: Option<String>,
    /// The longest ejection (at least `baseEjectionTime`, at most 1h; default 2s, or
    /// `baseEjectionTime` when that is longer).
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub max_ejection_time: Option<String>,
    /// At most this percentage of a cluster's endpoints is ejected at once (0 to 100;
    /// default 50; one endpoint of two or more may always be ejected).
    #[schemars(range(min = 0, max = 100))]
    pub max_ejected_percent: Option<i64>,
    /// When fewer than this percentage of the endpoints are available (neither ejected
    /// nor failing health checks), traffic goes to all of them (0 to 100; default 0:
    /// only when none is).
    #[schemars(range(min = 0, max = 100))]
    pub panic_threshold_percent: Option<i64>,
}

/// A bound on the requests of one client address in progress at once (from its checks
/// until its response is sent whole): one over it is answered 503.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["perClient"]))]
pub struct ConcurrencyLimitSpec {
    /// The most requests of one client address at once (1 to 1000000; required).
    #[schemars(range(min = 1, max = 1000000))]
    pub per_client: Option<i64>,
}

/// Request size limits, checked after routing (below the listener's own head limits).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestLimitsSpec {
    /// Bytes of the body (0 to 2^40): a larger `Content-Length` is answered 413 at once; a
    /// body sent without one is cut off past the limit (413).
    #[schemars(range(min = 0, max = 1_099_511_627_776_i64))]
    pub max_body_bytes: Option<i64>,
    /// Bytes of the header fields (names, values and 32 per field; 1024 to 1048576):
    /// 431 beyond.
    #[schemars(range(min = 1024, max = 1048576))]
    pub max_header_bytes: Option<i64>,
    /// Header fields (1 to 1000): 431 beyond.
    #[schemars(range(min = 1, max = 1000))]
    pub max_headers: Option<i64>,
}

/// Authorization rules: each request is compared with `rules` in order; the first rule
/// whose every condition holds allows or denies it (403), and a request no rule matches
/// gets `default`. Runs after authentication (so `claims` see the JWT verified by the
/// policy's `jwtAuth`) and before rate limits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["default"]))]
pub struct AuthorizationSpec {
    /// The rules, tried in order (at most 64).
    #[schemars(length(max = 64))]
    pub rules: Vec<AuthorizationRuleSpec>,
    /// What happens to a request no rule matches (required).
    pub default: Option<AuthorizationAction>,
}

/// What an authorization rule does with the requests it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum AuthorizationAction {
    /// Let the request through to the next checks.
    Allow,
    /// Refuse it (403).
    Deny,
}

/// One authorization rule: it matches a request when every condition it sets holds (one
/// of `methods`, one of `paths`, one of `clients`, every entry of `headers` and of
/// `claims`). A rule without conditions matches every request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["action"]))]
pub struct AuthorizationRuleSpec {
    /// `Allow` or `Deny` (required).
    pub action: Option<AuthorizationAction>,
    /// HTTP methods (`GET`, `POST`, …).
    #[schemars(length(max = 16), inner(length(min = 1, max = 32), regex(pattern = crate::crd::TOKEN)))]
    pub methods: Vec<String>,
    /// Paths, as HTTPRoute path matches (`Exact`, `PathPrefix`, `RegularExpression`).
    #[schemars(length(max = 16))]
    pub paths: Vec<crate::gateway::HttpPathMatch>,
    /// Request headers.
    #[schemars(length(max = 16))]
    pub headers: Vec<AuthorizationHeaderSpec>,
    /// Client networks (CIDRs or addresses); the client as `ipRules` sees it.
    #[schemars(length(max = 256), inner(length(min = 2, max = 49)))]
    pub clients: Vec<String>,
    /// Claims of the JWT verified by `jwtAuth` (a request without one matches no rule
    /// with claims).
    #[schemars(length(max = 16))]
    pub claims: Vec<AuthorizationClaimSpec>,
}

/// A header condition of an authorization rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["name"]))]
pub struct AuthorizationHeaderSpec {
    /// `Present`, `Exact` (default) or `RegularExpression`.
    #[serde(rename = "type")]
    pub type_: Option<AuthorizationHeaderMatchType>,
    /// Header name (case-insensitive).
    #[schemars(length(min = 1, max = 256), regex(pattern = crate::crd::TOKEN))]
    pub name: String,
    /// The value (`Exact`, `RegularExpression`).
    #[schemars(length(max = 4096))]
    pub value: Option<String>,
}

/// How an authorization rule's header condition compares the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum AuthorizationHeaderMatchType {
    /// The header is sent, with any value.
    Present,
    /// A value equals `value`.
    Exact,
    /// A value matches the regular expression `value` (whole value).
    RegularExpression,
}

/// A claim condition of an authorization rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["name"]))]
pub struct AuthorizationClaimSpec {
    /// A top-level claim of the token.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Accepted values (a string claim, one of its space-separated words, or an item of
    /// an array claim); empty: the claim must be present.
    #[schemars(length(max = 64), inner(length(max = 1024)))]
    pub values: Vec<String>,
}

/// External authorization (forward auth, as nginx's `auth_request` or Traefik's
/// `forwardAuth`): before a request is forwarded, weir sends a `GET` to `url` describing
/// it (`X-Original-URI`, `X-Original-Method`, `X-Original-URL`, `X-Forwarded-Host`,
/// `-Uri`, `-Method`, `-Proto`, `-For`) with the headers named in `headersToSend`. A 2xx
/// answer lets the request pass with the answer's `responseHeaders` set on it; any other
/// 4xx (or 3xx) is returned to the client with the answer's `WWW-Authenticate`,
/// `Location` and `Set-Cookie`; no answer in `timeout`, a connection error or a 5xx
/// refuses the request with `statusOnError` (unless `failOpen`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["url"]))]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "!(has(self.caCertificate) && has(self.caCertificateRef))", "message": "at most one of caCertificate and caCertificateRef"}]))]
pub struct ExtAuthSpec {
    /// The service: `http://` or `https://` (the system's trust roots), host, port, path.
    #[schemars(length(min = 8, max = 2048), regex(pattern = crate::crd::HTTP_URL))]
    pub url: String,
    /// Request headers sent to the service (default `Authorization` and `Cookie`); the
    /// cache is keyed by their values.
    #[schemars(length(max = 64), inner(length(min = 1, max = 256), regex(pattern = crate::crd::TOKEN)))]
    pub headers_to_send: Option<Vec<String>>,
    /// Headers of a 2xx answer set on the forwarded request (replacing any the client
    /// sent under those names).
    #[schemars(length(max = 64), inner(length(min = 1, max = 256), regex(pattern = crate::crd::TOKEN)))]
    pub response_headers: Vec<String>,
    /// How long the service may take (a Gateway API duration; default 1s, at most 60s).
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub timeout: Option<String>,
    /// Remember answers per credentials (the values of `headersToSend`).
    pub cache: Option<ExtAuthCacheSpec>,
    /// Let requests pass when the service fails (default false: refused).
    pub fail_open: Option<bool>,
    /// The status of a request refused because the service failed (default 503;
    /// 400–599).
    #[schemars(range(min = 400, max = 599))]
    pub status_on_error: Option<i64>,
    /// A 401 from the service becomes a 302 to this URL, with the original URL in `rd`
    /// (ingress-nginx's `auth-signin`).
    #[schemars(length(min = 8, max = 2048), regex(pattern = crate::crd::HTTP_URL))]
    pub signin_url: Option<String>,
    /// PEM CA certificates an `https://` service's certificate may chain to, besides the
    /// system's roots.
    #[schemars(length(min = 1, max = 65536))]
    pub ca_certificate: Option<String>,
    /// The same from a ConfigMap's `ca.crt` (instead of `caCertificate`).
    pub ca_certificate_ref: Option<LocalConfigMapReference>,
}

/// How long and how many answers of an authorization service are remembered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ExtAuthCacheSpec {
    /// How long an answer is reused (a Gateway API duration; default 60s, at most 1h).
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub ttl: Option<String>,
    /// The most answers kept (default 10000, at most 1048576).
    #[schemars(range(min = 1, max = 1048576))]
    pub max_entries: Option<i64>,
}

/// The load-balancing algorithm of the endpoints of a Service or Backend.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["type"]))]
pub struct LoadBalancerSpec {
    /// The algorithm (required).
    #[serde(rename = "type")]
    pub type_: Option<LoadBalancerType>,
    /// What `ConsistentHash` hashes (required with it, refused with the others).
    pub consistent_hash: Option<ConsistentHashSpec>,
}

/// A load-balancing algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum LoadBalancerType {
    /// Smooth weighted round robin.
    RoundRobin,
    /// Power of two choices by requests in flight.
    LeastRequest,
    /// Power of two choices by a moving average of response time × requests in flight.
    LatencyAware,
    /// A consistent-hash ring over a header, a cookie or the client's address.
    ConsistentHash,
}

/// What a consistent hash is computed from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["type"]))]
pub struct ConsistentHashSpec {
    /// `Header`, `Cookie` or `SourceIP` (required).
    #[serde(rename = "type")]
    pub type_: Option<HashType>,
    /// The header of `Header`.
    pub header: Option<HashHeaderSpec>,
    /// The cookie of `Cookie`.
    pub cookie: Option<HashCookieSpec>,
}

/// The source of a consistent hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum HashType {
    /// A request header.
    Header,
    /// A cookie.
    Cookie,
    /// The client's IP address.
    #[serde(rename = "SourceIP")]
    SourceIp,
}

/// The header a consistent hash reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["name"]))]
pub struct HashHeaderSpec {
    /// Its name (required).
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
}

/// A TrafficPolicy's timeouts (Gateway API durations such as `10s`, `500ms`, `1h`; `0s`
/// disables one).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicyTimeouts {
    /// Whole request (as HTTPRoute `timeouts.request`).
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub request: Option<String>,
    /// One backend attempt, until the response headers (as HTTPRoute
    /// `timeouts.backendRequest`).
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub backend_request: Option<String>,
    /// Longest time the backend connection may take none of the request body while some
    /// is left to send (ingress-nginx's `proxy-send-timeout`): the attempt then fails
    /// with 504. Waiting for the response is not bounded by it.
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub backend_send: Option<String>,
}

/// The cookie a consistent hash reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["name"]))]
pub struct HashCookieSpec {
    /// Its name (required).
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// Whether weir sets it (a random value) on the response to a request without it
    /// (default false: such a request is balanced as without a hash).
    pub generate: Option<bool>,
    /// `Max-Age` of a generated cookie (a Gateway API duration; default: a session
    /// cookie).
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub ttl: Option<String>,
    /// `Path` of a generated cookie (default `/`).
    #[schemars(length(max = 1024))]
    pub path: Option<String>,
}

/// An active health check: every endpoint of the target is probed on its own, once per
/// data plane however many routes use it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["type"]))]
pub struct HealthCheckSpec {
    /// The probe (required).
    #[serde(rename = "type")]
    pub type_: Option<HealthCheckType>,
    /// Settings of an `HTTP` probe.
    pub http: Option<HttpHealthCheckSpec>,
    /// Settings of a `GRPC` probe.
    pub grpc: Option<GrpcHealthCheckSpec>,
    /// Time between probes (a Gateway API duration; default 5s, 100ms to 1h).
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub interval: Option<String>,
    /// A probe without an answer in this time failed (default 1s, at most `interval`).
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub timeout: Option<String>,
    /// A random extra wait before each probe, up to this (default 0, at most `interval`).
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub jitter: Option<String>,
    /// Passed probes in a row that bring an endpoint back (default 1, 1–100).
    #[schemars(range(min = 1, max = 100))]
    pub healthy_threshold: Option<i64>,
    /// Failed probes in a row that take an endpoint out (default 3, 1–100).
    #[schemars(range(min = 1, max = 100))]
    pub unhealthy_threshold: Option<i64>,
}

/// What a health probe does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum HealthCheckType {
    /// An HTTP/1.1 GET that must answer an expected status.
    #[serde(rename = "HTTP")]
    Http,
    /// A TCP connect.
    #[serde(rename = "TCP")]
    Tcp,
    /// A grpc.health.v1 `Check` that must answer `SERVING`.
    #[serde(rename = "GRPC")]
    Grpc,
}

/// An HTTP probe.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpHealthCheckSpec {
    /// The path (default `/`).
    #[schemars(length(min = 1, max = 1024), regex(pattern = "^/[^ ]*$"))]
    pub path: Option<String>,
    /// The `Host` header (default: the endpoint's address).
    #[schemars(length(min = 1, max = 253))]
    pub host: Option<String>,
    /// Statuses that pass (default: 200–399).
    #[schemars(length(min = 1, max = 100), inner(range(min = 100, max = 599)))]
    pub expected_statuses: Option<Vec<i64>>,
}

/// A gRPC probe.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcHealthCheckSpec {
    /// The service asked about (default empty: the server as a whole).
    #[schemars(length(max = 1024))]
    pub service: Option<String>,
}

/// Circuit breaking: what is over a limit is answered at once with 503.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct CircuitBreakerSpec {
    /// Upstream connections over each cluster of the target (HTTP/1.1: requests in
    /// flight, each holding a connection; L4: spliced connections).
    #[schemars(range(min = 1, max = 1000000000))]
    pub max_connections: Option<i64>,
    /// HTTP/1.1 requests opening an upstream connection at once, over the cluster.
    #[schemars(range(min = 1, max = 1000000000))]
    pub max_pending_requests: Option<i64>,
    /// Requests in flight over the cluster.
    #[schemars(range(min = 1, max = 1000000000))]
    pub max_requests: Option<i64>,
    /// Limits of each endpoint.
    pub per_endpoint: Option<EndpointLimitsSpec>,
}

/// Limits of one endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct EndpointLimitsSpec {
    /// Upstream connections to the endpoint.
    #[schemars(range(min = 1, max = 1000000000))]
    pub max_connections: Option<i64>,
    /// HTTP/1.1 requests opening a connection to the endpoint at once.
    #[schemars(range(min = 1, max = 1000000000))]
    pub max_pending_requests: Option<i64>,
    /// Requests in flight to the endpoint.
    #[schemars(range(min = 1, max = 1000000000))]
    pub max_requests: Option<i64>,
}

/// JWT authentication: a request must carry, as `Authorization: Bearer <token>`, a token
/// that one provider's keys verify and whose claims pass that provider's checks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["providers"]))]
pub struct JwtAuthSpec {
    /// Token issuers (at least one; names unique).
    #[schemars(length(min = 1, max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub providers: Vec<JwtProviderSpec>,
    /// Whether the `Authorization` header is forwarded to the backend (default false:
    /// removed once the token is verified).
    pub forward_token: Option<bool>,
}

/// One token issuer: its keys and what its tokens must claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["name"]))]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "has(self.jwks) != has(self.remoteJwks)", "message": "exactly one of jwks and remoteJwks is required"}]))]
pub struct JwtProviderSpec {
    /// The provider's name (in logs and status).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The `iss` claim a token must carry (not checked when unset).
    #[schemars(length(min = 1, max = 2048))]
    pub issuer: Option<String>,
    /// The token's `aud` must name one of these (not checked when empty).
    #[schemars(length(max = 16), inner(length(min = 1, max = 2048)))]
    pub audiences: Vec<String>,
    /// The provider's public keys, a JWK Set (inline or from a Secret; or `remoteJwks`).
    pub jwks: JwksSpec,
    /// The provider's JWK Set fetched over HTTPS by the data plane (instead of `jwks`).
    pub remote_jwks: Option<RemoteJwksSpec>,
    /// Claims a token must carry; with `values`, the claim (a string, or a list of
    /// strings) must hold one of them.
    #[schemars(length(max = 16))]
    pub required_claims: Vec<RequiredClaim>,
    /// Claims copied into request headers for the backend (strings and numbers; other
    /// values as JSON).
    #[schemars(length(max = 16))]
    pub claims_to_headers: Vec<ClaimToHeader>,
}

/// Where a provider's JWK Set comes from: inline JSON, or a key of a Secret in the
/// policy's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "[has(self.inline), has(self.secretRef), has(self.configMapRef)].filter(x, x).size() == 1", "message": "exactly one of inline, secretRef and configMapRef is required"}]))]
pub struct JwksSpec {
    /// The JWK Set as JSON (`{"keys": [...]}`).
    #[schemars(length(min = 1, max = 65536))]
    pub inline: Option<String>,
    /// A Secret holding the JWK Set.
    pub secret_ref: Option<SecretKeyReference>,
    /// A ConfigMap holding the JWK Set (public keys need no Secret).
    pub config_map_ref: Option<SecretKeyReference>,
}

/// A JWK Set the data plane fetches in the background, refreshes, and keeps when a
/// fetch fails.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["uri"]))]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "!(has(self.caCertificate) && has(self.caCertificateRef))", "message": "at most one of caCertificate and caCertificateRef"}]))]
pub struct RemoteJwksSpec {
    /// The set's `https://` URL.
    #[schemars(length(min = 9, max = 2048), regex(pattern = crate::crd::HTTPS_URL))]
    pub uri: String,
    /// Time between fetches (a Gateway API duration; default 5m, 1s to 24h). A token
    /// naming an unknown `kid` also triggers a fetch, at most one per 10s.
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub refresh_interval: Option<String>,
    /// How long a fetch may take (default 5s, at most 60s). Requests arriving before the
    /// first fetch wait for it up to this long.
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub timeout: Option<String>,
    /// PEM CA certificates trusted besides the system's roots.
    #[schemars(length(min = 1, max = 65536))]
    pub ca_certificate: Option<String>,
    /// The same from a ConfigMap's `ca.crt` (instead of `caCertificate`).
    pub ca_certificate_ref: Option<LocalConfigMapReference>,
}

/// A key of a Secret (or ConfigMap) in the referring object's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["name"]))]
pub struct SecretKeyReference {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key in its `data` (default `jwks`).
    #[schemars(length(min = 1, max = 253))]
    pub key: Option<String>,
}

/// A claim a token must carry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["name"]))]
pub struct RequiredClaim {
    /// The claim's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Accepted values (any value when empty).
    #[schemars(length(max = 16), inner(length(max = 2048)))]
    pub values: Vec<String>,
}

/// A claim copied into a request header.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["claim", "header"]))]
pub struct ClaimToHeader {
    /// The claim's name.
    #[schemars(length(min = 1, max = 253))]
    pub claim: String,
    /// The request header it is copied to (replacing any the client sent).
    #[schemars(length(min = 1, max = 256), regex(pattern = crate::crd::TOKEN))]
    pub header: String,
}

/// Client address rules: a client in `deny` is refused; when `allow` is not empty, a
/// client must be in it. Entries are CIDRs (`10.0.0.0/8`, `2001:db8::/32`) or addresses.
/// The client is the peer of the connection.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct IpRulesSpec {
    /// Only these clients (empty: every client not denied).
    #[schemars(length(max = 256), inner(length(min = 2, max = 49)))]
    pub allow: Vec<String>,
    /// Never these clients.
    #[schemars(length(max = 256), inner(length(min = 2, max = 49)))]
    pub deny: Vec<String>,
}

/// Basic authentication against an htpasswd file kept in a Secret (as ingress-nginx's
/// `auth-type: basic`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["secretRef"]))]
pub struct BasicAuthSpec {
    /// A Secret in the policy's namespace whose key `auth` holds htpasswd lines
    /// (`user:hash`; bcrypt, apr1 or `{SHA}` hashes).
    pub secret_ref: LocalSecretReference,
    /// The realm named in `WWW-Authenticate` (default `weir`).
    #[schemars(length(max = 256), regex(pattern = crate::crd::REALM))]
    pub realm: Option<String>,
}

/// API key authentication: a request must carry a key listed in one of `secretRefs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["secretRefs"]))]
pub struct ApiKeyAuthSpec {
    /// Secrets in the policy's namespace; each entry of their `data` (or `stringData`) is
    /// one client: the entry's name identifies the client, its value is the client's key.
    #[schemars(length(min = 1, max = 16))]
    pub secret_refs: Vec<LocalSecretReference>,
    /// The request header carrying the key (default `x-api-key`).
    #[schemars(length(min = 1, max = 256), regex(pattern = crate::crd::TOKEN))]
    pub header: Option<String>,
    /// Whether the key header is forwarded to the backend (default false: removed).
    pub forward_key: Option<bool>,
}

/// A ConfigMap in the referring object's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["name"]))]
pub struct LocalConfigMapReference {
    /// The ConfigMap's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A Secret in the referring object's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["name"]))]
pub struct LocalSecretReference {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A target of a policy (Gateway API `LocalPolicyTargetReferenceWithSectionName`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["group", "kind", "name"]))]
pub struct PolicyTargetReference {
    /// API group of the target.
    #[schemars(length(max = 253))]
    pub group: String,
    /// Kind of the target.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Name of the target (in the policy's namespace).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// A part of the target: a route rule's or a Gateway or ListenerSet listener's
    /// `name` (TrafficPolicy), a Service port's `name` (BackendTLSPolicy).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub section_name: Option<String>,
}

/// Retries in a policy: HTTPRoute `retry`'s fields and the classes of failures retried.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicyRetry {
    /// Retries after the first attempt (default 2, at most 10).
    #[schemars(range(min = 0, max = 10))]
    pub attempts: Option<i64>,
    /// Response statuses that are retried (400–599).
    #[schemars(length(max = 200), inner(range(min = 400, max = 599)))]
    pub codes: Option<Vec<i64>>,
    /// Classes of responses retried besides `codes`. Connect failures, resets and
    /// per-attempt timeouts are always retried.
    #[schemars(length(max = 2))]
    pub retry_on: Option<Vec<RetryOn>>,
    /// Least wait before a retry (a Gateway API duration; default 25ms).
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub backoff: Option<String>,
    /// The longest request body kept so that a retry can send it again, in bytes
    /// (default 65536, at most 16777216; 0: requests with a body are not retried). The
    /// body is streamed to the first attempt as it arrives either way.
    #[schemars(range(min = 0, max = 16777216))]
    pub replay_body_bytes: Option<i64>,
    /// Whether requests of methods that are not idempotent (POST, PATCH, …; gRPC calls
    /// are POSTs) are retried after they may have reached an endpoint (an answer in
    /// `codes`, a reset, a timeout). Default false: they are retried only when the
    /// connection to the endpoint failed.
    pub non_idempotent: Option<bool>,
}

/// Rate limits of a policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RateLimitSpec {
    /// A limit kept by each data plane on its own.
    pub local: Option<LocalRateLimitSpec>,
    /// A limit shared by every data plane through Redis (`weir run --redis`).
    pub global: Option<Box<GlobalRateLimitSpec>>,
}

/// A sliding-window limit shared by the data planes through Redis.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["requests", "unit"]))]
pub struct GlobalRateLimitSpec {
    /// Requests allowed per `unit` (required, ≥ 1).
    #[schemars(range(min = 1, max = 1000000000))]
    pub requests: Option<i64>,
    /// The window `requests` is counted in (required).
    pub unit: Option<RateLimitUnit>,
    /// What a budget is kept for (default: the client IP).
    pub key: Option<RateLimitKeySpec>,
    /// What happens while Redis cannot be reached (default `Open`).
    pub fail_mode: Option<RateLimitFailMode>,
}

/// What a global limit does while Redis cannot be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum RateLimitFailMode {
    /// Admit requests.
    Open,
    /// Refuse requests (503).
    Closed,
}

/// A token bucket per key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("required" = ["requests", "unit"]))]
pub struct LocalRateLimitSpec {
    /// Requests allowed per `unit` (required, ≥ 1).
    #[schemars(range(min = 1, max = 1000000000))]
    pub requests: Option<i64>,
    /// The window `requests` is counted in (required).
    pub unit: Option<RateLimitUnit>,
    /// Requests allowed at once (default `requests`).
    #[schemars(range(min = 1, max = 1000000))]
    pub burst: Option<i64>,
    /// What a budget is kept for (default: the client IP).
    pub key: Option<RateLimitKeySpec>,
}

/// What a rate limit counts requests by.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RateLimitKeySpec {
    /// What to count by (default `ClientIP`).
    #[serde(rename = "type")]
    pub type_: Option<RateLimitKeyType>,
    /// The header for `Header`.
    #[schemars(length(min = 1, max = 256))]
    pub header: Option<String>,
}

/// A class of responses a policy retries. Values outside this list are refused when the
/// object is read, as the API server refuses them by the CRD's enum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum RetryOn {
    /// 500–599.
    #[serde(rename = "5xx")]
    ServerError,
    /// 502, 503, 504.
    #[serde(rename = "gateway-error")]
    GatewayError,
}

/// The window of a rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum RateLimitUnit {
    /// Per second.
    Second,
    /// Per minute.
    Minute,
    /// Per hour.
    Hour,
}

/// What a rate limit counts requests by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum RateLimitKeyType {
    /// The client's IP address.
    #[serde(rename = "ClientIP")]
    ClientIp,
    /// A request header's value.
    Header,
    /// One budget for the whole target.
    Target,
}
