//! Gateway API filters: header modifiers, URL rewrites and redirect locations.

use http::header::{HOST, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Uri};
use weir_model::{Filter, HeaderModifier, PathMatch, PathRewrite, Redirect, RouteRule};

/// Applies the rule's request-side filters (RequestHeaders, UrlRewrite) in order to the
/// request head before forwarding. A prefix path rewrite replaces the part matched by
/// the rule's [`PathMatch::Prefix`]; a hostname rewrite sets the `Host` header and, when
/// the URI has one, its authority. The query is always kept.
pub(crate) fn apply_request_filters(rule: &RouteRule, parts: &mut http::request::Parts) {
    for filter in &rule.filters {
        match filter {
            Filter::RequestHeaders(m) => modify_headers(m, &mut parts.headers),
            Filter::UrlRewrite { hostname, path } => {
                if let Some(host) = hostname {
                    rewrite_host(host, parts);
                }
                if let Some(rewrite) = path {
                    let new_path = rewritten_path(rule, rewrite, parts.uri.path());
                    set_path(&new_path, &mut parts.uri);
                }
            }
            Filter::ResponseHeaders(_)
            | Filter::Mirror { .. }
            | Filter::Cors(_)
            | Filter::InterceptErrors(_) => {}
        }
    }
}

/// Applies the rule's ResponseHeaders filters, in order, to a response's headers.
pub(crate) fn apply_response_filters(rule: &RouteRule, headers: &mut HeaderMap) {
    apply_response_header_filters(&rule.filters, headers);
}

/// Applies the RequestHeaders filters among `filters` (a backend's own), in order.
pub(crate) fn apply_request_header_filters(filters: &[Filter], headers: &mut HeaderMap) {
    for filter in filters {
        if let Filter::RequestHeaders(m) = filter {
            modify_headers(m, headers);
        }
    }
}

/// Applies the ResponseHeaders filters among `filters`, in order.
pub(crate) fn apply_response_header_filters(filters: &[Filter], headers: &mut HeaderMap) {
    for filter in filters {
        if let Filter::ResponseHeaders(m) = filter {
            modify_headers(m, headers);
        }
    }
}

/// Gateway API header modifier: `set` replaces every value of a name, `add` appends a
/// value, `remove` deletes every value; names are case-insensitive. Applied in that
/// order. Names or values that are not valid HTTP are skipped (the translator validates
/// them; this only keeps a bad one from breaking the request).
fn modify_headers(m: &HeaderModifier, headers: &mut HeaderMap) {
    for (name, value) in &m.set {
        if let Some((n, v)) = header(name, value) {
            headers.insert(n, v);
        }
    }
    for (name, value) in &m.add {
        if let Some((n, v)) = header(name, value) {
            headers.append(n, v);
        }
    }
    for name in &m.remove {
        if let Ok(n) = HeaderName::from_bytes(name.as_bytes()) {
            headers.remove(n);
        }
    }
}

fn header(name: &str, value: &str) -> Option<(HeaderName, HeaderValue)> {
    let n = HeaderName::from_bytes(name.as_bytes()).ok()?;
    let v = HeaderValue::from_str(value).ok()?;
    Some((n, v))
}

fn rewrite_host(host: &str, parts: &mut http::request::Parts) {
    let Ok(value) = HeaderValue::from_str(host) else {
        tracing::debug!(
            host,
            "hostname rewrite is not a valid header value; skipped"
        );
        return;
    };
    parts.headers.insert(HOST, value);
    if parts.uri.authority().is_some()
        && let Ok(authority) = Authority::try_from(host)
    {
        let mut uri = parts.uri.clone().into_parts();
        uri.authority = Some(authority);
        if let Ok(u) = Uri::from_parts(uri) {
            parts.uri = u;
        }
    }
}

/// Replaces the URI's path, keeping scheme, authority and query.
fn set_path(path: &str, uri: &mut Uri) {
    let pq = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    };
    let Ok(pq) = PathAndQuery::try_from(pq) else {
        tracing::debug!(path, "rewritten path is not a valid URI path; skipped");
        return;
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(pq);
    if let Ok(u) = Uri::from_parts(parts) {
        *uri = u;
    }
}

