//! The timed changes: add, modify and remove one domain, each timed from just before the
//! rename or unlink to the first HTTPS response that shows the new state.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tokio::time::Instant;

use crate::certs::Leaf;
use crate::client::{Get, Probe, Seen, Tls};
use crate::manifests::{ConfigDir, LISTENERS_PER_GATEWAY, domain, gateway_yaml};
use crate::progress::Progress;
use crate::propagation::Layout;
use crate::report::OpResult;

/// How the changes are paced and bounded.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pacing {
    /// Pause after a failed poll.
    pub(crate) poll_interval: Duration,
    /// Longest wait for one change to show; longer counts as a failure.
    pub(crate) timeout: Duration,
    /// Pause between writing the staged file and the timed rename, so that the watcher
    /// events of the staging write are not inside the timed window.
    pub(crate) settle: Duration,
}

/// What a change waits for.
pub(crate) enum Want {
    /// `/` answers 200 (a new domain).
    Serving,
    /// `path` answers 200 and `/` answers 404: only the new rule can do both.
    Moved { path: String },
    /// `/` answers 404, the handshake fails (the certificate is gone) or the connection is
    /// refused (layout `gateway`: the last listener of a Gateway went away, so it no longer
    /// listens).
    Gone,
}

/// Polls `probe` until `want` holds or the timeout passes. Returns the latency from
/// `start`, the number of polls and the last observation.
pub(crate) async fn wait_for(
    probe: &mut impl Get,
    want: &Want,
    start: Instant,
    pacing: Pacing,
) -> (Option<Duration>, u32, Seen) {
    let deadline = start + pacing.timeout;
    let mut polls = 0u32;
    let max_polls = u32::MAX / 2;
    loop {
        polls += 1;
        let (done, seen) = match want {
            Want::Serving => {
                let seen = probe.get("/").await;
                (seen == Seen::Status(200), seen)
            }
            Want::Moved { path } => {
                let seen = probe.get(path).await;
                if seen == Seen::Status(200) {
                    let root = probe.get("/").await;
                    (root == Seen::Status(404), root)
                } else {
                    (false, seen)
                }
            }
            Want::Gone => {
                let seen = probe.get("/").await;
                let refused = matches!(&seen, Seen::Failed(e) if e.contains("Connection refused"));
                (
                    refused || matches!(seen, Seen::Status(404) | Seen::Handshake(_)),
                    seen,
                )
            }
        };
        let now = Instant::now();
        if done {
            return (Some(now - start), polls, seen);
        }
        if now >= deadline || polls >= max_polls {
            return (None, polls, seen);
        }
        pause(pacing.poll_interval).await;
    }
}

/// Sleeps for `d`, also below a millisecond. tokio's timer counts whole milliseconds and
/// rounds a sleep up to the next tick, so `tokio::time::sleep(200 µs)` pauses 1–2 ms: a
/// change a poll just missed would be reported a millisecond late, more often the slower
/// the change, which inflates the ratios between two sizes. Short pauses therefore sleep on
/// a blocking thread (`nanosleep`, accurate to tens of µs) instead.
pub(crate) async fn pause(d: Duration) {
    if d >= Duration::from_millis(5) {
        tokio::time::sleep(d).await;
    } else if !d.is_zero() {
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(d)).await;
    }
}

/// The changes of one run, sharing the config directory and the client.
pub(crate) struct Changer<'a> {
    pub(crate) dir: &'a ConfigDir,
    pub(crate) tls: &'a Tls,
    pub(crate) layout: Layout,
    /// The port every Gateway listens on (layout `gateway`).
    pub(crate) https_port: u16,
    pub(crate) pacing: Pacing,
    pub(crate) progress: Arc<Progress>,
}

