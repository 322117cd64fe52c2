//! Finding manifest files under a directory and reading them (in parallel when there are
//! many).

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use crate::parse::{ParsedDoc, parse_file};

mod uring;

/// Below this many files, reading in parallel costs more than it saves.
pub(crate) const PARALLEL_MIN_FILES: usize = 64;
/// More threads than this do not help while the files are in the page cache: reading is
/// bounded by parsing on a few cores.
pub(crate) const MAX_THREADS: usize = 4;
/// Readers at most when reads wait on the disk: each keeps one read in flight, and a
/// cold directory of small files is read at the disk's latency times the reads in flight.
const MAX_IO_THREADS: usize = 16;
/// No file read for this long means the readers wait on the disk (a parsed file takes
/// tens of microseconds) or for a core: one more reader is started, up to
/// [`MAX_IO_THREADS`], when storage was read meanwhile ([`DiskReads`]).
const STALL: Duration = Duration::from_millis(1);
/// Files a reader takes at a time, and hands over in one message: a message per file
/// woke the waiting caller for many of them (0.14–2.2 `futex` calls and 0.1–1.6 context
/// switches a file at 100,000 files, 0.03–0.28 of each with batches; BENCHMARKS.md,
/// "Session 37").
const BATCH: usize = 16;

/// How much lower the readers of a first load run than the thread that starts them, in
/// nice levels: as low as Linux allows. Nothing is served before the first load ends, and
/// its longest chain is the translation of what was read, not the reading: readers at
/// the same priority took a core's share from the translation and read ahead of it, and
/// `/ready` came 3.2–3.8 s after half the load's CPU time at 1,000,000 TLS domains; at
/// the lowest priority they run in what the translation leaves, and it comes 1.7–2.3 s
/// after (BENCHMARKS.md, "Session 36"). Later reads keep the priority of the thread that
/// starts them: they would otherwise wait behind the traffic.
pub(crate) const FIRST_LOAD_READER_NICE: i32 = 19;

/// Lowers the calling thread's scheduling priority by `by` nice levels (Linux's nice
/// value is per thread; the kernel caps it at 19).
#[allow(unsafe_code)]
fn lower_priority(by: i32) {
    if by <= 0 {
        return;
    }
    // SAFETY: `nice` changes a number of the calling thread; no pointer is passed. A
    // failure (-1 with errno set) only leaves the priority as it was.
    unsafe { libc::nice(by) };
}

/// Whether this process read from storage since the last look: the bytes its reads
/// fetched from the disk (`read_bytes` of `/proc/self/io`) grew. Where that count is
/// unavailable, every look says yes.
struct DiskReads {
    last: Option<u64>,
}

impl DiskReads {
    fn start() -> DiskReads {
        DiskReads {
            last: storage_read_bytes(),
        }
    }

    fn waited(&mut self) -> bool {
        let now = storage_read_bytes();
        let grew = match (self.last, now) {
            (Some(before), Some(now)) => now > before,
            _ => true,
        };
        self.last = now;
        grew
    }
}

/// `read_bytes` of `/proc/self/io` (Linux, with I/O accounting).
fn storage_read_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes: "))?
        .trim()
        .parse()
        .ok()
}

/// Whether a directory entry name is hidden (`.git`, `..data`, `.foo.yaml.swp`).
pub(crate) fn is_hidden(name: &OsStr) -> bool {
    name.as_encoded_bytes().first() == Some(&b'.')
}

/// Whether a file name is a manifest: not hidden, ending in `.yaml` or `.yml`.
pub(crate) fn is_manifest_name(name: &OsStr) -> bool {
    if is_hidden(name) {
        return false;
    }
    let ext = Path::new(name).extension().and_then(OsStr::to_str);
    ext.is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}

/// A directory that could not be listed.
#[derive(Debug)]
pub(crate) struct WalkError {
    pub(crate) dir: PathBuf,
    pub(crate) error: io::Error,
}

