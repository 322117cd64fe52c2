//! weir's own HTTP/1.1 server reads a client's request head (a one-pass scan, checked
//! against the httparse-based reading it replaced; then the rules
//! that decide whether the request is served there or handed to hyper's server). Client
//! bytes are untrusted. Beyond not panicking: the answer must not depend on how the bytes
//! arrive (every prefix of a complete head is only partial, so reading in pieces finds
//! the same head), the head, its target and its field values lie inside the bytes read,
//! and a head served there has at most one body framing (a `Content-Length` of decimal
//! digits whose value is the length it reports, or one `Transfer-Encoding: chunked`), so
//! it can never be read differently from the backend.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_proxy::{ParsedRequest, RequestFraming, check_request_scan, parse_request};

fuzz_target!(|data: &[u8]| {
    let Some((&limit, bytes)) = data.split_first() else {
        return;
    };
    let max_headers = usize::from(limit);
    // The one-pass scan agrees with httparse (weir's reading before it).
    check_request_scan(bytes, max_headers);
    let mut fields = Vec::new();
    let whole = parse_request(bytes, &mut fields, max_headers);
    if let ParsedRequest::Complete {
        len, target, body, ..
    } = &whole
    {
        assert!(*len <= bytes.len());
        assert!(target.0 <= target.1 && target.1 <= *len);
        assert!(fields.len() <= max_headers);
        let lengths = fields
            .iter()
            .filter(|(n, ..)| n == http::header::CONTENT_LENGTH)
            .count();
        assert!(lengths <= 1);
        let codings = fields
            .iter()
            .filter(|(n, ..)| n == http::header::TRANSFER_ENCODING)
            .count();
        // One framing at most: a length, or `chunked` alone.
        assert!(lengths + codings <= 1);
        assert_eq!(codings == 1, *body == RequestFraming::Chunked);
        if lengths + codings == 0 {
            assert_eq!(*body, RequestFraming::Length(0));
        }
        for (name, start, end) in &fields {
            assert!(start <= end && *end <= *len);
            if name == http::header::TRANSFER_ENCODING {
                assert!(bytes[*start..*end].eq_ignore_ascii_case(b"chunked"));
            }
            if name == http::header::CONTENT_LENGTH {
                let digits = &bytes[*start..*end];
                assert!(!digits.is_empty() && digits.iter().all(u8::is_ascii_digit));
                let n = std::str::from_utf8(digits).unwrap().parse::<u64>().ok();
                assert_eq!(n.map(RequestFraming::Length), Some(*body));
            }
        }
        let mut again = Vec::new();
        for n in (0..*len).step_by((*len / 64).max(1)) {
            assert_eq!(
                parse_request(&bytes[..n], &mut again, max_headers),
                ParsedRequest::Partial,
                "a prefix of {n} bytes"
            );
        }
        assert_eq!(
            parse_request(&bytes[..*len], &mut again, max_headers),
            whole
        );
        assert_eq!(again, fields);
    }
});
