//! Client certificate validation on HTTPS listeners (`ListenerSettings::client_validation`,
//! Gateway API `spec.tls.frontend`): the handshake asks for a certificate and checks it
//! against the listener's CAs with rustls' WebPKI verifier.
//!
//! The verifier is built once per listener version (when its runtime is built), never per
//! handshake; a CA change is a listener change and swaps the acceptor for new connections
//! only, leaving the SNI certificate table untouched.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use rustls::DistinguishedName;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, UnixTime};
use weir_model::{ClientValidation, ClientValidationMode, ListenerKey};

/// Why a listener's CAs could not be turned into a verifier.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InvalidCa {
    /// A PEM block of the bundle could not be decoded.
    #[error("invalid CA PEM: {0}")]
    Pem(rustls_pki_types::pem::Error),
    /// No certificate of the bundle is a usable trust anchor (or there is none).
    #[error("no usable CA certificate: {0}")]
    Anchors(String),
}

/// Checks client certificates for one listener; counts (and logs at debug) the ones that
/// fail. With [`ClientValidationMode::AllowInsecureFallback`] a client without a
/// certificate, or with one that fails, is served anyway.
#[derive(Debug)]
pub(crate) struct ClientVerifier {
    /// `None` when the CAs are unusable: every certificate is refused (closed, never
    /// open), whatever the mode says, except that the fallback mode still serves.
    inner: Option<Arc<dyn ClientCertVerifier>>,
    mode: ClientValidationMode,
    provider: Arc<CryptoProvider>,
    listener: ListenerKey,
    rejected: Counter,
}

/// The verifier of a listener's validation settings. Unusable CAs are logged once here
/// (the translator checked the PEM framing; this reads the DER) and fail closed.
pub(crate) fn verifier(
    v: &ClientValidation,
    provider: Arc<CryptoProvider>,
    listener: ListenerKey,
    rejected: Counter,
) -> Arc<ClientVerifier> {
    let inner = match webpki_verifier(&v.ca_pem, Arc::clone(&provider)) {
        Ok(inner) => Some(inner),
        Err(e) => {
            tracing::warn!(listener = %listener, error = %e, "client certificate CAs unusable; every client certificate is refused");
            None
        }
    };
    Arc::new(ClientVerifier {
        inner,
        mode: v.mode,
        provider,
        listener,
        rejected,
    })
}

/// rustls' WebPKI verifier over the bundle's certificates (a client certificate is
/// required by it; the fallback mode relaxes that in [`ClientVerifier`]).
fn webpki_verifier(
    pem: &[u8],
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, InvalidCa> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem) {
        let c = c.map_err(InvalidCa::Pem)?;
        // A bad block among good ones is skipped: the others still anchor.
        let _ = roots.add(c);
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| InvalidCa::Anchors(e.to_string()))
}

impl ClientVerifier {
    fn fallback(&self) -> bool {
        self.mode == ClientValidationMode::AllowInsecureFallback
    }
}

impl ClientCertVerifier for ClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        !self.fallback()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        match &self.inner {
            Some(v) => v.root_hint_subjects(),
            None => &[],
        }
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let result = match &self.inner {
            Some(v) => v.verify_client_cert(end_entity, intermediates, now),
            None => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            )),
        };
        match result {
            Ok(ok) => Ok(ok),
            Err(e) => {
                self.rejected.inc();
                tracing::debug!(listener = %self.listener, error = %e, fallback = self.fallback(), "client certificate rejected");
                if self.fallback() {
                    Ok(ClientCertVerified::assertion())
                } else {
                    Err(e)
                }
            }
        }
    }

    // The handshake signature proves the client holds the key of the certificate it
    // sent, whether or not that certificate verified: checked with the provider's
    // algorithms in both modes.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA and a leaf it signed, as PEM and DER.
    struct Pki {
        ca_pem: String,
        leaf: CertificateDer<'static>,
    }

    fn pki(name: &str) -> Pki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} CA"));
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let mut leaf = rcgen::CertificateParams::new(vec![format!("{name}.client")]).unwrap();
        leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let leaf = leaf.signed_by(&leaf_key, &issuer).unwrap();
        Pki {
            ca_pem: ca_cert.pem(),
            leaf: leaf.der().clone(),
        }
    }

    fn build(ca_pem: &str, mode: ClientValidationMode) -> (Arc<ClientVerifier>, Counter) {
        let rejected = Counter::default();
        let v = verifier(
            &ClientValidation {
                ca_pem: Arc::from(ca_pem.as_bytes()),
                mode,
            },
            Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
            ListenerKey::new(([127, 0, 0, 1], 443).into()),
            rejected.clone(),
        );
        (v, rejected)
    }

    #[test]
    fn certificates_of_the_ca_pass_and_others_are_refused() {
        let (ours, theirs) = (pki("ours"), pki("theirs"));
        let now = UnixTime::now();
        let (v, rejected) = build(&ours.ca_pem, ClientValidationMode::AllowValidOnly);
        assert!(v.offer_client_auth());
        assert!(v.client_auth_mandatory());
        assert_eq!(
            v.root_hint_subjects().len(),
            1,
            "the CA is named to clients"
        );
        assert!(v.verify_client_cert(&ours.leaf, &[], now).is_ok());
        assert!(v.verify_client_cert(&theirs.leaf, &[], now).is_err());
        assert_eq!(rejected.get(), 1);

        // Both CAs in one bundle: both leaves pass.
        let both = format!("{}{}", ours.ca_pem, theirs.ca_pem);
        let (v, _) = build(&both, ClientValidationMode::AllowValidOnly);
        assert!(v.verify_client_cert(&ours.leaf, &[], now).is_ok());
        assert!(v.verify_client_cert(&theirs.leaf, &[], now).is_ok());
    }

    #[test]
    fn insecure_fallback_serves_clients_without_a_valid_certificate_and_counts_them() {
        let (ours, theirs) = (pki("ours"), pki("theirs"));
        let (v, rejected) = build(&ours.ca_pem, ClientValidationMode::AllowInsecureFallback);
        assert!(v.offer_client_auth(), "the certificate is still asked for");
        assert!(!v.client_auth_mandatory());
        assert!(
            v.verify_client_cert(&theirs.leaf, &[], UnixTime::now())
                .is_ok()
        );
        assert_eq!(rejected.get(), 1);
    }

    #[test]
    fn unusable_cas_refuse_every_certificate() {
        let ours = pki("ours");
        // A well-framed block whose DER is not a certificate.
        let junk = "-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n";
        let (v, rejected) = build(junk, ClientValidationMode::AllowValidOnly);
        assert!(v.client_auth_mandatory());
        assert!(
            v.verify_client_cert(&ours.leaf, &[], UnixTime::now())
                .is_err()
        );
        assert_eq!(rejected.get(), 1);
    }
}
