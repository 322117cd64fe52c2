//! Retries (Gateway API `HTTPRouteRetry`): the attempts of one request without a body.
//!
//! The retry is the rule's own (HTTPRoute `retry`), else a policy's
//! ([`crate::policy::resolve`]). An attempt is retried when the endpoint cannot be
//! reached, resets the connection, does not answer within the attempt's limit, or
//! answers with one of the retry's codes;
//! while attempts remain, the route's request timeout leaves room for the backoff, and
//! the cluster's retry budget allows it ([`crate::endpoints::ClusterHealth::retry`]).
//! Each retry goes to a newly chosen endpoint (another one when the cluster has
//! another), after a backoff that starts at the rule's and doubles, with jitter, capped
//! at ten times the rule's. Every attempt's outcome feeds outlier detection, so the
//! endpoint that failed is also less likely to be chosen again.
//!
//! A request body is read whole before the first attempt when it is at most the retry's
//! `replay_body` bytes (64 KiB unless a policy says otherwise; 0: requests with a body are
//! not retried), and sent again by each retry. A longer body is streamed to the first
//! endpoint as it arrives, which is then the only attempt.
//!
//! A request whose method is not idempotent (anything but GET, HEAD, OPTIONS, TRACE, PUT
//! and DELETE: POST, PATCH, …) is retried only when its attempt could not connect, so it
//! never reached an endpoint — a POST answered 503 or cut by a reset may have been acted
//! on — unless the retry allows it (`non_idempotent`: a policy's `nonIdempotent: true`,
//! for gRPC calls or APIs known to be safe).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::{Request, Response};
use weir_model::{Action, EndpointAddr, Retry, RouteRule, Timeouts};

use crate::body::{Replay, RequestBody};
use crate::endpoints::ClusterHealth;
use crate::error::ProxyError;
use crate::policy::{Applied, ForAttempts};
use crate::router;
use crate::server::{
    Bounded, ConnContext, ProxyBody, Target, UpstreamResult, address, attempt_limit,
    backend_filters, choose, outcome, relay,
};

/// What the attempts came to: the response (or error), the number of attempts and the
/// endpoint of the last one.
pub(crate) type Retried = (Result<Response<ProxyBody>, ProxyError>, u32, EndpointAddr);

/// The boxed future of a request with retries.
pub(crate) type Forward = dyn Future<Output = Retried> + Send;

/// What a retried request without a body keeps while its first attempt runs on the
/// inline request future, as a request without retries does (`server::Forwarding`):
/// a copy of its head, made before the head is addressed to the endpoint, and what the
/// decision to retry needs. Only a retryable outcome moves the request to the boxed
/// attempts ([`resume`]), so a retry policy costs the common request a head copy, not a
/// boxed future of a few KiB moved and polled through.
pub(crate) struct Kept {
    ctx: Arc<ConnContext>,
    applied: ForAttempts,
    head: Head,
    start: Instant,
    health: Option<Arc<ClusterHealth>>,
    /// The first attempt's endpoint.
    addr: EndpointAddr,
}

impl Kept {
    /// Keeps `head` (rewritten, not yet addressed) for retries of a request whose first
    /// attempt goes to `first`, and counts the request into the cluster's retry budget.
    pub(crate) fn new(
        ctx: &Arc<ConnContext>,
        applied: &Applied,
        head: &http::request::Parts,
        start: Instant,
        first: &Target,
    ) -> Kept {
        let health = first.in_flight.cluster();
        if let Some(h) = &health {
            h.deposit();
        }
        Kept {
            ctx: Arc::clone(ctx),
            applied: applied.for_attempts(),
            head: Head::of(head),
            start,
            health,
            addr: first.addr.clone(),
        }
    }

    /// After the first attempt: the wait before the second, or `None` when `result` is
    /// the answer.
    pub(crate) fn retry_after(
        &self,
        rule: &RouteRule,
        result: &UpstreamResult,
    ) -> Option<Duration> {
        let retry = self.applied.retry(rule);
        let idempotent =
            retry.is_some_and(|r| r.non_idempotent) || is_idempotent(&self.head.method);
        let timeouts = &self.applied.timeouts;
        wait_before(
            retry,
            idempotent,
            result,
            1,
            timeouts,
            self.start,
            true,
            self.health.as_ref(),
        )
    }
}

