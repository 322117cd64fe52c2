//! Watching the root for changes with notify (platforms other than Linux).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use notify::event::{AccessKind, AccessMode, CreateKind, EventKind, ModifyKind, RemoveKind};
use notify::{Event, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;

use super::WatchError;
use crate::scan;

/// Keeps the watch alive; dropping it stops watching (and closes the receiver).
pub struct Watcher {
    _inner: notify::RecommendedWatcher,
}

impl Watcher {
    /// Always `None` here: notify lists the tree on its own, so the first read lists it
    /// again (the inotify watcher hands its listing over).
    pub fn take_listing(&mut self) -> Option<crate::scan::Listing> {
        None
    }
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watcher")
    }
}

/// Watches `path` (a directory recursively, or a single file) and sends a batch of changed
/// paths for every relevant event, at once: there is no trailing debounce, the consumer
/// drains whatever is queued when it is ready. The paths are absolute and meant for
/// [`crate::FileProvider::reload`]: manifest files created, written, renamed or removed,
/// directories created or removed, and the directory of a swapped `..data` symlink. On an
/// event queue overflow the root itself is sent (rescan everything).
pub fn watch(path: &Path) -> Result<(Watcher, mpsc::UnboundedReceiver<Vec<PathBuf>>), WatchError> {
    let root = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let meta = std::fs::metadata(&root).map_err(|source| WatchError::Path {
        path: root.clone(),
        source,
    })?;
    let (tx, rx) = mpsc::unbounded_channel();
    let filter = Filter {
        single_file: !meta.is_dir(),
        root: root.clone(),
    };
    let (target, mode) = if filter.single_file {
        let parent = root
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"));
        (parent, RecursiveMode::NonRecursive)
    } else {
        (root.clone(), RecursiveMode::Recursive)
    };
    let handler = move |res: notify::Result<Event>| match res {
        Ok(event) => {
            let paths = filter.paths(&event);
            if !paths.is_empty() {
                // The receiver being gone only means nobody listens any more.
                let _ = tx.send(paths);
            }
        }
        Err(e) => tracing::warn!(error = %e, "file watcher error"),
    };
    let mut watcher =
        notify::recommended_watcher(handler).map_err(|source| WatchError::Platform {
            path: target.clone(),
            source: std::io::Error::other(source),
        })?;
    watcher
        .watch(&target, mode)
        .map_err(|source| WatchError::Platform {
            path: target.clone(),
            source: std::io::Error::other(source),
        })?;
    Ok((Watcher { _inner: watcher }, rx))
}

/// Decides which event paths matter.
struct Filter {
    root: PathBuf,
    single_file: bool,
}

impl Filter {
    fn paths(&self, event: &Event) -> Vec<PathBuf> {
        if event.need_rescan() {
            return vec![self.root.clone()];
        }
        let mut out: Vec<PathBuf> = Vec::new();
        for p in &event.paths {
            if let Some(p) = self.relevant(&event.kind, p)
                && !out.contains(&p)
            {
                out.push(p);
            }
        }
        out
    }

    fn relevant(&self, kind: &EventKind, path: &Path) -> Option<PathBuf> {
        if self.single_file {
            // Only the file itself, or the `..data` swap of a mounted ConfigMap it lives in.
            let name = path.file_name()?;
            let is_root = path == self.root;
            let is_swap = name == OsStr::new("..data");
            return ((is_root && content_event(kind)) || (is_swap && structural(kind)))
                .then(|| self.root.clone());
        }
        let rel = path.strip_prefix(&self.root).ok()?;
        let names: Vec<&OsStr> = rel.components().map(|c| c.as_os_str()).collect();
        let Some((last, parents)) = names.split_last() else {
            // The root itself: removed, moved or recreated. Not merely opened — reading
            // the directory on a rescan opens it, which must not trigger another rescan.
            return structural(kind).then(|| self.root.clone());
        };
        if parents.iter().any(|n| scan::is_hidden(n)) {
            return None;
        }
        if scan::is_hidden(last) {
            return (*last == OsStr::new("..data") && structural(kind)).then(|| path.to_path_buf());
        }
        if scan::is_manifest_name(last) {
            return content_event(kind).then(|| path.to_path_buf());
        }
        // Anything else matters only if it is (or was) a directory.
        let relevant = match kind {
            EventKind::Create(CreateKind::Folder) | EventKind::Remove(RemoveKind::Folder) => true,
            EventKind::Remove(RemoveKind::File) => false,
            EventKind::Create(_) => path.is_dir(),
            // A directory renamed away or removed no longer exists to be checked.
            EventKind::Modify(ModifyKind::Name(_)) | EventKind::Remove(_) => true,
            _ => false,
        };
        relevant.then(|| path.to_path_buf())
    }
}

