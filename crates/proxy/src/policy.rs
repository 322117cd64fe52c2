//! The settings policies give one request, and request phase 2 ("check"): the policies
//! that may refuse it.
//!
//! Policies are snapshot resources keyed by their target ([`PolicyTarget`]); a request
//! derives the keys from what it already has: its rule's origin (rule, then route) and
//! its listener's Gateway. Each field comes from the most specific target that sets it;
//! a route's own `timeouts` and `retry` win over every policy. A snapshot without
//! policies costs one branch.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderMap;
use http::header;
use weir_model::{
    Action, ApiKeyAuth, AuthzAction, BasicAuth, HashOn, LoadBalancer, PasswordScheme, Policy,
    PolicyTarget, RateLimitKey, RequestLimits, Retry, RouteKind, RouteRule, Timeouts,
};

use crate::basic_auth::{self, Verified, VerifiedCache};

use crate::access_log::{Check, IdentityKind, RateLimitNote, Trail};
use crate::authz;
use crate::error::{Challenge, ProxyError};
use crate::ext_auth::{self, Decided, ExtAuthState};
use crate::global_ratelimit::{self, GlobalLimiter};
use crate::jwt;
use crate::ratelimit::{Decision, RateLimiter};
use crate::snapshot::{PolicyKind, SectionKeys, Snapshot};

/// What the policies (and the rule itself) set for one request.
#[derive(Clone, Debug, Default)]
pub(crate) struct Applied {
    /// Request and per-attempt timeouts, field by field.
    pub(crate) timeouts: Timeouts,
    /// The policy whose retry applies, when the rule has none of its own.
    retry: Option<Arc<Policy>>,
    /// The policy whose rate limit applies.
    rate_limit: Option<Arc<Policy>>,
    /// The policy whose API key check applies.
    api_key_auth: Option<Arc<Policy>>,
    /// The policy whose basic-auth check applies.
    basic_auth: Option<Arc<Policy>>,
    /// The policy whose client address rules apply.
    ip_rules: Option<Arc<Policy>>,
    /// The policy whose JWT check applies.
    jwt_auth: Option<Arc<Policy>>,
    /// The policy whose external authorization applies.
    ext_auth: Option<Arc<Policy>>,
    /// The policy whose load balancer applies (a rule's `sessionPersistence`).
    load_balancer: Option<Arc<Policy>>,
    /// The policy whose global rate limit applies.
    global_rate_limit: Option<Arc<Policy>>,
    /// The policy whose authorization rules apply.
    authorization: Option<Arc<Policy>>,
    /// The policy whose CORS settings apply (when the rule has no CORS filter).
    cors: Option<Arc<Policy>>,
    /// The policies whose request size limits apply, field by field.
    size_limits: SizeLimits,
    /// The policy whose concurrency limit applies.
    concurrency_limit: Option<Arc<Policy>>,
    /// The Gateway's policy when it carries a backend client certificate.
    client_certificate: Option<Arc<Policy>>,
    /// The policy whose access-log settings apply.
    access_log: Option<Arc<Policy>>,
    /// The policy whose trace settings apply.
    tracing: Option<Arc<Policy>>,
}

/// The policy that sets each request size limit: the most specific one that sets that
/// field (a route's `maxBodyBytes` and its Gateway's `maxHeaders` both apply).
#[derive(Clone, Debug, Default)]
struct SizeLimits {
    body: Option<Arc<Policy>>,
    headers: Option<Arc<Policy>>,
    header_bytes: Option<Arc<Policy>>,
}

impl SizeLimits {
    fn get<T>(p: &Option<Arc<Policy>>, field: fn(&RequestLimits) -> Option<T>) -> Option<T> {
        p.as_ref()?
            .request_limits
            .as_ref()
            .and_then(|(_, l)| field(l))
    }

    /// The limits in force, as one set.
    fn merged(&self) -> RequestLimits {
        RequestLimits {
            max_body_bytes: Self::get(&self.body, |l| l.max_body_bytes),
            max_headers: Self::get(&self.headers, |l| l.max_headers),
            max_header_bytes: Self::get(&self.header_bytes, |l| l.max_header_bytes),
        }
    }

    fn any(&self) -> bool {
        self.body.is_some() || self.headers.is_some() || self.header_bytes.is_some()
    }

    /// The policy object (`namespace/name`) to name for a size check's outcome: for a
    /// body refusal the one setting the body limit; for a head refusal the one setting the
    /// field count, else the head bytes (the error does not say which of the two it was);
    /// else the first that sets any (`None` only when none does: nothing was checked).
    fn policy_name(&self, outcome: &Result<(), ProxyError>) -> Option<&Arc<str>> {
        fn name(p: &Option<Arc<Policy>>) -> Option<&Arc<str>> {
            p.as_ref()?.request_limits.as_ref().map(|(name, _)| name)
        }
        match outcome {
            Err(ProxyError::RequestTooLarge { head: false }) => name(&self.body),
            Err(ProxyError::RequestTooLarge { head: true }) => {
                name(&self.headers).or_else(|| name(&self.header_bytes))
            }
            _ => name(&self.body)
                .or_else(|| name(&self.headers))
                .or_else(|| name(&self.header_bytes)),
        }
    }
}

/// What the attempts of a retried request need of its [`Applied`] settings, kept while
/// they run (`retry.rs`): a fifth of its size.
pub(crate) struct ForAttempts {
    pub(crate) timeouts: Timeouts,
    retry: Option<Arc<Policy>>,
    client_certificate: Option<Arc<Policy>>,
}

impl ForAttempts {
    /// The retry that applies to `rule` (see [`Applied::retry`]).
    pub(crate) fn retry<'a>(&'a self, rule: &'a RouteRule) -> Option<&'a Retry> {
        rule.retry
            .as_deref()
            .or_else(|| self.retry.as_ref().and_then(|p| p.retry.as_ref()))
    }

    /// See [`Applied::client_certificate`].
    pub(crate) fn client_certificate(&self) -> Option<&Arc<weir_model::Certificate>> {
        self.client_certificate
            .as_ref()?
            .client_certificate
            .as_ref()
    }
}

impl Applied {
    /// What the attempts of a retried request keep of these settings.
    pub(crate) fn for_attempts(&self) -> ForAttempts {
        ForAttempts {
            timeouts: self.timeouts.clone(),
            retry: self.retry.clone(),
            client_certificate: self.client_certificate.clone(),
        }
    }