/// The attempts after a kept request's first (see [`Kept`]): `wait`, then a newly
/// chosen endpoint, and on as the rule says. The response is relayed with
/// `cors_origin`'s headers; the caller adds the rest (a generated cookie, a held place).
pub(crate) fn resume(
    kept: Kept,
    rule: Arc<RouteRule>,
    wait: Duration,
    cors_origin: Option<crate::cors::Allowed>,
) -> impl Future<Output = Retried> + Send {
    let Kept {
        ctx,
        applied,
        head,
        start,
        health,
        addr,
    } = kept;
    let attempts = Attempts {
        ctx,
        rule,
        applied,
        head,
        body: Replay::nothing(),
        start,
        cors_origin,
        trace: None,
        health,
    };
    run(attempts, Next::After { wait, failed: addr }, 1)
}

/// Sends `head` and `body` to `first`, then retries as the rule says (see the module
/// docs): the boxed path, for requests with a body, traced attempts or an error page.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn forward(
    ctx: Arc<ConnContext>,
    rule: Arc<RouteRule>,
    applied: Applied,
    first: Target,
    head: http::request::Parts,
    body: crate::body::ClientBody,
    cors_origin: Option<crate::cors::Allowed>,
    start: Instant,
    trace: Option<crate::trace::AttemptTrace>,
) -> Retried {
    let head = Head::of(&head);
    let mut first = first;
    let set_header = first.set_header.take();
    let replay_limit = applied.retry(&rule).map_or(0, |r| r.replay_body as usize);
    let body = RequestBody::new(body, ctx.timeouts.body_idle)
        .capped(applied.max_body())
        .replayable(replay_limit);
    let health = first.in_flight.cluster();
    if let Some(h) = &health {
        h.deposit();
    }
    let attempts = Attempts {
        ctx,
        rule,
        applied: applied.for_attempts(),
        head,
        body,
        start,
        cors_origin,
        trace,
        health,
    };
    let (result, made, addr) = run(attempts, Next::First(first), 0).await;
    let result = result.map(|mut resp| {
        if let Some(h) = set_header {
            resp.headers_mut().append(h.0, h.1);
        }
        resp
    });
    (result, made, addr)
}

/// What every attempt of a request needs.
struct Attempts {
    ctx: Arc<ConnContext>,
    rule: Arc<RouteRule>,
    applied: ForAttempts,
    /// The head as rewritten, before it is addressed to an endpoint.
    head: Head,
    body: Replay,
    start: Instant,
    cors_origin: Option<crate::cors::Allowed>,
    trace: Option<crate::trace::AttemptTrace>,
    health: Option<Arc<ClusterHealth>>,
}

/// Where the next attempt goes.
enum Next {
    First(Target),
    /// After `wait`, to an endpoint chosen again (another than `failed` if it can).
    After {
        wait: Duration,
        failed: EndpointAddr,
    },
}

/// The attempts from `next` on, `made` having been made: each one's outcome decides
/// whether another follows (see the module docs).
async fn run(a: Attempts, mut next: Next, mut made: u32) -> Retried {
    let Attempts {
        ctx,
        rule,
        applied,
        head,
        body,
        start,
        cors_origin,
        trace,
        health,
    } = a;
    let retry = applied.retry(&rule);
    let idempotent = retry.is_some_and(|r| r.non_idempotent) || is_idempotent(&head.method);
    let timeouts = &applied.timeouts;
    loop {
        let target = match next {
            Next::First(t) => t,
            Next::After { wait, failed } => {
                tokio::time::sleep(wait).await;
                match choose_again(&ctx, &rule, &failed, applied.client_certificate()) {
                    Ok(t) => t,
                    Err(e) => return (Err(e), made, failed),
                }
            }
        };
        made += 1;
        let addr = target.addr.clone();
        let backend = target.backend;
        let mut parts = head.parts();
        let span = trace
            .as_ref()
            .map(|t| (t.start(made, &mut parts.headers), SystemTime::now()));
        let result = attempt(&ctx, &rule, timeouts, target, parts, body.body(), start).await;
        if let (Some(t), Some((id, at))) = (&trace, span) {
            let outcome = match &result {
                Ok(resp) => Ok(resp.status().as_u16()),
                Err(e) => Err(error_type(e)),
            };
            t.ended(id, made, at, addr.clone(), outcome);
        }
        let wait = wait_before(
            retry,
            idempotent,
            &result,
            made,
            timeouts,
            start,
            body.can_replay(),
            health.as_ref(),
        );
        let Some(wait) = wait else {
            let result = result.map(|resp| {
                relay(
                    &rule,
                    backend_filters(&rule, backend),
                    cors_origin.as_ref(),
                    None,
                    resp,
                )
            });
            return (result, made, addr);
        };
        drop(result);
        next = Next::After { wait, failed: addr };
    }
}

