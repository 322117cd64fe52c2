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
}

/// Counts of finished writes, by result.
#[derive(Debug, Default)]
pub struct WriterStats {
    written: AtomicU64,
    unchanged: AtomicU64,
    gone: AtomicU64,
    failed: AtomicU64,
    conflicts: AtomicU64,
    /// Writes of Gateway statuses (the object every route attachment changes).
    gateway_writes: AtomicU64,
}

impl WriterStats {
    fn record(&self, kind: Kind, r: WriteResult) {
        let c = match r {
            WriteResult::Written => &self.written,
            WriteResult::Unchanged => &self.unchanged,
            WriteResult::Gone => &self.gone,
            WriteResult::Failed => &self.failed,
        };
        c.fetch_add(1, Ordering::Relaxed);
        if r == WriteResult::Written && kind == Kind::Gateway {
            self.gateway_writes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// PATCH requests that succeeded.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }
    /// Of those, writes of Gateway statuses.
    pub fn gateway_writes(&self) -> u64 {
        self.gateway_writes.load(Ordering::Relaxed)
    }
    /// Writes skipped because the stored status was already right.
    pub fn unchanged(&self) -> u64 {
        self.unchanged.load(Ordering::Relaxed)
    }
    /// Writes that failed (after retries).
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
    /// 409 Conflicts met (each retried with the fresh object).
    pub fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }
    /// Writes skipped because the object was deleted.
    pub fn gone(&self) -> u64 {
        self.gone.load(Ordering::Relaxed)
    }
}

/// Hands statuses to a background task that writes them. Dropping it stops the task.
pub struct StatusWriter {
    tx: mpsc::UnboundedSender<Vec<(ObjectKey, ObjectStatus)>>,
    pending: watch::Receiver<usize>,
    stats: Arc<WriterStats>,
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
    stats: Arc<WriterStats>,
}

impl StatusWriter {
    /// Starts the writer. `live` must be the provider's cache (see
    /// [`crate::KubeProvider::live`]): it tells what is stored and at which version.
    pub fn spawn(client: kube::Client, live: LiveCache, opts: RenderOptions) -> StatusWriter {
        let (tx, rx) = mpsc::unbounded_channel();
        let (pending_tx, pending) = watch::channel(0);
        let stats = Arc::new(WriterStats::default());
        let resources = kinds::watched()
            .into_iter()
            .filter(|w| w.has_status)
            .map(|w| (w.kind, w.resource))
            .collect();
        let shared = Arc::new(Shared {
            client,
            live,
            opts,
            resources,
            stats: stats.clone(),
        });
        let task = tokio::spawn(run(shared, rx, pending_tx));
        StatusWriter {
            tx,
            pending,
            stats,
            task,
        }
    }

    /// Queues statuses; a newer status for an object replaces a queued older one.
    pub fn submit(&self, statuses: Vec<(ObjectKey, ObjectStatus)>) {
        let writable: Vec<_> = statuses
            .into_iter()
            .filter(|(k, s)| {
                matches!(
                    k.kind,
                    Kind::GatewayClass | Kind::Gateway | Kind::HttpRoute | Kind::Ingress
                ) && !matches!(s, ObjectStatus::Problems(_))
            })
            .collect();
        if !writable.is_empty() {
            let _ = self.tx.send(writable);
        }
    }

    /// Write counters.
    pub fn stats(&self) -> Arc<WriterStats> {
        self.stats.clone()
    }

    /// Objects queued or being written; 0 when idle.
    pub fn pending(&self) -> watch::Receiver<usize> {
        self.pending.clone()
    }
}

async fn run(
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Vec<(ObjectKey, ObjectStatus)>>,
    pending_count: watch::Sender<usize>,
) {
    let mut pending: HashMap<ObjectKey, ObjectStatus> = HashMap::new();
    let mut queue: VecDeque<ObjectKey> = VecDeque::new();
    let mut in_flight: HashSet<ObjectKey> = HashSet::new();
    let mut writes: FuturesUnordered<BoxFuture<'static, ObjectKey>> = FuturesUnordered::new();
    let mut open = true;
    loop {
        tokio::select! {
            batch = rx.recv(), if open => match batch {
                Some(batch) => {
                    let mut add = |batch: Vec<(ObjectKey, ObjectStatus)>| {
                        for (k, s) in batch {
                            if pending.insert(k.clone(), s).is_none() {
                                queue.push_back(k);
                            }
                        }
                    };
                    add(batch);
                    // Coalesce everything already queued behind it.
                    while let Ok(more) = rx.try_recv() {
                        add(more);
                    }
                }
                None => open = false,
            },
            Some(key) = writes.next(), if !writes.is_empty() => {
                in_flight.remove(&key);
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
                let r = write(&shared, &key, &status).await;
                shared.stats.record(key.kind, r);
                key
            }));
        }
        for k in waiting.into_iter().rev() {
            queue.push_front(k);
        }
        pending_count.send_replace(pending.len() + in_flight.len());
    }
}

async fn write(shared: &Shared, key: &ObjectKey, desired: &ObjectStatus) -> WriteResult {
    let Some(resource) = shared.resources.get(&key.kind) else {
        return WriteResult::Unchanged;
    };
    let api: Api<DynamicObject> = if key.kind.namespaced() {
        Api::namespaced_with(shared.client.clone(), &key.namespace, resource)
    } else {
        Api::all_with(shared.client.clone(), resource)
    };
    for _ in 0..MAX_CONFLICTS {
        let Some(live) = shared.live.get(key) else {
            return WriteResult::Gone;
        };
        let now = render::rfc3339(SystemTime::now());
        let Some(status) = render::render(&shared.opts, &live.status, desired, &now) else {
            return WriteResult::Unchanged;
        };
        if status == live.status {
            return WriteResult::Unchanged;
        }
        let patch = json!({
            "metadata": {"resourceVersion": live.resource_version},
            "status": with_removals(&live.status, status),
        });
        match api
            .patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
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
                return WriteResult::Written;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return WriteResult::Gone,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                shared.stats.conflicts.fetch_add(1, Ordering::Relaxed);
                // Someone else wrote the object: read it again and merge anew.
                match api.get_status(&key.name).await {
                    Ok(obj) => shared.live.put(
                        key.clone(),
                        Live {
                            resource_version: obj.metadata.resource_version.clone().unwrap_or_default(),
                            status: obj.data.get("status").cloned().unwrap_or(Value::Null),
                        },
                    ),
                    Err(kube::Error::Api(s)) if s.code == 404 => return WriteResult::Gone,
                    Err(e) => {
                        tracing::warn!(object = %key, error = %e, "reading status after a conflict failed");
                        return WriteResult::Failed;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(object = %key, error = %e, "status write failed");
                return WriteResult::Failed;
            }
        }
    }
    tracing::warn!(object = %key, "status write kept conflicting; giving up until the next change");
    WriteResult::Failed
}

/// A merge patch only adds and replaces; top-level fields we no longer report are
/// removed explicitly with `null`.
fn with_removals(current: &Value, mut status: Value) -> Value {
    if let (Some(cur), Value::Object(new)) = (current.as_object(), &mut status) {
        let gone: Vec<String> = cur.keys().filter(|k| !new.contains_key(*k)).cloned().collect();
        for k in gone {
            new.insert(k, Value::Null);
        }
    }
    if status.is_null() {
        status = Value::Object(Map::new());
    }
    status
}
