use std::sync::Arc;
use std::time::Duration;

use serde::{Serialize, Serializer};

use crate::cluster::ClusterKey;
use crate::hash::{ContentHash, content_hash, eq_by_content_hash};
use crate::host::HostMatch;
use crate::listener::ListenerKey;

/// A compiled regular expression that must match the *whole* input.
/// Equality and hashing use the source pattern. One pointer (the expression is shared
/// by clones): a path match, and so every route rule, is 32 bytes smaller than with the
/// expression inline.
#[derive(Clone, Debug)]
pub struct Pattern(Arc<Compiled>);

#[derive(Debug)]
struct Compiled {
    source: Box<str>,
    regex: regex::Regex,
}

impl Pattern {
    /// Compiles `source`, anchored at both ends (Gateway API regex matches are full matches).
    pub fn new(source: &str) -> Result<Self, regex::Error> {
        let regex = regex::RegexBuilder::new(&format!("^(?:{source})$"))
            .size_limit(1 << 20)
            .build()?;
        Ok(Pattern(Arc::new(Compiled {
            source: source.into(),
            regex,
        })))
    }

    /// The pattern as written by the user.
    pub fn source(&self) -> &str {
        &self.0.source
    }

    /// Whether the whole of `input` matches.
    pub fn is_match(&self, input: &str) -> bool {
        self.0.regex.is_match(input)
    }

    /// `template` with `$1`…`$9` replaced by the groups of the expression matched
    /// against `input` (a group that took no part, or does not exist, gives nothing);
    /// `None` when `input` does not match. Only one digit follows `$`, as in nginx's
    /// `rewrite`: `$10` is group 1 followed by `0`; any other `$` is kept as it is.
    pub fn expand(&self, input: &str, template: &str) -> Option<String> {
        let caps = self.0.regex.captures(input)?;
        let mut out = String::with_capacity(template.len() + input.len());
        let mut rest = template;
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            match after.as_bytes().first() {
                Some(d @ b'1'..=b'9') => {
                    let group = usize::from(d - b'0');
                    out.push_str(caps.get(group).map_or("", |m| m.as_str()));
                    rest = &after[1..];
                }
                _ => {
                    out.push('$');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        Some(out)
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.source == other.0.source
    }
}
impl Eq for Pattern {}
impl std::hash::Hash for Pattern {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.source.hash(state)
    }
}
impl Serialize for Pattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.source())
    }
}

/// A path match. Prefixes match whole segments: `/foo` matches `/foo` and `/foo/bar`,
/// not `/foobar`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum PathMatch {
    /// The path equals this string.
    Exact(Arc<str>),
    /// Segment-wise prefix; stored without a trailing `/` (except the root `/`).
    Prefix(Arc<str>),
    /// The whole path matches this expression.
    Regex(Pattern),
}

impl PathMatch {
    /// Whether `path` (without the query string) matches.
    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathMatch::Exact(p) => **p == *path,
            PathMatch::Prefix(p) => {
                if &**p == "/" {
                    return true;
                }
                path.starts_with(&**p)
                    && (path.len() == p.len() || path.as_bytes()[p.len()] == b'/')
            }
            PathMatch::Regex(r) => r.is_match(path),
        }
    }
}

/// Matching a string value exactly or by a full-match regular expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum StringMatch {
    /// Equal bytes.
    Exact(Arc<str>),
    /// Full match of the expression.
    Regex(Pattern),
}

impl StringMatch {
    /// Whether `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        match self {
            StringMatch::Exact(v) => **v == *value,
            StringMatch::Regex(r) => r.is_match(value),
        }
    }
}

/// A request header that must be present with a matching value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct HeaderMatch {
    /// Lower-case header name.
    pub name: Arc<str>,
    /// Value condition.
    pub value: StringMatch,
}

