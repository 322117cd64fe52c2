//! Host-pattern tables: exact names, wildcard suffixes and a catch-all.
//!
//! Used for virtual hosts (HTTP `Host`), SNI entries (TLS server name), L4 routes and a
//! listener's sections. Lookup order is Gateway API's: the exact name, then wildcards
//! from the longest suffix to the shortest, then [`HostMatch::ANY`]. A wildcard
//! `*.example.com` (stored as the suffix `.example.com`) matches any number of labels in
//! front of `example.com`, never `example.com` itself.
//!
//! A value carries its own pattern ([`HostKeyed`]), so the tables store the value alone:
//! copying a shard of a new version increments one reference count per entry, not two
//! (a key beside the value), and at 1,000,000 domains each is a cache miss.

use weir_model::{HostKind, HostMatch};

use crate::sharded::{Counted, Keyed, ShardedTable};

/// A value of a [`HostTable`]: it holds the host pattern it is stored under.
pub(crate) trait HostKeyed {
    /// The pattern; it must not change while the value is in a table.
    fn host(&self) -> &HostMatch;
}

/// A value in one of the sharded tables, found by its pattern's name or suffix.
#[derive(Clone, Debug)]
#[repr(transparent)]
pub(crate) struct ByHost<V>(V);

impl<V: HostKeyed> Keyed for ByHost<V> {
    type Key = str;
    /// Virtual hosts, SNI entries, L4 routes and sections: a late drop frees memory only
    /// (clusters, whose states run health checks, are found by key).
    const PATCHED: bool = true;
    fn key(&self) -> &str {
        match self.0.host().kind() {
            HostKind::Exact(s) | HostKind::Wildcard(s) => s,
            // Never stored in a sharded table (see `HostTable::insert`).
            HostKind::Any => "",
        }
    }
}

impl<V: Counted> Counted for ByHost<V> {
    fn counts(&self) -> usize {
        self.0.counts()
    }
}

/// A table from host patterns to values, with copy-on-write sharing between versions.
#[derive(Clone, Debug)]
pub(crate) struct HostTable<V> {
    exact: ShardedTable<ByHost<V>>,
    /// Keyed by the suffix with its leading dot (`.example.com`).
    wildcard: ShardedTable<ByHost<V>>,
    any: Option<V>,
}

impl<V> Default for HostTable<V> {
    fn default() -> Self {
        HostTable {
            exact: ShardedTable::default(),
            wildcard: ShardedTable::default(),
            any: None,
        }
    }
}

impl<V: HostKeyed + Clone + Counted> HostTable<V> {
    /// An empty table.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Number of patterns in the table.
    pub(crate) fn len(&self) -> usize {
        self.exact.len() + self.wildcard.len() + usize::from(self.any.is_some())
    }

    /// Inserts `value` under its pattern, or replaces the value stored there; returns
    /// the previous one.
    pub(crate) fn insert(&mut self, value: V) -> Option<V> {
        match value.host().kind() {
            HostKind::Exact(_) => self.exact.insert(ByHost(value)).map(|e| e.0),
            HostKind::Wildcard(_) => self.wildcard.insert(ByHost(value)).map(|e| e.0),
            HostKind::Any => self.any.replace(value),
        }
    }

    /// Removes one pattern; returns its value.
    pub(crate) fn remove(&mut self, host: &HostMatch) -> Option<V> {
        match host.kind() {
            HostKind::Exact(h) => self.exact.remove(&**h).map(|e| e.0),
            HostKind::Wildcard(s) => self.wildcard.remove(&**s).map(|e| e.0),
            HostKind::Any => self.any.take(),
        }
    }

    /// The value stored for exactly this pattern (no matching).
    pub(crate) fn get(&self, host: &HostMatch) -> Option<&V> {
        match host.kind() {
            HostKind::Exact(h) => self.exact.get(&**h).map(|e| &e.0),
            HostKind::Wildcard(s) => self.wildcard.get(&**s).map(|e| &e.0),
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
        if let Some(e) = self.exact.get(host) {
            return Some(&e.0);
        }
        if !self.wildcard.is_empty() {
            // Suffixes start at each dot after the first character, longest first; a dot
            // at index 0 would make the suffix the whole host, which a wildcard must not
            // match.
            for (i, b) in host.bytes().enumerate().skip(1) {
                if b == b'.'
                    && let Some(e) = self.wildcard.get(&host[i..])
                {
                    return Some(&e.0);
                }
            }
        }
        self.any.as_ref()
    }

    /// Every pattern and its value, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (HostMatch, &V)> {
        self.exact
            .iter()
            .chain(self.wildcard.iter())
            .map(|e| &e.0)
            .chain(self.any.iter())
            .map(|v| (v.host().clone(), v))
    }
}

