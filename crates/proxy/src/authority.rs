//! One host per request: the one routed on is the one forwarded.
//!
//! A request can name its host twice: in the target (HTTP/2 `:authority`, an HTTP/1.1
//! absolute-form or CONNECT target) and in `Host` header fields. If weir routed on one
//! and the backend read the other, a client could reach one virtual host's backend while
//! that backend believes it serves another (cache poisoning, password-reset links to the
//! attacker's host, bypassing a host-based rule). So, before routing:
//!
//! - more than one `Host` field, or a value that is not `host[:port]`, is a 400
//!   (RFC 9112 §3.2), as is an HTTP/1.1 or HTTP/2 request that names no host at all;
//! - a host in the target wins, and `Host` is replaced by it: RFC 9112 §3.2.2 for the
//!   absolute-form, RFC 9113 §8.3.1 for `:authority`.
//!
//! Afterwards the request's `Host` field (when it names a host) is the host routed on.

use std::net::Ipv6Addr;

use http::header::{self, HeaderValue};
use http::{Request, Version};

/// Why a request's host is rejected (answered 400).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidHost {
    /// More than one `Host` field.
    #[error("more than one Host header")]
    Repeated,
    /// An HTTP/1.1 or HTTP/2 request with neither a `Host` field nor a host in its target.
    #[error("no Host header")]
    Missing,
    /// Not `host[:port]`: userinfo (`a@b`), a list (`a,b`), spaces, an empty host, a
    /// malformed IPv6 literal, non-ASCII.
    #[error("malformed host")]
    Malformed,
    /// A port that is not a number from 0 to 65535.
    #[error("invalid port in host")]
    Port,
}

/// Validates the request's host and makes its `Host` field the one host of the request
/// (see the module documentation). Returns that host, or `None` for an HTTP/1.0 request
/// that names none. Public for the `host` fuzz target.
pub fn canonical_host<B>(req: &mut Request<B>) -> Result<Option<HeaderValue>, InvalidHost> {
    let mut fields = req.headers().get_all(header::HOST).iter();
    let field = fields.next();
    if fields.next().is_some() {
        return Err(InvalidHost::Repeated);
    }
    match (req.uri().authority(), field) {
        (Some(target), field) => {
            validate(target.as_str().as_bytes())?;
            if let Some(field) = field
                && field.as_bytes() == target.as_str().as_bytes()
            {
                return Ok(Some(field.clone()));
            }
            let host =
                HeaderValue::from_str(target.as_str()).map_err(|_| InvalidHost::Malformed)?;
            req.headers_mut().insert(header::HOST, host.clone());
            Ok(Some(host))
        }
        (None, Some(field)) => {
            validate(field.as_bytes())?;
            Ok(Some(field.clone()))
        }
        (None, None) if matches!(req.version(), Version::HTTP_10 | Version::HTTP_09) => Ok(None),
        (None, None) => Err(InvalidHost::Missing),
    }
}

