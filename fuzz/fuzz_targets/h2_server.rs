//! weir's own HTTP/2 server connection (`weir_h2::server::Connection`) fed a client's
//! bytes: the connection preface, then whatever the input holds (the frame codec, HPACK,
//! stream states, flow control and the request bodies all see untrusted bytes). Each
//! request is answered with its own body (an echo), so request and response bodies both
//! flow. The first byte picks the size of each read. Beyond not panicking: the
//! connection ends once the input does (no poll loop without end), and everything it
//! wrote is a valid HTTP/2 server stream: whole frames that decode, SETTINGS first, and
//! header blocks that one HPACK decoder reads in order.
#![no_main]

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{Request, Response};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use weir_h2::frame::{self, Frame, HEAD_LEN, Head, PREFACE};
use weir_h2::hpack::Decoder;
use weir_h2::server::{Config, Connection, RecvBody};

struct Pipe {
    input: Vec<u8>,
    at: usize,
    read_size: usize,
    output: Vec<u8>,
}

impl AsyncRead for Pipe {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = (self.input.len() - self.at)
            .min(self.read_size)
            .min(buf.remaining());
        let at = self.at;
        buf.put_slice(&self.input[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Pipe {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.output.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn echo(req: Request<RecvBody>) -> Ready<Result<Response<RecvBody>, Infallible>> {
    ready(Ok(Response::new(req.into_body())))
}

fuzz_target!(|data: &[u8]| {
    let Some((&size, rest)) = data.split_first() else {
        return;
    };
    let mut input = PREFACE.to_vec();
    input.extend_from_slice(rest);
    let pipe = Pipe {
        input,
        at: 0,
        read_size: usize::from(size).max(1) * 7,
        output: Vec::new(),
    };
    let cfg = Config {
        stream_window: 1 << 14,
        conn_window: 1 << 15,
        max_header_list_size: 4096,
        max_concurrent_streams: 8,
        ..Config::default()
    };
    let mut conn = Connection::new(pipe, cfg, echo);
    let mut cx = Context::from_waker(Waker::noop());
    let mut ended = false;
    for _ in 0..10_000 {
        if Pin::new(&mut conn).poll(&mut cx).is_ready() {
            ended = true;
            break;
        }
    }
    assert!(ended, "the connection did not end with its input");
    let output = Bytes::from(conn.into_io().output);
    let mut at = 0;
    let mut decoder = Decoder::new(4096);
    let mut first = true;
    while at < output.len() {
        assert!(output.len() - at >= HEAD_LEN, "a frame head cut short");
        let head = Head::parse(output[at..at + HEAD_LEN].try_into().unwrap());
        let end = at + HEAD_LEN + head.len as usize;
        assert!(end <= output.len(), "a frame cut short");
        assert!(head.len <= frame::DEFAULT_MAX_FRAME_SIZE);
        let f = frame::decode(head, output.slice(at + HEAD_LEN..end)).expect("a valid frame");
        if first {
            assert!(matches!(f, Frame::Settings { ack: false, .. }));
            first = false;
        }
        match f {
            Frame::Headers {
                block, end_headers, ..
            } => {
                // Response blocks fit one frame at the default frame size here.
                assert!(end_headers);
                decoder
                    .decode(&block, usize::MAX, |_| {})
                    .expect("a header block the client can read");
            }
            Frame::Continuation { .. } | Frame::PushPromise { .. } => {
                panic!("unexpected {f:?}")
            }
            _ => {}
        }
        at = end;
    }
});
