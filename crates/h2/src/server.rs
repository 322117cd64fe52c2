//! The server side of an HTTP/2 connection, with every stream served in the
//! connection's own task.
//!
//! hyper's HTTP/2 server (over the `h2` crate) spawns a task per stream and shares the
//! connection's state between that task and the connection's behind a lock: every
//! request crosses tasks (a wake-up each way), and every frame takes the lock. Here the
//! [`Connection`] future owns everything: it reads frames, calls the service for each
//! new stream, polls the service's futures and the response bodies itself, and writes
//! frames into one buffer that goes out in one write per turn. A stream's future is
//! polled with a waker of its own slot ([`SlotWaker`]), which queues the slot and wakes
//! the connection's task, so only the streams that can move are polled.
//!
//! The request body ([`RecvBody`]) is the one piece shared with the service (which may
//! hand it to another task): DATA frames are queued for it, and what it takes is
//! credited back to the client in WINDOW_UPDATE frames once half a window has been
//! taken, so a slow upstream holds back a fast client.
//!
//! Protocol errors follow RFC 9113 §5.4: a connection error writes GOAWAY and ends the
//! connection; a stream error resets the stream (RST_STREAM) and the connection goes on.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body::{Body, Frame as BodyFrame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::frame::{self, Frame, HEAD_LEN, Head, MAX_WINDOW, Reason};
use crate::hpack::{self, Decoder, Encoder, Header, Name, Pseudo};

/// Errors as the service and the bodies report them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The protocol's own initial window (RFC 9113 §6.9.2).
const DEFAULT_WINDOW: u32 = 65_535;
/// The largest frame payload read (SETTINGS_MAX_FRAME_SIZE is left at its default).
const MAX_FRAME: u32 = frame::DEFAULT_MAX_FRAME_SIZE;
/// Output is produced until this much waits to be written; then streams wait for room.
const OUT_HIGH: usize = 64 * 1024;
/// Stream ids reset here whose late frames are ignored rather than answered.
const RESET_MEMORY: usize = 64;
/// Frames one header block may take (a flood of empty CONTINUATION frames is refused).
const MAX_CONTINUATIONS: u32 = 128;
/// Request body pieces shorter than this are copied out of the read buffer.
const COPIED_DATA: usize = 4096;
/// The payload of the PING of a graceful shut-down.
const DRAIN_PING: [u8; 8] = *b"weir-drn";
/// Reads per turn of the connection before the streams are polled again.
const READS_PER_TURN: usize = 16;
/// Turns (read, streams, write) per poll before the task yields.
const TURNS_PER_POLL: usize = 32;

/// What a connection advertises and allows.
#[derive(Debug, Clone)]
pub struct Config {
    /// SETTINGS_MAX_CONCURRENT_STREAMS; a stream over it is refused (REFUSED_STREAM).
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: what a client may send on a stream before the
    /// request body takes it.
    pub stream_window: u32,
    /// The connection's receive window (raised from 65,535 at the start).
    pub conn_window: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: a larger request head is answered 431.
    pub max_header_list_size: u32,
    /// Room left in a request's header map for fields the service adds.
    pub header_room: usize,
    /// Streams a client may reset before their response (less one per response
    /// completed) before the connection is closed with ENHANCE_YOUR_CALM (the "rapid
    /// reset" attack).
    pub max_client_resets: u32,
    /// Makes the `date` field added to responses without one (once a second).
    pub date: Option<fn() -> HeaderValue>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_concurrent_streams: 200,
            stream_window: 1024 * 1024,
            conn_window: 1024 * 1024,
            max_header_list_size: 16 * 1024,
            header_room: 0,
            max_client_resets: 1024,
            date: None,
        }
    }
}

/// How a connection ended other than cleanly.
#[derive(Debug)]
pub enum Error {
    /// Reading or writing failed.
    Io(io::Error),
    /// The client broke the protocol; GOAWAY was sent with this code.
    Protocol(Reason, &'static str),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "HTTP/2 connection: {e}"),
            Error::Protocol(r, why) => write!(f, "HTTP/2 connection error {r:?}: {why}"),
        }
    }
}

impl std::error::Error for Error {}

/// A stream's error as its request body reports it (the client reset the stream, or
/// broke its framing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamError(pub Reason);

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP/2 stream error {:?}", self.0)
    }
}

impl std::error::Error for StreamError {}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ------------------------------------------------------------------ wake-ups

/// The slots whose futures asked to be polled, and the connection's task.
struct Shared {
    queue: Mutex<Queue>,
    /// Request body bytes taken (or dropped) on any stream and not yet credited to the
    /// connection's window.
    conn_taken: AtomicU32,
    /// `conn_taken` past which a body wakes the connection to credit it.
    conn_notify: u32,
}

struct Queue {
    ready: Vec<u32>,
    task: Option<Waker>,
    /// The connection is in its poll and drains `ready` before it returns.
    polling: bool,
}

/// The waker of one slot of the connection's stream table (reused by the slot's next
/// streams: a wake-up meant for an earlier stream only polls the slot once more).
struct SlotWaker {
    slot: u32,
    queued: AtomicBool,
    shared: Arc<Shared>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let task = {
            let mut q = lock(&self.shared.queue);
            q.ready.push(self.slot);
            if q.polling { None } else { q.task.take() }
        };
        if let Some(t) = task {
            t.wake();
        }
    }
}

// ------------------------------------------------------------------ request bodies

/// A request's body: the DATA (and trailers) the client sends on its stream.
pub struct RecvBody {
    inner: Option<Arc<RecvShared>>,
    /// What `content-length` still promises (for the size hint).
    remaining: Option<u64>,
}

struct RecvShared {
    state: Mutex<RecvState>,
    /// The stream's slot: woken when enough was taken to credit the client.
    slot: Arc<SlotWaker>,
    /// Bytes taken on the stream after which the connection is woken to credit them.
    notify_at: u32,
}

#[derive(Default)]
struct RecvState {
    chunks: VecDeque<Bytes>,
    trailers: Option<HeaderMap>,
    end: bool,
    error: Option<Reason>,
    waker: Option<Waker>,
    /// Bytes taken and not yet credited to the stream's window.
    taken: u32,
    dropped: bool,
}

impl RecvShared {
    /// Counts `n` bytes taken for the connection's window; `true` when the connection
    /// should be woken to credit them.
    fn took(&self, n: u32) -> bool {
        let conn = &self.slot.shared;
        let before = conn.conn_taken.fetch_add(n, Ordering::AcqRel);
        before < conn.conn_notify && before + n >= conn.conn_notify
    }
}

