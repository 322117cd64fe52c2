//! Request matching and backend choice.
//!
//! A virtual host's rules arrive sorted by precedence (the translator applies Gateway API
//! ordering), so matching is "first rule whose matcher holds". There is no fallback from
//! a virtual host to a less specific one: the host decides the rule list, and a request
//! that no rule of it matches gets [`RouteOutcome::NoRoute`].

use std::borrow::Cow;
use std::cell::Cell;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use weir_model::{HeaderMatch, QueryMatch, RequestMatch, RouteRule, WeightedBackend};

/// The parts of a request that routing looks at.
#[derive(Clone, Copy, Debug)]
pub struct RequestView<'a> {
    /// Normalized host: lower-case, no port, no trailing dot (see [`normalize_host`]).
    pub host: &'a str,
    /// Path without the query.
    pub path: &'a str,
    /// Raw query string without the `?`.
    pub query: Option<&'a str>,
    /// Request method.
    pub method: &'a http::Method,
    /// Request headers.
    pub headers: &'a http::HeaderMap,
}

/// The result of routing one request on one listener.
#[derive(Clone, Copy, Debug)]
pub enum RouteOutcome<'a> {
    /// No virtual host matches the request's host.
    NoHost,
    /// A virtual host matches, but none of its rules does.
    NoRoute,
    /// The first rule (in precedence order) whose conditions all hold.
    Matched(&'a Arc<RouteRule>),
}

/// Host from the URI authority (HTTP/2) or Host header (HTTP/1.1): lower-cased, port and a
/// trailing dot removed. Borrows when nothing has to be lower-cased. IPv6 literals keep
/// their brackets (`[::1]:8080` → `[::1]`).
pub(crate) fn normalize_host(authority: &str) -> Cow<'_, str> {
    // Byte loops, not the `str` searchers: on a host of a few bytes their setup cost
    // 250 instructions a request (the bytes looked for are ASCII, so every cut is on a
    // character boundary).
    let start = authority
        .bytes()
        .rposition(|b| b == b'@')
        .map_or(0, |i| i + 1);
    let a = &authority[start..];
    let host = if a.starts_with('[') {
        a.bytes().position(|b| b == b']').map_or(a, |i| &a[..=i])
    } else {
        a.bytes().position(|b| b == b':').map_or(a, |i| &a[..i])
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    }
}

/// The first rule of `rules` whose matcher holds for `req`.
pub(crate) fn first_match<'r>(
    rules: &'r [Arc<RouteRule>],
    req: &RequestView<'_>,
) -> Option<&'r Arc<RouteRule>> {
    let mut query = LazyQuery::new(req.query);
    rules
        .iter()
        .find(|rule| matches(&rule.matcher, req, &mut query))
}

/// Whether every condition of `m` holds. Cheap conditions are checked first.
fn matches<'q>(m: &RequestMatch, req: &RequestView<'q>, query: &mut LazyQuery<'q>) -> bool {
    if let Some(method) = &m.method
        && req.method.as_str() != &**method
    {
        return false;
    }
    if !m.path.matches(req.path) {
        return false;
    }
    if !m.headers.iter().all(|h| header_matches(h, req.headers)) {
        return false;
    }
    m.query.is_empty() || m.query.iter().all(|q| query_matches(q, query.pairs()))
}

/// A header condition holds when *any* of the request's values for that name matches
/// (repeated headers are not comma-joined). Values that are not UTF-8 never match.
fn header_matches(m: &HeaderMatch, headers: &http::HeaderMap) -> bool {
    headers
        .get_all(&*m.name)
        .iter()
        .any(|v| std::str::from_utf8(v.as_bytes()).is_ok_and(|s| m.value.matches(s)))
}

/// A query condition compares the raw (not percent-decoded, `+` kept as is) value of the
/// first parameter with that name; a parameter without `=` has the empty value.
fn query_matches(m: &QueryMatch, pairs: &[(&str, &str)]) -> bool {
    pairs
        .iter()
        .find(|(name, _)| *name == &*m.name)
        .is_some_and(|(_, v)| m.value.matches(v))
}

/// The query string, split into pairs the first time a rule needs it.
struct LazyQuery<'q> {
    raw: Option<&'q str>,
    pairs: Option<Vec<(&'q str, &'q str)>>,
}

