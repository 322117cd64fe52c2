//! The controller side of the protocol without a network: what each session is sent.

use std::sync::Arc;

use foldhash::HashMap;
use weir_model::*;
use weir_xds::convert::{key_from_wire, resource_from_wire};
use weir_xds::{Hub, Refused};

fn listener(port: u16, gw: &str) -> Resource {
    Resource::Listener(Arc::new(Listener::new(
        ListenerKey::new(([127, 0, 0, 1], port).into()),
        Protocol::Http,
        gw.into(),
        "http".into(),
    )))
}

fn vhost(port: u16, host: &str, cluster: &str) -> Resource {
    let rule = RouteRule::new(
        RouteRef {
            kind: RouteKind::HttpRoute,
            namespace: "ns".into(),
            name: host.into(),
            rule: 0,
        },
        RequestMatch {
            path: PathMatch::Prefix("/".into()),
            headers: vec![],
            query: vec![],
            method: None,
        },
        vec![],
        Action::Forward(vec![WeightedBackend {
            cluster: ClusterKey(cluster.into()),
            weight: 1,
            filters: vec![],
        }]),
        Timeouts::default(),
    );
    Resource::VirtualHost(Arc::new(VirtualHost::new(
        ListenerKey::new(([127, 0, 0, 1], port).into()),
        HostMatch::exact(host.into()),
        vec![Arc::new(rule)],
    )))
}

fn cluster(name: &str, port: u16) -> Resource {
    Resource::Cluster(Arc::new(Cluster::new(
        ClusterKey(name.into()),
        vec![Endpoint {
            addr: EndpointAddr::Socket(([10, 0, 0, 1], port).into()),
            weight: 1,
        }],
        UpstreamProtocol::Http1,
    )))
}

fn batch(upserts: Vec<Resource>, removes: Vec<ResourceKey>) -> DeltaBatch {
    let mut deltas: Vec<Delta> = upserts.into_iter().map(Delta::Upsert).collect();
    deltas.extend(removes.into_iter().map(Delta::Remove));
    DeltaBatch { deltas }
}

/// Keys of an update: (upserted, removed).
fn keys(u: &weir_xds::proto::Update) -> (Vec<ResourceKey>, Vec<ResourceKey>) {
    (
        u.upserts
            .iter()
            .map(|r| resource_from_wire(r).unwrap().key())
            .collect(),
        u.removes
            .iter()
            .map(|k| key_from_wire(k).unwrap())
            .collect(),
    )
}

fn two_gateways() -> Arc<Hub> {
    let hub = Arc::new(Hub::default());
    hub.apply(&batch(
        vec![
            listener(8001, "ns/a"),
            listener(8002, "ns/b"),
            cluster("shared", 80),
            cluster("only-b", 80),
            vhost(8001, "a.test", "shared"),
            vhost(8002, "b.test", "shared"),
            vhost(8002, "b2.test", "only-b"),
        ],
        vec![],
    ));
    hub.set_synced();
    hub
}

#[test]
fn a_session_gets_its_gateway_only_and_what_it_references() {
    let hub = two_gateways();
    let mut a = hub.subscribe("ns/a", "n", HashMap::default());
    let u = a.next_update().unwrap();
    assert!(u.complete);
    let (up, rm) = keys(&u);
    assert_eq!(up.len(), 3, "{up:?}");
    assert!(up.contains(&listener(8001, "ns/a").key()));
    assert!(up.contains(&ResourceKey::Cluster(ClusterKey("shared".into()))));
    assert!(!up.contains(&ResourceKey::Cluster(ClusterKey("only-b".into()))));
    assert!(rm.is_empty());
    // The listener comes before what sits on it, the cluster before the virtual host.
    assert!(matches!(up[0], ResourceKey::Listener(_)));
    assert!(matches!(up[2], ResourceKey::VirtualHost(..)));
    // Nothing more until the update is acknowledged.
    hub.apply(&batch(vec![cluster("shared", 81)], vec![]));
    assert!(a.next_update().is_none());
    a.ack(u.nonce, vec![]);
    let u = a.next_update().unwrap();
    assert_eq!(
        keys(&u).0,
        vec![ResourceKey::Cluster(ClusterKey("shared".into()))]
    );
    a.ack(u.nonce, vec![]);
    // Another Gateway's change does not reach this session.
    hub.apply(&batch(vec![vhost(8002, "b3.test", "only-b")], vec![]));
    assert!(a.next_update().is_none());
}

