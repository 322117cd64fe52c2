//! What a client connection may speak, checked on its first bytes.
//!
//! hyper-util's `auto` builder serves a connection as HTTP/2 when it starts with the
//! exact HTTP/2 connection preface, and as HTTP/1.1 otherwise; `http1_only` is ignored by
//! `serve_connection_with_upgrades` (which HTTP/1.1 upgrades need). So an invalid HTTP/2
//! preface got an HTTP/1.1 `400` (h2spec 3.5/2 expects the connection to be closed), and
//! a TLS connection that negotiated `http/1.1` by ALPN could still be spoken to in HTTP/2.
//!
//! [`FirstBytes`] wraps the socket under hyper and follows the bytes hyper reads until
//! they show the protocol: an HTTP/1.x request line (`token SP target SP HTTP/1.`), or,
//! where allowed, the HTTP/2 preface. Anything else ends the connection with an I/O
//! error, on which hyper closes without answering: for a client that opened with
//! something other than HTTP/1.x, an HTTP/1.1 error page is not an answer it can read,
//! and RFC 9113 §3.4 lets an invalid preface be closed without GOAWAY, since the peer
//! is evidently not speaking HTTP/2. Bytes are passed on as they arrive (nothing is
//! buffered or waited for), so hyper's own timeouts and limits apply unchanged, and once
//! decided the wrapper costs one branch per read.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The protocols a connection may open with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Speaks {
    /// HTTP/1.x only (TLS without ALPN `h2`).
    Http1,
    /// HTTP/1.x, or HTTP/2 with prior knowledge (plaintext listeners).
    Http1OrH2,
}

/// A client connection whose first bytes must open one of the protocols it [`Speaks`].
pub(crate) struct FirstBytes<IO> {
    io: IO,
    /// `None` once the protocol is known.
    check: Option<Check>,
}

impl<IO> FirstBytes<IO> {
    pub(crate) fn new(io: IO, speaks: Speaks) -> FirstBytes<IO> {
        FirstBytes {
            io,
            check: Some(Check {
                preface: (speaks == Speaks::Http1OrH2).then_some(0),
                line: Line::Start,
            }),
        }
    }
}

impl<IO: AsyncRead + Unpin> FirstBytes<IO> {
    /// Reads and drops what the client has already sent (at most 64 KiB). Closing a
    /// socket with unread input sends a reset instead of a FIN, and a reset may reach the
    /// client as an error before it can tell that the connection was closed on purpose
    /// (h2spec 3.5/2 fails on it).
    fn discard_received(&mut self, cx: &mut Context<'_>) {
        let mut scratch = [0u8; 4096];
        for _ in 0..16 {
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {}
                _ => return,
            }
        }
    }
}

const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HTTP1_VERSION: &[u8; 7] = b"HTTP/1.";

/// The first bytes seen so far, as two candidate parses.
#[derive(Clone, Copy, Debug)]
struct Check {
    /// How many bytes of the HTTP/2 preface matched; `None` when they did not (or HTTP/2
    /// is not allowed).
    preface: Option<u8>,
    line: Line,
}

/// Where an HTTP/1.x request line is (RFC 9112 §3: `method SP request-target SP
/// HTTP-version`, after optional empty lines, §2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
    Start,
    Method,
    Target,
    /// How many bytes of `HTTP/1.` matched.
    Version(u8),
    /// Not an HTTP/1.x request line.
    Failed,
}

/// What a connection's first bytes show so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opening {
    /// Not yet decided: every byte so far can still open an allowed protocol.
    Undecided,
    /// An HTTP/1.x request line, or (where allowed) the whole HTTP/2 preface.
    Allowed,
    /// Neither: the connection is closed without an answer.
    Refused,
}

/// Judges a connection's first bytes, read in `chunks` as they arrive, the way
/// [`FirstBytes`] does under hyper (`allow_h2`: a plaintext listener, where HTTP/2 with
/// prior knowledge may open the connection). Stops at the first decision. Public for the
/// `first_bytes` fuzz target.
pub fn judge_opening<'a>(allow_h2: bool, chunks: impl IntoIterator<Item = &'a [u8]>) -> Opening {
    let speaks = if allow_h2 {
        Speaks::Http1OrH2
    } else {
        Speaks::Http1
    };
    let FirstBytes { check, .. } = FirstBytes::new((), speaks);
    let mut check = check.expect("a new connection is undecided");
    for chunk in chunks {
        match check.feed(chunk) {
            Opening::Undecided => {}
            decided => return decided,
        }
    }
    Opening::Undecided
}

