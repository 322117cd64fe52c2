//! Fuzzes `weir_proxy::canonical_host`, which makes a request's host (from its target
//! and its `Host` fields, all client-controlled) the one host routed on and forwarded.
//! Input: the first byte's two lowest bits pick HTTP/1.0, HTTP/1.1 or HTTP/2, bit 2 says
//! whether the target carries an authority (absolute-form or `:authority`), bits 3–4 how
//! many `Host` fields follow; the rest, split at `\n`, is the authority then the fields.
//! Properties:
//! - it never panics;
//! - two or more `Host` fields are refused as repeated, none at all (HTTP/1.1 and
//!   HTTP/2 without an authority) as missing, and only an HTTP/1.0 request may name no
//!   host;
//! - an accepted host is the request's one `Host` field afterwards, equals the target's
//!   authority when there is one, is `host[:port]` of unreserved characters or a bracketed
//!   IPv6 literal (no userinfo, lists, spaces, paths) with a port of at most 65535, and
//!   is accepted again, unchanged, when it is the only thing the request names.

#![no_main]

use http::header::{HOST, HeaderValue};
use http::uri::Authority;
use http::{Request, Uri, Version};
use libfuzzer_sys::fuzz_target;
use weir_proxy::{InvalidHost, canonical_host};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let version = match flags & 3 {
        0 => Version::HTTP_10,
        1 => Version::HTTP_11,
        _ => Version::HTTP_2,
    };
    let with_authority = flags & 4 != 0;
    let fields = usize::from((flags >> 3) & 3);
    let mut parts = rest.split(|&b| b == b'\n');
    let mut uri = Uri::builder().path_and_query("/");
    let mut authority = None;
    if with_authority {
        let Ok(a) = Authority::try_from(parts.next().unwrap_or_default()) else {
            return;
        };
        uri = uri.scheme("http").authority(a.clone());
        authority = Some(a);
    }
    let mut req = Request::builder()
        .version(version)
        .uri(uri.build().expect("uri"));
    for _ in 0..fields {
        let Ok(value) = HeaderValue::from_bytes(parts.next().unwrap_or_default()) else {
            return;
        };
        req = req.header(HOST, value);
    }
    let mut req = req.body(()).expect("request");
    match canonical_host(&mut req) {
        Err(InvalidHost::Repeated) => assert!(fields >= 2),
        Err(InvalidHost::Missing) => {
            assert!(fields == 0 && authority.is_none() && version >= Version::HTTP_11)
        }
        Err(_) => assert!(fields < 2),
        Ok(None) => {
            assert!(fields == 0 && authority.is_none() && version == Version::HTTP_10)
        }
        Ok(Some(host)) => {
            assert!(fields < 2);
            let all: Vec<_> = req.headers().get_all(HOST).iter().collect();
            assert_eq!(all, [&host]);
            if let Some(a) = &authority {
                assert_eq!(host.as_bytes(), a.as_str().as_bytes());
            }
            well_formed(host.as_bytes());
            let mut again = Request::builder()
                .version(Version::HTTP_11)
                .header(HOST, host.clone())
                .body(())
                .expect("request");
            assert_eq!(canonical_host(&mut again), Ok(Some(host)));
        }
    }
});

fn well_formed(host: &[u8]) {
    let port = if let Some(literal) = host.strip_prefix(b"[") {
        let end = literal.iter().position(|&b| b == b']').expect("closing ]");
        let ip = std::str::from_utf8(&literal[..end]).expect("ASCII literal");
        assert!(ip.parse::<std::net::Ipv6Addr>().is_ok(), "{ip:?}");
        match &literal[end + 1..] {
            [] => None,
            [b':', port @ ..] => Some(port),
            other => panic!("after the literal: {other:?}"),
        }
    } else {
        let (name, port) = match host.iter().rposition(|&b| b == b':') {
            Some(i) => (&host[..i], Some(&host[i + 1..])),
            None => (host, None),
        };
        assert!(!name.is_empty());
        assert!(
            name.iter()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(b)),
            "{name:?}"
        );
        port
    };
    if let Some(port) = port.filter(|p| !p.is_empty()) {
        let port = std::str::from_utf8(port).expect("ASCII port");
        assert!(port.parse::<u16>().is_ok(), "port {port:?}");
    }
}
