//! Bookkeeping data structures of the incremental translator: reference counts and
//! indexes that drop a key when its last entry goes, so that nothing the configuration
//! no longer uses stays behind.

mod index;
mod refcount;

pub(crate) use index::{MultiIndex, OrdIndex};
pub(crate) use refcount::RefCount;
