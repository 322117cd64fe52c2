//! L4 routes: where a TLS (passthrough or terminate) or TCP listener sends a connection,
//! and a UDP listener a client's datagrams.

use serde::Serialize;

use crate::cluster::ClusterKey;
use crate::hash::{ContentHash, content_hash, eq_by_content_hash};
use crate::host::HostMatch;
use crate::listener::ListenerKey;
use crate::route::RouteRef;

/// One backend of an [`L4Route`]: a cluster and its relative weight.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct L4Backend {
    /// Target cluster. A connection picked for a cluster the data plane does not hold
    /// is closed.
    pub cluster: ClusterKey,
    /// Relative weight; 0 means never chosen.
    pub weight: u32,
}

/// What the data plane does with a connection an [`L4Route`] takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub enum L4Mode {
    /// The connection's bytes go to the backend unchanged: TCP, or TLS passed through
    /// (the TLS session is the backend's).
    #[default]
    Passthrough,
    /// TLS is terminated here with the listener's certificate for the ClientHello's SNI
    /// (the socket's SNI entries, as for HTTPS), and the decrypted bytes go to the
    /// backend over plaintext TCP (a TLSRoute on a `Terminate` listener).
    Terminate,
}

impl L4Mode {
    /// Whether this is the default mode (left out of golden outputs and hashes).
    pub fn is_passthrough(&self) -> bool {
        *self == L4Mode::Passthrough
    }
}

/// The backends connections for one host pattern on one listener are spliced to: a
/// TLSRoute hostname on a TLS passthrough socket (the pattern is matched against the
/// ClientHello's SNI, exact before wildcard), or a TCPRoute on a TCP socket or a UDPRoute
/// on a UDP socket (the pattern is [`HostMatch::ANY`]).
///
/// Each (listener, host) is its own resource, like a [`crate::VirtualHost`], so adding
/// one passthrough hostname among thousands is one delta.
#[derive(Clone, Debug, Serialize)]
pub struct L4Route {
    /// The listener.
    pub listener: ListenerKey,
    /// SNI pattern, or [`HostMatch::ANY`] (every connection; TLS: also those without SNI).
    pub host: HostMatch,
    /// The route this entry came from (for logs).
    pub route: RouteRef,
    /// Weighted backends; empty (every backendRef invalid): connections are closed.
    pub backends: Vec<L4Backend>,
    /// Passed through, or TLS terminated first.
    #[serde(skip_serializing_if = "L4Mode::is_passthrough")]
    pub mode: L4Mode,
    hash: ContentHash,
}
eq_by_content_hash!(L4Route);

impl L4Route {
    /// Builds a passthrough L4 route and computes its content hash.
    pub fn new(
        listener: ListenerKey,
        host: HostMatch,
        route: RouteRef,
        backends: Vec<L4Backend>,
    ) -> Self {
        Self::with_mode(listener, host, route, backends, L4Mode::Passthrough)
    }

    /// Builds an L4 route in `mode` and computes its content hash.
    pub fn with_mode(
        listener: ListenerKey,
        host: HostMatch,
        route: RouteRef,
        backends: Vec<L4Backend>,
        mode: L4Mode,
    ) -> Self {
        // A passthrough route hashes as it did before routes had a mode, so a data plane
        // one release older still accepts (re-hashes equal) what a newer controller sends.
        let hash = if mode.is_passthrough() {
            content_hash(&(&listener, &host, &route, &backends))
        } else {
            content_hash(&(&listener, &host, &route, &backends, &mode))
        };
        L4Route {
            listener,
            host,
            route,
            backends,
            mode,
            hash,
        }
    }

    /// The content hash computed at construction.
    pub fn hash(&self) -> ContentHash {
        self.hash
    }
}
