//! Concurrency limits (`Policy::concurrency_limit`, ingress-nginx's `limit-connections`):
//! how many requests of one client address may be in progress at once under one policy.
//! State beside the snapshot, like the rate-limit buckets: counts by (policy object,
//! client address), an entry existing only while one of its requests is in progress, so
//! the table holds at most as many entries as requests in flight.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Shards of the table (a request locks one, twice: to enter and to leave).
const SHARDS: usize = 16;

type Key = (Arc<str>, IpAddr);

/// The counts of requests in progress.
#[derive(Default)]
pub(crate) struct ConcurrencyLimiter {
    shards: [Mutex<HashMap<Key, u32>>; SHARDS],
    seed: foldhash::quality::RandomState,
}

/// One request in progress; dropping it (with the response body, once sent, or with an
/// unanswered request) gives its place back.
pub(crate) struct InProgress {
    limiter: Arc<ConcurrencyLimiter>,
    key: Key,
}

impl ConcurrencyLimiter {
    fn shard(&self, key: &Key) -> &Mutex<HashMap<Key, u32>> {
        let h = self.seed.hash_one(key) as usize;
        &self.shards[h % SHARDS]
    }

    /// A place for a request of `client` under `policy`, if fewer than `limit` of its
    /// requests are in progress.
    pub(crate) fn enter(
        self: &Arc<Self>,
        policy: &Arc<str>,
        client: IpAddr,
        limit: u32,
    ) -> Option<InProgress> {
        let key = (Arc::clone(policy), client);
        let mut shard = self.shard(&key).lock().unwrap_or_else(|e| e.into_inner());
        let n = shard.entry(key.clone()).or_insert(0);
        if *n >= limit {
            return None;
        }
        *n += 1;
        drop(shard);
        Some(InProgress {
            limiter: Arc::clone(self),
            key,
        })
    }

    /// Requests of `client` under `policy` in progress (for tests).
    #[cfg(test)]
    fn in_progress(&self, policy: &str, client: IpAddr) -> u32 {
        let key: Key = (policy.into(), client);
        let shard = self.shard(&key).lock().unwrap();
        shard.get(&key).copied().unwrap_or(0)
    }

    #[cfg(test)]
    fn entries(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap().len()).sum()
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        let mut shard = self
            .limiter
            .shard(&self.key)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = shard.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                shard.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_per_client_and_policy_and_given_back() {
        let l = Arc::new(ConcurrencyLimiter::default());
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let p: Arc<str> = "ns/p".into();
        let q: Arc<str> = "ns/q".into();
        let first = l.enter(&p, a, 2).unwrap();
        let second = l.enter(&p, a, 2).unwrap();
        assert!(l.enter(&p, a, 2).is_none(), "a third of the same client");
        assert_eq!(l.in_progress("ns/p", a), 2);
        // Another client, another policy: places of their own.
        let other_client = l.enter(&p, b, 2).unwrap();
        let other_policy = l.enter(&q, a, 1).unwrap();
        drop(first);
        let third = l.enter(&p, a, 2).expect("a place given back");
        drop((second, third, other_client, other_policy));
        assert_eq!(l.in_progress("ns/p", a), 0);
        assert_eq!(l.entries(), 0, "no entry without a request in progress");
    }
}
