//! Writing HTTP/1.1 messages: body parts staged behind a head and written with one
//! `writev`, chunk-size lines, decimal lengths and trailer sections. Shared by the
//! upstream client ([`super::client`]) and the downstream server ([`super::server`]).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use http::header::{HeaderMap, HeaderName};
use tokio::io::AsyncWrite;

/// `n` in decimal, in `digits`.
pub(crate) fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &digits[at..];
        }
    }
}

/// What is left to write of a message: the rest of its head, then a body part (a chunk's
/// size line, its data, its CRLF). Written with one `writev` where the transport has it.
#[derive(Default)]
pub(crate) struct Outgoing {
    /// Bytes of the head already written.
    head_at: usize,
    prefix: [u8; 24],
    prefix_at: u8,
    prefix_len: u8,
    data: Bytes,
    suffix: &'static [u8],
}

impl Outgoing {
    /// Whether a body part is staged.
    pub(crate) fn has_body_part(&self) -> bool {
        self.prefix_at < self.prefix_len || !self.data.is_empty() || !self.suffix.is_empty()
    }

    pub(crate) fn is_empty(&self, head: &[u8]) -> bool {
        self.head_at >= head.len() && !self.has_body_part()
    }

    /// Stages a body part.
    pub(crate) fn stage(&mut self, prefix: &[u8], data: Bytes, suffix: &'static [u8]) {
        self.prefix[..prefix.len()].copy_from_slice(prefix);
        self.prefix_at = 0;
        self.prefix_len = prefix.len() as u8;
        self.data = data;
        self.suffix = suffix;
    }

    /// Writes until everything staged is written.
    pub(crate) fn poll_write<W: AsyncWrite + Unpin + ?Sized>(
        &mut self,
        head: &[u8],
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while !self.is_empty(head) {
            let parts = [
                &head[self.head_at.min(head.len())..],
                &self.prefix[usize::from(self.prefix_at)..usize::from(self.prefix_len)],
                &self.data[..],
                self.suffix,
            ];
            let slices = parts.map(IoSlice::new);
            let n = ready!(Pin::new(&mut *io).poll_write_vectored(cx, &slices))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.advance(head.len(), n);
        }
        Poll::Ready(Ok(()))
    }

    fn advance(&mut self, head_len: usize, mut n: usize) {
        let head_left = head_len.saturating_sub(self.head_at);
        let k = n.min(head_left);
        self.head_at += k;
        n -= k;
        let prefix_left = usize::from(self.prefix_len - self.prefix_at);
        let k = n.min(prefix_left);
        self.prefix_at += k as u8;
        n -= k;
        let k = n.min(self.data.len());
        self.data.advance(k);
        n -= k;
        self.suffix = &self.suffix[n.min(self.suffix.len())..];
    }
}

/// A chunk-size line for `n` bytes (hex digits, CRLF) in `line`; its length.
pub(crate) fn hex_line(n: usize, line: &mut [u8; 24]) -> usize {
    let digits = (usize::BITS - n.leading_zeros()).div_ceil(4).max(1) as usize;
    for (i, slot) in line[..digits].iter_mut().enumerate() {
        let shift = 4 * (digits - 1 - i);
        *slot = b"0123456789abcdef"[(n >> shift) & 0xf];
    }
    line[digits..digits + 2].copy_from_slice(b"\r\n");
    digits + 2
}

/// A chunked body's trailer section (the fields its `Trailer` header named), without
/// the final CRLF.
pub(crate) fn encode_trailers(trailers: &HeaderMap, allowed: Option<&[HeaderName]>) -> Bytes {
    let Some(allowed) = allowed else {
        return Bytes::new();
    };
    let mut out = Vec::new();
    for (name, value) in trailers {
        if allowed.contains(name) {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    /// A writer taking at most `step` bytes a call.
    struct Recorder {
        got: Vec<u8>,
        step: usize,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.step);
            self.got.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let mut left = self.step;
            for b in bufs {
                let n = b.len().min(left);
                self.got.extend_from_slice(&b[..n]);
                left -= n;
            }
            Poll::Ready(Ok(self.step - left))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn write_all(out: &mut Outgoing, head: &[u8], step: usize) -> Vec<u8> {
        let mut w = Recorder {
            got: Vec::new(),
            step,
        };
        let mut cx = Context::from_waker(Waker::noop());
        assert!(matches!(
            out.poll_write(head, &mut w, &mut cx),
            Poll::Ready(Ok(()))
        ));
        w.got
    }

    #[test]
    fn head_and_staged_parts_go_out_in_order_across_short_writes() {
        let head = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n";
        let mut line = [0u8; 24];
        let len = hex_line(11, &mut line);
        let mut want = head.to_vec();
        want.extend_from_slice(b"b\r\nhello world\r\n");
        for step in [1, 3, 5, 16, 64, 1000] {
            let mut out = Outgoing::default();
            assert!(!out.is_empty(head));
            out.stage(&line[..len], Bytes::from_static(b"hello world"), b"\r\n");
            assert_eq!(write_all(&mut out, head, step), want, "step {step}");
            assert!(out.is_empty(head));
            // A head alone.
            let mut out = Outgoing::default();
            assert_eq!(write_all(&mut out, head, step), head, "step {step}");
            // A body part alone, the head written before.
            let mut out = Outgoing::default();
            out.stage(b"", Bytes::from_static(b"abc"), b"\r\n");
            assert_eq!(write_all(&mut out, b"", step), b"abc\r\n", "step {step}");
        }
    }
}
