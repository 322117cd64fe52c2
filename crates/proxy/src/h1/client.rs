//! The exchange of one request on an upstream HTTP/1.1 connection (see the module above).

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker, ready};

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName};
use http::{Method, Request, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::io::poll_read_buf;

use super::parse::{self, Chunked, Decoded, Framing};
use super::write::{Outgoing, decimal, encode_trailers, hex_line};
use crate::body::RequestBody;
use crate::endpoints::ConnectGate;
use crate::error::{BoxError, ProxyError};
use crate::pool::{Http1Pool, PoolKey};
use crate::upstream_tls::TlsTarget;

/// The read buffer's first size, and the least free room a read is given.
const READ_MIN: usize = 8 * 1024;
/// The most room a body read is given.
const READ_MAX: usize = 64 * 1024;

/// An upstream connection's transport.
pub(crate) enum Io {
    Plain(crate::batch::Batched),
    Tls(Box<tokio_rustls::client::TlsStream<crate::batch::Batched>>),
}

impl Io {
    fn tcp(&self) -> &TcpStream {
        match self {
            Io::Plain(s) => s.get_ref(),
            Io::Tls(s) => s.get_ref().0.get_ref(),
        }
    }
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

/// Counts a connection in the pool's open-connections gauge while it lives.
struct Open(Gauge);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// An upstream HTTP/1.1 connection between exchanges: its transport, its reused buffers,
/// and the pool it goes back to.
pub(crate) struct Conn {
    io: Io,
    /// Bytes read and not yet parsed (empty between exchanges).
    buf: BytesMut,
    /// The last request head's buffer, kept for the next one.
    out: Vec<u8>,
    /// Scratch space of the response head's parser.
    spans: Vec<parse::FieldSpan>,
    /// Exchanges this connection finished.
    used: u32,
    pool: Weak<Http1Pool>,
    key: PoolKey,
    _open: Open,
}

impl Conn {
    /// A new connection of `pool`'s, counted in `open` while it lives.
    pub(crate) fn new(io: Io, pool: Weak<Http1Pool>, key: PoolKey, open: Gauge) -> Conn {
        open.inc();
        Conn {
            io,
            buf: BytesMut::with_capacity(READ_MIN),
            out: Vec::new(),
            spans: Vec::new(),
            used: 0,
            pool,
            key,
            _open: Open(open),
        }
    }

    pub(crate) fn key(&self) -> &PoolKey {
        &self.key
    }

    /// Whether an idle connection can take a request: nothing arrived on it since its
    /// last exchange (an end, or bytes nobody asked for, close it). Costs no system call
    /// unless the socket became readable: the runtime's readiness tells.
    pub(crate) fn still_open(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        if self.io.tcp().poll_read_ready(&mut cx).is_pending() {
            return true;
        }
        // Readable: an end, stray bytes, or TLS records without data (session tickets),
        // which the TLS stream consumes and then finds nothing more.
        match poll_read_buf(Pin::new(&mut self.io), &mut cx, &mut self.buf) {
            Poll::Pending => self.buf.is_empty(),
            Poll::Ready(_) => false,
        }
    }

    /// Reads more into the buffer, giving it at least `room` free bytes (within
    /// [`READ_MIN`]..=[`READ_MAX`]). `Ok(0)`: the upstream closed.
    fn poll_read_more(&mut self, cx: &mut Context<'_>, room: usize) -> Poll<io::Result<usize>> {
        let room = room.clamp(READ_MIN, READ_MAX);
        if self.buf.capacity() - self.buf.len() < room {
            self.buf.reserve(room);
        }
        poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf)
    }

    /// Gives a connection whose exchange ended cleanly back to its pool.
    fn release(mut self: Box<Self>) {
        self.used += 1;
        if let Some(pool) = self.pool.upgrade() {
            pool.put(self);
        }
    }
}

/// How the request's body is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sending {
    /// No body.
    Nothing,
    /// This many bytes still to come.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
}