impl RecvBody {
    /// A body with nothing in it (the request's HEADERS ended the stream).
    pub fn empty() -> RecvBody {
        RecvBody {
            inner: None,
            remaining: Some(0),
        }
    }
}

impl Body for RecvBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<BodyFrame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let Some(shared) = &this.inner else {
            return Poll::Ready(None);
        };
        let mut st = lock(&shared.state);
        if let Some(chunk) = st.chunks.pop_front() {
            let n = chunk.len() as u32;
            st.taken += n;
            let mut notify = st.taken >= shared.notify_at;
            drop(st);
            notify |= shared.took(n);
            if let Some(r) = &mut this.remaining {
                *r = r.saturating_sub(u64::from(n));
            }
            if notify {
                shared.slot.wake_by_ref();
            }
            return Poll::Ready(Some(Ok(BodyFrame::data(chunk))));
        }
        if let Some(t) = st.trailers.take() {
            return Poll::Ready(Some(Ok(BodyFrame::trailers(t))));
        }
        if let Some(r) = st.error {
            return Poll::Ready(Some(Err(Box::new(StreamError(r)))));
        }
        if st.end {
            return Poll::Ready(None);
        }
        if !st.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            st.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            None => true,
            Some(shared) => {
                let st = lock(&shared.state);
                st.end && st.chunks.is_empty() && st.trailers.is_none() && st.error.is_none()
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self.remaining {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

impl Drop for RecvBody {
    fn drop(&mut self) {
        if let Some(shared) = &self.inner {
            let mut st = lock(&shared.state);
            st.dropped = true;
            let queued: usize = st.chunks.iter().map(Bytes::len).sum();
            st.chunks.clear();
            drop(st);
            shared.took(queued as u32);
            shared.slot.wake_by_ref();
        }
    }
}

impl std::fmt::Debug for RecvBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBody")
            .field("remaining", &self.remaining)
            .finish_non_exhaustive()
    }
}

// ------------------------------------------------------------------ streams

enum Phase<F, B> {
    /// The service's future, until the response head.
    Service(Pin<Box<F>>),
    /// The response body, polled as flow control and the output buffer allow.
    Body(B),
    /// Answered (or failed) on the sending side.
    Done,
}

struct Stream<F, B> {
    id: u32,
    phase: Phase<F, B>,
    /// What this stream may still send (can go below zero when the client lowers its
    /// initial window).
    send_window: i64,
    /// What the client may still send on this stream.
    recv_window: i64,
    /// The client's side is open (no END_STREAM yet).
    recv_open: bool,
    recv: Option<Arc<RecvShared>>,
    /// Taken bytes not yet credited with a stream WINDOW_UPDATE.
    recv_unacked: u32,
    /// What `content-length` still promises.
    expect: Option<u64>,
    head_request: bool,
    /// Data held back by flow control, and whether it ends the stream.
    pending: Option<(Bytes, bool)>,
    /// Trailers to send after `pending`.
    pending_trailers: Option<HeaderMap>,
    /// Waiting in `blocked` (for a window) or `starved` (for room in the output).
    parked: bool,
}

struct Slot<F, B> {
    waker: Arc<SlotWaker>,
    stream: Option<Stream<F, B>>,
}

/// A header block being assembled from HEADERS and CONTINUATION frames.
struct Continuation {
    stream: u32,
    end_stream: bool,
    block: BytesMut,
    frames: u32,
}

/// The output side: frames waiting to be written, and what writing them needs.
struct Out {
    buf: Vec<u8>,
    pos: usize,
    encoder: Encoder,
    block: Vec<u8>,
    /// The client's SETTINGS_MAX_FRAME_SIZE.
    max_frame: u32,
    /// What the connection may still send.
    window: i64,
    date: Option<fn() -> HeaderValue>,
    date_cache: (u64, Option<HeaderValue>),
}

