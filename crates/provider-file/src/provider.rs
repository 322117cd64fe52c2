//! [`FileProvider`]: what every file defines, and the object-level difference of each
//! (re)read.

use std::collections::{BTreeMap, BTreeSet, hash_map};

use foldhash::HashSet;
use std::ffi::OsStr;
use std::io;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use weir_api::{InvalidObject, Object, ObjectKey};

use crate::file_key::FileKey;
use crate::parse::{DocError, ParsedDoc};
use crate::scan::{self, FileRead, Listing, WalkError};
use crate::{FileError, FileErrorKind, Origin, Progress, Update};

/// Name of the symlink Kubernetes swaps atomically when it updates a mounted Secret or
/// ConfigMap; the visible files are symlinks through it.
const K8S_DATA_LINK: &str = "..data";

/// Reads Kubernetes-style YAML manifests under a path (a file, or a directory read
/// recursively) and keeps, per object key, every definition found, so that it can report
/// exactly what changed when files change.
///
/// Rules:
/// - Directories are read recursively; only `*.yaml` / `*.yml` files are read; hidden
///   entries (starting with `.`) are skipped; symlinks are followed, which covers the
///   `..data` layout of mounted Secrets and ConfigMaps. A single-file root is read
///   whatever its name.
/// - The same key defined twice: the definition first in path order (then document
///   order) wins; the others are reported as duplicates and take over if it goes away.
/// - A file that becomes unreadable or invalid YAML keeps its previous objects. A
///   document that is not a valid object keeps that object's previous version when its
///   kind, namespace and name can be read. Either way an error is reported.
#[derive(Debug)]
pub struct FileProvider {
    root: PathBuf,
    /// Every file read at least once, in path order (also searchable by `&Path`).
    files: BTreeMap<FileKey, FileState>,
    /// During a first load (an empty file table), the files read so far, in path order:
    /// the table is built from them at the end in one pass. Inserted one at a time, each
    /// file walked the B-tree's rightmost path comparing paths (0.3 s of the loading
    /// thread at 1,000,000 files; BENCHMARKS.md, "Session 49").
    appending: Option<Vec<(FileKey, FileState)>>,
    /// Every definition of every key, sorted by (file, position in file); the first wins.
    defs: DenseMap<ObjectKey, Defs>,
    /// Counts operations; a definition remembers the one that (re)read it.
    generation: u32,
}

#[derive(Debug, Default)]
struct FileState {
    /// Content hash of the bytes last parsed (valid or not).
    hash: Option<u64>,
    /// The keys this file currently defines (each once). A boxed slice: 8 bytes less
    /// than a `Vec` in every entry of the file table (1,000,000 files at 1,000,000 TLS
    /// domains, a B-tree node of 640 bytes instead of 768 per 6–11 files).
    keys: Box<[ObjectKey]>,
}

#[derive(Debug)]
struct Def {
    origin: Origin,
    /// Position among the file's objects (a `List` document holds several).
    seq: u32,
    /// The operation that last read this definition from its file (the provider's
    /// counter, wrapping: only compared for equality with the current one).
    generation: u32,
    object: Arc<Object>,
}

impl Def {
    fn sort_key(&self) -> (&Path, u32) {
        (&self.origin.file, self.seq)
    }
}

/// Every definition of one key, sorted by (file, position in file); the first wins.
///
/// Nearly every key has one definition, held inline: as a `Vec` it was a heap block of
/// its own per object (at 1,000,000 TLS domains, 2,000,000 blocks of 48 bytes).
#[derive(Debug)]
enum Defs {
    One(Def),
    /// None (while the operation that removed the last one finishes) or several.
    Many(Vec<Def>),
}

impl Defs {
    fn as_slice(&self) -> &[Def] {
        match self {
            Defs::One(d) => std::slice::from_ref(d),
            Defs::Many(v) => v,
        }
    }

    fn first(&self) -> Option<&Def> {
        self.as_slice().first()
    }

