//! TrafficPolicy: its targets and its validated settings (pure; the attachment and the
//! merge per target are in `crate::incremental::PolicyIndex`).

use std::sync::Arc;
use std::time::Duration;

use weir_api::{
    ApiKeyAuthSpec, BasicAuthSpec, GlobalRateLimitSpec, HttpRouteRetry, HttpRouteTimeouts, Kind,
    LocalRateLimitSpec, Object, ObjectKey, PolicyRetry, PolicyTimeouts, RateLimitFailMode,
    RateLimitKeySpec, RateLimitKeyType, RateLimitUnit, RetryOn, Secret, TrafficPolicy,
};
use weir_model::{
    ApiKeyAuth, Authorization, BasicAuth, CircuitBreaker, ExtAuth, FailMode, GlobalRateLimit,
    HealthCheck, IpNet, IpRules, JwtAuth, LoadBalancer, LocalRateLimit, PasswordScheme,
    RateLimitKey, Retry, Timeouts,
};

use crate::compile::backend_policy;
use crate::compile::duration;
use crate::compile::http_route::{compile_retry, compile_timeouts};
use crate::compile::jwt;
use crate::store::{Dep, Store};

/// One targetRef of a policy, resolved to its namespace (a policy targets objects of its
/// own namespace).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct TargetRef {
    /// The target's kind; `None` for a group/kind weir does not attach policies to.
    pub(crate) kind: Option<Kind>,
    pub(crate) group: Arc<str>,
    pub(crate) kind_name: Arc<str>,
    pub(crate) namespace: Arc<str>,
    pub(crate) name: Arc<str>,
    pub(crate) section: Option<Arc<str>>,
}

/// What one policy object sets (every field optional), shared by every target it names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PolicySettings {
    /// `namespace/name` of the policy (named by rate-limit refusals and logs).
    pub(crate) name: Arc<str>,
    pub(crate) timeouts: Timeouts,
    pub(crate) retry: Option<Retry>,
    pub(crate) rate_limit: Option<LocalRateLimit>,
    pub(crate) api_key_auth: Option<Arc<ApiKeyAuth>>,
    pub(crate) basic_auth: Option<Arc<BasicAuth>>,
    pub(crate) ip_rules: Option<Arc<IpRules>>,
    pub(crate) jwt_auth: Option<Arc<JwtAuth>>,
    pub(crate) health_check: Option<Arc<HealthCheck>>,
    pub(crate) circuit_breaker: Option<CircuitBreaker>,
    pub(crate) ext_auth: Option<Arc<ExtAuth>>,
    pub(crate) load_balancer: Option<LoadBalancer>,
    pub(crate) global_rate_limit: Option<GlobalRateLimit>,
    pub(crate) authorization: Option<Arc<Authorization>>,
    pub(crate) cors: Option<Arc<weir_model::Cors>>,
    pub(crate) request_limits: Option<weir_model::RequestLimits>,
    pub(crate) concurrency_limit: Option<weir_model::ConcurrencyLimit>,
    pub(crate) outlier_detection: Option<weir_model::OutlierDetection>,
    pub(crate) access_log: Option<weir_model::AccessLogPolicy>,
    pub(crate) tracing: Option<weir_model::TracingPolicy>,
}

/// The fields of a policy, for per-field merging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    RequestTimeout,
    BackendRequestTimeout,
    BackendSendTimeout,
    Retry,
    RateLimit,
    ApiKeyAuth,
    BasicAuth,
    IpRules,
    JwtAuth,
    HealthCheck,
    CircuitBreaker,
    ExtAuth,
    LoadBalancer,
    GlobalRateLimit,
    Authorization,
    Cors,
    RequestLimits,
    ConcurrencyLimit,
    OutlierDetection,
    AccessLog,
    Tracing,
}

impl Field {
    pub(crate) const ALL: [Field; 21] = [
        Field::RequestTimeout,
        Field::BackendRequestTimeout,
        Field::BackendSendTimeout,
        Field::Retry,
        Field::RateLimit,
        Field::ApiKeyAuth,
        Field::BasicAuth,
        Field::IpRules,
        Field::JwtAuth,
        Field::HealthCheck,
        Field::CircuitBreaker,
        Field::ExtAuth,
        Field::LoadBalancer,
        Field::GlobalRateLimit,
        Field::Authorization,
        Field::Cors,
        Field::RequestLimits,
        Field::ConcurrencyLimit,
        Field::OutlierDetection,
        Field::AccessLog,
        Field::Tracing,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Field::RequestTimeout => "timeouts.request",
            Field::BackendRequestTimeout => "timeouts.backendRequest",
            Field::BackendSendTimeout => "timeouts.backendSend",
            Field::Retry => "retry",
            Field::RateLimit => "rateLimit.local",
            Field::ApiKeyAuth => "apiKeyAuth",
            Field::BasicAuth => "basicAuth",
            Field::IpRules => "ipRules",
            Field::JwtAuth => "jwtAuth",
            Field::HealthCheck => "healthCheck",
            Field::CircuitBreaker => "circuitBreaker",
            Field::ExtAuth => "extAuth",
            Field::LoadBalancer => "loadBalancer",
            Field::GlobalRateLimit => "rateLimit.global",
            Field::Authorization => "authorization",
            Field::Cors => "cors",
            Field::RequestLimits => "requestLimits",
            Field::ConcurrencyLimit => "concurrencyLimit",
            Field::OutlierDetection => "outlierDetection",
            Field::AccessLog => "accessLog",
            Field::Tracing => "tracing",
        }
    }

    /// Whether the field belongs to the endpoints (a Service or Backend target) rather
    /// than to requests (a Gateway, route or rule target).
    pub(crate) fn is_backend(self) -> bool {
        matches!(
            self,
            Field::HealthCheck
                | Field::CircuitBreaker
                | Field::LoadBalancer
                | Field::OutlierDetection
        )
    }
}

