//! Scale: one change among 20,000 routes costs one route's worth of output.

mod common;

use std::sync::Arc;

use common::options;
use weir_api::{Kind, Object, ObjectKey, ObjectStatus};
use weir_model::{Delta, ResourceKey};
use weir_translate::{ObjectChange, Translator};

const ROUTES: usize = 20_000;

fn route(i: usize, path: &str, generation: i64) -> Arc<Object> {
    let v = serde_json::json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": format!("r{i}"), "namespace": "default", "generation": generation},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "hostnames": [format!("host{i}.example.com")],
            "rules": [{"matches": [{"path": {"value": path}}], "backendRefs": [{"name": "svc", "port": 80}]}]
        }
    });
    Arc::new(Object::from_value(v).unwrap())
}

fn object(v: serde_json::Value) -> Arc<Object> {
    Arc::new(Object::from_value(v).unwrap())
}

/// Gateway `gw` with an HTTP listener, Service `svc` and [`ROUTES`] routes to it.
fn gateway_service_and_routes() -> Vec<ObjectChange> {
    let mut changes = vec![
        ObjectChange::upsert(object(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "default"},
            "spec": {"gatewayClassName": "weir", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}
        }))),
        ObjectChange::upsert(object(serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "svc", "namespace": "default"},
            "spec": {"ports": [{"port": 80}]}
        }))),
    ];
    changes.extend((0..ROUTES).map(|i| ObjectChange::upsert(route(i, "/", 1))));
    changes
}

#[test]
fn one_route_change_among_many() {
    let mut t = Translator::new(options(true));
    let out = t.apply(gateway_service_and_routes());
    // Listener + cluster + one virtual host per route.
    assert_eq!(out.batch.deltas.len(), ROUTES + 2);
    assert_eq!(t.resources().len(), ROUTES + 2);

    // Change one route: exactly its virtual host changes, and only its status.
    let changed = 12_345;
    let out = t.apply([ObjectChange::upsert(route(changed, "/v2", 2))]);
    assert!(out.batch.deltas.len() <= 3, "{:?}", out.batch.deltas);
    assert_eq!(out.batch.deltas.len(), 1);
    match &out.batch.deltas[0] {
        Delta::Upsert(r) => match r.key() {
            ResourceKey::VirtualHost(_, h) => {
                assert_eq!(h.to_string(), format!("host{changed}.example.com"))
            }
            other => panic!("unexpected {other:?}"),
        },
        other => panic!("unexpected {other:?}"),
    }
    let key = ObjectKey::new(Kind::HttpRoute, "default", &format!("r{changed}"));
    assert_eq!(out.statuses.len(), 1);
    assert_eq!(out.statuses[0].0, key);
    assert!(matches!(*out.statuses[0].1, ObjectStatus::Route(_)));

    // Deleting one route removes only its virtual host; the Gateway's attachedRoutes changes.
    let out = t.apply([ObjectChange::Delete(key.clone())]);
    assert_eq!(out.batch.deltas.len(), 1);
    assert!(matches!(
        &out.batch.deltas[0],
        Delta::Remove(ResourceKey::VirtualHost(..))
    ));
    let keys: Vec<_> = out.statuses.iter().map(|(k, _)| k.kind).collect();
    assert_eq!(keys, vec![Kind::Gateway]);

    // An endpoint change touches only the cluster.
    let out = t.apply([ObjectChange::upsert(object(serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "svc-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "svc"}},
        "addressType": "IPv4", "ports": [{"port": 8080}], "endpoints": [{"addresses": ["10.0.0.1"]}]
    })))]);
    assert_eq!(out.batch.deltas.len(), 1);
    assert!(
        matches!(&out.batch.deltas[0], Delta::Upsert(r) if matches!(r.key(), ResourceKey::Cluster(_)))
    );
    assert!(out.statuses.is_empty());
}

