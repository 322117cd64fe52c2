//! Local rate limits: one token bucket per (policy target, key), kept beside the
//! snapshot so that a budget survives configuration changes that leave its policy in
//! place.
//!
//! Each bucket is one `u64`, the GCRA "theoretical arrival time" (nanoseconds since the
//! limiter started): a request at `now` is allowed when the bucket, after adding one
//! request's interval, would not run more than `burst` intervals ahead of `now`. A bucket
//! whose time is in the past is full, which is what an absent bucket is: such entries are
//! dropped whenever a shard is full, so memory is bounded by [`MAX_KEYS`] and idle keys
//! cost nothing once their budget has come back. A shard still full of active keys lets
//! new keys through untracked (and counts them) rather than refusing clients that were
//! never measured.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use foldhash::HashMap;
use prometheus_client::metrics::counter::Counter;
use weir_model::{LocalRateLimit, PolicyTarget};

/// Buckets kept at most (over all shards).
pub(crate) const MAX_KEYS: usize = 1 << 18;
const SHARDS: usize = 64;
const PER_SHARD: usize = MAX_KEYS / SHARDS;

/// The decision for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Within budget; `remaining` more requests would be allowed right now.
    Allowed {
        /// Requests left in the burst.
        remaining: u32,
    },
    /// Over budget: the next request is allowed after `retry_after`.
    Limited {
        /// Time until one request's budget has come back.
        retry_after: Duration,
    },
}

/// What the limiter counts (registered with the other data-plane metrics).
#[derive(Clone, Default)]
pub(crate) struct RateLimitMetrics {
    /// Requests refused.
    pub(crate) limited: Counter,
    /// Requests let through without a bucket because every bucket of their shard was in
    /// use.
    pub(crate) untracked: Counter,
}

/// Part of the buckets, under one lock.
#[derive(Default)]
struct Shard {
    /// Bucket id → theoretical arrival time.
    buckets: HashMap<u64, u64>,
    /// When full buckets were last dropped: at most once per [`SWEEP_EVERY`], so that a
    /// flood of new keys into a shard of active ones costs no more than one sweep.
    swept_at: u64,
}

/// The least time between two sweeps of a full shard, in nanoseconds.
const SWEEP_EVERY: u64 = 50_000_000;

/// The buckets of every local rate limit.
pub(crate) struct RateLimiter {
    epoch: Instant,
    /// Random per process, so that keys chosen by clients (header values) cannot be
    /// made to share a bucket with someone else's.
    seed: foldhash::quality::RandomState,
    shards: Box<[Mutex<Shard>]>,
    metrics: RateLimitMetrics,
}

