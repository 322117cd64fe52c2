//! Fuzzes `weir_proxy::parse_traceparent`, the reader of the W3C `traceparent` header a
//! client sends (untrusted bytes; read on every request when traces are on). Properties:
//! - parsing never panics;
//! - an accepted header has non-zero ids, and writing it back as version 00 gives the
//!   input's first 55 bytes with the version made `00` (so the upstream receives exactly
//!   what was read);
//! - it agrees with a reference reading written separately below.

#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_proxy::{TRACEPARENT_LEN, parse_traceparent};

fuzz_target!(|data: &[u8]| {
    let got = parse_traceparent(data);
    assert_eq!(
        got.is_some(),
        reference(data),
        "{:?}",
        String::from_utf8_lossy(data)
    );
    if let Some(p) = got {
        assert_ne!(p.trace_id, [0; 16]);
        assert_ne!(p.parent_id, [0; 8]);
        let mut text = String::from("00-");
        for b in p.trace_id {
            text.push_str(&format!("{b:02x}"));
        }
        text.push('-');
        for b in p.parent_id {
            text.push_str(&format!("{b:02x}"));
        }
        text.push_str(&format!("-{:02x}", p.flags));
        assert_eq!(text.len(), TRACEPARENT_LEN);
        assert_eq!(&text.as_bytes()[2..], &data[2..TRACEPARENT_LEN]);
    }
});

/// Accepted: 55 bytes (exactly, for version 00; or more after a `-`, for later versions)
/// of `vv-<32 hex>-<16 hex>-<2 hex>`, lowercase, version not `ff`, ids not all zeros.
fn reference(d: &[u8]) -> bool {
    if d.len() < TRACEPARENT_LEN || !head_ok(&d[..TRACEPARENT_LEN]) {
        return false;
    }
    d.len() == TRACEPARENT_LEN || (d[TRACEPARENT_LEN] == b'-' && &d[..2] != b"00")
}

fn head_ok(head: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(head) else {
        return false;
    };
    let parts: Vec<&str> = s.split('-').collect();
    let lower_hex = |p: &str| {
        p.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    };
    parts.len() == 4
        && parts[0].len() == 2
        && parts[1].len() == 32
        && parts[2].len() == 16
        && parts[3].len() == 2
        && parts.iter().all(|p| lower_hex(p))
        && parts[0] != "ff"
        && parts[1].bytes().any(|c| c != b'0')
        && parts[2].bytes().any(|c| c != b'0')
}
