//! Host-pattern tables: exact names, wildcard suffixes and a catch-all.
//!
//! Used for both virtual hosts (HTTP `Host`) and SNI entries (TLS server name). Lookup
//! order is Gateway API's: the exact name, then wildcards from the longest suffix to the
//! shortest, then [`HostMatch::ANY`]. A wildcard `*.example.com` (stored as the suffix
//! `.example.com`) matches any number of labels in front of `example.com`, never
//! `example.com` itself.

use std::sync::Arc;

use weir_model::{HostKind, HostMatch};

use crate::sharded::ShardedMap;

/// A table from host patterns to values, with copy-on-write sharing between versions.
#[derive(Clone, Debug)]
pub(crate) struct HostTable<V> {
    exact: ShardedMap<Arc<str>, V>,
    /// Keyed by the suffix with its leading dot (`.example.com`).
    wildcard: ShardedMap<Arc<str>, V>,
    any: Option<V>,
}

impl<V> Default for HostTable<V> {
    fn default() -> Self {
        HostTable {
            exact: ShardedMap::default(),
            wildcard: ShardedMap::default(),
            any: None,
        }
    }
}

impl<V: Clone + crate::sharded::Counted> HostTable<V> {
    /// An empty table.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Number of patterns in the table.
    pub(crate) fn len(&self) -> usize {
        self.exact.len() + self.wildcard.len() + usize::from(self.any.is_some())
    }

    /// Inserts or replaces the value of one pattern; returns the previous one.
    pub(crate) fn insert(&mut self, host: &HostMatch, value: V) -> Option<V> {
        match host.kind() {
            HostKind::Exact(h) => self.exact.insert(h.clone(), value),
            HostKind::Wildcard(s) => self.wildcard.insert(s.clone(), value),
            HostKind::Any => self.any.replace(value),
        }
    }

    /// Removes one pattern; returns its value.
    pub(crate) fn remove(&mut self, host: &HostMatch) -> Option<V> {
        match host.kind() {
            HostKind::Exact(h) => self.exact.remove(&**h),
            HostKind::Wildcard(s) => self.wildcard.remove(&**s),
            HostKind::Any => self.any.take(),
        }
    }

    /// The value stored for exactly this pattern (no matching).
    pub(crate) fn get(&self, host: &HostMatch) -> Option<&V> {
        match host.kind() {
            HostKind::Exact(h) => self.exact.get(&**h),
            HostKind::Wildcard(s) => self.wildcard.get(&**s),
            HostKind::Any => self.any.as_ref(),
        }
    }

    /// The catch-all value ([`HostMatch::ANY`]).
    pub(crate) fn any(&self) -> Option<&V> {
        self.any.as_ref()
    }

    /// The value whose pattern best matches `host` (lower-case, no port, no trailing dot):
    /// exact, then the longest matching wildcard suffix, then the catch-all.
    pub(crate) fn lookup(&self, host: &str) -> Option<&V> {
        if let Some(v) = self.exact.get(host) {
            return Some(v);
        }
        if !self.wildcard.is_empty() {
            // Suffixes start at each dot after the first character, longest first; a dot
            // at index 0 would make the suffix the whole host, which a wildcard must not
            // match.
            for (i, b) in host.bytes().enumerate().skip(1) {
                if b == b'.'
                    && let Some(v) = self.wildcard.get(&host[i..])
                {
                    return Some(v);
                }
            }
        }
        self.any.as_ref()
    }

    /// Every pattern and its value, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (HostMatch, &V)> {
        let exact = self
            .exact
            .iter()
            .map(|(h, v)| (HostMatch::exact(h.clone()), v));
        let wild = self
            .wildcard
            .iter()
            .map(|(s, v)| (HostMatch::wildcard(s.clone()), v));
        let any = self.any.iter().map(|v| (HostMatch::ANY, v));
        exact.chain(wild).chain(any)
    }
}

#[cfg(test)]
impl<V> HostTable<V> {
    /// The exact-name map, for sharing assertions.
    pub(crate) fn exact_map(&self) -> &ShardedMap<Arc<str>, V> {
        &self.exact
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> HostMatch {
        HostMatch::parse(Some(s)).unwrap()
    }

    fn table() -> HostTable<&'static str> {
        let mut t = HostTable::new();
        t.insert(&h("a.example.com"), "exact-a");
        t.insert(&h("*.example.com"), "wild-example");
        t.insert(&h("*.b.example.com"), "wild-b");
        t.insert(&h("*.com"), "wild-com");
        t
    }

    #[test]
    fn exact_beats_wildcards() {
        let t = table();
        assert_eq!(t.lookup("a.example.com"), Some(&"exact-a"));
    }

    #[test]
    fn longest_wildcard_wins() {
        let t = table();
        assert_eq!(t.lookup("x.b.example.com"), Some(&"wild-b"));
        assert_eq!(t.lookup("y.x.b.example.com"), Some(&"wild-b"));
        assert_eq!(t.lookup("b.example.com"), Some(&"wild-example"));
        assert_eq!(t.lookup("c.example.com"), Some(&"wild-example"));
        assert_eq!(t.lookup("example.com"), Some(&"wild-com"));
        assert_eq!(t.lookup("other.com"), Some(&"wild-com"));
    }

    #[test]
    fn wildcard_does_not_match_its_own_suffix() {
        let mut t = HostTable::new();
        t.insert(&h("*.example.com"), 1);
        assert_eq!(t.lookup("example.com"), None);
        assert_eq!(t.lookup(".example.com"), None);
        assert_eq!(t.lookup("aexample.com"), None);
        assert_eq!(t.lookup("a.example.com"), Some(&1));
    }

    #[test]
    fn any_is_the_fallback() {
        let mut t = table();
        assert_eq!(t.lookup("example.org"), None);
        t.insert(&HostMatch::ANY, "any");
        assert_eq!(t.lookup("example.org"), Some(&"any"));
        assert_eq!(t.lookup("a.example.com"), Some(&"exact-a"));
        assert_eq!(t.any(), Some(&"any"));
        assert_eq!(t.len(), 5);
    }

    #[test]
    fn remove_and_get_by_pattern() {
        let mut t = table();
        assert_eq!(t.get(&h("*.b.example.com")), Some(&"wild-b"));
        assert_eq!(t.remove(&h("*.b.example.com")), Some("wild-b"));
        assert_eq!(t.lookup("x.b.example.com"), Some(&"wild-example"));
        assert_eq!(t.remove(&h("a.example.com")), Some("exact-a"));
        assert_eq!(t.lookup("a.example.com"), Some(&"wild-example"));
        assert_eq!(t.remove(&HostMatch::ANY), None);
        assert_eq!(t.len(), 2);
        let mut patterns: Vec<String> = t.iter().map(|(p, _)| p.to_string()).collect();
        patterns.sort();
        assert_eq!(patterns, ["*.com", "*.example.com"]);
    }
}
