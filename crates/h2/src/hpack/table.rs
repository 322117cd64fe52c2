//! The static table (RFC 7541 Appendix A), the hash both coders use, and the decoder's
//! dynamic table.

use std::collections::VecDeque;

use bytes::Bytes;
use http::HeaderName;

use super::{Name, Pseudo, entry_size};

/// One static entry: the name and value ready to hand out (no allocation, no reference
/// count), both as text, and the entry's size.
pub(super) struct StaticEntry {
    pub(super) name: Name,
    pub(super) value: Bytes,
    pub(super) name_str: &'static str,
    pub(super) value_str: &'static str,
    pub(super) size: usize,
}

const fn static_entry(name: &'static str, value: &'static str) -> StaticEntry {
    let name_obj = match Pseudo::from_bytes(name.as_bytes()) {
        Some(p) => Name::Pseudo(p),
        None => Name::Field(HeaderName::from_static(name)),
    };
    StaticEntry {
        name: name_obj,
        value: Bytes::from_static(value.as_bytes()),
        name_str: name,
        value_str: value,
        size: entry_size(name.len(), value.len()),
    }
}

macro_rules! static_table {
    ($(($name:literal, $value:literal),)*) => {
        /// The static table; HPACK index `i` (1–61) is `STATIC[i - 1]`.
        pub(super) static STATIC: [StaticEntry; STATIC_LEN] = [$(static_entry($name, $value)),*];
        /// The names alone, for the encoder's name map (built at compile time).
        const STATIC_NAMES: [&str; STATIC_LEN] = [$($name),*];
    };
}

/// The number of static entries; dynamic indices start after it.
pub(super) const STATIC_LEN: usize = 61;

static_table! {
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
}

/// A 64-bit hash of `bytes` continuing from `seed` (a multiply-xorshift over 8-byte words;
/// the last word, or the only one of a short string, is read overlapping so that there is no
/// byte loop); the top bits pick a slot. Not keyed: the encoder hashes only what the server
/// sends, and its tables hold at most 128 entries, so collisions cost a few probes at worst.
/// `const` so that the static name map is built at compile time with the same function.
#[inline]
pub(super) const fn hash(seed: u64, bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    const fn mix(h: u64, w: u64) -> u64 {
        let h = (h ^ w).wrapping_mul(K);
        h ^ (h >> 29)
    }
    let len = bytes.len();
    let mut h = (seed ^ len as u64).wrapping_mul(K);
    if len > 8 {
        let mut i = 0;
        while i + 8 < len {
            h = mix(h, read_u64(bytes, i));
            i += 8;
        }
        h = mix(h, read_u64(bytes, len - 8));
    } else if len >= 4 {
        h = mix(h, read_u32(bytes, 0) | read_u32(bytes, len - 4) << 32);
    } else if len > 0 {
        let w = (bytes[0] as u64) << 16 | (bytes[len / 2] as u64) << 8 | bytes[len - 1] as u64;
        h = mix(h, w);
    }
    h.wrapping_mul(K)
}

/// The 8 bytes of `b` at `i` (which the callers keep in bounds), little-endian.
#[inline(always)]
const fn read_u64(b: &[u8], i: usize) -> u64 {
    match b.split_at(i).1.first_chunk::<8>() {
        Some(w) => u64::from_le_bytes(*w),
        None => panic!("read past the end"),
    }
}

/// The 4 bytes of `b` at `i`, little-endian.
#[inline(always)]
const fn read_u32(b: &[u8], i: usize) -> u64 {
    match b.split_at(i).1.first_chunk::<4>() {
        Some(w) => u32::from_le_bytes(*w) as u64,
        None => panic!("read past the end"),
    }
}

/// The encoder's map from a static name to its first index: 128 slots (61 names, a few of
/// them repeated), linear probing from the top 7 bits of the name's hash; 0 is empty.
static STATIC_NAME_SLOTS: [u8; 128] = {
    let mut slots = [0u8; 128];
    let mut i = 0;
    while i < STATIC_LEN {
        // Only the first entry of a repeated name (":method", ":path", ...) goes in.
        if i == 0 || !eq(STATIC_NAMES[i].as_bytes(), STATIC_NAMES[i - 1].as_bytes()) {
            let mut slot = (hash(0, STATIC_NAMES[i].as_bytes()) >> 57) as usize;
            while slots[slot] != 0 {
                slot = (slot + 1) & 127;
            }
            slots[slot] = (i + 1) as u8;
        }
        i += 1;
    }
    slots
};

const fn eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Byte equality, with a shortcut for the common case of the very same bytes (a standard
/// `HeaderName` is always the same `&'static str`, a `from_static` value the same literal).
#[inline]
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && (a.as_ptr() == b.as_ptr() || a == b)
}

/// The first static index (1–61) of the name `name` whose [`hash`] (seed 0) is `h`.
pub(super) fn static_name_index(name: &[u8], h: u64) -> Option<usize> {
    let mut slot = (h >> 57) as usize;
    loop {
        let index = usize::from(STATIC_NAME_SLOTS[slot]);
        if index == 0 {
            return None;
        }
        if same(STATIC[index - 1].name_str.as_bytes(), name) {
            return Some(index);
        }
        slot = (slot + 1) & 127;
    }
}

/// An entry of the decoder's dynamic table.
pub(super) struct Entry {
    pub(super) name: Name,
    pub(super) value: Bytes,
    /// Name and value lengths plus 32.
    pub(super) size: usize,
}

/// The decoder's dynamic table (RFC 7541 §2.3.2, §4): newest entry first, so HPACK index
/// `STATIC_LEN + 1 + i` is `entries[i]`.
pub(super) struct DynamicTable {
    entries: VecDeque<Entry>,
    size: usize,
    max_size: usize,
}

impl DynamicTable {
    pub(super) fn new(max_size: usize) -> DynamicTable {
        DynamicTable {
            entries: VecDeque::new(),
            size: 0,
            max_size,
        }
    }

    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<&Entry> {
        self.entries.get(i)
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn size(&self) -> usize {
        self.size
    }

    pub(super) fn max_size(&self) -> usize {
        self.max_size
    }

    /// Adds an entry, evicting the oldest ones to make room; an entry larger than the whole
    /// table empties it and is not added (§4.4).
    pub(super) fn insert(&mut self, name: Name, value: Bytes, size: usize) {
        if size > self.max_size {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max_size - size);
        self.size += size;
        self.entries.push_front(Entry { name, value, size });
    }

    /// A dynamic table size update (§6.3).
    pub(super) fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    fn evict_to(&mut self, target: usize) {
        while self.size > target {
            let Some(entry) = self.entries.pop_back() else {
                break;
            };
            self.size -= entry.size;
        }
    }
}
