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
use weir_model::{Action, EndpointAddr, RouteRule, Timeouts};

use crate::body::RequestBody;
use crate::error::ProxyError;
use crate::policy::Applied;
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

/// Sends `head` and `body` to `first`, then retries as the rule says (see the module docs).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn forward(
    ctx: Arc<ConnContext>,
    rule: Arc<RouteRule>,
    applied: Applied,
    first: Target,
    head: http::request::Parts,
    body: hyper::body::Incoming,
    cors_origin: Option<crate::cors::Allowed>,
    start: Instant,
    trace: Option<crate::trace::AttemptTrace>,
) -> Retried {
    let timeouts = &applied.timeouts;
    let body = RequestBody::new(body, ctx.timeouts.body_idle).capped(applied.max_body());
    let mut first = first;
    let set_header = first.set_header.take();
    let with_cookie = |r: Result<Response<ProxyBody>, ProxyError>| {
        r.map(|mut resp| {
            if let Some(h) = &set_header {
                resp.headers_mut().append(h.0.clone(), h.1.clone());
            }
            resp
        })
    };
    let Some(retry) = applied.retry(&rule) else {
        // Not reached: the caller checked. One attempt, as without retries.
        let addr = first.addr.clone();
        let backend = first.backend;
        let result = attempt(&ctx, &rule, timeouts, first, clone_head(&head), body, start)
            .await
            .map(|(resp, lease)| {
                relay(
                    &rule,
                    backend_filters(&rule, backend),
                    cors_origin.as_ref(),
                    None,
                    resp,
                    lease,
                )
            });
        return (with_cookie(result), 1, addr);
    };
    let body = body.replayable(retry.replay_body as usize);
    let health = first.in_flight.cluster();
    if let Some(h) = &health {
        h.deposit();
    }
    let idempotent = retry.non_idempotent || is_idempotent(&head.method);
    let mut target = first;
    let mut attempts = 1u32;
    loop {
        let addr = target.addr.clone();
        let backend = target.backend;
        let mut parts = clone_head(&head);
        let span = trace
            .as_ref()
            .map(|t| (t.start(attempts, &mut parts.headers), SystemTime::now()));
        let result = attempt(&ctx, &rule, timeouts, target, parts, body.body(), start).await;
        if let (Some(t), Some((id, at))) = (&trace, span) {
            let outcome = match &result {
                Ok((resp, _)) => Ok(resp.status().as_u16()),
                Err(e) => Err(error_type(e)),
            };
            t.ended(id, attempts, at, addr.clone(), outcome);
        }
        let retryable = match &result {
            Ok((resp, _)) => idempotent && retry.retries_status(resp.status().as_u16()),
            Err(ProxyError::Connect(_)) => true,
            Err(ProxyError::Upstream(_) | ProxyError::Timeout) => idempotent,
            Err(_) => false,
        };
        let wait = backoff(retry.backoff, attempts);
        let time_left = timeouts
            .request_limit()
            .is_none_or(|limit| start.elapsed() + wait < limit);
        let again = retryable
            && attempts <= retry.attempts
            && body.can_replay()
            && time_left
            && health.as_ref().is_none_or(|h| h.retry(Instant::now()));
        if !again {
            let result = match result {
                Ok((resp, lease)) => Ok(relay(
                    &rule,
                    backend_filters(&rule, backend),
                    cors_origin.as_ref(),
                    None,
                    resp,
                    lease,
                )),
                Err(e) => Err(e),
            };
            return (with_cookie(result), attempts, addr);
        }
        drop(result);
        tokio::time::sleep(wait).await;
        attempts += 1;
        target = match choose_again(&ctx, &rule, &addr, applied.client_certificate()) {
            Ok(t) => t,
            Err(e) => return (Err(e), attempts - 1, addr),
        };
    }
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

/// A copy of the request head (method, URI, version, headers; extensions are not
/// needed upstream).
fn clone_head(head: &http::request::Parts) -> http::request::Parts {
    let mut b = Request::builder()
        .method(head.method.clone())
        .uri(head.uri.clone())
        .version(head.version);
    if let Some(h) = b.headers_mut() {
        *h = head.headers.clone();
    }
    let (parts, ()) = b.body(()).unwrap_or_default().into_parts();
    parts
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
            .header("x-one", "1")
            .header("x-two", "2")
            .body(())
            .unwrap()
            .into_parts();
        let copy = clone_head(&head);
        assert_eq!(copy.method, head.method);
        assert_eq!(copy.uri, head.uri);
        assert_eq!(copy.headers, head.headers);
    }
}