#[test]
fn service_change_without_port_change_touches_only_clusters() {
    let mut t = Translator::new(options(true));
    let svc = |app: Option<&str>| {
        object(serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "svc", "namespace": "default"},
            "spec": {"ports": [{"port": 80, "appProtocol": app}]}
        }))
    };
    let mut changes = vec![
        ObjectChange::upsert(object(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "default"},
            "spec": {"gatewayClassName": "weir", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}
        }))),
        ObjectChange::upsert(svc(None)),
    ];
    changes.extend((0..100).map(|i| ObjectChange::upsert(route(i, "/", 1))));
    t.apply(changes);
    let out = t.apply([ObjectChange::upsert(svc(Some("kubernetes.io/h2c")))]);
    assert_eq!(out.batch.deltas.len(), 1, "{:?}", out.batch.deltas);
    assert!(
        matches!(&out.batch.deltas[0], Delta::Upsert(r) if matches!(r.key(), ResourceKey::Cluster(_)))
    );
    assert!(out.statuses.is_empty());
}

fn tls_route(i: usize, backend: &str) -> Arc<Object> {
    object(serde_json::json!({
        "apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": "TLSRoute",
        "metadata": {"name": format!("t{i}"), "namespace": "default"},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "hostnames": [format!("pass{i}.example.com")],
            "rules": [{"backendRefs": [{"name": backend, "port": 443}]}]
        }
    }))
}

/// Passthrough hostnames have the O(change) guarantee of virtual hosts: among 20,000,
/// adding, changing or removing one is one `L4Route` delta (plus a new cluster when it
/// names one) and one route status.
#[test]
fn one_passthrough_hostname_among_many() {
    let mut t = Translator::new(options(true));
    let mut changes = vec![ObjectChange::upsert(object(serde_json::json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "default"},
        "spec": {"gatewayClassName": "weir", "listeners": [
            {"name": "pass", "port": 443, "protocol": "TLS", "tls": {"mode": "Passthrough"}}
        ]}
    })))];
    for svc in ["svc", "other"] {
        changes.push(ObjectChange::upsert(object(serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": svc, "namespace": "default"},
            "spec": {"ports": [{"port": 443}]}
        }))));
    }
    changes.extend((0..ROUTES).map(|i| ObjectChange::upsert(tls_route(i, "svc"))));
    let out = t.apply(changes);
    // Listener + cluster + one L4 route per hostname.
    assert_eq!(out.batch.deltas.len(), ROUTES + 2);

    let out = t.apply([ObjectChange::upsert(tls_route(ROUTES, "svc"))]);
    assert_eq!(out.batch.deltas.len(), 1, "{:?}", out.batch.deltas);
    assert!(matches!(
        &out.batch.deltas[0],
        Delta::Upsert(r) if r.key() == ResourceKey::L4Route(
            weir_model::ListenerKey::new(([0, 0, 0, 0], 443).into()),
            weir_model::HostMatch::exact(format!("pass{ROUTES}.example.com").into()),
        )
    ));
    // The route's status and the Gateway's attachedRoutes.
    assert_eq!(out.statuses.len(), 2);

    // A changed backend: the new cluster and the one L4 route.
    let out = t.apply([ObjectChange::upsert(tls_route(7, "other"))]);
    let kinds: Vec<_> = out.batch.deltas.iter().map(|d| d.key()).collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert!(matches!(kinds[0], ResourceKey::Cluster(_)));
    assert!(matches!(kinds[1], ResourceKey::L4Route(..)));

    let key = ObjectKey::new(Kind::TlsRoute, "default", "t42");
    let out = t.apply([ObjectChange::Delete(key)]);
    assert_eq!(out.batch.deltas.len(), 1);
    assert!(matches!(
        &out.batch.deltas[0],
        Delta::Remove(ResourceKey::L4Route(..))
    ));
}

fn policy(name: &str, target: serde_json::Value, spec: serde_json::Value) -> Arc<Object> {
    let mut v = serde_json::json!({
        "apiVersion": "weir.dev/v1alpha1", "kind": "TrafficPolicy",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    });
    v["spec"]["targetRefs"] = serde_json::json!([target]);
    object(v)
}

