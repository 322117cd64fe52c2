//! Fuzzes `weir_proxy::judge_opening`, which decides from a connection's first bytes
//! whether it opens HTTP/1.x or (on plaintext listeners) HTTP/2 with prior knowledge,
//! before hyper sees them. Input: the first byte's lowest bit allows HTTP/2, its upper
//! seven bits (plus one) are the size of the reads the bytes arrive in; the rest is what
//! the client sent. Properties:
//! - judging never panics;
//! - the verdict does not depend on how the bytes are split into reads (whole, in the
//!   given read size, one byte at a time);
//! - it agrees with a plain reference reading of RFC 9112 §2.2/§3 and RFC 9113 §3.4
//!   written independently below: allowed exactly when the bytes hold, after optional
//!   empty lines, `token SP target SP HTTP/1.` or (where allowed) the whole HTTP/2
//!   preface; refused exactly when neither can still follow.

#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_proxy::{Opening, judge_opening};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fuzz_target!(|data: &[u8]| {
    let Some((&flags, bytes)) = data.split_first() else {
        return;
    };
    let allow_h2 = flags & 1 == 1;
    let read = usize::from(flags >> 1) + 1;
    let whole = judge_opening(allow_h2, [bytes]);
    assert_eq!(
        judge_opening(allow_h2, bytes.chunks(read)),
        whole,
        "reads of {read}"
    );
    assert_eq!(judge_opening(allow_h2, bytes.chunks(1)), whole, "bytewise");
    assert_eq!(reference(allow_h2, bytes), whole);
});

/// How far a candidate protocol got through the bytes.
enum Candidate {
    Matched,
    Failed,
    Open,
}

fn reference(allow_h2: bool, bytes: &[u8]) -> Opening {
    let h2 = if !allow_h2 {
        Candidate::Failed
    } else if bytes.starts_with(PREFACE) {
        Candidate::Matched
    } else if PREFACE.starts_with(bytes) {
        Candidate::Open
    } else {
        Candidate::Failed
    };
    match (request_line(bytes), h2) {
        (Candidate::Matched, _) | (_, Candidate::Matched) => Opening::Allowed,
        (Candidate::Failed, Candidate::Failed) => Opening::Refused,
        _ => Opening::Undecided,
    }
}

/// `*(CR / LF) 1*tchar SP *(any but SP, CR, LF) SP "HTTP/1."`
fn request_line(bytes: &[u8]) -> Candidate {
    let tchar = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    let rest = &bytes[bytes
        .iter()
        .take_while(|b| matches!(b, b'\r' | b'\n'))
        .count()..];
    let method = rest.iter().take_while(|b| tchar(b)).count();
    if method == rest.len() {
        return Candidate::Open;
    }
    if method == 0 || rest[method] != b' ' {
        return Candidate::Failed;
    }
    let rest = &rest[method + 1..];
    let target = rest
        .iter()
        .take_while(|b| !matches!(b, b' ' | b'\r' | b'\n'))
        .count();
    if target == rest.len() {
        return Candidate::Open;
    }
    if rest[target] != b' ' {
        return Candidate::Failed;
    }
    let version = &rest[target + 1..];
    if version.starts_with(b"HTTP/1.") {
        Candidate::Matched
    } else if b"HTTP/1.".starts_with(version) {
        Candidate::Open
    } else {
        Candidate::Failed
    }
}
