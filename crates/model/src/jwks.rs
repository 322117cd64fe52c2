//! JWK Sets (RFC 7517): the usable public keys of a `{"keys": [...]}` document, read by
//! the translator (inline and Secret sets) and by the data plane (sets fetched from a
//! URL), so both decode a key alike. The input is untrusted: errors are values, sizes
//! are bounded (fuzz target `jwks`).

use std::sync::Arc;

use base64::Engine;
use serde::Deserialize;

use crate::policy::{JwtKey, JwtKeyMaterial};

/// The most keys read from one JWK Set.
pub const MAX_JWKS_KEYS: usize = 64;
/// RSA keys shorter than this are skipped (RFC 7518 §3.3 requires 2048 bits).
const MIN_RSA_BYTES: usize = 256;

#[derive(Deserialize)]
struct JwkSet {
    keys: Vec<serde_json::Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    use_: Option<String>,
    n: Option<String>,
    e: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

/// The usable keys of a JWK Set, and why the others were skipped.
pub fn read_jwks(json: &[u8]) -> Result<(Vec<JwtKey>, Vec<String>), String> {
    let set: JwkSet = serde_json::from_slice(json)
        .map_err(|e| format!("not a JWK Set ({{\"keys\": [...]}}): {e}"))?;
    if set.keys.len() > MAX_JWKS_KEYS {
        return Err(format!("more than {MAX_JWKS_KEYS} keys"));
    }
    let mut keys = Vec::new();
    let mut skipped = Vec::new();
    for (i, value) in set.keys.into_iter().enumerate() {
        let jwk: Jwk = match serde_json::from_value(value) {
            Ok(j) => j,
            Err(e) => {
                skipped.push(format!("key {i}: {e}; skipped"));
                continue;
            }
        };
        let label = match &jwk.kid {
            Some(kid) => format!("key {i} (kid {kid:?})"),
            None => format!("key {i}"),
        };
        match key(&jwk) {
            Ok(material) => {
                if let Some(alg) = &jwk.alg
                    && !material.verifies(alg)
                {
                    skipped.push(format!(
                        "{label}: alg {alg:?} does not fit a {} key; skipped",
                        jwk.kty
                    ));
                    continue;
                }
                keys.push(JwtKey {
                    kid: jwk.kid.as_deref().map(Arc::from),
                    alg: jwk.alg.as_deref().map(Arc::from),
                    material,
                });
            }
            Err(why) => skipped.push(format!("{label}: {why}; skipped")),
        }
    }
    Ok((keys, skipped))
}

fn key(jwk: &Jwk) -> Result<JwtKeyMaterial, String> {
    if jwk.use_.as_deref().is_some_and(|u| u != "sig") {
        return Err("not a signing key (use is not \"sig\")".into());
    }
    let part = |name: &str, v: &Option<String>| -> Result<Vec<u8>, String> {
        let v = v.as_deref().ok_or_else(|| format!("no {name:?}"))?;
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(v.trim_end_matches('='))
            .map_err(|_| format!("{name:?} is not base64url"))
    };
    match (jwk.kty.as_str(), jwk.crv.as_deref()) {
        ("RSA", _) => {
            let n = part("n", &jwk.n)?;
            let e = part("e", &jwk.e)?;
            let bits = n.iter().skip_while(|b| **b == 0).count();
            if bits < MIN_RSA_BYTES {
                return Err(format!(
                    "RSA modulus of {} bits (at least 2048 required)",
                    bits * 8
                ));
            }
            if e.is_empty() || e.len() > 8 {
                return Err("RSA exponent out of range".into());
            }
            Ok(JwtKeyMaterial::Rsa {
                n: n.into(),
                e: e.into(),
            })
        }
        ("EC", Some(crv @ ("P-256" | "P-384"))) => {
            let len = if crv == "P-256" { 32 } else { 48 };
            let (x, y) = (part("x", &jwk.x)?, part("y", &jwk.y)?);
            if x.len() != len || y.len() != len {
                return Err(format!("{crv} coordinates must be {len} bytes"));
            }
            let mut point = Vec::with_capacity(1 + 2 * len);
            point.push(4);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            Ok(if len == 32 {
                JwtKeyMaterial::EcP256(point.into())
            } else {
                JwtKeyMaterial::EcP384(point.into())
            })
        }
        ("OKP", Some("Ed25519")) => {
            let x = part("x", &jwk.x)?;
            if x.len() != 32 {
                return Err("Ed25519 key must be 32 bytes".into());
            }
            Ok(JwtKeyMaterial::Ed25519(x.into()))
        }
        ("EC" | "OKP", crv) => Err(format!("unsupported curve {crv:?}")),
        ("oct", _) => Err("symmetric keys (HS256…) are not supported".into()),
        (kty, _) => Err(format!("unsupported key type {kty:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SET: &str = r#"{"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}, {"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}, {"kty": "oct", "k": "c2VjcmV0"}]}"#;

    /// Every prefix of a set and every one-byte change of it is read without a panic,
    /// and what is kept obeys the reader's bounds (the fuzz target `jwks` does this on
    /// arbitrary bytes; this is the deterministic part CI runs with the unit tests).
    #[test]
    fn damaged_sets_are_read_or_refused_without_panics() {
        let (keys, skipped) = read_jwks(SET.as_bytes()).unwrap();
        assert_eq!((keys.len(), skipped.len()), (2, 1));
        let check = |bytes: &[u8]| {
            if let Ok((keys, _)) = read_jwks(bytes) {
                assert!(keys.len() <= MAX_JWKS_KEYS);
                for k in keys {
                    if let Some(alg) = &k.alg {
                        assert!(k.material.verifies(alg));
                    }
                }
            }
        };
        let bytes = SET.as_bytes();
        for i in 0..bytes.len() {
            check(&bytes[..i]);
            for b in [b'"', b'{', b'0', 0xff] {
                let mut changed = bytes.to_vec();
                changed[i] = b;
                check(&changed);
            }
        }
    }
}