    /// The rule's settings alone (no policy applies).
    pub(crate) fn of_rule(rule: &RouteRule) -> Applied {
        Applied {
            timeouts: (*rule.timeouts).clone(),
            retry: None,
            rate_limit: None,
            api_key_auth: None,
            basic_auth: None,
            ip_rules: None,
            jwt_auth: None,
            ext_auth: None,
            load_balancer: None,
            global_rate_limit: None,
            authorization: None,
            cors: None,
            size_limits: SizeLimits::default(),
            concurrency_limit: None,
            client_certificate: None,
            access_log: None,
            tracing: None,
        }
    }

    /// The access-log settings of the most specific policy that sets them.
    pub(crate) fn access_log(&self) -> Option<weir_model::AccessLogPolicy> {
        self.access_log
            .as_ref()?
            .access_log
            .as_ref()
            .map(|(_, l)| *l)
    }

    /// The trace settings of the most specific policy that sets them.
    pub(crate) fn tracing(&self) -> Option<weir_model::TracingPolicy> {
        self.tracing.as_ref()?.tracing.as_ref().map(|(_, t)| *t)
    }

    /// The certificate the request's Gateway presents to TLS backends that ask for one.
    pub(crate) fn client_certificate(&self) -> Option<&Arc<weir_model::Certificate>> {
        self.client_certificate
            .as_ref()?
            .client_certificate
            .as_ref()
    }

    /// The concurrency limit that applies: the policy object that set it and how many
    /// requests of one client may be in progress.
    pub(crate) fn concurrency_limit(&self) -> Option<(&Arc<str>, u32)> {
        let (name, l) = self
            .concurrency_limit
            .as_ref()?
            .concurrency_limit
            .as_ref()?;
        Some((name, l.per_client))
    }

    /// The most body bytes a policy allows this request (`None`: no such limit), for a
    /// body that did not declare its length ([`crate::body::RequestBody::capped`]).
    pub(crate) fn max_body(&self) -> Option<u64> {
        SizeLimits::get(&self.size_limits.body, |l| l.max_body_bytes)
    }

    /// A policy's CORS settings (the rule's own filter, when it has one, wins: see
    /// `server::phases`).
    pub(crate) fn cors(&self) -> Option<&Arc<weir_model::Cors>> {
        self.cors.as_ref()?.cors.as_ref().map(|(_, c)| c)
    }

    /// The policy object whose CORS settings [`Applied::cors`] gives.
    pub(crate) fn cors_policy(&self) -> Option<&Arc<str>> {
        self.cors.as_ref()?.cors.as_ref().map(|(name, _)| name)
    }

    /// Whether phase 2 reads the request's method and path (authorization rules), which
    /// the caller then lends it in [`Checkers::head`].
    pub(crate) fn reads_head(&self) -> bool {
        self.authorization.is_some()
    }

    /// What the rule's consistent hash reads (a route-level load balancer: Gateway API
    /// `sessionPersistence`), if it has one.
    pub(crate) fn hash_on(&self) -> Option<&HashOn> {
        match self.load_balancer.as_ref()?.load_balancer.as_ref()? {
            LoadBalancer::ConsistentHash(on) => Some(on),
            _ => None,
        }
    }

    /// The retry that applies: the rule's own, else a policy's.
    pub(crate) fn retry<'a>(&'a self, rule: &'a RouteRule) -> Option<&'a Retry> {
        rule.retry
            .as_deref()
            .or_else(|| self.retry.as_ref().and_then(|p| p.retry.as_ref()))
    }
}

/// The settings for a request of `rule` on a listener of `gateway`, served by the
/// Gateway listener `section` (when its socket carries sections and a policy targets a
/// listener: [`crate::snapshot::ListenerState::section`]).
///
/// Each field comes from the most specific target that sets it: rule, route, the
/// listener (a Gateway's by `sectionName`, or a ListenerSet's), its ListenerSet, then the
/// Gateway.
///
/// An Ingress rule that redirects (ingress-nginx's `ssl-redirect`, `force-ssl-redirect`,
/// `permanent-redirect`, `temporal-redirect`, `app-root`) is answered before any policy
/// check: nginx runs its rewrite phase, where those redirects are, before the phases of
/// `limit-rps`, the source ranges, `auth-url` and `auth-type`, so a plaintext request
/// to a TLS host with Basic auth is sent to https rather than asked for credentials.
/// Gateway API rules keep every check first.
pub(crate) fn resolve(
    snapshot: &Snapshot,
    gateway: &Arc<str>,
    section: Option<&SectionKeys>,
    rule: &RouteRule,
) -> Applied {
    if !snapshot.has_policies() || redirects_first(rule) {
        return Applied::of_rule(rule);
    }
    // Only the levels some policy targets are looked up: each lookup builds and hashes
    // its key.
    let kinds = snapshot.policy_kinds();
    let chain = [
        kinds
            .has(PolicyKind::Rule)
            .then(|| snapshot.policy(&PolicyTarget::Rule(rule.route.clone())))
            .flatten(),
        kinds
            .has(PolicyKind::Route)
            .then(|| snapshot.policy(&PolicyTarget::route_of(&rule.route)))
            .flatten(),
        section.and_then(|s| snapshot.policy(&s.listener)),
        section
            .and_then(|s| s.set.as_ref())
            .and_then(|t| snapshot.policy(t)),
        kinds
            .has(PolicyKind::Gateway)
            .then(|| snapshot.policy(&PolicyTarget::Gateway(gateway.clone())))
            .flatten(),
    ];
    // The policies found, most specific first, packed at the front: each field below
    // scans up to the first gap (usually one policy) instead of all five levels.
    let mut packed: [Option<&Arc<Policy>>; 5] = [None; 5];
    for (slot, p) in packed.iter_mut().zip(chain.iter().flatten()) {
        *slot = Some(*p);
    }
    let found = || packed.iter().map_while(|p| *p);
    let first = |has: fn(&Policy) -> bool| found().find(|p| has(p)).map(Arc::clone);
    let mut applied = Applied::of_rule(rule);
    let t = &mut applied.timeouts;
    if t.request.is_none() {
        t.request = found().find_map(|p| p.timeouts.request);
    }
    if t.backend_request.is_none() {
        t.backend_request = found().find_map(|p| p.timeouts.backend_request);
    }
    if t.backend_send.is_none() {
        t.backend_send = found().find_map(|p| p.timeouts.backend_send);
    }
    if rule.retry.is_none() {
        applied.retry = first(|p| p.retry.is_some());
    }
    applied.rate_limit = first(|p| p.rate_limit.is_some());
    applied.api_key_auth = first(|p| p.api_key_auth.is_some());
    applied.basic_auth = first(|p| p.basic_auth.is_some());
    applied.ip_rules = first(|p| p.ip_rules.is_some());
    applied.jwt_auth = first(|p| p.jwt_auth.is_some());
    applied.ext_auth = first(|p| p.ext_auth.is_some());
    applied.load_balancer = first(|p| p.load_balancer.is_some());
    applied.global_rate_limit = first(|p| p.global_rate_limit.is_some());
    applied.authorization = first(|p| p.authorization.is_some());
    applied.cors = first(|p| p.cors.is_some());
    let limits = |field: fn(&RequestLimits) -> bool| {
        found()
            .find(|p| p.request_limits.as_ref().is_some_and(|(_, l)| field(l)))
            .map(Arc::clone)
    };
    applied.size_limits = SizeLimits {
        body: limits(|l| l.max_body_bytes.is_some()),
        headers: limits(|l| l.max_headers.is_some()),
        header_bytes: limits(|l| l.max_header_bytes.is_some()),
    };
    applied.concurrency_limit = first(|p| p.concurrency_limit.is_some());
    applied.access_log = first(|p| p.access_log.is_some());
    applied.tracing = first(|p| p.tracing.is_some());
    // A Gateway's own setting: no route or rule policy carries it.
    applied.client_certificate = chain[4]
        .filter(|p| p.client_certificate.is_some())
        .map(Arc::clone);
    applied
}

