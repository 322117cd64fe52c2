//! The writes of a worker's turn, sent together: one io_uring submission sends what
//! the turn's tasks wrote to their TCP connections (plaintext, or under TLS the
//! records), where each would make a `writev` of its own.
//!
//! A write to a [`Batched`] stream on a worker thread copies the bytes into the
//! connection's slot and answers `Ready` at once; the first write of a turn wakes
//! the worker's flusher task ([`run_flusher`]), which the runtime polls after the tasks
//! already woken in that turn, so its one `io_uring_enter` sends every connection's
//! bytes (`send` with `MSG_DONTWAIT`: each completes inline, as the plain call would).
//!
//! Why: each message written to a loopback or LAN peer wakes the peer's task. A backend
//! on the proxy's own core preempts the proxy at the return of every such `writev`
//! (0.62 involuntary context switches per request, ~18 % of weir's CPU in the scheduler,
//! BENCHMARKS.md "Session 52"); a load generator on another core is woken with an
//! inter-processor interrupt per message. Sent in one call, the turn's messages wake
//! each peer once.
//!
//! Order and errors: a connection's bytes go out in the order written; a send that
//! leaves bytes over (the socket's buffer full) or fails wakes the task that wrote, and
//! the next read, write, flush or shut-down of the stream sends the rest itself
//! (waiting for room as a plain write does) or returns the error. A write that would
//! take a connection's queued bytes past [`MOST`] sends them itself first. `poll_flush` answers
//! `Ready` for bytes still queued: they leave before the worker next waits for events.
//! `poll_shutdown` waits until they left. Dropping the stream sends what is left
//! without waiting. Writes larger than [`MOST`], writes off the worker threads, and all
//! writes where io_uring is unavailable (an old kernel, seccomp, `io_uring_disabled`)
//! or turned off (`WEIR_IO_URING=0`) are plain `writev`s.

// The ring takes a raw pointer to each queued slot's bytes and its descriptor: the
// flusher holds every slot's lock (its bytes cannot change, its stream cannot close)
// from the submission until the completions are reaped.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker, ready};

use io_uring::{IoUring, opcode, types};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The largest write taken into a batch (with what the connection already queued);
/// larger ones are written at once.
pub(crate) const MOST: usize = 16 * 1024;

/// The most buffer a connection keeps between writes.
const KEEP: usize = 4 * 1024;

/// Submission queue entries: sends per `io_uring_enter`.
const ENTRIES: u32 = 256;

thread_local! {
    static BATCH: RefCell<Option<Batch>> = const { RefCell::new(None) };
}

/// A worker's batch: its ring and the connections with bytes queued this turn.
struct Batch {
    ring: IoUring,
    queued: Vec<Arc<Slot>>,
    /// The flusher's waker while it waits for a write.
    flusher: Option<Waker>,
    /// Submissions made, and sends in them (for tests).
    submissions: u64,
    sends: u64,
    /// Sends that left bytes over (a full socket) or failed.
    short: u64,
}

/// Sets up this thread's batch. `false`: io_uring is unavailable or turned off, and
/// writes on this thread stay plain.
pub(crate) fn install() -> bool {
    if std::env::var_os("WEIR_IO_URING").is_some_and(|v| v == "0") {
        return false;
    }
    // One thread submits and reaps (kernels since 6.1), else the plain setup.
    let Some(ring) = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(ENTRIES)
        .or_else(|_| IoUring::new(ENTRIES))
        .ok()
    else {
        return false;
    };
    BATCH.with(|b| {
        *b.borrow_mut() = Some(Batch {
            ring,
            queued: Vec::new(),
            flusher: None,
            submissions: 0,
            sends: 0,
            short: 0,
        });
    });
    true
}

