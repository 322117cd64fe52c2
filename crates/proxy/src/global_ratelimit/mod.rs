//! Global rate limits: one sliding-window count per (policy target, key) shared by
//! every data plane that reads the same Redis, kept beside the snapshot (like the local
//! buckets) so that counts survive configuration changes that leave the policy in place.
//!
//! The request path never waits for Redis. Each key has a local view: the previous and
//! current windows' global counts as last read, plus what this process admitted since
//! (`pending`, then `inflight` while being written). A request is admitted against that
//! view ([`window::admits`]). A background task ([`sync`]) adds the local counts to Redis
//! every [`RedisSettings::sync_interval`] in one pipeline (`INCRBY` + `PEXPIRE` per
//! window key) and reads back the totals, which include every other data plane's counts.
//! The limit therefore holds to within what the other data planes admit between two
//! syncs.
//!
//! While Redis cannot be reached (a sync failed or timed out, or no Redis is configured)
//! the policy's [`FailMode`] decides: `Open` admits without counting, `Closed` refuses
//! with `503`. The first sync that succeeds resumes limiting.

mod store;
pub(crate) mod sync;
mod window;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use foldhash::HashMap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use weir_model::{FailMode, GlobalRateLimit, PolicyTarget};

pub use store::RedisSettings;

/// Keys tracked at most (over all shards); a shard full of active keys lets new keys
/// through untracked (counted), as the local limiter does.
pub(crate) const MAX_KEYS: usize = 1 << 16;
const SHARDS: usize = 32;
const PER_SHARD: usize = MAX_KEYS / SHARDS;

/// The decision for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Within the limit (or Redis is down and the policy fails open).
    Allowed,
    /// Over the limit.
    Limited {
        /// When one more request would fit.
        retry_after: Duration,
    },
    /// Redis cannot be reached and the policy fails closed.
    Unavailable,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PolicyLabels {
    policy: String,
}

/// What the global limiter counts. Per-policy counts are added by the sync task from
/// per-key tallies, so the request path touches no labelled metric.
#[derive(Clone)]
pub(crate) struct GlobalRateLimitMetrics {
    /// Requests admitted by a global limit, by policy object.
    pub(crate) admitted: Family<PolicyLabels, Counter>,
    /// Requests refused (429) by a global limit, by policy object.
    pub(crate) limited: Family<PolicyLabels, Counter>,
    /// Requests admitted without counting because Redis was unreachable (fail open).
    pub(crate) failed_open: Counter,
    /// Requests refused (503) because Redis was unreachable (fail closed).
    pub(crate) failed_closed: Counter,
    /// Requests that met a global limit on a data plane without `--redis`.
    pub(crate) unconfigured: Counter,
    /// Failed or timed-out Redis connects and syncs.
    pub(crate) redis_errors: Counter,
    /// 1 while the last sync with Redis succeeded.
    pub(crate) redis_up: Gauge,
    /// Duration of one sync (one pipeline round trip), seconds.
    pub(crate) sync_duration: Histogram,
    /// Keys tracked.
    pub(crate) keys: Gauge,
    /// Requests admitted without a key's state because the limiter was full.
    pub(crate) untracked: Counter,
}

impl Default for GlobalRateLimitMetrics {
    fn default() -> Self {
        GlobalRateLimitMetrics {
            admitted: Family::default(),
            limited: Family::default(),
            failed_open: Counter::default(),
            failed_closed: Counter::default(),
            unconfigured: Counter::default(),
            redis_errors: Counter::default(),
            redis_up: Gauge::default(),
            // 100 µs .. ~3 s
            sync_duration: Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.0001, 2.0, 16),
            ),
            keys: Gauge::default(),
            untracked: Counter::default(),
        }
    }
}

