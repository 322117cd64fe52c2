//! JWT authentication (TrafficPolicy `jwtAuth`): the request's one `Authorization:
//! Bearer` token must verify with a key of one provider (RS/PS/ES/EdDSA; the key's type
//! and, when the JWK names one, its `alg` must fit the token's `alg`), be unexpired
//! (`exp` required, `nbf` honoured, a minute of leeway), carry the provider's `iss` and
//! one of its audiences when set, and hold its required claims. Then the claims named by
//! the provider are copied into request headers (a client cannot send them itself: they
//! are removed either way) and the token is removed unless forwarded.
//!
//! Keys were decoded by the translator; a key is rebuilt for verification from its raw
//! parts (a copy of a few hundred bytes), and only keys that can verify the token — its
//! `kid`, its algorithm — are tried, at most eight per request.
//!
//! A verified token is remembered ([`TokenCache`], in the [`JwksRegistry`]): the same
//! token sent again to the same policy costs a lookup and its time checks, not a
//! signature check.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use weir_model::{JwtAuth, JwtKey, JwtKeyMaterial, JwtProvider};

use crate::error::{Challenge, ProxyError};
use crate::jwks::{JwksRegistry, Remote};
use crate::policy::Refusal;

/// Longest token considered (bounds the work an unauthenticated request can cause).
pub const MAX_TOKEN_LEN: usize = 16 * 1024;
/// Clock skew allowed for `exp` and `nbf`, in seconds.
const LEEWAY_SECS: u64 = 60;
/// Most signature checks one request may cause: a token without a `kid` is tried against
/// every fitting key, and a client must not make each request cost hundreds of RSA
/// verifications.
const MAX_ATTEMPTS: usize = 8;

/// Checks a request's bearer token against `auth` (of the policy named `policy`). Keys of
/// providers with a remote JWK Set come from `jwks`; before its first fetch ended the
/// request is handed back to wait for it (`Refusal::WaitJwks`), unless it `waited`.
/// Verified, the token's claims are returned (for authorization rules).
pub(crate) fn check(
    policy: &Arc<str>,
    auth: &Arc<JwtAuth>,
    headers: &mut HeaderMap,
    jwks: &Arc<JwksRegistry>,
    waited: bool,
) -> Result<Arc<Map<String, Value>>, Refusal> {
    let refused = |invalid_token| {
        Refusal::Refused(ProxyError::Unauthenticated {
            policy: policy.clone(),
            challenge: Challenge::Bearer { invalid_token },
        })
    };
    let mut remotes: Vec<Option<Arc<Remote>>> = Vec::new();
    if auth.providers.iter().any(|p| p.remote_jwks.is_some()) {
        for p in &auth.providers {
            let r = p.remote_jwks.as_ref().map(|set| jwks.get(set));
            if let Some(r) = &r
                && r.keys().is_none()
                && !r.tried()
                && !waited
            {
                return Err(Refusal::WaitJwks(Arc::clone(r)));
            }
            remotes.push(r);
        }
    }
    let token = bearer_token(headers).ok_or(refused(false))?;
    let keys: Vec<Option<Arc<Vec<JwtKey>>>> = remotes
        .iter()
        .map(|r| r.as_ref().and_then(|r| r.keys()))
        .collect();
    let now = unix_now();
    let cached = jwks.tokens.get(token, auth, &keys, now);
    let verified = cached.or_else(|| {
        let (index, claims) = verify_with(auth, token, &keys)?;
        let claims = Arc::new(claims);
        jwks.tokens.put(token, auth, &keys, index, &claims);
        Some((index, claims))
    });
    let Some((index, claims)) = verified else {
        // A token naming a kid that a remote set lacks: the set may have rotated.
        if !remotes.is_empty()
            && let Ok(h) = jsonwebtoken::decode_header(token)
            && let Some(kid) = h.kid.as_deref()
        {
            for (r, k) in remotes.iter().zip(&keys) {
                let known = k
                    .as_deref()
                    .is_some_and(|k| k.iter().any(|k| k.kid.as_deref() == Some(kid)));
                if let Some(r) = r
                    && !known
                {
                    jwks.unknown_kid(r);
                }
            }
        }
        return Err(refused(true));
    };
    let provider = &auth.providers[index];
    for (_, name) in &provider.claims_to_headers {
        headers.remove(&**name);
    }
    for (claim, name) in &provider.claims_to_headers {
        let Some(value) = claim_at(&claims, claim).and_then(header_value) else {
            continue;
        };
        if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
            headers.insert(name, value);
        }
    }
    if !auth.forward_token {
        headers.remove(header::AUTHORIZATION);
    }
    Ok(claims)
}

