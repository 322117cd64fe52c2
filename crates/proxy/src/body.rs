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

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::Sleep;

use crate::error::{BoxError, ProxyError};

/// A client's request body on its way upstream, failing after `body_idle` without data.
pub(crate) struct RequestBody {
    /// `None`: an empty body (a retried request without one).
    inner: Option<Incoming>,
    /// `None`: no limit, or the limit already fired.
    idle: Option<Duration>,
    /// Armed the first time the body had to wait; boxed because most bodies never wait.
    timer: Option<Pin<Box<Sleep>>>,
    /// When the current wait for data began, if the last poll found none.
    waiting_since: Option<Instant>,
    stall: Option<Stall>,
}

/// Set when a [`RequestBody`] gave up waiting; shared with the upstream response future.
#[derive(Clone, Debug)]
pub(crate) struct Stall(Arc<AtomicBool>);

impl Stall {
    /// Whether the body stalled.
    pub(crate) fn happened(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// `err` unless the body stalled: then the request failed because of the client.
    pub(crate) fn explain(&self, err: ProxyError) -> ProxyError {
        if self.happened() {
            ProxyError::BodyTimeout
        } else {
            err
        }
    }
}

/// The error a stalled body ends with (seen by the upstream client).
#[derive(Debug, thiserror::Error)]
#[error("request body idle timeout")]
pub(crate) struct BodyIdle;

impl RequestBody {
    /// Wraps `inner`; `idle` of zero means no limit.
    pub(crate) fn new(inner: Incoming, idle: Duration) -> RequestBody {
        // A body that is already complete is never polled for data: no flag, no timer.
        let limited = !idle.is_zero() && !inner.is_end_stream();
        RequestBody {
            inner: Some(inner),
            idle: limited.then_some(idle),
            timer: None,
            waiting_since: None,
            stall: limited.then(|| Stall(Arc::new(AtomicBool::new(false)))),
        }
    }

    /// No body at all.
    pub(crate) fn empty() -> RequestBody {
        RequestBody {
            inner: None,
            idle: None,
            timer: None,
            waiting_since: None,
            stall: None,
        }
    }

    /// A body without an idle limit.
    #[cfg(test)]
    pub(crate) fn unlimited(inner: Incoming) -> RequestBody {
        RequestBody::new(inner, Duration::ZERO)
    }

    /// The flag set if this body stalls (none when it cannot).
    pub(crate) fn stall(&self) -> Option<Stall> {
        self.stall.clone()
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
        let Some(inner) = &mut this.inner else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(frame) = Pin::new(inner).poll_frame(cx) {
            this.waiting_since = None;
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        let Some(idle) = this.idle else {
            return Poll::Pending;
        };
        let deadline = *this.waiting_since.get_or_insert_with(Instant::now) + idle;
        // Bounded: each turn returns, or moves the timer to `deadline` (then it is not
        // ready until the deadline has passed).
        loop {
            let timer = this
                .timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline.into())));
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if Instant::now() >= deadline {
                this.idle = None;
                this.timer = None;
                if let Some(stall) = &this.stall {
                    stall.0.store(true, Ordering::Release);
                }
                return Poll::Ready(Some(Err(Box::new(BodyIdle))));
            }
            // Set for an earlier wait.
            timer.as_mut().reset(deadline.into());
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}
