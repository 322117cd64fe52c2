//! The L4 table: which route's backends each (socket, host) of a TLS or TCP listener
//! splices to, and whether TLS is terminated first.

use std::sync::Arc;

use weir_model::{HostMatch, L4Mode, L4Route, ListenerKey, ResourceKey};

use crate::compile::route_kind::L4Target;
use crate::incremental::{DirtyResources, HostKey, OrdIndex, SniOwner};

/// Everything that makes up the `L4Route` resources. Several routes may ask for one
/// (socket, host): the oldest serves it (as for SNI entries), the others wait behind it.
#[derive(Default)]
pub(crate) struct L4Table {
    entries: OrdIndex<HostKey, SniOwner, (Arc<L4Target>, L4Mode)>,
}

impl L4Table {
    /// Adds (or replaces) `owner`'s target for host `hk`, in the mode of the listener it
    /// attached through.
    pub(crate) fn add(
        &mut self,
        hk: HostKey,
        owner: SniOwner,
        target: (Arc<L4Target>, L4Mode),
        dirty: &mut DirtyResources,
    ) {
        dirty.insert(ResourceKey::L4Route(hk.0, hk.1.clone()));
        self.entries.insert(hk, owner, target);
    }

    /// Removes `owner`'s target for host `hk`.
    pub(crate) fn remove(&mut self, hk: HostKey, owner: &SniOwner, dirty: &mut DirtyResources) {
        self.entries.remove(&hk, owner);
        dirty.insert(ResourceKey::L4Route(hk.0, hk.1));
    }

    /// The L4Route resource of `host` on listener `k`, if it should exist.
    pub(crate) fn route(&self, k: ListenerKey, host: &HostMatch) -> Option<L4Route> {
        let (_, (t, mode)) = self.entries.first(&(k, host.clone()))?;
        Some(L4Route::with_mode(
            k,
            host.clone(),
            t.route.clone(),
            t.backends.clone(),
            *mode,
        ))
    }
}
