//! The consistent-hash key of a request ([`weir_model::HashOn`]), and the cookie weir sets
//! when it generates one.
//!
//! The key is the stable hash ([`crate::ring::key_hash`]) of a header's value, a cookie's
//! value or the client's address (the peer, or through trusted proxies the client they
//! name), so every data plane with the same endpoints sends a key to the same endpoint. A
//! request without the header or cookie has no key (the default balancer takes it),
//! unless the cookie is generated: then it gets a random value, hashed like any other, and
//! the response sets it (`Set-Cookie: <name>=<16 hex digits>; Path=…[; Max-Age=…];
//! HttpOnly[; SameSite=…][; Secure]`), so the client's next requests carry it and stay on
//! the endpoint. The cookie is `Secure` when the request came over TLS (a client that
//! reached weir over HTTPS keeps the cookie to HTTPS), when the policy asks for it on
//! every response (ingress-nginx's `session-cookie-secure`), and with `SameSite=None`. A
//! generated header (Gateway API `sessionPersistence` of type `Header`) works the same
//! way, the value coming back in the same response header.

use std::net::IpAddr;

use http::HeaderMap;
use http::header::{self, HeaderName, HeaderValue};
use weir_model::{GeneratedCookie, HashOn, SameSite};

use crate::ring::key_hash;
use crate::{router, same_site};

/// A request's key, and the cookie to set when the key was generated.
#[derive(Debug, Default)]
pub(crate) struct Affinity {
    /// The ring position of the request's key (`None`: no key).
    pub(crate) key: Option<u64>,
    /// The response header that hands a generated key to the client (`Set-Cookie`, or
    /// a generated header).
    pub(crate) set_header: Option<(HeaderName, HeaderValue)>,
}

/// The key of a request with `headers` from `client`, by `on`; `tls`: the request came
/// over TLS (a generated cookie is then `Secure`).
pub(crate) fn of_request(on: &HashOn, headers: &HeaderMap, client: IpAddr, tls: bool) -> Affinity {
    match on {
        HashOn::SourceIp => Affinity {
            key: Some(ip_key(client)),
            set_header: None,
        },
        HashOn::Header(name) => Affinity {
            key: headers.get(&**name).map(|v| key_hash(v.as_bytes())),
            set_header: None,
        },
        HashOn::GeneratedHeader(name) => match headers.get(&**name) {
            Some(v) if !v.is_empty() => Affinity {
                key: Some(key_hash(v.as_bytes())),
                set_header: None,
            },
            _ => {
                let value = format!("{:016x}", router::next_random());
                Affinity {
                    key: Some(key_hash(value.as_bytes())),
                    set_header: HeaderName::from_bytes(name.as_bytes())
                        .ok()
                        .zip(HeaderValue::try_from(value).ok()),
                }
            }
        },
        HashOn::Cookie { name, generate } => match cookie(headers, name) {
            Some(value) => Affinity {
                key: Some(key_hash(value)),
                set_header: None,
            },
            None => match generate {
                None => Affinity::default(),
                Some(g) => {
                    let value = format!("{:016x}", router::next_random());
                    Affinity {
                        key: Some(key_hash(value.as_bytes())),
                        set_header: set_cookie(name, &value, g, headers, tls)
                            .map(|v| (header::SET_COOKIE, v)),
                    }
                }
            },
        },
    }
}

/// The key of an L4 connection or UDP session from `client`: only a consistent hash by
/// source IP has one (no headers or cookies there).
pub(crate) fn l4_key(cluster: &crate::balance::ClusterState, client: IpAddr) -> Option<u64> {
    match cluster.hash_on()? {
        HashOn::SourceIp => Some(ip_key(client)),
        HashOn::Header(_) | HashOn::Cookie { .. } | HashOn::GeneratedHeader(_) => None,
    }
}