/// The manifest files found under a directory (see [`walk`]), and the directories that
/// could not be listed: what [`crate::Watcher::take_listing`] hands to the first read.
#[derive(Debug)]
pub struct Listing {
    pub(crate) root: PathBuf,
    pub(crate) files: Vec<PathBuf>,
    pub(crate) errors: Vec<WalkError>,
}

impl Listing {
    pub(crate) fn new(root: PathBuf, files: Vec<PathBuf>, errors: Vec<WalkError>) -> Listing {
        Listing {
            root,
            files,
            errors,
        }
    }

    /// The directory listed (absolute).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How many manifest files were found.
    pub fn files(&self) -> usize {
        self.files.len()
    }
}

/// Appends every manifest file under `dir` (recursively, skipping hidden entries, following
/// symlinks, each directory once) to `out`, in no particular order.
pub(crate) fn walk(dir: &Path, out: &mut Vec<PathBuf>, errors: &mut Vec<WalkError>) {
    walk_with(dir, out, errors, &mut |_| {});
}

/// [`walk`], calling `before_listing` with each directory just before it is listed (the
/// watcher watches it there, so that what appears in it while it is listed is either
/// listed or reported).
pub(crate) fn walk_with(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    errors: &mut Vec<WalkError>,
    before_listing: &mut dyn FnMut(&Path),
) {
    let mut seen = HashSet::new();
    walk_dir(dir, out, errors, &mut seen, before_listing);
}

fn walk_dir(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    errors: &mut Vec<WalkError>,
    seen: &mut HashSet<PathBuf>,
    before_listing: &mut dyn FnMut(&Path),
) {
    // Symlinked directories may form loops; visit each real directory once.
    if let Ok(real) = std::fs::canonicalize(dir)
        && !seen.insert(real)
    {
        return;
    }
    before_listing(dir);
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(error) => {
            errors.push(WalkError {
                dir: dir.to_path_buf(),
                error,
            });
            return;
        }
    };
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(error) => {
                errors.push(WalkError {
                    dir: dir.to_path_buf(),
                    error,
                });
                continue;
            }
        };
        let name = entry.file_name();
        if is_hidden(&name) {
            continue;
        }
        let Ok(mut file_type) = entry.file_type() else {
            continue;
        };
        if file_type.is_symlink() {
            // Follow the link (Kubernetes' `file -> ..data/file` layout); a dangling one is
            // skipped.
            match std::fs::metadata(entry.path()) {
                Ok(m) => file_type = m.file_type(),
                Err(_) => continue,
            }
        }
        if file_type.is_dir() {
            walk_dir(&entry.path(), out, errors, seen, before_listing);
        } else if is_manifest_name(&name) {
            out.push(entry.path());
        }
    }
}

/// The result of reading one file.
#[derive(Debug)]
pub(crate) enum FileRead {
    /// Same bytes as last time (by content hash): nothing to do.
    Unchanged,
    /// The file does not exist (any more).
    Missing,
    /// The file exists but could not be read.
    Unreadable(io::Error),
    /// The bytes are not valid YAML.
    Syntax { hash: u64, message: String },
    /// The documents of the file.
    Parsed { hash: u64, docs: Vec<ParsedDoc> },
}

/// Reads and parses `path` unless its content hash equals `known`, with `reader`'s
/// directory handle and buffer.
pub(crate) fn read_file(reader: &mut Reader, path: &Path, known: Option<u64>) -> FileRead {
    let bytes = match reader.read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return FileRead::Missing,
        Err(e) => return FileRead::Unreadable(e),
    };
    let hash = xxhash_rust::xxh3::xxh3_64(bytes);
    if known == Some(hash) {
        return FileRead::Unchanged;
    }
    match parse_file(bytes) {
        Ok(docs) => FileRead::Parsed { hash, docs },
        Err(message) => FileRead::Syntax { hash, message },
    }
}

