//! The process's allocator: mimalloc (v3), set to give freed memory back at once.
//!
//! Why not glibc's malloc: at startup weir builds and drops millions of small objects
//! (parsed documents, typed objects, translator tables), and glibc spent 18 % of the
//! startup cycles in `malloc_consolidate`, `unlink_chunk` and `_int_free` (perf, 20,000
//! TLS domains); a request, too, allocates a few dozen small blocks. mimalloc took 11 %
//! off the startup CPU, 2–3 % off the instructions per proxied request, and 5 MiB off
//! the RSS at 20,000 domains with the options below (BENCHMARKS.md, "Session 22").
//!
//! Its defaults keep freed pages for a while (`purge_delay`, 1 s, ten times that for
//! whole arena chunks) and back its arenas with transparent huge pages where the kernel
//! allows them (`madvise` mode here), which left the RSS at `/ready` 28 MiB above
//! glibc's: a 2 MiB page per partly used region is RSS that holds nothing. Unless the
//! user's environment sets them (`MIMALLOC_PURGE_DELAY`, `MIMALLOC_ALLOW_THP` win), weir
//! purges freed pages after 10 ms and turns transparent huge pages off for the process
//! (`PR_SET_THP_DISABLE`, and mimalloc's own option). This runs from the ELF
//! `.init_array`, before the Rust runtime's first allocation creates mimalloc's first
//! arena: from `main` they came too late for it (10 MiB more RSS at 20,000 domains with
//! the options alone, 2 MiB more with the `prctl` too). Proxied
//! requests make no more system calls with these (4.14 per request,
//! `scripts/syscalls-per-request.sh`).
//!
//! Why 10 ms and not at once (sessions 22–29 purged at once): a first configuration frees
//! most of what it allocates, and purging each page as it emptied was a system call and
//! a TLB shootdown on the other CPU each time: at 1,000,000 TLS domains 23–40 s of system
//! time against 11–13 s, and `/ready` 68–88 s against 53–56 s (BENCHMARKS.md, "Session
//! 30"). The RSS at `/ready` is the same: [`release_freed`] returns whatever is still
//! pending once the load is done.
//!
//! C code (aws-lc) still allocates with the C library's `malloc`.

// The workspace's one `unsafe`: the allocator and its options are C (see `configure`).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::{CStr, c_long, c_void};

use libmimalloc_sys::{
    mi_free, mi_malloc, mi_malloc_aligned, mi_option_set, mi_option_t, mi_realloc,
    mi_realloc_aligned, mi_zalloc, mi_zalloc_aligned,
};

#[global_allocator]
static ALLOCATOR: Mimalloc = Mimalloc;

/// The alignment every mimalloc block of at least this size has: its size classes are
/// multiples of 16 bytes from 16 up (`MI_MAX_ALIGN_SIZE`, v3's `page-queue.c`), and its
/// pages start at 16-byte boundaries or better.
const PLAIN_ALIGN: usize = 16;

/// mimalloc as Rust's allocator. The `mimalloc` crate's `GlobalAlloc` asks for every
/// block with `mi_malloc_aligned`, whatever the alignment; in v3 that takes the fast path
/// only when the next free block of the size class happens to be aligned, and otherwise
/// a generic path that over-allocates (size + alignment − 1) unless the size class is a
/// power of two. 2.7 of the 8 allocations of a proxied plaintext request went that way,
/// 186 instructions each (callgrind; `mi_malloc` takes 38 on average here), and an
/// over-allocated block can land in the next size class (1,536 bytes at 8-byte
/// alignment ask for 1,543: the 1,792-byte class). Here, what every block is aligned to
/// anyway (the rule of std's own allocator on `malloc`) gets plain `mi_malloc`; only
/// larger alignments go the aligned way (BENCHMARKS.md, "Session 38").
struct Mimalloc;

/// Whether a plain allocation of `size` bytes is aligned to `align`.
#[inline]
fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

