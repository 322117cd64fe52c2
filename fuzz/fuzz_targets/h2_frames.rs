//! weir's own HTTP/2 server reads a client's frames with `weir_h2::frame` (RFC 9113 §4,
//! §6). Client bytes are untrusted. The input is walked as a sequence of frames (a
//! 9-byte head, then its payload when that many bytes remain; the walk stops at the
//! first frame cut short), and each is decoded. Beyond not panicking: a stream error
//! names the frame's own (non-zero) stream; DATA's data lies within its payload and flow
//! control counts the whole payload (`data.len() <= flow_len == head.len`); a field
//! block fragment lies within its payload; a decoded frame written back with the
//! encoders decodes to the same frame (equality below: padding and `flow_len` follow the
//! unpadded rewrite, a HEADERS block is ended and its priority moves to a PRIORITY
//! frame); and the block of a HEADERS frame split by `write_headers` at a frame size the
//! input picks is one HEADERS and then CONTINUATION frames, `END_HEADERS` on the last
//! only, that join back to the block.
//!
//! The checks live in `crates/h2/src/frame/fuzz_check.rs`, which the unit tests of
//! `weir-h2` also include and run over 20,000 pseudo-random inputs.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weir_h2::frame::{
    DEFAULT_MAX_FRAME_SIZE, Error, Frame, HEAD_LEN, Head, MAX_MAX_FRAME_SIZE, decode, flag, kind,
    write_data, write_goaway, write_head, write_headers, write_ping, write_priority,
    write_rst_stream, write_settings, write_settings_ack, write_window_update,
};

include!("../../crates/h2/src/frame/fuzz_check.rs");

fuzz_target!(|input: &[u8]| check_frames(input));
