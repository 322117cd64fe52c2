//! Model ⇄ wire. Encoding cannot fail; decoding rebuilds each IR resource through its
//! constructor (so its content hash is computed here, once) and refuses anything that is
//! not a valid resource with an [`InvalidResource`] naming the field.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use weir_model::{
    Action, ApiKeyAuth, BackendKind, BackendTls, BasicAuth, Certificate, CircuitBreaker,
    ClientValidation, ClientValidationMode, Cluster, ClusterKey, ConnectionLimits,
    ConnectionTimeouts, ContentHash, Cors, CorsNames, CorsOrigin, DirectResponse, Ejection,
    Endpoint, EndpointAddr, ExtAuth, ExtAuthCache, ExtAuthUrl, FailMode, Filter, GeneratedCookie,
    GlobalRateLimit, HashOn, HeaderMatch, HeaderModifier, HealthCheck, HealthProbe, HostKind,
    HostMatch, IpNet, IpRules, JwtAuth, JwtKey, JwtKeyMaterial, JwtProvider, L4Backend, L4Mode,
    L4Route, Limits, Listener, ListenerKey, ListenerSection, ListenerSettings, LoadBalancer,
    LocalRateLimit, OutlierDetection, PasswordScheme, PathMatch, PathNormalization, PathRewrite,
    Pattern, Policy, PolicyTarget, Protocol, ProxyProtocol, QueryMatch, RateLimitKey, Redirect,
    RemoteJwks, RequestMatch, Resource, ResourceKey, Retry, RouteKind, RouteRef, RouteRule,
    SameSite, SniCert, StringMatch, SubjectName, Timeouts, TrustAnchors, UpstreamProtocol,
    UpstreamTls, VirtualHost, WeightedBackend, is_cookie_name, is_cookie_path,
};

use crate::proto as wire;

mod authz;

/// Why a wire resource was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidResource {
    /// The offending field, e.g. `rules[2].match.path.regex`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl std::fmt::Display) -> InvalidResource {
    InvalidResource {
        field: field.into(),
        message: message.to_string(),
    }
}

fn missing(field: &str) -> InvalidResource {
    invalid(field, "missing")
}

/// Prefixes the field of an error with `at`.
fn within(at: &str) -> impl Fn(InvalidResource) -> InvalidResource + '_ {
    move |e| InvalidResource {
        field: format!("{at}.{}", e.field),
        message: e.message,
    }
}

// ---------------------------------------------------------------- keys

fn addr(field: &str, s: &str) -> Result<SocketAddr, InvalidResource> {
    s.parse()
        .map_err(|_| invalid(field, format!("{s:?} is not ip:port")))
}

fn host_to_wire(h: &HostMatch) -> wire::Host {
    use wire::host::Host as H;
    wire::Host {
        host: Some(match h.kind() {
            HostKind::Exact(s) => H::Exact(s.to_string()),
            HostKind::Wildcard(s) => H::Wildcard(s.to_string()),
            HostKind::Any => H::Any(true),
        }),
    }
}

fn host_from_wire(field: &str, h: Option<&wire::Host>) -> Result<HostMatch, InvalidResource> {
    use wire::host::Host as H;
    match h.and_then(|h| h.host.as_ref()) {
        // What a host pattern holds tells its kind (`HostMatch`): an exact host never
        // starts with a dot, a wildcard's suffix always does.
        Some(H::Exact(s)) if s.is_empty() || s.starts_with('.') => {
            Err(invalid(field, format!("{s:?} is not an exact host")))
        }
        Some(H::Wildcard(s)) if s.len() < 2 || !s.starts_with('.') => {
            Err(invalid(field, format!("{s:?} is not a wildcard suffix")))
        }
        Some(H::Exact(s)) => Ok(HostMatch::exact(s.as_str().into())),
        Some(H::Wildcard(s)) => Ok(HostMatch::wildcard(s.as_str().into())),
        Some(H::Any(_)) => Ok(HostMatch::ANY),
        None => Err(missing(field)),
    }
}

/// The wire form of a key.
pub fn key_to_wire(k: &ResourceKey) -> wire::ResourceKey {
    use wire::resource_key::Key;
    let hk = |l: &ListenerKey, h: &HostMatch| wire::HostKey {
        listener: l.addr().to_string(),
        host: Some(host_to_wire(h)),
    };
    wire::ResourceKey {
        key: Some(match k {
            ResourceKey::Listener(l) => Key::Listener(l.addr().to_string()),
            ResourceKey::VirtualHost(l, h) => Key::VirtualHost(hk(l, h)),
            ResourceKey::Cluster(c) => Key::Cluster(c.0.to_string()),
            ResourceKey::Certificate(h) => Key::Certificate(h.0),
            ResourceKey::Sni(l, h) => Key::Sni(hk(l, h)),
            ResourceKey::L4Route(l, h) => Key::L4Route(hk(l, h)),
            ResourceKey::Policy(t) => Key::Policy(target_to_wire(t)),
        }),
    }
}

fn target_to_wire(t: &PolicyTarget) -> wire::PolicyTarget {
    use wire::policy_target::Target;
    wire::PolicyTarget {
        target: Some(match t {
            PolicyTarget::Gateway(g) => Target::Gateway(g.to_string()),
            PolicyTarget::Route {
                kind,
                namespace,
                name,
            } => Target::Route(route_ref_to_wire(&RouteRef {
                kind: *kind,
                namespace: namespace.clone(),
                name: name.clone(),
                rule: 0,
            })),
            PolicyTarget::Rule(r) => Target::Rule(route_ref_to_wire(r)),
            PolicyTarget::Backend {
                kind,
                namespace,
                name,
            } => Target::Backend(wire::BackendTarget {
                kind: match kind {
                    BackendKind::Service => wire::backend_target::Kind::Service,
                    BackendKind::Backend => wire::backend_target::Kind::Backend,
                } as i32,
                namespace: namespace.to_string(),
                name: name.to_string(),
            }),
            PolicyTarget::Listener {
                gateway,
                set,
                section,
            } => Target::Listener(wire::ListenerTarget {
                gateway: gateway.to_string(),
                set: set.as_deref().unwrap_or_default().to_owned(),
                section: section.to_string(),
            }),
            PolicyTarget::ListenerSet { gateway, set } => {
                Target::ListenerSet(wire::ListenerSetTarget {
                    gateway: gateway.to_string(),
                    set: set.to_string(),
                })
            }
        }),
    }
}

fn target_from_wire(t: &wire::PolicyTarget) -> Result<PolicyTarget, InvalidResource> {
    use wire::policy_target::Target;
    Ok(match t.target.as_ref().ok_or_else(|| missing("target"))? {
        Target::Gateway(g) => PolicyTarget::Gateway(g.as_str().into()),
        Target::Route(r) => {
            PolicyTarget::route_of(&route_ref_from_wire(r).map_err(within("route"))?)
        }
        Target::Rule(r) => PolicyTarget::Rule(route_ref_from_wire(r).map_err(within("rule"))?),
        Target::Backend(b) => PolicyTarget::Backend {
            kind: match wire::backend_target::Kind::try_from(b.kind) {
                Ok(wire::backend_target::Kind::Service) => BackendKind::Service,
                Ok(wire::backend_target::Kind::Backend) => BackendKind::Backend,
                Err(_) => return Err(invalid("backend.kind", b.kind)),
            },
            namespace: b.namespace.as_str().into(),
            name: b.name.as_str().into(),
        },
        Target::Listener(l) => {
            if l.section.is_empty() {
                return Err(missing("listener.section"));
            }
            PolicyTarget::Listener {
                gateway: l.gateway.as_str().into(),
                set: (!l.set.is_empty()).then(|| l.set.as_str().into()),
                section: l.section.as_str().into(),
            }
        }
        Target::ListenerSet(l) => {
            if l.set.is_empty() {
                return Err(missing("listener_set.set"));
            }
            PolicyTarget::ListenerSet {
                gateway: l.gateway.as_str().into(),
                set: l.set.as_str().into(),
            }
        }
    })
}

fn timeouts_to_wire(t: &Timeouts) -> wire::Timeouts {
    wire::Timeouts {
        request_ns: t.request.map(|d| d.as_nanos() as u64),
        backend_request_ns: t.backend_request.map(|d| d.as_nanos() as u64),
        backend_send_ns: t.backend_send.map(|d| d.as_nanos() as u64),
    }
}

fn timeouts_from_wire(t: Option<wire::Timeouts>) -> Timeouts {
    let t = t.unwrap_or_default();
    Timeouts {
        request: t.request_ns.map(Duration::from_nanos),
        backend_request: t.backend_request_ns.map(Duration::from_nanos),
        backend_send: t.backend_send_ns.map(Duration::from_nanos),
    }
}

fn retry_to_wire(rt: &Retry) -> wire::Retry {
    wire::Retry {
        attempts: rt.attempts,
        codes: rt.codes.iter().map(|c| u32::from(*c)).collect(),
        backoff_ns: rt.backoff.as_nanos() as u64,
        replay_body_bytes: (rt.replay_body != Retry::DEFAULT_REPLAY_BODY).then_some(rt.replay_body),
        non_idempotent: rt.non_idempotent,
    }
}

fn retry_from_wire(rt: &wire::Retry) -> Result<Retry, InvalidResource> {
    let mut codes = rt
        .codes
        .iter()
        .map(|c| status("retry.codes", *c))
        .collect::<Result<Vec<u16>, _>>()?;
    codes.sort_unstable();
    codes.dedup();
    Ok(Retry {
        attempts: rt.attempts,
        codes,
        backoff: Duration::from_nanos(rt.backoff_ns),
        replay_body: rt.replay_body_bytes.unwrap_or(Retry::DEFAULT_REPLAY_BODY),
        non_idempotent: rt.non_idempotent,
    })
}

fn policy_to_wire(p: &Policy) -> wire::Policy {
    use wire::local_rate_limit::Key;
    wire::Policy {
        target: Some(target_to_wire(&p.target)),
        timeouts: p.timeouts.is_set().then(|| timeouts_to_wire(&p.timeouts)),
        retry: p.retry.as_ref().map(retry_to_wire),
        rate_limit: p.rate_limit.as_ref().map(|(name, l)| wire::LocalRateLimit {
            policy: name.to_string(),
            requests: l.requests,
            per_ns: l.per.as_nanos() as u64,
            burst: l.burst,
            key: Some(match &l.key {
                RateLimitKey::ClientIp => Key::ClientIp(true),
                RateLimitKey::Header(h) => Key::Header(h.to_string()),
                RateLimitKey::Target => Key::Target(true),
            }),
        }),
        api_key_auth: p.api_key_auth.as_ref().map(|(name, a)| wire::ApiKeyAuth {
            policy: name.to_string(),
            header: a.header.to_string(),
            keys: a
                .keys
                .iter()
                .map(|(d, c)| wire::ApiKey {
                    sha256: d.to_vec(),
                    client: c.to_string(),
                })
                .collect(),
            forward_key: a.forward_key,
        }),
        ip_rules: p.ip_rules.as_ref().map(|(name, r)| wire::IpRules {
            policy: name.to_string(),
            allow: r.allow.iter().map(ToString::to_string).collect(),
            deny: r.deny.iter().map(ToString::to_string).collect(),
        }),
        jwt_auth: p
            .jwt_auth
            .as_ref()
            .map(|(name, j)| jwt_auth_to_wire(name, j)),
        health_check: p.health_check.as_deref().map(health_check_to_wire),
        ext_auth: p
            .ext_auth
            .as_ref()
            .map(|(name, e)| ext_auth_to_wire(name, e)),
        circuit_breaker: p.circuit_breaker.as_ref().map(|c| wire::CircuitBreaker {
            cluster: Some(limits_to_wire(&c.cluster)),
            endpoint: Some(limits_to_wire(&c.endpoint)),
        }),
        load_balancer: p.load_balancer.as_ref().map(load_balancer_to_wire),
        outlier_detection: p.outlier_detection.as_ref().map(outlier_to_wire),
        global_rate_limit: p.global_rate_limit.as_ref().map(|(name, g)| {
            use wire::global_rate_limit::Key as GKey;
            wire::GlobalRateLimit {
                policy: name.to_string(),
                requests: g.requests,
                window_ns: g.window.as_nanos() as u64,
                key: Some(match &g.key {
                    RateLimitKey::ClientIp => GKey::ClientIp(true),
                    RateLimitKey::Header(h) => GKey::Header(h.to_string()),
                    RateLimitKey::Target => GKey::Target(true),
                }),
                fail_closed: g.fail_mode == FailMode::Closed,
            }
        }),
        authorization: p
            .authorization
            .as_ref()
            .map(|(name, a)| authz::to_wire(name, a)),
        request_limits: p
            .request_limits
            .as_ref()
            .map(|(name, l)| wire::RequestLimits {
                policy: name.to_string(),
                max_body_bytes: l.max_body_bytes,
                max_header_bytes: l.max_header_bytes,
                max_headers: l.max_headers,
            }),
        concurrency_limit: p
            .concurrency_limit
            .as_ref()
            .map(|(name, l)| wire::ConcurrencyLimit {
                policy: name.to_string(),
                per_client: l.per_client,
            }),
        backend_tls: p.backend_tls.as_deref().map(backend_tls_to_wire),
        access_log: p
            .access_log
            .as_ref()
            .map(|(name, l)| wire::AccessLogPolicy {
                policy: name.to_string(),
                disabled: l.disabled,
                fields: l
                    .fields
                    .map(weir_model::access_log_field_names)
                    .into_iter()
                    .flatten()
                    .map(str::to_owned)
                    .collect(),
                errors_only: l.errors_only,
            }),
        tracing: p.tracing.as_ref().map(|(name, t)| wire::TracingPolicy {
            policy: name.to_string(),
            disabled: t.disabled,
            sampling_ppm: t.sampling,
        }),
        client_certificate: p.client_certificate.as_ref().map(|c| wire::Certificate {
            chain_pem: c.chain_pem().into_owned(),
            key_pem: c.key_pem().into_owned(),
        }),
        cors: p.cors.as_ref().map(|(name, c)| wire::PolicyCors {
            policy: name.to_string(),
            cors: Some(cors_to_wire(c)),
        }),
        basic_auth: p.basic_auth.as_ref().map(|(name, b)| wire::BasicAuth {
            policy: name.to_string(),
            realm: b.realm.to_string(),
            users: b
                .users
                .iter()
                .map(|(u, h)| wire::BasicAuthUser {
                    name: u.to_string(),
                    hash: h.to_string(),
                })
                .collect(),
        }),
    }
}