/// A query parameter that must be present with a matching value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct QueryMatch {
    /// Parameter name (case-sensitive).
    pub name: Arc<str>,
    /// Value condition.
    pub value: StringMatch,
}

/// All conditions of one Gateway API `HTTPRouteMatch`; every one must hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct RequestMatch {
    /// Path condition (defaults to prefix `/`).
    pub path: PathMatch,
    /// Header conditions.
    pub headers: Vec<HeaderMatch>,
    /// Query parameter conditions.
    pub query: Vec<QueryMatch>,
    /// Upper-case method, if restricted.
    pub method: Option<Arc<str>>,
}

/// Header edits (Gateway API `HTTPHeaderFilter`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct HeaderModifier {
    /// Replace or add these headers (lower-case names).
    pub set: Vec<(Arc<str>, Arc<str>)>,
    /// Append these headers.
    pub add: Vec<(Arc<str>, Arc<str>)>,
    /// Remove these headers.
    pub remove: Vec<Arc<str>>,
}

/// How a path is rewritten by a redirect or URL rewrite.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum PathRewrite {
    /// Replace the whole path.
    Full(Arc<str>),
    /// Replace the part matched by the rule's [`PathMatch::Prefix`].
    PrefixMatch(Arc<str>),
    /// Replace the whole path with this template, in which `$1`…`$9` stand for the
    /// groups of the rule's [`PathMatch::Regex`] (see [`Pattern::expand`]); a rule without
    /// a regex match keeps its path (ingress-nginx's `rewrite-target` with captures; push
    /// protocol version 3).
    RegexCaptures(Arc<str>),
}

/// A filter applied to a request before it is forwarded, or to its response.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Filter {
    /// Edit request headers.
    RequestHeaders(HeaderModifier),
    /// Edit response headers.
    ResponseHeaders(HeaderModifier),
    /// Rewrite host and/or path before forwarding.
    UrlRewrite {
        /// New Host header.
        hostname: Option<Arc<str>>,
        /// New path.
        path: Option<PathRewrite>,
    },
    /// Send a copy of the request (as forwarded, after the other request filters) to
    /// another cluster and discard its response.
    Mirror {
        /// Where copies go.
        cluster: ClusterKey,
        /// Share of requests mirrored, in millionths (1_000_000 = every request).
        per_million: u32,
    },
    /// Answer CORS preflights from allowed origins; add the CORS headers to the
    /// responses of their actual requests.
    Cors(Arc<crate::Cors>),
    /// Replace some error responses by another cluster's answer (push protocol
    /// version 4; ingress-nginx's `custom-http-errors` and `default-backend`).
    InterceptErrors(Arc<InterceptErrors>),
}

/// Error responses replaced by the response of another cluster to the same request (as
/// nginx's `proxy_intercept_errors` with an `error_page` that proxies): the request goes
/// there as a `GET /` carrying what the error was in `X-Code`, `X-Format` (the request's
/// `Accept`), `X-Original-URI`, `X-Namespace`, `X-Ingress-Name`, `X-Service-Name` and
/// `X-Service-Port` (of the cluster that failed), and its response is relayed as it is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct InterceptErrors {
    /// The status codes replaced (sorted, each once): an upstream's response, or the
    /// gateway's own error response, of one of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub codes: Vec<u16>,
    /// A backend without an endpoint (or a backend that cannot be resolved, compiled to
    /// this cluster by the translator) is replaced whatever its code.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_endpoints: bool,
    /// Where the replacement comes from.
    pub cluster: ClusterKey,
}

impl InterceptErrors {
    /// Whether a response of status `code` is replaced.
    pub fn replaces(&self, code: u16) -> bool {
        self.codes.binary_search(&code).is_ok()
    }
}

