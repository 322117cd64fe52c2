//! JWK Sets fetched from a URL (`weir_model::RemoteJwks`), beside the snapshot: one
//! fetcher task per set (URL, intervals and CA), started by the first request that needs
//! it, refreshing every `refresh` and, at most once per [`KID_REFRESH_EVERY`], when a
//! token names a `kid` the set does not hold. A failed fetch keeps the last good keys.
//! A set no request has used for [`IDLE_STOP`] is dropped and its task ends.
//!
//! The request path reads the keys through an `ArcSwapOption` (no lock besides the
//! registry's map lookup); requests that arrive before the first fetch finished wait for
//! it, up to the set's timeout, off the synchronous phases (`Refusal::WaitJwks`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use http_body_util::{BodyExt, Empty, Limited};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{Notify, watch};
use weir_model::{JwtKey, RemoteJwks, read_jwks};

use crate::outbound;

/// The largest JWK Set document read.
pub(crate) const MAX_DOCUMENT: usize = 1 << 20;
/// The least time between two fetches caused by unknown `kid`s.
pub(crate) const KID_REFRESH_EVERY: Duration = Duration::from_secs(10);
/// A set unused this long is dropped.
const IDLE_STOP: Duration = Duration::from_secs(600);
/// Wait after a failed fetch before the next (at most the refresh interval).
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// Counters of remote JWK Sets (unlabelled: bounded cardinality).
#[derive(Clone, Default)]
pub(crate) struct JwksMetrics {
    /// Fetches that succeeded.
    pub(crate) fetches: Counter,
    /// Fetches that failed (the last good keys kept).
    pub(crate) failures: Counter,
    /// Keys held over every remote set.
    pub(crate) keys: Gauge,
}

/// One remote set's state.
pub(crate) struct Remote {
    /// The keys of the last good fetch (`None` before one succeeded).
    keys: ArcSwapOption<Vec<JwtKey>>,
    /// Becomes true once the first fetch ended (well or not).
    first: watch::Receiver<bool>,
    kick: Notify,
    /// Milliseconds since the registry's epoch: last use, last `kid` refresh asked.
    last_used: AtomicU64,
    last_kid_refresh: AtomicU64,
    timeout: Duration,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("keys", &self.keys().map_or(0, |k| k.len()))
            .field("tried", &self.tried())
            .finish()
    }
}

impl Remote {
    /// The keys of the last good fetch.
    pub(crate) fn keys(&self) -> Option<Arc<Vec<JwtKey>>> {
        self.keys.load_full()
    }

    /// Whether the first fetch has ended.
    pub(crate) fn tried(&self) -> bool {
        *self.first.borrow()
    }

    /// Waits for the first fetch to end, at most the set's timeout.
    pub(crate) async fn wait_first(&self) {
        let mut rx = self.first.clone();
        let _ = tokio::time::timeout(self.timeout, rx.wait_for(|t| *t)).await;
    }
}

/// The data plane's JWT state outside the snapshot: every remote set in use, by its
/// settings, and the tokens verified lately.
pub(crate) struct JwksRegistry {
    /// Tokens verified lately (see [`crate::jwt::TokenCache`]).
    pub(crate) tokens: crate::jwt::TokenCache,
    epoch: Instant,
    sets: Mutex<HashMap<Arc<RemoteJwks>, Arc<Remote>>>,
    metrics: JwksMetrics,
}

