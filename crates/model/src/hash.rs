use std::hash::{Hash, Hasher};

use serde::Serialize;

/// A stable 64-bit content hash (xxh3) of an IR value.
///
/// Computed once, when the value is built. Composite values hash their children's
/// hashes rather than their children's contents, so building a parent never re-walks
/// an unchanged subtree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ContentHash(pub u64);

impl std::fmt::Display for ContentHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Hashes `value` with xxh3. Stable across processes and runs of the same build: the
/// value's `Hash` impl must not depend on addresses or on iteration order of hash maps.
pub fn content_hash<T: Hash + ?Sized>(value: &T) -> ContentHash {
    let mut hasher = xxhash_rust::xxh3::Xxh3Default::new();
    value.hash(&mut hasher);
    ContentHash(hasher.finish())
}

/// Implements `Hash`, `PartialEq` and `Eq` for a type through its stored `hash` field.
macro_rules! eq_by_content_hash {
    ($ty:ty) => {
        impl ::std::hash::Hash for $ty {
            fn hash<H: ::std::hash::Hasher>(&self, state: &mut H) {
                self.hash.hash(state)
            }
        }
        impl PartialEq for $ty {
            fn eq(&self, other: &Self) -> bool {
                self.hash == other.hash
            }
        }
        impl Eq for $ty {}
    };
}
pub(crate) use eq_by_content_hash;
