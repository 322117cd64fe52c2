//! External authorization (forward auth): request phase 2 asks an HTTP service whether
//! a request may pass (`weir_model::ExtAuth`).
//!
//! Phase 2 is synchronous, so a request whose answer is not known leaves it as
//! [`crate::policy::Refusal::ExtAuth`]: the request future calls the service ([`call`],
//! bounded by the policy's timeout), attaches the answer to the request ([`Decided`])
//! and takes it through the phases again, as a bcrypt check does. Answers are kept, when
//! the policy asks, per policy in a bounded cache keyed by a SHA-256 of the values of
//! the headers the policy sends (the credentials), so repeated requests with the same
//! credentials cost no call. Connections to the service are pooled
//! ([`crate::outbound`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty, Limited};
use prometheus_client::metrics::counter::Counter;
use weir_model::ExtAuth;

use crate::error::ProxyError;
use crate::outbound::{self, OutboundClient};

/// The most bytes of an answer's body read (to reuse the connection); a longer body
/// closes it.
const MAX_ANSWER_BODY: usize = 64 * 1024;

/// What the service said about a request.
#[derive(Clone, Debug)]
pub(crate) enum Decision {
    /// 2xx: the request passes, with these headers set on it.
    Allow(Arc<[(HeaderName, HeaderValue)]>),
    /// Refused: answer the client with this status and these headers.
    Deny {
        status: StatusCode,
        headers: Arc<[(HeaderName, HeaderValue)]>,
    },
    /// The service failed (no answer in time, unreachable, a 5xx): the policy's
    /// `failOpen` / `statusOnError` decides. Never cached.
    Failed,
}

/// An answer attached to a request for its next pass through the phases.
#[derive(Clone, Debug)]
pub(crate) struct Decided {
    pub(crate) key: [u8; 32],
    pub(crate) decision: Decision,
}

/// A call to make before the request can go on.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) key: [u8; 32],
    pub(crate) auth: Arc<ExtAuth>,
}

/// Counters of external authorization (unlabelled per policy: bounded cardinality).
#[derive(Clone, Default)]
pub(crate) struct ExtAuthMetrics {
    /// Calls answered 2xx.
    pub(crate) allowed: Counter,
    /// Calls answered with a refusal.
    pub(crate) denied: Counter,
    /// Calls that failed (timeout, connection error, 5xx).
    pub(crate) errors: Counter,
    /// Requests decided from the cache.
    pub(crate) cache_hits: Counter,
}

/// The most clients with their own CAs kept at once (distinct CA bundles in use).
const MAX_CA_CLIENTS: usize = 64;

/// One policy's remembered answers.
struct PolicyCache {
    /// The settings the answers were given under; other settings start afresh.
    auth: Arc<ExtAuth>,
    entries: HashMap<[u8; 32], (Instant, Decision)>,
}

/// The client to authorization services and the caches of their answers.
pub(crate) struct ExtAuthState {
    client: OutboundClient,
    connect_timeout: Duration,
    /// Clients trusting a policy's extra CAs besides the system's roots, by the CAs' PEM
    /// (built on first use; at most [`MAX_CA_CLIENTS`], then started afresh).
    ca_clients: Mutex<HashMap<Arc<str>, OutboundClient>>,
    /// By policy object (`namespace/name`).
    caches: RwLock<HashMap<Arc<str>, Arc<Mutex<PolicyCache>>>>,
    pub(crate) metrics: ExtAuthMetrics,
}

impl ExtAuthState {
    /// A client trusting the system's roots.
    pub(crate) fn new(connect_timeout: Duration, metrics: ExtAuthMetrics) -> ExtAuthState {
        let roots = outbound::roots(None).unwrap_or_else(|_| rustls::RootCertStore::empty());
        ExtAuthState {
            client: outbound::client(roots, connect_timeout, Duration::from_secs(60)),
            connect_timeout,
            ca_clients: Mutex::new(HashMap::new()),
            caches: RwLock::new(HashMap::new()),
            metrics,
        }
    }

