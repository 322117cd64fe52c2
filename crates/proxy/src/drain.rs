//! Draining a listener's connections: graceful shutdown first, then closing what is
//! still open when the drain timeout expires.
//!
//! Each connection holds a [`Ticket`] and registers its task's waker once; a drain
//! changes one atomic state and wakes the registered tasks. A poll that sees no change
//! costs one atomic load. (The previous code selected on two watch channels, hyper-util's
//! graceful watcher and a force-close signal, which re-polled two `Notified` futures on
//! every wakeup of every connection: a few percent of the proxy's CPU per request.)

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use hyper_util::server::graceful::GracefulConnection;
use tokio::sync::Notify;

const SERVING: u8 = 0;
const DRAINING: u8 = 1;
const CLOSING: u8 = 2;

/// The connections of one accept loop.
#[derive(Clone, Default)]
pub(crate) struct Drain {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    state: AtomicU8,
    next_id: AtomicU64,
    open: AtomicUsize,
    /// Notified when `open` drops to 0.
    none_open: Notify,
    wakers: Mutex<HashMap<u64, Waker, foldhash::fast::FixedState>>,
}

impl Inner {
    fn set(&self, state: u8) {
        self.state.store(state, Ordering::SeqCst);
        let wakers: Vec<Waker> = lock(&self.wakers).values().cloned().collect();
        for w in wakers {
            w.wake();
        }
    }
}

impl Drain {
    /// A ticket for a newly accepted connection; the drain waits for it until dropped.
    pub(crate) fn ticket(&self) -> Ticket {
        self.inner.open.fetch_add(1, Ordering::SeqCst);
        Ticket {
            inner: Arc::clone(&self.inner),
            id: self.inner.next_id.fetch_add(1, Ordering::Relaxed),
            registered: None,
        }
    }

    /// Asks every connection to finish (HTTP/1.1: after the current response; HTTP/2:
    /// GOAWAY), waits up to `timeout` for all to end, then closes those still open.
    /// Returns whether all ended in time.
    pub(crate) async fn drain(&self, timeout: Duration) -> bool {
        self.inner.set(DRAINING);
        let all_closed = async {
            loop {
                let notified = self.inner.none_open.notified();
                if self.inner.open.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        let in_time = tokio::time::timeout(timeout, all_closed).await.is_ok();
        if !in_time {
            self.inner.set(CLOSING);
        }
        in_time
    }
}

/// One connection's membership in a [`Drain`].
/// A served connection that can be asked to finish gracefully: hyper's, or weir's own
/// HTTP/1.1 server's ([`crate::h1::server::Conn`]).
pub(crate) trait Shutdown: Future {
    /// HTTP/1.1: close after the current response (at once when idle); HTTP/2: GOAWAY.
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<C: GracefulConnection> Shutdown for C {
    fn graceful_shutdown(self: Pin<&mut Self>) {
        GracefulConnection::graceful_shutdown(self);
    }
}

pub(crate) struct Ticket {
    inner: Arc<Inner>,
    id: u64,
    /// The waker last registered (the task's; normally registered once).
    registered: Option<Waker>,
}

impl Ticket {
    fn poll_state(&mut self, cx: &Context<'_>) -> u8 {
        if !self
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            let waker = cx.waker().clone();
            lock(&self.inner.wakers).insert(self.id, waker.clone());
            self.registered = Some(waker);
        }
        self.inner.state.load(Ordering::SeqCst)
    }

    /// Runs `fut` (e.g. a TLS handshake) unless the drain times out first (`None`).
    pub(crate) fn until_closed<F: Future>(&mut self, fut: F) -> UntilClosed<'_, F> {
        UntilClosed {
            ticket: self,
            fut: Box::pin(fut),
        }
    }

    /// Serves `conn`: shut down gracefully once draining, dropped when closing (`None`).
    pub(crate) fn serve<C: Shutdown>(&mut self, conn: C) -> Serve<'_, C> {
        Serve {
            ticket: self,
            conn: Box::pin(conn),
            shutting_down: false,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.registered.is_some() {
            lock(&self.inner.wakers).remove(&self.id);
        }
        if self.inner.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.inner.none_open.notify_waiters();
        }
    }
}

/// See [`Ticket::until_closed`].
pub(crate) struct UntilClosed<'a, F> {
    ticket: &'a mut Ticket,
    fut: Pin<Box<F>>,
}

impl<F: Future> Future for UntilClosed<'_, F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.ticket.poll_state(cx) == CLOSING {
            return Poll::Ready(None);
        }
        this.fut.as_mut().poll(cx).map(Some)
    }
}

/// See [`Ticket::serve`].
pub(crate) struct Serve<'a, C> {
    ticket: &'a mut Ticket,
    conn: Pin<Box<C>>,
    shutting_down: bool,
}

impl<C: Shutdown> Serve<'_, C> {
    /// Asks the connection to finish as a drain does (HTTP/1.1: after the current
    /// response; HTTP/2: GOAWAY), once.
    pub(crate) fn shut_down(&mut self) {
        if !self.shutting_down {
            self.shutting_down = true;
            self.conn.as_mut().graceful_shutdown();
        }
    }
}

impl<C: Shutdown> Future for Serve<'_, C> {
    type Output = Option<C::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match this.ticket.poll_state(cx) {
            SERVING => {}
            DRAINING => this.shut_down(),
            _ => return Poll::Ready(None),
        }
        this.conn.as_mut().poll(cx).map(Some)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drain_waits_for_tickets_then_closes_the_rest() {
        let d = Drain::default();
        // No connection: drained at once.
        assert!(d.drain(Duration::from_millis(10)).await);

        let d = Drain::default();
        let mut t = d.ticket();
        let d2 = d.clone();
        let drained = tokio::spawn(async move { d2.drain(Duration::from_millis(50)).await });
        // A future that never ends is cut off once the drain times out.
        let out = t.until_closed(std::future::pending::<()>()).await;
        assert!(out.is_none());
        assert!(!drained.await.unwrap());

        let d = Drain::default();
        let t = d.ticket();
        let d2 = d.clone();
        let drained = tokio::spawn(async move { d2.drain(Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(t);
        assert!(drained.await.unwrap());
    }

    #[tokio::test]
    async fn a_finished_future_is_returned() {
        let d = Drain::default();
        let mut t = d.ticket();
        assert_eq!(t.until_closed(async { 7 }).await, Some(7));
    }
}
