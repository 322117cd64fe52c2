//! The per-request service: route on the live snapshot, answer or forward upstream.

use std::convert::Infallible;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body::{Body, Frame, SizeHint};
use weir_model::{
    Action, ConnectionTimeouts, EndpointAddr, Filter, ListenerKey, RouteRule, Timeouts,
    UpstreamProtocol, WeightedBackend,
};

use crate::access_log::{self, Record};
use crate::affinity;
use crate::authority;
use crate::basic_auth;
use crate::body::{ClientBody, RequestBody};
use crate::concurrency::InProgress;
use crate::cors;
use crate::dataplane::Shared;
use crate::endpoints::{ConnectGate, InFlight, Outcome};
use crate::error::{BoxError, ProxyError, ResponseShape, error_response, text_response};
use crate::ext_auth;
use crate::filters;
use crate::intercept;
use crate::metrics::ListenerMetrics;
use crate::mirror;
use crate::normalize;
use crate::policy::{self, Applied, Refusal};
use crate::retry;
use crate::router::{self, RequestView, RouteOutcome};
use crate::snapshot::Snapshot;
use crate::upgrade;
use crate::upstream::UpstreamBody;

/// The response body: a small body produced here, or an upstream body streamed through.
pub(crate) struct ProxyBody {
    kind: BodyKind,
    /// The request's place under a concurrency limit, given back when the body is
    /// dropped (sent whole, or the client gone).
    held: Option<Box<InProgress>>,
}

enum BodyKind {
    Full(Option<Bytes>),
    /// An upstream body (an HTTP/1.1 one gives its connection back to the pool at its
    /// end).
    Upstream(UpstreamBody),
}

impl ProxyBody {
    /// A body made of one buffer.
    pub(crate) fn full(data: Bytes) -> ProxyBody {
        let data = (!data.is_empty()).then_some(data);
        ProxyBody {
            kind: BodyKind::Full(data),
            held: None,
        }
    }

    pub(crate) fn upstream(body: UpstreamBody) -> ProxyBody {
        ProxyBody {
            kind: BodyKind::Upstream(body),
            held: None,
        }
    }
}