    /// The client for `auth`: the shared one, or one that also trusts its `ca_pem`. An
    /// unusable CA bundle is an error (the request is refused like any failed call).
    fn client_for(&self, auth: &ExtAuth) -> Result<OutboundClient, crate::error::BoxError> {
        let Some(pem) = &auth.ca_pem else {
            return Ok(self.client.clone());
        };
        let mut clients = self.ca_clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(pem) {
            return Ok(c.clone());
        }
        let roots = outbound::roots(Some(pem.as_bytes()))?;
        let client = outbound::client(roots, self.connect_timeout, Duration::from_secs(60));
        if clients.len() >= MAX_CA_CLIENTS {
            clients.clear();
        }
        clients.insert(Arc::clone(pem), client.clone());
        Ok(client)
    }

    fn cache_of(&self, policy: &Arc<str>, auth: &Arc<ExtAuth>) -> Arc<Mutex<PolicyCache>> {
        if let Some(c) = self
            .caches
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(policy)
        {
            return Arc::clone(c);
        }
        let mut all = self.caches.write().unwrap_or_else(|p| p.into_inner());
        Arc::clone(all.entry(policy.clone()).or_insert_with(|| {
            Arc::new(Mutex::new(PolicyCache {
                auth: Arc::clone(auth),
                entries: HashMap::new(),
            }))
        }))
    }

