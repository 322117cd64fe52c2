use std::net::SocketAddr;
use std::sync::Arc;

use serde::Serialize;

use crate::hash::{ContentHash, content_hash, eq_by_content_hash};

/// The address a data-plane listener binds. Gateway listeners that share an address and
/// port (e.g. several HTTPS hostnames on :443) share one key and one socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ListenerKey(pub SocketAddr);

impl std::fmt::Display for ListenerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What a listener speaks on its socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Protocol {
    /// Plaintext HTTP/1.1, and HTTP/2 with prior knowledge (h2c).
    Http,
    /// TLS, certificate chosen by SNI; HTTP/2 or HTTP/1.1 by ALPN.
    Https,
}

/// A socket to bind and the labels its traffic is reported under.
#[derive(Clone, Debug, Serialize)]
pub struct Listener {
    /// Where to bind.
    pub key: ListenerKey,
    /// Plaintext or TLS.
    pub protocol: Protocol,
    /// Metrics/log label: the owning Gateway (`namespace/name`) or `ingress`.
    pub gateway: Arc<str>,
    /// Metrics/log label: the Gateway listener name(s) sharing this socket.
    pub name: Arc<str>,
    hash: ContentHash,
}
eq_by_content_hash!(Listener);

impl Listener {
    /// Builds a listener and computes its content hash.
    pub fn new(key: ListenerKey, protocol: Protocol, gateway: Arc<str>, name: Arc<str>) -> Self {
        let hash = content_hash(&(&key, &protocol, &gateway, &name));
        Listener {
            key,
            protocol,
            gateway,
            name,
            hash,
        }
    }

    /// The content hash computed at construction.
    pub fn hash(&self) -> ContentHash {
        self.hash
    }
}