/// Whether `rule` answers its redirect before the policies (see [`resolve`]).
fn redirects_first(rule: &RouteRule) -> bool {
    rule.route.kind == RouteKind::Ingress && matches!(rule.action, Action::Redirect(_))
}

/// Why phase 2 stopped a request.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Refused: answer with this error.
    Refused(ProxyError),
    /// Basic credentials to check off the worker threads; the request then goes through
    /// the phases again with the result attached.
    Verify(basic_auth::Pending),
    /// An external authorization service to ask (policy object `namespace/name`); the
    /// request then goes through the phases again with the answer attached.
    ExtAuth(Arc<str>, ext_auth::Pending),
    /// A remote JWK Set not fetched yet: wait for its first fetch (bounded by its
    /// timeout), then go through the phases again.
    WaitJwks(Arc<crate::jwks::Remote>),
}

impl From<ProxyError> for Refusal {
    fn from(e: ProxyError) -> Refusal {
        Refusal::Refused(e)
    }
}

/// What phase 2 reads and keeps besides the request: rate-limit buckets, past
/// basic-auth results, external authorization's client and cache, and the answer of an
/// authorization service attached to this request.
pub(crate) struct Checkers<'a> {
    pub(crate) limiter: &'a RateLimiter,
    pub(crate) global: &'a GlobalLimiter,
    pub(crate) verified: &'a VerifiedCache,
    pub(crate) ext_auth: &'a ExtAuthState,
    pub(crate) decided: Option<&'a Decided>,
    pub(crate) jwks: &'a Arc<crate::jwks::JwksRegistry>,
    /// This request already waited for a remote JWK Set's first fetch.
    pub(crate) jwks_waited: bool,
    /// The request's method and normalized path, when [`Applied::reads_head`].
    pub(crate) head: Option<(&'a http::Method, &'a str)>,
}

