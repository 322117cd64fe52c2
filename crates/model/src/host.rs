use std::sync::Arc;

use serde::Serialize;

/// The host part of a routing or SNI key: an exact host, a wildcard or any host; read
/// with [`HostMatch::kind`].
///
/// Gateway API semantics: `*.example.com` matches any number of labels in front of
/// `example.com` (`a.example.com`, `a.b.example.com`) but not `example.com` itself.
/// Lookups try an exact host first, then wildcards from the longest suffix to the
/// shortest, then [`HostMatch::ANY`].
///
/// One optional string, 16 bytes: `None` is any host, a string starting with `.` is a
/// wildcard's suffix (`.example.com`; no host name starts with a dot), any other string
/// an exact host. As an enum of the three it was 24 bytes, and every key of a host
/// table is a (listener, host) pair: 32 bytes instead of 24, in five tables with up to
/// 2,000,000 entries each at 1,000,000 TLS domains. Hashes, orders, prints and
/// serializes as that enum did (`Exact` < `Wildcard` < `Any`).
#[derive(Clone, PartialEq, Eq)]
pub struct HostMatch(Option<Arc<str>>);

/// What a [`HostMatch`] is, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostKind<'a> {
    /// A fully qualified, lower-case host name.
    Exact(&'a Arc<str>),
    /// A wildcard: the suffix including its leading dot (`.example.com`).
    Wildcard(&'a Arc<str>),
    /// Every host (a listener or route without a hostname).
    Any,
}

impl HostMatch {
    /// Matches every host.
    pub const ANY: HostMatch = HostMatch(None);

    /// An exact host (lower-case, not starting with `.`: a caller that has not checked
    /// that uses [`HostMatch::parse`]).
    pub fn exact(host: Arc<str>) -> Self {
        debug_assert!(!host.is_empty() && !host.starts_with('.'), "{host:?}");
        HostMatch(Some(host))
    }

    /// A wildcard from its suffix including the leading dot (`.example.com`).
    pub fn wildcard(suffix: Arc<str>) -> Self {
        debug_assert!(suffix.starts_with('.'), "{suffix:?}");
        HostMatch(Some(suffix))
    }

    /// What this is.
    pub fn kind(&self) -> HostKind<'_> {
        match &self.0 {
            None => HostKind::Any,
            Some(s) if s.starts_with('.') => HostKind::Wildcard(s),
            Some(s) => HostKind::Exact(s),
        }
    }

    /// The exact host, if this is one.
    pub fn as_exact(&self) -> Option<&Arc<str>> {
        match self.kind() {
            HostKind::Exact(h) => Some(h),
            _ => None,
        }
    }

    /// The order of the enum this was: `Exact`, `Wildcard`, `Any`.
    fn rank(&self) -> isize {
        match self.kind() {
            HostKind::Exact(_) => 0,
            HostKind::Wildcard(_) => 1,
            HostKind::Any => 2,
        }
    }
}

impl std::hash::Hash for HostMatch {
    /// As the derived `Hash` of the enum it was (the variant's index, then the string),
    /// so that content hashes are unchanged.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.rank().hash(state);
        if let Some(s) = &self.0 {
            (**s).hash(state);
        }
    }
}

impl Ord for HostMatch {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank()
            .cmp(&other.rank())
            .then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for HostMatch {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for HostMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind() {
            HostKind::Exact(h) => f.debug_tuple("Exact").field(h).finish(),
            HostKind::Wildcard(s) => f.debug_tuple("Wildcard").field(s).finish(),
            HostKind::Any => f.write_str("Any"),
        }
    }
}

impl Serialize for HostMatch {
    /// As the enum it was: `{"Exact": "a.example"}`, `{"Wildcard": ".example"}`, `"Any"`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.kind() {
            HostKind::Exact(h) => s.serialize_newtype_variant("HostMatch", 0, "Exact", &**h),
            HostKind::Wildcard(w) => s.serialize_newtype_variant("HostMatch", 1, "Wildcard", &**w),
            HostKind::Any => s.serialize_unit_variant("HostMatch", 2, "Any"),
        }
    }
}

/// A hostname that is neither a valid DNS name nor a valid `*.` wildcard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidHostname(pub String, pub &'static str);

impl std::error::Error for InvalidHostname {}

