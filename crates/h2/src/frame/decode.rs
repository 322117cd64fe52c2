//! Reading a frame's payload (RFC 9113 §6), with the checks each frame type has.

use bytes::{Buf, Bytes};

use super::{
    DEFAULT_MAX_FRAME_SIZE, Error, Frame, Head, MAX_MAX_FRAME_SIZE, MAX_WINDOW, Priority, Reason,
    STREAM_MASK, Settings, flag, kind, setting,
};

/// Decodes one frame whose head was read and whose payload (exactly `head.len` bytes)
/// follows.
///
/// The checks of RFC 9113 §6 for each type, as a connection or a stream error where the
/// RFC says which:
/// - DATA, HEADERS, PRIORITY, RST_STREAM, CONTINUATION on stream 0, and SETTINGS, PING,
///   GOAWAY on any other stream: connection `PROTOCOL_ERROR`;
/// - padding longer than what follows the fixed fields (pad length, and priority for
///   HEADERS): connection `PROTOCOL_ERROR` (padding exactly as long leaves empty data or
///   an empty fragment, which is allowed); a `PADDED` or `PRIORITY` flag on a payload too
///   short for those fields: connection `FRAME_SIZE_ERROR` (§4.2);
/// - PRIORITY of a length other than 5: stream `FRAME_SIZE_ERROR`; HEADERS or PRIORITY
///   whose priority names its own stream: stream `PROTOCOL_ERROR` (§5.3.1);
/// - RST_STREAM of a length other than 4, PING other than 8, GOAWAY under 8,
///   WINDOW_UPDATE other than 4, SETTINGS not a multiple of 6 or an ACK with a payload:
///   connection `FRAME_SIZE_ERROR`;
/// - SETTINGS values: `ENABLE_PUSH` or `ENABLE_CONNECT_PROTOCOL` above 1 and
///   `MAX_FRAME_SIZE` outside 16384 ..= 16777215: connection `PROTOCOL_ERROR`;
///   `INITIAL_WINDOW_SIZE` above 2^31 - 1: connection `FLOW_CONTROL_ERROR`;
/// - a WINDOW_UPDATE increment of 0: stream `PROTOCOL_ERROR` (connection
///   `PROTOCOL_ERROR` on stream 0).
///
/// The frame-size limit (`SETTINGS_MAX_FRAME_SIZE`) is the connection's to check on the
/// head, before it reads the payload. Flags a type does not define are ignored; an
/// unknown type is [`Frame::Unknown`]. Never allocates: byte fields are the payload,
/// advanced and truncated in place.
pub fn decode(head: Head, payload: Bytes) -> Result<Frame, Error> {
    debug_assert_eq!(
        payload.len(),
        head.len as usize,
        "a payload of head.len bytes"
    );
    match head.kind {
        kind::DATA => data(head, payload),
        kind::HEADERS => headers(head, payload),
        kind::PRIORITY => priority_frame(head, &payload),
        kind::RST_STREAM => rst_stream(head, &payload),
        kind::SETTINGS => settings(head, &payload),
        kind::PUSH_PROMISE => Ok(Frame::PushPromise {
            stream: head.stream,
        }),
        kind::PING => ping(head, &payload),
        kind::GOAWAY => goaway(head, payload),
        kind::WINDOW_UPDATE => window_update(head, &payload),
        kind::CONTINUATION => continuation(head, payload),
        kind => Ok(Frame::Unknown {
            kind,
            stream: head.stream,
        }),
    }
}

const fn connection(reason: Reason) -> Result<Frame, Error> {
    Err(Error::Connection(reason))
}

/// The 32-bit big-endian number at the start of `b` (at least 4 bytes).
#[inline]
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Takes the pad length off the front of a `PADDED` payload.
#[inline]
fn take_pad_len(payload: &mut Bytes) -> Result<usize, Error> {
    match payload.first() {
        Some(&pad) => {
            payload.advance(1);
            Ok(usize::from(pad))
        }
        // No room for the pad length: too small for its mandatory fields (§4.2).
        None => Err(Error::Connection(Reason::FRAME_SIZE_ERROR)),
    }
}

/// Cuts `pad` bytes of padding off the end of what is left of a payload (§6.1, §6.2:
/// padding longer than that is a connection `PROTOCOL_ERROR`).
#[inline]
fn cut_padding(payload: &mut Bytes, pad: usize) -> Result<(), Error> {
    if pad > payload.len() {
        return Err(Error::Connection(Reason::PROTOCOL_ERROR));
    }
    if pad > 0 {
        payload.truncate(payload.len() - pad);
    }
    Ok(())
}

/// The 5 bytes of priority fields (§6.3): E bit and 31-bit dependency, then the weight.
#[inline]
fn read_priority(b: &[u8]) -> Priority {
    let word = be32(b);
    Priority {
        dependency: word & STREAM_MASK,
        exclusive: word & !STREAM_MASK != 0,
        weight: b[4],
    }
}

fn data(head: Head, mut payload: Bytes) -> Result<Frame, Error> {
    if head.stream == 0 {
        return connection(Reason::PROTOCOL_ERROR);
    }
    if head.has(flag::PADDED) {
        let pad = take_pad_len(&mut payload)?;
        cut_padding(&mut payload, pad)?;
    }
    Ok(Frame::Data {
        stream: head.stream,
        end_stream: head.has(flag::END_STREAM),
        data: payload,
        flow_len: head.len,
    })
}

