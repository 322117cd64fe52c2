//! The settings policies give one request, and request phase 2 ("check"): the policies
//! that may refuse it.
//!
//! Policies are snapshot resources keyed by their target ([`PolicyTarget`]); a request
//! derives the keys from what it already has: its rule's origin (rule, then route) and
//! its listener's Gateway. Each field comes from the most specific target that sets it;
//! a route's own `timeouts` and `retry` win over every policy. A snapshot without
//! policies costs one branch.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderMap;
use weir_model::{Policy, PolicyTarget, RateLimitKey, Retry, RouteRule, Timeouts};

use crate::error::ProxyError;
use crate::ratelimit::{Decision, RateLimiter};
use crate::snapshot::Snapshot;

/// What the policies (and the rule itself) set for one request.
#[derive(Clone, Debug, Default)]
pub(crate) struct Applied {
    /// Request and per-attempt timeouts, field by field.
    pub(crate) timeouts: Timeouts,
    /// The policy whose retry applies, when the rule has none of its own.
    retry: Option<Arc<Policy>>,
    /// The policy whose rate limit applies.
    rate_limit: Option<Arc<Policy>>,
}

impl Applied {
    /// The rule's settings alone (no policy applies).
    pub(crate) fn of_rule(rule: &RouteRule) -> Applied {
        Applied {
            timeouts: rule.timeouts.clone(),
            retry: None,
            rate_limit: None,
        }
    }

    /// The retry that applies: the rule's own, else a policy's.
    pub(crate) fn retry<'a>(&'a self, rule: &'a RouteRule) -> Option<&'a Retry> {
        rule.retry
            .as_ref()
            .or_else(|| self.retry.as_ref().and_then(|p| p.retry.as_ref()))
    }
}

/// The settings for a request of `rule` on a listener of `gateway`.
pub(crate) fn resolve(snapshot: &Snapshot, gateway: &Arc<str>, rule: &RouteRule) -> Applied {
    if !snapshot.has_policies() {
        return Applied::of_rule(rule);
    }
    let chain = [
        snapshot.policy(&PolicyTarget::Rule(rule.route.clone())),
        snapshot.policy(&PolicyTarget::route_of(&rule.route)),
        snapshot.policy(&PolicyTarget::Gateway(gateway.clone())),
    ];
    let first = |has: fn(&Policy) -> bool| {
        chain
            .iter()
            .flatten()
            .find(|p| has(p))
            .map(|p| Arc::clone(p))
    };
    let mut applied = Applied::of_rule(rule);
    let t = &mut applied.timeouts;
    if t.request.is_none() {
        t.request = chain.iter().flatten().find_map(|p| p.timeouts.request);
    }
    if t.backend_request.is_none() {
        t.backend_request = chain
            .iter()
            .flatten()
            .find_map(|p| p.timeouts.backend_request);
    }
    if rule.retry.is_none() {
        applied.retry = first(|p| p.retry.is_some());
    }
    applied.rate_limit = first(|p| p.rate_limit.is_some());
    applied
}

/// Phase 2: refuses the request if a policy says so (today: a local rate limit).
pub(crate) fn check(
    limiter: &RateLimiter,
    applied: &Applied,
    remote: SocketAddr,
    headers: &HeaderMap,
    now: Instant,
) -> Result<(), ProxyError> {
    let Some(policy) = &applied.rate_limit else {
        return Ok(());
    };
    let Some((_, limit)) = &policy.rate_limit else {
        return Ok(());
    };
    let mut ip = [0u8; 17];
    let key: &[u8] = match &limit.key {
        RateLimitKey::ClientIp => match remote.ip() {
            IpAddr::V4(a) => {
                ip[0] = 4;
                ip[1..5].copy_from_slice(&a.octets());
                &ip[..5]
            }
            IpAddr::V6(a) => {
                ip[0] = 6;
                ip[1..].copy_from_slice(&a.octets());
                &ip[..]
            }
        },
        RateLimitKey::Header(name) => headers.get(&**name).map_or(&b""[..], |v| v.as_bytes()),
        RateLimitKey::Target => b"",
    };
    match limiter.check(&policy.target, limit, key, now) {
        Decision::Allowed { .. } => Ok(()),
        Decision::Limited { retry_after } => Err(ProxyError::RateLimited {
            retry_after: retry_after.max(Duration::from_millis(1)),
            limit: limit.burst,
            policy: policy.rate_limit.as_ref().map(|(n, _)| n.clone()),
        }),
    }
}
