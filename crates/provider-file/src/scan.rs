//! Finding manifest files under a directory and reading them (in parallel when there are
//! many).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::parse::{ParsedDoc, parse_file};

/// Below this many files, reading in parallel costs more than it saves.
const PARALLEL_MIN_FILES: usize = 64;
/// More threads than this do not help: reading is bounded by parsing on a few cores.
const MAX_THREADS: usize = 4;

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

/// Appends every manifest file under `dir` (recursively, skipping hidden entries, following
/// symlinks, each directory once) to `out`, in no particular order.
pub(crate) fn walk(dir: &Path, out: &mut Vec<PathBuf>, errors: &mut Vec<WalkError>) {
    let mut seen = HashSet::new();
    walk_dir(dir, out, errors, &mut seen);
}

fn walk_dir(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    errors: &mut Vec<WalkError>,
    seen: &mut HashSet<PathBuf>,
) {
    // Symlinked directories may form loops; visit each real directory once.
    if let Ok(real) = std::fs::canonicalize(dir)
        && !seen.insert(real)
    {
        return;
    }
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
            walk_dir(&entry.path(), out, errors, seen);
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

/// Reads and parses `path` unless its content hash equals `known`.
pub(crate) fn read_file(path: &Path, known: Option<u64>) -> FileRead {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return FileRead::Missing,
        Err(e) => return FileRead::Unreadable(e),
    };
    let hash = xxhash_rust::xxh3::xxh3_64(&bytes);
    if known == Some(hash) {
        return FileRead::Unchanged;
    }
    match parse_file(&bytes) {
        Ok(docs) => FileRead::Parsed { hash, docs },
        Err(message) => FileRead::Syntax { hash, message },
    }
}

/// Reads every path (see [`read_file`]), on several threads when there are many. The
/// results are in the order of `paths`.
pub(crate) fn read_files<P, F>(paths: &[P], known: F) -> Vec<FileRead>
where
    P: AsRef<Path> + Sync,
    F: Fn(&P) -> Option<u64> + Sync,
{
    if paths.len() < PARALLEL_MIN_FILES {
        return paths
            .iter()
            .map(|p| read_file(p.as_ref(), known(p)))
            .collect();
    }
    // Not cheap on Linux (it reads cgroup limits), hence only for large batches. Two
    // threads per core: reading a file also waits on open/read (and on the disk when the
    // page cache is cold), which the other thread of the core fills with parsing.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .saturating_mul(2)
        .min(MAX_THREADS);
    if threads < 2 {
        return paths
            .iter()
            .map(|p| read_file(p.as_ref(), known(p)))
            .collect();
    }
    // Work is handed out one file at a time so that a few large files do not leave the
    // other threads idle.
    let next = AtomicUsize::new(0);
    let mut slots: Vec<Option<FileRead>> =
        std::iter::repeat_with(|| None).take(paths.len()).collect();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(path) = paths.get(i) else { break };
                        mine.push((i, read_file(path.as_ref(), known(path))));
                    }
                    mine
                })
            })
            .collect();
        for worker in workers {
            // A worker that panicked (a bug, not an input error) leaves its files unread;
            // they are reported as unreadable below.
            if let Ok(mine) = worker.join() {
                for (i, r) in mine {
                    slots[i] = Some(r);
                }
            }
        }
    });
    slots
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| FileRead::Unreadable(io::Error::other("reader thread failed")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
