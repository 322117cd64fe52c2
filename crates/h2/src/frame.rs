//! HTTP/2 frames (RFC 9113 §4 and §6): the 9-byte frame head, the payload of each frame
//! type read from bytes with the checks §6 puts on it, and encoders that append frames to
//! a `Vec<u8>`.
//!
//! Reading is in two steps, so the connection can check the length against its
//! `SETTINGS_MAX_FRAME_SIZE` and wait for the whole payload before decoding:
//! [`Head::parse`] on the first [`HEAD_LEN`] bytes, then [`decode`] on exactly
//! `head.len` bytes of payload. Payloads are `Bytes` slices of the read buffer: no copy
//! and no allocation (padding is cut off in place).
//!
//! A malformed frame is an [`Error`]: [`Error::Connection`] (the connection sends GOAWAY
//! and closes) or [`Error::Stream`] (RST_STREAM on that stream only), as RFC 9113 says
//! for each check. What needs the connection's state (whether a stream is idle or
//! closed, a CONTINUATION following its HEADERS, the frame-size limit, flow-control
//! windows) is the connection's to check, not the codec's.
//!
//! Unknown frame types and unknown flags are ignored (§4.1, §5.5): an unknown type
//! decodes to [`Frame::Unknown`], and flags a type does not define are never looked at.

mod decode;
mod encode;
#[cfg(test)]
mod tests;

use std::fmt;

pub use decode::decode;
pub use encode::{
    write_data, write_data_head, write_goaway, write_head, write_headers, write_ping,
    write_priority, write_rst_stream, write_settings, write_settings_ack, write_window_update,
};

use bytes::Bytes;

/// What a client sends first on an HTTP/2 connection (§3.4), before its SETTINGS frame.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The length of a frame head (§4.1): 24-bit length, type, flags, 31-bit stream id.
pub const HEAD_LEN: usize = 9;
/// `SETTINGS_MAX_FRAME_SIZE` until a peer's SETTINGS says otherwise (§6.5.2), and its
/// lowest allowed value.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// The highest `SETTINGS_MAX_FRAME_SIZE` a peer may announce (2^24 - 1, §6.5.2): the
/// largest payload the 24-bit length of a frame head can describe.
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
/// The largest flow-control window, and the largest `SETTINGS_INITIAL_WINDOW_SIZE`
/// (2^31 - 1, §6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;
/// The initial flow-control window of the connection and of every stream until SETTINGS
/// changes the streams' (§6.9.2).
pub const DEFAULT_INITIAL_WINDOW_SIZE: u32 = 65_535;
/// `SETTINGS_HEADER_TABLE_SIZE` until a peer's SETTINGS says otherwise (§6.5.2).
pub const DEFAULT_HEADER_TABLE_SIZE: u32 = 4_096;

/// The 31 bits of a stream id; the highest bit of the field is reserved (§4.1).
const STREAM_MASK: u32 = MAX_WINDOW;

