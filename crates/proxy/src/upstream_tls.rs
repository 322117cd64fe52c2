//! TLS towards backends (BackendTLSPolicy): the rustls client configuration of a Service
//! port, built once per cluster version ([`crate::balance::ClusterState`]), and the
//! verifier that checks a backend's certificate against the policy's CA and names.
//!
//! The chain is verified against the policy's trust anchors (its CA certificates, or the
//! platform's for `System`); the name against the policy's `subjectAltNames` when it
//! has any (a DNS name matched as webpki matches a server name, a URI compared exactly),
//! else against the SNI (`hostname`). A policy with no usable CA verifies nothing
//! successfully: its Service is unreachable rather than reached unverified.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use weir_model::{SubjectName, TrustAnchors, UpstreamTls};

/// How one cluster's connections are made over TLS.
pub(crate) struct TlsTarget {
    /// Pool identity: connections of different TLS settings to one address are not
    /// shared (the content hash of the settings).
    pub(crate) id: u64,
    /// The configuration (ALPN `http/1.1`).
    pub(crate) config: Arc<ClientConfig>,
    /// The SNI sent.
    pub(crate) server_name: ServerName<'static>,
    /// The BackendTLSPolicy, for errors.
    pub(crate) policy: Arc<str>,
}

impl std::fmt::Debug for TlsTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsTarget")
            .field("sni", &self.server_name)
            .field("policy", &self.policy)
            .finish()
    }
}

impl TlsTarget {
    /// Builds the client configuration of `tls`. Fails only on an SNI that is not a DNS
    /// name (the translator refuses those).
    pub(crate) fn new(tls: &UpstreamTls) -> Result<TlsTarget, String> {
        let server_name = ServerName::try_from(tls.sni.to_string())
            .map_err(|e| format!("SNI {:?}: {e}", tls.sni))?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let roots = match &tls.trust {
            TrustAnchors::Pem(pem) => {
                let mut store = RootCertStore::empty();
                for der in CertificateDer::pem_slice_iter(pem).flatten() {
                    // A CA the translator let through but webpki cannot use is skipped;
                    // with none left, nothing verifies.
                    let _ = store.add(der);
                }
                Arc::new(store)
            }
            TrustAnchors::System => system_roots(),
            TrustAnchors::Nothing => Arc::new(RootCertStore::empty()),
        };
        let verifier = Arc::new(PolicyVerifier {
            roots,
            names: tls.subject_names.clone(),
            algorithms: provider.signature_verification_algorithms,
        });
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsTarget {
            id: weir_model::content_hash(tls).0,
            config: Arc::new(config),
            server_name,
            policy: tls.policy.clone(),
        })
    }
}

/// The platform's trusted CAs, read once (`rustls-native-certs`: the system store, or
/// `SSL_CERT_FILE`/`SSL_CERT_DIR`).
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::warn!(error = %e, "reading the system's CA certificates");
            }
            let mut store = RootCertStore::empty();
            let (added, ignored) = store.add_parsable_certificates(found.certs);
            tracing::info!(added, ignored, "system CA certificates for upstream TLS");
            Arc::new(store)
        })
        .clone()
}

/// Verifies a backend's certificate as a BackendTLSPolicy asks.
#[derive(Debug)]
struct PolicyVerifier {
    roots: Arc<RootCertStore>,
    /// Empty: the SNI.
    names: Vec<SubjectName>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PolicyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        if self.names.is_empty() {
            verify_server_name(&cert, server_name)?;
            return Ok(ServerCertVerified::assertion());
        }
        let mut uris: Option<Vec<String>> = None;
        for name in &self.names {
            match name {
                SubjectName::Dns(d) => {
                    if let Ok(n) = ServerName::try_from(&**d)
                        && verify_server_name(&cert, &n).is_ok()
                    {
                        return Ok(ServerCertVerified::assertion());
                    }
                }
                SubjectName::Uri(u) => {
                    let uris = uris.get_or_insert_with(|| uri_sans(end_entity));
                    if uris.iter().any(|x| x == &**u) {
                        return Ok(ServerCertVerified::assertion());
                    }
                }
            }
        }
        Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName,
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The URI subject alternative names of a certificate (none if it does not parse).
fn uri_sans(der: &CertificateDer<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der.as_ref()) else {
        return Vec::new();
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::URI(u) => Some((*u).to_owned()),
            _ => None,
        })
        .collect()
}
