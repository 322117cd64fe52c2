//! The data plane's runtime layout: one thread per core, each running its own
//! single-threaded tokio runtime, serving whole connections.
//!
//! A connection, its requests and the upstream connections they open stay on one
//! thread: no task migrates, wakeups stay local and the scheduler needs no atomics for
//! its queue. The profile of the keep-alive bench on tokio's multi-threaded scheduler
//! showed its bookkeeping (stealing checks, shared injection queue, atomic task states)
//! as a visible share of the proxy's user time. Accept loops run on a worker too and
//! deal connections round-robin; a connection for another worker moves there as a
//! plain socket.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Handle;
use tokio::sync::oneshot;

thread_local! {
    /// The index of the worker running on this thread, if any.
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Worker threads with their runtimes; they stop when this is dropped.
pub(crate) struct Workers {
    handles: Vec<Handle>,
    /// Dropping these ends each worker's `block_on`, which drops its runtime and tasks.
    _stop: Vec<oneshot::Sender<()>>,
    next: AtomicUsize,
}

impl Workers {
    /// Starts `n` workers (at least one); `0` means one per CPU this process may use.
    pub(crate) fn start(n: usize) -> std::io::Result<Workers> {
        let n = match n {
            0 => std::thread::available_parallelism().map_or(1, |c| c.get()),
            n => n,
        };
        let mut handles = Vec::with_capacity(n);
        let mut stops = Vec::with_capacity(n);
        for i in 0..n {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(rt.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            std::thread::Builder::new()
                .name(format!("weir-worker-{i}"))
                .spawn(move || {
                    CURRENT.with(|c| c.set(Some(i)));
                    let _ = rt.block_on(async {
                        if crate::batch::install() {
                            tokio::spawn(crate::batch::run_flusher());
                        }
                        stopped.await
                    });
                })?;
        }
        Ok(Workers {
            handles,
            _stop: stops,
            next: AtomicUsize::new(0),
        })
    }

    /// Number of workers.
    pub(crate) fn len(&self) -> usize {
        self.handles.len()
    }

    /// Runs `fut` on worker `i` (modulo the count).
    pub(crate) fn spawn_on<F>(&self, i: usize, fut: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handles[i % self.handles.len()].spawn(fut)
    }

    /// The next worker in round-robin order.
    pub(crate) fn pick(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len()
    }
}

/// The index of the worker this thread runs, or `None` off the workers.
pub(crate) fn current() -> Option<usize> {
    CURRENT.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_run_on_their_worker_thread() {
        let w = Workers::start(2).unwrap();
        assert_eq!(w.len(), 2);
        for i in 0..4 {
            let (idx, name) = w
                .spawn_on(i, async {
                    (current(), std::thread::current().name().map(str::to_owned))
                })
                .await
                .unwrap();
            assert_eq!(idx, Some(i % 2));
            assert_eq!(
                name.as_deref(),
                Some(format!("weir-worker-{}", i % 2).as_str())
            );
        }
        assert_eq!(current(), None);
        let picks: Vec<usize> = (0..4).map(|_| w.pick()).collect();
        assert_eq!(picks, [0, 1, 0, 1]);
    }
}