/// Encodes `parts` as a request head into `out` (cleared first), choosing the body's
/// framing as hyper's client did: a body that is already complete is sent without
/// `Transfer-Encoding`; an existing `Transfer-Encoding` means chunked (with `chunked`
/// added when it is not the last coding, and `Content-Length` dropped); an existing
/// `Content-Length` is kept; a body of known size gets one; GET, HEAD and CONNECT of
/// unknown size are sent without a body; anything else is chunked.
fn encode_head(parts: &http::request::Parts, body: &RequestBody, out: &mut Vec<u8>) -> Encoded {
    out.clear();
    let headers = &parts.headers;
    let http10 = parts.version == Version::HTTP_10;
    // Looked up only for a request with a body (most have none).
    let length = || parse::content_length(headers).ok().flatten();
    // (framing, drop TE fields, drop CL fields, a line to add)
    let (sending, drop_te, drop_cl, add): (Sending, bool, bool, Option<Added>) =
        if body.is_end_stream() {
            (Sending::Nothing, true, false, None)
        } else if http10 {
            match (length(), body.size_hint().exact()) {
                (Some(n), _) => (Sending::Length(n), true, false, None),
                (None, Some(n)) => (Sending::Length(n), true, true, Some(Added::Length(n))),
                (None, None) => (Sending::Nothing, true, false, None),
            }
        } else if headers.contains_key(header::TRANSFER_ENCODING) {
            let add = (!parse::ends_in_chunked(headers)).then_some(Added::Chunked);
            (Sending::Chunked, false, true, add)
        } else if let Some(n) = length() {
            (Sending::Length(n), false, false, None)
        } else if let Some(n) = body.size_hint().exact() {
            (Sending::Length(n), false, true, Some(Added::Length(n)))
        } else if matches!(parts.method, Method::GET | Method::HEAD | Method::CONNECT) {
            (Sending::Nothing, false, false, None)
        } else {
            (Sending::Chunked, false, false, Some(Added::Chunked))
        };
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    match parts.uri.path_and_query() {
        Some(pq) => out.extend_from_slice(pq.as_str().as_bytes()),
        None => out.push(b'/'),
    }
    out.extend_from_slice(if http10 {
        b" HTTP/1.0\r\n"
    } else {
        b" HTTP/1.1\r\n"
    });
    let mut upgrade = false;
    for (name, value) in headers {
        if (drop_te && name == header::TRANSFER_ENCODING)
            || (drop_cl && name == header::CONTENT_LENGTH)
        {
            continue;
        }
        upgrade |= name == header::UPGRADE;
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match add {
        Some(Added::Length(n)) => {
            out.extend_from_slice(b"content-length: ");
            let mut digits = [0u8; 20];
            out.extend_from_slice(decimal(n, &mut digits));
            out.extend_from_slice(b"\r\n");
        }
        Some(Added::Chunked) => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        None => {}
    }
    out.extend_from_slice(b"\r\n");
    let trailers = (sending == Sending::Chunked)
        .then(|| {
            let names: Vec<HeaderName> = headers
                .get_all(header::TRAILER)
                .iter()
                .flat_map(|v| v.as_bytes().split(|b| *b == b','))
                .filter_map(|n| HeaderName::from_bytes(n.trim_ascii()).ok())
                .collect();
            (!names.is_empty()).then(|| names.into_boxed_slice())
        })
        .flatten();
    Encoded {
        sending,
        trailers,
        upgrade,
    }
}

/// What [`encode_head`] decided besides the head's bytes.
struct Encoded {
    sending: Sending,
    /// The trailer fields a chunked body may send (those its `Trailer` names).
    trailers: Option<Box<[HeaderName]>>,
    /// The request asks for an upgrade (it has an `Upgrade` field).
    upgrade: bool,
}

/// A framing line [`encode_head`] adds.
enum Added {
    Length(u64),
    Chunked,
}

/// Why an exchange stopped before its response head.
enum Failed {
    /// For good.
    Error(ProxyError),
    /// A reused connection closed before answering a request that may go again.
    Resend,
}

type Connecting = Pin<Box<dyn Future<Output = Result<Box<Conn>, ProxyError>> + Send>>;

/// One request on an upstream HTTP/1.1 connection, until its response head.
pub(crate) struct Exchange {
    pool: Arc<Http1Pool>,
    key: PoolKey,
    tls: Option<Arc<TlsTarget>>,
    /// The circuit breaker's pending-requests gate, entered to open a connection.
    gate: Option<ConnectGate>,
    conn: Option<Box<Conn>>,
    connecting: Option<Connecting>,
    /// The encoded request head (kept until the answer, to send it again).
    head: Vec<u8>,
    body: RequestBody,
    sending: Sending,
    trailers: Option<Box<[HeaderName]>>,
    out: Outgoing,
    /// The body was handed over in full.
    body_done: bool,
    /// Everything was written and flushed.
    written: bool,
    head_request: bool,
    upgrade: bool,
    /// A request without a body and with an idempotent method: sent again on a new
    /// connection when a reused one closes before any byte of an answer.
    resendable: bool,
    /// Bytes of an answer arrived on this connection.
    answered: bool,
    done: bool,
}

impl Exchange {
    /// `req` (origin-form URI, Host set) for `key`, on `conn` when an idle one was
    /// taken, else on a connection made when first polled.
    pub(crate) fn new(
        pool: Arc<Http1Pool>,
        key: PoolKey,
        tls: Option<Arc<TlsTarget>>,
        gate: Option<ConnectGate>,
        mut conn: Option<Box<Conn>>,
        req: Request<RequestBody>,
    ) -> Exchange {
        let (parts, body) = req.into_parts();
        let mut head = conn
            .as_mut()
            .map(|c| std::mem::take(&mut c.out))
            .unwrap_or_default();
        let Encoded {
            sending,
            trailers,
            upgrade,
        } = encode_head(&parts, &body, &mut head);
        let resendable = sending == Sending::Nothing
            && matches!(
                parts.method,
                Method::GET
                    | Method::HEAD
                    | Method::OPTIONS
                    | Method::TRACE
                    | Method::PUT
                    | Method::DELETE
            );
        Exchange {
            pool,
            key,
            tls,
            gate,
            conn,
            connecting: None,
            head,
            body,
            sending,
            trailers,
            out: Outgoing::default(),
            body_done: sending == Sending::Nothing,
            written: false,
            head_request: parts.method == Method::HEAD,
            upgrade,
            resendable,
            answered: false,
            done: false,
        }
    }

    /// Stages the body's next frame, if it has one ready. `Ready(Err)`: the body failed.
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ProxyError>> {
        let frame = match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
            None => None,
            Some(Ok(frame)) => Some(frame),
            Some(Err(e)) => return Poll::Ready(Err(ProxyError::request_body(e))),
        };
        match (self.sending, frame) {
            (_, Some(frame)) if frame.is_data() => {
                let data = frame.into_data().unwrap_or_default();
                if data.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                match &mut self.sending {
                    Sending::Length(left) => {
                        let n = data.len() as u64;
                        if n > *left {
                            return Poll::Ready(Err(ProxyError::Upstream(
                                "request body longer than its content-length".into(),
                            )));
                        }
                        *left -= n;
                        self.out.stage(&[], data, b"");
                    }
                    Sending::Chunked => {
                        let mut line = [0u8; 24];
                        let len = hex_line(data.len(), &mut line);
                        self.out.stage(&line[..len], data, b"\r\n");
                    }
                    Sending::Nothing => {
                        return Poll::Ready(Err(ProxyError::Upstream(
                            "request body where none was announced".into(),
                        )));
                    }
                }
            }
            (Sending::Chunked, Some(frame)) => {
                let trailers = frame.into_trailers().unwrap_or_default();
                self.out.stage(
                    b"0\r\n",
                    encode_trailers(&trailers, self.trailers.as_deref()),
                    b"\r\n",
                );
                self.body_done = true;
            }
            // Trailers of a body with a length are not sent (nor were they by hyper).
            (_, Some(_)) => {}
            (Sending::Chunked, None) => {
                self.out.stage(b"0\r\n\r\n", Bytes::new(), b"");
                self.body_done = true;
            }
            (Sending::Length(left), None) if left > 0 => {
                return Poll::Ready(Err(ProxyError::Upstream(
                    "request body shorter than its content-length".into(),
                )));
            }
            (_, None) => self.body_done = true,
        }
        Poll::Ready(Ok(()))
    }

    /// Writes the request; `Ready(Ok)` once all of it is written and flushed.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Failed>> {
        loop {
            if !self.body_done && !self.out.has_body_part() {
                // The body's first frame goes out with the head when it is already here.
                if let Poll::Ready(r) = self.poll_body(cx) {
                    r.map_err(Failed::Error)?;
                    continue;
                }
            }
            let Some(conn) = self.conn.as_deref_mut() else {
                return Poll::Ready(Err(Failed::Error(ProxyError::Upstream(
                    "no connection".into(),
                ))));
            };
            if !self.out.is_empty(&self.head) {
                match self.out.poll_write(&self.head, &mut conn.io, cx) {
                    Poll::Ready(Ok(())) => continue,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(self.lost(e.into()))),
                    Poll::Pending => return Poll::Pending,
                }
            }
            if !self.body_done {
                // Waiting for the client's body: what was written goes out now (a TLS
                // stream may hold a record back until flushed).
                if let Poll::Ready(Err(e)) = Pin::new(&mut conn.io).poll_flush(cx) {
                    return Poll::Ready(Err(self.lost(e.into())));
                }
                return Poll::Pending;
            }
            return match Pin::new(&mut conn.io).poll_flush(cx) {
                Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
                Poll::Ready(Err(e)) => Poll::Ready(Err(self.lost(e.into()))),
                Poll::Pending => Poll::Pending,
            };
        }
    }

    /// The failure of a connection that broke: sent again when it may be.
    fn lost(&self, e: BoxError) -> Failed {
        let reused = self.conn.as_ref().is_some_and(|c| c.used > 0);
        if reused && self.resendable && !self.answered {
            Failed::Resend
        } else {
            Failed::Error(ProxyError::Upstream(e))
        }
    }

    /// Reads the response head (1xx heads other than 101 are skipped).
    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<Result<parse::Head, Failed>> {
        loop {
            let conn = self.conn.as_deref_mut().unwrap_or_else(|| unreachable!());
            if !conn.buf.is_empty() {
                match parse::parse_response(&mut conn.buf, self.head_request, &mut conn.spans) {
                    Err(e) => {
                        return Poll::Ready(Err(Failed::Error(ProxyError::Upstream(Box::new(e)))));
                    }
                    Ok(Some(head))
                        if head.status.is_informational()
                            && head.status != StatusCode::SWITCHING_PROTOCOLS =>
                    {
                        continue;
                    }
                    Ok(Some(head)) => return Poll::Ready(Ok(head)),
                    Ok(None) => {}
                }
            }
            match conn.poll_read_more(cx, READ_MIN) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(
                        self.lost("upstream closed the connection before answering".into())
                    ));
                }
                Poll::Ready(Ok(_)) => self.answered = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(self.lost(e.into()))),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// The response for `head`, its body reading the connection.
    fn respond(&mut self, head: parse::Head) -> Result<Response<ResponseBody>, ProxyError> {
        let mut conn = self.conn.take().unwrap_or_else(|| unreachable!());
        self.head.clear();
        conn.out = std::mem::take(&mut self.head);
        let switching = head.status == StatusCode::SWITCHING_PROTOCOLS;
        if switching && !self.upgrade {
            return Err(ProxyError::Upstream(
                "upstream switched protocols unasked".into(),
            ));
        }
        // A request not written in full (the upstream answered early) leaves the
        // connection in an unknown state.
        let reusable = head.keep_alive && self.written;
        let decoding = match head.framing {
            _ if switching => Decoding::Upgrade,
            Framing::Empty => Decoding::Length(0),
            Framing::Length(n) => Decoding::Length(n),
            Framing::Chunked => Decoding::Chunked(Chunked::new()),
            Framing::UntilClose => Decoding::UntilClose,
        };
        let body = ResponseBody {
            conn: Some(conn),
            decoding,
            reusable,
        };
        let mut resp = Response::new(body);
        *resp.status_mut() = head.status;
        *resp.version_mut() = head.version;
        *resp.headers_mut() = head.headers;
        if let Some(reason) = head.reason
            && let Ok(reason) = hyper::ext::ReasonPhrase::try_from(reason)
        {
            resp.extensions_mut().insert(reason);
        }
        Ok(resp)
    }
}

