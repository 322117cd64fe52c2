//! A hash table split into copy-on-write shards under a two-level spine.
//!
//! Snapshots hold tables of up to millions of entries (virtual hosts, SNI names,
//! clusters, certificates). A new snapshot version must not copy them: cloning a
//! [`ShardedTable`] copies one `Arc`, and changing one key copies only the path to it —
//! the top spine ([`FANOUT`] slots), one group ([`FANOUT`] slots), the splits below it
//! and the one shard that holds the key. Every other group and shard stays shared, by
//! pointer, with the previous version.
//!
//! A [`ShardedTable`] holds entries that carry their own key ([`Keyed`]); a
//! [`ShardedMap`] is one of `(key, value)` pairs. A table whose values already hold
//! their key (a virtual host its host name) stores the value alone: a copied entry is
//! then one reference count instead of two.
//!
//! A shard that grows beyond [`SPLIT_AT`] entries is split into [`SPLIT_FANOUT`] shards
//! chosen by four more bits of the hash (up to four times), so a write copies a few
//! dozen entries at any size. A split is local (one shard's entries) and never undone:
//! a table that shrinks keeps its finer shards.
//!
//! What a write costs is the reference counts of everything it copies: each is read and
//! incremented, and at a large table each is a cache miss in a heap of gigabytes
//! (BENCHMARKS.md, "Session 24": half of the CPU of a change at 1,000,000 domains once).
//! A path copies `FANOUT + FANOUT + SPLIT_FANOUT × splits` pointers and the shard's
//! entries. With a spine of 64 × 64 (sessions 24–55) that was ~130 counts at 1,000
//! entries and ~177 at 1,000,000 (64 + 64 + 16 + a shard of ~15 entries, two counts
//! each); with 16 × 16 it is ~42 and ~97 (BENCHMARKS.md, "Session 56"), for one more
//! indexed load per lookup past ~16,000 entries (five instead of four at 1,000,000). A
//! flat spine would make every first write of a batch copy all of it. Host tables
//! storing their values alone (session 57) copy one count per entry: ~82 at 1,000,000.
//!
//! A copy reads the reference counts of everything it clones before it increments them
//! ([`read_counts`]): the increments would otherwise wait for one cold cache line
//! after another.
//!
//! Tables whose entries may be dropped late ([`Keyed::PATCHED`]: the host tables and the
//! certificate table) do not copy a shared shard's entries at all: the write lays a
//! [`Patch`] over the shard (the shard by pointer, the entries it adds, the addresses of
//! the entries it hides), and the write that takes the patch past [`PATCH_MAX`] changes
//! folds it into a shard of its own. At 1,000,000 domains a shard's entries are each a
//! cold page (BENCHMARKS.md, "Session 58"); a patch touches one count instead of a
//! shard's ~15.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use foldhash::quality::FixedState;
use hashbrown::hash_table::{Entry, HashTable};

/// Fan-out of each spine level (a power of two).
const FANOUT: usize = 16;
const FANOUT_BITS: u32 = FANOUT.trailing_zeros();

/// A shard holding more entries than this after an insert is split.
const SPLIT_AT: usize = 64;

/// Shards a split makes (a power of two).
const SPLIT_FANOUT: usize = 16;
const SPLIT_BITS: u32 = SPLIT_FANOUT.trailing_zeros();

/// The hash bits the spine uses start here (see [`position`]); splits take the bits after
/// the spine's, up to bit 56 (the shards' tables use the top seven bits as tags).
const SPINE_SHIFT: u32 = 32;
const FIRST_SPLIT_SHIFT: u32 = SPINE_SHIFT + 2 * FANOUT_BITS;
const LAST_SPLIT_SHIFT: u32 = 56 - SPLIT_BITS;

/// Number of shards (leaves) of a table without splits.
#[cfg(test)]
const SHARDS: usize = FANOUT * FANOUT;

/// Fixed seed: the shard of a key must not change between table versions or processes.
const SEED: u64 = 0x7765_6972_5f73_6864;

/// The hasher of both the shard choice and the shards themselves.
const HASHER: FixedState = FixedState::with_seed(SEED);

/// An entry of a [`ShardedTable`]: it carries the key it is found by.
pub(crate) trait Keyed {
    /// What the entry is found by.
    type Key: ?Sized + Hash + Eq;
    /// The entry's key; it must not change while the entry is in a table.
    fn key(&self) -> &Self::Key;
    /// Whether a write to a shard shared with another version may lay a [`Patch`] over
    /// it instead of copying its entries. A patch keeps the entries it hides (replaced or
    /// removed) alive until it is folded (at most [`PATCH_MAX`] more writes to that shard),
    /// so only tables whose entries' drop frees memory and nothing else set it.
    const PATCHED: bool = false;
}

impl<K: Hash + Eq, V> Keyed for (K, V) {
    type Key = K;
    fn key(&self) -> &K {
        &self.0
    }
}

/// A shard is a table told the key's hash: the hash that chose the shard is the one its
/// table probes with, so a lookup hashes its key once.
type Shard<E> = HashTable<E>;
type Group<E> = Arc<[Slot<E>]>;

