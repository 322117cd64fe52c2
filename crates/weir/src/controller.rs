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
    /// More Ingress classes served (e.g. `nginx`, taken over in place).
    pub more_ingress_classes: Vec<String>,
    /// Addresses written into Gateway and Ingress status where the data plane listens on
    /// `0.0.0.0`/`::` (e.g. the Pod IP or the load balancer's address).
    pub advertise: Vec<String>,
    /// Gives each Gateway without an IP in `spec.addresses` its own address from this
    /// range instead of `0.0.0.0` (e.g. loopback addresses for tests).
    pub gateway_address_pool: Option<weir_translate::AddressPool>,
    /// One JSON access-log record per request (`None`: off).
    pub access_log: Option<weir_proxy::AccessLogSettings>,
    /// OpenTelemetry traces over OTLP (`None`: off).
    pub traces: Option<weir_proxy::TraceSettings>,
    /// Serve the configuration push protocol here (split mode: `weir proxy` data planes).
    pub xds_listen: Option<SocketAddr>,
    /// Whether the controller's embedded data plane serves Gateways and Ingresses (turn
    /// off when separate data planes serve them).
    pub embedded_proxy: bool,
    /// What to provision per accepted Gateway: in split mode a data-plane Deployment,
    /// Service and ServiceAccount; with the embedded data plane, a Service selecting the
    /// controller's Pods.
    pub provision: Option<weir_provider_k8s::Provision>,
    /// Data planes must present a token of ServiceAccount `weir-<gateway>` in the
    /// Gateway's namespace (checked with TokenReview); `false` admits every data plane.
    pub xds_auth: bool,
    /// Several replicas: elect a leader on this Lease; only the leader writes status and
    /// provisions. `None`: this replica always acts as the leader.
    pub leader_election: Option<weir_provider_k8s::LeaseOptions>,
    /// Where the embedded data plane's global rate limits keep their counts (`--redis`).
    pub redis: Option<weir_proxy::RedisSettings>,
}

/// Admits a data plane to Gateway `ns/name` only with a token of ServiceAccount
/// `ns/weir-<name>`: each data plane can read its own Gateway's configuration only.
struct ServiceAccountAuth {
    client: kube::Client,
}

/// The ServiceAccount a Gateway's data planes run as.
pub fn data_plane_service_account(gateway: &str) -> String {
    format!("weir-{gateway}")
}

impl weir_xds::Authorize for ServiceAccountAuth {
    fn authorize<'a>(
        &'a self,
        token: Option<&'a str>,
        namespace: &'a str,
        name: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let token = token.ok_or("no bearer token")?;
            let id = weir_provider_k8s::review_token(&self.client, token).await?;
            let want = data_plane_service_account(name);
            if id.namespace == namespace && id.name == want {
                Ok(())
            } else {
                Err(format!(
                    "ServiceAccount {}/{} may not read Gateway {namespace}/{name} (needs {namespace}/{want})",
                    id.namespace, id.name
                ))
            }
        })
    }
}

/// A running controller.
pub struct Controller {
    /// The embedded data plane.
    pub dataplane: Arc<DataPlane>,
    /// Where the admin server listens.
    pub admin_addr: SocketAddr,
    /// Status write counters.
    pub status_stats: WriterStats,
    /// Where the push server listens (split mode).
    pub xds_addr: Option<SocketAddr>,
    /// Push server counters (split mode).
    pub xds_metrics: Option<weir_xds::ServerMetrics>,
    xds_task: Option<JoinHandle<()>>,
    refusal_task: JoinHandle<()>,
    leadership: Option<weir_provider_k8s::Leadership>,
    leader: watch::Receiver<bool>,
    leader_task: JoinHandle<()>,
    writer: Arc<StatusWriter>,
    stop: watch::Sender<bool>,
    config_task: JoinHandle<()>,
    admin_task: JoinHandle<()>,
}

fn changes_of(update: Update, dataplane: &DataPlane) -> Vec<ObjectChange> {
    for e in &update.errors {
        tracing::warn!("rejected: {e}");
        // The provider's messages start with the object they name.
        let (object, message) = match e.split_once(": ") {
            Some((o, m)) if o.contains(' ') => (Some(o.to_string()), m.to_string()),
            _ => (None, e.clone()),
        };
        crate::pipeline::record_refused(dataplane, object, None, message);
    }
    crate::pipeline::changes(update.deletes, update.upserts)
}

impl Controller {
    /// How many Gateways' last statuses the status writer remembers (follows the live
    /// Gateways: a deleted Gateway is forgotten).
    pub fn remembered_gateways(&self) -> usize {
        self.writer.remembered_gateways()
    }

