//! weir's file provider: Kubernetes-style YAML manifests read from a file or a directory
//! tree, turned into [`weir_api::Object`]s, and watched for changes.
//!
//! [`FileProvider`] keeps what every file defined and answers each (re)read with an
//! [`Update`]: the objects that appeared or changed, the keys that disappeared, and the
//! problems found. Work is proportional to the files named in a reload, never to the whole
//! tree: unchanged bytes (by content hash) are not parsed again, unchanged objects are not
//! reported. Bad input stays local: a file that stops parsing keeps its last good objects,
//! a document with a bad field keeps that object's previous version, and every problem is
//! reported with its file, document, object and field.
//!
//! [`watch`] reports changed paths as they happen (no trailing debounce), ready to be fed
//! to [`FileProvider::reload`].

#![warn(missing_docs)]

mod file_key;
mod parse;
mod provider;
mod scan;
mod typed;
mod watch;
mod yaml;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::provider::FileProvider;
pub use crate::scan::Listing;

/// One entry of [`read_manifest`]: the document's index in the file and its object, or
/// why it was refused.
pub type ManifestDocument = (usize, Result<weir_api::Object, String>);

/// Reads one manifest file's bytes as `weir run` does: per document (by 0-based index in
/// the file; a `List` yields several entries with one index), the object or why that
/// document was refused. `Err` only for a file that is not UTF-8. For tools and the
/// `yaml_documents` fuzz target; the provider runs the same code.
pub fn read_manifest(bytes: &[u8]) -> Result<Vec<ManifestDocument>, String> {
    Ok(parse::parse_file(bytes)?
        .into_iter()
        .map(|d| (d.index, d.result.map_err(|e| e.error.to_string())))
        .collect())
}
pub use crate::watch::{WatchError, Watcher, watch};

/// Checks each reader of the YAML fast path (weir's scanner, the granit event path) against
/// serde-saphyr on one document's text: `Ok(true)` when either read it (and serde-saphyr
/// gives the identical value), `Ok(false)` when both left it to serde-saphyr, `Err` (what
/// differs) otherwise; and the typed read of a Secret or Ingress from the scanner's tree
/// against the usual path. For the `yaml_value` fuzz target.
#[doc(hidden)]
pub fn check_yaml_fast_path(text: &str) -> Result<bool, String> {
    yaml::check_fast_path(text)
}

/// Where an object was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The file, as found under the provider's root (symlinks not resolved); one
    /// buffer shared by every object of the file and the provider's file table.
    pub file: Arc<Path>,
    /// 0-based index of the YAML document in the file (empty documents count).
    pub document: usize,
}

/// What kind of problem a [`FileError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileErrorKind {
    /// The file or directory could not be read; its previous objects are kept.
    Unreadable,
    /// A document is not valid YAML (syntax, duplicate key, nesting, alias budget): it is
    /// rejected alone, and the object it held at that position keeps its previous
    /// version. For a file that is not UTF-8 (no document index) all its previous
    /// objects are kept.
    Syntax,
    /// A document is not a valid object; that object's previous version (if any) is kept.
    InvalidObject,
    /// A document names a kind weir does not read (e.g. a Deployment); it is ignored.
    UnsupportedKind,
    /// The object is also defined in a file earlier in path order, which wins.
    Duplicate,
}

/// A problem with one file or one document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileError {
    /// The file (or directory) concerned.
    pub file: PathBuf,
    /// 0-based document index, when the problem is one document's.
    pub document: Option<usize>,
    /// What kind of problem.
    pub kind: FileErrorKind,
    /// The object concerned (`Kind ns/name`), when the document names one.
    pub object: Option<String>,
    /// What is wrong; names the object (`Kind ns/name`) and the field when known.
    pub message: String,
}

impl fmt::Display for FileError {
    /// `FILE#DOC: message`, or `FILE: message` for a problem of the whole file.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.document {
            Some(d) => write!(f, "{}#{}: {}", self.file.display(), d, self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

impl std::error::Error for FileError {}

/// How far a read in parts ([`FileProvider::load_all_in_parts`]) has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Files read so far.
    pub read: usize,
    /// Files to read in all.
    pub files: usize,
}

/// The object-level difference produced by (re)reading files.
#[derive(Clone, Debug, Default)]
pub struct Update {
    /// Objects that are new or whose content changed, with their keys (the ones the
    /// provider holds, for the translator to share), in key order.
    pub upserts: Vec<(weir_api::ObjectKey, Arc<weir_api::Object>)>,
    /// Keys of objects that no file defines any more, in key order.
    pub deletes: Vec<weir_api::ObjectKey>,
    /// Problems found while reading; they do not stop other objects from applying.
    pub errors: Vec<FileError>,
}

impl Update {
    /// True when there is nothing to apply and nothing to report.
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty() && self.deletes.is_empty() && self.errors.is_empty()
    }

    /// True when objects changed (errors aside).
    pub fn has_changes(&self) -> bool {
        !self.upserts.is_empty() || !self.deletes.is_empty()
    }
}
