//! The frozen message set of protocol version 0 (`tests/proto/v0`, the release before
//! versions): a client speaking it subscribes to this build's push server over real gRPC
//! and is refused, naming both versions (version 6 serves four versions back; the served
//! versions' own release binaries are run by the Kubernetes test
//! `compat::previous_release_binary_is_served`). And the other way round: what this build
//! sends in `Subscribe` reads as a version-0 `Subscribe`.

use std::net::SocketAddr;
use std::sync::Arc;

use prost::Message;
use weir_model::{Delta, DeltaBatch, Resource, ResourceKey};
use weir_xds::convert::key_from_wire;
use weir_xds::{AllowAll, Hub, ServerMetrics, XdsService};

mod common;

/// The generated code of the version-0 message set.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
mod v0 {
    include!(concat!(env!("OUT_DIR"), "/v0/weir.config.v1.rs"));
}

/// A push server on 127.0.0.1 over `hub`; returns its address and its metrics registry.
async fn serve(hub: Arc<Hub>) -> (SocketAddr, prometheus_client::registry::Registry) {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = ServerMetrics::new(&mut registry);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = XdsService::new(hub, Arc::new(AllowAll), metrics);
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    (addr, registry)
}

fn v0_key(k: &v0::ResourceKey) -> ResourceKey {
    let wire = weir_xds::proto::ResourceKey::decode(k.encode_to_vec().as_slice()).unwrap();
    key_from_wire(&wire).unwrap()
}

/// Subscribes as a version-0 data plane (no `protocol_version` in its Subscribe) and
/// waits for the first update, or the refusal.
async fn subscribe_v0(addr: SocketAddr, gateway: &str) -> Result<v0::Update, tonic::Status> {
    let (ns, name) = gateway.split_once('/').unwrap();
    let mut client =
        v0::config_discovery_client::ConfigDiscoveryClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(v0::DataPlaneMessage {
        message: Some(v0::data_plane_message::Message::Subscribe(v0::Subscribe {
            gateway_namespace: ns.into(),
            gateway_name: name.into(),
            node: "v0-data-plane".into(),
            held: vec![],
        })),
    })
    .await
    .unwrap();
    let outbound =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let mut updates = client.stream(outbound).await?.into_inner();
    let first = updates.message().await?;
    drop(tx);
    first.ok_or_else(|| tonic::Status::unknown("the stream ended without an update"))
}

/// Push protocol version 6 serves four versions back: a version-0 data plane is refused
/// with `FAILED_PRECONDITION` naming both versions, rather than sent messages it would
/// misread (its policies' hashes, fields it does not know), and is counted at its version
/// nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_0_data_plane_is_refused_naming_both_versions() {
    let (_, ir) = common::golden_inputs()
        .into_iter()
        .find(|(n, _)| n.starts_with("grpcroute-basic"))
        .expect("the grpcroute-basic golden input");
    let hub = Arc::new(Hub::default());
    hub.apply(&DeltaBatch {
        deltas: ir.iter().cloned().map(Delta::Upsert).collect(),
    });
    hub.set_synced();
    let (addr, registry) = serve(hub.clone()).await;
    let gw = ir
        .iter()
        .find_map(|r| match r {
            Resource::Listener(l) => Some(l.gateway.to_string()),
            _ => None,
        })
        .unwrap();
    let refused = subscribe_v0(addr, &gw)
        .await
        .expect_err("a version-0 data plane is refused");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    let why = refused.message();
    assert!(
        why.contains("version 0")
            && why.contains(&format!("this controller {}", weir_xds::PROTOCOL_VERSION)),
        "{why}"
    );
    let mut page = String::new();
    prometheus_client::encoding::text::encode(&mut page, &registry).unwrap();
    assert!(!page.contains("v0-data-plane"), "{page}");
}

#[test]
fn what_this_release_subscribes_with_reads_as_a_version_0_subscribe() {
    let held = weir_xds::proto::Held {
        key: Some(weir_xds::convert::key_to_wire(&ResourceKey::Cluster(
            weir_model::ClusterKey("service/ns/svc:80".into()),
        ))),
        version: 42,
    };
    let now = weir_xds::proto::Subscribe {
        gateway_namespace: "ns".into(),
        gateway_name: "gw".into(),
        node: "n".into(),
        held: vec![held],
        protocol_version: weir_xds::PROTOCOL_VERSION,
    };
    let old = v0::Subscribe::decode(now.encode_to_vec().as_slice()).unwrap();
    assert_eq!(
        (
            old.gateway_namespace.as_str(),
            old.gateway_name.as_str(),
            old.node.as_str()
        ),
        ("ns", "gw", "n")
    );
    assert_eq!(old.held.len(), 1);
    assert_eq!(old.held[0].version, 42);
    assert_eq!(
        v0_key(old.held[0].key.as_ref().unwrap()),
        ResourceKey::Cluster(weir_model::ClusterKey("service/ns/svc:80".into()))
    );
    // And a version-0 Subscribe reads as version 0 here.
    let back = weir_xds::proto::Subscribe::decode(old.encode_to_vec().as_slice()).unwrap();
    assert_eq!(back.protocol_version, 0);
}
