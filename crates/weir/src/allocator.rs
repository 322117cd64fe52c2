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

use std::ffi::{CStr, c_long};

use libmimalloc_sys::{mi_option_set, mi_option_t};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

/// Returns every page freed so far to the system now, whatever the purge delay: for the
/// end of the first configuration's load, which frees most of what it allocated.
///
/// Tried and left out (BENCHMARKS.md, "Session 36"): a purge delay of 300 ms while the
/// first configuration loads. It faulted 1.15 million pages instead of 1.30 million at
/// 1,000,000 TLS domains, but the peak rose by 20–70 MiB and, on a slow run, the RSS at
/// `/ready` by 50 MiB.
pub(crate) fn release_freed() {
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

    /// What the load frees comes back at once, whatever the purge delay (the test runs
    /// with mimalloc's default of 1 s: `configure` is not run here).
    #[cfg(target_os = "linux")]
    #[test]
    fn release_freed_returns_freed_pages() {
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

    /// The option numbers name the options meant: mimalloc v3's defaults for them
    /// (purge delay 1000 ms, transparent huge pages allowed) are what these positions
    /// hold before `configure` runs. A mimalloc whose numbering moved fails here instead
    /// of silently setting other options.
    #[test]
    fn option_numbers_are_mimalloc_v3s() {
        if OPTIONS.iter().any(|(_, env, _)| is_set(env)) {
            return; // the user's value, not the default, would be read
        }
        // SAFETY: reads of mimalloc's option table.
        let get = || OPTIONS.map(|(option, _, _)| unsafe { mi_option_get(option) });
        assert_eq!(get(), [1000, 1]);
        configure();
        assert_eq!(get(), [10, 0]);
        // SAFETY: reads a flag of this process; no pointers.
        let thp_disabled = || unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(thp_disabled(), 1);
    }
}
