//! Basic authentication (RFC 7617) against htpasswd hashes: bcrypt (`$2a$`, `$2b$`,
//! `$2y$`), apr1 (`$apr1$`, MD5-based, what `htpasswd` writes by default) and `{SHA}`.
//!
//! bcrypt is slow on purpose (milliseconds per check), so a check never runs on a worker
//! thread: request phase 2 finds the result in a [`VerifiedCache`] or hands the request
//! to [`verify_blocking`] on the blocking pool (at most [`MAX_CONCURRENT_VERIFY`] at
//! once), and the request goes through the phases again with the result attached
//! ([`Verified`]). The cache is keyed by a SHA-256 of the policy, user, password and
//! stored hash (no password is kept), holds successes and failures, and is bounded: a
//! full shard is emptied. apr1 and `{SHA}` are fast and checked in place, cached alike.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine;
use http::HeaderValue;
use md5::{Digest, Md5};
use tokio::sync::Semaphore;
use weir_model::PasswordScheme;

/// Whether checking a hash of `scheme` is too slow for a worker thread.
pub(crate) fn is_slow(scheme: PasswordScheme) -> bool {
    scheme == PasswordScheme::Bcrypt
}

/// The user and password of an `Authorization: Basic …` header (`None`: absent,
/// another scheme, or malformed).
pub fn credentials(v: &HeaderValue) -> Option<(String, Vec<u8>)> {
    let v = v.as_bytes();
    let scheme = v.get(..6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let token = v[6..].trim_ascii();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token)
        .ok()?;
    let colon = decoded.iter().position(|b| *b == b':')?;
    let user = std::str::from_utf8(&decoded[..colon]).ok()?.to_owned();
    Some((user, decoded[colon + 1..].to_vec()))
}

/// Whether `password` matches the htpasswd `hash`.
pub fn verify(hash: &str, password: &[u8]) -> bool {
    match PasswordScheme::of(hash) {
        Some(PasswordScheme::Bcrypt) => bcrypt::verify(password, hash).unwrap_or(false),
        Some(PasswordScheme::Apr1) => {
            let salt = hash["$apr1$".len()..].split('$').next().unwrap_or("");
            constant_time_eq(apr1(password, salt.as_bytes()).as_bytes(), hash.as_bytes())
        }
        Some(PasswordScheme::Sha1) => {
            let d =
                aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, password);
            let want = base64::engine::general_purpose::STANDARD.encode(d.as_ref());
            constant_time_eq(want.as_bytes(), &hash.as_bytes()["{SHA}".len()..])
        }
        None => false,
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The apr1 hash of `password` with `salt` (at most 8 bytes used): Apache's variant of
/// the FreeBSD MD5 crypt, with magic `$apr1$`.
fn apr1(password: &[u8], salt: &[u8]) -> String {
    const MAGIC: &[u8] = b"$apr1$";
    let salt = &salt[..salt.len().min(8)];
    let mut alt = Md5::new();
    alt.update(password);
    alt.update(salt);
    alt.update(password);
    let alt = alt.finalize();
    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(MAGIC);
    ctx.update(salt);
    let mut left = password.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alt[..n]);
        left -= n;
    }
    let mut i = password.len();
    while i > 0 {
        if i & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        i >>= 1;
    }
    let mut fin = ctx.finalize();
    for round in 0..1000 {
        let mut c = Md5::new();
        if round & 1 == 1 {
            c.update(password);
        } else {
            c.update(fin);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(password);
        }
        if round & 1 == 1 {
            c.update(fin);
        } else {
            c.update(password);
        }
        fin = c.finalize();
    }
    const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(37);
    out.push_str(std::str::from_utf8(MAGIC).unwrap_or_default());
    out.push_str(&String::from_utf8_lossy(salt));
    out.push('$');
    let mut put = |mut v: u32, n: usize| {
        for _ in 0..n {
            out.push(char::from(ITOA64[(v & 0x3f) as usize]));
            v >>= 6;
        }
    };
    let b = |i: usize| u32::from(fin[i]);
    for (x, y, z) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        put((b(x) << 16) | (b(y) << 8) | b(z), 4);
    }
    put(b(11), 2);
    out
}

/// The cache key of one check: policy, user, password and the stored hash (a changed
/// hash is a new key).
pub(crate) fn cache_key(policy: &str, user: &str, password: &[u8], hash: &str) -> [u8; 32] {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    for part in [
        policy.as_bytes(),
        user.as_bytes(),
        password,
        hash.as_bytes(),
    ] {
        ctx.update(&(part.len() as u64).to_le_bytes());
        ctx.update(part);
    }
    let d = ctx.finish();
    let mut out = [0; 32];
    out.copy_from_slice(d.as_ref());
    out
}

const SHARDS: usize = 16;
const PER_SHARD: usize = 1024;
/// bcrypt checks running at once on the blocking pool; more wait their turn.
pub(crate) const MAX_CONCURRENT_VERIFY: usize = 4;

/// Results of past checks, bounded (`SHARDS × PER_SHARD` entries), and the permits of
/// the blocking checks.
pub(crate) struct VerifiedCache {
    shards: [Mutex<HashMap<[u8; 32], bool>>; SHARDS],
    permits: Arc<Semaphore>,
}

impl Default for VerifiedCache {
    fn default() -> Self {
        VerifiedCache {
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            permits: Arc::new(Semaphore::new(MAX_CONCURRENT_VERIFY)),
        }
    }
}

