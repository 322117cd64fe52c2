//! Watching with inotify (Linux).
//!
//! Why not the portable watcher here: at 1,000,000 files in a directory it took about
//! 2 s before the first read could start (it `stat`s every entry of the tree to find
//! the directories) and asked the kernel for an event at every open, so the first read
//! itself sent it 1,000,000 events to decode and drop on another thread
//! (BENCHMARKS.md, "Session 33"). Here the directories are found from the listing's
//! file types (a `stat` only for a symbolic link), and the mask holds only what can
//! change what is read: creations, removals, renames and writes closed.
//!
//! Every watched directory is watched before it is listed, so that what appears while
//! it is listed is either listed or reported. A directory that appears later is watched
//! by the reader thread before it is reported, and the consumer then reads it whole.
//! Hidden directories (names starting with `.`) are not watched: nothing in them is
//! read, and the one hidden name that matters, a mounted volume's `..data` symlink, is
//! swapped in the directory above. When the kernel's queue overflows, the root is
//! reported (read everything again).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read as _};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::sync::mpsc;

use super::WatchError;
use crate::scan::{self, Listing};

/// Keeps the watch alive; dropping it stops watching (and closes the receiver).
pub struct Watcher {
    /// Closed on drop: wakes the reader thread, which then stops.
    _stop: io::PipeWriter,
    /// The manifest files found while the directories were watched (a directory root).
    listing: Option<Listing>,
}

impl Watcher {
    /// The manifest files under a directory root as the watch found them, each
    /// directory listed once it was watched: the provider's first read can start from
    /// it instead of listing the tree again ([`crate::FileProvider::load_all_in_parts`];
    /// 1,000,000 entries took 0.3 s to list, BENCHMARKS.md, "Session 49"). `None` after
    /// the first call, and for a single-file root.
    pub fn take_listing(&mut self) -> Option<Listing> {
        self.listing.take()
    }
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watcher")
    }
}

/// The events asked for on every watched directory.
fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
}

/// Watches `path` (a directory recursively, or a single file) and sends a batch of changed
/// paths for every read of the kernel's events, at once: there is no trailing debounce,
/// the consumer drains whatever is queued when it is ready. The paths are absolute and
/// meant for [`crate::FileProvider::reload`]: manifest files created, written, renamed or
/// removed, directories created, renamed or removed, and the `..data` symlink of a
/// mounted volume swapped (its directory is read again). On an event queue overflow the
/// root itself is sent (rescan everything).
pub fn watch(path: &Path) -> Result<(Watcher, mpsc::UnboundedReceiver<Vec<PathBuf>>), WatchError> {
    let root = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let meta = std::fs::metadata(&root).map_err(|source| WatchError::Path {
        path: root.clone(),
        source,
    })?;
    let platform = |path: &Path| {
        let path = path.to_path_buf();
        move |source| WatchError::Platform { path, source }
    };
    let inotify = Inotify::init().map_err(platform(&root))?;
    let (root, target) = if meta.is_dir() {
        (Root::Dir(root.clone()), root)
    } else {
        let parent = root
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"));
        let name = root.file_name().unwrap_or_default().to_os_string();
        (Root::File { path: root, name }, parent)
    };
    let mut tree = Tree {
        watches: inotify.watches(),
        dirs: HashMap::new(),
    };
    // The top directory must be watched; a subdirectory that cannot be is logged.
    let wd = tree
        .watches
        .add(&target, mask())
        .map_err(platform(&target))?;
    tree.dirs
        .insert(wd.get_watch_descriptor_id(), (wd, target.clone()));
    // Every directory below is watched just before it is listed, and the listing of the
    // whole tree is kept for the first read.
    let listing = matches!(root, Root::Dir(_)).then(|| {
        let (mut files, mut errors) = (Vec::new(), Vec::new());
        scan::walk_with(&target, &mut files, &mut errors, &mut |dir| {
            if dir != target {
                tree.watch(dir);
            }
        });
        Listing::new(target.clone(), files, errors)
    });
    let (stopped, stop) = io::pipe().map_err(platform(&target))?;
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("weir-watch".into())
        .spawn(move || read_events(inotify, stopped, tree, &root, &tx))
        .map_err(platform(&target))?;
    Ok((
        Watcher {
            _stop: stop,
            listing,
        },
        rx,
    ))
}

