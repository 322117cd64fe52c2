use std::net::SocketAddr;
use std::sync::Arc;

use serde::Serialize;

use crate::UpstreamTls;
use crate::hash::{ContentHash, content_hash, eq_by_content_hash};

/// The name of a cluster, e.g. `service/default/echo:8080` or `backend/default/static`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ClusterKey(pub Arc<str>);

impl std::fmt::Display for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How the data plane talks to a cluster's endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize)]
pub enum UpstreamProtocol {
    /// HTTP/1.1 with keep-alive.
    #[default]
    Http1,
    /// HTTP/2 with prior knowledge over plaintext (also what gRPC backends speak).
    H2c,
}

/// Where an endpoint lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum EndpointAddr {
    /// A resolved socket address (EndpointSlice addresses, IP literals).
    Socket(SocketAddr),
    /// A DNS name and port, resolved by the data plane when it connects.
    Host(Arc<str>, u16),
}

impl std::fmt::Display for EndpointAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EndpointAddr::Socket(a) => a.fmt(f),
            EndpointAddr::Host(h, p) => write!(f, "{h}:{p}"),
        }
    }
}

/// One upstream endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Endpoint {
    /// Address to connect to.
    pub addr: EndpointAddr,
    /// Relative weight within the cluster (≥ 1).
    pub weight: u32,
}

/// A named set of endpoints. Routes refer to clusters by [`ClusterKey`], so an endpoint
/// change replaces one cluster and never touches a route.
#[derive(Clone, Debug, Serialize)]
pub struct Cluster {
    /// The cluster's name.
    pub key: ClusterKey,
    /// Ready endpoints; empty means "no endpoints" (the data plane answers 503).
    pub endpoints: Vec<Endpoint>,
    /// Wire protocol to the endpoints.
    pub protocol: UpstreamProtocol,
    /// TLS towards the endpoints asked by whatever built the cluster (ingress-nginx's
    /// `backend-protocol: HTTPS`/`GRPCS`: the Ingress's own clusters, key suffix
    /// `/tls-<hash>`). A BackendTLSPolicy on the Service port takes precedence over it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<Arc<UpstreamTls>>,
    hash: ContentHash,
}
eq_by_content_hash!(Cluster);

impl Cluster {
    /// Builds a cluster and computes its content hash.
    pub fn new(key: ClusterKey, endpoints: Vec<Endpoint>, protocol: UpstreamProtocol) -> Self {
        let hash = content_hash(&(&key, &endpoints, &protocol));
        Cluster {
            key,
            endpoints,
            protocol,
            tls: None,
            hash,
        }
    }

    /// The cluster with TLS towards its endpoints. The settings are folded into the hash
    /// only when set, so clusters without TLS keep their hashes (push protocol version 4).
    pub fn with_tls(mut self, tls: Option<Arc<UpstreamTls>>) -> Self {
        self.hash = match &tls {
            None => content_hash(&(&self.key, &self.endpoints, &self.protocol)),
            Some(t) => content_hash(&(&self.key, &self.endpoints, &self.protocol, t)),
        };
        self.tls = tls;
        self
    }

    /// The content hash computed at construction.
    pub fn hash(&self) -> ContentHash {
        self.hash
    }
}