#[test]
fn changes_during_an_update_fold_into_the_next() {
    let hub = two_gateways();
    let mut a = hub.subscribe("ns/a", "n", HashMap::default());
    let first = a.next_update().unwrap();
    for port in 90..100 {
        hub.apply(&batch(vec![cluster("shared", port)], vec![]));
    }
    a.ack(first.nonce, vec![]);
    let u = a.next_update().unwrap();
    assert_eq!(u.upserts.len(), 1, "only the latest version");
    let c = resource_from_wire(&u.upserts[0]).unwrap();
    assert_eq!(c, cluster("shared", 99));
}

#[test]
fn a_reconnect_sends_only_the_differences() {
    let hub = two_gateways();
    let mut a = hub.subscribe("ns/a", "n", HashMap::default());
    let u = a.next_update().unwrap();
    let held: HashMap<ResourceKey, u64> = u
        .upserts
        .iter()
        .map(|r| (resource_from_wire(r).unwrap().key(), r.version))
        .collect();
    drop(a);
    assert_eq!(hub.sessions(), 0);
    // Nothing changed: the first update of the new session is empty but complete.
    let mut again = hub.subscribe("ns/a", "n", held.clone());
    let u = again.next_update().unwrap();
    assert!(u.complete && u.upserts.is_empty() && u.removes.is_empty());
    drop(again);
    // One virtual host changed and one was removed while disconnected.
    hub.apply(&batch(vec![vhost(8001, "a.test", "only-b")], vec![]));
    let mut again = hub.subscribe("ns/a", "n", held);
    let (up, rm) = keys(&again.next_update().unwrap());
    assert_eq!(up.len(), 2, "the new cluster and the changed host: {up:?}");
    assert_eq!(rm, vec![ResourceKey::Cluster(ClusterKey("shared".into()))]);
}

#[test]
fn a_refused_version_is_not_sent_again() {
    let hub = two_gateways();
    let mut a = hub.subscribe("ns/a", "n", HashMap::default());
    let u = a.next_update().unwrap();
    a.ack(u.nonce, vec![]);
    hub.apply(&batch(vec![cluster("shared", 7)], vec![]));
    let u = a.next_update().unwrap();
    let key = ResourceKey::Cluster(ClusterKey("shared".into()));
    a.ack(
        u.nonce,
        vec![Refused {
            key: key.clone(),
            error: "nope".into(),
        }],
    );
    // The same refused version comes back through another change: not resent.
    hub.apply(&batch(vec![cluster("shared", 7)], vec![]));
    assert!(a.next_update().is_none());
    // A new version is.
    hub.apply(&batch(vec![cluster("shared", 8)], vec![]));
    let u = a.next_update().unwrap();
    assert_eq!(keys(&u).0, vec![key]);
    // Accepted this time: the refusal is gone.
    a.ack(u.nonce, vec![]);
    assert!(hub.refusals("ns/a").is_empty());
}

#[test]
fn a_listener_removed_takes_its_hosts_and_unreferenced_clusters() {
    let hub = two_gateways();
    let mut b = hub.subscribe("ns/b", "n", HashMap::default());
    let u = b.next_update().unwrap();
    assert_eq!(u.upserts.len(), 5);
    b.ack(u.nonce, vec![]);
    hub.apply(&batch(
        vec![],
        vec![
            vhost(8002, "b2.test", "only-b").key(),
            cluster("only-b", 80).key(),
        ],
    ));
    let (up, rm) = keys(&b.next_update().unwrap());
    assert!(up.is_empty());
    assert_eq!(
        rm,
        vec![
            vhost(8002, "b2.test", "only-b").key(),
            cluster("only-b", 80).key()
        ]
    );
}

