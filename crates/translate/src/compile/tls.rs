//! TLS Secrets → validated [`Certificate`]s.

use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use weir_api::Secret;
use weir_model::Certificate;

use crate::compile::pem;

/// Why a Secret cannot serve as a TLS certificate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InvalidSecret {
    /// Not of `type: kubernetes.io/tls` (the only type the API server holds to having
    /// `tls.crt` and `tls.key`), whatever keys it has.
    #[error("not a TLS Secret (needs type kubernetes.io/tls with tls.crt and tls.key)")]
    NotTls,
    /// A required key is missing.
    #[error("{0}: missing")]
    Missing(&'static str),
    /// A `data` value is not base64.
    #[error("data.{0}: not valid base64")]
    Base64(&'static str),
    /// The chain holds no certificate or a malformed one.
    #[error("tls.crt: {0}")]
    Chain(String),
    /// The key is not a PEM private key.
    #[error("tls.key: {0}")]
    Key(String),
}

const CRT: &str = "tls.crt";
const KEY: &str = "tls.key";

/// Whether a Secret claims to be a TLS Secret (and so gets a status when it is broken).
pub(crate) fn looks_like_tls(s: &Secret) -> bool {
    *s.type_ == *"kubernetes.io/tls" || s.has(CRT) || s.has(KEY)
}

/// The bytes of a Secret key as the shared buffer the certificate keeps: a `stringData`
/// value's own buffer (not a copy), or a `data` value decoded once.
fn value(s: &Secret, key: &'static str) -> Result<Arc<[u8]>, InvalidSecret> {
    if let Some(v) = s.string_data.get(key) {
        return Ok(Arc::<[u8]>::from(v.clone()));
    }
    match s.value(key) {
        None => Err(InvalidSecret::Missing(key)),
        Some(Err(())) => Err(InvalidSecret::Base64(key)),
        Some(Ok(bytes)) => Ok(Arc::from(bytes)),
    }
}

fn parse(s: &Secret) -> Result<Arc<Certificate>, InvalidSecret> {
    if *s.type_ != *"kubernetes.io/tls" {
        return Err(InvalidSecret::NotTls);
    }
    if let Some(c) = &s.tls {
        // Packed: the chain and the key were canonical PEM blocks, read already (what
        // the checks below accept); the Secret's certificate is shared.
        return Ok(c.clone());
    }
    let chain = value(s, CRT)?;
    let key = value(s, KEY)?;
    // The quick check decodes nothing and accepts exactly what the reader below does;
    // only a chain or key it refuses is read again, for the reader's own error.
    if pem::accepts_chain(&chain) && pem::accepts_key(&key) {
        return Ok(Arc::new(Certificate::new(chain, key)));
    }
    let mut count = 0;
    for c in CertificateDer::pem_slice_iter(&chain) {
        c.map_err(|e| InvalidSecret::Chain(format!("malformed PEM: {e}")))?;
        count += 1;
    }
    if count == 0 {
        return Err(InvalidSecret::Chain("no PEM CERTIFICATE block".into()));
    }
    PrivateKeyDer::from_pem_slice(&key)
        .map_err(|e| InvalidSecret::Key(format!("no valid PEM private key ({e})")))?;
    Ok(Arc::new(Certificate::new(chain, key)))
}

/// Parses a Secret into a certificate; the error message names the Secret and field.
pub fn certificate_from_secret(s: &Secret) -> Result<Arc<Certificate>, String> {
    parse(s).map_err(|e| format!("Secret {}/{}: {e}", s.metadata.namespace, s.metadata.name))
}

/// The key of a ConfigMap (or Secret) holding a PEM CA bundle.
pub(crate) const CA_CRT: &str = "ca.crt";

/// Checks a PEM CA bundle: at least one `CERTIFICATE` block, each well-formed (framing
/// and base64; the data plane reads the DER).
pub(crate) fn ca_bundle(pem: &[u8]) -> Result<Arc<[u8]>, String> {
    if pem::accepts_chain(pem) {
        return Ok(Arc::from(pem));
    }
    let mut count = 0;
    for c in CertificateDer::pem_slice_iter(pem) {
        c.map_err(|e| format!("{CA_CRT}: malformed PEM: {e}"))?;
        count += 1;
    }
    if count == 0 {
        return Err(format!("{CA_CRT}: no PEM CERTIFICATE block"));
    }
    Ok(Arc::from(pem))
}

/// A ConfigMap's CA bundle (`data["ca.crt"]`).
pub(crate) fn ca_from_config_map(cm: &weir_api::ConfigMap) -> Result<Arc<[u8]>, String> {
    match cm.data.get(CA_CRT) {
        Some(v) => ca_bundle(v.as_bytes()),
        None => Err(format!("no key {CA_CRT}")),
    }
}

/// A Secret's CA bundle (`ca.crt`, as cert-manager writes it beside `tls.crt`).
pub(crate) fn ca_from_secret(s: &Secret) -> Result<Arc<[u8]>, String> {
    let v = match value(s, "ca.crt") {
        Ok(v) => v,
        Err(InvalidSecret::Missing(_)) => return Err(format!("no key {CA_CRT}")),
        Err(e) => return Err(e.to_string()),
    };
    ca_bundle(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_bundles_need_a_certificate_block() {
        let crt = "-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n";
        assert!(ca_bundle(crt.as_bytes()).is_ok());
        assert_eq!(
            ca_bundle(b"hello").unwrap_err(),
            "ca.crt: no PEM CERTIFICATE block"
        );
        let mut cm = weir_api::ConfigMap::default();
        assert_eq!(ca_from_config_map(&cm).unwrap_err(), "no key ca.crt");
        cm.data.insert(CA_CRT.into(), crt.into());
        assert!(ca_from_config_map(&cm).is_ok());
        let mut s = Secret::default();
        assert_eq!(ca_from_secret(&s).unwrap_err(), "no key ca.crt");
        s.string_data.insert(CA_CRT.into(), crt.into());
        assert!(ca_from_secret(&s).is_ok());
    }

    fn secret(crt: &str, key: &str, data: bool) -> Secret {
        let mut s = Secret {
            type_: "kubernetes.io/tls".into(),
            ..Secret::default()
        };
        s.metadata.namespace = "ns".into();
        s.metadata.name = "s".into();
        if data {
            s.data.insert(CRT.into(), crt.into());
            s.data.insert(KEY.into(), key.into());
        } else {
            s.string_data.insert(CRT.into(), crt.into());
            s.string_data.insert(KEY.into(), key.into());
        }
        s
    }

    #[test]
    fn rejects_bad_secrets() {
        assert_eq!(parse(&Secret::default()), Err(InvalidSecret::NotTls));
        let mut s = secret("x", "y", false);
        s.string_data.remove(KEY);
        assert_eq!(parse(&s), Err(InvalidSecret::Missing(KEY)));
        assert_eq!(
            parse(&secret("%%%", "%%%", true)),
            Err(InvalidSecret::Base64(CRT))
        );
        assert!(matches!(
            parse(&secret("hello", "world", false)),
            Err(InvalidSecret::Chain(_))
        ));
        let msg = certificate_from_secret(&secret("hello", "world", false)).unwrap_err();
        assert_eq!(msg, "Secret ns/s: tls.crt: no PEM CERTIFICATE block");
        // Only `kubernetes.io/tls` Secrets serve certificates, whatever keys another
        // type holds: the API server vouches for those keys only in that type.
        let mut opaque = secret("x", "y", false);
        opaque.type_ = "Opaque".into();
        assert!(looks_like_tls(&opaque));
        assert_eq!(parse(&opaque), Err(InvalidSecret::NotTls));
    }

    #[test]
    fn accepts_pem_and_shares_by_content() {
        // Structurally valid PEM (the translator checks framing, not the DER contents).
        let crt = "-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n";
        let key = "-----BEGIN PRIVATE KEY-----\nAAEC\n-----END PRIVATE KEY-----\n";
        let a = parse(&secret(crt, key, false)).unwrap();
        let b64 = |s: &str| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(s)
        };
        let b = parse(&secret(&b64(crt), &b64(key), true)).unwrap();
        assert_eq!(a.hash(), b.hash());
        assert!(matches!(
            parse(&secret(crt, "nope", false)),
            Err(InvalidSecret::Key(_))
        ));
        // Packed as the readers pack them: the same certificate, held packed.
        for data in [false, true] {
            let mut s = if data {
                secret(&b64(crt), &b64(key), true)
            } else {
                secret(crt, key, false)
            };
            s.pack_tls();
            assert!(s.tls.is_some() && s.string_data.is_empty() && s.data.is_empty());
            assert!(looks_like_tls(&s));
            let c = parse(&s).unwrap();
            assert!(c.as_packed().is_some());
            assert!(
                Arc::ptr_eq(&c, s.tls.as_ref().unwrap()),
                "shared, not copied"
            );
            assert_eq!(c.hash(), a.hash());
            assert_eq!(
                (&*c.chain_pem(), &*c.key_pem()),
                (crt.as_bytes(), key.as_bytes())
            );
        }
        // A key that is not a PEM key is not packed, and refused as text.
        let mut bad_key = secret(crt, "nope", false);
        bad_key.pack_tls();
        assert!(bad_key.tls.is_none());
        assert!(matches!(parse(&bad_key), Err(InvalidSecret::Key(_))));
        // Not canonical (CRLF): left as text, and still served.
        let mut crlf = secret(&crt.replace('\n', "\r\n"), key, false);
        crlf.pack_tls();
        assert!(crlf.tls.is_none());
        assert!(parse(&crlf).unwrap().as_packed().is_none());
    }
}
