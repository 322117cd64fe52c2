//! Bookkeeping of the incremental translator: what each object currently contributes
//! and who uses what, in tables that drop a key with its last reference so that nothing
//! the configuration no longer uses stays behind.
//!
//! Each table is owned by one field of `Translator` and marks the IR resources it
//! changes as dirty itself (a [`DirtyResources`] argument), so that a caller cannot
//! change a host, socket or cluster and forget to re-emit it.

mod backend_tls;
mod clusters;
mod deps;
mod emitter;
mod gateway_index;
mod hosts;
mod index;
mod kind_claims;
mod l4;
mod policies;
mod refcount;
pub(crate) mod small;
mod sockets;

pub(crate) use backend_tls::{BtlsIndex, ServiceGateways};
pub(crate) use clusters::ClusterRefs;
pub(crate) use deps::DepIndex;
pub(crate) use emitter::{Desired, Emitter};
pub(crate) use gateway_index::{GatewayIndex, GatewayOutputs};
pub(crate) use hosts::{HostKey, HostTable, SniOwner};
pub(crate) use index::{MultiIndex, OrdIndex};
pub(crate) use kind_claims::{Claim, KindClaims};
pub(crate) use l4::L4Table;
pub(crate) use policies::PolicyIndex;
pub(crate) use refcount::RefCount;
pub(crate) use sockets::SectionOrder;
pub(crate) use sockets::Sockets;

/// IR resources whose desired version may have changed in this batch: the emitter
/// rebuilds each and emits those whose content hash differs from what it emitted.
///
/// A list, not a set: a key marked twice is listed twice, and the emitter sorts the list
/// and drops the repeats once per batch. At the initial load nearly every key is marked
/// once, and a hash set of them (64-byte keys at hashbrown's power-of-two sizes) was the
/// largest transient table at the peak (8.5 MiB at 20,000 TLS domains, 4 MiB as a list).
#[derive(Debug, Default)]
pub(crate) struct DirtyResources(Vec<weir_model::ResourceKey>);

impl DirtyResources {
    /// Marks `key` dirty.
    pub(crate) fn insert(&mut self, key: weir_model::ResourceKey) {
        self.0.push(key);
    }

    /// Forgets every key (keeping the room).
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    /// The dirty keys, sorted, each once.
    pub(crate) fn sorted(&mut self) -> &[weir_model::ResourceKey] {
        self.0.sort_unstable();
        self.0.dedup();
        &self.0
    }
}

impl Extend<weir_model::ResourceKey> for DirtyResources {
    fn extend<I: IntoIterator<Item = weir_model::ResourceKey>>(&mut self, keys: I) {
        self.0.extend(keys);
    }
}

/// A hash map whose entries sit side by side in one vector, found through a table of
/// indexes: for the tables with one large entry per host or object (a host's rules and
/// certificate, what the emitter sent for it, an Ingress's or route's contribution).
///
/// A hash table of N entries has room for between 8/7·N and 16/7·N of them (its size
/// is a power of two), and each empty slot is as large as an entry: at 1,000,000 domains
/// the tables sized for 1,000,000 or 2,000,000 entries were 48 % full, so half of their
/// memory held nothing. Here an empty slot is one index (8 bytes) and the entries are
/// dense; removal moves the last entry into the hole (order is never relied on).
pub(crate) type DenseMap<K, V> = indexmap::IndexMap<K, V, foldhash::fast::RandomState>;