#[cfg(test)]
impl<V> HostTable<V> {
    /// The exact-name table, for sharing assertions.
    pub(crate) fn exact_map(&self) -> &ShardedTable<ByHost<V>> {
        &self.exact
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> HostMatch {
        HostMatch::parse(Some(s)).unwrap()
    }

    /// A value that holds its pattern, as the snapshot's do.
    #[derive(Clone, Debug, PartialEq)]
    struct Named(HostMatch, &'static str);

    impl HostKeyed for Named {
        fn host(&self) -> &HostMatch {
            &self.0
        }
    }

    impl Counted for Named {
        fn counts(&self) -> usize {
            0
        }
    }

    fn named(pattern: &str, name: &'static str) -> Named {
        Named(h(pattern), name)
    }

    /// The name of what `host` finds.
    fn find(t: &HostTable<Named>, host: &str) -> Option<&'static str> {
        t.lookup(host).map(|v| v.1)
    }

    fn table() -> HostTable<Named> {
        let mut t = HostTable::new();
        t.insert(named("a.example.com", "exact-a"));
        t.insert(named("*.example.com", "wild-example"));
        t.insert(named("*.b.example.com", "wild-b"));
        t.insert(named("*.com", "wild-com"));
        t
    }

    #[test]
    fn exact_beats_wildcards() {
        let t = table();
        assert_eq!(find(&t, "a.example.com"), Some("exact-a"));
    }

    #[test]
    fn longest_wildcard_wins() {
        let t = table();
        assert_eq!(find(&t, "x.b.example.com"), Some("wild-b"));
        assert_eq!(find(&t, "y.x.b.example.com"), Some("wild-b"));
        assert_eq!(find(&t, "b.example.com"), Some("wild-example"));
        assert_eq!(find(&t, "c.example.com"), Some("wild-example"));
        assert_eq!(find(&t, "example.com"), Some("wild-com"));
        assert_eq!(find(&t, "other.com"), Some("wild-com"));
    }

    #[test]
    fn wildcard_does_not_match_its_own_suffix() {
        let mut t = HostTable::new();
        t.insert(named("*.example.com", "wild"));
        assert_eq!(find(&t, "example.com"), None);
        assert_eq!(find(&t, ".example.com"), None);
        assert_eq!(find(&t, "aexample.com"), None);
        assert_eq!(find(&t, "a.example.com"), Some("wild"));
    }

    #[test]
    fn any_is_the_fallback() {
        let mut t = table();
        assert_eq!(find(&t, "example.org"), None);
        t.insert(Named(HostMatch::ANY, "any"));
        assert_eq!(find(&t, "example.org"), Some("any"));
        assert_eq!(find(&t, "a.example.com"), Some("exact-a"));
        assert_eq!(t.any().map(|v| v.1), Some("any"));
        assert_eq!(t.len(), 5);
    }

    #[test]
    fn remove_and_get_by_pattern() {
        let mut t = table();
        assert_eq!(t.get(&h("*.b.example.com")).map(|v| v.1), Some("wild-b"));
        assert_eq!(t.remove(&h("*.b.example.com")).map(|v| v.1), Some("wild-b"));
        assert_eq!(find(&t, "x.b.example.com"), Some("wild-example"));
        assert_eq!(t.remove(&h("a.example.com")).map(|v| v.1), Some("exact-a"));
        assert_eq!(find(&t, "a.example.com"), Some("wild-example"));
        assert_eq!(t.remove(&HostMatch::ANY), None);
        assert_eq!(t.len(), 2);
        let mut patterns: Vec<String> = t.iter().map(|(p, _)| p.to_string()).collect();
        patterns.sort();
        assert_eq!(patterns, ["*.com", "*.example.com"]);
    }
}
