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
pub(crate) type DirtyResources = foldhash::HashSet<weir_model::ResourceKey>;
