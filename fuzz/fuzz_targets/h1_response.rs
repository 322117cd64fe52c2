//! weir's HTTP/1.1 client reads an upstream's response: its head (weir's one-pass scan,
//! checked against httparse plus the bare-LF rule it replaced; then weir's framing and
//! persistence rules) and a chunked body (weir's decoder). Upstream bytes are
//! untrusted. Beyond not panicking, the result must not depend on how the bytes arrive:
//! read in one piece, byte by byte, and in pieces of a size taken from the input, it is
//! the same response (or the same refusal), and a decoded body is never longer than the
//! input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_proxy::{UpstreamRead, check_upstream_head_scan, read_upstream_response};

fuzz_target!(|data: &[u8]| {
    let Some((&control, bytes)) = data.split_first() else {
        return;
    };
    // The one-pass head scan agrees with httparse and the bare-LF rule (weir's scan
    // before it).
    check_upstream_head_scan(bytes);
    let head_request = control & 0x80 != 0;
    let step = usize::from(control & 0x7f).max(1);
    let whole = read_upstream_response(bytes, head_request, bytes.len().max(1));
    let bytewise = read_upstream_response(bytes, head_request, 1);
    let stepped = read_upstream_response(bytes, head_request, step);
    assert_eq!(whole, bytewise, "one piece vs byte by byte");
    assert_eq!(whole, stepped, "one piece vs pieces of {step}");
    if let UpstreamRead::Response { body, rest, .. } = &whole {
        assert!(body.len() + rest <= bytes.len());
    }
});
