//! weir's own HTTP/2 server decodes a client's header blocks with `weir_h2::hpack::Decoder`
//! (RFC 7541). Client bytes are untrusted. Beyond not panicking: the input's first byte picks
//! the advertised table size and a header list limit, the rest is split into blocks (each a
//! length byte and its bytes) decoded on one connection; the limit may only cut a block's
//! fields short (a prefix within the limit, then `ListTooLarge`), never change the dynamic
//! table or any other outcome of this block or the next ones, and names come out as lower-case
//! tokens or known pseudo-headers. Then the same bytes, read as a script of header fields
//! (names made valid, any field values, sensitive or not, any `:status`, table size changes
//! between blocks), go through `Encoder` and back through `Decoder`: the fields, their
//! sensitivity and the dynamic table size must come back identical.
//!
//! The checks live in `crates/h2/src/hpack/fuzz_check.rs`, which the unit tests of
//! `weir-h2` also include and run over 20,000 pseudo-random inputs.
#![no_main]

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use libfuzzer_sys::fuzz_target;
use weir_h2::hpack::{DecodeError, Decoder, Encoder, Header, Name, Pseudo};

include!("../../crates/h2/src/hpack/fuzz_check.rs");

fuzz_target!(|data: &[u8]| check_hpack(data));
