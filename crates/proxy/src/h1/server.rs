//! weir's own HTTP/1.1 server: the downstream half of the lean HTTP/1.1 path.
//!
//! hyper's server runs a dispatcher per connection: every request head is parsed into a
//! buffer split off the connection's read buffer (so the next read allocates a new one),
//! the request and the service's future are moved into the dispatcher, and the response
//! is moved again into its encoder. In a profile of the plaintext keep-alive path that
//! machinery was most of what remained of weir's user-space instructions per request
//! once the upstream side was weir's own (`super::client`). Here the connection's own
//! future reads the head with `httparse` into one reused buffer, copies the head once
//! into a right-sized buffer the request's fields share, calls the same service as
//! hyper does ([`crate::listeners::serve_request`]), writes the response head with its
//! first body frame in one `writev`, and relays the rest of the body as it comes.
//!
//! **What it serves, and what it hands over.** It serves HTTP/1.1 requests without a
//! body, with one `Content-Length` of decimal digits, or with one `Transfer-Encoding:
//! chunked` (and no `Content-Length`): no `Expect`, no `Upgrade`, no `TE`, not
//! `CONNECT`, a request target of at most [`MAX_URI`] bytes, no more fields than the
//! listener allows. At the first request it does not serve (both framings, another
//! coding, `Expect: 100-continue`, an upgrade, HTTP/1.0, a head it cannot parse, a head
//! longer than the listener's limit, the HTTP/2 preface on a plaintext listener), the
//! connection, with the bytes read and not yet served, goes to hyper's server for the
//! rest of its life ([`Conn`]): every such request, and every error answer to a
//! malformed one, is exactly hyper's. So is the response framing here: `Content-Length`
//! and `Transfer-Encoding` as hyper chooses them (the body's size, the upstream's fields,
//! HEAD, 204 and 304), its `Date` field, `Connection: close` when the connection will
//! close, and a client that closes its end while its request is in flight cancels the
//! request (hyper's default, no half-close).
//!
//! A request body ([`LeanBody`]) gets the bytes that came with its head at once (so the
//! upstream client forwards them with the head, in one write), then is read by the
//! connection's loop when the body asks for more, from the connection's buffer first: at most
//! the bytes still owed, or the next chunk's data through the strict chunked decoder the
//! upstream client uses (`super::parse::Chunked`: bare LF, bad sizes and oversized
//! extensions or trailers refused; trailer fields passed on). The loop goes on reading it
//! while it writes the response (an upstream may answer before the body's end). A body
//! the client cuts off, or whose chunk framing is invalid, fails with [`BodyCut`] (the
//! client's fault, 400); a body not read to its end when the response head is written
//! closes the connection after the response.
//!
//! The connection-state timeouts ([`crate::idle`]), the drain ([`crate::drain`]) and the
//! per-request path are the same as on hyper's connections: the IO is the same
//! [`crate::idle::Watch`], requests are counted by the same [`crate::idle::Tracked`], and
//! a graceful shut-down closes an idle connection at once and a busy one after its
//! response.

use std::future::{Future, poll_fn};
use std::io;
use std::mem::MaybeUninit;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker, ready};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode, Uri, Version};
use http_body::Body;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::io::poll_read_buf;

use super::write::{Outgoing, decimal, hex_line};
use crate::body::ClientBody;
use crate::drain::Shutdown;
use crate::error::BoxError;
use crate::idle::ConnState;
use crate::l4::Rewind;
use crate::server::ConnContext;

/// The longest request target served here (hyper's limit: a longer one is handed over,
/// and hyper answers 414).
pub(crate) const MAX_URI: usize = (u16::MAX - 1) as usize;
/// Header fields parsed on the stack (hyper's default limit; a listener that allows more
/// has longer heads handed over).
const FIELDS: usize = 100;
/// The least free room for a read.
const READ_MIN: usize = 8 * 1024;
/// The largest piece of a request body copied out of the connection's buffer rather
/// than shared with it.
const COPIED_BODY: usize = 4 * 1024;
pub(crate) const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// hyper's connection, once a connection is handed over to it.
pub(crate) type Fallback<'a> = Pin<Box<dyn Shutdown<Output = Result<(), BoxError>> + Send + 'a>>;

/// What the requests of one connection are served with.
pub(crate) struct Handler {
    pub(crate) state: Arc<ConnState>,
    pub(crate) ctx: Arc<ConnContext>,
    /// The listener's limit on header fields.
    pub(crate) max_headers: u32,
    /// The largest request head (hyper's read buffer limit, the same for both).
    pub(crate) max_head: usize,
    /// A plaintext listener: the HTTP/2 preface hands the connection over (h2c).
    pub(crate) h2_preface: bool,
}

/// How the lean loop ended.
enum Ended<IO> {
    Closed,
    /// The connection goes to hyper, with the bytes read and not served.
    HandOver(IO, Vec<u8>),
}

type Lean<'a, IO> = Pin<Box<dyn Future<Output = Result<Ended<IO>, BoxError>> + Send + 'a>>;

