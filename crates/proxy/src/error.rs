//! Request failures and the one place that turns them into HTTP responses.

use std::error::Error as _;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::authority::InvalidHost;
use crate::normalize::InvalidPath;
use crate::server::ProxyBody;

/// A boxed error from the upstream client, kept for logs.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a request could not be answered by an upstream.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyError {
    /// No virtual host or no rule matched the request.
    #[error("no route")]
    NoRoute,
    /// The request's host belongs to another listener of the socket than the one the
    /// connection's TLS server name chose (HTTP/2 connection reuse, or a client sending
    /// a Host unlike its SNI): 421, so that the client retries on a connection of its own.
    #[error("misdirected request: host not served by the listener of the TLS server name")]
    Misdirected,
    /// The request head cannot be routed (e.g. a Host header that is not text).
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    /// The request path cannot be normalized safely.
    #[error("bad request path: {0}")]
    InvalidPath(#[from] InvalidPath),
    /// The request's host is repeated, missing or malformed.
    #[error("bad request host: {0}")]
    InvalidHost(#[from] InvalidHost),
    /// The client's request body failed while it was sent upstream: malformed chunked
    /// encoding, a body cut short, an HTTP/2 stream reset by the client.
    #[error("client request body error: {0}")]
    ClientBody(#[source] BoxError),
    /// The chosen cluster is not in the snapshot, or every backend weight is 0.
    #[error("backend not found")]
    BackendNotFound,
    /// The cluster exists but has no endpoints.
    #[error("no healthy endpoints")]
    NoEndpoints,
    /// Connecting to the endpoint failed (refused, unreachable, DNS, connect timeout).
    #[error("upstream connect error: {0}")]
    Connect(#[source] BoxError),
    /// The upstream reset the connection or broke the protocol.
    #[error("upstream error: {0}")]
    Upstream(#[source] BoxError),
    /// The request or backend-request timeout (or, when the route sets neither, the
    /// listener's upstream-response timeout) expired before response headers arrived.
    #[error("upstream timeout")]
    Timeout,
    /// The request body delivered no data for the listener's body-idle timeout.
    #[error("request body timeout")]
    BodyTimeout,
    /// The request's body (its `Content-Length`, or the bytes streamed so far) or head is
    /// larger than a policy's `requestLimits` allow.
    #[error("request too large")]
    RequestTooLarge {
        /// 413 for a body, 431 for a head.
        head: bool,
    },
    /// The request head has more header fields than the listener allows (HTTP/2; hyper
    /// answers HTTP/1.1 heads over the limits itself, h2 answers oversized HTTP/2 heads).
    #[error("too many header fields")]
    TooManyHeaders,
    /// A local rate limit refused the request.
    #[error("rate limited by {}", policy.as_deref().unwrap_or("a policy"))]
    RateLimited {
        /// When the next request of the same key is allowed.
        retry_after: std::time::Duration,
        /// The limit's burst (`RateLimit-Limit`).
        limit: u32,
        /// The policy object (`namespace/name`) that set the limit.
        policy: Option<std::sync::Arc<str>>,
    },
    /// A global rate limit that fails closed cannot reach Redis (or none is configured).
    #[error("rate limit unavailable (policy {policy})")]
    RateLimitUnavailable {
        /// The policy object (`namespace/name`) that set the limit.
        policy: std::sync::Arc<str>,
    },
    /// A policy's concurrency limit: the client has as many requests in progress as it
    /// allows.
    #[error("too many requests in progress (policy {policy})")]
    TooManyInProgress {
        /// The policy object (`namespace/name`) that set the limit.
        policy: std::sync::Arc<str>,
    },
    /// A policy's client address rules refuse the client.
    #[error("client address refused (policy {policy})")]
    Forbidden {
        /// The policy object (`namespace/name`) whose rules refused it.
        policy: std::sync::Arc<str>,
    },
    /// A circuit breaker of the chosen cluster or endpoint refused the request (the
    /// limit is named in the response).
    #[error("circuit open: {}", .0.name())]
    Overloaded(crate::breaker::Overflow),
    /// An authentication policy found no valid credentials on the request.
    #[error("not authenticated (policy {policy})")]
    Unauthenticated {
        /// The policy object (`namespace/name`) that asks for credentials.
        policy: std::sync::Arc<str>,
        /// What the answer's `WWW-Authenticate` asks for.
        challenge: Challenge,
    },
    /// An external authorization service refused the request: its status and the
    /// headers of its answer weir passes on (`WWW-Authenticate`, `Location`,
    /// `Set-Cookie`).
    #[error("refused by external authorization (policy {policy}): {status}")]
    ExtAuthDenied {
        /// The policy object (`namespace/name`).
        policy: std::sync::Arc<str>,
        /// The status answered.
        status: StatusCode,
        /// Headers of the service's answer returned to the client.
        headers: std::sync::Arc<[(header::HeaderName, HeaderValue)]>,
    },
    /// An external authorization service did not answer (timeout, connection error, a
    /// 5xx) and the policy fails closed.
    #[error("external authorization unavailable (policy {policy})")]
    ExtAuthFailed {
        /// The policy object (`namespace/name`).
        policy: std::sync::Arc<str>,
        /// The policy's `statusOnError`.
        status: StatusCode,
    },
}

/// The credentials a `401` asks for (its `WWW-Authenticate`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Challenge {
    /// None named (API keys).
    None,
    /// Basic credentials for this realm.
    Basic(std::sync::Arc<str>),
    /// A bearer token (RFC 6750); `invalid_token` when one was sent and refused.
    Bearer {
        /// A token was sent and refused.
        invalid_token: bool,
    },
}

impl ProxyError {
    /// The failure of sending a request upstream. The request body streamed to the
    /// upstream is the client's, so an error *reading* it surfaces here too; it is the
    /// client's fault (400), not the upstream's (502). hyper reports it as a user error
    /// (`is_user`: "the user's Body stream yields an error") whose cause is the `hyper::Error`
    /// of the client connection's body; its other user errors carry no such cause. An
    /// HTTP/2 upstream stream is reset by hyper itself (neither the peer nor the h2
    /// library) only when the request body fails, so that reset is the client's fault too.
    pub(crate) fn upstream_send(err: BoxError) -> ProxyError {
        if client_body_failed(&*err) {
            ProxyError::ClientBody(err)
        } else {
            ProxyError::Upstream(err)
        }
    }
    /// The failure of the request body while weir's HTTP/1.1 client sent it: the
    /// client's fault when its connection failed (a `hyper::Error` of the client's
    /// connection, as [`ProxyError::upstream_send`] finds through hyper's clients); else
    /// (a body weir itself ended: idle, over its cap, taken by a retry) an upstream error,
    /// which the body's [`crate::body::Stall`] flag explains when it gave up.
    pub(crate) fn request_body(err: BoxError) -> ProxyError {
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(&*err);
        while let Some(e) = next {
            if e.is::<hyper::Error>()
                || e.is::<crate::h1::server::BodyCut>()
                || e.is::<weir_h2::server::StreamError>()
            {
                return ProxyError::ClientBody(err);
            }
            next = e.source();
        }
        ProxyError::Upstream(err)
    }
}

/// Whether `err`'s chain shows the request body failing (see [`ProxyError::upstream_send`]).
fn client_body_failed(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && h.is_user()
            && h.source().is_some_and(|cause| {
                cause.is::<hyper::Error>()
                    || cause.is::<crate::h1::server::BodyCut>()
                    || cause.is::<weir_h2::server::StreamError>()
            })
        {
            return true;
        }
        if let Some(h2) = e.downcast_ref::<h2::Error>()
            && h2.is_reset()
            && !h2.is_remote()
            && !h2.is_library()
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// Whose fault a failure is (a label for metrics and logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The request cannot be served as sent (no route, malformed head).
    Client,
    /// The backend side failed: missing or empty cluster, connect error, reset, timeout.
    Upstream,
    /// A policy refused the request (rate limit).
    Policy,
}

impl Fault {
    /// Lower-case label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Fault::Client => "client",
            Fault::Upstream => "upstream",
            Fault::Policy => "policy",
        }
    }
}

/// How an error reaches the client: a plain-text HTTP response, or, for a gRPC request
/// (`content-type: application/grpc...`), the gRPC way: HTTP 200 with `grpc-status` and
/// `grpc-message` (a trailers-only response), since gRPC clients read the status from
/// there and report a bare HTTP 502 as an opaque protocol error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ResponseShape {
    /// Plain-text HTTP.
    Http,
    /// gRPC status in the response headers.
    Grpc,
}