/// A place under the spine: one shard, a shard shared with other versions and a few
/// changes over it, or a split shard's [`SPLIT_FANOUT`] places. The first two are leaves.
enum Slot<E> {
    Shard(Arc<Shard<E>>),
    Patched(Arc<Patch<E>>),
    Split(Arc<[Slot<E>]>),
}

impl<E> Clone for Slot<E> {
    fn clone(&self) -> Self {
        match self {
            Slot::Shard(s) => Slot::Shard(s.clone()),
            Slot::Patched(p) => Slot::Patched(p.clone()),
            Slot::Split(s) => Slot::Split(s.clone()),
        }
    }
}

/// Changes (entries added or replaced, entries hidden) a [`Patch`] holds before a write
/// folds it into a shard of its own.
const PATCH_MAX: usize = 8;

/// A shard shared with other versions, seen with a few changes: entries added (or
/// replacing one of the base's) and entries of the base hidden (replaced or removed).
///
/// Copying a shard for a write clones each of its entries, and at a large table each
/// clone's reference count is a cache miss on a page of its own (BENCHMARKS.md,
/// "Session 57": most of a change's table time at 1,000,000 domains). A patch clones one
/// pointer (the base) and the few entries it added; the base's entries are not touched
/// until [`PATCH_MAX`] changes have piled up, and then once for all of them.
struct Patch<E> {
    /// Never changed while a patch holds it: the hidden entries are known by address.
    base: Arc<Shard<E>>,
    /// Entries that are not in the base, or replace a hidden one, with their hashes.
    added: Vec<(u64, E)>,
    /// Addresses of the base's entries that are no longer in the table.
    hidden: Vec<usize>,
}

impl<E: Clone> Clone for Patch<E> {
    fn clone(&self) -> Self {
        Patch {
            base: self.base.clone(),
            added: self.added.clone(),
            hidden: self.hidden.clone(),
        }
    }
}

/// An entry's identity in a base that does not change (entries have a size, so two
/// entries of one base never share an address).
fn addr<E>(e: &E) -> usize {
    const {
        assert!(
            size_of::<E>() > 0,
            "patched entries are told apart by address"
        )
    };
    std::ptr::from_ref(e) as usize
}

impl<E> Patch<E> {
    /// A patch without changes over `base`.
    fn over(base: &Arc<Shard<E>>) -> Self {
        Patch {
            base: base.clone(),
            added: Vec::new(),
            hidden: Vec::new(),
        }
    }

    /// The entry of hash `hash` for which `eq` holds.
    fn find(&self, hash: u64, mut eq: impl FnMut(&E) -> bool) -> Option<&E> {
        if let Some((_, e)) = self.added.iter().find(|(h, e)| *h == hash && eq(e)) {
            return Some(e);
        }
        let e = self.base.find(hash, eq)?;
        (self.hidden.is_empty() || !self.hidden.contains(&addr(e))).then_some(e)
    }

    /// Number of entries.
    fn len(&self) -> usize {
        self.base.len() - self.hidden.len() + self.added.len()
    }

    /// Changes held.
    fn changes(&self) -> usize {
        self.added.len() + self.hidden.len()
    }

    /// Every entry: the base's that are not hidden, then the added.
    fn iter(&self) -> impl Iterator<Item = &E> {
        self.base
            .iter()
            .filter(|e| !self.hidden.contains(&addr(*e)))
            .chain(self.added.iter().map(|(_, e)| e))
    }
}

impl<E: Clone> Patch<E> {
    /// Removes the entry of hash `hash` for which `eq` holds and returns it (a clone,
    /// when it is the base's).
    fn remove(&mut self, hash: u64, mut eq: impl FnMut(&E) -> bool) -> Option<E> {
        if let Some(i) = self.added.iter().position(|(h, e)| *h == hash && eq(e)) {
            return Some(self.added.swap_remove(i).1);
        }
        let e = self.base.find(hash, eq)?;
        if self.hidden.contains(&addr(e)) {
            return None;
        }
        self.hidden.push(addr(e));
        Some(e.clone())
    }
}

impl<E: Keyed + Clone> Patch<E> {
    /// Adds `entry`, or replaces the one with its key; returns the replaced entry.
    fn insert(&mut self, hash: u64, entry: E) -> Option<E> {
        let old = self.remove(hash, |e| e.key() == entry.key());
        self.added.push((hash, entry));
        old
    }
}

impl<E> Slot<E> {
    /// The leaf that holds (or would hold) `hash`, below this slot.
    fn leaf(&self, hash: u64) -> &Slot<E> {
        let mut slot = self;
        let mut shift = FIRST_SPLIT_SHIFT;
        while let Slot::Split(places) = slot {
            slot = &places[split_index(hash, shift)];
            shift += SPLIT_BITS;
        }
        slot
    }

    /// The entry of hash `hash` for which `eq` holds, below this slot.
    fn find(&self, hash: u64, eq: impl FnMut(&E) -> bool) -> Option<&E> {
        match self.leaf(hash) {
            Slot::Shard(shard) => shard.find(hash, eq),
            Slot::Patched(patch) => patch.find(hash, eq),
            Slot::Split(_) => unreachable!("`leaf` stops at a leaf"),
        }
    }