/// An L4 route is sent to the session of its listener's Gateway, with the clusters it
/// names, after them; its removal is sent there only.
#[test]
fn l4_routes_follow_their_listener_and_bring_their_clusters() {
    let hub = two_gateways();
    let mut a = hub.subscribe("ns/a", "n", HashMap::default());
    let mut b = hub.subscribe("ns/b", "n", HashMap::default());
    let u = a.next_update().unwrap();
    a.ack(u.nonce, vec![]);
    let u = b.next_update().unwrap();
    b.ack(u.nonce, vec![]);
    let l4 = Resource::L4Route(Arc::new(L4Route::new(
        ListenerKey::new(([127, 0, 0, 1], 8001).into()),
        HostMatch::exact("pass.test".into()),
        RouteRef {
            kind: RouteKind::TlsRoute,
            namespace: "ns".into(),
            name: "pass".into(),
            rule: 0,
        },
        vec![L4Backend {
            cluster: ClusterKey("only-b".into()),
            weight: 1,
        }],
    )));
    hub.apply(&batch(vec![l4.clone()], vec![]));
    let u = a.next_update().unwrap();
    assert_eq!(
        keys(&u).0,
        vec![ResourceKey::Cluster(ClusterKey("only-b".into())), l4.key()]
    );
    a.ack(u.nonce, vec![]);
    assert!(b.next_update().is_none());
    hub.apply(&batch(vec![], vec![l4.key()]));
    let u = a.next_update().unwrap();
    assert_eq!(
        keys(&u).1,
        vec![l4.key(), ResourceKey::Cluster(ClusterKey("only-b".into()))]
    );
    assert!(b.next_update().is_none());
}

fn policy(target: PolicyTarget, secs: u64) -> Resource {
    Resource::Policy(Arc::new(Policy::new(
        target,
        Timeouts {
            request: Some(std::time::Duration::from_secs(secs)),
            backend_request: None,
            backend_send: None,
        },
        None,
        None,
    )))
}

/// A Gateway-wide policy goes to its Gateway's sessions (at subscribe and when it
/// changes); a route's policy goes where a virtual host with that route's rules is.
#[test]
fn policies_go_to_their_gateway_and_to_the_holders_of_their_routes() {
    let hub = two_gateways();
    let route = |host: &str| PolicyTarget::Route {
        kind: RouteKind::HttpRoute,
        namespace: "ns".into(),
        name: host.into(),
    };
    hub.apply(&batch(
        vec![
            policy(PolicyTarget::Gateway("ns/a".into()), 1),
            policy(PolicyTarget::Gateway("ns/b".into()), 1),
            policy(route("b.test"), 1),
        ],
        vec![],
    ));
    let mut a = hub.subscribe("ns/a", "n", HashMap::default());
    let u = a.next_update().unwrap();
    let (up, _) = keys(&u);
    assert!(up.contains(&ResourceKey::policy(PolicyTarget::Gateway("ns/a".into()))));
    assert!(!up.contains(&ResourceKey::policy(PolicyTarget::Gateway("ns/b".into()))));
    assert!(!up.contains(&ResourceKey::policy(route("b.test"))));
    a.ack(u.nonce, vec![]);
    let mut b = hub.subscribe("ns/b", "n", HashMap::default());
    let u = b.next_update().unwrap();
    let (up, _) = keys(&u);
    assert!(up.contains(&ResourceKey::policy(PolicyTarget::Gateway("ns/b".into()))));
    assert!(up.contains(&ResourceKey::policy(route("b.test"))));
    b.ack(u.nonce, vec![]);
    // Editing ns/a's policy reaches ns/a only; a policy for a.test's route reaches a
    // once it exists, without any virtual host changing.
    hub.apply(&batch(
        vec![
            policy(PolicyTarget::Gateway("ns/a".into()), 2),
            policy(route("a.test"), 2),
        ],
        vec![],
    ));
    assert!(b.next_update().is_none());
    let u = a.next_update().unwrap();
    let (mut up, _) = keys(&u);
    up.sort();
    assert_eq!(
        up,
        vec![
            ResourceKey::policy(PolicyTarget::Gateway("ns/a".into())),
            ResourceKey::policy(route("a.test")),
        ]
    );
    a.ack(u.nonce, vec![]);
    hub.apply(&batch(
        vec![],
        vec![ResourceKey::policy(PolicyTarget::Gateway("ns/a".into()))],
    ));
    let u = a.next_update().unwrap();
    assert_eq!(
        keys(&u).1,
        vec![ResourceKey::policy(PolicyTarget::Gateway("ns/a".into()))]
    );
}

