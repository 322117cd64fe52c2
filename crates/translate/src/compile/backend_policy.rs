//! The settings of a TrafficPolicy that belong to a Service or `Backend` rather than to a
//! request: `healthCheck`, `circuitBreaker` and `loadBalancer` (pure validation into the
//! model).

use std::time::Duration;

use weir_api::{
    CircuitBreakerSpec, ConsistentHashSpec, EndpointLimitsSpec, HashType, HealthCheckSpec,
    HealthCheckType, LoadBalancerSpec, LoadBalancerType,
};
use weir_model::{
    CircuitBreaker, GeneratedCookie, HashOn, HealthCheck, HealthProbe, Limits, LoadBalancer,
    RateLimitKey, is_cookie_name, is_cookie_path,
};

use crate::compile::duration;

/// Probe interval bounds: under 100 ms probes become load; over an hour they say little.
const MIN_INTERVAL: Duration = Duration::from_millis(100);
const MAX_INTERVAL: Duration = Duration::from_secs(3600);
const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
/// One passed probe brings an endpoint back (fast recovery; a flapping endpoint is
/// taken out again after `unhealthyThreshold` failures and by passive outlier detection).
const DEFAULT_HEALTHY: u32 = 1;
const DEFAULT_UNHEALTHY: u32 = 3;
const MAX_THRESHOLD: i64 = 100;
/// The largest admission limit (one `u32` counter each).
const MAX_LIMIT: i64 = 1_000_000_000;

/// `healthCheck` at `field` (`spec.healthCheck`).
pub(crate) fn health_check(h: &HealthCheckSpec, field: &str) -> Result<HealthCheck, String> {
    let dur = |v: &Option<String>, name: &str, default: Duration| -> Result<Duration, String> {
        match v {
            None => Ok(default),
            Some(s) => duration::parse(s)
                .map(|d| d.unwrap_or(Duration::ZERO))
                .map_err(|e| format!("{field}.{name}: {e}")),
        }
    };
    let interval = dur(&h.interval, "interval", DEFAULT_INTERVAL)?;
    if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&interval) {
        return Err(format!(
            "{field}.interval: {interval:?} is not between 100ms and 1h"
        ));
    }
    let timeout = dur(&h.timeout, "timeout", DEFAULT_TIMEOUT.min(interval))?;
    if timeout.is_zero() || timeout > interval {
        return Err(format!(
            "{field}.timeout: {timeout:?} must be above 0 and at most the interval"
        ));
    }
    let jitter = dur(&h.jitter, "jitter", Duration::ZERO)?;
    if jitter > interval {
        return Err(format!(
            "{field}.jitter: {jitter:?} must be at most the interval"
        ));
    }
    let threshold = |v: Option<i64>, name: &str, default: u32| match v {
        None => Ok(default),
        Some(n) if (1..=MAX_THRESHOLD).contains(&n) => Ok(n as u32),
        Some(n) => Err(format!(
            "{field}.{name}: {n} is not between 1 and {MAX_THRESHOLD}"
        )),
    };
    let healthy_threshold = threshold(h.healthy_threshold, "healthyThreshold", DEFAULT_HEALTHY)?;
    let unhealthy_threshold = threshold(
        h.unhealthy_threshold,
        "unhealthyThreshold",
        DEFAULT_UNHEALTHY,
    )?;
    let Some(kind) = h.type_ else {
        return Err(format!("{field}.type: required (HTTP, TCP or GRPC)"));
    };
    let unused = |name: &str| format!("{field}.{name}: only for type {name:?}s");
    let probe = match kind {
        HealthCheckType::Http => {
            if h.grpc.is_some() {
                return Err(unused("grpc"));
            }
            let http = h.http.clone().unwrap_or_default();
            let path = http.path.unwrap_or_else(|| "/".into());
            if !path.starts_with('/')
                || path.len() > 1024
                || path.bytes().any(|b| b.is_ascii_control() || b == b' ')
            {
                return Err(format!(
                    "{field}.http.path: {path:?} must start with / and hold no spaces or control characters"
                ));
            }
            if let Some(host) = &http.host
                && (host.is_empty()
                    || host.len() > 253
                    || host.bytes().any(|b| b.is_ascii_control() || b == b' '))
            {
                return Err(format!("{field}.http.host: {host:?} is not a host"));
            }
            let statuses = match &http.expected_statuses {
                None => vec![(200, 399)],
                Some(list) if list.is_empty() => {
                    return Err(format!(
                        "{field}.http.expectedStatuses: at least one status"
                    ));
                }
                Some(list) => {
                    let mut out = Vec::with_capacity(list.len());
                    for (i, s) in list.iter().enumerate() {
                        let s = u16::try_from(*s)
                            .ok()
                            .filter(|s| (100..=599).contains(s))
                            .ok_or_else(|| {
                                format!(
                                    "{field}.http.expectedStatuses[{i}]: {s} is not between 100 and 599"
                                )
                            })?;
                        out.push((s, s));
                    }
                    out.sort_unstable();
                    out.dedup();
                    out
                }
            };
            HealthProbe::Http {
                path: path.into(),
                host: http.host.map(Into::into),
                statuses,
            }
        }
        HealthCheckType::Tcp => {
            if h.http.is_some() {
                return Err(unused("http"));
            }
            if h.grpc.is_some() {
                return Err(unused("grpc"));
            }
            HealthProbe::Tcp
        }
        HealthCheckType::Grpc => {
            if h.http.is_some() {
                return Err(unused("http"));
            }
            let service = h.grpc.as_ref().and_then(|g| g.service.clone());
            let service = service.unwrap_or_default();
            if service.len() > 1024 {
                return Err(format!("{field}.grpc.service: at most 1024 characters"));
            }
            HealthProbe::Grpc {
                service: service.into(),
            }
        }
    };
    Ok(HealthCheck {
        probe,
        interval,
        timeout,
        jitter,
        healthy_threshold,
        unhealthy_threshold,
    })
}

