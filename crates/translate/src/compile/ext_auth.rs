//! `extAuth` (external authorization) of a TrafficPolicy, and of ingress-nginx's
//! `auth-url` annotations, which compile through the same function.

use std::time::Duration;

use weir_api::ExtAuthSpec;
use weir_model::{ExtAuth, ExtAuthCache, ExtAuthUrl, RateLimitKey};

use crate::compile::duration;

/// The headers sent when `headersToSend` is not given: the usual credentials.
const DEFAULT_HEADERS: [&str; 2] = ["authorization", "cookie"];
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
const DEFAULT_TTL: Duration = Duration::from_secs(60);
const MAX_TTL: Duration = Duration::from_secs(3600);
const DEFAULT_MAX_ENTRIES: u32 = 10_000;

/// Validates `spec` (its field path is `field`, e.g. `spec.extAuth`).
/// `ca_pem`: the service's extra CAs, read by the caller (`caCertificate` or the
/// ConfigMap of `caCertificateRef`, [`crate::compile::policy::ca_pem`]).
pub(crate) fn ext_auth(
    spec: &ExtAuthSpec,
    field: &str,
    ca_pem: Option<std::sync::Arc<str>>,
) -> Result<ExtAuth, String> {
    let url = ExtAuthUrl::parse(spec.url.trim()).map_err(|e| format!("{field}.url: {e}"))?;
    let names = |list: &[String], f: &str| -> Result<Vec<std::sync::Arc<str>>, String> {
        if list.len() > ExtAuth::MAX_HEADERS {
            return Err(format!(
                "{field}.{f}: at most {} headers",
                ExtAuth::MAX_HEADERS
            ));
        }
        let mut out: Vec<std::sync::Arc<str>> = Vec::with_capacity(list.len());
        for (i, h) in list.iter().enumerate() {
            let h = h.trim().to_ascii_lowercase();
            if !RateLimitKey::is_header_name(&h) {
                return Err(format!("{field}.{f}[{i}]: {h:?} is not a header name"));
            }
            if !out.iter().any(|o| **o == *h) {
                out.push(h.into());
            }
        }
        Ok(out)
    };
    let headers_to_send = match &spec.headers_to_send {
        Some(list) => names(list, "headersToSend")?,
        None => DEFAULT_HEADERS.iter().map(|h| (*h).into()).collect(),
    };
    let response_headers = names(&spec.response_headers, "responseHeaders")?;
    let duration = |v: &Option<String>, f: &str, default: Duration, max: Duration| {
        let d = match v {
            None => default,
            Some(s) => duration::parse(s)
                .map_err(|e| format!("{field}.{f}: {e}"))?
                .ok_or_else(|| format!("{field}.{f}: must be positive"))?,
        };
        if d > max {
            return Err(format!("{field}.{f}: at most {}s", max.as_secs()));
        }
        Ok(d)
    };
    let timeout = duration(
        &spec.timeout,
        "timeout",
        DEFAULT_TIMEOUT,
        ExtAuth::MAX_TIMEOUT,
    )?;
    let cache = match &spec.cache {
        None => None,
        Some(c) => Some(ExtAuthCache {
            ttl: duration(&c.ttl, "cache.ttl", DEFAULT_TTL, MAX_TTL)?,
            max_entries: match c.max_entries {
                None => DEFAULT_MAX_ENTRIES,
                Some(n) => u32::try_from(n)
                    .ok()
                    .filter(|n| (1..=ExtAuth::MAX_CACHE_ENTRIES).contains(n))
                    .ok_or_else(|| {
                        format!(
                            "{field}.cache.maxEntries: must be 1 to {}",
                            ExtAuth::MAX_CACHE_ENTRIES
                        )
                    })?,
            },
        }),
    };
    let status_on_error = match spec.status_on_error {
        None => 503,
        Some(s) => u16::try_from(s)
            .ok()
            .filter(|s| (400..=599).contains(s))
            .ok_or_else(|| format!("{field}.statusOnError: {s} is not a status 400 to 599"))?,
    };
    let signin_url = match &spec.signin_url {
        None => None,
        Some(s) => {
            let s = s.trim();
            ExtAuthUrl::parse(s).map_err(|e| format!("{field}.signinUrl: {e}"))?;
            Some(s.into())
        }
    };
    Ok(ExtAuth {
        url,
        headers_to_send,
        response_headers,
        timeout,
        cache,
        fail_open: spec.fail_open.unwrap_or(false),
        status_on_error,
        signin_url,
        ca_pem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_errors_name_the_field() {
        let spec = ExtAuthSpec {
            url: "http://auth.default:8080/check".into(),
            ..Default::default()
        };
        let a = ext_auth(&spec, "spec.extAuth", None).unwrap();
        assert_eq!(a.timeout, DEFAULT_TIMEOUT);
        assert_eq!(a.status_on_error, 503);
        assert_eq!(&*a.headers_to_send[0], "authorization");
        let bad = |s: ExtAuthSpec, want: &str| {
            let e = ext_auth(&s, "spec.extAuth", None).unwrap_err();
            assert!(e.starts_with(want), "{e}");
        };
        bad(
            ExtAuthSpec {
                url: "ftp://x".into(),
                ..Default::default()
            },
            "spec.extAuth.url",
        );
        bad(
            ExtAuthSpec {
                timeout: Some("2m".into()),
                ..spec.clone()
            },
            "spec.extAuth.timeout: at most 60s",
        );
        bad(
            ExtAuthSpec {
                status_on_error: Some(200),
                ..spec.clone()
            },
            "spec.extAuth.statusOnError",
        );
        bad(
            ExtAuthSpec {
                response_headers: vec!["x user".into()],
                ..spec.clone()
            },
            "spec.extAuth.responseHeaders[0]",
        );
    }
}
