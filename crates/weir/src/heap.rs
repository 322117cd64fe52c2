//! Memory against CPU, chosen by the size of the first configuration.
//!
//! The binary's allocator starts set for a small resident set: freed pages are given
//! back at once and transparent huge pages are off (`allocator.rs` in the binary). That
//! is right up to a few hundred thousand objects, where RSS is what users watch. Above
//! that, a 4 KiB page per first touch and the TLB misses of a heap of gigabytes cost
//! more than the memory saves: at 1,000,000 TLS domains (2,000,000 objects) huge pages
//! and a 1 s purge delay took 10–18 % off the CPU to `/ready` for 4 % more RSS, where at
//! 100,000 domains they saved nothing the runs could resolve and cost 12 % more RSS
//! (BENCHMARKS.md, "Session 24").
//!
//! The binary registers what switches its allocator ([`register`]); the startup paths
//! call [`initial_load`] once they know how many objects the first configuration holds
//! (standalone mode: as it is read, with an estimate from the files read so far), before
//! translating it (most of the heap is allocated from there on).

use std::sync::OnceLock;

/// From this many objects in the first configuration on, the allocator is switched to
/// favour CPU over memory.
pub const LARGE_CONFIGURATION: usize = 1_000_000;

static SWITCH: OnceLock<fn()> = OnceLock::new();

/// Registers the allocator's switch to large-heap settings. Only the first call counts.
pub fn register(switch: fn()) {
    let _ = SWITCH.set(switch);
}

/// Called with the size of the first configuration (or an estimate of it; it may be
/// called again as the estimate grows): at [`LARGE_CONFIGURATION`] objects or more, runs
/// the registered switch (once per process). Returns whether it did.
pub fn initial_load(objects: usize) -> bool {
    if objects < LARGE_CONFIGURATION {
        return false;
    }
    let Some(switch) = SWITCH.get() else {
        return false;
    };
    static DONE: OnceLock<()> = OnceLock::new();
    if DONE.set(()).is_err() {
        return false;
    }
    switch();
    tracing::info!(
        objects,
        threshold = LARGE_CONFIGURATION,
        "large configuration: the allocator favours CPU over memory (huge pages, delayed purging)"
    );
    true
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    static SWITCHED: AtomicUsize = AtomicUsize::new(0);

    #[test]
    fn switches_once_from_the_threshold_on() {
        assert!(!initial_load(LARGE_CONFIGURATION), "nothing registered yet");
        register(|| {
            SWITCHED.fetch_add(1, Ordering::SeqCst);
        });
        assert!(!initial_load(LARGE_CONFIGURATION - 1));
        assert_eq!(SWITCHED.load(Ordering::SeqCst), 0);
        assert!(initial_load(LARGE_CONFIGURATION));
        assert!(!initial_load(2 * LARGE_CONFIGURATION), "once per process");
        assert_eq!(SWITCHED.load(Ordering::SeqCst), 1);
    }
}