enum Stage<'a, IO> {
    Lean(Lean<'a, IO>),
    Hyper(Fallback<'a>),
    Done,
}

/// A client connection served here until a request needs hyper's server, then by it
/// (`hand_over` makes hyper's connection).
pub(crate) struct Conn<'a, IO, F> {
    stage: Stage<'a, IO>,
    hand_over: Option<F>,
    closing: Arc<AtomicBool>,
}

impl<'a, IO, F> Conn<'a, IO, F>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'a,
    F: FnOnce(Rewind<IO>) -> Fallback<'a> + Unpin,
{
    pub(crate) fn new(io: IO, handler: Handler, hand_over: F) -> Conn<'a, IO, F> {
        let closing = Arc::new(AtomicBool::new(false));
        Conn {
            stage: Stage::Lean(Box::pin(serve(io, handler, Arc::clone(&closing)))),
            hand_over: Some(hand_over),
            closing,
        }
    }
}

impl<'a, IO, F> Future for Conn<'a, IO, F>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'a,
    F: FnOnce(Rewind<IO>) -> Fallback<'a> + Unpin,
{
    type Output = Result<(), BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            match &mut this.stage {
                Stage::Lean(lean) => match ready!(lean.as_mut().poll(cx)) {
                    Ok(Ended::Closed) => {
                        this.stage = Stage::Done;
                        return Poll::Ready(Ok(()));
                    }
                    Ok(Ended::HandOver(io, read)) => {
                        let Some(hand_over) = this.hand_over.take() else {
                            this.stage = Stage::Done;
                            return Poll::Ready(Err("connection handed over twice".into()));
                        };
                        let mut conn = hand_over(Rewind::new(read, io));
                        if this.closing.load(Ordering::Relaxed) {
                            conn.as_mut().graceful_shutdown();
                        }
                        this.stage = Stage::Hyper(conn);
                    }
                    Err(e) => {
                        this.stage = Stage::Done;
                        return Poll::Ready(Err(e));
                    }
                },
                Stage::Hyper(conn) => return conn.as_mut().poll(cx),
                Stage::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}

impl<'a, IO, F> Shutdown for Conn<'a, IO, F>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'a,
    F: FnOnce(Rewind<IO>) -> Fallback<'a> + Unpin,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        let this = self.get_mut();
        this.closing.store(true, Ordering::Relaxed);
        if let Stage::Hyper(conn) = &mut this.stage {
            conn.as_mut().graceful_shutdown();
        }
    }
}

// ---------------------------------------------------------------- the request head

/// A request head read from the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A request served here: the head's length, the request target's place in it.
    Complete {
        /// The head's length, its blank line included.
        len: usize,
        /// The request method.
        method: Method,
        /// Where the request target is in the head.
        target: (usize, usize),
        /// No `Connection: close`.
        keep_alive: bool,
        /// How the body is framed.
        body: RequestFraming,
    },
    /// More bytes are needed.
    Partial,
    /// Not a request served here (hyper's server decides what it is).
    Other,
}

/// How a request head served here frames its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFraming {
    /// `Content-Length` bytes (0: no body).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// One header field of a parsed head: its name, and its value's place in the head.
pub type Field = (HeaderName, usize, usize);

