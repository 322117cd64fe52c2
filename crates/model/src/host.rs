use std::sync::Arc;

use serde::Serialize;

/// The host part of a routing or SNI key.
///
/// Gateway API semantics: `*.example.com` matches any number of labels in front of
/// `example.com` (`a.example.com`, `a.b.example.com`) but not `example.com` itself.
/// Lookups try [`HostMatch::Exact`] first, then wildcards from the longest suffix to the
/// shortest, then [`HostMatch::Any`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum HostMatch {
    /// A fully qualified, lower-case host name.
    Exact(Arc<str>),
    /// A wildcard; holds the suffix including its leading dot (`.example.com`).
    Wildcard(Arc<str>),
    /// Matches every host (a listener or route without a hostname).
    Any,
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
    /// `None` or an empty string means [`HostMatch::Any`]. The result is lower-case.
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
            return Ok(HostMatch::Any);
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
            HostMatch::Wildcard(format!(".{}", rest.to_ascii_lowercase()).into())
        } else if rest.bytes().any(|b| b.is_ascii_uppercase()) {
            HostMatch::Exact(rest.to_ascii_lowercase().into())
        } else if let Some(shared) = shared {
            HostMatch::Exact(shared.clone())
        } else {
            // Already lower-case (nearly every host): one allocation, the `Arc`'s.
            HostMatch::Exact(rest.into())
        })
    }

    /// Whether a request host (lower-case, without port) is matched by this pattern.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostMatch::Exact(h) => **h == *host,
            HostMatch::Wildcard(suffix) => host.len() > suffix.len() && host.ends_with(&**suffix),
            HostMatch::Any => true,
        }
    }

    /// Whether every host `other` matches is also matched by `self` (`*.example.com`
    /// covers `*.foo.example.com` and `a.example.com`; [`HostMatch::Any`] covers all).
    pub fn covers(&self, other: &HostMatch) -> bool {
        self.intersect(other).as_ref() == Some(other)
    }

    /// The intersection of a listener hostname and a route hostname, per Gateway API:
    /// the more specific of the two when one covers the other, `None` when disjoint.
    pub fn intersect(&self, other: &HostMatch) -> Option<HostMatch> {
        match (self, other) {
            (HostMatch::Any, o) | (o, HostMatch::Any) => Some(o.clone()),
            (HostMatch::Exact(a), HostMatch::Exact(b)) => (a == b).then(|| self.clone()),
            (HostMatch::Exact(e), w @ HostMatch::Wildcard(_))
            | (w @ HostMatch::Wildcard(_), HostMatch::Exact(e)) => {
                w.matches(e).then(|| HostMatch::Exact(e.clone()))
            }
            (HostMatch::Wildcard(a), HostMatch::Wildcard(b)) => {
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
        match self {
            HostMatch::Exact(h) => f.write_str(h),
            HostMatch::Wildcard(s) => write!(f, "*{s}"),
            HostMatch::Any => f.write_str("*"),
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
        let any = HostMatch::Any;
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
    fn a_shared_lower_case_host_keeps_its_buffer() {
        let shared: Arc<str> = "a.example.com".into();
        let HostMatch::Exact(e) = HostMatch::parse_shared(Some(&shared)).unwrap() else {
            panic!("not exact");
        };
        assert!(Arc::ptr_eq(&e, &shared));
        // Anything normalized is a new buffer, equal to what `parse` gives.
        for s in ["A.example.com", "*.example.com", ""] {
            let shared: Arc<str> = s.into();
            let m = HostMatch::parse_shared(Some(&shared)).unwrap();
            assert_eq!(m, HostMatch::parse(Some(s)).unwrap());
            if let HostMatch::Exact(e) | HostMatch::Wildcard(e) = &m {
                assert!(!Arc::ptr_eq(e, &shared));
            }
        }
        let bad: Arc<str> = "a..b".into();
        assert!(HostMatch::parse_shared(Some(&bad)).is_err());
        assert_eq!(HostMatch::parse_shared(None), Ok(HostMatch::Any));
    }

    #[test]
    fn parse_and_match() {
        assert_eq!(
            h("Foo.Example.com"),
            HostMatch::Exact("foo.example.com".into())
        );
        let w = h("*.example.com");
        assert!(w.matches("a.example.com"));
        assert!(w.matches("a.b.example.com"));
        assert!(!w.matches("example.com"));
        assert!(!w.matches("aexample.com"));
        assert!(HostMatch::parse(Some("*")).is_err());
        assert!(HostMatch::parse(Some("a..b")).is_err());
        assert!(HostMatch::parse(Some("1.2.3.4")).is_err());
        assert_eq!(HostMatch::parse(None).unwrap(), HostMatch::Any);
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
        assert_eq!(HostMatch::Any.intersect(&h("a.com")), Some(h("a.com")));
    }
}
