//! A hash map split into a fixed number of copy-on-write shards.
//!
//! Snapshots hold tables of up to hundreds of thousands of entries (virtual hosts, SNI
//! names, clusters, certificates). A new snapshot version must not copy them: cloning a
//! [`ShardedMap`] copies one `Arc`, and changing one key copies only the spine (256
//! pointers) and the one shard that holds the key. Every other shard stays shared, by
//! pointer, with the previous version.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use foldhash::quality::FixedState;

/// Number of shards. A power of two; with 100,000 entries a shard holds about 400.
const SHARDS: usize = 256;

/// Fixed seed: the shard of a key must not change between map versions or processes.
const SEED: u64 = 0x7765_6972_5f73_6864;

/// The hasher of both the shard choice and the shards themselves.
const HASHER: FixedState = FixedState::with_seed(SEED);

type Shard<K, V> = HashMap<K, V, FixedState>;

/// A persistent hash map made of [`SHARDS`] copy-on-write shards.
///
/// Reads are one hash and one lookup in one shard. Writes go through [`Arc::make_mut`], so
/// they copy only data still shared with another version.
pub(crate) struct ShardedMap<K, V> {
    shards: Arc<[Arc<Shard<K, V>>]>,
    len: usize,
}

impl<K, V> Clone for ShardedMap<K, V> {
    fn clone(&self) -> Self {
        ShardedMap {
            shards: self.shards.clone(),
            len: self.len,
        }
    }
}

impl<K, V> Default for ShardedMap<K, V> {
    fn default() -> Self {
        // One empty shard shared by every slot: an empty map costs two allocations.
        let empty: Arc<Shard<K, V>> = Arc::new(HashMap::with_hasher(HASHER));
        let shards: Vec<Arc<Shard<K, V>>> = (0..SHARDS).map(|_| empty.clone()).collect();
        ShardedMap {
            shards: shards.into(),
            len: 0,
        }
    }
}

impl<K, V> std::fmt::Debug for ShardedMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedMap")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// The shard of a key's hash. The shards' own tables (hashbrown) use the low bits of the
/// same hash for the bucket and the top seven bits as a tag, so the shard is taken from
/// bits 48..56: keys of one shard still spread over buckets and tags.
fn shard_of(hash: u64) -> usize {
    ((hash >> 48) as usize) & (SHARDS - 1)
}

impl<K: Hash + Eq, V> ShardedMap<K, V> {
    /// An empty map.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the map is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn shard_index<Q: Hash + ?Sized>(key: &Q) -> usize {
        shard_of(HASHER.hash_one(key))
    }

    /// The value stored under `key`.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shards[Self::shard_index(key)].get(key)
    }

    /// Whether `key` is present.
    pub(crate) fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key).is_some()
    }

    /// All entries, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards.iter().flat_map(|s| s.iter())
    }
}

impl<K: Hash + Eq + Clone, V: Clone> ShardedMap<K, V> {
    /// Inserts or replaces; returns the previous value. Copies the key's shard (and the
    /// spine) only if they are shared with another version.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        let i = Self::shard_index(&key);
        let shard = Arc::make_mut(&mut Arc::make_mut(&mut self.shards)[i]);
        let old = shard.insert(key, value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes `key`; returns its value. Absent keys copy nothing.
    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let i = Self::shard_index(key);
        if !self.shards[i].contains_key(key) {
            return None;
        }
        let shard = Arc::make_mut(&mut Arc::make_mut(&mut self.shards)[i]);
        let old = shard.remove(key);
        if old.is_some() {
            self.len -= 1;
        }
        old
    }
}

#[cfg(test)]
impl<K, V> ShardedMap<K, V> {
    /// Number of shards that are the same allocation in `self` and `other`.
    pub(crate) fn shared_shards(&self, other: &Self) -> usize {
        self.shards
            .iter()
            .zip(other.shards.iter())
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count()
    }

    /// Total number of shards.
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(n: u32) -> ShardedMap<Arc<str>, u32> {
        let mut m = ShardedMap::new();
        for i in 0..n {
            m.insert(format!("host-{i}.example.com").into(), i);
        }
        m
    }

    #[test]
    fn insert_get_remove() {
        let mut m = filled(1000);
        assert_eq!(m.len(), 1000);
        assert_eq!(m.get("host-7.example.com"), Some(&7));
        assert_eq!(m.insert("host-7.example.com".into(), 70), Some(7));
        assert_eq!(m.len(), 1000);
        assert_eq!(m.remove("host-7.example.com"), Some(70));
        assert_eq!(m.remove("host-7.example.com"), None);
        assert!(!m.contains_key("host-7.example.com"));
        assert_eq!(m.len(), 999);
        assert_eq!(m.iter().count(), 999);
        assert_eq!(
            m.iter().map(|(_, v)| u64::from(*v)).sum::<u64>(),
            (0..1000u64).sum::<u64>() - 7
        );
    }

    #[test]
    fn keys_spread_over_shards() {
        let m = filled(10_000);
        let used = m.shards.iter().filter(|s| !s.is_empty()).count();
        assert_eq!(used, SHARDS, "10,000 keys should touch every shard");
        let max = m.shards.iter().map(|s| s.len()).max().unwrap_or(0);
        assert!(max < 120, "largest shard holds {max} of 10,000 keys");
    }

    #[test]
    fn clone_then_write_shares_untouched_shards() {
        let original = filled(10_000);
        let mut copy = original.clone();
        assert_eq!(copy.shared_shards(&original), SHARDS);

        copy.insert("new.example.com".into(), 1);
        assert_eq!(copy.shared_shards(&original), SHARDS - 1);
        assert_eq!(original.get("new.example.com"), None);
        assert_eq!(original.len(), 10_000);
        assert_eq!(copy.len(), 10_001);

        copy.remove("host-1.example.com");
        assert_eq!(original.get("host-1.example.com"), Some(&1));
        assert!(copy.shared_shards(&original) >= SHARDS - 2);

        // Removing an absent key copies nothing.
        let before = copy.clone();
        copy.remove("absent.example.com");
        assert_eq!(copy.shared_shards(&before), SHARDS);
    }

    #[test]
    fn empty_map_shares_one_shard() {
        let m: ShardedMap<Arc<str>, u32> = ShardedMap::new();
        assert!(m.is_empty());
        assert_eq!(m.shard_count(), SHARDS);
        assert!(m.shards.iter().all(|s| Arc::ptr_eq(s, &m.shards[0])));
    }
}