/// Frame type codes (§6, and §11.2's registry).
pub mod kind {
    /// §6.1.
    pub const DATA: u8 = 0x0;
    /// §6.2.
    pub const HEADERS: u8 = 0x1;
    /// §6.3.
    pub const PRIORITY: u8 = 0x2;
    /// §6.4.
    pub const RST_STREAM: u8 = 0x3;
    /// §6.5.
    pub const SETTINGS: u8 = 0x4;
    /// §6.6.
    pub const PUSH_PROMISE: u8 = 0x5;
    /// §6.7.
    pub const PING: u8 = 0x6;
    /// §6.8.
    pub const GOAWAY: u8 = 0x7;
    /// §6.9.
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// §6.10.
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flag bits (§6). Each is defined for some frame types only; a bit a type does not
/// define is ignored on read and never set on write.
pub mod flag {
    /// DATA, HEADERS: the last frame the sender sends on the stream.
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS, PING: an acknowledgement (the same bit as `END_STREAM`).
    pub const ACK: u8 = 0x1;
    /// HEADERS, PUSH_PROMISE, CONTINUATION: the field block ends in this frame.
    pub const END_HEADERS: u8 = 0x4;
    /// DATA, HEADERS, PUSH_PROMISE: the payload starts with a pad length and ends with
    /// that much padding.
    pub const PADDED: u8 = 0x8;
    /// HEADERS: the payload carries the (deprecated) priority fields.
    pub const PRIORITY: u8 = 0x20;
}

/// Setting identifiers of a SETTINGS frame (§6.5.2; `ENABLE_CONNECT_PROTOCOL` from
/// RFC 8441 §3).
pub mod setting {
    /// The largest HPACK dynamic table the sender's decoder allows.
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    /// 0 or 1: whether the sender (a client) accepts server push.
    pub const ENABLE_PUSH: u16 = 0x2;
    /// The most streams the sender lets its peer open.
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    /// The initial flow-control window of the sender's streams, at most 2^31 - 1.
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    /// The largest frame payload the sender accepts, 2^14 ..= 2^24 - 1.
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    /// Advisory: the largest field section the sender accepts.
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
    /// 0 or 1: extended CONNECT (RFC 8441).
    pub const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
}

/// An error code (§7), in RST_STREAM and GOAWAY frames. Codes this crate does not name
/// are kept as they are: a peer may send any 32-bit value, and an unknown one means
/// `INTERNAL_ERROR` to the reader (§7) but is still reported as sent.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reason(pub u32);

impl Reason {
    /// A graceful shutdown, or no error.
    pub const NO_ERROR: Reason = Reason(0x0);
    /// A protocol error not covered by a more specific code.
    pub const PROTOCOL_ERROR: Reason = Reason(0x1);
    /// An unexpected internal error.
    pub const INTERNAL_ERROR: Reason = Reason(0x2);
    /// The peer broke the flow-control protocol.
    pub const FLOW_CONTROL_ERROR: Reason = Reason(0x3);
    /// A SETTINGS frame was not acknowledged in time.
    pub const SETTINGS_TIMEOUT: Reason = Reason(0x4);
    /// A frame arrived after the stream was half-closed.
    pub const STREAM_CLOSED: Reason = Reason(0x5);
    /// A frame of the wrong size.
    pub const FRAME_SIZE_ERROR: Reason = Reason(0x6);
    /// The stream was refused before any application processing.
    pub const REFUSED_STREAM: Reason = Reason(0x7);
    /// The stream is no longer needed.
    pub const CANCEL: Reason = Reason(0x8);
    /// The field compression context cannot be maintained.
    pub const COMPRESSION_ERROR: Reason = Reason(0x9);
    /// The connection of a CONNECT request was reset or closed abnormally.
    pub const CONNECT_ERROR: Reason = Reason(0xa);
    /// The peer's behaviour might be generating excessive load.
    pub const ENHANCE_YOUR_CALM: Reason = Reason(0xb);
    /// The transport's security properties fall short.
    pub const INADEQUATE_SECURITY: Reason = Reason(0xc);
    /// HTTP/1.1 must be used instead.
    pub const HTTP_1_1_REQUIRED: Reason = Reason(0xd);

    /// The name RFC 9113 §7 gives the code, if it is one of them.
    pub fn name(self) -> Option<&'static str> {
        const NAMES: [&str; 14] = [
            "NO_ERROR",
            "PROTOCOL_ERROR",
            "INTERNAL_ERROR",
            "FLOW_CONTROL_ERROR",
            "SETTINGS_TIMEOUT",
            "STREAM_CLOSED",
            "FRAME_SIZE_ERROR",
            "REFUSED_STREAM",
            "CANCEL",
            "COMPRESSION_ERROR",
            "CONNECT_ERROR",
            "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY",
            "HTTP_1_1_REQUIRED",
        ];
        NAMES.get(self.0 as usize).copied()
    }
}

impl fmt::Debug for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "Reason({:#x})", self.0),
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "unknown error code {:#x}", self.0),
        }
    }
}

/// A frame head (§4.1), read from its [`HEAD_LEN`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// The payload's length (24 bits), not counting the head.
    pub len: u32,
    /// The frame type (see [`kind`]).
    pub kind: u8,
    /// The flags byte, all eight bits as sent (see [`flag`]).
    pub flags: u8,
    /// The stream id, with the reserved highest bit cleared (§4.1: ignored on receipt).
    pub stream: u32,
}

impl Head {
    /// Reads a frame head. Every 9 bytes are a head; whether it is acceptable (its
    /// length against the frame-size limit, its type and stream) is for the reader.
    #[inline]
    pub fn parse(b: &[u8; HEAD_LEN]) -> Head {
        Head {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & STREAM_MASK,
        }
    }

    /// Whether the flags byte has all the bits of `flag` set.
    #[inline]
    pub fn has(self, flag: u8) -> bool {
        self.flags & flag == flag
    }
}

/// What a malformed frame is: an error of the whole connection (§5.4.1: GOAWAY with the
/// reason, then close) or of one stream (§5.4.2: RST_STREAM on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// A connection error.
    Connection(Reason),
    /// A stream error: the stream id (never 0) and the reason.
    Stream(u32, Reason),
}

impl Error {
    /// The error code to send.
    pub fn reason(self) -> Reason {
        match self {
            Error::Connection(reason) | Error::Stream(_, reason) => reason,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Connection(reason) => write!(f, "HTTP/2 connection error {reason}"),
            Error::Stream(stream, reason) => {
                write!(f, "HTTP/2 stream error {reason} on stream {stream}")
            }
        }
    }
}

