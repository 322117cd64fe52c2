//! A sorted map and a set that keep a single entry inline.
//!
//! Almost every host has exactly one rule and one SNI owner. A `BTreeMap` allocates a
//! whole node (room for 11 entries) even for one entry, which at 20,000 hosts costs tens of
//! megabytes; this map allocates nothing for one entry and becomes a `BTreeMap` from the
//! second on, so a host with many rules keeps logarithmic inserts and removals. Likewise
//! almost every Secret has one dependent Ingress: a `HashSet` of one value allocates a
//! table of four slots, [`SmallSet`] nothing.

use std::collections::BTreeMap;
use std::hash::Hash;

use foldhash::HashSet;

/// A set, inline while it holds one value. Never empty (its owner drops it with its last
/// value).
#[derive(Debug)]
pub(crate) enum SmallSet<V> {
    /// Exactly one value, stored inline.
    One(V),
    /// Two or more values.
    Many(HashSet<V>),
}

impl<V: Eq + Hash> SmallSet<V> {
    /// Adds `value`; returns whether it was new.
    pub(crate) fn insert(&mut self, value: V) -> bool {
        match self {
            SmallSet::One(v) if *v == value => false,
            SmallSet::One(_) => {
                let mut set = HashSet::default();
                set.insert(value);
                let SmallSet::One(old) = std::mem::replace(self, SmallSet::Many(set)) else {
                    unreachable!("matched One above")
                };
                if let SmallSet::Many(set) = self {
                    set.insert(old);
                }
                true
            }
            SmallSet::Many(set) => set.insert(value),
        }
    }

    /// Removes `value`. Returns whether it was there, and whether the set is now empty
    /// (then it must be dropped: a `SmallSet` is never empty).
    pub(crate) fn remove(&mut self, value: &V) -> (bool, bool) {
        match self {
            SmallSet::One(v) => {
                let there = v == value;
                (there, there)
            }
            SmallSet::Many(set) => {
                let there = set.remove(value);
                if set.len() == 1 {
                    // Back to the inline form, freeing the table.
                    if let Some(last) = std::mem::take(set).into_iter().next() {
                        *self = SmallSet::One(last);
                    }
                }
                (there, false)
            }
        }
    }

    /// The values, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &V> {
        let (one, many) = match self {
            SmallSet::One(v) => (Some(v), None),
            SmallSet::Many(set) => (None, Some(set.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

/// An ordered map, inline while it holds at most one entry.
#[derive(Debug, Default)]
pub(crate) enum SmallOrdMap<K, V> {
    /// No entry.
    #[default]
    Empty,
    /// Exactly one entry, stored inline.
    One(K, V),
    /// Two or more entries.
    Many(BTreeMap<K, V>),
}

impl<K: Ord, V> SmallOrdMap<K, V> {
    /// Inserts or replaces the value for `key`.
    pub(crate) fn insert(&mut self, key: K, value: V) {
        match self {
            SmallOrdMap::Empty => *self = SmallOrdMap::One(key, value),
            SmallOrdMap::One(k, v) if *k == key => *v = value,
            SmallOrdMap::One(..) => {
                let SmallOrdMap::One(k, v) = std::mem::take(self) else {
                    unreachable!("matched One above")
                };
                let mut map = BTreeMap::new();
                map.insert(k, v);
                map.insert(key, value);
                *self = SmallOrdMap::Many(map);
            }
            SmallOrdMap::Many(map) => {
                map.insert(key, value);
            }
        }
    }

    /// Removes the entry for `key`, returning its value, if any.
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        match self {
            SmallOrdMap::Empty => None,
            SmallOrdMap::One(k, _) => {
                if k != key {
                    return None;
                }
                match std::mem::take(self) {
                    SmallOrdMap::One(_, v) => Some(v),
                    _ => unreachable!("matched One above"),
                }
            }
            SmallOrdMap::Many(map) => {
                let removed = map.remove(key);
                if map.len() <= 1 {
                    // Back to the inline form, freeing the tree's node.
                    *self = match std::mem::take(map).pop_first() {
                        Some((k, v)) => SmallOrdMap::One(k, v),
                        None => SmallOrdMap::Empty,
                    };
                }
                removed
            }
        }
    }

    /// The value for `key`, if any.
    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        match self {
            SmallOrdMap::Empty => None,
            SmallOrdMap::One(k, v) => (k == key).then_some(v),
            SmallOrdMap::Many(map) => map.get(key),
        }
    }

    /// Whether the map holds no entry.
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            SmallOrdMap::Empty => true,
            SmallOrdMap::One(..) => false,
            SmallOrdMap::Many(map) => map.is_empty(),
        }
    }