    /// Number of entries of a leaf (0 for a split).
    #[cfg(test)]
    fn leaf_len(&self) -> usize {
        match self {
            Slot::Shard(shard) => shard.len(),
            Slot::Patched(patch) => patch.len(),
            Slot::Split(_) => 0,
        }
    }

    /// The entries of a leaf (none for a split).
    fn leaf_iter(&self) -> impl Iterator<Item = &E> {
        let (shard, patch) = match self {
            Slot::Shard(shard) => (Some(&**shard), None),
            Slot::Patched(patch) => (None, Some(&**patch)),
            Slot::Split(_) => (None, None),
        };
        shard
            .into_iter()
            .flat_map(|s| s.iter())
            .chain(patch.into_iter().flat_map(|p| p.iter()))
    }

    /// Every leaf below this slot.
    fn for_each_leaf<'a>(&'a self, f: &mut impl FnMut(&'a Slot<E>)) {
        match self {
            Slot::Split(places) => places.iter().for_each(|p| p.for_each_leaf(f)),
            leaf => f(leaf),
        }
    }
}

/// What copying a node clones (a slot, a shard's key or value) reads the reference counts
/// its clone will increment (see [`read_counts`]), and returns their sum (to keep the
/// reads).
pub(crate) trait Counted {
    /// The sum of the reference counts a clone increments (0 when it increments none).
    fn counts(&self) -> usize;
}

impl<T: ?Sized> Counted for Arc<T> {
    fn counts(&self) -> usize {
        Arc::strong_count(self)
    }
}

impl Counted for weir_model::ClusterKey {
    fn counts(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}

impl Counted for weir_model::ContentHash {
    fn counts(&self) -> usize {
        0
    }
}

impl Counted for weir_model::PolicyTarget {
    fn counts(&self) -> usize {
        // Policies change rarely and their map is small: not read ahead.
        0
    }
}

#[cfg(test)]
impl Counted for u32 {
    fn counts(&self) -> usize {
        0
    }
}

#[cfg(test)]
impl Counted for &'static str {
    fn counts(&self) -> usize {
        0
    }
}

impl<E> Counted for Slot<E> {
    fn counts(&self) -> usize {
        match self {
            Slot::Shard(s) => Arc::strong_count(s),
            Slot::Patched(p) => Arc::strong_count(p),
            Slot::Split(s) => Arc::strong_count(s),
        }
    }
}

impl<K: Counted, V: Counted> Counted for (K, V) {
    fn counts(&self) -> usize {
        self.0.counts().wrapping_add(self.1.counts())
    }
}

/// Whether copies read the counts first: always, but the timing test compares both.
#[cfg(test)]
static WARM: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

fn warming() -> bool {
    #[cfg(test)]
    return WARM.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(test))]
    true
}

/// Reads the reference counts of `items`, which a copy of their node is about to
/// increment: an atomic increment waits for its cache line before the next may start,
/// so at a large table (counts cold in a heap of gigabytes) the copy of 64 pointers
/// waited for 64 cache misses one after the other. Plain reads of the counts miss in
/// parallel, and the increments then find their lines in the cache.
fn read_counts<'a, T: Counted + 'a>(items: impl Iterator<Item = &'a T>) {
    if warming() {
        std::hint::black_box(items.fold(0usize, |sum, i| sum.wrapping_add(i.counts())));
    }
}

/// [`Arc::make_mut`] of a node of pointers (the spine, a group, a split), reading its
/// children's counts first when it is shared and has to be copied.
fn make_mut_warm<T: Clone + Counted>(node: &mut Arc<[T]>) -> &mut [T] {
    if Arc::get_mut(node).is_none() {
        read_counts(node.iter());
    }
    Arc::make_mut(node)
}

/// [`Arc::make_mut`] of a shard, reading its entries' counts first when it is shared.
fn shard_mut_warm<E: Clone + Counted>(shard: &mut Arc<Shard<E>>) -> &mut Shard<E> {
    if Arc::get_mut(shard).is_none() {
        read_counts(shard.iter());
    }
    Arc::make_mut(shard)
}

/// The place of `hash` among a split's shards, for a split at `shift`.
fn split_index(hash: u64, shift: u32) -> usize {
    (hash >> shift) as usize & (SPLIT_FANOUT - 1)
}

/// A persistent hash table of [`Keyed`] entries made of `FANOUT × FANOUT` copy-on-write
/// shards (more once some are split).
///
/// Reads are one hash, two indexed loads (one more per split) and one probe of one shard
/// with the same hash. Writes go through [`Arc::make_mut`], so they copy only data still
/// shared with another version.
pub(crate) struct ShardedTable<E> {
    groups: Arc<[Group<E>]>,
    len: usize,
}

impl<E> Clone for ShardedTable<E> {
    fn clone(&self) -> Self {
        ShardedTable {
            groups: self.groups.clone(),
            len: self.len,
        }
    }
}

impl<E> Default for ShardedTable<E> {
    fn default() -> Self {
        // One empty shard and one group of it, shared by every slot: an empty table
        // costs three allocations.
        let empty: Arc<Shard<E>> = Arc::new(HashTable::new());
        let group: Group<E> = (0..FANOUT).map(|_| Slot::Shard(empty.clone())).collect();
        ShardedTable {
            groups: (0..FANOUT).map(|_| group.clone()).collect(),
            len: 0,
        }
    }
}

