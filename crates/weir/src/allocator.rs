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
//! `scripts/syscalls-per-request.sh`). The one exception: after a first load that leaves
//! 1 GiB or more resident, the ranges already full are moved onto huge pages
//! ([`collapse_heap_after_load`]), which adds no RSS.
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

/// Below this resident set at the end of the first load, the heap is left on 4 KiB pages
/// (see [`collapse_heap`]).
const COLLAPSE_FROM_RSS: u64 = 1 << 30;

/// A transparent huge page on x86-64 and arm64 (4 KiB base pages).
const HUGE_PAGE: usize = 2 << 20;
const BASE_PAGE: usize = 4096;

/// `MADV_COLLAPSE` (Linux 6.1, `asm-generic/mman-common.h`); the `libc` crate lacks it.
#[cfg(target_os = "linux")]
const MADV_COLLAPSE: libc::c_int = 25;

/// What [`collapse_heap`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Collapsed {
    /// 2 MiB ranges of the heap whose every page was resident.
    pub(crate) dense: usize,
    /// Of those, how many are now one huge page each.
    pub(crate) collapsed: usize,
}

/// After a large first load (a resident set of [`COLLAPSE_FROM_RSS`] or more), backs the
/// heap's fully resident 2 MiB ranges with transparent huge pages, on a background
/// thread. Unless the environment sets `WEIR_HUGE_PAGES=off` (or `MIMALLOC_ALLOW_THP`,
/// which already gives mimalloc's arenas huge pages from the start).
///
/// Why: at 1,000,000 TLS domains a change touches a few hundred cold cache lines spread
/// over gigabytes (the file table, the translator's indexes, the snapshot's shards); with
/// 4 KiB pages nearly each is also a TLB miss and a page walk, which in a virtual machine
/// walks the host's tables too. With huge pages weir's own time per change at 1,000,000
/// domains was 19–64 % lower than on 4 KiB pages, the same binary alternated
/// (BENCHMARKS.md, "Session 55"). They are not used from
/// the start because a small configuration would pay a 2 MiB page per partly used range
/// (the RSS bar at 20,000 domains, see the module's note), and a 1,000,000-domain load
/// with them reached `/ready` later. Only ranges whose 512 pages are all resident are
/// collapsed, so the resident set does not grow; the process goes back to refusing huge
/// pages once done, so later allocations stay on 4 KiB pages.
pub(crate) fn collapse_heap_after_load() {
    if is_set(c"MIMALLOC_ALLOW_THP") || std::env::var("WEIR_HUGE_PAGES").is_ok_and(|v| v == "off") {
        return;
    }
    let Some(rss) = rss_bytes() else { return };
    if rss < COLLAPSE_FROM_RSS {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("weir-hugepages".into())
        .spawn(move || {
            let t = std::time::Instant::now();
            let done = collapse_heap();
            tracing::info!(
                rss_mib = rss >> 20,
                dense_ranges = done.dense,
                collapsed = done.collapsed,
                ms = t.elapsed().as_millis() as u64,
                "heap backed by huge pages where fully resident"
            );
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no thread to back the heap by huge pages");
    }
}

/// The process's resident set, from `/proc/self/status`.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// The private, writable, anonymous mappings of `/proc/self/maps` (the heaps; thread
/// stacks too, whose ranges are rarely all resident), as `(start, end)`.
fn anonymous_mappings(maps: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let range = f.next()?;
            let perms = f.next()?;
            let (_offset, _dev, inode) = (f.next()?, f.next()?, f.next()?);
            let path = f.next();
            let anonymous = inode == "0" && matches!(path, None | Some("[heap]"));
            if !(anonymous && perms.starts_with("rw") && perms.ends_with('p')) {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect()
}

/// The 2 MiB-aligned ranges wholly inside `(start, end)`.
fn huge_ranges((start, end): (usize, usize)) -> impl Iterator<Item = usize> {
    let first = start.next_multiple_of(HUGE_PAGE);
    (first..)
        .step_by(HUGE_PAGE)
        .take_while(move |at| at + HUGE_PAGE <= end)
}

/// Collapses every fully resident 2 MiB range of the anonymous mappings into one huge
/// page (`MADV_COLLAPSE`). Leaves a mapping at its first refusal that means it cannot
/// have them (no `MADV_COLLAPSE` before Linux 6.1, huge pages `never`, a mapping advised
/// against them); skips a range it could not get a huge page for.
#[cfg(target_os = "linux")]
fn collapse_heap() -> Collapsed {
    let mut done = Collapsed::default();
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return done;
    };
    // SAFETY: a prctl that clears a flag of this process's memory map; no pointers.
    // `MADV_COLLAPSE` refuses while it is set (`configure`).
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0) };
    let mut resident = [0u8; HUGE_PAGE / BASE_PAGE];
    'mappings: for mapping in anonymous_mappings(&maps) {
        for at in huge_ranges(mapping) {
            // SAFETY: `at..at + HUGE_PAGE` lies inside a mapping listed just now (one
            // unmapped since fails with ENOMEM, which is skipped); `resident` has one
            // byte per page of it. mincore only reads the page tables.
            let r =
                unsafe { libc::mincore(at as *mut libc::c_void, HUGE_PAGE, resident.as_mut_ptr()) };
            if r != 0 || resident.iter().any(|b| b & 1 == 0) {
                continue;
            }
            done.dense += 1;
            // SAFETY: MADV_COLLAPSE moves the range's contents into one huge page and
            // maps it at the same addresses: what the process reads there is unchanged.
            let r = unsafe { libc::madvise(at as *mut libc::c_void, HUGE_PAGE, MADV_COLLAPSE) };
            if r == 0 {
                done.collapsed += 1;
            } else if matches!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EINVAL | libc::EPERM)
            ) {
                // The mapping cannot have huge pages (advised against them, a special
                // mapping) or the kernel cannot collapse at all: its other ranges
                // would fail alike.
                continue 'mappings;
            }
            // Other threads fault and map too: one range at a time.
            std::thread::yield_now();
        }
    }
    if !is_set(c"MIMALLOC_ALLOW_THP") {
        // SAFETY: as above; sets the flag back, as `configure` did.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
    done
}