/// Of `backends`, the one for `key` by weighted rendezvous hashing: each backend scores
/// `-ln(u) / weight`, `u` a uniform value from the key and the backend's cluster, and
/// the lowest wins. A key keeps its backend while the rule's backends stay, each gets
/// keys in proportion to its weight, and removing one moves only its own keys.
pub(crate) fn backend_for_key(backends: &[weir_model::WeightedBackend], key: u64) -> Option<usize> {
    let mut best: Option<(f64, usize)> = None;
    for (i, b) in backends.iter().enumerate() {
        if b.weight == 0 {
            continue;
        }
        let mut bytes = key.to_le_bytes().to_vec();
        bytes.extend_from_slice(b.cluster.0.as_bytes());
        // 53 random bits in (0, 1].
        let u = ((key_hash(&bytes) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let score = -u.ln() / f64::from(b.weight);
        if best.is_none_or(|(s, _)| score < s) {
            best = Some((score, i));
        }
    }
    best.map(|(_, i)| i)
}

/// The key of a client address (IPv4-mapped IPv6 addresses count as IPv4).
pub(crate) fn ip_key(ip: IpAddr) -> u64 {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(a) => key_hash(&a.octets()),
        IpAddr::V6(a) => key_hash(&a.octets()),
    }
}

/// The value of cookie `name` in the request's `Cookie` headers (the first one named so).
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a [u8]> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii();
            let eq = pair.iter().position(|b| *b == b'=')?;
            let (n, v) = (&pair[..eq], &pair[eq + 1..]);
            (n.trim_ascii() == name.as_bytes()).then(|| {
                let v = v.trim_ascii();
                v.strip_prefix(b"\"")
                    .and_then(|v| v.strip_suffix(b"\""))
                    .unwrap_or(v)
            })
        })
        .filter(|v| !v.is_empty())
}