    /// A remembered answer, still fresh, given under the same settings.
    fn cached(
        &self,
        policy: &Arc<str>,
        auth: &Arc<ExtAuth>,
        key: &[u8; 32],
        now: Instant,
    ) -> Option<Decision> {
        auth.cache?;
        let cache = self.cache_of(policy, auth);
        let mut c = cache.lock().unwrap_or_else(|p| p.into_inner());
        if !Arc::ptr_eq(&c.auth, auth) && *c.auth != **auth {
            c.auth = Arc::clone(auth);
            c.entries.clear();
            return None;
        }
        match c.entries.get(key) {
            Some((expires, d)) if *expires > now => Some(d.clone()),
            Some(_) => {
                c.entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Remembers an answer (not a failure) for the policy's `ttl`, within its
    /// `max_entries`: expired answers go first, then arbitrary ones.
    fn remember(&self, policy: &Arc<str>, auth: &Arc<ExtAuth>, key: [u8; 32], d: &Decision) {
        let Some(settings) = auth.cache else { return };
        if matches!(d, Decision::Failed) {
            return;
        }
        let cache = self.cache_of(policy, auth);
        let mut c = cache.lock().unwrap_or_else(|p| p.into_inner());
        if !Arc::ptr_eq(&c.auth, auth) && *c.auth != **auth {
            c.auth = Arc::clone(auth);
            c.entries.clear();
        }
        let now = Instant::now();
        let max = settings.max_entries as usize;
        if c.entries.len() >= max && !c.entries.contains_key(&key) {
            c.entries.retain(|_, (expires, _)| *expires > now);
            while c.entries.len() >= max {
                let Some(k) = c.entries.keys().next().copied() else {
                    break;
                };
                c.entries.remove(&k);
            }
        }
        c.entries.insert(key, (now + settings.ttl, d.clone()));
    }
}

/// The cache key of a request under a policy: the policy's name and the values of the
/// headers it sends, each length-prefixed.
fn cache_key(policy: &str, auth: &ExtAuth, headers: &HeaderMap) -> [u8; 32] {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    let mut part = |b: &[u8]| {
        ctx.update(&(b.len() as u64).to_le_bytes());
        ctx.update(b);
    };
    part(policy.as_bytes());
    for name in &auth.headers_to_send {
        for v in headers.get_all(&**name) {
            part(name.as_bytes());
            part(v.as_bytes());
        }
    }
    let d = ctx.finish();
    let mut out = [0; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Phase 2's part: applies the answer attached to the request or remembered, or asks
/// for a call (`Err(Ok(Pending))`). An allowed request gets the answer's headers (those
/// the client sent under the same names removed first).
pub(crate) fn check(
    state: &ExtAuthState,
    policy: &Arc<str>,
    auth: &Arc<ExtAuth>,
    headers: &mut HeaderMap,
    decided: Option<&Decided>,
    now: Instant,
) -> Result<(), Result<Pending, ProxyError>> {
    let key = cache_key(policy, auth, headers);
    let decision = match decided.filter(|d| d.key == key) {
        Some(d) => d.decision.clone(),
        None => match state.cached(policy, auth, &key, now) {
            Some(d) => {
                state.metrics.cache_hits.inc();
                d
            }
            None => {
                return Err(Ok(Pending {
                    key,
                    auth: Arc::clone(auth),
                }));
            }
        },
    };
    match decision {
        Decision::Allow(copied) => {
            for name in &auth.response_headers {
                headers.remove(&**name);
            }
            for (name, value) in copied.iter() {
                headers.append(name.clone(), value.clone());
            }
            Ok(())
        }
        Decision::Deny { status, headers } => Err(Err(ProxyError::ExtAuthDenied {
            policy: policy.clone(),
            status,
            headers,
        })),
        Decision::Failed if auth.fail_open => Ok(()),
        Decision::Failed => Err(Err(ProxyError::ExtAuthFailed {
            policy: policy.clone(),
            status: StatusCode::from_u16(auth.status_on_error)
                .unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
        })),
    }
}

/// What the service is told about the request.
pub(crate) struct Described {
    pub(crate) method: Method,
    /// Path and query as received (normalized).
    pub(crate) uri: String,
    pub(crate) host: String,
    pub(crate) https: bool,
    pub(crate) client: IpAddr,
    /// The request's headers named by the policy.
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
}

impl Described {
    /// Takes what the policy sends from a request head.
    pub(crate) fn of(
        auth: &ExtAuth,
        parts: (&Method, &http::Uri, &HeaderMap),
        host: &str,
        https: bool,
        client: IpAddr,
    ) -> Described {
        let (method, uri, headers) = parts;
        let mut sent = Vec::new();
        for name in &auth.headers_to_send {
            if let Ok(n) = HeaderName::from_bytes(name.as_bytes()) {
                for v in headers.get_all(&n) {
                    sent.push((n.clone(), v.clone()));
                }
            }
        }
        Described {
            method: method.clone(),
            uri: uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
            host: host.to_owned(),
            https,
            client,
            headers: sent,
        }
    }

    /// The URL the client asked for.
    fn original_url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{}", self.host, self.uri)
    }
}

/// Calls the service for `job` (bounded by its timeout), remembers the answer and
/// returns it for the request's next pass.
pub(crate) async fn call(
    state: Arc<ExtAuthState>,
    policy: Arc<str>,
    job: Pending,
    req: Described,
) -> Decided {
    let auth = &job.auth;
    let decision = match tokio::time::timeout(auth.timeout, ask(&state, auth, &req)).await {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => {
            tracing::debug!(policy = &*policy, error = %e, "external authorization failed");
            Decision::Failed
        }
        Err(_) => {
            tracing::debug!(policy = &*policy, "external authorization timed out");
            Decision::Failed
        }
    };
    match &decision {
        Decision::Allow(_) => state.metrics.allowed.inc(),
        Decision::Deny { .. } => state.metrics.denied.inc(),
        Decision::Failed => state.metrics.errors.inc(),
    };
    state.remember(&policy, auth, job.key, &decision);
    Decided {
        key: job.key,
        decision,
    }
}

const X_ORIGINAL_URI: HeaderName = HeaderName::from_static("x-original-uri");
const X_ORIGINAL_URL: HeaderName = HeaderName::from_static("x-original-url");
const X_ORIGINAL_METHOD: HeaderName = HeaderName::from_static("x-original-method");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_URI: HeaderName = HeaderName::from_static("x-forwarded-uri");
const X_FORWARDED_METHOD: HeaderName = HeaderName::from_static("x-forwarded-method");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The request to the service: a `GET` of its URL describing the client's request in
/// the headers nginx's `auth_request` setups (`X-Original-*`) and Traefik's
/// `forwardAuth` (`X-Forwarded-*`) use, with the headers the policy sends.
fn auth_request(
    auth: &ExtAuth,
    req: &Described,
) -> Result<Request<Empty<Bytes>>, crate::error::BoxError> {
    let mut r = Request::new(Empty::new());
    *r.uri_mut() = auth.url.to_string().parse()?;
    let h = r.headers_mut();
    h.insert(header::HOST, HeaderValue::from_str(&auth.url.authority())?);
    for (name, value) in &req.headers {
        h.append(name.clone(), value.clone());
    }
    let text = |s: &str| HeaderValue::from_str(s).ok();
    let mut set = |n: HeaderName, v: Option<HeaderValue>| {
        if let Some(v) = v {
            h.insert(n, v);
        }
    };
    let proto = HeaderValue::from_static(if req.https { "https" } else { "http" });
    set(X_ORIGINAL_URI, text(&req.uri));
    set(X_ORIGINAL_URL, text(&req.original_url()));
    set(X_ORIGINAL_METHOD, text(req.method.as_str()));
    set(X_FORWARDED_HOST, text(&req.host));
    set(X_FORWARDED_URI, text(&req.uri));
    set(X_FORWARDED_METHOD, text(req.method.as_str()));
    set(X_FORWARDED_PROTO, Some(proto));
    set(X_FORWARDED_FOR, text(&req.client.to_string()));
    Ok(r)
}

/// Sends the request and reads the answer.
async fn ask(
    state: &ExtAuthState,
    auth: &ExtAuth,
    req: &Described,
) -> Result<Decision, crate::error::BoxError> {
    let resp = state
        .client_for(auth)?
        .request(auth_request(auth, req)?)
        .await?;
    let (parts, body) = resp.into_parts();
    // Read the (small) body so that the connection can be reused; a large one is left.
    let _ = Limited::new(body, MAX_ANSWER_BODY).collect().await;
    let status = parts.status;
    let pick = |names: &mut dyn Iterator<Item = &HeaderName>| -> Arc<[(HeaderName, HeaderValue)]> {
        let mut out = Vec::new();
        for name in names {
            for v in parts.headers.get_all(name) {
                out.push((name.clone(), v.clone()));
            }
        }
        out.into()
    };
    if status.is_success() {
        let names: Vec<HeaderName> = auth
            .response_headers
            .iter()
            .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
            .collect();
        return Ok(Decision::Allow(pick(&mut names.iter())));
    }
    if status.is_server_error() || status.is_informational() {
        return Err(format!("the service answered {status}").into());
    }
    if status == StatusCode::UNAUTHORIZED
        && let Some(signin) = &auth.signin_url
    {
        let sep = if signin.contains('?') { '&' } else { '?' };
        let location = format!("{signin}{sep}rd={}", percent_encode(&req.original_url()));
        let headers = match HeaderValue::from_str(&location) {
            Ok(v) => vec![(header::LOCATION, v)].into(),
            Err(_) => Arc::from([]),
        };
        return Ok(Decision::Deny {
            status: StatusCode::FOUND,
            headers,
        });
    }
    let copied = [
        header::WWW_AUTHENTICATE,
        header::LOCATION,
        header::SET_COOKIE,
    ];
    Ok(Decision::Deny {
        status,
        headers: pick(&mut copied.iter()),
    })
}

/// Percent-encodes everything but unreserved characters (RFC 3986 §2.3).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3 / 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_model::{ExtAuthCache, ExtAuthUrl};

    fn auth(cache: bool) -> Arc<ExtAuth> {
        Arc::new(ExtAuth {
            url: ExtAuthUrl::parse("http://127.0.0.1:1/auth").unwrap(),
            headers_to_send: vec!["authorization".into()],
            response_headers: vec!["x-user".into()],
            timeout: Duration::from_secs(1),
            cache: cache.then_some(ExtAuthCache {
                ttl: Duration::from_secs(60),
                max_entries: 2,
            }),
            fail_open: false,
            status_on_error: 503,
            signin_url: None,
            ca_pem: None,
        })
    }

    fn headers(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, token.parse().unwrap());
        h.insert("x-user", "forged".parse().unwrap());
        h
    }

    /// Unknown credentials ask for a call; the attached answer decides, its headers
    /// replace the client's; a remembered answer is reused for the same credentials
    /// only, and the cache keeps at most `max_entries`.
    #[tokio::test]
    async fn answers_are_applied_and_remembered() {
        let state = ExtAuthState::new(Duration::from_secs(1), ExtAuthMetrics::default());
        let policy: Arc<str> = "ns/ext".into();
        let a = auth(true);
        let now = Instant::now();
        let mut h = headers("Bearer a");
        let Err(Ok(job)) = check(&state, &policy, &a, &mut h, None, now) else {
            panic!("a call is needed");
        };
        let allow = Decision::Allow(
            vec![(HeaderName::from_static("x-user"), "alice".parse().unwrap())].into(),
        );
        state.remember(&policy, &a, job.key, &allow);
        let decided = Decided {
            key: job.key,
            decision: allow,
        };
        check(&state, &policy, &a, &mut h, Some(&decided), now).unwrap();
        assert_eq!(h["x-user"], "alice");
        // Remembered: no call for the same credentials.
        let mut again = headers("Bearer a");
        check(&state, &policy, &a, &mut again, None, now).unwrap();
        assert_eq!(state.metrics.cache_hits.get(), 1);
        // Other credentials need their own call; a denial is returned as sent.
        let mut other = headers("Bearer b");
        let Err(Ok(job)) = check(&state, &policy, &a, &mut other, None, now) else {
            panic!("other credentials need a call");
        };
        let deny = Decided {
            key: job.key,
            decision: Decision::Deny {
                status: StatusCode::FORBIDDEN,
                headers: Arc::from([]),
            },
        };
        assert!(matches!(
            check(&state, &policy, &a, &mut other, Some(&deny), now),
            Err(Err(ProxyError::ExtAuthDenied { status, .. })) if status == StatusCode::FORBIDDEN
        ));
        // A failure refuses with the policy's status.
        let failed = Decided {
            key: job.key,
            decision: Decision::Failed,
        };
        assert!(matches!(
            check(&state, &policy, &a, &mut other, Some(&failed), now),
            Err(Err(ProxyError::ExtAuthFailed { status, .. })) if status == StatusCode::SERVICE_UNAVAILABLE
        ));
        // Bounded: three credentials, two entries.
        for t in ["x", "y", "z"] {
            let k = cache_key(&policy, &a, &headers(t));
            state.remember(&policy, &a, k, &Decision::Allow(Arc::from([])));
        }
        let cache = state.cache_of(&policy, &a);
        assert!(cache.lock().unwrap().entries.len() <= 2);
        // Expired answers are not used.
        let later = now + Duration::from_secs(120);
        assert!(matches!(
            check(&state, &policy, &a, &mut headers("z"), None, later),
            Err(Ok(_))
        ));
    }

    #[test]
    fn signin_redirects_carry_the_original_url() {
        assert_eq!(
            percent_encode("https://a.example/p?q=1&r"),
            "https%3A%2F%2Fa.example%2Fp%3Fq%3D1%26r"
        );
    }
}
