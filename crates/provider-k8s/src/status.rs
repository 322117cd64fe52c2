//! Writes statuses back to the API server: only when they differ from what is stored,
//! coalesced per object, with optimistic concurrency, and never touching what another
//! controller wrote.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use weir_api::{Kind, ObjectKey, ObjectStatus};

use crate::kinds::{self, Live};
use crate::render::{self, RenderOptions};
use crate::watch::LiveCache;

/// Writes to one object in flight at once at most; this many objects in parallel.
const MAX_IN_FLIGHT: usize = 16;
/// Attempts per write when another writer changed the object meanwhile (409).
const MAX_CONFLICTS: usize = 5;
/// A failed write is tried again after this long, doubling while writes keep failing
/// (an API server outage), up to `RETRY_MAX`.
const RETRY_MIN: std::time::Duration = std::time::Duration::from_secs(1);
const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(30);

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// How one write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteResult {
    /// A PATCH of the status subresource succeeded.
    Written,
    /// The stored status already was the desired one: nothing sent.
    Unchanged,
    /// The object no longer exists.
    Gone,
    /// The API server refused or could not be reached (logged).
    Failed,
    /// Not written: this replica is not (or no longer) the leader.
    NotLeader,
}

/// Counts of finished writes, by result; also exported as
/// `weir_status_writes_total{result}` and `weir_status_write_conflicts_total`.
#[derive(Clone, Debug)]
pub struct WriterStats {
    written: Counter,
    unchanged: Counter,
    gone: Counter,
    failed: Counter,
    conflicts: Counter,
    /// Writes of Gateway statuses (the object every route attachment changes).
    gateway_writes: Counter,
    /// Objects whose status is queued or being written.
    pending: Gauge,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct WriteLabels {
    result: &'static str,
    kind: &'static str,
}

impl WriterStats {
    fn new(registry: &mut Registry) -> WriterStats {
        let family = Family::<WriteLabels, Counter>::default();
        registry.register(
            "weir_status_writes",
            "Status writes to the API server by result (written, unchanged, gone, failed)",
            family.clone(),
        );
        let conflicts = Counter::default();
        registry.register(
            "weir_status_write_conflicts",
            "Status writes that met a newer object (409) and were merged again",
            conflicts.clone(),
        );
        let pending = Gauge::default();
        registry.register(
            "weir_status_pending_objects",
            "Objects whose status is queued or being written",
            pending.clone(),
        );
        let get = |result, kind| family.get_or_create(&WriteLabels { result, kind }).clone();
        WriterStats {
            written: get("written", "other"),
            unchanged: get("unchanged", "any"),
            gone: get("gone", "any"),
            failed: get("failed", "any"),
            conflicts,
            gateway_writes: get("written", "Gateway"),
            pending,
        }
    }

    fn record(&self, kind: Kind, r: WriteResult) {
        match r {
            WriteResult::Written if kind == Kind::Gateway => self.gateway_writes.inc(),
            WriteResult::Written => self.written.inc(),
            WriteResult::Unchanged => self.unchanged.inc(),
            WriteResult::Gone => self.gone.inc(),
            WriteResult::Failed => self.failed.inc(),
            WriteResult::NotLeader => 0,
        };
    }

