//! weir's own HTTP/1.1 upstream client: one exchange at a time on a connection the
//! request's task drives itself.
//!
//! hyper's client runs every upstream connection as a task of its own, reached through a
//! channel: the request is moved into the channel, the connection task encodes it into its
//! write buffer, parses the answer into a fresh read buffer and sends the response back
//! through a oneshot, and every body frame crosses another channel. In a profile of the
//! plaintext keep-alive path that machinery, with its moves of requests and responses, was
//! the largest part of weir's user-space instructions per request. Here, as pingora does,
//! the request's own future writes the head (one `writev`, with the body's first frame when
//! it is already there) and reads the response head in one pass
//! ([`parse::scan_response`]) from the connection's reused buffer; the response body reads the same connection and gives it back to the pool
//! when it ends. No task, no channel, no per-message buffer.
//!
//! - [`parse`]: the response head and the chunked decoder (untrusted bytes; fuzzed);
//! - [`Exchange`]: one request, from its head to the response head (with a second try on a
//!   new connection when a reused one turned out closed before anything was read for a
//!   request that can be sent again);
//! - [`ResponseBody`]: the response body, then the connection back to the pool;
//! - [`Upgraded`]: the connection after a `101 Switching Protocols`.

pub(crate) mod parse;
pub(crate) mod server;
mod write;

mod client;

pub(crate) use client::{Conn, Exchange, Io, ResponseBody, Upgraded};

/// Calls `check` on every head one byte away from `head`: each byte deleted, and replaced
/// by or preceded by each byte of `bytes`. Returns how many replaced or inserted heads it
/// checked. (The head scanners' tests compare two readings on all of them.)
#[cfg(test)]
pub(crate) fn one_byte_away(head: &[u8], bytes: &[u8], mut check: impl FnMut(&[u8])) -> usize {
    let mut checked = 0;
    for at in 0..head.len() {
        let mut deleted = head.to_vec();
        deleted.remove(at);
        check(&deleted);
        for &b in bytes {
            let mut replaced = head.to_vec();
            replaced[at] = b;
            check(&replaced);
            let mut inserted = head.to_vec();
            inserted.insert(at, b);
            check(&inserted);
            checked += 2;
        }
    }
    checked
}
