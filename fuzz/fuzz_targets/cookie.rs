//! Fuzzes the `Cookie` reading of the cookie-hash balancer and `sessionPersistence`
//! (`weir_proxy::request_cookie`): the fields are the client's bytes and choose the
//! endpoint. Input: the first byte picks the cookie name; the rest, split at `\n`, are
//! the `Cookie` fields in order (a field the `http` crate refuses is left out, as hyper
//! would refuse the request). Properties:
//! - it never panics;
//! - the answer is a part of one of the fields, never empty;
//! - it is what a separately written reading gives: the fields' `;`-separated pairs in
//!   order, each with surrounding blanks (space, tab, CR, LF, FF) removed; the first pair
//!   whose text before its first `=`, without blanks, is the name decides; its value,
//!   without blanks and one pair of enclosing double quotes, is the answer unless empty.

#![no_main]

use http::{HeaderMap, HeaderValue, header::COOKIE};
use libfuzzer_sys::fuzz_target;

fn blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n' | 0x0c)
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !blank(*first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !blank(*last) {
            break;
        }
        s = rest;
    }
    s
}

/// The reference reading, by index rather than by iterator adaptors.
fn reference<'a>(fields: &[&'a [u8]], name: &[u8]) -> Option<&'a [u8]> {
    for field in fields {
        let mut start = 0;
        while start <= field.len() {
            let end = field[start..]
                .iter()
                .position(|&b| b == b';')
                .map_or(field.len(), |i| start + i);
            let pair = trim(&field[start..end]);
            if let Some(eq) = pair.iter().position(|&b| b == b'=')
                && trim(&pair[..eq]) == name
            {
                let mut value = trim(&pair[eq + 1..]);
                if value.len() >= 2 && value[0] == b'"' && value[value.len() - 1] == b'"' {
                    value = &value[1..value.len() - 1];
                }
                return (!value.is_empty()).then_some(value);
            }
            start = end + 1;
        }
    }
    None
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let names = ["sid", "a", "", "session id"];
    let name = names[usize::from(pick & 3)];
    let mut headers = HeaderMap::new();
    for field in rest.split(|&b| b == b'\n') {
        if let Ok(v) = HeaderValue::from_bytes(field) {
            headers.append(COOKIE, v);
        }
    }
    let fields: Vec<&[u8]> = headers
        .get_all(COOKIE)
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    let got = weir_proxy::request_cookie(&headers, name);
    if let Some(v) = got {
        assert!(!v.is_empty());
        let inside = fields.iter().any(|f| {
            let (lo, hi) = (f.as_ptr() as usize, f.as_ptr() as usize + f.len());
            let p = v.as_ptr() as usize;
            p >= lo && p + v.len() <= hi
        });
        assert!(inside, "the answer is a part of a field");
    }
    assert_eq!(
        got,
        reference(&fields, name.as_bytes()),
        "{fields:?} {name:?}"
    );
});