    /// PATCH requests that succeeded.
    pub fn written(&self) -> u64 {
        self.written.get() + self.gateway_writes.get()
    }
    /// Of those, writes of Gateway statuses.
    pub fn gateway_writes(&self) -> u64 {
        self.gateway_writes.get()
    }
    /// Writes skipped because the stored status was already right.
    pub fn unchanged(&self) -> u64 {
        self.unchanged.get()
    }
    /// Writes that failed (after retries).
    pub fn failed(&self) -> u64 {
        self.failed.get()
    }
    /// 409 Conflicts met (each retried with the fresh object).
    pub fn conflicts(&self) -> u64 {
        self.conflicts.get()
    }
    /// Writes skipped because the object was deleted.
    pub fn gone(&self) -> u64 {
        self.gone.get()
    }
}

/// Hands statuses to a background task that writes them. Dropping it stops the task.
pub struct StatusWriter {
    tx: mpsc::UnboundedSender<Vec<(ObjectKey, Arc<ObjectStatus>)>>,
    /// The kinds whose status weir writes (those watched with `has_status`).
    writable: HashSet<Kind>,
    /// The last Gateway statuses submitted, for [`StatusWriter::refresh`].
    gateways: std::sync::Mutex<HashMap<ObjectKey, Arc<ObjectStatus>>>,
    /// (batches received, objects queued or in flight), published by the task.
    progress: watch::Receiver<(u64, usize)>,
    sent: AtomicU64,
    stats: WriterStats,
    task: JoinHandle<()>,
}

impl Drop for StatusWriter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Shared {
    client: kube::Client,
    live: LiveCache,
    opts: RenderOptions,
    resources: HashMap<Kind, ApiResource>,
    stats: WriterStats,
    /// Whether this replica may write (leader election); always `true` without it.
    leader: watch::Receiver<bool>,
}

impl StatusWriter {
    /// Starts the writer. `live` must be the provider's cache (see
    /// [`crate::KubeProvider::live`]): it tells what is stored and at which version.
    ///
    /// `leader` (leader election): statuses are written only while it holds `true`;
    /// submitted while it is `false` they are dropped, and when it turns `false` queued
    /// writes are dropped and a write in flight is abandoned. The caller submits every
    /// current status again when it turns `true` (only those that differ from the stored
    /// ones are then written). `None`: always write.
    pub fn spawn(
        client: kube::Client,
        live: LiveCache,
        opts: RenderOptions,
        leader: Option<watch::Receiver<bool>>,
        registry: &mut Registry,
    ) -> StatusWriter {
        let (tx, rx) = mpsc::unbounded_channel();
        let (progress_tx, progress) = watch::channel((0, 0));
        let stats = WriterStats::new(registry);
        let resources: HashMap<Kind, ApiResource> = kinds::watched()
            .into_iter()
            .filter(|w| w.has_status)
            .map(|w| (w.kind, w.resource))
            .collect();
        let writable = resources.keys().copied().collect();
        let leader = leader.unwrap_or_else(|| watch::channel(true).1);
        let shared = Arc::new(Shared {
            client,
            live,
            opts,
            resources,
            stats: stats.clone(),
            leader: leader.clone(),
        });
        let task = tokio::spawn(run(shared, rx, leader, progress_tx));
        StatusWriter {
            tx,
            writable,
            gateways: std::sync::Mutex::new(HashMap::new()),
            progress,
            sent: AtomicU64::new(0),
            stats,
            task,
        }
    }