/// The worker's flusher: sends each turn's queued writes. Runs for the runtime's life on
/// a thread where [`install`] succeeded (returns at once elsewhere).
pub(crate) async fn run_flusher() {
    let mut wake = Vec::new();
    std::future::poll_fn(|cx| {
        let installed = BATCH.with(|b| {
            let mut slot = b.borrow_mut();
            let slot = &mut *slot;
            let Some(b) = slot.as_mut() else {
                return false;
            };
            if b.flusher.as_ref().is_none_or(|w| !w.will_wake(cx.waker())) {
                b.flusher = Some(cx.waker().clone());
            }
            if !flush(b, &mut wake) {
                // Dropped with nothing in flight: this thread's writes stay plain.
                *slot = None;
            }
            true
        });
        // Woken outside the batch's borrow: a waker may write.
        for w in wake.drain(..) {
            w.wake();
        }
        if installed {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
}

/// Sends every queued slot's bytes; `wake`: the writers to wake (bytes left over, or an
/// error). `false`: the ring refused a submission (every slot was sent with a plain call
/// instead) and is not to be used again.
fn flush(b: &mut Batch, wake: &mut Vec<Waker>) -> bool {
    let mut usable = true;
    let mut short = 0;
    while !b.queued.is_empty() {
        let n = b.queued.len().min(ENTRIES as usize);
        let slots: Vec<Arc<Slot>> = b.queued.drain(..n).collect();
        let mut held: Vec<MutexGuard<'_, Pending>> = slots.iter().map(|s| s.lock()).collect();
        let mut results = vec![None::<i32>; held.len()];
        if usable {
            usable = send_all(&mut b.ring, &held, &mut results);
            let sent = results.iter().filter(|r| r.is_some()).count() as u64;
            b.sends += sent;
            b.submissions += u64::from(sent > 0);
        }
        for (p, r) in held.iter_mut().zip(results) {
            p.listed = false;
            if p.closed || !p.queued {
                continue;
            }
            p.queued = false;
            let r = match r {
                Some(r) => r,
                None => plain_send(p.fd, &p.buf[p.at..]),
            };
            let waiting = std::mem::take(&mut p.waiting);
            if r >= 0 {
                p.at += r as usize;
                if p.at >= p.buf.len() {
                    p.empty();
                    if !waiting {
                        continue;
                    }
                }
            } else if -r != libc::EAGAIN {
                p.error = Some(io::Error::from_raw_os_error(-r));
            }
            short += u64::from(p.at < p.buf.len() || p.error.is_some());
            if let Some(w) = p.writer.take() {
                wake.push(w);
            }
        }
        drop(held);
    }
    b.short += short;
    usable
}

/// One submission of a send per queued slot of `held`; each one's result into
/// `results`. `false`: nothing was submitted (the ring refused), `results` untouched.
fn send_all(
    ring: &mut IoUring,
    held: &[MutexGuard<'_, Pending>],
    results: &mut [Option<i32>],
) -> bool {
    let mut pushed = 0usize;
    {
        let mut sq = ring.submission();
        for (i, p) in held.iter().enumerate() {
            if p.closed || !p.queued {
                continue;
            }
            let rest = &p.buf[p.at..];
            let send = opcode::Send::new(types::Fd(p.fd), rest.as_ptr(), rest.len() as u32)
                .flags(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
                .build()
                .user_data(i as u64);
            // SAFETY: the bytes and the descriptor stay valid until the completion is
            // reaped below: `held` keeps each slot locked (a write cannot change the
            // bytes, a drop cannot close the stream) until then, and this function
            // returns only when every pushed entry completed, or when none was submitted
            // (and the ring is then dropped unused: the kernel never reads them).
            if unsafe { sq.push(&send) }.is_err() {
                break;
            }
            pushed += 1;
        }
    }
    if pushed == 0 {
        return true;
    }
    // A refused or interrupted submission is retried by the wait below.
    let mut submitted = ring.submit().is_ok();
    let mut reaped = 0usize;
    loop {
        for cqe in ring.completion() {
            if let Some(r) = results.get_mut(cqe.user_data() as usize) {
                *r = Some(cqe.result());
                reaped += 1;
            }
        }
        if reaped >= pushed {
            return true;
        }
        // A send that went asynchronous after all, or a submission interrupted: wait
        // for the rest.
        match ring.submit_and_wait(pushed - reaped) {
            Ok(_) => submitted = true,
            Err(_) if !submitted => return false,
            Err(_) => {}
        }
    }
}

/// A `send` of `bytes` on `fd` that does not wait; the count sent or `-errno`.
fn plain_send(fd: RawFd, bytes: &[u8]) -> i32 {
    // SAFETY: `bytes` is a valid buffer for the call; `fd` is the open socket of a
    // locked slot (its stream cannot close meanwhile).
    let n = unsafe {
        libc::send(
            fd,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        -io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    } else {
        n as i32
    }
}

/// A connection's bytes between its writes and the flusher.
#[derive(Default)]
struct Slot(Mutex<Pending>);

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
struct Pending {
    fd: RawFd,
    /// Bytes written and not yet sent: from `at`.
    buf: Vec<u8>,
    at: usize,
    /// Bytes wait for the flusher.
    queued: bool,
    /// In a batch's list (also after a write took the queued bytes itself).
    listed: bool,
    /// The stream was dropped.
    closed: bool,
    /// A send's failure, for the stream's next operation.
    error: Option<io::Error>,
    /// The task that wrote last: woken when bytes are left over or a send failed, or
    /// when it waits for the queued bytes to leave (`waiting`).
    writer: Option<Waker>,
    waiting: bool,
}

impl Pending {
    fn left(&self) -> usize {
        self.buf.len() - self.at
    }

    /// Everything was sent. A buffer grown past [`KEEP`] is given back (an idle
    /// keep-alive connection holds no more than that).
    fn empty(&mut self) {
        if self.buf.capacity() > KEEP {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
        self.at = 0;
    }
}

/// Queues `slot` on this thread's batch (waking its flusher for the first of a turn);
/// `false` off the worker threads.
fn enqueue(slot: &Arc<Slot>) -> bool {
    BATCH.with(|b| {
        let Ok(mut b) = b.try_borrow_mut() else {
            return false;
        };
        let Some(b) = b.as_mut() else {
            return false;
        };
        b.queued.push(Arc::clone(slot));
        if let Some(w) = b.flusher.take() {
            w.wake();
        }
        true
    })
}

/// This thread's submissions and the sends in them, if it batches.
#[cfg(test)]
fn counts() -> Option<(u64, u64)> {
    BATCH.with(|b| b.borrow().as_ref().map(|b| (b.submissions, b.sends)))
}

/// This thread's sends that left bytes over or failed.
#[cfg(test)]
fn short_sends() -> u64 {
    BATCH.with(|b| b.borrow().as_ref().map_or(0, |b| b.short))
}

/// Whether this thread batches its writes.
fn batching() -> bool {
    BATCH.with(|b| b.try_borrow().is_ok_and(|b| b.is_some()))
}

/// A TCP connection (plaintext, or under TLS) whose small writes go out with the turn's
/// batch.
pub(crate) struct Batched {
    io: TcpStream,
    /// Made at the first batched write.
    slot: Option<Arc<Slot>>,
}

impl Batched {
    pub(crate) fn new(io: TcpStream) -> Batched {
        Batched { io, slot: None }
    }

    pub(crate) fn get_ref(&self) -> &TcpStream {
        &self.io
    }

    /// Sends what a batch left over, or returns the error a send met. `Ready(Ok)` also
    /// when bytes are still queued (they leave this turn).
    fn poll_settle(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Batched { io, slot } = self;
        let Some(slot) = slot else {
            return Poll::Ready(Ok(()));
        };
        let mut p = slot.lock();
        if let Some(e) = p.error.take() {
            return Poll::Ready(Err(e));
        }
        if p.queued {
            return Poll::Ready(Ok(()));
        }
        while p.left() > 0 {
            let at = p.at;
            let n = ready!(Pin::new(&mut *io).poll_write(cx, &p.buf[at..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            p.at += n;
        }
        p.empty();
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Batched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.slot.is_some() {
            // Bytes left over go on being sent while reading (a read must not wait for
            // the peer to make room: it may be waiting for this side to read).
            if let Poll::Ready(Err(e)) = this.poll_settle(cx) {
                return Poll::Ready(Err(e));
            }
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Batched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if this.slot.is_none() {
            if total == 0 || total > MOST || !batching() {
                return Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
            }
            this.slot = Some(Arc::default());
        }
        if let Some(slot) = &this.slot {
            let mut p = slot.lock();
            if p.queued && p.left() + total > MOST {
                // Too much for one batch: the queued bytes leave now, with a plain call
                // (the flusher skips a slot no longer queued), then this write.
                p.queued = false;
            }
        }
        ready!(this.poll_settle(cx))?;
        let Batched { io, slot } = this;
        let Some(slot) = slot else {
            return Pin::new(io).poll_write_vectored(cx, bufs);
        };
        let mut p = slot.lock();
        if !p.queued {
            if total == 0 || total > MOST {
                drop(p);
                return Pin::new(io).poll_write_vectored(cx, bufs);
            }
            p.fd = io.as_raw_fd();
            // Listed once per batch (the flusher locks each listed slot once).
            if !p.listed {
                if !enqueue(slot) {
                    drop(p);
                    return Pin::new(io).poll_write_vectored(cx, bufs);
                }
                p.listed = true;
            }
            p.queued = true;
        }
        for b in bufs {
            p.buf.extend_from_slice(b);
        }
        set_writer(&mut p, cx);
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_settle(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_settle(cx))?;
        if let Some(slot) = &this.slot {
            let mut p = slot.lock();
            if p.queued {
                // The end goes after the queued bytes.
                wait(&mut p, cx);
                return Poll::Pending;
            }
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

fn set_writer(p: &mut Pending, cx: &Context<'_>) {
    if p.writer.as_ref().is_none_or(|w| !w.will_wake(cx.waker())) {
        p.writer = Some(cx.waker().clone());
    }
}

/// The writer waits for the queued bytes to leave.
fn wait(p: &mut Pending, cx: &Context<'_>) {
    set_writer(p, cx);
    p.waiting = true;
}

impl Drop for Batched {
    fn drop(&mut self) {
        let Some(slot) = self.slot.take() else {
            return;
        };
        let mut p = slot.lock();
        p.closed = true;
        // What was written is sent, as far as the socket takes it without waiting.
        let mut at = p.at;
        while at < p.buf.len() {
            match self.io.try_write(&p.buf[at..]) {
                Ok(n) if n > 0 => at += n,
                _ => break,
            }
        }
        p.buf = Vec::new();
        p.at = 0;
        p.writer = None;
    }
}

#[cfg(test)]
mod tests;
