//! CORS (Gateway API HTTPRoute `CORS` filter, GEP-1767): which cross-origin requests a
//! rule allows and what the gateway answers them.

use std::sync::Arc;

use serde::Serialize;

/// One allowed origin.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum CorsOrigin {
    /// `*`: every origin.
    Any,
    /// One origin, `scheme://host[:port]`, lowercase.
    Exact(Arc<str>),
    /// `scheme://*.suffix[:port]`: the `*` stands for one or more labels. Holds the part
    /// before the `*` (`https://`) and the part after it (`.example.com`), lowercase.
    Wildcard {
        /// Up to the `*`.
        prefix: Arc<str>,
        /// After the `*`, starting with `.`.
        suffix: Arc<str>,
    },
}

impl CorsOrigin {
    /// Whether the request's `Origin` (as sent; compared case-insensitively) is this one.
    pub fn matches(&self, origin: &str) -> bool {
        match self {
            CorsOrigin::Any => true,
            CorsOrigin::Exact(o) => o.eq_ignore_ascii_case(origin),
            CorsOrigin::Wildcard { prefix, suffix } => {
                let (p, s) = (prefix.len(), suffix.len());
                origin.len() > p + s
                    && origin.is_char_boundary(p)
                    && origin.is_char_boundary(origin.len() - s)
                    && origin[..p].eq_ignore_ascii_case(prefix)
                    && origin[origin.len() - s..].eq_ignore_ascii_case(suffix)
                    // The labels the `*` stands for: a host part, no port or path.
                    && !origin[p..origin.len() - s].contains([':', '/'])
            }
        }
    }
}

/// A list of names (methods, headers) or `*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum CorsNames {
    /// `*`: any (a preflight is answered with what it asked for).
    Any,
    /// These names, in the configured order.
    Listed(Vec<Arc<str>>),
}

impl CorsNames {
    /// Whether nothing is listed.
    pub fn is_empty(&self) -> bool {
        matches!(self, CorsNames::Listed(v) if v.is_empty())
    }
}

/// A rule's CORS settings. A request with an `Origin` one of `allow_origins` matches is
/// a CORS request: a preflight (`OPTIONS` with `Access-Control-Request-Method`) is
/// answered by the gateway; an actual request is forwarded and its response gets
/// `Access-Control-Allow-Origin` (the request's origin), `…-Allow-Credentials` and
/// `…-Expose-Headers`. A preflight from another origin is refused (403) without CORS
/// headers; an actual request from one is forwarded without them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Cors {
    /// Allowed origins.
    pub allow_origins: Vec<CorsOrigin>,
    /// Methods a preflight allows.
    pub allow_methods: CorsNames,
    /// Request headers a preflight allows.
    pub allow_headers: CorsNames,
    /// Response headers exposed to the page.
    pub expose_headers: CorsNames,
    /// `Access-Control-Allow-Credentials: true`.
    pub allow_credentials: bool,
    /// `Access-Control-Max-Age` of preflight answers, in seconds.
    pub max_age: u32,
}

impl Cors {
    /// Whether `origin` is allowed.
    pub fn allows(&self, origin: &str) -> bool {
        self.allow_origins.iter().any(|o| o.matches(origin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wild(prefix: &str, suffix: &str) -> CorsOrigin {
        CorsOrigin::Wildcard {
            prefix: prefix.into(),
            suffix: suffix.into(),
        }
    }

    #[test]
    fn origins_match_exactly_or_by_labels() {
        let exact = CorsOrigin::Exact("https://www.foo.com".into());
        assert!(exact.matches("https://www.foo.com"));
        assert!(exact.matches("HTTPS://WWW.FOO.COM"));
        assert!(!exact.matches("http://www.foo.com"));
        assert!(!exact.matches("https://www.foo.com:8443"));

        let w = wild("https://", ".bar.com");
        assert!(w.matches("https://www.bar.com"));
        // Any number of labels in place of the `*`.
        assert!(w.matches("https://xpto.www.bar.com"));
        assert!(!w.matches("https://.bar.com"));
        assert!(!w.matches("https://bar.com"));
        assert!(!w.matches("http://www.bar.com"));
        assert!(!w.matches("https://www.bar.com.evil.test"));
        assert!(!w.matches("https://evil.test/.bar.com"));
        assert!(!w.matches("https://evil.test:1.bar.com"));
        // Not a char boundary: no panic, no match.
        assert!(!w.matches("https:/é.bar.com"));

        assert!(CorsOrigin::Any.matches("https://foobar.com:12345"));
    }
}
