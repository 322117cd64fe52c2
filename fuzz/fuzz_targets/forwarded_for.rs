//! Fuzzes `ListenerSettings::client_ip`, which picks the client address from the
//! connection's peer and the `X-Forwarded-For` fields (client-controlled) when the peer is
//! a trusted proxy (Gateway annotation `weir.dev/trusted-proxies`); `ipRules` and
//! client-IP rate limits act on its answer. Input: the first byte picks the peer (bits
//! 0–1) and the trusted networks (bits 2–3); the rest, split at `\n`, are the header
//! fields in order. Properties:
//! - it never panics;
//! - without trusted networks, or from an untrusted peer, the answer is the peer;
//! - otherwise it is what a separately written reading gives: the entries of all fields,
//!   left to right, walked from the right while they are addresses of trusted proxies;
//!   the answer is the first untrusted address, or the last address read when the walk
//!   stops (a malformed entry, or the list's start) — so a client left of an untrusted
//!   hop can never choose the answer.

#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use weir_model::{IpNet, ListenerSettings};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let peers = ["10.0.0.1", "192.0.2.9", "2001:db8::1", "127.0.0.1"];
    let peer: IpAddr = peers[usize::from(flags & 3)].parse().unwrap();
    let trusted: &[&str] = match (flags >> 2) & 3 {
        0 => &[],
        1 => &["10.0.0.0/8"],
        2 => &["10.0.0.0/8", "2001:db8::/32", "127.0.0.1"],
        _ => &["0.0.0.0/0", "::/0"],
    };
    let settings = ListenerSettings {
        trusted_proxies: trusted.iter().map(|n| IpNet::parse(n).unwrap()).collect(),
        ..ListenerSettings::default()
    };
    let fields: Vec<&str> = text.split('\n').collect();
    let read = std::cell::Cell::new(false);
    let got = settings.client_ip(peer, || {
        read.set(true);
        fields.iter().copied()
    });
    let is_trusted = |ip: IpAddr| settings.trusted_proxies.iter().any(|n| n.contains(ip));
    if trusted.is_empty() || !is_trusted(peer) {
        assert_eq!(got, peer);
        // The header is not even read for a peer that is not trusted.
        assert!(!read.get());
        return;
    }
    let entries: Vec<&str> = fields.iter().flat_map(|f| f.split(',')).collect();
    let mut want = peer;
    for entry in entries.iter().rev() {
        match entry.trim().parse::<IpAddr>() {
            Ok(ip) => {
                want = ip;
                if !is_trusted(ip) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    assert_eq!(got, want, "{fields:?}");
});