impl GlobalRateLimitMetrics {
    pub(crate) fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "weir_global_ratelimit_admitted",
            "Requests admitted by a global rate limit, by policy",
            self.admitted.clone(),
        );
        registry.register(
            "weir_global_ratelimit_limited",
            "Requests refused (429) by a global rate limit, by policy",
            self.limited.clone(),
        );
        registry.register(
            "weir_global_ratelimit_failed_open",
            "Requests admitted uncounted by a global rate limit while Redis was unreachable",
            self.failed_open.clone(),
        );
        registry.register(
            "weir_global_ratelimit_failed_closed",
            "Requests refused (503) by a global rate limit while Redis was unreachable",
            self.failed_closed.clone(),
        );
        registry.register(
            "weir_global_ratelimit_unconfigured",
            "Requests that met a global rate limit on a data plane without --redis \
             (the policy's fail mode applied)",
            self.unconfigured.clone(),
        );
        registry.register(
            "weir_global_ratelimit_redis_errors",
            "Redis connects and syncs of the global rate limiter that failed or timed out",
            self.redis_errors.clone(),
        );
        registry.register(
            "weir_global_ratelimit_redis_up",
            "1 while the global rate limiter's last Redis sync succeeded",
            self.redis_up.clone(),
        );
        registry.register(
            "weir_global_ratelimit_sync_duration_seconds",
            "Round trip of one global rate-limit sync with Redis",
            self.sync_duration.clone(),
        );
        registry.register(
            "weir_global_ratelimit_keys",
            "Keys the global rate limiter tracks",
            self.keys.clone(),
        );
        registry.register(
            "weir_global_ratelimit_untracked",
            "Requests admitted by a global rate limit without state because the \
             limiter's key table was full",
            self.untracked.clone(),
        );
    }
}

/// One key's local view of its global count.
#[derive(Debug)]
struct Entry {
    /// The Redis key prefix (`weir:rl:{<hash>}`; the hash tag keeps both windows of a
    /// key in one Redis Cluster slot).
    redis_key: Box<str>,
    /// The policy object (for metrics).
    policy: std::sync::Arc<str>,
    window_ms: u64,
    /// The fixed window the counts below are of.
    window: u64,
    /// The previous window's global count, as last known.
    prev: u64,
    /// The current window's global count as last read from Redis.
    global: u64,
    /// Admitted here in the current window, being written.
    inflight: u64,
    /// Admitted here in the current window, not yet sent.
    pending: u64,
    /// Admitted here in the previous window, not yet sent (the window turned first).
    pending_prev: u64,
    /// When a request last used the key (Unix ms).
    used_ms: u64,
    /// Tallies since the last sync, for the per-policy metrics.
    admitted: u64,
    limited: u64,
}

impl Entry {
    /// Moves the view to window `w` (no-op when already there).
    fn roll(&mut self, w: u64) {
        if w == self.window {
            return;
        }
        if w == self.window + 1 {
            self.prev = self.global + self.inflight + self.pending;
            self.pending_prev = self.pending;
        } else {
            self.prev = 0;
            self.pending_prev = 0;
        }
        self.window = w;
        self.global = 0;
        self.inflight = 0;
        self.pending = 0;
    }

    fn current(&self) -> u64 {
        self.global + self.inflight + self.pending
    }
}

#[derive(Default)]
struct Shard {
    entries: HashMap<u64, Entry>,
}

