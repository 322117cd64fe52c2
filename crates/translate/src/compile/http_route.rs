//! HTTPRoute → compiled rules (independent of the listeners the route attaches to).

use std::sync::Arc;
use std::time::Duration;

use weir_api::{
    HttpRoute, HttpRouteFilter, HttpRouteRule, Kind, ObjectKey, ParentReference, Reason,
};
use weir_model::{Action, Filter, PathMatch, Redirect, RequestMatch, Retry, Timeouts};

use crate::compile::backend::RefError;
use crate::compile::backend_ref::{RouteCtx, forward, mirror};
use crate::compile::cors;
use crate::compile::duration;
use crate::compile::fields::{
    compile_match, direct_response_of, exact_host, header_modifier, path_modifier,
};
use crate::compile::order::Age;
use crate::compile::route_kind::{CompiledRoute, RouteKind, RouteObject};
use crate::compile::rules::{CompiledRule, RouteId, compile_rules};
use crate::store::Store;

impl RouteObject for HttpRoute {
    const KIND: RouteKind = RouteKind::Http;

    fn generation(&self) -> Option<i64> {
        self.metadata.generation()
    }

    fn parent_refs(&self) -> &[ParentReference] {
        &self.spec.parent_refs
    }

    fn compile(&self, store: &Store, key: &ObjectKey, age: &Age) -> CompiledRoute {
        compile(store, key, age, self)
    }
}

/// Compiles `route` (stored under `key`, with precedence `age`).
fn compile(store: &Store, key: &ObjectKey, age: &Age, route: &HttpRoute) -> CompiledRoute {
    let id = RouteId {
        store,
        key,
        age,
        kind: HttpRoute::KIND,
    };
    compile_rules(id, &route.spec.hostnames, &route.spec.rules, compile_rule)
}

