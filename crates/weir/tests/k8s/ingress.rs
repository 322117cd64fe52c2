//! Ingress v1: traffic, `status.loadBalancer`, and Ingresses of other classes left alone.

use std::sync::Arc;

use serde_json::json;

use crate::Ctx;
use crate::build::{self, until_http};
use crate::cluster::{self, wait_status};

const ING: (&str, &str) = ("networking.k8s.io/v1", "Ingress");

fn ingress(ns: &str, name: &str, class: &str, host: &str, svc: &str) -> serde_json::Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
    "metadata": {"name": name, "namespace": ns},
    "spec": {"ingressClassName": class, "rules": [{"host": host, "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": svc, "port": {"number": 80}}}},
        {"path": "/exact", "pathType": "Exact", "backend": {"service": {"name": "svc-b", "port": {"name": "http"}}}}
    ]}}]}})
}

pub async fn ingress_traffic_and_status(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    cluster::apply(c, &build::service(ns, "svc-b", &ctx.b)).await;
    cluster::apply(
        c,
        &[
            ingress(ns, "ours", "weir", "ing.t7.test", "svc-a"),
            ingress(ns, "theirs", "nginx", "theirs.t7.test", "svc-a"),
            // Keeps the Ingress listener bound after "ours" is deleted (it is unbound with the
            // last Ingress).
            ingress(ns, "keeper", "weir", "keeper.t7.test", "svc-b"),
        ],
    )
    .await;
    until_http(ctx.ingress_http, "ing.t7.test", "/anything", Ok("echo-a")).await;
    until_http(ctx.ingress_http, "ing.t7.test", "/exact", Ok("echo-b")).await;
    until_http(ctx.ingress_http, "ing.t7.test", "/exact/more", Ok("echo-a")).await;
    until_http(ctx.ingress_http, "theirs.t7.test", "/", Err(404)).await;
    let ip = ctx.ingress_http.ip().to_string();
    wait_status(c, ING, ns, "ours", "loadBalancer address", |s| {
        s["loadBalancer"]["ingress"] == json!([{"ip": ip}])
    })
    .await;
    // Give the writer every chance to (wrongly) write the other class's Ingress.
    ctx.controller.statuses_written().await;
    let theirs = cluster::status(c, ING.0, ING.1, ns, "theirs").await;
    assert!(theirs["loadBalancer"]["ingress"].is_null(), "{theirs:#}");

    cluster::delete(c, ING.0, ING.1, ns, "ours").await;
    until_http(ctx.ingress_http, "ing.t7.test", "/anything", Err(404)).await;
}

/// An ingress-nginx canary Ingress through the API server: created before its main
/// Ingress it serves nothing; once the main Ingress exists, `canary-weight: "100"` sends
/// every request to the canary's Service; deleting the canary leaves the main one's.
pub async fn ingress_nginx_canary_follows_its_main_ingress(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7n";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    cluster::apply(c, &build::service(ns, "svc-b", &ctx.b)).await;
    let mut canary = ingress(ns, "canary", "weir", "canary.t7n.test", "svc-b");
    canary["metadata"]["annotations"] = json!({
        "nginx.ingress.kubernetes.io/canary": "true",
        "nginx.ingress.kubernetes.io/canary-weight": "100",
    });
    cluster::apply(c, &[canary]).await;
    until_http(ctx.ingress_http, "canary.t7n.test", "/", Err(404)).await;
    cluster::apply(
        c,
        &[ingress(ns, "main", "weir", "canary.t7n.test", "svc-a")],
    )
    .await;
    until_http(ctx.ingress_http, "canary.t7n.test", "/", Ok("echo-b")).await;
    cluster::delete(c, ING.0, ING.1, ns, "canary").await;
    until_http(ctx.ingress_http, "canary.t7n.test", "/", Ok("echo-a")).await;
    cluster::delete(c, ING.0, ING.1, ns, "main").await;
}
