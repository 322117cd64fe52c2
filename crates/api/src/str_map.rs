//! [`StrMap`]: a small map from string keys, as a sorted vector.

use std::fmt;
use std::ops::Index;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A map from string keys, ordered by key like a `BTreeMap<String, V>`, kept as one sorted
/// vector: a Secret holds two or three keys, and a `BTreeMap` allocates a node of eleven
/// slots for them (about 450 bytes for a TLS Secret's two, against 64 here).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct StrMap<V>(Vec<(Box<str>, V)>);

impl<V> Default for StrMap<V> {
    fn default() -> Self {
        StrMap(Vec::new())
    }
}

impl<V> StrMap<V> {
    /// An empty map.
    pub fn new() -> Self {
        StrMap(Vec::new())
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| (**k).cmp(key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&V> {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    /// Whether the map holds `key`.
    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: Box<str>, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    /// Removes `key`; returns its value. The last entry removed frees the room: a packed
    /// TLS Secret's maps lose both their entries and are kept for as long as the Secret.
    pub fn remove(&mut self, key: &str) -> Option<V> {
        let i = self.find(key).ok()?;
        let v = self.0.remove(i).1;
        if self.0.is_empty() {
            self.0 = Vec::new();
        }
        Some(v)
    }

    /// The entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&str, &V)> + ExactSizeIterator {
        self.0.iter().map(|(k, v)| (&**k, v))
    }

    /// The keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator {
        self.0.iter().map(|(k, _)| &**k)
    }

    /// The values in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator {
        self.0.iter().map(|(_, v)| v)
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<V> Index<&str> for StrMap<V> {
    type Output = V;

    /// Panics when `key` is absent, like `BTreeMap`'s.
    fn index(&self, key: &str) -> &V {
        self.get(key).expect("key in StrMap")
    }
}

impl<K: Into<Box<str>>, V> FromIterator<(K, V)> for StrMap<V> {
    /// A later entry for the same key replaces an earlier one, as in a `BTreeMap`.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let iter = iter.into_iter();
        // The upper bound when there is one (a filtered mapping's entries), not to grow.
        let (lower, upper) = iter.size_hint();
        let mut map = StrMap(Vec::with_capacity(upper.unwrap_or(lower).min(64)));
        for (k, v) in iter {
            map.insert(k.into(), v);
        }
        map
    }
}

impl<'a, V> IntoIterator for &'a StrMap<V> {
    type Item = (&'a str, &'a V);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (Box<str>, V)>,
        fn(&'a (Box<str>, V)) -> (&'a str, &'a V),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (&**k, v))
    }
}

impl<V: fmt::Debug> fmt::Debug for StrMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V: Serialize> Serialize for StrMap<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (k, v) in self {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for StrMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrMapVisitor<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for StrMapVisitor<V> {
            type Value = StrMap<V>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<StrMap<V>, A::Error> {
                let mut map = StrMap(Vec::with_capacity(access.size_hint().unwrap_or(0).min(64)));
                while let Some((k, v)) = access.next_entry::<String, V>()? {
                    map.insert(k.into_boxed_str(), v);
                }
                Ok(map)
            }
        }
        deserializer.deserialize_map(StrMapVisitor(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn behaves_like_a_btree_map() {
        let pairs = [("b", 1), ("a", 2), ("c", 3), ("a", 4), ("", 5)];
        let map: StrMap<i32> = pairs.iter().copied().collect();
        let btree: BTreeMap<&str, i32> = pairs.iter().copied().collect();
        assert!(map.iter().eq(btree.iter().map(|(k, v)| (*k, v))));
        assert_eq!(map["a"], 4);
        assert_eq!(map.get("z"), None);
        let json = serde_json::to_string(&map).unwrap();
        assert_eq!(json, serde_json::to_string(&btree).unwrap());
        let back: StrMap<i32> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, map);
        assert_eq!(format!("{map:?}"), format!("{btree:?}"));
        let mut m = map.clone();
        assert_eq!(m.remove("a"), Some(4));
        assert_eq!(m.insert("b".into(), 9), Some(1));
        assert_eq!(m.keys().collect::<Vec<_>>(), ["", "b", "c"]);
    }

    #[test]
    fn emptied_by_removals_it_holds_no_room() {
        let mut m: StrMap<i32> = [("tls.crt", 1), ("tls.key", 2)].into_iter().collect();
        m.remove("tls.key");
        assert!(m.0.capacity() > 0);
        m.remove("tls.crt");
        assert_eq!(m.0.capacity(), 0);
        assert_eq!(m.remove("tls.crt"), None);
    }
}
