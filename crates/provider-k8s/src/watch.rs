//! One watcher per resource type, merged into ordered batches of object changes.

use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use futures_util::StreamExt;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use weir_api::{Kind, Object, ObjectKey};

use crate::kinds::{self, Live, RawObject, Watched};

/// The live status of the objects whose status weir writes, kept current by the
/// watchers and by the status writer's own responses.
#[derive(Clone, Default)]
pub struct LiveCache(Arc<Mutex<HashMap<ObjectKey, Live>>>);

impl LiveCache {
    pub(crate) fn get(&self, key: &ObjectKey) -> Option<Live> {
        self.lock().get(key).cloned()
    }

    /// Records `live` unless a newer version is already known (a watch event can arrive
    /// after the response to our own write).
    pub(crate) fn put(&self, key: ObjectKey, live: Live) {
        match self.lock().entry(key) {
            Entry::Occupied(mut e) => {
                if kinds::newer(&live.resource_version, &e.get().resource_version) {
                    e.insert(live);
                }
            }
            Entry::Vacant(e) => {
                e.insert(live);
            }
        }
    }

    pub(crate) fn remove(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Live>> {
        // A panic while holding the lock leaves a consistent map (every write is one
        // insert or remove), so a poisoned lock is still usable.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Object changes seen by the watchers since the last [`Update`].
#[derive(Debug, Default)]
pub struct Update {
    /// Objects created or changed (spec, labels, …; not status), latest version only,
    /// with their keys (the ones the watchers hold, for the translator to share).
    pub upserts: Vec<(ObjectKey, Arc<Object>)>,
    /// Keys of deleted objects.
    pub deletes: Vec<ObjectKey>,
    /// Objects that could not be read (each names its object and field); the object's
    /// previous version, if any, stays in force.
    pub errors: Vec<String>,
}

impl Update {
    /// Nothing changed and nothing to report.
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty() && self.deletes.is_empty() && self.errors.is_empty()
    }
}

/// What one watcher sends.
struct KindBatch {
    kind: Kind,
    /// Which watcher sent it (a kind may have several: Secrets by type).
    watcher: usize,
    changes: Vec<(ObjectKey, Option<Arc<Object>>)>,
    errors: Vec<String>,
    /// This watcher's initial list is complete.
    synced: bool,
}

/// Watches every kind weir reads and hands out coalesced [`Update`]s.
pub struct KubeProvider {
    rx: mpsc::UnboundedReceiver<KindBatch>,
    watchers: usize,
    synced: HashSet<usize>,
    live: LiveCache,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for KubeProvider {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl KubeProvider {
    /// Starts one watcher per kind. Nothing is delivered before [`KubeProvider::initial`].
    pub fn start(client: kube::Client) -> KubeProvider {
        let (tx, rx) = mpsc::unbounded_channel();
        let live = LiveCache::default();
        let watched = kinds::watched();
        let watchers = watched.len();
        let tasks = watched
            .into_iter()
            .enumerate()
            .map(|(i, w)| tokio::spawn(run(client.clone(), i, w, tx.clone(), live.clone())))
            .collect();
        KubeProvider {
            rx,
            watchers,
            synced: HashSet::new(),
            live,
            tasks,
        }
    }

    /// The live statuses, for the [`crate::StatusWriter`].
    pub fn live(&self) -> LiveCache {
        self.live.clone()
    }

    /// Waits until every watcher has completed its initial list and returns everything
    /// listed: translation never starts from a partially synced cache.
    pub async fn initial(&mut self) -> Update {
        let mut merged = Merge::default();
        while self.synced.len() < self.watchers {
            let Some(b) = self.rx.recv().await else { break };
            if b.synced && self.synced.insert(b.watcher) {
                tracing::debug!(kind = %b.kind, "initial list complete");
            }
            merged.add(b);
        }
        merged.finish()
    }

    /// Waits for the next change and returns it together with every change already
    /// queued behind it (leading-edge coalescing: the first change is never held back).
    /// `None` when the watchers are gone.
    pub async fn next(&mut self) -> Option<(Instant, Update)> {
        let first = self.rx.recv().await?;
        let seen = Instant::now();
        let mut merged = Merge::default();
        merged.add(first);
        while let Ok(b) = self.rx.try_recv() {
            merged.add(b);
        }
        Some((seen, merged.finish()))
    }
}

/// Later changes of the same key replace earlier ones.
#[derive(Default)]
struct Merge {
    changes: HashMap<ObjectKey, Option<Arc<Object>>>,
    errors: Vec<String>,
}

impl Merge {
    fn add(&mut self, b: KindBatch) {
        self.changes.extend(b.changes);
        self.errors.extend(b.errors);
    }

    fn finish(self) -> Update {
        let mut u = Update {
            errors: self.errors,
            ..Update::default()
        };
        // Sorted by the keys the changes came with: an object's `key()` builds a key,
        // and sorting by it built two per comparison (millions for an initial list of
        // 200,000 objects).
        let mut upserts = Vec::with_capacity(self.changes.len());
        for (k, v) in self.changes {
            match v {
                Some(o) => upserts.push((k, o)),
                None => u.deletes.push(k),
            }
        }
        upserts.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        u.upserts = upserts;
        u.deletes.sort();
        u
    }
}

/// One watcher: keeps what it last delivered per key, so that relists deliver only
/// differences and deletions missed while disconnected are detected.
async fn run(
    client: kube::Client,
    watcher: usize,
    w: Watched,
    tx: mpsc::UnboundedSender<KindBatch>,
    live: LiveCache,
) {
    let api: Api<RawObject> = Api::all_with(client, &w.resource);
    let mut cfg = watcher::Config::default();
    if let Some(f) = w.fields {
        cfg = cfg.fields(f);
    }
    let mut stream = watcher::watcher(api, cfg).backoff(backoff()).boxed();
    let mut known: HashMap<ObjectKey, Arc<Object>> = HashMap::new();
    let mut relist: Option<(HashSet<ObjectKey>, KindBatch)> = None;
    let mut ever_synced = false;
    // The resource is not served (404), and that was said.
    let mut missing = false;
    let batch = |synced| KindBatch {
        kind: w.kind,
        watcher,
        changes: Vec::new(),
        errors: Vec::new(),
        synced,
    };
    while let Some(ev) = stream.next().await {
        let ev = match ev {
            Ok(ev) => {
                if !matches!(ev, Event::Init) {
                    missing = false;
                }
                ev
            }
            Err(e) => {
                // A kind whose CRD is not installed must not keep the controller from
                // starting: it counts as synced and empty, and is retried with backoff.
                if !ever_synced && is_not_found(&e) {
                    ever_synced = true;
                    missing = true;
                    tracing::warn!(kind = %w.kind, "resource not served by the API server (CRD not installed?); retrying in the background");
                    let _ = tx.send(batch(true));
                } else if is_not_found(&e) {
                    // Said once per absence, not at every retry.
                    if !std::mem::replace(&mut missing, true) {
                        tracing::warn!(kind = %w.kind, "resource no longer served by the API server (CRD removed?); retrying in the background");
                    }
                } else {
                    tracing::warn!(kind = %w.kind, error = %e, "watch failed; retrying");
                }
                continue;
            }
        };
        match ev {
            Event::Init => relist = Some((HashSet::new(), batch(true))),
            Event::InitApply(obj) => {
                let Some((seen, b)) = relist.as_mut() else {
                    continue;
                };
                if let Some(key) = accept(&w, obj, &mut known, &live, b) {
                    seen.insert(key);
                }
            }
            Event::InitDone => {
                let Some((seen, mut b)) = relist.take() else {
                    continue;
                };
                let gone: Vec<ObjectKey> = known
                    .keys()
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect();
                for k in gone {
                    known.remove(&k);
                    live.remove(&k);
                    b.changes.push((k, None));
                }
                ever_synced = true;
                if tx.send(b).is_err() {
                    return;
                }
            }
            Event::Apply(obj) => {
                let mut b = batch(false);
                accept(&w, obj, &mut known, &live, &mut b);
                if (!b.changes.is_empty() || !b.errors.is_empty()) && tx.send(b).is_err() {
                    return;
                }
            }
            Event::Delete(obj) => {
                let (o, _) = kinds::convert(&w, obj);
                let Ok(o) = o else { continue };
                let key = o.key();
                live.remove(&key);
                if known.remove(&key).is_some() {
                    let mut b = batch(false);
                    b.changes.push((key, None));
                    if tx.send(b).is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// Converts one object; queues it in `b` if it differs from what was last delivered.
/// Returns its key.
fn accept(
    w: &Watched,
    obj: RawObject,
    known: &mut HashMap<ObjectKey, Arc<Object>>,
    live: &LiveCache,
    b: &mut KindBatch,
) -> Option<ObjectKey> {
    let meta_key = ObjectKey::new(
        w.kind,
        obj.meta.namespace.as_deref().unwrap_or(""),
        obj.meta.name.as_deref().unwrap_or(""),
    );
    let (o, l) = kinds::convert(w, obj);
    match o {
        Ok(o) => {
            let key = o.key();
            if w.has_status {
                live.put(key.clone(), l);
            }
            if known.get(&key).is_none_or(|k| **k != o) {
                let o = Arc::new(o);
                known.insert(key.clone(), o.clone());
                b.changes.push((key.clone(), Some(o)));
            }
            Some(key)
        }
        Err(e) => {
            // The previous version (if any) stays in force, as in the file provider, so
            // the key counts as seen in a relist.
            b.errors.push(e.to_string());
            Some(meta_key)
        }
    }
}

/// Retries of a failed watch: 0.8 s doubling to 8 s (each delay with up to a quarter
/// of jitter, so that 19 watchers do not retry in step), back to 0.8 s after two minutes
/// without failure. kube's default (client-go's reflector) caps at 30 s, so after an API
/// server outage of half a minute a watcher could wait another 30 s before relisting, and
/// changes made meanwhile would sit unseen; 8 s bounds that, at the cost of one request
/// per watcher every 8 s against an API server that is down.
///
/// kube's stream resets a backoff on every `Ok` it passes, and a watcher passes one
/// (`Event::Init`) before each relist attempt, failed or not: reset that way, every retry
/// waited the first delay (a kind whose CRD is not installed was listed, and warned about,
/// every 0.8–1 s for as long as weir ran). So the reset kube asks for is ignored, and only
/// two quiet minutes reset.
fn backoff() -> Backoff {
    Backoff::default()
}

const BACKOFF_MIN: Duration = Duration::from_millis(800);
const BACKOFF_MAX: Duration = Duration::from_secs(8);
/// Without a failure for this long, the next retry waits [`BACKOFF_MIN`] again.
const BACKOFF_RESET: Duration = Duration::from_secs(120);

struct Backoff {
    next: Duration,
    /// When the last delay was handed out.
    last: Option<std::time::Instant>,
    /// Jitter source (a xorshift state; quality does not matter here).
    seed: u64,
}

impl Default for Backoff {
    fn default() -> Backoff {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        Backoff {
            next: BACKOFF_MIN,
            last: None,
            seed,
        }
    }
}

impl Backoff {
    /// The delay before the retry of a failure at `now`.
    fn next_at(&mut self, now: std::time::Instant) -> Duration {
        if self
            .last
            .is_some_and(|l| now.saturating_duration_since(l) > BACKOFF_RESET)
        {
            self.next = BACKOFF_MIN;
        }
        self.last = Some(now);
        let d = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        d + d.mul_f64((self.seed % 1000) as f64 / 4000.0)
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_at(std::time::Instant::now()))
    }
}

impl kube::runtime::utils::Backoff for Backoff {
    /// Ignored: see [`backoff`].
    fn reset(&mut self) {}
}

fn is_not_found(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 404,
        watcher::Error::WatchError(s) => s.code == 404,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_retries_double_to_the_cap_with_bounded_jitter_and_reset() {
        let mut b = Backoff::default();
        let t0 = std::time::Instant::now();
        let delays: Vec<Duration> = (0..8)
            .map(|i| b.next_at(t0 + Duration::from_secs(i)))
            .collect();
        for (d, base) in delays.iter().zip([0.8, 1.6, 3.2, 6.4, 8.0, 8.0, 8.0, 8.0]) {
            let base = Duration::from_secs_f64(base);
            assert!(*d >= base && *d <= base.mul_f64(1.25), "{d:?} for {base:?}");
        }
        // kube asks for a reset on every Ok its stream passes, including the `Init` a
        // watcher emits before each failing relist: that does not shorten the next wait.
        kube::runtime::utils::Backoff::reset(&mut b);
        assert!(b.next_at(t0 + Duration::from_secs(9)) >= BACKOFF_MAX);
        // Two quiet minutes do.
        let later = t0 + Duration::from_secs(9) + BACKOFF_RESET + Duration::from_secs(1);
        assert!(b.next_at(later) <= BACKOFF_MIN.mul_f64(1.25));
        assert!(b.next_at(later) >= BACKOFF_MIN * 2);
    }
}
