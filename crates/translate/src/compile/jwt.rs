//! TrafficPolicy `jwtAuth`: providers and their JWK Sets (inline, or from a Secret) into
//! the IR's [`JwtAuth`]. Keys are decoded here, once per change, so the data plane only
//! verifies; a key it could not use (symmetric, encryption-only, too short, an unknown
//! curve) is skipped with a warning, and a provider left without keys refuses every token
//! (the policy is then not `Accepted`).

use std::collections::HashSet;
use std::sync::Arc;

use std::time::Duration;
use weir_api::{JwtAuthSpec, JwtProviderSpec, Kind, Object, ObjectKey};

use weir_model::{ExtAuthUrl, JwtAuth, JwtKey, JwtProvider, RateLimitKey, RemoteJwks, read_jwks};

use crate::compile::policy::{Refs, secret_entries};
use crate::store::Dep;

/// The most providers of one policy, and the most claims of each list.
const MAX_PROVIDERS: usize = 16;
const MAX_CLAIMS: usize = 16;
/// The Secret key holding a JWK Set when `secretRef.key` is unset.
const DEFAULT_JWKS_KEY: &str = "jwks";

pub(crate) fn jwt_auth(
    a: &JwtAuthSpec,
    field: &str,
    refs: &mut Refs<'_>,
) -> Result<JwtAuth, String> {
    if a.providers.is_empty() {
        return Err(format!(
            "{field}.providers: at least one provider is required"
        ));
    }
    if a.providers.len() > MAX_PROVIDERS {
        return Err(format!("{field}.providers: at most {MAX_PROVIDERS}"));
    }
    let mut names = HashSet::new();
    let mut providers = Vec::with_capacity(a.providers.len());
    for (i, p) in a.providers.iter().enumerate() {
        let f = format!("{field}.providers[{i}]");
        if p.name.is_empty() {
            return Err(format!("{f}.name: required"));
        }
        if !names.insert(p.name.as_str()) {
            return Err(format!("{f}.name: {:?} is not unique", p.name));
        }
        providers.push(provider(p, &f, refs)?);
    }
    Ok(JwtAuth {
        providers,
        forward_token: a.forward_token.unwrap_or(false),
    })
}

fn provider(p: &JwtProviderSpec, f: &str, refs: &mut Refs<'_>) -> Result<JwtProvider, String> {
    if p.issuer.as_deref() == Some("") {
        return Err(format!("{f}.issuer: must not be empty when set"));
    }
    if p.audiences.iter().any(String::is_empty) {
        return Err(format!("{f}.audiences: entries must not be empty"));
    }
    if p.required_claims.len() > MAX_CLAIMS || p.claims_to_headers.len() > MAX_CLAIMS {
        return Err(format!(
            "{f}: at most {MAX_CLAIMS} requiredClaims and {MAX_CLAIMS} claimsToHeaders"
        ));
    }
    let mut required_claims = Vec::new();
    for (j, c) in p.required_claims.iter().enumerate() {
        if c.name.is_empty() {
            return Err(format!("{f}.requiredClaims[{j}].name: required"));
        }
        let values = c.values.iter().map(|v| Arc::from(v.as_str())).collect();
        required_claims.push((Arc::from(c.name.as_str()), values));
    }
    let mut claims_to_headers = Vec::new();
    for (j, c) in p.claims_to_headers.iter().enumerate() {
        if c.claim.is_empty() {
            return Err(format!("{f}.claimsToHeaders[{j}].claim: required"));
        }
        if !RateLimitKey::is_header_name(&c.header) {
            return Err(format!(
                "{f}.claimsToHeaders[{j}].header: {:?} is not a header name",
                c.header
            ));
        }
        claims_to_headers.push((
            Arc::from(c.claim.as_str()),
            Arc::from(c.header.to_ascii_lowercase().as_str()),
        ));
    }
    let mut remote_jwks = None;
    let sources = [
        p.jwks.inline.is_some(),
        p.jwks.secret_ref.is_some(),
        p.jwks.config_map_ref.is_some(),
        p.remote_jwks.is_some(),
    ];
    if sources.iter().filter(|s| **s).count() != 1 {
        return Err(format!(
            "{f}: exactly one of jwks.inline, jwks.secretRef, jwks.configMapRef and remoteJwks is required"
        ));
    }
    let keys = match (&p.jwks.inline, &p.jwks.secret_ref, &p.remote_jwks) {
        (None, None, None) => {
            let r = p.jwks.config_map_ref.as_ref().expect("counted above");
            if r.name.is_empty() {
                return Err(format!("{f}.jwks.configMapRef.name: required"));
            }
            config_map_keys(
                &r.name,
                r.key.as_deref().unwrap_or(DEFAULT_JWKS_KEY),
                f,
                refs,
            )
        }
        (Some(json), None, None) => {
            let (keys, skipped) =
                read_jwks(json.as_bytes()).map_err(|e| format!("{f}.jwks.inline: {e}"))?;
            for s in skipped {
                refs.warnings.push(format!("{f}.jwks.inline: {s}"));
            }
            keys
        }
        (None, Some(r), None) => {
            if r.name.is_empty() {
                return Err(format!("{f}.jwks.secretRef.name: required"));
            }
            secret_keys(
                &r.name,
                r.key.as_deref().unwrap_or(DEFAULT_JWKS_KEY),
                f,
                refs,
            )
        }
        (None, None, Some(r)) => {
            remote_jwks = Some(Arc::new(remote(r, &format!("{f}.remoteJwks"), refs)?));
            Vec::new()
        }
        _ => unreachable!("exactly one source, counted above"),
    };
    if keys.is_empty() && remote_jwks.is_none() {
        refs.unresolved.push(format!(
            "{f}.jwks: no usable key; tokens of provider {:?} are refused (401)",
            p.name
        ));
    }
    Ok(JwtProvider {
        name: p.name.as_str().into(),
        issuer: p.issuer.as_deref().map(Arc::from),
        audiences: p.audiences.iter().map(|a| Arc::from(a.as_str())).collect(),
        keys,
        required_claims,
        claims_to_headers,
        remote_jwks,
    })
}