impl Future for Exchange {
    type Output = Result<Response<ResponseBody>, ProxyError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(Err(ProxyError::Upstream("polled after completion".into())));
        }
        loop {
            if this.conn.is_none() {
                let connecting = this.connecting.get_or_insert_with(|| {
                    let pool = Arc::clone(&this.pool);
                    let key = this.key.clone();
                    let tls = this.tls.clone();
                    let gate = this.gate.take();
                    Box::pin(async move {
                        // A pending request from here until its connection is up: a
                        // circuit breaker may refuse one more.
                        let pending = gate
                            .map(ConnectGate::enter)
                            .transpose()
                            .map_err(ProxyError::Overloaded)?;
                        let conn = pool.connect(key, tls.as_deref()).await?;
                        drop(pending);
                        Ok(conn)
                    })
                });
                match ready!(connecting.as_mut().poll(cx)) {
                    Ok(conn) => {
                        this.connecting = None;
                        this.conn = Some(conn);
                    }
                    Err(e) => {
                        this.done = true;
                        return Poll::Ready(Err(e));
                    }
                }
            }
            let failed = if this.written {
                match ready!(this.poll_head(cx)) {
                    Ok(head) => {
                        this.done = true;
                        return Poll::Ready(this.respond(head));
                    }
                    Err(f) => f,
                }
            } else {
                match this.poll_send(cx) {
                    Poll::Ready(Ok(())) => {
                        this.written = true;
                        continue;
                    }
                    Poll::Ready(Err(f)) => f,
                    // The upstream may answer before it takes the whole body (an early
                    // error): the answer is taken then, and the connection not reused.
                    Poll::Pending => match ready!(this.poll_head(cx)) {
                        Ok(head) => {
                            this.done = true;
                            return Poll::Ready(this.respond(head));
                        }
                        Err(f) => f,
                    },
                }
            };
            match failed {
                Failed::Error(e) => {
                    this.done = true;
                    return Poll::Ready(Err(e));
                }
                Failed::Resend => {
                    // Once: the next connection is new (or another idle one, which may be
                    // closed as well; a new one is made then).
                    this.conn = this.pool.take(&this.key);
                    this.out = Outgoing::default();
                    this.written = false;
                    this.answered = false;
                }
            }
        }
    }
}