    /// Adds `def` at its place in (file, position) order.
    fn insert(&mut self, def: Def) {
        match self {
            Defs::Many(v) if v.is_empty() => *self = Defs::One(def),
            Defs::Many(v) => {
                let at = v.partition_point(|d| d.sort_key() < def.sort_key());
                v.insert(at, def);
            }
            Defs::One(_) => {
                let Defs::One(first) = std::mem::replace(self, Defs::Many(Vec::new())) else {
                    unreachable!("matched One")
                };
                let v = if first.sort_key() < def.sort_key() {
                    vec![first, def]
                } else {
                    vec![def, first]
                };
                *self = Defs::Many(v);
            }
        }
    }

    /// Keeps the definitions `keep` accepts.
    fn retain(&mut self, keep: impl Fn(&Def) -> bool) {
        match self {
            Defs::One(d) => {
                if !keep(d) {
                    *self = Defs::Many(Vec::new());
                }
            }
            Defs::Many(v) => {
                v.retain(keep);
                if v.len() == 1 {
                    let one = v.pop().expect("one definition");
                    *self = Defs::One(one);
                }
            }
        }
    }
}

/// A map whose entries sit side by side in one vector, found through a table of
/// indexes: at 1,000,000 TLS domains (2,000,000 keys) a hash table of entries is 48 %
/// full, and each empty slot would be as large as a [`Defs`].
type DenseMap<K, V> = indexmap::IndexMap<K, V, foldhash::fast::RandomState>;

/// A key's winning definition before the current operation touched it.
struct Before {
    file: Arc<Path>,
    seq: u32,
    object: Arc<Object>,
}

/// The bookkeeping of one `load_all` / `reload`.
#[derive(Default)]
struct Tx {
    /// Hashed, and put in key order once at [`FileProvider::finish`]: a B-tree compared
    /// key strings at every first touch (4 % of a large first load's instructions).
    before: foldhash::HashMap<ObjectKey, Option<Before>>,
    errors: Vec<FileError>,
}

