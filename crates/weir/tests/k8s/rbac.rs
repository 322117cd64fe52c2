//! The RBAC of `deploy/weir.yaml` is enough: a second controller runs with a token of that
//! ServiceAccount, syncs, serves and writes status.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use weir::controller::{Controller, ControllerOptions};

use crate::build::{self, until_http};
use crate::cluster::{self, has, wait_status};
use crate::{CLASS_V1, Ctx, GW_V1, ROUTE_V1, support};

const NAME: &str = "weir.dev/rbac-check";

fn manifest() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/weir.yaml"
    ))
    .unwrap();
    text.split("\n---\n")
        .map(|doc| serde_saphyr::from_str::<Value>(doc).expect("deploy/weir.yaml parses"))
        .collect()
}

/// A kubeconfig like the admin one, but authenticating with `token`.
fn kubeconfig_with_token(admin: &std::path::Path, token: &str, out: &std::path::Path) {
    let mut kc: Value = serde_saphyr::from_str(&std::fs::read_to_string(admin).unwrap()).unwrap();
    let user = &mut kc["users"][0]["user"];
    *user = json!({ "token": token });
    // JSON is YAML: kube reads it as a kubeconfig.
    std::fs::write(out, serde_json::to_vec(&kc).unwrap()).unwrap();
}

fn lease_options() -> weir_provider_k8s::LeaseOptions {
    let mut o = weir_provider_k8s::LeaseOptions::new(
        "weir-system".into(),
        "weir-rbac-check".into(),
        "rbac-check-replica".into(),
    );
    o.lease_duration = Duration::from_secs(4);
    o.renew_deadline = Duration::from_secs(3);
    o.retry_period = Duration::from_millis(500);
    o
}

pub async fn deploy_manifest_rbac_is_sufficient(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let rbac: Vec<Value> = manifest()
        .into_iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some(
                    "Namespace"
                        | "ServiceAccount"
                        | "ClusterRole"
                        | "ClusterRoleBinding"
                        | "Role"
                        | "RoleBinding"
                )
            )
        })
        .collect();
    assert_eq!(rbac.len(), 6, "deploy/weir.yaml lost part of its RBAC");
    cluster::apply(c, &rbac).await;

    let req = http::Request::post("/api/v1/namespaces/weir-system/serviceaccounts/weir/token")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})).unwrap())
        .unwrap();
    let resp: Value = c
        .request(req)
        .await
        .expect("TokenRequest for weir-system/weir");
    let token = resp["status"]["token"]
        .as_str()
        .expect("a token")
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    kubeconfig_with_token(&ctx.kubeconfig, &token, &kubeconfig);

    // With too little RBAC a watcher never completes its list and start() never returns.
    let controller = tokio::time::timeout(
        Duration::from_secs(60),
        Controller::start(ControllerOptions {
            kubeconfig: Some(kubeconfig),
            controller_name: NAME.into(),
            admin: "127.0.0.1:0".parse().unwrap(),
            ingress_http: None,
            ingress_https: None,
            ingress_class: "weir-rbac".into(),
            more_ingress_classes: Vec::new(),
            advertise: vec![],
            gateway_address_pool: None,
            access_log: None,
            traces: None,
            xds_listen: None,
            embedded_proxy: true,
            xds_auth: false,
            provision: None,
            // The Lease RBAC of the manifest: the Role in weir-system.
            leader_election: Some(lease_options()),
            redis: None,
        }),
    )
    .await
    .expect("the controller syncs with the manifest's RBAC")
    .expect("the controller starts");
    let mut leader = controller.leader();
    tokio::time::timeout(Duration::from_secs(30), leader.wait_for(|l| *l))
        .await
        .expect("the controller takes the Lease with the manifest's RBAC")
        .unwrap();

    let ns = "t9";
    let ip = ctx.gateway_ip();
    let addr = SocketAddr::from((ip, support::free_port()));
    cluster::apply(
        c,
        &[
            build::namespace(ns, json!({})),
            build::gateway_class("weir-rbac", NAME),
        ],
    )
    .await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    let mut gw = build::gateway(
        ns,
        "gw",
        ip,
        json!([{"name": "http", "port": addr.port(), "protocol": "HTTP"}]),
    );
    gw["spec"]["gatewayClassName"] = "weir-rbac".into();
    cluster::apply(
        c,
        &[
            gw,
            build::route(
                ns,
                "r",
                json!([{"name": "gw"}]),
                &["rbac.t9.test"],
                json!([build::rule("/", "svc-a", None)]),
            ),
        ],
    )
    .await;
    wait_status(c, CLASS_V1, "", "weir-rbac", "class accepted", |s| {
        has(&s["conditions"], "Accepted", "True", "Accepted")
    })
    .await;
    wait_status(c, GW_V1, ns, "gw", "programmed", |s| {
        has(&s["conditions"], "Programmed", "True", "Programmed")
            && s["listeners"][0]["attachedRoutes"] == 1
    })
    .await;
    wait_status(
        c,
        ROUTE_V1,
        ns,
        "r",
        "accepted by the rbac controller",
        |s| {
            s["parents"].as_array().is_some_and(|ps| {
                ps.iter().any(|p| {
                    p["controllerName"] == NAME
                        && has(&p["conditions"], "Accepted", "True", "Accepted")
                })
            })
        },
    )
    .await;
    until_http(addr, "rbac.t9.test", "/", Ok("echo-a")).await;
    assert_eq!(
        controller.status_stats.failed(),
        0,
        "no status write was refused"
    );
    controller.stop().await;
}