/// The path after a rewrite: a full replacement, the rule's matched prefix replaced, or
/// a template filled with the groups of the rule's regex. A prefix (template) rewrite on
/// a rule without a prefix (regex) match leaves the path as it is.
fn rewritten_path(rule: &RouteRule, rewrite: &PathRewrite, path: &str) -> String {
    match rewrite {
        PathRewrite::Full(p) => p.to_string(),
        PathRewrite::PrefixMatch(replacement) => match &rule.matcher.path {
            PathMatch::Prefix(prefix) => replace_prefix(path, prefix, replacement),
            PathMatch::Exact(_) | PathMatch::Regex(_) => path.to_string(),
        },
        PathRewrite::RegexCaptures(template) => match &rule.matcher.path {
            PathMatch::Regex(p) => p.expand(path, template).unwrap_or_else(|| path.to_string()),
            PathMatch::Exact(_) | PathMatch::Prefix(_) => path.to_string(),
        },
    }
}

/// Replaces the segment-wise `prefix` (stored without a trailing `/`, except `/` itself)
/// of `path` with `replacement`, per the Gateway API table: `/foo` → `/bar` maps
/// `/foo/x` to `/bar/x`; `/foo` → `/` maps `/foo/x` to `/x` and `/foo` to `/`; a
/// trailing slash of the request is kept; no double slash is produced.
fn replace_prefix(path: &str, prefix: &str, replacement: &str) -> String {
    let matched = if prefix == "/" { 0 } else { prefix.len() };
    let rest = match path.get(matched..) {
        Some(rest) if path.starts_with(prefix) && (rest.is_empty() || rest.starts_with('/')) => {
            rest
        }
        _ => return path.to_string(),
    };
    // `rest` is empty or starts with '/', so dropping the replacement's trailing slash
    // is what avoids a double slash.
    let head = replacement.trim_end_matches('/');
    if head.is_empty() {
        return if rest.is_empty() {
            "/".to_string()
        } else {
            rest.to_string()
        };
    }
    let mut out = String::with_capacity(head.len() + rest.len() + 1);
    if !head.starts_with('/') {
        out.push('/');
    }
    out.push_str(head);
    out.push_str(rest);
    out
}

/// The well-known port of a scheme.
fn default_port(scheme: &str) -> Option<u16> {
    if scheme.eq_ignore_ascii_case("http") {
        Some(80)
    } else if scheme.eq_ignore_ascii_case("https") {
        Some(443)
    } else {
        None
    }
}

