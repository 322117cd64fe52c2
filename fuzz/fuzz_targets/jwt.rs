//! Fuzzes `weir_proxy::verify_jwt`, the check of `jwtAuth` policies, on arbitrary tokens
//! (the `Authorization: Bearer` value a client controls) against providers holding keys
//! of every supported kind (RSA, EC P-256, EC P-384, Ed25519), with and without `kid`s,
//! issuers and audiences. Properties:
//! - verification never panics and ends, whatever the token (the header and claims are
//!   base64url JSON the client chose; the signature is checked before any claim);
//! - nothing verifies: the keys are random bytes, so no input can carry a valid signature,
//!   and a token with `alg: none` or an HMAC algorithm must not pass either.

#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use weir_model::{JwtAuth, JwtKey, JwtKeyMaterial, JwtProvider};
use weir_proxy::verify_jwt;

fn bytes(seed: u8, n: usize) -> Arc<[u8]> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn point(seed: u8, n: usize) -> Arc<[u8]> {
    let mut p = vec![4u8];
    p.extend_from_slice(&bytes(seed, 2 * n));
    p.into()
}

fn auth() -> JwtAuth {
    let key = |kid: Option<&str>, material| JwtKey {
        kid: kid.map(Arc::from),
        alg: None,
        material,
    };
    JwtAuth {
        providers: vec![
            JwtProvider {
                name: "a".into(),
                issuer: Some("https://a".into()),
                audiences: vec!["api".into()],
                keys: vec![
                    key(
                        Some("r"),
                        JwtKeyMaterial::Rsa {
                            n: bytes(1, 256),
                            e: vec![1, 0, 1].into(),
                        },
                    ),
                    key(Some("e"), JwtKeyMaterial::EcP256(point(2, 32))),
                ],
                required_claims: vec![("sub".into(), vec![])],
                claims_to_headers: vec![],
                remote_jwks: None,
            },
            JwtProvider {
                name: "b".into(),
                issuer: None,
                audiences: vec![],
                keys: vec![
                    key(None, JwtKeyMaterial::EcP384(point(3, 48))),
                    key(None, JwtKeyMaterial::Ed25519(bytes(4, 32))),
                ],
                required_claims: vec![],
                claims_to_headers: vec![],
                remote_jwks: None,
            },
        ],
        forward_token: false,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    assert!(!verify_jwt(&auth(), token), "{token:?} verified");
});