/// What is watched.
#[derive(Debug)]
enum Root {
    /// A directory, recursively.
    Dir(PathBuf),
    /// A single file, through its directory.
    File { path: PathBuf, name: OsString },
}

/// The watched directories, by watch descriptor.
struct Tree {
    watches: Watches,
    dirs: HashMap<i32, (WatchDescriptor, PathBuf)>,
}

impl Tree {
    /// Watches `dir` and every directory below it that is not hidden (following symbolic
    /// links), each before it is listed.
    fn add(&mut self, dir: &Path) {
        if self.watch(dir) {
            self.add_below(dir);
        }
    }

    /// Watches `dir` alone; false if it was watched already (a second link, a loop) or
    /// cannot be watched.
    fn watch(&mut self, dir: &Path) -> bool {
        match self.watches.add(dir, mask()) {
            Ok(wd) => {
                // The same directory reached again (a second link, a loop): not again.
                if self.dirs.contains_key(&wd.get_watch_descriptor_id()) {
                    return false;
                }
                self.dirs
                    .insert(wd.get_watch_descriptor_id(), (wd, dir.to_path_buf()));
                true
            }
            // Gone already (its removal is reported by its parent), or not a directory.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => false,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot watch a directory; changes in it are not seen");
                false
            }
        }
    }

    /// Watches the directories below `dir` (see [`Tree::add`]).
    fn add_below(&mut self, dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut subdirs = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            if scan::is_hidden(&name) {
                continue;
            }
            let is_dir = match entry.file_type() {
                Ok(t) if t.is_dir() => true,
                Ok(t) if t.is_symlink() => entry.path().is_dir(),
                _ => false,
            };
            if is_dir {
                subdirs.push(entry.path());
            }
        }
        for sub in subdirs {
            self.add(&sub);
        }
    }

    /// Stops watching `dir` and the directories below it: moved out of the tree, their
    /// watches would report changes there under paths they no longer have.
    fn forget_below(&mut self, dir: &Path) {
        let gone: Vec<i32> = self
            .dirs
            .iter()
            .filter(|(_, (_, p))| p.starts_with(dir))
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            if let Some((wd, _)) = self.dirs.remove(&id) {
                // Already gone with its directory: nothing to undo.
                let _ = self.watches.remove(wd);
            }
        }
    }
}

/// What one event means.
#[derive(Debug, PartialEq, Eq)]
enum Meaning {
    Nothing,
    /// Report this path.
    Changed(PathBuf),
    /// A directory appeared: watch it (and below), then report it.
    NewDir(PathBuf),
    /// The watch is gone (its directory was removed): forget it.
    Forget,
}

/// What an event in watched directory `dir` means. `is_dir` tells whether a path is a
/// directory now (asked only for a link or other non-directory entry that appeared).
fn meaning(
    root: &Root,
    dir: &Path,
    mask: EventMask,
    name: Option<&OsStr>,
    is_dir: impl FnOnce(&Path) -> bool,
) -> Meaning {
    if mask.contains(EventMask::IGNORED) {
        return Meaning::Forget;
    }
    let appeared = mask.intersects(EventMask::CREATE | EventMask::MOVED_TO);
    let structural = appeared || mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM);
    let Some(name) = name else {
        // The watched directory itself removed or moved: only the root's matters (its
        // parent reports a subdirectory's by name).
        return match root {
            Root::Dir(r)
                if r == dir && mask.intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF) =>
            {
                Meaning::Changed(r.clone())
            }
            _ => Meaning::Nothing,
        };
    };
    let path = dir.join(name);
    match root {
        Root::File {
            path: file,
            name: file_name,
        } => {
            let mine = name == file_name;
            let swap = name == OsStr::new("..data") && structural;
            if mine || swap {
                Meaning::Changed(file.clone())
            } else {
                Meaning::Nothing
            }
        }
        Root::Dir(_) => {
            if scan::is_hidden(name) {
                return if name == OsStr::new("..data") && structural {
                    Meaning::Changed(path)
                } else {
                    Meaning::Nothing
                };
            }
            if mask.contains(EventMask::ISDIR) {
                return if appeared {
                    Meaning::NewDir(path)
                } else if structural {
                    Meaning::Changed(path)
                } else {
                    Meaning::Nothing
                };
            }
            if scan::is_manifest_name(name) {
                // Created, written and closed, renamed, removed (an in-place write is
                // acted on when its writer closes the file: reading between a truncate
                // and the last write would see part of it).
                return Meaning::Changed(path);
            }
            // Anything else matters only if it is (or was) a directory: a link to one
            // that appeared, or something renamed away.
            if appeared && is_dir(&path) {
                Meaning::NewDir(path)
            } else if mask.contains(EventMask::MOVED_FROM) {
                Meaning::Changed(path)
            } else {
                Meaning::Nothing
            }
        }
    }
}