fn outlier_to_wire(o: &OutlierDetection) -> wire::OutlierDetection {
    wire::OutlierDetection {
        ejection: o.ejection.as_ref().map(|e| wire::Ejection {
            consecutive_5xx: e.consecutive_5xx,
            consecutive_gateway_errors: e.consecutive_gateway_errors,
            consecutive_local_origin_failures: e.consecutive_local_origin_failures,
            base_ejection_ns: e.base_ejection.as_nanos() as u64,
            max_ejection_ns: e.max_ejection.as_nanos() as u64,
            max_ejected_percent: e.max_ejected_percent,
        }),
        panic_threshold_percent: o.panic_threshold_percent,
    }
}

fn outlier_from_wire(o: &wire::OutlierDetection) -> Result<OutlierDetection, InvalidResource> {
    if o.panic_threshold_percent > 100 {
        return Err(invalid("panic_threshold_percent", "is over 100"));
    }
    let ejection = match &o.ejection {
        None => None,
        Some(e) => {
            if e.base_ejection_ns == 0 || e.max_ejection_ns < e.base_ejection_ns {
                return Err(invalid(
                    "ejection.max_ejection_ns",
                    "base must be above 0 and at most the max",
                ));
            }
            if e.max_ejected_percent > 100 {
                return Err(invalid("ejection.max_ejected_percent", "is over 100"));
            }
            Some(Ejection {
                consecutive_5xx: e.consecutive_5xx,
                consecutive_gateway_errors: e.consecutive_gateway_errors,
                consecutive_local_origin_failures: e.consecutive_local_origin_failures,
                base_ejection: Duration::from_nanos(e.base_ejection_ns),
                max_ejection: Duration::from_nanos(e.max_ejection_ns),
                max_ejected_percent: e.max_ejected_percent,
            })
        }
    };
    Ok(OutlierDetection {
        ejection,
        panic_threshold_percent: o.panic_threshold_percent,
    })
}

fn load_balancer_to_wire(lb: &LoadBalancer) -> wire::LoadBalancer {
    use wire::consistent_hash::On;
    use wire::load_balancer::Algorithm;
    let algorithm = match lb {
        LoadBalancer::RoundRobin => Algorithm::RoundRobin(true),
        LoadBalancer::LeastRequest => Algorithm::LeastRequest(true),
        LoadBalancer::LatencyAware => Algorithm::LatencyAware(true),
        LoadBalancer::ConsistentHash(on) => Algorithm::ConsistentHash(wire::ConsistentHash {
            on: Some(match on {
                HashOn::Header(h) => On::Header(h.to_string()),
                HashOn::Cookie { name, generate } => On::Cookie(wire::HashCookie {
                    name: name.to_string(),
                    generate: generate.as_ref().map(|g| wire::GeneratedCookie {
                        ttl_ns: g.ttl.map(|t| t.as_nanos() as u64),
                        path: g.path.to_string(),
                        same_site: g.same_site.map(|s| {
                            match s {
                                SameSite::Strict => wire::SameSite::Strict,
                                SameSite::Lax => wire::SameSite::Lax,
                                SameSite::None { .. } => wire::SameSite::None,
                            }
                            .into()
                        }),
                        same_site_none_unless_incompatible: matches!(
                            g.same_site,
                            Some(SameSite::None {
                                unless_incompatible: true
                            })
                        ),
                        secure: g.secure,
                    }),
                }),
                HashOn::SourceIp => On::SourceIp(true),
                HashOn::GeneratedHeader(h) => On::GeneratedHeader(h.to_string()),
            }),
        }),
    };
    wire::LoadBalancer {
        algorithm: Some(algorithm),
    }
}

fn load_balancer_from_wire(lb: &wire::LoadBalancer) -> Result<LoadBalancer, InvalidResource> {
    use wire::consistent_hash::On;
    use wire::load_balancer::Algorithm;
    Ok(
        match lb.algorithm.as_ref().ok_or_else(|| missing("algorithm"))? {
            Algorithm::RoundRobin(_) => LoadBalancer::RoundRobin,
            Algorithm::LeastRequest(_) => LoadBalancer::LeastRequest,
            Algorithm::LatencyAware(_) => LoadBalancer::LatencyAware,
            Algorithm::ConsistentHash(h) => LoadBalancer::ConsistentHash(
                match h.on.as_ref().ok_or_else(|| missing("consistent_hash.on"))? {
                    On::Header(name) => {
                        if !RateLimitKey::is_header_name(name) {
                            return Err(invalid("consistent_hash.header", "not a header name"));
                        }
                        HashOn::Header(name.to_ascii_lowercase().into())
                    }
                    On::Cookie(c) => {
                        if !is_cookie_name(&c.name) {
                            return Err(invalid(
                                "consistent_hash.cookie.name",
                                "not a cookie name",
                            ));
                        }
                        let generate = match &c.generate {
                            None => None,
                            Some(g) => {
                                if !is_cookie_path(&g.path) {
                                    return Err(invalid(
                                        "consistent_hash.cookie.path",
                                        "not a cookie path",
                                    ));
                                }
                                if g.ttl_ns == Some(0) {
                                    return Err(invalid(
                                        "consistent_hash.cookie.ttl",
                                        "must be positive",
                                    ));
                                }
                                let same_site = match g.same_site.map(wire::SameSite::try_from) {
                                    None => None,
                                    Some(Ok(wire::SameSite::Strict)) => Some(SameSite::Strict),
                                    Some(Ok(wire::SameSite::Lax)) => Some(SameSite::Lax),
                                    Some(Ok(wire::SameSite::None)) => Some(SameSite::None {
                                        unless_incompatible: g.same_site_none_unless_incompatible,
                                    }),
                                    Some(Ok(wire::SameSite::Unspecified) | Err(_)) => {
                                        return Err(invalid(
                                            "consistent_hash.cookie.same_site",
                                            "not a SameSite value",
                                        ));
                                    }
                                };
                                Some(GeneratedCookie {
                                    ttl: g.ttl_ns.map(Duration::from_nanos),
                                    path: g.path.as_str().into(),
                                    same_site,
                                    secure: g.secure,
                                })
                            }
                        };
                        HashOn::Cookie {
                            name: c.name.as_str().into(),
                            generate,
                        }
                    }
                    On::SourceIp(_) => HashOn::SourceIp,
                    On::GeneratedHeader(name) => {
                        if !RateLimitKey::is_header_name(name) {
                            return Err(invalid(
                                "consistent_hash.generated_header",
                                "not a header name",
                            ));
                        }
                        HashOn::GeneratedHeader(name.to_ascii_lowercase().into())
                    }
                },
            ),
        },
    )
}

fn health_check_to_wire(h: &HealthCheck) -> wire::HealthCheck {
    use wire::health_check::Probe;
    wire::HealthCheck {
        interval_ns: h.interval.as_nanos() as u64,
        timeout_ns: h.timeout.as_nanos() as u64,
        jitter_ns: h.jitter.as_nanos() as u64,
        healthy_threshold: h.healthy_threshold,
        unhealthy_threshold: h.unhealthy_threshold,
        probe: Some(match &h.probe {
            HealthProbe::Http {
                path,
                host,
                statuses,
            } => Probe::Http(wire::HttpProbe {
                path: path.to_string(),
                host: host.as_deref().map(str::to_owned),
                statuses: statuses
                    .iter()
                    .map(|(a, b)| wire::StatusRange {
                        start: u32::from(*a),
                        end: u32::from(*b),
                    })
                    .collect(),
            }),
            HealthProbe::Tcp => Probe::Tcp(true),
            HealthProbe::Grpc { service } => Probe::Grpc(wire::GrpcProbe {
                service: service.to_string(),
            }),
        }),
    }
}

