//! A data plane one release older than its controller keeps working: a client speaking
//! the frozen message set of protocol version 0 (`tests/proto/v0`, the release before
//! versions) subscribes to this build's push server over real gRPC, receives every
//! Gateway of the golden inputs complete, rebuilds each resource to the content hash the
//! controller sent (nothing it relies on was lost to fields it does not know), acks, and
//! receives the next delta. And the other way round: what this build sends in
//! `Subscribe` reads as a version-0 `Subscribe`.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use prost::Message;
use weir_model::{Delta, DeltaBatch, Resource, ResourceKey};
use weir_xds::convert::{key_from_wire, resource_from_wire, resource_from_wire_as};
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

/// What an old data plane does with a resource: decode the bytes with its own message
/// set (unknown fields dropped), then rebuild it; the rebuild checks the content hash as
/// that release computes it.
fn rebuild_as_v0_reader(r: &v0::Resource) -> Resource {
    let bytes = r.encode_to_vec();
    let wire = weir_xds::proto::Resource::decode(bytes.as_slice()).unwrap();
    resource_from_wire_as(&wire, 0).unwrap_or_else(|e| panic!("a v0 data plane refuses it: {e}"))
}

fn v0_key(k: &v0::ResourceKey) -> ResourceKey {
    let wire = weir_xds::proto::ResourceKey::decode(k.encode_to_vec().as_slice()).unwrap();
    key_from_wire(&wire).unwrap()
}

type V0Stream = tonic::Streaming<v0::Update>;

/// Subscribes as a version-0 data plane: no `protocol_version` in its Subscribe.
async fn subscribe_v0(
    addr: SocketAddr,
    gateway: &str,
) -> (tokio::sync::mpsc::Sender<v0::DataPlaneMessage>, V0Stream) {
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
    let updates = client.stream(outbound).await.unwrap().into_inner();
    (tx, updates)
}

async fn ack(tx: &tokio::sync::mpsc::Sender<v0::DataPlaneMessage>, nonce: u64) {
    tx.send(v0::DataPlaneMessage {
        message: Some(v0::data_plane_message::Message::Ack(v0::Ack {
            nonce,
            rejected: vec![],
        })),
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_plane_of_the_previous_release_receives_every_gateway_complete() {
    let mut sessions = 0;
    let mut closed = 0;
    let mut resources = 0;
    let mut backend_policies = 0;
    for (input, ir) in common::golden_inputs() {
        let hub = Arc::new(Hub::default());
        hub.apply(&DeltaBatch {
            deltas: ir.iter().cloned().map(Delta::Upsert).collect(),
        });
        hub.set_synced();
        let (addr, _registry) = serve(hub.clone()).await;
        let gateways: BTreeSet<String> = ir
            .iter()
            .filter_map(|r| match r {
                Resource::Listener(l) if l.gateway.contains('/') => Some(l.gateway.to_string()),
                _ => None,
            })
            .collect();
        for gw in gateways {
            let (_tx, mut updates) = subscribe_v0(addr, &gw).await;
            let first = updates.message().await.unwrap().expect("a first update");
            assert!(first.complete, "{input} {gw}: the first update is complete");
            let rebuilt: Vec<Resource> = first.upserts.iter().map(rebuild_as_v0_reader).collect();
            // A JWT policy, which version 0 cannot enforce, arrives closed: every client
            // refused by address rules.
            for r in &rebuilt {
                if let Resource::Policy(p) = r
                    && let Some(Resource::Policy(now)) = ir.iter().find(|x| x.key() == r.key())
                    && now.jwt_auth.is_some()
                {
                    let (_, rules) = p.ip_rules.as_ref().expect("closed for version 0");
                    assert!(!rules.admits("192.0.2.1".parse().unwrap()));
                    closed += 1;
                }
            }
            let got: BTreeSet<ResourceKey> = rebuilt.iter().map(Resource::key).collect();
            // What a data plane of this release would hold.
            let mut current = hub.subscribe(&gw, "current", Default::default());
            let all: BTreeSet<ResourceKey> = current
                .next_update()
                .unwrap()
                .upserts
                .iter()
                .map(|r| resource_from_wire(r).unwrap().key())
                .collect();
            // Less the policies of Services and Backends (health checks, circuit
            // breaking), which version 0 cannot decode and serves without, and the
            // listeners it would serve wrongly (PROXY protocol) with what lies under them.
            let withheld: BTreeSet<ResourceKey> = ir
                .iter()
                .filter(|r| weir_xds::convert::withheld(r, 0))
                .map(Resource::key)
                .collect();
            let under_withheld = |k: &ResourceKey| {
                k.listener()
                    .is_some_and(|l| withheld.contains(&ResourceKey::Listener(l)))
            };
            let want: BTreeSet<ResourceKey> = if withheld.is_empty() {
                all.iter()
                    .filter(|k| weir_xds::convert::sent_to_version(k, 0))
                    .cloned()
                    .collect()
            } else {
                // What the hub means to send such a data plane (clusters and policies
                // only a withheld virtual host references are not sent either): none of
                // it under a withheld listener.
                let mut v0 = hub.subscribe_as(&gw, "v0", Default::default(), 0);
                let keys: BTreeSet<ResourceKey> = v0
                    .next_update()
                    .unwrap()
                    .upserts
                    .iter()
                    .map(|r| resource_from_wire_as(r, 0).unwrap().key())
                    .collect();
                assert!(!keys.iter().any(under_withheld), "{input} {gw}");
                keys
            };
            backend_policies += all.len() - want.len();
            assert_eq!(got, want, "{input} {gw}");
            assert!(!got.is_empty(), "{input} {gw}");
            sessions += 1;
            resources += got.len();
        }
    }
    println!(
        "v0 data plane: {sessions} Gateways, {resources} resources rebuilt, {closed} JWT policies closed"
    );
    assert!(
        backend_policies >= 1,
        "the backend-targets golden input holds policies a version-0 data plane is not sent"
    );
    assert!(
        closed >= 1,
        "the JWT golden input reaches a version-0 data plane closed"
    );
    assert!(
        sessions >= 10,
        "only {sessions} Gateways among the golden inputs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_plane_of_the_previous_release_acks_and_gets_deltas() {
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
    let (tx, mut updates) = subscribe_v0(addr, &gw).await;
    let first = updates.message().await.unwrap().unwrap();
    ack(&tx, first.nonce).await;
    // The controller saw a version-0 data plane.
    let mut page = String::new();
    prometheus_client::encoding::text::encode(&mut page, &registry).unwrap();
    assert!(
        page.lines()
            .any(|l| l.starts_with("weir_xds_data_plane_protocol_version{")
                && l.contains("v0-data-plane")
                && l.ends_with(" 0")),
        "{page}"
    );
    // A change after the ack: a virtual host of that Gateway goes away.
    let vhost = first
        .upserts
        .iter()
        .map(rebuild_as_v0_reader)
        .find(|r| matches!(r, Resource::VirtualHost(_)))
        .expect("a virtual host");
    hub.apply(&DeltaBatch {
        deltas: vec![Delta::Remove(vhost.key())],
    });
    let next = tokio::time::timeout(std::time::Duration::from_secs(10), updates.message())
        .await
        .expect("the delta arrives")
        .unwrap()
        .unwrap();
    let removed: Vec<ResourceKey> = next.removes.iter().map(v0_key).collect();
    assert!(removed.contains(&vhost.key()), "{removed:?}");
    ack(&tx, next.nonce).await;
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