impl ResponseShape {
    /// The shape the request asks for, read from its `content-type`.
    pub(crate) fn of(headers: &http::HeaderMap) -> ResponseShape {
        let grpc = headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| is_grpc_content_type(v.as_bytes()));
        if grpc {
            ResponseShape::Grpc
        } else {
            ResponseShape::Http
        }
    }
}

/// `application/grpc`, optionally followed by `+proto`, `+json`, ... or parameters.
fn is_grpc_content_type(v: &[u8]) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    v.len() >= GRPC.len()
        && v[..GRPC.len()].eq_ignore_ascii_case(GRPC)
        && matches!(v.get(GRPC.len()), None | Some(b'+' | b';'))
}

/// gRPC status codes (grpc/doc/statuscodes.md) weir answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum GrpcStatus {
    DeadlineExceeded = 4,
    ResourceExhausted = 8,
    Unimplemented = 12,
    Internal = 13,
    PermissionDenied = 7,
    Unavailable = 14,
    Unauthenticated = 16,
}

impl GrpcStatus {
    fn header(self) -> HeaderValue {
        HeaderValue::from(u16::from(self as u8))
    }
}

/// Turns a failure into the response sent to the client, in the request's shape, and
/// says whose fault it was.
pub(crate) fn error_response(
    err: &ProxyError,
    shape: ResponseShape,
) -> (Response<ProxyBody>, Fault) {
    let (status, fault, body) = http_error(err);
    let mut resp = match shape {
        // 421 is for the client's HTTP stack (it opens another connection and retries),
        // not for the gRPC layer, so a gRPC request gets it as it is.
        ResponseShape::Grpc if !matches!(err, ProxyError::Misdirected) => {
            grpc_error(grpc_status(err), body.trim_end())
        }
        _ => text_response(status, Bytes::from_static(body.as_bytes())),
    };
    if let ProxyError::RateLimited {
        retry_after, limit, ..
    } = err
    {
        // Whole seconds, rounded up (RFC 9110 §10.2.3; the RateLimit header fields draft).
        let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
        let h = resp.headers_mut();
        h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        h.insert("ratelimit-limit", HeaderValue::from(*limit));
        h.insert("ratelimit-remaining", HeaderValue::from_static("0"));
        h.insert("ratelimit-reset", HeaderValue::from(secs));
    }
    if let ProxyError::Overloaded(why) = err {
        resp.headers_mut()
            .insert(CIRCUIT_OPEN, HeaderValue::from_static(why.name()));
    }
    if let ProxyError::ExtAuthDenied { headers, .. } = err {
        for (name, value) in headers.iter() {
            resp.headers_mut().append(name.clone(), value.clone());
        }
    }
    if let ProxyError::Unauthenticated { challenge, .. } = err {
        let value = match challenge {
            Challenge::None => None,
            // The realm was checked to be a quoted-string's content when configured.
            Challenge::Basic(realm) => {
                HeaderValue::from_str(&format!("Basic realm=\"{realm}\", charset=\"UTF-8\"")).ok()
            }
            Challenge::Bearer { invalid_token } => {
                Some(HeaderValue::from_static(if *invalid_token {
                    "Bearer error=\"invalid_token\""
                } else {
                    "Bearer"
                }))
            }
        };
        if let Some(v) = value {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
    }
    (resp, fault)
}

/// The HTTP status, fault and plain-text body of a failure.
fn http_error(err: &ProxyError) -> (StatusCode, Fault, &'static str) {
    match err {
        ProxyError::NoRoute => (StatusCode::NOT_FOUND, Fault::Client, "no route\n"),
        ProxyError::Misdirected => (
            StatusCode::MISDIRECTED_REQUEST,
            Fault::Client,
            "misdirected request\n",
        ),
        ProxyError::BadRequest(_) | ProxyError::InvalidPath(_) | ProxyError::InvalidHost(_) => {
            (StatusCode::BAD_REQUEST, Fault::Client, "bad request\n")
        }
        ProxyError::ClientBody(_) => (StatusCode::BAD_REQUEST, Fault::Client, "bad request body\n"),
        ProxyError::BackendNotFound => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Fault::Upstream,
            "backend not found\n",
        ),
        ProxyError::NoEndpoints => (
            StatusCode::SERVICE_UNAVAILABLE,
            Fault::Upstream,
            "no healthy endpoints\n",
        ),
        ProxyError::Overloaded(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Fault::Upstream,
            why.message(),
        ),
        ProxyError::Connect(_) => (
            StatusCode::BAD_GATEWAY,
            Fault::Upstream,
            "upstream connect error\n",
        ),
        ProxyError::Upstream(_) => (
            StatusCode::BAD_GATEWAY,
            Fault::Upstream,
            "upstream reset or protocol error\n",
        ),
        ProxyError::Timeout => (
            StatusCode::GATEWAY_TIMEOUT,
            Fault::Upstream,
            "upstream timeout\n",
        ),
        ProxyError::BodyTimeout => (
            StatusCode::REQUEST_TIMEOUT,
            Fault::Client,
            "request body timeout\n",
        ),
        ProxyError::RequestTooLarge { head: false } => (
            StatusCode::PAYLOAD_TOO_LARGE,
            Fault::Client,
            "request body too large\n",
        ),
        ProxyError::RequestTooLarge { head: true } => (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Fault::Client,
            "request header fields too large\n",
        ),
        ProxyError::TooManyHeaders => (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Fault::Client,
            "too many header fields\n",
        ),
        ProxyError::RateLimited { .. } => (
            StatusCode::TOO_MANY_REQUESTS,
            Fault::Policy,
            "too many requests\n",
        ),
        ProxyError::Unauthenticated { .. } => {
            (StatusCode::UNAUTHORIZED, Fault::Policy, "unauthorized\n")
        }
        ProxyError::RateLimitUnavailable { .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            Fault::Policy,
            "rate limit unavailable\n",
        ),
        ProxyError::Forbidden { .. } => (StatusCode::FORBIDDEN, Fault::Policy, "forbidden\n"),
        // ingress-nginx's `limit-connections` answers 503.
        ProxyError::TooManyInProgress { .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            Fault::Policy,
            "too many requests in progress\n",
        ),
        ProxyError::ExtAuthDenied { status, .. } => (
            *status,
            Fault::Policy,
            match *status {
                StatusCode::UNAUTHORIZED => "unauthorized\n",
                StatusCode::FORBIDDEN => "forbidden\n",
                s if s.is_redirection() => "",
                _ => "refused by authorization service\n",
            },
        ),
        ProxyError::ExtAuthFailed { status, .. } => (
            *status,
            Fault::Upstream,
            "authorization service unavailable\n",
        ),
    }
}