/// The counts of every global rate limit, and whether Redis is reachable.
pub(crate) struct GlobalLimiter {
    shards: Box<[Mutex<Shard>]>,
    /// Whether the last sync failed (or no Redis is configured).
    down: AtomicBool,
    configured: bool,
    /// Logged once: a global limit met on a data plane without Redis.
    warned_unconfigured: AtomicBool,
    pub(crate) metrics: GlobalRateLimitMetrics,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl GlobalLimiter {
    /// A limiter; `configured` says whether a Redis is configured (the sync task runs).
    pub(crate) fn new(configured: bool, metrics: GlobalRateLimitMetrics) -> GlobalLimiter {
        GlobalLimiter {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            down: AtomicBool::new(!configured),
            configured,
            warned_unconfigured: AtomicBool::new(false),
            metrics,
        }
    }

    /// Counts one request of `key` against `limit` (set by policy object `policy`) of
    /// the policy attached to `target`.
    pub(crate) fn check(
        &self,
        target: &PolicyTarget,
        policy: &std::sync::Arc<str>,
        limit: &GlobalRateLimit,
        key: &[u8],
    ) -> Decision {
        self.check_at(target, policy, limit, key, now_ms())
    }

    fn check_at(
        &self,
        target: &PolicyTarget,
        policy: &std::sync::Arc<str>,
        limit: &GlobalRateLimit,
        key: &[u8],
        now: u64,
    ) -> Decision {
        if self.down.load(Ordering::Relaxed) {
            if !self.configured {
                self.metrics.unconfigured.inc();
                if !self.warned_unconfigured.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        %policy,
                        "a global rate limit applies but this data plane has no Redis \
                         (--redis): its fail mode decides"
                    );
                }
            }
            return match limit.fail_mode {
                FailMode::Open => {
                    self.metrics.failed_open.inc();
                    Decision::Allowed
                }
                FailMode::Closed => {
                    self.metrics.failed_closed.inc();
                    Decision::Unavailable
                }
            };
        }
        let window_ms = u64::try_from(limit.window.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let digest = digest_of(target, policy, window_ms, key);
        let id = u64::from_le_bytes(digest[..8].try_into().unwrap_or_default());
        let (w, elapsed) = window::position(now, window_ms);
        let shard = &self.shards[(id >> 59) as usize % SHARDS];
        let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        let len = shard.entries.len();
        let entry = match shard.entries.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(_) if len >= PER_SHARD => {
                self.metrics.untracked.inc();
                return Decision::Allowed;
            }
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Entry {
                redis_key: redis_key(&digest).into(),
                policy: policy.clone(),
                window_ms,
                window: w,
                prev: 0,
                global: 0,
                inflight: 0,
                pending: 0,
                pending_prev: 0,
                used_ms: now,
                admitted: 0,
                limited: 0,
            }),
        };
        entry.roll(w);
        entry.used_ms = now;
        if window::admits(
            limit.requests,
            entry.prev,
            entry.current(),
            elapsed,
            window_ms,
        ) {
            entry.pending += 1;
            entry.admitted += 1;
            Decision::Allowed
        } else {
            entry.limited += 1;
            Decision::Limited {
                retry_after: window::retry_after(
                    limit.requests,
                    entry.prev,
                    entry.current(),
                    elapsed,
                    window_ms,
                ),
            }
        }
    }

    fn set_down(&self, down: bool) {
        let was = self.down.swap(down, Ordering::Relaxed);
        self.metrics.redis_up.set(i64::from(!down));
        if was != down {
            if down {
                tracing::warn!("Redis unreachable: global rate limits follow their fail mode");
            } else {
                tracing::info!("Redis reachable: global rate limits apply");
            }
        }
        if down {
            // Counts admitted before the outage are not written later: by then they
            // would be stale, and the views restart from what Redis holds.
            for shard in self.shards.iter() {
                let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
                for e in shard.entries.values_mut() {
                    e.inflight = 0;
                    e.pending = 0;
                    e.pending_prev = 0;
                }
            }
        }
    }

    /// Keys tracked (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap().entries.len())
            .sum()
    }
}

/// A key's digest, stable across processes (every data plane must name a key alike):
/// SHA-256 of the target, the policy object, the window and the key value, so that a
/// client choosing header values cannot make its key collide with someone else's (a
/// fast non-cryptographic hash would let it). The window is part of it because counts of
/// different windows do not compare; the request limit is not, so editing it keeps the
/// counts. Nothing is allocated: the target is written into the digest as it is
/// formatted.
fn digest_of(target: &PolicyTarget, policy: &str, window_ms: u64, key: &[u8]) -> [u8; 16] {
    struct Feed<'a>(&'a mut aws_lc_rs::digest::Context);
    impl std::fmt::Write for Feed<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.update(s.as_bytes());
            Ok(())
        }
    }
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    let _ = std::fmt::Write::write_fmt(&mut Feed(&mut ctx), format_args!("{target}"));
    ctx.update(&[0]);
    ctx.update(policy.as_bytes());
    ctx.update(&[0]);
    ctx.update(&window_ms.to_le_bytes());
    ctx.update(key);
    let d = ctx.finish();
    let mut out = [0u8; 16];
    out.copy_from_slice(&d.as_ref()[..16]);
    out
}

