//! weir's own HTTP/2 (RFC 9113) for the server side of the data plane.
//!
//! - [`frame`]: frame heads and payloads read from and written to bytes, with the
//!   checks RFC 9113 §6 puts on each frame type (a connection or a stream error).
//! - [`hpack`]: header compression (RFC 7541): the decoder of a client's header blocks
//!   and the encoder of responses, with Huffman coding.
//! - [`server`]: a client connection served in one task: frames read and written,
//!   streams polled in place, flow control both ways.

pub mod frame;
pub mod hpack;
pub mod server;
