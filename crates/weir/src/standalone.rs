//! `weir run`: the file provider, the translator and the data plane in one process.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use weir_model::DeltaBatch;
use weir_provider_file::{FileProvider, Update};
use weir_proxy::{DataPlane, ProxyConfig, SnapshotBuild};
use weir_translate::{ObjectChange, TranslatorOptions};

use crate::pipeline::Pipeline;
use crate::propagation::PropagationMetrics;

/// Options of `weir run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// File or directory of manifests.
    pub config: PathBuf,
    /// Admin server address.
    pub admin: SocketAddr,
    /// Where Ingress plaintext traffic is served.
    pub ingress_http: Option<SocketAddr>,
    /// Where Ingress TLS traffic is served.
    pub ingress_https: Option<SocketAddr>,
    /// Ingress class served.
    pub ingress_class: String,
    /// More Ingress classes served (e.g. `nginx`, taken over in place).
    pub more_ingress_classes: Vec<String>,
    /// One JSON access-log record per request (`None`: off).
    pub access_log: Option<weir_proxy::AccessLogSettings>,
    /// OpenTelemetry traces over OTLP (`None`: off).
    pub traces: Option<weir_proxy::TraceSettings>,
    /// Watch the config path and apply changes.
    pub watch: bool,
    /// Where global rate limits keep their counts (`--redis`).
    pub redis: Option<weir_proxy::RedisSettings>,
    /// Called once the first configuration is loaded, before `/ready`: the `weir` binary
    /// has its allocator return the pages the load freed (`None`: nothing).
    pub on_loaded: Option<fn()>,
}

/// The translator options standalone mode uses for these run options.
pub fn translator_options(
    ingress_http: Option<SocketAddr>,
    ingress_https: Option<SocketAddr>,
    ingress_class: &str,
    more_ingress_classes: &[String],
) -> TranslatorOptions {
    TranslatorOptions {
        standalone: true,
        ingress_class: ingress_class.to_string(),
        more_ingress_classes: more_ingress_classes.to_vec(),
        ingress_http,
        ingress_https,
        ..TranslatorOptions::default()
    }
}

/// A running standalone gateway.
pub struct Standalone {
    /// The data plane (for tests: bound addresses, snapshot).
    pub dataplane: Arc<DataPlane>,
    /// Where the admin server listens.
    pub admin_addr: SocketAddr,
    stop: watch::Sender<bool>,
    /// Told once the configuration task has stopped following changes (it then frees
    /// its tables, while the listeners drain).
    stopped_following: tokio::sync::oneshot::Receiver<()>,
    config_task: JoinHandle<()>,
    admin_task: JoinHandle<()>,
}

/// Files per part of the first read (see [`FileProvider::load_all_in_parts`]): large
/// enough that a part's fixed costs (its difference, its recomputation) are nothing
/// beside its objects, small enough that what the loading thread made of a part is still
/// in the processor's caches when it is translated, and that translation starts early.
/// Parts of 2,048 files took 10 % more CPU than parts of 256 at 1,000,000 TLS domains
/// (four alternated pairs: 33.0–34.6 s against 27.7–31.1 s to `/ready`), and a little
/// more at 20,000 and 100,000 (BENCHMARKS.md, "Session 49").
const LOAD_PART_FILES: usize = 256;

/// Parts read ahead of the translation at the first load: a bounded channel, so that
/// when translation is behind the loading thread waits instead of piling up parts.
const LOAD_PARTS_AHEAD: usize = 4;

/// Batches of the first load emitted and not yet applied to the data plane's snapshot
/// at most (each a part's deltas).
const BUILD_BATCHES_AHEAD: usize = 2;