impl Out {
    fn pending(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn date(&mut self) -> Option<HeaderValue> {
        let make = self.date?;
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if self.date_cache.0 != secs || self.date_cache.1.is_none() {
            self.date_cache = (secs, Some(make()));
        }
        self.date_cache.1.clone()
    }

    /// Writes a response head; `end` ends the stream with it.
    fn head(&mut self, id: u32, parts: &http::response::Parts, length: Option<u64>, end: bool) {
        self.block.clear();
        let mut block = std::mem::take(&mut self.block);
        self.encoder.begin(&mut block);
        self.encoder.status(parts.status, &mut block);
        let mut has_date = false;
        let mut has_length = false;
        for (name, value) in &parts.headers {
            if connection_specific(name) {
                continue;
            }
            if name == header::TE && value != "trailers" {
                continue;
            }
            has_date |= name == header::DATE;
            has_length |= name == header::CONTENT_LENGTH;
            self.encoder.field(name, value, &mut block);
        }
        if !has_length
            && let Some(n) = length
            && !no_content(parts.status)
        {
            self.encoder
                .field(&header::CONTENT_LENGTH, &HeaderValue::from(n), &mut block);
        }
        if !has_date && let Some(d) = self.date() {
            self.encoder.field(&header::DATE, &d, &mut block);
        }
        frame::write_headers(&mut self.buf, id, &block, end, self.max_frame);
        self.block = block;
    }

    /// Writes a header block that `fill` encodes; `end` ends the stream with it.
    fn headers(&mut self, id: u32, end: bool, fill: impl FnOnce(&mut Encoder, &mut Vec<u8>)) {
        let mut block = std::mem::take(&mut self.block);
        block.clear();
        self.encoder.begin(&mut block);
        fill(&mut self.encoder, &mut block);
        frame::write_headers(&mut self.buf, id, &block, end, self.max_frame);
        self.block = block;
    }

    fn trailers(&mut self, id: u32, trailers: &HeaderMap) {
        self.headers(id, true, |encoder, block| {
            for (name, value) in trailers {
                if !connection_specific(name) {
                    encoder.field(name, value, block);
                }
            }
        });
    }

    /// A response without a body (`status` and `content-length: 0`).
    fn simple(&mut self, id: u32, status: StatusCode) {
        self.headers(id, true, |encoder, block| {
            encoder.status(status, block);
            encoder.field(
                &header::CONTENT_LENGTH,
                &HeaderValue::from_static("0"),
                block,
            );
        });
    }

    /// `100 Continue`.
    fn continue_100(&mut self, id: u32) {
        self.headers(id, false, |encoder, block| {
            encoder.status(StatusCode::CONTINUE, block)
        });
    }
}

/// The connection error for a header block that could not be decoded. An invalid field
/// name stops the decoder before the rest of the block, so the compression state is lost
/// with it too.
fn undecodable(e: hpack::DecodeError) -> Reason {
    if e == hpack::DecodeError::InvalidName {
        Reason::PROTOCOL_ERROR
    } else {
        Reason::COMPRESSION_ERROR
    }
}

fn connection_specific(name: &HeaderName) -> bool {
    name == header::CONNECTION
        || name == header::TRANSFER_ENCODING
        || name == header::UPGRADE
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

fn no_content(status: StatusCode) -> bool {
    status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
}

// ------------------------------------------------------------------ the connection

/// One client connection speaking HTTP/2 (after the TLS handshake chose `h2`, or on a
/// plaintext connection that opened with the preface). `S` makes each request's
/// future.
pub struct Connection<IO, S, F, B> {
    io: IO,
    service: S,
    cfg: Config,
    rbuf: BytesMut,
    preface_read: bool,
    settings_seen: bool,
    out: Out,
    decoder: Decoder,
    shared: Arc<Shared>,
    slots: Vec<Slot<F, B>>,
    free: Vec<u32>,
    /// Open streams by id (ascending: client ids only grow), with their slots.
    by_id: Vec<(u32, u32)>,
    ready: Vec<u32>,
    blocked: Vec<u32>,
    starved: Vec<u32>,
    /// What the client may still send on the connection.
    recv_window: i64,
    /// Taken bytes not yet credited with a connection WINDOW_UPDATE.
    recv_unacked: u32,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE.
    peer_window: u32,
    last_stream: u32,
    continuation: Option<Continuation>,
    /// GOAWAY sent (gracefully): streams above this id are ignored.
    going_away: Option<u32>,
    /// The first GOAWAY of a graceful shut-down was sent; the final one waits for the
    /// client's answer to [`DRAIN_PING`].
    draining: bool,
    /// GOAWAY received: no new streams will come.
    peer_gone: bool,
    read_closed: bool,
    /// A connection error: GOAWAY is being written, then the connection ends.
    failed: Option<(Reason, &'static str)>,
    resets: u32,
    reset_here: VecDeque<u32>,
    fields: Vec<(HeaderName, Bytes)>,
    shut: bool,
    read_more: bool,
}

impl<IO, S, F, B, E> Connection<IO, S, F, B>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: FnMut(Request<RecvBody>) -> F,
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    /// A connection over `io`; the server's SETTINGS go out on the first poll.
    pub fn new(io: IO, cfg: Config, service: S) -> Connection<IO, S, F, B> {
        let mut out = Out {
            buf: Vec::with_capacity(16 * 1024),
            pos: 0,
            encoder: Encoder::new(),
            block: Vec::new(),
            max_frame: frame::DEFAULT_MAX_FRAME_SIZE,
            window: i64::from(DEFAULT_WINDOW),
            date: cfg.date,
            date_cache: (u64::MAX, None),
        };
        let settings = frame::Settings {
            max_concurrent_streams: Some(cfg.max_concurrent_streams),
            initial_window_size: Some(cfg.stream_window.min(MAX_WINDOW)),
            max_header_list_size: Some(cfg.max_header_list_size),
            enable_push: Some(0),
            ..frame::Settings::default()
        };
        frame::write_settings(&mut out.buf, &settings);
        let conn_window = cfg.conn_window.min(MAX_WINDOW);
        if conn_window > DEFAULT_WINDOW {
            frame::write_window_update(&mut out.buf, 0, conn_window - DEFAULT_WINDOW);
        }
        Connection {
            io,
            service,
            rbuf: BytesMut::with_capacity(16 * 1024),
            preface_read: false,
            settings_seen: false,
            out,
            decoder: Decoder::new(4096),
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue {
                    ready: Vec::new(),
                    task: None,
                    polling: false,
                }),
                conn_taken: AtomicU32::new(0),
                conn_notify: (conn_window / 4).max(1),
            }),
            slots: Vec::new(),
            free: Vec::new(),
            by_id: Vec::new(),
            ready: Vec::new(),
            blocked: Vec::new(),
            starved: Vec::new(),
            recv_window: i64::from(conn_window.max(DEFAULT_WINDOW)),
            recv_unacked: 0,
            peer_window: DEFAULT_WINDOW,
            last_stream: 0,
            continuation: None,
            going_away: None,
            draining: false,
            peer_gone: false,
            read_closed: false,
            failed: None,
            resets: 0,
            reset_here: VecDeque::new(),
            fields: Vec::new(),
            shut: false,
            read_more: false,
            cfg,
        }
    }

    fn turn(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        for _ in 0..TURNS_PER_POLL {
            if self.failed.is_none()
                && !self.read_closed
                && let Poll::Ready(Err(e)) = self.poll_read(cx)
            {
                return Poll::Ready(Err(e));
            }
            if self.failed.is_none() && !self.read_closed {
                self.run_ready();
            }
            let written = self.poll_write(cx);
            if let Poll::Ready(Err(e)) = written {
                return Poll::Ready(Err(e));
            }
            if let Some((reason, why)) = self.failed {
                if written.is_pending() {
                    return Poll::Pending;
                }
                return Poll::Ready(Err(Error::Protocol(reason, why)));
            }
            if self.read_closed {
                // The client is gone: what is in flight is cancelled.
                return Poll::Ready(Ok(()));
            }
            let done = (self.going_away.is_some() || self.peer_gone) && self.by_id.is_empty();
            if done && written.is_ready() {
                if !self.shut {
                    match Pin::new(&mut self.io).poll_shutdown(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(_) => self.shut = true,
                    }
                }
                return Poll::Ready(Ok(()));
            }
            let q = lock(&self.shared.queue);
            if q.ready.is_empty() && self.ready.is_empty() && !self.read_more {
                return Poll::Pending;
            }
            drop(q);
            // Streams were woken meanwhile (or made room): another turn.
            if written.is_pending() && self.out.pending() >= OUT_HIGH {
                return Poll::Pending;
            }
        }
        // Other tasks get the thread; this one comes back at once.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    // -------------------------------------------------------------- reading

    /// Reads what the socket has and handles every complete frame. `Ready(())` once the
    /// client closed its side.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.read_more = false;
        for _ in 0..READS_PER_TURN {
            if self.out.pending() >= OUT_HIGH {
                // Until the client reads what it asked for. Nothing was registered to
                // wake the read side, so the turn goes on (it waits for the write, or
                // comes back here once the output went).
                self.read_more = true;
                return Poll::Pending;
            }
            if self.rbuf.capacity() - self.rbuf.len() < 4096 {
                self.rbuf.reserve(HEAD_LEN + MAX_FRAME as usize);
            }
            let n = match tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.rbuf)
            {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(Error::Io(e))),
                Poll::Ready(Ok(n)) => n,
            };
            if n == 0 {
                self.read_closed = true;
                return Poll::Ready(Ok(()));
            }
            self.handle_input()?;
            if self.failed.is_some() {
                return Poll::Ready(Ok(()));
            }
        }
        // Streams get their turn before more is read.
        self.read_more = true;
        Poll::Ready(Ok(()))
    }

    fn handle_input(&mut self) -> Result<(), Error> {
        if !self.preface_read {
            let n = self.rbuf.len().min(frame::PREFACE.len());
            if self.rbuf[..n] != frame::PREFACE[..n] {
                self.fail(Reason::PROTOCOL_ERROR, "not the HTTP/2 connection preface");
                return Ok(());
            }
            if n < frame::PREFACE.len() {
                return Ok(());
            }
            self.rbuf.advance(frame::PREFACE.len());
            self.preface_read = true;
        }
        while self.rbuf.len() >= HEAD_LEN && self.failed.is_none() {
            let head = Head::parse(self.rbuf[..HEAD_LEN].try_into().expect("nine bytes"));
            if head.len > MAX_FRAME {
                self.fail(
                    Reason::FRAME_SIZE_ERROR,
                    "frame larger than SETTINGS_MAX_FRAME_SIZE",
                );
                break;
            }
            let total = HEAD_LEN + head.len as usize;
            if self.rbuf.len() < total {
                self.rbuf.reserve(total - self.rbuf.len());
                break;
            }
            let mut bytes = self.rbuf.split_to(total);
            bytes.advance(HEAD_LEN);
            self.on_frame(head, bytes.freeze());
        }
        Ok(())
    }

    /// A connection error: GOAWAY, then the end.
    fn fail(&mut self, reason: Reason, why: &'static str) {
        if self.failed.is_none() {
            // Never above a GOAWAY already sent (streams after it were not processed).
            let last = self.going_away.unwrap_or(self.last_stream);
            frame::write_goaway(&mut self.out.buf, last, reason, why.as_bytes());
            self.failed = Some((reason, why));
        }
    }

    fn on_frame(&mut self, head: Head, payload: Bytes) {
        if !self.settings_seen {
            if head.kind != frame::kind::SETTINGS || head.flags & frame::flag::ACK != 0 {
                self.fail(
                    Reason::PROTOCOL_ERROR,
                    "the preface's first frame is not SETTINGS",
                );
                return;
            }
            self.settings_seen = true;
        }
        if let Some(c) = &self.continuation
            && (head.kind != frame::kind::CONTINUATION || head.stream != c.stream)
        {
            self.fail(Reason::PROTOCOL_ERROR, "a header block interrupted");
            return;
        }
        let frame = match frame::decode(head, payload) {
            Ok(f) => f,
            Err(frame::Error::Connection(r)) => {
                self.fail(r, "malformed frame");
                return;
            }
            Err(frame::Error::Stream(id, r)) => {
                if head.kind == frame::kind::HEADERS {
                    // Its header block was not decoded: the compression state is lost.
                    self.fail(r, "malformed HEADERS frame");
                } else if id > self.last_stream && head.kind != frame::kind::PRIORITY {
                    self.fail(Reason::PROTOCOL_ERROR, "frame on an idle stream");
                } else {
                    self.reset(id, r);
                }
                return;
            }
        };
        match frame {
            Frame::Data {
                stream,
                end_stream,
                data,
                flow_len,
            } => self.on_data(stream, end_stream, data, flow_len),
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
                ..
            } => {
                if end_headers {
                    self.on_header_block(stream, end_stream, block);
                } else {
                    let mut b = BytesMut::with_capacity(block.len() * 2);
                    b.extend_from_slice(&block);
                    self.continuation = Some(Continuation {
                        stream,
                        end_stream,
                        block: b,
                        frames: 1,
                    });
                }
            }
            Frame::Continuation {
                stream,
                end_headers,
                block,
            } => {
                let Some(c) = &mut self.continuation else {
                    self.fail(Reason::PROTOCOL_ERROR, "CONTINUATION without HEADERS");
                    return;
                };
                c.block.extend_from_slice(&block);
                c.frames += 1;
                if c.block.len() > 2 * self.cfg.max_header_list_size as usize + 16 * 1024
                    || c.frames > MAX_CONTINUATIONS
                {
                    self.fail(Reason::ENHANCE_YOUR_CALM, "header block too large");
                    return;
                }
                if end_headers {
                    let c = self.continuation.take().expect("checked above");
                    self.on_header_block(stream, c.end_stream, c.block.freeze());
                }
            }
            Frame::Priority { .. } | Frame::Unknown { .. } => {}
            Frame::RstStream { stream, .. } => self.on_reset(stream),
            Frame::Settings { ack, settings } => {
                if !ack {
                    self.on_settings(&settings);
                }
            }
            Frame::PushPromise { .. } => {
                self.fail(Reason::PROTOCOL_ERROR, "PUSH_PROMISE from a client");
            }
            Frame::Ping { ack, payload } => {
                if !ack {
                    frame::write_ping(&mut self.out.buf, true, payload);
                } else if self.draining && payload == DRAIN_PING && self.going_away.is_none() {
                    self.going_away = Some(self.last_stream);
                    frame::write_goaway(&mut self.out.buf, self.last_stream, Reason::NO_ERROR, b"");
                }
            }
            Frame::GoAway { .. } => self.peer_gone = true,
            Frame::WindowUpdate { stream, increment } => self.on_window_update(stream, increment),
        }
    }

    fn slot_of(&self, id: u32) -> Option<u32> {
        self.by_id
            .binary_search_by_key(&id, |&(i, _)| i)
            .ok()
            .map(|at| self.by_id[at].1)
    }

    fn stream_mut(&mut self, slot: u32) -> &mut Stream<F, B> {
        self.slots[slot as usize]
            .stream
            .as_mut()
            .expect("an open stream's slot")
    }

    fn on_data(&mut self, id: u32, end_stream: bool, data: Bytes, flow_len: u32) {
        if i64::from(flow_len) > self.recv_window {
            self.fail(
                Reason::FLOW_CONTROL_ERROR,
                "DATA beyond the connection's window",
            );
            return;
        }
        self.recv_window -= i64::from(flow_len);
        let Some(slot) = self.slot_of(id) else {
            self.credit_conn(flow_len);
            if id > self.last_stream {
                self.fail(Reason::PROTOCOL_ERROR, "DATA on an idle stream");
            } else if !self.reset_here.contains(&id) {
                self.reset(id, Reason::STREAM_CLOSED);
            }
            return;
        };
        // Padding is never taken by the body: credited at once.
        let padding = flow_len - data.len() as u32;
        let s = self.slots[slot as usize]
            .stream
            .as_mut()
            .expect("an open stream's slot");
        if !s.recv_open {
            self.credit_conn(flow_len);
            self.reset(id, Reason::STREAM_CLOSED);
            return;
        }
        if i64::from(flow_len) > s.recv_window {
            self.credit_conn(flow_len);
            self.reset(id, Reason::FLOW_CONTROL_ERROR);
            return;
        }
        s.recv_window -= i64::from(flow_len);
        let len = data.len() as u64;
        let malformed = match &mut s.expect {
            Some(left) if *left < len || (end_stream && *left != len) => true,
            Some(left) => {
                *left -= len;
                false
            }
            None => false,
        };
        if malformed {
            self.credit_conn(flow_len);
            self.reset(id, Reason::PROTOCOL_ERROR);
            return;
        }
        if end_stream {
            s.recv_open = false;
        }
        let mut discarded = padding;
        if let Some(shared) = &s.recv {
            let mut st = lock(&shared.state);
            if st.dropped {
                discarded += data.len() as u32;
            } else if !data.is_empty() {
                // A small piece is copied: a slice would hold the whole read buffer it
                // came in while the body waits (many times the window it took).
                let data = if data.len() < COPIED_DATA {
                    Bytes::copy_from_slice(&data)
                } else {
                    data
                };
                st.chunks.push_back(data);
            }
            st.end |= end_stream;
            let w = st.waker.take();
            drop(st);
            if let Some(w) = w {
                w.wake();
            }
        } else {
            discarded += data.len() as u32;
        }
        if discarded > 0 {
            // Nobody takes these bytes: the stream's window gets them back as well.
            if !end_stream {
                credit_stream(&mut self.out, &self.cfg, s, discarded);
            }
            self.credit_conn(discarded);
        }
        if end_stream {
            self.maybe_close(slot);
        }
    }

    /// Credits the connection's window with what request bodies took.
    fn credit_taken(&mut self) {
        let n = self.shared.conn_taken.swap(0, Ordering::AcqRel);
        if n > 0 {
            self.credit_conn(n);
        }
    }

    /// Credits the client's connection window with `n` bytes it need not wait for.
    fn credit_conn(&mut self, n: u32) {
        self.recv_unacked += n;
        if self.recv_unacked >= self.cfg.conn_window.min(MAX_WINDOW) / 2 {
            frame::write_window_update(&mut self.out.buf, 0, self.recv_unacked);
            self.recv_window += i64::from(self.recv_unacked);
            self.recv_unacked = 0;
        }
    }

    fn on_header_block(&mut self, id: u32, end_stream: bool, block: Bytes) {
        if let Some(slot) = self.slot_of(id) {
            self.on_trailers(slot, end_stream, &block);
            return;
        }
        if id.is_multiple_of(2) {
            self.fail(Reason::PROTOCOL_ERROR, "a client stream with an even id");
            return;
        }
        let closed = id <= self.last_stream;
        let ignored = self.going_away.is_some_and(|last| id > last);
        let mut head = RequestHead::default();
        let max_list = self.cfg.max_header_list_size as usize;
        let fields = &mut self.fields;
        fields.clear();
        let decoded = self
            .decoder
            .decode(&block, max_list, |h| head.field(h, fields));
        if let Err(e) = decoded
            && e != hpack::DecodeError::ListTooLarge
        {
            self.fail(undecodable(e), "header block could not be decoded");
            return;
        }
        if closed {
            if !self.reset_here.contains(&id) {
                self.fail(Reason::STREAM_CLOSED, "HEADERS on a closed stream");
            }
            return;
        }
        self.last_stream = id;
        if ignored {
            return;
        }
        if self.peer_gone {
            // The client said it would open no more.
            self.reset(id, Reason::REFUSED_STREAM);
            return;
        }
        if decoded == Err(hpack::DecodeError::ListTooLarge) {
            self.out
                .simple(id, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
            if !end_stream {
                self.reset(id, Reason::NO_ERROR);
            }
            return;
        }
        if self.by_id.len() >= self.cfg.max_concurrent_streams as usize {
            self.reset(id, Reason::REFUSED_STREAM);
            return;
        }
        let req = match head.into_request(&mut self.fields, self.cfg.header_room) {
            Ok(r) => r,
            Err(()) => {
                self.reset(id, Reason::PROTOCOL_ERROR);
                return;
            }
        };
        self.open(id, end_stream, req);
    }

    fn open(&mut self, id: u32, end_stream: bool, (mut req, expect): (Request<()>, Option<u64>)) {
        if end_stream && expect.is_some_and(|n| n != 0) {
            self.reset(id, Reason::PROTOCOL_ERROR);
            return;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                let s = self.slots.len() as u32;
                self.slots.push(Slot {
                    waker: Arc::new(SlotWaker {
                        slot: s,
                        queued: AtomicBool::new(false),
                        shared: Arc::clone(&self.shared),
                    }),
                    stream: None,
                });
                s
            }
        };
        let continue_100 = !end_stream
            && req
                .headers()
                .get(header::EXPECT)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        if continue_100 {
            req.headers_mut().remove(header::EXPECT);
        }
        let (recv, body) = if end_stream {
            (None, RecvBody::empty())
        } else {
            let shared = Arc::new(RecvShared {
                state: Mutex::new(RecvState::default()),
                slot: Arc::clone(&self.slots[slot as usize].waker),
                notify_at: (self.cfg.stream_window / 2).max(1),
            });
            let body = RecvBody {
                inner: Some(Arc::clone(&shared)),
                remaining: expect,
            };
            (Some(shared), body)
        };
        if continue_100 {
            self.out.continue_100(id);
        }
        let head_request = req.method() == Method::HEAD;
        let fut = (self.service)(req.map(|()| body));
        self.slots[slot as usize].stream = Some(Stream {
            id,
            phase: Phase::Service(Box::pin(fut)),
            send_window: i64::from(self.peer_window),
            recv_window: i64::from(self.cfg.stream_window.min(MAX_WINDOW)),
            recv_open: !end_stream,
            recv,
            recv_unacked: 0,
            expect,
            head_request,
            pending: None,
            pending_trailers: None,
            parked: false,
        });
        self.by_id.push((id, slot));
        self.ready.push(slot);
    }

    fn on_trailers(&mut self, slot: u32, end_stream: bool, block: &Bytes) {
        let mut trailers = HeaderMap::new();
        let mut bad = false;
        let max_list = self.cfg.max_header_list_size as usize;
        let decoded = self.decoder.decode(block, max_list, |h| match h.name {
            Name::Pseudo(_) => bad = true,
            Name::Field(n) => match HeaderValue::from_maybe_shared(h.value) {
                Ok(v) => {
                    trailers.append(n, v);
                }
                Err(_) => bad = true,
            },
        });
        match decoded {
            Ok(()) => {}
            Err(hpack::DecodeError::ListTooLarge) => bad = true,
            Err(e) => {
                self.fail(undecodable(e), "header block could not be decoded");
                return;
            }
        }
        let s = self.stream_mut(slot);
        let id = s.id;
        if !s.recv_open {
            self.fail(Reason::STREAM_CLOSED, "HEADERS after the stream's end");
            return;
        }
        if !end_stream || bad || s.expect.is_some_and(|n| n != 0) {
            self.reset(id, Reason::PROTOCOL_ERROR);
            return;
        }
        s.recv_open = false;
        if let Some(shared) = &s.recv {
            let mut st = lock(&shared.state);
            st.trailers = Some(trailers);
            st.end = true;
            let w = st.waker.take();
            drop(st);
            if let Some(w) = w {
                w.wake();
            }
        }
        self.maybe_close(slot);
    }

    fn on_reset(&mut self, id: u32) {
        let Some(slot) = self.slot_of(id) else {
            if id > self.last_stream {
                self.fail(Reason::PROTOCOL_ERROR, "RST_STREAM on an idle stream");
            }
            return;
        };
        let early = !matches!(self.stream_mut(slot).phase, Phase::Done);
        self.close(slot, Some(Reason::CANCEL));
        if early {
            self.count_reset();
        }
    }

    fn on_settings(&mut self, s: &frame::Settings) {
        if let Some(n) = s.header_table_size {
            self.out.encoder.set_max_table_size(n as usize);
        }
        if let Some(n) = s.max_frame_size {
            self.out.max_frame = n;
        }
        if let Some(n) = s.initial_window_size {
            let delta = i64::from(n) - i64::from(self.peer_window);
            self.peer_window = n;
            if delta != 0 {
                let mut overflow = false;
                for &(_, slot) in &self.by_id {
                    if let Some(st) = &mut self.slots[slot as usize].stream {
                        st.send_window += delta;
                        overflow |= st.send_window > i64::from(MAX_WINDOW);
                    }
                }
                if overflow {
                    self.fail(Reason::FLOW_CONTROL_ERROR, "a stream's window above 2^31-1");
                    return;
                }
                if delta > 0 {
                    self.unpark_blocked();
                }
            }
        }
        frame::write_settings_ack(&mut self.out.buf);
    }

    fn on_window_update(&mut self, id: u32, increment: u32) {
        if id == 0 {
            self.out.window += i64::from(increment);
            if self.out.window > i64::from(MAX_WINDOW) {
                self.fail(
                    Reason::FLOW_CONTROL_ERROR,
                    "the connection's window above 2^31-1",
                );
                return;
            }
            self.unpark_blocked();
            return;
        }
        let Some(slot) = self.slot_of(id) else {
            if id > self.last_stream {
                self.fail(Reason::PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream");
            }
            return;
        };
        let s = self.slots[slot as usize]
            .stream
            .as_mut()
            .expect("an open stream's slot");
        s.send_window += i64::from(increment);
        if s.send_window > i64::from(MAX_WINDOW) {
            self.reset(id, Reason::FLOW_CONTROL_ERROR);
            return;
        }
        if s.parked && s.pending.is_some() && self.out.window > 0 {
            // Only this stream can move; the others wait for their own update.
            s.parked = false;
            if let Some(at) = self.blocked.iter().position(|&b| b == slot) {
                self.blocked.swap_remove(at);
            }
            self.ready.push(slot);
        }
    }

    fn unpark_blocked(&mut self) {
        for slot in self.blocked.drain(..) {
            if let Some(s) = &mut self.slots[slot as usize].stream {
                s.parked = false;
                self.ready.push(slot);
            }
        }
    }

    /// A stream error: RST_STREAM, and the stream (if open) is dropped.
    fn reset(&mut self, id: u32, reason: Reason) {
        frame::write_rst_stream(&mut self.out.buf, id, reason);
        if self.reset_here.len() == RESET_MEMORY {
            self.reset_here.pop_front();
        }
        self.reset_here.push_back(id);
        if let Some(slot) = self.slot_of(id) {
            // A stream the client's own error ended before its response counts as one
            // it reset (a client could otherwise start and end requests at any rate by
            // provoking resets: "MadeYouReset").
            let provoked = reason != Reason::NO_ERROR
                && reason != Reason::INTERNAL_ERROR
                && reason != Reason::REFUSED_STREAM
                && !matches!(self.stream_mut(slot).phase, Phase::Done);
            self.close(slot, Some(reason));
            if provoked {
                self.count_reset();
            }
        }
    }

    /// Counts a stream ended early by the client; past the limit, ENHANCE_YOUR_CALM.
    fn count_reset(&mut self) {
        self.resets += 1;
        if self.resets > self.cfg.max_client_resets {
            self.fail(
                Reason::ENHANCE_YOUR_CALM,
                "too many streams reset by the client",
            );
        }
    }

    /// Frees a stream's slot. `error` fails its request body if it is still read.
    fn close(&mut self, slot: u32, error: Option<Reason>) {
        let Some(s) = self.slots[slot as usize].stream.take() else {
            return;
        };
        if let Ok(at) = self.by_id.binary_search_by_key(&s.id, |&(i, _)| i) {
            self.by_id.remove(at);
        }
        // What the client sent and nobody will take is credited now (what was taken,
        // the body counted in `conn_taken`).
        let mut uncredited = 0;
        if let Some(shared) = &s.recv {
            let mut st = lock(&shared.state);
            let queued: usize = st.chunks.iter().map(Bytes::len).sum();
            if s.recv_open || error.is_some() {
                st.chunks.clear();
                uncredited += queued as u32;
                st.error.get_or_insert(error.unwrap_or(Reason::CANCEL));
            }
            let w = st.waker.take();
            drop(st);
            if let Some(w) = w {
                w.wake();
            }
        }
        if uncredited > 0 {
            self.credit_conn(uncredited);
        }
        self.free.push(slot);
        drop(s);
    }

    /// Closes a stream whose both sides are done.
    fn maybe_close(&mut self, slot: u32) {
        let s = self.stream_mut(slot);
        if !s.recv_open && matches!(s.phase, Phase::Done) {
            self.close(slot, None);
        }
    }

    // -------------------------------------------------------------- streams

    /// Polls the streams that were woken (and those just opened).
    fn run_ready(&mut self) {
        self.credit_taken();
        {
            let mut q = lock(&self.shared.queue);
            self.ready.append(&mut q.ready);
        }
        while !self.ready.is_empty() {
            let mut batch = std::mem::take(&mut self.ready);
            for &slot in &batch {
                self.slots[slot as usize]
                    .waker
                    .queued
                    .store(false, Ordering::Release);
            }
            for &slot in &batch {
                self.run_stream(slot);
                if self.failed.is_some() {
                    return;
                }
            }
            batch.clear();
            self.ready = batch;
            self.credit_taken();
            let mut q = lock(&self.shared.queue);
            self.ready.append(&mut q.ready);
        }
    }

    fn run_stream(&mut self, slot: u32) {
        let waker = Waker::from(Arc::clone(&self.slots[slot as usize].waker));
        let mut cx = Context::from_waker(&waker);
        let Some(s) = self.slots[slot as usize].stream.as_mut() else {
            return;
        };
        // Credit the stream's window with what its request body took (the connection's
        // is credited in `run_ready`).
        if let Some(shared) = &s.recv {
            let taken = std::mem::take(&mut lock(&shared.state).taken);
            if taken > 0 && s.recv_open {
                credit_stream(&mut self.out, &self.cfg, s, taken);
            }
        }
        let s = self.slots[slot as usize]
            .stream
            .as_mut()
            .expect("checked above");
        if s.parked {
            return;
        }
        if let Phase::Service(fut) = &mut s.phase {
            // A panic in one request's future ends that stream only (as a task per
            // stream would), not the connection's other streams.
            let polled = catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut cx)));
            let resp = match polled {
                Ok(Poll::Pending) => return,
                Ok(Poll::Ready(Ok(resp))) => resp,
                Ok(Poll::Ready(Err(_))) | Err(_) => {
                    let id = s.id;
                    self.reset(id, Reason::INTERNAL_ERROR);
                    return;
                }
            };
            let (parts, body) = resp.into_parts();
            let end = s.head_request || body.is_end_stream();
            let length = (!s.head_request)
                .then(|| body.size_hint().exact())
                .flatten();
            self.out.head(s.id, &parts, length, end);
            if end {
                s.phase = Phase::Done;
                self.sent_all(slot);
                return;
            }
            s.phase = Phase::Body(body);
        }
        self.run_body(slot, &mut cx);
    }

    /// Sends what the response body has, as the windows and the output buffer allow.
    fn run_body(&mut self, slot: u32, cx: &mut Context<'_>) {
        loop {
            let s = self.slots[slot as usize]
                .stream
                .as_mut()
                .expect("a stream being served");
            if let Some((data, end)) = s.pending.take() {
                if !send_data(&mut self.out, s, data, end) {
                    s.parked = true;
                    self.blocked.push(slot);
                    return;
                }
                if end {
                    if let Some(t) = s.pending_trailers.take() {
                        self.out.trailers(s.id, &t);
                    }
                    s.phase = Phase::Done;
                    self.sent_all(slot);
                    return;
                }
            }
            if self.out.pending() >= OUT_HIGH {
                s.parked = true;
                self.starved.push(slot);
                return;
            }
            let Phase::Body(body) = &mut s.phase else {
                return;
            };
            let polled = catch_unwind(AssertUnwindSafe(|| Pin::new(&mut *body).poll_frame(cx)));
            let Ok(polled) = polled else {
                let id = s.id;
                self.reset(id, Reason::INTERNAL_ERROR);
                return;
            };
            match polled {
                Poll::Pending => return,
                Poll::Ready(None) => {
                    frame::write_data_head(&mut self.out.buf, s.id, 0, true);
                    s.phase = Phase::Done;
                    self.sent_all(slot);
                    return;
                }
                Poll::Ready(Some(Err(_))) => {
                    let id = s.id;
                    self.reset(id, Reason::INTERNAL_ERROR);
                    return;
                }
                Poll::Ready(Some(Ok(f))) => match f.into_data() {
                    Ok(data) => {
                        let end = body.is_end_stream();
                        s.pending = Some((data, end));
                    }
                    Err(f) => {
                        if let Ok(t) = f.into_trailers() {
                            s.pending = Some((Bytes::new(), true));
                            s.pending_trailers = Some(t);
                        }
                    }
                },
            }
        }
    }

    /// The response was sent whole.
    fn sent_all(&mut self, slot: u32) {
        self.resets = self.resets.saturating_sub(1);
        let s = self.stream_mut(slot);
        if s.recv_open {
            // The client is still sending a body nobody will read.
            let id = s.id;
            self.reset(id, Reason::NO_ERROR);
        } else {
            self.close(slot, None);
        }
    }

    // -------------------------------------------------------------- writing

    fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        while self.out.pos < self.out.buf.len() {
            match Pin::new(&mut self.io).poll_write(cx, &self.out.buf[self.out.pos..]) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(Error::Io(e))),
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(Error::Io(io::ErrorKind::WriteZero.into())));
                }
                Poll::Ready(Ok(n)) => self.out.pos += n,
            }
        }
        if self.out.pos > 0 {
            self.out.buf.clear();
            self.out.pos = 0;
            if self.out.buf.capacity() > 1024 * 1024 {
                self.out.buf.shrink_to(64 * 1024);
            }
            if !self.starved.is_empty() {
                for slot in self.starved.drain(..) {
                    if let Some(s) = &mut self.slots[slot as usize].stream {
                        s.parked = false;
                        self.ready.push(slot);
                    }
                }
            }
        }
        Pin::new(&mut self.io).poll_flush(cx).map_err(Error::Io)
    }
}