/// A Gateway-wide policy covers every route without being copied into any: attaching,
/// editing and removing it are one delta each, however many routes it covers.
#[test]
fn one_gateway_policy_over_many_routes() {
    let mut t = Translator::new(options(true));
    let mut changes = vec![ObjectChange::upsert(object(serde_json::json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "default"},
        "spec": {"gatewayClassName": "weir", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}
    })))];
    changes.extend((0..ROUTES).map(|i| ObjectChange::upsert(route(i, "/", 1))));
    t.apply(changes);
    let gw =
        serde_json::json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"});
    let only_policy = |out: &weir_translate::TranslateOutput| {
        assert_eq!(out.batch.deltas.len(), 1, "{:?}", out.batch.deltas);
        assert!(matches!(out.batch.deltas[0].key(), ResourceKey::Policy(_)));
        let kinds: Vec<Kind> = out.statuses.iter().map(|(k, _)| k.kind).collect();
        assert!(kinds.iter().all(|k| *k == Kind::TrafficPolicy), "{kinds:?}");
    };
    let limit =
        |n: u32| serde_json::json!({"rateLimit": {"local": {"requests": n, "unit": "Second"}}});
    let out = t.apply([ObjectChange::upsert(policy("all", gw.clone(), limit(100)))]);
    only_policy(&out);
    assert!(matches!(&out.batch.deltas[0], Delta::Upsert(_)));
    let out = t.apply([ObjectChange::upsert(policy("all", gw.clone(), limit(50)))]);
    only_policy(&out);
    // One route's own policy: one delta too.
    let r = serde_json::json!({"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "r7"});
    let out = t.apply([ObjectChange::upsert(policy(
        "r7",
        r,
        serde_json::json!({"timeouts": {"request": "1s"}}),
    ))]);
    only_policy(&out);
    let out = t.apply([ObjectChange::Delete(ObjectKey::new(
        Kind::TrafficPolicy,
        "default",
        "all",
    ))]);
    only_policy(&out);
    assert!(matches!(&out.batch.deltas[0], Delta::Remove(_)));
}

/// A policy on one Gateway listener (`sectionName`) over every route: attaching it is
/// the policy plus the listener resource (its sections appear, once per socket),
/// editing it is one delta, and removing it is the policy plus the listener again;
/// no route or virtual host is re-sent.
#[test]
fn one_listener_policy_over_many_routes() {
    let mut t = Translator::new(options(true));
    t.apply(gateway_service_and_routes());
    let http = serde_json::json!({"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                  "name": "gw", "sectionName": "http"});
    let limit =
        |n: u32| serde_json::json!({"rateLimit": {"local": {"requests": n, "unit": "Second"}}});
    let kinds = |out: &weir_translate::TranslateOutput| {
        let mut k: Vec<&str> = out
            .batch
            .deltas
            .iter()
            .map(|d| match d.key() {
                ResourceKey::Policy(_) => "policy",
                ResourceKey::Listener(_) => "listener",
                _ => "other",
            })
            .collect();
        k.sort();
        k
    };
    let out = t.apply([ObjectChange::upsert(policy("l", http.clone(), limit(100)))]);
    assert_eq!(
        kinds(&out),
        ["listener", "policy"],
        "{:?}",
        out.batch.deltas
    );
    let out = t.apply([ObjectChange::upsert(policy("l", http.clone(), limit(50)))]);
    assert_eq!(kinds(&out), ["policy"], "{:?}", out.batch.deltas);
    let out = t.apply([ObjectChange::Delete(ObjectKey::new(
        Kind::TrafficPolicy,
        "default",
        "l",
    ))]);
    assert_eq!(
        kinds(&out),
        ["listener", "policy"],
        "{:?}",
        out.batch.deltas
    );
}

/// A policy on a Service used by every route is one delta too: the data plane derives
/// the Service target from the cluster's key, so no route, virtual host or cluster is
/// re-sent when the health check or circuit breaker is attached, edited or removed.
#[test]
fn one_service_policy_over_many_routes() {
    let mut t = Translator::new(options(true));
    t.apply(gateway_service_and_routes());
    let svc = serde_json::json!({"group": "", "kind": "Service", "name": "svc"});
    let only_policy = |out: &weir_translate::TranslateOutput| {
        assert_eq!(out.batch.deltas.len(), 1, "{:?}", out.batch.deltas);
        assert!(matches!(
            out.batch.deltas[0].key(),
            ResourceKey::Policy(t) if matches!(*t, weir_model::PolicyTarget::Backend { .. })
        ));
        let kinds: Vec<Kind> = out.statuses.iter().map(|(k, _)| k.kind).collect();
        assert!(kinds.iter().all(|k| *k == Kind::TrafficPolicy), "{kinds:?}");
    };
    let check = |interval: &str| {
        serde_json::json!({
            "healthCheck": {"type": "HTTP", "interval": interval, "http": {"path": "/healthz"}},
            "circuitBreaker": {"maxRequests": 1000},
        })
    };
    let out = t.apply([ObjectChange::upsert(policy(
        "svc",
        svc.clone(),
        check("5s"),
    ))]);
    only_policy(&out);
    assert!(matches!(&out.batch.deltas[0], Delta::Upsert(_)));
    let out = t.apply([ObjectChange::upsert(policy(
        "svc",
        svc.clone(),
        check("2s"),
    ))]);
    only_policy(&out);
    let out = t.apply([ObjectChange::Delete(ObjectKey::new(
        Kind::TrafficPolicy,
        "default",
        "svc",
    ))]);
    only_policy(&out);
    assert!(matches!(&out.batch.deltas[0], Delta::Remove(_)));
}

/// A BackendTLSPolicy on a Service used by every route is one delta as well: upstream
/// TLS is a field of the Service's `Policy`, found from the cluster's key, so attaching
/// it, editing its hostname, rotating its CA ConfigMap and deleting it each re-send that
/// one resource and no route, virtual host or cluster.
#[test]
fn one_backend_tls_policy_over_many_routes() {
    let mut t = Translator::new(options(true));
    t.apply(gateway_service_and_routes());
    let ca = |pem: &str| {
        object(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "svc-ca", "namespace": "default"},
            "data": {"ca.crt": pem}
        }))
    };
    let btls = |host: &str| {
        object(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy",
            "metadata": {"name": "svc-tls", "namespace": "default"},
            "spec": {
                "targetRefs": [{"group": "", "kind": "Service", "name": "svc"}],
                "validation": {
                    "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "svc-ca"}],
                    "hostname": host
                }
            }
        }))
    };
    let only_service_policy = |out: &weir_translate::TranslateOutput| {
        assert_eq!(out.batch.deltas.len(), 1, "{:?}", out.batch.deltas);
        assert!(matches!(
            out.batch.deltas[0].key(),
            ResourceKey::Policy(t) if matches!(*t, weir_model::PolicyTarget::Backend { .. })
        ));
    };
    let out = t.apply([
        ObjectChange::upsert(ca(include_str!("../benches/ca-a.pem"))),
        ObjectChange::upsert(btls("svc.internal")),
    ]);
    only_service_policy(&out);
    assert!(matches!(&out.batch.deltas[0], Delta::Upsert(_)));
    only_service_policy(&t.apply([ObjectChange::upsert(btls("svc2.internal"))]));
    only_service_policy(&t.apply([ObjectChange::upsert(ca(include_str!(
        "../benches/ca-b.pem"
    )))]));
    let out = t.apply([ObjectChange::Delete(ObjectKey::new(
        Kind::BackendTlsPolicy,
        "default",
        "svc-tls",
    ))]);
    only_service_policy(&out);
}
