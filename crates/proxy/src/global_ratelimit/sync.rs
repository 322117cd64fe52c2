//! The background task that adds local counts to Redis and reads the global ones back.

use std::sync::{Arc, Weak};
use std::time::Instant;

use foldhash::HashMap;

use super::store::{Conn, RedisSettings};
use super::{GlobalLimiter, PolicyLabels, now_ms};

/// One key's share of a sync.
struct Item {
    id: u64,
    shard: usize,
    window: u64,
    redis_key: Box<str>,
    window_ms: u64,
    add_prev: u64,
    add_cur: u64,
}

/// Runs until the limiter is dropped (its data plane is gone).
pub(crate) async fn run(limiter: Weak<GlobalLimiter>, settings: RedisSettings) {
    let mut tick = tokio::time::interval(settings.sync_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut conn: Option<Conn> = None;
    loop {
        tick.tick().await;
        let Some(limiter) = limiter.upgrade() else {
            return;
        };
        let c = match &conn {
            Some(c) => c.clone(),
            None => match tokio::time::timeout(settings.timeout, Conn::connect(&settings)).await {
                Ok(Ok(c)) => {
                    conn = Some(c.clone());
                    c
                }
                Ok(Err(e)) => {
                    failed(&limiter, &format!("connect: {e}"));
                    continue;
                }
                Err(_) => {
                    failed(&limiter, "connect: timed out");
                    continue;
                }
            },
        };
        let batch = limiter.take_batch(now_ms());
        if batch.is_empty() && !limiter.down.load(std::sync::atomic::Ordering::Relaxed) {
            // Nothing to write or read: no round trip while idle (the next request's
            // sync finds out whether Redis is still there).
            continue;
        }
        let start = Instant::now();
        let result = if batch.is_empty() {
            tokio::time::timeout(settings.timeout, c.ping())
                .await
                .map(|r| r.map(|()| Vec::new()))
        } else {
            let pipes = pipelines(&batch, c.is_cluster());
            tokio::time::timeout(settings.timeout, c.run(pipes)).await
        };
        match result {
            Ok(Ok(replies)) => {
                limiter
                    .metrics
                    .sync_duration
                    .observe(start.elapsed().as_secs_f64());
                limiter.apply(&batch, &replies.concat());
                limiter.set_down(false);
            }
            Ok(Err(e)) => {
                conn = None;
                failed(&limiter, &format!("sync: {e}"));
            }
            Err(_) => {
                conn = None;
                failed(&limiter, "sync: timed out");
            }
        }
    }
}

fn failed(limiter: &GlobalLimiter, why: &str) {
    limiter.metrics.redis_errors.inc();
    if !limiter.down.load(std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(error = why, "global rate limits: Redis call failed");
    }
    limiter.set_down(true);
}

/// The commands of a batch: per key, `INCRBY` + `PEXPIRE` on the previous and the current
/// window's key; the two `INCRBY` replies are the windows' totals. One pipeline for a
/// single server; one per key for a Cluster (both windows of a key share a slot).
fn pipelines(batch: &[Item], cluster: bool) -> Vec<redis::Pipeline> {
    let mut pipes = Vec::new();
    let mut p = redis::pipe();
    for item in batch {
        let ttl = item.window_ms.saturating_mul(2).saturating_add(1000);
        let prev = format!("{}:{}", item.redis_key, item.window.wrapping_sub(1));
        let cur = format!("{}:{}", item.redis_key, item.window);
        p.cmd("INCRBY").arg(&prev).arg(item.add_prev);
        p.cmd("PEXPIRE").arg(&prev).arg(ttl).ignore();
        p.cmd("INCRBY").arg(&cur).arg(item.add_cur);
        p.cmd("PEXPIRE").arg(&cur).arg(ttl).ignore();
        if cluster {
            pipes.push(std::mem::replace(&mut p, redis::pipe()));
        }
    }
    if !cluster {
        pipes.push(p);
    }
    pipes
}

impl GlobalLimiter {
    /// Takes every key's unsent counts (they become in flight), drops keys idle for two
    /// windows, and adds the per-policy tallies to the metrics.
    fn take_batch(&self, now: u64) -> Vec<Item> {
        let mut batch = Vec::new();
        let mut tallies: HashMap<Arc<str>, (u64, u64)> = HashMap::default();
        let mut keys = 0;
        for (i, shard) in self.shards.iter().enumerate() {
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            shard.entries.retain(|_, e| {
                now.saturating_sub(e.used_ms) < e.window_ms.saturating_mul(2)
                    || e.pending + e.pending_prev > 0
            });
            keys += shard.entries.len();
            for (id, e) in shard.entries.iter_mut() {
                let (w, _) = super::window::position(now, e.window_ms);
                e.roll(w);
                if e.admitted + e.limited > 0 {
                    let t = tallies.entry(e.policy.clone()).or_default();
                    t.0 += std::mem::take(&mut e.admitted);
                    t.1 += std::mem::take(&mut e.limited);
                }
                // Keys used in the last window are read back even without counts of
                // their own: the other data planes' counts change their budget.
                if e.pending + e.pending_prev == 0 && now.saturating_sub(e.used_ms) >= e.window_ms {
                    continue;
                }
                batch.push(Item {
                    id: *id,
                    shard: i,
                    window: e.window,
                    redis_key: e.redis_key.clone(),
                    window_ms: e.window_ms,
                    add_prev: std::mem::take(&mut e.pending_prev),
                    add_cur: e.pending,
                });
                e.inflight += std::mem::take(&mut e.pending);
            }
        }
        self.metrics
            .keys
            .set(i64::try_from(keys).unwrap_or(i64::MAX));
        for (policy, (admitted, limited)) in tallies {
            let labels = PolicyLabels {
                policy: policy.to_string(),
            };
            self.metrics
                .admitted
                .get_or_create(&labels)
                .inc_by(admitted);
            self.metrics.limited.get_or_create(&labels).inc_by(limited);
        }
        batch
    }

    /// Takes the totals Redis answered (two per item: previous, current window).
    fn apply(&self, batch: &[Item], totals: &[u64]) {
        for (item, t) in batch.iter().zip(totals.chunks_exact(2)) {
            let (prev, cur) = (t[0], t[1]);
            let mut shard = self.shards[item.shard]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let Some(e) = shard.entries.get_mut(&item.id) else {
                continue;
            };
            if e.window == item.window {
                e.prev = prev;
                e.global = cur;
                e.inflight = 0;
            } else if e.window == item.window + 1 {
                // The window turned while the sync was in flight: what was the current
                // window's total is now the previous one (plus what is still unsent).
                e.prev = cur + e.pending_prev;
            }
        }
    }
}
