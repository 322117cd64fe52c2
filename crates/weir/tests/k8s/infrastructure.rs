//! A Gateway's `infrastructure`: `parametersRef` validity in its status, and the
//! per-Gateway Service of the embedded data plane (`--gateway-service-selector`) with the
//! infrastructure labels and annotations.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use weir::controller::{Controller, ControllerOptions};

use crate::build;
use crate::cluster::{self, has, wait_status};
use crate::{Ctx, GW_V1, support};

fn listener(port: u16) -> Value {
    json!([{"name": "http", "port": port, "protocol": "HTTP"}])
}

/// A Gateway whose `parametersRef` names a ConfigMap that does not exist, or a kind weir
/// does not take, is not accepted (`InvalidParameters`); the ConfigMap's creation accepts
/// it and its deletion refuses it again, without any change to the Gateway.
pub async fn invalid_parameters_ref_until_the_config_map_exists(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t-infra";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    let mut missing = build::gateway(
        ns,
        "gw-params",
        ctx.gateway_ip(),
        listener(support::free_port()),
    );
    missing["spec"]["infrastructure"] =
        json!({"parametersRef": {"group": "", "kind": "ConfigMap", "name": "params"}});
    let mut unsupported = build::gateway(
        ns,
        "gw-kind",
        ctx.gateway_ip(),
        listener(support::free_port()),
    );
    unsupported["spec"]["infrastructure"] =
        json!({"parametersRef": {"group": "invalid.io", "kind": "InvalidParameters", "name": "x"}});
    cluster::apply(c, &[missing, unsupported]).await;

    let refused = |s: &Value| {
        has(&s["conditions"], "Accepted", "False", "InvalidParameters")
            && has(&s["conditions"], "Programmed", "False", "Invalid")
    };
    let s = wait_status(
        c,
        GW_V1,
        ns,
        "gw-params",
        "InvalidParameters (missing ConfigMap)",
        refused,
    )
    .await;
    let message = cluster::condition(&s["conditions"], "Accepted").unwrap()["message"].clone();
    assert!(
        message.as_str().unwrap().contains("\"params\" not found"),
        "{message}"
    );
    let s = wait_status(c, GW_V1, ns, "gw-kind", "InvalidParameters (kind)", refused).await;
    let message = cluster::condition(&s["conditions"], "Accepted").unwrap()["message"].clone();
    assert!(
        message
            .as_str()
            .unwrap()
            .contains("invalid.io/InvalidParameters"),
        "{message}"
    );

    // The ConfigMap appears: the Gateway naming it is accepted; the other stays refused.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "params", "namespace": ns}, "data": {"replicas": "2"}});
    cluster::apply(c, &[cm]).await;
    wait_status(
        c,
        GW_V1,
        ns,
        "gw-params",
        "accepted once the ConfigMap exists",
        |s| {
            has(&s["conditions"], "Accepted", "True", "Accepted")
                && has(&s["conditions"], "Programmed", "True", "Programmed")
        },
    )
    .await;
    let s = cluster::status(c, GW_V1.0, GW_V1.1, ns, "gw-kind").await;
    assert!(refused(&s), "{s}");

    // And goes: refused again.
    cluster::delete(c, "v1", "ConfigMap", ns, "params").await;
    wait_status(
        c,
        GW_V1,
        ns,
        "gw-params",
        "InvalidParameters again",
        refused,
    )
    .await;
}

const NAME: &str = "weir.dev/infra-check";

