//! Writing frames (RFC 9113 §6): each encoder appends one frame (or, for a field block,
//! a HEADERS frame and its CONTINUATION frames) to a `Vec<u8>`. Reserved bits are
//! written as 0 (§4.1), and only flags the type defines are set.

use super::{
    DEFAULT_MAX_FRAME_SIZE, HEAD_LEN, MAX_MAX_FRAME_SIZE, MAX_WINDOW, Priority, Reason,
    STREAM_MASK, Settings, flag, kind, setting,
};

/// The 9 bytes of a frame head.
#[inline]
fn head_bytes(len: u32, kind: u8, flags: u8, stream: u32) -> [u8; HEAD_LEN] {
    debug_assert!(len <= MAX_MAX_FRAME_SIZE, "a frame length fits 24 bits");
    let [_, l0, l1, l2] = len.to_be_bytes();
    let [s0, s1, s2, s3] = (stream & STREAM_MASK).to_be_bytes();
    [l0, l1, l2, kind, flags, s0, s1, s2, s3]
}

/// Appends a head and a small fixed payload with one capacity check.
#[inline]
fn put(out: &mut Vec<u8>, head: [u8; HEAD_LEN], body: &[u8]) {
    out.reserve(HEAD_LEN + body.len());
    out.extend_from_slice(&head);
    out.extend_from_slice(body);
}

/// Appends a frame head (§4.1): `len` must fit 24 bits; the stream id's reserved bit is
/// cleared.
#[inline]
pub fn write_head(out: &mut Vec<u8>, len: u32, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&head_bytes(len, kind, flags, stream));
}

/// Appends the head of a DATA frame (§6.1) of `len` bytes, unpadded; the caller appends
/// the data.
#[inline]
pub fn write_data_head(out: &mut Vec<u8>, stream: u32, len: u32, end_stream: bool) {
    let flags = if end_stream { flag::END_STREAM } else { 0 };
    write_head(out, len, kind::DATA, flags, stream);
}

/// Appends a whole DATA frame (§6.1), unpadded; `data` must fit the peer's frame size.
#[inline]
pub fn write_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end_stream: bool) {
    let flags = if end_stream { flag::END_STREAM } else { 0 };
    put(
        out,
        head_bytes(len32(data.len()), kind::DATA, flags, stream),
        data,
    );
}

/// Appends a field block as a HEADERS frame (§6.2), then as many CONTINUATION frames
/// (§6.10) as needed, each of at most `max_frame_size` payload bytes (taken within
/// 1 ..= 2^24 - 1), `END_HEADERS` on the last. `END_STREAM` is on the HEADERS frame (the
/// only one that defines it). An empty block is one empty HEADERS frame. No padding,
/// no priority.
pub fn write_headers(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame_size: u32,
) {
    let max = max_frame_size.clamp(1, MAX_MAX_FRAME_SIZE) as usize;
    let frames = block.len().div_ceil(max).max(1);
    out.reserve(block.len() + frames * HEAD_LEN);
    let (first, mut rest) = block.split_at(block.len().min(max));
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if rest.is_empty() {
        flags |= flag::END_HEADERS;
    }
    write_head(out, len32(first.len()), kind::HEADERS, flags, stream);
    out.extend_from_slice(first);
    while !rest.is_empty() {
        let (fragment, tail) = rest.split_at(rest.len().min(max));
        rest = tail;
        let flags = if rest.is_empty() {
            flag::END_HEADERS
        } else {
            0
        };
        write_head(
            out,
            len32(fragment.len()),
            kind::CONTINUATION,
            flags,
            stream,
        );
        out.extend_from_slice(fragment);
    }
}

/// Appends a PRIORITY frame (§6.3). A server has no reason to send one; it is here for
/// completeness (and tests).
pub fn write_priority(out: &mut Vec<u8>, stream: u32, priority: Priority) {
    let mut word = priority.dependency & STREAM_MASK;
    if priority.exclusive {
        word |= !STREAM_MASK;
    }
    let [d0, d1, d2, d3] = word.to_be_bytes();
    put(
        out,
        head_bytes(5, kind::PRIORITY, 0, stream),
        &[d0, d1, d2, d3, priority.weight],
    );
}

/// Appends a RST_STREAM frame (§6.4).
pub fn write_rst_stream(out: &mut Vec<u8>, stream: u32, reason: Reason) {
    put(
        out,
        head_bytes(4, kind::RST_STREAM, 0, stream),
        &reason.0.to_be_bytes(),
    );
}

/// Appends a SETTINGS frame (§6.5) with the parameters that are `Some`, in identifier
/// order. Values are written as given (the caller keeps them within RFC 9113's bounds).
pub fn write_settings(out: &mut Vec<u8>, settings: &Settings) {
    let entries = [
        (setting::HEADER_TABLE_SIZE, settings.header_table_size),
        (setting::ENABLE_PUSH, settings.enable_push),
        (
            setting::MAX_CONCURRENT_STREAMS,
            settings.max_concurrent_streams,
        ),
        (setting::INITIAL_WINDOW_SIZE, settings.initial_window_size),
        (setting::MAX_FRAME_SIZE, settings.max_frame_size),
        (setting::MAX_HEADER_LIST_SIZE, settings.max_header_list_size),
        (
            setting::ENABLE_CONNECT_PROTOCOL,
            settings.enable_connect_protocol,
        ),
    ];
    let count = entries.iter().filter(|(_, value)| value.is_some()).count();
    out.reserve(HEAD_LEN + 6 * count);
    write_head(out, len32(6 * count), kind::SETTINGS, 0, 0);
    for (id, value) in entries {
        if let Some(value) = value {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&value.to_be_bytes());
        }
    }
}

/// Appends an empty SETTINGS frame with `ACK` (§6.5.3).
pub fn write_settings_ack(out: &mut Vec<u8>) {
    write_head(out, 0, kind::SETTINGS, flag::ACK, 0);
}

/// Appends a PING frame (§6.7); an answer has `ack` and the payload received.
pub fn write_ping(out: &mut Vec<u8>, ack: bool, payload: [u8; 8]) {
    let flags = if ack { flag::ACK } else { 0 };
    put(out, head_bytes(8, kind::PING, flags, 0), &payload);
}

/// Appends a GOAWAY frame (§6.8). Debug data beyond what fits a frame of the smallest
/// allowed size (16384 - 8 bytes) is left out, so any peer accepts the frame.
pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, reason: Reason, debug: &[u8]) {
    let debug = &debug[..debug.len().min(DEFAULT_MAX_FRAME_SIZE as usize - 8)];
    out.reserve(HEAD_LEN + 8 + debug.len());
    write_head(out, len32(8 + debug.len()), kind::GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & STREAM_MASK).to_be_bytes());
    out.extend_from_slice(&reason.0.to_be_bytes());
    out.extend_from_slice(debug);
}

/// Appends a WINDOW_UPDATE frame (§6.9) for a stream, or for the connection on stream 0.
/// The increment must be 1 ..= 2^31 - 1 (its reserved bit is cleared).
#[inline]
pub fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    debug_assert!(
        (1..=MAX_WINDOW).contains(&increment),
        "a window increment of 1 ..= 2^31 - 1"
    );
    put(
        out,
        head_bytes(4, kind::WINDOW_UPDATE, 0, stream),
        &(increment & STREAM_MASK).to_be_bytes(),
    );
}

/// A payload length as the head's `u32` (the callers' lengths fit 24 bits).
#[inline]
fn len32(len: usize) -> u32 {
    debug_assert!(
        len <= MAX_MAX_FRAME_SIZE as usize,
        "a frame length fits 24 bits"
    );
    len as u32
}