/// The token of the request's one `Authorization: Bearer` header.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let value = value.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && token.len() <= MAX_TOKEN_LEN)
        .then_some(token)
}

/// The provider whose key verifies `token` and whose checks its claims pass, with the
/// claims. Public (through [`crate::verify_jwt`]) for the `jwt` fuzz target.
pub(crate) fn verify<'a>(
    auth: &'a JwtAuth,
    token: &str,
) -> Option<(&'a JwtProvider, Map<String, Value>)> {
    verify_with(auth, token, &[]).map(|(i, claims)| (&auth.providers[i], claims))
}

/// As [`verify`], with the keys of providers that fetch theirs (`remote[i]` for
/// provider `i`; none: no key).
fn verify_with(
    auth: &JwtAuth,
    token: &str,
    remote: &[Option<Arc<Vec<JwtKey>>>],
) -> Option<(usize, Map<String, Value>)> {
    if token.len() > MAX_TOKEN_LEN {
        return None;
    }
    let header = jsonwebtoken::decode_header(token).ok()?;
    let alg = header.alg;
    let alg_name = algorithm_name(alg)?;
    let mut attempts = 0;
    for (i, provider) in auth.providers.iter().enumerate() {
        let keys: &[JwtKey] = if provider.remote_jwks.is_some() {
            remote
                .get(i)
                .and_then(|k| k.as_deref())
                .map_or(&[][..], |k| &k[..])
        } else {
            &provider.keys
        };
        let mut validation = Validation::new(alg);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        match &provider.issuer {
            Some(iss) => validation.set_issuer(&[&**iss]),
            None => validation.iss = None,
        }
        if provider.audiences.is_empty() {
            validation.validate_aud = false;
        } else {
            validation.set_audience(&provider.audiences);
        }
        for key in candidates(keys, header.kid.as_deref(), alg_name) {
            attempts += 1;
            if attempts > MAX_ATTEMPTS {
                return None;
            }
            let Ok(data) =
                jsonwebtoken::decode::<Map<String, Value>>(token, &decoding_key(key), &validation)
            else {
                continue;
            };
            if has_required_claims(provider, &data.claims) {
                return Some((i, data.claims));
            }
        }
    }
    None
}

/// The keys that may verify a token signed with `alg` naming `kid`: those with that
/// `kid` (or, when the token names none, every key), of a type that fits `alg` and whose
/// own `alg`, if any, is `alg`.
fn candidates<'a>(
    keys: &'a [JwtKey],
    kid: Option<&'a str>,
    alg: &'a str,
) -> impl Iterator<Item = &'a JwtKey> {
    keys.iter().filter(move |k| {
        kid.is_none_or(|kid| k.kid.as_deref() == Some(kid))
            && k.material.verifies(alg)
            && k.alg.as_deref().is_none_or(|a| a == alg)
    })
}

/// The JOSE name of an asymmetric algorithm (symmetric ones are never accepted: a public
/// key must not double as an HMAC secret).
fn algorithm_name(alg: Algorithm) -> Option<&'static str> {
    Some(match alg {
        Algorithm::RS256 => "RS256",
        Algorithm::RS384 => "RS384",
        Algorithm::RS512 => "RS512",
        Algorithm::PS256 => "PS256",
        Algorithm::PS384 => "PS384",
        Algorithm::PS512 => "PS512",
        Algorithm::ES256 => "ES256",
        Algorithm::ES384 => "ES384",
        Algorithm::EdDSA => "EdDSA",
        _ => return None,
    })
}

fn decoding_key(key: &JwtKey) -> DecodingKey {
    match &key.material {
        JwtKeyMaterial::Rsa { n, e } => DecodingKey::from_rsa_raw_components(n, e),
        JwtKeyMaterial::EcP256(point) | JwtKeyMaterial::EcP384(point) => {
            DecodingKey::from_ec_der(point)
        }
        JwtKeyMaterial::Ed25519(x) => DecodingKey::from_ed_der(x),
    }
}