/// Reads the request head at the start of `buf` in one pass (`h1::parse::scan_request`;
/// `fields` gets its header fields, after a `Complete`). Pure: the fuzz target
/// `h1_request` checks it, against httparse too ([`check_request_scan`]).
pub fn parse_request(buf: &[u8], fields: &mut Vec<Field>, max_headers: usize) -> Parsed {
    fields.clear();
    let mut keep_alive = true;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    // Each field as the scan finds it: its name parsed, the framing fields checked (a
    // head weir does not serve stops the scan: `Other`).
    let not_here = super::parse::Invalid::Head("served by hyper");
    let field = |(name_at, name_len): (usize, usize), (at, len): (usize, usize)| {
        let Ok(name) = super::parse::field_name(&buf[name_at..name_at + name_len]) else {
            return Err(not_here.clone());
        };
        let value = &buf[at..at + len];
        match name {
            header::TRANSFER_ENCODING => {
                // One field that is exactly `chunked`; any other coding, a list, or a
                // second field is hyper's to read or refuse.
                if chunked || !value.eq_ignore_ascii_case(b"chunked") {
                    return Err(not_here.clone());
                }
                chunked = true;
            }
            header::EXPECT | header::UPGRADE | header::TE => return Err(not_here.clone()),
            header::CONTENT_LENGTH => {
                // One field of 1–19 decimal digits; anything else (a list, a sign,
                // spaces, a second field) is hyper's to read or refuse.
                if length.is_some() {
                    return Err(not_here.clone());
                }
                let Some(n) = super::parse::decimal(value) else {
                    return Err(not_here.clone());
                };
                length = Some(n);
            }
            header::CONNECTION if has_token(value, b"close") => keep_alive = false,
            _ => {}
        }
        fields.push((name, at, at + len));
        Ok(())
    };
    let line = match super::parse::scan_request(buf, max_headers.min(FIELDS), field) {
        Ok(Some(line)) => line,
        Ok(None) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    if line.minor != 1 || line.target.1 > MAX_URI {
        return Parsed::Other;
    }
    let Ok(method) = Method::from_bytes(&buf[line.method.0..line.method.0 + line.method.1]) else {
        return Parsed::Other;
    };
    if method == Method::CONNECT {
        return Parsed::Other;
    }
    let body = match (length, chunked) {
        // Both framings: hyper's to read (as chunked, closing after the answer).
        (Some(_), true) => return Parsed::Other,
        (None, true) => RequestFraming::Chunked,
        (Some(n), false) => RequestFraming::Length(n),
        (None, false) => RequestFraming::Length(0),
    };
    Parsed::Complete {
        len: line.len,
        method,
        target: (line.target.0, line.target.0 + line.target.1),
        keep_alive,
        body,
    }
}

/// [`parse_request`] before session 40: httparse, then the same rules. Kept to check
/// that the two agree ([`check_request_scan`]).
fn reference_parse_request(buf: &[u8], fields: &mut Vec<Field>, max_headers: usize) -> Parsed {
    fields.clear();
    let mut table = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; FIELDS];
    let mut req = httparse::Request::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_request_with_uninit_headers(&mut req, buf, &mut table)
    {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    let (Some(method), Some(path), Some(1)) = (req.method, req.path, req.version) else {
        return Parsed::Other;
    };
    if path.len() > MAX_URI || req.headers.len() > max_headers {
        return Parsed::Other;
    }
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parsed::Other;
    };
    if method == Method::CONNECT {
        return Parsed::Other;
    }
    let base = buf.as_ptr() as usize;
    let at = |s: &[u8]| s.as_ptr() as usize - base;
    let mut keep_alive = true;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for h in req.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(h.name.as_bytes()) else {
            return Parsed::Other;
        };
        match name {
            header::TRANSFER_ENCODING => {
                // One field that is exactly `chunked`; any other coding, a list, or a
                // second field is hyper's to read or refuse.
                if chunked || !h.value.eq_ignore_ascii_case(b"chunked") {
                    return Parsed::Other;
                }
                chunked = true;
            }
            header::EXPECT | header::UPGRADE | header::TE => return Parsed::Other,
            header::CONTENT_LENGTH => {
                // One field of 1–19 decimal digits; anything else (a list, a sign,
                // spaces, a second field) is hyper's to read or refuse.
                if length.is_some() {
                    return Parsed::Other;
                }
                let Some(n) = super::parse::decimal(h.value) else {
                    return Parsed::Other;
                };
                length = Some(n);
            }
            header::CONNECTION if has_token(h.value, b"close") => keep_alive = false,
            _ => {}
        }
        let start = at(h.value);
        fields.push((name, start, start + h.value.len()));
    }
    let body = match (length, chunked) {
        // Both framings: hyper's to read (as chunked, closing after the answer).
        (Some(_), true) => return Parsed::Other,
        (None, true) => RequestFraming::Chunked,
        (Some(n), false) => RequestFraming::Length(n),
        (None, false) => RequestFraming::Length(0),
    };
    let start = at(path.as_bytes());
    Parsed::Complete {
        len,
        method,
        target: (start, start + path.len()),
        keep_alive,
        body,
    }
}

/// Panics unless [`parse_request`] and the httparse-based reading before it agree on
/// `bytes`: a head served here is the same head with the same fields either way. The new
/// scan may give up sooner (`Other` where httparse still asked for more: a version other
/// than 1.1, too many fields, a framing field it does not serve), and it hands a head
/// with a bare LF to hyper's server.
#[doc(hidden)]
pub fn check_request_scan(bytes: &[u8], max_headers: usize) {
    let (mut new_fields, mut old_fields) = (Vec::new(), Vec::new());
    let new = parse_request(bytes, &mut new_fields, max_headers);
    let old = reference_parse_request(bytes, &mut old_fields, max_headers);
    let text = String::from_utf8_lossy(bytes);
    match (&new, &old) {
        (Parsed::Complete { .. }, _) | (_, Parsed::Complete { .. }) if new == old => {
            assert_eq!(new_fields, old_fields, "fields of {text:?}");
        }
        (Parsed::Other, Parsed::Complete { len, .. }) => {
            let head = &bytes[..*len];
            let bare_lf = head
                .iter()
                .enumerate()
                .any(|(i, b)| *b == b'\n' && (i == 0 || head[i - 1] != b'\r'));
            assert!(
                bare_lf,
                "handed over {text:?}, which httparse read as {old:?}"
            );
        }
        (Parsed::Partial, Parsed::Partial)
        | (Parsed::Other, Parsed::Other)
        | (Parsed::Other, Parsed::Partial) => {}
        _ => panic!("{new:?} where httparse gave {old:?} for {text:?}"),
    }
}

