//! References: cross-namespace backends need a ReferenceGrant (and lose access with it);
//! a route whose backend goes away.

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::build::{self, until_http};
use crate::cluster::{self, has, our_parent, wait_status};
use crate::{Ctx, ROUTE_V1, support};

fn resolved(s: &Value, status: &str, reason: &str) -> bool {
    our_parent(s, "gw").is_some_and(|p| has(&p["conditions"], "ResolvedRefs", status, reason))
}

pub async fn cross_namespace_backend_needs_a_grant(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let (ns, backend_ns) = ("t5", "t5-backend");
    let ip = ctx.gateway_ip();
    let addr = SocketAddr::from((ip, support::free_port()));
    cluster::apply(
        c,
        &[
            build::namespace(ns, json!({})),
            build::namespace(backend_ns, json!({})),
        ],
    )
    .await;
    cluster::apply(c, &build::service(backend_ns, "svc-a", &ctx.a)).await;
    cluster::apply(
        c,
        &[
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
                &["x.t5.test"],
                json!([build::rule("/", "svc-a", Some(backend_ns))]),
            ),
        ],
    )
    .await;
    wait_status(c, ROUTE_V1, ns, "r", "RefNotPermitted", |s| {
        resolved(s, "False", "RefNotPermitted")
    })
    .await;
    until_http(addr, "x.t5.test", "/", Err(500)).await;

    let grant = json!({"apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
        "metadata": {"name": "from-t5", "namespace": backend_ns},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": ns}],
                 "to": [{"group": "", "kind": "Service"}]}});
    cluster::apply(c, &[grant]).await;
    wait_status(c, ROUTE_V1, ns, "r", "ResolvedRefs after the grant", |s| {
        resolved(s, "True", "ResolvedRefs")
    })
    .await;
    until_http(addr, "x.t5.test", "/", Ok("echo-a")).await;

    // Removing the grant revokes access.
    cluster::delete(
        c,
        "gateway.networking.k8s.io/v1beta1",
        "ReferenceGrant",
        backend_ns,
        "from-t5",
    )
    .await;
    wait_status(c, ROUTE_V1, ns, "r", "RefNotPermitted again", |s| {
        resolved(s, "False", "RefNotPermitted")
    })
    .await;
    until_http(addr, "x.t5.test", "/", Err(500)).await;
}

pub async fn route_that_loses_its_backend(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t6";
    let ip = ctx.gateway_ip();
    let addr = SocketAddr::from((ip, support::free_port()));
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-b", &ctx.b)).await;
    let invalid_kind = json!({"matches": [{"path": {"type": "PathPrefix", "value": "/cm"}}],
                              "backendRefs": [{"group": "", "kind": "ConfigMap", "name": "cm", "port": 80}]});
    cluster::apply(
        c,
        &[
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
                &["y.t6.test"],
                json!([build::rule("/", "svc-b", None)]),
            ),
            build::route(
                ns,
                "cm",
                json!([{"name": "gw"}]),
                &["cm.t6.test"],
                json!([invalid_kind]),
            ),
        ],
    )
    .await;
    until_http(addr, "y.t6.test", "/", Ok("echo-b")).await;
    wait_status(c, ROUTE_V1, ns, "r", "ResolvedRefs", |s| {
        resolved(s, "True", "ResolvedRefs")
    })
    .await;
    wait_status(c, ROUTE_V1, ns, "cm", "InvalidKind", |s| {
        resolved(s, "False", "InvalidKind")
            && our_parent(s, "gw")
                .is_some_and(|p| has(&p["conditions"], "Accepted", "True", "Accepted"))
    })
    .await;
    until_http(addr, "cm.t6.test", "/cm", Err(500)).await;
    // The controller's status page shows the refusal with its condition and reason.
    let rej = support::http1(
        ctx.controller.admin_addr,
        "localhost",
        &format!("/api/v1/rejections?q=HTTPRoute+{ns}/cm"),
    )
    .await
    .unwrap()
    .json();
    let problem = &rej["items"][0]["problems"][0];
    assert_eq!(problem["reason"], "InvalidKind", "{rej:#}");
    assert_eq!(problem["condition"], "ResolvedRefs=False", "{rej:#}");

    cluster::delete(c, "v1", "Service", ns, "svc-b").await;
    wait_status(c, ROUTE_V1, ns, "r", "BackendNotFound", |s| {
        resolved(s, "False", "BackendNotFound")
    })
    .await;
    until_http(addr, "y.t6.test", "/", Err(500)).await;

    cluster::apply(c, &build::service(ns, "svc-b", &ctx.b)).await;
    wait_status(c, ROUTE_V1, ns, "r", "ResolvedRefs again", |s| {
        resolved(s, "True", "ResolvedRefs")
    })
    .await;
    until_http(addr, "y.t6.test", "/", Ok("echo-b")).await;
}
