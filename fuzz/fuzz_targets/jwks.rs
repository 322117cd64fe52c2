//! Fuzzes the JWK Set reader (`weir_model::read_jwks`) on untrusted bytes: a document a
//! data plane fetched from a URL (or a Secret's value). Properties:
//! - it never panics, whatever the bytes;
//! - it keeps at most `MAX_JWKS_KEYS` keys, each of a type the data plane verifies with,
//!   and a key naming an `alg` only when that algorithm fits its type.

#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_model::{JwtKeyMaterial, MAX_JWKS_KEYS, read_jwks};

fuzz_target!(|data: &[u8]| {
    let Ok((keys, _skipped)) = read_jwks(data) else {
        return;
    };
    assert!(keys.len() <= MAX_JWKS_KEYS);
    for k in &keys {
        if let Some(alg) = &k.alg {
            assert!(k.material.verifies(alg), "{alg} on a key it does not fit");
        }
        match &k.material {
            JwtKeyMaterial::Rsa { n, e } => assert!(n.len() >= 256 && !e.is_empty()),
            JwtKeyMaterial::EcP256(p) => assert_eq!(p.len(), 65),
            JwtKeyMaterial::EcP384(p) => assert_eq!(p.len(), 97),
            JwtKeyMaterial::Ed25519(x) => assert_eq!(x.len(), 32),
        }
    }
});
