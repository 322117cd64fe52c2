//! GRPCRoute → compiled rules (independent of the listeners the route attaches to).
//!
//! A gRPC call is an HTTP/2 `POST` to `/<service>/<method>`, so a GRPCRoute match
//! compiles into the same `RouteRule`s as an HTTPRoute's, on the path:
//!
//! | method match | path |
//! |---|---|
//! | none | prefix `/` |
//! | `Exact`, service and method | exact `/<service>/<method>` |
//! | `Exact`, service only | prefix `/<service>` (segment-wise: `/<service>/…`) |
//! | `Exact`, method only | regex `/[^/]+/<method>` |
//! | `RegularExpression` | regex `/(?:<service>)/(?:<method>)`, `[^/]+` for an empty part |
//!
//! Headers become header matches. Neither the HTTP method nor `content-type` is checked
//! (the spec asks for neither). Rules are ordered by GRPCRoute precedence
//! ([`RuleOrder::grpc`]). Backends are reached over HTTP/2 ([`WantProtocol`]).
//!
//! [`WantProtocol`]: crate::compile::backend::WantProtocol

use std::sync::Arc;

use weir_api::{
    GrpcMethodMatch, GrpcRoute, GrpcRouteFilter, GrpcRouteMatch, GrpcRouteRule, Kind, ObjectKey,
    ParentReference,
};
use weir_model::{Filter, HeaderMatch, PathMatch, Pattern, RequestMatch, Timeouts};

use crate::compile::backend_ref::{RouteCtx, forward, mirror};
use crate::compile::fields::{header_modifier, is_token, regex_error, string_match};
use crate::compile::http_route::direct_response;
use crate::compile::order::{Age, RuleOrder, RuleOrigin};
use crate::compile::route_kind::{CompiledRoute, RouteKind, RouteObject};
use crate::compile::rules::{CompiledRule, RouteId, RuleMatch, compile_rules};
use crate::store::Store;

impl RouteObject for GrpcRoute {
    const KIND: RouteKind = RouteKind::Grpc;

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

/// A compiled match: the request condition and the lengths of its service and method
/// conditions (for precedence).
struct GrpcMatch {
    matcher: RequestMatch,
    service: usize,
    method: usize,
}

impl RuleMatch for GrpcMatch {
    /// GRPCRoute precedence: exact method matches first, then by the lengths of the
    /// service and method conditions.
    fn order(&self, origin: &RuleOrigin<'_>, rule: u32, matcher: u32) -> RuleOrder {
        RuleOrder::grpc(
            origin,
            &self.matcher,
            self.service,
            self.method,
            rule,
            matcher,
        )
    }