impl PolicySettings {
    /// Whether the policy sets `field`.
    pub(crate) fn sets(&self, field: Field) -> bool {
        match field {
            Field::RequestTimeout => self.timeouts.request.is_some(),
            Field::BackendRequestTimeout => self.timeouts.backend_request.is_some(),
            Field::BackendSendTimeout => self.timeouts.backend_send.is_some(),
            Field::Retry => self.retry.is_some(),
            Field::RateLimit => self.rate_limit.is_some(),
            Field::ApiKeyAuth => self.api_key_auth.is_some(),
            Field::BasicAuth => self.basic_auth.is_some(),
            Field::IpRules => self.ip_rules.is_some(),
            Field::JwtAuth => self.jwt_auth.is_some(),
            Field::HealthCheck => self.health_check.is_some(),
            Field::CircuitBreaker => self.circuit_breaker.is_some(),
            Field::ExtAuth => self.ext_auth.is_some(),
            Field::LoadBalancer => self.load_balancer.is_some(),
            Field::GlobalRateLimit => self.global_rate_limit.is_some(),
            Field::Authorization => self.authorization.is_some(),
            Field::Cors => self.cors.is_some(),
            Field::RequestLimits => self.request_limits.is_some(),
            Field::ConcurrencyLimit => self.concurrency_limit.is_some(),
            Field::OutlierDetection => self.outlier_detection.is_some(),
            Field::AccessLog => self.access_log.is_some(),
            Field::Tracing => self.tracing.is_some(),
        }
    }

    /// Whether these settings may apply to target `t`: fields of requests on Gateways and
    /// routes, fields of endpoints on Services and Backends; the error names the first
    /// field that does not fit.
    pub(crate) fn fits(&self, t: &TargetRef) -> Result<(), String> {
        let backend = matches!(t.kind, Some(Kind::Service | Kind::Backend));
        match Field::ALL
            .iter()
            .find(|f| self.sets(**f) && f.is_backend() != backend)
        {
            None => Ok(()),
            Some(f) if backend => Err(format!(
                "spec.{}: applies to a Gateway or a route, not to a {}",
                f.name(),
                t.kind_name
            )),
            Some(f) => Err(format!(
                "spec.{}: applies to a Service or a Backend, not to a {}",
                f.name(),
                t.kind_name
            )),
        }
    }
}

/// A compiled policy: its targets, and its settings or why they are invalid.
pub(crate) struct CompiledPolicy {
    pub(crate) targets: Vec<TargetRef>,
    pub(crate) settings: Result<Arc<PolicySettings>, String>,
    /// Referenced objects that are missing or unusable: the policy applies (an auth check
    /// without usable credentials refuses every request) but is not `Accepted`.
    pub(crate) unresolved: Vec<String>,
    /// Parts of referenced objects that were skipped (the policy is still `Accepted`).
    pub(crate) warnings: Vec<String>,
    /// Objects the settings were read from (Secrets), to recompile on their change.
    pub(crate) deps: Vec<Dep>,
}

/// Compiles a TrafficPolicy (Secrets it references are read from `store`).
pub(crate) fn compile(p: &TrafficPolicy, store: &Store) -> CompiledPolicy {
    let ns: Arc<str> = p.metadata.namespace.as_ref().into();
    let mut targets: Vec<TargetRef> = p
        .spec
        .target_refs
        .iter()
        .map(|t| TargetRef {
            kind: target_kind(&t.group, &t.kind),
            group: t.group.as_str().into(),
            kind_name: t.kind.as_str().into(),
            namespace: ns.clone(),
            name: t.name.as_str().into(),
            section: t.section_name.as_deref().map(Into::into),
        })
        .collect();
    targets.sort();
    targets.dedup();
    let name: Arc<str> = format!("{}/{}", p.metadata.namespace, p.metadata.name).into();
    let mut refs = Refs {
        store,
        namespace: &p.metadata.namespace,
        unresolved: Vec::new(),
        warnings: Vec::new(),
        deps: Vec::new(),
    };
    let settings = settings(p, name, &mut refs).map(Arc::new);
    CompiledPolicy {
        targets,
        settings,
        unresolved: refs.unresolved,
        warnings: refs.warnings,
        deps: refs.deps,
    }
}

