//! The change path alone, without files or sockets: translate one changed object and
//! publish a new data-plane snapshot, with N TLS domains already loaded (one Ingress + its
//! own certificate Secret per domain, the layout of the propagation benchmark).
//!
//! `cargo bench -p weir --bench change_path` — the figures are in BENCHMARKS.md.
//! Set `WEIR_BENCH_SIZES=1000,20000` to choose N.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use weir_api::Object;
use weir_proxy::Snapshot;
use weir_translate::{ObjectChange, Translator, TranslatorOptions};

/// One certificate reused for every domain would be deduplicated by content; the real
/// workload has a distinct key per domain, so make them (cheap ECDSA P-256).
fn cert(i: usize) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec![format!("d{i}.bench.test")]).expect("params");
    let cert = params.self_signed(&key).expect("cert");
    (cert.pem(), key.serialize_pem())
}

fn ingress(i: usize, path: &str) -> Arc<Object> {
    Arc::new(
        Object::from_value(serde_json::json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": format!("d{i}"), "namespace": "bench"},
            "spec": {
                "tls": [{"hosts": [format!("d{i}.bench.test")], "secretName": format!("d{i}-tls")}],
                "rules": [{"host": format!("d{i}.bench.test"), "http": {"paths": [{
                    "path": path, "pathType": "Prefix",
                    "backend": {"resource": {"apiGroup": "weir.dev", "kind": "Backend", "name": "echo"}}
                }]}}]
            }
        }))
        .expect("valid Ingress"),
    )
}

fn secret(i: usize, (crt, key): &(String, String)) -> Arc<Object> {
    Arc::new(
        Object::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": format!("d{i}-tls"), "namespace": "bench"},
            "stringData": {"tls.crt": crt, "tls.key": key}
        }))
        .expect("valid Secret"),
    )
}

fn listener_set(i: usize) -> Arc<Object> {
    Arc::new(
        Object::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.x-k8s.io/v1alpha1", "kind": "XListenerSet",
            "metadata": {"name": format!("d{i}"), "namespace": "bench"},
            "spec": {"parentRef": {"name": "sets"}, "listeners": [{
                "name": "https", "port": 8443, "protocol": "HTTPS",
                "hostname": format!("d{i}.bench.test"),
                "tls": {"certificateRefs": [{"name": format!("d{i}-tls")}]}
            }]}
        }))
        .expect("valid XListenerSet"),
    )
}

fn set_route(i: usize) -> Arc<Object> {
    Arc::new(
        Object::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": format!("d{i}"), "namespace": "bench"},
            "spec": {
                "parentRefs": [{"group": "gateway.networking.x-k8s.io", "kind": "XListenerSet",
                                "name": format!("d{i}"), "sectionName": "https"}],
                "rules": [{"backendRefs": [{"group": "weir.dev", "kind": "Backend", "name": "echo"}]}]
            }
        }))
        .expect("valid HTTPRoute"),
    )
}

/// The `listenerset` layout: one Gateway and, per domain, a Secret, an XListenerSet with
/// its HTTPS listener and an HTTPRoute on it.
fn world_sets(n: usize, certs: &[(String, String)]) -> World {
    let mut translator = Translator::new(TranslatorOptions {
        standalone: true,
        ..TranslatorOptions::default()
    });
    let mut changes = vec![
        ObjectChange::upsert(Arc::new(
            Object::from_value(serde_json::json!({
                "apiVersion": "weir.dev/v1alpha1", "kind": "Backend",
                "metadata": {"name": "echo", "namespace": "bench"},
                "spec": {"endpoints": ["127.0.0.1:3000"]}
            }))
            .expect("valid Backend"),
        )),
        ObjectChange::upsert(Arc::new(
            Object::from_value(serde_json::json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "sets", "namespace": "bench"},
                "spec": {"addresses": [{"value": "127.0.0.1"}],
                         "allowedListeners": {"namespaces": {"from": "Same"}},
                         "listeners": [{"name": "http", "port": 8080, "protocol": "HTTP"}]}
            }))
            .expect("valid Gateway"),
        )),
    ];
    for (i, c) in certs.iter().enumerate().take(n) {
        changes.push(ObjectChange::upsert(secret(i, c)));
        changes.push(ObjectChange::upsert(listener_set(i)));
        changes.push(ObjectChange::upsert(set_route(i)));
    }
    let out = translator.apply(changes);
    let (snapshot, rejected) = Snapshot::empty().apply(&out.batch);
    assert!(rejected.is_empty(), "{rejected:?}");
    World {
        translator,
        snapshot,
    }
}

