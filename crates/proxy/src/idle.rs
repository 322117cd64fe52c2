//! Connection-state timeouts: a client connection is closed when it stays too long in a
//! state where it asks nothing of the proxy.
//!
//! | state | limit | then |
//! |---|---|---|
//! | accepted (or TLS done), nothing read yet | `handshake` | close |
//! | HTTP/1.1 request head begun, not ended | `request_header` | close |
//! | no request in flight (keep-alive, HTTP/2 without streams) | `idle` | HTTP/1.1: close; HTTP/2: GOAWAY, then close after `handshake` |
//!
//! (A request in flight is bounded per request: body idle and upstream response, see
//! `crate::body` and `server::forward`.)
//!
//! hyper has none of these except an HTTP/1.1 header-read timeout, and that one starts when
//! a connection goes idle (so it would also be the keep-alive limit) and boxes and arms a
//! new timer for every request. Here the request path only counts: a request adds to a
//! counter shared with its connection when it starts and subtracts when its response
//! body is dropped ([`Tracked`], two atomic operations), and the connection's IO sets a
//! flag when a read returns bytes ([`Watch`], one plain store). The connection's task
//! polls hyper's connection inside [`Watched`], which reads those after every poll, notes
//! the time when the state changed, and keeps one timer per connection. The timer is
//! moved only when it fires early (to the current state's later deadline) or when a state
//! with an earlier deadline begins (a request head that arrives in pieces): a keep-alive
//! request that arrives whole re-arms nothing.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Instant;

use bytes::Bytes;
use http::Response;
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;
use weir_model::ConnectionTimeouts;

use crate::drain::Serve;
use crate::metrics::BoundsMetrics;
use crate::server::ProxyBody;

const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// One started request in [`ConnState::requests`]'s high half, plus one in flight.
const START: u64 = (1 << 32) + 1;

/// What a connection's IO, its requests and its [`Watched`] task share.
#[derive(Debug, Default)]
pub(crate) struct ConnState {
    /// Set when a read returned bytes; cleared by the watcher.
    read: AtomicBool,
    /// High half: requests started (wrapping); low half: requests in flight.
    requests: AtomicU64,
    /// The connection speaks HTTP/2 (from ALPN, or the client preface on plaintext).
    h2: AtomicBool,
}

impl ConnState {
    /// State for a new connection; `h2` when ALPN already chose HTTP/2.
    pub(crate) fn new(h2: bool) -> Arc<ConnState> {
        Arc::new(ConnState {
            h2: AtomicBool::new(h2),
            ..ConnState::default()
        })
    }
}

// ---------------------------------------------------------------- IO

pin_project_lite::pin_project! {
    /// A connection's byte stream, noting reads for its [`Watched`] task.
    pub(crate) struct Watch<T> {
        #[pin]
        io: T,
        state: Arc<ConnState>,
        // Bytes of the HTTP/2 client preface seen so far, or `KNOWN`.
        preface: u8,
    }
}

const KNOWN: u8 = u8::MAX;

impl<T> Watch<T> {
    /// Wraps `io`; `sniff` when the protocol is not known yet (plaintext: HTTP/1.1 or h2c
    /// by the client preface, as hyper-util's auto server decides).
    pub(crate) fn new(io: T, state: Arc<ConnState>, sniff: bool) -> Watch<T> {
        Watch {
            io,
            state,
            preface: if sniff { 0 } else { KNOWN },
        }
    }
}

/// Matches `got` against the rest of the HTTP/2 preface.
fn sniff(matched: &mut u8, got: &[u8], state: &ConnState) {
    let at = usize::from(*matched);
    let n = got.len().min(H2_PREFACE.len() - at);
    if got[..n] != H2_PREFACE[at..at + n] {
        *matched = KNOWN;
    } else if at + n == H2_PREFACE.len() {
        state.h2.store(true, Ordering::Relaxed);
        *matched = KNOWN;
    } else {
        // < 24, fits
        *matched = (at + n) as u8;
    }
}

impl<T: AsyncRead> AsyncRead for Watch<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let polled = this.io.poll_read(cx, buf);
        let got = &buf.filled()[before..];
        if !got.is_empty() {
            this.state.read.store(true, Ordering::Relaxed);
            if *this.preface != KNOWN {
                sniff(this.preface, got, this.state);
            }
        }
        polled
    }
}

impl<T: AsyncWrite> AsyncWrite for Watch<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

// ---------------------------------------------------------------- requests

/// One request in flight: counted from the service call until its response body (or,
/// if it never produced one, its future) is dropped.
struct InFlight(Arc<ConnState>);

impl InFlight {
    fn start(state: &Arc<ConnState>) -> InFlight {
        state.requests.fetch_add(START, Ordering::Relaxed);
        InFlight(Arc::clone(state))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.requests.fetch_sub(1, Ordering::Relaxed);
    }
}

