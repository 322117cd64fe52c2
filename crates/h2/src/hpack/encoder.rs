//! The encoder of response header blocks (RFC 7541 §3, §6).
//!
//! The dynamic table is a queue of entries, oldest first, each known by an id that counts
//! insertions (the newest has id `newest`, HPACK index 62). Two open-addressing hash tables
//! of 256 slots find, in expected O(1), the newest entry with a given name and value and the
//! newest entry with a given name; a slot holds an id (0: empty), and an entry's slots are
//! removed (backward-shift deletion) when it is evicted. The table holds at most 4096 bytes,
//! so at most 128 entries: the hash tables stay at most half full.

use std::collections::VecDeque;

use http::{HeaderName, HeaderValue, StatusCode};

use super::table::{STATIC, STATIC_LEN, hash, same, static_name_index};
use super::{DEFAULT_TABLE_SIZE, entry_size, huffman};

const SLOTS: usize = 256;
const MASK: usize = SLOTS - 1;

/// The slot a hash starts probing at.
fn home(h: u64) -> usize {
    (h >> 56) as usize
}

/// The hash of `:status`, the only pseudo-header a server sends.
const STATUS_HASH: u64 = hash(0, b":status");
/// The static index of `:status` (with value 200).
const STATUS_INDEX: usize = 8;

struct Entry {
    /// `None` stands for `:status`.
    name: Option<HeaderName>,
    value: HeaderValue,
    name_hash: u64,
    pair_hash: u64,
}

impl Entry {
    fn name_bytes(&self) -> &[u8] {
        match &self.name {
            Some(name) => name.as_str().as_bytes(),
            None => b":status",
        }
    }

    fn size(&self) -> usize {
        entry_size(self.name_bytes().len(), self.value.len())
    }
}

/// A size change of the peer's table to announce at the start of the next block (§4.2):
/// the smallest size since the last block, and the last.
#[derive(Clone, Copy)]
struct SizeChange {
    smallest: usize,
    last: usize,
}

/// The encoding state of one connection: the dynamic table the peer's decoder mirrors.
pub struct Encoder {
    entries: VecDeque<Entry>,
    /// The id of the newest entry (ids count from 1); the oldest live one is
    /// `newest + 1 - entries.len()`.
    newest: u64,
    size: usize,
    max_size: usize,
    pending: Option<SizeChange>,
    /// (name, value) → id of the newest entry with both.
    pairs: Box<[u64; SLOTS]>,
    /// name → id of the newest entry with that name.
    names: Box<[u64; SLOTS]>,
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder::new()
    }
}

/// How a literal is sent (§6.2): its first bits and prefix length.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Literal {
    Indexed,
    NotIndexed,
    NeverIndexed,
}

