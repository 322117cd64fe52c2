//! Precedence: object age and the order of rules within a virtual host.

use std::cmp::Reverse;
use std::sync::Arc;

use weir_model::{PathMatch, RequestMatch, RouteKind};

/// How old an object is: objects with a creation timestamp come first (oldest first),
/// then objects without one in the order they were first seen.
///
/// 24 bytes: whether there is a timestamp is the top bit of `seq` (a counter that never
/// comes near it), not a `bool` of its own with 7 bytes of padding. Every rule's order
/// and every SNI entry's owner holds one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Age {
    timestamp: Arc<str>,
    /// The order first seen; [`NO_TIMESTAMP`] set when the object has no timestamp.
    seq: u64,
}

const NO_TIMESTAMP: u64 = 1 << 63;

impl Ord for Age {
    /// Without a timestamp after with one, then by timestamp, then by order first seen.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.seq & NO_TIMESTAMP)
            .cmp(&(other.seq & NO_TIMESTAMP))
            .then_with(|| self.timestamp.cmp(&other.timestamp))
            .then_with(|| self.seq.cmp(&other.seq))
    }
}

impl PartialOrd for Age {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Age {
    pub(crate) fn new(timestamp: Option<&str>, seq: u64) -> Self {
        // Objects without a timestamp (most files of `weir run`) share one empty string
        // rather than allocate one each.
        static EMPTY: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| "".into());
        // `u64::MAX` (newest of all, for an object not stored) stays the newest: 2^63 - 1.
        let seq = seq.min(!NO_TIMESTAMP);
        Age {
            timestamp: match timestamp {
                Some(t) if !t.is_empty() => t.into(),
                _ => EMPTY.clone(),
            },
            seq: seq | if timestamp.is_none() { NO_TIMESTAMP } else { 0 },
        }
    }
}

/// The sort key of one rule (one match of one route rule) within a virtual host;
/// smaller sorts first (higher precedence). Lengths are `u32`, the counts of header and
/// query conditions and a gRPC method's length `u16` (saturating: the fields after them
/// still tell two rules apart; 80 bytes, its `Arc` in the 96-byte class).
/// Compiled once per rule and shared (`Arc<RuleOrder>`) by every host the rule is
/// programmed on and by the route's contribution: an Ingress rule on the HTTP and HTTPS
/// listeners held four 96-byte copies of it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct RuleOrder {
    /// 0 for ordinary rules; 1 for an Ingress default backend (always last).
    tier: u8,
    /// Exact, then regular expression, then prefix.
    path_class: u8,
    path_len: Reverse<u32>,
    /// GRPCRoute: the characters of the method condition (0 for every other rule).
    grpc_method_len: Reverse<u16>,
    no_method: bool,
    headers: Reverse<u16>,
    query: Reverse<u16>,
    /// `false` for a canary Ingress's rule, which goes before its main Ingress's rule of
    /// the same match whatever their ages.
    not_canary: bool,
    age: Age,
    kind: RouteKind,
    namespace: Arc<str>,
    name: Arc<str>,
    rule: u32,
    matcher: u32,
}

