//! CORS — the HTTPRoute `CORS` filter, or a TrafficPolicy's `cors` when the rule has no
//! filter of its own (one implementation for both): preflights answered here, actual
//! requests' responses given the CORS headers. Runs right after routing, before the
//! policy checks, so a
//! browser's preflight is never refused by an authentication or rate-limit check meant
//! for the request it precedes (agentgateway's order).
//!
//! The allowed origin is always echoed (never `*`), which is valid with and without
//! credentials; a `*` in `allowMethods`/`allowHeaders` answers with what the preflight
//! asked for, since browsers read a literal `*` as a name when credentials are allowed.

use bytes::Bytes;
use http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE,
    ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD, HeaderMap, HeaderValue, ORIGIN,
    VARY,
};
use std::sync::Arc;

use http::{Method, Response, StatusCode};
use weir_model::{Cors, CorsNames, Filter, RouteRule};

use crate::server::ProxyBody;

/// What the rule's CORS filter makes of a request.
pub(crate) enum Check {
    /// No CORS filter, no `Origin`, or an actual request from an origin not allowed:
    /// handled as if there were no filter.
    Pass,
    /// A preflight: answered here (204 with the CORS headers, or 403 for an origin not
    /// allowed).
    Answer(Response<ProxyBody>),
    /// An actual request from an allowed origin: its response gets the CORS headers.
    Allowed(Allowed),
}

/// An actual request's allowed origin, with the settings that allowed it (for its
/// response's headers).
#[derive(Clone, Debug)]
pub(crate) struct Allowed {
    cors: Arc<Cors>,
    origin: HeaderValue,
}

/// The rule's CORS filter, if it has one (a scan of the rule's few filters).
pub(crate) fn of(rule: &RouteRule) -> Option<&Arc<Cors>> {
    rule.filters.iter().find_map(|f| match f {
        Filter::Cors(c) => Some(c),
        _ => None,
    })
}

/// Checks a request against the CORS settings that apply to it: the rule's filter, else
/// a policy's (`None`: no CORS handling).
pub(crate) fn check(cors: Option<&Arc<Cors>>, method: &Method, headers: &HeaderMap) -> Check {
    let Some(cors) = cors else {
        return Check::Pass;
    };
    let Some(origin) = headers.get(ORIGIN) else {
        return Check::Pass;
    };
    let allowed = origin.to_str().is_ok_and(|o| cors.allows(o));
    let preflight =
        method == Method::OPTIONS && headers.contains_key(ACCESS_CONTROL_REQUEST_METHOD);
    match (preflight, allowed) {
        (true, true) => Check::Answer(preflight_answer(cors, origin, headers)),
        (true, false) => {
            let mut resp = empty(StatusCode::FORBIDDEN);
            resp.headers_mut()
                .insert(VARY, HeaderValue::from_static("origin"));
            Check::Answer(resp)
        }
        (false, true) => Check::Allowed(Allowed {
            cors: Arc::clone(cors),
            origin: origin.clone(),
        }),
        (false, false) => Check::Pass,
    }
}

/// Adds the CORS headers of an allowed actual request to its response's headers (they
/// replace the backend's own).
pub(crate) fn apply(allowed: &Allowed, headers: &mut HeaderMap) {
    common(&allowed.cors, &allowed.origin, headers);
}

/// The headers of every answer to an allowed origin.
fn common(cors: &Cors, origin: &HeaderValue, headers: &mut HeaderMap) {
    let expose = match &cors.expose_headers {
        // With credentials a browser reads `*` as a header name, so the names of the
        // response's own headers are listed instead (none on a preflight).
        CorsNames::Any if cors.allow_credentials => {
            let names: Vec<&str> = headers.keys().map(|n| n.as_str()).collect();
            (!names.is_empty())
                .then(|| HeaderValue::try_from(names.join(", ")).ok())
                .flatten()
        }
        CorsNames::Any => Some(HeaderValue::from_static("*")),
        CorsNames::Listed(v) => joined(v),
    };
    headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    if cors.allow_credentials {
        headers.insert(
            ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
    if let Some(v) = expose {
        headers.insert(ACCESS_CONTROL_EXPOSE_HEADERS, v);
    }
    headers.append(VARY, HeaderValue::from_static("origin"));
}

/// 204 with the allowed methods and headers, the cache time and the common headers.
fn preflight_answer(cors: &Cors, origin: &HeaderValue, req: &HeaderMap) -> Response<ProxyBody> {
    let mut resp = empty(StatusCode::NO_CONTENT);
    let h = resp.headers_mut();
    common(cors, origin, h);
    let asked = |name| req.get(name).cloned();
    let methods = match &cors.allow_methods {
        CorsNames::Any => asked(ACCESS_CONTROL_REQUEST_METHOD),
        CorsNames::Listed(v) => joined(v),
    };
    if let Some(m) = methods {
        h.insert(ACCESS_CONTROL_ALLOW_METHODS, m);
    }
    let allowed_headers = match &cors.allow_headers {
        CorsNames::Any => asked(ACCESS_CONTROL_REQUEST_HEADERS),
        CorsNames::Listed(v) => joined(v),
    };
    if let Some(v) = allowed_headers {
        h.insert(ACCESS_CONTROL_ALLOW_HEADERS, v);
    }
    h.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from(cors.max_age));
    resp
}

/// `a, b, c`; `None` for an empty list (or, not reached after the translator's checks,
/// names that are not valid in a header value).
fn joined(names: &[std::sync::Arc<str>]) -> Option<HeaderValue> {
    if names.is_empty() {
        return None;
    }
    HeaderValue::try_from(names.join(", ")).ok()
}

fn empty(status: StatusCode) -> Response<ProxyBody> {
    let mut resp = Response::new(ProxyBody::full(Bytes::new()));
    *resp.status_mut() = status;
    resp
}