/// How the rest of a response body is delimited.
enum Decoding {
    /// This many bytes still to come (0: ended).
    Length(u64),
    Chunked(Chunked),
    UntilClose,
    /// A 101: the connection is the tunnel's ([`ResponseBody::upgrade`]).
    Upgrade,
    /// Ended (or failed).
    Ended,
}

/// An upstream HTTP/1.1 response body, read from its connection; the connection goes
/// back to the pool when the body ended cleanly on a connection that persists.
pub(crate) struct ResponseBody {
    conn: Option<Box<Conn>>,
    decoding: Decoding,
    reusable: bool,
}

impl ResponseBody {
    /// The connection, after a `101 Switching Protocols`, for the tunnel.
    pub(crate) fn upgrade(&mut self) -> Option<Upgraded> {
        if !matches!(self.decoding, Decoding::Upgrade) {
            return None;
        }
        self.decoding = Decoding::Ended;
        let conn = self.conn.take()?;
        let Conn { io, buf, .. } = *conn;
        Some(Upgraded { io, read: buf })
    }

    /// The body ended: the connection goes back to the pool if it may.
    fn end(&mut self) {
        self.decoding = Decoding::Ended;
        if let Some(conn) = self.conn.take()
            && self.reusable
            && conn.buf.is_empty()
        {
            conn.release();
        }
    }