/// A remote JWK Set: an `https` URL, a refresh interval (default 5m, 1s–24h), a fetch
/// timeout (default 5s, at most 60s) and extra CA certificates (PEM, checked for at
/// least one certificate block; the data plane parses them).
fn remote(
    r: &weir_api::RemoteJwksSpec,
    f: &str,
    refs: &mut Refs<'_>,
) -> Result<RemoteJwks, String> {
    let url = ExtAuthUrl::parse(r.uri.trim()).map_err(|e| format!("{f}.uri: {e}"))?;
    if !url.https {
        return Err(format!("{f}.uri: must be an https:// URL"));
    }
    let duration = |v: &Option<String>, name: &str, default: u64, min: Duration, max: u64| {
        let d = match v {
            None => Duration::from_secs(default),
            Some(s) => crate::compile::duration::parse(s)
                .map_err(|e| format!("{f}.{name}: {e}"))?
                .unwrap_or_default(),
        };
        if d < min || d > Duration::from_secs(max) {
            return Err(format!(
                "{f}.{name}: must be {}ms to {max}s",
                min.as_millis()
            ));
        }
        Ok(d)
    };
    let refresh = duration(
        &r.refresh_interval,
        "refreshInterval",
        300,
        Duration::from_secs(1),
        86_400,
    )?;
    let timeout = duration(&r.timeout, "timeout", 5, Duration::from_millis(10), 60)?;
    let ca_pem = crate::compile::policy::ca_pem(&r.ca_certificate, &r.ca_certificate_ref, f, refs)?;
    Ok(RemoteJwks {
        url,
        refresh,
        timeout,
        ca_pem,
    })
}

/// The keys of the JWK Set in Secret `name`'s `key`: a missing Secret, key or a set that
/// is not JSON leaves none (and is `unresolved`).
fn secret_keys(name: &str, key: &str, f: &str, refs: &mut Refs<'_>) -> Vec<JwtKey> {
    let obj = ObjectKey::new(Kind::Secret, refs.namespace, name);
    refs.deps.push(Dep::Object(obj.clone()));
    let ns = refs.namespace;
    let Some(Object::Secret(secret)) = refs.store.get(&obj).map(|o| &**o) else {
        refs.unresolved
            .push(format!("{f}.jwks.secretRef: Secret {ns}/{name} not found"));
        return Vec::new();
    };
    let Some((_, value)) = secret_entries(secret).into_iter().find(|(k, _)| *k == key) else {
        refs.unresolved.push(format!(
            "{f}.jwks.secretRef: Secret {ns}/{name} has no key {key:?}"
        ));
        return Vec::new();
    };
    let Some(bytes) = value else {
        refs.unresolved.push(format!(
            "{f}.jwks.secretRef: Secret {ns}/{name}: key {key:?} is not valid base64"
        ));
        return Vec::new();
    };
    match read_jwks(&bytes) {
        Ok((keys, skipped)) => {
            for s in skipped {
                refs.warnings
                    .push(format!("{f}.jwks.secretRef ({ns}/{name}): {s}"));
            }
            keys
        }
        Err(e) => {
            refs.unresolved
                .push(format!("{f}.jwks.secretRef ({ns}/{name}): {e}"));
            Vec::new()
        }
    }
}