/// Whether the event changes what exists at a path (as opposed to an access or an
/// in-place write), the only events that matter for directories and symlink swaps.
fn structural(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Create(_)
            | EventKind::Remove(_)
            | EventKind::Modify(ModifyKind::Name(_))
            | EventKind::Any
            | EventKind::Other
    )
}

/// Whether the event may have changed what reading the file gives.
///
/// On Linux (inotify) in-place writes are acted on when the writer closes the file, not at
/// each `write`: reading between a truncate and the last write would see a partial file
/// and could briefly delete its objects. Elsewhere no close event exists, so writes count.
fn content_event(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Modify(ModifyKind::Metadata(_)) => false,
        EventKind::Modify(ModifyKind::Name(_)) => true,
        EventKind::Modify(_) => !cfg!(any(target_os = "linux", target_os = "android")),
        EventKind::Create(_) | EventKind::Remove(_) | EventKind::Any | EventKind::Other => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{DataChange, RenameMode};

    fn filter() -> Filter {
        Filter {
            root: PathBuf::from("/cfg"),
            single_file: false,
        }
    }

    fn ev(kind: EventKind, paths: &[&str]) -> Event {
        let mut e = Event::new(kind);
        for p in paths {
            e = e.add_path(PathBuf::from(p));
        }
        e
    }

    #[test]
    fn keeps_manifests_renames_and_data_swaps() {
        let f = filter();
        let rename = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        assert_eq!(
            f.paths(&ev(rename, &["/cfg/.a.yaml.tmp", "/cfg/a.yaml"])),
            vec![PathBuf::from("/cfg/a.yaml")]
        );
        let close = EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert_eq!(
            f.paths(&ev(close, &["/cfg/sub/b.yml"])),
            vec![PathBuf::from("/cfg/sub/b.yml")]
        );
        assert_eq!(
            f.paths(&ev(rename, &["/cfg/..data_tmp", "/cfg/..data"])),
            vec![PathBuf::from("/cfg/..data")]
        );
        assert!(f.paths(&ev(close, &["/cfg/..2024_01/a.yaml"])).is_empty());
        assert!(f.paths(&ev(close, &["/cfg/notes.txt"])).is_empty());
        assert!(f.paths(&ev(close, &["/elsewhere/a.yaml"])).is_empty());
        let open = EventKind::Access(AccessKind::Open(AccessMode::Read));
        assert!(f.paths(&ev(open, &["/cfg/a.yaml"])).is_empty());
        let removed_dir = EventKind::Remove(RemoveKind::Folder);
        assert_eq!(
            f.paths(&ev(removed_dir, &["/cfg/sub"])),
            vec![PathBuf::from("/cfg/sub")]
        );
        let removed_file = EventKind::Remove(RemoveKind::File);
        assert!(f.paths(&ev(removed_file, &["/cfg/notes.txt"])).is_empty());
        let write = EventKind::Modify(ModifyKind::Data(DataChange::Any));
        assert_eq!(
            f.paths(&ev(write, &["/cfg/a.yaml"])).is_empty(),
            cfg!(target_os = "linux")
        );
    }

    #[test]
    fn opening_directories_does_not_trigger_a_rescan() {
        // A rescan opens the root and its subdirectories; if that counted as a change,
        // every rescan would cause the next one and the watcher would spin forever.
        let f = filter();
        for kind in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Read),
        ] {
            assert!(
                f.paths(&ev(kind, &["/cfg"])).is_empty(),
                "{kind:?} on the root"
            );
            assert!(
                f.paths(&ev(kind, &["/cfg/sub"])).is_empty(),
                "{kind:?} on a subdir"
            );
            assert!(
                f.paths(&ev(kind, &["/cfg/..data"])).is_empty(),
                "{kind:?} on ..data"
            );
        }
        let removed = EventKind::Remove(RemoveKind::Folder);
        assert_eq!(
            f.paths(&ev(removed, &["/cfg"])),
            vec![PathBuf::from("/cfg")]
        );
    }

    #[test]
    fn single_file_root_maps_to_the_root() {
        let f = Filter {
            root: PathBuf::from("/etc/weir/config.yaml"),
            single_file: true,
        };
        let rename = EventKind::Modify(ModifyKind::Name(RenameMode::To));
        assert_eq!(
            f.paths(&ev(rename, &["/etc/weir/config.yaml"])),
            vec![PathBuf::from("/etc/weir/config.yaml")]
        );
        assert_eq!(
            f.paths(&ev(rename, &["/etc/weir/..data"])),
            vec![PathBuf::from("/etc/weir/config.yaml")]
        );
        assert!(f.paths(&ev(rename, &["/etc/weir/other.yaml"])).is_empty());
    }
}