/// What one reading thread keeps from one file to the next.
///
/// - A descriptor of the directory of the last file it opened: the next file of that
///   directory is opened relative to it (`openat`), so the kernel resolves only the
///   file's own name instead of every component of the directory's path again.
/// - The buffer files are read into (parsing copies out what it keeps): no allocation
///   and no zeroing per file, and no `statx` for a size to allocate.
///
/// A file is read until a read returns nothing: open, two reads and a close per small
/// file, against open, `statx`, a read and a close before. At 1,000,000 files in the page
/// cache, 3.6 µs a file against 4.3 µs on one core (BENCHMARKS.md, "Session 46").
/// Files are opened non-blocking, so that a FIFO given a manifest's name reads as empty
/// instead of stopping its reader until something writes to it.
///
/// The parallel readers of a large batch first read each batch of [`BATCH`] files ahead
/// with io_uring where the kernel allows it ([`Reader::read_ahead`], [`uring`]): the same
/// four steps per file in one system call for the batch, 3.16 µs a cached file against
/// 3.60–4.14 µs, and 1.0 s less system time to `/ready` at 1,000,000 files
/// (BENCHMARKS.md, "Session 48").
#[derive(Default)]
pub(crate) struct Reader {
    dir: Option<(PathBuf, OwnedFd)>,
    buf: Vec<u8>,
    /// The ring of a parallel reader ([`Reader::read_ahead`]), made at its first batch.
    uring: Option<uring::Uring>,
    uring_tried: bool,
}

/// The buffer's first size: the manifests of a TLS domain are 1–4 KiB.
const READ_BUF: usize = 16 * 1024;

impl Reader {
    /// Reads `paths` ahead with io_uring where it can (see [`uring`]): [`Reader::read`]
    /// of the same paths, in the same order, then takes their bytes from the ring's
    /// buffers. Files the ring could not read, or read whole, are read the plain way.
    pub(crate) fn read_ahead<P: AsRef<Path>>(&mut self, paths: &[P]) {
        if !self.uring_tried {
            self.uring_tried = true;
            self.uring = uring::Uring::new();
        }
        if self.uring.is_none() {
            return;
        }
        if paths.is_empty() || paths.len() > uring::SLOTS {
            return self.skip_ahead();
        }
        let Some((dir, _)) = dir_and_name(paths[0].as_ref()) else {
            return self.skip_ahead();
        };
        let mut batch = [(Path::new(""), OsStr::new("")); uring::SLOTS];
        for (slot, p) in batch.iter_mut().zip(paths) {
            match dir_and_name(p.as_ref()) {
                Some((d, name)) if d.as_os_str() == dir.as_os_str() => *slot = (p.as_ref(), name),
                // Files of several directories (rare: a batch is 16 files in path order).
                _ => return self.skip_ahead(),
            }
        }
        if self.dir_fd(dir).is_none() {
            return self.skip_ahead();
        }
        let (Some((_, fd)), Some(ring)) = (&self.dir, &mut self.uring) else {
            return;
        };
        match ring.read_ahead(fd, &batch[..paths.len()]) {
            uring::Ahead::Read | uring::Ahead::Skipped => {}
            uring::Ahead::Unsupported => self.uring = None,
            uring::Ahead::Broken => {
                // Its requests may still write into its buffers: it is never freed.
                std::mem::forget(self.uring.take());
                tracing::warn!("io_uring failed; manifests are read without it from now on");
            }
        }
    }

    /// Forgets what was read ahead: the next batch is read the plain way.
    fn skip_ahead(&mut self) {
        if let Some(ring) = &mut self.uring {
            ring.clear();
        }
    }