/// The keys of the JWK Set in ConfigMap `name`'s `key` (public keys need no Secret): a
/// missing ConfigMap or key or a set that is not JSON leaves none (and is `unresolved`).
fn config_map_keys(name: &str, key: &str, f: &str, refs: &mut Refs<'_>) -> Vec<JwtKey> {
    let obj = ObjectKey::new(Kind::ConfigMap, refs.namespace, name);
    refs.deps.push(Dep::Object(obj.clone()));
    let ns = refs.namespace;
    let Some(Object::ConfigMap(cm)) = refs.store.get(&obj).map(|o| &**o) else {
        refs.unresolved.push(format!(
            "{f}.jwks.configMapRef: ConfigMap {ns}/{name} not found"
        ));
        return Vec::new();
    };
    let Some(json) = cm.data.get(key) else {
        refs.unresolved.push(format!(
            "{f}.jwks.configMapRef: ConfigMap {ns}/{name} has no key {key:?}"
        ));
        return Vec::new();
    };
    match read_jwks(json.as_bytes()) {
        Ok((keys, skipped)) => {
            for s in skipped {
                refs.warnings
                    .push(format!("{f}.jwks.configMapRef ({ns}/{name}): {s}"));
            }
            keys
        }
        Err(e) => {
            refs.unresolved
                .push(format!("{f}.jwks.configMapRef ({ns}/{name}): {e}"));
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use weir_model::JwtKeyMaterial;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    #[test]
    fn reads_rsa_ec_and_ed25519_keys_and_skips_the_rest() {
        let json = format!(
            r#"{{"keys": [
              {{"kty": "RSA", "kid": "r", "alg": "RS256", "n": "{n}", "e": "AQAB"}},
              {{"kty": "EC", "kid": "e", "crv": "P-256", "x": "{x32}", "y": "{x32}"}},
              {{"kty": "OKP", "crv": "Ed25519", "x": "{x32}"}},
              {{"kty": "RSA", "kid": "short", "n": "{short}", "e": "AQAB"}},
              {{"kty": "oct", "k": "c2VjcmV0"}},
              {{"kty": "EC", "crv": "P-521", "x": "{x32}", "y": "{x32}"}},
              {{"kty": "RSA", "use": "enc", "n": "{n}", "e": "AQAB"}},
              {{"kty": "EC", "kid": "bad-alg", "alg": "RS256", "crv": "P-256", "x": "{x32}", "y": "{x32}"}},
              {{"kty": 7}}
            ]}}"#,
            n = b64(&[0xc5; 256]),
            short = b64(&[0xc5; 128]),
            x32 = b64(&[7; 32]),
        );
        let (keys, skipped) = read_jwks(json.as_bytes()).expect("a set");
        let kinds: Vec<_> = keys
            .iter()
            .map(|k| (k.kid.as_deref(), std::mem::discriminant(&k.material)))
            .collect();
        assert_eq!(kinds.len(), 3, "{kinds:?}");
        assert!(matches!(keys[0].material, JwtKeyMaterial::Rsa { .. }));
        assert!(
            matches!(&keys[1].material, JwtKeyMaterial::EcP256(p) if p.len() == 65 && p[0] == 4)
        );
        assert!(matches!(keys[2].material, JwtKeyMaterial::Ed25519(_)));
        assert_eq!(skipped.len(), 6, "{skipped:#?}");
        assert!(skipped[0].contains("1024 bits"), "{}", skipped[0]);
        assert!(skipped[1].contains("symmetric"), "{}", skipped[1]);
        assert!(skipped[2].contains("P-521"), "{}", skipped[2]);
        assert!(skipped[3].contains("not a signing key"), "{}", skipped[3]);
        assert!(skipped[4].contains("does not fit"), "{}", skipped[4]);
        assert!(read_jwks(b"[]").is_err());
        assert!(read_jwks(b"{\"keys\": 3}").is_err());
    }
}