    fn into_request(self) -> RequestMatch {
        self.matcher
    }
}

fn compile(store: &Store, key: &ObjectKey, age: &Age, route: &GrpcRoute) -> CompiledRoute {
    let id = RouteId {
        store,
        key,
        age,
        kind: GrpcRoute::KIND,
    };
    compile_rules(id, &route.spec.hostnames, &route.spec.rules, compile_rule)
}

fn compile_rule(
    ctx: &mut RouteCtx<'_>,
    rule: &GrpcRouteRule,
    field: &str,
) -> Result<CompiledRule<GrpcMatch>, String> {
    let mut matches = Vec::new();
    for (j, m) in rule.matches.iter().enumerate() {
        matches.push(compile_match(m, &format!("{field}.matches[{j}]"))?);
    }
    if matches.is_empty() {
        matches.push(GrpcMatch {
            matcher: RequestMatch {
                path: PathMatch::Prefix("/".into()),
                headers: vec![],
                query: vec![],
                method: None,
            },
            service: 0,
            method: 0,
        });
    }
    let mut filters = Vec::new();
    let mut direct: Option<(usize, String)> = None;
    for (j, f) in rule.filters.iter().enumerate() {
        let ff = format!("{field}.filters[{j}]");
        match f.type_.as_str() {
            "RequestHeaderModifier" | "ResponseHeaderModifier" => {
                filters.push(header_filter(f, &ff)?);
            }
            "RequestMirror" => {
                let m = f.request_mirror.as_ref().ok_or_else(|| {
                    format!("{ff}.requestMirror: required for type RequestMirror")
                })?;
                if let Some(filter) = mirror(ctx, m, &format!("{ff}.requestMirror"))? {
                    filters.push(filter);
                }
            }
            "ExtensionRef" => {
                let e = f
                    .extension_ref
                    .as_ref()
                    .ok_or_else(|| format!("{ff}.extensionRef: required for type ExtensionRef"))?;
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
            other => return Err(format!("{ff}.type: unsupported filter type {other:?}")),
        }
    }
    if direct.is_some() && !rule.backend_refs.is_empty() {
        return Err(format!(
            "{field}.backendRefs: must be empty when the rule answers with a DirectResponse"
        ));
    }
    let mut backend_filters = Vec::with_capacity(rule.backend_refs.len());
    for (k, b) in rule.backend_refs.iter().enumerate() {
        let fb = format!("{field}.backendRefs[{k}]");
        let mut fs = Vec::with_capacity(b.filters.len());
        for (j, f) in b.filters.iter().enumerate() {
            let ff = format!("{fb}.filters[{j}]");
            match f.type_.as_str() {
                "RequestHeaderModifier" | "ResponseHeaderModifier" => {
                    fs.push(header_filter(f, &ff)?)
                }
                other => {
                    return Err(format!(
                        "{ff}.type: {other:?} is not supported on a backendRef (RequestHeaderModifier, ResponseHeaderModifier)"
                    ));
                }
            }
        }
        backend_filters.push(fs);
        if let Some(w) = b.weight
            && !(0..=1_000_000).contains(&w)
        {
            return Err(format!("{fb}.weight: {w} is not between 0 and 1000000"));
        }
    }
    let action = if let Some((j, name)) = direct {
        ctx.out
            .deps
            .push(ctx.store.dep_on_ref(Kind::DirectResponse, ctx.ns, &name));
        direct_response(ctx, &name, &format!("{field}.filters[{j}].extensionRef"))
    } else {
        forward(ctx, &rule.backend_refs, backend_filters, field)
    };
    let session = rule
        .session_persistence
        .as_ref()
        .map(|sp| {
            crate::compile::http_route::session_persistence(
                sp,
                &format!("{field}.sessionPersistence"),
            )
        })
        .transpose()?;
    Ok(CompiledRule {
        matches,
        filters,
        action,
        timeouts: Timeouts::default(),
        retry: None,
        session,
    })
}

fn compile_match(m: &GrpcRouteMatch, field: &str) -> Result<GrpcMatch, String> {
    let (path, service, method) = match &m.method {
        None => (PathMatch::Prefix("/".into()), 0, 0),
        Some(mm) => method_path(mm, &format!("{field}.method"))?,
    };
    let mut headers: Vec<HeaderMatch> = Vec::new();
    for (i, h) in m.headers.iter().enumerate() {
        let fh = format!("{field}.headers[{i}]");
        if !is_token(&h.name) {
            return Err(format!(
                "{fh}.name: {:?} is not a valid header name",
                h.name
            ));
        }
        let name: Arc<str> = h.name.to_ascii_lowercase().into();
        let value = string_match(h.type_.as_deref(), &h.value, &fh)?;
        // The first entry for a name counts; later ones are ignored (the spec's rule).
        if !headers.iter().any(|x| x.name == name) {
            headers.push(HeaderMatch { name, value });
        }
    }
    Ok(GrpcMatch {
        matcher: RequestMatch {
            path,
            headers,
            query: vec![],
            method: None,
        },
        service,
        method,
    })
}

/// The path condition of a method match, and the lengths of its service and method.
fn method_path(m: &GrpcMethodMatch, field: &str) -> Result<(PathMatch, usize, usize), String> {
    let service = m.service.as_deref().unwrap_or("");
    let method = m.method.as_deref().unwrap_or("");
    if service.is_empty() && method.is_empty() {
        return Err(format!(
            "{field}: at least one of service and method is required"
        ));
    }
    let lens = (service.len(), method.len());
    match m.type_.as_deref().unwrap_or("Exact") {
        "Exact" => {
            if !service.is_empty() && !is_service_name(service) {
                return Err(format!(
                    "{field}.service: {service:?} is not a valid service name (dot-separated identifiers)"
                ));
            }
            if !method.is_empty() && !is_identifier(method) {
                return Err(format!(
                    "{field}.method: {method:?} is not a valid method name (an identifier)"
                ));
            }
            let path = match (service.is_empty(), method.is_empty()) {
                (false, false) => PathMatch::Exact(format!("/{service}/{method}").into()),
                // Prefixes match whole segments: `/svc` matches `/svc/M`, not `/svcX/M`.
                (false, true) => PathMatch::Prefix(format!("/{service}").into()),
                _ => PathMatch::Regex(
                    Pattern::new(&format!("/[^/]+/{}", regex::escape(method)))
                        .map_err(|e| format!("{field}.method: {}", regex_error(e)))?,
                ),
            };
            Ok((path, lens.0, lens.1))
        }
        "RegularExpression" => {
            // Each part is checked alone first, so that an error names its field.
            for (part, name) in [(service, "service"), (method, "method")] {
                if !part.is_empty() {
                    Pattern::new(part)
                        .map_err(|e| format!("{field}.{name}: {}", regex_error(e)))?;
                }
            }
            let part = |p: &str| {
                if p.is_empty() {
                    "[^/]+".to_string()
                } else {
                    format!("(?:{p})")
                }
            };
            let source = format!("/{}/{}", part(service), part(method));
            let path = Pattern::new(&source)
                .map(PathMatch::Regex)
                .map_err(|e| format!("{field}: {}", regex_error(e)))?;
            Ok((path, lens.0, lens.1))
        }
        other => Err(format!("{field}.type: unsupported {other:?}")),
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
fn is_identifier(s: &str) -> bool {
    let mut b = s.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Identifiers separated by dots, optionally with a leading dot (the API's pattern).
fn is_service_name(s: &str) -> bool {
    s.strip_prefix('.')
        .unwrap_or(s)
        .split('.')
        .all(is_identifier)
}

/// A `RequestHeaderModifier` or `ResponseHeaderModifier` filter.
fn header_filter(f: &GrpcRouteFilter, ff: &str) -> Result<Filter, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn path(v: serde_json::Value) -> Result<(PathMatch, usize, usize), String> {
        let m: GrpcMethodMatch = serde_json::from_value(v).unwrap();
        method_path(&m, "m")
    }

    #[test]
    fn methods_become_paths() {
        let (p, s, m) = path(serde_json::json!({"service": "pkg.Svc", "method": "Get"})).unwrap();
        assert_eq!(p, PathMatch::Exact("/pkg.Svc/Get".into()));
        assert_eq!((s, m), (7, 3));
        let (p, ..) = path(serde_json::json!({"service": "pkg.Svc"})).unwrap();
        assert!(p.matches("/pkg.Svc/Get") && !p.matches("/pkg.SvcX/Get"));
        let (p, ..) = path(serde_json::json!({"method": "Get"})).unwrap();
        assert!(p.matches("/a.B/Get") && !p.matches("/a.B/GetX") && !p.matches("/Get"));
        let (p, ..) = path(serde_json::json!({"type": "RegularExpression",
            "service": "pkg\\.(A|B)", "method": ""}))
        .unwrap();
        assert!(p.matches("/pkg.A/X") && p.matches("/pkg.B/Y") && !p.matches("/pkg.C/X"));
        // `|` inside a part stays inside it.
        let (p, ..) = path(serde_json::json!({"type": "RegularExpression",
            "service": "a|b", "method": "M"}))
        .unwrap();
        assert!(p.matches("/a/M") && p.matches("/b/M") && !p.matches("/a"));
    }

    #[test]
    fn invalid_methods_name_their_field() {
        for (v, want) in [
            (serde_json::json!({}), "m: at least one"),
            (serde_json::json!({"service": "a/b"}), "m.service:"),
            (
                serde_json::json!({"service": "s", "method": "a.b"}),
                "m.method:",
            ),
            (
                serde_json::json!({"type": "RegularExpression", "method": "("}),
                "m.method:",
            ),
            (
                serde_json::json!({"type": "Prefix", "method": "M"}),
                "m.type:",
            ),
        ] {
            let e = path(v.clone()).unwrap_err();
            assert!(e.starts_with(want), "{v}: {e}");
        }
    }
}