/// The gRPC status of a failure: the HTTP-to-gRPC mapping gRPC documents
/// (doc/http-grpc-status-mapping.md: 400 → INTERNAL, 404 → UNIMPLEMENTED, 502/503/504 →
/// UNAVAILABLE), except that an expired timeout is DEADLINE_EXCEEDED, which is what a
/// gRPC client reports for its own deadline, and that an invalid or missing backend is
/// UNAVAILABLE (GRPCRoute: "requests that would have otherwise been routed to an invalid
/// backend" get `UNAVAILABLE`).
fn grpc_status(err: &ProxyError) -> GrpcStatus {
    match err {
        ProxyError::NoRoute => GrpcStatus::Unimplemented,
        ProxyError::Misdirected => GrpcStatus::Unavailable,
        ProxyError::BadRequest(_)
        | ProxyError::InvalidPath(_)
        | ProxyError::InvalidHost(_)
        | ProxyError::ClientBody(_)
        | ProxyError::TooManyHeaders => GrpcStatus::Internal,
        ProxyError::BackendNotFound
        | ProxyError::NoEndpoints
        | ProxyError::Overloaded(_)
        | ProxyError::Connect(_)
        | ProxyError::Upstream(_) => GrpcStatus::Unavailable,
        ProxyError::Timeout | ProxyError::BodyTimeout => GrpcStatus::DeadlineExceeded,
        ProxyError::RateLimited { .. } | ProxyError::RequestTooLarge { .. } => {
            GrpcStatus::ResourceExhausted
        }
        ProxyError::RateLimitUnavailable { .. } => GrpcStatus::Unavailable,
        ProxyError::TooManyInProgress { .. } => GrpcStatus::ResourceExhausted,
        ProxyError::Unauthenticated { .. } => GrpcStatus::Unauthenticated,
        ProxyError::Forbidden { .. } => GrpcStatus::PermissionDenied,
        ProxyError::ExtAuthDenied { status, .. } if *status == StatusCode::UNAUTHORIZED => {
            GrpcStatus::Unauthenticated
        }
        ProxyError::ExtAuthDenied { .. } => GrpcStatus::PermissionDenied,
        ProxyError::ExtAuthFailed { .. } => GrpcStatus::Unavailable,
    }
}

