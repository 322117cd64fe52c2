use std::sync::Arc;

use serde::Serialize;

use crate::cluster::{Cluster, ClusterKey};
use crate::hash::ContentHash;
use crate::host::HostMatch;
use crate::listener::{Listener, ListenerKey};
use crate::route::VirtualHost;
use crate::tls::{Certificate, SniCert};

/// The address of one IR resource.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum ResourceKey {
    /// A listener socket.
    Listener(ListenerKey),
    /// A host's rules on a listener.
    VirtualHost(ListenerKey, HostMatch),
    /// A cluster.
    Cluster(ClusterKey),
    /// A certificate, by content.
    Certificate(ContentHash),
    /// An SNI table entry.
    Sni(ListenerKey, HostMatch),
}

/// One IR resource, shared by `Arc` between the translator's state, batches and
/// data-plane snapshots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Resource {
    /// See [`Listener`].
    Listener(Arc<Listener>),
    /// See [`VirtualHost`].
    VirtualHost(Arc<VirtualHost>),
    /// See [`Cluster`].
    Cluster(Arc<Cluster>),
    /// See [`Certificate`].
    Certificate(Arc<Certificate>),
    /// See [`SniCert`].
    Sni(Arc<SniCert>),
}

impl Resource {
    /// This resource's key.
    pub fn key(&self) -> ResourceKey {
        match self {
            Resource::Listener(l) => ResourceKey::Listener(l.key),
            Resource::VirtualHost(v) => ResourceKey::VirtualHost(v.listener, v.host.clone()),
            Resource::Cluster(c) => ResourceKey::Cluster(c.key.clone()),
            Resource::Certificate(c) => ResourceKey::Certificate(c.hash()),
            Resource::Sni(s) => ResourceKey::Sni(s.listener, s.host.clone()),
        }
    }

    /// This resource's content hash (its version).
    pub fn hash(&self) -> ContentHash {
        match self {
            Resource::Listener(l) => l.hash(),
            Resource::VirtualHost(v) => v.hash(),
            Resource::Cluster(c) => c.hash(),
            Resource::Certificate(c) => c.hash(),
            Resource::Sni(s) => s.hash(),
        }
    }
}

/// A change to one resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Delta {
    /// Add or replace the resource with this key.
    Upsert(Resource),
    /// Remove the resource with this key (a no-op if absent).
    Remove(ResourceKey),
}

/// Deltas a data plane applies together, publishing one new snapshot for all of them.
/// Within a batch, a certificate is upserted before (or in the same batch as) any SNI
/// entry that names it, and a listener before its virtual hosts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeltaBatch {
    /// The changes, in the order they were produced.
    pub deltas: Vec<Delta>,
}

impl DeltaBatch {
    /// Whether the batch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.deltas.is_empty()
    }
}
