//! The controller side: a tonic service that runs one [`Session`] per data-plane stream.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use futures_util::future::BoxFuture;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use crate::convert::key_from_wire;
use crate::hub::{Hub, Refused, Session};
use crate::proto::config_discovery_server::{ConfigDiscovery, ConfigDiscoveryServer};
use crate::proto::{DataPlaneMessage, Update, data_plane_message::Message};

/// Decides whether the caller of a stream may receive a Gateway's configuration.
pub trait Authorize: Send + Sync + 'static {
    /// `token` is the bearer token of the request, if any; `Err` says why not.
    fn authorize<'a>(
        &'a self,
        token: Option<&'a str>,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), String>>;
}

/// Lets everyone in (for tests and trusted networks).
pub struct AllowAll;

impl Authorize for AllowAll {
    fn authorize<'a>(
        &'a self,
        _: Option<&'a str>,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}

/// Counters of the push server (`weir_xds_*`).
#[derive(Clone, Debug)]
pub struct ServerMetrics {
    /// Connected data planes.
    pub connected: Gauge,
    /// Updates sent.
    pub updates: Counter,
    /// Resources sent (upserts and removals).
    pub resources: Counter,
    /// Resources refused by data planes.
    pub refused: Counter,
    /// Update sent → its Ack received (the data plane's decode + apply + the round trip).
    pub ack_seconds: Histogram,
    /// Per data plane (labels `gateway`, `node`; as many series as data planes): whether it
    /// is connected, the nonce of its last acknowledged update, and its refusals.
    pub per_data_plane: PerDataPlane,
}

/// Label set of the per-data-plane series.
#[derive(Clone, Debug, PartialEq, Eq, Hash, prometheus_client::encoding::EncodeLabelSet)]
pub struct DataPlaneLabels {
    /// `namespace/name` of the Gateway.
    pub gateway: String,
    /// The data plane's node name.
    pub node: String,
}

/// See [`ServerMetrics::per_data_plane`].
#[derive(Clone, Debug, Default)]
pub struct PerDataPlane {
    /// 1 while connected.
    pub connected: Family<DataPlaneLabels, Gauge>,
    /// Nonce of the last acknowledged update.
    pub last_ack: Family<DataPlaneLabels, Gauge>,
    /// Resources refused.
    pub refused: Family<DataPlaneLabels, Counter>,
    /// The push protocol version the data plane announced (0: before versioning).
    pub protocol_version: Family<DataPlaneLabels, Gauge>,
}

impl ServerMetrics {
    /// Registers the metrics.
    pub fn new(registry: &mut Registry) -> ServerMetrics {
        let m = ServerMetrics {
            connected: Gauge::default(),
            updates: Counter::default(),
            resources: Counter::default(),
            refused: Counter::default(),
            ack_seconds: Histogram::new(exponential_buckets(0.000_05, 2.0, 17)),
            per_data_plane: PerDataPlane::default(),
        };
        let p = &m.per_data_plane;
        registry.register(
            "weir_xds_data_plane_connected",
            "1 while the data plane is connected",
            p.connected.clone(),
        );
        registry.register(
            "weir_xds_data_plane_last_ack_nonce",
            "Nonce of the data plane's last acknowledged update",
            p.last_ack.clone(),
        );
        registry.register(
            "weir_xds_data_plane_protocol_version",
            "Push protocol version the data plane announced (0: before versioning)",
            p.protocol_version.clone(),
        );
        registry.register(
            "weir_xds_data_plane_refused",
            "Resources the data plane refused",
            p.refused.clone(),
        );
        registry.register(
            "weir_xds_update_ack_seconds",
            "Update sent to a data plane until its Ack arrived (decode, apply, round trip)",
            m.ack_seconds.clone(),
        );
        registry.register(
            "weir_xds_connected_data_planes",
            "Data planes connected to the push server",
            m.connected.clone(),
        );
        registry.register(
            "weir_xds_updates",
            "Updates sent to data planes",
            m.updates.clone(),
        );
        registry.register(
            "weir_xds_resources_sent",
            "Resources sent to data planes (upserts and removals)",
            m.resources.clone(),
        );
        registry.register(
            "weir_xds_resources_refused",
            "Resources data planes refused (NACKed)",
            m.refused.clone(),
        );
        m
    }
}

/// The gRPC service over a [`Hub`].
pub struct XdsService {
    hub: Arc<Hub>,
    auth: Arc<dyn Authorize>,
    metrics: ServerMetrics,
}

impl XdsService {
    /// A service for `hub`, admitting streams that `auth` allows.
    pub fn new(
        hub: Arc<Hub>,
        auth: Arc<dyn Authorize>,
        metrics: ServerMetrics,
    ) -> ConfigDiscoveryServer<XdsService> {
        ConfigDiscoveryServer::new(XdsService { hub, auth, metrics })
    }
}

type UpdateStream = Pin<Box<dyn Stream<Item = Result<Update, Status>> + Send>>;

#[tonic::async_trait]
impl ConfigDiscovery for XdsService {
    type StreamStream = UpdateStream;

