//! Fuzzes `weir_proxy::parse_client_hello`, which reads the SNI of TLS passthrough
//! connections from untrusted bytes before anything else runs. Properties:
//! - parsing never panics, whatever the bytes;
//! - a server name it returns is 1–253 characters of lower-case ASCII letters, digits,
//!   `-`, `_` and `.`;
//! - reading is incremental: when the whole input parses to a result, every prefix parses
//!   to `Incomplete` or to that same result (the data plane parses after every read).

#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_proxy::{ClientHello, parse_client_hello};

fuzz_target!(|data: &[u8]| {
    let Ok(result) = parse_client_hello(data) else {
        return;
    };
    if let ClientHello::Complete(Some(name)) = &result {
        assert!(!name.is_empty() && name.len() <= 253, "{name:?}");
        assert!(
            name.bytes().all(|b| b.is_ascii_lowercase()
                || b.is_ascii_digit()
                || matches!(b, b'-' | b'.' | b'_')),
            "{name:?}"
        );
    }
    if matches!(result, ClientHello::Complete(_)) {
        let step = (data.len() / 64).max(1);
        for n in (0..data.len()).step_by(step) {
            match parse_client_hello(&data[..n]) {
                Ok(ClientHello::Incomplete) => {}
                Ok(r) => assert_eq!(r, result, "prefix {n}"),
                Err(e) => panic!("prefix {n} of a complete ClientHello: {e}"),
            }
        }
    }
});
