//! `weir proxy`: a data plane fed by the controller's push protocol, for one Gateway.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use futures_util::future::BoxFuture;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use weir_model::{DeltaBatch, ResourceKey};
use weir_proxy::{DataPlane, ProxyConfig};
use weir_xds::client::{self, Apply, ClientOptions};

/// Options of `weir proxy`.
#[derive(Clone, Debug)]
pub struct ProxyOptions {
    /// The controller's push endpoints, e.g. `http://127.0.0.1:18000` (several: tried in
    /// turn when the stream is lost).
    pub controllers: Vec<String>,
    /// The Gateway served, `namespace/name`.
    pub gateway: String,
    /// Admin server address.
    pub admin: SocketAddr,
    /// This data plane's name in the controller's logs.
    pub node: String,
    /// Bearer token presented to the controller.
    pub token: Option<String>,
    /// One JSON access-log record per request (`None`: off).
    pub access_log: Option<weir_proxy::AccessLogSettings>,
    /// OpenTelemetry traces over OTLP (`None`: off).
    pub traces: Option<weir_proxy::TraceSettings>,
    /// Where global rate limits keep their counts (`--redis`).
    pub redis: Option<weir_proxy::RedisSettings>,
}

/// A running data plane.
pub struct Proxy {
    /// The data plane.
    pub dataplane: Arc<DataPlane>,
    /// Where the admin server listens.
    pub admin_addr: SocketAddr,
    stop: watch::Sender<bool>,
    client_task: JoinHandle<()>,
    admin_task: JoinHandle<()>,
}

struct Sink {
    dataplane: Arc<DataPlane>,
    ready: bool,
}

impl Apply for Sink {
    fn apply(&mut self, batch: DeltaBatch) -> BoxFuture<'_, Vec<(ResourceKey, String)>> {
        Box::pin(async move {
            let report = self.dataplane.apply(&batch).await;
            for (key, reason) in &report.rejected {
                tracing::warn!(resource = ?key, %reason, "refused; the last good version stays");
            }
            report.rejected
        })
    }

    fn complete(&mut self) {
        if !self.ready {
            self.ready = true;
            self.dataplane.set_ready();
            tracing::info!("complete configuration applied; ready");
        }
    }
}

impl Proxy {
    /// Starts the admin server and the subscription. `/ready` turns 200 once the first
    /// complete configuration is applied; until then nothing is served.
    pub async fn start(opts: ProxyOptions) -> anyhow::Result<Proxy> {
        let (namespace, name) = opts
            .gateway
            .split_once('/')
            .filter(|(ns, n)| !ns.is_empty() && !n.is_empty())
            .context("--gateway must be NAMESPACE/NAME")?;
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
        dataplane
            .status_board()
            .set_mode(format!("weir proxy for Gateway {namespace}/{name}"));
        let (admin_addr, admin_task) =
            crate::standalone::start_admin(opts.admin, &dataplane, Arc::new(registry)).await?;
        let (stop, stopped) = watch::channel(false);
        let client_opts = ClientOptions {
            endpoints: opts.controllers.clone(),
            namespace: namespace.into(),
            name: name.into(),
            node: opts.node.clone(),
            token: opts.token.clone(),
        };
        let sink = Sink {
            dataplane: dataplane.clone(),
            ready: false,
        };
        let client_task = tokio::spawn(client::run(client_opts, sink, stopped));
        Ok(Proxy {
            dataplane,
            admin_addr,
            stop,
            client_task,
            admin_task,
        })
    }

    /// Stops the subscription, stops accepting, lets in-flight requests finish.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.client_task.await;
        self.dataplane.shutdown().await;
        self.admin_task.abort();
    }
}

/// `weir proxy`: run until SIGINT or SIGTERM, then drain.
pub async fn run_until_signal(opts: ProxyOptions) -> anyhow::Result<()> {
    let proxy = Proxy::start(opts).await?;
    crate::standalone::drain_on_signal(|| proxy.stop()).await;
    Ok(())
}