/// A redirect response (Gateway API `HTTPRequestRedirectFilter`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Redirect {
    /// `http` or `https`; `None` keeps the request's.
    pub scheme: Option<Arc<str>>,
    /// New host; `None` keeps the request's.
    pub hostname: Option<Arc<str>>,
    /// New path; `None` keeps the request's.
    pub path: Option<PathRewrite>,
    /// New port; `None` derives it from the scheme per Gateway API.
    pub port: Option<u16>,
    /// 301 or 302 (or another 3xx).
    pub status: u16,
}

/// A response produced by the gateway itself (weir's `DirectResponse` extension).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct DirectResponse {
    /// Status code.
    pub status: u16,
    /// Response headers (lower-case names).
    pub headers: Vec<(Arc<str>, Arc<str>)>,
    /// Response body.
    pub body: Arc<str>,
}

/// One weighted destination of a forwarding rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct WeightedBackend {
    /// Target cluster. If the data plane has no such cluster it answers 500
    /// (Gateway API: requests to an invalid backend get a 500).
    pub cluster: ClusterKey,
    /// Relative weight; 0 means never chosen.
    pub weight: u32,
    /// Header filters for requests sent to this backend only (Gateway API `backendRefs[].filters`):
    /// only [`Filter::RequestHeaders`] and [`Filter::ResponseHeaders`], applied after the
    /// rule's filters.
    pub filters: Vec<Filter>,
}

/// What a rule does with a matched request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Action {
    /// Forward to one of the backends, chosen by weighted round-robin.
    Forward(Vec<WeightedBackend>),
    /// Answer with a redirect (boxed: rare, and inline it made every rule 32 bytes
    /// larger, its `Arc` a size class larger).
    Redirect(Box<Redirect>),
    /// Answer with a fixed response (boxed, as a redirect).
    DirectResponse(Box<DirectResponse>),
    /// Answer with an error status (e.g. 500 when every backendRef is invalid).
    Fail {
        /// Status code.
        status: u16,
        /// Short reason, sent as the body.
        reason: Arc<str>,
    },
}

/// Per-rule timeouts (Gateway API `HTTPRouteTimeouts`). `None` is unset (the listener's
/// upstream-response timeout applies when both are); `Some(ZERO)` is the Gateway API's
/// `0s`, which disables the timeout.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Timeouts {
    /// Whole request, from the gateway receiving it to the response headers.
    pub request: Option<Duration>,
    /// One attempt to a backend.
    pub backend_request: Option<Duration>,
    /// How long sending the request to a backend may make no progress: from handing the
    /// upstream connection a piece of the request body until it takes the next one
    /// (ingress-nginx's `proxy-send-timeout`, nginx's time "between two successive write
    /// operations"). A request whose body is all sent, and so an attempt that only waits
    /// for the response, is not bounded by it. Push protocol version 6.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_send: Option<Duration>,
}

/// Hashed as push protocol version 5 and earlier hash it (`request`, `backend_request`),
/// with `backend_send` folded in only when set: timeouts without it keep the hash older
/// releases compute (ARCHITECTURE.md, "Push protocol versions").
impl std::hash::Hash for Timeouts {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.request.hash(state);
        self.backend_request.hash(state);
        if let Some(send) = &self.backend_send {
            (3u32, send).hash(state);
        }
    }
}

/// A rule's [`Timeouts`], boxed when any is set: nearly every rule sets none, and inline
/// they were 48 of its 280 bytes (an Ingress rule's `Arc` then took a 320-byte block
/// where 256 now do; BENCHMARKS.md, "Session 30"). Reads as the timeouts (`Deref`);
/// hashes, compares and serializes as them.
#[derive(Clone, Default)]
pub struct RuleTimeouts(Option<Box<Timeouts>>);

impl RuleTimeouts {
    const NONE: Timeouts = Timeouts {
        request: None,
        backend_request: None,
        backend_send: None,
    };
}

impl From<Timeouts> for RuleTimeouts {
    fn from(t: Timeouts) -> Self {
        RuleTimeouts((t != RuleTimeouts::NONE).then(|| Box::new(t)))
    }
}

