//! Error responses replaced by another cluster's answer ([`InterceptErrors`]: nginx's
//! `proxy_intercept_errors` with an `error_page` that proxies, as ingress-nginx's
//! `custom-http-errors` and `default-backend` configure it).
//!
//! The phase runs after the response head (of the last attempt, retries included) or
//! the gateway's own error is known, before [`crate::server`]'s `finish`: a status the
//! filter lists (or a backend without endpoints, when it says so) drops that response
//! and sends `GET /` to the filter's cluster with the `X-*` headers describing the
//! error; that response is relayed as it is (status included: the error backend is
//! expected to answer with the right code). One request, no retry, bounded by the
//! listener's upstream-response timeout. When the error cluster is missing or has no
//! endpoint, the original response stands. gRPC requests are never intercepted (their
//! errors are statuses in trailers, not pages).

use std::sync::Arc;
use std::time::Instant;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, Version};
use weir_model::{Filter, InterceptErrors, RouteKind, RouteRule, UpstreamProtocol};

use crate::body::RequestBody;
use crate::error::{ProxyError, ResponseShape, error_response};
use crate::server::{Bounded, ConnContext, ProxyBody, strip_hop_by_hop, upstream_uri};

/// The rule's InterceptErrors filter, if it has one.
pub(crate) fn of(rule: &RouteRule) -> Option<&Arc<InterceptErrors>> {
    rule.filters.iter().find_map(|f| match f {
        Filter::InterceptErrors(e) => Some(e),
        _ => None,
    })
}

/// What an intercepted request sends to the error cluster, read before the request is
/// forwarded (its head is consumed then).
pub(crate) struct Pending {
    errors: Arc<InterceptErrors>,
    /// `Host`, `X-Request-ID` and the `X-*` headers other than `X-Code`.
    headers: HeaderMap,
}

fn header_value(s: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(s).ok()
}

impl Pending {
    /// Reads the request (`head`) routed by `rule` to `cluster` (a cluster key, whose
    /// Service gives `X-Namespace`, `X-Service-Name` and `X-Service-Port`).
    pub(crate) fn new(
        errors: &Arc<InterceptErrors>,
        rule: &RouteRule,
        cluster: Option<&weir_model::ClusterKey>,
        uri: &http::Uri,
        headers: &HeaderMap,
    ) -> Pending {
        let mut out = HeaderMap::new();
        for name in [header::HOST, HeaderName::from_static("x-request-id")] {
            if let Some(v) = headers.get(&name) {
                out.insert(name, v.clone());
            }
        }
        if let Some(v) = headers.get(header::ACCEPT) {
            out.insert(HeaderName::from_static("x-format"), v.clone());
        }
        let original = uri.path_and_query().map_or("/", |p| p.as_str());
        if let Some(v) = header_value(original) {
            out.insert(HeaderName::from_static("x-original-uri"), v);
        }
        let target = cluster.and_then(|c| c.backend_target());
        let namespace = match &target {
            Some(weir_model::PolicyTarget::Backend { namespace, .. }) => Some(namespace.clone()),
            _ => None,
        }
        .unwrap_or_else(|| rule.route.namespace.clone());
        if let Some(v) = header_value(&namespace) {
            out.insert(HeaderName::from_static("x-namespace"), v);
        }
        if rule.route.kind == RouteKind::Ingress
            && let Some(v) = header_value(&rule.route.name)
        {
            out.insert(HeaderName::from_static("x-ingress-name"), v);
        }
        if let Some(weir_model::PolicyTarget::Backend { name, .. }) = &target
            && let Some(v) = header_value(name)
        {
            out.insert(HeaderName::from_static("x-service-name"), v);
        }
        if let Some(port) = cluster.and_then(|c| c.service_port()) {
            out.insert(HeaderName::from_static("x-service-port"), port.into());
        }
        Pending {
            errors: Arc::clone(errors),
            headers: out,
        }
    }

    /// The status of `result` if it is to be replaced.
    fn replaced(&self, result: &Result<Response<ProxyBody>, ProxyError>) -> Option<u16> {
        match result {
            Ok(resp) => {
                let code = resp.status().as_u16();
                self.errors.replaces(code).then_some(code)
            }
            Err(e) => {
                let code = error_response(e, ResponseShape::Http).0.status().as_u16();
                let empty = matches!(e, ProxyError::NoEndpoints) && self.errors.no_endpoints;
                (empty || self.errors.replaces(code)).then_some(code)
            }
        }
    }
}

/// The phase: `result` as sent to the client, replaced by the error cluster's response
/// when the filter says so.
pub(crate) async fn after(
    ctx: Arc<ConnContext>,
    pending: Pending,
    result: Result<Response<ProxyBody>, ProxyError>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let Some(code) = pending.replaced(&result) else {
        return result;
    };
    let snapshot = ctx.shared.snapshots.load();
    let Some(cluster) = snapshot.cluster(&pending.errors.cluster).cloned() else {
        tracing::debug!(cluster = %pending.errors.cluster, "error cluster missing; the error stands");
        return result;
    };
    drop(snapshot);
    let now = Instant::now();
    let tls = match cluster.tls() {
        None => None,
        Some(Ok(t)) => Some(Arc::clone(t)),
        Some(Err(_)) => return result,
    };
    let Ok(picked) = cluster.admit(now, None) else {
        return result;
    };
    let addr = picked.endpoint.addr.clone();
    let gate = cluster.connect_gate(picked.state);
    let in_flight = picked.state.start_at(now);
    // The error's own response (and its connection) is not needed any more.
    drop(result);
    let protocol = cluster.cluster.protocol;
    let mut req = Request::new(RequestBody::empty());
    *req.method_mut() = Method::GET;
    let path = http::uri::PathAndQuery::from_static("/");
    match protocol {
        UpstreamProtocol::Http1 => {
            *req.uri_mut() = http::Uri::from(path);
            *req.version_mut() = Version::HTTP_11;
        }
        UpstreamProtocol::H2c => {
            let scheme = if tls.is_some() {
                http::uri::Scheme::HTTPS
            } else {
                http::uri::Scheme::HTTP
            };
            *req.uri_mut() = upstream_uri(&addr, scheme, path)?;
            *req.version_mut() = Version::HTTP_2;
        }
    }
    *req.headers_mut() = pending.headers;
    req.headers_mut()
        .insert(HeaderName::from_static("x-code"), code.into());
    if protocol == UpstreamProtocol::H2c {
        req.headers_mut().remove(header::HOST);
    }
    let limit = ctx.timeouts.upstream_response;
    let send = ctx
        .shared
        .upstreams
        .send(protocol, &addr, tls.as_ref(), req, gate);
    let sent = Bounded::new((!limit.is_zero()).then_some(limit), send).await;
    in_flight.finish(crate::server::outcome(&sent));
    let resp = sent?;
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers, false);
    Ok(Response::from_parts(parts, ProxyBody::upstream(body)))
}