/// A length or count as stored in a [`RuleOrder`] (no rule comes near `u32::MAX`).
fn small(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A count as stored in a [`RuleOrder`] (a route has at most 16 conditions of a kind).
fn small16(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

/// Where a rule comes from, for [`RuleOrder::new`].
pub(crate) struct RuleOrigin<'a> {
    pub(crate) age: &'a Age,
    pub(crate) kind: RouteKind,
    pub(crate) namespace: &'a Arc<str>,
    pub(crate) name: &'a Arc<str>,
}

impl RuleOrder {
    pub(crate) fn new(
        origin: &RuleOrigin<'_>,
        m: &RequestMatch,
        default_backend: bool,
        rule: u32,
        matcher: u32,
    ) -> Self {
        let (path_class, path_len) = match &m.path {
            PathMatch::Exact(p) => (0, p.len()),
            PathMatch::Regex(p) => (1, p.source().len()),
            PathMatch::Prefix(p) => (2, p.len()),
        };
        RuleOrder {
            tier: u8::from(default_backend),
            path_class,
            path_len: Reverse(small(path_len)),
            grpc_method_len: Reverse(0),
            no_method: m.method.is_none(),
            headers: Reverse(small16(m.headers.len())),
            query: Reverse(small16(m.query.len())),
            not_canary: true,
            age: origin.age.clone(),
            kind: origin.kind,
            namespace: origin.namespace.clone(),
            name: origin.name.clone(),
            rule,
            matcher,
        }
    }

    /// The order of a GRPCRoute match whose method condition has `service` and `method`
    /// characters (0 when absent). GRPCRoute precedence: the most characters of a
    /// matching service, then of a matching method, then the most header matches. An
    /// exact service and method is an exact path and sorts with the exact paths; the
    /// other matches sort with the prefixes as `/<service>/` (`/` without a service),
    /// then by their method's length.
    pub(crate) fn grpc(
        origin: &RuleOrigin<'_>,
        m: &RequestMatch,
        service: usize,
        method: usize,
        rule: u32,
        matcher: u32,
    ) -> Self {
        let mut order = RuleOrder::new(origin, m, false, rule, matcher);
        if !matches!(m.path, PathMatch::Exact(_)) {
            order.path_class = 2;
            order.path_len = Reverse(small(if service == 0 { 1 } else { service + 2 }));
            order.grpc_method_len = Reverse(small16(method));
        }
        order
    }

    /// The order of a canary Ingress's rule: before the rules of the same match that are
    /// not a canary's (its main Ingress's).
    pub(crate) fn canary(mut self) -> Self {
        self.not_canary = false;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_model::Pattern;

    #[test]
    fn ages_order_timestamps_first_then_by_first_seen() {
        let with = |t: &str, seq| Age::new(Some(t), seq);
        let mut ages = [
            Age::new(None, 2),
            with("2026-01-02T00:00:00Z", 5),
            Age::new(None, 1),
            with("2026-01-01T00:00:00Z", 9),
            with("2026-01-02T00:00:00Z", 3),
        ];
        ages.sort();
        assert_eq!(
            ages.map(|a| (a.timestamp.to_string(), a.seq & !NO_TIMESTAMP)),
            [
                ("2026-01-01T00:00:00Z".into(), 9),
                ("2026-01-02T00:00:00Z".into(), 3),
                ("2026-01-02T00:00:00Z".into(), 5),
                (String::new(), 1),
                (String::new(), 2),
            ]
        );
        // An empty timestamp is a timestamp (it sorts before none).
        assert!(with("", 7) < Age::new(None, 0));
        assert!(Age::new(None, 1 << 40) < Age::new(None, u64::MAX));
        assert_eq!(size_of::<Age>(), 24);
        assert!(size_of::<RuleOrder>() <= 80);
    }

    fn m(path: PathMatch, method: bool, headers: usize) -> RequestMatch {
        let h = weir_model::HeaderMatch {
            name: "x".into(),
            value: weir_model::StringMatch::Exact("v".into()),
        };
        RequestMatch {
            path,
            headers: vec![h; headers],
            query: vec![],
            method: method.then(|| "GET".into()),
        }
    }

    #[test]
    fn precedence() {
        let age = Age::new(None, 1);
        let ns: Arc<str> = "ns".into();
        let name: Arc<str> = "r".into();
        let o = RuleOrigin {
            age: &age,
            kind: RouteKind::HttpRoute,
            namespace: &ns,
            name: &name,
        };
        let exact = RuleOrder::new(&o, &m(PathMatch::Exact("/a".into()), false, 0), false, 0, 0);
        let regex = RuleOrder::new(
            &o,
            &m(PathMatch::Regex(Pattern::new("/a.*").unwrap()), false, 0),
            false,
            0,
            0,
        );
        let long = RuleOrder::new(
            &o,
            &m(PathMatch::Prefix("/abc".into()), false, 0),
            false,
            0,
            0,
        );
        let short = RuleOrder::new(
            &o,
            &m(PathMatch::Prefix("/a".into()), false, 0),
            false,
            0,
            0,
        );
        let method = RuleOrder::new(&o, &m(PathMatch::Prefix("/a".into()), true, 0), false, 0, 0);
        let headers = RuleOrder::new(
            &o,
            &m(PathMatch::Prefix("/a".into()), false, 2),
            false,
            0,
            0,
        );
        assert!(exact < regex && regex < long && long < short);
        assert!(method < headers && headers < short);
        let older = Age::new(Some("2020-01-01T00:00:00Z"), 9);
        assert!(older < age);
        assert!(Age::new(None, 1) < Age::new(None, 2));
    }

    /// GRPCRoute precedence: most service characters, then method characters, then
    /// header matches, then the older route.
    #[test]
    fn grpc_precedence() {
        let (ns, name): (Arc<str>, Arc<str>) = ("ns".into(), "g".into());
        let (young, old) = (Age::new(None, 2), Age::new(None, 1));
        let origin = |age| RuleOrigin {
            age,
            kind: RouteKind::GrpcRoute,
            namespace: &ns,
            name: &name,
        };
        let o = origin(&young);
        let re = |p: &str| PathMatch::Regex(Pattern::new(p).unwrap());
        let g = |o: &RuleOrigin<'_>, path, headers, service, method| {
            RuleOrder::grpc(o, &m(path, false, headers), service, method, 0, 0)
        };
        let exact = g(&o, PathMatch::Exact("/a.B/M".into()), 0, 3, 1);
        let long_service_re = g(&o, re("/(?:a\\.Bcd.*)/[^/]+"), 0, 8, 0);
        let service_only = g(&o, PathMatch::Prefix("/a.B".into()), 0, 3, 0);
        let service_headers = g(&o, PathMatch::Prefix("/a.B".into()), 2, 3, 0);
        let method_only = g(&o, re("/[^/]+/M"), 0, 0, 1);
        let headers_only = g(&o, PathMatch::Prefix("/".into()), 1, 0, 0);
        let all = g(&o, PathMatch::Prefix("/".into()), 0, 0, 0);
        let all_older = g(&origin(&old), PathMatch::Prefix("/".into()), 0, 0, 0);
        let ordered = [
            &exact,
            &long_service_re,
            &service_headers,
            &service_only,
            &method_only,
            &headers_only,
            &all_older,
            &all,
        ];
        for w in ordered.windows(2) {
            assert!(w[0] < w[1], "{:?} before {:?}", w[0], w[1]);
        }
    }
}