impl Encoder {
    /// An encoder with a dynamic table of 4096 bytes (the default SETTINGS_HEADER_TABLE_SIZE).
    pub fn new() -> Encoder {
        Encoder {
            entries: VecDeque::new(),
            newest: 0,
            size: 0,
            max_size: DEFAULT_TABLE_SIZE,
            pending: None,
            pairs: Box::new([0; SLOTS]),
            names: Box::new([0; SLOTS]),
        }
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE changed: the table uses `min(n, 4096)` from the
    /// next block on, which starts with a dynamic table size update.
    pub fn set_max_table_size(&mut self, n: usize) {
        let n = n.min(DEFAULT_TABLE_SIZE);
        self.pending = Some(match self.pending {
            Some(change) => SizeChange {
                smallest: change.smallest.min(n),
                last: n,
            },
            None => SizeChange {
                smallest: n,
                last: n,
            },
        });
    }

    /// The current size of the dynamic table (RFC 7541 §4.1).
    pub fn table_size(&self) -> usize {
        self.size
    }

    /// The current maximum size of the dynamic table.
    pub fn max_table_size(&self) -> usize {
        self.max_size
    }

    /// The number of entries of the dynamic table.
    pub fn table_len(&self) -> usize {
        self.entries.len()
    }

    /// Starts a header block: writes the pending dynamic table size updates, if any (the
    /// smallest size since the last block when it is below the final one, then the final).
    pub fn begin(&mut self, out: &mut Vec<u8>) {
        let Some(change) = self.pending.take() else {
            return;
        };
        if change.smallest < change.last {
            write_int(out, 0x20, 5, change.smallest);
            self.resize(change.smallest);
            write_int(out, 0x20, 5, change.last);
            self.resize(change.last);
        } else if change.last != self.max_size {
            write_int(out, 0x20, 5, change.last);
            self.resize(change.last);
        }
    }

    /// Writes `:status`: one byte for the seven statuses of the static table, else a
    /// literal with the static name (index 8), added to the dynamic table.
    pub fn status(&mut self, status: StatusCode, out: &mut Vec<u8>) {
        let index = match status.as_u16() {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => 0,
        };
        if index != 0 {
            write_int(out, 0x80, 7, index);
            return;
        }
        self.encode(
            None,
            b":status",
            STATUS_HASH,
            Some(STATUS_INDEX),
            status.as_str().as_bytes(),
            false,
            || HeaderValue::from(status.as_u16()),
            out,
        );
    }

    /// Writes one field: an index when the table has it, else a literal (indexed, or never
    /// indexed for a sensitive value, or not indexed when too large for the table).
    pub fn field(&mut self, name: &HeaderName, value: &HeaderValue, out: &mut Vec<u8>) {
        let name_bytes = name.as_str().as_bytes();
        let name_hash = hash(0, name_bytes);
        self.encode(
            Some(name),
            name_bytes,
            name_hash,
            static_name_index(name_bytes, name_hash),
            value.as_bytes(),
            value.is_sensitive(),
            || value.clone(),
            out,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn encode(
        &mut self,
        name: Option<&HeaderName>,
        name_bytes: &[u8],
        name_hash: u64,
        static_index: Option<usize>,
        value: &[u8],
        sensitive: bool,
        value_object: impl FnOnce() -> HeaderValue,
        out: &mut Vec<u8>,
    ) {
        let mut pair_hash = 0;
        if !sensitive {
            if let Some(index) = static_index
                && STATIC[index - 1].value_str.as_bytes() == value
            {
                write_int(out, 0x80, 7, index);
                return;
            }
            pair_hash = hash(name_hash, value);
            if let Some(id) = self.find_pair(name, value, pair_hash) {
                write_int(out, 0x80, 7, self.index_of(id));
                return;
            }
        }
        let name_index =
            static_index.or_else(|| self.find_name(name, name_hash).map(|id| self.index_of(id)));
        let size = entry_size(name_bytes.len(), value.len());
        let kind = if sensitive {
            Literal::NeverIndexed
        } else if size > self.max_size / 2 {
            Literal::NotIndexed
        } else {
            Literal::Indexed
        };
        let (flags, prefix) = match kind {
            Literal::Indexed => (0x40, 6),
            Literal::NotIndexed => (0x00, 4),
            Literal::NeverIndexed => (0x10, 4),
        };
        match name_index {
            Some(index) => write_int(out, flags, prefix, index),
            None => {
                out.push(flags);
                write_string(out, name_bytes);
            }
        }
        write_string(out, value);
        if kind == Literal::Indexed {
            self.insert(
                Entry {
                    name: name.cloned(),
                    value: value_object(),
                    name_hash,
                    pair_hash,
                },
                size,
            );
        }
    }

    /// The HPACK index of the live entry `id`.
    fn index_of(&self, id: u64) -> usize {
        STATIC_LEN + 1 + (self.newest - id) as usize
    }

    fn entry(&self, id: u64) -> &Entry {
        entry_of(&self.entries, self.newest, id)
    }

    /// The newest entry of `name` (`None`: `:status`) and `value`. Names compare as
    /// `HeaderName`s: two standard names by their tag, without reading bytes.
    fn find_pair(&self, name: Option<&HeaderName>, value: &[u8], h: u64) -> Option<u64> {
        let mut slot = home(h);
        loop {
            let id = self.pairs[slot];
            if id == 0 {
                return None;
            }
            let e = self.entry(id);
            if e.pair_hash == h && same(e.value.as_bytes(), value) && e.name.as_ref() == name {
                return Some(id);
            }
            slot = (slot + 1) & MASK;
        }
    }

    /// The newest entry of `name`.
    fn find_name(&self, name: Option<&HeaderName>, h: u64) -> Option<u64> {
        let mut slot = home(h);
        loop {
            let id = self.names[slot];
            if id == 0 {
                return None;
            }
            let e = self.entry(id);
            if e.name_hash == h && e.name.as_ref() == name {
                return Some(id);
            }
            slot = (slot + 1) & MASK;
        }
    }

    /// Adds an entry of `size` (at most the table's maximum), evicting the oldest first.
    fn insert(&mut self, entry: Entry, size: usize) {
        debug_assert!(size <= self.max_size);
        self.evict_to(self.max_size - size);
        let id = self.newest + 1;
        // The newest entry with the same key takes over its slot; else the first empty one.
        let mut slot = home(entry.pair_hash);
        loop {
            let cur = self.pairs[slot];
            if cur == 0 || {
                let e = self.entry(cur);
                e.pair_hash == entry.pair_hash && e.value == entry.value && e.name == entry.name
            } {
                self.pairs[slot] = id;
                break;
            }
            slot = (slot + 1) & MASK;
        }
        let mut slot = home(entry.name_hash);
        loop {
            let cur = self.names[slot];
            if cur == 0 || {
                let e = self.entry(cur);
                e.name_hash == entry.name_hash && e.name == entry.name
            } {
                self.names[slot] = id;
                break;
            }
            slot = (slot + 1) & MASK;
        }
        self.newest = id;
        self.size += size;
        self.entries.push_back(entry);
    }

    fn resize(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    fn evict_to(&mut self, target: usize) {
        while self.size > target {
            let Some(oldest) = self.entries.front() else {
                break;
            };
            let id = self.newest + 1 - self.entries.len() as u64;
            let size = oldest.size();
            remove_slot(&mut self.pairs, &self.entries, self.newest, id, |e| {
                e.pair_hash
            });
            remove_slot(&mut self.names, &self.entries, self.newest, id, |e| {
                e.name_hash
            });
            self.entries.pop_front();
            self.size -= size;
        }
    }

    /// Checks the hash tables against the entries (tests).
    #[cfg(test)]
    pub(super) fn check_invariants(&self) {
        let oldest = self.newest + 1 - self.entries.len() as u64;
        let total: usize = self.entries.iter().map(Entry::size).sum();
        assert_eq!(total, self.size);
        assert!(self.size <= self.max_size);
        for slots in [&self.pairs, &self.names] {
            for &id in slots.iter() {
                assert!(
                    id == 0 || (oldest..=self.newest).contains(&id),
                    "stale id {id}"
                );
            }
        }
        for (i, e) in self.entries.iter().enumerate() {
            let id = oldest + i as u64;
            let newest_pair = (id..=self.newest)
                .rev()
                .find(|&j| {
                    let o = self.entry(j);
                    o.name_bytes() == e.name_bytes() && o.value == e.value
                })
                .unwrap();
            assert_eq!(
                self.find_pair(e.name.as_ref(), e.value.as_bytes(), e.pair_hash),
                Some(newest_pair)
            );
            let newest_name = (id..=self.newest)
                .rev()
                .find(|&j| self.entry(j).name_bytes() == e.name_bytes())
                .unwrap();
            assert_eq!(
                self.find_name(e.name.as_ref(), e.name_hash),
                Some(newest_name)
            );
        }
    }
}

fn entry_of(entries: &VecDeque<Entry>, newest: u64, id: u64) -> &Entry {
    let oldest = newest + 1 - entries.len() as u64;
    &entries[(id - oldest) as usize]
}

/// Removes `id` from `slots` if it is there (it is not when a newer entry with the same key
/// took its slot), moving later entries of the probe run back so that each stays reachable
/// from its home slot.
fn remove_slot(
    slots: &mut [u64; SLOTS],
    entries: &VecDeque<Entry>,
    newest: u64,
    id: u64,
    key_hash: impl Fn(&Entry) -> u64,
) {
    let mut hole = home(key_hash(entry_of(entries, newest, id)));
    loop {
        match slots[hole] {
            0 => return,
            cur if cur == id => break,
            _ => hole = (hole + 1) & MASK,
        }
    }
    let mut next = hole;
    loop {
        next = (next + 1) & MASK;
        let cur = slots[next];
        if cur == 0 {
            break;
        }
        let start = home(key_hash(entry_of(entries, newest, cur)));
        // `cur` may fill the hole unless its home lies cyclically in (hole, next].
        if next.wrapping_sub(start) & MASK >= next.wrapping_sub(hole) & MASK {
            slots[hole] = cur;
            hole = next;
        }
    }
    slots[hole] = 0;
}

/// Writes an integer with a `prefix`-bit prefix (§5.1); `flags` holds the bits above it.
pub(super) fn write_int(out: &mut Vec<u8>, flags: u8, prefix: u32, value: usize) {
    let max_prefix = (1usize << prefix) - 1;
    if value < max_prefix {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max_prefix as u8);
    let mut rest = value - max_prefix;
    while rest >= 0x80 {
        out.push(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Writes a string literal (§5.2), Huffman-coded when that is shorter.
pub(super) fn write_string(out: &mut Vec<u8>, s: &[u8]) {
    let coded = huffman::encoded_len(s);
    if coded < s.len() {
        write_int(out, 0x80, 7, coded);
        huffman::encode(s, out);
    } else {
        write_int(out, 0, 7, s.len());
        out.extend_from_slice(s);
    }
}