impl<E> std::fmt::Debug for ShardedTable<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedTable")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// The (group, slot) of a key's hash. The shards' own tables (hashbrown) use the low
/// bits of the same hash for the bucket and the top seven bits as a tag, so the position
/// is taken from bits 32..40 (and a split's from the bits after), which neither uses:
/// keys of one shard still spread over buckets and tags.
fn position(hash: u64) -> (usize, usize) {
    let bits = (hash >> SPINE_SHIFT) as usize;
    (bits & (FANOUT - 1), (bits >> FANOUT_BITS) & (FANOUT - 1))
}

impl<E: Keyed> ShardedTable<E> {
    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entry whose key is `key`.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&E>
    where
        E::Key: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = HASHER.hash_one(key);
        let (g, s) = position(hash);
        self.groups[g][s].find(hash, |e| e.key().borrow() == key)
    }

    /// Whether an entry has the key `key`.
    pub(crate) fn contains_key<Q>(&self, key: &Q) -> bool
    where
        E::Key: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key).is_some()
    }

    /// All entries, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &E> {
        self.leaves().into_iter().flat_map(|s| s.leaf_iter())
    }
}

impl<E> ShardedTable<E> {
    /// Every leaf (shard or patched shard), split ones' included.
    fn leaves(&self) -> Vec<&Slot<E>> {
        let mut leaves = Vec::new();
        for group in self.groups.iter() {
            for slot in group.iter() {
                slot.for_each_leaf(&mut |s| leaves.push(s));
            }
        }
        leaves
    }
}

impl<E: Keyed + Clone + Counted> ShardedTable<E> {
    /// The slot at `(g, s)`, made unique: copies the spine and the group only if they are
    /// shared with another version.
    fn slot_mut(&mut self, (g, s): (usize, usize)) -> &mut Slot<E> {
        let group = &mut make_mut_warm(&mut self.groups)[g];
        &mut make_mut_warm(group)[s]
    }

    /// Inserts `entry`, or replaces the one with its key; returns the replaced entry.
    pub(crate) fn insert(&mut self, entry: E) -> Option<E> {
        let hash = HASHER.hash_one(entry.key());
        let old = insert_in(self.slot_mut(position(hash)), hash, entry);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes the entry with the key `key` and returns it. Absent keys copy nothing.
    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Option<E>
    where
        E::Key: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if !self.contains_key(key) {
            return None;
        }
        let hash = HASHER.hash_one(key);
        let (slot, _) = shard_slot(self.slot_mut(position(hash)), hash);
        let eq = |e: &E| e.key().borrow() == key;
        let old = match slot {
            Slot::Shard(shard) if E::PATCHED && Arc::strong_count(shard) > 1 => {
                let mut patch = Patch::over(shard);
                let old = patch.remove(hash, eq);
                *slot = Slot::Patched(Arc::new(patch));
                old
            }
            Slot::Shard(shard) => {
                let entry = shard_mut_warm(shard).find_entry(hash, eq).ok()?;
                Some(entry.remove().0)
            }
            Slot::Patched(patch) => {
                let patch = patch_mut_warm(patch);
                let old = patch.remove(hash, eq);
                if patch.changes() == 0 {
                    *slot = Slot::Shard(patch.base.clone());
                } else if patch.changes() > PATCH_MAX {
                    *slot = fold(patch, FIRST_SPLIT_SHIFT, false);
                }
                old
            }
            Slot::Split(_) => unreachable!("`shard_slot` stops at a leaf"),
        };
        debug_assert!(old.is_some(), "the key was found above");
        self.len -= usize::from(old.is_some());
        old
    }
}

/// [`Arc::make_mut`] of a patch, reading the counts of what a copy clones first.
fn patch_mut_warm<E: Clone + Counted>(patch: &mut Arc<Patch<E>>) -> &mut Patch<E> {
    if Arc::get_mut(patch).is_none() {
        read_counts(patch.added.iter().map(|(_, e)| e));
    }
    Arc::make_mut(patch)
}

/// A patch's entries in a shard of their own, split in [`SPLIT_FANOUT`] when `may_split`,
/// there are more than [`SPLIT_AT`] and `shift` allows. Leaves `patch` empty.
fn fold<E: Keyed + Clone + Counted>(patch: &mut Patch<E>, shift: u32, may_split: bool) -> Slot<E> {
    read_counts(patch.base.iter());
    let mut shard: Shard<E> = HashTable::with_capacity(patch.len());
    for e in patch.base.iter() {
        if !patch.hidden.contains(&addr(e)) {
            shard.insert_unique(HASHER.hash_one(e.key()), e.clone(), |e| {
                HASHER.hash_one(e.key())
            });
        }
    }
    for (hash, e) in patch.added.drain(..) {
        shard.insert_unique(hash, e, |e| HASHER.hash_one(e.key()));
    }
    patch.hidden.clear();
    if may_split && shard.len() > SPLIT_AT && shift <= LAST_SPLIT_SHIFT {
        split(shard, shift)
    } else {
        Slot::Shard(Arc::new(shard))
    }
}

