//! TrafficPolicy fields of push protocol version 3 in Kubernetes mode, through the CRD's
//! schema: `authorization`, `cors` and `requestLimits` on one HTTPRoute, each `Accepted`
//! in the policy's status and enforced by the embedded data plane; an `authorization`
//! without its required `default` refused by the API server with the policy in place
//! unchanged; one with a bad network `Invalid` in its status, nothing else affected.

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::build::{self, until_http};
use crate::cluster::{self, has, wait_status};
use crate::{CONTROLLER, Ctx, support};

const POLICY_V1: (&str, &str) = ("weir.dev/v1alpha1", "TrafficPolicy");

fn policy(ns: &str, name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["targetRefs"] =
        json!([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "r"}]);
    json!({"apiVersion": POLICY_V1.0, "kind": POLICY_V1.1,
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn on_route(s: &Value, status: &str, reason: &str) -> bool {
    s["ancestors"].as_array().is_some_and(|a| {
        a.iter().any(|e| {
            e["controllerName"] == CONTROLLER
                && e["ancestorRef"]["name"] == "r"
                && has(&e["conditions"], "Accepted", status, reason)
        })
    })
}

async fn status_of(
    addr: SocketAddr,
    req: http::Request<http_body_util::Empty<bytes::Bytes>>,
) -> u16 {
    support::send_http1(addr, req)
        .await
        .unwrap()
        .status
        .as_u16()
}

pub async fn authorization_cors_and_size_limits(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t-policy-v3";
    let ip = ctx.gateway_ip();
    let addr = SocketAddr::from((ip, support::free_port()));
    let host = "x.t-policy-v3.test";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
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
                &[host],
                json!([build::rule("/", "svc-a", None)]),
            ),
        ],
    )
    .await;
    until_http(addr, host, "/", Ok("echo-a")).await;

    cluster::apply(
        c,
        &[
            policy(
                ns,
                "authz",
                json!({"authorization": {"default": "Allow", "rules": [
                    {"action": "Deny", "methods": ["DELETE"]},
                    {"action": "Deny", "paths": [{"type": "PathPrefix", "value": "/admin"}],
                     "headers": [{"name": "x-team", "type": "Present"}]}]}}),
            ),
            policy(
                ns,
                "cors",
                json!({"cors": {"allowOrigins": ["https://app.example.com"],
                                "allowMethods": ["GET", "PUT"], "maxAge": 60}}),
            ),
            policy(ns, "size", json!({"requestLimits": {"maxHeaders": 12}})),
        ],
    )
    .await;
    for name in ["authz", "cors", "size"] {
        wait_status(c, POLICY_V1, ns, name, "Accepted", |s| {
            on_route(s, "True", "Accepted")
        })
        .await;
    }
    let req = |method: &str, path: &str| {
        http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", host)
    };
    let empty = http_body_util::Empty::new;
    until_http(addr, host, "/admin", Ok("echo-a")).await;
    assert_eq!(
        status_of(addr, req("DELETE", "/x").body(empty()).unwrap()).await,
        403
    );
    assert_eq!(
        status_of(
            addr,
            req("GET", "/admin")
                .header("x-team", "a")
                .body(empty())
                .unwrap()
        )
        .await,
        403
    );
    let preflight = req("OPTIONS", "/x")
        .header("origin", "https://app.example.com")
        .header("access-control-request-method", "PUT")
        .body(empty())
        .unwrap();
    let r = support::send_http1(addr, preflight).await.unwrap();
    assert_eq!(r.status, 204);
    assert_eq!(
        r.headers["access-control-allow-origin"],
        "https://app.example.com"
    );
    let mut many = req("GET", "/x");
    for i in 0..15 {
        many = many.header(format!("x-h{i}"), "v");
    }
    assert_eq!(status_of(addr, many.body(empty()).unwrap()).await, 431);

    // The CRD requires `default`: the API server refuses, the rules in place stay.
    let bad = policy(ns, "authz", json!({"authorization": {"rules": []}}));
    let err = cluster::try_apply(c, &bad)
        .await
        .expect_err("an authorization without default must be refused");
    assert!(err.contains("default"), "{err}");
    assert_eq!(
        status_of(addr, req("DELETE", "/x").body(empty()).unwrap()).await,
        403
    );

    // A network weir refuses (bits past the prefix): Invalid in the status, the others
    // unaffected.
    cluster::apply(
        c,
        &[policy(
            ns,
            "bad-net",
            json!({"authorization": {"default": "Deny", "rules": [
                {"action": "Allow", "clients": ["10.0.0.1/8"]}]}}),
        )],
    )
    .await;
    wait_status(c, POLICY_V1, ns, "bad-net", "Invalid", |s| {
        on_route(s, "False", "Invalid")
    })
    .await;
    until_http(addr, host, "/", Ok("echo-a")).await;

    for name in ["authz", "cors", "size", "bad-net"] {
        cluster::delete(c, POLICY_V1.0, POLICY_V1.1, ns, name).await;
    }
    let deleted = || req("DELETE", "/x").body(empty()).unwrap();
    for _ in 0..100 {
        if status_of(addr, deleted()).await == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        status_of(addr, deleted()).await,
        200,
        "deleting the policy lifts it"
    );
}