fn health_check_from_wire(h: &wire::HealthCheck) -> Result<HealthCheck, InvalidResource> {
    use wire::health_check::Probe;
    if h.interval_ns == 0 || h.timeout_ns == 0 {
        return Err(invalid("interval", "interval and timeout must be positive"));
    }
    if h.healthy_threshold == 0 || h.unhealthy_threshold == 0 {
        return Err(invalid("threshold", "thresholds must be positive"));
    }
    let probe = match h.probe.as_ref().ok_or_else(|| missing("probe"))? {
        Probe::Http(p) => {
            if !p.path.starts_with('/') {
                return Err(invalid("http.path", "must start with /"));
            }
            let statuses = p
                .statuses
                .iter()
                .map(|r| {
                    let s = |v: u32| u16::try_from(v).ok().filter(|v| (100..=599).contains(v));
                    match (s(r.start), s(r.end)) {
                        (Some(a), Some(b)) if a <= b => Ok((a, b)),
                        _ => Err(invalid("http.statuses", "not a range of 100-599")),
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            if statuses.is_empty() {
                return Err(missing("http.statuses"));
            }
            HealthProbe::Http {
                path: p.path.as_str().into(),
                host: p.host.as_deref().map(Into::into),
                statuses,
            }
        }
        Probe::Tcp(_) => HealthProbe::Tcp,
        Probe::Grpc(g) => HealthProbe::Grpc {
            service: g.service.as_str().into(),
        },
    };
    Ok(HealthCheck {
        probe,
        interval: Duration::from_nanos(h.interval_ns),
        timeout: Duration::from_nanos(h.timeout_ns),
        jitter: Duration::from_nanos(h.jitter_ns),
        healthy_threshold: h.healthy_threshold,
        unhealthy_threshold: h.unhealthy_threshold,
    })
}

fn limits_to_wire(l: &Limits) -> wire::Limits {
    wire::Limits {
        max_connections: l.max_connections,
        max_pending_requests: l.max_pending_requests,
        max_requests: l.max_requests,
    }
}

fn limits_from_wire(l: Option<&wire::Limits>) -> Limits {
    l.map(|l| Limits {
        max_connections: l.max_connections,
        max_pending_requests: l.max_pending_requests,
        max_requests: l.max_requests,
    })
    .unwrap_or_default()
}

fn ext_auth_to_wire(policy: &str, e: &ExtAuth) -> wire::ExtAuth {
    let strings = |v: &[Arc<str>]| v.iter().map(ToString::to_string).collect();
    wire::ExtAuth {
        policy: policy.to_owned(),
        https: e.url.https,
        host: e.url.host.to_string(),
        port: u32::from(e.url.port),
        path_and_query: e.url.path_and_query.to_string(),
        headers_to_send: strings(&e.headers_to_send),
        response_headers: strings(&e.response_headers),
        timeout_ns: duration_ns(e.timeout),
        cache: e.cache.map(|c| wire::ExtAuthCache {
            ttl_ns: duration_ns(c.ttl),
            max_entries: c.max_entries,
        }),
        fail_open: e.fail_open,
        status_on_error: u32::from(e.status_on_error),
        signin_url: e.signin_url.as_deref().map(str::to_owned),
        ca_pem: e.ca_pem.as_deref().map(str::to_owned),
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Rebuilds an external authorization, checking what the translator checks (the URL,
/// header names, ranges), so that a bad message is refused rather than half applied.
fn ext_auth_from_wire(e: &wire::ExtAuth) -> Result<ExtAuth, InvalidResource> {
    let names = |v: &[String], field: &str| {
        if v.len() > ExtAuth::MAX_HEADERS {
            return Err(invalid(field, "too many headers"));
        }
        v.iter()
            .map(|h| {
                if RateLimitKey::is_header_name(h) && !h.bytes().any(|b| b.is_ascii_uppercase()) {
                    Ok(Arc::from(h.as_str()))
                } else {
                    Err(invalid(
                        field,
                        format!("{h:?} is not a lowercase header name"),
                    ))
                }
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let scheme = if e.https { "https" } else { "http" };
    let port = u16::try_from(e.port).map_err(|_| invalid("ext_auth.port", e.port))?;
    let url = ExtAuthUrl::parse(&format!("{scheme}://{}:{port}{}", e.host, e.path_and_query))
        .map_err(|m| invalid("ext_auth.url", m))?;
    let timeout = Duration::from_nanos(e.timeout_ns);
    if timeout.is_zero() || timeout > ExtAuth::MAX_TIMEOUT {
        return Err(invalid("ext_auth.timeout_ns", e.timeout_ns));
    }
    let status_on_error = u16::try_from(e.status_on_error)
        .ok()
        .filter(|s| (400..=599).contains(s))
        .ok_or_else(|| invalid("ext_auth.status_on_error", e.status_on_error))?;
    let cache = match &e.cache {
        None => None,
        Some(c) => {
            if c.max_entries == 0 || c.max_entries > ExtAuth::MAX_CACHE_ENTRIES || c.ttl_ns == 0 {
                return Err(invalid(
                    "ext_auth.cache",
                    "ttl and max_entries must be positive",
                ));
            }
            Some(ExtAuthCache {
                ttl: Duration::from_nanos(c.ttl_ns),
                max_entries: c.max_entries,
            })
        }
    };
    if let Some(s) = &e.signin_url {
        ExtAuthUrl::parse(s).map_err(|m| invalid("ext_auth.signin_url", m))?;
    }
    Ok(ExtAuth {
        url,
        headers_to_send: names(&e.headers_to_send, "ext_auth.headers_to_send")?,
        response_headers: names(&e.response_headers, "ext_auth.response_headers")?,
        timeout,
        cache,
        fail_open: e.fail_open,
        status_on_error,
        signin_url: e.signin_url.as_deref().map(Arc::from),
        ca_pem: match &e.ca_pem {
            Some(p) if !p.contains("-----BEGIN CERTIFICATE-----") => {
                return Err(invalid("ext_auth.ca_pem", "no PEM certificate"));
            }
            p => p.as_deref().map(Arc::from),
        },
    })
}

fn remote_jwks_from_wire(r: &wire::RemoteJwks) -> Result<RemoteJwks, InvalidResource> {
    let port = u16::try_from(r.port).map_err(|_| invalid("jwt_auth.remote_jwks.port", r.port))?;
    let scheme = if r.https { "https" } else { "http" };
    let url = ExtAuthUrl::parse(&format!("{scheme}://{}:{port}{}", r.host, r.path_and_query))
        .map_err(|m| invalid("jwt_auth.remote_jwks.url", m))?;
    let (refresh, timeout) = (
        Duration::from_nanos(r.refresh_ns),
        Duration::from_nanos(r.timeout_ns),
    );
    if refresh.is_zero() || timeout.is_zero() {
        return Err(invalid(
            "jwt_auth.remote_jwks",
            "refresh and timeout must be positive",
        ));
    }
    Ok(RemoteJwks {
        url,
        refresh,
        timeout,
        ca_pem: r.ca_pem.as_deref().map(Arc::from),
    })
}

fn jwt_auth_to_wire(policy: &str, j: &JwtAuth) -> wire::JwtAuth {
    use wire::jwt_key::Key;
    let strings = |v: &[Arc<str>]| v.iter().map(ToString::to_string).collect();
    wire::JwtAuth {
        policy: policy.to_owned(),
        forward_token: j.forward_token,
        providers: j
            .providers
            .iter()
            .map(|p| wire::JwtProvider {
                name: p.name.to_string(),
                issuer: p.issuer.as_deref().map(str::to_owned),
                audiences: strings(&p.audiences),
                keys: p
                    .keys
                    .iter()
                    .map(|k| wire::JwtKey {
                        kid: k.kid.as_deref().map(str::to_owned),
                        alg: k.alg.as_deref().map(str::to_owned),
                        key: Some(match &k.material {
                            JwtKeyMaterial::Rsa { n, e } => Key::Rsa(wire::RsaKey {
                                n: n.to_vec(),
                                e: e.to_vec(),
                            }),
                            JwtKeyMaterial::EcP256(p) => Key::EcP256(p.to_vec()),
                            JwtKeyMaterial::EcP384(p) => Key::EcP384(p.to_vec()),
                            JwtKeyMaterial::Ed25519(x) => Key::Ed25519(x.to_vec()),
                        }),
                    })
                    .collect(),
                required_claims: p
                    .required_claims
                    .iter()
                    .map(|(name, values)| wire::RequiredClaim {
                        name: name.to_string(),
                        values: strings(values),
                    })
                    .collect(),
                claims_to_headers: p
                    .claims_to_headers
                    .iter()
                    .map(|(claim, header)| wire::ClaimToHeader {
                        claim: claim.to_string(),
                        header: header.to_string(),
                    })
                    .collect(),
                remote_jwks: p.remote_jwks.as_deref().map(|r| wire::RemoteJwks {
                    https: r.url.https,
                    host: r.url.host.to_string(),
                    port: u32::from(r.url.port),
                    path_and_query: r.url.path_and_query.to_string(),
                    refresh_ns: duration_ns(r.refresh),
                    timeout_ns: duration_ns(r.timeout),
                    ca_pem: r.ca_pem.as_deref().map(str::to_owned),
                }),
            })
            .collect(),
    }
}

fn jwt_auth_from_wire(j: &wire::JwtAuth) -> Result<JwtAuth, InvalidResource> {
    use wire::jwt_key::Key;
    let strings = |v: &[String]| v.iter().map(|s| Arc::from(s.as_str())).collect();
    let mut providers = Vec::with_capacity(j.providers.len());
    for p in &j.providers {
        let mut keys = Vec::with_capacity(p.keys.len());
        for k in &p.keys {
            let material = match k.key.as_ref().ok_or_else(|| missing("jwt_auth.keys.key"))? {
                Key::Rsa(r) => JwtKeyMaterial::Rsa {
                    n: r.n.as_slice().into(),
                    e: r.e.as_slice().into(),
                },
                Key::EcP256(p) if p.len() == 65 => JwtKeyMaterial::EcP256(p.as_slice().into()),
                Key::EcP384(p) if p.len() == 97 => JwtKeyMaterial::EcP384(p.as_slice().into()),
                Key::Ed25519(x) if x.len() == 32 => JwtKeyMaterial::Ed25519(x.as_slice().into()),
                _ => return Err(invalid("jwt_auth.keys", "key of the wrong length")),
            };
            keys.push(JwtKey {
                kid: k.kid.as_deref().map(Arc::from),
                alg: k.alg.as_deref().map(Arc::from),
                material,
            });
        }
        let mut claims_to_headers = Vec::with_capacity(p.claims_to_headers.len());
        for c in &p.claims_to_headers {
            if !RateLimitKey::is_header_name(&c.header) {
                return Err(invalid(
                    "jwt_auth.claims_to_headers.header",
                    "not a header name",
                ));
            }
            claims_to_headers.push((
                Arc::from(c.claim.as_str()),
                Arc::from(c.header.to_ascii_lowercase().as_str()),
            ));
        }
        providers.push(JwtProvider {
            name: p.name.as_str().into(),
            issuer: p.issuer.as_deref().map(Arc::from),
            audiences: strings(&p.audiences),
            keys,
            required_claims: p
                .required_claims
                .iter()
                .map(|c| (Arc::from(c.name.as_str()), strings(&c.values)))
                .collect(),
            claims_to_headers,
            remote_jwks: p
                .remote_jwks
                .as_ref()
                .map(remote_jwks_from_wire)
                .transpose()?
                .map(Arc::new),
        });
    }
    Ok(JwtAuth {
        providers,
        forward_token: j.forward_token,
    })
}

fn basic_auth_from_wire(b: &wire::BasicAuth) -> Result<BasicAuth, InvalidResource> {
    // The realm is sent in a quoted-string: no quotes, backslashes or control characters.
    if b.realm
        .bytes()
        .any(|c| c == b'"' || c == b'\\' || c.is_ascii_control())
    {
        return Err(invalid("basic_auth.realm", "not a quoted-string's content"));
    }
    let mut users = Vec::with_capacity(b.users.len());
    for u in &b.users {
        PasswordScheme::check(&u.hash).map_err(|why| invalid("basic_auth.users.hash", &why))?;
        users.push((u.name.as_str().into(), u.hash.as_str().into()));
    }
    Ok(BasicAuth::new(b.realm.as_str().into(), users))
}

fn api_key_auth_from_wire(a: &wire::ApiKeyAuth) -> Result<ApiKeyAuth, InvalidResource> {
    if !RateLimitKey::is_header_name(&a.header) {
        return Err(invalid("api_key_auth.header", "not a header name"));
    }
    let mut keys = Vec::with_capacity(a.keys.len());
    for k in &a.keys {
        let d: [u8; 32] = k
            .sha256
            .as_slice()
            .try_into()
            .map_err(|_| invalid("api_key_auth.keys.sha256", "not 32 bytes"))?;
        keys.push((d, k.client.as_str().into()));
    }
    Ok(ApiKeyAuth::new(
        a.header.to_ascii_lowercase().into(),
        keys,
        a.forward_key,
    ))
}

fn upstream_tls_to_wire(t: &UpstreamTls) -> wire::UpstreamTls {
    use wire::upstream_tls::Trust;
    wire::UpstreamTls {
        sni: t.sni.to_string(),
        trust: Some(match &t.trust {
            TrustAnchors::Pem(pem) => Trust::CaPem(pem.to_vec()),
            TrustAnchors::System => Trust::System(true),
            TrustAnchors::Nothing => Trust::Nothing(true),
            TrustAnchors::Unverified => Trust::Unverified(true),
        }),
        hide_sni: t.hide_sni,
        client_certificate: t.client_certificate.as_ref().map(|c| wire::Certificate {
            chain_pem: c.chain_pem().into_owned(),
            key_pem: c.key_pem().into_owned(),
        }),
        dns_names: t
            .subject_names
            .iter()
            .filter_map(|n| match n {
                SubjectName::Dns(d) => Some(d.to_string()),
                SubjectName::Uri(_) => None,
            })
            .collect(),
        uris: t
            .subject_names
            .iter()
            .filter_map(|n| match n {
                SubjectName::Uri(u) => Some(u.to_string()),
                SubjectName::Dns(_) => None,
            })
            .collect(),
        policy: t.policy.to_string(),
    }
}

fn backend_tls_to_wire(t: &BackendTls) -> wire::BackendTls {
    wire::BackendTls {
        all_ports: t.all_ports.as_deref().map(upstream_tls_to_wire),
        ports: t
            .ports
            .iter()
            .map(|(port, tls)| wire::PortTls {
                port: u32::from(*port),
                tls: Some(upstream_tls_to_wire(tls)),
            })
            .collect(),
    }
}

fn upstream_tls_from_wire(t: &wire::UpstreamTls) -> Result<Arc<UpstreamTls>, InvalidResource> {
    use wire::upstream_tls::Trust;
    let trust = match &t.trust {
        Some(Trust::CaPem(pem)) if !pem.is_empty() => TrustAnchors::Pem(Arc::from(&pem[..])),
        Some(Trust::CaPem(_)) => return Err(invalid("backend_tls.ca_pem", "empty")),
        Some(Trust::System(_)) => TrustAnchors::System,
        Some(Trust::Nothing(_)) => TrustAnchors::Nothing,
        Some(Trust::Unverified(_)) => TrustAnchors::Unverified,
        None => return Err(missing("backend_tls.trust")),
    };
    if t.sni.is_empty() {
        return Err(missing("backend_tls.sni"));
    }
    let mut subject_names: Vec<SubjectName> = t
        .dns_names
        .iter()
        .map(|d| SubjectName::Dns(Arc::from(d.as_str())))
        .collect();
    subject_names.extend(
        t.uris
            .iter()
            .map(|u| SubjectName::Uri(Arc::from(u.as_str()))),
    );
    Ok(Arc::new(UpstreamTls {
        sni: Arc::from(t.sni.as_str()),
        hide_sni: t.hide_sni,
        client_certificate: t
            .client_certificate
            .as_ref()
            .map(|c| Arc::new(certificate_from_wire(&c.chain_pem, &c.key_pem))),
        trust,
        subject_names,
        policy: Arc::from(t.policy.as_str()),
    }))
}

fn backend_tls_from_wire(t: &wire::BackendTls) -> Result<Arc<BackendTls>, InvalidResource> {
    let mut ports = Vec::with_capacity(t.ports.len());
    for p in &t.ports {
        let port = u16::try_from(p.port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| invalid("backend_tls.ports.port", "not a port number"))?;
        let tls = p
            .tls
            .as_ref()
            .ok_or_else(|| missing("backend_tls.ports.tls"))?;
        ports.push((port, upstream_tls_from_wire(tls)?));
    }
    if !ports.windows(2).all(|w| w[0].0 < w[1].0) {
        return Err(invalid(
            "backend_tls.ports",
            "not sorted by port, or a port twice",
        ));
    }
    Ok(Arc::new(BackendTls {
        all_ports: t
            .all_ports
            .as_ref()
            .map(upstream_tls_from_wire)
            .transpose()?,
        ports,
    }))
}

fn policy_from_wire(p: &wire::Policy) -> Result<Policy, InvalidResource> {
    use wire::local_rate_limit::Key;
    let target = target_from_wire(p.target.as_ref().ok_or_else(|| missing("target"))?)
        .map_err(within("target"))?;
    let retry = p.retry.as_ref().map(retry_from_wire).transpose()?;
    let rate_limit = match &p.rate_limit {
        None => None,
        Some(l) => {
            if l.requests == 0 || l.burst == 0 || l.per_ns == 0 {
                return Err(invalid(
                    "rate_limit",
                    "requests, per and burst must be positive",
                ));
            }
            let key = match l.key.as_ref().ok_or_else(|| missing("rate_limit.key"))? {
                Key::ClientIp(_) => RateLimitKey::ClientIp,
                Key::Header(h) => {
                    if !RateLimitKey::is_header_name(h) {
                        return Err(invalid("rate_limit.header", "not a header name"));
                    }
                    RateLimitKey::Header(h.to_ascii_lowercase().into())
                }
                Key::Target(_) => RateLimitKey::Target,
            };
            Some((
                l.policy.as_str().into(),
                LocalRateLimit {
                    requests: l.requests,
                    per: Duration::from_nanos(l.per_ns),
                    burst: l.burst,
                    key,
                },
            ))
        }
    };
    let api_key_auth = match &p.api_key_auth {
        None => None,
        Some(a) => Some((
            a.policy.as_str().into(),
            Arc::new(api_key_auth_from_wire(a)?),
        )),
    };
    let basic_auth = match &p.basic_auth {
        None => None,
        Some(b) => Some((b.policy.as_str().into(), Arc::new(basic_auth_from_wire(b)?))),
    };
    let ip_rules = match &p.ip_rules {
        None => None,
        Some(r) => {
            let nets = |list: &[String], field: &str| {
                list.iter()
                    .map(|s| IpNet::parse(s).map_err(|e| invalid(field, e)))
                    .collect::<Result<Vec<_>, _>>()
            };
            let rules = IpRules {
                allow: nets(&r.allow, "ip_rules.allow")?,
                deny: nets(&r.deny, "ip_rules.deny")?,
            };
            Some((r.policy.as_str().into(), Arc::new(rules)))
        }
    };
    let jwt_auth = match &p.jwt_auth {
        None => None,
        Some(j) => Some((j.policy.as_str().into(), Arc::new(jwt_auth_from_wire(j)?))),
    };
    let ext_auth = match &p.ext_auth {
        None => None,
        Some(e) => Some((e.policy.as_str().into(), Arc::new(ext_auth_from_wire(e)?))),
    };
    let global_rate_limit = p
        .global_rate_limit
        .as_ref()
        .map(global_rate_limit_from_wire)
        .transpose()?;
    Ok(
        Policy::new(target, timeouts_from_wire(p.timeouts), retry, rate_limit)
            .with_ext_auth(ext_auth)
            .with_api_key_auth(api_key_auth)
            .with_basic_auth(basic_auth)
            .with_ip_rules(ip_rules)
            .with_jwt_auth(jwt_auth)
            .with_health_check(
                p.health_check
                    .as_ref()
                    .map(health_check_from_wire)
                    .transpose()
                    .map_err(within("health_check"))?
                    .map(Arc::new),
            )
            .with_circuit_breaker(p.circuit_breaker.as_ref().map(|c| CircuitBreaker {
                cluster: limits_from_wire(c.cluster.as_ref()),
                endpoint: limits_from_wire(c.endpoint.as_ref()),
            }))
            .with_load_balancer(
                p.load_balancer
                    .as_ref()
                    .map(load_balancer_from_wire)
                    .transpose()
                    .map_err(within("load_balancer"))?,
            )
            .with_global_rate_limit(global_rate_limit)
            .with_outlier_detection(
                p.outlier_detection
                    .as_ref()
                    .map(outlier_from_wire)
                    .transpose()
                    .map_err(within("outlier_detection"))?,
            )
            .with_authorization(p.authorization.as_ref().map(authz::from_wire).transpose()?)
            .with_request_limits(p.request_limits.as_ref().map(|l| {
                (
                    l.policy.as_str().into(),
                    weir_model::RequestLimits {
                        max_body_bytes: l.max_body_bytes,
                        max_header_bytes: l.max_header_bytes,
                        max_headers: l.max_headers,
                    },
                )
            }))
            .with_concurrency_limit(match &p.concurrency_limit {
                None => None,
                Some(l) if l.per_client == 0 => {
                    return Err(invalid(
                        "concurrency_limit.per_client",
                        "must be at least 1",
                    ));
                }
                Some(l) => Some((
                    l.policy.as_str().into(),
                    weir_model::ConcurrencyLimit {
                        per_client: l.per_client,
                    },
                )),
            })
            .with_cors(match &p.cors {
                None => None,
                Some(c) => Some((
                    c.policy.as_str().into(),
                    Arc::new(cors_from_wire(
                        c.cors.as_ref().ok_or_else(|| missing("cors.cors"))?,
                    )),
                )),
            })
            .with_backend_tls(
                p.backend_tls
                    .as_ref()
                    .map(backend_tls_from_wire)
                    .transpose()?,
            )
            .with_client_certificate(
                p.client_certificate
                    .as_ref()
                    .map(|c| Arc::new(certificate_from_wire(&c.chain_pem, &c.key_pem))),
            )
            .with_access_log(
                p.access_log
                    .as_ref()
                    .map(access_log_from_wire)
                    .transpose()?,
            )
            .with_tracing(p.tracing.as_ref().map(tracing_from_wire).transpose()?),
    )
}

fn access_log_from_wire(
    l: &wire::AccessLogPolicy,
) -> Result<(Arc<str>, weir_model::AccessLogPolicy), InvalidResource> {
    let fields = if l.fields.is_empty() {
        None
    } else {
        let bits = weir_model::access_log_field_bits(l.fields.iter().map(String::as_str))
            .map_err(|e| invalid("access_log.fields", e.to_string()))?;
        Some(bits)
    };
    Ok((
        l.policy.as_str().into(),
        weir_model::AccessLogPolicy {
            disabled: l.disabled,
            fields,
            errors_only: l.errors_only,
        },
    ))
}

fn tracing_from_wire(
    t: &wire::TracingPolicy,
) -> Result<(Arc<str>, weir_model::TracingPolicy), InvalidResource> {
    if t.sampling_ppm
        .is_some_and(|s| s > weir_model::SAMPLING_SCALE)
    {
        return Err(invalid("tracing.sampling_ppm", "must be at most 1000000"));
    }
    Ok((
        t.policy.as_str().into(),
        weir_model::TracingPolicy {
            disabled: t.disabled,
            sampling: t.sampling_ppm,
        },
    ))
}

fn global_rate_limit_from_wire(
    g: &wire::GlobalRateLimit,
) -> Result<(Arc<str>, GlobalRateLimit), InvalidResource> {
    use wire::global_rate_limit::Key;
    if g.requests == 0 || g.window_ns == 0 {
        return Err(invalid(
            "global_rate_limit",
            "requests and window must be positive",
        ));
    }
    let key = match g
        .key
        .as_ref()
        .ok_or_else(|| missing("global_rate_limit.key"))?
    {
        Key::ClientIp(_) => RateLimitKey::ClientIp,
        Key::Header(h) => {
            if !RateLimitKey::is_header_name(h) {
                return Err(invalid("global_rate_limit.header", "not a header name"));
            }
            RateLimitKey::Header(h.to_ascii_lowercase().into())
        }
        Key::Target(_) => RateLimitKey::Target,
    };
    Ok((
        g.policy.as_str().into(),
        GlobalRateLimit {
            requests: g.requests,
            window: Duration::from_nanos(g.window_ns),
            key,
            fail_mode: if g.fail_closed {
                FailMode::Closed
            } else {
                FailMode::Open
            },
        },
    ))
}

/// `r` as a data plane of push protocol `version` is sent it. A data plane of version 5
/// or older does not know the settings of version 6 (`Policy::as_version_5`: the send
/// timeout, a generated cookie's `SameSite` and `Secure`) and is sent the policy without them. A data
/// plane of version 4
/// or older does not know the fields of version 5 (`Policy::as_version_4`: access-log and
/// trace settings) and is sent the policy without them. A data plane of version 3
/// or older does not know the fields of version 4 (`Policy::as_version_3`: upstream TLS,
/// the Gateway's client certificate) and is sent the policy without them. A data plane of version 2
/// or older does not know the policy fields of version 3 (`Policy::as_version_2`): it is
/// sent the policy without them, or — when one of them guards access — a policy that
/// refuses every client (`ipRules` deny all, 403), closed until the data plane is
/// upgraded. A data plane of version 0 does not know `jwtAuth` either, which it gets the
/// same way. Every policy reaches it with the hash that release computes
/// (`Policy::as_version_2`, `Policy::as_version_0`), which it checks.
pub fn for_version(r: &Resource, version: u32) -> std::borrow::Cow<'_, Resource> {
    match r {
        Resource::Policy(p) if version == 5 && p.has_version_6_settings() => {
            std::borrow::Cow::Owned(Resource::Policy(Arc::new(
                p.as_ref().clone().as_version_5(),
            )))
        }
        Resource::Policy(p)
            if version == 4
                && (p.access_log.is_some()
                    || p.tracing.is_some()
                    || p.has_version_6_settings()) =>
        {
            std::borrow::Cow::Owned(Resource::Policy(Arc::new(
                p.as_ref().clone().as_version_5().as_version_4(),
            )))
        }
        Resource::Policy(p)
            if version == 3
                && p.access_log.is_none()
                && p.tracing.is_none()
                && !p.has_version_6_settings()
                && p.outlier_detection.is_none()
                && p.backend_tls.is_none()
                && p.client_certificate.is_none()
                && p.ext_auth.as_ref().is_none_or(|(_, e)| e.ca_pem.is_none()) =>
        {
            std::borrow::Cow::Borrowed(r)
        }
        Resource::Policy(p) if version < 4 => {
            let name = || policy_name(p);
            let mut p = p
                .as_ref()
                .clone()
                .as_version_5()
                .as_version_4()
                .as_version_3();
            if version == 3 {
                return std::borrow::Cow::Owned(Resource::Policy(Arc::new(p)));
            }
            if p.guards_with_version_3_fields() {
                p = p.with_ip_rules(Some((name(), Arc::new(IpRules::deny_all()))));
            }
            p = p.as_version_2();
            if version == 0 {
                if let Some((name, _)) = p.jwt_auth.clone() {
                    p = p
                        .with_jwt_auth(None)
                        .with_ip_rules(Some((name, Arc::new(IpRules::deny_all()))));
                }
                p = p.as_version_0();
            }
            std::borrow::Cow::Owned(Resource::Policy(Arc::new(p)))
        }
        Resource::VirtualHost(v) if version < 3 && v.rules.iter().any(|r| rewrites_captures(r)) => {
            // A data plane of version 2 or older cannot read a capture rewrite (it would
            // refuse the whole virtual host): such a rule answers 500 there instead of
            // forwarding to a path the route did not ask for.
            let rules = v
                .rules
                .iter()
                .map(|r| {
                    if !rewrites_captures(r) {
                        return r.clone();
                    }
                    Arc::new(
                        RouteRule::new(
                            r.route.clone(),
                            r.matcher.clone(),
                            Vec::new(),
                            Action::Fail {
                                status: 500,
                                reason: "rewrite with captures needs a data plane of push protocol version 3".into(),
                            },
                            (*r.timeouts).clone(),
                        )
                        .with_retry(r.retry.as_deref().cloned()),
                    )
                })
                .collect();
            std::borrow::Cow::Owned(Resource::VirtualHost(Arc::new(VirtualHost::new(
                v.listener,
                v.host.clone(),
                rules,
            ))))
        }
        Resource::VirtualHost(v) if version < 4 && v.rules.iter().any(|r| intercepts(r)) => {
            // A data plane of version 3 or older cannot read the filter (it would refuse
            // the whole virtual host): the rules go without it, error responses as they
            // are.
            let rules = v
                .rules
                .iter()
                .map(|r| {
                    if !intercepts(r) {
                        return r.clone();
                    }
                    let keep = |f: &&Filter| !matches!(f, Filter::InterceptErrors(_));
                    Arc::new(
                        RouteRule::new(
                            r.route.clone(),
                            r.matcher.clone(),
                            r.filters.iter().filter(keep).cloned().collect(),
                            r.action.clone(),
                            (*r.timeouts).clone(),
                        )
                        .with_retry(r.retry.as_deref().cloned()),
                    )
                })
                .collect();
            std::borrow::Cow::Owned(Resource::VirtualHost(Arc::new(VirtualHost::new(
                v.listener,
                v.host.clone(),
                rules,
            ))))
        }
        Resource::Cluster(c) if version < 4 && c.tls.is_some() => {
            // An older data plane would connect in plaintext: it gets the cluster without
            // endpoints (503) instead.
            std::borrow::Cow::Owned(Resource::Cluster(Arc::new(Cluster::new(
                c.key.clone(),
                Vec::new(),
                c.protocol,
            ))))
        }
        _ => std::borrow::Cow::Borrowed(r),
    }
}

/// Whether `r` replaces error responses (push protocol version 4).
fn intercepts(r: &RouteRule) -> bool {
    r.filters
        .iter()
        .any(|f| matches!(f, Filter::InterceptErrors(_)))
}

/// Whether `r` rewrites its path with the groups of its regex (push protocol version 3).
fn rewrites_captures(r: &RouteRule) -> bool {
    let captures = |p: &Option<PathRewrite>| matches!(p, Some(PathRewrite::RegexCaptures(_)));
    r.filters.iter().any(|f| match f {
        Filter::UrlRewrite { path, .. } => captures(path),
        _ => false,
    }) || matches!(&r.action, Action::Redirect(rd) if captures(&rd.path))
}

/// The name (`namespace/name`) a deny-all stand-in for `p` reports: that of the policy
/// object behind one of its access fields, else its target's.
fn policy_name(p: &Policy) -> Arc<str> {
    p.api_key_auth
        .as_ref()
        .map(|(n, _)| n)
        .or(p.basic_auth.as_ref().map(|(n, _)| n))
        .or(p.ip_rules.as_ref().map(|(n, _)| n))
        .or(p.jwt_auth.as_ref().map(|(n, _)| n))
        .or(p.ext_auth.as_ref().map(|(n, _)| n))
        .or(p.authorization.as_ref().map(|(n, _)| n))
        .or(p.rate_limit.as_ref().map(|(n, _)| n))
        .cloned()
        .unwrap_or_else(|| Arc::from(format!("{:?}", p.target)))
}

/// Whether resource `r`, which a data plane of push protocol `version` would otherwise
/// be sent, is withheld from it because that release would serve it wrongly: a listener
/// reading a PROXY protocol header (version 3) — an older data plane would take the
/// header for the client's first bytes and fail every connection, so it does not bind
/// the listener at all (the hub logs it, and withholds what lies under the listener);
/// a listener validating client certificates (version 4) — an older data plane would
/// serve it without asking for one, opening what the CAs guard.
///
/// A listener with sections (version 6: a policy targets a listener or ListenerSet of
/// its Gateway) is withheld from data planes of version 5 or older: they cannot be sent
/// those policies (`sent_to_version`), and serving the listener without them could open
/// what an authentication, address or rate-limit policy guards. Its traffic fails there
/// (the socket is not bound) until the data plane is upgraded.
pub fn withheld(r: &Resource, version: u32) -> bool {
    match r {
        Resource::Listener(l) => {
            (version < 3 && l.settings.proxy_protocol.is_some())
                || (version < 4 && l.settings.client_validation.is_some())
                || (version < 6 && !l.sections.is_empty())
        }
        _ => false,
    }
}

/// Whether a data plane of push protocol `version` is sent resource `k` at all. A policy
/// on a Service or Backend ([`PolicyTarget::Backend`]; health checks, circuit breaking)
/// came with version 2: data planes of versions 0 and 1 cannot decode its key, and are
/// not sent one; they serve as their releases did (no probes, no limits).
///
/// A policy on a listener or a ListenerSet came with version 6: older data planes cannot
/// decode its key and are not sent one (nor the listeners it covers: `withheld`).
pub fn sent_to_version(k: &ResourceKey, version: u32) -> bool {
    match k {
        ResourceKey::Policy(t) if matches!(**t, PolicyTarget::Backend { .. }) => version >= 2,
        ResourceKey::Policy(t) if t.is_listener() => version >= 6,
        _ => true,
    }
}

/// A key from the wire.
pub fn key_from_wire(k: &wire::ResourceKey) -> Result<ResourceKey, InvalidResource> {
    use wire::resource_key::Key;
    let hk = |f: &str, h: &wire::HostKey| -> Result<(ListenerKey, HostMatch), InvalidResource> {
        Ok((
            ListenerKey::new(addr(&format!("{f}.listener"), &h.listener)?),
            host_from_wire(&format!("{f}.host"), h.host.as_ref())?,
        ))
    };
    Ok(match k.key.as_ref().ok_or_else(|| missing("key"))? {
        Key::Listener(a) => ResourceKey::Listener(ListenerKey::new(addr("listener", a)?)),
        Key::VirtualHost(h) => {
            let (l, h) = hk("virtual_host", h)?;
            ResourceKey::VirtualHost(l, h)
        }
        Key::Cluster(c) => ResourceKey::Cluster(ClusterKey(c.as_str().into())),
        Key::Certificate(h) => ResourceKey::Certificate(ContentHash(*h)),
        Key::Sni(h) => {
            let (l, h) = hk("sni", h)?;
            ResourceKey::Sni(l, h)
        }
        Key::L4Route(h) => {
            let (l, h) = hk("l4_route", h)?;
            ResourceKey::L4Route(l, h)
        }
        Key::Policy(t) => ResourceKey::policy(target_from_wire(t).map_err(within("policy"))?),
    })
}

/// The content hash a resource was built with: its version on the wire.
pub fn version_of(r: &Resource) -> u64 {
    match r {
        Resource::Listener(l) => l.hash().0,
        Resource::VirtualHost(v) => v.hash().0,
        Resource::Cluster(c) => c.hash().0,
        Resource::Certificate(c) => c.hash().0,
        Resource::Sni(s) => s.hash().0,
        Resource::L4Route(r) => r.hash().0,
        Resource::Policy(p) => p.hash().0,
    }
}

// ---------------------------------------------------------------- resources

/// The wire form of a resource (key material included for certificates).
pub fn resource_to_wire(r: &Resource) -> wire::Resource {
    use wire::resource::Resource as R;
    let resource = match r {
        Resource::Listener(l) => R::Listener(wire::Listener {
            address: l.key.addr().to_string(),
            protocol: match l.protocol {
                Protocol::Http => wire::ListenerProtocol::Http,
                Protocol::Https => wire::ListenerProtocol::Https,
                Protocol::TlsPassthrough => wire::ListenerProtocol::TlsPassthrough,
                Protocol::TlsTerminate => wire::ListenerProtocol::TlsTerminate,
                Protocol::Tcp => wire::ListenerProtocol::Tcp,
                Protocol::Udp => wire::ListenerProtocol::Udp,
            } as i32,
            gateway: l.gateway.to_string(),
            name: l.name.to_string(),
            settings: (!l.settings.is_default()).then(|| settings_to_wire(&l.settings)),
            sections: l
                .sections
                .iter()
                .map(|s| wire::ListenerSection {
                    hostname: Some(host_to_wire(&s.hostname)),
                    set: s.set.as_deref().unwrap_or_default().to_owned(),
                    name: s.name.to_string(),
                })
                .collect(),
        }),
        Resource::VirtualHost(v) => R::VirtualHost(wire::VirtualHost {
            listener: v.listener.addr().to_string(),
            host: Some(host_to_wire(&v.host)),
            rules: v.rules.iter().map(|r| rule_to_wire(r)).collect(),
        }),
        Resource::Cluster(c) => R::Cluster(wire::Cluster {
            name: c.key.0.to_string(),
            endpoints: c
                .endpoints
                .iter()
                .map(|e| wire::Endpoint {
                    address: Some(match &e.addr {
                        EndpointAddr::Socket(a) => wire::endpoint::Address::Socket(a.to_string()),
                        EndpointAddr::Host(h, p) => wire::endpoint::Address::Host(wire::HostPort {
                            host: h.to_string(),
                            port: u32::from(*p),
                        }),
                    }),
                    weight: e.weight,
                })
                .collect(),
            protocol: match c.protocol {
                UpstreamProtocol::Http1 => wire::cluster::Protocol::Http1,
                UpstreamProtocol::H2c => wire::cluster::Protocol::H2c,
            } as i32,
            tls: c.tls.as_deref().map(upstream_tls_to_wire),
        }),
        Resource::Certificate(c) => R::Certificate(wire::Certificate {
            chain_pem: c.chain_pem().into_owned(),
            key_pem: c.key_pem().into_owned(),
        }),
        Resource::Sni(s) => R::Sni(wire::SniCert {
            listener: s.listener.addr().to_string(),
            host: Some(host_to_wire(&s.host)),
            certificate: s.cert.0,
        }),
        Resource::L4Route(r) => R::L4Route(wire::L4Route {
            listener: r.listener.addr().to_string(),
            host: Some(host_to_wire(&r.host)),
            route: Some(route_ref_to_wire(&r.route)),
            backends: r
                .backends
                .iter()
                .map(|b| wire::L4Backend {
                    cluster: b.cluster.0.to_string(),
                    weight: b.weight,
                })
                .collect(),
            mode: match r.mode {
                L4Mode::Passthrough => wire::L4Mode::Passthrough,
                L4Mode::Terminate => wire::L4Mode::Terminate,
            } as i32,
        }),
        Resource::Policy(p) => R::Policy(policy_to_wire(p)),
    };
    wire::Resource {
        version: version_of(r),
        resource: Some(resource),
    }
}

fn settings_to_wire(s: &ListenerSettings) -> wire::ListenerSettings {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let t = &s.timeouts;
    let l = &s.limits;
    wire::ListenerSettings {
        handshake_timeout_ms: ms(t.handshake),
        request_header_timeout_ms: ms(t.request_header),
        idle_timeout_ms: ms(t.idle),
        body_idle_timeout_ms: ms(t.body_idle),
        upstream_response_timeout_ms: ms(t.upstream_response),
        max_connections: l.max_connections,
        max_connections_per_client: l.max_connections_per_client,
        max_header_bytes: l.max_header_bytes,
        max_headers: l.max_headers,
        merge_slashes: s.paths.merge_slashes,
        trusted_proxies: s.trusted_proxies.iter().map(ToString::to_string).collect(),
        proxy_protocol: s.proxy_protocol.as_ref().map(|p| wire::ProxyProtocol {
            sources: p.sources.iter().map(ToString::to_string).collect(),
        }),
        client_validation: s
            .client_validation
            .as_ref()
            .map(|v| wire::ClientValidation {
                ca_pem: v.ca_pem.to_vec(),
                insecure_fallback: v.mode == ClientValidationMode::AllowInsecureFallback,
            }),
    }
}

/// A zero timeout or connection limit means "none" (as in the model); a zero head limit
/// would refuse every request and is refused.
fn settings_from_wire(s: &wire::ListenerSettings) -> Result<ListenerSettings, InvalidResource> {
    let ms = Duration::from_millis;
    let n = |field: &str, v: u32| {
        if v == 0 {
            Err(invalid(
                format!("settings.{field}"),
                "must be greater than 0",
            ))
        } else {
            Ok(v)
        }
    };
    Ok(ListenerSettings {
        timeouts: ConnectionTimeouts {
            handshake: ms(s.handshake_timeout_ms),
            request_header: ms(s.request_header_timeout_ms),
            idle: ms(s.idle_timeout_ms),
            body_idle: ms(s.body_idle_timeout_ms),
            upstream_response: ms(s.upstream_response_timeout_ms),
        },
        limits: ConnectionLimits {
            max_connections: s.max_connections,
            max_connections_per_client: s.max_connections_per_client,
            max_header_bytes: n("max_header_bytes", s.max_header_bytes)?,
            max_headers: n("max_headers", s.max_headers)?,
        },
        paths: PathNormalization {
            merge_slashes: s.merge_slashes,
        },
        trusted_proxies: s
            .trusted_proxies
            .iter()
            .map(|n| IpNet::parse(n).map_err(|e| invalid("settings.trusted_proxies", e)))
            .collect::<Result<_, _>>()?,
        proxy_protocol: match &s.proxy_protocol {
            None => None,
            Some(p) => Some(ProxyProtocol {
                sources: p
                    .sources
                    .iter()
                    .map(|n| {
                        IpNet::parse(n).map_err(|e| invalid("settings.proxy_protocol.sources", e))
                    })
                    .collect::<Result<_, _>>()?,
            }),
        },
        client_validation: match &s.client_validation {
            None => None,
            Some(v) if v.ca_pem.is_empty() => {
                return Err(invalid("settings.client_validation.ca_pem", "empty"));
            }
            Some(v) => Some(ClientValidation {
                ca_pem: Arc::from(&v.ca_pem[..]),
                mode: if v.insecure_fallback {
                    ClientValidationMode::AllowInsecureFallback
                } else {
                    ClientValidationMode::AllowValidOnly
                },
            }),
        },
    })
}

/// A resource from the wire, rebuilt and checked against the version it was sent with.
pub fn resource_from_wire(r: &wire::Resource) -> Result<Resource, InvalidResource> {
    resource_from_wire_as(r, crate::PROTOCOL_VERSION)
}

/// How a data plane of push protocol `version` rebuilds `r` (what it kept of the message,
/// decoded with its own message set): as [`resource_from_wire`], with the content hash
/// that release computes checked against the one sent. For tests of older readers.
pub fn resource_from_wire_as(
    r: &wire::Resource,
    version: u32,
) -> Result<Resource, InvalidResource> {
    let built = build(r)?;
    let rebuilt = match &built {
        Resource::Policy(p) if version == 0 => {
            p.as_ref()
                .clone()
                .as_version_5()
                .as_version_4()
                .as_version_3()
                .as_version_2()
                .with_jwt_auth(None)
                .as_version_0()
                .hash()
                .0
        }
        Resource::Policy(p) if version < 3 => {
            p.as_ref()
                .clone()
                .as_version_5()
                .as_version_4()
                .as_version_3()
                .as_version_2()
                .hash()
                .0
        }
        Resource::Policy(p) if version < 4 => {
            p.as_ref()
                .clone()
                .as_version_5()
                .as_version_4()
                .as_version_3()
                .hash()
                .0
        }
        Resource::Policy(p) if version < 5 => {
            p.as_ref().clone().as_version_5().as_version_4().hash().0
        }
        Resource::Policy(p) if version < 6 => p.as_ref().clone().as_version_5().hash().0,
        _ => version_of(&built),
    };
    if rebuilt != r.version {
        return Err(invalid(
            "version",
            format!(
                "rebuilt resource hashes to {rebuilt:016x}, sent as {:016x} (controller and data plane disagree on the IR)",
                r.version
            ),
        ));
    }
    Ok(built)
}

/// The key of a resource [`resource_from_wire`] refuses, when it can be rebuilt at all
/// (e.g. refused only by its hash), so that the refusal names it to the controller.
pub fn key_of_refused(r: &wire::Resource) -> Option<wire::ResourceKey> {
    build(r).ok().map(|b| key_to_wire(&b.key()))
}

/// `r` rebuilt through the model's constructors, its hash not checked.
fn build(r: &wire::Resource) -> Result<Resource, InvalidResource> {
    use wire::resource::Resource as R;
    Ok(
        match r.resource.as_ref().ok_or_else(|| missing("resource"))? {
            R::Listener(l) => Resource::Listener(Arc::new(
                Listener::with_settings(
                    ListenerKey::new(addr("address", &l.address)?),
                    match wire::ListenerProtocol::try_from(l.protocol) {
                        Ok(wire::ListenerProtocol::Http) => Protocol::Http,
                        Ok(wire::ListenerProtocol::Https) => Protocol::Https,
                        Ok(wire::ListenerProtocol::TlsPassthrough) => Protocol::TlsPassthrough,
                        Ok(wire::ListenerProtocol::TlsTerminate) => Protocol::TlsTerminate,
                        Ok(wire::ListenerProtocol::Tcp) => Protocol::Tcp,
                        Ok(wire::ListenerProtocol::Udp) => Protocol::Udp,
                        Err(_) => return Err(invalid("protocol", l.protocol)),
                    },
                    l.gateway.as_str().into(),
                    l.name.as_str().into(),
                    match &l.settings {
                        Some(s) => settings_from_wire(s)?,
                        None => ListenerSettings::default(),
                    },
                )
                .with_sections(
                    l.sections
                        .iter()
                        .map(|s| {
                            Ok(ListenerSection {
                                hostname: host_from_wire("sections.hostname", s.hostname.as_ref())?,
                                set: (!s.set.is_empty()).then(|| s.set.as_str().into()),
                                name: s.name.as_str().into(),
                            })
                        })
                        .collect::<Result<Vec<_>, InvalidResource>>()?
                        .into(),
                ),
            )),
            R::VirtualHost(v) => {
                let rules = v
                    .rules
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        rule_from_wire(r)
                            .map(Arc::new)
                            .map_err(within(&format!("rules[{i}]")))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Resource::VirtualHost(Arc::new(VirtualHost::new(
                    ListenerKey::new(addr("listener", &v.listener)?),
                    host_from_wire("host", v.host.as_ref())?,
                    rules,
                )))
            }
            R::Cluster(c) => {
                let endpoints = c
                    .endpoints
                    .iter()
                    .enumerate()
                    .map(|(i, e)| {
                        let f = format!("endpoints[{i}]");
                        let addr = match e.address.as_ref().ok_or_else(|| missing(&f))? {
                            wire::endpoint::Address::Socket(a) => {
                                EndpointAddr::Socket(addr(&f, a)?)
                            }
                            wire::endpoint::Address::Host(h) => EndpointAddr::Host(
                                h.host.as_str().into(),
                                u16::try_from(h.port)
                                    .map_err(|_| invalid(&f, "port out of range"))?,
                            ),
                        };
                        Ok(Endpoint {
                            addr,
                            weight: e.weight,
                        })
                    })
                    .collect::<Result<Vec<_>, InvalidResource>>()?;
                let protocol = match wire::cluster::Protocol::try_from(c.protocol) {
                    Ok(wire::cluster::Protocol::Http1) => UpstreamProtocol::Http1,
                    Ok(wire::cluster::Protocol::H2c) => UpstreamProtocol::H2c,
                    Err(_) => return Err(invalid("protocol", c.protocol)),
                };
                let tls = c.tls.as_ref().map(upstream_tls_from_wire).transpose()?;
                Resource::Cluster(Arc::new(
                    Cluster::new(ClusterKey(c.name.as_str().into()), endpoints, protocol)
                        .with_tls(tls),
                ))
            }
            R::Certificate(c) => {
                Resource::Certificate(Arc::new(certificate_from_wire(&c.chain_pem, &c.key_pem)))
            }
            R::Sni(s) => Resource::Sni(Arc::new(SniCert::new(
                ListenerKey::new(addr("listener", &s.listener)?),
                host_from_wire("host", s.host.as_ref())?,
                ContentHash(s.certificate),
            ))),
            R::L4Route(r) => Resource::L4Route(Arc::new(L4Route::with_mode(
                ListenerKey::new(addr("listener", &r.listener)?),
                host_from_wire("host", r.host.as_ref())?,
                route_ref_from_wire(r.route.as_ref().ok_or_else(|| missing("route"))?)
                    .map_err(within("route"))?,
                r.backends
                    .iter()
                    .map(|b| L4Backend {
                        cluster: ClusterKey(b.cluster.as_str().into()),
                        weight: b.weight,
                    })
                    .collect(),
                match wire::L4Mode::try_from(r.mode) {
                    Ok(wire::L4Mode::Passthrough) => L4Mode::Passthrough,
                    Ok(wire::L4Mode::Terminate) => L4Mode::Terminate,
                    Err(_) => return Err(invalid("mode", r.mode)),
                },
            ))),
            R::Policy(p) => {
                Resource::Policy(Arc::new(policy_from_wire(p).map_err(within("policy"))?))
            }
        },
    )
}

// ---------------------------------------------------------------- route rules

fn opt(s: &Option<Arc<str>>) -> Option<String> {
    s.as_ref().map(|s| s.to_string())
}

fn pairs_to_wire(v: &[(Arc<str>, Arc<str>)]) -> Vec<wire::HeaderPair> {
    v.iter()
        .map(|(n, val)| wire::HeaderPair {
            name: n.to_string(),
            value: val.to_string(),
        })
        .collect()
}

fn pairs_from_wire(v: &[wire::HeaderPair]) -> Vec<(Arc<str>, Arc<str>)> {
    v.iter()
        .map(|p| (p.name.as_str().into(), p.value.as_str().into()))
        .collect()
}

fn modifier_to_wire(m: &HeaderModifier) -> wire::HeaderModifier {
    wire::HeaderModifier {
        set: pairs_to_wire(&m.set),
        add: pairs_to_wire(&m.add),
        remove: m.remove.iter().map(|s| s.to_string()).collect(),
    }
}

fn modifier_from_wire(m: &wire::HeaderModifier) -> HeaderModifier {
    HeaderModifier {
        set: pairs_from_wire(&m.set),
        add: pairs_from_wire(&m.add),
        remove: m.remove.iter().map(|s| s.as_str().into()).collect(),
    }
}

fn rewrite_to_wire(p: &Option<PathRewrite>) -> Option<wire::PathRewrite> {
    use wire::path_rewrite::Rewrite;
    p.as_ref().map(|p| wire::PathRewrite {
        rewrite: Some(match p {
            PathRewrite::Full(s) => Rewrite::Full(s.to_string()),
            PathRewrite::PrefixMatch(s) => Rewrite::PrefixMatch(s.to_string()),
            PathRewrite::RegexCaptures(s) => Rewrite::RegexCaptures(s.to_string()),
        }),
    })
}

fn rewrite_from_wire(
    f: &str,
    p: Option<&wire::PathRewrite>,
) -> Result<Option<PathRewrite>, InvalidResource> {
    use wire::path_rewrite::Rewrite;
    Ok(match p {
        None => None,
        Some(p) => Some(match p.rewrite.as_ref().ok_or_else(|| missing(f))? {
            Rewrite::Full(s) => PathRewrite::Full(s.as_str().into()),
            Rewrite::PrefixMatch(s) => PathRewrite::PrefixMatch(s.as_str().into()),
            Rewrite::RegexCaptures(s) => PathRewrite::RegexCaptures(s.as_str().into()),
        }),
    })
}

fn value_match_to_wire(name: &Arc<str>, v: &StringMatch) -> wire::ValueMatch {
    use wire::value_match::Value;
    wire::ValueMatch {
        name: name.to_string(),
        value: Some(match v {
            StringMatch::Exact(s) => Value::Exact(s.to_string()),
            StringMatch::Regex(p) => Value::Regex(p.source().to_string()),
        }),
    }
}

fn value_match_from_wire(
    f: &str,
    v: &wire::ValueMatch,
) -> Result<(Arc<str>, StringMatch), InvalidResource> {
    use wire::value_match::Value;
    let m = match v.value.as_ref().ok_or_else(|| missing(f))? {
        Value::Exact(s) => StringMatch::Exact(s.as_str().into()),
        Value::Regex(s) => {
            StringMatch::Regex(Pattern::new(s).map_err(|e| invalid(format!("{f}.regex"), e))?)
        }
    };
    Ok((v.name.as_str().into(), m))
}

fn status(f: &str, v: u32) -> Result<u16, InvalidResource> {
    u16::try_from(v).map_err(|_| invalid(f, format!("{v} is not a status code")))
}

fn filter_to_wire(f: &Filter) -> wire::Filter {
    use wire::filter::Filter as F;
    wire::Filter {
        filter: Some(match f {
            Filter::RequestHeaders(m) => F::RequestHeaders(modifier_to_wire(m)),
            Filter::ResponseHeaders(m) => F::ResponseHeaders(modifier_to_wire(m)),
            Filter::UrlRewrite { hostname, path } => F::UrlRewrite(wire::filter::UrlRewrite {
                hostname: opt(hostname),
                path: rewrite_to_wire(path),
            }),
            Filter::Mirror {
                cluster,
                per_million,
            } => F::Mirror(wire::filter::Mirror {
                cluster: cluster.0.to_string(),
                per_million: *per_million,
            }),
            Filter::Cors(c) => F::Cors(cors_to_wire(c)),
            Filter::InterceptErrors(e) => F::InterceptErrors(wire::InterceptErrors {
                codes: e.codes.iter().map(|c| u32::from(*c)).collect(),
                no_endpoints: e.no_endpoints,
                cluster: e.cluster.0.to_string(),
            }),
        }),
    }
}

fn cors_to_wire(c: &Cors) -> wire::Cors {
    let names = |n: &CorsNames| match n {
        CorsNames::Any => wire::cors::Names {
            any: true,
            names: Vec::new(),
        },
        CorsNames::Listed(v) => wire::cors::Names {
            any: false,
            names: v.iter().map(|s| s.to_string()).collect(),
        },
    };
    wire::Cors {
        allow_origins: c
            .allow_origins
            .iter()
            .map(|o| match o {
                CorsOrigin::Any => "*".to_owned(),
                CorsOrigin::Exact(o) => o.to_string(),
                CorsOrigin::Wildcard { prefix, suffix } => format!("{prefix}*{suffix}"),
            })
            .collect(),
        allow_methods: Some(names(&c.allow_methods)),
        allow_headers: Some(names(&c.allow_headers)),
        expose_headers: Some(names(&c.expose_headers)),
        allow_credentials: c.allow_credentials,
        max_age: c.max_age,
    }
}

fn cors_from_wire(c: &wire::Cors) -> Cors {
    let names = |n: &Option<wire::cors::Names>| match n {
        Some(n) if n.any => CorsNames::Any,
        Some(n) => CorsNames::Listed(n.names.iter().map(|s| s.as_str().into()).collect()),
        None => CorsNames::Listed(Vec::new()),
    };
    Cors {
        allow_origins: c
            .allow_origins
            .iter()
            .map(|o| match o.split_once('*') {
                _ if o == "*" => CorsOrigin::Any,
                Some((prefix, suffix)) => CorsOrigin::Wildcard {
                    prefix: prefix.into(),
                    suffix: suffix.into(),
                },
                None => CorsOrigin::Exact(o.as_str().into()),
            })
            .collect(),
        allow_methods: names(&c.allow_methods),
        allow_headers: names(&c.allow_headers),
        expose_headers: names(&c.expose_headers),
        allow_credentials: c.allow_credentials,
        max_age: c.max_age,
    }
}

fn filters_from_wire(at: &str, v: &[wire::Filter]) -> Result<Vec<Filter>, InvalidResource> {
    use wire::filter::Filter as F;
    let mut out = Vec::with_capacity(v.len());
    for (i, f) in v.iter().enumerate() {
        let at = format!("{at}[{i}]");
        out.push(match f.filter.as_ref().ok_or_else(|| missing(&at))? {
            F::RequestHeaders(m) => Filter::RequestHeaders(modifier_from_wire(m)),
            F::ResponseHeaders(m) => Filter::ResponseHeaders(modifier_from_wire(m)),
            F::UrlRewrite(u) => Filter::UrlRewrite {
                hostname: u.hostname.as_deref().map(Into::into),
                path: rewrite_from_wire(&format!("{at}.url_rewrite.path"), u.path.as_ref())?,
            },
            F::Mirror(m) => Filter::Mirror {
                cluster: ClusterKey(m.cluster.as_str().into()),
                per_million: m.per_million,
            },
            F::Cors(c) => Filter::Cors(Arc::new(cors_from_wire(c))),
            F::InterceptErrors(e) => {
                let mut codes = Vec::with_capacity(e.codes.len());
                for c in &e.codes {
                    let c = status(&format!("{at}.intercept_errors.codes"), *c)?;
                    if !(100..=999).contains(&c) || codes.last().is_some_and(|l| *l >= c) {
                        return Err(invalid(
                            format!("{at}.intercept_errors.codes"),
                            "not sorted status codes",
                        ));
                    }
                    codes.push(c);
                }
                if e.cluster.is_empty() {
                    return Err(missing(&format!("{at}.intercept_errors.cluster")));
                }
                Filter::InterceptErrors(Arc::new(weir_model::InterceptErrors {
                    codes,
                    no_endpoints: e.no_endpoints,
                    cluster: ClusterKey(e.cluster.as_str().into()),
                }))
            }
        });
    }
    Ok(out)
}

fn route_ref_to_wire(r: &RouteRef) -> wire::RouteRef {
    use wire::route_ref::Kind;
    wire::RouteRef {
        kind: match r.kind {
            RouteKind::HttpRoute => Kind::HttpRoute,
            RouteKind::Ingress => Kind::Ingress,
            RouteKind::TlsRoute => Kind::TlsRoute,
            RouteKind::TcpRoute => Kind::TcpRoute,
            RouteKind::GrpcRoute => Kind::GrpcRoute,
            RouteKind::UdpRoute => Kind::UdpRoute,
        } as i32,
        namespace: r.namespace.to_string(),
        name: r.name.to_string(),
        rule: r.rule,
    }
}

fn route_ref_from_wire(r: &wire::RouteRef) -> Result<RouteRef, InvalidResource> {
    use wire::route_ref::Kind;
    Ok(RouteRef {
        kind: match Kind::try_from(r.kind) {
            Ok(Kind::HttpRoute) => RouteKind::HttpRoute,
            Ok(Kind::Ingress) => RouteKind::Ingress,
            Ok(Kind::TlsRoute) => RouteKind::TlsRoute,
            Ok(Kind::TcpRoute) => RouteKind::TcpRoute,
            Ok(Kind::GrpcRoute) => RouteKind::GrpcRoute,
            Ok(Kind::UdpRoute) => RouteKind::UdpRoute,
            Err(_) => return Err(invalid("kind", r.kind)),
        },
        namespace: r.namespace.as_str().into(),
        name: r.name.as_str().into(),
        rule: r.rule,
    })
}

fn rule_to_wire(r: &RouteRule) -> wire::RouteRule {
    use wire::action::Action as A;
    use wire::request_match::Path;
    let m = &r.matcher;
    wire::RouteRule {
        route: Some(route_ref_to_wire(&r.route)),
        r#match: Some(wire::RequestMatch {
            path: Some(match &m.path {
                PathMatch::Exact(s) => Path::Exact(s.to_string()),
                PathMatch::Prefix(s) => Path::Prefix(s.to_string()),
                PathMatch::Regex(p) => Path::Regex(p.source().to_string()),
            }),
            headers: m
                .headers
                .iter()
                .map(|h| value_match_to_wire(&h.name, &h.value))
                .collect(),
            query: m
                .query
                .iter()
                .map(|q| value_match_to_wire(&q.name, &q.value))
                .collect(),
            method: opt(&m.method),
        }),
        filters: r.filters.iter().map(filter_to_wire).collect(),
        action: Some(wire::Action {
            action: Some(match &r.action {
                Action::Forward(b) => A::Forward(wire::action::Forward {
                    backends: b
                        .iter()
                        .map(|b| wire::WeightedBackend {
                            cluster: b.cluster.0.to_string(),
                            weight: b.weight,
                            filters: b.filters.iter().map(filter_to_wire).collect(),
                        })
                        .collect(),
                }),
                Action::Redirect(rd) => A::Redirect(wire::Redirect {
                    scheme: opt(&rd.scheme),
                    hostname: opt(&rd.hostname),
                    path: rewrite_to_wire(&rd.path),
                    port: rd.port.map(u32::from),
                    status: u32::from(rd.status),
                }),
                Action::DirectResponse(d) => A::DirectResponse(wire::DirectResponse {
                    status: u32::from(d.status),
                    headers: pairs_to_wire(&d.headers),
                    body: d.body.to_string(),
                }),
                Action::Fail { status, reason } => A::Fail(wire::action::Fail {
                    status: u32::from(*status),
                    reason: reason.to_string(),
                }),
            }),
        }),
        timeouts: Some(timeouts_to_wire(&r.timeouts)),
        retry: r.retry.as_deref().map(retry_to_wire),
    }
}

fn rule_from_wire(r: &wire::RouteRule) -> Result<RouteRule, InvalidResource> {
    use wire::action::Action as A;
    use wire::request_match::Path;
    let rr = r.route.as_ref().ok_or_else(|| missing("route"))?;
    let route = route_ref_from_wire(rr).map_err(within("route"))?;
    let m = r.r#match.as_ref().ok_or_else(|| missing("match"))?;
    let path = match m.path.as_ref().ok_or_else(|| missing("match.path"))? {
        Path::Exact(s) => PathMatch::Exact(s.as_str().into()),
        Path::Prefix(s) => PathMatch::Prefix(s.as_str().into()),
        Path::Regex(s) => {
            PathMatch::Regex(Pattern::new(s).map_err(|e| invalid("match.path.regex", e))?)
        }
    };
    let mut headers = Vec::with_capacity(m.headers.len());
    for (i, h) in m.headers.iter().enumerate() {
        let (name, value) = value_match_from_wire(&format!("match.headers[{i}]"), h)?;
        headers.push(HeaderMatch { name, value });
    }
    let mut query = Vec::with_capacity(m.query.len());
    for (i, q) in m.query.iter().enumerate() {
        let (name, value) = value_match_from_wire(&format!("match.query[{i}]"), q)?;
        query.push(QueryMatch { name, value });
    }
    let matcher = RequestMatch {
        path,
        headers,
        query,
        method: m.method.as_deref().map(Into::into),
    };
    let filters = filters_from_wire("filters", &r.filters)?;
    let action = match r
        .action
        .as_ref()
        .and_then(|a| a.action.as_ref())
        .ok_or_else(|| missing("action"))?
    {
        A::Forward(f) => Action::Forward(
            f.backends
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    Ok(WeightedBackend {
                        cluster: ClusterKey(b.cluster.as_str().into()),
                        weight: b.weight,
                        filters: filters_from_wire(
                            &format!("action.forward.backends[{i}].filters"),
                            &b.filters,
                        )?,
                    })
                })
                .collect::<Result<Vec<_>, InvalidResource>>()?,
        ),
        A::Redirect(rd) => Action::Redirect(Box::new(Redirect {
            scheme: rd.scheme.as_deref().map(Into::into),
            hostname: rd.hostname.as_deref().map(Into::into),
            path: rewrite_from_wire("action.redirect.path", rd.path.as_ref())?,
            port: rd
                .port
                .map(|p| u16::try_from(p).map_err(|_| invalid("action.redirect.port", p)))
                .transpose()?,
            status: status("action.redirect.status", rd.status)?,
        })),
        A::DirectResponse(d) => Action::DirectResponse(Box::new(DirectResponse {
            status: status("action.direct_response.status", d.status)?,
            headers: pairs_from_wire(&d.headers),
            body: d.body.as_str().into(),
        })),
        A::Fail(f) => Action::Fail {
            status: status("action.fail.status", f.status)?,
            reason: f.reason.as_str().into(),
        },
    };
    let timeouts = timeouts_from_wire(r.timeouts);
    let retry = r.retry.as_ref().map(retry_from_wire).transpose()?;
    Ok(RouteRule::new(route, matcher, filters, action, timeouts).with_retry(retry))
}

/// A certificate received as PEM text: packed when it is canonical PEM, as the control
/// plane's was (the same hash either way, so SNI entries find it).
fn certificate_from_wire(chain_pem: &[u8], key_pem: &[u8]) -> Certificate {
    Certificate::from_pem(chain_pem, key_pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_pattern_from_the_wire_is_of_the_kind_it_says() {
        use wire::host::Host as H;
        let read = |h: H| host_from_wire("host", Some(&wire::Host { host: Some(h) }));
        for h in [
            HostMatch::parse(Some("a.example")).unwrap(),
            HostMatch::parse(Some("*.example")).unwrap(),
            HostMatch::ANY,
        ] {
            let back = host_from_wire("host", Some(&host_to_wire(&h))).unwrap();
            assert_eq!(back.kind(), h.kind());
        }
        for bad in [
            H::Exact(String::new()),
            H::Exact(".example".into()),
            H::Wildcard("example".into()),
            H::Wildcard(".".into()),
        ] {
            assert!(read(bad.clone()).is_err(), "{bad:?}");
        }
    }

    fn ext_auth_policy() -> Policy {
        let target = PolicyTarget::Route {
            kind: RouteKind::HttpRoute,
            namespace: "ns".into(),
            name: "r".into(),
        };
        let ext = ExtAuth {
            url: ExtAuthUrl::parse("http://127.0.0.1:9000/auth").unwrap(),
            headers_to_send: vec!["authorization".into(), "cookie".into()],
            response_headers: vec!["x-user".into()],
            timeout: Duration::from_millis(500),
            cache: Some(ExtAuthCache {
                ttl: Duration::from_secs(10),
                max_entries: 100,
            }),
            fail_open: false,
            status_on_error: 503,
            signin_url: Some("https://login.example/start".into()),
            ca_pem: None,
        };
        Policy::new(target, Timeouts::default(), None, None)
            .with_ext_auth(Some(("ns/ext".into(), Arc::new(ext))))
    }

    /// An external authorization crosses the wire unchanged for a data plane of this
    /// version.
    #[test]
    fn ext_auth_round_trips() {
        let r = Resource::Policy(Arc::new(ext_auth_policy()));
        let back = resource_from_wire(&resource_to_wire(&r)).unwrap();
        let (Resource::Policy(a), Resource::Policy(b)) = (&r, &back) else {
            unreachable!()
        };
        assert_eq!(a.hash(), b.hash());
        assert_eq!(a.ext_auth, b.ext_auth);
    }

    /// An authorization service's CA (version 4) crosses the wire; a version-3 data plane
    /// gets the policy without it, with the hash of the same policy built without it (its
    /// own rebuild, which ignores the field, arrives at the hash sent).
    #[test]
    fn ext_auth_ca_reaches_version_3_data_planes_without_it() {
        let plain = ext_auth_policy();
        let mut ext = (*plain.ext_auth.as_ref().unwrap().1).clone();
        ext.ca_pem = Some("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into());
        let with_ca = plain
            .clone()
            .with_ext_auth(Some(("ns/ext".into(), Arc::new(ext))));
        assert_ne!(with_ca.hash(), plain.hash());
        let r = Resource::Policy(Arc::new(with_ca.clone()));
        let back = resource_from_wire(&resource_to_wire(&r)).unwrap();
        let Resource::Policy(b) = &back else {
            unreachable!()
        };
        assert_eq!((b.hash(), &b.ext_auth), (with_ca.hash(), &with_ca.ext_auth));
        let sent = for_version(&r, 3);
        assert_eq!(sent.as_ref(), &Resource::Policy(Arc::new(plain.clone())));
        let wire = resource_to_wire(sent.as_ref());
        let rebuilt = resource_from_wire_as(&wire, 3).unwrap();
        assert_eq!(rebuilt.hash(), plain.hash());
    }

    /// A capture rewrite (version 3) reaches this version's data plane as it is, and a
    /// data plane of version 2 as a rule that answers 500 (it could not read the
    /// virtual host at all); the other rules of the host reach it unchanged.
    #[test]
    fn capture_rewrite_reaches_a_version_2_data_plane_as_a_failing_rule() {
        let rule = |rule: u32, path: PathRewrite| {
            Arc::new(RouteRule::new(
                RouteRef {
                    kind: RouteKind::Ingress,
                    namespace: "ns".into(),
                    name: "i".into(),
                    rule,
                },
                RequestMatch {
                    path: PathMatch::Regex(Pattern::new("(?i)(?:/a(/|$)(.*)).*").unwrap()),
                    headers: vec![],
                    query: vec![],
                    method: None,
                },
                vec![Filter::UrlRewrite {
                    hostname: None,
                    path: Some(path),
                }],
                Action::Fail {
                    status: 503,
                    reason: "x".into(),
                },
                Timeouts::default(),
            ))
        };
        let captures = rule(0, PathRewrite::RegexCaptures("/$2".into()));
        let full = rule(1, PathRewrite::Full("/".into()));
        let v = VirtualHost::new(
            ListenerKey::new("127.0.0.1:80".parse().unwrap()),
            HostMatch::ANY,
            vec![captures.clone(), full.clone()],
        );
        let r = Resource::VirtualHost(Arc::new(v));
        assert_eq!(for_version(&r, crate::PROTOCOL_VERSION).as_ref(), &r);
        let back = resource_from_wire(&resource_to_wire(&r)).unwrap();
        assert_eq!(back, r);
        let sent = for_version(&r, 2);
        let Resource::VirtualHost(old) = sent.as_ref() else {
            unreachable!()
        };
        assert!(old.rules[0].filters.is_empty());
        assert!(matches!(
            old.rules[0].action,
            Action::Fail { status: 500, .. }
        ));
        assert_eq!(old.rules[0].matcher, captures.matcher);
        assert_eq!(old.rules[1], full);
        let rebuilt = resource_from_wire_as(&resource_to_wire(sent.as_ref()), 2).unwrap();
        assert_eq!(&rebuilt, sent.as_ref());
    }

    /// A data plane of version 2 does not know `ext_auth`: it is sent a policy that
    /// refuses every client, which it rebuilds to the hash sent.
    #[test]
    fn ext_auth_reaches_a_version_2_data_plane_as_deny_all() {
        let r = Resource::Policy(Arc::new(ext_auth_policy()));
        let sent = for_version(&r, 2);
        let Resource::Policy(p) = sent.as_ref() else {
            unreachable!()
        };
        assert!(p.ext_auth.is_none());
        let rules = p.ip_rules.as_ref().map(|(n, r)| (&**n, r.as_ref()));
        assert_eq!(rules, Some(("ns/ext", &IpRules::deny_all())));
        let mut wire = resource_to_wire(sent.as_ref());
        let rebuilt = resource_from_wire_as(&wire, 2).unwrap();
        let Resource::Policy(rebuilt) = rebuilt else {
            unreachable!()
        };
        assert!(rebuilt.ext_auth.is_none() && rebuilt.ip_rules.is_some());
        // What an old reader keeps of the message (it drops field 13) rebuilds alike.
        if let Some(wire::resource::Resource::Policy(p)) = wire.resource.as_mut() {
            p.ext_auth = None;
        }
        resource_from_wire_as(&wire, 2).unwrap();
        // And a version-0 data plane gets the same stand-in with its own hash.
        let v0 = for_version(&r, 0);
        resource_from_wire_as(&resource_to_wire(v0.as_ref()), 0).unwrap();
    }

    /// A JWT provider whose keys are fetched from a URL round-trips, and reaches a
    /// version-2 data plane as a deny-all policy without the remote set, which it
    /// rebuilds (dropping field 7 of `JwtProvider`) to the hash sent.
    #[test]
    fn remote_jwks_reach_a_version_2_data_plane_as_deny_all() {
        let target = PolicyTarget::Gateway("ns/gw".into());
        let provider = JwtProvider {
            name: "idp".into(),
            issuer: Some("https://idp.example".into()),
            audiences: Vec::new(),
            keys: Vec::new(),
            required_claims: Vec::new(),
            claims_to_headers: Vec::new(),
            remote_jwks: Some(Arc::new(RemoteJwks {
                url: ExtAuthUrl::parse("https://idp.example/jwks").unwrap(),
                refresh: Duration::from_secs(60),
                timeout: Duration::from_secs(2),
                ca_pem: Some("-----BEGIN CERTIFICATE-----\n".into()),
            })),
        };
        let p = Policy::new(target, Timeouts::default(), None, None).with_jwt_auth(Some((
            "ns/jwt".into(),
            Arc::new(JwtAuth {
                providers: vec![provider],
                forward_token: false,
            }),
        )));
        let r = Resource::Policy(Arc::new(p));
        let back = resource_from_wire(&resource_to_wire(&r)).unwrap();
        assert_eq!(version_of(&back), version_of(&r));
        let sent = for_version(&r, 2);
        let Resource::Policy(p) = sent.as_ref() else {
            unreachable!()
        };
        assert!(p.ip_rules.is_some(), "deny-all stand-in");
        let jwt = &p.jwt_auth.as_ref().unwrap().1;
        assert!(jwt.providers[0].remote_jwks.is_none());
        let mut wire = resource_to_wire(sent.as_ref());
        if let Some(wire::resource::Resource::Policy(p)) = wire.resource.as_mut() {
            for provider in &mut p.jwt_auth.as_mut().unwrap().providers {
                provider.remote_jwks = None;
            }
        }
        resource_from_wire_as(&wire, 2).unwrap();
    }

    /// Outlier detection (version 4) round-trips, and reaches a data plane of version 3
    /// (and 2) as the policy without it, which that release rebuilds (dropping field 20)
    /// to the hash sent; a policy without it is sent unchanged.
    #[test]
    fn outlier_detection_reaches_older_data_planes_without_it() {
        let target = PolicyTarget::Backend {
            kind: BackendKind::Service,
            namespace: "ns".into(),
            name: "svc".into(),
        };
        let plain = Policy::new(target, Timeouts::default(), None, None)
            .with_load_balancer(Some(LoadBalancer::LeastRequest));
        let tuned = plain.clone().with_outlier_detection(Some(OutlierDetection {
            ejection: Some(Ejection {
                consecutive_5xx: 1,
                ..Ejection::default()
            }),
            panic_threshold_percent: 50,
        }));
        let r = Resource::Policy(Arc::new(tuned.clone()));
        let back = resource_from_wire(&resource_to_wire(&r)).unwrap();
        let Resource::Policy(b) = &back else {
            unreachable!()
        };
        assert_eq!(b.outlier_detection, tuned.outlier_detection);
        assert_eq!(b.hash(), tuned.hash());
        assert_eq!(for_version(&r, crate::PROTOCOL_VERSION).as_ref(), &r);
        for version in [3, 2] {
            let sent = for_version(&r, version);
            let Resource::Policy(p) = sent.as_ref() else {
                unreachable!()
            };
            assert!(p.outlier_detection.is_none(), "version {version}");
            let mut wire = resource_to_wire(sent.as_ref());
            if let Some(wire::resource::Resource::Policy(p)) = wire.resource.as_mut() {
                p.outlier_detection = None;
            }
            resource_from_wire_as(&wire, version).unwrap();
        }
        assert_eq!(
            for_version(&r, 3).as_ref(),
            &Resource::Policy(Arc::new(plain.clone()))
        );
        assert!(matches!(
            for_version(&r, 2).as_ref(),
            Resource::Policy(p) if p.load_balancer.is_none()
        ));
        let untouched = Resource::Policy(Arc::new(plain));
        assert!(matches!(
            for_version(&untouched, 3),
            std::borrow::Cow::Borrowed(_)
        ));
        // Bad values are refused on the wire, naming the field.
        let mut wire = resource_to_wire(&r);
        if let Some(wire::resource::Resource::Policy(p)) = wire.resource.as_mut() {
            p.outlier_detection
                .as_mut()
                .unwrap()
                .panic_threshold_percent = 101;
        }
        let e = resource_from_wire(&wire).unwrap_err().to_string();
        assert!(e.contains("outlier_detection"), "{e}");
    }

    /// Access-log and trace settings (version 5) round-trip, and reach a data plane of
    /// version 4 (and 3) as the policy without them, which that release rebuilds (dropping
    /// fields 17 and 18) to the hash sent.
    #[test]
    fn log_and_trace_settings_reach_older_data_planes_without_them() {
        let target = PolicyTarget::Gateway("ns/gw".into());
        let plain = Policy::new(target, Timeouts::default(), None, None).with_cors(None);
        let limited = plain.clone().with_request_limits(Some((
            "ns/limits".into(),
            weir_model::RequestLimits {
                max_body_bytes: Some(1024),
                max_headers: None,
                max_header_bytes: None,
            },
        )));
        let set = limited
            .clone()
            .with_access_log(Some((
                "ns/obs".into(),
                weir_model::AccessLogPolicy {
                    disabled: false,
                    fields: Some(weir_model::access_log_field_bits(["status", "route"]).unwrap()),
                    errors_only: true,
                },
            )))
            .with_tracing(Some((
                "ns/obs".into(),
                weir_model::TracingPolicy {
                    disabled: false,
                    sampling: Some(250_000),
                },
            )));
        assert_ne!(set.hash(), limited.hash());
        let r = Resource::Policy(Arc::new(set.clone()));
        let back = resource_from_wire(&resource_to_wire(&r)).unwrap();
        let Resource::Policy(b) = &back else {
            unreachable!()
        };
        assert_eq!(b.access_log, set.access_log);
        assert_eq!(b.tracing, set.tracing);
        assert_eq!(b.hash(), set.hash());
        assert_eq!(for_version(&r, crate::PROTOCOL_VERSION).as_ref(), &r);
        for version in [4, 3] {
            let sent = for_version(&r, version);
            let Resource::Policy(p) = sent.as_ref() else {
                unreachable!()
            };
            assert!(
                p.access_log.is_none() && p.tracing.is_none(),
                "version {version}"
            );
            assert!(
                p.request_limits.is_some(),
                "version {version}: the rest kept"
            );
            let mut wire = resource_to_wire(sent.as_ref());
            if let Some(wire::resource::Resource::Policy(p)) = wire.resource.as_mut() {
                p.access_log = None;
                p.tracing = None;
            }
            resource_from_wire_as(&wire, version).unwrap();
        }
        assert_eq!(
            for_version(&r, 4).as_ref(),
            &Resource::Policy(Arc::new(limited.clone()))
        );
        // A version-4 reader of the full message ignores fields 17 and 18 and computes
        // the version-4 hash, which is what a version-4 data plane is sent.
        let stripped = resource_to_wire(for_version(&r, 4).as_ref());
        assert_eq!(stripped.version, limited.hash().0);
        let untouched = Resource::Policy(Arc::new(limited));
        assert!(matches!(
            for_version(&untouched, 4),
            std::borrow::Cow::Borrowed(_)
        ));
        // Bad values are refused on the wire, naming the field.
        let mut wire = resource_to_wire(&r);
        if let Some(wire::resource::Resource::Policy(p)) = wire.resource.as_mut() {
            p.tracing.as_mut().unwrap().sampling_ppm = Some(1_000_001);
        }
        let e = resource_from_wire(&wire).unwrap_err().to_string();
        assert!(e.contains("tracing.sampling_ppm"), "{e}");
        let mut wire = resource_to_wire(&r);
        if let Some(wire::resource::Resource::Policy(p)) = wire.resource.as_mut() {
            p.access_log.as_mut().unwrap().fields.push("bogus".into());
        }
        let e = resource_from_wire(&wire).unwrap_err().to_string();
        assert!(e.contains("access_log.fields"), "{e}");
    }

    /// Listener and ListenerSet targets (version 6) and a listener's sections cross the
    /// wire; a listener without sections keeps the hash a version-5 data plane computes.
    #[test]
    fn listener_targets_and_sections_round_trip() {
        for target in [
            PolicyTarget::Listener {
                gateway: "ns/gw".into(),
                set: None,
                section: "http".into(),
            },
            PolicyTarget::Listener {
                gateway: "ns/gw".into(),
                set: Some("ns/set".into()),
                section: "a".into(),
            },
            PolicyTarget::ListenerSet {
                gateway: "ns/gw".into(),
                set: "ns/set".into(),
            },
        ] {
            let p = Policy::new(
                target.clone(),
                Timeouts {
                    request: Some(Duration::from_secs(2)),
                    ..Timeouts::default()
                },
                None,
                None,
            );
            let r = Resource::Policy(Arc::new(p));
            let back = resource_from_wire(&resource_to_wire(&r)).unwrap();
            assert_eq!(back, r);
            let k = ResourceKey::policy(target);
            assert_eq!(key_from_wire(&key_to_wire(&k)).unwrap(), k);
        }
        let plain = Listener::new(
            ListenerKey::new("0.0.0.0:80".parse().unwrap()),
            Protocol::Http,
            "ns/gw".into(),
            "http,a".into(),
        );
        let sectioned = plain.clone().with_sections(Arc::from([
            ListenerSection {
                hostname: HostMatch::ANY,
                set: None,
                name: "http".into(),
            },
            ListenerSection {
                hostname: HostMatch::exact("a.test".into()),
                set: Some("ns/set".into()),
                name: "a".into(),
            },
        ]));
        assert_ne!(sectioned.hash(), plain.hash());
        assert_eq!(
            plain.clone().with_sections(Arc::from([])).hash(),
            plain.hash(),
            "no sections: the version-5 hash"
        );
        let r = Resource::Listener(Arc::new(sectioned.clone()));
        let Resource::Listener(back) = resource_from_wire(&resource_to_wire(&r)).unwrap() else {
            unreachable!()
        };
        assert_eq!(
            (back.hash(), &back.sections),
            (sectioned.hash(), &sectioned.sections)
        );
    }

    /// A data plane of version 5 or older is sent no listener or ListenerSet policy, and
    /// not the listeners such policies cover (it would serve them unchecked); listeners
    /// without sections and other policies reach it as before.
    #[test]
    fn listener_policies_and_their_listeners_are_withheld_from_version_5() {
        let listener_policy = ResourceKey::policy(PolicyTarget::Listener {
            gateway: "ns/gw".into(),
            set: None,
            section: "http".into(),
        });
        let set_policy = ResourceKey::policy(PolicyTarget::ListenerSet {
            gateway: "ns/gw".into(),
            set: "ns/set".into(),
        });
        let gateway_policy = ResourceKey::policy(PolicyTarget::Gateway("ns/gw".into()));
        for k in [&listener_policy, &set_policy] {
            assert!(sent_to_version(k, crate::PROTOCOL_VERSION));
            assert!(sent_to_version(k, 6));
            assert!(!sent_to_version(k, 5));
            assert!(!sent_to_version(k, 2));
        }
        assert!(sent_to_version(&gateway_policy, 5));
        let plain = Listener::new(
            ListenerKey::new("0.0.0.0:80".parse().unwrap()),
            Protocol::Http,
            "ns/gw".into(),
            "http".into(),
        );
        let sectioned = plain.clone().with_sections(Arc::from([ListenerSection {
            hostname: HostMatch::ANY,
            set: None,
            name: "http".into(),
        }]));
        let plain = Resource::Listener(Arc::new(plain));
        let sectioned = Resource::Listener(Arc::new(sectioned));
        assert!(!withheld(&sectioned, 6));
        assert!(withheld(&sectioned, 5));
        assert!(withheld(&sectioned, 2));
        assert!(!withheld(&plain, 5));
        assert_eq!(for_version(&plain, 5).as_ref(), &plain);
    }
}