/// `circuitBreaker` at `field` (`spec.circuitBreaker`).
pub(crate) fn circuit_breaker(
    c: &CircuitBreakerSpec,
    field: &str,
) -> Result<CircuitBreaker, String> {
    let cluster = limits(
        c.max_connections,
        c.max_pending_requests,
        c.max_requests,
        field,
    )?;
    let endpoint = match &c.per_endpoint {
        None => Limits::default(),
        Some(EndpointLimitsSpec {
            max_connections,
            max_pending_requests,
            max_requests,
        }) => limits(
            *max_connections,
            *max_pending_requests,
            *max_requests,
            &format!("{field}.perEndpoint"),
        )?,
    };
    if !cluster.is_set() && !endpoint.is_set() {
        return Err(format!("{field}: sets no limit"));
    }
    Ok(CircuitBreaker { cluster, endpoint })
}

fn limits(
    connections: Option<i64>,
    pending: Option<i64>,
    requests: Option<i64>,
    field: &str,
) -> Result<Limits, String> {
    let one = |v: Option<i64>, name: &str| match v {
        None => Ok(None),
        Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(Some(n as u32)),
        Some(n) => Err(format!(
            "{field}.{name}: {n} is not between 1 and {MAX_LIMIT}"
        )),
    };
    Ok(Limits {
        max_connections: one(connections, "maxConnections")?,
        max_pending_requests: one(pending, "maxPendingRequests")?,
        max_requests: one(requests, "maxRequests")?,
    })
}

/// `loadBalancer` at `field` (`spec.loadBalancer`).
pub(crate) fn load_balancer(l: &LoadBalancerSpec, field: &str) -> Result<LoadBalancer, String> {
    let Some(kind) = l.type_ else {
        return Err(format!(
            "{field}.type: required (RoundRobin, LeastRequest, LatencyAware or ConsistentHash)"
        ));
    };
    if kind != LoadBalancerType::ConsistentHash && l.consistent_hash.is_some() {
        return Err(format!(
            "{field}.consistentHash: only with type ConsistentHash"
        ));
    }
    Ok(match kind {
        LoadBalancerType::RoundRobin => LoadBalancer::RoundRobin,
        LoadBalancerType::LeastRequest => LoadBalancer::LeastRequest,
        LoadBalancerType::LatencyAware => LoadBalancer::LatencyAware,
        LoadBalancerType::ConsistentHash => match &l.consistent_hash {
            None => {
                return Err(format!(
                    "{field}.consistentHash: required with type ConsistentHash"
                ));
            }
            Some(h) => {
                LoadBalancer::ConsistentHash(hash_on(h, &format!("{field}.consistentHash"))?)
            }
        },
    })
}

/// The longest `Max-Age` of a generated cookie (a year).
const MAX_COOKIE_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

