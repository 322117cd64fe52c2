//! `weir controller`: the Kubernetes provider, the translator, an embedded data plane and
//! the status writer in one process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use weir_provider_k8s::{KubeProvider, RenderOptions, StatusWriter, Update, WriterStats};
use weir_proxy::{DataPlane, ProxyConfig};
use weir_translate::{ObjectChange, TranslatorOptions};

use crate::pipeline::Pipeline;
use crate::propagation::PropagationMetrics;

/// Options of `weir controller`.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Kubeconfig file; `None` infers (in-cluster, then `$KUBECONFIG`).
    pub kubeconfig: Option<PathBuf>,
    /// GatewayClass `controllerName` we own.
    pub controller_name: String,
    /// Admin server address.
    pub admin: SocketAddr,
    /// Where Ingress plaintext traffic is served.
    pub ingress_http: Option<SocketAddr>,
    /// Where Ingress TLS traffic is served.
    pub ingress_https: Option<SocketAddr>,
    /// Ingress class served.
    pub ingress_class: String,
    /// Addresses written into Gateway and Ingress status where the data plane listens on
    /// `0.0.0.0`/`::` (e.g. the Pod IP or the load balancer's address).
    pub advertise: Vec<String>,
    /// Gives each Gateway without an IP in `spec.addresses` its own address from this
    /// range instead of `0.0.0.0` (e.g. loopback addresses for tests).
    pub gateway_address_pool: Option<weir_translate::AddressPool>,
    /// One log line per request.
    pub access_log: bool,
}

/// A running controller.
pub struct Controller {
    /// The embedded data plane.
    pub dataplane: Arc<DataPlane>,
    /// Where the admin server listens.
    pub admin_addr: SocketAddr,
    /// Status write counters.
    pub status_stats: WriterStats,
    writer: Arc<StatusWriter>,
    stop: watch::Sender<bool>,
    config_task: JoinHandle<()>,
    admin_task: JoinHandle<()>,
}

fn changes_of(update: Update) -> Vec<ObjectChange> {
    for e in &update.errors {
        tracing::warn!("rejected: {e}");
    }
    let mut changes: Vec<ObjectChange> = update
        .deletes
        .into_iter()
        .map(ObjectChange::Delete)
        .collect();
    changes.extend(update.upserts.into_iter().map(ObjectChange::Upsert));
    changes
}

impl Controller {
    /// Connects, waits for every watcher's initial list, applies it, and returns with
    /// `/ready` answering 200. Changes are then applied as they are watched.
    pub async fn start(opts: ControllerOptions) -> anyhow::Result<Controller> {
        let client = weir_provider_k8s::client(opts.kubeconfig.as_deref()).await?;
        let mut registry = Registry::default();
        let dataplane = DataPlane::new(
            ProxyConfig {
                access_log: opts.access_log,
                ..ProxyConfig::default()
            },
            &mut registry,
        );
        let metrics = PropagationMetrics::new(&mut registry);
        let mut provider = KubeProvider::start(client.clone());
        let writer = Arc::new(StatusWriter::spawn(
            client,
            provider.live(),
            RenderOptions {
                controller_name: opts.controller_name.clone(),
                advertise: opts.advertise.clone(),
            },
            &mut registry,
        ));
        let registry = Arc::new(registry);
        let admin = tokio::net::TcpListener::bind(opts.admin)
            .await
            .with_context(|| format!("binding the admin server to {}", opts.admin))?;
        let admin_addr = admin.local_addr()?;
        let admin_task = tokio::spawn(weir_proxy::serve_admin(admin, dataplane.clone(), registry));

        let mut pipeline = Pipeline::new(
            TranslatorOptions {
                controller_name: opts.controller_name.clone(),
                standalone: false,
                ingress_class: opts.ingress_class.clone(),
                ingress_http: opts.ingress_http,
                ingress_https: opts.ingress_https,
                gateway_address_pool: opts.gateway_address_pool,
            },
            dataplane.clone(),
            metrics,
        );
        let seen = Instant::now();
        let update = provider.initial().await;
        let objects = update.upserts.len();
        let changes = changes_of(update);
        let report = pipeline
            .process(changes, seen, seen.elapsed(), &|_| None)
            .await;
        writer.submit(report.statuses);
        dataplane.set_ready();
        tracing::info!(
            objects,
            resources = report.deltas,
            ms = seen.elapsed().as_millis() as u64,
            admin = %admin_addr,
            "initial state synced and applied; ready"
        );

        let (stop, mut stopped) = watch::channel(false);
        let task_writer = writer.clone();
        let config_task = tokio::spawn(async move {
            loop {
                let (seen, update) = tokio::select! {
                    next = provider.next() => match next { Some(n) => n, None => return },
                    _ = stopped.changed() => return,
                };
                if update.is_empty() {
                    continue;
                }
                let parse = seen.elapsed();
                let changes = changes_of(update);
                let report = pipeline.process(changes, seen, parse, &|_| None).await;
                task_writer.submit(report.statuses);
            }
        });
        Ok(Controller {
            dataplane,
            admin_addr,
            status_stats: writer.stats(),
            writer,
            stop,
            config_task,
            admin_task,
        })
    }

    /// Waits until every queued status has been written (or found unchanged).
    pub async fn statuses_written(&self) {
        self.writer.idle().await;
    }

    /// Stops watching, drains in-flight requests and stops the admin server.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.config_task.await;
        self.dataplane.shutdown().await;
        self.admin_task.abort();
    }
}

/// `weir controller`: start, then serve until SIGINT or SIGTERM, then drain.
pub async fn run_until_signal(opts: ControllerOptions) -> anyhow::Result<()> {
    let controller = Controller::start(opts).await?;
    crate::standalone::shutdown_signal().await;
    tracing::info!("shutting down: draining in-flight requests");
    controller.stop().await;
    Ok(())
}