/// The kinds a TrafficPolicy attaches to.
fn target_kind(group: &str, kind: &str) -> Option<Kind> {
    match (group, kind) {
        ("gateway.networking.k8s.io", "Gateway") => Some(Kind::Gateway),
        ("gateway.networking.k8s.io", "ListenerSet") => Some(Kind::ListenerSet),
        ("gateway.networking.x-k8s.io", "XListenerSet") => Some(Kind::XListenerSet),
        ("gateway.networking.k8s.io", "HTTPRoute") => Some(Kind::HttpRoute),
        ("gateway.networking.k8s.io", "GRPCRoute") => Some(Kind::GrpcRoute),
        ("", "Service") => Some(Kind::Service),
        ("weir.dev", "Backend") => Some(Kind::Backend),
        _ => None,
    }
}

/// Where a policy's references resolve, and what came of them.
pub(crate) struct Refs<'a> {
    pub(crate) store: &'a Store,
    pub(crate) namespace: &'a str,
    /// Missing or unusable references (the settings apply, but are not `Accepted`).
    pub(crate) unresolved: Vec<String>,
    /// Skipped parts of references.
    pub(crate) warnings: Vec<String>,
    /// Objects read.
    pub(crate) deps: Vec<Dep>,
}

/// Extra CA certificates of an outbound HTTPS client (an authorization service, a
/// remote JWK Set): inline PEM (`{f}.caCertificate`) or the `ca.crt` of a ConfigMap in the
/// policy's namespace (`{f}.caCertificateRef`, a dependency). Both set is an error; a
/// missing ConfigMap or key is `unresolved` and leaves the system's roots alone, so a
/// service with a private CA then fails its handshake (refused, not trusted blindly).
pub(crate) fn ca_pem(
    inline: &Option<String>,
    r: &Option<weir_api::LocalConfigMapReference>,
    f: &str,
    refs: &mut Refs<'_>,
) -> Result<Option<Arc<str>>, String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    match (inline, r) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(format!(
            "{f}: at most one of caCertificate and caCertificateRef"
        )),
        (Some(pem), None) if pem.contains(BEGIN) => Ok(Some(Arc::from(pem.as_str()))),
        (Some(_), None) => Err(format!("{f}.caCertificate: no PEM certificate ({BEGIN})")),
        (None, Some(r)) => {
            if r.name.is_empty() {
                return Err(format!("{f}.caCertificateRef.name: required"));
            }
            let ns = refs.namespace;
            let obj = ObjectKey::new(Kind::ConfigMap, ns, &r.name);
            refs.deps.push(Dep::Object(obj.clone()));
            let data = match refs.store.get(&obj).map(|o| &**o) {
                Some(Object::ConfigMap(cm)) => cm.data.get("ca.crt"),
                _ => {
                    refs.unresolved.push(format!(
                        "{f}.caCertificateRef: ConfigMap {ns}/{} not found",
                        r.name
                    ));
                    return Ok(None);
                }
            };
            match data {
                Some(pem) if pem.contains(BEGIN) => Ok(Some(Arc::from(pem.as_str()))),
                _ => {
                    refs.unresolved.push(format!(
                        "{f}.caCertificateRef: ConfigMap {ns}/{} has no PEM certificate under ca.crt",
                        r.name
                    ));
                    Ok(None)
                }
            }
        }
    }
}