/// Embedded mode with `--gateway-service-selector`: each accepted Gateway gets a Service
/// selecting the controller's Pods on its listener ports, carrying the Gateway's
/// `infrastructure` labels and annotations and the gateway-name label; changing them on
/// the Gateway changes the Service (a removed annotation goes), weir's own labels win over
/// the user's, the Gateway's address stays the one it is served on, and the Service goes
/// with the Gateway.
pub async fn gateway_service_carries_infrastructure_metadata(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let controller = Controller::start(ControllerOptions {
        kubeconfig: Some(ctx.kubeconfig.clone()),
        controller_name: NAME.into(),
        admin: "127.0.0.1:0".parse().unwrap(),
        ingress_http: None,
        ingress_https: None,
        ingress_class: "weir-infra".into(),
        more_ingress_classes: Vec::new(),
        advertise: vec![],
        gateway_address_pool: None,
        access_log: None,
        traces: None,
        xds_listen: None,
        embedded_proxy: true,
        xds_auth: false,
        provision: Some(weir_provider_k8s::Provision::Services(
            weir_provider_k8s::GatewayServiceOptions {
                selector: [("app.kubernetes.io/name".to_string(), "weir".to_string())].into(),
                service_type: "ClusterIP".into(),
            },
        )),
        leader_election: None,
        redis: None,
    })
    .await
    .expect("starting the controller");

    let ns = "t-infra-svc";
    let ip = ctx.gateway_ip();
    let port = support::free_port();
    cluster::apply(
        c,
        &[
            build::namespace(ns, json!({})),
            build::gateway_class("weir-infra", NAME),
        ],
    )
    .await;
    let mut gw = build::gateway(ns, "gw", ip, listener(port));
    gw["spec"]["gatewayClassName"] = json!("weir-infra");
    gw["spec"]["infrastructure"] = json!({
        "labels": {"team": "payments", "app.kubernetes.io/name": "not-weirs"},
        "annotations": {"example.com/load-balancer": "internal", "example.com/keep": "yes"},
    });
    cluster::apply(c, &[gw.clone()]).await;
    wait_status(c, GW_V1, ns, "gw", "Accepted", |s| {
        has(&s["conditions"], "Accepted", "True", "Accepted")
    })
    .await;

    let svc = until_service(c, ns, "the Service with the infrastructure metadata", |s| {
        s["metadata"]["labels"]["team"] == "payments"
    })
    .await;
    let meta = &svc["metadata"];
    assert_eq!(
        meta["labels"]["gateway.networking.k8s.io/gateway-name"],
        "gw"
    );
    assert_eq!(
        meta["labels"]["app.kubernetes.io/name"], "weir-gateway",
        "weir's label wins"
    );
    assert_eq!(meta["annotations"]["example.com/load-balancer"], "internal");
    assert_eq!(meta["annotations"]["example.com/keep"], "yes");
    assert_eq!(meta["ownerReferences"][0]["kind"], "Gateway");
    assert_eq!(
        svc["spec"]["selector"],
        json!({"app.kubernetes.io/name": "weir"})
    );
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert_eq!(svc["spec"]["ports"][0]["port"], i64::from(port));
    // Found the way the conformance suite looks for it: by the gateway-name label.
    let ar = cluster::resource("v1", "Service");
    let api: kube::Api<kube::core::DynamicObject> = kube::Api::namespaced_with(c.clone(), ns, &ar);
    let listed = api
        .list(&kube::api::ListParams::default().labels("gateway.networking.k8s.io/gateway-name=gw"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    // A ClusterIP is not the Gateway's address in embedded mode: it stays the bound one.
    let s = cluster::status(c, GW_V1.0, GW_V1.1, ns, "gw").await;
    assert_eq!(
        s["addresses"],
        json!([{"type": "IPAddress", "value": ip.to_string()}])
    );

    // Changed on the Gateway: a label's value, an annotation removed, one added.
    gw["spec"]["infrastructure"] = json!({
        "labels": {"team": "billing"},
        "annotations": {"example.com/keep": "yes", "example.com/new": "1"},
    });
    cluster::apply(c, &[gw]).await;
    let svc = until_service(c, ns, "the changed metadata", |s| {
        s["metadata"]["labels"]["team"] == "billing"
            && s["metadata"]["annotations"]["example.com/new"] == "1"
    })
    .await;
    let annotations = svc["metadata"]["annotations"].as_object().unwrap();
    assert!(
        !annotations.contains_key("example.com/load-balancer"),
        "{annotations:?}"
    );
    assert_eq!(annotations["example.com/keep"], "yes");
    assert_eq!(
        svc["metadata"]["labels"]["gateway.networking.k8s.io/gateway-name"],
        "gw"
    );

    // The Service goes with its Gateway.
    cluster::delete(c, "gateway.networking.k8s.io/v1", "Gateway", ns, "gw").await;
    let gone = support::eventually(Duration::from_secs(20), || async {
        api.get_opt("weir-gw").await.unwrap().is_none()
    })
    .await;
    assert!(gone, "the Service is deleted with its Gateway");
    drop(controller);
}

/// Polls Service `weir-gw` until `ok` holds (bounded); panics with the last one seen.
async fn until_service(
    c: &kube::Client,
    ns: &str,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let ar = cluster::resource("v1", "Service");
    let api: kube::Api<kube::core::DynamicObject> = kube::Api::namespaced_with(c.clone(), ns, &ar);
    let mut last = Value::Null;
    for _ in 0..400 {
        if let Some(o) = api.get_opt("weir-gw").await.unwrap() {
            last = serde_json::to_value(o).unwrap();
            if ok(&last) {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("Service {ns}/weir-gw: timed out waiting for {what}; last: {last}");
}
