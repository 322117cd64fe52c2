//! TLS towards backends (BackendTLSPolicy): the rustls client configuration of a Service
//! port, built once per cluster version ([`crate::balance::ClusterState`]), and the
//! verifier that checks a backend's certificate against the policy's CA and names.
//!
//! The chain is verified against the policy's trust anchors (its CA certificates, or the
//! platform's for `System`); the name against the policy's `subjectAltNames` when it
//! has any (a DNS name matched as webpki matches a server name, a URI compared exactly),
//! else against the SNI (`hostname`). A policy with no usable CA verifies nothing
//! successfully: its Service is unreachable rather than reached unverified.
//!
//! A Gateway with a backend client certificate (`spec.tls.backend.clientCertificateRef`)
//! presents it in those handshakes: the configuration is then one per (Service port
//! settings, certificate) pair, built on first use and kept by the cluster
//! ([`crate::balance::ClusterState::tls_for`]).

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use weir_model::{Certificate, SubjectName, TrustAnchors, UpstreamTls};

/// The ALPN protocol name of HTTP/2 over TLS.
pub(crate) const H2_ALPN: &[u8] = b"h2";

/// How one cluster's connections are made over TLS.
pub(crate) struct TlsTarget {
    /// Pool identity: connections of different TLS settings to one address are not
    /// shared (the content hash of the settings).
    pub(crate) id: u64,
    /// The configuration for HTTP/1.1 (ALPN `http/1.1`): the HTTP/1.1 pool and HTTP
    /// health probes.
    pub(crate) config: Arc<ClientConfig>,
    /// The same with ALPN `h2` only: HTTP/2 (h2c and gRPC clusters, gRPC health probes).
    /// A backend that does not select `h2` is refused ([`H2_ALPN`]).
    pub(crate) config_h2: Arc<ClientConfig>,
    /// The SNI sent.
    pub(crate) server_name: ServerName<'static>,
    /// The BackendTLSPolicy (or Ingress), for errors.
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
    /// Builds the client configuration of `tls`, presenting the certificate of the
    /// settings themselves (an Ingress's `proxy-ssl-secret`) or else `client` (the
    /// Gateway's `spec.tls.backend` certificate) to backends that ask for one. Fails on an
    /// SNI that is not a DNS name (the translator refuses those) and on a client
    /// certificate rustls cannot use (the translator checked its PEM framing only).
    pub(crate) fn new(
        tls: &UpstreamTls,
        client: Option<&Certificate>,
    ) -> Result<TlsTarget, String> {
        let client = tls.client_certificate.as_deref().or(client);
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
            TrustAnchors::Unverified => {
                tracing::warn!(
                    source = %tls.policy,
                    "upstream TLS without certificate verification (asked for: proxy-ssl-verify is not on)"
                );
                Arc::new(RootCertStore::empty())
            }
        };
        let verifier = Arc::new(PolicyVerifier {
            roots,
            names: tls.subject_names.clone(),
            algorithms: provider.signature_verification_algorithms,
            unverified: tls.trust == TrustAnchors::Unverified,
        });
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = match client {
            None => builder.with_no_client_auth(),
            Some(c) => {
                let chain: Vec<CertificateDer<'static>> =
                    crate::tls::chain_der(c).map_err(|e| format!("client certificate: {e}"))?;
                let key =
                    crate::tls::key_der(c).map_err(|e| format!("client certificate key: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("client certificate: {e}"))?
            }
        };
        config.enable_sni = !tls.hide_sni;
        let mut config_h2 = config.clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config_h2.alpn_protocols = vec![H2_ALPN.to_vec()];
        // Connections made with one Gateway's certificate are another identity than those
        // made with another's (or none): the pool keeps them apart by this id (the
        // settings' own certificate is part of their hash).
        let id = match client {
            None => weir_model::content_hash(tls).0,
            Some(c) => weir_model::content_hash(&(tls, c.hash().0)).0,
        };
        Ok(TlsTarget {
            id,
            config: Arc::new(config),
            config_h2: Arc::new(config_h2),
            server_name,
            policy: tls.policy.clone(),
        })
    }
}

/// Why an HTTP/2 connection over TLS was refused after its handshake: the backend did
/// not select `h2` by ALPN (it would speak HTTP/1.1, or nothing known, on the stream).
#[derive(Debug, thiserror::Error)]
#[error("upstream TLS (BackendTLSPolicy {policy}): the backend selected ALPN {selected}, not h2")]
pub(crate) struct NotH2 {
    /// The policy, for the operator.
    pub(crate) policy: Arc<str>,
    /// What the backend selected (`none` when it selected nothing).
    pub(crate) selected: String,
}

impl TlsTarget {
    /// The TLS handshake of an HTTP/2 connection over `stream` (ALPN `h2`, the policy's
    /// SNI and verifier), refusing a backend that does not select `h2`.
    pub(crate) async fn connect_h2<S>(
        &self,
        stream: S,
    ) -> Result<tokio_rustls::client::TlsStream<S>, crate::error::BoxError>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&self.config_h2));
        let tls = connector.connect(self.server_name.clone(), stream).await?;
        match tls.get_ref().1.alpn_protocol() {
            Some(H2_ALPN) => Ok(tls),
            other => Err(Box::new(NotH2 {
                policy: self.policy.clone(),
                selected: other.map_or_else(
                    || "none".to_owned(),
                    |p| String::from_utf8_lossy(p).into_owned(),
                ),
            })),
        }
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
    /// Any certificate is accepted ([`TrustAnchors::Unverified`]); the handshake's
    /// signatures are still checked.
    unverified: bool,
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
        if self.unverified {
            return Ok(ServerCertVerified::assertion());
        }
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
