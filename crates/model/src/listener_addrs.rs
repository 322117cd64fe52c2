//! The process's table of listener addresses, which [`crate::ListenerKey`] indexes.
//!
//! Append-only: an address keeps its slot for the life of the process (a configuration
//! names a handful; one that moved through a thousand ports would hold 32 KiB). Reading
//! a slot takes no lock, only two atomic loads: slots live in segments of 1, 2, 4, …
//! slots that never move once allocated. Adding an address takes a mutex, held while it
//! is looked up in the reverse index.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{LazyLock, Mutex, OnceLock};

/// Segment `i` holds slots `2^i - 1 .. 2^(i+1) - 1`: 32 of them cover every `u32`.
const SEGMENTS: usize = 32;

static SEGMENT: [OnceLock<Box<[OnceLock<SocketAddr>]>>; SEGMENTS] =
    [const { OnceLock::new() }; SEGMENTS];

static INDEX: LazyLock<Mutex<HashMap<SocketAddr, u32>>> = LazyLock::new(Default::default);

fn slot(i: u32) -> &'static OnceLock<SocketAddr> {
    let n = u64::from(i) + 1;
    let seg = 63 - n.leading_zeros() as usize;
    let offset = (n - (1 << seg)) as usize;
    &SEGMENT[seg].get_or_init(|| (0..1usize << seg).map(|_| OnceLock::new()).collect())[offset]
}

/// The slot of `addr`, assigned on first use.
pub(crate) fn intern(addr: SocketAddr) -> u32 {
    let mut index = INDEX.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&i) = index.get(&addr) {
        return i;
    }
    let i = u32::try_from(index.len()).expect("fewer than 2^32 listener addresses");
    // Filled before the index names it: whoever reads slot `i` got `i` from a key,
    // made after this.
    let _ = slot(i).set(addr);
    index.insert(addr, i);
    i
}

/// The address in slot `i` (one [`intern`] returned).
pub(crate) fn get(i: u32) -> SocketAddr {
    *slot(i)
        .get()
        .expect("a listener key names an interned address")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_gets_one_slot_and_reads_back() {
        // 302 addresses: slots in the first nine segments.
        let addrs: Vec<SocketAddr> = (0..300u16)
            .map(|p| SocketAddr::from(([127, 0, 0, 9], 40000 + p)))
            .chain([
                "[::1]:80".parse().unwrap(),
                "[fe80::1%2]:443".parse().unwrap(),
            ])
            .collect();
        let slots: Vec<u32> = addrs.iter().map(|a| intern(*a)).collect();
        for (a, i) in addrs.iter().zip(&slots) {
            assert_eq!(get(*i), *a);
            assert_eq!(intern(*a), *i);
        }
        let mut unique = slots.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), slots.len());
    }
}