fn compile_rule(
    ctx: &mut RouteCtx<'_>,
    rule: &HttpRouteRule,
    field: &str,
) -> Result<CompiledRule<RequestMatch>, String> {
    let mut matches = Vec::new();
    for (j, m) in rule.matches.iter().enumerate() {
        matches.push(compile_match(m, &format!("{field}.matches[{j}]"))?);
    }
    if matches.is_empty() {
        matches.push(RequestMatch {
            path: PathMatch::Prefix("/".into()),
            headers: vec![],
            query: vec![],
            method: None,
        });
    }
    let all_prefix = matches
        .iter()
        .all(|m| matches!(m.path, PathMatch::Prefix(_)));
    let mut filters = Vec::new();
    let mut redirect = None;
    let mut direct: Option<(usize, String)> = None;
    let mut rewrite = false;
    for (j, f) in rule.filters.iter().enumerate() {
        let ff = format!("{field}.filters[{j}]");
        let missing = |name: &str| format!("{ff}.{name}: required for type {}", f.type_);
        match f.type_.as_str() {
            "RequestHeaderModifier" | "ResponseHeaderModifier" => {
                filters.push(header_filter(f, &ff)?);
            }
            "URLRewrite" => {
                let u = f
                    .url_rewrite
                    .as_ref()
                    .ok_or_else(|| missing("urlRewrite"))?;
                if rewrite {
                    return Err(format!("{ff}: only one URLRewrite filter is allowed"));
                }
                rewrite = true;
                let fu = format!("{ff}.urlRewrite");
                let hostname = u
                    .hostname
                    .as_deref()
                    .map(|h| exact_host(h, &format!("{fu}.hostname")))
                    .transpose()?;
                let path = u
                    .path
                    .as_ref()
                    .map(|p| path_modifier(p, all_prefix, &format!("{fu}.path")))
                    .transpose()?;
                filters.push(Filter::UrlRewrite { hostname, path });
            }
            "RequestRedirect" => {
                let r = f
                    .request_redirect
                    .as_ref()
                    .ok_or_else(|| missing("requestRedirect"))?;
                if redirect.is_some() {
                    return Err(format!("{ff}: only one RequestRedirect filter is allowed"));
                }
                let fr = format!("{ff}.requestRedirect");
                let scheme = match r.scheme.as_deref() {
                    None => None,
                    Some(s @ ("http" | "https")) => Some(Arc::from(s)),
                    Some(s) => return Err(format!("{fr}.scheme: {s:?} is not http or https")),
                };
                let hostname = r
                    .hostname
                    .as_deref()
                    .map(|h| exact_host(h, &format!("{fr}.hostname")))
                    .transpose()?;
                let path = r
                    .path
                    .as_ref()
                    .map(|p| path_modifier(p, all_prefix, &format!("{fr}.path")))
                    .transpose()?;
                let port = match r.port {
                    None => None,
                    Some(p) => Some(
                        u16::try_from(p)
                            .ok()
                            .filter(|p| *p != 0)
                            .ok_or_else(|| format!("{fr}.port: {p} is not a valid port"))?,
                    ),
                };
                let status = match r.status_code.unwrap_or(302) {
                    s @ (301 | 302 | 303 | 307 | 308) => s as u16,
                    s => {
                        return Err(format!(
                            "{fr}.statusCode: {s} is not one of 301, 302, 303, 307, 308"
                        ));
                    }
                };
                redirect = Some(Redirect {
                    scheme,
                    hostname,
                    path,
                    port,
                    status,
                });
            }
            "ExtensionRef" => {
                let e = f
                    .extension_ref
                    .as_ref()
                    .ok_or_else(|| missing("extensionRef"))?;
                if e.group != "weir.dev" || e.kind != "DirectResponse" {
                    return Err(format!(
                        "{ff}.extensionRef: unsupported extension {}/{} (weir supports weir.dev/DirectResponse)",
                        e.group, e.kind
                    ));
                }
                if direct.is_some() {
                    return Err(format!("{ff}: only one DirectResponse is allowed"));
                }
                direct = Some((j, e.name.clone()));
            }
            "RequestMirror" => {
                let m = f
                    .request_mirror
                    .as_ref()
                    .ok_or_else(|| missing("requestMirror"))?;
                if let Some(filter) = mirror(ctx, m, &format!("{ff}.requestMirror"))? {
                    filters.push(filter);
                }
            }
            "CORS" => {
                let c = f.cors.as_ref().ok_or_else(|| missing("cors"))?;
                if filters.iter().any(|f| matches!(f, Filter::Cors(_))) {
                    return Err(format!("{ff}: only one CORS filter is allowed"));
                }
                filters.push(Filter::Cors(Arc::new(cors::compile(
                    c,
                    &format!("{ff}.cors"),
                )?)));
            }
            other => return Err(format!("{ff}.type: unsupported filter type {other:?}")),
        }
    }
    if redirect.is_some() && (direct.is_some() || rewrite) {
        return Err(format!(
            "{field}.filters: RequestRedirect cannot be combined with URLRewrite or a DirectResponse"
        ));
    }
    if (redirect.is_some() || direct.is_some()) && !rule.backend_refs.is_empty() {
        return Err(format!(
            "{field}.backendRefs: must be empty when the rule answers with a redirect or DirectResponse"
        ));
    }
    let timeouts = match &rule.timeouts {
        Some(t) => compile_timeouts(t, &format!("{field}.timeouts"))?,
        None => Timeouts::default(),
    };
    let retry = rule
        .retry
        .as_ref()
        .map(|r| compile_retry(r, &format!("{field}.retry")))
        .transpose()?;
    let session = rule
        .session_persistence
        .as_ref()
        .map(|sp| session_persistence(sp, &format!("{field}.sessionPersistence")))
        .transpose()?;
    let mut backend_filters = Vec::with_capacity(rule.backend_refs.len());
    for (k, b) in rule.backend_refs.iter().enumerate() {
        let fb = format!("{field}.backendRefs[{k}]");
        backend_filters.push(compile_backend_filters(&b.filters, &fb)?);
        if let Some(w) = b.weight
            && !(0..=1_000_000).contains(&w)
        {
            return Err(format!("{fb}.weight: {w} is not between 0 and 1000000"));
        }
    }
    let action = if let Some(r) = redirect {
        Action::Redirect(Box::new(r))
    } else if let Some((j, name)) = direct {
        ctx.out
            .deps
            .push(ctx.store.dep_on_ref(Kind::DirectResponse, ctx.ns, &name));
        direct_response(ctx, &name, &format!("{field}.filters[{j}].extensionRef"))
    } else {
        forward(ctx, &rule.backend_refs, backend_filters, field)
    };
    Ok(CompiledRule {
        matches,
        filters,
        action,
        timeouts,
        retry,
        session,
    })
}