/// Credits a stream's window with `n` bytes the client need not wait for, in a
/// WINDOW_UPDATE once half the window is owed.
fn credit_stream<F, B>(out: &mut Out, cfg: &Config, s: &mut Stream<F, B>, n: u32) {
    s.recv_unacked += n;
    if s.recv_unacked >= cfg.stream_window.min(MAX_WINDOW) / 2 {
        frame::write_window_update(&mut out.buf, s.id, s.recv_unacked);
        s.recv_window += i64::from(s.recv_unacked);
        s.recv_unacked = 0;
    }
}

/// Writes as much of `data` as the windows allow. `false`: the rest is held back in
/// `s.pending` until a WINDOW_UPDATE.
fn send_data<F, B>(out: &mut Out, s: &mut Stream<F, B>, mut data: Bytes, end: bool) -> bool {
    if data.is_empty() {
        if end && s.pending_trailers.is_none() {
            frame::write_data_head(&mut out.buf, s.id, 0, true);
        }
        return true;
    }
    while !data.is_empty() {
        let room = s.send_window.min(out.window).min(i64::from(out.max_frame));
        if room <= 0 {
            s.pending = Some((data, end));
            return false;
        }
        let n = (room as usize).min(data.len());
        let last = n == data.len();
        let fin = end && last && s.pending_trailers.is_none();
        frame::write_data_head(&mut out.buf, s.id, n as u32, fin);
        out.buf.extend_from_slice(&data[..n]);
        data.advance(n);
        s.send_window -= n as i64;
        out.window -= n as i64;
    }
    true
}