impl VerifiedCache {
    fn shard(&self, key: &[u8; 32]) -> &Mutex<HashMap<[u8; 32], bool>> {
        &self.shards[usize::from(key[0]) % SHARDS]
    }

    /// A past result.
    pub(crate) fn get(&self, key: &[u8; 32]) -> Option<bool> {
        let s = self.shard(key).lock().unwrap_or_else(|p| p.into_inner());
        s.get(key).copied()
    }

    /// Records a result (emptying the shard first when it is full).
    pub(crate) fn put(&self, key: [u8; 32], ok: bool) {
        let mut s = self.shard(&key).lock().unwrap_or_else(|p| p.into_inner());
        if s.len() >= PER_SHARD && !s.contains_key(&key) {
            s.clear();
        }
        s.insert(key, ok);
    }
}

/// A check to run off the worker threads.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) key: [u8; 32],
    pub(crate) hash: Arc<str>,
    pub(crate) password: Vec<u8>,
}

/// The result of a check, attached to the request for its second pass through the
/// phases.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Verified {
    pub(crate) key: [u8; 32],
    pub(crate) ok: bool,
}

/// Runs a slow check on the blocking pool (one of [`MAX_CONCURRENT_VERIFY`] at once),
/// records it in the cache and returns it.
pub(crate) async fn verify_blocking(cache: Arc<VerifiedCache>, job: Pending) -> Verified {
    let permits = cache.permits.clone();
    let _permit = permits.acquire_owned().await;
    let Pending {
        key,
        hash,
        password,
    } = job;
    let ok = tokio::task::spawn_blocking(move || verify(&hash, &password))
        .await
        .unwrap_or(false);
    cache.put(key, ok);
    Verified { key, ok }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Hashes made by other tools: `openssl passwd -apr1 -salt …`, Python's `bcrypt`
    // package, and `openssl dgst -sha1 -binary | base64`.
    const APR1_SECRET: &str = "$apr1$xyzabc$cTvtri5GYS9vQXkM4wcQi.";
    const APR1_COLON: &str = "$apr1$8charsal$Va55x.t83VbrpJdE7EhFh.";
    const BCRYPT_OPEN_SESAME: &str = "$2b$05$cpMOa7iYBoWsHDKngyut7O7aOVPvgAOOZBOppjm/auBtNnWEWXjjS";
    const SHA_PASSWORD: &str = "{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=";

    #[test]
    fn hashes_made_by_other_tools_verify() {
        assert!(verify(APR1_SECRET, b"secret"));
        assert!(!verify(APR1_SECRET, b"secreT"));
        assert!(verify(APR1_COLON, b"p@ss:word"));
        assert!(verify(BCRYPT_OPEN_SESAME, b"open-sesame"));
        assert!(!verify(BCRYPT_OPEN_SESAME, b"open-sesame!"));
        assert!(verify(SHA_PASSWORD, b"password"));
        assert!(!verify(SHA_PASSWORD, b"passwore"));
        assert!(!verify("plaintext", b"plaintext"));
        assert_eq!(
            PasswordScheme::of(BCRYPT_OPEN_SESAME),
            Some(PasswordScheme::Bcrypt)
        );
        assert!(is_slow(PasswordScheme::Bcrypt) && !is_slow(PasswordScheme::Apr1));
    }

    #[test]
    fn authorization_headers_parse() {
        let h = |s: &str| HeaderValue::from_str(s).unwrap();
        // "alice:p@ss:word" — the password may contain ':'.
        assert_eq!(
            credentials(&h("Basic YWxpY2U6cEBzczp3b3Jk")),
            Some(("alice".into(), b"p@ss:word".to_vec()))
        );
        assert_eq!(
            credentials(&h("bAsIc   YWxpY2U6cEBzczp3b3Jk ")),
            Some(("alice".into(), b"p@ss:word".to_vec()))
        );
        assert_eq!(credentials(&h("Bearer YWxpY2U6eA==")), None);
        assert_eq!(credentials(&h("Basic !!!")), None);
        assert_eq!(credentials(&h("Basic YWxpY2U=")), None, "no colon");
        assert_eq!(credentials(&h("Basic")), None);
    }

    #[test]
    fn the_cache_is_bounded_and_keyed_by_everything() {
        let c = VerifiedCache::default();
        let k = cache_key("ns/p", "alice", b"pw", APR1_SECRET);
        assert_ne!(k, cache_key("ns/p", "alice", b"pw", APR1_COLON));
        assert_ne!(k, cache_key("ns/p", "alicep", b"w", APR1_SECRET));
        c.put(k, true);
        assert_eq!(c.get(&k), Some(true));
        for i in 0..(SHARDS * PER_SHARD * 2) {
            c.put(cache_key("ns/p", &i.to_string(), b"", ""), false);
        }
        let total: usize = c.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(total <= SHARDS * PER_SHARD, "{total}");
    }

    #[tokio::test]
    async fn slow_checks_run_off_the_worker_and_are_cached() {
        let c = Arc::new(VerifiedCache::default());
        let key = cache_key("ns/p", "alice", b"open-sesame", BCRYPT_OPEN_SESAME);
        let v = verify_blocking(
            c.clone(),
            Pending {
                key,
                hash: BCRYPT_OPEN_SESAME.into(),
                password: b"open-sesame".to_vec(),
            },
        )
        .await;
        assert!(v.ok);
        assert_eq!(c.get(&key), Some(true));
    }
}