impl std::ops::Deref for RuleTimeouts {
    type Target = Timeouts;

    fn deref(&self) -> &Timeouts {
        self.0.as_deref().unwrap_or(&RuleTimeouts::NONE)
    }
}

impl std::hash::Hash for RuleTimeouts {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl PartialEq for RuleTimeouts {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for RuleTimeouts {}

impl std::fmt::Debug for RuleTimeouts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Serialize for RuleTimeouts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl Timeouts {
    /// The request timeout if it is set and not disabled.
    pub fn request_limit(&self) -> Option<Duration> {
        self.request.filter(|d| !d.is_zero())
    }

    /// The backend-request timeout if it is set and not disabled.
    pub fn backend_request_limit(&self) -> Option<Duration> {
        self.backend_request.filter(|d| !d.is_zero())
    }

    /// Whether the route sets either timeout (even to `0s`).
    pub fn is_set(&self) -> bool {
        self.request.is_some() || self.backend_request.is_some()
    }

    /// The backend-send timeout if it is set and not disabled.
    pub fn backend_send_limit(&self) -> Option<Duration> {
        self.backend_send.filter(|d| !d.is_zero())
    }
}

/// Retrying a request whose attempt failed (Gateway API `HTTPRouteRetry`, or a policy's
/// `retry`). An attempt fails when the endpoint cannot be reached, resets the connection,
/// does not answer within the backend-request timeout, or answers with one of `codes`.
/// A request body of at most `replay_body` bytes is kept and sent again; a longer one is
/// streamed to the first endpoint and not retried. A request of a method that is not
/// idempotent (POST, PATCH, …) is retried only when its attempt could not connect (it
/// never left weir), unless `non_idempotent` allows every retry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Retry {
    /// Retries after the first attempt (0: none).
    pub attempts: u32,
    /// Response statuses that are retried, ascending.
    pub codes: Vec<u16>,
    /// The least wait before a retry; it doubles with each retry (with jitter, capped at
    /// ten times this).
    pub backoff: Duration,
    /// The longest request body kept for retries, in bytes (0: requests with a body are
    /// not retried).
    #[serde(skip_serializing_if = "Retry::is_default_replay")]
    pub replay_body: u32,
    /// Whether requests of methods that are not idempotent are retried after they may
    /// have reached the endpoint (a 5xx, a reset, a timeout).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub non_idempotent: bool,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            attempts: 0,
            codes: Vec::new(),
            backoff: Duration::ZERO,
            replay_body: Retry::DEFAULT_REPLAY_BODY,
            non_idempotent: false,
        }
    }
}

/// The hash of push protocol versions up to 2 (attempts, codes, backoff), which their
/// data planes check; the fields added in version 3 are folded in only when they differ
/// from their defaults, so a retry that does not set them hashes as those releases
/// compute it.
impl std::hash::Hash for Retry {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.attempts.hash(state);
        self.codes.hash(state);
        self.backoff.hash(state);
        if self.replay_body != Retry::DEFAULT_REPLAY_BODY || self.non_idempotent {
            self.replay_body.hash(state);
            self.non_idempotent.hash(state);
        }
    }
}

impl Retry {
    /// The longest request body kept for retries unless a policy says otherwise: 64 KiB.
    pub const DEFAULT_REPLAY_BODY: u32 = 64 * 1024;

    /// Whether a response with `status` is retried.
    pub fn retries_status(&self, status: u16) -> bool {
        self.codes.binary_search(&status).is_ok()
    }

    fn is_default_replay(n: &u32) -> bool {
        *n == Retry::DEFAULT_REPLAY_BODY
    }

    /// The retry as a data plane of push protocol version 2 or older knows it: without
    /// the settings added in version 3 (it retries only requests without a body, and
    /// every method).
    pub fn as_version_2(self) -> Self {
        Retry {
            replay_body: Retry::DEFAULT_REPLAY_BODY,
            non_idempotent: false,
            ..self
        }
    }
}