/// The reader thread: waits for events (or the watcher's drop), and sends what every
/// read of them changed.
// One FFI call: `poll` on the two descriptors (std has no way to wait on both).
#[allow(unsafe_code)]
fn read_events(
    mut inotify: Inotify,
    mut stopped: io::PipeReader,
    mut tree: Tree,
    root: &Root,
    tx: &mpsc::UnboundedSender<Vec<PathBuf>>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let mut fds = [
            libc::pollfd {
                fd: inotify.as_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stopped.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of two pollfd structures for the call's length.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            tracing::warn!(error = %e, "file watcher stopped");
            return;
        }
        if fds[1].revents != 0 {
            // The watcher was dropped (its end of the pipe closed).
            let _ = stopped.read(&mut [0u8; 1]);
            return;
        }
        let events = match inotify.read_events(&mut buffer) {
            Ok(events) => events,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                tracing::warn!(error = %e, "file watcher stopped");
                return;
            }
        };
        let mut changed: Vec<PathBuf> = Vec::new();
        let mut new_dirs: Vec<PathBuf> = Vec::new();
        for event in events {
            if event.mask.contains(EventMask::Q_OVERFLOW) {
                let root = match root {
                    Root::Dir(r) => r,
                    Root::File { path, .. } => path,
                };
                changed.push(root.clone());
                continue;
            }
            let id = event.wd.get_watch_descriptor_id();
            let Some((_, dir)) = tree.dirs.get(&id) else {
                continue;
            };
            match meaning(root, dir, event.mask, event.name, |p| p.is_dir()) {
                Meaning::Nothing => {}
                Meaning::Changed(p) => {
                    if event
                        .mask
                        .contains(EventMask::MOVED_FROM | EventMask::ISDIR)
                    {
                        tree.forget_below(&p);
                    }
                    changed.push(p);
                }
                Meaning::NewDir(p) => new_dirs.push(p),
                Meaning::Forget => {
                    tree.dirs.remove(&id);
                }
            }
        }
        // Watched before they are reported: the consumer's reading of them then misses
        // nothing written meanwhile.
        for dir in new_dirs {
            tree.add(&dir);
            changed.push(dir);
        }
        changed.sort_unstable();
        changed.dedup();
        if !changed.is_empty() && tx.send(changed).is_err() {
            // Nobody listens any more.
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_root() -> Root {
        Root::Dir(PathBuf::from("/cfg"))
    }

    fn at(root: &Root, dir: &str, mask: EventMask, name: &str) -> Meaning {
        meaning(root, Path::new(dir), mask, Some(OsStr::new(name)), |p| {
            p.ends_with("linked")
        })
    }

    fn changed(p: &str) -> Meaning {
        Meaning::Changed(PathBuf::from(p))
    }

    #[test]
    fn manifests_renames_and_data_swaps_are_reported() {
        let r = dir_root();
        assert_eq!(
            at(&r, "/cfg", EventMask::MOVED_TO, "a.yaml"),
            changed("/cfg/a.yaml")
        );
        assert_eq!(
            at(&r, "/cfg/sub", EventMask::CLOSE_WRITE, "b.yml"),
            changed("/cfg/sub/b.yml")
        );
        assert_eq!(
            at(&r, "/cfg", EventMask::DELETE, "a.yaml"),
            changed("/cfg/a.yaml")
        );
        assert_eq!(
            at(&r, "/cfg", EventMask::MOVED_TO, "..data"),
            changed("/cfg/..data")
        );
        // The temporary file of an editor or of Kubernetes: hidden, not reported.
        assert_eq!(
            at(&r, "/cfg", EventMask::CLOSE_WRITE, ".a.yaml.tmp"),
            Meaning::Nothing
        );
        assert_eq!(
            at(&r, "/cfg", EventMask::CREATE, "..data_tmp"),
            Meaning::Nothing
        );
        assert_eq!(
            at(&r, "/cfg", EventMask::CLOSE_WRITE, "notes.txt"),
            Meaning::Nothing
        );
        assert_eq!(
            at(&r, "/cfg", EventMask::DELETE, "notes.txt"),
            Meaning::Nothing
        );
    }

    #[test]
    fn directories_appearing_are_watched_and_leaving_reported() {
        let r = dir_root();
        let d = EventMask::ISDIR;
        assert_eq!(
            at(&r, "/cfg", EventMask::CREATE | d, "sub"),
            Meaning::NewDir(PathBuf::from("/cfg/sub"))
        );
        assert_eq!(
            at(&r, "/cfg", EventMask::MOVED_TO | d, "sub"),
            Meaning::NewDir(PathBuf::from("/cfg/sub"))
        );
        assert_eq!(
            at(&r, "/cfg", EventMask::DELETE | d, "sub"),
            changed("/cfg/sub")
        );
        assert_eq!(
            at(&r, "/cfg", EventMask::MOVED_FROM | d, "sub"),
            changed("/cfg/sub")
        );
        // A hidden directory (a mounted volume's timestamped one) is neither.
        assert_eq!(
            at(&r, "/cfg", EventMask::CREATE | d, "..2026_12"),
            Meaning::Nothing
        );
        // A link to a directory appearing is a new directory; a link to a file is not.
        assert_eq!(
            at(&r, "/cfg", EventMask::CREATE, "linked"),
            Meaning::NewDir(PathBuf::from("/cfg/linked"))
        );
        assert_eq!(at(&r, "/cfg", EventMask::CREATE, "other"), Meaning::Nothing);
        assert_eq!(
            at(&r, "/cfg", EventMask::MOVED_FROM, "other"),
            changed("/cfg/other")
        );
    }

    #[test]
    fn the_root_itself_going_is_reported_and_dropped_watches_forgotten() {
        let r = dir_root();
        let on = |dir: &str, mask| meaning(&r, Path::new(dir), mask, None, |_| false);
        assert_eq!(on("/cfg", EventMask::DELETE_SELF), changed("/cfg"));
        assert_eq!(on("/cfg", EventMask::MOVE_SELF), changed("/cfg"));
        assert_eq!(on("/cfg/sub", EventMask::DELETE_SELF), Meaning::Nothing);
        assert_eq!(on("/cfg/sub", EventMask::IGNORED), Meaning::Forget);
    }

    #[test]
    fn a_single_file_maps_to_itself() {
        let r = Root::File {
            path: PathBuf::from("/etc/weir/config.yaml"),
            name: OsString::from("config.yaml"),
        };
        let d = "/etc/weir";
        assert_eq!(
            at(&r, d, EventMask::MOVED_TO, "config.yaml"),
            changed("/etc/weir/config.yaml")
        );
        assert_eq!(
            at(&r, d, EventMask::MOVED_TO, "..data"),
            changed("/etc/weir/config.yaml")
        );
        assert_eq!(
            at(&r, d, EventMask::CLOSE_WRITE, "other.yaml"),
            Meaning::Nothing
        );
        assert_eq!(
            at(&r, d, EventMask::CLOSE_WRITE, "..data"),
            Meaning::Nothing
        );
    }
}