/// Whether a comma-separated field value lists `token` (case-insensitive).
fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|b| *b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// Builds the request of a `Complete` head, moved out of `buf` (`None`: a target or a
/// field value the `http` types refuse; the head stays in `buf`).
/// The header map has room for the fields and [`crate::server::ADDED_FIELDS`] more.
fn build_request(
    buf: &mut BytesMut,
    fields: &mut Vec<Field>,
    len: usize,
    method: Method,
    target: (usize, usize),
    body: ClientBody,
) -> Option<Request<ClientBody>> {
    let head = Bytes::copy_from_slice(&buf[..len]);
    let uri = Uri::from_maybe_shared(head.slice(target.0..target.1)).ok()?;
    let mut headers = HeaderMap::with_capacity(fields.len() + crate::server::ADDED_FIELDS);
    for (name, start, end) in fields.drain(..) {
        let value = HeaderValue::from_maybe_shared(head.slice(start..end)).ok()?;
        headers.append(name, value);
    }
    buf.advance(len);
    let mut req = Request::new(body);
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.version_mut() = Version::HTTP_11;
    *req.headers_mut() = headers;
    Some(req)
}

// ---------------------------------------------------------------- the connection loop

/// What reading the next request head gave.
// Returned once per request and taken apart at once: a box would cost an allocation.
#[allow(clippy::large_enum_variant)]
enum Next {
    /// A request, whether the connection may be kept after it, and its body's shared
    /// state (when it has a body).
    Request(Request<ClientBody>, bool, Option<Arc<Mutex<Feed>>>),
    Closed,
    HandOver,
}

async fn serve<IO>(mut io: IO, h: Handler, closing: Arc<AtomicBool>) -> Result<Ended<IO>, BoxError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send,
{
    let mut buf = BytesMut::with_capacity(READ_MIN);
    let mut fields: Vec<Field> = Vec::with_capacity(16);
    let mut out: Vec<u8> = Vec::with_capacity(512);
    let mut first = true;
    loop {
        let (req, keep_alive, feed) =
            match next_request(&mut io, &mut buf, &mut fields, &h, first, &closing).await? {
                Next::Request(req, keep_alive, feed) => (req, keep_alive, feed),
                Next::Closed => return Ok(Ended::Closed),
                Next::HandOver => return Ok(Ended::HandOver(io, buf.to_vec())),
            };
        first = false;
        let head_request = req.method() == Method::HEAD;
        let served = crate::listeners::serve_request(&h.state, &h.ctx, h.max_headers, req);
        let mut served = pin!(served);
        // The response, or `None` when the client closed its end first (the request is
        // dropped, as hyper does without half-close).
        // While it waits, the request's body (if it has one) is read as it asks for it.
        let resp = poll_fn(|cx| {
            loop {
                if let Poll::Ready(r) = served.as_mut().poll(cx) {
                    return Poll::Ready(Some(r));
                }
                match &feed {
                    Some(feed) if !finished(feed) => {
                        match feed_body(feed, &mut io, &mut buf, cx) {
                            // The body got data (or its end): its reader goes on.
                            Poll::Ready(()) => continue,
                            Poll::Pending => return Poll::Pending,
                        }
                    }
                    _ => {}
                }
                if buf.is_empty() {
                    buf.reserve(READ_MIN);
                    if let Poll::Ready(Ok(0) | Err(_)) =
                        poll_read_buf(Pin::new(&mut io), cx, &mut buf)
                    {
                        return Poll::Ready(None);
                    }
                }
                return Poll::Pending;
            }
        })
        .await;
        let Some(Ok(resp)) = resp else {
            return Ok(Ended::Closed);
        };
        // A body not read to its end leaves the connection where the next request cannot
        // be found: it closes after this response.
        let body_read = match &feed {
            None => true,
            Some(f) => lock(f).end_read(),
        };
        let keep_alive = keep_alive && body_read && !closing.load(Ordering::Relaxed);
        let (mut parts, mut body) = resp.into_parts();
        let length = if body.is_end_stream() {
            None
        } else {
            Some(body.size_hint().exact())
        };
        let framing = encode_head(&mut out, &mut parts, length, head_request, keep_alive)?;
        drop(parts);
        let feeding = Feeding {
            feed: feed.as_deref(),
            buf: &mut buf,
        };
        write_body(&mut io, &out, &mut body, framing.body, feeding).await?;
        drop(body);
        // A graceful shut-down asked for during this response closes after it, even with
        // a pipelined request already read (as hyper does).
        if framing.last || closing.load(Ordering::Relaxed) {
            // Best effort: the response is written.
            let _ = io.shutdown().await;
            return Ok(Ended::Closed);
        }
    }
}