impl std::fmt::Display for InvalidHostname {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid hostname {:?}: {}", self.0, self.1)
    }
}

impl HostMatch {
    /// Parses a Gateway API / Ingress hostname (`example.com`, `*.example.com`).
    /// `None` or an empty string means [`HostMatch::ANY`]. The result is lower-case.
    pub fn parse(hostname: Option<&str>) -> Result<Self, InvalidHostname> {
        Self::parse_in(hostname, None)
    }

    /// [`HostMatch::parse`] of a shared hostname: an exact host already in lower case
    /// (nearly every one) holds the same buffer instead of a copy.
    pub fn parse_shared(hostname: Option<&Arc<str>>) -> Result<Self, InvalidHostname> {
        Self::parse_in(hostname.map(|h| &**h), hostname)
    }

    fn parse_in(
        hostname: Option<&str>,
        shared: Option<&Arc<str>>,
    ) -> Result<Self, InvalidHostname> {
        let Some(h) = hostname.filter(|h| !h.is_empty()) else {
            return Ok(HostMatch::ANY);
        };
        let bad = |why| InvalidHostname(h.to_string(), why);
        if h.len() > 253 {
            return Err(bad("longer than 253 characters"));
        }
        let (wild, rest) = match h.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, h),
        };
        if rest.is_empty() {
            return Err(bad("empty name"));
        }
        for label in rest.split('.') {
            if label.is_empty() || label.len() > 63 {
                return Err(bad("each label must have 1 to 63 characters"));
            }
            if !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                || label.starts_with('-')
                || label.ends_with('-')
            {
                return Err(bad(
                    "labels may hold only letters, digits and '-', not at either end",
                ));
            }
        }
        if !wild && rest.parse::<std::net::IpAddr>().is_ok() {
            return Err(bad("an IP address is not a hostname"));
        }
        Ok(if wild {
            HostMatch::wildcard(format!(".{}", rest.to_ascii_lowercase()).into())
        } else if rest.bytes().any(|b| b.is_ascii_uppercase()) {
            HostMatch::exact(rest.to_ascii_lowercase().into())
        } else if let Some(shared) = shared {
            HostMatch::exact(shared.clone())
        } else {
            // Already lower-case (nearly every host): one allocation, the `Arc`'s.
            HostMatch::exact(rest.into())
        })
    }

    /// Whether a request host (lower-case, without port) is matched by this pattern.
    pub fn matches(&self, host: &str) -> bool {
        match self.kind() {
            HostKind::Exact(h) => **h == *host,
            HostKind::Wildcard(suffix) => host.len() > suffix.len() && host.ends_with(&**suffix),
            HostKind::Any => true,
        }
    }

    /// Whether every host `other` matches is also matched by `self` (`*.example.com`
    /// covers `*.foo.example.com` and `a.example.com`; [`HostMatch::ANY`] covers all).
    pub fn covers(&self, other: &HostMatch) -> bool {
        self.intersect(other).as_ref() == Some(other)
    }

    /// The intersection of a listener hostname and a route hostname, per Gateway API:
    /// the more specific of the two when one covers the other, `None` when disjoint.
    pub fn intersect(&self, other: &HostMatch) -> Option<HostMatch> {
        match (self.kind(), other.kind()) {
            (HostKind::Any, _) => Some(other.clone()),
            (_, HostKind::Any) => Some(self.clone()),
            (HostKind::Exact(a), HostKind::Exact(b)) => (a == b).then(|| self.clone()),
            (HostKind::Exact(e), HostKind::Wildcard(_)) => other.matches(e).then(|| self.clone()),
            (HostKind::Wildcard(_), HostKind::Exact(e)) => self.matches(e).then(|| other.clone()),
            (HostKind::Wildcard(a), HostKind::Wildcard(b)) => {
                if a.ends_with(&**b) {
                    Some(self.clone())
                } else if b.ends_with(&**a) {
                    Some(other.clone())
                } else {
                    None
                }
            }
        }
    }
}