/// Which kind of object a rule came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum RouteKind {
    /// gateway.networking.k8s.io HTTPRoute.
    HttpRoute,
    /// networking.k8s.io Ingress.
    Ingress,
    /// gateway.networking.k8s.io TLSRoute.
    TlsRoute,
    /// gateway.networking.k8s.io TCPRoute.
    TcpRoute,
    /// gateway.networking.k8s.io GRPCRoute.
    GrpcRoute,
    /// gateway.networking.k8s.io UDPRoute.
    UdpRoute,
}

impl RouteKind {
    /// The object's `kind` as the API spells it (`HTTPRoute`, `Ingress`, …): for logs,
    /// traces and the status page.
    pub fn object_kind(self) -> &'static str {
        match self {
            RouteKind::HttpRoute => "HTTPRoute",
            RouteKind::Ingress => "Ingress",
            RouteKind::TlsRoute => "TLSRoute",
            RouteKind::TcpRoute => "TCPRoute",
            RouteKind::GrpcRoute => "GRPCRoute",
            RouteKind::UdpRoute => "UDPRoute",
        }
    }
}

/// The object and rule a [`RouteRule`] came from (for logs and debugging).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct RouteRef {
    /// Object kind.
    pub kind: RouteKind,
    /// Object namespace.
    pub namespace: Arc<str>,
    /// Object name.
    pub name: Arc<str>,
    /// Index of the rule within the object.
    pub rule: u32,
}

/// One match of one rule of a route, with what to do when it matches. A Gateway API rule
/// with several matches becomes several `RouteRule`s sharing filters and action, so that
/// each can be ordered by its own precedence.
#[derive(Clone, Debug, Serialize)]
pub struct RouteRule {
    /// Origin.
    pub route: RouteRef,
    /// Conditions.
    pub matcher: RequestMatch,
    /// Filters, in order.
    pub filters: Vec<Filter>,
    /// What to do.
    pub action: Action,
    /// Timeouts.
    pub timeouts: RuleTimeouts,
    /// Retries of failed attempts (none when `None`). Boxed: most rules have none, and
    /// inline it was 56 of the rule's 360 bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<Box<Retry>>,
    hash: ContentHash,
}
eq_by_content_hash!(RouteRule);

impl RouteRule {
    /// Builds a rule and computes its content hash.
    pub fn new(
        route: RouteRef,
        matcher: RequestMatch,
        filters: Vec<Filter>,
        action: Action,
        timeouts: Timeouts,
    ) -> Self {
        let hash = content_hash(&(&route, &matcher, &filters, &action, &timeouts));
        RouteRule {
            route,
            matcher,
            filters,
            action,
            timeouts: timeouts.into(),
            retry: None,
            hash,
        }
    }

    /// The rule with retries, re-hashed. A rule without retries keeps the hash it had
    /// before rules could have them, so data planes that predate retries accept it.
    pub fn with_retry(mut self, retry: Option<Retry>) -> Self {
        self.hash = match &retry {
            None => content_hash(&(
                &self.route,
                &self.matcher,
                &self.filters,
                &self.action,
                &self.timeouts,
            )),
            Some(r) => content_hash(&(
                &self.route,
                &self.matcher,
                &self.filters,
                &self.action,
                &self.timeouts,
                r,
            )),
        };
        self.retry = retry.map(Box::new);
        self
    }

    /// The content hash computed at construction.
    pub fn hash(&self) -> ContentHash {
        self.hash
    }
}

/// All rules that apply to one host pattern on one listener, in precedence order: the
/// data plane takes the first rule whose matcher holds.
#[derive(Clone, Debug, Serialize)]
pub struct VirtualHost {
    /// The listener.
    pub listener: ListenerKey,
    /// The host pattern.
    pub host: HostMatch,
    /// Rules, highest precedence first. A boxed slice: 8 bytes less than a vector, which
    /// puts the `Arc` of a virtual host in a 96-byte size class instead of 112.
    pub rules: Box<[Arc<RouteRule>]>,
    hash: ContentHash,
}
eq_by_content_hash!(VirtualHost);