pin_project_lite::pin_project! {
    /// A request's future, counted in flight on its connection; its response body carries
    /// the count on until it is dropped.
    pub(crate) struct Tracked<F> {
        #[pin]
        inner: F,
        in_flight: Option<InFlight>,
    }
}

impl<F> Tracked<F> {
    /// Counts a request that `inner` serves.
    pub(crate) fn new(state: &Arc<ConnState>, inner: F) -> Tracked<F> {
        Tracked {
            inner,
            in_flight: Some(InFlight::start(state)),
        }
    }
}

impl<F> Future for Tracked<F>
where
    F: Future<Output = Result<Response<ProxyBody>, Infallible>>,
{
    type Output = Result<Response<TrackedBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let resp = match ready!(this.inner.poll(cx)) {
            Ok(resp) => resp,
            Err(never) => match never {},
        };
        let in_flight = this.in_flight.take();
        Poll::Ready(Ok(resp.map(|inner| TrackedBody {
            inner,
            _in_flight: in_flight,
        })))
    }
}

/// A response body that keeps its request counted in flight until dropped.
pub(crate) struct TrackedBody {
    inner: ProxyBody,
    _in_flight: Option<InFlight>,
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = crate::error::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        // ProxyBody is Unpin.
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

// ---------------------------------------------------------------- the connection

/// A served connection that can be asked to finish gracefully.
pub(crate) trait Graceful: Future + Unpin {
    /// HTTP/1.1: close after the current response; HTTP/2: GOAWAY.
    fn shut_down(&mut self);
}

impl<C: crate::drain::Shutdown> Graceful for Serve<'_, C> {
    fn shut_down(&mut self) {
        Serve::shut_down(self);
    }
}

/// Where a connection is, as far as its timeouts go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Nothing read since accept (or since the TLS handshake).
    Handshake,
    /// HTTP/1.1: bytes of a request head read, the request not started yet.
    Head,
    /// No request in flight.
    Idle,
    /// Requests in flight: bounded per request; the timer only re-checks every `idle`.
    Busy,
    /// HTTP/2 after an idle GOAWAY: the client gets `handshake` to close.
    Closing,
}

/// A connection served under its listener's connection-state timeouts. Resolves to
/// `None` when a timeout closed it.
pub(crate) struct Watched<'a, C> {
    conn: C,
    state: Arc<ConnState>,
    timeouts: &'a ConnectionTimeouts,
    metrics: &'a BoundsMetrics,
    phase: Phase,
    /// When `phase` began (or, for `Idle` and `Busy`, when a request last started).
    since: Instant,
    /// Requests started, as last seen.
    started: u32,
    timer: Option<Pin<Box<Sleep>>>,
    /// The deadline the timer is set to, while it has not fired.
    armed: Option<Instant>,
    /// Times the timer was set (tests check the keep-alive path sets it once).
    #[cfg(test)]
    arms: usize,
}

impl<'a, C: Graceful> Watched<'a, C> {
    /// Watches `conn`, which has read nothing since `since` (accept, or the end of the TLS
    /// handshake).
    pub(crate) fn new(
        conn: C,
        state: Arc<ConnState>,
        timeouts: &'a ConnectionTimeouts,
        metrics: &'a BoundsMetrics,
        since: Instant,
    ) -> Watched<'a, C> {
        Watched {
            conn,
            state,
            timeouts,
            metrics,
            phase: Phase::Handshake,
            since,
            started: 0,
            timer: None,
            armed: None,
            #[cfg(test)]
            arms: 0,
        }
    }

    /// Reads what the IO and the requests recorded since the last poll.
    fn observe(&mut self) {
        let requests = self.state.requests.load(Ordering::Relaxed);
        let started = (requests >> 32) as u32;
        let in_flight = requests & u64::from(u32::MAX);
        let read = self.state.read.load(Ordering::Relaxed);
        if read {
            self.state.read.store(false, Ordering::Relaxed);
        }
        let h2 = self.state.h2.load(Ordering::Relaxed);
        let activity = started != self.started;
        self.started = started;
        let next = match self.phase {
            Phase::Closing => return,
            _ if in_flight > 0 => Phase::Busy,
            _ if activity => Phase::Idle,
            Phase::Busy => Phase::Idle,
            // HTTP/2 frames without a stream (SETTINGS, PING) are not a request.
            Phase::Head if h2 => Phase::Idle,
            Phase::Handshake | Phase::Idle if read => {
                if h2 {
                    Phase::Idle
                } else {
                    Phase::Head
                }
            }
            p => p,
        };
        if next != self.phase || activity {
            self.phase = next;
            self.since = Instant::now();
        }
    }

    /// When the current phase runs out, if it has a limit.
    fn deadline(&self) -> Option<Instant> {
        let t = self.timeouts;
        let limit = match self.phase {
            Phase::Handshake => t.handshake,
            Phase::Head => t.request_header,
            Phase::Idle | Phase::Busy => t.idle,
            // `idle` fired to get here, so it is set.
            Phase::Closing if t.handshake.is_zero() => t.idle,
            Phase::Closing => t.handshake,
        };
        (!limit.is_zero()).then(|| self.since + limit)
    }

    /// The current phase ran out: whether to close the connection now.
    fn expire(&mut self) -> bool {
        let m = self.metrics;
        let in_flight = self.state.requests.load(Ordering::Relaxed) & u64::from(u32::MAX);
        match self.phase {
            Phase::Handshake => {
                m.timeout_handshake.inc();
                true
            }
            Phase::Head => {
                m.timeout_request_header.inc();
                true
            }
            Phase::Idle => {
                m.timeout_idle.inc();
                if !self.state.h2.load(Ordering::Relaxed) {
                    return true;
                }
                // GOAWAY lets the client tell a closing connection from a broken one.
                self.conn.shut_down();
                self.phase = Phase::Closing;
                self.since = Instant::now();
                false
            }
            Phase::Closing if in_flight == 0 => true,
            // Streams opened just before the GOAWAY finish under their own limits.
            Phase::Busy | Phase::Closing => {
                self.since = Instant::now();
                false
            }
        }
    }

    /// Sets the timer to `deadline` and polls it (which registers this task).
    fn arm(&mut self, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
        self.armed = Some(deadline);
        #[cfg(test)]
        {
            self.arms += 1;
        }
        let timer = match &mut self.timer {
            Some(t) => {
                t.as_mut().reset(deadline.into());
                t
            }
            None => self
                .timer
                .insert(Box::pin(tokio::time::sleep_until(deadline.into()))),
        };
        timer.as_mut().poll(cx)
    }
}