/// The session name when `sessionName` is unset.
const DEFAULT_SESSION_NAME: &str = "weir-session";

/// Gateway API `sessionPersistence` of a rule, at `field`, as the consistent hash that
/// carries it out: a cookie weir generates (`Max-Age` = `absoluteTimeout` when
/// `Permanent`; a `Session` cookie's `absoluteTimeout` is not enforced), or a header weir
/// generates and the client sends back. The rule's policy then balances by it (its
/// backend and its endpoint), whatever the Service's own balancer.
pub(crate) fn session_persistence(
    sp: &weir_api::SessionPersistence,
    field: &str,
) -> Result<weir_model::LoadBalancer, String> {
    use weir_api::{CookieLifetimeType, SessionPersistenceType};
    use weir_model::{GeneratedCookie, HashOn, LoadBalancer};
    let name = sp.session_name.as_deref().unwrap_or(DEFAULT_SESSION_NAME);
    let absolute = match &sp.absolute_timeout {
        None => None,
        Some(s) => match crate::compile::duration::parse(s) {
            Ok(d) => d,
            Err(e) => return Err(format!("{field}.absoluteTimeout: {e}")),
        },
    };
    let on = match sp.type_.unwrap_or(SessionPersistenceType::Cookie) {
        SessionPersistenceType::Cookie => {
            if !weir_model::is_cookie_name(name) {
                return Err(format!(
                    "{field}.sessionName: {name:?} is not a cookie name (1-128 token characters)"
                ));
            }
            let permanent = sp
                .cookie_config
                .as_ref()
                .and_then(|c| c.lifetime_type)
                .is_some_and(|t| t == CookieLifetimeType::Permanent);
            if permanent && absolute.is_none() {
                return Err(format!(
                    "{field}.absoluteTimeout: required (and above 0) with lifetimeType Permanent"
                ));
            }
            HashOn::Cookie {
                name: name.into(),
                generate: Some(GeneratedCookie {
                    ttl: if permanent { absolute } else { None },
                    path: "/".into(),
                    same_site: None,
                    secure: false,
                }),
            }
        }
        SessionPersistenceType::Header => {
            if sp.cookie_config.is_some() {
                return Err(format!("{field}.cookieConfig: only with type Cookie"));
            }
            if !weir_model::RateLimitKey::is_header_name(name) {
                return Err(format!(
                    "{field}.sessionName: {name:?} is not a header name"
                ));
            }
            HashOn::GeneratedHeader(name.to_ascii_lowercase().into())
        }
    };
    Ok(LoadBalancer::ConsistentHash(on))
}

/// Retries when unset: two, after 25 ms (Envoy's base interval), on connection failures
/// and timeouts only (no status is retried unless listed).
const DEFAULT_RETRY_ATTEMPTS: u32 = 2;
const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_millis(25);
/// More retries than this would multiply a failing backend's load for no gain.
const MAX_RETRY_ATTEMPTS: i64 = 10;

/// HTTPRoute `timeouts` (also a TrafficPolicy's): `0s` disables a timeout, kept as zero,
/// unlike an unset field.
pub(crate) fn compile_timeouts(
    t: &weir_api::HttpRouteTimeouts,
    field: &str,
) -> Result<Timeouts, String> {
    let one = |v: &Option<String>, name: &str| -> Result<Option<Duration>, String> {
        v.as_ref()
            .map(|r| {
                duration::parse(r)
                    .map(|d| d.unwrap_or(Duration::ZERO))
                    .map_err(|e| format!("{field}.{name}: {e}"))
            })
            .transpose()
    };
    Ok(Timeouts {
        request: one(&t.request, "request")?,
        backend_request: one(&t.backend_request, "backendRequest")?,
        backend_send: None,
    })
}

