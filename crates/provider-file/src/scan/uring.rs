//! Reading a batch of manifests with io_uring: one system call opens, reads and closes
//! up to [`SLOTS`] files of one directory, where the plain path makes four per file
//! (`openat`, two `read`s, `close`).
//!
//! Each file is a chain of four requests: `openat` relative to the directory's
//! descriptor into a registered slot of the ring (no descriptor in the process's table),
//! a read of up to [`READ_BUF`] bytes into the slot's buffer, a read of one byte more,
//! and a `close` of the slot. The second read must return nothing (the end of the file,
//! as the plain path's last read), and every other outcome (an error, a file larger than
//! the buffer, one that grew meanwhile) leaves the file to the plain path, which reads it
//! again and reports what it finds as before. The reads after the `openat` are hard
//! links, so the `close` runs whatever happened before it.
//!
//! The CPU per cached file of the 1,000,000-file directory, one thread: 3.16 µs with
//! these chains against 3.60–4.14 µs for `openat`, two reads and `close`
//! (BENCHMARKS.md, "Session 48"). Where io_uring is unavailable (an old kernel, a
//! container's seccomp profile, `io_uring_disabled`) or `WEIR_IO_URING=0` is set, the
//! plain path reads every file.

// The ring takes raw pointers to the names it opens and the buffers it reads into: they
// live in `Uring`, and every request of a batch has completed before `read_ahead`
// returns (or the `Uring` is leaked).
#![allow(unsafe_code)]

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use io_uring::{IoUring, opcode, squeue, types};

/// Files read ahead at a time: the readers' batch ([`super::BATCH`]).
pub(crate) const SLOTS: usize = super::BATCH;

// Room for a file's bytes: the plain reader's first buffer size; a larger file goes
// the plain path.
use super::READ_BUF;

/// Requests per file: `openat`, read, the read that must find the end, `close`.
const OPS: usize = 4;

/// A reader's ring, with a buffer per slot.
pub(crate) struct Uring {
    // Dropped first (no request is in flight by then: each batch is reaped before
    // `read_ahead` returns).
    ring: IoUring,
    bufs: Vec<Box<[u8]>>,
    /// The byte the second read of each slot reads into (it must read none).
    probes: Box<[u8; SLOTS]>,
    /// The files of the last batch, in order: the end of each one's path in `paths`,
    /// and the length read when its chain succeeded; `next` is the first not yet taken.
    ahead: Vec<(usize, Option<usize>)>,
    paths: Vec<u8>,
    next: usize,
    /// The batch's file names, each followed by a NUL (what the `openat`s point to).
    names: Vec<u8>,
}

impl Uring {
    /// A ring for one reader, or `None` where io_uring cannot be used (or is turned off
    /// with `WEIR_IO_URING=0`).
    pub(crate) fn new() -> Option<Uring> {
        if std::env::var_os("WEIR_IO_URING").is_some_and(|v| v == "0") {
            return None;
        }
        let entries = (SLOTS * OPS) as u32;
        // One thread submits and reaps; its completions are run when it waits
        // (kernels since 6.1), else the plain setup.
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
            .or_else(|_| IoUring::new(entries))
            .ok()?;
        ring.submitter().register_files_sparse(SLOTS as u32).ok()?;
        Some(Uring {
            ring,
            bufs: (0..SLOTS)
                .map(|_| vec![0u8; READ_BUF].into_boxed_slice())
                .collect(),
            probes: Box::new([0; SLOTS]),
            ahead: Vec::with_capacity(SLOTS),
            paths: Vec::new(),
            next: 0,
            names: Vec::new(),
        })
    }

