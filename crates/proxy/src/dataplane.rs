//! The data plane: the live snapshot, its listeners, and applying configuration batches.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use prometheus_client::registry::Registry;
use weir_model::{Delta, DeltaBatch, ListenerKey, Resource, ResourceKey};

use crate::access_log::{AccessLogMetrics, AccessLogSettings, AccessLogger};
use crate::endpoints::EndpointRegistry;
use crate::global_ratelimit::{GlobalLimiter, RedisSettings};
use crate::listeners::ListenerHandle;
use crate::metrics::Metrics;
use crate::ratelimit::RateLimiter;
use crate::snapshot::Snapshot;
use crate::status::{Problem, Rejection, Stage, StatusBoard};
use crate::trace::{TraceMetrics, TraceSettings, Tracer};
use crate::upstream::Upstreams;
use crate::workers::Workers;

/// Data-plane settings that are not part of the IR.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// One JSON access-log record per request, written by a thread of its own
    /// ([`AccessLogSettings`]); `None`: no access log.
    pub access_log: Option<AccessLogSettings>,
    /// Limit for establishing one upstream TCP connection.
    pub connect_timeout: Duration,
    /// Idle upstream connections are closed after this long.
    pub upstream_idle_timeout: Duration,
    /// On shutdown or listener removal, in-flight requests get this long to finish.
    pub drain_timeout: Duration,
    /// Worker threads serving connections, each with its own single-threaded runtime;
    /// 0 means one per CPU this process may use (its affinity mask).
    pub workers: usize,
    /// A UDP session with no datagram either way for this long ends (its socket is
    /// closed; the client's next datagram starts a new one).
    pub udp_session_idle_timeout: Duration,
    /// OpenTelemetry traces exported over OTLP/gRPC ([`TraceSettings`]); `None`: none
    /// (requests are not traced, and `traceparent` passes through untouched).
    pub traces: Option<TraceSettings>,
    /// Where global rate limits keep their counts; `None`: no Redis, and every global
    /// limit follows its fail mode (logged once, counted by
    /// `weir_global_ratelimit_unconfigured`).
    pub redis: Option<RedisSettings>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            access_log: None,
            connect_timeout: Duration::from_secs(5),
            upstream_idle_timeout: Duration::from_secs(90),
            drain_timeout: Duration::from_secs(10),
            workers: 0,
            udp_session_idle_timeout: Duration::from_secs(60),
            redis: None,
            traces: None,
        }
    }
}

/// The outcome of [`DataPlane::apply`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Version of the snapshot now live.
    pub version: u64,
    /// Number of deltas in the batch that took effect (the batch size minus the
    /// snapshot's rejections).
    pub applied: usize,
    /// Rejected resources with the reason: deltas the snapshot refused, and listeners
    /// whose socket could not be bound (they are retried on the next apply).
    pub rejected: Vec<(ResourceKey, String)>,
}

/// The next snapshot, built from batches applied one after the other off the async
/// workers ([`DataPlane::begin_build`]), not yet serving.
pub struct SnapshotBuild {
    /// The version it was begun from.
    base: u64,
    next: Snapshot,
    /// Listeners the batches upserted or removed.
    touched: BTreeSet<ListenerKey>,
    rejected: Vec<(ResourceKey, String)>,
    /// Deltas applied.
    deltas: usize,
    /// Time spent applying.
    took: Duration,
    /// The runtime the build was begun on: a batch applied on another thread starts
    /// the health checks of its clusters there (without a runtime they would not probe).
    runtime: Option<tokio::runtime::Handle>,
}

impl SnapshotBuild {
    /// Applies the next batch (blocking; cost proportional to the batch).
    pub fn apply(&mut self, batch: &DeltaBatch) {
        let _runtime = self.runtime.as_ref().map(tokio::runtime::Handle::enter);
        let start = Instant::now();
        self.next.apply_in_place(batch, &mut self.rejected);
        self.touched
            .extend(batch.deltas.iter().filter_map(|d| match d {
                Delta::Upsert(Resource::Listener(l)) => Some(l.key),
                Delta::Remove(ResourceKey::Listener(k)) => Some(*k),
                _ => None,
            }));
        self.deltas += batch.deltas.len();
        self.took += start.elapsed();
    }

    /// The deltas applied so far.
    pub fn deltas(&self) -> usize {
        self.deltas
    }