fn hash_on(h: &ConsistentHashSpec, field: &str) -> Result<HashOn, String> {
    let Some(kind) = h.type_ else {
        return Err(format!(
            "{field}.type: required (Header, Cookie or SourceIP)"
        ));
    };
    if kind != HashType::Header && h.header.is_some() {
        return Err(format!("{field}.header: only with type Header"));
    }
    if kind != HashType::Cookie && h.cookie.is_some() {
        return Err(format!("{field}.cookie: only with type Cookie"));
    }
    match kind {
        HashType::SourceIp => Ok(HashOn::SourceIp),
        HashType::Header => {
            let name = h.header.as_ref().map_or("", |h| h.name.as_str());
            if !RateLimitKey::is_header_name(name) {
                return Err(format!(
                    "{field}.header.name: {name:?} is not a header name"
                ));
            }
            Ok(HashOn::Header(name.to_ascii_lowercase().into()))
        }
        HashType::Cookie => {
            let Some(c) = &h.cookie else {
                return Err(format!("{field}.cookie: required with type Cookie"));
            };
            if !is_cookie_name(&c.name) {
                return Err(format!(
                    "{field}.cookie.name: {:?} is not a cookie name (1-128 token characters)",
                    c.name
                ));
            }
            let generate = c.generate.unwrap_or(false);
            if !generate && (c.ttl.is_some() || c.path.is_some()) {
                let which = if c.ttl.is_some() { "ttl" } else { "path" };
                return Err(format!(
                    "{field}.cookie.{which}: only for a generated cookie (generate: true)"
                ));
            }
            let generate = if generate {
                let ttl = match &c.ttl {
                    None => None,
                    Some(s) => match duration::parse(s) {
                        Err(e) => return Err(format!("{field}.cookie.ttl: {e}")),
                        Ok(None) => {
                            return Err(format!("{field}.cookie.ttl: must be above 0"));
                        }
                        Ok(Some(d)) if d > MAX_COOKIE_TTL => {
                            return Err(format!("{field}.cookie.ttl: {d:?} is over a year"));
                        }
                        Ok(Some(d)) => Some(d),
                    },
                };
                let path = c.path.as_deref().unwrap_or("/");
                if !is_cookie_path(path) {
                    return Err(format!(
                        "{field}.cookie.path: {path:?} must start with / and hold no spaces, semicolons or control characters"
                    ));
                }
                Some(GeneratedCookie {
                    ttl,
                    path: path.into(),
                    same_site: None,
                    secure: false,
                })
            } else {
                None
            };
            Ok(HashOn::Cookie {
                name: c.name.as_str().into(),
                generate,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_ranges() {
        let spec = HealthCheckSpec {
            type_: Some(HealthCheckType::Http),
            ..Default::default()
        };
        let h = health_check(&spec, "spec.healthCheck").unwrap();
        assert_eq!(h.interval, DEFAULT_INTERVAL);
        assert_eq!(h.timeout, DEFAULT_TIMEOUT);
        assert_eq!((h.healthy_threshold, h.unhealthy_threshold), (1, 3));
        assert!(
            matches!(&h.probe, HealthProbe::Http { path, statuses, .. } if &**path == "/" && statuses == &[(200, 399)])
        );
        let bad = |f: fn(&mut HealthCheckSpec), want: &str| {
            let mut s = spec.clone();
            f(&mut s);
            let e = health_check(&s, "spec.healthCheck").unwrap_err();
            assert!(e.starts_with(want), "{e}");
        };
        bad(
            |s| s.interval = Some("10ms".into()),
            "spec.healthCheck.interval",
        );
        bad(
            |s| {
                s.interval = Some("1s".into());
                s.timeout = Some("2s".into())
            },
            "spec.healthCheck.timeout",
        );
        bad(|s| s.jitter = Some("1h".into()), "spec.healthCheck.jitter");
        bad(
            |s| s.unhealthy_threshold = Some(0),
            "spec.healthCheck.unhealthyThreshold",
        );
        bad(|s| s.type_ = None, "spec.healthCheck.type");
        bad(
            |s| {
                s.http = Some(weir_api::HttpHealthCheckSpec {
                    expected_statuses: Some(vec![200, 600]),
                    ..Default::default()
                })
            },
            "spec.healthCheck.http.expectedStatuses[1]",
        );
        bad(
            |s| {
                s.type_ = Some(HealthCheckType::Tcp);
                s.http = Some(Default::default())
            },
            "spec.healthCheck.http",
        );
    }

    #[test]
    fn load_balancers_are_checked() {
        use weir_api::{HashCookieSpec, HashHeaderSpec};
        let f = "spec.loadBalancer";
        let lb = |t: LoadBalancerType| LoadBalancerSpec {
            type_: Some(t),
            consistent_hash: None,
        };
        assert_eq!(
            load_balancer(&lb(LoadBalancerType::LatencyAware), f),
            Ok(LoadBalancer::LatencyAware)
        );
        let hashed = |h: ConsistentHashSpec| LoadBalancerSpec {
            type_: Some(LoadBalancerType::ConsistentHash),
            consistent_hash: Some(h),
        };
        let cookie = |c: HashCookieSpec| ConsistentHashSpec {
            type_: Some(HashType::Cookie),
            cookie: Some(c),
            ..Default::default()
        };
        let ok = load_balancer(
            &hashed(cookie(HashCookieSpec {
                name: "weir-session".into(),
                generate: Some(true),
                ttl: Some("1h".into()),
                path: None,
            })),
            f,
        )
        .unwrap();
        assert_eq!(
            ok,
            LoadBalancer::ConsistentHash(HashOn::Cookie {
                name: "weir-session".into(),
                generate: Some(GeneratedCookie {
                    ttl: Some(Duration::from_secs(3600)),
                    path: "/".into(),
                    same_site: None,
                    secure: false,
                }),
            })
        );
        let header = load_balancer(
            &hashed(ConsistentHashSpec {
                type_: Some(HashType::Header),
                header: Some(HashHeaderSpec {
                    name: "X-User".into(),
                }),
                ..Default::default()
            }),
            f,
        );
        assert_eq!(
            header,
            Ok(LoadBalancer::ConsistentHash(HashOn::Header(
                "x-user".into()
            )))
        );
        let bad = |l: LoadBalancerSpec, want: &str| {
            let e = load_balancer(&l, f).unwrap_err();
            assert!(e.starts_with(want), "{e} should start with {want}");
        };
        bad(LoadBalancerSpec::default(), "spec.loadBalancer.type");
        bad(
            LoadBalancerSpec {
                type_: Some(LoadBalancerType::ConsistentHash),
                consistent_hash: None,
            },
            "spec.loadBalancer.consistentHash: required",
        );
        bad(
            LoadBalancerSpec {
                type_: Some(LoadBalancerType::RoundRobin),
                consistent_hash: Some(Default::default()),
            },
            "spec.loadBalancer.consistentHash: only",
        );
        bad(
            hashed(ConsistentHashSpec::default()),
            "spec.loadBalancer.consistentHash.type",
        );
        bad(
            hashed(ConsistentHashSpec {
                type_: Some(HashType::Header),
                ..Default::default()
            }),
            "spec.loadBalancer.consistentHash.header.name",
        );
        bad(
            hashed(ConsistentHashSpec {
                type_: Some(HashType::SourceIp),
                cookie: Some(Default::default()),
                ..Default::default()
            }),
            "spec.loadBalancer.consistentHash.cookie: only",
        );
        bad(
            hashed(cookie(HashCookieSpec {
                name: "a b".into(),
                ..Default::default()
            })),
            "spec.loadBalancer.consistentHash.cookie.name",
        );
        bad(
            hashed(cookie(HashCookieSpec {
                name: "s".into(),
                ttl: Some("1h".into()),
                ..Default::default()
            })),
            "spec.loadBalancer.consistentHash.cookie.ttl: only",
        );
        bad(
            hashed(cookie(HashCookieSpec {
                name: "s".into(),
                generate: Some(true),
                ttl: Some("0s".into()),
                ..Default::default()
            })),
            "spec.loadBalancer.consistentHash.cookie.ttl: must",
        );
        bad(
            hashed(cookie(HashCookieSpec {
                name: "s".into(),
                generate: Some(true),
                path: Some("app;x".into()),
                ..Default::default()
            })),
            "spec.loadBalancer.consistentHash.cookie.path",
        );
    }

    #[test]
    fn limits_are_checked() {
        let c = CircuitBreakerSpec {
            max_requests: Some(10),
            per_endpoint: Some(EndpointLimitsSpec {
                max_pending_requests: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        };
        let b = circuit_breaker(&c, "spec.circuitBreaker").unwrap();
        assert_eq!(b.cluster.max_requests, Some(10));
        assert_eq!(b.endpoint.max_pending_requests, Some(1));
        let e = circuit_breaker(
            &CircuitBreakerSpec {
                max_connections: Some(0),
                ..Default::default()
            },
            "spec.circuitBreaker",
        )
        .unwrap_err();
        assert!(e.starts_with("spec.circuitBreaker.maxConnections"), "{e}");
        assert!(circuit_breaker(&CircuitBreakerSpec::default(), "f").is_err());
    }
}