impl<'q> LazyQuery<'q> {
    fn new(raw: Option<&'q str>) -> Self {
        LazyQuery { raw, pairs: None }
    }

    fn pairs(&mut self) -> &[(&'q str, &'q str)] {
        let raw = self.raw;
        self.pairs.get_or_insert_with(|| {
            raw.unwrap_or("")
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| p.split_once('=').unwrap_or((p, "")))
                .collect()
        })
    }
}

/// Picks one of a rule's weighted backends at random, in proportion to the weights
/// (0 = never), and returns its index. `None` if the list is empty or every weight is 0.
pub(crate) fn pick_backend(backends: &[WeightedBackend]) -> Option<usize> {
    pick_weighted(backends, |b| b.weight)
}

/// The index of an item chosen at random in proportion to `weight` (weight 0: never);
/// `None` when every weight is 0. For a rule's backends and an L4 route's alike.
pub(crate) fn pick_weighted<T>(items: &[T], weight: impl Fn(&T) -> u32) -> Option<usize> {
    let total: u64 = items.iter().map(|b| u64::from(weight(b))).sum();
    if total == 0 {
        return None;
    }
    if items.len() == 1 {
        return Some(0);
    }
    // Multiply-shift maps a 64-bit random value onto 0..total without a division.
    let mut r = ((u128::from(next_random()) * u128::from(total)) >> 64) as u64;
    for (i, b) in items.iter().enumerate() {
        let w = u64::from(weight(b));
        if r < w {
            return Some(i);
        }
        r -= w;
    }
    // Unreachable because r < total, but never panic on the request path.
    items.iter().rposition(|b| weight(b) > 0)
}

thread_local! {
    static RNG: Cell<u64> = Cell::new(thread_seed());
}

/// A distinct seed per thread: a process-wide counter hashed with std's randomly keyed
/// hasher, so threads and processes do not share sequences.
fn thread_seed() -> u64 {
    static THREADS: AtomicU64 = AtomicU64::new(0);
    let n = THREADS.fetch_add(1, Ordering::Relaxed);
    std::collections::hash_map::RandomState::new().hash_one(n)
}

/// wyrand: a tiny, fast, statistically good non-cryptographic generator.
pub(crate) fn next_random() -> u64 {
    RNG.with(|state| {
        let s = state.get().wrapping_add(0xa076_1d64_78bd_642f);
        state.set(s);
        let t = u128::from(s) * u128::from(s ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) as u64) ^ (t as u64)
    })
}

