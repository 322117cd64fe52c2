//! A criterion-free micro-benchmark of the O(change) promise: the cost of changing one
//! route among N (each with its own hostname) should stay flat as N grows.
//!
//! Run with `cargo bench -p weir-translate --bench churn`. Prints numbers; asserts nothing
//! about time.

use std::sync::Arc;
use std::time::Instant;

use weir_api::Object;
use weir_translate::{ObjectChange, Translator, TranslatorOptions};

fn object(v: serde_json::Value) -> Arc<Object> {
    Arc::new(Object::from_value(v).expect("valid object"))
}

fn route(i: usize, path: &str) -> Arc<Object> {
    object(serde_json::json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": format!("r{i}"), "namespace": "default"},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "hostnames": [format!("host{i}.example.com")],
            "rules": [{"matches": [{"path": {"value": path}}], "backendRefs": [{"name": "svc", "port": 80}]}]
        }
    }))
}

/// Changes per row of the edit and rotation tables.
const ROUNDS: usize = 2_000;

/// Applies `changes` one at a time (built beforehand, so only translation is timed) and
/// prints the row for `n` routes: time and deltas per change.
fn timed(n: usize, t: &mut Translator, changes: Vec<Arc<Object>>) {
    let rounds = changes.len();
    let mut deltas = 0;
    let start = Instant::now();
    for c in changes {
        deltas += t.apply([ObjectChange::upsert(c)]).batch.deltas.len();
    }
    let per = start.elapsed() / rounds as u32;
    println!(
        "{n:>8} {:>16.1?} {:>10.2}",
        per,
        deltas as f64 / rounds as f64
    );
}