    /// Whether this replica leads (always, without leader election), and its changes.
    pub fn leader(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    /// Connects, waits for every watcher's initial list, applies it, and returns with
    /// `/ready` answering 200. Changes are then applied as they are watched.
    pub async fn start(opts: ControllerOptions) -> anyhow::Result<Controller> {
        let client = weir_provider_k8s::client(opts.kubeconfig.as_deref()).await?;
        let mut registry = Registry::default();
        // Campaign from the start: the Lease is usually settled by the time the initial
        // list is translated.
        let leadership = opts
            .leader_election
            .clone()
            .map(|o| weir_provider_k8s::Leadership::start(client.clone(), o))
            .transpose()
            .context("leader election")?;
        let (always, always_rx) = watch::channel(true);
        let leader = leadership.as_ref().map_or(always_rx, |l| l.watch());
        let leader_task = spawn_leader_gauge(&mut registry, leader.clone(), always);
        // Taken now, before the initial statuses are submitted: leadership won after that
        // submission (which a follower's writer drops) is then seen by the config loop,
        // which submits everything again.
        let mut leads = leader.clone();
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
        dataplane.status_board().set_mode(if opts.embedded_proxy {
            "weir controller"
        } else {
            "weir controller (split: traffic is served by weir proxy data planes)"
        });
        let metrics = PropagationMetrics::new(&mut registry, dataplane.status_board());
        let mut provider = KubeProvider::start(client.clone());
        let hub = Arc::new(weir_xds::Hub::default());
        let problems_hub = hub.clone();
        let addresses: crate::provisioning::Addresses = Default::default();
        let status_addresses = addresses.clone();
        let writer = Arc::new(StatusWriter::spawn(
            client.clone(),
            provider.live(),
            RenderOptions {
                controller_name: opts.controller_name.clone(),
                advertise: opts.advertise.clone(),
                // Split mode: what a Gateway's data planes refuse makes it not Programmed.
                gateway_problems: Some(weir_provider_k8s::GatewayProblems(Arc::new(
                    move |ns: &str, name: &str| problems_hub.refusals(&format!("{ns}/{name}")),
                ))),
                // With provisioning: the provisioned Service's addresses (in embedded mode
                // only a load balancer's; none known: the translator's).
                gateway_addresses: Some(weir_provider_k8s::GatewayAddresses(Arc::new(
                    move |ns: &str, name: &str| {
                        let key = weir_api::ObjectKey::new(weir_api::Kind::Gateway, ns, name);
                        status_addresses
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get(&key)
                            .filter(|a| !a.is_empty())
                            .cloned()
                    },
                ))),
            },
            leadership.is_some().then(|| leader.clone()),
            &mut registry,
        ));
        let mut xds = None;
        if let Some(addr) = opts.xds_listen {
            let metrics = weir_xds::ServerMetrics::new(&mut registry);
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the push server to {addr}"))?;
            let bound = listener.local_addr()?;
            let auth: Arc<dyn weir_xds::Authorize> = if opts.xds_auth {
                Arc::new(ServiceAccountAuth {
                    client: client.clone(),
                })
            } else {
                Arc::new(weir_xds::AllowAll)
            };
            let service = weir_xds::XdsService::new(hub.clone(), auth, metrics.clone());
            let task = tokio::spawn(async move {
                let incoming = tonic::transport::server::TcpIncoming::from(listener);
                if let Err(e) = tonic::transport::Server::builder()
                    .add_service(service)
                    .serve_with_incoming(incoming)
                    .await
                {
                    tracing::error!(error = %e, "push server failed");
                }
            });
            tracing::info!(addr = %bound, "push server listening");
            xds = Some((bound, metrics, task));
        }
        let registry = Arc::new(registry);
        let (admin_addr, admin_task) =
            crate::standalone::start_admin(opts.admin, &dataplane, registry).await?;

        let mut pipeline = Pipeline::new(
            TranslatorOptions {
                controller_name: opts.controller_name.as_str().into(),
                standalone: false,
                ingress_class: opts.ingress_class.clone(),
                more_ingress_classes: opts.more_ingress_classes.clone(),
                ingress_http: opts.ingress_http,
                ingress_https: opts.ingress_https,
                gateway_address_pool: opts.gateway_address_pool,
                provisions_infrastructure: opts.provision.is_some(),
            },
            dataplane.clone(),
            metrics,
        )
        .with_hub(hub.clone(), opts.embedded_proxy);
        let mut provisioning = opts.provision.clone().map(|p| {
            let writer = writer.clone();
            crate::provisioning::Provisioning::start(
                weir_provider_k8s::Provisioner::new(client.clone(), p),
                addresses.clone(),
                move |gateway| writer.refresh(&[gateway]),
                leader.clone(),
            )
        });
        let seen = Instant::now();
        let update = provider.initial().await;
        if let Some(p) = &mut provisioning {
            p.observe(&update.upserts, &update.deletes);
        }
        let objects = update.upserts.len();
        let changes = changes_of(update, &dataplane);
        let report = pipeline
            .process(changes, seen, seen.elapsed(), &|_| None)
            .await;
        if let Some(p) = &mut provisioning {
            p.statuses(&report.statuses);
        }
        writer.submit(report.statuses);
        hub.set_synced();
        dataplane.set_ready();
        tracing::info!(
            objects,
            resources = report.deltas,
            ms = seen.elapsed().as_millis() as u64,
            admin = %admin_addr,
            "initial state synced and applied; ready"
        );

        // Re-render the status of Gateways whose data planes' refusals changed.
        let refusal_task = {
            let hub = hub.clone();
            let writer = writer.clone();
            let mut changes = hub.refusal_changes();
            tokio::spawn(async move {
                let mut refused: std::collections::BTreeSet<Arc<str>> = Default::default();
                while changes.changed().await.is_ok() {
                    let now: std::collections::BTreeSet<Arc<str>> = hub
                        .gateways()
                        .into_iter()
                        .filter(|g| !hub.refusals(g).is_empty())
                        .collect();
                    let keys: Vec<weir_api::ObjectKey> = now
                        .union(&refused)
                        .filter_map(|g| g.split_once('/'))
                        .map(|(ns, n)| weir_api::ObjectKey::new(weir_api::Kind::Gateway, ns, n))
                        .collect();
                    writer.refresh(&keys);
                    refused = now;
                }
            })
        };
        let (stop, mut stopped) = watch::channel(false);
        let task_writer = writer.clone();
        let loop_dataplane = dataplane.clone();
        let config_task = tokio::spawn(async move {
            loop {
                let (seen, update) = tokio::select! {
                    next = provider.next() => match next { Some(n) => n, None => return },
                    _ = stopped.changed() => return,
                    Ok(()) = leads.changed() => {
                        if *leads.borrow_and_update() {
                            // New leader: every current status once more; the writer sends
                            // only those that differ from what the API server holds (the
                            // previous leader wrote the rest), so a failover is no burst.
                            let all = pipeline.statuses();
                            tracing::info!(statuses = all.len(), "leader: reconciling every status with the API server");
                            task_writer.submit(all);
                            if let Some(p) = &provisioning {
                                p.resync();
                            }
                        }
                        continue;
                    }
                };
                if update.is_empty() {
                    continue;
                }
                let parse = seen.elapsed();
                if let Some(p) = &mut provisioning {
                    p.observe(&update.upserts, &update.deletes);
                }
                task_writer.forget(&update.deletes);
                let changes = changes_of(update, &loop_dataplane);
                let report = pipeline.process(changes, seen, parse, &|_| None).await;
                if let Some(p) = &mut provisioning {
                    p.statuses(&report.statuses);
                }
                task_writer.submit(report.statuses);
            }
        });
        let (xds_addr, xds_metrics, xds_task) = match xds {
            Some((a, m, t)) => (Some(a), Some(m), Some(t)),
            None => (None, None, None),
        };
        Ok(Controller {
            dataplane,
            admin_addr,
            xds_addr,
            xds_metrics,
            xds_task,
            refusal_task,
            leadership,
            leader,
            leader_task,
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
        // Hand the Lease over first: another replica takes over without waiting for it
        // to expire, and nothing is written from here on.
        if let Some(l) = self.leadership {
            l.release().await;
        }
        self.leader_task.abort();
        let _ = self.stop.send(true);
        let _ = self.config_task.await;
        if let Some(t) = &self.xds_task {
            t.abort();
        }
        self.refusal_task.abort();
        self.dataplane.shutdown().await;
        self.admin_task.abort();
    }
}

/// `weir controller`: start, then serve until SIGINT or SIGTERM, then drain.
pub async fn run_until_signal(opts: ControllerOptions) -> anyhow::Result<()> {
    let controller = Controller::start(opts).await?;
    crate::standalone::drain_on_signal(|| controller.stop()).await;
    Ok(())
}

/// `weir_controller_leader`: 1 while this replica leads (always 1 without leader
/// election), logged on every change.
fn spawn_leader_gauge(
    registry: &mut Registry,
    mut leader: watch::Receiver<bool>,
    always: watch::Sender<bool>,
) -> JoinHandle<()> {
    let gauge = prometheus_client::metrics::gauge::Gauge::<i64>::default();
    registry.register(
        "weir_controller_leader",
        "1 while this controller replica is the leader (writes status, provisions)",
        gauge.clone(),
    );
    tokio::spawn(async move {
        // Keeps the constant `true` of a controller without election alive.
        let _always = always;
        loop {
            let now = *leader.borrow_and_update();
            gauge.set(i64::from(now));
            if leader.changed().await.is_err() {
                return;
            }
        }
    })
}
