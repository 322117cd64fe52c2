//! Reference counts that remove a key when its count reaches zero.

use std::hash::Hash;

use foldhash::HashMap;

/// How many references each key has, with the value its first reference brought (e.g.
/// how to build the cluster a route names). A key is present exactly while its count is
/// above zero, so [`RefCount::contains_key`] answers "is it still used?".
#[derive(Debug)]
pub(crate) struct RefCount<K, V = ()> {
    map: HashMap<K, (u32, V)>,
}

impl<K, V> Default for RefCount<K, V> {
    fn default() -> Self {
        RefCount {
            map: HashMap::default(),
        }
    }
}

impl<K: Eq + Hash, V> RefCount<K, V> {
    /// Adds a reference to `key`. `value` is kept when this is the first reference (and
    /// dropped otherwise). Returns whether it was the first.
    pub(crate) fn inc(&mut self, key: K, value: V) -> bool {
        let e = self.map.entry(key).or_insert((0, value));
        e.0 += 1;
        e.0 == 1
    }

    /// Adds a reference to `key` if it has one already, returning the stored key (`None`:
    /// unknown, nothing changed).
    pub(crate) fn inc_existing(&mut self, key: &K) -> Option<&K> {
        self.map.get_mut(key)?.0 += 1;
        self.map.get_key_value(key).map(|(k, _)| k)
    }

    /// Adds a reference to `key` and makes `value` its value (the newest reference
    /// wins, e.g. a Gateway's changed settings reaching the sockets its sets share).
    pub(crate) fn inc_replace(&mut self, key: K, value: V) {
        match self.map.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                let e = e.get_mut();
                e.0 += 1;
                e.1 = value;
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert((1, value));
            }
        }
    }

    /// Drops a reference to `key`. Returns the key's value when that was the last
    /// reference (the key is then gone); `None` otherwise, also for an unknown key.
    pub(crate) fn dec(&mut self, key: &K) -> Option<V> {
        let e = self.map.get_mut(key)?;
        e.0 -= 1;
        if e.0 > 0 {
            return None;
        }
        self.map.remove(key).map(|(_, v)| v)
    }

    /// The number of references to `key` (0 when unknown).
    pub(crate) fn count(&self, key: &K) -> u32 {
        self.map.get(key).map_or(0, |e| e.0)
    }

    /// The value of a referenced key.
    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key).map(|e| &e.1)
    }

    /// Every referenced key with its value, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter().map(|(k, e)| (k, &e.1))
    }

    /// Whether `key` has at least one reference.
    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// The number of referenced keys.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_removes_at_zero() {
        let mut r: RefCount<&str, u8> = RefCount::default();
        assert!(r.inc("a", 1));
        assert!(!r.inc("a", 2), "not the first reference");
        assert_eq!(r.get(&"a"), Some(&1), "the first reference's value stays");
        assert_eq!(r.count(&"a"), 2);
        assert_eq!(r.dec(&"a"), None);
        assert!(r.contains_key(&"a"));
        assert_eq!(r.dec(&"a"), Some(1), "the last reference returns the value");
        assert!(!r.contains_key(&"a"));
        assert_eq!(r.count(&"a"), 0);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn unknown_keys_are_ignored() {
        let mut r: RefCount<u32> = RefCount::default();
        assert_eq!(r.dec(&7), None);
        assert!(r.inc(7, ()));
        assert_eq!(r.dec(&8), None);
        assert_eq!(r.count(&7), 1);
    }

    #[test]
    fn back_to_zero_then_again_is_a_first_reference() {
        let mut r: RefCount<u32> = RefCount::default();
        assert!(r.inc(1, ()));
        assert!(r.dec(&1).is_some());
        assert!(r.inc(1, ()));
        assert_eq!(r.len(), 1);
    }
}
