//! Split mode: one data-plane deployment per Gateway, in the Gateway's namespace, owned
//! by the Gateway (owner references): a ServiceAccount `weir-<gateway>` (whose token the
//! data plane presents to the controller), a Deployment running `weir proxy` for that
//! Gateway, and a Service exposing the Gateway's listener ports. Objects are written with
//! server-side apply (field manager `weir-provisioner`), so a repeat is a no-op, and
//! deleted when the Gateway goes away or stops being accepted (owner references cover
//! clusters where the garbage collector runs; the explicit delete covers the rest).

use std::collections::BTreeSet;

use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject};

use crate::kinds::api_resource;
use serde_json::{Value, json};
use weir_api::{Gateway, GatewayClass, ObjectKey};

/// How data planes are deployed.
#[derive(Clone, Debug)]
pub struct ProvisionOptions {
    /// Container image running `weir`.
    pub image: String,
    /// The controller's push endpoint as the data planes reach it.
    pub controller_url: String,
    /// Data-plane replicas per Gateway.
    pub replicas: i32,
    /// Service type (`LoadBalancer`, `ClusterIP`, `NodePort`).
    pub service_type: String,
}

fn kinds() -> [ApiResource; 3] {
    [
        api_resource("", "v1", "ServiceAccount", "serviceaccounts"),
        api_resource("apps", "v1", "Deployment", "deployments"),
        api_resource("", "v1", "Service", "services"),
    ]
}

/// The name of every object provisioned for Gateway `gateway`.
pub fn provisioned_name(gateway: &str) -> String {
    format!("weir-{gateway}")
}

/// The objects for one Gateway (pure; see the module documentation).
pub fn manifests(opts: &ProvisionOptions, gw: &Gateway) -> Vec<Value> {
    let ns = &gw.metadata.namespace;
    let name = provisioned_name(&gw.metadata.name);
    let labels = json!({
        "app.kubernetes.io/name": "weir-proxy",
        "app.kubernetes.io/managed-by": "weir",
        "gateway.networking.k8s.io/gateway-name": gw.metadata.name,
    });
    let owner = json!([{
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "name": gw.metadata.name,
        "uid": gw.metadata.uid.clone().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    }]);
    let meta = json!({"name": name, "namespace": ns, "labels": labels, "ownerReferences": owner});
    let ports: BTreeSet<i32> = gw
        .spec
        .listeners
        .iter()
        .map(|l| l.port)
        .filter(|p| *p > 0)
        .collect();
    let service_ports: Vec<Value> = ports
        .iter()
        .map(
            |p| json!({"name": format!("port-{p}"), "port": p, "targetPort": p, "protocol": "TCP"}),
        )
        .collect();
    let container_ports: Vec<Value> = ports.iter().map(|p| json!({"containerPort": p})).collect();
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {
                "replicas": opts.replicas,
                "selector": {"matchLabels": {"app.kubernetes.io/name": "weir-proxy", "gateway.networking.k8s.io/gateway-name": gw.metadata.name}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": name,
                        "containers": [{
                            "name": "weir",
                            "image": opts.image,
                            "args": [
                                "proxy",
                                format!("--controller={}", opts.controller_url),
                                format!("--gateway={ns}/{}", gw.metadata.name),
                                "--admin=0.0.0.0:9902",
                                "--token-file=/var/run/secrets/kubernetes.io/serviceaccount/token",
                            ],
                            "ports": container_ports,
                            "readinessProbe": {"httpGet": {"path": "/ready", "port": 9902}, "periodSeconds": 2},
                        }],
                    },
                },
            },
        }),
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {
                "type": opts.service_type,
                "selector": {"app.kubernetes.io/name": "weir-proxy", "gateway.networking.k8s.io/gateway-name": gw.metadata.name},
                "ports": service_ports,
            },
        }),
    ]
}