/// `resp` holding the request's place under a concurrency limit until its body is done.
fn holding(resp: Response<ProxyBody>, held: Option<Box<InProgress>>) -> Response<ProxyBody> {
    match held {
        None => resp,
        Some(h) => resp.map(|mut b| {
            b.held = Some(h);
            b
        }),
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // Both variants are Unpin, so the body can be re-pinned freely.
        match &mut self.get_mut().kind {
            BodyKind::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            BodyKind::Upstream(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            BodyKind::Full(data) => data.is_none(),
            BodyKind::Upstream(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            BodyKind::Full(data) => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            BodyKind::Upstream(body) => body.size_hint(),
        }
    }
}

/// What a connection's requests need: the data plane, which listener accepted it, and
/// the metric handles resolved when the accept loop started.
pub(crate) struct ConnContext {
    pub(crate) shared: Arc<Shared>,
    pub(crate) key: ListenerKey,
    /// The port actually bound (differs from the key's when the key's port is 0).
    pub(crate) local_port: u16,
    pub(crate) remote: SocketAddr,
    /// The client's IP as a header value (for `x-forwarded-for`), formatted once.
    pub(crate) client_ip: HeaderValue,
    pub(crate) tls: bool,
    /// The TLS server name the client sent (normalized), which chose the certificate and
    /// so the listener: a request for a host of another listener is misdirected (421).
    pub(crate) sni: Option<Box<str>>,
    pub(crate) metrics: ListenerMetrics,
    pub(crate) listener_label: Arc<str>,
    /// The listener's timeouts when the connection was accepted (body idle, default
    /// upstream response).
    pub(crate) timeouts: ConnectionTimeouts,
}

/// The result of waiting for an upstream: the response head.
pub(crate) type UpstreamResult = Result<Response<UpstreamBody>, ProxyError>;

/// Serves one request. Never fails: every error becomes a response.
///
/// The request goes through named phases, each a function below:
/// 0. only when traces or the access log are on: the trace decision
///    ([`crate::trace::Tracer::begin`]) and one boxed [`Record`] the phases write into;
/// 1. [`route`]: one host and one normal path, then the matching rule of the listener;
/// 2. [`policy::check`]: the policies that may refuse the request (client address
///    rules, Basic credentials, an API key, a JWT, authorization rules, then a local
///    rate limit; a bcrypt check
///    leaves these phases for the blocking pool and comes back: [`verify_then_forward`]),
///    after [`policy::resolve`] found the settings of the request's rule, route and
///    Gateway (timeouts, retries, rate limit);
/// 3. [`choose`]: a backend of the rule by weight, an endpoint of its cluster by the
///    balancer ([`crate::balance`]);
/// 4. [`rewrite`]: the forwarded head (hop-by-hop headers, `x-forwarded-*`, filters,
///    mirrors, URI form);
/// 5. [`send`]: the hand-over to the upstream pool, bounded by the route's timeouts;
/// 6. [`relay`]: the upstream's response head as sent back, once it arrives;
///    6b. only for rules with an `InterceptErrors` filter: [`intercept::after`] replaces
///    a listed error (the upstream's, or one made here) by the error cluster's answer;
/// 7. [`finish`]: errors turned into responses in the request's shape (HTTP or gRPC),
///    metrics, the access-log record and the spans (queued, never waited for).
///
/// Phases 1–5 run here, synchronously; the returned future only waits for the
/// upstream's response head. It is a few hundred bytes: hyper moves it into its
/// dispatcher for every HTTP/1.1 request and into a spawned task for every HTTP/2
/// stream, and the nested `async fn`s it replaces made it 3.6 KiB (memmove and malloc
/// were a quarter of the user-space instructions of an HTTP/2 request).
pub(crate) fn handle(
    ctx: Arc<ConnContext>,
    mut req: Request<ClientBody>,
) -> Handling<impl Future<Output = UpstreamResult> + Send + use<>> {
    let start = Instant::now();
    let shape = ResponseShape::of(req.headers());
    // Room for the fields added before forwarding (`x-request-id`, `x-forwarded-*`,
    // `host`, a filter's), made at once: an HTTP/2 request's map comes from h2's decoder
    // with no room to spare, and now grows once here rather than as the fields are
    // added (BENCHMARKS.md, "Session 38"). A no-op for the maps of weir's HTTP/1.1
    // server, made with this room.
    let _ = req.headers_mut().try_reserve(ADDED_FIELDS);
    ensure_request_id(req.headers_mut());
    // Phase 0, when traces are on: continue or start the trace, and decide (a route's
    // trace policy may revise the decision after routing, so a traced data plane keeps a
    // record for every request).
    let begun = ctx
        .shared
        .tracer
        .as_ref()
        .map(|t| t.begin(req.headers_mut()));
    let observed = ctx.shared.access_log.is_some() || begun.is_some();
    let mut log = observed.then(|| {
        let mut r = Box::new(Record::new(req.method().clone()));
        r.path = req.uri().path().to_owned();
        r.host = raw_host(&req);
        r.request_id = req.headers().get(&X_REQUEST_ID).cloned();
        r.version = req.version();
        if let Some(begun) = begun {
            r.span = begun.ids;
            r.begun = Some(begun);
            r.tracestate = req.headers().get(&TRACESTATE).cloned();
        }
        r
    });
    let state = Routed::into_state(phases(&ctx, req, start, log.as_deref_mut()));
    Handling {
        ctx,
        start,
        shape,
        log,
        state,
    }
}

pin_project_lite::pin_project! {
    /// See [`handle`].
    pub(crate) struct Handling<S> {
        ctx: Arc<ConnContext>,
        start: Instant,
        shape: ResponseShape,
        log: Option<Box<Record>>,
        #[pin]
        state: State<S>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<S> {
        /// Answered without an upstream (direct response, redirect, error); taken once.
        Done { result: Option<Result<Response<ProxyBody>, ProxyError>> },
        /// Waiting for the upstream's response head.
        Forwarding { #[pin] fwd: Forwarding<S> },
        /// Attempts of a request with retries (see [`crate::retry`]).
        Retrying { fut: Pin<Box<retry::Forward>> },
        /// An error of the gateway's own being replaced ([`intercept`]).
        Intercepting { fut: Intercepting },
        /// Credentials being checked off the worker threads.
        Verifying { fut: Verifying },
    }
}

impl<S: Future<Output = UpstreamResult>> Future for Handling<S> {
    type Output = Result<Response<ProxyBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = match this.state.project() {
            StateProj::Done { result } => result.take().unwrap_or(Err(ProxyError::BadRequest(
                "request polled after its response",
            ))),
            StateProj::Forwarding { mut fwd } => {
                let result = std::task::ready!(fwd.as_mut().poll(cx));
                if let (Some(log), Some((attempts, upstream))) =
                    (this.log.as_deref_mut(), fwd.retried())
                {
                    log.attempts = attempts;
                    log.upstream = Some(upstream);
                }
                result
            }
            StateProj::Intercepting { fut } => std::task::ready!(fut.as_mut().poll(cx)),
            StateProj::Verifying { fut } => {
                let (result, second) = std::task::ready!(fut.as_mut().poll(cx));
                if let Some(log) = this.log.as_deref_mut() {
                    // The second pass went through every check again: its trail is the
                    // request's.
                    log.attempts = second.attempts;
                    if second.upstream.is_some() {
                        log.upstream = second.upstream;
                    }
                    if second.route.is_some() {
                        log.route = second.route;
                    }
                    if second.forwarded_at.is_some() {
                        log.forwarded_at = second.forwarded_at;
                    }
                    if second.attempt_spans.is_some() {
                        log.attempt_spans = second.attempt_spans;
                    }
                    log.trail = second.trail;
                }
                result
            }
            StateProj::Retrying { fut } => {
                let (result, attempts, upstream) = std::task::ready!(fut.as_mut().poll(cx));
                if let Some(log) = this.log.as_deref_mut() {
                    log.attempts = attempts;
                    log.upstream = Some(upstream);
                }
                result
            }
        };
        Poll::Ready(Ok(finish(
            this.ctx,
            *this.start,
            *this.shape,
            this.log.take(),
            result,
        )))
    }
}

/// Phase 7: turns the result into the response, records metrics, and queues the
/// request's access-log record and spans.
fn finish(
    ctx: &ConnContext,
    start: Instant,
    shape: ResponseShape,
    log: Option<Box<Record>>,
    result: Result<Response<ProxyBody>, ProxyError>,
) -> Response<ProxyBody> {
    let (resp, fault) = match result {
        Ok(resp) => (resp, None),
        Err(err) => {
            let (resp, fault) = error_response(&err, shape);
            tracing::debug!(error = %err, fault = fault.as_str(), "request failed");
            (resp, Some(fault.as_str()))
        }
    };
    let elapsed = start.elapsed();
    let status = resp.status().as_u16();
    ctx.metrics.record(status, elapsed.as_secs_f64());
    if let Some(mut log) = log {
        log.done = Some(access_log::Done {
            time: std::time::SystemTime::now(),
            status,
            duration: elapsed,
            fault,
            listener: Arc::clone(&ctx.listener_label),
            client: ctx.remote,
            trace_id: log.span.as_ref().map(|s| s.trace_hex()),
        });
        if let (Some(tracer), Some(ids)) = (&ctx.shared.tracer, log.span) {
            tracer.end(&log, ids, ctx.tls, ctx.local_port);
        }
        if let Some(logger) = &ctx.shared.access_log {
            logger.submit(log);
        }
    }
    resp
}

/// The request's host as sent: the URI authority for HTTP/2 (and absolute-form HTTP/1.1
/// requests), else the Host header.
fn raw_host(req: &Request<ClientBody>) -> Option<HeaderValue> {
    let from_uri = || {
        req.uri()
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    };
    if req.version() == Version::HTTP_2 {
        from_uri().or_else(|| req.headers().get(header::HOST).cloned())
    } else {
        req.headers().get(header::HOST).cloned().or_else(from_uri)
    }
}

/// What the synchronous phases decided: an answer made here, or a request handed to an
/// upstream.
enum Routed<S> {
    Respond(Response<ProxyBody>),
    Forward(Forwarding<S>),
    Retrying(Pin<Box<retry::Forward>>),
    /// An error made here, replaced by an error cluster's answer ([`intercept`]).
    Intercepting(Intercepting),
    /// Credentials checked off the worker threads first (see [`basic_auth`]).
    Verify(Verifying),
}

/// The request to an error cluster that replaces an error of the gateway's own.
type Intercepting = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, ProxyError>> + Send>>;

/// A basic-auth check running off the worker threads, then the request's second pass
/// through the phases and its forwarding: the result, and the second pass's record (the
/// attempts made, the endpoint, the policies' decisions).
type Verifying =
    Pin<Box<dyn Future<Output = (Result<Response<ProxyBody>, ProxyError>, Record)> + Send>>;

/// What a request waits for before it goes through the phases again.
enum Job {
    /// A basic-auth check off the worker threads (bcrypt).
    Basic(basic_auth::Pending),
    /// A call to an external authorization service (policy object, call, request).
    ExtAuth(Arc<str>, ext_auth::Pending, ext_auth::Described),
    /// The first fetch of a remote JWK Set.
    Jwks(Arc<crate::jwks::Remote>),
}

/// Attached once a request waited for a remote JWK Set's first fetch.
#[derive(Clone, Copy)]
struct JwksWaited;

/// Passes through the phases a request has made after a [`Job`]; each pass attaches a
/// result, so a request needs at most one per check, and more is a bug refused.
#[derive(Clone, Copy)]
struct Passes(u8);

/// Runs a job that the synchronous phases cannot (a bcrypt check on the blocking pool,
/// a call to an authorization service), then takes the request through the phases again
/// with the result attached (so it is not asked twice) and forwards it. Boxed: only the
/// first request of a credential comes here; the others find the result in a cache.
fn verify_then_forward(
    ctx: &Arc<ConnContext>,
    mut req: Request<ClientBody>,
    job: Job,
    start: Instant,
) -> Verifying {
    let ctx = Arc::clone(ctx);
    Box::pin(async move {
        let mut log = Record::new(req.method().clone());
        let passes = req.extensions().get::<Passes>().map_or(0, |p| p.0);
        if passes >= 3 {
            let e = ProxyError::BadRequest("credentials checked too many times");
            return (Err(e), log);
        }
        req.extensions_mut().insert(Passes(passes + 1));
        match job {
            Job::Basic(job) => {
                let v = basic_auth::verify_blocking(Arc::clone(&ctx.shared.verified), job).await;
                req.extensions_mut().insert(v);
            }
            Job::ExtAuth(policy, job, described) => {
                let state = Arc::clone(&ctx.shared.ext_auth);
                let d = ext_auth::call(state, policy, job, described).await;
                req.extensions_mut().insert(d);
            }
            Job::Jwks(remote) => {
                remote.wait_first().await;
                req.extensions_mut().insert(JwksWaited);
            }
        }
        let logged = ctx.shared.access_log.is_some() || ctx.shared.tracer.is_some();
        match phases(&ctx, req, start, logged.then_some(&mut log)) {
            Ok(Routed::Forward(fwd)) => {
                let mut fwd = std::pin::pin!(fwd);
                let result = fwd.as_mut().await;
                if let Some((attempts, upstream)) = fwd.retried() {
                    log.attempts = attempts;
                    log.upstream = Some(upstream);
                }
                (result, log)
            }
            Ok(Routed::Retrying(fut)) => {
                let (result, attempts, upstream) = fut.await;
                log.attempts = attempts;
                log.upstream = Some(upstream);
                (result, log)
            }
            Ok(Routed::Respond(resp)) => (Ok(resp), log),
            Ok(Routed::Intercepting(fut)) => (fut.await, log),
            Ok(Routed::Verify(fut)) => fut.await,
            Err(e) => (Err(e), log),
        }
    })
}

impl<S> Routed<S> {
    /// The state a request is in after the phases.
    fn into_state(r: Result<Routed<S>, ProxyError>) -> State<S> {
        match r {
            Ok(Routed::Forward(fwd)) => State::Forwarding { fwd },
            Ok(Routed::Retrying(fut)) => State::Retrying { fut },
            Ok(Routed::Intercepting(fut)) => State::Intercepting { fut },
            Ok(Routed::Verify(fut)) => State::Verifying { fut },
            Ok(Routed::Respond(resp)) => State::Done {
                result: Some(Ok(resp)),
            },
            Err(e) => State::Done {
                result: Some(Err(e)),
            },
        }
    }
}

/// Phases 1–5 (see [`handle`]).
fn phases(
    ctx: &Arc<ConnContext>,
    mut req: Request<ClientBody>,
    start: Instant,
    mut log: Option<&mut Record>,
) -> Result<Routed<impl Future<Output = UpstreamResult> + Send + use<>>, ProxyError> {
    let snapshot = ctx.shared.snapshots.load();
    let Matched {
        rule,
        raw_host,
        applied,
        client,
    } = route(ctx, &snapshot, &mut req)?;
    if let Some(log) = log.as_deref_mut() {
        log.route = Some(rule.route.clone());
        // The access-log and trace policies of the route (before any check: a refused
        // request is logged and traced by them too).
        log.access = applied.access_log();
        if let (Some(tracer), Some(begun), Some(policy)) =
            (&ctx.shared.tracer, &log.begun, applied.tracing())
        {
            log.span = tracer.apply_policy(begun, &policy, req.headers_mut());
            if log.span.is_none() {
                log.tracestate = None;
            } else if log.tracestate.is_none() {
                log.tracestate = req.headers().get(&TRACESTATE).cloned();
            }
        }
    }
    // The rule's own CORS filter wins over a policy's `cors`.
    let own_cors = cors::of(&rule);
    let cors_settings = own_cors.or_else(|| applied.cors());
    let cors_origin = match cors::check(cors_settings, req.method(), req.headers()) {
        cors::Check::Pass => None,
        cors::Check::Answer(resp) => {
            if let Some(log) = log.as_deref_mut() {
                let policy = own_cors.is_none().then(|| applied.cors_policy()).flatten();
                note_preflight(&mut log.trail, policy, resp.status());
            }
            return Ok(Routed::Respond(resp));
        }
        cors::Check::Allowed(origin) => Some(origin),
    };
    let verified = req.extensions().get::<basic_auth::Verified>().copied();
    let decided = req.extensions().get::<ext_auth::Decided>().cloned();
    // Authorization rules read the method and path while the headers are lent mutably:
    // cheap clones (a reference count), only for requests such rules apply to.
    let head = applied
        .reads_head()
        .then(|| (req.method().clone(), req.uri().clone()));
    let checkers = policy::Checkers {
        head: head.as_ref().map(|(m, u)| (m, u.path())),
        limiter: &ctx.shared.rate_limits,
        global: &ctx.shared.global_limits,
        verified: &ctx.shared.verified,
        ext_auth: &ctx.shared.ext_auth,
        decided: decided.as_ref(),
        jwks: &ctx.shared.jwks,
        jwks_waited: req.extensions().get::<JwksWaited>().is_some(),
    };
    let trail = log.as_deref_mut().map(|l| &mut l.trail);
    match policy::check(
        &checkers,
        &applied,
        client,
        req.headers_mut(),
        verified,
        start,
        trail,
    ) {
        Ok(()) => {}
        Err(Refusal::Refused(e)) => return Err(e),
        Err(Refusal::Verify(job)) => {
            let job = Job::Basic(job);
            return Ok(Routed::Verify(verify_then_forward(ctx, req, job, start)));
        }
        Err(Refusal::ExtAuth(policy, job)) => {
            let raw = raw_host.as_ref().and_then(|v| v.to_str().ok());
            let described = ext_auth::Described::of(
                &job.auth,
                (req.method(), req.uri(), req.headers()),
                raw.unwrap_or(""),
                ctx.tls,
                client,
            );
            let job = Job::ExtAuth(policy, job, described);
            return Ok(Routed::Verify(verify_then_forward(ctx, req, job, start)));
        }
        Err(Refusal::WaitJwks(remote)) => {
            let job = Job::Jwks(remote);
            return Ok(Routed::Verify(verify_then_forward(ctx, req, job, start)));
        }
    }
    // A concurrency limit counts the requests that passed every other check, from here
    // until their response is sent (nginx's `limit_conn`); a request answered here gives
    // its place back at once.
    let held = match applied.concurrency_limit() {
        None => None,
        Some((policy, limit)) => match ctx.shared.concurrency.enter(policy, client, limit) {
            Some(place) => Some(Box::new(place)),
            None => {
                return Err(ProxyError::TooManyInProgress {
                    policy: policy.clone(),
                });
            }
        },
    };
    let backends = match &rule.action {
        Action::Forward(backends) => backends,
        // A rule that cannot forward (no usable backend) fails a gRPC request the gRPC
        // way (UNAVAILABLE), not with a text 500 the client cannot read.
        Action::Fail { .. } if ResponseShape::of(req.headers()) == ResponseShape::Grpc => {
            return Err(ProxyError::BackendNotFound);
        }
        _ => {
            let raw = raw_host.as_ref().and_then(|v| v.to_str().ok());
            let host = router::normalize_host(raw.unwrap_or(""));
            let mut resp = answer(ctx, &rule, &host, &req);
            if let Some(origin) = &cors_origin {
                cors::apply(origin, resp.headers_mut());
            }
            return Ok(Routed::Respond(resp));
        }
    };
    // Phase 6b, read now (the head is consumed by forwarding): what replaces an error
    // response (custom error pages).
    let intercept = intercept::of(&rule)
        .filter(|_| ResponseShape::of(req.headers()) == ResponseShape::Http)
        .cloned();
    let from = Some((req.headers(), client, &applied, ctx.tls));
    let mut target = match choose(
        &snapshot,
        &rule,
        backends,
        start,
        from,
        applied.client_certificate(),
    ) {
        Ok(t) => t,
        Err(e) => match &intercept {
            Some(errors) => {
                let first = backends.first().map(|b| &b.cluster);
                let p = intercept::Pending::new(errors, &rule, first, req.uri(), req.headers());
                let ctx = Arc::clone(ctx);
                return Ok(Routed::Intercepting(Box::pin(intercept::after(
                    ctx,
                    p,
                    Err(e),
                ))));
            }
            None => return Err(e),
        },
    };
    let pending = intercept.as_ref().map(|errors| {
        let cluster = backends.get(target.backend).map(|b| &b.cluster);
        intercept::Pending::new(errors, &rule, cluster, req.uri(), req.headers())
    });
    drop(snapshot);
    // A body is kept for retries up to the retry's limit (retry.rs); an upgrade is
    // never retried.
    let retried = applied
        .retry(&rule)
        .is_some_and(|r| r.attempts > 0 && (r.replay_body > 0 || req.body().is_end_stream()))
        && !req.headers().contains_key(header::UPGRADE);
    let mut attempt_trace = None;
    if let Some(log) = log {
        log.upstream = Some(target.addr.clone());
        if let Some(ids) = &log.span {
            log.forwarded_at = Some(std::time::SystemTime::now());
            if retried {
                // A client span per attempt (trace/mod.rs).
                let (t, spans) = crate::trace::AttemptTrace::new(ids);
                log.attempt_spans = Some(spans);
                attempt_trace = Some(t);
            }
        }
    }
    let mut rewritten = rewrite(ctx, &rule, &applied.timeouts, &mut target, req, raw_host)?;
    rewritten.cors_origin = cors_origin;
    rewritten.max_body = applied.max_body();
    rewritten.send_limit = applied.timeouts.backend_send_limit();
    // A retried request without a body (not traced per attempt, no error page) sends its
    // first attempt on the inline future, as any request does, with a copy of its head
    // kept (`retry::Kept`); only a retryable outcome moves it to the boxed attempts.
    let inline_retry =
        retried && attempt_trace.is_none() && pending.is_none() && rewritten.body.is_end_stream();
    if retried && !inline_retry {
        // The head is kept for the retries; the attempts run in one boxed future, so
        // requests without retries keep the small inline one.
        let fut = retry::forward(
            Arc::clone(ctx),
            rule,
            applied,
            target,
            rewritten.parts,
            rewritten.body,
            rewritten.cors_origin,
            start,
            attempt_trace,
        );
        if let Some(p) = pending {
            let ctx = Arc::clone(ctx);
            return Ok(Routed::Retrying(Box::pin(async move {
                let (result, attempts, upstream) = fut.await;
                let result = intercept::after(ctx, p, result).await;
                (result.map(|r| holding(r, held)), attempts, upstream)
            })));
        }
        return Ok(Routed::Retrying(match held {
            None => Box::pin(fut),
            Some(h) => Box::pin(async move {
                let (result, attempts, upstream) = fut.await;
                (result.map(|r| holding(r, Some(h))), attempts, upstream)
            }),
        }));
    }
    let limit = attempt_limit(ctx, &applied.timeouts, start);
    let kept =
        inline_retry.then(|| retry::Kept::new(ctx, &applied, &rewritten.parts, start, &target));
    address(&mut rewritten.parts, &rule, &target)?;
    if let Some(p) = pending {
        // Boxed, as retries are: only rules with the filter pay for it.
        let upstream = target.addr.clone();
        let fwd = send(ctx, rule, target, rewritten, limit, held, None);
        let ctx = Arc::clone(ctx);
        return Ok(Routed::Retrying(Box::pin(async move {
            let result = intercept::after(ctx, p, fwd.await).await;
            (result, 1, upstream)
        })));
    }
    Ok(Routed::Forward(send(
        ctx, rule, target, rewritten, limit, held, kept,
    )))
}

/// Notes a CORS preflight answered in phase 1: allowed (2xx) or refused (403).
fn note_preflight(trail: &mut access_log::Trail, policy: Option<&Arc<str>>, status: StatusCode) {
    let check = access_log::Check::Cors;
    if status.is_success() {
        trail.passed.push((check, policy.cloned()));
    } else {
        trail.deny(check, policy, "CORS preflight from an origin not allowed");
    }
}

/// What [`route`] found.
struct Matched {
    rule: Arc<RouteRule>,
    /// The host as the client sent it (the one kept after [`authority::canonical_host`]).
    raw_host: Option<HeaderValue>,
    /// The settings of the rule and of the policies attached to it, its route and its
    /// listener's Gateway.
    applied: Applied,
    /// The client: the peer, or what a trusted proxy's `X-Forwarded-For` says.
    client: std::net::IpAddr,
}

/// Phase 1: makes the request's host and path canonical (one host, one normal path,
/// routed on and forwarded alike: authority.rs, normalize.rs) and finds its rule.
fn route(
    ctx: &ConnContext,
    snapshot: &Snapshot,
    req: &mut Request<ClientBody>,
) -> Result<Matched, ProxyError> {
    let listener = snapshot.listener(&ctx.key).ok_or(ProxyError::NoRoute)?;
    let raw_host = authority::canonical_host(req)?;
    let merge_slashes = listener.listener.settings.paths.merge_slashes;
    normalize::normalize_uri(req.uri_mut(), merge_slashes)?;
    let raw_str = match &raw_host {
        Some(v) => v
            .to_str()
            .map_err(|_| ProxyError::BadRequest("host is not text"))?,
        None => "",
    };
    let host = router::normalize_host(raw_str);
    // Gateway API's "detect misdirected requests": the common case (host = server name)
    // costs one comparison.
    if let Some(sni) = ctx.sni.as_deref()
        && *sni != *host
        && listener.misdirected(sni, &host)
    {
        return Err(ProxyError::Misdirected);
    }
    let view = RequestView {
        host: &host,
        path: req.uri().path(),
        query: req.uri().query(),
        method: req.method(),
        headers: req.headers(),
    };
    let rule = match listener.route(&view) {
        RouteOutcome::NoHost | RouteOutcome::NoRoute => return Err(ProxyError::NoRoute),
        RouteOutcome::Matched(rule) => Arc::clone(rule),
    };
    // The Gateway listener serving the host, only while a policy targets one.
    let section = if snapshot.has_listener_policies() {
        listener.section(&host)
    } else {
        None
    };
    drop(host);
    let applied = policy::resolve(snapshot, &listener.listener.gateway, section, &rule);
    let client = listener.listener.settings.client_ip(ctx.remote.ip(), || {
        req.headers()
            .get_all(X_FORWARDED_FOR)
            .iter()
            .filter_map(|v| v.to_str().ok())
    });
    Ok(Matched {
        rule,
        raw_host,
        applied,
        client,
    })
}

/// Phase 3: a backend of the rule (by weight) and an endpoint of its cluster (by the
/// balancer), counted in flight until its outcome is known; and the mirrors' endpoints.
/// With the request's headers, client and settings (`from`), a consistent-hash key
/// ([`affinity`]) is read when the rule's policies balance by one (Gateway API
/// `sessionPersistence`: the key also chooses the backend, so a session keeps it) or the
/// chosen cluster's Service does; whether the request came over TLS makes a generated
/// cookie `Secure`. A retry chooses without `from` (another endpoint than
/// the key's is what it wants). `client_cert` is the request's Gateway's backend client
/// certificate, presented when the endpoint is reached over TLS.
pub(crate) fn choose(
    snapshot: &Snapshot,
    rule: &RouteRule,
    backends: &[WeightedBackend],
    now: Instant,
    from: Option<(&HeaderMap, std::net::IpAddr, &Applied, bool)>,
    client_cert: Option<&Arc<weir_model::Certificate>>,
) -> Result<Target, ProxyError> {
    let route_on = from.and_then(|(_, _, applied, _)| applied.hash_on());
    let mut affinity = match (route_on, from) {
        (Some(on), Some((headers, client, _, tls))) => {
            affinity::of_request(on, headers, client, tls)
        }
        _ => affinity::Affinity::default(),
    };
    let backend = match affinity.key {
        Some(key) => affinity::backend_for_key(backends, key),
        None => router::pick_backend(backends),
    }
    .ok_or(ProxyError::BackendNotFound)?;
    let cluster = snapshot
        .cluster(&backends[backend].cluster)
        .ok_or(ProxyError::BackendNotFound)?;
    if route_on.is_none()
        && let (Some(on), Some((headers, client, _, tls))) = (cluster.hash_on(), from)
    {
        affinity = affinity::of_request(on, headers, client, tls);
    }
    let tls = match cluster.tls_for(client_cert) {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => return Err(ProxyError::Connect(e.to_string().into())),
    };
    let picked = cluster.admit(now, affinity.key)?;
    if affinity.set_header.is_some() {
        cluster.key_generated();
    }
    Ok(Target {
        addr: picked.endpoint.addr.clone(),
        protocol: cluster.cluster.protocol,
        tls,
        backend,
        mirrors: mirror::targets(snapshot, rule),
        gate: cluster.connect_gate(picked.state),
        in_flight: picked.state.start_at(now),
        set_header: affinity.set_header.map(Box::new),
    })
}
/// The response of a rule that answers by itself: direct response, redirect or failure.
fn answer(
    ctx: &ConnContext,
    rule: &RouteRule,
    host: &str,
    req: &Request<ClientBody>,
) -> Response<ProxyBody> {
    match &rule.action {
        Action::DirectResponse(d) => {
            let status = status_or_500(d.status);
            let mut resp = text_response(status, Bytes::copy_from_slice(d.body.as_bytes()));
            resp.headers_mut().remove(header::CONTENT_TYPE);
            for (name, value) in &d.headers {
                if let (Ok(n), Ok(v)) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(value),
                ) {
                    resp.headers_mut().append(n, v);
                }
            }
            filters::apply_response_filters(rule, resp.headers_mut());
            resp
        }
        Action::Redirect(redirect) => {
            let scheme = if ctx.tls { "https" } else { "http" };
            let location = filters::redirect_location(
                rule,
                redirect,
                scheme,
                host,
                ctx.local_port,
                req.uri().path(),
                req.uri().query(),
            );
            let mut resp = text_response(status_or_500(redirect.status), Bytes::new());
            resp.headers_mut().remove(header::CONTENT_TYPE);
            match HeaderValue::try_from(location) {
                Ok(v) => {
                    resp.headers_mut().insert(header::LOCATION, v);
                }
                Err(_) => *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR,
            }
            filters::apply_response_filters(rule, resp.headers_mut());
            resp
        }
        Action::Fail { status, reason } => {
            let body = Bytes::from(format!("{reason}\n"));
            text_response(status_or_500(*status), body)
        }
        // Routed by the caller.
        Action::Forward(_) => error_response(&ProxyError::BackendNotFound, ResponseShape::Http).0,
    }
}

fn status_or_500(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Where one request is forwarded: the chosen endpoint, its cluster's protocol and the
/// index of the chosen backend in the rule's list (for its own filters).
pub(crate) struct Target {
    pub(crate) addr: EndpointAddr,
    pub(crate) protocol: UpstreamProtocol,
    /// TLS towards the endpoint (its Service port's BackendTLSPolicy).
    pub(crate) tls: Option<Arc<crate::upstream_tls::TlsTarget>>,
    pub(crate) backend: usize,
    /// Endpoints that get a copy (RequestMirror filters whose share this request fell in).
    mirrors: Vec<mirror::MirrorTarget>,
    /// The request counted against its endpoint until the outcome is known.
    pub(crate) in_flight: InFlight,
    /// The circuit breaker's pending-request limits, checked if the request needs a new
    /// connection.
    pub(crate) gate: Option<ConnectGate>,
    /// A header the response carries: a consistent-hash key generated for this request
    /// (`Set-Cookie`, or a session header).
    pub(crate) set_header: Option<Box<(HeaderName, HeaderValue)>>,
}

/// The filters of the rule's backend number `backend` (none if out of range).
pub(crate) fn backend_filters(rule: &RouteRule, backend: usize) -> &[Filter] {
    match &rule.action {
        Action::Forward(backends) => backends.get(backend).map_or(&[], |b| &b.filters[..]),
        _ => &[],
    }
}

/// The request as it goes upstream, from [`rewrite`].
struct Rewritten {
    parts: http::request::Parts,
    body: ClientBody,
    /// The client side of an HTTP/1.1 upgrade passed on to the upstream.
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    /// The request's origin, allowed by the rule's CORS filter (or a policy's): the
    /// response gets the CORS headers.
    cors_origin: Option<cors::Allowed>,
    /// A policy's body size limit, for a body without a declared length.
    max_body: Option<u64>,
    /// The send timeout (`timeouts.backend_send`).
    send_limit: Option<Duration>,
}

/// Phase 4: rewrites the request head for the upstream (and sends the mirrors' copies).
fn rewrite(
    ctx: &ConnContext,
    rule: &RouteRule,
    timeouts: &Timeouts,
    target: &mut Target,
    req: Request<ClientBody>,
    raw_host: Option<HeaderValue>,
) -> Result<Rewritten, ProxyError> {
    let protocol = target.protocol;
    let (mut parts, body) = req.into_parts();
    // An HTTP/1.1 upgrade (e.g. WebSocket) is passed on to an HTTP/1.1 upstream; if it
    // answers 101 the two connections are joined (see `upgrade::tunnel`).
    let upgrade = (protocol == UpstreamProtocol::Http1)
        .then(|| upgrade::requested(&parts))
        .flatten();
    let client_upgrade = upgrade
        .is_some()
        .then(|| parts.extensions.remove::<hyper::upgrade::OnUpgrade>())
        .flatten();
    strip_hop_by_hop(&mut parts.headers, protocol == UpstreamProtocol::H2c);
    if let Some(u) = &upgrade {
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        parts.headers.insert(header::UPGRADE, u.clone());
    }
    add_forwarded(&mut parts.headers, ctx, raw_host);
    filters::apply_request_filters(rule, &mut parts);
    if !target.mirrors.is_empty() {
        let limit = timeouts
            .request_limit()
            .or(timeouts.backend_request_limit())
            .unwrap_or(mirror::DEFAULT_TIMEOUT);
        let mirrors = std::mem::take(&mut target.mirrors);
        mirror::send(ctx, &parts, !body.is_end_stream(), mirrors, limit);
    }
    Ok(Rewritten {
        parts,
        body,
        client_upgrade,
        cors_origin: None,
        max_body: None,
        send_limit: None,
    })
}

/// Phase 4, per attempt: the chosen backend's own header filters and the URI, Host and
/// version for the endpoint's protocol.
pub(crate) fn address(
    parts: &mut http::request::Parts,
    rule: &RouteRule,
    target: &Target,
) -> Result<(), ProxyError> {
    let protocol = target.protocol;
    filters::apply_request_header_filters(
        backend_filters(rule, target.backend),
        &mut parts.headers,
    );

    match protocol {
        UpstreamProtocol::Http1 => {
            // Origin-form: the pool's connection already names the endpoint. A request in
            // origin-form (the usual case) keeps its URI as parsed.
            if parts.uri.scheme().is_some() || parts.uri.path_and_query().is_none() {
                parts.uri = Uri::from(origin_form(&parts.uri));
            }
            if !parts.headers.contains_key(header::HOST) {
                parts
                    .headers
                    .insert(header::HOST, endpoint_host(&target.addr)?);
            }
            parts.version = Version::HTTP_11;
        }
        UpstreamProtocol::H2c => {
            let scheme = if target.tls.is_some() {
                Scheme::HTTPS
            } else {
                Scheme::HTTP
            };
            parts.uri = upstream_uri(&target.addr, scheme, origin_form(&parts.uri))?;
            parts.version = Version::HTTP_2;
        }
    }
    Ok(())
}

/// How long one attempt may wait for its response head: what is left of the request
/// timeout, at most the backend-request timeout (the route's, else its policies'); a
/// request with neither gets the listener's upstream-response timeout (no upstream may
/// hold a request forever).
pub(crate) fn attempt_limit(
    ctx: &ConnContext,
    timeouts: &Timeouts,
    start: Instant,
) -> Option<Duration> {
    let t = timeouts;
    let remaining = t.request_limit().map(|d| d.saturating_sub(start.elapsed()));
    let limit = match (remaining, t.backend_request_limit()) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    // A route that sets its timeouts to 0s has disabled them.
    if limit.is_some() || t.is_set() {
        return limit;
    }
    let upstream_response = ctx.timeouts.upstream_response;
    (!upstream_response.is_zero()).then_some(upstream_response)
}

/// Phase 5: hands the request to the upstream pool, bounded by `limit` (from
/// [`attempt_limit`]).
fn send(
    ctx: &ConnContext,
    rule: Arc<RouteRule>,
    target: Target,
    rewritten: Rewritten,
    limit: Option<Duration>,
    held: Option<Box<InProgress>>,
    kept: Option<retry::Kept>,
) -> Forwarding<impl Future<Output = UpstreamResult> + Send + use<>> {
    let Rewritten {
        parts,
        body,
        client_upgrade,
        cors_origin,
        max_body,
        send_limit,
    } = rewritten;
    let body = RequestBody::new(body, ctx.timeouts.body_idle)
        .capped(max_body)
        .watch_sends(send_limit);
    let req = Request::from_parts(parts, body);
    let send = ctx.shared.upstreams.send(
        target.protocol,
        &target.addr,
        target.tls.as_ref(),
        req,
        target.gate,
    );
    Forwarding {
        send: Bounded::new(limit, send),
        rule,
        backend: target.backend,
        client_upgrade,
        extra: (cors_origin.is_some()
            || target.set_header.is_some()
            || held.is_some()
            || kept.is_some())
        .then(|| {
            Box::new(Extra {
                cors_origin,
                set_header: target.set_header.map(|h| *h),
                held,
                kept,
                retrying: None,
                retried: None,
            })
        }),
        in_flight: Some(target.in_flight),
    }
}

pin_project_lite::pin_project! {
    /// A forwarded request waiting for the upstream's response head; then its outcome is
    /// reported to the endpoint's state and the response is relayed.
    struct Forwarding<S> {
        #[pin]
        send: Bounded<S>,
        rule: Arc<RouteRule>,
        backend: usize,
        client_upgrade: Option<hyper::upgrade::OnUpgrade>,
        // Boxed: CORS requests and generated cookies are the rare case, and this future
        // has a size budget.
        extra: Option<Box<Extra>>,
        in_flight: Option<InFlight>,
    }
}

/// What a few forwarded requests add to their response.
struct Extra {
    /// The request's origin, allowed by the rule's CORS filter.
    cors_origin: Option<cors::Allowed>,
    /// A header to add (a generated consistent-hash key).
    set_header: Option<(HeaderName, HeaderValue)>,
    /// The request's place under a concurrency limit, moved to the response body.
    held: Option<Box<InProgress>>,
    /// A retried request's head and settings while its first attempt is sent.
    kept: Option<retry::Kept>,
    /// The attempts after the first, once its outcome was retryable.
    retrying: Option<Pin<Box<retry::Forward>>>,
    /// The attempts made and the last one's endpoint, once `retrying` ended.
    retried: Option<(u32, EndpointAddr)>,
}

impl Extra {
    /// Adds the generated header and hands the held place to the response.
    fn finish(&mut self, mut resp: Response<ProxyBody>) -> Response<ProxyBody> {
        if let Some((name, value)) = self.set_header.take() {
            resp.headers_mut().append(name, value);
        }
        holding(resp, self.held.take())
    }
}

impl<S> Forwarding<S> {
    /// The attempts made and the last one's endpoint, when the request was retried (once,
    /// after it is ready).
    fn retried(self: Pin<&mut Self>) -> Option<(u32, EndpointAddr)> {
        self.project().extra.as_mut()?.retried.take()
    }
}

impl<S: Future<Output = UpstreamResult>> Future for Forwarding<S> {
    type Output = Result<Response<ProxyBody>, ProxyError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Some(extra) = this.extra.as_deref_mut()
            && let Some(rest) = &mut extra.retrying
        {
            let (result, attempts, upstream) = std::task::ready!(rest.as_mut().poll(cx));
            extra.retrying = None;
            extra.retried = Some((attempts, upstream));
            return Poll::Ready(result.map(|resp| extra.finish(resp)));
        }
        let result = std::task::ready!(this.send.poll(cx));
        if let Some(in_flight) = this.in_flight.take() {
            in_flight.finish(outcome(&result));
        }
        if let Some(extra) = this.extra.as_deref_mut()
            && let Some(kept) = extra.kept.take()
            && let Some(wait) = kept.retry_after(this.rule, &result)
        {
            drop(result);
            let cors_origin = extra.cors_origin.take();
            let mut rest: Pin<Box<retry::Forward>> = Box::pin(retry::resume(
                kept,
                Arc::clone(this.rule),
                wait,
                cors_origin,
            ));
            let polled = rest.as_mut().poll(cx);
            let Poll::Ready((result, attempts, upstream)) = polled else {
                extra.retrying = Some(rest);
                return Poll::Pending;
            };
            extra.retried = Some((attempts, upstream));
            return Poll::Ready(result.map(|resp| extra.finish(resp)));
        }
        let resp = result?;
        let rule = &**this.rule;
        let extra = this.extra.as_deref_mut();
        let resp = relay(
            rule,
            backend_filters(rule, *this.backend),
            extra.as_ref().and_then(|e| e.cors_origin.as_ref()),
            this.client_upgrade.take(),
            resp,
        );
        Poll::Ready(Ok(match extra {
            Some(extra) => extra.finish(resp),
            None => resp,
        }))
    }
}

/// What an upstream result says about its endpoint (for outlier detection).
pub(crate) fn outcome(result: &UpstreamResult) -> Outcome {
    match result {
        Ok(resp) => Outcome::of_status(resp.status().as_u16()),
        Err(ProxyError::Connect(_)) => Outcome::ConnectFailure,
        Err(ProxyError::Upstream(_) | ProxyError::Timeout) => Outcome::GatewayFailure,
        Err(_) => Outcome::Neutral,
    }
}

/// Phase 6: the upstream's response as sent to the client.
pub(crate) fn relay(
    rule: &RouteRule,
    backend_filters: &[Filter],
    cors_origin: Option<&cors::Allowed>,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    mut resp: Response<UpstreamBody>,
) -> Response<ProxyBody> {
    let switched = match client_upgrade {
        Some(client) if resp.status() == StatusCode::SWITCHING_PROTOCOLS => {
            match resp.body_mut().upgrade() {
                Some(upstream) => {
                    tokio::spawn(upgrade::tunnel(client, upstream));
                    resp.headers().get(header::UPGRADE).cloned()
                }
                None => None,
            }
        }
        _ => None,
    };
    let (mut parts, body) = resp.into_parts();
    // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and an intermediary must
    // drop the Content-Length before forwarding: relayed, the stale length would cut the
    // body short and look complete. (Such a response hints at a confused or hostile
    // upstream: the HTTP/1.1 client does not reuse its connection.)
    // (Transfer-Encoding is hop-by-hop: a head without any such field, the usual case,
    // is passed without a lookup.)
    if has_hop_by_hop(&parts.headers) {
        if parts.headers.contains_key(header::TRANSFER_ENCODING) {
            parts.headers.remove(header::CONTENT_LENGTH);
        }
        strip_hop_by_hop(&mut parts.headers, false);
    }
    if let Some(u) = switched {
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        parts.headers.insert(header::UPGRADE, u);
    }
    // The CORS headers first: a ResponseHeaderModifier that sets one wins.
    if let Some(allowed) = cors_origin {
        cors::apply(allowed, &mut parts.headers);
    }
    filters::apply_response_filters(rule, &mut parts.headers);
    filters::apply_response_header_filters(backend_filters, &mut parts.headers);
    Response::from_parts(parts, ProxyBody::upstream(body))
}

fn origin_form(uri: &Uri) -> PathAndQuery {
    uri.path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"))
}

/// `Host` for a request that arrived without one (HTTP/1.0): the endpoint's address.
pub(crate) fn endpoint_host(addr: &EndpointAddr) -> Result<HeaderValue, ProxyError> {
    let text = match addr {
        EndpointAddr::Socket(s) => s.to_string(),
        EndpointAddr::Host(h, p) => format!("{h}:{p}"),
    };
    HeaderValue::try_from(text).map_err(|e| ProxyError::Connect(Box::new(e)))
}

pin_project_lite::pin_project! {
    /// `fut`, failing with [`ProxyError::Timeout`] once `sleep` (if any) fires. One
    /// future type for both cases: with `match limit { Some => timeout(fut), None => fut }`
    /// the request future held two copies of the (large) upstream send future.
    pub(crate) struct Bounded<F> {
        #[pin]
        fut: F,
        // Boxed: an inline `Sleep` is ~100 bytes of every request's future, which hyper
        // moves (see `handle`).
        sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<F> Bounded<F> {
    pub(crate) fn new(limit: Option<Duration>, fut: F) -> Bounded<F> {
        Bounded {
            fut,
            sleep: limit.map(|d| Box::pin(tokio::time::sleep(d))),
        }
    }
}

impl<T, F: Future<Output = Result<T, ProxyError>>> Future for Bounded<F> {
    type Output = Result<T, ProxyError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.fut.poll(cx) {
            return Poll::Ready(out);
        }
        match this.sleep.as_mut().map(|sleep| sleep.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Err(ProxyError::Timeout)),
            _ => Poll::Pending,
        }
    }
}

pub(crate) fn upstream_uri(
    addr: &EndpointAddr,
    scheme: Scheme,
    path: PathAndQuery,
) -> Result<Uri, ProxyError> {
    let authority = match addr {
        EndpointAddr::Socket(s) => Authority::try_from(s.to_string()),
        EndpointAddr::Host(h, p) => Authority::try_from(format!("{h}:{p}")),
    }
    .map_err(|e| ProxyError::Connect(Box::new(e)))?;
    Uri::builder()
        .scheme(scheme)
        .authority(authority)
        .path_and_query(path)
        .build()
        .map_err(|e| ProxyError::Connect(Box::new(e)))
}

const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop headers, including any named in `Connection`. `keep_te_trailers`
/// keeps `te: trailers` (meaningful end to end over HTTP/2, e.g. for gRPC).
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap, keep_te_trailers: bool) {
    if !has_hop_by_hop(headers) {
        return;
    }
    if headers.contains_key(header::CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
    if headers.contains_key(header::TE) {
        let trailers = keep_te_trailers
            && headers.get_all(header::TE).iter().any(|v| {
                v.to_str().is_ok_and(|s| {
                    s.split(',')
                        .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
                })
            });
        headers.remove(header::TE);
        if trailers {
            headers.insert(header::TE, HeaderValue::from_static("trailers"));
        }
    }
}

/// Whether `headers` has a field [`strip_hop_by_hop`] would look at. One pass over the
/// few names present: comparing names is cheap, where each of its lookups hashes a name.
fn has_hop_by_hop(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|n| n == header::TE || HOP_BY_HOP.contains(n))
}

/// Room kept in a request's header map for the fields the proxy adds before forwarding
/// it (`x-request-id`, `x-forwarded-for`, `-proto`, `-host`, a filter's), so that adding
/// them does not grow the map (in a profile, growing it cost 10 % of the instructions
/// of a plaintext HTTP/1.1 request).
pub(crate) const ADDED_FIELDS: usize = 8;
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

fn add_forwarded(headers: &mut HeaderMap, ctx: &ConnContext, raw_host: Option<HeaderValue>) {
    match headers.entry(X_FORWARDED_FOR) {
        header::Entry::Vacant(slot) => {
            slot.insert(ctx.client_ip.clone());
        }
        header::Entry::Occupied(mut prior) => {
            let joined = prior
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect::<Vec<_>>()
                .join(", ");
            let ip = ctx.client_ip.to_str().unwrap_or_default();
            let value = if joined.is_empty() {
                HeaderValue::try_from(ip)
            } else {
                HeaderValue::try_from(format!("{joined}, {ip}"))
            };
            if let Ok(v) = value {
                prior.insert(v);
            }
        }
    }
    let proto = if ctx.tls { "https" } else { "http" };
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    if let Some(host) = raw_host {
        headers.insert(X_FORWARDED_HOST, host.clone());
        // HTTP/2 clients carry the host in :authority; the upstream gets it as Host.
        headers.entry(header::HOST).or_insert(host);
    }
}

/// Gives the request an `x-request-id` when it has none: a per-process random prefix
/// and a counter, in hex.
fn ensure_request_id(headers: &mut HeaderMap) {
    // One hashed lookup for both the check and the insertion.
    let header::Entry::Vacant(slot) = headers.entry(X_REQUEST_ID) else {
        return;
    };
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.write_u32(std::process::id());
        h.finish()
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // Hex digits written into a stack buffer: one allocation (the header's), where
    // `format!` made two on every request.
    let mut buf = [0u8; 33];
    hex_into(&mut buf[..16], prefix);
    buf[16] = b'-';
    let digits = (64 - n.leading_zeros()).div_ceil(4).max(1) as usize;
    hex_into(&mut buf[17..17 + digits], n);
    let v = HeaderValue::from_bytes(&buf[..17 + digits])
        .unwrap_or_else(|_| HeaderValue::from_static("-"));
    slot.insert(v);
}

/// Writes the low `out.len()` hex digits of `n` into `out`, most significant first.
fn hex_into(out: &mut [u8], mut n: u64) {
    for b in out.iter_mut().rev() {
        *b = b"0123456789abcdef"[(n & 0xf) as usize];
        n >>= 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_hop_by_hop_and_connection_named() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::TE, HeaderValue::from_static("trailers, deflate"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        let mut h2 = h.clone();
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-kept"));
        strip_hop_by_hop(&mut h2, true);
        assert_eq!(
            h2.get(header::TE).map(|v| v.as_bytes()),
            Some(&b"trailers"[..])
        );
    }

    #[test]
    fn request_ids_are_unique_and_kept() {
        let mut a = HeaderMap::new();
        let mut b = HeaderMap::new();
        ensure_request_id(&mut a);
        ensure_request_id(&mut b);
        let ida = a.get("x-request-id").unwrap();
        assert_ne!(Some(ida), b.get("x-request-id"));
        let text = ida.to_str().unwrap();
        let (prefix, count) = text.split_once('-').unwrap();
        assert_eq!(prefix.len(), 16);
        assert!(u64::from_str_radix(prefix, 16).is_ok());
        assert!(u64::from_str_radix(count, 16).is_ok());
        let mut c = HeaderMap::new();
        c.insert("x-request-id", HeaderValue::from_static("given"));
        ensure_request_id(&mut c);
        assert_eq!(c.get("x-request-id").unwrap(), "given");
    }

    /// The request future is moved by hyper for every request (see [`handle`]); nested
    /// `async fn`s made it 3.6 KiB.
    #[test]
    fn request_future_stays_small() {
        fn future_size<A, B, F>(_: fn(A, B) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        let size = future_size(handle);
        // 512 until upstream TLS: the pooled connection's lease carries its TLS identity
        // and settings (16 bytes).
        assert!(size <= 528, "request future is {size} bytes");
    }

    #[test]
    fn hex_digits() {
        let mut b = [0u8; 4];
        hex_into(&mut b, 0xbeef);
        assert_eq!(&b, b"beef");
        let mut one = [0u8; 1];
        hex_into(&mut one, 0);
        assert_eq!(&one, b"0");
    }
}