impl std::error::Error for Error {}

/// The priority fields of a HEADERS or PRIORITY frame (§6.3). RFC 9113 deprecates this
/// scheme (§5.3.2): a server reads the fields, checks them, and may ignore them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    /// The stream this one depends on (31 bits).
    pub dependency: u32,
    /// The exclusive flag (the highest bit of the dependency field).
    pub exclusive: bool,
    /// The weight as sent: the stream's weight minus one (0 means weight 1).
    pub weight: u8,
}

/// The parameters of a SETTINGS frame (§6.5.2): `Some` for each one the frame carries
/// (the last value when one is repeated; §6.5.3 processes them in order). Unknown
/// identifiers are ignored (§6.5.2). [`decode`] checks the bounds RFC 9113 sets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settings {
    /// `SETTINGS_HEADER_TABLE_SIZE` (0x1).
    pub header_table_size: Option<u32>,
    /// `SETTINGS_ENABLE_PUSH` (0x2), 0 or 1.
    pub enable_push: Option<u32>,
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` (0x3).
    pub max_concurrent_streams: Option<u32>,
    /// `SETTINGS_INITIAL_WINDOW_SIZE` (0x4), at most [`MAX_WINDOW`].
    pub initial_window_size: Option<u32>,
    /// `SETTINGS_MAX_FRAME_SIZE` (0x5), [`DEFAULT_MAX_FRAME_SIZE`] ..= [`MAX_MAX_FRAME_SIZE`].
    pub max_frame_size: Option<u32>,
    /// `SETTINGS_MAX_HEADER_LIST_SIZE` (0x6).
    pub max_header_list_size: Option<u32>,
    /// `SETTINGS_ENABLE_CONNECT_PROTOCOL` (0x8, RFC 8441), 0 or 1.
    pub enable_connect_protocol: Option<u32>,
}

/// A frame, decoded by [`decode`]. Byte fields are slices of the payload given to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// DATA (§6.1), its padding removed.
    Data {
        /// The stream (never 0).
        stream: u32,
        /// `END_STREAM`.
        end_stream: bool,
        /// The data, without pad length or padding.
        data: Bytes,
        /// The whole payload's length, pad length and padding included: what flow
        /// control counts (§6.9.1).
        flow_len: u32,
    },
    /// HEADERS (§6.2), its padding removed.
    Headers {
        /// The stream (never 0).
        stream: u32,
        /// `END_STREAM`.
        end_stream: bool,
        /// `END_HEADERS`: otherwise CONTINUATION frames of this stream follow.
        end_headers: bool,
        /// The priority fields, when the `PRIORITY` flag is set.
        priority: Option<Priority>,
        /// The field block fragment.
        block: Bytes,
    },
    /// PRIORITY (§6.3).
    Priority {
        /// The stream (never 0).
        stream: u32,
        /// Its fields.
        priority: Priority,
    },
    /// RST_STREAM (§6.4).
    RstStream {
        /// The stream (never 0).
        stream: u32,
        /// The error code.
        reason: Reason,
    },
    /// SETTINGS (§6.5).
    Settings {
        /// `ACK` (then `settings` is empty).
        ack: bool,
        /// The parameters.
        settings: Settings,
    },
    /// PUSH_PROMISE (§6.6). Only a server sends it: a server receiving one treats it as a
    /// connection error of type `PROTOCOL_ERROR` (§8.4); the codec only reports it.
    PushPromise {
        /// The stream it was sent on.
        stream: u32,
    },
    /// PING (§6.7).
    Ping {
        /// `ACK`.
        ack: bool,
        /// The opaque data, echoed in the answer.
        payload: [u8; 8],
    },
    /// GOAWAY (§6.8).
    GoAway {
        /// The last stream the sender processed (31 bits).
        last_stream: u32,
        /// The error code.
        reason: Reason,
        /// Additional debug data.
        debug: Bytes,
    },
    /// WINDOW_UPDATE (§6.9).
    WindowUpdate {
        /// The stream, or 0 for the connection's window.
        stream: u32,
        /// The increment, 1 ..= [`MAX_WINDOW`].
        increment: u32,
    },
    /// CONTINUATION (§6.10).
    Continuation {
        /// The stream (never 0).
        stream: u32,
        /// `END_HEADERS`.
        end_headers: bool,
        /// The field block fragment.
        block: Bytes,
    },
    /// A frame of a type RFC 9113 does not define: the connection ignores it (§4.1,
    /// §5.5), except that it may not come between HEADERS and CONTINUATION (§6.10).
    Unknown {
        /// The type code.
        kind: u8,
        /// The stream id.
        stream: u32,
    },
}
