//! Request bodies that stop arriving: a body that delivers no data for the listener's
//! `body_idle` timeout fails, and a request whose body stalled before the upstream
//! answered is answered 408.
//!
//! A stalled body is otherwise invisible: the upstream waits for the rest of it, weir waits
//! for the upstream, and the connection (HTTP/1.1) or stream (HTTP/2) is held until some
//! other timeout. Failing the body makes the upstream client abort the exchange; the
//! [`Stall`] flag it sets tells the request why (the HTTP/1.1 client reports a body error,
//! the HTTP/2 client only a stream it reset itself).
//!
//! The limit counts only time spent waiting for the client: from a poll that finds no
//! data until data arrives. Time in which the upstream does not ask for more (its
//! backpressure, during which an HTTP/2 client cannot send) is not the client's fault.
//! The timer is armed only when the body has to wait (a body that arrives with its head,
//! and a request without a body, never arm one), and it is not reset per frame: a wait
//! records its start, and a timer that fires early is moved to the real deadline.
//!
//! A body may also be watched for an upstream that stops taking it (a policy's
//! `timeouts.backend_send`, ingress-nginx's `proxy-send-timeout`): the body notes when it
//! hands the upstream connection a data frame and when the connection asks for the next
//! one ([`SendClock`]); the attempt waiting for the response head ([`SendWatch`]) fails
//! with a timeout once a frame has been owed for longer than the limit. The upstream
//! client asks for the next frame only when it could write (or buffer) the last one, so
//! the time in between is the time a write to the upstream stays pending. A watched body
//! hands its data in slices of at most [`SEND_SLICE`] bytes (a client's frame can be
//! hundreds of KiB, which a slow but steady reader would take seconds to make room for),
//! so progress is seen per slice. Waiting for the client's data, and waiting for the
//! response once the body is handed over, are not counted.
//!
//! A body may also be capped (a policy's `requestLimits.maxBodyBytes`, for bodies whose
//! size was not declared up front): past the cap it fails the same way, and the request
//! is answered 413.

use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::Sleep;

use crate::error::{BoxError, ProxyError};

/// A client's request body as the server read it: hyper's (HTTP/2, and HTTP/1.1
/// connections hyper serves), or weir's own HTTP/1.1 server's (none, or `Content-Length`
/// bytes the connection's loop hands over, see [`crate::h1::server`]).
pub(crate) enum ClientBody {
    Hyper(Incoming),
    Empty,
    Lean(crate::h1::server::LeanBody),
    /// weir's own HTTP/2 server's ([`crate::h2_server`]).
    H2(weir_h2::server::RecvBody),
}