impl JwksRegistry {
    pub(crate) fn new(metrics: JwksMetrics) -> JwksRegistry {
        JwksRegistry {
            tokens: crate::jwt::TokenCache::default(),
            epoch: Instant::now(),
            sets: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The state of `set`, its fetcher started on first use.
    pub(crate) fn get(self: &Arc<Self>, set: &Arc<RemoteJwks>) -> Arc<Remote> {
        let now = self.now_ms();
        let mut sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = sets.get(set) {
            r.last_used.store(now, Ordering::Relaxed);
            return Arc::clone(r);
        }
        let (tx, rx) = watch::channel(false);
        let remote = Arc::new(Remote {
            keys: ArcSwapOption::empty(),
            first: rx,
            kick: Notify::new(),
            last_used: AtomicU64::new(now),
            last_kid_refresh: AtomicU64::new(0),
            timeout: set.timeout,
        });
        sets.insert(Arc::clone(set), Arc::clone(&remote));
        tokio::spawn(fetcher(
            Arc::clone(self),
            Arc::clone(set),
            Arc::clone(&remote),
            tx,
        ));
        remote
    }

    /// A token named a `kid` the set does not hold: fetch again soon, at most once per
    /// [`KID_REFRESH_EVERY`].
    pub(crate) fn unknown_kid(&self, remote: &Remote) {
        let now = self.now_ms();
        let last = remote.last_kid_refresh.load(Ordering::Relaxed);
        let every = u64::try_from(KID_REFRESH_EVERY.as_millis()).unwrap_or(u64::MAX);
        if (last == 0 || now.saturating_sub(last) >= every)
            && remote
                .last_kid_refresh
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            remote.kick.notify_one();
        }
    }
}

/// Fetches `set` until it is unused for [`IDLE_STOP`].
async fn fetcher(
    registry: Arc<JwksRegistry>,
    set: Arc<RemoteJwks>,
    remote: Arc<Remote>,
    first: watch::Sender<bool>,
) {
    let roots = match outbound::roots(set.ca_pem.as_deref().map(str::as_bytes)) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(url = %set.url, error = %e, "JWK Set CA unusable; system roots only");
            outbound::roots(None).unwrap_or_else(|_| rustls::RootCertStore::empty())
        }
    };
    let client = outbound::client(roots, set.timeout, Duration::from_secs(90));
    let mut held = 0i64;
    loop {
        let ok = match tokio::time::timeout(set.timeout, fetch(&client, &set)).await {
            Ok(Ok(keys)) => {
                registry.metrics.fetches.inc();
                let n = i64::try_from(keys.len()).unwrap_or(0);
                registry.metrics.keys.inc_by(n - held);
                held = n;
                remote.keys.store(Some(Arc::new(keys)));
                true
            }
            Ok(Err(e)) => {
                registry.metrics.failures.inc();
                tracing::warn!(url = %set.url, error = %e, "JWK Set fetch failed; last keys kept");
                false
            }
            Err(_) => {
                registry.metrics.failures.inc();
                tracing::warn!(url = %set.url, "JWK Set fetch timed out; last keys kept");
                false
            }
        };
        first.send_replace(true);
        let wait = if ok {
            set.refresh
        } else {
            set.refresh.min(RETRY_AFTER_FAILURE)
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = remote.kick.notified() => {}
        }
        let idle = registry
            .now_ms()
            .saturating_sub(remote.last_used.load(Ordering::Relaxed));
        if u128::from(idle) >= IDLE_STOP.as_millis() {
            let mut sets = registry.sets.lock().unwrap_or_else(|p| p.into_inner());
            sets.remove(&set);
            registry.metrics.keys.dec_by(held);
            return;
        }
    }
}

/// One fetch: the document (at most [`MAX_DOCUMENT`] bytes) and its usable keys. A set
/// without any usable key is a failure (the last good keys stay).
async fn fetch(
    client: &outbound::OutboundClient,
    set: &RemoteJwks,
) -> Result<Vec<JwtKey>, crate::error::BoxError> {
    let mut req = http::Request::new(Empty::new());
    *req.uri_mut() = set.url.to_string().parse()?;
    req.headers_mut().insert(
        http::header::HOST,
        http::HeaderValue::from_str(&set.url.authority())?,
    );
    req.headers_mut().insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static("application/json, application/jwk-set+json"),
    );
    let resp = client.request(req).await?;
    if !resp.status().is_success() {
        return Err(format!("answered {}", resp.status()).into());
    }
    let body = Limited::new(resp.into_body(), MAX_DOCUMENT)
        .collect()
        .await?
        .to_bytes();
    let (keys, _skipped) = read_jwks(&body)?;
    if keys.is_empty() {
        return Err("no usable key in the set".into());
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_model::ExtAuthUrl;

    /// A set whose server cannot be reached: the first fetch ends (requests stop
    /// waiting) with no keys and a counted failure; unknown `kid`s ask for one refresh
    /// per interval, not one per token; one fetcher serves every lookup of the set.
    #[tokio::test]
    async fn an_unreachable_set_ends_its_first_fetch_and_refreshes_are_rate_limited() {
        let metrics = JwksMetrics::default();
        let registry = Arc::new(JwksRegistry::new(metrics.clone()));
        let set = Arc::new(RemoteJwks {
            url: ExtAuthUrl::parse("https://127.0.0.1:1/jwks").unwrap(),
            refresh: Duration::from_secs(3600),
            timeout: Duration::from_secs(5),
            ca_pem: None,
        });
        let remote = registry.get(&set);
        assert!(Arc::ptr_eq(&remote, &registry.get(&set)));
        remote.wait_first().await;
        assert!(remote.tried());
        assert!(remote.keys().is_none());
        assert_eq!(metrics.failures.get(), 1);
        registry.unknown_kid(&remote);
        let asked = remote.last_kid_refresh.load(Ordering::Relaxed);
        assert_ne!(asked, 0);
        registry.unknown_kid(&remote);
        assert_eq!(remote.last_kid_refresh.load(Ordering::Relaxed), asked);
    }
}