    /// Queues statuses; a newer status for an object replaces a queued older one. They
    /// are the translator's own (shared, not copied).
    pub fn submit(&self, statuses: Vec<(ObjectKey, Arc<ObjectStatus>)>) {
        let writable: Vec<_> = statuses
            .into_iter()
            .filter(|(k, s)| {
                self.writable.contains(&k.kind) && !matches!(**s, ObjectStatus::Problems(_))
            })
            .collect();
        {
            let mut g = self.gateways.lock().unwrap_or_else(|p| p.into_inner());
            for (k, s) in &writable {
                if k.kind == Kind::Gateway {
                    g.insert(k.clone(), s.clone());
                }
            }
        }
        if !writable.is_empty() && self.tx.send(writable).is_ok() {
            self.sent.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Writes the last submitted status of these Gateways again (rendered anew, e.g.
    /// because what their data planes refuse changed).
    pub fn refresh(&self, gateways: &[ObjectKey]) {
        let again: Vec<(ObjectKey, Arc<ObjectStatus>)> = {
            let g = self.gateways.lock().unwrap_or_else(|p| p.into_inner());
            gateways
                .iter()
                .filter_map(|k| g.get(k).map(|s| (k.clone(), s.clone())))
                .collect()
        };
        if !again.is_empty() && self.tx.send(again).is_ok() {
            self.sent.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Drops what is remembered of deleted Gateways (the last status kept for
    /// [`StatusWriter::refresh`]), so the memory follows the live Gateways.
    pub fn forget(&self, deleted: &[ObjectKey]) {
        let mut g = self.gateways.lock().unwrap_or_else(|p| p.into_inner());
        for k in deleted.iter().filter(|k| k.kind == Kind::Gateway) {
            g.remove(k);
        }
    }

    /// How many Gateways' last statuses are remembered for [`StatusWriter::refresh`].
    pub fn remembered_gateways(&self) -> usize {
        self.gateways
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Write counters.
    pub fn stats(&self) -> WriterStats {
        self.stats.clone()
    }

    /// Waits until everything submitted so far has been written (or found unchanged,
    /// gone or failed).
    pub async fn idle(&self) {
        let sent = self.sent.load(Ordering::SeqCst);
        let mut progress = self.progress.clone();
        let _ = progress
            .wait_for(|(received, outstanding)| *received >= sent && *outstanding == 0)
            .await;
    }
}

async fn run(
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Vec<(ObjectKey, Arc<ObjectStatus>)>>,
    mut leader: watch::Receiver<bool>,
    progress: watch::Sender<(u64, usize)>,
) {
    let mut received = 0u64;
    let mut pending: HashMap<ObjectKey, Arc<ObjectStatus>> = HashMap::new();
    let mut queue: VecDeque<ObjectKey> = VecDeque::new();
    let mut in_flight: HashSet<ObjectKey> = HashSet::new();
    let mut writes: FuturesUnordered<BoxFuture<'static, (ObjectKey, Option<Arc<ObjectStatus>>)>> =
        FuturesUnordered::new();
    // Writes that failed (API server unreachable or refusing), tried again after a
    // backoff unless a newer status replaced them.
    let mut retry: HashMap<ObjectKey, Arc<ObjectStatus>> = HashMap::new();
    let mut retry_at: Option<tokio::time::Instant> = None;
    let mut backoff = RETRY_MIN;
    let mut open = true;
    loop {
        tokio::select! {
            batch = rx.recv(), if open => match batch {
                Some(batch) => {
                    // A follower writes nothing; it submits everything again when it
                    // becomes the leader.
                    let leads = *leader.borrow();
                    let mut add = |batch: Vec<(ObjectKey, Arc<ObjectStatus>)>| {
                        if !leads {
                            return;
                        }
                        for (k, s) in batch {
                            if pending.insert(k.clone(), s).is_none() {
                                queue.push_back(k);
                            }
                        }
                    };
                    add(batch);
                    received += 1;
                    // Coalesce everything already queued behind it.
                    while let Ok(more) = rx.try_recv() {
                        add(more);
                        received += 1;
                    }
                }
                None => open = false,
            },
            Some((key, failed)) = writes.next(), if !writes.is_empty() => {
                in_flight.remove(&key);
                match failed {
                    Some(status) if *leader.borrow() => {
                        if !pending.contains_key(&key) {
                            retry.insert(key, status);
                        }
                        if retry_at.is_none() {
                            retry_at = Some(tokio::time::Instant::now() + backoff);
                            backoff = (backoff * 2).min(RETRY_MAX);
                        }
                    }
                    Some(_) => {}
                    None => backoff = RETRY_MIN,
                }
            }
            _ = sleep_until(retry_at), if retry_at.is_some() => {
                retry_at = None;
                for (k, s) in retry.drain() {
                    if !pending.contains_key(&k) {
                        pending.insert(k.clone(), s);
                        queue.push_back(k);
                    }
                }
            }
            Ok(()) = leader.changed() => {
                if !*leader.borrow_and_update() {
                    // Leadership lost: nothing queued is written (a write in flight
                    // abandons itself, see `write`).
                    pending.clear();
                    queue.clear();
                    retry.clear();
                    retry_at = None;
                }
            }
            else => return,
        }
        // Start writes; an object already being written waits for that write to end,
        // then gets only its newest status.
        let mut waiting = Vec::new();
        while in_flight.len() < MAX_IN_FLIGHT {
            let Some(key) = queue.pop_front() else { break };
            if in_flight.contains(&key) {
                waiting.push(key);
                continue;
            }
            let Some(status) = pending.remove(&key) else {
                continue;
            };
            in_flight.insert(key.clone());
            let shared = shared.clone();
            writes.push(Box::pin(async move {
                let (r, retry) = write(&shared, &key, &status).await;
                shared.stats.record(key.kind, r);
                (key, retry.then_some(status))
            }));
        }
        for k in waiting.into_iter().rev() {
            queue.push_front(k);
        }
        let outstanding = pending.len() + in_flight.len();
        shared.stats.pending.set(outstanding as i64);
        progress.send_replace((received, outstanding));
    }
}

/// Writes one status; the flag says whether a failure is worth retrying (the API server
/// was unreachable or overloaded, not refusing this write).
async fn write(shared: &Shared, key: &ObjectKey, desired: &ObjectStatus) -> (WriteResult, bool) {
    let Some(resource) = shared.resources.get(&key.kind) else {
        return (WriteResult::Unchanged, false);
    };
    let api: Api<DynamicObject> = if key.kind.namespaced() {
        Api::namespaced_with(shared.client.clone(), &key.namespace, resource)
    } else {
        Api::all_with(shared.client.clone(), resource)
    };
    for _ in 0..MAX_CONFLICTS {
        let Some(live) = shared.live.get(key) else {
            return (WriteResult::Gone, false);
        };
        let now = render::rfc3339(SystemTime::now());
        let Some(status) = render::render(&shared.opts, key, &live.status, desired, &now) else {
            return (WriteResult::Unchanged, false);
        };
        if status == live.status {
            return (WriteResult::Unchanged, false);
        }
        let patch = json!({
            "metadata": {"resourceVersion": live.resource_version},
            "status": with_removals(&live.status, status),
        });
        if !*shared.leader.borrow() {
            return (WriteResult::NotLeader, false);
        }
        let mut leader = shared.leader.clone();
        let (params, merge) = (PatchParams::default(), Patch::Merge(&patch));
        let sent = tokio::select! {
            r = api.patch_status(&key.name, &params, &merge) => r,
            // Stop at once when leadership is lost (the request is dropped).
            // (`Err`: no election, the sender is gone and the value stays `true`.)
            Ok(_) = leader.wait_for(|l| !*l) => return (WriteResult::NotLeader, false),
        };
        match sent {
            Ok(obj) => {
                let rv = obj.metadata.resource_version.clone().unwrap_or_default();
                let status = obj.data.get("status").cloned().unwrap_or(Value::Null);
                shared.live.put(
                    key.clone(),
                    Live {
                        resource_version: rv,
                        status,
                    },
                );
                return (WriteResult::Written, false);
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return (WriteResult::Gone, false),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                shared.stats.conflicts.inc();
                // Someone else wrote the object: read it again and merge anew.
                match api.get_status(&key.name).await {
                    Ok(obj) => shared.live.put(
                        key.clone(),
                        Live {
                            resource_version: obj
                                .metadata
                                .resource_version
                                .clone()
                                .unwrap_or_default(),
                            status: obj.data.get("status").cloned().unwrap_or(Value::Null),
                        },
                    ),
                    Err(kube::Error::Api(s)) if s.code == 404 => return (WriteResult::Gone, false),
                    Err(e) => {
                        tracing::warn!(object = %key, error = %e, "reading status after a conflict failed");
                        return (WriteResult::Failed, retryable(&e));
                    }
                }
            }
            Err(e) => {
                tracing::warn!(object = %key, error = %e, "status write failed");
                return (WriteResult::Failed, retryable(&e));
            }
        }
    }
    tracing::warn!(object = %key, "status write kept conflicting; giving up until the next change");
    (WriteResult::Failed, false)
}

/// The API server could not be reached or was overloaded (a refusal of the write itself,
/// 4xx, would fail again the same way).
fn retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500 || s.code == 429,
        _ => true,
    }
}

/// A merge patch only adds and replaces; top-level fields we no longer report are
/// removed explicitly with `null`.
fn with_removals(current: &Value, mut status: Value) -> Value {
    if let (Some(cur), Value::Object(new)) = (current.as_object(), &mut status) {
        let gone: Vec<String> = cur
            .keys()
            .filter(|k| !new.contains_key(*k))
            .cloned()
            .collect();
        for k in gone {
            new.insert(k, Value::Null);
        }
    }
    if status.is_null() {
        status = Value::Object(Map::new());
    }
    status
}