/// A Service's reachable addresses: its load-balancer ingress, else its cluster IP.
fn service_addresses(data: &Value) -> Vec<String> {
    let lb: Vec<String> = data
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .map(|v| {
            v.iter()
                .filter_map(|i| {
                    i.get("ip")
                        .or_else(|| i.get("hostname"))
                        .and_then(Value::as_str)
                })
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if !lb.is_empty() {
        return lb;
    }
    data.pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty() && *ip != "None")
        .map(|ip| vec![ip.to_string()])
        .unwrap_or_default()
}

/// Creates, updates and deletes the data-plane objects of Gateways.
pub struct Provisioner {
    client: kube::Client,
    opts: ProvisionOptions,
}

impl Provisioner {
    /// A provisioner writing with `client`.
    pub fn new(client: kube::Client, opts: ProvisionOptions) -> Provisioner {
        Provisioner { client, opts }
    }

    /// Brings Gateway `gw`'s objects to their desired state, with the settings of its
    /// class's `parametersRef` and its own `infrastructure.parametersRef` (ConfigMaps with
    /// keys `image`, `replicas`, `serviceType`; the Gateway's win) over the defaults.
    /// Returns the addresses of its Service (load-balancer ingress, else cluster IP).
    pub async fn ensure(
        &self,
        gw: &Gateway,
        class: Option<&GatewayClass>,
    ) -> Result<Vec<String>, kube::Error> {
        let mut opts = self.opts.clone();
        let class_ref = class
            .and_then(|c| c.spec.parameters_ref.as_ref())
            .filter(|r| r.group.is_empty() && r.kind == "ConfigMap")
            .and_then(|r| Some((r.namespace.clone()?, r.name.clone())));
        let gw_ref = gw
            .spec
            .infrastructure
            .as_ref()
            .and_then(|i| i.parameters_ref.as_ref())
            .filter(|r| r.group.is_empty() && r.kind == "ConfigMap")
            .map(|r| (gw.metadata.namespace.clone(), r.name.clone()));
        for (ns, name) in [class_ref, gw_ref].into_iter().flatten() {
            self.overlay(&mut opts, &ns, &name).await;
        }
        let pp = PatchParams::apply("weir-provisioner").force();
        let mut addresses = Vec::new();
        for (obj, ar) in manifests(&opts, gw).into_iter().zip(kinds()) {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &gw.metadata.namespace, &ar);
            let applied = api
                .patch(
                    &provisioned_name(&gw.metadata.name),
                    &pp,
                    &Patch::Apply(&obj),
                )
                .await?;
            if ar.kind == "Service" {
                addresses = service_addresses(&applied.data);
            }
        }
        Ok(addresses)
    }

    /// Applies the keys of ConfigMap `ns/name` to `opts` (a missing or bad one is logged
    /// and skipped: the defaults stay).
    async fn overlay(&self, opts: &mut ProvisionOptions, ns: &str, name: &str) {
        let cm = api_resource("", "v1", "ConfigMap", "configmaps");
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &cm);
        let data = match api.get(name).await {
            Ok(o) => o.data.get("data").cloned().unwrap_or(Value::Null),
            Err(e) => {
                tracing::warn!(configmap = %format!("{ns}/{name}"), error = %e, "provisioning parameters not readable; using the defaults");
                return;
            }
        };
        if let Some(v) = data.get("image").and_then(Value::as_str) {
            opts.image = v.to_string();
        }
        if let Some(v) = data.get("serviceType").and_then(Value::as_str) {
            opts.service_type = v.to_string();
        }
        if let Some(v) = data.get("replicas").and_then(Value::as_str) {
            match v.parse() {
                Ok(n) => opts.replicas = n,
                Err(_) => {
                    tracing::warn!(configmap = %format!("{ns}/{name}"), value = v, "replicas is not a number; ignored")
                }
            }
        }
    }

    /// Follows the addresses of the Services weir provisioned (a load balancer assigns its
    /// address some time after the Service is created): calls `seen` with the Gateway and
    /// the Service's addresses whenever a provisioned Service is listed, added or
    /// changed. Runs until the task is dropped; watch errors are retried with backoff.
    pub fn watch_addresses(
        &self,
        seen: impl Fn(ObjectKey, Vec<String>) + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        use futures_util::StreamExt;
        use kube::runtime::WatchStreamExt;
        use kube::runtime::watcher::{self, Event};
        let ar = api_resource("", "v1", "Service", "services");
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let cfg = watcher::Config::default()
            .labels("app.kubernetes.io/managed-by=weir,app.kubernetes.io/name=weir-proxy");
        tokio::spawn(async move {
            let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
            while let Some(ev) = stream.next().await {
                let svc = match ev {
                    Ok(Event::Apply(o) | Event::InitApply(o)) => o,
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::debug!(error = %e, "watching provisioned Services");
                        continue;
                    }
                };
                let ns = svc.metadata.namespace.clone().unwrap_or_default();
                let Some(gateway) = svc
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("gateway.networking.k8s.io/gateway-name"))
                else {
                    continue;
                };
                let key = ObjectKey::new(weir_api::Kind::Gateway, &ns, gateway);
                seen(key, service_addresses(&svc.data));
            }
        })
    }

    /// Deletes Gateway `key`'s objects (absent ones are fine).
    pub async fn remove(&self, key: &ObjectKey) -> Result<(), kube::Error> {
        for ar in kinds() {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &key.namespace, &ar);
            match api
                .delete(&provisioned_name(&key.name), &DeleteParams::background())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_owned_by_the_gateway_and_expose_its_ports() {
        let gw: Gateway = serde_json::from_value(json!({
            "metadata": {"name": "gw", "namespace": "apps", "uid": "u-1"},
            "spec": {"gatewayClassName": "weir", "listeners": [
                {"name": "a", "port": 443, "protocol": "HTTPS"},
                {"name": "b", "port": 443, "protocol": "HTTPS", "hostname": "x.test"},
                {"name": "c", "port": 80, "protocol": "HTTP"}]}
        }))
        .unwrap();
        let opts = ProvisionOptions {
            image: "weir:dev".into(),
            controller_url: "http://weir.weir-system:18000".into(),
            replicas: 2,
            service_type: "LoadBalancer".into(),
        };
        let m = manifests(&opts, &gw);
        assert_eq!(m.len(), 3);
        for o in &m {
            assert_eq!(o["metadata"]["name"], "weir-gw");
            assert_eq!(o["metadata"]["namespace"], "apps");
            assert_eq!(o["metadata"]["ownerReferences"][0]["uid"], "u-1");
            assert_eq!(o["metadata"]["ownerReferences"][0]["kind"], "Gateway");
        }
        assert_eq!(m[1]["spec"]["replicas"], 2);
        assert_eq!(
            m[1]["spec"]["template"]["spec"]["serviceAccountName"],
            "weir-gw"
        );
        let args = &m[1]["spec"]["template"]["spec"]["containers"][0]["args"];
        assert!(
            args.as_array()
                .unwrap()
                .contains(&json!("--gateway=apps/gw"))
        );
        let ports: Vec<i64> = m[2]["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["port"].as_i64().unwrap())
            .collect();
        assert_eq!(ports, vec![80, 443]);
    }
}