impl FileProvider {
    /// A provider for `path` (a file or a directory). Nothing is read until
    /// [`load_all`](Self::load_all). A relative path is made absolute against the current
    /// directory, so that it matches the paths [`crate::watch`] reports.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let root = std::path::absolute(&path).unwrap_or(path);
        FileProvider {
            root,
            files: BTreeMap::new(),
            appending: None,
            defs: DenseMap::default(),
            generation: 0,
        }
    }

    /// The path read (absolute).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the current definition of `key` was read from.
    pub fn origin(&self, key: &ObjectKey) -> Option<&Origin> {
        self.winner(key).map(|d| &d.origin)
    }

    /// The current object with this key.
    pub fn get(&self, key: &ObjectKey) -> Option<&Arc<Object>> {
        self.winner(key).map(|d| &d.object)
    }

    /// Every current object, in no particular order.
    pub fn objects(&self) -> impl Iterator<Item = &Arc<Object>> {
        self.defs
            .values()
            .filter_map(Defs::first)
            .map(|d| &d.object)
    }

    /// The number of current objects.
    pub fn len(&self) -> usize {
        self.defs.len()
    }

    /// True when no object is defined.
    pub fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }

    /// Reads every manifest under the root (files whose bytes are unchanged since the
    /// last read are not parsed again) and returns the difference against what was known:
    /// on the first call, every object as an upsert.
    pub fn load_all(&mut self) -> Update {
        let mut tx = self.begin();
        self.refresh_root(&mut tx);
        self.finish(tx)
    }

    /// [`load_all`](Self::load_all) for a first read that is translated while it is read:
    /// files are read and parsed on other threads, and `each` is called on this thread
    /// with the difference of every `part` files read so far (in path order), then with
    /// the rest. Together the updates hold what `load_all` returns: an object defined in
    /// two files is upserted once, as the first file in path order (the first read)
    /// defines it, and the other definition is reported as a duplicate in its part.
    /// `each` also learns how far the read is (for estimates of the whole).
    pub fn load_all_in_parts(
        &mut self,
        part: usize,
        listing: Option<Listing>,
        mut each: impl FnMut(Update, Progress),
    ) {
        let root_is_dir = std::fs::metadata(&self.root).is_ok_and(|m| m.is_dir());
        if !root_is_dir {
            let update = self.load_all();
            each(update, Progress { read: 1, files: 1 });
            return;
        }
        let part = part.max(1);
        let mut tx = self.begin();
        let root = self.root.clone();
        let paths = match listing.filter(|l| l.root == root) {
            Some(listing) => self.listed(&root, listing.files, listing.errors, &mut tx),
            None => self.list(std::slice::from_ref(&root), Vec::new(), &mut tx),
        };
        let known: Vec<Option<u64>> = paths
            .iter()
            .map(|p| self.files.get(p).and_then(|f| f.hash))
            .collect();
        let files = paths.len();
        if self.defs.is_empty() {
            // A first load: room for two objects a file (a TLS Secret and what uses it),
            // so that the table of 2,000,000 keys at 1,000,000 TLS domains is not copied
            // into fresh pages at every doubling. Room never used costs the table's
            // control bytes (one a slot); its entries' pages are never touched.
            self.defs.reserve(files.saturating_mul(2));
        }
        // One reader per core but one: this thread's work (applying, and the caller's
        // translation) is the longer, and a third thread on two cores would slow it.
        // More readers are started when reads stall on the disk (`read_files_in_order`).
        let threads = if files < scan::PARALLEL_MIN_FILES {
            0
        } else {
            (scan::cores() - 1).clamp(1, scan::MAX_THREADS)
        };
        let nice = scan::FIRST_LOAD_READER_NICE;
        // Every path is new and comes once, in order (sorted, without repeats).
        if self.files.is_empty() {
            self.appending = Some(Vec::with_capacity(files));
        }
        scan::read_files_in_order(&paths, &known, threads, nice, |i, read| {
            self.apply_read(paths[i].clone(), read, &mut tx);
            let read = i + 1;
            if read % part == 0 && read < files {
                let done = std::mem::take(&mut tx);
                let update = self.finish(done);
                tx = self.begin();
                each(update, Progress { read, files });
            }
        });
        if let Some(appended) = self.appending.take() {
            debug_assert!(self.files.is_empty());
            debug_assert!(appended.is_sorted_by(|a, b| a.0 < b.0));
            self.files = appended.into_iter().collect();
        }
        let update = self.finish(tx);
        each(update, Progress { read: files, files });
    }

    /// Re-reads only `paths`: files created, changed or removed, or directories to rescan
    /// (as [`crate::watch`] reports them), and returns the difference against what they
    /// held before. Paths outside the root, hidden paths and non-manifest files are
    /// ignored, except a `..data` symlink, whose directory is rescanned. The cost is that
    /// of the files named (plus the listing of directories named), not of the whole tree.
    pub fn reload(&mut self, paths: &[PathBuf]) -> Update {
        let mut tx = self.begin();
        if paths.is_empty() {
            return self.finish(tx);
        }
        let root_is_dir = std::fs::metadata(&self.root).is_ok_and(|m| m.is_dir());
        if !root_is_dir {
            // A single-file root: whatever changed around it, re-read it (cheap when its
            // bytes are unchanged). Also covers a root directory that disappeared.
            self.refresh_root(&mut tx);
            return self.finish(tx);
        }
        let mut rescans = BTreeSet::new();
        let mut files = BTreeSet::new();
        let mut removed = BTreeSet::new();
        for path in paths {
            let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
            let Ok(rel) = path.strip_prefix(&self.root) else {
                continue;
            };
            let names: Vec<&OsStr> = rel.components().map(|c| c.as_os_str()).collect();
            let Some((last, parents)) = names.split_last() else {
                rescans.insert(self.root.clone());
                continue;
            };
            if parents.iter().any(|n| scan::is_hidden(n)) {
                continue;
            }
            if scan::is_hidden(last) {
                if *last == K8S_DATA_LINK
                    && let Some(dir) = path.parent()
                {
                    rescans.insert(dir.to_path_buf());
                }
                continue;
            }
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => {
                    rescans.insert(path);
                }
                Ok(_) => {
                    // A directory replaced by a file: what was read under it is gone.
                    self.remove_below(&path, &mut tx);
                    if scan::is_manifest_name(last) {
                        files.insert(path);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    removed.insert(path);
                }
                Err(_) => {
                    // Reading it reports the problem.
                    if scan::is_manifest_name(last) {
                        files.insert(path);
                    } else {
                        rescans.insert(path);
                    }
                }
            }
        }
        let covered =
            |p: &Path, dirs: &BTreeSet<PathBuf>| p.ancestors().skip(1).any(|a| dirs.contains(a));
        let dirs: Vec<PathBuf> = rescans
            .iter()
            .filter(|d| !covered(d, &rescans))
            .cloned()
            .collect();
        files.retain(|f| !covered(f, &rescans));
        for r in &removed {
            self.remove_under(r, &mut tx);
        }
        self.rescan(&dirs, files.into_iter().collect(), &mut tx);
        self.finish(tx)
    }

    fn begin(&mut self) -> Tx {
        self.generation = self.generation.wrapping_add(1);
        Tx::default()
    }

    fn winner(&self, key: &ObjectKey) -> Option<&Def> {
        self.defs.get(key).and_then(Defs::first)
    }

    fn refresh_root(&mut self, tx: &mut Tx) {
        let root = self.root.clone();
        match std::fs::metadata(&root) {
            Ok(m) if m.is_dir() => self.rescan(std::slice::from_ref(&root), Vec::new(), tx),
            Ok(_) => {
                // A single file. Anything known under it as a directory is gone.
                self.remove_below(&root, tx);
                self.read_and_apply(vec![FileKey::new(root)], tx);
            }
            Err(e) => {
                let missing = e.kind() == io::ErrorKind::NotFound;
                if missing {
                    self.remove_under(&root, tx);
                }
                tx.errors.push(FileError {
                    file: root,
                    document: None,
                    kind: FileErrorKind::Unreadable,
                    object: None,
                    message: if missing {
                        "does not exist".into()
                    } else {
                        format!("cannot read: {e}")
                    },
                });
            }
        }
    }

    /// Lists `dirs`, forgets the known files under them that are gone, and reads what is
    /// there together with `extra` files.
    fn rescan(&mut self, dirs: &[PathBuf], extra: Vec<PathBuf>, tx: &mut Tx) {
        let to_read = self.list(dirs, extra, tx);
        self.read_and_apply(to_read, tx);
    }

    /// Lists `dirs` and forgets the known files under them that are gone. Returns the
    /// files to read: those listed and `extra`, sorted.
    fn list(&mut self, dirs: &[PathBuf], extra: Vec<PathBuf>, tx: &mut Tx) -> Vec<FileKey> {
        let mut to_read = extra;
        for dir in dirs {
            let start = to_read.len();
            let mut walk_errors = Vec::new();
            scan::walk(dir, &mut to_read, &mut walk_errors);
            self.walked(dir, &to_read[start..], walk_errors, tx);
        }
        sorted_keys(to_read)
    }

    /// [`FileProvider::list`] of `dir` alone, from a listing made already (`files` and
    /// `walk_errors` as [`scan::walk`] gives them).
    fn listed(
        &mut self,
        dir: &Path,
        files: Vec<PathBuf>,
        walk_errors: Vec<WalkError>,
        tx: &mut Tx,
    ) -> Vec<FileKey> {
        self.walked(dir, &files, walk_errors, tx);
        sorted_keys(files)
    }

    /// What a listing of `dir` (`listed`, `walk_errors`) means for the files known under
    /// it: those no longer listed are removed, unless their directory could not be listed
    /// (an error each).
    fn walked(&mut self, dir: &Path, listed: &[PathBuf], walk_errors: Vec<WalkError>, tx: &mut Tx) {
        // Files under a directory that could not be listed are kept as they were,
        // unless the directory no longer exists.
        let unlisted: Vec<&WalkError> = walk_errors
            .iter()
            .filter(|e| e.error.kind() != io::ErrorKind::NotFound)
            .collect();
        // The files listed are looked up only when files were known there (not at
        // the first load: a set of 1,000,000 paths, each hashed by its components).
        let gone: Vec<PathBuf> = {
            let mut known = self.files_under(dir).peekable();
            if known.peek().is_none() {
                Vec::new()
            } else {
                let found: HashSet<&Path> = listed.iter().map(PathBuf::as_path).collect();
                known
                    .filter(|p| !found.contains(p.as_path()))
                    .filter(|p| !unlisted.iter().any(|e| p.starts_with(&e.dir)))
                    .collect()
            }
        };
        for e in unlisted {
            tx.errors.push(FileError {
                file: e.dir.clone(),
                document: None,
                kind: FileErrorKind::Unreadable,
                object: None,
                message: format!("cannot list directory: {}", e.error),
            });
        }
        for p in gone {
            self.remove_file(&p, tx);
        }
    }

    /// The known files at or below `prefix`. Every change of a file runs this once. The
    /// table is searched by a [`FileKey`], not by `&Path`: `Path`'s order parses both
    /// paths into components at each of the search's comparisons, a clean `FileKey`
    /// compares bytes (`file_key::tests::lookups_at_a_million_files` times both).
    fn files_under<'a>(&'a self, prefix: &'a Path) -> impl Iterator<Item = PathBuf> + 'a {
        let from = FileKey::new(prefix.to_path_buf());
        self.files
            .range((Bound::Included(from), Bound::Unbounded))
            .take_while(move |(p, _)| p.path().starts_with(prefix))
            .map(|(p, _)| p.path().to_path_buf())
    }

    fn read_and_apply(&mut self, paths: Vec<FileKey>, tx: &mut Tx) {
        let files = &self.files;
        let reads = scan::read_files(&paths, |p| files.get(p).and_then(|f| f.hash));
        for (path, read) in paths.into_iter().zip(reads) {
            self.apply_read(path, read, tx);
        }
    }

    fn apply_read(&mut self, path: FileKey, read: FileRead, tx: &mut Tx) {
        match read {
            FileRead::Unchanged => {}
            FileRead::Missing => self.remove_file(path.path(), tx),
            FileRead::Unreadable(e) => {
                let message = format!("cannot read: {e}{}", self.keeping(path.path()));
                tx.errors.push(FileError {
                    file: path.into_path(),
                    document: None,
                    kind: FileErrorKind::Unreadable,
                    object: None,
                    message,
                });
            }
            FileRead::Syntax { hash, message } => {
                let message = format!("{message}{}", self.keeping(path.path()));
                let state = FileState {
                    hash: Some(hash),
                    keys: Box::default(),
                };
                match &mut self.appending {
                    Some(appended) => appended.push((path.clone(), state)),
                    None => self.files.entry(path.clone()).or_default().hash = Some(hash),
                }
                tx.errors.push(FileError {
                    file: path.into_path(),
                    document: None,
                    kind: FileErrorKind::Syntax,
                    object: None,
                    message,
                });
            }
            FileRead::Parsed { hash, docs } => self.apply_docs(path, hash, docs, tx),
        }
    }

    fn keeping(&self, path: &Path) -> &'static str {
        if self.files.get(path).is_some_and(|f| !f.keys.is_empty()) {
            "; keeping its previous objects"
        } else {
            ""
        }
    }

    /// The key of the (single) object that document `index` of `path` defined last time.
    fn key_at(&self, path: &Path, index: usize) -> Option<ObjectKey> {
        let file = self.files.get(path)?;
        let mut at = file.keys.iter().filter(|k| {
            self.def_in(path, k)
                .is_some_and(|d| d.origin.document == index)
        });
        let key = at.next()?;
        // A `List` document defined several objects: none is kept by position.
        at.next().is_none().then(|| key.clone())
    }

    /// The definition `path` currently holds for `key`.
    fn def_in(&self, path: &Path, key: &ObjectKey) -> Option<&Def> {
        self.defs
            .get(key)?
            .as_slice()
            .iter()
            .find(|d| &*d.origin.file == path)
    }

    fn apply_docs(&mut self, file: FileKey, hash: u64, docs: Vec<ParsedDoc>, tx: &mut Tx) {
        let path = file.path();
        let mut new_defs: Vec<(ObjectKey, Def)> = Vec::with_capacity(docs.len());
        for (seq, doc) in (0u32..).zip(docs) {
            let origin = Origin {
                file: file.shared().clone(),
                document: doc.index,
            };
            match doc.result {
                Ok(object) => {
                    let key = object.key();
                    // Keep the previous Arc when nothing changed: cheap to compare later,
                    // and shared with whoever holds it.
                    let object = match self.def_in(path, &key) {
                        Some(prev) if *prev.object == object => prev.object.clone(),
                        _ => Arc::new(object),
                    };
                    new_defs.push((
                        key,
                        Def {
                            origin,
                            seq,
                            object,
                            generation: self.generation,
                        },
                    ));
                }
                Err(DocError { key, error }) => {
                    let kind = match error {
                        InvalidObject::UnsupportedKind { .. } => FileErrorKind::UnsupportedKind,
                        InvalidObject::Syntax(_) => FileErrorKind::Syntax,
                        _ => FileErrorKind::InvalidObject,
                    };
                    let mut message = error.to_string();
                    // A document that is not even YAML names no object: the one the file
                    // had at the same position keeps its previous version.
                    let key = key.or_else(|| {
                        matches!(error, InvalidObject::Syntax(_))
                            .then(|| self.key_at(path, doc.index))
                            .flatten()
                    });
                    let object = key.as_ref().map(ToString::to_string);
                    if let Some(key) = key
                        && let Some(prev) = self.def_in(path, &key)
                    {
                        message.push_str("; keeping its previous version");
                        let object = prev.object.clone();
                        new_defs.push((
                            key,
                            Def {
                                origin,
                                seq,
                                object,
                                generation: self.generation,
                            },
                        ));
                    }
                    tx.errors.push(FileError {
                        file: path.to_path_buf(),
                        document: Some(doc.index),
                        kind,
                        object,
                        message,
                    });
                }
            }
        }

        // A file past the last one known is new (every file of a first load, read in path
        // order): no search, where one walked the table's rightmost path comparing paths
        // (3 % of a large first load's instructions).
        let past_last = self.appending.is_some()
            || self
                .files
                .last_key_value()
                .is_none_or(|(last, _)| *last < file);
        let old_keys = if past_last {
            Vec::new()
        } else {
            self.files
                .get(&file)
                .map(|f| f.keys.to_vec())
                .unwrap_or_default()
        };
        for key in &old_keys {
            self.touch(key, tx);
            if let Some(v) = self.defs.get_mut(key) {
                v.retain(|d| &*d.origin.file != path);
            }
        }
        let mut keys = Vec::with_capacity(new_defs.len());
        for (key, def) in new_defs {
            self.touch(&key, tx);
            match self.defs.entry(key.clone()) {
                indexmap::map::Entry::Occupied(mut e) => e.get_mut().insert(def),
                indexmap::map::Entry::Vacant(e) => {
                    e.insert(Defs::One(def));
                }
            }
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        let state = FileState {
            hash: Some(hash),
            keys: keys.into_boxed_slice(),
        };
        match &mut self.appending {
            Some(appended) => appended.push((file, state)),
            None => {
                self.files.insert(file, state);
            }
        }
    }

    fn remove_under(&mut self, prefix: &Path, tx: &mut Tx) {
        let gone: Vec<PathBuf> = self.files_under(prefix).collect();
        for p in gone {
            self.remove_file(&p, tx);
        }
    }

    /// Forgets the files strictly below `dir` (not `dir` itself).
    fn remove_below(&mut self, dir: &Path, tx: &mut Tx) {
        let gone: Vec<PathBuf> = self.files_under(dir).filter(|p| p != dir).collect();
        for p in gone {
            self.remove_file(&p, tx);
        }
    }

    fn remove_file(&mut self, path: &Path, tx: &mut Tx) {
        // By a `FileKey`, as in `files_under`.
        let Some(state) = self.files.remove(&FileKey::new(path.to_path_buf())) else {
            return;
        };
        for key in &state.keys {
            self.touch(key, tx);
            if let Some(v) = self.defs.get_mut(key) {
                v.retain(|d| &*d.origin.file != path);
            }
        }
    }

    /// Records the key's winner before the operation changes it (first touch only).
    fn touch(&self, key: &ObjectKey, tx: &mut Tx) {
        // One search: cloning a key is two reference counts (its strings are the object's).
        if let hash_map::Entry::Vacant(slot) = tx.before.entry(key.clone()) {
            slot.insert(self.winner(key).map(|d| Before {
                file: d.origin.file.clone(),
                seq: d.seq,
                object: d.object.clone(),
            }));
        }
    }

    /// Compares every touched key's winner with the one before, and reports duplicates.
    fn finish(&mut self, tx: Tx) -> Update {
        let Tx { before, mut errors } = tx;
        let mut before: Vec<_> = before.into_iter().collect();
        // Keys are unique: the order is the same as a stable sort's.
        before.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut update = Update::default();
        for (key, before) in before {
            let defs = self.defs.get(&key).map(Defs::as_slice).unwrap_or_default();
            match (&before, defs.first()) {
                (Some(_), None) => update.deletes.push(key.clone()),
                (None, Some(now)) => update.upserts.push((key.clone(), now.object.clone())),
                (Some(b), Some(now)) => {
                    if !Arc::ptr_eq(&b.object, &now.object) && *b.object != *now.object {
                        update.upserts.push((key.clone(), now.object.clone()));
                    }
                }
                (None, None) => {}
            }
            if let Some((winner, losers)) = defs.split_first() {
                let winner_changed = before
                    .as_ref()
                    .is_none_or(|b| b.file != winner.origin.file || b.seq != winner.seq);
                for loser in losers {
                    if winner_changed || loser.generation == self.generation {
                        errors.push(FileError {
                            file: loser.origin.file.to_path_buf(),
                            document: Some(loser.origin.document),
                            kind: FileErrorKind::Duplicate,
                            object: Some(key.to_string()),
                            message: format!(
                                "duplicate of {key} defined in {}#{}; ignored",
                                winner.origin.file.display(),
                                winner.origin.document
                            ),
                        });
                    }
                }
            } else {
                self.defs.swap_remove(&key);
            }
        }
        update.errors = errors;
        update
    }
}

