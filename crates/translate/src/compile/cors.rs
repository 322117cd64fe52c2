//! The HTTPRoute `CORS` filter (GEP-1767) → [`weir_model::Cors`], validated field by
//! field as the experimental CRD does.

use std::sync::Arc;

use weir_api::HttpCorsFilter;
use weir_model::{Cors, CorsNames, CorsOrigin};

use crate::compile::fields::is_token;

/// `Access-Control-Max-Age` when `maxAge` is not set (the API's default).
const DEFAULT_MAX_AGE: u32 = 5;

/// Validates a `CORS` filter at field path `field` (`…filters[1].cors`).
pub(crate) fn compile(c: &HttpCorsFilter, field: &str) -> Result<Cors, String> {
    let allow_origins = c
        .allow_origins
        .iter()
        .enumerate()
        .map(|(i, o)| origin(o).map_err(|e| format!("{field}.allowOrigins[{i}]: {o:?} {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let max_age = match c.max_age {
        None => DEFAULT_MAX_AGE,
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("{field}.maxAge: {n} is not a positive number of seconds"))?,
    };
    Ok(Cors {
        allow_origins,
        allow_methods: names(&c.allow_methods, &format!("{field}.allowMethods"), "method")?,
        allow_headers: names(&c.allow_headers, &format!("{field}.allowHeaders"), "header")?,
        expose_headers: names(
            &c.expose_headers,
            &format!("{field}.exposeHeaders"),
            "header",
        )?,
        allow_credentials: c.allow_credentials.unwrap_or(false),
        max_age,
    })
}

/// `*`, `scheme://host[:port]`, or `scheme://*.host[:port]` (the `*` one or more labels).
fn origin(o: &str) -> Result<CorsOrigin, &'static str> {
    if o == "*" {
        return Ok(CorsOrigin::Any);
    }
    let lower = o.to_ascii_lowercase();
    let (scheme, rest) = lower
        .split_once("://")
        .ok_or("is not scheme://host[:port]")?;
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        return Err("has an invalid scheme");
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()) => (h, Some(p)),
        Some(_) => return Err("has an invalid port"),
        None => (rest, None),
    };
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return Err("has an invalid port");
    }
    let wildcard = host.strip_prefix("*.");
    let labels = wildcard.unwrap_or(host);
    let label_ok = |l: &str| {
        !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if labels.is_empty() || !labels.split('.').all(label_ok) {
        return Err("has an invalid host (a DNS name, optionally starting with *.)");
    }
    Ok(match wildcard {
        Some(_) => CorsOrigin::Wildcard {
            prefix: format!("{scheme}://").into(),
            suffix: rest[1..].into(),
        },
        None => CorsOrigin::Exact(lower.into()),
    })
}

/// Method or header names (HTTP tokens), or `*` alone.
fn names(list: &[String], field: &str, what: &str) -> Result<CorsNames, String> {
    if list.iter().any(|n| n == "*") {
        if list.len() > 1 {
            return Err(format!(
                "{field}: \"*\" cannot be combined with other values"
            ));
        }
        return Ok(CorsNames::Any);
    }
    let mut out: Vec<Arc<str>> = Vec::with_capacity(list.len());
    for (i, n) in list.iter().enumerate() {
        if !is_token(n) {
            return Err(format!("{field}[{i}]: {n:?} is not a valid {what} name"));
        }
        if out.iter().any(|o| o.eq_ignore_ascii_case(n)) {
            return Err(format!("{field}[{i}]: {n:?} is listed twice"));
        }
        out.push(n.as_str().into());
    }
    Ok(CorsNames::Listed(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_parsed_and_checked() {
        assert_eq!(origin("*"), Ok(CorsOrigin::Any));
        assert_eq!(
            origin("HTTPS://www.Foo.com"),
            Ok(CorsOrigin::Exact("https://www.foo.com".into()))
        );
        assert_eq!(
            origin("https://*.bar.com:8443"),
            Ok(CorsOrigin::Wildcard {
                prefix: "https://".into(),
                suffix: ".bar.com:8443".into()
            })
        );
        for bad in [
            "www.foo.com",
            "https://",
            "https://*",
            "https://a.*.com",
            "https://foo.com/path",
            "https://foo.com:99999",
            "https://foo.com:",
            "1http://foo.com",
        ] {
            assert!(origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_are_tokens_or_a_lone_star() {
        assert_eq!(names(&["*".into()], "f", "method"), Ok(CorsNames::Any));
        assert!(names(&["*".into(), "GET".into()], "f", "method").is_err());
        assert!(names(&["x header".into()], "f", "header").is_err());
        assert!(names(&["GET".into(), "get".into()], "f", "method").is_err());
        assert_eq!(
            names(&["GET".into(), "PUT".into()], "f", "method"),
            Ok(CorsNames::Listed(vec!["GET".into(), "PUT".into()]))
        );
    }

    #[test]
    fn max_age_defaults_to_five_and_must_be_positive() {
        let f = HttpCorsFilter {
            allow_origins: vec!["*".into()],
            ..Default::default()
        };
        assert_eq!(compile(&f, "c").unwrap().max_age, 5);
        let f = HttpCorsFilter {
            max_age: Some(0),
            ..f
        };
        assert_eq!(
            compile(&f, "c").unwrap_err(),
            "c.maxAge: 0 is not a positive number of seconds"
        );
    }
}
