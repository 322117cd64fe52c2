use std::sync::Arc;

use serde::Serialize;

use crate::hash::{ContentHash, content_hash, eq_by_content_hash};
use crate::host::HostMatch;
use crate::listener::ListenerKey;

/// A PEM certificate chain and its private key, addressed by the hash of their bytes.
///
/// Domains that use the same certificate share one `Certificate` (and the data plane
/// parses it once). The translator has checked that both PEM blocks are present and
/// well-formed before building one.
#[derive(Clone, Debug, Serialize)]
pub struct Certificate {
    /// PEM `CERTIFICATE` blocks, leaf first.
    #[serde(skip)]
    pub chain_pem: Arc<[u8]>,
    /// PEM private key (PKCS#8, SEC1 or PKCS#1).
    #[serde(skip)]
    pub key_pem: Arc<[u8]>,
    hash: ContentHash,
}
eq_by_content_hash!(Certificate);

impl Certificate {
    /// Wraps PEM bytes and hashes them.
    pub fn new(chain_pem: Arc<[u8]>, key_pem: Arc<[u8]>) -> Self {
        let hash = content_hash(&(&*chain_pem, &*key_pem));
        Certificate {
            chain_pem,
            key_pem,
            hash,
        }
    }

    /// The content hash: the certificate's identity.
    pub fn hash(&self) -> ContentHash {
        self.hash
    }
}

/// Which certificate a listener presents for a host pattern (the SNI table entry).
/// [`HostMatch::Any`] is the listener's default certificate.
#[derive(Clone, Debug, Serialize)]
pub struct SniCert {
    /// The TLS listener.
    pub listener: ListenerKey,
    /// SNI pattern.
    pub host: HostMatch,
    /// Hash of a [`Certificate`] delivered in the same or an earlier batch.
    pub cert: ContentHash,
    hash: ContentHash,
}
eq_by_content_hash!(SniCert);

impl SniCert {
    /// Builds an SNI entry and computes its content hash.
    pub fn new(listener: ListenerKey, host: HostMatch, cert: ContentHash) -> Self {
        let hash = content_hash(&(&listener, &host, &cert));
        SniCert {
            listener,
            host,
            cert,
            hash,
        }
    }

    /// The content hash computed at construction.
    pub fn hash(&self) -> ContentHash {
        self.hash
    }
}