fn headers(head: Head, mut payload: Bytes) -> Result<Frame, Error> {
    if head.stream == 0 {
        return connection(Reason::PROTOCOL_ERROR);
    }
    let pad = if head.has(flag::PADDED) {
        take_pad_len(&mut payload)?
    } else {
        0
    };
    let priority = if head.has(flag::PRIORITY) {
        if payload.len() < 5 {
            return connection(Reason::FRAME_SIZE_ERROR);
        }
        let priority = read_priority(&payload);
        payload.advance(5);
        Some(priority)
    } else {
        None
    };
    cut_padding(&mut payload, pad)?;
    if let Some(priority) = priority
        && priority.dependency == head.stream
    {
        return Err(Error::Stream(head.stream, Reason::PROTOCOL_ERROR));
    }
    Ok(Frame::Headers {
        stream: head.stream,
        end_stream: head.has(flag::END_STREAM),
        end_headers: head.has(flag::END_HEADERS),
        priority,
        block: payload,
    })
}

fn priority_frame(head: Head, payload: &[u8]) -> Result<Frame, Error> {
    if head.stream == 0 {
        return connection(Reason::PROTOCOL_ERROR);
    }
    if payload.len() != 5 {
        return Err(Error::Stream(head.stream, Reason::FRAME_SIZE_ERROR));
    }
    let priority = read_priority(payload);
    if priority.dependency == head.stream {
        return Err(Error::Stream(head.stream, Reason::PROTOCOL_ERROR));
    }
    Ok(Frame::Priority {
        stream: head.stream,
        priority,
    })
}

fn rst_stream(head: Head, payload: &[u8]) -> Result<Frame, Error> {
    if head.stream == 0 {
        return connection(Reason::PROTOCOL_ERROR);
    }
    if payload.len() != 4 {
        return connection(Reason::FRAME_SIZE_ERROR);
    }
    Ok(Frame::RstStream {
        stream: head.stream,
        reason: Reason(be32(payload)),
    })
}

fn settings(head: Head, payload: &[u8]) -> Result<Frame, Error> {
    if head.stream != 0 {
        return connection(Reason::PROTOCOL_ERROR);
    }
    let ack = head.has(flag::ACK);
    if ack && !payload.is_empty() {
        return connection(Reason::FRAME_SIZE_ERROR);
    }
    if !payload.len().is_multiple_of(6) {
        return connection(Reason::FRAME_SIZE_ERROR);
    }
    let mut settings = Settings::default();
    for entry in payload.chunks_exact(6) {
        let id = u16::from_be_bytes([entry[0], entry[1]]);
        let value = be32(&entry[2..]);
        let slot = match id {
            setting::HEADER_TABLE_SIZE => &mut settings.header_table_size,
            setting::ENABLE_PUSH if value > 1 => return connection(Reason::PROTOCOL_ERROR),
            setting::ENABLE_PUSH => &mut settings.enable_push,
            setting::MAX_CONCURRENT_STREAMS => &mut settings.max_concurrent_streams,
            setting::INITIAL_WINDOW_SIZE if value > MAX_WINDOW => {
                return connection(Reason::FLOW_CONTROL_ERROR);
            }
            setting::INITIAL_WINDOW_SIZE => &mut settings.initial_window_size,
            setting::MAX_FRAME_SIZE
                if !(DEFAULT_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&value) =>
            {
                return connection(Reason::PROTOCOL_ERROR);
            }
            setting::MAX_FRAME_SIZE => &mut settings.max_frame_size,
            setting::MAX_HEADER_LIST_SIZE => &mut settings.max_header_list_size,
            setting::ENABLE_CONNECT_PROTOCOL if value > 1 => {
                return connection(Reason::PROTOCOL_ERROR);
            }
            setting::ENABLE_CONNECT_PROTOCOL => &mut settings.enable_connect_protocol,
            // An identifier this endpoint does not know is ignored (§6.5.2).
            _ => continue,
        };
        *slot = Some(value);
    }
    Ok(Frame::Settings { ack, settings })
}

fn ping(head: Head, payload: &[u8]) -> Result<Frame, Error> {
    if head.stream != 0 {
        return connection(Reason::PROTOCOL_ERROR);
    }
    let Ok(bytes) = <[u8; 8]>::try_from(payload) else {
        return connection(Reason::FRAME_SIZE_ERROR);
    };
    Ok(Frame::Ping {
        ack: head.has(flag::ACK),
        payload: bytes,
    })
}

fn goaway(head: Head, mut payload: Bytes) -> Result<Frame, Error> {
    if head.stream != 0 {
        return connection(Reason::PROTOCOL_ERROR);
    }
    if payload.len() < 8 {
        return connection(Reason::FRAME_SIZE_ERROR);
    }
    let last_stream = be32(&payload) & STREAM_MASK;
    let reason = Reason(be32(&payload[4..]));
    payload.advance(8);
    Ok(Frame::GoAway {
        last_stream,
        reason,
        debug: payload,
    })
}

fn window_update(head: Head, payload: &[u8]) -> Result<Frame, Error> {
    if payload.len() != 4 {
        return connection(Reason::FRAME_SIZE_ERROR);
    }
    let increment = be32(payload) & STREAM_MASK;
    if increment == 0 {
        return Err(match head.stream {
            0 => Error::Connection(Reason::PROTOCOL_ERROR),
            stream => Error::Stream(stream, Reason::PROTOCOL_ERROR),
        });
    }
    Ok(Frame::WindowUpdate {
        stream: head.stream,
        increment,
    })
}

fn continuation(head: Head, payload: Bytes) -> Result<Frame, Error> {
    if head.stream == 0 {
        return connection(Reason::PROTOCOL_ERROR);
    }
    Ok(Frame::Continuation {
        stream: head.stream,
        end_headers: head.has(flag::END_HEADERS),
        block: payload,
    })
}