/// The Redis key prefix of a digest (`weir:rl:{<hex>}`; the window index follows).
fn redis_key(digest: &[u8; 16]) -> String {
    use std::fmt::Write;
    let mut k = String::with_capacity(8 + 2 + 32);
    k.push_str("weir:rl:{");
    for b in digest {
        let _ = write!(k, "{b:02x}");
    }
    k.push('}');
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_model::RateLimitKey;

    fn limit(requests: u32, fail_mode: FailMode) -> GlobalRateLimit {
        GlobalRateLimit {
            requests,
            window: Duration::from_secs(1),
            key: RateLimitKey::Target,
            fail_mode,
        }
    }

    fn gw() -> PolicyTarget {
        PolicyTarget::Gateway("ns/gw".into())
    }

    #[test]
    fn counts_locally_until_synced_and_slides_across_windows() {
        let g = GlobalLimiter::new(true, GlobalRateLimitMetrics::default());
        let p: std::sync::Arc<str> = "ns/p".into();
        let l = limit(5, FailMode::Open);
        let t0 = 1_000_000;
        let allowed = (0..8)
            .filter(|_| g.check_at(&gw(), &p, &l, b"", t0) == Decision::Allowed)
            .count();
        assert_eq!(allowed, 5);
        // Half-way through the next window half of the previous count still counts.
        let t1 = t0 + 1500;
        let allowed = (0..8)
            .filter(|_| g.check_at(&gw(), &p, &l, b"", t1) == Decision::Allowed)
            .count();
        assert_eq!(allowed, 2, "5 × 0.5 = 2.5 of the previous window, +2 ≤ 5");
        assert_eq!(g.len(), 1);
    }

    #[test]
    fn fail_modes_apply_while_redis_is_down() {
        let g = GlobalLimiter::new(true, GlobalRateLimitMetrics::default());
        let p: std::sync::Arc<str> = "ns/p".into();
        g.set_down(true);
        for _ in 0..10 {
            assert_eq!(
                g.check_at(&gw(), &p, &limit(1, FailMode::Open), b"", 0),
                Decision::Allowed
            );
        }
        assert_eq!(
            g.check_at(&gw(), &p, &limit(1, FailMode::Closed), b"", 0),
            Decision::Unavailable
        );
        assert_eq!(g.metrics.failed_open.get(), 10);
        g.set_down(false);
        assert_eq!(
            g.check_at(&gw(), &p, &limit(1, FailMode::Closed), b"", 0),
            Decision::Allowed
        );
        // Without Redis configured the fail mode always applies.
        let g = GlobalLimiter::new(false, GlobalRateLimitMetrics::default());
        assert_eq!(
            g.check_at(&gw(), &p, &limit(1, FailMode::Closed), b"", 0),
            Decision::Unavailable
        );
        assert_eq!(g.metrics.unconfigured.get(), 1);
    }

    #[test]
    fn keys_are_stable_and_distinct() {
        let a = digest_of(&gw(), "ns/p", 1000, b"x");
        assert_eq!(a, digest_of(&gw(), "ns/p", 1000, b"x"));
        let k = redis_key(&a);
        assert!(
            k.starts_with("weir:rl:{") && k.ends_with('}') && k.len() == 42,
            "{k}"
        );
        assert_ne!(digest_of(&gw(), "ns/p", 1000, b"y"), a);
        assert_ne!(digest_of(&gw(), "ns/p", 60_000, b"x"), a);
        assert_ne!(digest_of(&gw(), "ns/q", 1000, b"x"), a);
        // Pinned: every data plane, of every release, must name the key alike.
        // (Python: sha256(b"gateway ns/gw\0ns/p\0" + (1000).to_bytes(8, "little") + b"x"))
        assert_eq!(k, "weir:rl:{0323b7f97983b6c69c72f17dec1f33df}");
    }

    #[test]
    fn memory_is_bounded() {
        let g = GlobalLimiter::new(true, GlobalRateLimitMetrics::default());
        let p: std::sync::Arc<str> = "ns/p".into();
        let l = limit(1, FailMode::Open);
        for i in 0..(MAX_KEYS as u64 + 1000) {
            g.check_at(&gw(), &p, &l, &i.to_le_bytes(), 0);
        }
        assert!(g.len() <= MAX_KEYS);
        assert!(g.metrics.untracked.get() >= 1000);
    }
}