fn main() {
    let options = TranslatorOptions {
        standalone: true,
        ..TranslatorOptions::default()
    };
    println!(
        "{:>8} {:>12} {:>16} {:>10}",
        "routes", "initial", "per change", "deltas"
    );
    let mut rows = Vec::new();
    for n in [1_000usize, 10_000, 100_000] {
        let mut t = Translator::new(options.clone());
        let mut changes = vec![
            ObjectChange::upsert(object(serde_json::json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "gw", "namespace": "default"},
                "spec": {"gatewayClassName": "weir", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}
            }))),
            ObjectChange::upsert(object(serde_json::json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "svc", "namespace": "default"}, "spec": {"ports": [{"port": 80}]}
            }))),
        ];
        changes.extend((0..n).map(|i| ObjectChange::upsert(route(i, "/"))));
        let start = Instant::now();
        t.apply(changes);
        let initial = start.elapsed();

        // Pre-build the changed objects so only translation is timed.
        let rounds = 2_000;
        let updates: Vec<_> = (0..rounds)
            .map(|k| route((k * 7919) % n, &format!("/v{k}")))
            .collect();
        let mut deltas = 0;
        let start = Instant::now();
        for u in updates {
            deltas += t.apply([ObjectChange::upsert(u)]).batch.deltas.len();
        }
        let per = start.elapsed() / rounds as u32;
        println!(
            "{n:>8} {:>12.1?} {:>16.1?} {:>10.2}",
            initial,
            per,
            deltas as f64 / rounds as f64
        );
        rows.push((n, t));
    }

    // One Gateway-wide TrafficPolicy over all N routes, edited: the policy is its own
    // resource, so an edit is one delta whatever N.
    println!(
        "\n{:>8} {:>16} {:>10}   (one Gateway-wide policy edited)",
        "routes", "per edit", "deltas"
    );
    let mut again = Vec::new();
    for (n, mut t) in rows {
        let policy = |k: usize| {
            object(serde_json::json!({
                "apiVersion": "weir.dev/v1alpha1", "kind": "TrafficPolicy",
                "metadata": {"name": "limits", "namespace": "default"},
                "spec": {
                    "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}],
                    "rateLimit": {"local": {"requests": 100 + k, "unit": "Second"}}
                }
            }))
        };
        t.apply([ObjectChange::upsert(policy(0))]);
        timed(n, &mut t, (1..=ROUNDS).map(policy).collect());
        again.push((n, t));
    }

    // One policy on the Service every route sends to (a health check and a circuit
    // breaker), edited: the data plane finds it from the cluster's key, so an edit is one
    // delta whatever N.
    println!(
        "\n{:>8} {:>16} {:>10}   (one Service policy edited: health check, circuit breaker)",
        "routes", "per edit", "deltas"
    );
    for (n, t) in &mut again {
        let policy = |k: usize| {
            object(serde_json::json!({
                "apiVersion": "weir.dev/v1alpha1", "kind": "TrafficPolicy",
                "metadata": {"name": "svc-endpoints", "namespace": "default"},
                "spec": {
                    "targetRefs": [{"group": "", "kind": "Service", "name": "svc"}],
                    "healthCheck": {"type": "HTTP", "http": {"path": "/healthz"},
                                    "interval": format!("{}ms", 1000 + k)},
                    "circuitBreaker": {"maxRequests": 1000}
                }
            }))
        };
        t.apply([ObjectChange::upsert(policy(0))]);
        timed(*n, t, (1..=ROUNDS).map(policy).collect());
    }

    // The Secret of a Gateway-wide API-key policy rotated: the policy is compiled again
    // from the Secret, and only its resource changes, whatever N.
    println!(
        "\n{:>8} {:>16} {:>10}   (the API-key Secret of a Gateway-wide policy rotated)",
        "routes", "per rotation", "deltas"
    );
    let secret = |k: usize| {
        object(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "keys", "namespace": "default"},
            "stringData": {"alice": format!("alice-key-{k:08}")}
        }))
    };
    let mut rotated = Vec::new();
    for (n, mut t) in again {
        t.apply([
            ObjectChange::upsert(secret(0)),
            ObjectChange::upsert(object(serde_json::json!({
                "apiVersion": "weir.dev/v1alpha1", "kind": "TrafficPolicy",
                "metadata": {"name": "keys", "namespace": "default"},
                "spec": {
                    "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}],
                    "apiKeyAuth": {"secretRefs": [{"name": "keys"}]}
                }
            }))),
        ]);
        timed(n, &mut t, (1..=ROUNDS).map(secret).collect());
        rotated.push((n, t));
    }

    // The JWK Set Secret of a Gateway-wide JWT policy rotated (a new Ed25519 key): the
    // keys are decoded again and only the policy changes, whatever N.
    println!(
        "\n{:>8} {:>16} {:>10}   (the JWK Set Secret of a Gateway-wide JWT policy rotated)",
        "routes", "per rotation", "deltas"
    );
    let jwks = |k: usize| {
        let mut x = [7u8; 32];
        x[..8].copy_from_slice(&(k as u64).to_be_bytes());
        let x = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, x);
        object(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "jwks", "namespace": "default"},
            "stringData": {"jwks": format!(
                r#"{{"keys": [{{"kty": "OKP", "crv": "Ed25519", "kid": "k{k}", "x": "{x}"}}]}}"#
            )}
        }))
    };
    let mut jwt = Vec::new();
    for (n, mut t) in rotated {
        t.apply([
            ObjectChange::upsert(jwks(0)),
            ObjectChange::upsert(object(serde_json::json!({
                "apiVersion": "weir.dev/v1alpha1", "kind": "TrafficPolicy",
                "metadata": {"name": "jwt", "namespace": "default"},
                "spec": {
                    "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}],
                    "jwtAuth": {"providers": [{"name": "corp", "jwks": {"secretRef": {"name": "jwks"}}}]}
                }
            }))),
        ]);
        timed(n, &mut t, (1..=ROUNDS).map(jwks).collect());
        jwt.push((n, t));
    }

    // A BackendTLSPolicy on the Service every route sends to: its hostname edited, then
    // its CA ConfigMap rotated between two CAs. Upstream TLS is a field of the Service's
    // `Policy` resource, found from the cluster's key, so either is one delta whatever N.
    println!(
        "\n{:>8} {:>16} {:>10}   (a BackendTLSPolicy's hostname edited)",
        "routes", "per edit", "deltas"
    );
    let btls = |k: usize| {
        object(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy",
            "metadata": {"name": "svc-tls", "namespace": "default"},
            "spec": {
                "targetRefs": [{"group": "", "kind": "Service", "name": "svc"}],
                "validation": {
                    "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "svc-ca"}],
                    "hostname": format!("svc{k}.internal.example")
                }
            }
        }))
    };
    let ca = |k: usize| {
        let pem = if k.is_multiple_of(2) { CA_A } else { CA_B };
        object(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "svc-ca", "namespace": "default"},
            "data": {"ca.crt": pem}
        }))
    };
    let mut tls = Vec::new();
    for (n, mut t) in jwt {
        t.apply([ObjectChange::upsert(ca(0)), ObjectChange::upsert(btls(0))]);
        timed(n, &mut t, (1..=ROUNDS).map(btls).collect());
        tls.push((n, t));
    }
    println!(
        "\n{:>8} {:>16} {:>10}   (the CA ConfigMap of that BackendTLSPolicy rotated)",
        "routes", "per rotation", "deltas"
    );
    let mut with_tls = Vec::new();
    for (n, mut t) in tls {
        timed(n, &mut t, (1..=ROUNDS).map(ca).collect());
        with_tls.push((n, t));
    }
    // A route changed while that policy names its Service: the policy's ancestors (the
    // Gateways routing to the Service) are counted per Service, not found by walking its
    // routes, so the route's change stays one delta with no status to rebuild.
    println!(
        "\n{:>8} {:>16} {:>10}   (a route changed, a BackendTLSPolicy on its Service)",
        "routes", "per change", "deltas"
    );
    for (n, mut t) in with_tls {
        let updates = (0..ROUNDS)
            .map(|k| route((k * 7919) % n, &format!("/tls{k}")))
            .collect();
        timed(n, &mut t, updates);
    }
}

/// Two self-signed CA certificates (P-256) the bench's ConfigMap alternates between.
const CA_A: &str = include_str!("ca-a.pem");
const CA_B: &str = include_str!("ca-b.pem");
