//! HPACK, the header compression of HTTP/2 (RFC 7541).
//!
//! - [`Decoder`] reads the header blocks of a client: representations (§6), the static and
//!   the dynamic table (§2.3, §4), integers (§5.1) and Huffman-coded strings (§5.2). Names
//!   are checked as RFC 9113 §8.2.1 asks (lower case tokens, known pseudo-headers); values
//!   are left to the connection.
//! - [`Encoder`] writes the header blocks of responses: a field already in a table is one
//!   index, a new one is added to the dynamic table so that the fields repeated from response
//!   to response (`content-type`, `server`, `date`, ...) cost a byte or two afterwards.
//!
//! Both keep the per-field work free of allocation on the common paths: static entries are
//! pre-made names and `'static` values, dynamic entries are reference-counted clones, a plain
//! literal value is a slice of the block, and the encoder finds table entries through small
//! open-addressing hash tables kept in step with eviction.

mod decoder;
mod encoder;
mod huffman;
mod table;
#[cfg(test)]
mod tests;

use std::fmt;

pub use decoder::Decoder;
pub use encoder::Encoder;

/// The pseudo-header fields of RFC 9113 §8.3 (and `:protocol`, RFC 8441).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pseudo {
    /// `:authority`
    Authority,
    /// `:method`
    Method,
    /// `:path`
    Path,
    /// `:scheme`
    Scheme,
    /// `:status`
    Status,
    /// `:protocol` (extended CONNECT)
    Protocol,
}

impl Pseudo {
    /// The name as sent, with its colon.
    #[inline]
    pub const fn as_str(self) -> &'static str {
        match self {
            Pseudo::Authority => ":authority",
            Pseudo::Method => ":method",
            Pseudo::Path => ":path",
            Pseudo::Scheme => ":scheme",
            Pseudo::Status => ":status",
            Pseudo::Protocol => ":protocol",
        }
    }

    /// The pseudo-header named by `name` (colon included), if it is one of the six.
    pub const fn from_bytes(name: &[u8]) -> Option<Pseudo> {
        match name {
            b":authority" => Some(Pseudo::Authority),
            b":method" => Some(Pseudo::Method),
            b":path" => Some(Pseudo::Path),
            b":scheme" => Some(Pseudo::Scheme),
            b":status" => Some(Pseudo::Status),
            b":protocol" => Some(Pseudo::Protocol),
            _ => None,
        }
    }
}

/// The name of a decoded field.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Name {
    Pseudo(Pseudo),
    Field(http::HeaderName),
}

impl Name {
    /// The name as sent (lower case; a pseudo-header with its colon).
    #[inline]
    pub fn as_str(&self) -> &str {
        match self {
            Name::Pseudo(p) => p.as_str(),
            Name::Field(n) => n.as_str(),
        }
    }
}

/// One decoded field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub name: Name,
    /// Not validated: HPACK carries any octets (the connection checks RFC 9113 §8.2.1).
    pub value: bytes::Bytes,
    /// Sent as a literal "never indexed" (RFC 7541 §6.2.3): an intermediary must forward it
    /// the same way.
    pub sensitive: bool,
}

impl Header {
    /// The size RFC 7541 §4.1 (and SETTINGS_MAX_HEADER_LIST_SIZE) counts for the field.
    #[inline]
    pub fn size(&self) -> usize {
        entry_size(self.name.as_str().len(), self.value.len())
    }
}

/// Why a header block could not be decoded. Every variant but [`DecodeError::ListTooLarge`]
/// is a connection error (COMPRESSION_ERROR, RFC 9113 §4.3): the block was not fully applied,
/// so the dynamic table may no longer match the peer's. `ListTooLarge` refuses the stream
/// only (see [`DecodeError::is_connection_error`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The block ends inside a representation.
    Truncated,
    /// An integer does not fit in 32 bits or has more than 5 continuation bytes.
    IntegerOverflow,
    /// Index 0, or past the end of the dynamic table.
    BadIndex,
    /// A Huffman string holds EOS or has padding longer than 7 bits or not all 1 bits.
    BadHuffman,
    /// A dynamic table size update above the SETTINGS_HEADER_TABLE_SIZE we advertise.
    TableSizeUpdateTooLarge,
    /// A dynamic table size update after a field of the block (RFC 7541 §4.2).
    TableSizeUpdateNotFirst,
    /// A literal name that is empty, has an upper-case letter or a byte outside the token
    /// characters, or starts with ':' without being one of the known pseudo-headers.
    InvalidName,
    /// The fields add up to more than SETTINGS_MAX_HEADER_LIST_SIZE. The whole block was
    /// still decoded, so the dynamic table is intact: only the stream is refused.
    ListTooLarge,
}

impl DecodeError {
    /// Whether the error ends the connection (COMPRESSION_ERROR). [`DecodeError::InvalidName`]
    /// leaves the dynamic table in an unknown state too (the representation that held the name
    /// was not applied), so it is one; only [`DecodeError::ListTooLarge`] is not.
    pub fn is_connection_error(self) -> bool {
        self != DecodeError::ListTooLarge
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DecodeError::Truncated => "header block ends inside a representation",
            DecodeError::IntegerOverflow => "HPACK integer too large",
            DecodeError::BadIndex => "HPACK index out of range",
            DecodeError::BadHuffman => "invalid Huffman-coded string",
            DecodeError::TableSizeUpdateTooLarge => "dynamic table size update above the limit",
            DecodeError::TableSizeUpdateNotFirst => {
                "dynamic table size update after a header field"
            }
            DecodeError::InvalidName => "invalid header field name",
            DecodeError::ListTooLarge => "header list larger than SETTINGS_MAX_HEADER_LIST_SIZE",
        })
    }
}

impl std::error::Error for DecodeError {}

/// The size of a table entry (RFC 7541 §4.1): name and value lengths plus 32.
const fn entry_size(name_len: usize, value_len: usize) -> usize {
    name_len + value_len + 32
}

/// The default SETTINGS_HEADER_TABLE_SIZE, and the largest table the encoder keeps.
pub const DEFAULT_TABLE_SIZE: usize = 4096;
