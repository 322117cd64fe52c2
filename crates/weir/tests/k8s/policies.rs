//! weir's own kinds in Kubernetes mode (deploy/crds/weir.dev.yaml): a TrafficPolicy
//! attached to an HTTPRoute rule (status `ancestors`, a rate limit applied and removed,
//! a missing target, a spec the API server refuses; a health check and circuit breaker on
//! a Service) and a DirectResponse used by a route.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::build::{self, until_http};
use crate::cluster::{self, has, wait_status};
use crate::{CONTROLLER, Ctx, support};

const POLICY_V1: (&str, &str) = ("weir.dev/v1alpha1", "TrafficPolicy");

fn policy(ns: &str, name: &str, target: Value, spec: Value) -> Value {
    let mut spec = spec;
    spec["targetRefs"] = json!([target]);
    json!({"apiVersion": POLICY_V1.0, "kind": POLICY_V1.1,
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// Our ancestor entry for `target` (by name) has `Accepted` with `status` and `reason`.
fn ancestor(s: &Value, target: &str, status: &str, reason: &str) -> bool {
    s["ancestors"].as_array().is_some_and(|a| {
        a.iter().any(|e| {
            e["controllerName"] == CONTROLLER
                && e["ancestorRef"]["name"] == target
                && has(&e["conditions"], "Accepted", status, reason)
        })
    })
}

pub async fn traffic_policy_status_and_rate_limit(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t-policy";
    let ip = ctx.gateway_ip();
    let addr = SocketAddr::from((ip, support::free_port()));
    let host = "x.t-policy.test";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    let mut limited = build::rule("/limited", "svc-a", None);
    limited["name"] = "limited".into();
    let teapot = json!({
        "matches": [{"path": {"type": "PathPrefix", "value": "/teapot"}}],
        "filters": [{"type": "ExtensionRef",
                     "extensionRef": {"group": "weir.dev", "kind": "DirectResponse", "name": "tea"}}]});
    cluster::apply(
        c,
        &[
            json!({"apiVersion": "weir.dev/v1alpha1", "kind": "DirectResponse",
                   "metadata": {"name": "tea", "namespace": ns},
                   "spec": {"status": 418, "body": "short and stout"}}),
            build::gateway(
                ns,
                "gw",
                ip,
                json!([{"name": "http", "port": addr.port(), "protocol": "HTTP"}]),
            ),
            build::route(
                ns,
                "r",
                json!([{"name": "gw"}]),
                &[host],
                json!([limited, build::rule("/free", "svc-a", None), teapot]),
            ),
        ],
    )
    .await;
    until_http(addr, host, "/limited", Ok("echo-a")).await;
    // The DirectResponse, read from the cluster, answers for the route.
    until_http(addr, host, "/teapot", Err(418)).await;

    // Two requests a minute on rule `limited`, one budget for the whole rule.
    let target = json!({"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                        "name": "r", "sectionName": "limited"});
    let spec = json!({"rateLimit": {"local": {"requests": 2, "unit": "Minute",
                                              "key": {"type": "Target"}}}});
    cluster::apply(c, &[policy(ns, "limit", target.clone(), spec)]).await;
    wait_status(c, POLICY_V1, ns, "limit", "Accepted", |s| {
        ancestor(s, "r", "True", "Accepted")
    })
    .await;
    let mut limited_resp = None;
    for _ in 0..200 {
        let r = support::http1(addr, host, "/limited").await.unwrap();
        if r.status == 429 {
            limited_resp = Some(r);
            break;
        }
        assert_eq!(r.status, 200, "/limited before the limit is reached");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = limited_resp.expect("the rate limit never answered 429");
    assert!(r.headers.contains_key("retry-after"), "{:?}", r.headers);
    // The other rule of the route has no policy.
    for _ in 0..5 {
        let r = support::http1(addr, host, "/free").await.unwrap();
        assert_eq!(r.status, 200, "/free is not limited");
    }

    // A policy whose target does not exist: TargetNotFound, nothing else affected.
    let missing = json!({"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                         "name": "no-such-route"});
    cluster::apply(
        c,
        &[policy(
            ns,
            "orphan",
            missing,
            json!({"timeouts": {"request": "5s"}}),
        )],
    )
    .await;
    wait_status(c, POLICY_V1, ns, "orphan", "TargetNotFound", |s| {
        ancestor(s, "no-such-route", "False", "TargetNotFound")
    })
    .await;

    // The API server refuses what weir would refuse (the CRD's enum), and the policy in
    // place stays as it was.
    let bad = policy(
        ns,
        "limit",
        target,
        json!({"rateLimit": {"local": {"requests": 2, "unit": "Fortnight"}}}),
    );
    let err = cluster::try_apply(c, &bad)
        .await
        .expect_err("unit Fortnight must be refused");
    assert!(err.contains("Fortnight"), "{err}");
    assert_eq!(
        support::http1(addr, host, "/limited").await.unwrap().status,
        429
    );

    // Deleting the policy lifts the limit.
    cluster::delete(c, POLICY_V1.0, POLICY_V1.1, ns, "limit").await;
    until_http(addr, host, "/limited", Ok("echo-a")).await;

    // A policy on the Service (a TCP health check, a circuit breaker and a consistent
    // hash by client address, through the CRD's schema): Accepted on
    // the Service, traffic unchanged (the endpoint passes its probes); on a Service that
    // does not exist: TargetNotFound.
    let svc = |name: &str| json!({"group": "", "kind": "Service", "name": name});
    let endpoints = json!({"healthCheck": {"type": "TCP", "interval": "1s"},
                           "circuitBreaker": {"maxRequests": 1000},
                           "loadBalancer": {"type": "ConsistentHash",
                                            "consistentHash": {"type": "SourceIP"}}});
    cluster::apply(
        c,
        &[
            policy(ns, "svc-health", svc("svc-a"), endpoints.clone()),
            policy(ns, "svc-missing", svc("no-such-svc"), endpoints),
        ],
    )
    .await;
    wait_status(c, POLICY_V1, ns, "svc-health", "Accepted", |s| {
        ancestor(s, "svc-a", "True", "Accepted")
    })
    .await;
    wait_status(c, POLICY_V1, ns, "svc-missing", "TargetNotFound", |s| {
        ancestor(s, "no-such-svc", "False", "TargetNotFound")
    })
    .await;
    // The embedded data plane probes the pod (in its network namespace) and it passes.
    let admin = ctx.controller.admin_addr;
    let mut passed = 0.0;
    for _ in 0..100 {
        let page = support::http1(admin, "localhost", "/metrics")
            .await
            .unwrap()
            .body;
        passed = page
            .lines()
            .find_map(|l| l.strip_prefix("weir_upstream_health_checks_total{result=\"passed\"} "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        if passed >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        passed >= 1.0,
        "no health probe of the Service's endpoint passed"
    );
    // The load balancer came through the CRD's schema (not pruned) to the data plane.
    let config = support::http1(admin, "localhost", "/config")
        .await
        .unwrap()
        .body;
    assert!(
        config.contains("SourceIp"),
        "no consistent hash in {config}"
    );
    assert_eq!(
        support::http1(addr, host, "/free").await.unwrap().status,
        200
    );
    cluster::delete(c, POLICY_V1.0, POLICY_V1.1, ns, "svc-health").await;
    cluster::delete(c, POLICY_V1.0, POLICY_V1.1, ns, "svc-missing").await;

    // API keys from an Opaque Secret (weir watches those beside TLS Secrets).
    cluster::apply(
        c,
        &[
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": "keys", "namespace": ns},
                   "stringData": {"alice": "alice-key-1234"}}),
            policy(
                ns,
                "keys",
                json!({"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "r"}),
                json!({"apiKeyAuth": {"secretRefs": [{"name": "keys"}]}}),
            ),
        ],
    )
    .await;
    wait_status(c, POLICY_V1, ns, "keys", "Accepted", |s| {
        ancestor(s, "r", "True", "Accepted")
    })
    .await;
    until_http(addr, host, "/free", Err(401)).await;
    let with_key = support::get(host, "/free")
        .header("x-api-key", "alice-key-1234")
        .body(http_body_util::Empty::new())
        .unwrap();
    let r = support::send_http1(addr, with_key).await.unwrap();
    assert_eq!(r.status, 200, "a valid key passes");
    cluster::delete(c, POLICY_V1.0, POLICY_V1.1, ns, "keys").await;
    until_http(addr, host, "/free", Ok("echo-a")).await;
}