    /// The values in key order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        let (one, many) = match self {
            SmallOrdMap::Empty => (None, None),
            SmallOrdMap::One(_, v) => (Some(v), None),
            SmallOrdMap::Many(map) => (None, Some(map.values())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// The first entry.
    pub(crate) fn first(&self) -> Option<(&K, &V)> {
        match self {
            SmallOrdMap::Empty => None,
            SmallOrdMap::One(k, v) => Some((k, v)),
            SmallOrdMap::Many(map) => map.first_key_value(),
        }
    }

    /// The entries in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        let (one, many) = match self {
            SmallOrdMap::Empty => (None, None),
            SmallOrdMap::One(k, v) => (Some((k, v)), None),
            SmallOrdMap::Many(map) => (None, Some(map.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// The entries whose keys lie in `range`, in key order.
    pub(crate) fn range<R: std::ops::RangeBounds<K>>(
        &self,
        range: R,
    ) -> impl DoubleEndedIterator<Item = (&K, &V)> {
        let (one, many) = match self {
            SmallOrdMap::Empty => (None, None),
            SmallOrdMap::One(k, v) => (range.contains(k).then_some((k, v)), None),
            SmallOrdMap::Many(map) => (None, Some(map.range(range))),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// The keys in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        let (one, many) = match self {
            SmallOrdMap::Empty => (None, None),
            SmallOrdMap::One(k, _) => (Some(k), None),
            SmallOrdMap::Many(map) => (None, Some(map.keys())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// The number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        match self {
            SmallOrdMap::Empty => 0,
            SmallOrdMap::One(..) => 1,
            SmallOrdMap::Many(map) => map.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_set_behaves_like_a_set() {
        let mut s = SmallSet::One(1);
        assert!(!s.insert(1));
        assert!(s.insert(2));
        assert!(s.insert(3));
        let mut v: Vec<_> = s.iter().copied().collect();
        v.sort();
        assert_eq!(v, [1, 2, 3]);
        assert_eq!(s.remove(&2), (true, false));
        assert_eq!(s.remove(&2), (false, false));
        assert_eq!(s.remove(&3), (true, false));
        assert!(matches!(s, SmallSet::One(1)));
        assert_eq!(s.remove(&7), (false, false));
        assert_eq!(s.remove(&1), (true, true));
    }

    #[test]
    fn behaves_like_a_sorted_map() {
        let mut m = SmallOrdMap::default();
        assert!(m.is_empty());
        m.insert(5, "five");
        m.insert(5, "FIVE");
        assert_eq!(m.values().copied().collect::<Vec<_>>(), ["FIVE"]);
        m.insert(1, "one");
        m.insert(9, "nine");
        assert_eq!(m.len(), 3);
        assert_eq!(
            m.values().copied().collect::<Vec<_>>(),
            ["one", "FIVE", "nine"]
        );
        m.remove(&5);
        m.remove(&42);
        assert_eq!(m.values().copied().collect::<Vec<_>>(), ["one", "nine"]);
        m.remove(&1);
        assert!(matches!(m, SmallOrdMap::One(9, "nine")));
        m.remove(&7);
        assert_eq!(m.len(), 1);
        m.remove(&9);
        assert!(m.is_empty());
        assert_eq!(m.values().count(), 0);
    }

    #[test]
    fn small_ord_map_ranges_like_a_btree_map() {
        use std::ops::Bound::{Excluded, Unbounded};
        let mut m = SmallOrdMap::default();
        let mut b = BTreeMap::new();
        let ranges = |m: &SmallOrdMap<i32, i32>, b: &BTreeMap<i32, i32>| {
            for x in 0..8 {
                let below: Vec<_> = m.range(..x).collect();
                assert_eq!(below, b.range(..x).collect::<Vec<_>>(), "..{x}");
                let above: Vec<_> = m.range((Excluded(x), Unbounded)).collect();
                assert_eq!(
                    above,
                    b.range((Excluded(x), Unbounded)).collect::<Vec<_>>(),
                    "{x}.."
                );
            }
        };
        ranges(&m, &b);
        for (k, v) in [(4, 40), (2, 20), (6, 60)] {
            m.insert(k, v);
            b.insert(k, v);
            ranges(&m, &b);
        }
        for k in [2, 6, 4] {
            m.remove(&k);
            b.remove(&k);
            ranges(&m, &b);
        }
    }
}