/// A listener that reads PROXY protocol headers (push protocol version 3) is not sent to
/// a data plane of version 2 — that release would take the header for the client's first
/// bytes and fail every connection — nor is what lies under it; its clusters are not
/// referenced either. A data plane of version 3 gets all of it.
#[test]
fn a_proxy_protocol_listener_is_withheld_from_version_2() {
    let hub = Arc::new(Hub::default());
    let behind_balancer = Resource::Listener(Arc::new(Listener::with_settings(
        ListenerKey::new(([127, 0, 0, 1], 8003).into()),
        Protocol::Http,
        "ns/a".into(),
        "lb".into(),
        ListenerSettings {
            proxy_protocol: Some(ProxyProtocol::default()),
            ..ListenerSettings::default()
        },
    )));
    hub.apply(&batch(
        vec![
            listener(8001, "ns/a"),
            behind_balancer.clone(),
            cluster("shared", 80),
            cluster("only-lb", 80),
            vhost(8001, "a.test", "shared"),
            vhost(8003, "lb.test", "only-lb"),
        ],
        vec![],
    ));
    hub.set_synced();
    let mut old = hub.subscribe_as("ns/a", "old", HashMap::default(), 2);
    let first = old.next_update().unwrap();
    let (up, _) = keys(&first);
    assert_eq!(up.len(), 3, "{up:?}");
    assert!(up.contains(&listener(8001, "ns/a").key()));
    assert!(!up.contains(&behind_balancer.key()));
    assert!(
        !up.iter()
            .any(|k| k.listener() == Some(ListenerKey::new(([127, 0, 0, 1], 8003).into())))
    );
    assert!(!up.contains(&ResourceKey::Cluster(ClusterKey("only-lb".into()))));
    let mut new = hub.subscribe_as("ns/a", "new", HashMap::default(), 3);
    let (up, _) = keys(&new.next_update().unwrap());
    assert_eq!(up.len(), 6, "{up:?}");
    assert!(up.contains(&behind_balancer.key()));

    // The setting turned off: the older data plane now gets the listener and what is
    // under it; turned on again, they are removed from it.
    let plain = listener(8003, "ns/a");
    old.ack(first.nonce, vec![]);
    let ack = |s: &mut weir_xds::Session| {
        let u = s.next_update().unwrap();
        s.ack(u.nonce, vec![]);
        keys(&u)
    };
    hub.apply(&batch(vec![plain.clone()], vec![]));
    let (up, rm) = ack(&mut old);
    assert!(rm.is_empty(), "{rm:?}");
    assert!(up.contains(&plain.key()), "{up:?}");
    assert!(
        up.contains(&ResourceKey::Cluster(ClusterKey("only-lb".into()))),
        "{up:?}"
    );
    assert_eq!(up.len(), 3, "{up:?}");
    hub.apply(&batch(vec![behind_balancer.clone()], vec![]));
    let (up, rm) = ack(&mut old);
    assert!(up.is_empty(), "{up:?}");
    assert_eq!(rm.len(), 3, "{rm:?}");
}

/// A listener that validates client certificates (push protocol version 4) is not sent
/// to a data plane of version 3, which would serve it without asking for one; turning
/// the validation off sends it, turning it on again removes it.
#[test]
fn a_client_validating_listener_is_withheld_from_version_3() {
    let hub = Arc::new(Hub::default());
    let validating = Resource::Listener(Arc::new(Listener::with_settings(
        ListenerKey::new(([127, 0, 0, 1], 8003).into()),
        Protocol::Https,
        "ns/a".into(),
        "mtls".into(),
        ListenerSettings {
            client_validation: Some(weir_model::ClientValidation {
                ca_pem: Arc::from(&b"-----BEGIN CERTIFICATE-----"[..]),
                mode: weir_model::ClientValidationMode::AllowValidOnly,
            }),
            ..ListenerSettings::default()
        },
    )));
    hub.apply(&batch(
        vec![
            listener(8001, "ns/a"),
            validating.clone(),
            cluster("shared", 80),
            cluster("only-mtls", 80),
            vhost(8001, "a.test", "shared"),
            vhost(8003, "mtls.test", "only-mtls"),
        ],
        vec![],
    ));
    hub.set_synced();
    let mut old = hub.subscribe_as("ns/a", "old", HashMap::default(), 3);
    let first = old.next_update().unwrap();
    let (up, _) = keys(&first);
    assert_eq!(up.len(), 3, "{up:?}");
    assert!(!up.contains(&validating.key()));
    assert!(!up.contains(&ResourceKey::Cluster(ClusterKey("only-mtls".into()))));
    let mut new = hub.subscribe_as("ns/a", "new", HashMap::default(), 4);
    let (up, _) = keys(&new.next_update().unwrap());
    assert_eq!(up.len(), 6, "{up:?}");

    old.ack(first.nonce, vec![]);
    let ack = |s: &mut weir_xds::Session| {
        let u = s.next_update().unwrap();
        s.ack(u.nonce, vec![]);
        keys(&u)
    };
    hub.apply(&batch(vec![listener(8003, "ns/a")], vec![]));
    let (up, rm) = ack(&mut old);
    assert!(rm.is_empty(), "{rm:?}");
    assert_eq!(up.len(), 3, "{up:?}");
    hub.apply(&batch(vec![validating.clone()], vec![]));
    let (up, rm) = ack(&mut old);
    assert!(up.is_empty(), "{up:?}");
    assert_eq!(rm.len(), 3, "{rm:?}");
}