/// Reads until `buf` starts with a request head served here, or the connection ends or
/// is handed over.
async fn next_request<IO: AsyncRead + Unpin>(
    io: &mut IO,
    buf: &mut BytesMut,
    fields: &mut Vec<Field>,
    h: &Handler,
    first: bool,
    closing: &AtomicBool,
) -> Result<Next, BoxError> {
    loop {
        if !buf.is_empty() {
            if first && h.h2_preface && H2_PREFACE.starts_with(&buf[..buf.len().min(24)]) {
                if buf.len() >= H2_PREFACE.len() {
                    return Ok(Next::HandOver);
                }
            } else {
                match parse_request(buf, fields, h.max_headers as usize) {
                    Parsed::Complete {
                        len,
                        method,
                        target,
                        keep_alive,
                        body,
                    } => {
                        let feed = match body {
                            RequestFraming::Length(0) => None,
                            RequestFraming::Length(n) => Some(BodyLength::Length(n)),
                            RequestFraming::Chunked => Some(BodyLength::Chunked(Box::default())),
                        }
                        .map(|length| Arc::new(Mutex::new(Feed::new(length))));
                        let client_body = match &feed {
                            Some(f) => ClientBody::Lean(LeanBody(Arc::clone(f))),
                            None => ClientBody::Empty,
                        };
                        let Some(req) =
                            build_request(buf, fields, len, method, target, client_body)
                        else {
                            return Ok(Next::HandOver);
                        };
                        // The body's first bytes often come with the head: handed over now,
                        // the upstream client sends them with the forwarded head (one
                        // write) before it waits for an answer.
                        if let Some(f) = &feed
                            && !buf.is_empty()
                        {
                            lock(f).take_from(buf);
                        }
                        return Ok(Next::Request(req, keep_alive, feed));
                    }
                    Parsed::Other => return Ok(Next::HandOver),
                    Parsed::Partial if buf.len() >= h.max_head => return Ok(Next::HandOver),
                    Parsed::Partial => {}
                }
            }
        }
        let read = poll_fn(|cx| {
            // A graceful shut-down closes a connection between requests at once.
            if buf.is_empty() && closing.load(Ordering::Relaxed) {
                return Poll::Ready(Ok(None));
            }
            buf.reserve(READ_MIN);
            poll_read_buf(Pin::new(&mut *io), cx, buf).map(|r| r.map(Some))
        })
        .await?;
        match read {
            None => return Ok(Next::Closed),
            Some(0) if buf.is_empty() => return Ok(Next::Closed),
            Some(0) => return Err("connection closed within a request head".into()),
            Some(_) => {}
        }
    }
}

// ---------------------------------------------------------------- request bodies

/// A request body (`Content-Length` bytes, or chunked), read by the connection's loop
/// while the request is served: the body asks ([`Feed::want`]), the loop hands it what
/// the connection's buffer holds (or reads more): at most the bytes still owed, or the
/// next chunk's data (weir's strict chunked decoder, `super::parse::Chunked`: its trailer
/// fields become the body's trailers). The body may be polled from another task (an
/// HTTP/2 upstream's): both sides register a waker.
pub(crate) struct LeanBody(Arc<Mutex<Feed>>);

/// How a request body is framed.
enum BodyLength {
    /// This many bytes still to take from the connection.
    Length(u64),
    Chunked(Box<super::parse::Chunked>),
}

/// The state a [`LeanBody`] shares with its connection's loop.
pub(crate) struct Feed {
    length: BodyLength,
    /// The body's end was taken from the connection.
    done: bool,
    /// A frame taken from the connection, not yet taken by the body.
    frame: Option<http_body::Frame<Bytes>>,
    /// The body asked for data.
    want: bool,
    /// The client closed (or the connection failed) before the body's end.
    cut: bool,
    /// The chunked framing was invalid.
    invalid: Option<super::parse::Invalid>,
    /// The body was dropped (the request is done with it).
    dropped: bool,
    body_waker: Option<Waker>,
    conn_waker: Option<Waker>,
}

/// The error of a body whose client closed before its end, or whose chunked framing is
/// invalid (the client's fault: 400).
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyCut {
    #[error("client closed the connection within the request body")]
    Closed,
    #[error("invalid request body: {0}")]
    Invalid(super::parse::Invalid),
}

fn lock(feed: &Mutex<Feed>) -> std::sync::MutexGuard<'_, Feed> {
    feed.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// [`Feed::finished`], the lock released before this returns (so that a condition may
/// lock again).
fn finished(feed: &Mutex<Feed>) -> bool {
    lock(feed).finished()
}

impl Feed {
    fn new(length: BodyLength) -> Feed {
        Feed {
            done: matches!(length, BodyLength::Length(0)),
            length,
            frame: None,
            want: false,
            cut: false,
            invalid: None,
            dropped: false,
            body_waker: None,
            conn_waker: None,
        }
    }

    fn failed(&self) -> bool {
        self.cut || self.invalid.is_some()
    }

    /// Nothing more for the loop to do: all read, failed, or no longer wanted.
    fn finished(&self) -> bool {
        self.done || self.failed() || self.dropped
    }

    /// Whether the body was taken from the connection to its end.
    fn end_read(&self) -> bool {
        self.done && !self.failed()
    }

    fn wake_body(&mut self) {
        if let Some(w) = self.body_waker.take() {
            w.wake();
        }
    }