/// `paths` as table keys, sorted as paths at the cost of byte comparisons (see
/// `FileKey`), without repeats.
fn sorted_keys(paths: Vec<PathBuf>) -> Vec<FileKey> {
    let mut keys: Vec<FileKey> = paths.into_iter().map(FileKey::new).collect();
    crate::file_key::sort_and_dedup(&mut keys);
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(file: &str, seq: u32) -> Def {
        Def {
            origin: Origin {
                file: Arc::from(Path::new(file)),
                document: seq as usize,
            },
            seq,
            generation: 0,
            object: Arc::new(
                Object::from_value(serde_json::json!({
                    "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}
                }))
                .unwrap(),
            ),
        }
    }

    fn order(d: &Defs) -> Vec<(String, u32)> {
        d.as_slice()
            .iter()
            .map(|d| (d.origin.file.display().to_string(), d.seq))
            .collect()
    }

    #[test]
    fn definitions_stay_sorted_and_one_is_held_inline() {
        // A key's definitions: one inline, the entry no larger than one definition and
        // its tag.
        assert!(
            size_of::<Defs>() <= size_of::<Def>() + 8,
            "{}",
            size_of::<Defs>()
        );
        let mut d = Defs::One(def("/b", 0));
        d.insert(def("/a", 1));
        d.insert(def("/c", 0));
        d.insert(def("/a", 0));
        assert_eq!(
            order(&d),
            [
                ("/a".into(), 0),
                ("/a".into(), 1),
                ("/b".into(), 0),
                ("/c".into(), 0)
            ]
        );
        d.retain(|x| &*x.origin.file != Path::new("/a"));
        assert_eq!(order(&d), [("/b".into(), 0), ("/c".into(), 0)]);
        d.retain(|x| &*x.origin.file != Path::new("/b"));
        assert!(matches!(d, Defs::One(_)), "back to one, inline");
        assert_eq!(order(&d), [("/c".into(), 0)]);
        d.retain(|_| false);
        assert!(d.first().is_none());
        d.insert(def("/z", 3));
        assert!(matches!(d, Defs::One(_)));
        let mut e = Defs::One(def("/y", 0));
        e.insert(def("/x", 0));
        assert_eq!(order(&e), [("/x".into(), 0), ("/y".into(), 0)]);
    }
}