/// A smooth weighted round-robin schedule: endpoint indexes in the order they are
/// picked over one cycle. Each index appears in proportion to its weight (weights are
/// divided by their gcd and, when their sum exceeds `cap`, scaled down, keeping every
/// positive weight at least 1). Weight 0 is left out. Picks of one endpoint are spread
/// evenly: its k-th pick of w sits at time (2k+1)/(2w) of the cycle, and the schedule is
/// all picks sorted by time (ties by index).
pub(crate) fn wrr_schedule(weights: &[u32], cap: u64) -> Vec<u32> {
    let g = weights.iter().copied().filter(|w| *w > 0).fold(0u32, gcd);
    if g == 0 {
        return Vec::new();
    }
    let mut reduced: Vec<u64> = weights.iter().map(|w| u64::from(w / g)).collect();
    let total: u64 = reduced.iter().sum();
    if total > cap {
        for w in reduced.iter_mut().filter(|w| **w > 0) {
            *w = (*w * cap / total).max(1);
        }
    }
    let mut picks: Vec<(u32, u64, u64)> = Vec::with_capacity(reduced.iter().sum::<u64>() as usize);
    for (i, &w) in reduced.iter().enumerate() {
        let Ok(i) = u32::try_from(i) else { break };
        picks.extend((0..w).map(|k| (i, k, w)));
    }
    // Compare (2a+1)/(2wa) with (2b+1)/(2wb) by cross-multiplying.
    picks.sort_unstable_by(|&(ia, ka, wa), &(ib, kb, wb)| {
        ((2 * ka + 1) * wb)
            .cmp(&((2 * kb + 1) * wa))
            .then(ia.cmp(&ib))
    });
    picks.into_iter().map(|(i, _, _)| i).collect()
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_model::{
        Action, ClusterKey, PathMatch, Pattern, RouteKind, RouteRef, StringMatch, Timeouts,
    };

    fn rule(n: u32, matcher: RequestMatch) -> Arc<RouteRule> {
        Arc::new(RouteRule::new(
            RouteRef {
                kind: RouteKind::HttpRoute,
                namespace: "ns".into(),
                name: "r".into(),
                rule: n,
            },
            matcher,
            vec![],
            Action::Fail {
                status: 500,
                reason: "x".into(),
            },
            Timeouts::default(),
        ))
    }

    fn path(p: PathMatch) -> RequestMatch {
        RequestMatch {
            path: p,
            headers: vec![],
            query: vec![],
            method: None,
        }
    }

    fn prefix(p: &str) -> PathMatch {
        PathMatch::Prefix(p.into())
    }

    fn route(
        rules: &[Arc<RouteRule>],
        method: &http::Method,
        path_and_query: &str,
        headers: &[(&str, &str)],
    ) -> Option<u32> {
        let mut map = http::HeaderMap::new();
        for (k, v) in headers {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let (p, q) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        let req = RequestView {
            host: "h",
            path: p,
            query: q,
            method,
            headers: &map,
        };
        first_match(rules, &req).map(|r| r.route.rule)
    }

    #[test]
    fn normalize() {
        assert!(matches!(
            normalize_host("example.com"),
            Cow::Borrowed("example.com")
        ));
        assert!(matches!(
            normalize_host("example.com:8080"),
            Cow::Borrowed("example.com")
        ));
        assert!(matches!(
            normalize_host("example.com."),
            Cow::Borrowed("example.com")
        ));
        assert_eq!(normalize_host("Example.COM.:443"), "example.com");
        assert_eq!(normalize_host("[::1]:8080"), "[::1]");
        assert_eq!(normalize_host("[::1]"), "[::1]");
        assert_eq!(normalize_host("user@Host:1"), "host");
        assert_eq!(normalize_host("a:b@c@Host:1"), "host");
        assert_eq!(normalize_host("u@[::1]:2"), "[::1]");
        assert_eq!(normalize_host(""), "");
    }

    #[test]
    fn first_matching_rule_wins() {
        let get = http::Method::GET;
        let rules = vec![
            rule(
                0,
                RequestMatch {
                    method: Some("POST".into()),
                    ..path(prefix("/api"))
                },
            ),
            rule(
                1,
                RequestMatch {
                    headers: vec![HeaderMatch {
                        name: "x-version".into(),
                        value: StringMatch::Regex(Pattern::new("v[0-9]").unwrap()),
                    }],
                    ..path(prefix("/api"))
                },
            ),
            rule(
                2,
                RequestMatch {
                    query: vec![QueryMatch {
                        name: "q".into(),
                        value: StringMatch::Exact("a+b".into()),
                    }],
                    ..path(prefix("/api"))
                },
            ),
            rule(3, path(PathMatch::Exact("/api/exact".into()))),
            rule(4, path(prefix("/api"))),
        ];
        assert_eq!(route(&rules, &http::Method::POST, "/api/x", &[]), Some(0));
        assert_eq!(
            route(&rules, &get, "/api/x", &[("x-version", "v2")]),
            Some(1)
        );
        // Full-match regex: "v22" does not match "v[0-9]".
        assert_eq!(
            route(&rules, &get, "/api/x", &[("x-version", "v22")]),
            Some(4)
        );
        // Any one of repeated header values may match.
        assert_eq!(
            route(
                &rules,
                &get,
                "/api/x",
                &[("x-version", "x"), ("x-version", "v3")]
            ),
            Some(1)
        );
        assert_eq!(route(&rules, &get, "/api?q=a+b", &[]), Some(2));
        // Only the first occurrence counts; no decoding of '+' or '%20'.
        assert_eq!(route(&rules, &get, "/api?q=zz&q=a+b", &[]), Some(4));
        assert_eq!(route(&rules, &get, "/api?q=a%20b", &[]), Some(4));
        assert_eq!(route(&rules, &get, "/api/exact", &[]), Some(3));
        assert_eq!(route(&rules, &get, "/apix", &[]), None);
        assert_eq!(route(&rules, &get, "/", &[]), None);
    }

    #[test]
    fn all_conditions_must_hold() {
        let rules = vec![rule(
            7,
            RequestMatch {
                path: prefix("/"),
                headers: vec![
                    HeaderMatch {
                        name: "a".into(),
                        value: StringMatch::Exact("1".into()),
                    },
                    HeaderMatch {
                        name: "b".into(),
                        value: StringMatch::Exact("2".into()),
                    },
                ],
                query: vec![
                    QueryMatch {
                        name: "x".into(),
                        value: StringMatch::Exact("".into()),
                    },
                    QueryMatch {
                        name: "y".into(),
                        value: StringMatch::Exact("2".into()),
                    },
                ],
                method: Some("GET".into()),
            },
        )];
        let get = http::Method::GET;
        let both = [("a", "1"), ("B", "2")];
        assert_eq!(route(&rules, &get, "/p?x&y=2", &both), Some(7));
        assert_eq!(route(&rules, &get, "/p?x=&y=2", &both), Some(7));
        assert_eq!(route(&rules, &get, "/p?y=2", &both), None);
        assert_eq!(route(&rules, &get, "/p?x&y=2", &both[..1]), None);
        assert_eq!(route(&rules, &get, "/p", &both), None);
        assert_eq!(route(&rules, &http::Method::HEAD, "/p?x&y=2", &both), None);
    }

    fn wb(name: &str, weight: u32) -> WeightedBackend {
        WeightedBackend {
            cluster: ClusterKey(name.into()),
            weight,
            filters: Vec::new(),
        }
    }

    #[test]
    fn pick_backend_follows_weights() {
        let backends = [wb("a", 1), wb("zero", 0), wb("b", 3), wb("c", 6)];
        let mut counts = [0u32; 4];
        for _ in 0..10_000 {
            counts[pick_backend(&backends).unwrap()] += 1;
        }
        assert_eq!(counts[1], 0, "weight 0 must never be picked");
        for (i, expected) in [(0, 10.0), (2, 30.0), (3, 60.0)] {
            let pct = f64::from(counts[i]) / 100.0;
            assert!(
                (pct - expected).abs() <= 5.0,
                "backend {i}: {pct}% vs {expected}%"
            );
        }
    }

    #[test]
    fn pick_backend_edge_cases() {
        assert_eq!(pick_backend(&[]), None);
        assert_eq!(pick_backend(&[wb("a", 0), wb("b", 0)]), None);
        assert_eq!(pick_backend(&[wb("a", 0)]), None);
        assert_eq!(pick_backend(&[wb("a", 5)]), Some(0));
        for _ in 0..100 {
            assert_eq!(pick_backend(&[wb("a", 0), wb("b", 1)]), Some(1));
        }
    }

    #[test]
    fn wrr_proportions_and_smoothness() {
        let s = wrr_schedule(&[2, 1], 10_000);
        assert_eq!(s, [0, 1, 0]);
        // Weights are reduced by their gcd.
        assert_eq!(wrr_schedule(&[4, 2], 10_000), [0, 1, 0]);

        let s = wrr_schedule(&[5, 3, 1, 1], 10_000);
        assert_eq!(s.len(), 10);
        for (i, w) in [5, 3, 1, 1].into_iter().enumerate() {
            assert_eq!(s.iter().filter(|x| **x as usize == i).count(), w);
        }
        // Smooth: in every prefix of the cycle each endpoint's count stays within one
        // pick of its exact share (no bursts of one endpoint).
        for t in 1..=s.len() {
            for (i, w) in [5.0, 3.0, 1.0, 1.0].into_iter().enumerate() {
                let count = s[..t].iter().filter(|x| **x as usize == i).count() as f64;
                let ideal = t as f64 * w / 10.0;
                assert!(
                    (count - ideal).abs() <= 1.0,
                    "prefix {t}, endpoint {i}: {s:?}"
                );
            }
        }
        // Equal weights alternate.
        assert_eq!(wrr_schedule(&[1, 1, 1], 10_000), [0, 1, 2]);
    }

    #[test]
    fn wrr_cap_and_zero_weights() {
        assert!(wrr_schedule(&[], 10).is_empty());
        assert!(wrr_schedule(&[0, 0], 10).is_empty());
        assert_eq!(wrr_schedule(&[0, 3], 10), [1]);
        let s = wrr_schedule(&[1_000_000, 1], 100);
        assert!(s.len() <= 101, "{}", s.len());
        assert!(s.contains(&1), "a positive weight keeps at least one slot");
        assert_eq!(s.iter().filter(|x| **x == 0).count(), 99);
    }
}
