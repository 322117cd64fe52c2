//! [`FileKey`]: a file's path as a table key, in `Path` order at the cost of a byte
//! comparison.
//!
//! `Path`'s `Ord` parses both paths into components at every comparison (~600
//! instructions for the paths of a config directory). The provider sorts every file it
//! reads and keeps them in a path-ordered map, so at 20,000 files that was most of its
//! main-thread time. For an absolute path with no empty, `.` or `..` component (every
//! path a directory walk produces), component order is byte order with `/` ranked below
//! every other byte; a [`FileKey`] remembers whether its path is of that form and
//! compares two such paths as bytes, anything else as `Path` does.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A path ordered and compared exactly as [`Path`] (so a map keyed by it can also be
/// searched by `&Path`), quickly when both paths are clean. The path is shared: the
/// origin of every object read from the file holds the same one.
#[derive(Clone, Debug)]
pub(crate) struct FileKey {
    path: Arc<Path>,
    /// Absolute, with no empty, `.` or `..` component and no trailing `/`.
    clean: bool,
}

impl FileKey {
    pub(crate) fn new(path: PathBuf) -> Self {
        let clean = is_clean(path.as_os_str().as_encoded_bytes());
        FileKey {
            path: path.into(),
            clean,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The path, shared.
    pub(crate) fn shared(&self) -> &Arc<Path> {
        &self.path
    }

    pub(crate) fn into_path(self) -> PathBuf {
        self.path.to_path_buf()
    }
}

/// Whether `p` is `/` followed by components separated by single `/`, none of them `.`
/// or `..`: then its `Path` components are the root and the byte runs between slashes.
fn is_clean(p: &[u8]) -> bool {
    let Some(rest) = p.strip_prefix(b"/") else {
        return false;
    };
    !rest.is_empty()
        && rest
            .split(|b| *b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b"..")
}

/// Byte order with `/` below every other byte: for clean paths, the order of their
/// component lists (a component that is a prefix of another sorts first, and so does a
/// path that is a prefix of another by components).
fn cmp_clean(a: &[u8], b: &[u8]) -> Ordering {
    let rank = |x: u8| if x == b'/' { 0 } else { u16::from(x) + 1 };
    match mismatch(a, b) {
        Some(i) => rank(a[i]).cmp(&rank(b[i])),
        None => a.len().cmp(&b.len()),
    }
}

/// The first index where `a` and `b` differ, within the shorter. Eight bytes at a time:
/// the paths of one directory share a long prefix (the directory's path), which a byte
/// loop walked at every comparison of the sort and of the file table (1,000,000 files
/// at 1,000,000 TLS domains).
fn mismatch(a: &[u8], b: &[u8]) -> Option<usize> {
    let n = a.len().min(b.len());
    let (mut ca, mut cb) = (a[..n].chunks_exact(8), b[..n].chunks_exact(8));
    let mut at = 0;
    for (x, y) in (&mut ca).zip(&mut cb) {
        let x = u64::from_le_bytes(x.try_into().expect("8 bytes"));
        let y = u64::from_le_bytes(y.try_into().expect("8 bytes"));
        if x != y {
            // Little-endian: the lowest set bit of the difference is in the first byte
            // that differs.
            return Some(at + (x ^ y).trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    ca.remainder()
        .iter()
        .zip(cb.remainder())
        .position(|(x, y)| x != y)
        .map(|i| at + i)
}

/// Sorts `keys` in `Path` order and removes repeats. When every key is clean (as a
/// directory walk's paths are) the prefix they all share — the configuration
/// directory's path — is compared once, not at every comparison: at the first load of
/// 1,000,000 files the sort ran alone on the load's path, before any file was read,
/// and took about 0.6 s (BENCHMARKS.md, "Session 45"). Equal keys are the same path,
/// so an unstable sort does.
pub(crate) fn sort_and_dedup(keys: &mut Vec<FileKey>) {
    fn bytes(k: &FileKey) -> &[u8] {
        k.path.as_os_str().as_encoded_bytes()
    }
    if keys.iter().all(|k| k.clean) {
        let shared = match keys.split_first() {
            Some((first, rest)) => rest.iter().fold(bytes(first).len(), |len, k| {
                mismatch(&bytes(first)[..len], bytes(k)).unwrap_or(len.min(bytes(k).len()))
            }),
            None => 0,
        };
        sort_clean(keys, shared);
    } else {
        keys.sort_unstable();
    }
    keys.dedup();
}

/// Sorts clean `keys` that share their first `shared` bytes. Each key is first given
/// an integer: the next eight bytes, each mapped to a byte that orders as [`cmp_clean`]
/// ranks it, zero past the end. The pairs (integer, position) are sorted without
/// following a key's pointer, and only keys whose integers are equal are compared in
/// full; then the keys are moved into that order. Sorting the keys themselves followed
/// two pointers into 1,000,000 scattered paths at every comparison: 0.3 s of the first
/// load at 1,000,000 files, before any file could be read (BENCHMARKS.md, "Session 49").
fn sort_clean(keys: &mut Vec<FileKey>, shared: usize) {
    fn bytes(k: &FileKey) -> &[u8] {
        k.path.as_os_str().as_encoded_bytes()
    }
    // `/` lowest, the bytes below it one up (a path holds no NUL, and `/` itself only
    // as `/`), the rest as they are: a byte order that is `cmp_clean`'s rank order.
    fn order_byte(x: u8) -> u8 {
        match x {
            b'/' => 0,
            x if x < b'/' => x + 1,
            x => x,
        }
    }
    let Ok(len) = u32::try_from(keys.len()) else {
        keys.sort_unstable_by(|a, b| cmp_clean(&bytes(a)[shared..], &bytes(b)[shared..]));
        return;
    };
    let mut order: Vec<(u64, u32)> = keys
        .iter()
        .zip(0..len)
        .map(|(k, i)| {
            let rest = &bytes(k)[shared..];
            let mut key = [0u8; 8];
            for (to, from) in key.iter_mut().zip(rest) {
                *to = order_byte(*from);
            }
            (u64::from_be_bytes(key), i)
        })
        .collect();
    // A shorter integer is a key that ended (zero) where the other has a byte, or a lower
    // byte: either way the key sorts first. Equal integers need the whole keys.
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0).then_with(|| {
            cmp_clean(
                &bytes(&keys[a.1 as usize])[shared..],
                &bytes(&keys[b.1 as usize])[shared..],
            )
        })
    });
    let mut slots: Vec<Option<FileKey>> = std::mem::take(keys).into_iter().map(Some).collect();
    keys.extend(
        order
            .iter()
            .map(|&(_, i)| slots[i as usize].take().expect("each position once")),
    );
}

impl Ord for FileKey {
    fn cmp(&self, other: &Self) -> Ordering {
        if self.clean && other.clean {
            cmp_clean(
                self.path.as_os_str().as_encoded_bytes(),
                other.path.as_os_str().as_encoded_bytes(),
            )
        } else {
            self.path.cmp(&other.path)
        }
    }
}

impl PartialOrd for FileKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for FileKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for FileKey {}

impl Borrow<Path> for FileKey {
    fn borrow(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for FileKey {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mismatch_finds_the_first_differing_byte() {
        let a = b"0123456789abcdefghij";
        for len in 0..=a.len() {
            assert_eq!(mismatch(&a[..len], a), None, "a prefix");
            for at in 0..len {
                let mut b = a[..len].to_vec();
                b[at] ^= 0x20;
                assert_eq!(mismatch(a, &b), Some(at), "{len} {at}");
            }
        }
    }

    #[test]
    fn orders_as_path() {
        let names = [
            "/",
            "/a",
            "/a/",
            "/a/b",
            "/a//b",
            "/a/./b",
            "/a/../b",
            "/a-b",
            "/a-b/c",
            "/a.b",
            "/a/b.yaml",
            "/a/b/c",
            "/ab",
            "/a b",
            "/a\tb",
            "/b",
            "/.",
            "/..",
            "a",
            "a/b",
            "./a",
            "/a/b-c",
            "/a/b/",
            "/A",
            "/a/\u{e9}",
            "/a/z",
            "/a0",
            "/a/b/c/d.yml",
            "/x/./",
            // Past the first eight bytes, as a configuration directory's files are.
            "/work/cfg/d1.yaml",
            "/work/cfg/d10.yaml",
            "/work/cfg/d1/x.yaml",
            "/work/cfg/d1-x.yaml",
            "/work/cfg/d2.yaml",
            "/work/cfg.d/a.yaml",
            "/work/cfgd/a.yaml",
            "/work/cfg/sub/very-long-name-of-a-file.yaml",
            "/work/cfg/sub/very-long-name-of-a-file.yml",
            "/work/cfg/sub/very-long-name-of-a-file",
            "/work/cfg/sub/very-long-name/of-a-file.yaml",
        ];
        for x in names {
            for y in names {
                let (kx, ky) = (FileKey::new(x.into()), FileKey::new(y.into()));
                assert_eq!(kx.cmp(&ky), Path::new(x).cmp(Path::new(y)), "{x:?} {y:?}");
                assert_eq!(kx == ky, Path::new(x) == Path::new(y), "{x:?} {y:?}");
            }
        }
        // Every subset's sort, by the shared-prefix path and by the general one (a
        // subset with a key that is not clean), is the paths' sort.
        let clean: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| FileKey::new(n.into()).clean)
            .collect();
        for set in [&clean[..], &names[..]] {
            for skip in 0..set.len() {
                for take in 0..=set.len() {
                    // Rotated, repeated in part, so that input order and repeats vary.
                    let picked: Vec<&str> = set
                        .iter()
                        .cycle()
                        .skip(skip)
                        .take(take + take / 3)
                        .copied()
                        .collect();
                    let mut keys: Vec<FileKey> =
                        picked.iter().map(|n| FileKey::new(n.into())).collect();
                    sort_and_dedup(&mut keys);
                    let mut want: Vec<&Path> = picked.iter().map(Path::new).collect();
                    want.sort();
                    want.dedup();
                    let got: Vec<&Path> = keys.iter().map(FileKey::path).collect();
                    assert_eq!(got, want, "{picked:?}");
                }
            }
        }
        assert!(FileKey::new("/work/cfg/d1.yaml".into()).clean);
        assert!(!FileKey::new("/work//cfg".into()).clean);
        assert!(!FileKey::new("/work/cfg/".into()).clean);
        assert!(!FileKey::new("work/cfg".into()).clean);
    }

    /// Many clean paths under one directory, whose first eight bytes past the shared
    /// prefix often tie (long names, names that are prefixes of others, `/` and bytes
    /// below it there, bytes beyond ASCII), sorted by `sort_and_dedup` as `Path` sorts.
    #[test]
    fn sorts_many_clean_paths_as_path() {
        let parts = [
            "d",
            "d1",
            "d10",
            "d1-",
            "d1.",
            "d1/",
            "d1 x",
            "d1\u{e9}",
            "dd",
            "-",
            ".",
            "x",
            "longname",
            "longname-",
            "longname/",
            "longname.yaml",
            "longnamf",
            "\u{ff}",
        ];
        let mut names = Vec::new();
        let mut seed = 7u64;
        for _ in 0..3000 {
            let mut name = String::from("/srv/cfg/");
            for _ in 0..1 + seed % 4 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                name.push_str(parts[(seed >> 33) as usize % parts.len()]);
            }
            // Only clean paths take this sort (not `/./`, `//` or a trailing `/`).
            if FileKey::new(name.clone().into()).clean {
                names.push(name);
            }
        }
        let mut keys: Vec<FileKey> = names.iter().map(|n| FileKey::new(n.into())).collect();
        sort_and_dedup(&mut keys);
        let mut want: Vec<&Path> = names.iter().map(Path::new).collect();
        want.sort();
        want.dedup();
        let got: Vec<&Path> = keys.iter().map(FileKey::path).collect();
        assert_eq!(got, want);
        assert!(want.len() > 500, "{}", want.len());
    }

    /// A search of a table of files by `FileKey` finds what a search by `&Path` finds, at
    /// and past the key, for names that are prefixes of others and paths below others.
    #[test]
    fn a_table_searched_by_key_or_by_path_agrees() {
        use std::collections::BTreeMap;
        use std::ops::Bound;
        let names = [
            "/c/d1.yaml",
            "/c/d10.yaml",
            "/c/d1",
            "/c/d1/x.yaml",
            "/c/d1-x.yaml",
            "/c/e.yaml",
            "/c/d",
            "/c/d1.yaml/y.yaml",
        ];
        let table: BTreeMap<FileKey, usize> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (FileKey::new(n.into()), i))
            .collect();
        for probe in names
            .iter()
            .chain(&["/c", "/c/d0", "/c/d2.yaml", "/b", "/d"])
        {
            let by_path: Vec<usize> = table
                .range::<Path, _>((Bound::Included(Path::new(probe)), Bound::Unbounded))
                .map(|(_, i)| *i)
                .collect();
            let by_key: Vec<usize> = table
                .range((
                    Bound::Included(FileKey::new(probe.into())),
                    Bound::Unbounded,
                ))
                .map(|(_, i)| *i)
                .collect();
            assert_eq!(by_key, by_path, "{probe}");
            assert_eq!(
                table.get(&FileKey::new(probe.into())),
                table.get(Path::new(probe)),
                "{probe}"
            );
        }
    }

    /// The provider's file table at 1,000,000 files: a search by `&Path` against one by a
    /// `FileKey` made for it (its allocation included). A timing run by hand:
    /// `cargo test --release -p weir-provider-file --lib lookups_at_a_million -- --ignored
    /// --nocapture`; it checks that both find every file.
    #[test]
    #[ignore]
    fn lookups_at_a_million_files() {
        use std::collections::BTreeMap;
        use std::ops::Bound;
        use std::time::Instant;
        let dir = "/root/weir/target/weir-bench/work/propagation-Xq3kPz";
        let n = 1_000_000u64;
        let table: BTreeMap<FileKey, u64> = (0..n)
            .map(|i| (FileKey::new(format!("{dir}/d{i}.yaml").into()), i))
            .collect();
        let probes: Vec<PathBuf> = (0..200_000u64)
            .map(|j| {
                let i = j.wrapping_mul(2_654_435_761) % n;
                PathBuf::from(format!("{dir}/d{i}.yaml"))
            })
            .collect();
        for round in 0..3 {
            let t = Instant::now();
            let mut found = 0u64;
            for p in &probes {
                let hit = table
                    .range::<Path, _>((Bound::Included(p.as_path()), Bound::Unbounded))
                    .next();
                found += u64::from(hit.is_some_and(|(k, _)| k.path() == p));
            }
            let by_path = t.elapsed();
            assert_eq!(found, probes.len() as u64);
            let t = Instant::now();
            let mut found = 0u64;
            for p in &probes {
                let from = FileKey::new(p.clone());
                let hit = table
                    .range((Bound::Included(from), Bound::Unbounded))
                    .next();
                found += u64::from(hit.is_some_and(|(k, _)| k.path() == p));
            }
            let by_key = t.elapsed();
            assert_eq!(found, probes.len() as u64);
            let per = |d: std::time::Duration| d.as_nanos() as f64 / probes.len() as f64;
            println!(
                "round {round}: by &Path {:.0} ns, by FileKey {:.0} ns per search ({} files)",
                per(by_path),
                per(by_key),
                n
            );
        }
    }
}