fn has_required_claims(provider: &JwtProvider, claims: &Map<String, Value>) -> bool {
    provider.required_claims.iter().all(|(name, values)| {
        let Some(claim) = claim_at(claims, name) else {
            return false;
        };
        claim_accepts(claim, values)
    })
}

/// Whether a claim holds one of `values` (any when empty): a string equal to one, or
/// with one among its space-separated words (OAuth `scope`), or an array of strings
/// holding one. Shared by required claims and authorization rules.
pub(crate) fn claim_accepts(claim: &Value, values: &[Arc<str>]) -> bool {
    if values.is_empty() {
        return true;
    }
    let accepted = |s: &str| values.iter().any(|v| &**v == s);
    match claim {
        Value::String(s) => accepted(s) || s.split(' ').any(accepted),
        Value::Array(items) => items.iter().any(|i| i.as_str().is_some_and(accepted)),
        _ => false,
    }
}

/// The claim `name`: the top-level claim of that name if there is one, else, for a name
/// with dots, the value at that path through nested objects (`realm_access.roles`).
/// A top-level claim wins, so that claim names that are URLs (`https://corp.test/role`)
/// keep their meaning.
pub(crate) fn claim_at<'a>(claims: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    if let Some(v) = claims.get(name) {
        return Some(v);
    }
    let (first, rest) = name.split_once('.')?;
    let mut at = claims.get(first)?;
    for part in rest.split('.') {
        at = at.as_object()?.get(part)?;
    }
    Some(at)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Shards of the [`TokenCache`] (each its own lock).
const TOKEN_SHARDS: usize = 16;
/// Tokens per shard; a full shard is emptied before the next one is added (bounds
/// memory at `TOKEN_SHARDS × TOKENS_PER_SHARD` entries whatever clients send).
const TOKENS_PER_SHARD: usize = 256;

/// Tokens verified lately. An entry answers only for the very policy settings (the
/// `Arc<JwtAuth>` it holds, compared by pointer: a changed policy or a rotated Secret is a
/// new one) and the very remote key sets it was verified with, and only while the
/// token's `exp` and `nbf` still admit it; anything else is a miss and a full check. Only
/// verified tokens are kept, so refused ones cannot crowd out good ones.
pub(crate) struct TokenCache {
    shards: [Mutex<HashMap<u64, VerifiedToken>>; TOKEN_SHARDS],
    hasher: foldhash::fast::RandomState,
}

struct VerifiedToken {
    token: Box<str>,
    auth: Arc<JwtAuth>,
    remote: Vec<Option<Arc<Vec<JwtKey>>>>,
    provider: usize,
    claims: Arc<Map<String, Value>>,
    exp: u64,
    nbf: Option<u64>,
}