fn settings(
    p: &TrafficPolicy,
    name: Arc<str>,
    refs: &mut Refs<'_>,
) -> Result<PolicySettings, String> {
    let spec = &p.spec;
    if spec.target_refs.is_empty() {
        return Err("spec.targetRefs: at least one target is required".into());
    }
    let timeouts = match &spec.timeouts {
        Some(t) => policy_timeouts(t, "spec.timeouts")?,
        None => Timeouts::default(),
    };
    let retry = spec
        .retry
        .as_ref()
        .map(|r| policy_retry(r, "spec.retry"))
        .transpose()?;
    let rate_limit = match spec.rate_limit.as_ref().and_then(|r| r.local.as_ref()) {
        Some(l) => Some(local_rate_limit(l, "spec.rateLimit.local")?),
        None => None,
    };
    let global_rate_limit = match spec.rate_limit.as_ref().and_then(|r| r.global.as_ref()) {
        Some(g) => Some(global_rate_limit(g, "spec.rateLimit.global")?),
        None => None,
    };
    let api_key_auth = spec
        .api_key_auth
        .as_ref()
        .map(|a| api_key_auth(a, "spec.apiKeyAuth", refs))
        .transpose()?
        .map(Arc::new);
    let basic_auth = spec
        .basic_auth
        .as_ref()
        .map(|b| basic_auth(b, "spec.basicAuth", refs))
        .transpose()?
        .map(Arc::new);
    let ip_rules = spec
        .ip_rules
        .as_ref()
        .map(|r| {
            ip_rules(
                &r.allow,
                &r.deny,
                ("spec.ipRules.allow", "spec.ipRules.deny"),
            )
        })
        .transpose()?
        .map(Arc::new);
    let jwt_auth = spec
        .jwt_auth
        .as_ref()
        .map(|a| jwt::jwt_auth(a, "spec.jwtAuth", refs))
        .transpose()?
        .map(Arc::new);
    let health_check = spec
        .health_check
        .as_ref()
        .map(|h| backend_policy::health_check(h, "spec.healthCheck"))
        .transpose()?
        .map(Arc::new);
    let circuit_breaker = spec
        .circuit_breaker
        .as_ref()
        .map(|c| backend_policy::circuit_breaker(c, "spec.circuitBreaker"))
        .transpose()?;
    let ext_auth = match spec.ext_auth.as_deref() {
        None => None,
        Some(e) => {
            let ca = ca_pem(
                &e.ca_certificate,
                &e.ca_certificate_ref,
                "spec.extAuth",
                refs,
            )?;
            Some(Arc::new(crate::compile::ext_auth::ext_auth(
                e,
                "spec.extAuth",
                ca,
            )?))
        }
    };
    let load_balancer = spec
        .load_balancer
        .as_ref()
        .map(|l| backend_policy::load_balancer(l, "spec.loadBalancer"))
        .transpose()?;
    let outlier_detection = spec
        .outlier_detection
        .as_deref()
        .map(|o| crate::compile::outlier::outlier_detection(o, "spec.outlierDetection"))
        .transpose()?;
    let authorization = spec
        .authorization
        .as_deref()
        .map(|a| crate::compile::authz::authorization(a, "spec.authorization"))
        .transpose()?
        .map(Arc::new);
    let cors = spec
        .cors
        .as_deref()
        .map(|c| crate::compile::cors::compile(c, "spec.cors"))
        .transpose()?
        .map(Arc::new);
    let request_limits = spec
        .request_limits
        .as_ref()
        .map(|l| request_limits(l, "spec.requestLimits"))
        .transpose()?;
    let concurrency_limit = match spec.concurrency_limit.as_ref().map(|c| c.per_client) {
        None => None,
        Some(Some(n)) if (1..=1_000_000).contains(&n) => Some(weir_model::ConcurrencyLimit {
            per_client: n as u32,
        }),
        Some(Some(n)) => {
            return Err(format!(
                "spec.concurrencyLimit.perClient: {n} is not between 1 and 1000000"
            ));
        }
        Some(None) => return Err("spec.concurrencyLimit.perClient: required".into()),
    };
    let access_log = spec
        .access_log
        .as_deref()
        .map(|l| access_log(l, "spec.accessLog"))
        .transpose()?;
    let tracing = spec
        .tracing
        .as_ref()
        .map(|t| tracing(t, "spec.tracing"))
        .transpose()?;
    let s = PolicySettings {
        name,
        access_log,
        tracing,
        authorization,
        cors,
        request_limits,
        concurrency_limit,
        outlier_detection,
        ext_auth,
        health_check,
        circuit_breaker,
        load_balancer,
        global_rate_limit,
        timeouts,
        retry,
        rate_limit,
        api_key_auth,
        basic_auth,
        ip_rules,
        jwt_auth,
    };
    if !Field::ALL.iter().any(|f| s.sets(*f)) {
        return Err(
            "spec: sets nothing (timeouts, retry, rateLimit, apiKeyAuth, basicAuth, ipRules, jwtAuth, extAuth, authorization, cors, requestLimits, concurrencyLimit, accessLog, tracing, healthCheck, circuitBreaker, loadBalancer or outlierDetection)"
                .into(),
        );
    }
    Ok(s)
}

/// Request size limits: each set field within its range, at least one set.
fn request_limits(
    l: &weir_api::RequestLimitsSpec,
    field: &str,
) -> Result<weir_model::RequestLimits, String> {
    let ranged = |v: Option<i64>, name: &str, min: i64, max: i64| match v {
        None => Ok(None),
        Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
        Some(n) => Err(format!(
            "{field}.{name}: {n} is not between {min} and {max}"
        )),
    };
    let limits = weir_model::RequestLimits {
        max_body_bytes: ranged(l.max_body_bytes, "maxBodyBytes", 0, 1 << 40)?.map(|n| n as u64),
        max_header_bytes: ranged(l.max_header_bytes, "maxHeaderBytes", 1024, 1 << 20)?
            .map(|n| n as u32),
        max_headers: ranged(l.max_headers, "maxHeaders", 1, 1000)?.map(|n| n as u32),
    };
    if limits == weir_model::RequestLimits::default() {
        return Err(format!(
            "{field}: set maxBodyBytes, maxHeaderBytes or maxHeaders"
        ));
    }
    Ok(limits)
}

/// The most networks of one `allow` or `deny` list.
const MAX_NETWORKS: usize = 256;