/// After attempt number `made` ended with `result`: the wait before the next, or
/// `None` when `result` is the answer. A retry needs a retryable outcome (see the module
/// docs), attempts left, a body that can be sent again, room in the request timeout for
/// the wait, and the cluster's retry budget (taken last: only a retry made spends it).
#[allow(clippy::too_many_arguments)]
fn wait_before(
    retry: Option<&Retry>,
    idempotent: bool,
    result: &UpstreamResult,
    made: u32,
    timeouts: &Timeouts,
    start: Instant,
    can_replay: bool,
    health: Option<&Arc<ClusterHealth>>,
) -> Option<Duration> {
    let retry = retry?;
    let retryable = match result {
        Ok(resp) => idempotent && retry.retries_status(resp.status().as_u16()),
        Err(ProxyError::Connect(_)) => true,
        Err(ProxyError::Upstream(_) | ProxyError::Timeout) => idempotent,
        Err(_) => false,
    };
    if !retryable || made > retry.attempts || !can_replay {
        return None;
    }
    let wait = backoff(retry.backoff, made);
    let time_left = timeouts
        .request_limit()
        .is_none_or(|limit| start.elapsed() + wait < limit);
    (time_left && health.is_none_or(|h| h.retry(Instant::now()))).then_some(wait)
}

/// The `error.type` of an attempt's client span that got no response.
fn error_type(e: &ProxyError) -> &'static str {
    match e {
        ProxyError::Connect(_) => "connect",
        ProxyError::Timeout => "timeout",
        ProxyError::ClientBody(_) | ProxyError::BodyTimeout => "client_body",
        _ => "upstream",
    }
}

/// Whether requests of `method` may be sent twice with the effect of once (RFC 9110,
/// section 9.2.2).
fn is_idempotent(method: &http::Method) -> bool {
    use http::Method;
    [
        Method::GET,
        Method::HEAD,
        Method::OPTIONS,
        Method::TRACE,
        Method::PUT,
        Method::DELETE,
    ]
    .contains(method)
}

/// One attempt: `parts` addressed to `target` with `body`, bounded by the attempt's
/// limit; its outcome reported to the endpoint.
async fn attempt(
    ctx: &ConnContext,
    rule: &RouteRule,
    timeouts: &Timeouts,
    target: Target,
    mut parts: http::request::Parts,
    body: RequestBody,
    start: Instant,
) -> UpstreamResult {
    address(&mut parts, rule, &target)?;
    let limit = attempt_limit(ctx, timeouts, start);
    let req = Request::from_parts(parts, body.watch_sends(timeouts.backend_send_limit()));
    let send = ctx.shared.upstreams.send(
        target.protocol,
        &target.addr,
        target.tls.as_ref(),
        req,
        target.gate,
    );
    let result: UpstreamResult = Bounded::new(limit, send).await;
    target.in_flight.finish(outcome(&result));
    result
}

/// A new endpoint for a retry, another than `failed` when one of two picks finds one.
fn choose_again(
    ctx: &ConnContext,
    rule: &RouteRule,
    failed: &EndpointAddr,
    client_cert: Option<&Arc<weir_model::Certificate>>,
) -> Result<Target, ProxyError> {
    let Action::Forward(backends) = &rule.action else {
        return Err(ProxyError::BackendNotFound);
    };
    let snapshot = ctx.shared.snapshots.load();
    let now = Instant::now();
    let first = choose(&snapshot, rule, backends, now, None, client_cert)?;
    if first.addr != *failed {
        return Ok(first);
    }
    match choose(&snapshot, rule, backends, now, None, client_cert) {
        Ok(second) if second.addr != *failed => Ok(second),
        _ => Ok(first),
    }
}

/// The wait before retry number `n` (from 1): `base` doubling per retry, at most ten
/// times `base`, plus up to half of it again as jitter (never less than `base`).
fn backoff(base: Duration, n: u32) -> Duration {
    let doubled = base.saturating_mul(1 << (n - 1).min(16));
    let capped = doubled.min(base.saturating_mul(10));
    let jitter_range = capped.as_nanos() as u64 / 2;
    let jitter = if jitter_range == 0 {
        0
    } else {
        router::next_random() % jitter_range
    };
    capped + Duration::from_nanos(jitter)
}