/// The first read of `provider`, in parts of [`LOAD_PART_FILES`] files: the provider
/// applies what its readers parse on a thread of its own (`weir-load`), and `stage` is
/// called here with every part's changes, in order, and how many changes the whole
/// load is expected to hold. Returns how many objects were read.
///
/// The provider's bookkeeping of each file (its definitions, the difference it returns)
/// was 7–10 s of this thread's 28–36 s at 1,000,000 TLS domains, beside a translation
/// that is the longest chain of startup: on a thread of its own it runs beside it,
/// with the readers, on the other core (BENCHMARKS.md, "Session 32").
///
/// When `build` is given, `stage` returns every part's batch, and a thread of its own
/// (`weir-build`) applies them to it as they come: the data plane's snapshot is built
/// beside the translation instead of after it (BENCHMARKS.md, "Session 33"). Returns
/// the build with every batch applied.
fn load_in_parts(
    provider: &mut FileProvider,
    listing: Option<weir_provider_file::Listing>,
    dataplane: &Arc<DataPlane>,
    build: Option<SnapshotBuild>,
    mut stage: impl FnMut(Vec<ObjectChange>, usize) -> Option<DeltaBatch>,
) -> (usize, Option<SnapshotBuild>) {
    let (parts, received) = std::sync::mpsc::sync_channel(LOAD_PARTS_AHEAD);
    std::thread::scope(|scope| {
        let (batches, building) = match build {
            Some(mut build) => {
                let (batches, received) =
                    std::sync::mpsc::sync_channel::<DeltaBatch>(BUILD_BATCHES_AHEAD);
                let building = std::thread::Builder::new()
                    .name("weir-build".into())
                    .spawn_scoped(scope, move || {
                        for batch in received {
                            build.apply(&batch);
                        }
                        build
                    })
                    .expect("starting the snapshot's building thread");
                (Some(batches), Some(building))
            }
            None => (None, None),
        };
        let loading = std::thread::Builder::new()
            .name("weir-load".into())
            .spawn_scoped(scope, move || {
                let mut objects = 0;
                provider.load_all_in_parts(LOAD_PART_FILES, listing, |update, at| {
                    objects += update.upserts.len();
                    // The whole configuration, estimated from the files read so far.
                    let expected = objects.saturating_mul(at.files) / at.read.max(1);
                    let changes = changes_of(update, dataplane);
                    // Only fails while the receiving thread unwinds: the rest is
                    // read and dropped.
                    let _ = parts.send((changes, expected));
                });
                objects
            })
            .expect("starting the loading thread");
        for (changes, expected) in received {
            let batch = stage(changes, expected);
            if let (Some(batch), Some(batches)) = (batch, &batches)
                && batches.send(batch).is_err()
            {
                // The building thread panicked: it is rethrown below.
                break;
            }
        }
        drop(batches);
        let built = building.map(|b| b.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        let objects = loading
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (objects, built)
    })
}

/// Turns a provider update into translator changes, logging file errors and showing them
/// on the status page (a kind weir does not read is only logged).
fn changes_of(update: Update, dataplane: &DataPlane) -> Vec<ObjectChange> {
    for e in &update.errors {
        tracing::warn!("{e}");
        if e.kind != weir_provider_file::FileErrorKind::UnsupportedKind {
            let origin = match e.document {
                Some(d) => format!("{}#{d}", e.file.display()),
                None => e.file.display().to_string(),
            };
            crate::pipeline::record_refused(
                dataplane,
                e.object.clone(),
                Some(origin),
                e.message.clone(),
            );
        }
    }
    crate::pipeline::changes(update.deletes, update.upserts)
}

impl Standalone {
    /// Loads the configuration, applies it, starts the admin server and (if asked) the
    /// watcher. Returns once the first complete configuration is live and `/ready` is 200.
    pub async fn start(opts: RunOptions) -> anyhow::Result<Standalone> {
        let mut registry = Registry::default();
        let dataplane = DataPlane::new(
            ProxyConfig {
                access_log: opts.access_log.clone(),
                traces: opts.traces.clone(),
                redis: opts.redis.clone(),
                ..ProxyConfig::default()
            },
            &mut registry,
        )
        .context("starting the data-plane workers")?;
        dataplane.status_board().set_mode("weir run");
        let metrics = PropagationMetrics::new(&mut registry, dataplane.status_board());
        let registry = Arc::new(registry);

        let (admin_addr, admin_task) = start_admin(opts.admin, &dataplane, registry).await?;

        // Watch before the first read, so that nothing written meanwhile is missed.
        let mut watching = if opts.watch {
            Some(
                weir_provider_file::watch(&opts.config)
                    .with_context(|| format!("watching {}", opts.config.display()))?,
            )
        } else {
            None
        };

        let mut provider = FileProvider::new(opts.config.clone());
        // The watch listed the tree as it watched it: the first read starts from that.
        let listing = watching.as_mut().and_then(|(w, _)| w.take_listing());
        let mut pipeline = Pipeline::new(
            translator_options(
                opts.ingress_http,
                opts.ingress_https,
                &opts.ingress_class,
                &opts.more_ingress_classes,
            ),
            dataplane.clone(),
            metrics,
        );
        // The first configuration is translated while it is read: files are parsed on
        // reader threads and applied to the provider on a thread of its own, and every
        // part read is translated here meanwhile. Nothing is served from it until all
        // of it is translated (one cycle, one snapshot).
        let seen = Instant::now();
        let mut load = pipeline.begin_load();
        let build = pipeline.begin_build(&load);
        let (objects, build) = tokio::task::block_in_place(|| {
            load_in_parts(
                &mut provider,
                listing,
                &dataplane,
                build,
                |changes, expected| pipeline.stage(&mut load, changes, expected),
            )
        });
        let origin = |k: &weir_api::ObjectKey| provider.origin(k).map(origin_string);
        // Only the count is kept: the report lists every status of the first batch, which
        // nothing reads after this (it was kept for the life of the process).
        let deltas = pipeline
            .finish_load(load, build, seen, &origin)
            .await
            .deltas;
        if let Some(f) = opts.on_loaded {
            f();
        }
        dataplane.set_ready();
        tracing::info!(
            objects,
            resources = deltas,
            ms = seen.elapsed().as_millis() as u64,
            admin = %admin_addr,
            "configuration loaded; ready"
        );

        let (stop, mut stopped) = watch::channel(false);
        let loop_dataplane = dataplane.clone();
        let (followed, stopped_following) = tokio::sync::oneshot::channel();
        let config_task = tokio::spawn(async move {
            let follow = async {
                let Some((_watcher, mut rx)) = watching else {
                    let _ = stopped.changed().await;
                    return;
                };
                loop {
                    let first = tokio::select! {
                        paths = rx.recv() => match paths { Some(p) => p, None => return },
                        _ = stopped.changed() => return,
                    };
                    // Leading edge: the first change starts work at once; whatever arrived
                    // while the previous cycle ran is drained and coalesced into this one.
                    let seen = Instant::now();
                    let mut paths: BTreeSet<PathBuf> = first.into_iter().collect();
                    while let Ok(more) = rx.try_recv() {
                        paths.extend(more);
                    }
                    let paths: Vec<PathBuf> = paths.into_iter().collect();
                    let update = tokio::task::block_in_place(|| provider.reload(&paths));
                    if update.is_empty() {
                        continue;
                    }
                    let parse = seen.elapsed();
                    let changes = changes_of(update, &loop_dataplane);
                    let origin = |k: &weir_api::ObjectKey| provider.origin(k).map(origin_string);
                    pipeline.process(changes, seen, parse, &origin).await;
                }
            };
            follow.await;
            let _ = followed.send(());
            // The translator's and provider's tables: seconds to free at 1,000,000 domains,
            // which the listeners' drain no longer waits for.
            tokio::task::block_in_place(move || drop((pipeline, provider)));
        });
        Ok(Standalone {
            dataplane,
            admin_addr,
            stop,
            stopped_following,
            config_task,
            admin_task,
        })
    }

    /// Stops watching, drains in-flight requests and stops the admin server.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        // No change is applied after this (it could bind a listener again), and the
        // listeners stop accepting at once: the configuration's tables are freed while
        // they drain, not before (11 s at 1,000,000 domains).
        let _ = self.stopped_following.await;
        self.dataplane.shutdown().await;
        let _ = self.config_task.await;
        self.admin_task.abort();
    }
}

fn origin_string(o: &weir_provider_file::Origin) -> String {
    format!("{}#{}", o.file.display(), o.document)
}

/// `weir run`: start, then serve until SIGINT or SIGTERM, then drain.
pub async fn run_until_signal(opts: RunOptions) -> anyhow::Result<()> {
    let gateway = Standalone::start(opts).await?;
    drain_on_signal(|| gateway.stop()).await;
    Ok(())
}

/// Binds the admin server (`/ready`, `/metrics`, `/config`) and serves it in a task.
pub(crate) async fn start_admin(
    addr: SocketAddr,
    dataplane: &Arc<DataPlane>,
    registry: Arc<Registry>,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    let admin = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the admin server to {addr}"))?;
    let bound = admin.local_addr()?;
    Ok((
        bound,
        tokio::spawn(weir_proxy::serve_admin(admin, dataplane.clone(), registry)),
    ))
}

/// Waits for SIGINT or SIGTERM, then runs `stop` (stop accepting, drain in-flight requests).
pub(crate) async fn drain_on_signal<F: std::future::Future<Output = ()>>(stop: impl FnOnce() -> F) {
    shutdown_signal().await;
    tracing::info!("shutting down: draining in-flight requests");
    stop().await;
}

pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