/// Phase 2: refuses the request if a policy says so: the client's address first, then
/// request size limits (the head, a declared body length), then authentication (Basic credentials, then external authorization, then an API key,
/// then a bearer JWT), then authorization rules (which read the verified JWT's claims
/// and the headers authentication left), then a local rate limit, then a global one (so
/// a request the local limit refuses is not counted globally). External authorization comes before the
/// checks that remove the credentials they read, since the request may come through
/// here again once the service answered. `verified` is the result of
/// a basic-auth check done off the worker threads for this request.
pub(crate) fn check(
    checkers: &Checkers<'_>,
    applied: &Applied,
    client: IpAddr,
    headers: &mut HeaderMap,
    verified: Option<Verified>,
    now: Instant,
    mut trail: Option<&mut Trail>,
) -> Result<(), Refusal> {
    if let Some(p) = &applied.ip_rules
        && let Some((name, rules)) = &p.ip_rules
    {
        let r = if rules.admits(client) {
            Ok(())
        } else {
            Err(Refusal::Refused(ProxyError::Forbidden {
                policy: name.clone(),
            }))
        };
        noted(&mut trail, Check::IpRules, name, r)?;
    }
    if applied.size_limits.any() {
        let r = check_size(&applied.size_limits.merged(), headers);
        match applied.size_limits.policy_name(&r) {
            Some(name) => {
                noted(
                    &mut trail,
                    Check::RequestLimits,
                    name,
                    r.map_err(Refusal::Refused),
                )?;
            }
            None => r?,
        }
    }
    if let Some(p) = &applied.basic_auth
        && let Some((name, auth)) = &p.basic_auth
    {
        let r = check_basic(name, auth, checkers.verified, headers, verified);
        let user = noted(&mut trail, Check::BasicAuth, name, r)?;
        if let Some(t) = trail.as_deref_mut() {
            t.identity = Some((IdentityKind::Basic, user.into()));
        }
    }
    if let Some(p) = &applied.ext_auth
        && let Some((name, auth)) = &p.ext_auth
    {
        let r = ext_auth::check(
            checkers.ext_auth,
            name,
            auth,
            headers,
            checkers.decided,
            now,
        )
        .map_err(|e| match e {
            Ok(pending) => Refusal::ExtAuth(name.clone(), pending),
            Err(e) => Refusal::Refused(e),
        });
        noted(&mut trail, Check::ExtAuth, name, r)?;
    }
    let limiter = checkers.limiter;
    if let Some(p) = &applied.api_key_auth
        && let Some((name, auth)) = &p.api_key_auth
    {
        let r = check_api_key(name, auth, headers).map_err(Refusal::Refused);
        let who = noted(&mut trail, Check::ApiKey, name, r)?;
        if let Some(t) = trail.as_deref_mut() {
            t.identity = Some((IdentityKind::ApiKey, Box::from(&**who)));
        }
    }
    let mut claims = None;
    if let Some(p) = &applied.jwt_auth
        && let Some((name, auth)) = &p.jwt_auth
    {
        let r = jwt::check(name, auth, headers, checkers.jwks, checkers.jwks_waited);
        let token = noted(&mut trail, Check::Jwt, name, r)?;
        if let Some(t) = trail.as_deref_mut()
            && let Some(sub) = token.get("sub").and_then(|s| s.as_str())
        {
            t.identity = Some((IdentityKind::Jwt, sub.into()));
        }
        claims = Some(token);
    }
    if let Some(p) = &applied.authorization
        && let Some((name, rules)) = &p.authorization
    {
        let forbidden = || {
            Refusal::Refused(ProxyError::Forbidden {
                policy: name.clone(),
            })
        };
        // Without the head (a caller that did not lend it) nothing can be allowed.
        let r = match checkers.head {
            None => Err(forbidden()),
            Some((method, path)) => {
                let head = authz::Head {
                    method,
                    path,
                    client,
                };
                match authz::decide(rules, head, headers, claims.as_deref()) {
                    AuthzAction::Deny => Err(forbidden()),
                    AuthzAction::Allow => Ok(()),
                }
            }
        };
        noted(&mut trail, Check::Authorization, name, r)?;
    }
    if let Some(policy) = &applied.rate_limit
        && let Some((name, limit)) = &policy.rate_limit
    {
        let mut buf = [0u8; 17];
        let key = limit_key(&limit.key, client, headers, &mut buf);
        let decision = limiter.check(&policy.target, limit, key, now);
        if let Some(t) = trail.as_deref_mut() {
            let remaining = match decision {
                Decision::Allowed { remaining } => remaining,
                Decision::Limited { .. } => 0,
            };
            t.rate_limit = Some(RateLimitNote {
                policy: name.clone(),
                key: key_text(&limit.key, client, key),
                remaining: Some(remaining),
            });
        }
        let r = match decision {
            Decision::Allowed { .. } => Ok(()),
            Decision::Limited { retry_after } => Err(Refusal::Refused(ProxyError::RateLimited {
                retry_after: retry_after.max(Duration::from_millis(1)),
                limit: limit.burst,
                policy: Some(name.clone()),
            })),
        };
        noted(&mut trail, Check::RateLimit, name, r)?;
    }
    if let Some(policy) = &applied.global_rate_limit
        && let Some((name, limit)) = &policy.global_rate_limit
    {
        let mut buf = [0u8; 17];
        let key = limit_key(&limit.key, client, headers, &mut buf);
        if let Some(t) = trail.as_deref_mut()
            && t.rate_limit.is_none()
        {
            t.rate_limit = Some(RateLimitNote {
                policy: name.clone(),
                key: key_text(&limit.key, client, key),
                remaining: None,
            });
        }
        let r = match checkers.global.check(&policy.target, name, limit, key) {
            global_ratelimit::Decision::Allowed => Ok(()),
            global_ratelimit::Decision::Limited { retry_after } => {
                Err(Refusal::Refused(ProxyError::RateLimited {
                    retry_after: retry_after.max(Duration::from_millis(1)),
                    limit: limit.requests,
                    policy: Some(name.clone()),
                }))
            }
            global_ratelimit::Decision::Unavailable => {
                Err(Refusal::Refused(ProxyError::RateLimitUnavailable {
                    policy: name.clone(),
                }))
            }
        };
        noted(&mut trail, Check::GlobalRateLimit, name, r)?;
    }
    Ok(())
}

/// Notes a check's outcome in the request's trail, when it is logged: passed, or
/// refused and why. A check that must wait (credentials checked off the worker threads,
/// an authorization service, a JWK Set) notes nothing: the request comes through again.
fn noted<T>(
    trail: &mut Option<&mut Trail>,
    check: Check,
    policy: &Arc<str>,
    r: Result<T, Refusal>,
) -> Result<T, Refusal> {
    if let Some(t) = trail.as_deref_mut() {
        match &r {
            Ok(_) => t.pass(check, policy),
            Err(Refusal::Refused(e)) => t.deny(check, Some(policy), e),
            Err(_) => {}
        }
    }
    r
}

/// A rate-limit key as the access log shows it: the client address, the header's value
/// (at most 128 bytes, lossy), or nothing for the whole target.
fn key_text(key: &RateLimitKey, client: IpAddr, bytes: &[u8]) -> Box<str> {
    match key {
        RateLimitKey::ClientIp => client.to_string().into(),
        RateLimitKey::Header(_) => String::from_utf8_lossy(&bytes[..bytes.len().min(128)]).into(),
        RateLimitKey::Target => "".into(),
    }
}

/// Request size limits on what is known in phase 2: the head's fields, and the body's
/// declared length (a body without one is capped as it streams: `Applied::max_body`).
fn check_size(limits: &RequestLimits, headers: &HeaderMap) -> Result<(), ProxyError> {
    if limits.max_headers.is_some() || limits.max_header_bytes.is_some() {
        let bytes = headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 32)
            .sum();
        if !limits.head_fits(headers.len(), bytes) {
            return Err(ProxyError::RequestTooLarge { head: true });
        }
    }
    if limits.max_body_bytes.is_some()
        && let Some(declared) = headers.get(header::CONTENT_LENGTH)
    {
        // A length that is not a number was refused by hyper already; be safe anyway.
        let declared = declared
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(u64::MAX);
        if !limits.body_fits(declared) {
            return Err(ProxyError::RequestTooLarge { head: false });
        }
    }
    Ok(())
}

/// The bytes a rate limit counts a request by (`buf` holds an address).
fn limit_key<'a>(
    key: &RateLimitKey,
    client: IpAddr,
    headers: &'a HeaderMap,
    buf: &'a mut [u8; 17],
) -> &'a [u8] {
    match key {
        RateLimitKey::ClientIp => match client {
            IpAddr::V4(a) => {
                buf[0] = 4;
                buf[1..5].copy_from_slice(&a.octets());
                &buf[..5]
            }
            IpAddr::V6(a) => {
                buf[0] = 6;
                buf[1..].copy_from_slice(&a.octets());
                &buf[..]
            }
        },
        RateLimitKey::Header(name) => headers.get(&**name).map_or(&b""[..], |v| v.as_bytes()),
        RateLimitKey::Target => b"",
    }
}