    /// The bytes of the file at `path`, valid until the next read.
    pub(crate) fn read(&mut self, path: &Path) -> io::Result<&[u8]> {
        use std::io::Read;
        if let Some((slot, n)) = self.uring.as_mut().and_then(|u| u.take(path)) {
            let ring = self.uring.as_ref().expect("taken from it");
            return Ok(ring.bytes(slot, n));
        }
        let mut file = self.open(path)?;
        let mut filled = 0;
        loop {
            if filled == self.buf.len() {
                let more = self.buf.len().max(READ_BUF);
                self.buf
                    .try_reserve(more)
                    .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
                // Zeroed once, as the buffer grows (a few KiB: no unsafe code for it).
                self.buf.resize(self.buf.len() + more, 0);
            }
            match file.read(&mut self.buf[filled..]) {
                Ok(0) => return Ok(&self.buf[..filled]),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn open(&mut self, path: &Path) -> io::Result<std::fs::File> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK;
        if let Some((dir, name)) = dir_and_name(path)
            && let Some(fd) = self.dir_fd(dir)
        {
            return Ok(rustix::fs::openat(fd, name, flags, Mode::empty())?.into());
        }
        Ok(rustix::fs::open(path, flags, Mode::empty())?.into())
    }

    /// A descriptor of directory `dir`, kept for the next file there. `None` for a
    /// directory that cannot be opened (gone, not a directory, no descriptor left): the
    /// path is then opened whole, for its own result.
    fn dir_fd(&mut self, dir: &Path) -> Option<&OwnedFd> {
        use rustix::fs::{Mode, OFlags};
        let cached = matches!(&self.dir, Some((d, _)) if d.as_os_str() == dir.as_os_str());
        if !cached {
            self.dir = rustix::fs::open(
                dir,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .ok()
            .map(|fd| (dir.to_path_buf(), fd));
        }
        self.dir.as_ref().map(|(_, fd)| fd)
    }
}

/// A file's directory and name, split at the path's last `/`: its bytes are searched,
/// not parsed into components (`Path::parent` and `Path::file_name` parse from the end,
/// a byte at a time, and took 0.45 µs a file at 1,000,000 files; BENCHMARKS.md,
/// "Session 49"). `None` when the name is not a plain one (empty, `.`, `..`) or the
/// directory part is empty (a relative path of one component, a file in `/`): such a
/// path is opened whole.
pub(crate) fn dir_and_name(path: &Path) -> Option<(&Path, &OsStr)> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    let at = memchr::memrchr(b'/', bytes)?;
    let (dir, name) = (&bytes[..at], &bytes[at + 1..]);
    if dir.is_empty() || name.is_empty() || name == b"." || name == b".." {
        return None;
    }
    Some((Path::new(OsStr::from_bytes(dir)), OsStr::from_bytes(name)))
}

/// Reads every path (see [`read_file`]), on several threads when there are many. The
/// results are in the order of `paths`.
pub(crate) fn read_files<P, F>(paths: &[P], known: F) -> Vec<FileRead>
where
    P: AsRef<Path> + Sync,
    F: Fn(&P) -> Option<u64> + Sync,
{
    let known: Vec<Option<u64>> = paths.iter().map(known).collect();
    // Two threads per core: reading a file also waits on open/read (and on the disk when
    // the page cache is cold), which the other thread of the core fills with parsing.
    // (The cores are only counted for a batch large enough to read in parallel.)
    let threads = if paths.len() < PARALLEL_MIN_FILES {
        0
    } else {
        cores().saturating_mul(2).min(MAX_THREADS)
    };
    let mut reads = Vec::with_capacity(paths.len());
    read_files_in_order(paths, &known, threads, 0, |_, r| reads.push(r));
    reads
}

/// The number of cores this process may use. Not cheap on Linux (it reads cgroup
/// limits): asked only for large batches.
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Reads every path (see [`read_file`]; `known[i]` is the last hash of `paths[i]`) on
/// `threads` threads of its own, `nice` levels below the calling thread's priority (see
/// [`FIRST_LOAD_READER_NICE`]), and hands each result to `each` on the calling thread,
/// in the order of `paths`, as soon as its batch of [`BATCH`] files and every one before
/// it are read: the caller works on the first files (applies them, translates them)
/// while the rest are being read. Fewer than [`PARALLEL_MIN_FILES`] paths, or no
/// threads, are read on the calling thread.
pub(crate) fn read_files_in_order<P>(
    paths: &[P],
    known: &[Option<u64>],
    threads: usize,
    nice: i32,
    mut each: impl FnMut(usize, FileRead),
) where
    P: AsRef<Path> + Sync,
{
    debug_assert_eq!(paths.len(), known.len());
    if paths.len() < PARALLEL_MIN_FILES || threads == 0 {
        let mut reader = Reader::default();
        for (i, p) in paths.iter().enumerate() {
            each(i, read_file(&mut reader, p.as_ref(), known[i]));
        }
        return;
    }
    // Work is handed out [`BATCH`] files at a time, in order, so that a few large files do
    // not leave the other threads idle and results arrive nearly in order; a batch's
    // results go to the calling thread in one message.
    let next = AtomicUsize::new(0);
    // Files read so far: a batch takes [`BATCH`] files' time, so a wait of `STALL` for one
    // is a stall only if no file was read meanwhile either.
    let files_read = AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Vec<FileRead>)>();
    std::thread::scope(|s| {
        let reader = |tx: std::sync::mpsc::Sender<(usize, Vec<FileRead>)>| {
            let next = &next;
            let files_read = &files_read;
            move || {
                lower_priority(nice);
                let mut reader = Reader::default();
                loop {
                    let start = next.fetch_add(BATCH, Ordering::Relaxed);
                    if start >= paths.len() {
                        break;
                    }
                    let end = (start + BATCH).min(paths.len());
                    reader.read_ahead(&paths[start..end]);
                    let reads = (start..end)
                        .map(|i| {
                            let read = read_file(&mut reader, paths[i].as_ref(), known[i]);
                            files_read.fetch_add(1, Ordering::Relaxed);
                            read
                        })
                        .collect();
                    if tx.send((start, reads)).is_err() {
                        break;
                    }
                }
            }
        };
        for _ in 0..threads {
            s.spawn(reader(tx.clone()));
        }
        let mut spawned = threads;
        // Kept while more readers may be started; without it the channel closes once the
        // readers have stopped.
        let mut tx = Some(tx);
        let mut disk = DiskReads::start();
        let mut files_seen = 0;
        // Batches that arrived before one they follow (a few: each thread holds one).
        let mut early: HashMap<usize, Vec<FileRead>> = HashMap::new();
        let mut want = 0;
        let mut deliver = |start: usize, reads: Vec<FileRead>, want: &mut usize| {
            *want = start + reads.len();
            for (i, read) in (start..).zip(reads) {
                each(i, read);
            }
        };
        while want < paths.len() {
            let (start, reads) = match rx.recv_timeout(STALL) {
                Ok(r) => r,
                Err(RecvTimeoutError::Timeout) => {
                    let now = files_read.load(Ordering::Relaxed);
                    if now != files_seen {
                        // Files were read: a batch is on its way.
                        files_seen = now;
                        continue;
                    }
                    // Nothing read for a while: the readers wait on the disk (a cold page
                    // cache), and one more reader keeps one more read in flight; or they
                    // wait for a core (readers below the caller's priority, behind a
                    // busy translation), and one more would only wait too.
                    match &tx {
                        Some(sender)
                            if spawned < MAX_IO_THREADS
                                && next.load(Ordering::Relaxed) < paths.len() =>
                        {
                            if disk.waited() {
                                s.spawn(reader(sender.clone()));
                                spawned += 1;
                            }
                        }
                        _ => tx = None,
                    }
                    continue;
                }
                // Every reader has stopped.
                Err(RecvTimeoutError::Disconnected) => break,
            };
            if start != want {
                early.insert(start, reads);
                continue;
            }
            deliver(start, reads, &mut want);
            while let Some(reads) = early.remove(&want) {
                deliver(want, reads, &mut want);
            }
        }
        drop(tx);
        tracing::debug!(files = paths.len(), readers = spawned, "files read");
        // A thread that panicked (a bug, not an input error) took its batch with it.
        while want < paths.len() {
            let reads = early.remove(&want).unwrap_or_else(|| {
                let end = (want + BATCH).min(paths.len());
                (want..end)
                    .map(|_| FileRead::Unreadable(io::Error::other("reader thread failed")))
                    .collect()
            });
            deliver(want, reads, &mut want);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Split at the last `/` as `Path::parent` and `Path::file_name` split a path whose
    /// last component is a plain name; anything else is opened whole.
    #[test]
    fn dir_and_name_splits_as_path_does() {
        for p in [
            "/a/b.yaml",
            "/a/b/c.yml",
            "a/b",
            "./a/b.yaml",
            "/a b/\u{e9}.yaml",
            "/a/.b",
        ] {
            let path = Path::new(p);
            assert_eq!(
                dir_and_name(path),
                Some((path.parent().unwrap(), path.file_name().unwrap())),
                "{p}"
            );
        }
        for p in ["b.yaml", "/b.yaml", "/a/", "/a/.", "/a/..", "", "/"] {
            assert_eq!(dir_and_name(Path::new(p)), None, "{p}");
        }
        // Not the same bytes as `parent`, the same directory.
        assert_eq!(
            dir_and_name(Path::new("/a//b.yaml")),
            Some((Path::new("/a/"), OsStr::new("b.yaml")))
        );
    }

    /// This thread's nice value, from /proc (field 19 of its stat line).
    #[cfg(target_os = "linux")]
    fn own_nice() -> i32 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        // The command name (field 2) may hold spaces: count from the closing parenthesis.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        rest.split(' ').nth(16).unwrap().parse().unwrap()
    }

    /// With nothing read from the disk between two looks, readers that wait are not
    /// waiting on it (and no reader is added).
    #[cfg(target_os = "linux")]
    #[test]
    fn no_storage_reads_means_no_disk_wait() {
        if !Path::new("/proc/self/io").exists() {
            return; // a kernel without I/O accounting: every look says yes
        }
        assert!(
            storage_read_bytes().is_some(),
            "read_bytes of /proc/self/io"
        );
        // Reads of the page cache or of /proc fetch nothing from storage. Other tests of
        // this process may read a cold file meanwhile: one quiet pair of looks is enough.
        let quiet = (0..100).any(|_| {
            let mut disk = DiskReads::start();
            let _ = std::fs::read_to_string("/proc/self/status");
            !disk.waited()
        });
        assert!(quiet, "every look saw storage reads");
        assert!(
            DiskReads { last: None }.waited(),
            "unknown counts as a wait"
        );
    }

    /// A reader lowers its own priority only, by the levels asked.
    #[cfg(target_os = "linux")]
    #[test]
    fn lower_priority_is_per_thread() {
        let before = own_nice();
        let lowered = std::thread::spawn(|| {
            lower_priority(3);
            own_nice()
        })
        .join()
        .unwrap();
        assert_eq!(lowered, (before + 3).min(19));
        assert_eq!(own_nice(), before, "the calling thread keeps its priority");
        let kept = std::thread::spawn(|| {
            lower_priority(0);
            own_nice()
        })
        .join()
        .unwrap();
        assert_eq!(kept, before);
    }

    #[test]
    fn manifest_names() {
        for (n, ok) in [
            ("a.yaml", true),
            ("a.YML", true),
            ("a.yml", true),
            (".a.yaml", false),
            ("a.yaml.swp", false),
            ("a.json", false),
            ("yaml", false),
            ("..data", false),
        ] {
            assert_eq!(is_manifest_name(OsStr::new(n)), ok, "{n}");
        }
    }

    #[test]
    fn parallel_read_keeps_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut paths = Vec::new();
        for i in 0..(PARALLEL_MIN_FILES * 2) {
            let p = dir.path().join(format!("f{i}.yaml"));
            std::fs::write(
                &p,
                format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: n{i}}}\n"),
            )
            .unwrap();
            paths.push(p);
        }
        paths.push(dir.path().join("missing.yaml"));
        let reads = read_files(&paths, |_| None);
        assert_eq!(reads.len(), paths.len());
        for (i, r) in reads.iter().enumerate().take(PARALLEL_MIN_FILES * 2) {
            let FileRead::Parsed { docs, .. } = r else {
                panic!("{r:?}")
            };
            assert_eq!(
                &*docs[0].result.as_ref().unwrap().metadata().name,
                format!("n{i}")
            );
        }
        assert!(matches!(reads.last(), Some(FileRead::Missing)));

        // Handed back in order, from one reader thread or several, whether the last
        // batch is whole (64 files) or not (129).
        let known = vec![None; paths.len()];
        for (threads, n) in [(1, paths.len()), (3, paths.len()), (3, PARALLEL_MIN_FILES)] {
            let paths = &paths[..n];
            let mut seen = Vec::new();
            read_files_in_order(paths, &known[..n], threads, 0, |i, r| {
                if let FileRead::Parsed { docs, .. } = r {
                    assert_eq!(
                        &*docs[0].result.as_ref().unwrap().metadata().name,
                        format!("n{i}")
                    );
                }
                seen.push(i);
            });
            assert_eq!(
                seen,
                (0..paths.len()).collect::<Vec<_>>(),
                "{threads} threads"
            );
        }
    }