/// The `Location` of a redirect, per Gateway API: scheme and hostname from the redirect,
/// else from the request; path rewritten like [`apply_request_filters`], query kept. The
/// port is the redirect's; else the well-known port of the redirect's scheme; else the
/// listener port. It is left out when it is the well-known port of the resulting scheme.
pub(crate) fn redirect_location(
    rule: &RouteRule,
    redirect: &Redirect,
    req_scheme: &str,
    req_host: &str,
    listener_port: u16,
    path: &str,
    query: Option<&str>,
) -> String {
    let scheme = redirect.scheme.as_deref().unwrap_or(req_scheme);
    let host = redirect.hostname.as_deref().unwrap_or(req_host);
    let port = redirect
        .port
        .or_else(|| redirect.scheme.as_deref().and_then(default_port))
        .unwrap_or(listener_port);
    let path = match &redirect.path {
        Some(rewrite) => rewritten_path(rule, rewrite, path),
        None => path.to_string(),
    };
    let mut location = format!("{scheme}://{host}");
    if default_port(scheme) != Some(port) {
        location.push(':');
        location.push_str(&port.to_string());
    }
    location.push_str(&path);
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        location.push('?');
        location.push_str(q);
    }
    location
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use weir_model::{Action, RequestMatch, RouteKind, RouteRef, Timeouts};

    fn rule(path: PathMatch, filters: Vec<Filter>) -> RouteRule {
        RouteRule::new(
            RouteRef {
                kind: RouteKind::HttpRoute,
                namespace: "ns".into(),
                name: "r".into(),
                rule: 0,
            },
            RequestMatch {
                path,
                headers: vec![],
                query: vec![],
                method: None,
            },
            filters,
            Action::Fail {
                status: 500,
                reason: "x".into(),
            },
            Timeouts::default(),
        )
    }

    fn prefix(p: &str) -> PathMatch {
        PathMatch::Prefix(p.into())
    }

    fn pair(n: &str, v: &str) -> (Arc<str>, Arc<str>) {
        (n.into(), v.into())
    }

    fn request(uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
        let mut b = http::Request::builder().uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn values(h: &HeaderMap, name: &str) -> Vec<String> {
        h.get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    }

    fn modifier() -> HeaderModifier {
        HeaderModifier {
            set: vec![pair("x-set", "new")],
            add: vec![pair("x-add", "added")],
            remove: vec!["x-remove".into()],
        }
    }

    #[test]
    fn request_header_modifier() {
        let r = rule(prefix("/"), vec![Filter::RequestHeaders(modifier())]);
        let mut p = request(
            "/a",
            &[
                ("X-Set", "old1"),
                ("x-set", "old2"),
                ("x-add", "first"),
                ("X-Remove", "gone"),
                ("x-remove", "gone2"),
            ],
        );
        apply_request_filters(&r, &mut p);
        assert_eq!(values(&p.headers, "x-set"), ["new"]);
        assert_eq!(values(&p.headers, "x-add"), ["first", "added"]);
        assert!(p.headers.get("x-remove").is_none());
        // Set and add also create absent headers.
        let mut p = request("/a", &[]);
        apply_request_filters(&r, &mut p);
        assert_eq!(values(&p.headers, "x-set"), ["new"]);
        assert_eq!(values(&p.headers, "x-add"), ["added"]);
    }

    #[test]
    fn response_header_modifier_leaves_requests_alone() {
        let r = rule(prefix("/"), vec![Filter::ResponseHeaders(modifier())]);
        let mut p = request("/a", &[("x-remove", "kept")]);
        apply_request_filters(&r, &mut p);
        assert_eq!(values(&p.headers, "x-remove"), ["kept"]);

        let mut h = HeaderMap::new();
        h.insert("x-set", HeaderValue::from_static("old"));
        h.insert("x-remove", HeaderValue::from_static("gone"));
        apply_response_filters(&r, &mut h);
        assert_eq!(values(&h, "x-set"), ["new"]);
        assert_eq!(values(&h, "x-add"), ["added"]);
        assert!(h.get("x-remove").is_none());
    }

    fn rewrite(hostname: Option<&str>, path: Option<PathRewrite>) -> Filter {
        Filter::UrlRewrite {
            hostname: hostname.map(Into::into),
            path,
        }
    }

    #[test]
    fn hostname_rewrite_sets_host_and_authority() {
        let r = rule(prefix("/"), vec![rewrite(Some("upstream.internal"), None)]);
        let mut p = request("/a?x=1", &[("host", "public.example")]);
        apply_request_filters(&r, &mut p);
        assert_eq!(values(&p.headers, "host"), ["upstream.internal"]);
        assert_eq!(p.uri, "/a?x=1");

        let mut p = request("https://public.example:8443/a?x=1", &[]);
        apply_request_filters(&r, &mut p);
        assert_eq!(p.uri, "https://upstream.internal/a?x=1");
        assert_eq!(values(&p.headers, "host"), ["upstream.internal"]);
    }

    #[test]
    fn full_path_rewrite_keeps_query() {
        let r = rule(
            prefix("/old"),
            vec![rewrite(None, Some(PathRewrite::Full("/new".into())))],
        );
        let mut p = request("/old/deep/path?q=1&r=2", &[]);
        apply_request_filters(&r, &mut p);
        assert_eq!(p.uri, "/new?q=1&r=2");
        let mut p = request("http://h.example/old", &[]);
        apply_request_filters(&r, &mut p);
        assert_eq!(p.uri, "http://h.example/new");
    }

    #[test]
    fn prefix_rewrite_table() {
        // (rule prefix, request path, replacement, expected), from the Gateway API table.
        let cases = [
            ("/foo", "/foo/bar", "/xyz", "/xyz/bar"),
            ("/foo", "/foo/bar", "/xyz/", "/xyz/bar"),
            ("/foo", "/foo", "/xyz", "/xyz"),
            ("/foo", "/foo/", "/xyz", "/xyz/"),
            ("/foo", "/foo/", "/xyz/", "/xyz/"),
            ("/foo", "/foo", "/", "/"),
            ("/foo", "/foo/", "/", "/"),
            ("/foo", "/foo/bar", "/", "/bar"),
            ("/foo/bar", "/foo/bar/baz", "/x", "/x/baz"),
            ("/", "/a/b", "/pre", "/pre/a/b"),
            ("/", "/a", "/", "/a"),
            ("/foo", "/foobar", "/x", "/foobar"),
        ];
        for (pre, path, replacement, expected) in cases {
            assert_eq!(
                replace_prefix(path, pre, replacement),
                expected,
                "{pre} {path} {replacement}"
            );
        }
        let r = rule(
            prefix("/foo"),
            vec![rewrite(None, Some(PathRewrite::PrefixMatch("/bar".into())))],
        );
        let mut p = request("/foo/x?y=1", &[]);
        apply_request_filters(&r, &mut p);
        assert_eq!(p.uri, "/bar/x?y=1");
        // Without a prefix match the path is left alone.
        let r = rule(
            PathMatch::Exact("/foo".into()),
            vec![rewrite(None, Some(PathRewrite::PrefixMatch("/bar".into())))],
        );
        let mut p = request("/foo", &[]);
        apply_request_filters(&r, &mut p);
        assert_eq!(p.uri, "/foo");
    }

    #[test]
    fn capture_rewrite_fills_the_rule_regex_groups() {
        let re = weir_model::Pattern::new("(?i)(?:/app(/|$)(.*)).*").unwrap();
        let r = rule(
            PathMatch::Regex(re),
            vec![rewrite(
                None,
                Some(PathRewrite::RegexCaptures("/v2/$2".into())),
            )],
        );
        let mut p = request("/App/users/7?full=1", &[]);
        apply_request_filters(&r, &mut p);
        assert_eq!(p.uri, "/v2/users/7?full=1");
        // Without a regex match the path is left alone.
        let r = rule(
            prefix("/app"),
            vec![rewrite(
                None,
                Some(PathRewrite::RegexCaptures("/v2/$2".into())),
            )],
        );
        let mut p = request("/app/x", &[]);
        apply_request_filters(&r, &mut p);
        assert_eq!(p.uri, "/app/x");
    }

    fn redirect(
        scheme: Option<&str>,
        hostname: Option<&str>,
        port: Option<u16>,
        path: Option<PathRewrite>,
    ) -> Redirect {
        Redirect {
            scheme: scheme.map(Into::into),
            hostname: hostname.map(Into::into),
            path,
            port,
            status: 302,
        }
    }

    #[test]
    fn redirect_locations() {
        let r = rule(prefix("/old"), vec![]);
        let loc = |rd: &Redirect, scheme: &str, port: u16, q: Option<&str>| {
            redirect_location(&r, rd, scheme, "www.example.com", port, "/old/page", q)
        };
        // Scheme change: the well-known port of the new scheme, omitted.
        assert_eq!(
            loc(
                &redirect(Some("https"), None, None, None),
                "http",
                8080,
                None
            ),
            "https://www.example.com/old/page"
        );
        assert_eq!(
            loc(
                &redirect(Some("http"), None, None, None),
                "https",
                8443,
                None
            ),
            "http://www.example.com/old/page"
        );
        // Explicit port wins, and is shown unless well-known for the scheme.
        assert_eq!(
            loc(
                &redirect(Some("https"), None, Some(8443), None),
                "http",
                80,
                None
            ),
            "https://www.example.com:8443/old/page"
        );
        assert_eq!(
            loc(&redirect(None, None, Some(443), None), "https", 8443, None),
            "https://www.example.com/old/page"
        );
        assert_eq!(
            loc(&redirect(None, None, Some(443), None), "http", 80, None),
            "http://www.example.com:443/old/page"
        );
        // No scheme, no port: the listener port.
        assert_eq!(
            loc(
                &redirect(None, Some("other.example"), None, None),
                "http",
                8080,
                Some("a=1")
            ),
            "http://other.example:8080/old/page?a=1"
        );
        assert_eq!(
            loc(&redirect(None, None, None, None), "http", 80, Some("")),
            "http://www.example.com/old/page"
        );
        assert_eq!(
            loc(&redirect(None, None, None, None), "https", 443, None),
            "https://www.example.com/old/page"
        );
        // Paths.
        let full = redirect(None, None, None, Some(PathRewrite::Full("/new".into())));
        assert_eq!(
            loc(&full, "http", 80, Some("x=y")),
            "http://www.example.com/new?x=y"
        );
        let pre = redirect(
            Some("https"),
            None,
            None,
            Some(PathRewrite::PrefixMatch("/new".into())),
        );
        assert_eq!(
            loc(&pre, "http", 80, None),
            "https://www.example.com/new/page"
        );
        let root = redirect(None, None, None, Some(PathRewrite::PrefixMatch("/".into())));
        assert_eq!(loc(&root, "http", 80, None), "http://www.example.com/page");
    }
}