/// HTTPRoute `retry` (also the base of a TrafficPolicy's).
pub(crate) fn compile_retry(r: &weir_api::HttpRouteRetry, field: &str) -> Result<Retry, String> {
    let attempts = match r.attempts {
        None => DEFAULT_RETRY_ATTEMPTS,
        Some(a) if (0..=MAX_RETRY_ATTEMPTS).contains(&a) => a as u32,
        Some(a) => {
            return Err(format!(
                "{field}.attempts: {a} is not between 0 and {MAX_RETRY_ATTEMPTS}"
            ));
        }
    };
    let mut codes = Vec::new();
    for (i, c) in r.codes.iter().flatten().enumerate() {
        match u16::try_from(*c) {
            Ok(c) if (400..=599).contains(&c) => codes.push(c),
            _ => {
                return Err(format!(
                    "{field}.codes[{i}]: {c} is not between 400 and 599"
                ));
            }
        }
    }
    codes.sort_unstable();
    codes.dedup();
    let backoff = match &r.backoff {
        None => DEFAULT_RETRY_BACKOFF,
        Some(b) => duration::parse(b)
            .map_err(|e| format!("{field}.backoff: {e}"))?
            .unwrap_or(Duration::ZERO),
    };
    Ok(Retry {
        attempts,
        codes,
        backoff,
        ..Retry::default()
    })
}

/// The action of a rule answered by DirectResponse `name` (an unusable one: 500 and a
/// ResolvedRefs problem).
pub(crate) fn direct_response(ctx: &mut RouteCtx<'_>, name: &str, field: &str) -> Action {
    let ns = ctx.ns.clone();
    let Some(d) = ctx.store.direct_response(&ns, name) else {
        ctx.out.ref_errors.push(RefError::new(
            Reason::BackendNotFound,
            format!("{field}: DirectResponse {ns}/{name} not found"),
        ));
        return Action::Fail {
            status: 500,
            reason: "direct response not found".into(),
        };
    };
    match direct_response_of(d) {
        Ok(d) => Action::DirectResponse(Box::new(d)),
        Err(_) => {
            ctx.out.ref_errors.push(RefError::new(
                Reason::UnsupportedValue,
                format!("{field}: DirectResponse {ns}/{name} is invalid"),
            ));
            Action::Fail {
                status: 500,
                reason: "invalid direct response".into(),
            }
        }
    }
}

/// A `RequestHeaderModifier` or `ResponseHeaderModifier` filter (`f.type_` is one of
/// them); `ff` names the filter's field.
fn header_filter(f: &HttpRouteFilter, ff: &str) -> Result<Filter, String> {
    let missing = |name: &str| format!("{ff}.{name}: required for type {}", f.type_);
    if f.type_ == "RequestHeaderModifier" {
        let h = f
            .request_header_modifier
            .as_ref()
            .ok_or_else(|| missing("requestHeaderModifier"))?;
        Ok(Filter::RequestHeaders(header_modifier(
            h,
            &format!("{ff}.requestHeaderModifier"),
        )?))
    } else {
        let h = f
            .response_header_modifier
            .as_ref()
            .ok_or_else(|| missing("responseHeaderModifier"))?;
        Ok(Filter::ResponseHeaders(header_modifier(
            h,
            &format!("{ff}.responseHeaderModifier"),
        )?))
    }
}

/// Filters of one backendRef: header modifiers only (a redirect, rewrite or response of
/// its own makes no sense per backend, and mirroring is not supported).
fn compile_backend_filters(
    filters: &[HttpRouteFilter],
    field: &str,
) -> Result<Vec<Filter>, String> {
    let mut out = Vec::with_capacity(filters.len());
    for (j, f) in filters.iter().enumerate() {
        let ff = format!("{field}.filters[{j}]");
        match f.type_.as_str() {
            "RequestHeaderModifier" | "ResponseHeaderModifier" => out.push(header_filter(f, &ff)?),
            other => {
                return Err(format!(
                    "{ff}.type: {other:?} is not supported on a backendRef (RequestHeaderModifier, ResponseHeaderModifier)"
                ));
            }
        }
    }
    Ok(out)
}