impl VirtualHost {
    /// Builds a virtual host; its hash covers its key and its rules' hashes (not their
    /// contents).
    pub fn new(listener: ListenerKey, host: HostMatch, rules: Vec<Arc<RouteRule>>) -> Self {
        let rule_hashes: Vec<ContentHash> = rules.iter().map(|r| r.hash).collect();
        let hash = content_hash(&(&listener, &host, &rule_hashes));
        VirtualHost {
            listener,
            host,
            rules: rules.into_boxed_slice(),
            hash,
        }
    }

    /// The content hash computed at construction.
    pub fn hash(&self) -> ContentHash {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_timeouts_box_only_what_is_set_and_hash_as_the_timeouts() {
        let none = Timeouts::default();
        let set = Timeouts {
            backend_send: Some(Duration::from_secs(3)),
            ..Timeouts::default()
        };
        for t in [none.clone(), set.clone()] {
            let r = RuleTimeouts::from(t.clone());
            assert_eq!(r.0.is_some(), t != none);
            assert_eq!(*r, t);
            assert_eq!(content_hash(&r), content_hash(&t));
            assert_eq!(
                serde_json::to_string(&r).unwrap(),
                serde_json::to_string(&t).unwrap()
            );
            assert_eq!(format!("{r:?}"), format!("{t:?}"));
        }
        assert_ne!(RuleTimeouts::from(set), RuleTimeouts::from(none));
        // With its `Arc` counts, 224 bytes: two allocator classes below the 320 it took
        // with the timeouts inline, one below the 256 with a redirect or fixed response
        // inline in its action.
        assert!(std::mem::size_of::<RouteRule>() <= 208);
    }

    #[test]
    fn prefix_is_segment_wise() {
        let p = PathMatch::Prefix("/foo".into());
        assert!(p.matches("/foo"));
        assert!(p.matches("/foo/bar"));
        assert!(!p.matches("/foobar"));
        assert!(PathMatch::Prefix("/".into()).matches("/anything"));
    }

    #[test]
    fn regex_is_full_match() {
        let p = PathMatch::Regex(Pattern::new("/v[0-9]+").unwrap());
        assert!(p.matches("/v12"));
        assert!(!p.matches("/v12/x"));
    }

    #[test]
    fn expand_fills_groups_of_one_digit() {
        let p = Pattern::new("(?i)(?:/api(/|$)(.*)).*").unwrap();
        assert_eq!(p.expand("/API/v1/x", "/$2").as_deref(), Some("/v1/x"));
        assert_eq!(p.expand("/api", "/$2").as_deref(), Some("/"));
        // `$10` is group 1 then `0`; a group that does not exist gives nothing; other
        // `$` stay.
        assert_eq!(
            p.expand("/api/a", "/$10/$9/$x/$").as_deref(),
            Some("//0//$x/$")
        );
        assert_eq!(p.expand("/other", "/$2"), None);
    }

    #[test]
    fn hash_depends_on_content() {
        let r = |path: &str| {
            RouteRule::new(
                RouteRef {
                    kind: RouteKind::HttpRoute,
                    namespace: "ns".into(),
                    name: "r".into(),
                    rule: 0,
                },
                RequestMatch {
                    path: PathMatch::Prefix(path.into()),
                    headers: vec![],
                    query: vec![],
                    method: None,
                },
                vec![],
                Action::Fail {
                    status: 500,
                    reason: "x".into(),
                },
                Timeouts::default(),
            )
        };
        assert_eq!(r("/a"), r("/a"));
        assert_ne!(r("/a").hash(), r("/b").hash());
    }
}