/// A trailers-only gRPC response: HTTP 200, no body, the status in the headers.
fn grpc_error(status: GrpcStatus, message: &'static str) -> Response<ProxyBody> {
    let mut resp = Response::new(ProxyBody::full(Bytes::new()));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert(GRPC_STATUS, status.header());
    // The messages are fixed ASCII without '%', so they need no percent-encoding.
    h.insert(GRPC_MESSAGE, HeaderValue::from_static(message));
    resp
}

/// Names the circuit-breaker limit that refused a request (as Envoy's
/// `x-envoy-overloaded` says that one did).
const CIRCUIT_OPEN: header::HeaderName = header::HeaderName::from_static("weir-circuit-open");

const GRPC_STATUS: header::HeaderName = header::HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: header::HeaderName = header::HeaderName::from_static("grpc-message");

/// A plain-text response with a fixed body.
pub(crate) fn text_response(status: StatusCode, body: Bytes) -> Response<ProxyBody> {
    let mut resp = Response::new(ProxyBody::full(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(ct: &'static str) -> ResponseShape {
        let mut h = http::HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
        ResponseShape::of(&h)
    }

    #[test]
    fn grpc_requests_are_recognised_by_content_type() {
        assert_eq!(shape("application/grpc"), ResponseShape::Grpc);
        assert_eq!(shape("application/grpc+proto"), ResponseShape::Grpc);
        assert_eq!(shape("Application/GRPC;charset=utf-8"), ResponseShape::Grpc);
        assert_eq!(shape("application/grpc-web"), ResponseShape::Http);
        assert_eq!(shape("application/grpcx"), ResponseShape::Http);
        assert_eq!(shape("application/json"), ResponseShape::Http);
        assert_eq!(
            ResponseShape::of(&http::HeaderMap::new()),
            ResponseShape::Http
        );
    }

    #[test]
    fn grpc_errors_are_http_200_with_a_grpc_status() {
        let cases = [
            (ProxyError::NoRoute, "12"),
            (ProxyError::NoEndpoints, "14"),
            (ProxyError::BackendNotFound, "14"),
            (ProxyError::Timeout, "4"),
            (
                ProxyError::Overloaded(crate::breaker::Overflow::ClusterRequests),
                "14",
            ),
            (ProxyError::BadRequest("x"), "13"),
        ];
        for (err, code) in cases {
            let (resp, _) = error_response(&err, ResponseShape::Grpc);
            assert_eq!(resp.status(), StatusCode::OK, "{err}");
            assert_eq!(resp.headers()["grpc-status"], code, "{err}");
            assert_eq!(resp.headers()["content-type"], "application/grpc");
            assert!(!resp.headers()["grpc-message"].is_empty());
            let (http, _) = error_response(&err, ResponseShape::Http);
            assert_ne!(http.status(), StatusCode::OK, "{err}");
            assert!(http.headers().get("grpc-status").is_none());
        }
    }
}