impl Check {
    fn feed(&mut self, bytes: &[u8]) -> Opening {
        for &b in bytes {
            if let Some(n) = self.preface {
                let matched = H2_PREFACE.get(usize::from(n)) == Some(&b);
                self.preface = matched.then_some(n + 1);
                if usize::from(n) + 1 == H2_PREFACE.len() && matched {
                    return Opening::Allowed;
                }
            }
            self.line = match (self.line, b) {
                (Line::Start, b'\r' | b'\n') => Line::Start,
                (Line::Start | Line::Method, b) if is_tchar(b) => Line::Method,
                (Line::Method, b' ') => Line::Target,
                (Line::Target, b' ') => Line::Version(0),
                // Any other byte: a bad target in an HTTP/1.x request is hyper's to answer
                // (400); only the version says which protocol this is.
                (Line::Target, b) if b != b'\r' && b != b'\n' => Line::Target,
                (Line::Version(n), b) if HTTP1_VERSION.get(usize::from(n)) == Some(&b) => {
                    if usize::from(n) + 1 == HTTP1_VERSION.len() {
                        return Opening::Allowed;
                    }
                    Line::Version(n + 1)
                }
                _ => Line::Failed,
            };
            if self.line == Line::Failed && self.preface.is_none() {
                return Opening::Refused;
            }
        }
        Opening::Undecided
    }
}

/// RFC 9110 §5.6.2 `tchar`, the characters of a method.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl<IO: AsyncRead + Unpin> AsyncRead for FirstBytes<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        if let Some(check) = &mut this.check {
            match check.feed(&buf.filled()[before..]) {
                Opening::Undecided => {}
                Opening::Allowed => this.check = None,
                Opening::Refused => {
                    buf.set_filled(before);
                    this.check = None;
                    this.discard_received(cx);
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "connection opened with neither an HTTP/1.x request nor an allowed HTTP/2 preface",
                    )));
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for FirstBytes<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(speaks: Speaks, chunks: &[&[u8]]) -> Opening {
        judge_opening(speaks == Speaks::Http1OrH2, chunks.iter().copied())
    }

    #[test]
    fn request_lines_and_prefaces() {
        use Opening::*;
        use Speaks::*;
        let cases: &[(Speaks, &[u8], Opening)] = &[
            (Http1OrH2, b"GET / HTTP/1.1\r\n", Allowed),
            (Http1OrH2, b"\r\nPOST /a?b HTTP/1.0\r\n", Allowed),
            (Http1OrH2, b"OPTIONS * HTTP/1.1\r\n", Allowed),
            (Http1OrH2, b"CONNECT a.test:443 HTTP/1.1\r\n", Allowed),
            (Http1OrH2, b"GET http://a.test/x HTTP/1.1\r\n", Allowed),
            (Http1OrH2, H2_PREFACE, Allowed),
            (Http1OrH2, b"INVALID CONNECTION PREFACE\r\n\r\n", Refused),
            (Http1OrH2, b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", Refused),
            (Http1OrH2, b"GET / HTTP/2.0\r\n", Refused),
            (Http1OrH2, b"GET /\r\n", Refused),
            (Http1OrH2, b"GET /a\x01b HTTP/1.1\r\n", Allowed),
            (Http1OrH2, b"\x16\x03\x01\x02\x00\x01", Refused),
            (Http1OrH2, b"GET / HTTP/1", Undecided),
            (Http1OrH2, b"PRI * HTTP/2.0\r\n\r\nSM", Undecided),
            (Http1, b"GET / HTTP/1.1\r\n", Allowed),
            (Http1, H2_PREFACE, Refused),
            (Http1, b"PRI", Undecided),
        ];
        for (speaks, bytes, want) in cases {
            assert_eq!(
                verdict(*speaks, &[bytes]),
                *want,
                "{speaks:?} {:?}",
                String::from_utf8_lossy(bytes)
            );
            // The same bytes one at a time decide the same way.
            let single: Vec<&[u8]> = bytes.chunks(1).collect();
            assert_eq!(verdict(*speaks, &single), *want, "bytewise");
        }
    }
}
