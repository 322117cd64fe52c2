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

#[cfg(test)]
mod tests {
    use super::*;
    use weir_model::{
        Action, Delta, DeltaBatch, LocalRateLimit, PathMatch, RequestMatch, Resource, RouteKind,
        RouteRef,
    };

    fn rule(retry: Option<Retry>, timeouts: Timeouts) -> RouteRule {
        RouteRule::new(
            RouteRef {
                kind: RouteKind::HttpRoute,
                namespace: "ns".into(),
                name: "r".into(),
                rule: 1,
            },
            RequestMatch {
                path: PathMatch::Prefix("/".into()),
                headers: vec![],
                query: vec![],
                method: None,
            },
            vec![],
            Action::Fail {
                status: 500,
                reason: "x".into(),
            },
            timeouts,
        )
        .with_retry(retry)
    }

    fn retry(attempts: u32) -> Retry {
        Retry {
            attempts,
            codes: vec![503],
            backoff: Duration::from_millis(1),
        }
    }

    fn secs(request: Option<u64>, backend: Option<u64>) -> Timeouts {
        Timeouts {
            request: request.map(Duration::from_secs),
            backend_request: backend.map(Duration::from_secs),
        }
    }

    fn limit(requests: u32) -> (Arc<str>, LocalRateLimit) {
        let l = LocalRateLimit {
            requests,
            per: Duration::from_secs(1),
            burst: requests,
            key: RateLimitKey::ClientIp,
        };
        ("ns/p".into(), l)
    }

    fn snapshot(policies: Vec<Policy>) -> Snapshot {
        let batch = DeltaBatch {
            deltas: policies
                .into_iter()
                .map(|p| Delta::Upsert(Resource::Policy(Arc::new(p))))
                .collect(),
        };
        let (s, rejected) = Snapshot::empty().apply(&batch);
        assert!(rejected.is_empty(), "{rejected:?}");
        s
    }

    /// Each field comes from the most specific target that sets it; the rule's own
    /// fields win over every policy.
    #[test]
    fn the_most_specific_setting_wins_per_field() {
        let r = rule(None, secs(None, None));
        let rule_target = PolicyTarget::Rule(r.route.clone());
        let route_target = PolicyTarget::route_of(&r.route);
        let gw: Arc<str> = "ns/gw".into();
        let s = snapshot(vec![
            Policy::new(rule_target, secs(None, Some(1)), None, None),
            Policy::new(route_target, secs(Some(20), Some(2)), Some(retry(2)), None),
            Policy::new(
                PolicyTarget::Gateway(gw.clone()),
                secs(Some(30), None),
                Some(retry(5)),
                Some(limit(7)),
            ),
        ]);
        let a = resolve(&s, &gw, &r);
        assert_eq!(a.timeouts, secs(Some(20), Some(1)));
        assert_eq!(a.retry(&r).map(|r| r.attempts), Some(2));
        let rl = a.rate_limit.as_ref().and_then(|p| p.rate_limit.as_ref());
        assert_eq!(rl.map(|(_, l)| l.requests), Some(7));

        // The rule's own retry and timeouts win.
        let own = rule(Some(retry(9)), secs(Some(3), None));
        let a = resolve(&s, &gw, &own);
        assert_eq!(a.retry(&own).map(|r| r.attempts), Some(9));
        assert_eq!(a.timeouts, secs(Some(3), Some(1)));

        // Another Gateway's listener sees none of the Gateway's settings.
        let a = resolve(&s, &"ns/other".into(), &r);
        assert_eq!(a.timeouts, secs(Some(20), Some(1)));
        assert!(a.rate_limit.is_none());

        // No policies: the rule alone.
        let a = resolve(&Snapshot::empty(), &gw, &own);
        assert_eq!(a.timeouts, own.timeouts);
        assert!(a.retry.is_none() && a.rate_limit.is_none());
    }
}
