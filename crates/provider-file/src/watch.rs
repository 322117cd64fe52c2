//! Watching the root for changes.
//!
//! Directories are watched, never single inodes: editors and Kubernetes replace files by
//! renaming a new one into place (or swapping the `..data` symlink), which a watch on the
//! old inode would miss. A single-file root is watched through its parent directory.
//!
//! On Linux weir uses inotify directly ([`inotify`](self::inotify)): the directories are
//! found with the file types a listing already gives (no `stat` per file), and only
//! the events that can change what is read are asked for — not opens. A portable
//! watcher (notify) serves the other platforms.

use std::path::PathBuf;

#[cfg(any(target_os = "linux", target_os = "android"))]
mod inotify;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub use self::inotify::{Watcher, watch};

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod portable;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub use self::portable::{Watcher, watch};

/// Why watching could not start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The path to watch does not exist or cannot be inspected.
    #[error("cannot watch {path}: {source}")]
    Path {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The platform's file watcher refused.
    #[error("cannot watch {path}: {source}")]
    Platform {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}