impl Default for TokenCache {
    fn default() -> Self {
        TokenCache {
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl TokenCache {
    fn slot(&self, token: &str) -> (&Mutex<HashMap<u64, VerifiedToken>>, u64) {
        let h = self.hasher.hash_one(token);
        // The low bits pick the shard, the whole hash the entry (two tokens of one hash
        // share a slot: the later replaces the earlier, and a lookup compares the token).
        (&self.shards[(h as usize) % TOKEN_SHARDS], h)
    }

    /// The provider and claims `token` was verified with under `auth` and these remote
    /// keys, if it still holds at `now` (seconds since the epoch).
    fn get(
        &self,
        token: &str,
        auth: &Arc<JwtAuth>,
        remote: &[Option<Arc<Vec<JwtKey>>>],
        now: u64,
    ) -> Option<(usize, Arc<Map<String, Value>>)> {
        let (shard, h) = self.slot(token);
        let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
        let e = shard.get(&h)?;
        let same_keys = e.remote.len() == remote.len()
            && e.remote.iter().zip(remote).all(|(a, b)| match (a, b) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            });
        let in_time = now <= e.exp.saturating_add(LEEWAY_SECS)
            && e.nbf
                .is_none_or(|nbf| nbf <= now.saturating_add(LEEWAY_SECS));
        (*e.token == *token && Arc::ptr_eq(&e.auth, auth) && same_keys && in_time)
            .then(|| (e.provider, Arc::clone(&e.claims)))
    }

    /// Remembers a verified token (not when its `exp` or `nbf` is not a plain number of
    /// seconds: those are checked in full each time).
    fn put(
        &self,
        token: &str,
        auth: &Arc<JwtAuth>,
        remote: &[Option<Arc<Vec<JwtKey>>>],
        provider: usize,
        claims: &Arc<Map<String, Value>>,
    ) {
        let Some(exp) = claims.get("exp").and_then(Value::as_u64) else {
            return;
        };
        let nbf = match claims.get("nbf") {
            None => None,
            Some(v) => match v.as_u64() {
                Some(n) => Some(n),
                None => return,
            },
        };
        let (shard, h) = self.slot(token);
        let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
        if shard.len() >= TOKENS_PER_SHARD && !shard.contains_key(&h) {
            shard.clear();
        }
        shard.insert(
            h,
            VerifiedToken {
                token: token.into(),
                auth: Arc::clone(auth),
                remote: remote.to_vec(),
                provider,
                claims: Arc::clone(claims),
                exp,
                nbf,
            },
        );
    }
}

/// A claim as a header value: strings as they are, other values as JSON; `None` when
/// it cannot be a header value (control characters).
fn header_value(v: &Value) -> Option<HeaderValue> {
    match v {
        Value::String(s) => HeaderValue::from_str(s).ok(),
        Value::Null => None,
        other => HeaderValue::from_str(&other.to_string()).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode};
    use std::time::{SystemTime, UNIX_EPOCH};

    fn registry() -> Arc<JwksRegistry> {
        Arc::new(JwksRegistry::new(Default::default()))
    }

    /// An Ed25519 key pair: PKCS#8 for signing, the raw public key for the JWK.
    fn ed_pair() -> (EncodingKey, Vec<u8>) {
        use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};
        let pkcs8 =
            Ed25519KeyPair::generate_pkcs8(&aws_lc_rs::rand::SystemRandom::new()).expect("key");
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("pair");
        (
            EncodingKey::from_ed_der(pkcs8.as_ref()),
            pair.public_key().as_ref().to_vec(),
        )
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs()
    }

    fn auth(public: &[u8], issuer: Option<&str>) -> JwtAuth {
        JwtAuth {
            providers: vec![JwtProvider {
                name: "p".into(),
                issuer: issuer.map(Arc::from),
                audiences: vec!["api".into()],
                keys: vec![JwtKey {
                    kid: Some("k1".into()),
                    alg: None,
                    material: JwtKeyMaterial::Ed25519(public.into()),
                }],
                required_claims: vec![("scope".into(), vec!["read".into()])],
                claims_to_headers: vec![("sub".into(), "x-user".into())],
                remote_jwks: None,
            }],
            forward_token: false,
        }
    }

    fn token(key: &EncodingKey, kid: Option<&str>, claims: Value) -> String {
        let mut h = Header::new(Algorithm::EdDSA);
        h.kid = kid.map(str::to_owned);
        encode(&h, &claims, key).expect("token")
    }

    fn headers(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).expect("value"),
        );
        h.insert("x-user", HeaderValue::from_static("spoofed"));
        h
    }

    #[test]
    fn a_valid_token_passes_and_its_claims_become_headers() {
        let (key, public) = ed_pair();
        let auth = auth(&public, Some("https://iss"));
        let claims = serde_json::json!({
            "iss": "https://iss", "aud": ["api"], "sub": "alice",
            "scope": "read write", "exp": now() + 600,
        });
        let mut h = headers(&token(&key, Some("k1"), claims));
        check(
            &"ns/p".into(),
            &Arc::new(auth.clone()),
            &mut h,
            &registry(),
            false,
        )
        .expect("accepted");
        assert_eq!(h.get("x-user").unwrap(), "alice");
        assert!(h.get(header::AUTHORIZATION).is_none(), "token removed");
    }

    /// A token sent again is served from the cache (its claims still become headers, the
    /// client's own copies still go), and the cache answers only for the same policy
    /// settings, the same remote keys and while the token's times admit it.
    #[test]
    fn a_verified_token_is_remembered_for_its_policy_only() {
        let (key, public) = ed_pair();
        let auth = Arc::new(auth(&public, None));
        let exp = now() + 600;
        let t = token(
            &key,
            Some("k1"),
            serde_json::json!({"aud": "api", "sub": "alice", "scope": "read", "exp": exp}),
        );
        let jwks = registry();
        for _ in 0..2 {
            let mut h = headers(&t);
            check(&"ns/p".into(), &auth, &mut h, &jwks, false).expect("accepted");
            assert_eq!(h.get("x-user").unwrap(), "alice");
            assert!(h.get(header::AUTHORIZATION).is_none(), "token removed");
        }
        let tokens = &jwks.tokens;
        let (provider, claims) = tokens.get(&t, &auth, &[], now()).expect("remembered");
        assert_eq!((provider, claims["sub"].as_str()), (0, Some("alice")));
        // Expired (past the leeway), or not the same token: a miss.
        assert!(tokens.get(&t, &auth, &[], exp + LEEWAY_SECS + 1).is_none());
        assert!(tokens.get(&t, &auth, &[], exp + LEEWAY_SECS).is_some());
        assert!(tokens.get(&format!("{t}x"), &auth, &[], now()).is_none());
        // Equal settings in another object (a policy edited back and forth, a rotated
        // Secret): a miss, so the new settings decide.
        let same = Arc::new((*auth).clone());
        assert!(tokens.get(&t, &same, &[], now()).is_none());
        // Other remote keys than those it was verified with: a miss.
        let keys = Some(Arc::new(Vec::new()));
        assert!(tokens.get(&t, &auth, &[keys], now()).is_none());
        // Not yet valid (nbf past the leeway): remembered, but not admitted early.
        let nbf = now() + 30;
        let early = token(
            &key,
            Some("k1"),
            serde_json::json!({"aud": "api", "sub": "b", "scope": "read", "exp": exp, "nbf": nbf}),
        );
        let mut h = headers(&early);
        check(&"ns/p".into(), &auth, &mut h, &jwks, false).expect("within the leeway");
        assert!(tokens.get(&early, &auth, &[], nbf - LEEWAY_SECS).is_some());
        assert!(
            tokens
                .get(&early, &auth, &[], nbf - LEEWAY_SECS - 1)
                .is_none()
        );
    }

    /// The cache's memory is bounded whatever tokens clients send.
    #[test]
    fn the_token_cache_is_bounded() {
        let (key, public) = ed_pair();
        let auth = Arc::new(auth(&public, None));
        let jwks = registry();
        let claims = serde_json::json!({"exp": now() + 600});
        let claims = Arc::new(claims.as_object().cloned().expect("object"));
        let t = token(&key, Some("k1"), serde_json::json!({"exp": now() + 600}));
        for i in 0..(TOKEN_SHARDS * TOKENS_PER_SHARD + 500) {
            // Distinct tokens (a signature is not needed to fill the cache).
            jwks.tokens.put(&format!("{t}{i}"), &auth, &[], 0, &claims);
        }
        let held: usize = jwks
            .tokens
            .shards
            .iter()
            .map(|s| s.lock().unwrap().len())
            .sum();
        assert!(held <= TOKEN_SHARDS * TOKENS_PER_SHARD, "{held}");
        assert!(held > 0);
    }

    /// Claim names with dots reach into nested objects, unless a top-level claim has
    /// that very name.
    #[test]
    fn dotted_claim_names_reach_into_nested_claims() {
        let c = serde_json::json!({
            "realm": {"access": {"roles": ["admin"]}, "name": "corp"},
            "https://corp.test/team": "blue",
            "a.b": "flat",
            "a": {"b": "nested"},
        });
        let c = c.as_object().unwrap();
        assert_eq!(claim_at(c, "realm.name").unwrap(), "corp");
        assert_eq!(claim_at(c, "realm.access.roles").unwrap()[0], "admin");
        assert_eq!(claim_at(c, "https://corp.test/team").unwrap(), "blue");
        assert_eq!(claim_at(c, "a.b").unwrap(), "flat");
        assert!(claim_at(c, "realm.missing").is_none());
        assert!(claim_at(c, "realm.name.deeper").is_none());
        assert!(claim_at(c, "realm.").is_none());
        // Through the whole check: a nested required claim and a nested claim header.
        let (key, public) = ed_pair();
        let mut a = auth(&public, None);
        a.providers[0].required_claims = vec![("realm.access.roles".into(), vec!["admin".into()])];
        a.providers[0].claims_to_headers = vec![("realm.name".into(), "x-realm".into())];
        let a = Arc::new(a);
        let claims = |role: &str| {
            serde_json::json!({
                "aud": "api", "exp": now() + 600,
                "realm": {"access": {"roles": [role]}, "name": "corp"},
            })
        };
        let mut h = headers(&token(&key, Some("k1"), claims("admin")));
        check(&"ns/p".into(), &a, &mut h, &registry(), false).expect("accepted");
        assert_eq!(h.get("x-realm").unwrap(), "corp");
        let mut h = headers(&token(&key, Some("k1"), claims("user")));
        assert!(check(&"ns/p".into(), &a, &mut h, &registry(), false).is_err());
    }

    #[test]
    fn bad_tokens_are_refused() {
        let (key, public) = ed_pair();
        let (other_key, _) = ed_pair();
        let auth = auth(&public, Some("https://iss"));
        let good = serde_json::json!({
            "iss": "https://iss", "aud": "api", "sub": "a", "scope": ["read"], "exp": now() + 600,
        });
        let with = |f: &dyn Fn(&mut Value)| {
            let mut c = good.clone();
            f(&mut c);
            c
        };
        let cases = [
            (
                "expired",
                token(
                    &key,
                    Some("k1"),
                    with(&|c| c["exp"] = (now() - 3600).into()),
                ),
            ),
            (
                "no exp",
                token(
                    &key,
                    Some("k1"),
                    with(&|c| {
                        c.as_object_mut().unwrap().remove("exp");
                    }),
                ),
            ),
            (
                "not yet valid",
                token(
                    &key,
                    Some("k1"),
                    with(&|c| c["nbf"] = (now() + 3600).into()),
                ),
            ),
            (
                "wrong issuer",
                token(
                    &key,
                    Some("k1"),
                    with(&|c| c["iss"] = "https://evil".into()),
                ),
            ),
            (
                "wrong audience",
                token(&key, Some("k1"), with(&|c| c["aud"] = "web".into())),
            ),
            (
                "missing scope",
                token(&key, Some("k1"), with(&|c| c["scope"] = "write".into())),
            ),
            ("other key", token(&other_key, Some("k1"), good.clone())),
            ("unknown kid", token(&key, Some("k2"), good.clone())),
            ("garbage", "a.b.c".to_owned()),
        ];
        for (what, t) in cases {
            let mut h = headers(&t);
            let err = check(
                &"ns/p".into(),
                &Arc::new(auth.clone()),
                &mut h,
                &registry(),
                false,
            )
            .expect_err(what);
            assert!(
                matches!(
                    err,
                    Refusal::Refused(ProxyError::Unauthenticated {
                        challenge: Challenge::Bearer {
                            invalid_token: true
                        },
                        ..
                    })
                ),
                "{what}: {err:?}"
            );
        }
        // The right token without a kid is tried against every key.
        let mut h = headers(&token(&key, None, good.clone()));
        assert!(
            check(
                &"ns/p".into(),
                &Arc::new(auth.clone()),
                &mut h,
                &registry(),
                false
            )
            .is_ok()
        );
        // No token, or another scheme: a plain Bearer challenge.
        for value in [None, Some("Basic YTpi"), Some("Bearer ")] {
            let mut h = HeaderMap::new();
            if let Some(v) = value {
                h.insert(header::AUTHORIZATION, HeaderValue::from_static(v));
            }
            let err = check(
                &"ns/p".into(),
                &Arc::new(auth.clone()),
                &mut h,
                &registry(),
                false,
            )
            .expect_err("no token");
            assert!(matches!(
                err,
                Refusal::Refused(ProxyError::Unauthenticated {
                    challenge: Challenge::Bearer {
                        invalid_token: false
                    },
                    ..
                })
            ));
        }
    }

    /// The PKCS#1 `RSAPrivateKey` inside a PKCS#8 `PrivateKeyInfo` (jsonwebtoken signs
    /// with PKCS#1; aws-lc-rs writes PKCS#8): the content of its OCTET STRING, the third
    /// element of the outer SEQUENCE.
    fn pkcs1_of(pkcs8: &[u8]) -> &[u8] {
        // (header length, content length) of the DER element at the start of `d`.
        fn element(d: &[u8]) -> (usize, usize) {
            match d[1] {
                n if n < 0x80 => (2, usize::from(n)),
                n => {
                    let k = usize::from(n & 0x7f);
                    let len = d[2..2 + k].iter().fold(0, |a, b| a << 8 | usize::from(*b));
                    (2 + k, len)
                }
            }
        }
        let (h, _) = element(pkcs8);
        let mut rest = &pkcs8[h..];
        for _ in 0..2 {
            let (h, len) = element(rest);
            rest = &rest[h + len..];
        }
        let (h, len) = element(rest);
        assert_eq!(rest[0], 0x04, "an OCTET STRING");
        &rest[h..h + len]
    }

    #[test]
    fn rsa_and_ecdsa_keys_verify_their_tokens() {
        use aws_lc_rs::encoding::AsDer;
        use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair};
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let ec8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("ec key");
        let ec =
            EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, ec8.as_ref())
                .expect("ec pair");
        let rsa = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).expect("rsa");
        let rsa8 = AsDer::<aws_lc_rs::encoding::Pkcs8V1Der>::as_der(&rsa).expect("pkcs8");
        let parts = aws_lc_rs::rsa::PublicKeyComponents::<Vec<u8>>::from(rsa.public_key());
        let claims = serde_json::json!({"aud": "api", "scope": "read", "exp": now() + 60});
        for (alg, signing, material) in [
            (
                Algorithm::ES256,
                EncodingKey::from_ec_der(ec8.as_ref()),
                JwtKeyMaterial::EcP256(ec.public_key().as_ref().into()),
            ),
            (
                Algorithm::RS256,
                EncodingKey::from_rsa_der(pkcs1_of(rsa8.as_ref())),
                JwtKeyMaterial::Rsa {
                    n: parts.n.as_slice().into(),
                    e: parts.e.as_slice().into(),
                },
            ),
            (
                Algorithm::PS384,
                EncodingKey::from_rsa_der(pkcs1_of(rsa8.as_ref())),
                JwtKeyMaterial::Rsa {
                    n: parts.n.as_slice().into(),
                    e: parts.e.as_slice().into(),
                },
            ),
        ] {
            let mut auth = auth(&[0; 32], None);
            auth.providers[0].keys[0].material = material;
            let t = encode(&Header::new(alg), &claims, &signing).expect("token");
            assert!(verify(&auth, &t).is_some(), "{alg:?}");
            // The same key named for another algorithm refuses it.
            auth.providers[0].keys[0].alg = Some("RS512".into());
            assert!(verify(&auth, &t).is_none(), "{alg:?} with alg RS512");
        }
    }

    #[test]
    fn a_request_causes_at_most_eight_signature_checks() {
        let (key, public) = ed_pair();
        let mut auth = auth(&public, None);
        // Twenty keys without a kid before the right one: a token without a kid is
        // refused after eight tries rather than checked against all 21.
        let decoy = ed_pair().1;
        let keys = &mut auth.providers[0].keys;
        keys[0].kid = None;
        for _ in 0..20 {
            keys.insert(
                0,
                JwtKey {
                    kid: None,
                    alg: None,
                    material: JwtKeyMaterial::Ed25519(decoy.as_slice().into()),
                },
            );
        }
        let claims = serde_json::json!({"aud": "api", "scope": "read", "exp": now() + 60});
        assert!(verify(&auth, &token(&key, None, claims.clone())).is_none());
        auth.providers[0].keys.drain(..14);
        assert!(
            verify(&auth, &token(&key, None, claims)).is_some(),
            "7 decoys, then the key"
        );
    }

    #[test]
    fn symmetric_algorithms_are_never_accepted() {
        let (_, public) = ed_pair();
        let auth = auth(&public, None);
        // An HS256 token "signed" with the public key bytes as the secret.
        let claims = serde_json::json!({"aud": "api", "scope": "read", "exp": now() + 60});
        let t = encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(&public),
        )
        .expect("token");
        assert!(verify(&auth, &t).is_none());
    }
}
