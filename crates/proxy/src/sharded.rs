//! A hash map split into copy-on-write shards under a two-level spine.
//!
//! Snapshots hold tables of up to hundreds of thousands of entries (virtual hosts, SNI
//! names, clusters, certificates). A new snapshot version must not copy them: cloning a
//! [`ShardedMap`] copies one `Arc`, and changing one key copies only the path to it — the
//! top spine (64 pointers), one group (64 pointers) and the one shard that holds the key
//! (about 25 entries at 100,000). Every other group and shard stays shared, by pointer,
//! with the previous version.
//!
//! Why two levels: with one level of 256 shards a change copied a shard of ~400 entries
//! at 100,000 hosts, and the change path grew 3× from 1,000 to 100,000 domains
//! (BENCHMARKS.md). A flat spine of 4,096 would make every first write of a batch copy
//! 4,096 pointers. Two levels of 64 keep both copies small at any size.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use foldhash::quality::FixedState;
use hashbrown::hash_table::{Entry, HashTable};

/// Fan-out of each spine level (a power of two).
const FANOUT: usize = 64;
const FANOUT_BITS: u32 = FANOUT.trailing_zeros();

/// Number of shards (leaves).
#[cfg(test)]
const SHARDS: usize = FANOUT * FANOUT;

/// Fixed seed: the shard of a key must not change between map versions or processes.
const SEED: u64 = 0x7765_6972_5f73_6864;

/// The hasher of both the shard choice and the shards themselves.
const HASHER: FixedState = FixedState::with_seed(SEED);

/// A shard is a table told the key's hash: the hash that chose the shard is the one its
/// table probes with, so a lookup hashes its key once.
type Shard<K, V> = HashTable<(K, V)>;
type Group<K, V> = Arc<[Arc<Shard<K, V>>]>;

/// A persistent hash map made of `FANOUT × FANOUT` copy-on-write shards.
///
/// Reads are one hash, two indexed loads and one probe of one shard with the same hash. Writes go through
/// [`Arc::make_mut`], so they copy only data still shared with another version.
pub(crate) struct ShardedMap<K, V> {
    groups: Arc<[Group<K, V>]>,
    len: usize,
}

impl<K, V> Clone for ShardedMap<K, V> {
    fn clone(&self) -> Self {
        ShardedMap {
            groups: self.groups.clone(),
            len: self.len,
        }
    }
}

impl<K, V> Default for ShardedMap<K, V> {
    fn default() -> Self {
        // One empty shard and one group of it, shared by every slot: an empty map costs
        // three allocations.
        let empty: Arc<Shard<K, V>> = Arc::new(HashTable::new());
        let group: Group<K, V> = (0..FANOUT).map(|_| empty.clone()).collect();
        ShardedMap {
            groups: (0..FANOUT).map(|_| group.clone()).collect(),
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

/// The (group, shard) of a key's hash. The shards' own tables (hashbrown) use the low
/// bits of the same hash for the bucket and the top seven bits as a tag, so the position
/// is taken from bits 32..44, which neither uses: keys of one shard still spread over
/// buckets and tags.
fn position(hash: u64) -> (usize, usize) {
    let bits = (hash >> 32) as usize;
    (bits & (FANOUT - 1), (bits >> FANOUT_BITS) & (FANOUT - 1))
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

    /// The value stored under `key`.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = HASHER.hash_one(key);
        let (g, s) = position(hash);
        self.groups[g][s]
            .find(hash, |(k, _)| k.borrow() == key)
            .map(|(_, v)| v)
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
        self.groups
            .iter()
            .flat_map(|g| g.iter())
            .flat_map(|s| s.iter().map(|(k, v)| (k, v)))
    }
}

impl<K: Hash + Eq + Clone, V: Clone> ShardedMap<K, V> {
    /// The shard at `(g, s)`, made unique: copies the spine, the group and the shard only
    /// if they are shared with another version.
    fn shard_mut(&mut self, (g, s): (usize, usize)) -> &mut Shard<K, V> {
        let group = &mut Arc::make_mut(&mut self.groups)[g];
        Arc::make_mut(&mut Arc::make_mut(group)[s])
    }

    /// Inserts or replaces; returns the previous value.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        let hash = HASHER.hash_one(&key);
        let shard = self.shard_mut(position(hash));
        match shard.entry(hash, |(k, _)| *k == key, |(k, _)| HASHER.hash_one(k)) {
            Entry::Occupied(mut entry) => Some(std::mem::replace(&mut entry.get_mut().1, value)),
            Entry::Vacant(entry) => {
                entry.insert((key, value));
                self.len += 1;
                None
            }
        }
    }

    /// Removes `key`; returns its value. Absent keys copy nothing.
    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if !self.contains_key(key) {
            return None;
        }
        let hash = HASHER.hash_one(key);
        let shard = self.shard_mut(position(hash));
        let entry = shard.find_entry(hash, |(k, _)| k.borrow() == key).ok()?;
        let ((_, old), _) = entry.remove();
        self.len -= 1;
        Some(old)
    }
}

#[cfg(test)]
impl<K, V> ShardedMap<K, V> {
    fn shards(&self) -> impl Iterator<Item = &Arc<Shard<K, V>>> {
        self.groups.iter().flat_map(|g| g.iter())
    }

    /// Number of shards that are the same allocation in `self` and `other`.
    pub(crate) fn shared_shards(&self, other: &Self) -> usize {
        self.shards()
            .zip(other.shards())
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count()
    }

    /// Total number of shards.
    pub(crate) fn shard_count(&self) -> usize {
        self.shards().count()
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
        let m = filled(100_000);
        let used = m.shards().filter(|s| !s.is_empty()).count();
        assert_eq!(used, SHARDS, "100,000 keys should touch every shard");
        let max = m.shards().map(|s| s.len()).max().unwrap_or(0);
        assert!(
            max < 70,
            "largest shard holds {max} of 100,000 keys (mean 24)"
        );
    }

    #[test]
    fn a_write_copies_one_group_and_one_shard() {
        let original = filled(10_000);
        let mut copy = original.clone();
        copy.insert("new.example.com".into(), 1);
        let shared_groups = copy
            .groups
            .iter()
            .zip(original.groups.iter())
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(shared_groups, FANOUT - 1);
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
        let first = m.shards().next().unwrap();
        assert!(m.shards().all(|s| Arc::ptr_eq(s, first)));
    }
}