impl Changer<'_> {
    fn finish(
        &self,
        change: usize,
        i: usize,
        call: Duration,
        timed: (Option<Duration>, u32, Seen),
    ) -> OpResult {
        let (latency, polls, seen) = timed;
        self.progress.step(latency);
        if latency.is_none() {
            self.progress.say(&format!(
                "change {change} on {} timed out; last poll saw {seen}",
                domain(i)
            ));
        }
        OpResult {
            change,
            domain: domain(i),
            ms: latency.map(|d| d.as_secs_f64() * 1000.0),
            call_ms: call.as_secs_f64() * 1000.0,
            polls,
            last_seen: seen.to_string(),
        }
    }

    /// Change `change`: adds domain `i` with `leaf`. In layout `gateway` this also adds
    /// listener `l<i>` to its Gateway: two renames, timed from the first.
    pub(crate) async fn add(&self, change: usize, i: usize, leaf: &Leaf) -> Result<OpResult> {
        self.dir
            .stage(i, &self.layout.domain_file(i, leaf, "/", self.https_port))?;
        tokio::time::sleep(self.pacing.settle).await;
        let mut probe = Probe::new(self.tls, domain(i));
        let start = Instant::now();
        self.dir.commit(i)?;
        let call = start.elapsed();
        if self.layout == Layout::Gateway {
            let j = i / LISTENERS_PER_GATEWAY;
            self.dir
                .write_gateway(j, &gateway_yaml(j, i + 1, self.https_port))?;
        }
        let timed = wait_for(&mut probe, &Want::Serving, start, self.pacing).await;
        Ok(self.finish(change, i, call, timed))
    }

    /// Change `change`: moves domain `i`'s route from `/` to `/v2-<change>`.
    pub(crate) async fn modify(&self, change: usize, i: usize, leaf: &Leaf) -> Result<OpResult> {
        let path = format!("/v2-{change}");
        self.dir
            .stage(i, &self.layout.domain_file(i, leaf, &path, self.https_port))?;
        let mut probe = self.warmed(i).await;
        self.dir.look_up(i);
        tokio::time::sleep(self.pacing.settle).await;
        let start = Instant::now();
        self.dir.commit(i)?;
        let call = start.elapsed();
        let timed = wait_for(&mut probe, &Want::Moved { path }, start, self.pacing).await;
        Ok(self.finish(change, i, call, timed))
    }

    /// Change `change`: removes domain `i`'s file.
    pub(crate) async fn remove(&self, change: usize, i: usize) -> Result<OpResult> {
        let mut probe = self.warmed(i).await;
        self.dir.look_up(i);
        tokio::time::sleep(self.pacing.settle).await;
        let start = Instant::now();
        self.dir.remove(i)?;
        let call = start.elapsed();
        let timed = wait_for(&mut probe, &Want::Gone, start, self.pacing).await;
        Ok(self.finish(change, i, call, timed))
    }

    /// A probe of domain `i` with its connection open and checked (outside the timed
    /// window), so that polls reuse it while it lasts.
    async fn warmed(&self, i: usize) -> Probe {
        let mut probe = Probe::new(self.tls, domain(i));
        let seen = probe.get("/").await;
        if seen != Seen::Status(200) {
            self.progress.say(&format!(
                "{} did not answer 200 before its change: {seen}",
                domain(i)
            ));
        }
        probe
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Not a check (no timing thresholds in tests): prints the median length of a 200 µs
    /// pause through `tokio::time::sleep` and through `pause`, the figures BENCHMARKS.md
    /// quotes. `cargo test --release -p weir-bench --bin weir-bench pause_lengths -- --ignored --nocapture`
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "a measurement; run by hand"]
    async fn pause_lengths() {
        let d = Duration::from_micros(200);
        let mut tokio_sleep = Vec::new();
        let mut ours = Vec::new();
        for _ in 0..500 {
            let t = Instant::now();
            tokio::time::sleep(d).await;
            tokio_sleep.push(t.elapsed());
            let t = Instant::now();
            pause(d).await;
            ours.push(t.elapsed());
        }
        tokio_sleep.sort();
        ours.sort();
        println!(
            "200 µs pause, median / p90 over 500: tokio::time::sleep {:?} / {:?}, pause {:?} / {:?}",
            tokio_sleep[250], tokio_sleep[450], ours[250], ours[450]
        );
    }
}
