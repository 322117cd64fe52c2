//! A progress line on stderr every few seconds.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::procs::proc_stats;
use crate::side::SideStats;

/// What the run is doing now.
pub(crate) struct Progress {
    start: Instant,
    phase: Mutex<String>,
    done: AtomicUsize,
    total: AtomicUsize,
    failures: AtomicUsize,
    /// Latency of the last finished operation, µs.
    last_us: AtomicU64,
    weir_pid: AtomicU32,
    side: Mutex<Option<Arc<SideStats>>>,
}

impl Progress {
    /// A progress tracker starting now.
    pub(crate) fn new() -> Arc<Progress> {
        Arc::new(Progress {
            start: Instant::now(),
            phase: Mutex::new("starting".into()),
            done: AtomicUsize::new(0),
            total: AtomicUsize::new(0),
            failures: AtomicUsize::new(0),
            last_us: AtomicU64::new(0),
            weir_pid: AtomicU32::new(0),
            side: Mutex::new(None),
        })
    }

    /// Enters a phase of `total` steps, printing it at once.
    pub(crate) fn phase(&self, name: &str, total: usize) {
        if let Ok(mut p) = self.phase.lock() {
            *p = name.to_owned();
        }
        self.done.store(0, Ordering::Relaxed);
        self.failures.store(0, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
        self.last_us.store(0, Ordering::Relaxed);
        eprintln!("[{:7.1}s] {name}", self.start.elapsed().as_secs_f64());
    }

    /// One step done, with its latency (None: failed).
    pub(crate) fn step(&self, latency: Option<Duration>) {
        self.done.fetch_add(1, Ordering::Relaxed);
        match latency {
            Some(d) => self.last_us.store(d.as_micros() as u64, Ordering::Relaxed),
            None => {
                self.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// weir's pid, for RSS in the progress line.
    pub(crate) fn set_weir_pid(&self, pid: u32) {
        self.weir_pid.store(pid, Ordering::Relaxed);
    }

    /// The side client's counters, shown once it runs.
    pub(crate) fn set_side(&self, side: Arc<SideStats>) {
        if let Ok(mut s) = self.side.lock() {
            *s = Some(side);
        }
    }

    /// Prints a message line with the elapsed time.
    pub(crate) fn say(&self, msg: &str) {
        eprintln!("[{:7.1}s] {msg}", self.start.elapsed().as_secs_f64());
    }

    fn line(&self) -> String {
        let phase = self.phase.lock().map(|p| p.clone()).unwrap_or_default();
        let mut s = format!(
            "[{:7.1}s] {phase}: {}/{}",
            self.start.elapsed().as_secs_f64(),
            self.done.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed)
        );
        let failures = self.failures.load(Ordering::Relaxed);
        if failures > 0 {
            s.push_str(&format!(" ({failures} failed)"));
        }
        let last = self.last_us.load(Ordering::Relaxed);
        if last > 0 {
            s.push_str(&format!(", last {:.2} ms", last as f64 / 1000.0));
        }
        if let Some(side) = self.side.lock().ok().and_then(|s| s.clone()) {
            let (reqs, bad) = side.progress();
            s.push_str(&format!(", side {reqs} req / {bad} errors"));
        }
        let pid = self.weir_pid.load(Ordering::Relaxed);
        if pid != 0
            && let Ok(st) = proc_stats(pid)
        {
            s.push_str(&format!(
                ", weir RSS {:.1} MiB CPU {:.1} s",
                st.rss_kib as f64 / 1024.0,
                st.cpu_seconds
            ));
        }
        s
    }

    /// Prints the progress line every `every` until `limit` has passed or the task is
    /// aborted.
    pub(crate) async fn ticker(self: Arc<Self>, every: Duration, limit: Duration) {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            tokio::time::sleep(every).await;
            eprintln!("{}", self.line());
        }
    }
}