impl RateLimiter {
    pub(crate) fn new(metrics: RateLimitMetrics) -> RateLimiter {
        RateLimiter {
            epoch: Instant::now(),
            seed: foldhash::quality::RandomState::default(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            metrics,
        }
    }

    /// Counts one request of `key` against `limit` of the policy attached to `target`.
    pub(crate) fn check(
        &self,
        target: &PolicyTarget,
        limit: &LocalRateLimit,
        key: &[u8],
        now: Instant,
    ) -> Decision {
        let id = {
            let mut h = self.seed.build_hasher();
            target.hash(&mut h);
            key.hash(&mut h);
            h.finish()
        };
        let now_ns = nanos(now.saturating_duration_since(self.epoch));
        let interval = nanos(limit.interval()).max(1);
        let burst = u64::from(limit.burst.max(1));
        let shard = &self.shards[(id >> 58) as usize % SHARDS];
        let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        let shard = &mut *shard;
        let buckets = &mut shard.buckets;
        if buckets.len() >= PER_SHARD && !buckets.contains_key(&id) {
            if now_ns.saturating_sub(shard.swept_at) >= SWEEP_EVERY {
                buckets.retain(|_, tat| *tat > now_ns);
                shard.swept_at = now_ns;
            }
            if buckets.len() >= PER_SHARD {
                self.metrics.untracked.inc();
                return Decision::Allowed {
                    remaining: limit.burst.saturating_sub(1),
                };
            }
        }
        let tat = buckets.get(&id).copied().unwrap_or(0).max(now_ns);
        let next = tat.saturating_add(interval);
        // Signed: near the limiter's start `next` is smaller than a whole burst.
        let allowed_from = i128::from(next) - i128::from(burst) * i128::from(interval);
        let now_i = i128::from(now_ns);
        if now_i < allowed_from {
            self.metrics.limited.inc();
            let wait = u64::try_from(allowed_from - now_i).unwrap_or(u64::MAX);
            return Decision::Limited {
                retry_after: Duration::from_nanos(wait),
            };
        }
        buckets.insert(id, next);
        let remaining = (now_i - allowed_from) / i128::from(interval);
        Decision::Allowed {
            remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
        }
    }

    /// Buckets currently kept (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap().buckets.len())
            .sum()
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_model::RateLimitKey;

    fn limit(requests: u32, burst: u32) -> LocalRateLimit {
        LocalRateLimit {
            requests,
            per: Duration::from_secs(1),
            burst,
            key: RateLimitKey::ClientIp,
        }
    }

    fn gw() -> PolicyTarget {
        PolicyTarget::Gateway("ns/gw".into())
    }

    #[test]
    fn burst_then_steady_rate() {
        let rl = RateLimiter::new(RateLimitMetrics::default());
        let l = limit(10, 3);
        let t0 = Instant::now();
        let decisions: Vec<Decision> = (0..4).map(|_| rl.check(&gw(), &l, b"a", t0)).collect();
        assert_eq!(
            decisions[..3],
            [
                Decision::Allowed { remaining: 2 },
                Decision::Allowed { remaining: 1 },
                Decision::Allowed { remaining: 0 },
            ]
        );
        let Decision::Limited { retry_after } = decisions[3] else {
            panic!("the fourth request at once is over a burst of 3: {decisions:?}");
        };
        assert!(retry_after <= Duration::from_millis(100), "{retry_after:?}");
        // One interval later, one more request.
        let t1 = t0 + Duration::from_millis(100);
        assert!(matches!(
            rl.check(&gw(), &l, b"a", t1),
            Decision::Allowed { .. }
        ));
        assert!(matches!(
            rl.check(&gw(), &l, b"a", t1),
            Decision::Limited { .. }
        ));
        assert_eq!(rl.metrics.limited.get(), 2);
    }

    #[test]
    fn keys_and_targets_have_their_own_budgets() {
        let rl = RateLimiter::new(RateLimitMetrics::default());
        let l = limit(1, 1);
        let t0 = Instant::now();
        assert!(matches!(
            rl.check(&gw(), &l, b"a", t0),
            Decision::Allowed { .. }
        ));
        assert!(matches!(
            rl.check(&gw(), &l, b"a", t0),
            Decision::Limited { .. }
        ));
        assert!(matches!(
            rl.check(&gw(), &l, b"b", t0),
            Decision::Allowed { .. }
        ));
        let other = PolicyTarget::Gateway("ns/other".into());
        assert!(matches!(
            rl.check(&other, &l, b"a", t0),
            Decision::Allowed { .. }
        ));
    }

    #[test]
    fn memory_is_bounded_and_idle_keys_are_dropped() {
        let rl = RateLimiter::new(RateLimitMetrics::default());
        let l = limit(1000, 1);
        let t0 = Instant::now();
        for i in 0..(MAX_KEYS as u64 * 2) {
            rl.check(&gw(), &l, &i.to_le_bytes(), t0);
        }
        assert!(rl.len() <= MAX_KEYS, "{}", rl.len());
        assert!(rl.metrics.untracked.get() > 0);
        // A second later every bucket is full again: new keys replace them.
        let t1 = t0 + Duration::from_secs(1);
        let before = rl.metrics.untracked.get();
        for i in 0..1000u64 {
            let d = rl.check(&gw(), &l, &(u64::MAX - i).to_le_bytes(), t1);
            assert!(matches!(d, Decision::Allowed { .. }));
        }
        assert_eq!(rl.metrics.untracked.get(), before);
        assert!(rl.len() <= MAX_KEYS);
    }
}