/// A basic-auth check: exactly one `Authorization: Basic` header, whose user is listed
/// and whose password matches the user's hash — from the result attached to the request,
/// the cache, a fast check in place, or (bcrypt) a check off the worker threads.
fn check_basic(
    policy: &Arc<str>,
    auth: &BasicAuth,
    cache: &VerifiedCache,
    headers: &HeaderMap,
    verified: Option<Verified>,
) -> Result<String, Refusal> {
    let refused = || {
        Refusal::Refused(ProxyError::Unauthenticated {
            policy: policy.clone(),
            challenge: Challenge::Basic(auth.realm.clone()),
        })
    };
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(refused());
    };
    let Some((user, password)) = basic_auth::credentials(value) else {
        return Err(refused());
    };
    // An unknown user is checked like a known one (against the first user's hash) and
    // then refused, so that the answer's timing does not tell which users exist.
    let (hash, listed) = match auth.hash_of(&user) {
        Some(h) => (h, true),
        None => match auth.users.first() {
            Some((_, h)) => (h, false),
            None => return Err(refused()),
        },
    };
    let key = basic_auth::cache_key(policy, &user, &password, hash);
    let known = verified
        .filter(|v| v.key == key)
        .map(|v| v.ok)
        .or_else(|| cache.get(&key));
    let ok = match known {
        Some(ok) => ok,
        None if PasswordScheme::of(hash).is_some_and(basic_auth::is_slow) => {
            return Err(Refusal::Verify(basic_auth::Pending {
                key,
                hash: hash.clone(),
                password,
            }));
        }
        None => {
            let ok = basic_auth::verify(hash, &password);
            cache.put(key, ok);
            ok
        }
    };
    if ok && listed {
        Ok(user)
    } else {
        Err(refused())
    }
}

