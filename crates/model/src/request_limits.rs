//! Request size limits (TrafficPolicy `requestLimits`): how large a request's body and
//! head may be on a Gateway, a route or one rule, below the listener's own head limits.

use serde::Serialize;

/// Limits on one request; each unset field leaves the listener's limits alone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct RequestLimits {
    /// Bytes of the body: a larger `Content-Length` is answered 413 before anything is
    /// forwarded, and a body without one (chunked, HTTP/2) is cut off past it (413 when
    /// the upstream has not answered yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<u64>,
    /// Bytes of the head's header fields (names and values, as HTTP/2 counts them: 32
    /// more per field): 431 beyond.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_header_bytes: Option<u32>,
    /// Header fields in the head: 431 beyond.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_headers: Option<u32>,
}

impl RequestLimits {
    /// Whether a head of `fields` header fields totalling `bytes` (as counted for
    /// `max_header_bytes`) fits.
    pub fn head_fits(&self, fields: usize, bytes: usize) -> bool {
        self.max_headers
            .is_none_or(|m| fields <= usize::try_from(m).unwrap_or(usize::MAX))
            && self
                .max_header_bytes
                .is_none_or(|m| bytes <= usize::try_from(m).unwrap_or(usize::MAX))
    }

    /// Whether a body of `declared` bytes (its `Content-Length`) fits.
    pub fn body_fits(&self, declared: u64) -> bool {
        self.max_body_bytes.is_none_or(|m| declared <= m)
    }
}
