//! A sorted map that keeps a single entry inline.
//!
//! Almost every host has exactly one rule and one SNI owner. A `BTreeMap` allocates a
//! whole node (room for 11 entries) even for one entry, which at 20,000 hosts costs tens of
//! megabytes; this map allocates nothing for one entry and becomes a `BTreeMap` from the
//! second on, so a host with many rules keeps logarithmic inserts and removals.

use std::collections::BTreeMap;

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

    /// Removes the entry for `key`, if any.
    pub(crate) fn remove(&mut self, key: &K) {
        match self {
            SmallOrdMap::Empty => {}
            SmallOrdMap::One(k, _) => {
                if k == key {
                    *self = SmallOrdMap::Empty;
                }
            }
            SmallOrdMap::Many(map) => {
                map.remove(key);
                if map.len() <= 1 {
                    // Back to the inline form, freeing the tree's node.
                    *self = match std::mem::take(map).pop_first() {
                        Some((k, v)) => SmallOrdMap::One(k, v),
                        None => SmallOrdMap::Empty,
                    };
                }
            }
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
}
