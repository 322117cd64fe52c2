//! The data-plane side: subscribe, apply each update, acknowledge it; reconnect with
//! backoff and resume by version (the controller then sends only what differs).

use std::time::Duration;

use foldhash::HashMap;
use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, watch};
use weir_model::{Delta, DeltaBatch, ResourceKey};

use crate::convert::{key_from_wire, key_to_wire, resource_from_wire};
use crate::proto::config_discovery_client::ConfigDiscoveryClient;
use crate::proto::{
    Ack, DataPlaneMessage, Held, Rejection, Subscribe, Update, data_plane_message::Message,
};

/// Where the client applies what it receives (the data plane).
pub trait Apply: Send {
    /// Applies `batch`; returns the resources refused, with reasons (the rest applied).
    fn apply(&mut self, batch: DeltaBatch) -> BoxFuture<'_, Vec<(ResourceKey, String)>>;
    /// The data plane now holds a complete configuration (called after every complete
    /// update; the first call is the one that matters for readiness).
    fn complete(&mut self);
}

/// Settings of [`run`].
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The controller's push endpoints, e.g. `http://weir-controller:18000`: one (a
    /// Service in front of every controller replica) or several (the replicas
    /// themselves), tried in turn whenever the stream is lost.
    pub endpoints: Vec<String>,
    /// The Gateway's namespace.
    pub namespace: String,
    /// The Gateway's name.
    pub name: String,
    /// This data plane's identity in the controller's logs.
    pub node: String,
    /// Sent as `authorization: Bearer …` when set.
    pub token: Option<String>,
}

/// Keeps a data plane subscribed until `stop` turns true. Never gives up: while the
/// controller is unreachable the data plane keeps serving what it has.
pub async fn run(opts: ClientOptions, mut sink: impl Apply, mut stop: watch::Receiver<bool>) {
    let mut held: HashMap<ResourceKey, u64> = HashMap::default();
    let mut backoff = Duration::from_millis(100);
    let mut next = 0;
    loop {
        let Some(endpoint) = opts.endpoints.get(next % opts.endpoints.len().max(1)) else {
            tracing::error!("no controller endpoint given");
            return;
        };
        next += 1;
        let session = session(endpoint, &opts, &mut sink, &mut held);
        tokio::select! {
            r = session => match r {
                Ok(()) => tracing::warn!("controller closed the stream; reconnecting"),
                Err(e) => tracing::warn!(error = %e, retry_ms = backoff.as_millis() as u64, "controller unreachable; serving the last configuration"),
            },
            _ = stop.wait_for(|s| *s) => return,
        }
        if next % opts.endpoints.len() != 0 {
            // Another replica may be up: try it at once.
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

async fn session(
    endpoint: &str,
    opts: &ClientOptions,
    sink: &mut impl Apply,
    held: &mut HashMap<ResourceKey, u64>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut client = ConfigDiscoveryClient::connect(endpoint.to_string()).await?;
    let (tx, rx) = mpsc::channel::<DataPlaneMessage>(4);
    tx.send(DataPlaneMessage {
        message: Some(Message::Subscribe(Subscribe {
            gateway_namespace: opts.namespace.clone(),
            gateway_name: opts.name.clone(),
            node: opts.node.clone(),
            held: held
                .iter()
                .map(|(k, v)| Held {
                    key: Some(key_to_wire(k)),
                    version: *v,
                })
                .collect(),
            protocol_version: crate::PROTOCOL_VERSION,
        })),
    })
    .await?;
    let outbound =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let mut request = tonic::Request::new(outbound);
    if let Some(t) = &opts.token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {t}").parse()?);
    }
    let mut updates = client.stream(request).await?.into_inner();
    tracing::info!(%endpoint, gateway = %format!("{}/{}", opts.namespace, opts.name), "subscribed");
    let mut first = true;
    while let Some(update) = updates.message().await? {
        if std::mem::take(&mut first) && update.protocol_version != crate::PROTOCOL_VERSION {
            // Informational: an older controller sends nothing this data plane cannot
            // read, a newer one nothing it did not announce support for.
            tracing::info!(%endpoint, controller = update.protocol_version, ours = crate::PROTOCOL_VERSION, "controller speaks another push protocol version");
        }
        let (nonce, complete) = (update.nonce, update.complete);
        let rejected = apply(update, sink, held).await;
        tx.send(DataPlaneMessage {
            message: Some(Message::Ack(Ack { nonce, rejected })),
        })
        .await?;
        if complete {
            sink.complete();
        }
    }
    Ok(())
}

/// Decodes and applies one update; returns the refusals to report.
async fn apply(
    update: Update,
    sink: &mut impl Apply,
    held: &mut HashMap<ResourceKey, u64>,
) -> Vec<Rejection> {
    let mut rejected = Vec::new();
    let mut deltas = Vec::with_capacity(update.upserts.len() + update.removes.len());
    let mut versions = Vec::with_capacity(update.upserts.len());
    for w in &update.upserts {
        match resource_from_wire(w) {
            Ok(r) => {
                versions.push((r.key(), w.version));
                deltas.push(Delta::Upsert(r));
            }
            Err(e) => {
                tracing::warn!(error = %e, "refusing a resource that does not decode");
                rejected.push(Rejection {
                    key: crate::convert::key_of_refused(w),
                    error: e.to_string(),
                });
            }
        }
    }
    let mut removed = Vec::with_capacity(update.removes.len());
    for k in &update.removes {
        if let Ok(k) = key_from_wire(k) {
            removed.push(k.clone());
            deltas.push(Delta::Remove(k));
        }
    }
    let refused = sink.apply(DeltaBatch { deltas }).await;
    for (k, v) in versions {
        if !refused.iter().any(|(r, _)| *r == k) {
            held.insert(k, v);
        }
    }
    for k in removed {
        held.remove(&k);
    }
    rejected.extend(refused.into_iter().map(|(k, e)| Rejection {
        key: Some(key_to_wire(&k)),
        error: e,
    }));
    rejected
}