/// Client address rules from CIDR lists, whose field paths are `fields` (allow, deny).
pub(crate) fn ip_rules(
    allow: &[String],
    deny: &[String],
    fields: (&str, &str),
) -> Result<IpRules, String> {
    if allow.is_empty() && deny.is_empty() {
        return Err(format!("{} or {}: required", fields.0, fields.1));
    }
    let nets = |list: &[String], field: &str| {
        if list.len() > MAX_NETWORKS {
            return Err(format!("{field}: at most {MAX_NETWORKS} networks"));
        }
        list.iter()
            .enumerate()
            .map(|(i, s)| IpNet::parse(s.trim()).map_err(|e| format!("{field}[{i}]: {e}")))
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(IpRules {
        allow: nets(allow, fields.0)?,
        deny: nets(deny, fields.1)?,
    })
}

/// The most Secrets one `apiKeyAuth` may name.
const MAX_KEY_SECRETS: usize = 16;
/// The shortest key accepted (shorter keys are guessable).
const MIN_KEY_LEN: usize = 8;

fn api_key_auth(
    a: &ApiKeyAuthSpec,
    field: &str,
    refs: &mut Refs<'_>,
) -> Result<ApiKeyAuth, String> {
    let header = a.header.as_deref().unwrap_or("x-api-key");
    if !RateLimitKey::is_header_name(header) {
        return Err(format!("{field}.header: {header:?} is not a header name"));
    }
    if a.secret_refs.is_empty() {
        return Err(format!(
            "{field}.secretRefs: at least one Secret is required"
        ));
    }
    if a.secret_refs.len() > MAX_KEY_SECRETS {
        return Err(format!(
            "{field}.secretRefs: at most {MAX_KEY_SECRETS} Secrets"
        ));
    }
    let mut keys = Vec::new();
    for (i, r) in a.secret_refs.iter().enumerate() {
        let key = ObjectKey::new(Kind::Secret, refs.namespace, &r.name);
        refs.deps.push(Dep::Object(key.clone()));
        let f = format!("{field}.secretRefs[{i}]");
        let Some(obj) = refs.store.get(&key) else {
            refs.unresolved.push(format!(
                "{f}: Secret {}/{} not found; requests are refused (401) until it exists",
                refs.namespace, r.name
            ));
            continue;
        };
        let Object::Secret(secret) = &**obj else {
            continue;
        };
        for (client, value) in secret_entries(secret) {
            match value {
                Some(v) if v.len() >= MIN_KEY_LEN => {
                    keys.push((sha256(&v), client.into()));
                }
                Some(_) => refs.warnings.push(format!(
                    "{f}: the key of client {client:?} is shorter than {MIN_KEY_LEN} bytes; ignored"
                )),
                None => refs.warnings.push(format!(
                    "{f}: the key of client {client:?} is not valid base64; ignored"
                )),
            }
        }
    }
    Ok(ApiKeyAuth::new(
        header.to_ascii_lowercase().into(),
        keys,
        a.forward_key.unwrap_or(false),
    ))
}

/// The Secret key holding htpasswd lines (ingress-nginx's `auth-secret` layout).
const HTPASSWD_KEY: &str = "auth";

fn basic_auth(b: &BasicAuthSpec, field: &str, refs: &mut Refs<'_>) -> Result<BasicAuth, String> {
    let realm = b.realm.as_deref().unwrap_or("weir");
    check_realm(realm).map_err(|e| format!("{field}.realm: {realm:?} {e}"))?;
    let name = &b.secret_ref.name;
    if name.is_empty() {
        return Err(format!("{field}.secretRef.name: required"));
    }
    Ok(htpasswd_users(
        realm,
        name,
        HtpasswdLayout::File,
        &format!("{field}.secretRef"),
        refs,
    ))
}

/// A realm goes into a quoted-string of `WWW-Authenticate`.
pub(crate) fn check_realm(realm: &str) -> Result<(), &'static str> {
    if realm
        .bytes()
        .any(|c| c == b'"' || c == b'\\' || c.is_ascii_control())
        || realm.len() > 256
    {
        return Err(
            "must be at most 256 characters without quotes, backslashes or control characters",
        );
    }
    Ok(())
}

/// How a Secret holds htpasswd entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HtpasswdLayout {
    /// One key, `auth`, with `user:hash` lines (ingress-nginx's `auth-file`).
    File,
    /// One key per user, the hash as its value (ingress-nginx's `auth-map`).
    Map,
}