#[cfg(not(target_os = "linux"))]
fn collapse_heap() -> Collapsed {
    Collapsed::default()
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
        rss_bytes().expect("VmRSS in /proc/self/status") >> 10
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

    /// `AnonHugePages` of the mapping of `/proc/self/smaps` that starts at `at`, in KiB.
    fn huge_kib_at(at: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{at:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head)).skip(1);
        let line = lines
            .find(|l| l.starts_with("AnonHugePages:"))
            .expect("the mapping is listed");
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// A resident range on 4 KiB pages becomes huge pages, and the process refuses huge
    /// pages again afterwards; a range with a page never touched is left alone.
    #[cfg(target_os = "linux")]
    #[test]
    fn collapse_heap_backs_resident_ranges_by_huge_pages() {
        let _one = OPTIONS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
        if thp.as_deref().map_or(true, |m| m.contains("[never]")) {
            eprintln!("no transparent huge pages on this kernel: nothing to check");
            return;
        }
        // SAFETY: flags of this process; no pointers.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        // Ten huge pages' worth and a page either side, those two made inaccessible: the
        // writable part is a mapping of its own, never merged with a neighbour (whose
        // huge pages `smaps` would then count with ours).
        let len = 10 * HUGE_PAGE + 2 * BASE_PAGE;
        // SAFETY: a fresh private anonymous mapping, unmapped at the end of the test; the
        // two pages made inaccessible are its first and last.
        let base = unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            assert_eq!(libc::mprotect(base, BASE_PAGE, libc::PROT_NONE), 0);
            let last = base.cast::<u8>().add(len - BASE_PAGE).cast();
            assert_eq!(libc::mprotect(last, BASE_PAGE, libc::PROT_NONE), 0);
            base
        };
        let writable = (base as usize + BASE_PAGE, base as usize + len - BASE_PAGE);
        let ranges: Vec<usize> = huge_ranges(writable).collect();
        assert!(ranges.len() >= 8, "{ranges:x?}");
        // The first four aligned ranges written page by page; the others with one page
        // never touched each; the rest of the mapping left alone.
        let page = |at: usize| at as *mut u8;
        for (r, &at) in ranges.iter().enumerate() {
            for p in (0..HUGE_PAGE / BASE_PAGE).filter(|p| r < 4 || *p != 7) {
                // SAFETY: a page of an aligned range inside the writable part above.
                unsafe { page(at + p * BASE_PAGE).write((r + p) as u8) };
            }
        }
        assert_eq!(huge_kib_at(writable.0), 0, "4 KiB pages before");
        let done = collapse_heap();
        let huge = huge_kib_at(writable.0);
        // SAFETY: reads a flag of this process; no pointers.
        assert_eq!(
            unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) },
            1
        );
        // The contents did not change.
        for (r, &at) in ranges.iter().enumerate() {
            for p in 0..HUGE_PAGE / BASE_PAGE {
                let want = if r < 4 || p != 7 { (r + p) as u8 } else { 0 };
                // SAFETY: as above.
                assert_eq!(unsafe { page(at + p * BASE_PAGE).read() }, want, "{r}/{p}");
            }
        }
        // SAFETY: the mapping made above, not used after this.
        unsafe { libc::munmap(base, len) };
        // `MADV_COLLAPSE` came with Linux 6.1: before it, nothing is collapsed.
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut version = release
            .split(['.', '-'])
            .map(|n| n.parse::<u32>().unwrap_or(0));
        let (major, minor) = (version.next().unwrap_or(0), version.next().unwrap_or(0));
        if (major, minor) < (6, 1) {
            eprintln!("Linux {release} has no MADV_COLLAPSE: {done:?}");
            return;
        }
        assert_eq!(
            huge,
            4 * (HUGE_PAGE as u64 >> 10),
            "the four fully resident ranges, and only they, are huge pages ({done:?})"
        );
    }

    #[test]
    fn anonymous_mappings_and_their_huge_ranges() {
        let maps = "\
55d0c0000000-55d0c0400000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000a00000 rw-p 00000000 00:00 0 
7f0000a00000-7f0000c00000 r--p 00000000 08:01 1234                       /usr/lib/libc.so.6
7f0000c00000-7f0000e00000 rw-s 00000000 00:05 99                         /dev/zero (deleted)
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]
";
        let m = anonymous_mappings(maps);
        assert_eq!(
            m,
            vec![
                (0x55d0c0000000, 0x55d0c0400000),
                (0x7f0000000000, 0x7f0000a00000)
            ]
        );
        assert_eq!(huge_ranges(m[0]).count(), 2);
        assert_eq!(huge_ranges(m[1]).count(), 5);
        // Unaligned ends: only the whole 2 MiB ranges inside.
        let r: Vec<usize> = huge_ranges((0x1000, 0x600000 + 0x1000)).collect();
        assert_eq!(r, vec![0x200000, 0x400000]);
        assert_eq!(huge_ranges((0x1000, 0x200fff)).count(), 0);
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
