//! External authorization (forward auth): before a request is forwarded, an HTTP service
//! of the user's is asked whether it may pass, as nginx's `auth_request` and Traefik's
//! `forwardAuth` do.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

/// An authorization service's address, checked: `http` or `https`, a host and an
/// optional port, and a path (with an optional query).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ExtAuthUrl {
    /// Whether the service is reached over TLS.
    pub https: bool,
    /// Host name or IP literal (IPv6 in brackets).
    pub host: Arc<str>,
    /// The port (default 80 / 443).
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path_and_query: Arc<str>,
}

impl ExtAuthUrl {
    /// Parses `http(s)://host[:port][/path[?query]]`. User info, fragments, spaces and
    /// control characters are refused.
    pub fn parse(s: &str) -> Result<ExtAuthUrl, String> {
        let (https, rest) = if let Some(r) = s.strip_prefix("http://") {
            (false, r)
        } else if let Some(r) = s.strip_prefix("https://") {
            (true, r)
        } else {
            return Err(format!("{s:?}: must start with http:// or https://"));
        };
        if s.bytes().any(|b| b <= b' ' || b == 0x7f || b == b'#') {
            return Err(format!(
                "{s:?}: spaces, control characters and fragments are not allowed"
            ));
        }
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.contains('@') {
            return Err(format!("{s:?}: user info is not allowed"));
        }
        let default_port = if https { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (addr, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("{s:?}: unclosed IPv6 literal"))?;
            addr.parse::<std::net::Ipv6Addr>()
                .map_err(|_| format!("{s:?}: {addr:?} is not an IPv6 address"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(format!("{s:?}: unexpected {after:?} after the host")),
            };
            (&authority[..addr.len() + 2], port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        let port = match port {
            None => default_port,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{s:?}: {p:?} is not a port"))?,
        };
        let host_ok = !host.is_empty()
            && (host.starts_with('[')
                || host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'));
        if !host_ok {
            return Err(format!("{s:?}: {host:?} is not a host name"));
        }
        let path_and_query: Arc<str> = if path.starts_with('?') {
            format!("/{path}").into()
        } else {
            path.into()
        };
        Ok(ExtAuthUrl {
            https,
            host: host.to_ascii_lowercase().into(),
            port,
            path_and_query,
        })
    }

    /// The `host[:port]` authority (the port left out when it is the default).
    pub fn authority(&self) -> String {
        if self.port == if self.https { 443 } else { 80 } {
            self.host.to_string()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl std::fmt::Display for ExtAuthUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.authority(), self.path_and_query)
    }
}

/// Forward auth: each request is first described to `url` (a `GET` with the request's
/// method, URI and host in `X-Original-*` / `X-Forwarded-*` headers and the headers
/// named in `headers_to_send`); a 2xx answer lets it pass, with the answer's headers
/// named in `response_headers` set on the forwarded request; any other answer is
/// returned to the client (401 with the service's `WWW-Authenticate`, 403, ...), or
/// a redirect to `signin_url` for a 401 when it is set. A service that does not answer
/// in `timeout` (or cannot be reached) makes the request fail with `status_on_error`,
/// or pass when `fail_open`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExtAuth {
    /// The service asked.
    pub url: ExtAuthUrl,
    /// Request headers sent along (lowercase names), besides the `X-Original-*` and
    /// `X-Forwarded-*` ones weir sets.
    pub headers_to_send: Vec<Arc<str>>,
    /// Headers of a 2xx answer copied onto the forwarded request (lowercase names;
    /// any the client sent under those names are removed first).
    pub response_headers: Vec<Arc<str>>,
    /// How long the service may take to answer.
    pub timeout: Duration,
    /// Remembered answers, keyed by the values of `headers_to_send` (the credentials).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<ExtAuthCache>,
    /// Whether a request passes when the service fails (default: refused).
    pub fail_open: bool,
    /// The status of a request refused because the service failed (default 503).
    pub status_on_error: u16,
    /// Where a client refused with 401 is redirected (302, the original URL in `rd`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signin_url: Option<Arc<str>>,
    /// PEM CA certificates an `https` service may chain to, besides the system's roots
    /// (push protocol version 4).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "pem_len")]
    pub ca_pem: Option<Arc<str>>,
}

fn pem_len<S: serde::Serializer>(pem: &Option<Arc<str>>, s: S) -> Result<S::Ok, S::Error> {
    match pem {
        Some(p) => s.serialize_str(&format!("{} bytes of PEM", p.len())),
        None => s.serialize_none(),
    }
}

/// The fields in declaration order, as `derive(Hash)` hashed them before `ca_pem`
/// existed, and `ca_pem` only when set: a policy without it keeps the hash of earlier
/// releases (their data planes rebuild it to the hash sent).
impl std::hash::Hash for ExtAuth {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.url.hash(state);
        self.headers_to_send.hash(state);
        self.response_headers.hash(state);
        self.timeout.hash(state);
        self.cache.hash(state);
        self.fail_open.hash(state);
        self.status_on_error.hash(state);
        self.signin_url.hash(state);
        if let Some(ca) = &self.ca_pem {
            ca.hash(state);
        }
    }
}

/// How answers of an authorization service are remembered: for `ttl`, at most
/// `max_entries` of them per policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ExtAuthCache {
    /// How long an answer is reused.
    pub ttl: Duration,
    /// The most answers kept.
    pub max_entries: u32,
}

impl ExtAuth {
    /// The longest `timeout` accepted.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
    /// The most headers in `headers_to_send` or `response_headers`.
    pub const MAX_HEADERS: usize = 64;
    /// The largest `cache.max_entries`.
    pub const MAX_CACHE_ENTRIES: u32 = 1 << 20;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_are_refused_with_a_reason() {
        let u = ExtAuthUrl::parse("http://auth.example:9000/check?x=1").unwrap();
        assert_eq!(
            (u.https, &*u.host, u.port, &*u.path_and_query),
            (false, "auth.example", 9000, "/check?x=1")
        );
        assert_eq!(u.to_string(), "http://auth.example:9000/check?x=1");
        let u = ExtAuthUrl::parse("https://Auth.Example").unwrap();
        assert_eq!((u.port, &*u.path_and_query), (443, "/"));
        assert_eq!(u.to_string(), "https://auth.example/");
        let u = ExtAuthUrl::parse("http://[::1]:81/a").unwrap();
        assert_eq!((&*u.host, u.port), ("[::1]", 81));
        for bad in [
            "ftp://x/",
            "http://",
            "http://a b/",
            "http://u:p@host/",
            "http://host:0/",
            "http://host:99999/",
            "http://host/#frag",
            "http://[::1/",
            "http://ho_st/",
        ] {
            assert!(ExtAuthUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
