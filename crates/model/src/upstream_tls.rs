//! TLS towards backends: what a BackendTLSPolicy asks of the connections to a Service's
//! endpoints, and the client certificate a Gateway presents to them.

use std::sync::Arc;

use serde::Serialize;

/// Which certificates a backend's certificate must chain to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum TrustAnchors {
    /// PEM `CERTIFICATE` blocks (the `ca.crt` of the policy's ConfigMaps).
    #[serde(serialize_with = "pem_len")]
    Pem(Arc<[u8]>),
    /// The platform's trusted CAs (`wellKnownCACertificates: System`).
    System,
    /// None usable (every `caCertificateRef` was invalid): every handshake fails, so the
    /// Service is never reached in plaintext nor with an unverified certificate.
    Nothing,
}

fn pem_len<S: serde::Serializer>(pem: &Arc<[u8]>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{} bytes of PEM", pem.len()))
}

/// A name the backend's certificate must carry (one of them).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum SubjectName {
    /// A DNS name (`*.` wildcards in the certificate match as usual).
    Dns(Arc<str>),
    /// A URI SAN, compared exactly (e.g. a SPIFFE ID).
    Uri(Arc<str>),
}

/// How the data plane connects to one Service port over TLS.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct UpstreamTls {
    /// The SNI sent (the policy's `hostname`).
    pub sni: Arc<str>,
    /// The trust anchors.
    pub trust: TrustAnchors,
    /// The names accepted; empty: the certificate must be valid for `sni`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subject_names: Vec<SubjectName>,
    /// The BackendTLSPolicy (`namespace/name`) this comes from, for logs and errors.
    pub policy: Arc<str>,
}

/// The upstream TLS of a Service's ports (a BackendTLSPolicy field on a
/// [`crate::PolicyTarget::Backend`] policy): a port's own entry (a targetRef with
/// `sectionName`) wins over the Service-wide one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct BackendTls {
    /// For every port without an entry of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all_ports: Option<Arc<UpstreamTls>>,
    /// Per Service port number, sorted by port.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<(u16, Arc<UpstreamTls>)>,
}

impl BackendTls {
    /// The setting for Service port `port`.
    pub fn for_port(&self, port: u16) -> Option<&Arc<UpstreamTls>> {
        match self.ports.binary_search_by_key(&port, |(p, _)| *p) {
            Ok(i) => Some(&self.ports[i].1),
            Err(_) => self.all_ports.as_ref(),
        }
    }
}