impl<IO, S, F, B> Connection<IO, S, F, B> {
    /// Sends GOAWAY: streams the client began before it saw it are served, later ones
    /// ignored, and the connection ends when none is left.
    pub fn graceful_shutdown(&mut self) {
        if self.going_away.is_none() && !self.draining && self.failed.is_none() {
            // Two steps (RFC 9113 §6.8): a GOAWAY naming no limit, and a PING; the
            // final GOAWAY once the client answers it, so that the requests it sent
            // before it read the first one are served rather than dropped.
            self.draining = true;
            frame::write_goaway(&mut self.out.buf, frame::MAX_WINDOW, Reason::NO_ERROR, b"");
            frame::write_ping(&mut self.out.buf, false, DRAIN_PING);
        }
        // The next poll writes it (and ends the connection if nothing is in flight).
        let task = lock(&self.shared.queue).task.clone();
        if let Some(t) = task {
            t.wake();
        }
    }

    /// The connection's transport, once it is no longer served.
    pub fn into_io(self) -> IO {
        self.io
    }
}

impl<IO, S, F, B, E> Future for Connection<IO, S, F, B>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: FnMut(Request<RecvBody>) -> F + Unpin,
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let this = self.get_mut();
        {
            let mut q = lock(&this.shared.queue);
            q.polling = true;
            if !q.task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
                q.task = Some(cx.waker().clone());
            }
        }
        let result = this.turn(cx);
        let mut q = lock(&this.shared.queue);
        q.polling = false;
        // A stream woken after the turn's last look at the queue did not wake the task.
        if result.is_pending() && !q.ready.is_empty() {
            cx.waker().wake_by_ref();
        }
        drop(q);
        result
    }
}