impl From<Incoming> for ClientBody {
    fn from(body: Incoming) -> ClientBody {
        ClientBody::Hyper(body)
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ClientBody::Hyper(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            ClientBody::Empty => Poll::Ready(None),
            ClientBody::Lean(b) => b.poll_frame(cx),
            ClientBody::H2(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Hyper(b) => b.is_end_stream(),
            ClientBody::Empty => true,
            ClientBody::Lean(b) => b.is_end_stream(),
            ClientBody::H2(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Hyper(b) => b.size_hint(),
            ClientBody::Empty => SizeHint::with_exact(0),
            ClientBody::Lean(b) => b.size_hint(),
            ClientBody::H2(b) => b.size_hint(),
        }
    }
}

/// A client's request body on its way upstream, failing after `body_idle` without data.
pub(crate) struct RequestBody {
    /// `None`: an empty body.
    inner: Option<Source>,
    /// `None`: no limit, or the limit already fired.
    idle: Option<Duration>,
    /// Made the first time the body had to wait; boxed because most bodies never wait.
    wait: Option<Pin<Box<IdleWait>>>,
    stall: Option<Stall>,
    /// The send timeout's state, when the attempt is watched ([`RequestBody::watch_sends`]);
    /// boxed: most requests have none, and this body is part of every request future.
    send: Option<Box<Sending>>,
}

/// The largest data frame a body watched by a send timeout hands the upstream connection.
pub(crate) const SEND_SLICE: usize = 16 * 1024;

/// A watched body's side of its send timeout.
struct Sending {
    clock: Arc<SendClock>,
    /// The rest of the source's last data frame, handed before the source is read again.
    rest: Bytes,
}

pin_project_lite::pin_project! {
    /// The idle timer of a [`RequestBody`] that had to wait for data.
    struct IdleWait {
        #[pin]
        timer: Sleep,
        // When the current wait for data began, if the last poll found none.
        since: Option<Instant>,
    }
}

/// When a [`RequestBody`] last handed its upstream connection a data frame the
/// connection has not asked past yet; shared with the attempt's [`SendWatch`].
#[derive(Debug)]
pub(crate) struct SendClock {
    limit: Duration,
    base: Instant,
    /// 0: nothing owed; else the nanoseconds from `base` to the hand-over, plus one.
    handed: AtomicU64,
}

impl SendClock {
    fn handed(&self) {
        let since = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        self.handed.store(since + 1, Ordering::Release);
    }

    fn taken(&self) {
        self.handed.store(0, Ordering::Release);
    }

    /// When the owed frame's time runs out (`None`: nothing is owed).
    fn deadline(&self) -> Option<Instant> {
        match self.handed.load(Ordering::Acquire) {
            0 => None,
            n => Some(self.base + Duration::from_nanos(n - 1) + self.limit),
        }
    }
}

/// The attempt's side of a [`SendClock`]: a timer that looks at the clock at the
/// deadline of the frame owed, or a limit from now when none is (a frame handed
/// meanwhile is then owed for less than the limit when the timer fires, and the timer
/// moves to its deadline), so a stalled write is noticed at its deadline.
pub(crate) struct SendWatch {
    clock: Arc<SendClock>,
    timer: Pin<Box<Sleep>>,
}

impl SendWatch {
    /// Ready once a frame has been owed for longer than the limit.
    pub(crate) fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        // Bounded: each turn returns, or moves the timer past now.
        loop {
            let now = Instant::now();
            let next = match self.clock.deadline() {
                Some(deadline) if deadline <= now => return Poll::Ready(()),
                Some(deadline) => deadline,
                None => now + self.clock.limit,
            };
            if self.timer.deadline() != next.into() {
                self.timer.as_mut().reset(next.into());
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

/// Where a [`RequestBody`]'s frames come from (one field: it is part of every request
/// future, which has a size budget).
enum Source {
    /// The client.
    Client(ClientBody),
    /// An attempt of a retried request: a [`Replay`]'s (boxed: most bodies are not
    /// retried).
    Tee(Box<TeeReader>),
    /// The client, with at most `left` more bytes (boxed: most bodies are not capped).
    Capped(Box<Capped>),
}

/// A client body with a cap on the bytes it may still send.
struct Capped {
    body: ClientBody,
    left: u64,
}

/// Set when a [`RequestBody`] gave up (waiting, or past its cap); shared with the
/// upstream response future, which then reports the client's fault.
#[derive(Clone, Debug)]
pub(crate) struct Stall(Arc<AtomicU8>);

/// [`Stall`] values: the body is fine, stalled, or over its cap.
const FINE: u8 = 0;
const STALLED: u8 = 1;
const OVER_CAP: u8 = 2;

impl Stall {
    fn new() -> Stall {
        Stall(Arc::new(AtomicU8::new(FINE)))
    }

    /// `err` unless the body gave up: then the request failed because of the client.
    pub(crate) fn explain(&self, err: ProxyError) -> ProxyError {
        match self.0.load(Ordering::Acquire) {
            STALLED => ProxyError::BodyTimeout,
            OVER_CAP => ProxyError::RequestTooLarge { head: false },
            _ => err,
        }
    }
}

/// The error a body over its cap ends with (seen by the upstream client).
#[derive(Debug, thiserror::Error)]
#[error("request body larger than allowed")]
pub(crate) struct BodyTooLarge;

/// The error a stalled body ends with (seen by the upstream client).
#[derive(Debug, thiserror::Error)]
#[error("request body idle timeout")]
pub(crate) struct BodyIdle;

impl RequestBody {
    /// An empty body (a request the gateway makes itself).
    pub(crate) fn empty() -> RequestBody {
        RequestBody {
            inner: None,
            idle: None,
            wait: None,
            stall: None,
            send: None,
        }
    }

    /// Wraps `inner`; `idle` of zero means no limit.
    pub(crate) fn new(inner: impl Into<ClientBody>, idle: Duration) -> RequestBody {
        let inner = inner.into();
        // A body that is already complete is never polled for data: no flag, no timer.
        let limited = !idle.is_zero() && !inner.is_end_stream();
        RequestBody {
            inner: Some(Source::Client(inner)),
            idle: limited.then_some(idle),
            wait: None,
            stall: limited.then(Stall::new),
            send: None,
        }
    }

    /// This body, failing once more than `max` bytes arrived (`None`: no cap). Set before
    /// the body is read or made [`RequestBody::replayable`].
    pub(crate) fn capped(mut self, max: Option<u64>) -> RequestBody {
        // A body whose declared length fits (checked in phase 2) needs no cap.
        let declared_fits =
            |b: &ClientBody, max: u64| b.size_hint().upper().is_some_and(|u| u <= max);
        if let (Some(max), Some(Source::Client(b))) = (max, &self.inner)
            && !declared_fits(b, max)
            && let Some(Source::Client(body)) = self.inner.take()
        {
            self.inner = Some(Source::Capped(Box::new(Capped { body, left: max })));
            self.stall.get_or_insert_with(Stall::new);
        }
        self
    }

    /// A body without an idle limit.
    #[cfg(test)]
    pub(crate) fn unlimited(inner: Incoming) -> RequestBody {
        RequestBody::new(inner, Duration::ZERO)
    }

    /// This body, noting for the attempt's [`SendWatch`] how long its upstream connection
    /// takes to ask for the next frame, when `limit` is set (the send timeout) and the body
    /// has data to send.
    pub(crate) fn watch_sends(mut self, limit: Option<Duration>) -> RequestBody {
        self.send = match limit {
            Some(limit) if !self.is_end_stream() => Some(Box::new(Sending {
                clock: Arc::new(SendClock {
                    limit,
                    base: Instant::now(),
                    handed: AtomicU64::new(0),
                }),
                rest: Bytes::new(),
            })),
            _ => None,
        };
        self
    }

    /// The watch of this body's send timeout (none without one).
    pub(crate) fn send_watch(&self) -> Option<Box<SendWatch>> {
        let clock = Arc::clone(&self.send.as_ref()?.clock);
        let timer = Box::pin(tokio::time::sleep(clock.limit));
        Some(Box::new(SendWatch { clock, timer }))
    }

    /// The flag set if this body stalls (none when it cannot).
    pub(crate) fn stall(&self) -> Option<Stall> {
        self.stall.clone()
    }

    /// A body whose data is kept as it is sent, up to `limit` bytes, so that another
    /// attempt can send it again ([`Replay`]).
    pub(crate) fn replayable(self, limit: usize) -> Replay {
        // Most retried requests have no body (GET, HEAD, DELETE): nothing to keep, share
        // or lock, and every attempt sends an empty body.
        if self.is_end_stream() {
            return Replay(None);
        }
        let stall = self.stall.clone();
        let ended = false;
        Replay(Some(Arc::new(Mutex::new(Tee {
            source: self,
            frames: std::collections::VecDeque::new(),
            read: 0,
            kept: 0,
            limit,
            trailers: None,
            ended,
            lost: false,
            current: 0,
            stall,
        }))))
    }
}

/// A request body shared by the attempts of a retried request ([`crate::retry`]): each
/// attempt's body ([`Replay::body`]) first sends the data earlier attempts read from the
/// client, then reads on. The first attempt streams the body as it arrives (a streaming
/// call is never held back); the data is kept up to a limit, past which the kept data is
/// dropped and no further attempt can be made ([`Replay::can_replay`]).
/// `None`: the request has no body.
pub(crate) struct Replay(Option<Arc<Mutex<Tee>>>);

struct Tee {
    /// The client's body.
    source: RequestBody,
    /// The last data frames read, while the data read stays within `limit`.
    frames: std::collections::VecDeque<Bytes>,
    /// Data frames read from `source`.
    read: usize,
    /// Bytes read from `source`.
    kept: usize,
    limit: usize,
    trailers: Option<http::HeaderMap>,
    /// `source` ended.
    ended: bool,
    /// Data was read and not kept (past the limit), or the body failed.
    lost: bool,
    /// The attempt whose reader may read on (an earlier attempt's connection may still
    /// poll its body: it fails instead of taking data or the wake-up from this one).
    current: u32,
    stall: Option<Stall>,
}

impl Replay {
    /// The body of a request without one: every attempt sends an empty body.
    pub(crate) fn nothing() -> Replay {
        Replay(None)
    }

    /// The body of the next attempt.
    pub(crate) fn body(&self) -> RequestBody {
        let tee = match &self.0 {
            None => return RequestBody::empty(),
            Some(tee) => tee,
        };
        let (stall, attempt) = tee
            .lock()
            .map(|mut t| {
                t.current += 1;
                (t.stall.clone(), t.current)
            })
            .unwrap_or((None, 0));
        RequestBody {
            inner: Some(Source::Tee(Box::new(TeeReader {
                tee: Arc::clone(tee),
                next: 0,
                done: false,
                attempt,
            }))),
            idle: None,
            wait: None,
            stall,
            send: None,
        }
    }

    /// Whether another attempt can send the whole body: nothing read was dropped.
    pub(crate) fn can_replay(&self) -> bool {
        self.0
            .as_ref()
            .is_none_or(|tee| tee.lock().is_ok_and(|t| !t.lost))
    }
}

/// One attempt's view of a [`Replay`].
struct TeeReader {
    tee: Arc<Mutex<Tee>>,
    /// Data frames this attempt has sent.
    next: usize,
    done: bool,
    /// Which attempt this is (see `Tee::current`).
    attempt: u32,
}

impl TeeReader {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let Ok(mut t) = self.tee.lock() else {
            return Poll::Ready(Some(Err("request body poisoned".into())));
        };
        if t.current != self.attempt {
            self.done = true;
            return Poll::Ready(Some(Err("request body taken by a retry".into())));
        }
        if self.next < t.read {
            // Read by an earlier attempt: sent again from what was kept.
            let first_kept = t.read - t.frames.len();
            let Some(data) = self
                .next
                .checked_sub(first_kept)
                .and_then(|i| t.frames.get(i))
            else {
                return Poll::Ready(Some(Err("request body no longer kept".into())));
            };
            let data = data.clone();
            self.next += 1;
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if t.ended {
            self.done = true;
            return Poll::Ready(t.trailers.clone().map(|h| Ok(Frame::trailers(h))));
        }
        let t = &mut *t;
        match Pin::new(&mut t.source).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                t.ended = true;
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                t.lost = true;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    t.read += 1;
                    self.next += 1;
                    t.kept = t.kept.saturating_add(data.len());
                    if t.lost || t.kept > t.limit {
                        t.lost = true;
                        t.frames.clear();
                    } else {
                        t.frames.push_back(data.clone());
                    }
                    Poll::Ready(Some(Ok(Frame::data(data))))
                }
                Err(frame) => {
                    if let Some(h) = frame.trailers_ref() {
                        t.trailers = Some(h.clone());
                        t.ended = true;
                        self.done = true;
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
            || self
                .tee
                .lock()
                .is_ok_and(|t| t.ended && self.next == t.read && t.trailers.is_none())
    }

    fn size_hint(&self) -> SizeHint {
        if self.done {
            return SizeHint::with_exact(0);
        }
        let Ok(t) = self.tee.lock() else {
            return SizeHint::default();
        };
        let first_kept = t.read - t.frames.len();
        let kept_left = t
            .frames
            .iter()
            .skip(self.next.saturating_sub(first_kept))
            .map(|b| b.len() as u64)
            .sum::<u64>();
        if t.ended {
            return SizeHint::with_exact(kept_left);
        }
        let rest = t.source.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + kept_left);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + kept_left);
        }
        hint
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // Every field is Unpin (the timer is boxed).
        let this = self.get_mut();
        let Some(send) = &mut this.send else {
            return this.poll_source(cx);
        };
        // Asked again: the last slice was taken. A slice handed now is owed, unless it
        // ends the body: the connection does not ask after the last one (what it still
        // holds to write is bounded by the attempt's timeout, as a body that fits in the
        // socket's buffers is).
        if !send.rest.is_empty() {
            let n = send.rest.len().min(SEND_SLICE);
            let slice = send.rest.split_to(n);
            this.note_handed();
            return Poll::Ready(Some(Ok(Frame::data(slice))));
        }
        let polled = this.poll_source(cx);
        let Some(send) = &mut this.send else {
            return polled;
        };
        match polled {
            Poll::Ready(Some(Ok(f))) if f.data_ref().is_some_and(|d| !d.is_empty()) => {
                let mut data = f.into_data().unwrap_or_default();
                if data.len() > SEND_SLICE {
                    send.rest = data.split_off(SEND_SLICE);
                }
                this.note_handed();
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            other => {
                send.clock.taken();
                other
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        if self.send.as_ref().is_some_and(|s| !s.rest.is_empty()) {
            return false;
        }
        match &self.inner {
            None => true,
            Some(Source::Tee(tee)) => tee.is_end_stream(),
            Some(Source::Client(inner)) => inner.is_end_stream(),
            Some(Source::Capped(c)) => c.body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        let hint = match &self.inner {
            None => SizeHint::with_exact(0),
            Some(Source::Tee(tee)) => tee.size_hint(),
            Some(Source::Client(inner)) => inner.size_hint(),
            Some(Source::Capped(c)) => c.body.size_hint(),
        };
        match self.send.as_ref().map(|s| s.rest.len() as u64) {
            None | Some(0) => hint,
            Some(rest) => {
                let mut more = SizeHint::new();
                more.set_lower(hint.lower() + rest);
                if let Some(upper) = hint.upper() {
                    more.set_upper(upper + rest);
                }
                more
            }
        }
    }
}

impl RequestBody {
    /// A slice was handed to the upstream connection: owed until it asks for the next,
    /// unless the body ends with it.
    fn note_handed(&self) {
        if let Some(send) = &self.send {
            if self.is_end_stream() {
                send.clock.taken();
            } else {
                send.clock.handed();
            }
        }
    }

    /// The next frame from the source, with the idle limit and the cap applied.
    fn poll_source(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self;
        let (inner, left) = match &mut this.inner {
            None => return Poll::Ready(None),
            Some(Source::Tee(tee)) => return tee.poll_frame(cx),
            Some(Source::Client(inner)) => (inner, None),
            Some(Source::Capped(c)) => (&mut c.body, Some(&mut c.left)),
        };
        if let Poll::Ready(frame) = Pin::new(inner).poll_frame(cx) {
            if let Some(wait) = &mut this.wait {
                *wait.as_mut().project().since = None;
            }
            if let (Some(left), Some(Ok(f))) = (left, &frame)
                && let Some(data) = f.data_ref()
            {
                let n = data.len() as u64;
                if n > *left {
                    if let Some(stall) = &this.stall {
                        stall.0.store(OVER_CAP, Ordering::Release);
                    }
                    this.inner = None;
                    return Poll::Ready(Some(Err(Box::new(BodyTooLarge))));
                }
                *left -= n;
            }
            return Poll::Ready(frame);
        }
        let Some(idle) = this.idle else {
            return Poll::Pending;
        };
        let wait = this.wait.get_or_insert_with(|| {
            let now = Instant::now();
            Box::pin(IdleWait {
                timer: tokio::time::sleep_until((now + idle).into()),
                since: Some(now),
            })
        });
        let mut w = wait.as_mut().project();
        let deadline = *w.since.get_or_insert_with(Instant::now) + idle;
        // Bounded: each turn returns, or moves the timer to `deadline` (then it is not
        // ready until the deadline has passed).
        loop {
            if w.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if Instant::now() >= deadline {
                this.idle = None;
                this.wait = None;
                if let Some(stall) = &this.stall {
                    stall.0.store(STALLED, Ordering::Release);
                }
                return Poll::Ready(Some(Err(Box::new(BodyIdle))));
            }
            // Set for an earlier wait.
            w.timer.as_mut().reset(deadline.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(limit: Duration) -> (Arc<SendClock>, SendWatch) {
        let clock = Arc::new(SendClock {
            limit,
            base: Instant::now(),
            handed: AtomicU64::new(0),
        });
        let timer = Box::pin(tokio::time::sleep(limit));
        let w = SendWatch {
            clock: Arc::clone(&clock),
            timer,
        };
        (clock, w)
    }

    /// Whether the watch has expired, polled once.
    async fn expired(w: &mut SendWatch) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(w.poll_expired(cx).is_ready())).await
    }

    /// Nothing owed never expires, however long; a frame owed past the limit does (and
    /// wakes the waiting task); a frame taken in time does not.
    #[tokio::test]
    async fn the_watch_expires_only_for_a_frame_owed_past_the_limit() {
        let limit = Duration::from_millis(300);
        let (clock, mut w) = watch(limit);
        assert!(!expired(&mut w).await);
        tokio::time::sleep(limit * 2).await;
        assert!(!expired(&mut w).await, "idle: nothing owed");

        clock.handed();
        tokio::time::sleep(limit / 3).await;
        clock.taken();
        tokio::time::sleep(limit).await;
        assert!(!expired(&mut w).await, "taken in time");

        clock.handed();
        let fired = tokio::time::timeout(
            Duration::from_secs(10),
            std::future::poll_fn(|cx| w.poll_expired(cx)),
        )
        .await;
        assert!(
            fired.is_ok(),
            "a frame owed past the limit expires the watch"
        );
        assert!(clock.deadline().is_some_and(|d| d <= Instant::now()));
    }
}