impl std::fmt::Display for HostMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind() {
            HostKind::Exact(h) => f.write_str(h),
            HostKind::Wildcard(s) => write!(f, "*{s}"),
            HostKind::Any => f.write_str("*"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> HostMatch {
        HostMatch::parse(Some(s)).unwrap()
    }

    #[test]
    fn covers() {
        let any = HostMatch::ANY;
        assert!(any.covers(&h("*.example.com")) && any.covers(&any));
        assert!(h("*.example.com").covers(&h("*.foo.example.com")));
        assert!(h("*.example.com").covers(&h("abc.foo.example.com")));
        assert!(h("*.example.com").covers(&h("*.example.com")));
        assert!(!h("*.foo.example.com").covers(&h("*.example.com")));
        assert!(!h("*.example.com").covers(&h("example.com")));
        assert!(!h("a.example.com").covers(&h("*.example.com")));
        assert!(!h("*.example.com").covers(&any));
    }

    #[test]
    fn sixteen_bytes_and_the_enum_it_was() {
        assert_eq!(size_of::<HostMatch>(), 16);
        assert_eq!(size_of::<(crate::ListenerKey, HostMatch)>(), 24);
        // The enum's derived order, hash, Debug and serde form (content hashes, resource
        // order and the admin API's JSON depend on them).
        #[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        enum Was {
            Exact(Arc<str>),
            Wildcard(Arc<str>),
            Any,
        }
        let cases = [
            (h("b.example.com"), Was::Exact("b.example.com".into())),
            (h("a.example.com"), Was::Exact("a.example.com".into())),
            (h("*.example.com"), Was::Wildcard(".example.com".into())),
            (h("*.a.example.com"), Was::Wildcard(".a.example.com".into())),
            (HostMatch::ANY, Was::Any),
        ];
        for (a, wa) in &cases {
            assert_eq!(crate::content_hash(a), crate::content_hash(wa), "{a:?}");
            assert_eq!(format!("{a:?}"), format!("{wa:?}"));
            assert_eq!(
                serde_json::to_value(a).unwrap(),
                serde_json::to_value(wa).unwrap()
            );
            for (b, wb) in &cases {
                assert_eq!(a.cmp(b), wa.cmp(wb), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn a_shared_lower_case_host_keeps_its_buffer() {
        let shared: Arc<str> = "a.example.com".into();
        let m = HostMatch::parse_shared(Some(&shared)).unwrap();
        let HostKind::Exact(e) = m.kind() else {
            panic!("not exact");
        };
        assert!(Arc::ptr_eq(e, &shared));
        // Anything normalized is a new buffer, equal to what `parse` gives.
        for s in ["A.example.com", "*.example.com", ""] {
            let shared: Arc<str> = s.into();
            let m = HostMatch::parse_shared(Some(&shared)).unwrap();
            assert_eq!(m, HostMatch::parse(Some(s)).unwrap());
            if let HostKind::Exact(e) | HostKind::Wildcard(e) = m.kind() {
                assert!(!Arc::ptr_eq(e, &shared));
            }
        }
        let bad: Arc<str> = "a..b".into();
        assert!(HostMatch::parse_shared(Some(&bad)).is_err());
        assert_eq!(HostMatch::parse_shared(None), Ok(HostMatch::ANY));
    }

    #[test]
    fn parse_and_match() {
        assert_eq!(
            h("Foo.Example.com"),
            HostMatch::exact("foo.example.com".into())
        );
        let w = h("*.example.com");
        assert!(w.matches("a.example.com"));
        assert!(w.matches("a.b.example.com"));
        assert!(!w.matches("example.com"));
        assert!(!w.matches("aexample.com"));
        assert!(HostMatch::parse(Some("*")).is_err());
        assert!(HostMatch::parse(Some("a..b")).is_err());
        assert!(HostMatch::parse(Some("1.2.3.4")).is_err());
        assert_eq!(HostMatch::parse(None).unwrap(), HostMatch::ANY);
    }

    #[test]
    fn intersection() {
        assert_eq!(
            h("*.example.com").intersect(&h("a.example.com")),
            Some(h("a.example.com"))
        );
        assert_eq!(
            h("*.com").intersect(&h("*.example.com")),
            Some(h("*.example.com"))
        );
        assert_eq!(
            h("*.example.com").intersect(&h("*.com")),
            Some(h("*.example.com"))
        );
        assert_eq!(h("a.com").intersect(&h("b.com")), None);
        assert_eq!(h("*.a.com").intersect(&h("*.b.com")), None);
        assert_eq!(HostMatch::ANY.intersect(&h("a.com")), Some(h("a.com")));
    }
}