/// A copy of a request head (method, URI, version, headers; extensions are not needed
/// upstream), kept for the attempts after the first. Most requests are never retried, so
/// the copy is made for the cheapest keeping, not the cheapest use: the headers' bytes
/// back to back in one allocation (copying a `HeaderValue` takes a reference to its
/// buffer, and dropping it releases one, per header; a value weir made itself is even
/// moved to a shared buffer by its first copy), and a retry parses them into a map again.
struct Head {
    method: http::Method,
    uri: http::Uri,
    version: http::Version,
    /// Per header, in order: the name's length (u16, little-endian), the value's length
    /// (u32), whether the value is sensitive (1) or not (0), the name, the value.
    headers: Vec<u8>,
}

/// Bytes of an entry of [`Head::headers`] before its name.
const ENTRY_HEAD: usize = 7;

impl Head {
    fn of(head: &http::request::Parts) -> Head {
        let mut headers = Vec::with_capacity(head.headers.len() * 48);
        for (n, v) in &head.headers {
            let (name, value) = (n.as_str().as_bytes(), v.as_bytes());
            // A header name is at most 64 KiB (`http` refuses longer ones); a value
            // longer than 4 GiB cannot be in a request weir read.
            let name_len = u16::try_from(name.len()).unwrap_or(u16::MAX);
            let value_len = u32::try_from(value.len()).unwrap_or(u32::MAX);
            headers.extend_from_slice(&name_len.to_le_bytes());
            headers.extend_from_slice(&value_len.to_le_bytes());
            headers.push(u8::from(v.is_sensitive()));
            headers.extend_from_slice(&name[..usize::from(name_len)]);
            headers.extend_from_slice(&value[..value_len as usize]);
        }
        Head {
            method: head.method.clone(),
            uri: head.uri.clone(),
            version: head.version,
            headers,
        }
    }

    /// The head of another attempt.
    fn parts(&self) -> http::request::Parts {
        let mut req = Request::new(());
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.version_mut() = self.version;
        let headers = req.headers_mut();
        let mut rest = &self.headers[..];
        while let Some((entry, tail)) = rest.split_first_chunk::<ENTRY_HEAD>() {
            let name_len = usize::from(u16::from_le_bytes([entry[0], entry[1]]));
            let value_len = u32::from_le_bytes([entry[2], entry[3], entry[4], entry[5]]) as usize;
            let Some((name, tail)) = tail.split_at_checked(name_len) else {
                break;
            };
            let Some((value, tail)) = tail.split_at_checked(value_len) else {
                break;
            };
            rest = tail;
            // Both were a valid name and value when copied, so they parse again; a
            // header that did not would be left out of the retry, not the request's
            // first attempt.
            match (
                http::HeaderName::from_bytes(name),
                http::HeaderValue::from_bytes(value),
            ) {
                (Ok(n), Ok(mut v)) => {
                    v.set_sensitive(entry[6] == 1);
                    headers.append(n, v);
                }
                _ => tracing::warn!(
                    header = %String::from_utf8_lossy(name),
                    "a request header did not survive its copy for a retry; the retry goes without it"
                ),
            }
        }
        req.into_parts().0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_never_below_the_minimum() {
        let base = Duration::from_millis(100);
        for n in 1..20 {
            let b = backoff(base, n);
            let expected = base * (1 << (n - 1).min(16));
            let floor = expected.min(base * 10);
            assert!(b >= floor, "retry {n}: {b:?} < {floor:?}");
            assert!(
                b < floor + floor / 2 + Duration::from_nanos(1),
                "retry {n}: {b:?}"
            );
        }
        assert_eq!(backoff(Duration::ZERO, 3), Duration::ZERO);
    }

    #[test]
    fn heads_are_copied_whole() {
        let (head, ()) = Request::post("/a?b=c")
            .version(http::Version::HTTP_10)
            .header("x-one", "1")
            .header("x-two", "2")
            .header("x-one", "3")
            .header("x-binary", &b"\x80\xfe obs-text\t"[..])
            .header("x-empty", "")
            .body(())
            .unwrap()
            .into_parts();
        let mut head = head;
        head.headers.get_mut("x-two").unwrap().set_sensitive(true);
        let copy = Head::of(&head).parts();
        assert_eq!(copy.version, http::Version::HTTP_10);
        assert!(copy.headers["x-two"].is_sensitive(), "sensitivity is kept");
        assert!(!copy.headers["x-one"].is_sensitive());
        let ones: Vec<_> = copy.headers.get_all("x-one").iter().collect();
        assert_eq!(ones, ["1", "3"], "repeated names keep their order");
        assert_eq!(copy.method, head.method);
        assert_eq!(copy.uri, head.uri);
        assert_eq!(copy.headers, head.headers);
    }
}