/// Checks `host[:port]`: a registered name or IPv4 address of unreserved characters
/// (RFC 3986 `reg-name` without escapes and sub-delimiters, which no DNS name needs and
/// which make `a,b` lists and `a;b` parameters look like hosts), or a bracketed IPv6
/// literal; the port, if present, at most 65535 (an empty port is allowed, as in RFC
/// 3986).
fn validate(value: &[u8]) -> Result<(), InvalidHost> {
    let port = if let Some(literal) = value.strip_prefix(b"[") {
        let end = literal
            .iter()
            .position(|&b| b == b']')
            .ok_or(InvalidHost::Malformed)?;
        let ip = std::str::from_utf8(&literal[..end]).map_err(|_| InvalidHost::Malformed)?;
        ip.parse::<Ipv6Addr>().map_err(|_| InvalidHost::Malformed)?;
        match &literal[end + 1..] {
            [] => None,
            [b':', port @ ..] => Some(port),
            _ => return Err(InvalidHost::Malformed),
        }
    } else {
        let (name, port) = match value.iter().position(|&b| b == b':') {
            Some(i) => (&value[..i], Some(&value[i + 1..])),
            None => (value, None),
        };
        let name_byte =
            |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~');
        if name.is_empty() || !name.iter().all(name_byte) {
            return Err(InvalidHost::Malformed);
        }
        port
    };
    match port {
        None | Some([]) => Ok(()),
        Some(digits) if digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit) => {
            let n = digits
                .iter()
                .fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
            if n <= u32::from(u16::MAX) {
                Ok(())
            } else {
                Err(InvalidHost::Port)
            }
        }
        Some(_) => Err(InvalidHost::Port),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_values() {
        for ok in [
            "a.test",
            "A.Test:8080",
            "a.test.",
            "a.test:",
            "a.test:0",
            "a.test:65535",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:443",
            "[2001:db8::1]:8080",
            "under_score~x-y",
        ] {
            assert_eq!(validate(ok.as_bytes()), Ok(()), "{ok}");
        }
        for (bad, err) in [
            ("a.test:65536", InvalidHost::Port),
            ("a.test:99999", InvalidHost::Port),
            ("a.test:123456", InvalidHost::Port),
            ("a.test:8o", InvalidHost::Port),
            ("a.test:80:81", InvalidHost::Port),
            ("a.test: 80", InvalidHost::Port),
            ("a@b.test", InvalidHost::Malformed),
            ("user:pw@b.test", InvalidHost::Port),
            ("a.test,b.test", InvalidHost::Malformed),
            (":80", InvalidHost::Malformed),
            ("", InvalidHost::Malformed),
            ("a .test", InvalidHost::Malformed),
            ("a.test ", InvalidHost::Malformed),
            ("a%2etest", InvalidHost::Malformed),
            ("[::1", InvalidHost::Malformed),
            ("[nope]", InvalidHost::Malformed),
            ("[::1]x", InvalidHost::Malformed),
            ("[::1]:70000", InvalidHost::Port),
            ("caf\u{e9}.test", InvalidHost::Malformed),
        ] {
            assert_eq!(validate(bad.as_bytes()), Err(err), "{bad:?}");
        }
    }

    fn request(version: Version, uri: &str, hosts: &[&str]) -> Request<()> {
        let mut req = Request::builder().version(version).uri(uri);
        for h in hosts {
            req = req.header(header::HOST, *h);
        }
        req.body(()).unwrap()
    }

    fn host_fields(req: &Request<()>) -> Vec<&str> {
        req.headers()
            .get_all(header::HOST)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    }

    #[test]
    fn the_target_wins_and_replaces_host() {
        let mut r = request(Version::HTTP_11, "http://b.test:81/x", &["a.test"]);
        assert_eq!(canonical_host(&mut r).unwrap().unwrap(), "b.test:81");
        assert_eq!(host_fields(&r), ["b.test:81"]);

        let mut r = request(Version::HTTP_2, "https://b.test/x", &["a.test"]);
        assert_eq!(canonical_host(&mut r).unwrap().unwrap(), "b.test");
        assert_eq!(host_fields(&r), ["b.test"]);

        let mut r = request(Version::HTTP_2, "https://b.test/x", &[]);
        assert_eq!(canonical_host(&mut r).unwrap().unwrap(), "b.test");
        assert_eq!(host_fields(&r), ["b.test"]);

        let mut r = request(Version::HTTP_11, "/x", &["a.test"]);
        assert_eq!(canonical_host(&mut r).unwrap().unwrap(), "a.test");
        assert_eq!(host_fields(&r), ["a.test"]);
    }

    #[test]
    fn repeated_missing_and_invalid_hosts_are_rejected() {
        let mut r = request(Version::HTTP_11, "/", &["a.test", "a.test"]);
        assert_eq!(canonical_host(&mut r), Err(InvalidHost::Repeated));
        let mut r = request(Version::HTTP_11, "/", &[]);
        assert_eq!(canonical_host(&mut r), Err(InvalidHost::Missing));
        let mut r = request(Version::HTTP_2, "/", &[]);
        assert_eq!(canonical_host(&mut r), Err(InvalidHost::Missing));
        let mut r = request(Version::HTTP_10, "/", &[]);
        assert_eq!(canonical_host(&mut r), Ok(None));
        let mut r = request(Version::HTTP_11, "http://u@b.test/", &["b.test"]);
        assert_eq!(canonical_host(&mut r), Err(InvalidHost::Malformed));
        let mut r = request(Version::HTTP_11, "/", &["a.test:99999"]);
        assert_eq!(canonical_host(&mut r), Err(InvalidHost::Port));
    }
}