/// The shard slot of `hash` below `slot` (made unique on the way), and the shift a split
/// of it would use.
fn shard_slot<E: Clone + Counted>(mut slot: &mut Slot<E>, hash: u64) -> (&mut Slot<E>, u32) {
    let mut shift = FIRST_SPLIT_SHIFT;
    while let Slot::Split(places) = slot {
        slot = &mut make_mut_warm(places)[split_index(hash, shift)];
        shift += SPLIT_BITS;
    }
    (slot, shift)
}

/// Inserts below `slot`, splitting the shard that grows past [`SPLIT_AT`].
fn insert_in<E: Keyed + Clone + Counted>(slot: &mut Slot<E>, hash: u64, entry: E) -> Option<E> {
    let (slot, shift) = shard_slot(slot, hash);
    let shard = match slot {
        Slot::Shard(shard) if E::PATCHED && Arc::strong_count(shard) > 1 => {
            let mut patch = Patch::over(shard);
            let old = patch.insert(hash, entry);
            *slot = Slot::Patched(Arc::new(patch));
            return old;
        }
        Slot::Shard(shard) => shard_mut_warm(shard),
        Slot::Patched(patch) => {
            let patch = patch_mut_warm(patch);
            let old = patch.insert(hash, entry);
            if patch.changes() > PATCH_MAX || patch.len() > SPLIT_AT {
                *slot = fold(patch, shift, true);
            }
            return old;
        }
        Slot::Split(_) => unreachable!("`shard_slot` stops at a leaf"),
    };
    let old = match shard.entry(
        hash,
        |e| e.key() == entry.key(),
        |e| HASHER.hash_one(e.key()),
    ) {
        Entry::Occupied(mut found) => Some(std::mem::replace(found.get_mut(), entry)),
        Entry::Vacant(place) => {
            place.insert(entry);
            None
        }
    };
    if shard.len() > SPLIT_AT && shift <= LAST_SPLIT_SHIFT {
        let entries = std::mem::take(shard);
        *slot = split(entries, shift);
    }
    old
}

/// A full shard's entries spread over [`SPLIT_FANOUT`] new shards by the hash bits at
/// `shift`.
fn split<E: Keyed>(entries: Shard<E>, shift: u32) -> Slot<E> {
    let mut shards: Vec<Shard<E>> = (0..SPLIT_FANOUT).map(|_| HashTable::new()).collect();
    for e in entries {
        let hash = HASHER.hash_one(e.key());
        shards[split_index(hash, shift)].insert_unique(hash, e, |e| HASHER.hash_one(e.key()));
    }
    Slot::Split(
        shards
            .into_iter()
            .map(|s| Slot::Shard(Arc::new(s)))
            .collect(),
    )
}

#[cfg(test)]
impl<E> ShardedTable<E> {
    /// Number of leaves of `self` that are also (the same allocation) in `other`.
    pub(crate) fn shared_shards(&self, other: &Self) -> usize {
        let theirs: std::collections::HashSet<usize> =
            other.leaves().into_iter().map(leaf_id).collect();
        self.leaves()
            .into_iter()
            .filter(|s| theirs.contains(&leaf_id(s)))
            .count()
    }

    /// Total number of leaves.
    pub(crate) fn shard_count(&self) -> usize {
        self.leaves().len()
    }
}

/// A leaf's allocation.
#[cfg(test)]
fn leaf_id<E>(leaf: &Slot<E>) -> usize {
    match leaf {
        Slot::Shard(s) => Arc::as_ptr(s) as usize,
        Slot::Patched(p) => Arc::as_ptr(p) as usize,
        Slot::Split(s) => Arc::as_ptr(s).cast::<u8>() as usize,
    }
}

/// A [`ShardedTable`] of `(key, value)` pairs, for values that do not hold their key.
pub(crate) struct ShardedMap<K, V> {
    table: ShardedTable<(K, V)>,
}

impl<K, V> Clone for ShardedMap<K, V> {
    fn clone(&self) -> Self {
        ShardedMap {
            table: self.table.clone(),
        }
    }
}

impl<K, V> Default for ShardedMap<K, V> {
    fn default() -> Self {
        ShardedMap {
            table: ShardedTable::default(),
        }
    }
}

impl<K, V> std::fmt::Debug for ShardedMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedMap")
            .field("len", &self.table.len)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq, V> ShardedMap<K, V> {
    /// An empty map.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether the map is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The value stored under `key`.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.table.get(key).map(|(_, v)| v)
    }

    /// Whether `key` is present.
    pub(crate) fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.table.contains_key(key)
    }

    /// All entries, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.table.iter().map(|(k, v)| (k, v))
    }
}

impl<K: Hash + Eq + Clone + Counted, V: Clone + Counted> ShardedMap<K, V> {
    /// Inserts or replaces; returns the previous value.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.table.insert((key, value)).map(|(_, v)| v)
    }

    /// Removes `key`; returns its value. Absent keys copy nothing.
    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.table.remove(key).map(|(_, v)| v)
    }
}