/// An API key check: exactly one key header, whose digest is a configured key's. The
/// header is removed unless the policy forwards it.
fn check_api_key<'a>(
    policy: &Arc<str>,
    auth: &'a ApiKeyAuth,
    headers: &mut HeaderMap,
) -> Result<&'a Arc<str>, ProxyError> {
    let refused = || ProxyError::Unauthenticated {
        policy: policy.clone(),
        challenge: Challenge::None,
    };
    let mut values = headers.get_all(&*auth.header).iter();
    let (Some(key), None) = (values.next(), values.next()) else {
        return Err(refused());
    };
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key.as_bytes());
    let digest: &[u8; 32] = digest.as_ref().try_into().map_err(|_| refused())?;
    let Some(client) = auth.client(digest) else {
        return Err(refused());
    };
    if !auth.forward_key {
        headers.remove(&*auth.header);
    }
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Phase 2 without an access-log trail.
    fn check(
        checkers: &Checkers<'_>,
        applied: &Applied,
        client: IpAddr,
        headers: &mut HeaderMap,
        verified: Option<Verified>,
        now: Instant,
    ) -> Result<(), Refusal> {
        super::check(checkers, applied, client, headers, verified, now, None)
    }
    use weir_model::{
        Action, Delta, DeltaBatch, IpNet, IpRules, LocalRateLimit, PathMatch, RequestMatch,
        Resource, RouteKind, RouteRef,
    };

    /// What `check` reads beside the policies: empty caches, no Redis.
    struct CheckState {
        limiter: RateLimiter,
        verified: VerifiedCache,
        global: GlobalLimiter,
        ext_auth: ExtAuthState,
        jwks: Arc<crate::jwks::JwksRegistry>,
    }

    impl CheckState {
        fn new() -> CheckState {
            CheckState {
                limiter: RateLimiter::new(Default::default()),
                verified: VerifiedCache::default(),
                global: GlobalLimiter::new(false, Default::default()),
                ext_auth: ExtAuthState::new(Duration::from_secs(1), Default::default()),
                jwks: Arc::new(crate::jwks::JwksRegistry::new(Default::default())),
            }
        }

        fn checkers(&self) -> Checkers<'_> {
            Checkers {
                limiter: &self.limiter,
                verified: &self.verified,
                ext_auth: &self.ext_auth,
                decided: None,
                jwks: &self.jwks,
                jwks_waited: false,
                global: &self.global,
                head: None,
            }
        }
    }

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
            ..Retry::default()
        }
    }

    fn secs(request: Option<u64>, backend: Option<u64>) -> Timeouts {
        Timeouts {
            request: request.map(Duration::from_secs),
            backend_request: backend.map(Duration::from_secs),
            backend_send: None,
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
        let a = resolve(&s, &gw, None, &r);
        assert_eq!(a.timeouts, secs(Some(20), Some(1)));
        assert_eq!(a.retry(&r).map(|r| r.attempts), Some(2));
        let rl = a.rate_limit.as_ref().and_then(|p| p.rate_limit.as_ref());
        assert_eq!(rl.map(|(_, l)| l.requests), Some(7));

        // The rule's own retry and timeouts win.
        let own = rule(Some(retry(9)), secs(Some(3), None));
        let a = resolve(&s, &gw, None, &own);
        assert_eq!(a.retry(&own).map(|r| r.attempts), Some(9));
        assert_eq!(a.timeouts, secs(Some(3), Some(1)));

        // Another Gateway's listener sees none of the Gateway's settings.
        let a = resolve(&s, &"ns/other".into(), None, &r);
        assert_eq!(a.timeouts, secs(Some(20), Some(1)));
        assert!(a.rate_limit.is_none());

        // No policies: the rule alone.
        let a = resolve(&Snapshot::empty(), &gw, None, &own);
        assert_eq!(a.timeouts, *own.timeouts);
        assert!(a.retry.is_none() && a.rate_limit.is_none());
    }

    /// The listener levels sit between the route and the Gateway: rule > route >
    /// listener > ListenerSet > Gateway, per field; a request on another listener (no
    /// section, or another one) sees none of them.
    #[test]
    fn listener_levels_sit_between_route_and_gateway() {
        use weir_model::{HostMatch, Listener, ListenerKey, ListenerSection, Protocol};
        let r = rule(None, secs(None, None));
        let gw: Arc<str> = "ns/gw".into();
        let listener = PolicyTarget::Listener {
            gateway: gw.clone(),
            set: Some("ns/set".into()),
            section: "a".into(),
        };
        let set = PolicyTarget::ListenerSet {
            gateway: gw.clone(),
            set: "ns/set".into(),
        };
        let mut s = snapshot(vec![
            Policy::new(
                PolicyTarget::route_of(&r.route),
                secs(Some(1), None),
                None,
                None,
            ),
            Policy::new(listener.clone(), secs(Some(2), Some(2)), None, None),
            Policy::new(set.clone(), secs(Some(3), Some(3)), Some(retry(3)), None),
            Policy::new(
                PolicyTarget::Gateway(gw.clone()),
                secs(Some(4), Some(4)),
                Some(retry(4)),
                Some(limit(4)),
            ),
        ]);
        assert!(s.has_listener_policies());
        // The socket: the set's listener `a` on a.example.com, the Gateway's own `b` on
        // every other host.
        let l = Listener::new(
            ListenerKey::new("127.0.0.1:80".parse().unwrap()),
            Protocol::Http,
            gw.clone(),
            "b".into(),
        )
        .with_sections(Arc::from([
            ListenerSection {
                hostname: HostMatch::exact("a.example.com".into()),
                set: Some("ns/set".into()),
                name: "a".into(),
            },
            ListenerSection {
                hostname: HostMatch::ANY,
                set: None,
                name: "b".into(),
            },
        ]));
        let batch = DeltaBatch {
            deltas: vec![Delta::Upsert(Resource::Listener(Arc::new(l.clone())))],
        };
        s = s.apply(&batch).0;
        let state = s.listener(&l.key).unwrap();
        let a_section = state.section("a.example.com").unwrap();
        assert_eq!(a_section.listener, listener);
        assert_eq!(a_section.set.as_ref(), Some(&set));
        let a = resolve(&s, &gw, Some(a_section), &r);
        assert_eq!(a.timeouts, secs(Some(1), Some(2)));
        assert_eq!(a.retry(&r).map(|r| r.attempts), Some(3));
        let rl = a.rate_limit.as_ref().and_then(|p| p.rate_limit.as_ref());
        assert_eq!(rl.map(|(_, l)| l.requests), Some(4));

        // Listener `b` (the Gateway's own, no policy of its own): the Gateway's.
        let b_section = state.section("other.example.com").unwrap();
        assert!(b_section.set.is_none());
        let a = resolve(&s, &gw, Some(b_section), &r);
        assert_eq!(a.timeouts, secs(Some(1), Some(4)));
        assert_eq!(a.retry(&r).map(|r| r.attempts), Some(4));

        // Removing the listener policies turns the lookups off.
        let batch = DeltaBatch {
            deltas: vec![
                Delta::Remove(weir_model::ResourceKey::policy(listener)),
                Delta::Remove(weir_model::ResourceKey::policy(set)),
            ],
        };
        s = s.apply(&batch).0;
        assert!(!s.has_listener_policies());
    }

    /// Access-log and trace settings: the rule's policy over the route's over the
    /// Gateway's, each field on its own.
    #[test]
    fn log_and_trace_settings_come_from_the_most_specific_policy() {
        use weir_model::{AccessLogPolicy, TracingPolicy};
        let r = rule(None, secs(None, None));
        let gw: Arc<str> = "ns/gw".into();
        let off = AccessLogPolicy {
            disabled: true,
            fields: None,
            errors_only: false,
        };
        let on = AccessLogPolicy {
            disabled: false,
            ..off
        };
        let never = TracingPolicy {
            disabled: false,
            sampling: Some(0),
        };
        let s = snapshot(vec![
            Policy::new(
                PolicyTarget::Gateway(gw.clone()),
                secs(None, None),
                None,
                None,
            )
            .with_access_log(Some(("ns/gw-wide".into(), off)))
            .with_tracing(Some(("ns/gw-wide".into(), never))),
            Policy::new(
                PolicyTarget::Rule(r.route.clone()),
                secs(None, None),
                None,
                None,
            )
            .with_access_log(Some(("ns/rule".into(), on))),
        ]);
        let a = resolve(&s, &gw, None, &r);
        assert_eq!(a.access_log(), Some(on), "the rule's policy wins");
        assert_eq!(
            a.tracing(),
            Some(never),
            "the Gateway's, where nothing nearer sets it"
        );
        let mut other = r.clone();
        other.route = RouteRef {
            rule: 2,
            ..r.route.clone()
        };
        let a = resolve(&s, &gw, None, &other);
        assert_eq!(a.access_log(), Some(off), "another rule: the Gateway's");
        let a = resolve(&s, &"ns/elsewhere".into(), None, &r);
        assert_eq!(a.tracing(), None);
    }

    /// Request size limits merge field by field like timeouts: a route's body limit and
    /// its Gateway's header limits both hold, and the route's own field wins where both
    /// set it.
    #[test]
    fn size_limits_merge_field_by_field() {
        let r = rule(None, secs(None, None));
        let gw: Arc<str> = "ns/gw".into();
        let limits = |body, headers, header_bytes| RequestLimits {
            max_body_bytes: body,
            max_headers: headers,
            max_header_bytes: header_bytes,
        };
        let s = snapshot(vec![
            Policy::new(
                PolicyTarget::route_of(&r.route),
                secs(None, None),
                None,
                None,
            )
            .with_request_limits(Some((
                "ns/route".into(),
                limits(Some(10), None, Some(4096)),
            ))),
            Policy::new(
                PolicyTarget::Gateway(gw.clone()),
                secs(None, None),
                None,
                None,
            )
            .with_request_limits(Some(("ns/gw".into(), limits(Some(99), Some(3), Some(1))))),
        ]);
        let a = resolve(&s, &gw, None, &r);
        assert_eq!(
            a.size_limits.merged(),
            limits(Some(10), Some(3), Some(4096))
        );
        assert_eq!(a.max_body(), Some(10));
        // A refusal names the policy whose field refused it.
        let named = |r: Result<(), ProxyError>| a.size_limits.policy_name(&r).map(|n| &**n);
        assert_eq!(
            named(Err(ProxyError::RequestTooLarge { head: false })),
            Some("ns/route")
        );
        assert_eq!(
            named(Err(ProxyError::RequestTooLarge { head: true })),
            Some("ns/gw")
        );
        assert_eq!(named(Ok(())), Some("ns/route"));
        let state = CheckState::new();
        let checkers = state.checkers();
        let headers = |n: usize, length: &str| {
            let mut h = HeaderMap::new();
            for i in 0..n {
                h.insert(
                    http::HeaderName::from_bytes(format!("x-{i}").as_bytes()).unwrap(),
                    http::HeaderValue::from_static("v"),
                );
            }
            h.insert(header::CONTENT_LENGTH, length.parse().unwrap());
            check(
                &checkers,
                &a,
                [192, 0, 2, 1].into(),
                &mut h,
                None,
                Instant::now(),
            )
        };
        assert!(headers(1, "10").is_ok());
        // The Gateway's header count (3 fields with content-length) holds on the route.
        assert!(matches!(
            headers(3, "10"),
            Err(Refusal::Refused(ProxyError::RequestTooLarge { head: true }))
        ));
        // The route's body limit wins over the Gateway's larger one.
        assert!(matches!(
            headers(1, "11"),
            Err(Refusal::Refused(ProxyError::RequestTooLarge {
                head: false
            }))
        ));
        // Another Gateway: only the route's limits.
        let a = resolve(&s, &"ns/other".into(), None, &r);
        assert_eq!(a.size_limits.merged(), limits(Some(10), None, Some(4096)));
    }

    /// A global limit comes from the most specific target like every field; it runs after
    /// the local limit (a request the local limit refuses is not counted globally); with
    /// Redis unreachable (here: none configured) its fail mode decides.
    #[test]
    fn a_global_limit_follows_the_local_one_and_its_fail_mode() {
        use weir_model::{FailMode, GlobalRateLimit};
        let r = rule(None, secs(None, None));
        let gw: Arc<str> = "ns/gw".into();
        let global = |fail_mode| {
            Some((
                Arc::from("ns/g"),
                GlobalRateLimit {
                    requests: 100,
                    window: Duration::from_secs(1),
                    key: RateLimitKey::ClientIp,
                    fail_mode,
                },
            ))
        };
        let s = snapshot(vec![
            Policy::new(
                PolicyTarget::route_of(&r.route),
                Timeouts::default(),
                None,
                None,
            )
            .with_global_rate_limit(global(FailMode::Closed)),
            Policy::new(
                PolicyTarget::Gateway(gw.clone()),
                Timeouts::default(),
                None,
                Some(limit(1)),
            )
            .with_global_rate_limit(global(FailMode::Open)),
        ]);
        let a = resolve(&s, &gw, None, &r);
        let state = CheckState::new();
        let checkers = state.checkers();
        let remote: IpAddr = "127.0.0.1".parse().unwrap();
        let now = Instant::now();
        let mut h = HeaderMap::new();
        // The route's fail-closed global limit, without Redis: 503.
        assert!(matches!(
            check(&checkers, &a, remote, &mut h, None, now),
            Err(Refusal::Refused(ProxyError::RateLimitUnavailable { ref policy })) if &**policy == "ns/g"
        ));
        // Then the Gateway's local limit (burst 1) refuses first: 429, not counted globally.
        assert!(matches!(
            check(&checkers, &a, remote, &mut h, None, now),
            Err(Refusal::Refused(ProxyError::RateLimited { .. }))
        ));
        assert_eq!(state.global.metrics.failed_closed.get(), 1);
        // On another Gateway the route's limit still applies (most specific target).
        let other = resolve(&s, &"ns/other".into(), None, &r);
        assert!(matches!(
            check(&checkers, &other, remote, &mut h, None, now),
            Err(Refusal::Refused(ProxyError::RateLimitUnavailable { .. }))
        ));
    }

    fn digest(key: &str) -> [u8; 32] {
        let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key.as_bytes());
        d.as_ref().try_into().unwrap()
    }

    /// An API key policy: one key header whose digest is configured passes (the header is
    /// removed unless forwarded); a wrong, missing or repeated key is refused (401); the
    /// check comes from the most specific target and runs before the rate limit.
    #[test]
    fn api_keys_are_checked_before_the_rate_limit() {
        let r = rule(None, secs(None, None));
        let gw: Arc<str> = "ns/gw".into();
        let auth = |forward| {
            Some((
                Arc::from("ns/keys"),
                Arc::new(ApiKeyAuth::new(
                    "x-key".into(),
                    vec![(digest("alice-key-1234"), "alice".into())],
                    forward,
                )),
            ))
        };
        let s = snapshot(vec![
            Policy::new(
                PolicyTarget::Rule(r.route.clone()),
                Timeouts::default(),
                None,
                None,
            )
            .with_api_key_auth(auth(false)),
            Policy::new(
                PolicyTarget::Gateway(gw.clone()),
                Timeouts::default(),
                None,
                Some(limit(1)),
            )
            .with_api_key_auth(auth(true)),
        ]);
        let a = resolve(&s, &gw, None, &r);
        let state = CheckState::new();
        let checkers = state.checkers();
        let remote: IpAddr = "127.0.0.1".parse().unwrap();
        let now = Instant::now();
        let headers = |keys: &[&str]| {
            let mut h = HeaderMap::new();
            for k in keys {
                h.append("x-key", k.parse().unwrap());
            }
            h
        };
        let refused = |h: &mut HeaderMap| {
            matches!(
                check(&checkers, &a, remote, h, None, now),
                Err(Refusal::Refused(ProxyError::Unauthenticated {
                    challenge: Challenge::None,
                    ..
                }))
            )
        };
        assert!(refused(&mut headers(&[])));
        assert!(refused(&mut headers(&["bob-key-5678"])));
        assert!(refused(&mut headers(&["alice-key-1234", "alice-key-1234"])));
        // Refused requests did not spend the rate limit's budget.
        let mut ok = headers(&["alice-key-1234"]);
        check(&checkers, &a, remote, &mut ok, None, now).unwrap();
        assert!(
            !ok.contains_key("x-key"),
            "the rule's policy removes the key"
        );
        assert!(matches!(
            check(
                &checkers,
                &a,
                remote,
                &mut headers(&["alice-key-1234"]),
                None,
                now
            ),
            Err(Refusal::Refused(ProxyError::RateLimited { .. }))
        ));

        // On another rule only the Gateway's policy applies: it forwards the key.
        let other = rule(None, secs(None, None));
        let mut other = other;
        other.route.rule = 2;
        let a = resolve(&s, &gw, None, &other);
        let mut h = headers(&["alice-key-1234"]);
        // A new rate limiter: the budget spent above does not count here.
        let fresh = CheckState::new();
        let checkers = fresh.checkers();
        check(&checkers, &a, remote, &mut h, None, now).unwrap();
        assert!(h.contains_key("x-key"));
    }

    /// Basic credentials: apr1 is checked in place and cached; bcrypt is handed off
    /// (`Verify`), and its result, attached to the request, decides the second pass.
    #[test]
    fn basic_credentials_are_checked_in_place_or_handed_off() {
        let r = rule(None, secs(None, None));
        let gw: Arc<str> = "ns/gw".into();
        let auth = BasicAuth::new(
            "shop".into(),
            vec![
                // `openssl passwd -apr1 -salt xyzabc secret`
                ("ann".into(), "$apr1$xyzabc$cTvtri5GYS9vQXkM4wcQi.".into()),
                // Python bcrypt, password "open-sesame"
                (
                    "bob".into(),
                    "$2b$05$cpMOa7iYBoWsHDKngyut7O7aOVPvgAOOZBOppjm/auBtNnWEWXjjS".into(),
                ),
            ],
        );
        let s = snapshot(vec![
            Policy::new(
                PolicyTarget::Gateway(gw.clone()),
                Timeouts::default(),
                None,
                None,
            )
            .with_basic_auth(Some(("ns/basic".into(), Arc::new(auth)))),
        ]);
        let a = resolve(&s, &gw, None, &r);
        let state = CheckState::new();
        let checkers = state.checkers();
        let remote: IpAddr = "127.0.0.1".parse().unwrap();
        let now = Instant::now();
        let basic = |user: &str, pw: &str| {
            use base64::Engine;
            let mut h = HeaderMap::new();
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pw}"));
            h.insert(
                header::AUTHORIZATION,
                format!("Basic {token}").parse().unwrap(),
            );
            h
        };
        let run = |h: &mut HeaderMap, v: Option<Verified>| check(&checkers, &a, remote, h, v, now);
        let challenged = |r: Result<(), Refusal>| matches!(r, Err(Refusal::Refused(ProxyError::Unauthenticated { challenge: Challenge::Basic(ref realm), .. })) if &**realm == "shop");
        assert!(challenged(run(&mut HeaderMap::new(), None)));
        assert!(challenged(run(&mut basic("ann", "wrong"), None)));
        // An unknown user costs a check like a known one (the first user's hash, apr1
        // here: in place) and is refused even with that user's password.
        assert!(challenged(run(&mut basic("nobody", "secret"), None)));
        let mut ok = basic("ann", "secret");
        run(&mut ok, None).unwrap();
        assert!(ok.contains_key(header::AUTHORIZATION), "forwarded as sent");
        // bcrypt: handed off, then decided by the attached result.
        let Err(Refusal::Verify(job)) = run(&mut basic("bob", "open-sesame"), None) else {
            panic!("bcrypt is checked off the worker");
        };
        let good = Verified {
            key: job.key,
            ok: basic_auth::verify(&job.hash, &job.password),
        };
        assert!(good.ok);
        run(&mut basic("bob", "open-sesame"), Some(good)).unwrap();
        let bad = Verified {
            key: job.key,
            ok: false,
        };
        assert!(challenged(run(&mut basic("bob", "open-sesame"), Some(bad))));
        // A result for other credentials does not count.
        assert!(matches!(
            run(&mut basic("bob", "open-sesame!"), Some(good)),
            Err(Refusal::Verify(_))
        ));
    }

    /// Authorization rules run before the rate limit: a denied request is 403 and spends
    /// no budget; without the request's head (not lent) nothing is allowed.
    #[test]
    fn authorization_runs_before_the_rate_limit() {
        use weir_model::{Authorization, AuthzAction, AuthzRule};
        let r = rule(None, secs(None, None));
        let gw: Arc<str> = "ns/gw".into();
        let rules = Authorization {
            rules: vec![AuthzRule {
                action: AuthzAction::Allow,
                methods: vec!["GET".into()],
                paths: Vec::new(),
                headers: Vec::new(),
                clients: Vec::new(),
                claims: Vec::new(),
            }],
            default: AuthzAction::Deny,
        };
        let s = snapshot(vec![
            Policy::new(
                PolicyTarget::Gateway(gw.clone()),
                Timeouts::default(),
                None,
                Some(limit(1)),
            )
            .with_authorization(Some(("ns/authz".into(), Arc::new(rules)))),
        ]);
        let a = resolve(&s, &gw, None, &r);
        assert!(a.reads_head());
        let state = CheckState::new();
        let remote: IpAddr = "127.0.0.1".parse().unwrap();
        let now = Instant::now();
        let (get, post) = (http::Method::GET, http::Method::POST);
        let run = |m: Option<&http::Method>| {
            let mut c = state.checkers();
            c.head = m.map(|m| (m, "/x"));
            check(&c, &a, remote, &mut HeaderMap::new(), None, now)
        };
        let forbidden = |r: Result<(), Refusal>| matches!(r, Err(Refusal::Refused(ProxyError::Forbidden { ref policy })) if &**policy == "ns/authz");
        assert!(forbidden(run(Some(&post))));
        assert!(forbidden(run(None)));
        run(Some(&get)).unwrap();
        assert!(matches!(
            run(Some(&get)),
            Err(Refusal::Refused(ProxyError::RateLimited { .. }))
        ));
        assert!(!resolve(&Snapshot::empty(), &gw, None, &r).reads_head());
    }

    /// Client address rules come first: a refused client gets 403 before any credential
    /// is looked at.
    #[test]
    fn address_rules_come_first() {
        let r = rule(None, secs(None, None));
        let gw: Arc<str> = "ns/gw".into();
        let rules = IpRules {
            allow: vec![IpNet::parse("10.0.0.0/8").unwrap()],
            deny: vec![IpNet::parse("10.9.0.0/16").unwrap()],
        };
        let s = snapshot(vec![
            Policy::new(
                PolicyTarget::Gateway(gw.clone()),
                Timeouts::default(),
                None,
                None,
            )
            .with_ip_rules(Some(("ns/ips".into(), Arc::new(rules))))
            .with_api_key_auth(Some((
                "ns/keys".into(),
                Arc::new(ApiKeyAuth::new("x-key".into(), vec![], false)),
            ))),
        ]);
        let a = resolve(&s, &gw, None, &r);
        let state = CheckState::new();
        let checkers = state.checkers();
        let now = Instant::now();
        let from = |ip: &str| {
            check(
                &checkers,
                &a,
                ip.parse().unwrap(),
                &mut HeaderMap::new(),
                None,
                now,
            )
        };
        assert!(matches!(
            from("10.9.1.1"),
            Err(Refusal::Refused(ProxyError::Forbidden { .. }))
        ));
        assert!(matches!(
            from("192.0.2.1"),
            Err(Refusal::Refused(ProxyError::Forbidden { .. }))
        ));
        // Admitted, then asked for a key.
        assert!(matches!(
            from("10.1.1.1"),
            Err(Refusal::Refused(ProxyError::Unauthenticated { .. }))
        ));
    }
}