    /// Takes the next frame (or the end, or a framing error) from `buf`; `false` when
    /// `buf` holds no complete step.
    fn take_from(&mut self, buf: &mut BytesMut) -> bool {
        match &mut self.length {
            BodyLength::Length(left) => {
                if buf.is_empty() {
                    return false;
                }
                let n = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= n as u64;
                self.done = *left == 0;
                // A small piece is copied, so that the connection's buffer stays its own
                // (shared, the next read would need a new one); a large one is shared.
                let data = if n <= COPIED_BODY {
                    let data = Bytes::copy_from_slice(&buf[..n]);
                    buf.advance(n);
                    data
                } else {
                    buf.split_to(n).freeze()
                };
                self.frame = Some(http_body::Frame::data(data));
                true
            }
            BodyLength::Chunked(decoder) => match decoder.decode(buf, usize::MAX) {
                Ok(super::parse::Decoded::Data(data)) => {
                    self.frame = Some(http_body::Frame::data(data));
                    true
                }
                Ok(super::parse::Decoded::End(trailers)) => {
                    self.done = true;
                    self.frame = trailers.map(http_body::Frame::trailers);
                    true
                }
                Ok(super::parse::Decoded::More) => false,
                Err(e) => {
                    self.invalid = Some(e);
                    true
                }
            },
        }
    }
}

/// The loop's side: `Ready` when the body got data (or its end) or learnt it failed
/// (poll the request again), `Pending` when it does not want more yet or the connection
/// has none.
fn feed_body<IO: AsyncRead + Unpin>(
    feed: &Mutex<Feed>,
    io: &mut IO,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<()> {
    loop {
        let mut f = lock(feed);
        if !f.want || f.frame.is_some() || f.finished() {
            f.conn_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if f.take_from(buf) {
            f.want = false;
            f.wake_body();
            return Poll::Ready(());
        }
        drop(f);
        buf.reserve(READ_MIN);
        match poll_read_buf(Pin::new(&mut *io), cx, buf) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(n)) if n > 0 => {}
            Poll::Ready(_) => {
                let mut f = lock(feed);
                f.cut = true;
                f.wake_body();
                return Poll::Ready(());
            }
        }
    }
}

/// A request body the loop may still have to read while it writes the response.
pub(crate) struct Feeding<'a> {
    feed: Option<&'a Mutex<Feed>>,
    buf: &'a mut BytesMut,
}

impl Feeding<'_> {
    /// Hands the body what it asks for, as far as the connection has it now (the
    /// connection's reads and the body's asks wake this task).
    fn drive<IO: AsyncRead + Unpin>(&mut self, io: &mut IO, cx: &mut Context<'_>) {
        let Some(feed) = self.feed else {
            return;
        };
        // Bounded: each turn hands the body data (or its end), which it must ask for
        // again before the next.
        while !finished(feed) && feed_body(feed, io, self.buf, cx).is_ready() {}
    }
}

impl LeanBody {
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let mut f = lock(&self.0);
        if let Some(frame) = f.frame.take() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Some(e) = &f.invalid {
            return Poll::Ready(Some(Err(Box::new(BodyCut::Invalid(e.clone())))));
        }
        if f.cut {
            return Poll::Ready(Some(Err(Box::new(BodyCut::Closed))));
        }
        if f.done {
            return Poll::Ready(None);
        }
        f.want = true;
        if !f
            .body_waker
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            f.body_waker = Some(cx.waker().clone());
        }
        if let Some(w) = f.conn_waker.take() {
            w.wake();
        }
        Poll::Pending
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        let f = lock(&self.0);
        f.done && f.frame.is_none() && !f.failed()
    }

    pub(crate) fn size_hint(&self) -> http_body::SizeHint {
        let f = lock(&self.0);
        match &f.length {
            BodyLength::Length(left) => {
                let staged = f
                    .frame
                    .as_ref()
                    .and_then(|fr| fr.data_ref())
                    .map_or(0, |d| d.len() as u64);
                http_body::SizeHint::with_exact(left + staged)
            }
            BodyLength::Chunked(_) => http_body::SizeHint::default(),
        }
    }
}

impl Drop for LeanBody {
    fn drop(&mut self) {
        let mut f = lock(&self.0);
        f.dropped = true;
        if let Some(w) = f.conn_waker.take() {
            w.wake();
        }
    }
}

// ---------------------------------------------------------------- the response

/// How a response body is framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyFraming {
    /// This many bytes (0: no body is written, the body is dropped unread).
    Length(u64),
    Chunked,
}

/// What [`encode_head`] decided.
#[derive(Debug, PartialEq, Eq)]
struct Framing {
    body: BodyFraming,
    /// The connection closes after this response.
    last: bool,
}

