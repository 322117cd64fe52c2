//! Fuzzes the Basic-auth path of the data plane on untrusted bytes: the `Authorization`
//! header parser (`weir_proxy::basic_credentials`) and the htpasswd check
//! (`weir_proxy::verify_htpasswd`) with arbitrary stored hashes and passwords. Properties:
//! - neither panics, whatever the bytes;
//! - credentials it returns survive a round trip: `Basic base64(user:password)` parses
//!   back to the same user and password;
//! - a hash that is not bcrypt, apr1 or `{SHA}` never verifies.
//!
//! bcrypt hashes above cost 4 are skipped (the translator caps the cost at 12; fuzzing
//! at that cost would spend all its time hashing).

#![no_main]

use base64::Engine;
use http::HeaderValue;
use libfuzzer_sys::fuzz_target;
use weir_model::PasswordScheme;
use weir_proxy::{basic_credentials, verify_htpasswd};

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = HeaderValue::from_bytes(data)
        && let Some((user, password)) = basic_credentials(&v)
    {
        let mut plain = user.clone().into_bytes();
        plain.push(b':');
        plain.extend_from_slice(&password);
        let token = base64::engine::general_purpose::STANDARD.encode(&plain);
        let again = HeaderValue::from_str(&format!("Basic {token}")).unwrap();
        assert_eq!(basic_credentials(&again), Some((user, password)));
    }
    // "hash\0password"
    let (hash, password) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let Ok(hash) = std::str::from_utf8(hash) else {
        return;
    };
    match PasswordScheme::of(hash) {
        Some(PasswordScheme::Bcrypt) => {
            if hash
                .get(4..6)
                .and_then(|c| c.parse::<u32>().ok())
                .is_some_and(|c| c <= 4)
            {
                let _ = verify_htpasswd(hash, password);
            }
        }
        Some(_) => {
            let _ = verify_htpasswd(hash, password);
        }
        None => assert!(!verify_htpasswd(hash, password), "{hash:?}"),
    }
});