// ------------------------------------------------------------------ request heads

/// A request's pseudo-header fields as decoded, and whether the block was malformed.
#[derive(Default)]
struct RequestHead {
    method: Option<Bytes>,
    scheme: Option<Bytes>,
    authority: Option<Bytes>,
    path: Option<Bytes>,
    protocol: bool,
    malformed: bool,
    regular_seen: bool,
    /// `cookie` fields seen (HTTP/2 clients may split the cookies into several).
    cookies: u32,
}

impl RequestHead {
    fn field(&mut self, h: Header, fields: &mut Vec<(HeaderName, Bytes)>) {
        match h.name {
            Name::Pseudo(p) => {
                if self.regular_seen {
                    self.malformed = true;
                    return;
                }
                let slot = match p {
                    Pseudo::Method => &mut self.method,
                    Pseudo::Scheme => &mut self.scheme,
                    Pseudo::Authority => &mut self.authority,
                    Pseudo::Path => &mut self.path,
                    Pseudo::Status | Pseudo::Protocol => {
                        self.malformed = true;
                        self.protocol |= p == Pseudo::Protocol;
                        return;
                    }
                };
                if slot.is_some() {
                    self.malformed = true;
                } else {
                    *slot = Some(h.value);
                }
            }
            Name::Field(n) => {
                self.regular_seen = true;
                if connection_specific(&n) || (n == header::TE && h.value != "trailers") {
                    self.malformed = true;
                    return;
                }
                self.cookies += u32::from(n == header::COOKIE);
                fields.push((n, h.value));
            }
        }
    }