/// Encodes the response head into `out` (cleared first) as hyper's server does: the
/// status line (`200 OK` without a custom reason phrase; else the code and the reason the
/// upstream gave, or the canonical one), the fields, then the framing: a body of known
/// size gets `Content-Length`, an existing `Content-Length` is kept (a body that is
/// already complete has it dropped, except for HEAD), `Transfer-Encoding` makes it chunked
/// (`chunked` added when it is not the last coding), a body of unknown size is chunked;
/// none for HEAD, 204 and 304. A missing `Date` is added, and `Connection: close` when
/// the connection will not be kept (`keep_alive` false). `length`: `None` for a body that
/// is already complete, else its exact size if known.
fn encode_head(
    out: &mut Vec<u8>,
    parts: &mut http::response::Parts,
    length: Option<Option<u64>>,
    head_request: bool,
    keep_alive: bool,
) -> Result<Framing, BoxError> {
    out.clear();
    let status = parts.status;
    if status.is_informational() {
        // hyper answers these with a 500 and closes; the proxy never makes one a final
        // response (upgrades are hyper's).
        return Err("an informational status as a final response".into());
    }
    if !keep_alive {
        let close = parts
            .headers
            .get_all(header::CONNECTION)
            .iter()
            .any(|v| has_token(v.as_bytes(), b"close"));
        if !close {
            parts
                .headers
                .append(header::CONNECTION, HeaderValue::from_static("close"));
        }
    }
    let mut last = !keep_alive;
    let reason = parts.extensions.get::<hyper::ext::ReasonPhrase>();
    if status == StatusCode::OK && reason.is_none() {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(status.as_str().as_bytes());
        out.push(b' ');
        match reason {
            Some(r) => out.extend_from_slice(r.as_bytes()),
            None => out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes()),
        }
        out.extend_from_slice(b"\r\n");
    }
    let no_content = matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED);
    // A body may be written (and chunked), and `Content-Length` may be sent.
    let can_have_body = !head_request && !no_content;
    let can_have_length = !no_content;

    let mut framing = BodyFraming::Length(0);
    let mut wrote_len = false;
    let mut wrote_date = false;
    let mut prev_len: Option<u64> = None;
    // A line whose values are being joined (`Content-Length`, `Transfer-Encoding`,
    // `Connection`, `Trailer`), and whether `chunked` must end it.
    let mut open = false;
    let mut add_chunked = false;
    let mut current: Option<&HeaderName> = None;
    let end_line = |out: &mut Vec<u8>, add_chunked: bool| {
        out.extend_from_slice(if add_chunked {
            b", chunked\r\n"
        } else {
            b"\r\n"
        });
    };
    for (name, value) in parts.headers.iter() {
        if current != Some(name) {
            if open {
                end_line(out, add_chunked);
            }
            open = false;
            add_chunked = false;
            current = Some(name);
        }
        let joined = |out: &mut Vec<u8>, open: &mut bool, label: &[u8]| {
            if *open {
                out.extend_from_slice(b", ");
            } else {
                *open = true;
                out.extend_from_slice(label);
            }
            out.extend_from_slice(value.as_bytes());
        };
        match *name {
            header::CONTENT_LENGTH => {
                if wrote_len && !open {
                    return Err("content-length after the framing was chosen".into());
                }
                match length {
                    Some(Some(n)) => {
                        if !open {
                            framing = BodyFraming::Length(n);
                            joined(out, &mut open, b"content-length: ");
                            wrote_len = true;
                        }
                        continue;
                    }
                    Some(None) => {
                        let n = super::parse::content_length_value(value.as_bytes())
                            .ok_or("invalid content-length in a response")?;
                        match prev_len {
                            Some(prev) if prev != n => {
                                return Err("several content-length values".into());
                            }
                            Some(_) => {}
                            None => {
                                framing = BodyFraming::Length(n);
                                joined(out, &mut open, b"content-length: ");
                                wrote_len = true;
                                prev_len = Some(n);
                            }
                        }
                        continue;
                    }
                    None if !head_request => continue,
                    None => wrote_len = true,
                }
            }
            header::TRANSFER_ENCODING => {
                if wrote_len && !open {
                    return Err("transfer-encoding after the framing was chosen".into());
                }
                if !can_have_body {
                    continue;
                }
                wrote_len = true;
                add_chunked = !super::parse::ends_in_chunked_value(value.as_bytes());
                if !open {
                    framing = BodyFraming::Chunked;
                }
                joined(out, &mut open, b"transfer-encoding: ");
                continue;
            }
            header::CONNECTION => {
                if has_token(value.as_bytes(), b"close") {
                    last = true;
                }
                joined(out, &mut open, b"connection: ");
                continue;
            }
            header::DATE => wrote_date = true,
            header::TRAILER => {
                if !can_have_body {
                    continue;
                }
                joined(out, &mut open, b"trailer: ");
                continue;
            }
            _ => {}
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if open {
        end_line(out, add_chunked);
    }
    if !wrote_len {
        framing = match length {
            Some(None) if can_have_body => {
                out.extend_from_slice(b"transfer-encoding: chunked\r\n");
                BodyFraming::Chunked
            }
            Some(None) => BodyFraming::Length(0),
            None | Some(Some(0)) => {
                if can_have_length && !head_request {
                    out.extend_from_slice(b"content-length: 0\r\n");
                }
                BodyFraming::Length(0)
            }
            Some(Some(n)) => {
                if can_have_length {
                    out.extend_from_slice(b"content-length: ");
                    let mut digits = [0u8; 20];
                    out.extend_from_slice(decimal(n, &mut digits));
                    out.extend_from_slice(b"\r\n");
                    BodyFraming::Length(n)
                } else {
                    BodyFraming::Length(0)
                }
            }
        };
    }
    if !can_have_body {
        framing = BodyFraming::Length(0);
    }
    if !wrote_date {
        out.extend_from_slice(b"date: ");
        date::extend(out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(Framing {
        body: framing,
        last,
    })
}

/// Writes `head` and the body as `framing` says: the head with the body's first frame
/// when it is already there (one `writev`), then each frame as it comes. A body that
/// ends short of its length, or fails, fails the connection (the client sees the
/// response cut off, as with hyper); data past the length is not sent. A request body
/// still being sent goes on being read meanwhile (`feed`: an upstream may stream its
/// answer while it reads the request).
async fn write_body<IO, B>(
    io: &mut IO,
    head: &[u8],
    body: &mut B,
    framing: BodyFraming,
    mut feed: Feeding<'_>,
) -> Result<(), BoxError>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let mut out = Outgoing::default();
    let mut left = match framing {
        BodyFraming::Length(n) => n,
        BodyFraming::Chunked => 0,
    };
    let mut done = framing == BodyFraming::Length(0);
    let mut first = true;
    while !done {
        // The first frame is taken if it is already there, so that it goes with the head.
        let mut frame = Poll::Pending;
        if first {
            first = false;
            frame = frame_now(&mut feed, io, body).await;
            if frame.is_pending() {
                write_out(&mut feed, io, &mut out, head).await?;
            }
        }
        let frame = match frame {
            Poll::Ready(frame) => frame,
            Poll::Pending => next_frame(&mut feed, io, body).await,
        };
        match frame {
            None => {
                if framing == BodyFraming::Chunked {
                    out.stage(b"0\r\n\r\n", Bytes::new(), b"");
                } else if left > 0 {
                    return Err("response body ended before its content-length".into());
                }
                done = true;
            }
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(frame)) => {
                // Trailers are not sent: a request that allows them (`TE: trailers`) is
                // served by hyper.
                let Ok(mut data) = frame.into_data() else {
                    continue;
                };
                if data.is_empty() {
                    continue;
                }
                match framing {
                    BodyFraming::Chunked => {
                        let mut line = [0u8; 24];
                        let n = hex_line(data.len(), &mut line);
                        out.stage(&line[..n], data, b"\r\n");
                    }
                    BodyFraming::Length(_) => {
                        if (data.len() as u64) >= left {
                            data.truncate(left as usize);
                            done = true;
                        }
                        left -= data.len() as u64;
                        out.stage(&[], data, b"");
                    }
                }
            }
        }
        write_out(&mut feed, io, &mut out, head).await?;
    }
    // A response without a body part: the head alone.
    write_out(&mut feed, io, &mut out, head).await?;
    poll_fn(|cx| Pin::new(&mut *io).poll_flush(cx)).await?;
    Ok(())
}

/// The body's next frame, the request body fed meanwhile.
async fn next_frame<IO, B>(
    feed: &mut Feeding<'_>,
    io: &mut IO,
    body: &mut B,
) -> Option<Result<http_body::Frame<Bytes>, B::Error>>
where
    IO: AsyncRead + Unpin,
    B: Body<Data = Bytes> + Unpin,
{
    poll_fn(|cx| {
        feed.drive(io, cx);
        Pin::new(&mut *body).poll_frame(cx)
    })
    .await
}

/// As [`next_frame`], only if the frame is there already (`Pending` otherwise).
async fn frame_now<IO, B>(
    feed: &mut Feeding<'_>,
    io: &mut IO,
    body: &mut B,
) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>>
where
    IO: AsyncRead + Unpin,
    B: Body<Data = Bytes> + Unpin,
{
    poll_fn(|cx| {
        feed.drive(io, cx);
        Poll::Ready(Pin::new(&mut *body).poll_frame(cx))
    })
    .await
}

/// Writes what `out` has staged (the rest of `head` first), the request body fed
/// meanwhile.
async fn write_out<IO: AsyncRead + AsyncWrite + Unpin>(
    feed: &mut Feeding<'_>,
    io: &mut IO,
    out: &mut Outgoing,
    head: &[u8],
) -> io::Result<()> {
    poll_fn(|cx| {
        feed.drive(io, cx);
        out.poll_write(head, io, cx)
    })
    .await
}

/// Appends the current time as an IMF-fixdate (the `Date` field's value).
pub(crate) fn date_text(out: &mut Vec<u8>) {
    date::extend(out);
}

/// The `Date` field's value, formatted once per second per thread.
mod date {
    use std::cell::RefCell;
    use std::time::{SystemTime, UNIX_EPOCH};

    thread_local! {
        static CACHED: RefCell<(u64, [u8; 29])> = const { RefCell::new((u64::MAX, [0; 29])) };
    }

    /// Appends the current time as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
    pub(super) fn extend(out: &mut Vec<u8>) {
        let now = SystemTime::now();
        let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        CACHED.with_borrow_mut(|(at, text)| {
            if *at != secs {
                let formatted = httpdate::fmt_http_date(now);
                if formatted.len() == text.len() {
                    text.copy_from_slice(formatted.as_bytes());
                    *at = secs;
                } else {
                    out.extend_from_slice(formatted.as_bytes());
                    return;
                }
            }
            out.extend_from_slice(&text[..]);
        });
    }
}

#[cfg(test)]
mod tests;