/// The `Set-Cookie` value of a generated cookie, for a request with `headers` (its
/// `User-Agent` decides whether a conditional `SameSite=None` is written) that came over
/// TLS or not (`tls`).
fn set_cookie(
    name: &str,
    value: &str,
    g: &GeneratedCookie,
    headers: &HeaderMap,
    tls: bool,
) -> Option<HeaderValue> {
    let mut s = format!("{name}={value}; Path={}", g.path);
    if let Some(ttl) = g.ttl {
        s += &format!("; Max-Age={}", ttl.as_secs().max(1));
    }
    s += "; HttpOnly";
    let mut secure = g.secure || tls;
    match g.same_site {
        None => {}
        Some(SameSite::Strict) => s += "; SameSite=Strict",
        Some(SameSite::Lax) => s += "; SameSite=Lax",
        Some(SameSite::None {
            unless_incompatible,
        }) => {
            let agent = headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if !(unless_incompatible && same_site::rejects_none(agent)) {
                s += "; SameSite=None";
                // Browsers drop a `SameSite=None` cookie that is not `Secure`.
                secure = true;
            }
        }
    }
    if secure {
        s += "; Secure";
    }
    HeaderValue::try_from(s).ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn cookies_are_found_among_others() {
        let h = headers(&[("cookie", "a=1; sid=abc ; b=2"), ("cookie", "sid=second")]);
        assert_eq!(cookie(&h, "sid"), Some(&b"abc"[..]));
        assert_eq!(cookie(&h, "b"), Some(&b"2"[..]));
        assert_eq!(
            cookie(&headers(&[("cookie", "x=\"q\"")]), "x"),
            Some(&b"q"[..])
        );
        assert_eq!(cookie(&h, "si"), None);
        assert_eq!(cookie(&headers(&[("cookie", "sid=")]), "sid"), None);
    }

    #[test]
    fn keys_by_header_cookie_and_address() {
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let by_header = HashOn::Header("x-user".into());
        let a = of_request(&by_header, &headers(&[("x-user", "alice")]), ip, false);
        let b = of_request(
            &by_header,
            &headers(&[("x-user", "alice")]),
            "::1".parse().unwrap(),
            false,
        );
        assert_eq!(a.key, b.key, "the header alone decides");
        assert!(a.key.is_some() && a.set_header.is_none());
        assert!(
            of_request(&by_header, &HeaderMap::new(), ip, false)
                .key
                .is_none()
        );
        let by_ip = of_request(&HashOn::SourceIp, &HeaderMap::new(), ip, false);
        let mapped = of_request(
            &HashOn::SourceIp,
            &HeaderMap::new(),
            "::ffff:192.0.2.7".parse().unwrap(),
            false,
        );
        assert_eq!(by_ip.key, mapped.key);
        // A cookie: read when present, generated (and set) when absent if asked.
        let plain = HashOn::Cookie {
            name: "sid".into(),
            generate: None,
        };
        assert!(
            of_request(&plain, &HeaderMap::new(), ip, false)
                .key
                .is_none()
        );
        let generated = HashOn::Cookie {
            name: "sid".into(),
            generate: Some(GeneratedCookie {
                ttl: Some(Duration::from_secs(3600)),
                path: "/app".into(),
                same_site: None,
                secure: false,
            }),
        };
        let first = of_request(&generated, &HeaderMap::new(), ip, false);
        let (name, set) = first.set_header.expect("a cookie is set");
        assert_eq!(name, header::SET_COOKIE);
        let set = set.to_str().unwrap();
        assert!(set.starts_with("sid="), "{set}");
        assert!(
            set.ends_with("; Path=/app; Max-Age=3600; HttpOnly"),
            "{set}"
        );
        // The client sends it back: same key, no new cookie.
        let value = set.split(';').next().unwrap();
        let again = of_request(&generated, &headers(&[("cookie", value)]), ip, false);
        assert_eq!(again.key, first.key);
        assert!(again.set_header.is_none());
        // A generated header: the value comes back in the response's same header.
        let session = HashOn::GeneratedHeader("x-session".into());
        let first = of_request(&session, &HeaderMap::new(), ip, false);
        let (name, value) = first.set_header.expect("a header is set");
        assert_eq!(name, "x-session");
        let value = value.to_str().unwrap().to_owned();
        let again = of_request(&session, &headers(&[("x-session", &value)]), ip, false);
        assert_eq!(again.key, first.key);
        assert!(again.set_header.is_none());
    }

    #[test]
    fn generated_cookies_carry_same_site() {
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let with = |same_site| HashOn::Cookie {
            name: "sid".into(),
            generate: Some(GeneratedCookie {
                ttl: None,
                path: "/".into(),
                same_site,
                secure: false,
            }),
        };
        let set = |on: &HashOn, agent: &str| {
            let h = headers(&[("user-agent", agent)]);
            let (_, v) = of_request(on, &h, ip, false)
                .set_header
                .expect("a cookie is set");
            v.to_str().unwrap().to_owned()
        };
        let firefox = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0";
        let old_chrome = "Mozilla/5.0 (Windows NT 10.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/60.0.3112.90 Safari/537.36";
        let none = set(&with(None), firefox);
        assert!(none.ends_with("; Path=/; HttpOnly"), "{none}");
        let strict = set(&with(Some(SameSite::Strict)), firefox);
        assert!(strict.ends_with("; HttpOnly; SameSite=Strict"), "{strict}");
        let lax = set(&with(Some(SameSite::Lax)), old_chrome);
        assert!(lax.ends_with("; HttpOnly; SameSite=Lax"), "{lax}");
        // `None` always comes with `Secure`, unless left out for a browser that mishandles it.
        let always = with(Some(SameSite::None {
            unless_incompatible: false,
        }));
        let conditional = with(Some(SameSite::None {
            unless_incompatible: true,
        }));
        for (on, agent, expect) in [
            (&always, firefox, true),
            (&always, old_chrome, true),
            (&conditional, firefox, true),
            (&conditional, old_chrome, false),
        ] {
            let v = set(on, agent);
            assert_eq!(
                v.ends_with("; HttpOnly; SameSite=None; Secure"),
                expect,
                "{agent}: {v}"
            );
            if !expect {
                assert!(v.ends_with("; HttpOnly"), "{v}");
            }
        }
    }

    /// `Secure`: over TLS, on every response when the policy asks (`session-cookie-secure`),
    /// and with `SameSite=None`; never otherwise over plain HTTP.
    #[test]
    fn generated_cookies_are_secure_over_tls_or_when_asked() {
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let with = |same_site, secure| HashOn::Cookie {
            name: "sid".into(),
            generate: Some(GeneratedCookie {
                ttl: Some(Duration::from_secs(60)),
                path: "/".into(),
                same_site,
                secure,
            }),
        };
        let set = |on: &HashOn, tls: bool| {
            let (_, v) = of_request(on, &HeaderMap::new(), ip, tls)
                .set_header
                .expect("a cookie is set");
            v.to_str().unwrap().to_owned()
        };
        let lax = Some(SameSite::Lax);
        let none = Some(SameSite::None {
            unless_incompatible: false,
        });
        for (same_site, secure, tls, expect) in [
            (None, false, false, "; Max-Age=60; HttpOnly"),
            (None, false, true, "; Max-Age=60; HttpOnly; Secure"),
            (None, true, false, "; Max-Age=60; HttpOnly; Secure"),
            (None, true, true, "; Max-Age=60; HttpOnly; Secure"),
            (lax, false, false, "; HttpOnly; SameSite=Lax"),
            (lax, false, true, "; HttpOnly; SameSite=Lax; Secure"),
            (lax, true, false, "; HttpOnly; SameSite=Lax; Secure"),
            (none, false, false, "; HttpOnly; SameSite=None; Secure"),
            (none, true, true, "; HttpOnly; SameSite=None; Secure"),
        ] {
            let v = set(&with(same_site, secure), tls);
            assert!(v.ends_with(expect), "{same_site:?} {secure} {tls}: {v}");
            assert_eq!(
                v.matches("Secure").count(),
                usize::from(expect.ends_with("Secure")),
                "{v}"
            );
        }
        // An old browser given no `SameSite=None` still gets `Secure` when asked for or over TLS.
        let conditional = with(
            Some(SameSite::None {
                unless_incompatible: true,
            }),
            true,
        );
        let old_chrome = "Mozilla/5.0 (Windows NT 10.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/60.0.3112.90 Safari/537.36";
        let h = headers(&[("user-agent", old_chrome)]);
        let (_, v) = of_request(&conditional, &h, ip, false).set_header.unwrap();
        assert!(v.to_str().unwrap().ends_with("; HttpOnly; Secure"), "{v:?}");
    }

    #[test]
    fn backends_by_key_follow_weights_and_move_little() {
        let b = |name: &str, weight: u32| weir_model::WeightedBackend {
            cluster: weir_model::ClusterKey(name.into()),
            weight,
            filters: Vec::new(),
        };
        let three = [b("a", 2), b("b", 1), b("c", 1)];
        let mut share = [0u32; 3];
        for k in 0..8000u32 {
            let key = key_hash(&k.to_le_bytes());
            let i = backend_for_key(&three, key).unwrap();
            assert_eq!(backend_for_key(&three, key), Some(i), "stable");
            share[i] += 1;
            // Without backend "c", only c's keys move.
            let two = [b("a", 2), b("b", 1)];
            let j = backend_for_key(&two, key).unwrap();
            if i < 2 {
                assert_eq!(i, j, "key {k} moved although its backend stayed");
            }
        }
        assert!((3600..4400).contains(&share[0]), "{share:?}");
        assert!((1600..2400).contains(&share[1]), "{share:?}");
        assert_eq!(backend_for_key(&[b("a", 0)], 1), None);
    }
}