/// A listener carrying sections (a policy targets one of its Gateway's listeners, push
/// protocol version 6) and the listener policies are not sent to a data plane of
/// version 5, which could not read the policies and would serve the listener without
/// them; a data plane of version 6 gets both (the policies by Gateway ownership). Once
/// the sections go (the last listener policy removed), the older data plane gets the
/// listener and what is under it again.
#[test]
fn a_sectioned_listener_and_listener_policies_are_withheld_from_version_5() {
    let hub = Arc::new(Hub::default());
    let Resource::Listener(plain) = listener(8003, "ns/a") else {
        unreachable!()
    };
    let sectioned = Resource::Listener(Arc::new((*plain).clone().with_sections(Arc::from([
        ListenerSection {
            hostname: HostMatch::ANY,
            set: None,
            name: "http".into(),
        },
    ]))));
    let on_listener = policy(
        PolicyTarget::Listener {
            gateway: "ns/a".into(),
            set: None,
            section: "http".into(),
        },
        3,
    );
    let on_set = policy(
        PolicyTarget::ListenerSet {
            gateway: "ns/a".into(),
            set: "ns/set".into(),
        },
        4,
    );
    hub.apply(&batch(
        vec![
            listener(8001, "ns/a"),
            sectioned.clone(),
            cluster("shared", 80),
            cluster("only-sectioned", 80),
            vhost(8001, "a.test", "shared"),
            vhost(8003, "s.test", "only-sectioned"),
            on_listener.clone(),
            on_set.clone(),
        ],
        vec![],
    ));
    hub.set_synced();
    let mut old = hub.subscribe_as("ns/a", "old", HashMap::default(), 5);
    let first = old.next_update().unwrap();
    let (up, _) = keys(&first);
    assert_eq!(up.len(), 3, "{up:?}");
    assert!(!up.contains(&sectioned.key()));
    assert!(!up.contains(&on_listener.key()) && !up.contains(&on_set.key()));
    assert!(!up.contains(&ResourceKey::Cluster(ClusterKey("only-sectioned".into()))));
    let mut new = hub.subscribe_as("ns/a", "new", HashMap::default(), 6);
    let update = new.next_update().unwrap();
    let (up, _) = keys(&update);
    assert_eq!(up.len(), 8, "{up:?}");
    assert!(up.contains(&on_listener.key()) && up.contains(&on_set.key()));
    // The sections cross the wire.
    let wire = update
        .upserts
        .iter()
        .find_map(|r| {
            let r = resource_from_wire(r).ok()?;
            matches!(&r, Resource::Listener(l) if !l.sections.is_empty()).then_some(r)
        })
        .expect("the sectioned listener");
    assert_eq!(wire, sectioned);

    old.ack(first.nonce, vec![]);
    let ack = |s: &mut weir_xds::Session| {
        let u = s.next_update().unwrap();
        s.ack(u.nonce, vec![]);
        keys(&u)
    };
    hub.apply(&batch(
        vec![listener(8003, "ns/a")],
        vec![on_listener.key(), on_set.key()],
    ));
    let (up, rm) = ack(&mut old);
    assert!(rm.is_empty(), "{rm:?}");
    assert_eq!(up.len(), 3, "{up:?}");
}
