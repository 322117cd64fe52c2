//! Fuzzes the translator's check of a TLS Secret's PEM (`weir_translate::pem_accepts`,
//! `compile/pem.rs`) on untrusted bytes: a Secret's `tls.crt` / `tls.key` as a user or a
//! cluster wrote them. The check replays rustls-pki-types' reader without decoding, and the
//! translator trusts a `true` without running the reader, so it must never accept what the
//! reader refuses. Properties:
//! - it never panics and ends, whatever the bytes;
//! - it gives the reader's answer for the chain (no error, at least one `CERTIFICATE`, as
//!   `CertificateDer::pem_slice_iter` reads it) and for the key (`PrivateKeyDer::from_pem_slice`
//!   finds one): the same answer both ways, so a refusal it adds (a slower path, not a
//!   wrong one) fails here too.
//!
//! The same bytes as a chain, then as a key, to pack (`weir_model::PackedTls::from_pem`,
//! which the Secret readers run on every TLS Secret): it never panics; a packed chain
//! writes back exactly the bytes it was packed from and holds the certificates
//! rustls-pki-types' reader reads from them, in order; a packed key (decoded by weir's
//! constant-time base64) writes back exactly its bytes and holds the key that reader
//! reads from them, of the same kind.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

fn reader_chain(pem: &[u8]) -> bool {
    let mut certs = 0usize;
    for c in CertificateDer::pem_slice_iter(pem) {
        if c.is_err() {
            return false;
        }
        certs += 1;
    }
    certs > 0
}

/// A canonical key and chain, to pack the input with.
const KEY: &[u8] = b"-----BEGIN PRIVATE KEY-----\nAAEC\n-----END PRIVATE KEY-----\n";
const CHAIN: &[u8] = b"-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n";

fuzz_target!(|data: &[u8]| {
    if let Some(p) = weir_model::PackedTls::from_pem(CHAIN, data) {
        assert_eq!(p.key_pem(), data, "key packed but not one-to-one");
        let (kind, der) = p.key_der();
        let read = PrivateKeyDer::from_pem_slice(data).expect("the reader refuses a packed key");
        let read_kind = match read {
            PrivateKeyDer::Pkcs8(_) => weir_model::KeyKind::Pkcs8,
            PrivateKeyDer::Sec1(_) => weir_model::KeyKind::Sec1,
            PrivateKeyDer::Pkcs1(_) => weir_model::KeyKind::Pkcs1,
            _ => panic!("a kind of key the reader added"),
        };
        assert_eq!(
            (kind, der),
            (read_kind, read.secret_der()),
            "packed key differs"
        );
    }
    if let Some(p) = weir_model::PackedTls::from_pem(data, KEY) {
        assert_eq!(p.chain_pem(), data, "packed but not one-to-one");
        assert_eq!(p.key_pem(), KEY);
        let read: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(data)
            .map(|c| c.expect("the reader refuses a packed chain").to_vec())
            .collect();
        let packed: Vec<Vec<u8>> = p.chain_der().map(<[u8]>::to_vec).collect();
        assert_eq!(packed, read, "packed certificates differ from the reader's");
    }
    let (chain, key) = weir_translate::pem_accepts(data);
    let reader_key = PrivateKeyDer::from_pem_slice(data).is_ok();
    assert!(
        !chain || reader_chain(data),
        "a chain the reader refuses was accepted"
    );
    assert!(
        !key || reader_key,
        "a key the reader does not find was accepted"
    );
    assert_eq!(
        chain,
        reader_chain(data),
        "chain: refused what the reader reads"
    );
    assert_eq!(key, reader_key, "key: refused what the reader finds");
});
