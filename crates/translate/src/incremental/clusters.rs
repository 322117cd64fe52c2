//! Which clusters routes and Ingresses use.

use std::sync::Arc;

use weir_model::{ClusterKey, ResourceKey};

use crate::compile::backend::ClusterSource;
use crate::incremental::{DirtyResources, MultiIndex, RefCount};
use crate::store::NsName;

/// The clusters in use, each with how to build it, and the Service clusters of each
/// Service (an EndpointSlice or Service change rebuilds exactly those).
#[derive(Default)]
pub(crate) struct ClusterRefs {
    refs: RefCount<ClusterKey, ClusterSource>,
    by_service: MultiIndex<NsName, ClusterKey>,
}

impl ClusterRefs {
    /// One more user of cluster `ck` (built from `src`); the first one creates it.
    /// Returns the table's own key, for the user to keep (one shared string per
    /// cluster rather than one per user).
    pub(crate) fn acquire(
        &mut self,
        ck: &ClusterKey,
        src: &ClusterSource,
        dirty: &mut DirtyResources,
    ) -> ClusterKey {
        if let Some(key) = self.refs.inc_existing(ck) {
            return key.clone();
        }
        self.refs.inc(ck.clone(), src.clone());
        dirty.insert(ResourceKey::Cluster(ck.clone()));
        if let ClusterSource::Service { ns, name, .. } = src {
            self.by_service
                .insert((ns.clone(), name.clone()), ck.clone());
        }
        ck.clone()
    }

    /// One user fewer of cluster `ck`; the last one removes it.
    pub(crate) fn release(&mut self, ck: ClusterKey, dirty: &mut DirtyResources) {
        if let Some(src) = self.refs.dec(&ck) {
            if let ClusterSource::Service { ns, name, .. } = src {
                self.by_service.remove(&(ns, name), &ck);
            }
            dirty.insert(ResourceKey::Cluster(ck));
        }
    }

    /// How to build cluster `ck`, while it is in use.
    pub(crate) fn source(&self, ck: &ClusterKey) -> Option<&ClusterSource> {
        self.refs.get(ck)
    }

    /// Marks the clusters of Service `ns`/`name` dirty.
    pub(crate) fn mark_service(&self, ns: &Arc<str>, name: &str, dirty: &mut DirtyResources) {
        let clusters = self.by_service.get(&(ns.clone(), Arc::from(name)));
        dirty.extend(clusters.map(|c| ResourceKey::Cluster(c.clone())));
    }
}