    #[test]
    fn reader_reads_what_std_reads() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let mut reader = Reader::default();
        // Sizes around the buffer's, in two directories taken in turn (the directory
        // handle is replaced each time), the buffer growing and then holding a smaller
        // file.
        for len in [
            0,
            1,
            4095,
            4096,
            READ_BUF - 1,
            READ_BUF,
            READ_BUF + 1,
            100_000,
            7,
        ] {
            for d in [dir.path(), &sub] {
                let p = d.join(format!("f{len}"));
                let bytes: Vec<u8> = (0..len).map(|i| ((i + len) % 251) as u8).collect();
                std::fs::write(&p, &bytes).unwrap();
                assert_eq!(reader.read(&p).unwrap(), bytes, "{len} bytes in {d:?}");
            }
        }
        // A file whose size says 0 but that has bytes (procfs): read until the end.
        let cmdline = std::fs::read("/proc/self/cmdline").unwrap();
        assert!(!cmdline.is_empty());
        assert_eq!(
            reader.read(Path::new("/proc/self/cmdline")).unwrap(),
            cmdline
        );
        let missing = reader.read(&dir.path().join("missing")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        let no_dir = reader.read(&dir.path().join("nope/f")).unwrap_err();
        assert_eq!(no_dir.kind(), io::ErrorKind::NotFound);
        // A file replaced after its directory's handle was taken: the new one is read.
        let p = dir.path().join("f7");
        std::fs::write(dir.path().join("f7.new"), b"new").unwrap();
        std::fs::rename(dir.path().join("f7.new"), &p).unwrap();
        assert_eq!(reader.read(&p).unwrap(), b"new");
        // A relative path, and one with no directory part.
        let cwd = std::env::current_dir().unwrap();
        let rel = p.strip_prefix(&cwd).map(Path::to_path_buf);
        if let Ok(rel) = rel {
            assert_eq!(reader.read(&rel).unwrap(), b"new");
        }
        assert!(reader.read(Path::new("no-such-file-here.yaml")).is_err());
    }

    /// A FIFO with a manifest's name reads as empty: its reader is not stopped until
    /// something writes to it.
    #[test]
    fn a_fifo_does_not_block_its_reader() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.yaml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            return; // no mkfifo here
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let read = read_file(&mut Reader::default(), &path, None);
            let _ = tx.send(format!("{read:?}"));
        });
        let read = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the read of a FIFO returned");
        assert!(read.starts_with("Parsed"), "{read}");
    }
}