    /// The time spent applying so far.
    pub fn took(&self) -> Duration {
        self.took
    }
}

/// A build that can no longer be published: another batch was applied since it began.
#[derive(Debug, thiserror::Error)]
#[error("the snapshot built from version {base} is stale: version {current} is live")]
pub struct StaleBuild {
    base: u64,
    current: u64,
}

/// State shared by every accept loop and request.
pub(crate) struct Shared {
    pub(crate) snapshots: Arc<ArcSwap<Snapshot>>,
    pub(crate) upstreams: Upstreams,
    pub(crate) config: ProxyConfig,
    pub(crate) metrics: Metrics,
    pub(crate) workers: Workers,
    /// Local rate-limit buckets, kept across snapshots.
    pub(crate) rate_limits: RateLimiter,
    /// Global rate-limit counts, kept across snapshots (synced to Redis by a task that
    /// ends when the data plane is dropped).
    pub(crate) global_limits: Arc<GlobalLimiter>,
    /// Results of basic-auth checks, kept across snapshots.
    pub(crate) verified: Arc<crate::basic_auth::VerifiedCache>,
    /// The client to external authorization services and their remembered answers.
    pub(crate) ext_auth: Arc<crate::ext_auth::ExtAuthState>,
    /// JWK Sets fetched from URLs.
    pub(crate) jwks: Arc<crate::jwks::JwksRegistry>,
    /// Requests in progress per (policy, client address), kept across snapshots.
    pub(crate) concurrency: Arc<crate::concurrency::ConcurrencyLimiter>,
    /// The access log's queue to its writer thread, when it is on.
    pub(crate) access_log: Option<AccessLogger>,
    /// The sampler and the queue to the trace exporter, when traces are on.
    pub(crate) tracer: Option<Tracer>,
}

/// A running data plane: applies configuration batches and serves traffic on the
/// listeners they declare.
pub struct DataPlane {
    shared: Arc<Shared>,
    listeners: Mutex<HashMap<ListenerKey, ListenerHandle>>,
    /// Listeners in the snapshot whose bind failed; retried on every apply.
    unbound: Mutex<BTreeSet<ListenerKey>>,
    /// Serializes applies (snapshot derivation and listener reconciliation).
    apply_lock: tokio::sync::Mutex<()>,
    ready: AtomicBool,
    /// What the status page shows beside the snapshot (rejections, propagation).
    status: Arc<StatusBoard>,
    /// The data plane's own apply time, on the status page (registered at the first
    /// apply, after the control plane's phases of this process).
    apply_time: std::sync::OnceLock<Arc<crate::status::LatencyHistogram>>,
}