    /// The request (without its body) and its `content-length`.
    fn into_request(
        self,
        fields: &mut Vec<(HeaderName, Bytes)>,
        room: usize,
    ) -> Result<(Request<()>, Option<u64>), ()> {
        if self.malformed {
            return Err(());
        }
        let method = Method::from_bytes(&self.method.ok_or(())?).map_err(|_| ())?;
        let mut parts = http::uri::Parts::default();
        if method == Method::CONNECT {
            if self.scheme.is_some() || self.path.is_some() {
                return Err(());
            }
            parts.authority =
                Some(Authority::from_maybe_shared(self.authority.ok_or(())?).map_err(|_| ())?);
        } else {
            let scheme = self.scheme.ok_or(())?;
            let path = self.path.ok_or(())?;
            if path.is_empty() {
                return Err(());
            }
            parts.scheme = Some(match &scheme[..] {
                b"https" => Scheme::HTTPS,
                b"http" => Scheme::HTTP,
                other => Scheme::try_from(other).map_err(|_| ())?,
            });
            if let Some(a) = self.authority {
                parts.authority = Some(Authority::from_maybe_shared(a).map_err(|_| ())?);
            }
            parts.path_and_query = Some(if &path[..] == b"*" && method == Method::OPTIONS {
                PathAndQuery::from_static("*")
            } else {
                PathAndQuery::from_maybe_shared(path).map_err(|_| ())?
            });
            if parts.authority.is_none() {
                // `Uri` needs an authority beside a scheme: the Host field stands in.
                parts.scheme = None;
            }
        }
        let uri = Uri::from_parts(parts).map_err(|_| ())?;
        let mut headers = HeaderMap::with_capacity(fields.len() + room);
        let mut length = None;
        if self.cookies > 1 {
            // One field for HTTP/1.1 upstreams (RFC 9113 §8.2.3): joined with "; ".
            let mut joined = Vec::new();
            for (_, value) in fields.iter().filter(|(n, _)| n == header::COOKIE) {
                if !joined.is_empty() {
                    joined.extend_from_slice(b"; ");
                }
                joined.extend_from_slice(value);
            }
            fields.retain(|(n, _)| n != header::COOKIE);
            fields.push((header::COOKIE, Bytes::from(joined)));
        }
        for (name, value) in fields.drain(..) {
            if name == header::CONTENT_LENGTH {
                let n = std::str::from_utf8(&value)
                    .ok()
                    .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or(())?;
                if length.is_some_and(|l| l != n) {
                    return Err(());
                }
                length = Some(n);
            }
            let value = HeaderValue::from_maybe_shared(value).map_err(|_| ())?;
            headers.append(name, value);
        }
        let mut req = Request::new(());
        *req.method_mut() = method;
        *req.uri_mut() = uri;
        *req.version_mut() = Version::HTTP_2;
        *req.headers_mut() = headers;
        Ok((req, length))
    }
}

#[cfg(test)]
mod tests;
