//! Fuzzes `weir_proxy::parse_proxy_header`, the PROXY protocol (v1/v2) header a listener
//! behind a load balancer reads before anything else on a connection (untrusted bytes
//! when the listener accepts headers from any peer). Properties:
//! - parsing never panics;
//! - a header's length is within the input and the version's bound;
//! - the answer is stable: any longer input (more bytes appended) parses to the same
//!   header, and every strict prefix of a header's bytes needs more (never "invalid");
//! - it agrees with a reference written independently below on which inputs are
//!   headers, and on the client address they name.

#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use libfuzzer_sys::fuzz_target;
use weir_proxy::{MAX_PROXY_V1, MAX_PROXY_V2, ProxyHeader, parse_proxy_header};

const SIG: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";

fuzz_target!(|data: &[u8]| {
    let got = parse_proxy_header(data);
    match got {
        ProxyHeader::Header { len, .. } => {
            assert!(len <= data.len());
            assert!(len <= MAX_PROXY_V1.max(MAX_PROXY_V2));
            let mut longer = data.to_vec();
            longer.extend_from_slice(b"GET / HTTP/1.1\r\n");
            assert_eq!(parse_proxy_header(&longer), got);
            for end in [0, len / 2, len.saturating_sub(1)] {
                if end < len {
                    assert_eq!(
                        parse_proxy_header(&data[..end]),
                        ProxyHeader::NeedMore,
                        "{end}"
                    );
                }
            }
        }
        ProxyHeader::NeedMore => {
            assert!(data.len() < MAX_PROXY_V1.max(MAX_PROXY_V2));
        }
        ProxyHeader::Invalid(_) => {}
    }
    assert_eq!(reference(data), summary(got), "{data:?}");
});

/// What the comparison keeps of an answer: header (length, source), or need more, or
/// invalid.
#[derive(Debug, PartialEq)]
enum Summary {
    Header(usize, Option<SocketAddr>),
    More,
    Invalid,
}

fn summary(p: ProxyHeader) -> Summary {
    match p {
        ProxyHeader::Header { len, source } => Summary::Header(len, source),
        ProxyHeader::NeedMore => Summary::More,
        ProxyHeader::Invalid(_) => Summary::Invalid,
    }
}

fn reference(d: &[u8]) -> Summary {
    if !d.is_empty() && (SIG.starts_with(d) || d.starts_with(SIG)) {
        return v2(d);
    }
    if b"PROXY ".starts_with(d) {
        return Summary::More;
    }
    if d.starts_with(b"PROXY ") {
        return v1(d);
    }
    Summary::Invalid
}

fn v2(d: &[u8]) -> Summary {
    if d.len() < 16 {
        return Summary::More;
    }
    let version = d[12] / 16;
    let command = d[12] % 16;
    let family = d[13] / 16;
    let transport = d[13] % 16;
    let len = 16 + usize::from(d[14]) * 256 + usize::from(d[15]);
    if version != 2 || len > MAX_PROXY_V2 || command > 1 || family > 3 || transport > 2 {
        return Summary::Invalid;
    }
    if d.len() < len {
        return Summary::More;
    }
    if command == 0 {
        return Summary::Header(len, None);
    }
    let body = &d[16..len];
    match family {
        1 if body.len() < 12 => Summary::Invalid,
        1 => {
            let ip = Ipv4Addr::new(body[0], body[1], body[2], body[3]);
            let port = u16::from(body[8]) * 256 + u16::from(body[9]);
            Summary::Header(len, Some(SocketAddr::new(IpAddr::V4(ip), port)))
        }
        2 if body.len() < 36 => Summary::Invalid,
        2 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&body[..16]);
            let port = u16::from(body[32]) * 256 + u16::from(body[33]);
            Summary::Header(
                len,
                Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(o)), port)),
            )
        }
        _ => Summary::Header(len, None),
    }
}

fn v1(d: &[u8]) -> Summary {
    let limit = d.len().min(MAX_PROXY_V1);
    let Some(end) = d[..limit].windows(1).position(|w| w[0] == b'\n') else {
        return if d.len() >= MAX_PROXY_V1 {
            Summary::Invalid
        } else {
            Summary::More
        };
    };
    if end == 0 || d[end - 1] != b'\r' {
        return Summary::Invalid;
    }
    let Ok(text) = std::str::from_utf8(&d[6..end - 1]) else {
        return Summary::Invalid;
    };
    let words: Vec<&str> = text.split(' ').collect();
    if words[0] == "UNKNOWN" {
        return Summary::Header(end + 1, None);
    }
    if words.len() != 5 || !["TCP4", "TCP6"].contains(&words[0]) {
        return Summary::Invalid;
    }
    let v4 = words[0] == "TCP4";
    let ip = |s: &str| -> Option<IpAddr> {
        if v4 {
            s.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
        } else {
            s.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
        }
    };
    let port = |s: &str| -> Option<u16> {
        let plain = !s.is_empty()
            && s.chars().all(|c| c.is_ascii_digit())
            && (s == "0" || !s.starts_with('0'));
        if plain { s.parse().ok() } else { None }
    };
    match (ip(words[1]), ip(words[2]), port(words[3]), port(words[4])) {
        (Some(src), Some(_), Some(sport), Some(_)) => {
            Summary::Header(end + 1, Some(SocketAddr::new(src, sport)))
        }
        _ => Summary::Invalid,
    }
}