#[cfg(test)]
impl<K, V> ShardedMap<K, V> {
    /// Number of shards of `self` that are also (the same allocation) in `other`.
    pub(crate) fn shared_shards(&self, other: &Self) -> usize {
        self.table.shared_shards(&other.table)
    }

    /// Total number of shards.
    pub(crate) fn shard_count(&self) -> usize {
        self.table.shard_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Times a removal from a copy of a 1,000,000-entry map with the caches flushed
    /// first (256 MiB written), with and without the counts read ahead of the copy;
    /// prints the medians (BENCHMARKS.md, "Session 35"). Not a pass/fail measurement:
    /// `cargo test --release -p weir-proxy --lib cold_copy -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn cold_copy_timing() {
        let n = 1_000_000u32;
        let key = |i: u32| -> Arc<str> { format!("d{i}.bench.example").into() };
        let mut m: ShardedMap<Arc<str>, Arc<u32>> = ShardedMap::new();
        for i in 0..n {
            m.insert(key(i), Arc::new(i));
        }
        let mut junk = vec![0u8; 256 << 20];
        for warm in [false, true, false, true] {
            WARM.store(warm, std::sync::atomic::Ordering::Relaxed);
            let mut times = Vec::new();
            for k in 0..300u32 {
                for (j, b) in junk.iter_mut().enumerate().step_by(64) {
                    *b = b.wrapping_add(j as u8);
                }
                let i = (k * 7919 + u32::from(warm) * 3) % n;
                let name = key(i);
                let mut next = m.clone();
                let t = std::time::Instant::now();
                let gone = next.remove(&*name);
                times.push(t.elapsed().as_nanos());
                assert_eq!(gone.as_deref(), Some(&i));
                assert_eq!(m.get(&*key(i)).map(|v| **v), Some(i));
                next.insert(key(i), Arc::new(i));
                m = next;
            }
            times.sort_unstable();
            eprintln!(
                "counts read first: {warm}; removal from a copy: p50 {} ns, p90 {} ns",
                times[150], times[270]
            );
        }
        assert_eq!(m.len(), n as usize);
        std::hint::black_box(&junk);
    }

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
        let slots_used = m
            .table
            .groups
            .iter()
            .flat_map(|g| g.iter())
            .filter(|slot| {
                let mut n = 0;
                slot.for_each_leaf(&mut |s| n += s.leaf_len());
                n > 0
            })
            .count();
        assert_eq!(slots_used, SHARDS, "100,000 keys should touch every slot");
        let max = m
            .table
            .leaves()
            .iter()
            .map(|s| s.leaf_len())
            .max()
            .unwrap_or(0);
        assert!(max <= SPLIT_AT, "largest shard holds {max} of 100,000 keys");
    }

    #[test]
    fn large_maps_split_their_shards_and_a_write_still_copies_one() {
        // ~1,170 keys per spine slot on average: every slot's shard splits, most twice.
        let n = 300_000;
        let original = filled(n);
        assert_eq!(original.len(), n as usize);
        assert_eq!(original.iter().count(), n as usize);
        let shards = original.table.leaves();
        assert!(shards.len() > 2 * SHARDS, "{} shards", shards.len());
        let max = shards.iter().map(|s| s.leaf_len()).max().unwrap_or(0);
        assert!(max <= SPLIT_AT, "largest shard {max}");
        for i in (0..n).step_by(997) {
            assert_eq!(
                original.get(format!("host-{i}.example.com").as_str()),
                Some(&i)
            );
        }

        // Replacing a value copies one shard (and the slots above it), no more.
        let total = original.shard_count();
        let mut copy = original.clone();
        assert_eq!(copy.insert("host-5.example.com".into(), 50), Some(5));
        assert_eq!(copy.shared_shards(&original), total - 1);
        assert_eq!(original.get("host-5.example.com"), Some(&5));
        assert_eq!(copy.get("host-5.example.com"), Some(&50));

        assert_eq!(copy.remove("host-6.example.com"), Some(6));
        assert_eq!(copy.shared_shards(&original), total - 2);
        assert_eq!(original.get("host-6.example.com"), Some(&6));
        assert_eq!(copy.get("host-6.example.com"), None);
        assert_eq!(copy.len(), n as usize - 1);

        // Growing the copy further splits only its own shards.
        let mut grown = copy.clone();
        for i in n..n + 50_000 {
            grown.insert(format!("host-{i}.example.com").into(), i);
        }
        assert_eq!(grown.len(), (n + 50_000) as usize - 1);
        assert_eq!(copy.len(), n as usize - 1);
        assert_eq!(copy.get(format!("host-{n}.example.com").as_str()), None);
        assert_eq!(
            grown.get(format!("host-{n}.example.com").as_str()),
            Some(&n)
        );
    }

    #[test]
    fn a_write_copies_one_group_and_one_shard() {
        let original = filled(10_000);
        let mut copy = original.clone();
        copy.insert("new.example.com".into(), 1);
        let shared_groups = copy
            .table
            .groups
            .iter()
            .zip(original.table.groups.iter())
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(shared_groups, FANOUT - 1);
    }

    #[test]
    fn clone_then_write_shares_untouched_shards() {
        let original = filled(10_000);
        let total = original.shard_count();
        let mut copy = original.clone();
        assert_eq!(copy.shared_shards(&original), total);

        copy.insert("new.example.com".into(), 1);
        assert!(copy.shard_count() >= total);
        // One shard copied (or, when the insert split it, replaced by its split).
        assert_eq!(copy.shared_shards(&original), total - 1);
        assert_eq!(original.get("new.example.com"), None);
        assert_eq!(original.len(), 10_000);
        assert_eq!(copy.len(), 10_001);

        copy.remove("host-1.example.com");
        assert_eq!(original.get("host-1.example.com"), Some(&1));
        assert!(copy.shared_shards(&original) >= total - 2);

        // Removing an absent key copies nothing.
        let before = copy.clone();
        copy.remove("absent.example.com");
        assert_eq!(copy.shared_shards(&before), copy.shard_count());
    }

    /// The pointers a write of `key` copies (and whose counts it reads): the spine, the
    /// group, every split on the way and the shard's entries (`per_entry` counts each).
    fn path_copy(m: &ShardedMap<Arc<str>, u32>, key: &str, per_entry: usize) -> usize {
        let hash = HASHER.hash_one(key);
        let (g, s) = position(hash);
        let mut copied = m.table.groups.len() + m.table.groups[g].len();
        let mut slot = &m.table.groups[g][s];
        let mut shift = FIRST_SPLIT_SHIFT;
        while let Slot::Split(places) = slot {
            copied += places.len();
            slot = &places[split_index(hash, shift)];
            shift += SPLIT_BITS;
        }
        copied + slot.leaf_len() * per_entry
    }

    #[test]
    fn a_write_copies_few_pointers_at_any_size() {
        // Two counts per entry for a map of `Arc` keys and `Arc` values, one for a table
        // of values that hold their key (the host tables). The bounds are what makes a
        // change at 1,000,000 domains cheap (module note); a 64 × 64 spine copied ~130
        // at 1,000 keys and ~170 at 300,000 with two counts per entry.
        for n in [1_000u32, 20_000, 300_000] {
            let m = filled(n);
            for (per_entry, bound) in [(2, 100), (1, 80)] {
                let keys = (0..n).step_by(101).map(|i| format!("host-{i}.example.com"));
                let (mut sum, mut count) = (0, 0);
                for k in keys {
                    sum += path_copy(&m, &k, per_entry);
                    count += 1;
                }
                let mean = sum / count;
                eprintln!(
                    "{n} keys, {per_entry} count(s) per entry: a write copies {mean} pointers on average"
                );
                assert!(
                    mean <= bound,
                    "{n} keys, {per_entry} per entry: a write copies {mean} pointers on average"
                );
            }
        }
    }

    /// An entry that holds its key, patched over shared shards when `P`.
    #[derive(Clone, Debug)]
    struct Item<const P: bool>(Arc<(String, u32)>);

    impl<const P: bool> Keyed for Item<P> {
        type Key = str;
        fn key(&self) -> &str {
            &self.0.0
        }
        const PATCHED: bool = P;
    }

    impl<const P: bool> Counted for Item<P> {
        fn counts(&self) -> usize {
            Arc::strong_count(&self.0)
        }
    }

    fn item<const P: bool>(i: u32, v: u32) -> Item<P> {
        Item(Arc::new((format!("host-{i}.example.com"), v)))
    }

    /// Whether `t` holds exactly `model`, by lookups, iteration, length and per leaf.
    fn same<const P: bool>(
        t: &ShardedTable<Item<P>>,
        model: &std::collections::HashMap<u32, u32>,
        keys: u32,
    ) {
        assert_eq!(t.len(), model.len());
        assert_eq!(t.iter().count(), model.len());
        for leaf in t.leaves() {
            assert_eq!(leaf.leaf_iter().count(), leaf.leaf_len());
        }
        let mut seen: Vec<(String, u32)> = t.iter().map(|e| (e.0.0.clone(), e.0.1)).collect();
        seen.sort_unstable();
        let mut want: Vec<(String, u32)> = model
            .iter()
            .map(|(k, v)| (format!("host-{k}.example.com"), *v))
            .collect();
        want.sort_unstable();
        assert_eq!(seen, want);
        for k in 0..keys {
            let got = t
                .get(format!("host-{k}.example.com").as_str())
                .map(|e| e.0.1);
            assert_eq!(got, model.get(&k).copied(), "key {k}");
        }
    }

    /// Random inserts, replacements and removals over versions cloned from one another
    /// (most writes land on shards shared with an older version), checked against a
    /// `HashMap` for the newest version and, at the end, for every kept older one.
    fn versions_match_a_model<const P: bool>(initial: u32, keys: u32, ops: u32) {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut table: ShardedTable<Item<P>> = ShardedTable::default();
        let mut model = std::collections::HashMap::new();
        for i in 0..initial {
            table.insert(item(i, i));
            model.insert(i, i);
        }
        // Versions kept to the end, and the previous one (as a published snapshot is
        // while the next is built), dropped at the next clone.
        let mut kept = Vec::new();
        let mut prev = None;
        for op in 0..ops {
            if op % 7 == 0 {
                let version = (table.clone(), model.clone());
                if op % 301 == 0 {
                    kept.push(version.clone());
                }
                prev = Some(version);
            }
            let k = (next() % u64::from(keys)) as u32;
            let name = format!("host-{k}.example.com");
            if next() % 3 == 0 {
                let gone = table.remove(name.as_str()).map(|e| e.0.1);
                assert_eq!(gone, model.remove(&k), "removing {k} at op {op}");
            } else {
                let v = op + 1_000_000;
                let old = table.insert(item(k, v)).map(|e| e.0.1);
                assert_eq!(old, model.insert(k, v), "inserting {k} at op {op}");
            }
            if op % 997 == 0 {
                same(&table, &model, keys);
            }
        }
        same(&table, &model, keys);
        for (t, m) in kept.iter().chain(&prev) {
            same(t, m, keys);
        }
    }

    #[test]
    fn patched_tables_match_a_model_across_versions() {
        // ~8 keys a slot (shards patched and folded), then enough to split most slots.
        versions_match_a_model::<true>(2_000, 3_000, 30_000);
        versions_match_a_model::<true>(20_000, 40_000, 30_000);
        versions_match_a_model::<false>(2_000, 3_000, 10_000);
    }

    /// Entries of `t` whose reference count another version (or a patch's hidden entry)
    /// also holds, that is, entries a write to a copy cloned.
    fn cloned_entries<const P: bool>(t: &ShardedTable<Item<P>>) -> usize {
        t.iter().filter(|e| Arc::strong_count(&e.0) > 1).count()
    }

    #[test]
    fn a_patched_write_clones_no_entry_of_the_shard() {
        fn writes<const P: bool>() -> (usize, usize) {
            let mut t: ShardedTable<Item<P>> = ShardedTable::default();
            for i in 0..20_000 {
                t.insert(item(i, i));
            }
            assert_eq!(cloned_entries(&t), 0);
            let mut copy = t.clone();
            copy.insert(item(20_000, 0));
            let added = cloned_entries(&t);
            let mut copy = copy.clone();
            drop(copy.remove("host-7.example.com"));
            drop(copy.insert(item(8, 80)));
            let after = cloned_entries(&t);
            assert_eq!(t.get("host-7.example.com").map(|e| e.0.1), Some(7));
            assert_eq!(copy.get("host-7.example.com").map(|e| e.0.1), None);
            assert_eq!(copy.get("host-8.example.com").map(|e| e.0.1), Some(80));
            assert_eq!(t.get("host-8.example.com").map(|e| e.0.1), Some(8));
            (added, after)
        }
        // Copying a shard clones each of its entries (~78 keys a slot: shards of ~5).
        let (added, after) = writes::<false>();
        assert!(added > 0 && after > added, "{added} {after}");
        // A patch clones none of them.
        assert_eq!(writes::<true>(), (0, 0));
    }

    #[test]
    fn a_patch_folds_after_its_changes() {
        // Writes to one shard of a shared table: the patch grows to PATCH_MAX changes,
        // then the next write folds it into a shard of its own.
        let mut t: ShardedTable<Item<true>> = ShardedTable::default();
        for i in 0..2_000 {
            t.insert(item(i, i));
        }
        let first = HASHER.hash_one("host-0.example.com");
        let same_leaf: Vec<u32> = (1..2_000)
            .filter(|i| {
                let h = HASHER.hash_one(format!("host-{i}.example.com").as_str());
                position(h) == position(first)
            })
            .collect();
        assert!(
            same_leaf.len() > PATCH_MAX,
            "{} keys share the leaf",
            same_leaf.len()
        );
        let original = t.clone();
        let leaf = |t: &ShardedTable<Item<true>>| {
            let (g, s) = position(first);
            match t.groups[g][s].leaf(first) {
                Slot::Shard(_) => None,
                Slot::Patched(p) => Some(p.changes()),
                Slot::Split(_) => unreachable!(),
            }
        };
        // A replacement adds one entry and hides one: two changes each.
        let writes = PATCH_MAX / 2;
        for (n, i) in same_leaf.iter().take(writes).enumerate() {
            t.insert(item(*i, 0));
            assert_eq!(leaf(&t), Some(2 * (n + 1)));
        }
        t.insert(item(same_leaf[writes], 0));
        assert_eq!(leaf(&t), None, "folded");
        for i in &same_leaf[..=writes] {
            assert_eq!(
                t.get(format!("host-{i}.example.com").as_str())
                    .map(|e| e.0.1),
                Some(0)
            );
        }
        // The fold cloned the base's entries still in the table, once (the leaf holds key
        // 0 and `same_leaf`; `writes + 1` of them were replaced).
        assert_eq!(cloned_entries(&original), same_leaf.len() - writes);
        for i in &same_leaf {
            assert_eq!(
                original
                    .get(format!("host-{i}.example.com").as_str())
                    .map(|e| e.0.1),
                Some(*i)
            );
        }
    }

    #[test]
    fn empty_map_shares_one_shard() {
        let m: ShardedMap<Arc<str>, u32> = ShardedMap::new();
        assert!(m.is_empty());
        assert_eq!(m.shard_count(), SHARDS);
        let shards = m.table.leaves();
        assert!(shards.iter().all(|s| leaf_id(s) == leaf_id(shards[0])));
    }
}
