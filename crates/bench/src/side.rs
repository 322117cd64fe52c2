//! The side client: while changes are applied, loops over domains that are never touched,
//! on kept HTTPS connections, and counts every request that does not get a 200.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::client::{Conn, Seen, Tls};
use crate::manifests::domain;

/// Connections each worker keeps open at once (to distinct domains).
const CONNS_PER_WORKER: usize = 4;
/// Requests sent on a connection before it is retired for one to the worker's next domain,
/// so that a long run visits many domains while staying on kept connections.
const REQUESTS_PER_CONN: u32 = 100;
/// Errors kept verbatim in the report.
const KEPT_ERRORS: usize = 20;

/// Counters shared by the side workers.
#[derive(Default)]
pub(crate) struct SideStats {
    requests: AtomicU64,
    ok: AtomicU64,
    non_200: AtomicU64,
    errors: AtomicU64,
    server_closes: AtomicU64,
    connections: AtomicU64,
    first_errors: Mutex<Vec<String>>,
}

/// The side client's totals, as reported.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct SideReport {
    pub(crate) workers: usize,
    pub(crate) domains: usize,
    pub(crate) requests: u64,
    pub(crate) ok: u64,
    /// Responses other than 200.
    pub(crate) non_200: u64,
    /// Failed connects, handshakes and requests.
    pub(crate) errors: u64,
    /// Kept connections found closed by the server between requests (not failed requests).
    pub(crate) server_closes: u64,
    /// Connections opened.
    pub(crate) connections: u64,
    /// The first few problems, verbatim.
    pub(crate) first_errors: Vec<String>,
}

impl SideStats {
    fn record(&self, what: String) {
        if let Ok(mut v) = self.first_errors.lock()
            && v.len() < KEPT_ERRORS
        {
            v.push(what);
        }
    }

    /// Requests so far and problems (non-200 + errors) so far.
    pub(crate) fn progress(&self) -> (u64, u64) {
        (
            self.requests.load(Ordering::Relaxed),
            self.non_200.load(Ordering::Relaxed) + self.errors.load(Ordering::Relaxed),
        )
    }

    /// A snapshot for the report.
    pub(crate) fn report(&self, workers: usize, domains: usize) -> SideReport {
        SideReport {
            workers,
            domains,
            requests: self.requests.load(Ordering::Relaxed),
            ok: self.ok.load(Ordering::Relaxed),
            non_200: self.non_200.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            server_closes: self.server_closes.load(Ordering::Relaxed),
            connections: self.connections.load(Ordering::Relaxed),
            first_errors: self
                .first_errors
                .lock()
                .map(|v| v.clone())
                .unwrap_or_default(),
        }
    }
}

/// What a side worker needs.
pub(crate) struct SideWorker {
    pub(crate) tls: Tls,
    /// The worker's domains (indices), visited in turn.
    pub(crate) domains: Vec<usize>,
    pub(crate) stats: Arc<SideStats>,
    pub(crate) stop: Arc<AtomicBool>,
    /// Pause between two requests of this worker, so the side load does not starve weir.
    pub(crate) pause: Duration,
    /// Hard end of the worker, whatever happens.
    pub(crate) deadline: Instant,
    /// Hard bound on this worker's requests.
    pub(crate) max_requests: u64,
}

struct Slot {
    conn: Conn,
    host: String,
    sent: u32,
}

impl SideWorker {
    /// Runs until stopped, the deadline or the request bound.
    pub(crate) async fn run(self) {
        if self.domains.is_empty() {
            return;
        }
        let mut next_domain = 0usize;
        let mut slots: Vec<Option<Slot>> = (0..CONNS_PER_WORKER.min(self.domains.len()))
            .map(|_| None)
            .collect();
        let mut sent = 0u64;
        let mut turn = 0usize;
        while !self.stop.load(Ordering::Relaxed)
            && Instant::now() < self.deadline
            && sent < self.max_requests
        {
            let n_slots = slots.len();
            let slot = &mut slots[turn % n_slots];
            turn = turn.wrapping_add(1);
            if slot.as_ref().is_some_and(|s| s.sent >= REQUESTS_PER_CONN) {
                *slot = None;
            }
            if let Some(s) = slot.as_ref()
                && s.conn.is_closed()
            {
                self.stats.server_closes.fetch_add(1, Ordering::Relaxed);
                *slot = None;
            }
            if slot.is_none() {
                let host = domain(self.domains[next_domain % self.domains.len()]);
                next_domain = next_domain.wrapping_add(1);
                self.stats.connections.fetch_add(1, Ordering::Relaxed);
                match self.tls.connect(&host).await {
                    Ok(conn) => {
                        *slot = Some(Slot {
                            conn,
                            host,
                            sent: 0,
                        })
                    }
                    Err(seen) => {
                        self.stats.errors.fetch_add(1, Ordering::Relaxed);
                        self.stats.record(format!("{host}: connect: {seen}"));
                        tokio::time::sleep(self.pause.max(Duration::from_millis(1))).await;
                        continue;
                    }
                }
            }
            let Some(s) = slot.as_mut() else { continue };
            let seen = s.conn.get("/").await;
            s.sent += 1;
            sent += 1;
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            match seen {
                Seen::Status(200) => {
                    self.stats.ok.fetch_add(1, Ordering::Relaxed);
                }
                Seen::Status(other) => {
                    self.stats.non_200.fetch_add(1, Ordering::Relaxed);
                    self.stats.record(format!("{}: status {other}", s.host));
                }
                other => {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    self.stats.record(format!("{}: {other}", s.host));
                    *slot = None;
                }
            }
            if !self.pause.is_zero() {
                tokio::time::sleep(self.pause).await;
            }
        }
    }
}