    /// The body failed: the connection is closed.
    fn fail(&mut self, e: BoxError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.decoding = Decoding::Ended;
        self.conn = None;
        Poll::Ready(Some(Err(e)))
    }
}

impl Drop for ResponseBody {
    /// A body that ended without being read to its end (an empty one: the server does
    /// not poll it) gives its connection back; any other closes it.
    fn drop(&mut self) {
        if matches!(self.decoding, Decoding::Length(0)) {
            self.end();
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_deref_mut() else {
                return Poll::Ready(None);
            };
            match &mut this.decoding {
                Decoding::Length(0) => {
                    this.end();
                    return Poll::Ready(None);
                }
                Decoding::Length(left) => {
                    if !conn.buf.is_empty() {
                        let n = conn
                            .buf
                            .len()
                            .min(usize::try_from(*left).unwrap_or(usize::MAX));
                        *left -= n as u64;
                        let data = conn.buf.split_to(n).freeze();
                        if *left == 0 {
                            this.end();
                        }
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    let room = usize::try_from(*left).unwrap_or(usize::MAX);
                    match ready!(conn.poll_read_more(cx, room)) {
                        Ok(0) => {
                            return this
                                .fail("upstream closed the connection within the body".into());
                        }
                        Ok(_) => {}
                        Err(e) => return this.fail(e.into()),
                    }
                }
                Decoding::Chunked(chunked) => match chunked.decode(&mut conn.buf, READ_MAX) {
                    Ok(Decoded::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Ok(Decoded::End(trailers)) => {
                        this.end();
                        return Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))));
                    }
                    Ok(Decoded::More) => match ready!(conn.poll_read_more(cx, READ_MAX)) {
                        Ok(0) => {
                            return this
                                .fail("upstream closed the connection within the body".into());
                        }
                        Ok(_) => {}
                        Err(e) => return this.fail(e.into()),
                    },
                    Err(e) => return this.fail(Box::new(e)),
                },
                Decoding::UntilClose => {
                    if !conn.buf.is_empty() {
                        let data = conn.buf.split().freeze();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    match ready!(conn.poll_read_more(cx, READ_MAX)) {
                        Ok(0) => {
                            this.decoding = Decoding::Ended;
                            this.conn = None;
                            return Poll::Ready(None);
                        }
                        Ok(_) => {}
                        Err(e) => return this.fail(e.into()),
                    }
                }
                Decoding::Upgrade | Decoding::Ended => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(
            self.decoding,
            Decoding::Length(0) | Decoding::Ended | Decoding::Upgrade
        )
    }

    fn size_hint(&self) -> SizeHint {
        match self.decoding {
            Decoding::Length(n) => SizeHint::with_exact(n),
            Decoding::Ended | Decoding::Upgrade => SizeHint::with_exact(0),
            Decoding::Chunked(_) | Decoding::UntilClose => SizeHint::default(),
        }
    }
}

/// An upstream connection after a `101 Switching Protocols`: what was read past the
/// response head first, then the connection.
pub(crate) struct Upgraded {
    io: Io,
    read: BytesMut,
}

impl AsyncRead for Upgraded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.read.is_empty() {
            let n = this.read.len().min(buf.remaining());
            buf.put_slice(&this.read.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Upgraded {
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
}

#[cfg(test)]
mod tests;