    async fn stream(
        &self,
        request: Request<Streaming<DataPlaneMessage>>,
    ) -> Result<Response<UpdateStream>, Status> {
        let token = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned);
        let mut inbound = request.into_inner();
        let sub = match inbound.message().await? {
            Some(DataPlaneMessage {
                message: Some(Message::Subscribe(s)),
            }) => s,
            _ => {
                return Err(Status::invalid_argument(
                    "the first message must be Subscribe",
                ));
            }
        };
        if sub.gateway_namespace.is_empty() || sub.gateway_name.is_empty() {
            return Err(Status::invalid_argument("Subscribe names no Gateway"));
        }
        if !crate::serves(crate::PROTOCOL_VERSION, sub.protocol_version) {
            return Err(Status::failed_precondition(format!(
                "data plane speaks push protocol version {}, this controller {} and serves four versions back: upgrade the data plane",
                sub.protocol_version,
                crate::PROTOCOL_VERSION
            )));
        }
        self.auth
            .authorize(token.as_deref(), &sub.gateway_namespace, &sub.gateway_name)
            .await
            .map_err(Status::permission_denied)?;
        let mut held = foldhash::HashMap::default();
        for h in &sub.held {
            if let Some(k) = h.key.as_ref().and_then(|k| key_from_wire(k).ok()) {
                held.insert(k, h.version);
            }
        }
        let gateway = format!("{}/{}", sub.gateway_namespace, sub.gateway_name);
        tracing::info!(%gateway, node = %sub.node, held = held.len(), protocol_version = sub.protocol_version, "data plane subscribed");
        let session = self
            .hub
            .subscribe_as(&gateway, &sub.node, held, sub.protocol_version);
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(drive(
            self.hub.clone(),
            session,
            inbound,
            tx,
            self.metrics.clone(),
            sub.node,
            sub.protocol_version,
        ));
        let stream =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|u| (u, rx)) },
            );
        Ok(Response::new(Box::pin(stream)))
    }
}

async fn drive(
    hub: Arc<Hub>,
    mut session: Session,
    mut inbound: Streaming<DataPlaneMessage>,
    tx: mpsc::Sender<Result<Update, Status>>,
    metrics: ServerMetrics,
    node: String,
    protocol_version: u32,
) {
    metrics.connected.inc();
    let labels = DataPlaneLabels {
        gateway: session.gateway().to_string(),
        node: node.clone(),
    };
    // Resolved once: a family lookup takes a lock.
    let (connected, last_ack, refused_here) = (
        metrics
            .per_data_plane
            .connected
            .get_or_create(&labels)
            .clone(),
        metrics
            .per_data_plane
            .last_ack
            .get_or_create(&labels)
            .clone(),
        metrics
            .per_data_plane
            .refused
            .get_or_create(&labels)
            .clone(),
    );
    connected.set(1);
    metrics
        .per_data_plane
        .protocol_version
        .get_or_create(&labels)
        .set(i64::from(protocol_version));
    hub.synced().await;
    let notify = session.notify();
    let mut sent_at = std::time::Instant::now();
    loop {
        if !session.waiting_for_ack() {
            if let Some(u) = session.next_update() {
                metrics.updates.inc();
                metrics
                    .resources
                    .inc_by((u.upserts.len() + u.removes.len()) as u64);
                sent_at = std::time::Instant::now();
                if tx.send(Ok(u)).await.is_err() {
                    break;
                }
                continue;
            }
            tokio::select! {
                _ = notify.notified() => continue,
                msg = inbound.message() => if !matches!(msg, Ok(Some(_))) { break },
            }
            continue;
        }
        match inbound.message().await {
            Ok(Some(DataPlaneMessage {
                message: Some(Message::Ack(a)),
            })) => {
                metrics.ack_seconds.observe(sent_at.elapsed().as_secs_f64());
                last_ack.set(i64::try_from(a.nonce).unwrap_or(i64::MAX));
                let mut refused: Vec<Refused> = Vec::with_capacity(a.rejected.len());
                for r in &a.rejected {
                    match r.key.as_ref().and_then(|k| key_from_wire(k).ok()) {
                        Some(key) => refused.push(Refused {
                            key,
                            error: r.error.clone(),
                        }),
                        // A resource the data plane could not even name (its key did not
                        // decode): counted and logged, though no status can point at it.
                        None => {
                            metrics.refused.inc();
                            refused_here.inc();
                            tracing::warn!(gateway = session.gateway(), %node, error = %r.error, "data plane refused a resource it could not name");
                        }
                    }
                }
                for r in session.ack(a.nonce, refused) {
                    metrics.refused.inc();
                    refused_here.inc();
                    tracing::warn!(gateway = session.gateway(), %node, resource = ?r.key, error = %r.error, "data plane refused a resource; it keeps its last good version");
                }
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    metrics.connected.dec();
    connected.set(0);
    tracing::info!(gateway = session.gateway(), %node, "data plane disconnected");
}