// SAFETY: every block comes from mimalloc, aligned as its layout asks (`plain`, or the
// aligned calls), and goes back to it with `mi_free`, which takes blocks of either kind.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's allocation functions take any size and alignment.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi_malloc(layout.size()).cast()
            } else {
                mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi_zalloc(layout.size()).cast()
            } else {
                mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (the trait's contract).
        unsafe { mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout` (the trait's contract); the
        // new block has the same alignment, checked for the new size.
        unsafe {
            if plain(layout.align(), new_size) {
                mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

// Positions in mimalloc v3's `mi_option_e` (mimalloc.h). The bindings' own constants
// are v2's numbering; the test below checks these against v3's defaults.
const PURGE_DELAY: mi_option_t = 15;
const ALLOW_THP: mi_option_t = 43;

/// What weir sets, each with the environment variable that overrides it.
const OPTIONS: [(mi_option_t, &CStr, c_long); 2] = [
    (PURGE_DELAY, c"MIMALLOC_PURGE_DELAY", 10),
    (ALLOW_THP, c"MIMALLOC_ALLOW_THP", 0),
];

/// Called by the loader before `main`, like a C constructor (not in the unit test,
/// which reads the defaults first).
#[cfg(all(target_os = "linux", not(test)))]
#[used]
#[unsafe(link_section = ".init_array")]
static CONFIGURE: extern "C" fn() = configure;

/// Sets weir's allocator options. Allocates nothing (it runs before the allocator's
/// first use).
extern "C" fn configure() {
    for (option, env, value) in OPTIONS {
        if !is_set(env) {
            // SAFETY: `mi_option_set` stores a number in mimalloc's option table; the
            // option is one of v3's (checked by the test below) and no pointer is passed.
            unsafe { mi_option_set(option, value) };
        }
    }
    #[cfg(target_os = "linux")]
    if !is_set(c"MIMALLOC_ALLOW_THP") {
        // SAFETY: a prctl that sets a flag of this process's memory map; no pointers.
        // Should it fail (a kernel before 3.15), only the RSS is higher.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
}

/// The purge delay while the first configuration loads (see [`hold_freed`]).
const LOAD_PURGE_DELAY: c_long = 1000;

/// Whether [`hold_freed`] raised the purge delay (and [`release_freed`] lowers it again).
static HELD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Keeps freed pages for [`LOAD_PURGE_DELAY`] instead of 10 ms until [`release_freed`]:
/// for the first configuration's load, whose parts allocate and free their working
/// memory every few tens of milliseconds. Purged after 10 ms, that memory came back as
/// fresh pages, faulted and zeroed again: at 1,000,000 TLS domains 1.19–1.21 million page
/// faults to `/ready` against 1.03–1.04 million, 41.3–41.5 s of CPU against 39.7–39.9 s,
/// for a peak 15–18 MiB higher and the same RSS at `/ready` (BENCHMARKS.md, "Session
/// 49"). The user's `MIMALLOC_PURGE_DELAY` wins.
///
/// Session 36 tried 300 ms and left it out: 1.15 million faults instead of 1.30 million,
/// but its load had no [`release_freed`] at the end yet, and on a slow run the RSS at
/// `/ready` was 50 MiB higher.
pub(crate) fn hold_freed() {
    if !is_set(c"MIMALLOC_PURGE_DELAY") {
        HELD.store(true, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: stores a number in mimalloc's option table (v3's numbering, tested).
        unsafe { mi_option_set(PURGE_DELAY, LOAD_PURGE_DELAY) };
    }
}

/// Returns every page freed so far to the system now, whatever the purge delay, and
/// purges after 10 ms again if [`hold_freed`] had raised the delay: for the end of the
/// first configuration's load, which frees most of what it allocated.
pub(crate) fn release_freed() {
    if HELD.swap(false, std::sync::atomic::Ordering::Relaxed) {
        // SAFETY: as in `hold_freed`.
        unsafe { mi_option_set(PURGE_DELAY, OPTIONS[0].2) };
    }
    // SAFETY: `mi_collect` walks mimalloc's own structures; no pointer is passed.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

/// Whether the environment has `name`, read without allocating.
fn is_set(name: &CStr) -> bool {
    // SAFETY: `name` is NUL-terminated; the result is only compared with null. Nothing
    // changes the environment this early (before `main`, or in the test below).
    !unsafe { libc::getenv(name.as_ptr()) }.is_null()
}

#[cfg(test)]
mod tests {
    use super::*;
    use libmimalloc_sys::mi_option_get;

    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// The tests that change or read mimalloc's options, one at a time.
    static OPTIONS_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// What the load frees comes back at once, whatever the purge delay (the test runs
    /// with mimalloc's default of 1 s: `configure` is not run here).
    #[cfg(target_os = "linux")]
    #[test]
    fn release_freed_returns_freed_pages() {
        let _one = OPTIONS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let blocks: Vec<Box<[u8]>> = (0..16_384).map(|i| vec![i as u8; 4096].into()).collect();
        let full = rss_kib();
        drop(blocks);
        release_freed();
        let after = rss_kib();
        assert!(
            after + 32 * 1024 < full,
            "RSS {full} KiB with 64 MiB of blocks, {after} KiB after they were freed"
        );
    }

    /// Blocks are aligned as their layouts ask, through every path: plain sizes from 1
    /// byte to 1 MiB, alignments from 1 to 4 KiB, zeroed, and grown and shrunk.
    #[test]
    fn blocks_are_aligned_as_asked() {
        let sizes = [
            1,
            7,
            8,
            15,
            16,
            17,
            24,
            40,
            100,
            1000,
            1024,
            1025,
            1536,
            4096,
            70_000,
            1 << 20,
        ];
        for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
            for size in sizes {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero sizes; every block is freed with its layout.
                unsafe {
                    let p = ALLOCATOR.alloc(layout);
                    assert!(
                        !p.is_null() && (p as usize).is_multiple_of(align),
                        "{size} B, align {align}"
                    );
                    p.write_bytes(0xa5, size);
                    let z = ALLOCATOR.alloc_zeroed(layout);
                    assert!(
                        (z as usize).is_multiple_of(align),
                        "zeroed {size} B, align {align}"
                    );
                    assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                    ALLOCATOR.dealloc(z, layout);
                    // Grown, then shrunk: the bytes kept, the alignment kept.
                    let grown = ALLOCATOR.realloc(p, layout, size * 3);
                    assert!(
                        (grown as usize).is_multiple_of(align),
                        "{size} B grown, align {align}"
                    );
                    assert!(
                        std::slice::from_raw_parts(grown, size)
                            .iter()
                            .all(|&b| b == 0xa5)
                    );
                    let big = Layout::from_size_align(size * 3, align).unwrap();
                    let half = size.div_ceil(2);
                    let shrunk = ALLOCATOR.realloc(grown, big, half);
                    assert!(
                        (shrunk as usize).is_multiple_of(align),
                        "{size} B shrunk, align {align}"
                    );
                    assert!(
                        std::slice::from_raw_parts(shrunk, half)
                            .iter()
                            .all(|&b| b == 0xa5)
                    );
                    ALLOCATOR.dealloc(shrunk, Layout::from_size_align(half, align).unwrap());
                }
            }
        }
    }

    /// The option numbers name the options meant: mimalloc v3's defaults for them
    /// (purge delay 1000 ms, transparent huge pages allowed) are what these positions
    /// hold before `configure` runs. A mimalloc whose numbering moved fails here instead
    /// of silently setting other options.
    #[test]
    fn option_numbers_are_mimalloc_v3s() {
        if OPTIONS.iter().any(|(_, env, _)| is_set(env)) {
            return; // the user's value, not the default, would be read
        }
        let _one = OPTIONS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: reads of mimalloc's option table.
        let get = || OPTIONS.map(|(option, _, _)| unsafe { mi_option_get(option) });
        assert_eq!(get(), [1000, 1]);
        configure();
        assert_eq!(get(), [10, 0]);
        // The first load holds freed pages longer; its end purges after 10 ms again.
        hold_freed();
        assert_eq!(get(), [LOAD_PURGE_DELAY, 0]);
        release_freed();
        assert_eq!(get(), [10, 0]);
        release_freed();
        assert_eq!(get(), [10, 0]);
        // SAFETY: reads a flag of this process; no pointers.
        let thp_disabled = || unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(thp_disabled(), 1);
    }
}