impl DataPlane {
    /// Creates a data plane with an empty snapshot and no listeners, registering the
    /// data-plane metrics in `registry`.
    ///
    /// Starts the worker threads ([`ProxyConfig::workers`]), the access log's writer and
    /// the trace exporter (on the current runtime); fails when the system refuses to
    /// create a thread, the access-log file cannot be opened, or traces are asked for
    /// without a runtime or with an endpoint that is not a URI.
    pub fn new(config: ProxyConfig, registry: &mut Registry) -> std::io::Result<Arc<DataPlane>> {
        let access_log_metrics = AccessLogMetrics::default();
        access_log_metrics.register(registry);
        let access_log = match &config.access_log {
            Some(settings) => Some(AccessLogger::start(settings, access_log_metrics)?),
            None => None,
        };
        let trace_metrics = TraceMetrics::default();
        trace_metrics.register(registry);
        let tracer = match &config.traces {
            Some(settings) => Some(Tracer::start(settings, trace_metrics)?),
            None => None,
        };
        let workers = Workers::start(config.workers)?;
        let metrics = Metrics::register(registry);
        let upstreams = Upstreams::new(
            &config,
            metrics.upstream_connections.clone(),
            metrics.upstream_connect_errors.clone(),
        );
        let endpoints = Arc::new(EndpointRegistry::new(
            metrics.outlier.clone(),
            metrics.health.clone(),
        ));
        let global_limits = Arc::new(GlobalLimiter::new(
            config.redis.is_some(),
            metrics.global_ratelimit.clone(),
        ));
        if let Some(redis) = &config.redis {
            // Started from a runtime (every caller is async); without one, Redis counts
            // as unreachable and the fail modes apply.
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(crate::global_ratelimit::sync::run(
                        Arc::downgrade(&global_limits),
                        redis.clone(),
                    ));
                }
                Err(_) => tracing::warn!("no runtime: global rate limits are not synced"),
            }
        }
        Ok(Arc::new(DataPlane {
            status: Arc::default(),
            apply_time: std::sync::OnceLock::new(),
            shared: Arc::new(Shared {
                snapshots: Arc::new(ArcSwap::from_pointee(Snapshot::with_endpoints(endpoints))),
                upstreams,
                rate_limits: RateLimiter::new(metrics.ratelimit.clone()),
                global_limits,
                verified: Arc::default(),
                ext_auth: Arc::new(crate::ext_auth::ExtAuthState::new(
                    config.connect_timeout,
                    metrics.ext_auth.clone(),
                )),
                jwks: Arc::new(crate::jwks::JwksRegistry::new(metrics.jwks.clone())),
                concurrency: Arc::default(),
                access_log,
                tracer,
                config,
                metrics,
                workers,
            }),
            listeners: Mutex::new(HashMap::new()),
            unbound: Mutex::new(BTreeSet::new()),
            apply_lock: tokio::sync::Mutex::new(()),
            ready: AtomicBool::new(false),
        }))
    }

    /// Applies a batch: derives the next snapshot, publishes it with one atomic swap, then
    /// binds new listeners, updates changed ones in place (no rebind) and stops accepting
    /// on removed ones (their open connections finish). Returns what was rejected.
    pub async fn apply(&self, batch: &DeltaBatch) -> ApplyReport {
        let _serial = self.apply_lock.lock().await;
        let mut build = self.begin_build();
        build.apply(batch);
        self.publish_build(build).await
    }

    /// Starts the next snapshot, to be built from several batches with
    /// [`SnapshotBuild::apply`] (on any thread, while the later batches are still being
    /// made) and published as one with [`DataPlane::finish_build`]: what
    /// [`DataPlane::apply`] of the batches' concatenation would do. Nothing else may be
    /// applied in between (`finish_build` refuses the build then). Begun on a tokio
    /// runtime, as `apply` is called: what a batch starts (a cluster's health checks)
    /// runs on it whichever thread applies the batch.
    pub fn begin_build(&self) -> SnapshotBuild {
        let current = self.shared.snapshots.load();
        SnapshotBuild {
            base: current.version(),
            next: current.next(),
            touched: BTreeSet::new(),
            rejected: Vec::new(),
            deltas: 0,
            took: Duration::ZERO,
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// Publishes a snapshot built since [`DataPlane::begin_build`] (one atomic swap),
    /// then reconciles the listeners, as [`DataPlane::apply`] does. Fails, publishing
    /// nothing, when another batch was applied since the build began.
    pub async fn finish_build(&self, build: SnapshotBuild) -> Result<ApplyReport, StaleBuild> {
        let _serial = self.apply_lock.lock().await;
        let current = self.shared.snapshots.load().version();
        if current != build.base {
            return Err(StaleBuild {
                base: build.base,
                current,
            });
        }
        Ok(self.publish_build(build).await)
    }

    async fn publish_build(&self, build: SnapshotBuild) -> ApplyReport {
        let start = Instant::now();
        let SnapshotBuild {
            next,
            mut touched,
            mut rejected,
            deltas,
            took,
            ..
        } = build;
        let next = Arc::new(next);
        self.shared.snapshots.store(Arc::clone(&next));

        let retried: BTreeSet<ListenerKey> = lock(&self.unbound).clone();
        touched.extend(retried.iter().copied());
        for key in touched {
            if let Err(reason) = self.reconcile(&next, key).await {
                rejected.push((ResourceKey::Listener(key), reason));
            }
        }
        for (key, reason) in &rejected {
            // A listener still unbound is retried on every apply: shown once.
            if matches!(key, ResourceKey::Listener(k) if retried.contains(k)) {
                continue;
            }
            self.status.rejections().push(Rejection::now(
                Stage::DataPlane,
                resource_name(key),
                None,
                vec![Problem {
                    message: reason.clone(),
                    ..Problem::default()
                }],
            ));
        }

        let m = &self.shared.metrics;
        m.config_applies.inc();
        m.config_rejected.inc_by(rejected.len() as u64);
        m.config_version
            .set(i64::try_from(next.version()).unwrap_or(i64::MAX));
        m.record_stats(&next.stats());
        let took = took + start.elapsed();
        m.config_apply_duration.observe(took.as_secs_f64());
        self.apply_time
            .get_or_init(|| self.status.histogram("data_plane_apply"))
            .observe(took);
        for (key, reason) in &rejected {
            tracing::warn!(resource = ?key, %reason, "rejected");
        }
        ApplyReport {
            version: next.version(),
            applied: deltas.saturating_sub(rejected.len()),
            rejected,
        }
    }

    /// Brings the accept loop of `key` in line with `snapshot`.
    async fn reconcile(&self, snapshot: &Snapshot, key: ListenerKey) -> Result<(), String> {
        match snapshot.listener(&key) {
            Some(state) => {
                let listener = &state.listener;
                let updated = {
                    let map = lock(&self.listeners);
                    map.get(&key).map(|h| h.update(&self.shared, listener))
                };
                match updated {
                    Some(true) => return Ok(()),
                    // Between UDP and a stream protocol: a socket of the other kind.
                    Some(false) => {
                        let old = lock(&self.listeners).remove(&key);
                        if let Some(old) = old {
                            drop(old.stop().await);
                        }
                    }
                    None => {}
                }
                match ListenerHandle::bind(&self.shared, Arc::clone(listener)).await {
                    Ok(handle) => {
                        lock(&self.listeners).insert(key, handle);
                        lock(&self.unbound).remove(&key);
                        Ok(())
                    }
                    Err(e) => {
                        lock(&self.unbound).insert(key);
                        Err(format!("cannot bind {key}: {e}"))
                    }
                }
            }
            None => {
                lock(&self.unbound).remove(&key);
                let handle = lock(&self.listeners).remove(&key);
                if let Some(handle) = handle {
                    // Wait until the socket is closed (so the key can be bound again);
                    // draining continues in the background.
                    drop(handle.stop().await);
                    tracing::info!(listener = %key, "listener removed");
                }
                Ok(())
            }
        }
    }

    /// The live snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.snapshots.load_full()
    }

    /// The status page's board: the control plane of this process records its
    /// rejections and propagation phases there.
    pub fn status_board(&self) -> &Arc<StatusBoard> {
        &self.status
    }

    /// What the status summary needs beside the snapshot, at `now`.
    pub(crate) fn status_context(&self, now: std::time::SystemTime) -> crate::status::Context<'_> {
        let m = &self.shared.metrics;
        crate::status::Context {
            board: &self.status,
            ready: self.is_ready(),
            unhealthy: m.health.unhealthy.get(),
            ejected: m.outlier.ejected.get(),
            now,
        }
    }

    /// Marks the data plane ready (call after the first complete configuration applied).
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Whether [`DataPlane::set_ready`] was called.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The address a listener is bound to (differs from the key when its port is 0).
    pub fn bound_addr(&self, key: &ListenerKey) -> Option<SocketAddr> {
        lock(&self.listeners)
            .get(key)
            .map(ListenerHandle::local_addr)
    }

    /// Stops accepting on every listener and waits for in-flight requests to finish, up to
    /// the drain timeout.
    pub async fn shutdown(&self) {
        self.ready.store(false, Ordering::Release);
        let handles: Vec<ListenerHandle> = lock(&self.listeners).drain().map(|(_, h)| h).collect();
        let mut tasks = Vec::with_capacity(handles.len());
        for h in handles {
            tasks.push(h.stop().await);
        }
        for t in tasks {
            let _ = t.await;
        }
    }
}

/// A resource as the status page names it: `Listener 127.0.0.1:80`, `VirtualHost a.example
/// on 127.0.0.1:80`.
fn resource_name(key: &ResourceKey) -> String {
    match key {
        ResourceKey::Listener(l) => format!("Listener {l}"),
        ResourceKey::VirtualHost(l, h) => format!("VirtualHost {h} on {l}"),
        ResourceKey::Cluster(c) => format!("Cluster {c}"),
        ResourceKey::Certificate(h) => format!("Certificate {h}"),
        ResourceKey::Sni(l, h) => format!("SNI {h} on {l}"),
        ResourceKey::L4Route(l, h) => format!("L4Route {h} on {l}"),
        ResourceKey::Policy(t) => format!("Policy {t}"),
    }
}

/// Locks a mutex that is never held across an await; a poisoned lock still holds
/// consistent data (every critical section is a single map operation).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