    /// Reads `files` (at most [`SLOTS`] paths with their names, all in the directory
    /// `dir` is a descriptor of) ahead; [`Uring::take`] then hands out their bytes in the
    /// same order.
    pub(crate) fn read_ahead(&mut self, dir: &OwnedFd, files: &[(&Path, &OsStr)]) -> Ahead {
        self.ahead.clear();
        self.paths.clear();
        self.names.clear();
        self.next = 0;
        if files.len() > SLOTS {
            return Ahead::Skipped;
        }
        // The names, each followed by a NUL, in one buffer kept from batch to batch.
        let mut starts = [0usize; SLOTS];
        for (slot, (_, name)) in files.iter().enumerate() {
            let name = name.as_bytes();
            if name.contains(&0) {
                return Ahead::Skipped;
            }
            starts[slot] = self.names.len();
            self.names.extend_from_slice(name);
            self.names.push(0);
        }
        let dirfd = types::Fd(dir.as_raw_fd());
        let probes = self.probes.as_mut_ptr();
        {
            let mut sq = self.ring.submission();
            for (slot, &start) in starts[..files.len()].iter().enumerate() {
                let name = self.names[start..].as_ptr().cast::<libc::c_char>();
                let fixed = types::Fixed(slot as u32);
                let target = types::DestinationSlot::try_from_slot_target(slot as u32)
                    .expect("a slot below SLOTS");
                let user = |op: usize| (slot * OPS + op) as u64;
                let chain = [
                    opcode::OpenAt::new(dirfd, name)
                        .flags(libc::O_RDONLY | libc::O_NONBLOCK)
                        .file_index(Some(target))
                        .build()
                        .flags(squeue::Flags::IO_LINK)
                        .user_data(user(0)),
                    // Offset -1: from the file's position, as read(2).
                    opcode::Read::new(fixed, self.bufs[slot].as_mut_ptr(), READ_BUF as u32)
                        .offset(u64::MAX)
                        .build()
                        .flags(squeue::Flags::IO_HARDLINK)
                        .user_data(user(1)),
                    opcode::Read::new(fixed, probes.wrapping_add(slot), 1)
                        .offset(u64::MAX)
                        .build()
                        .flags(squeue::Flags::IO_HARDLINK)
                        .user_data(user(2)),
                    opcode::Close::new(fixed).build().user_data(user(3)),
                ];
                // SAFETY: the names and the buffers (owned by `self`, not touched again
                // until the next batch) stay valid until each request completes: every
                // one is reaped below before this returns, or the caller leaks the whole
                // `Uring` ([`Ahead::Broken`]). The queue has room for `SLOTS * OPS`
                // entries and holds none now (each batch submits all it pushed).
                if unsafe { sq.push_multiple(&chain) }.is_err() {
                    // Chains pushed before this one would go with the next batch.
                    return Ahead::Broken;
                }
            }
        }
        let want = files.len() * OPS;
        let mut results = [i32::MIN; SLOTS * OPS];
        let mut seen = 0;
        while seen < want {
            // Submits what the queue still holds (all of it the first time), then waits.
            match self.ring.submit_and_wait(want - seen) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // Requests may still be in flight with pointers into the names and
                // buffers.
                Err(_) => return Ahead::Broken,
            }
            for cqe in self.ring.completion() {
                let i = cqe.user_data() as usize;
                if let Some(r) = results[..want].get_mut(i) {
                    *r = cqe.result();
                    seen += 1;
                }
            }
        }
        if results[..want].chunks(OPS).all(|r| r[0] == -libc::EINVAL) {
            // A kernel that takes the ring but not these requests: every file would be
            // read twice.
            return Ahead::Unsupported;
        }
        for (slot, (path, _)) in files.iter().enumerate() {
            let r = &results[slot * OPS..slot * OPS + OPS];
            // Opened, read, and nothing after what was read.
            let read = (r[0] >= 0 && r[1] >= 0 && r[2] == 0).then_some(r[1] as usize);
            self.paths.extend_from_slice(path.as_os_str().as_bytes());
            self.ahead.push((self.paths.len(), read));
        }
        Ahead::Read
    }

    /// Where the bytes read ahead for `path` are (its slot and length, for
    /// [`Uring::bytes`]) if it is the next file of the batch and its chain succeeded;
    /// `None` sends it the plain way.
    pub(crate) fn take(&mut self, path: &Path) -> Option<(usize, usize)> {
        let &(end, read) = self.ahead.get(self.next)?;
        let start = match self.next {
            0 => 0,
            n => self.ahead[n - 1].0,
        };
        if self.paths[start..end] != *path.as_os_str().as_bytes() {
            return None;
        }
        let slot = self.next;
        self.next += 1;
        read.map(|n| (slot, n))
    }

    /// Forgets the last batch.
    pub(crate) fn clear(&mut self) {
        self.ahead.clear();
        self.next = 0;
    }

    /// The `n` bytes read into `slot`.
    pub(crate) fn bytes(&self, slot: usize, n: usize) -> &[u8] {
        &self.bufs[slot][..n]
    }
}

