//! Indexes from a key to several entries that drop the key with its last entry.

use std::hash::Hash;

use crate::incremental::DenseMap;
use crate::incremental::small::{SmallOrdMap, SmallSet};

/// Per key, a set of values (e.g. which routes depend on a Service). A key is present
/// exactly while it has a value; a key with one value (most: a Secret and the Ingress
/// that uses it) holds it inline.
#[derive(Debug)]
pub(crate) struct MultiIndex<K, V> {
    map: DenseMap<K, SmallSet<V>>,
}

impl<K, V> Default for MultiIndex<K, V> {
    fn default() -> Self {
        MultiIndex {
            map: DenseMap::default(),
        }
    }
}

impl<K: Eq + Hash, V: Eq + Hash> MultiIndex<K, V> {
    /// Adds `value` under `key`; returns whether it was new.
    pub(crate) fn insert(&mut self, key: K, value: V) -> bool {
        match self.map.entry(key) {
            indexmap::map::Entry::Occupied(mut e) => e.get_mut().insert(value),
            indexmap::map::Entry::Vacant(e) => {
                e.insert(SmallSet::One(value));
                true
            }
        }
    }

    /// Removes `value` from `key` (and `key` with its last value); returns whether it was
    /// there.
    pub(crate) fn remove(&mut self, key: &K, value: &V) -> bool {
        let Some(set) = self.map.get_mut(key) else {
            return false;
        };
        let (removed, empty) = set.remove(value);
        if empty {
            self.map.swap_remove(key);
        }
        removed
    }

    /// The values under `key`, in no particular order.
    pub(crate) fn get<'a>(&'a self, key: &K) -> impl Iterator<Item = &'a V> + use<'a, K, V> {
        self.map.get(key).into_iter().flat_map(SmallSet::iter)
    }

    /// Makes room for `additional` more keys.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.map.reserve(additional);
    }

    /// The number of keys.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// Per key, entries ordered by `O`, the first of which wins (e.g. the rules of a virtual
/// host by precedence, the claimants of a socket by age). Inline while a key has one
/// entry (see [`SmallOrdMap`]); a key is present exactly while it has an entry.
#[derive(Debug)]
pub(crate) struct OrdIndex<K, O, V = ()> {
    map: DenseMap<K, SmallOrdMap<O, V>>,
}

impl<K, O, V> Default for OrdIndex<K, O, V> {
    fn default() -> Self {
        OrdIndex {
            map: DenseMap::default(),
        }
    }
}

impl<K: Eq + Hash, O: Ord, V> OrdIndex<K, O, V> {
    /// Inserts or replaces the entry `order` of `key`.
    pub(crate) fn insert(&mut self, key: K, order: O, value: V) {
        self.map.entry(key).or_default().insert(order, value);
    }

    /// Removes the entry `order` of `key` (and `key` with its last entry).
    pub(crate) fn remove(&mut self, key: &K, order: &O) {
        if let Some(m) = self.map.get_mut(key) {
            m.remove(order);
            if m.is_empty() {
                self.map.swap_remove(key);
            }
        }
    }

    /// The entries of `key`, if it has any.
    pub(crate) fn get(&self, key: &K) -> Option<&SmallOrdMap<O, V>> {
        self.map.get(key)
    }

    /// The orders of the entries of `key`, first first.
    pub(crate) fn keys<'a>(&'a self, key: &K) -> impl Iterator<Item = &'a O> + use<'a, K, O, V> {
        self.map.get(key).into_iter().flat_map(|m| m.keys())
    }

    /// The first entry of `key`.
    pub(crate) fn first(&self, key: &K) -> Option<(&O, &V)> {
        self.map.get(key)?.first()
    }

    /// Whether `key` has an entry.
    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// Makes room for `additional` more keys.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.map.reserve(additional);
    }

    /// The number of keys.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_index_drops_empty_keys() {
        let mut m: MultiIndex<&str, u32> = MultiIndex::default();
        assert!(m.insert("a", 1));
        assert!(!m.insert("a", 1));
        assert!(m.insert("a", 2));
        let mut v: Vec<_> = m.get(&"a").copied().collect();
        v.sort();
        assert_eq!(v, [1, 2]);
        assert!(m.remove(&"a", &1));
        assert!(!m.remove(&"a", &1));
        assert!(!m.remove(&"b", &1));
        assert_eq!(m.len(), 1);
        assert!(m.remove(&"a", &2));
        assert_eq!(m.len(), 0);
        assert_eq!(m.get(&"a").count(), 0);
    }

    #[test]
    fn ord_index_keeps_order_and_drops_empty_keys() {
        let mut m: OrdIndex<&str, u32, &str> = OrdIndex::default();
        m.insert("h", 5, "five");
        m.insert("h", 1, "one");
        assert_eq!(m.first(&"h"), Some((&1, &"one")));
        assert_eq!(m.keys(&"h").copied().collect::<Vec<_>>(), [1, 5]);
        assert_eq!(
            m.get(&"h").unwrap().values().copied().collect::<Vec<_>>(),
            ["one", "five"]
        );
        m.remove(&"h", &1);
        assert_eq!(m.first(&"h"), Some((&5, &"five")));
        m.remove(&"h", &9);
        m.remove(&"x", &5);
        assert!(m.contains_key(&"h"));
        m.remove(&"h", &5);
        assert!(!m.contains_key(&"h"));
        assert_eq!(m.len(), 0);
        assert_eq!(m.first(&"h"), None);
    }
}