/// The users of Secret `name` (in `refs.namespace`): a missing Secret or key is
/// `unresolved` (no users: every request refused), a skipped entry a warning.
pub(crate) fn htpasswd_users(
    realm: &str,
    name: &str,
    layout: HtpasswdLayout,
    f: &str,
    refs: &mut Refs<'_>,
) -> BasicAuth {
    let key = ObjectKey::new(Kind::Secret, refs.namespace, name);
    refs.deps.push(Dep::Object(key.clone()));
    let mut users = Vec::new();
    let Some(Object::Secret(secret)) = refs.store.get(&key).map(|o| &**o) else {
        refs.unresolved.push(format!(
            "{f}: Secret {}/{name} not found; requests are refused (401) until it exists",
            refs.namespace
        ));
        return BasicAuth::new(realm.into(), users);
    };
    let mut entries: Vec<(String, String)> = Vec::new();
    match layout {
        HtpasswdLayout::File => {
            let lines = secret_entries(secret)
                .into_iter()
                .find(|(k, _)| *k == HTPASSWD_KEY)
                .map(|(_, v)| v);
            let text = match lines {
                Some(Some(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
                Some(None) => {
                    refs.unresolved.push(format!(
                        "{f}: Secret {}/{name}: key {HTPASSWD_KEY:?} is not valid base64; requests are refused (401)",
                        refs.namespace
                    ));
                    return BasicAuth::new(realm.into(), users);
                }
                None => {
                    refs.unresolved.push(format!(
                        "{f}: Secret {}/{name} has no key {HTPASSWD_KEY:?} (htpasswd lines); requests are refused (401)",
                        refs.namespace
                    ));
                    return BasicAuth::new(realm.into(), users);
                }
            };
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                match line.split_once(':') {
                    Some((user, hash)) => entries.push((user.into(), hash.into())),
                    None => refs
                        .warnings
                        .push(format!("{f}: line {} is not user:hash; ignored", i + 1)),
                }
            }
        }
        HtpasswdLayout::Map => {
            for (user, value) in secret_entries(secret) {
                match value {
                    Some(v) => entries.push((
                        user.to_owned(),
                        String::from_utf8_lossy(&v).trim().to_owned(),
                    )),
                    None => refs
                        .warnings
                        .push(format!("{f}: user {user:?}: not valid base64; ignored")),
                }
            }
        }
    }
    for (user, hash) in entries {
        match PasswordScheme::check(&hash) {
            Ok(_) => users.push((user.as_str().into(), hash.as_str().into())),
            Err(why) => refs
                .warnings
                .push(format!("{f}: user {user:?}: {why}; ignored")),
        }
    }
    BasicAuth::new(realm.into(), users)
}

/// A Secret's entries, decoded (`stringData` over `data`); `None` for bad base64.
pub(crate) fn secret_entries(s: &Secret) -> Vec<(&str, Option<Vec<u8>>)> {
    let decoded = |k| {
        s.value(k)
            .and_then(Result::ok)
            .map(std::borrow::Cow::into_owned)
    };
    let mut out: Vec<(&str, Option<Vec<u8>>)> = s
        .string_data
        .iter()
        .map(|(k, v)| (k, Some(v.as_bytes().to_vec())))
        .collect();
    if s.tls.is_some() {
        out.extend(["tls.crt", "tls.key"].map(|k| (k, decoded(k))));
    }
    for (k, _) in &s.data {
        if !s.string_data.contains_key(k) {
            out.push((k, decoded(k)));
        }
    }
    out
}

/// The SHA-256 digest of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes);
    let mut out = [0; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// A TrafficPolicy's `timeouts`: HTTPRoute's two, and `backendSend`.
fn policy_timeouts(t: &PolicyTimeouts, field: &str) -> Result<Timeouts, String> {
    let route = HttpRouteTimeouts {
        request: t.request.clone(),
        backend_request: t.backend_request.clone(),
    };
    let backend_send = t
        .backend_send
        .as_deref()
        .map(|s| {
            duration::parse(s)
                .map(|d| d.unwrap_or(Duration::ZERO))
                .map_err(|e| format!("{field}.backendSend: {e}"))
        })
        .transpose()?;
    Ok(Timeouts {
        backend_send,
        ..compile_timeouts(&route, field)?
    })
}

/// The longest request body a retry may keep (16 MiB).
const MAX_REPLAY_BODY: i64 = 16 * 1024 * 1024;

fn policy_retry(r: &PolicyRetry, field: &str) -> Result<Retry, String> {
    let mut retry = compile_retry(
        &HttpRouteRetry {
            codes: r.codes.clone(),
            attempts: r.attempts,
            backoff: r.backoff.clone(),
        },
        field,
    )?;
    retry.replay_body = match r.replay_body_bytes {
        None => Retry::DEFAULT_REPLAY_BODY,
        Some(n) if (0..=MAX_REPLAY_BODY).contains(&n) => n as u32,
        Some(n) => {
            return Err(format!(
                "{field}.replayBodyBytes: {n} is not between 0 and {MAX_REPLAY_BODY}"
            ));
        }
    };
    retry.non_idempotent = r.non_idempotent.unwrap_or(false);
    for class in r.retry_on.iter().flatten() {
        match class {
            RetryOn::ServerError => retry.codes.extend(500..=599),
            RetryOn::GatewayError => retry.codes.extend_from_slice(&[502, 503, 504]),
        }
    }
    retry.codes.sort_unstable();
    retry.codes.dedup();
    Ok(retry)
}

/// The most requests a local limit may allow at once (each bucket is one counter; the
/// bound keeps `burst × interval` within the limiter's arithmetic).
const MAX_BURST: i64 = 1_000_000;

fn local_rate_limit(l: &LocalRateLimitSpec, field: &str) -> Result<LocalRateLimit, String> {
    let requests = match l.requests {
        Some(r) if (1..=1_000_000_000).contains(&r) => r as u32,
        Some(r) => {
            return Err(format!(
                "{field}.requests: {r} is not between 1 and 1000000000"
            ));
        }
        None => return Err(format!("{field}.requests: required")),
    };
    let per = rate_unit(l.unit, field)?;
    let burst = match l.burst {
        None => requests.min(MAX_BURST as u32),
        Some(b) if (1..=MAX_BURST).contains(&b) => b as u32,
        Some(b) => {
            return Err(format!(
                "{field}.burst: {b} is not between 1 and {MAX_BURST}"
            ));
        }
    };
    let key = rate_limit_key(l.key.as_ref(), field)?;
    Ok(LocalRateLimit {
        requests,
        per,
        burst,
        key,
    })
}

fn rate_unit(unit: Option<RateLimitUnit>, field: &str) -> Result<Duration, String> {
    match unit {
        Some(RateLimitUnit::Second) => Ok(Duration::from_secs(1)),
        Some(RateLimitUnit::Minute) => Ok(Duration::from_secs(60)),
        Some(RateLimitUnit::Hour) => Ok(Duration::from_secs(3600)),
        None => Err(format!("{field}.unit: required")),
    }
}

fn rate_limit_key(key: Option<&RateLimitKeySpec>, field: &str) -> Result<RateLimitKey, String> {
    Ok(match key {
        None => RateLimitKey::ClientIp,
        Some(k) => match (k.type_, k.header.as_deref()) {
            (None | Some(RateLimitKeyType::ClientIp), None) => RateLimitKey::ClientIp,
            (Some(RateLimitKeyType::Header), Some(h)) if RateLimitKey::is_header_name(h) => {
                RateLimitKey::Header(h.to_ascii_lowercase().into())
            }
            (Some(RateLimitKeyType::Header), Some(h)) => {
                return Err(format!("{field}.key.header: {h:?} is not a header name"));
            }
            (Some(RateLimitKeyType::Header), None) => {
                return Err(format!("{field}.key.header: required"));
            }
            (Some(RateLimitKeyType::Target), None) => RateLimitKey::Target,
            (None | Some(RateLimitKeyType::ClientIp | RateLimitKeyType::Target), Some(_)) => {
                return Err(format!("{field}.key.header: only allowed with type Header"));
            }
        },
    })
}

fn global_rate_limit(g: &GlobalRateLimitSpec, field: &str) -> Result<GlobalRateLimit, String> {
    let requests = match g.requests {
        Some(r) if (1..=1_000_000_000).contains(&r) => r as u32,
        Some(r) => {
            return Err(format!(
                "{field}.requests: {r} is not between 1 and 1000000000"
            ));
        }
        None => return Err(format!("{field}.requests: required")),
    };
    Ok(GlobalRateLimit {
        requests,
        window: rate_unit(g.unit, field)?,
        key: rate_limit_key(g.key.as_ref(), field)?,
        fail_mode: match g.fail_mode {
            None | Some(RateLimitFailMode::Open) => FailMode::Open,
            Some(RateLimitFailMode::Closed) => FailMode::Closed,
        },
    })
}

/// `accessLog`: the field names checked (an unknown one is named), an empty list refused.
fn access_log(
    l: &weir_api::AccessLogPolicySpec,
    at: &str,
) -> Result<weir_model::AccessLogPolicy, String> {
    let fields = match &l.fields {
        None => None,
        Some(names) if names.is_empty() => {
            return Err(format!(
                "{at}.fields: names no field (leave it out for the process's list)"
            ));
        }
        Some(names) => Some(
            weir_model::access_log_field_bits(names.iter().map(|n| n.trim()))
                .map_err(|e| format!("{at}.fields: {e}"))?,
        ),
    };
    Ok(weir_model::AccessLogPolicy {
        disabled: l.disabled.unwrap_or(false),
        fields,
        errors_only: l.errors_only.unwrap_or(false),
    })
}

/// `tracing`: the ratio checked (0 to 1) and kept in parts per million.
fn tracing(t: &weir_api::TracingPolicySpec, at: &str) -> Result<weir_model::TracingPolicy, String> {
    let sampling = match t.sampling_ratio {
        None => None,
        Some(weir_api::Ratio(r)) if (0.0..=1.0).contains(&r) => {
            Some((r * f64::from(weir_model::SAMPLING_SCALE)).round() as u32)
        }
        Some(weir_api::Ratio(r)) => {
            return Err(format!("{at}.samplingRatio: {r} is not between 0 and 1"));
        }
    };
    Ok(weir_model::TracingPolicy {
        disabled: t.disabled.unwrap_or(false),
        sampling,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: &str) -> TrafficPolicy {
        let v: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
        match weir_api::Object::from_value(v).unwrap() {
            weir_api::Object::TrafficPolicy(p) => *p,
            other => panic!("{other:?}"),
        }
    }

    const HEAD: &str =
        "apiVersion: weir.dev/v1alpha1\nkind: TrafficPolicy\nmetadata: {name: p, namespace: ns}\n";

    /// The CRD's enum of `accessLog.fields` (from `weir-api`) is `all` and the model's
    /// field names: a field added to one list and not the other fails here.
    #[test]
    fn the_crd_names_the_access_log_fields_of_the_model() {
        let (all, names) = weir_api::ACCESS_LOG_FIELD_NAMES
            .split_first()
            .expect("the list is not empty");
        assert_eq!(*all, "all");
        assert_eq!(names, &weir_model::ACCESS_LOG_FIELDS[..]);
    }

    #[test]
    fn reads_every_field() {
        let p = policy(&format!(
            "{HEAD}spec:\n  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]\n  \
             timeouts: {{request: 10s, backendRequest: 0s, backendSend: 3s}}\n  \
             retry: {{attempts: 3, codes: [429], retryOn: [gateway-error], backoff: 100ms}}\n  \
             rateLimit: {{local: {{requests: 5, unit: Minute, key: {{type: Header, header: X-Api-Key}}}}}}\n"
        ));
        let c = compile(&p, &Store::default());
        assert_eq!(c.targets.len(), 1);
        assert_eq!(c.targets[0].kind, Some(Kind::Gateway));
        let s = c.settings.unwrap();
        assert_eq!(&*s.name, "ns/p");
        assert_eq!(s.timeouts.request, Some(Duration::from_secs(10)));
        assert_eq!(s.timeouts.backend_request, Some(Duration::ZERO));
        assert_eq!(s.timeouts.backend_send, Some(Duration::from_secs(3)));
        let r = s.retry.as_ref().unwrap();
        assert_eq!((r.attempts, &r.codes[..]), (3, &[429, 502, 503, 504][..]));
        assert_eq!(r.backoff, Duration::from_millis(100));
        let l = s.rate_limit.as_ref().unwrap();
        assert_eq!((l.requests, l.burst), (5, 5));
        assert_eq!(l.per, Duration::from_secs(60));
        assert_eq!(l.key, RateLimitKey::Header("x-api-key".into()));
    }

    #[test]
    fn reads_a_global_limit() {
        let p = policy(&format!(
            "{HEAD}spec:\n  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]\n  \
             rateLimit: {{global: {{requests: 100, unit: Second, key: {{type: Target}}, failMode: Closed}}}}\n"
        ));
        let s = compile(&p, &Store::default()).settings.unwrap();
        assert!(s.rate_limit.is_none());
        let g = s.global_rate_limit.clone().unwrap();
        assert_eq!(g.requests, 100);
        assert_eq!(g.window, Duration::from_secs(1));
        assert_eq!(g.key, RateLimitKey::Target);
        assert_eq!(g.fail_mode, FailMode::Closed);
        let p = policy(&format!(
            "{HEAD}spec:\n  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]\n  \
             rateLimit: {{global: {{requests: 0, unit: Second}}}}\n"
        ));
        let err = compile(&p, &Store::default()).settings.unwrap_err();
        assert!(err.starts_with("spec.rateLimit.global.requests"), "{err}");
    }

    #[test]
    fn errors_name_the_field() {
        let t = "  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n";
        let cases = [
            ("  retry: {attempts: 11}\n", "spec.retry.attempts"),
            (
                "  retry: {replayBodyBytes: -1}\n",
                "spec.retry.replayBodyBytes",
            ),
            (
                "  retry: {replayBodyBytes: 16777217}\n",
                "spec.retry.replayBodyBytes",
            ),
            ("  timeouts: {request: 1x}\n", "spec.timeouts.request"),
            (
                "  timeouts: {backendSend: 5x}\n",
                "spec.timeouts.backendSend",
            ),
            (
                "  rateLimit: {local: {requests: 0, unit: Second}}\n",
                "spec.rateLimit.local.requests",
            ),
            (
                "  rateLimit: {local: {requests: 1}}\n",
                "spec.rateLimit.local.unit",
            ),
            (
                "  rateLimit: {local: {requests: 1, unit: Second, key: {type: Header}}}\n",
                "spec.rateLimit.local.key.header",
            ),
            ("  {}\n", "spec: sets nothing"),
        ];
        for (spec, want) in cases {
            let spec = if spec.trim() == "{}" {
                String::new()
            } else {
                spec.to_string()
            };
            let p = policy(&format!("{HEAD}spec:\n{t}{spec}"));
            let err = compile(&p, &Store::default()).settings.unwrap_err();
            assert!(err.starts_with(want), "{err} should start with {want}");
        }
        let p = policy(&format!("{HEAD}spec:\n  timeouts: {{request: 1s}}\n"));
        assert!(
            compile(&p, &Store::default())
                .settings
                .unwrap_err()
                .starts_with("spec.targetRefs")
        );
    }

    /// Values outside an enum are refused when the object is read (as the API server
    /// refuses them by the CRD's schema), so a file edit with one keeps the last good
    /// object in effect.
    #[test]
    fn enum_values_are_checked_when_read() {
        for (spec, field) in [
            ("retry: {retryOn: [connect]}", "spec.retry.retryOn[0]"),
            (
                "rateLimit: {local: {requests: 1, unit: Day}}",
                "spec.rateLimit.local.unit",
            ),
            (
                "rateLimit: {local: {requests: 1, unit: Second, key: {type: Cookie}}}",
                "spec.rateLimit.local.key.type",
            ),
        ] {
            let v: serde_json::Value =
                serde_saphyr::from_str(&format!("{HEAD}spec:\n  {spec}\n")).unwrap();
            match weir_api::Object::from_value(v) {
                Err(weir_api::InvalidObject::Field { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{spec}: {other:?}"),
            }
        }
    }
}