struct World {
    translator: Translator,
    snapshot: Snapshot,
}

fn world(n: usize, certs: &[(String, String)]) -> World {
    let mut translator = Translator::new(TranslatorOptions {
        standalone: true,
        ingress_http: Some("127.0.0.1:8080".parse().expect("addr")),
        ingress_https: Some("127.0.0.1:8443".parse().expect("addr")),
        ..TranslatorOptions::default()
    });
    let mut changes = vec![ObjectChange::upsert(Arc::new(
        Object::from_value(serde_json::json!({
            "apiVersion": "weir.dev/v1alpha1", "kind": "Backend",
            "metadata": {"name": "echo", "namespace": "bench"},
            "spec": {"endpoints": ["127.0.0.1:3000"]}
        }))
        .expect("valid Backend"),
    ))];
    for (i, c) in certs.iter().enumerate().take(n) {
        changes.push(ObjectChange::upsert(secret(i, c)));
        changes.push(ObjectChange::upsert(ingress(i, "/")));
    }
    let out = translator.apply(changes);
    let (snapshot, rejected) = Snapshot::empty().apply(&out.batch);
    assert!(rejected.is_empty(), "{rejected:?}");
    World {
        translator,
        snapshot,
    }
}

fn bench(c: &mut Criterion) {
    let sizes: Vec<usize> = std::env::var("WEIR_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 20_000, 100_000]);
    let max = sizes.iter().copied().max().unwrap_or(0);
    // Two spare certificates for the domain that is added and removed.
    let certs: Vec<(String, String)> = (0..max + 1).map(cert).collect();
    let mut group = c.benchmark_group("change_path");
    for &n in &sizes {
        let mut w = world(n, &certs);
        // Modify: one existing domain's route path flips between two values.
        // Both versions are built outside the timed loop: reading objects is the
        // provider's work, measured by the propagation benchmark, not this one.
        let versions = [ingress(n / 2, "/v2"), ingress(n / 2, "/")];
        let mut flip = 0;
        group.bench_with_input(BenchmarkId::new("modify_route", n), &n, |b, _| {
            b.iter(|| {
                flip ^= 1;
                let out = w
                    .translator
                    .apply([ObjectChange::upsert(versions[flip].clone())]);
                let (next, _) = w.snapshot.apply(&out.batch);
                w.snapshot = black_box(next);
            })
        });
        // Add then remove one new TLS domain (its own Secret + Ingress): one add and
        // one removal per iteration.
        let extra = (n, secret(n, &certs[max]), ingress(n, "/"));
        group.bench_with_input(BenchmarkId::new("add_and_remove_domain", n), &n, |b, _| {
            b.iter(|| {
                let (i, s, ing) = &extra;
                let out = w.translator.apply([
                    ObjectChange::upsert(s.clone()),
                    ObjectChange::upsert(ing.clone()),
                ]);
                let (next, _) = w.snapshot.apply(&out.batch);
                let out = w.translator.apply([
                    ObjectChange::Delete(ing.key()),
                    ObjectChange::Delete(weir_api::ObjectKey::new(
                        weir_api::Kind::Secret,
                        "bench",
                        &format!("d{i}-tls"),
                    )),
                ]);
                let (next, _) = next.apply(&out.batch);
                w.snapshot = black_box(next);
            })
        });
        drop(w);
        // The same with XListenerSets: add then remove one domain's Secret, set and route.
        let mut w = world_sets(n, &certs);
        let extra = [secret(n, &certs[max]), listener_set(n), set_route(n)];
        group.bench_with_input(
            BenchmarkId::new("add_and_remove_listener_set", n),
            &n,
            |b, _| {
                b.iter(|| {
                    let out = w
                        .translator
                        .apply(extra.iter().map(|o| ObjectChange::upsert(o.clone())));
                    let (next, _) = w.snapshot.apply(&out.batch);
                    let out = w
                        .translator
                        .apply(extra.iter().map(|o| ObjectChange::Delete(o.key())));
                    let (next, _) = next.apply(&out.batch);
                    w.snapshot = black_box(next);
                })
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(std::time::Duration::from_secs(4));
    targets = bench
}
criterion_main!(benches);