/// What [`Uring::read_ahead`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ahead {
    /// The batch was read (each file's chain succeeded or left it to the plain path).
    Read,
    /// Nothing was submitted (a name with a NUL byte, too many files): the plain path
    /// reads the batch.
    Skipped,
    /// Every `openat` was refused as invalid (nothing was read, every request has
    /// completed): the ring is of no use here and can be dropped.
    Unsupported,
    /// The ring failed with requests possibly in flight: the caller must leak the
    /// `Uring` (`std::mem::forget`), whose buffers they may still write to.
    Broken,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::{FileRead, Reader, read_file, read_files_in_order};

    /// A directory with every kind of entry a batch can meet: manifests, an empty file, a
    /// file larger than a slot's buffer, a directory and a FIFO with a manifest's name,
    /// and a listed file that is gone.
    fn mixed_dir() -> (tempfile::TempDir, Vec<std::path::PathBuf>) {
        let dir = tempfile::tempdir().unwrap();
        let mut paths = Vec::new();
        for i in 0..80 {
            let p = dir.path().join(format!("m{i:02}.yaml"));
            let body = match i {
                // Exactly a slot's buffer, and one byte more.
                7 => "#".repeat(READ_BUF - 1) + "\n",
                8 => "#".repeat(READ_BUF) + "\n",
                9 => format!("# {}\n", "x".repeat(3 * READ_BUF)),
                11 => String::new(),
                _ => format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}, namespace: default}}\n"
                ),
            };
            if i == 13 {
                std::fs::create_dir(&p).unwrap();
            } else if i == 14 || i == 40 {
                // Listed, then gone.
            } else if i == 15 || i == 50 {
                let made = std::process::Command::new("mkfifo").arg(&p).status();
                if !made.is_ok_and(|s| s.success()) {
                    std::fs::write(&p, "").unwrap();
                }
            } else {
                std::fs::write(&p, body).unwrap();
            }
            paths.push(p);
        }
        (dir, paths)
    }

    /// The ring reads a batch's small files whole (empty ones and one that fills a slot's
    /// buffer exactly included), and leaves what it cannot to the plain path: files
    /// larger than a slot, missing files, directories.
    #[test]
    fn a_batch_is_read_ahead_or_left_to_the_plain_path() {
        let Some(mut ring) = Uring::new() else {
            println!("SKIPPED: io_uring is not available here");
            return;
        };
        let (dir, paths) = mixed_dir();
        let fd: OwnedFd = rustix::fs::open(
            dir.path(),
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let batch: Vec<(&Path, &OsStr)> = paths[..SLOTS]
            .iter()
            .map(|p| (p.as_path(), p.file_name().unwrap()))
            .collect();
        assert_eq!(ring.read_ahead(&fd, &batch), Ahead::Read);
        for (i, (p, _)) in batch.iter().enumerate() {
            let got = ring.take(p).map(|(slot, n)| ring.bytes(slot, n).to_vec());
            match i {
                8 | 9 | 13 | 14 => assert_eq!(got, None, "file {i} is left to the plain path"),
                // The FIFO (or an empty file where mkfifo is missing) reads as empty.
                15 => assert_eq!(got.as_deref(), Some(&[][..]), "file {i}"),
                _ => assert_eq!(
                    got.as_deref(),
                    Some(&std::fs::read(p).unwrap()[..]),
                    "file {i} read whole"
                ),
            }
        }
        // A path out of order is not taken from the batch.
        assert_eq!(ring.read_ahead(&fd, &batch[..2]), Ahead::Read);
        assert_eq!(ring.take(batch[1].0), None);
    }

    /// Parallel readers (which read ahead with the ring) give what the plain path gives,
    /// file by file, in order: bytes, errors, and the FIFO read as empty.
    #[test]
    fn parallel_reads_equal_plain_reads() {
        let (_dir, paths) = mixed_dir();
        let known = vec![None; paths.len()];
        let mut parallel = Vec::new();
        assert!(paths.len() >= crate::scan::PARALLEL_MIN_FILES);
        read_files_in_order(&paths, &known, 3, 0, |i, r| parallel.push((i, r)));
        let mut plain = Reader::default();
        assert_eq!(parallel.len(), paths.len());
        for (i, read) in parallel {
            let want = read_file(&mut plain, &paths[i], None);
            let show = |r: &FileRead| match r {
                FileRead::Parsed { hash, docs } => format!("parsed {hash} {}", docs.len()),
                FileRead::Unreadable(e) => format!("unreadable {:?}", e.kind()),
                other => format!("{other:?}"),
            };
            assert_eq!(show(&read), show(&want), "file {i}");
        }
    }
}