impl<C: Graceful> Future for Watched<'_, C> {
    type Output = Option<C::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // Bounded: each turn returns, closes, or moves the timer to a deadline in the
        // future (`Closing` is entered once).
        loop {
            if let Poll::Ready(out) = Pin::new(&mut this.conn).poll(cx) {
                return Poll::Ready(Some(out));
            }
            this.observe();
            let deadline = this.deadline();
            let fired = match (deadline, this.armed) {
                (Some(d), armed) if armed.is_none_or(|a| d < a) => this.arm(d, cx).is_ready(),
                // Polled every time (two atomics): a poll refused by tokio's cooperative
                // budget would otherwise leave the task unregistered with the timer.
                (_, Some(_)) => this
                    .timer
                    .as_mut()
                    .is_some_and(|t| t.as_mut().poll(cx).is_ready()),
                (_, None) => false,
            };
            if !fired {
                return Poll::Pending;
            }
            this.armed = None;
            if deadline.is_some_and(|d| Instant::now() >= d) && this.expire() {
                return Poll::Ready(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preface_sniffing() {
        let s = ConnState::new(false);
        let mut m = 0;
        sniff(&mut m, b"PRI * HTTP", &s);
        assert_eq!(m, 10);
        sniff(&mut m, b"/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04", &s);
        assert_eq!(m, KNOWN);
        assert!(s.h2.load(Ordering::Relaxed));

        let s = ConnState::new(false);
        let mut m = 0;
        sniff(&mut m, b"P", &s);
        sniff(&mut m, b"OST / HTTP/1.1\r\n", &s);
        assert_eq!(m, KNOWN);
        assert!(!s.h2.load(Ordering::Relaxed));
    }

    /// A connection whose every poll serves one whole request (the keep-alive fast
    /// path: head read, answered and finished within one poll), `left` times.
    struct Requests {
        state: Arc<ConnState>,
        left: u32,
    }

    impl Future for Requests {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.left == 0 {
                return Poll::Ready(());
            }
            self.left -= 1;
            self.state.read.store(true, Ordering::Relaxed);
            drop(InFlight::start(&self.state));
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    impl Graceful for Requests {
        fn shut_down(&mut self) {}
    }

    #[tokio::test]
    async fn keep_alive_requests_do_not_move_the_timer() {
        let state = ConnState::new(false);
        let timeouts = ConnectionTimeouts::default();
        let metrics = crate::metrics::Metrics::register(&mut Default::default()).listener("g", "l");
        let conn = Requests {
            state: Arc::clone(&state),
            left: 1000,
        };
        let mut w = Watched::new(conn, state, &timeouts, &metrics.bounds, Instant::now());
        let out = std::future::poll_fn(|cx| Pin::new(&mut w).poll(cx)).await;
        assert_eq!(out, Some(()));
        assert_eq!(w.phase, Phase::Idle);
        assert_eq!(w.arms, 1, "the timer was set per request");
    }

    #[test]
    fn requests_are_counted_until_their_body_is_dropped() {
        let s = ConnState::new(false);
        let a = InFlight::start(&s);
        let b = InFlight::start(&s);
        assert_eq!(s.requests.load(Ordering::Relaxed), (2 << 32) + 2);
        drop(a);
        drop(b);
        assert_eq!(s.requests.load(Ordering::Relaxed), 2 << 32);
    }
}
