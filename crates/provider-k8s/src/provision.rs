//! Split mode: one data-plane deployment per Gateway, in the Gateway's namespace, owned
//! by the Gateway (owner references): a ServiceAccount `weir-<gateway>` (whose token the
//! data plane presents to the controller), a Deployment running `weir proxy` for that
//! Gateway, and a Service exposing the Gateway's listener ports. Objects are written with
//! server-side apply (field manager `weir-provisioner`), so a repeat is a no-op, and
//! deleted when the Gateway goes away or stops being accepted (owner references cover
//! clusters where the garbage collector runs; the explicit delete covers the rest).

use std::collections::{BTreeMap, BTreeSet};

use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject};

use crate::kinds::api_resource;
use serde_json::{Map, Value, json};
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

/// Embedded mode: a Service per Gateway in front of the controller's own Pods (which
/// serve every Gateway), so that each Gateway has an address, ports and Service
/// annotations of its own.
#[derive(Clone, Debug)]
pub struct GatewayServiceOptions {
    /// Labels of the controller's Pods (the Services' selector).
    pub selector: BTreeMap<String, String>,
    /// Service type (`LoadBalancer`, `ClusterIP`, `NodePort`).
    pub service_type: String,
}

/// What is provisioned per Gateway.
#[derive(Clone, Debug)]
pub enum Provision {
    /// Split mode: a ServiceAccount, a `weir proxy` Deployment and a Service.
    DataPlanes(ProvisionOptions),
    /// Embedded mode: a Service selecting the controller's Pods.
    Services(GatewayServiceOptions),
}

/// The label naming the Gateway on everything provisioned for it.
pub const GATEWAY_NAME_LABEL: &str = "gateway.networking.k8s.io/gateway-name";

fn service_account() -> ApiResource {
    api_resource("", "v1", "ServiceAccount", "serviceaccounts")
}

fn deployment() -> ApiResource {
    api_resource("apps", "v1", "Deployment", "deployments")
}

fn service() -> ApiResource {
    api_resource("", "v1", "Service", "services")
}

/// The name of every object provisioned for Gateway `gateway`.
pub fn provisioned_name(gateway: &str) -> String {
    format!("weir-{gateway}")
}

/// The labels of a provisioned object: the Gateway's `infrastructure.labels`, then
/// weir's own (`app.kubernetes.io/name` = `component`, `app.kubernetes.io/managed-by`,
/// and the Gateway's name), which win over a user label of the same key: selectors and
/// the Service-address watch rely on them.
fn labels(gw: &Gateway, component: &str) -> Map<String, Value> {
    let mut m: Map<String, Value> = infrastructure(gw)
        .map(|i| {
            i.labels
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                .collect()
        })
        .unwrap_or_default();
    m.insert("app.kubernetes.io/name".into(), component.into());
    m.insert("app.kubernetes.io/managed-by".into(), "weir".into());
    m.insert(GATEWAY_NAME_LABEL.into(), Value::from(&*gw.metadata.name));
    m
}

/// The Gateway's `infrastructure.annotations` (weir sets none of its own).
fn annotations(gw: &Gateway) -> Map<String, Value> {
    infrastructure(gw)
        .map(|i| {
            i.annotations
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                .collect()
        })
        .unwrap_or_default()
}

fn infrastructure(gw: &Gateway) -> Option<&weir_api::GatewayInfrastructure> {
    gw.spec.infrastructure.as_ref()
}

/// The object metadata shared by everything provisioned for `gw`.
fn metadata(gw: &Gateway, component: &str) -> Value {
    let owner = json!([{
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "name": gw.metadata.name,
        "uid": gw.metadata.uid().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    }]);
    json!({
        "name": provisioned_name(&gw.metadata.name),
        "namespace": gw.metadata.namespace,
        "labels": labels(gw, component),
        "annotations": annotations(gw),
        "ownerReferences": owner,
    })
}

/// The Gateway's listener ports (sorted, once each).
fn ports(gw: &Gateway) -> BTreeSet<i32> {
    gw.spec
        .listeners
        .iter()
        .map(|l| l.port)
        .filter(|p| *p > 0)
        .collect()
}

fn service_ports(gw: &Gateway) -> Vec<Value> {
    ports(gw)
        .iter()
        .map(
            |p| json!({"name": format!("port-{p}"), "port": p, "targetPort": p, "protocol": "TCP"}),
        )
        .collect()
}

/// The objects for one Gateway, each with its resource (pure; see the module
/// documentation).
pub fn manifests(provision: &Provision, gw: &Gateway) -> Vec<(ApiResource, Value)> {
    match provision {
        Provision::DataPlanes(opts) => data_plane_manifests(opts, gw),
        Provision::Services(opts) => vec![(service(), gateway_service(opts, gw))],
    }
}

/// Embedded mode: the Gateway's Service, selecting the controller's Pods.
fn gateway_service(opts: &GatewayServiceOptions, gw: &Gateway) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service", "metadata": metadata(gw, "weir-gateway"),
        "spec": {
            "type": opts.service_type,
            "selector": opts.selector,
            "ports": service_ports(gw),
        },
    })
}

fn data_plane_manifests(opts: &ProvisionOptions, gw: &Gateway) -> Vec<(ApiResource, Value)> {
    let ns = &gw.metadata.namespace;
    let name = provisioned_name(&gw.metadata.name);
    let meta = metadata(gw, "weir-proxy");
    let selector =
        json!({"app.kubernetes.io/name": "weir-proxy", GATEWAY_NAME_LABEL: gw.metadata.name});
    let container_ports: Vec<Value> = ports(gw)
        .iter()
        .map(|p| json!({"containerPort": p}))
        .collect();
    vec![
        (
            service_account(),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}),
        ),
        (
            deployment(),
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
                "spec": {
                    "replicas": opts.replicas,
                    "selector": {"matchLabels": selector},
                    "template": {
                        "metadata": {"labels": meta["labels"], "annotations": meta["annotations"]},
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
        ),
        (
            service(),
            json!({
                "apiVersion": "v1", "kind": "Service", "metadata": meta,
                "spec": {
                    "type": opts.service_type,
                    "selector": selector,
                    "ports": service_ports(gw),
                },
            }),
        ),
    ]
}

/// A Service's reachable addresses: its load-balancer ingress, else (with `cluster_ip`)
/// its cluster IP.
fn service_addresses(data: &Value, cluster_ip: bool) -> Vec<String> {
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
    if !lb.is_empty() || !cluster_ip {
        return lb;
    }
    data.pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty() && *ip != "None")
        .map(|ip| vec![ip.to_string()])
        .unwrap_or_default()
}

/// Creates, updates and deletes the objects provisioned for Gateways.
pub struct Provisioner {
    client: kube::Client,
    provision: Provision,
}

impl Provisioner {
    /// A provisioner writing with `client`.
    pub fn new(client: kube::Client, provision: Provision) -> Provisioner {
        Provisioner { client, provision }
    }

    /// The resources this provisioner writes per Gateway.
    fn resources(&self) -> Vec<ApiResource> {
        match &self.provision {
            Provision::DataPlanes(_) => vec![service_account(), deployment(), service()],
            Provision::Services(_) => vec![service()],
        }
    }

    /// The `app.kubernetes.io/name` label of what this provisioner writes.
    fn component(&self) -> &'static str {
        match self.provision {
            Provision::DataPlanes(_) => "weir-proxy",
            Provision::Services(_) => "weir-gateway",
        }
    }

    /// Whether a Gateway's cluster IP is one of its addresses: in split mode its data
    /// planes are reached only through the Service; in embedded mode the controller's
    /// own addresses stay until a load balancer gives the Service one.
    fn cluster_ip_is_address(&self) -> bool {
        matches!(self.provision, Provision::DataPlanes(_))
    }

    /// Brings Gateway `gw`'s objects to their desired state, with the settings of its
    /// class's `parametersRef` and its own `infrastructure.parametersRef` (ConfigMaps with
    /// keys `image`, `replicas`, `serviceType`; the Gateway's win) over the defaults.
    /// Every object carries the Gateway's `infrastructure` labels and annotations; one
    /// removed from the Gateway is removed from the objects (server-side apply drops the
    /// fields its manager no longer applies).
    /// Returns the addresses of its Service (load-balancer ingress, else in split mode
    /// its cluster IP).
    pub async fn ensure(
        &self,
        gw: &Gateway,
        class: Option<&GatewayClass>,
    ) -> Result<Vec<String>, kube::Error> {
        let mut provision = self.provision.clone();
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
            .map(|r| (gw.metadata.namespace.to_string(), r.name.clone()));
        for (ns, name) in [class_ref, gw_ref].into_iter().flatten() {
            self.overlay(&mut provision, &ns, &name).await;
        }
        let pp = PatchParams::apply("weir-provisioner").force();
        let mut addresses = Vec::new();
        for (ar, obj) in manifests(&provision, gw) {
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
                addresses = service_addresses(&applied.data, self.cluster_ip_is_address());
            }
        }
        Ok(addresses)
    }

    /// Applies the keys of ConfigMap `ns/name` to `opts` (a missing or bad one is logged
    /// and skipped: the defaults stay).
    async fn overlay(&self, provision: &mut Provision, ns: &str, name: &str) {
        let cm = api_resource("", "v1", "ConfigMap", "configmaps");
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &cm);
        let data = match api.get(name).await {
            Ok(o) => o.data.get("data").cloned().unwrap_or(Value::Null),
            Err(e) => {
                tracing::warn!(configmap = %format!("{ns}/{name}"), error = %e, "provisioning parameters not readable; using the defaults");
                return;
            }
        };
        let service_type = match provision {
            Provision::DataPlanes(o) => &mut o.service_type,
            Provision::Services(o) => &mut o.service_type,
        };
        if let Some(v) = data.get("serviceType").and_then(Value::as_str) {
            *service_type = v.to_string();
        }
        let Provision::DataPlanes(opts) = provision else {
            return;
        };
        if let Some(v) = data.get("image").and_then(Value::as_str) {
            opts.image = v.to_string();
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
        let cfg = watcher::Config::default().labels(&format!(
            "app.kubernetes.io/managed-by=weir,app.kubernetes.io/name={}",
            self.component()
        ));
        let cluster_ip = self.cluster_ip_is_address();
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
                    .and_then(|l| l.get(GATEWAY_NAME_LABEL))
                else {
                    continue;
                };
                let key = ObjectKey::new(weir_api::Kind::Gateway, &ns, gateway);
                seen(key, service_addresses(&svc.data, cluster_ip));
            }
        })
    }

    /// Deletes Gateway `key`'s objects (absent ones are fine).
    pub async fn remove(&self, key: &ObjectKey) -> Result<(), kube::Error> {
        for ar in self.resources() {
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
        let m: Vec<Value> = manifests(&Provision::DataPlanes(opts), &gw)
            .into_iter()
            .map(|(_, o)| o)
            .collect();
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

    fn gateway_with_infrastructure() -> Gateway {
        serde_json::from_value(json!({
            "metadata": {"name": "gw", "namespace": "apps", "uid": "u-1"},
            "spec": {"gatewayClassName": "weir",
                "infrastructure": {
                    "labels": {"team": "a", "app.kubernetes.io/name": "mine",
                               "gateway.networking.k8s.io/gateway-name": "other"},
                    "annotations": {"example.com/lb": "internal"}},
                "listeners": [{"name": "c", "port": 80, "protocol": "HTTP"}]}
        }))
        .unwrap()
    }

    fn data_planes() -> Provision {
        Provision::DataPlanes(ProvisionOptions {
            image: "weir:dev".into(),
            controller_url: "http://weir.weir-system:18000".into(),
            replicas: 1,
            service_type: "ClusterIP".into(),
        })
    }

    #[test]
    fn infrastructure_labels_and_annotations_reach_every_object_and_weirs_labels_win() {
        let gw = gateway_with_infrastructure();
        let m = manifests(&data_planes(), &gw);
        let kinds: Vec<&str> = m.iter().map(|(ar, _)| ar.kind.as_str()).collect();
        assert_eq!(kinds, ["ServiceAccount", "Deployment", "Service"]);
        let template = &m[1].1["spec"]["template"]["metadata"];
        for meta in m.iter().map(|(_, o)| &o["metadata"]).chain([template]) {
            assert_eq!(meta["labels"]["team"], "a", "{meta}");
            // weir's own labels are selectors: a user label of the same key loses.
            assert_eq!(meta["labels"]["app.kubernetes.io/name"], "weir-proxy");
            assert_eq!(
                meta["labels"]["gateway.networking.k8s.io/gateway-name"],
                "gw"
            );
            assert_eq!(meta["labels"]["app.kubernetes.io/managed-by"], "weir");
            assert_eq!(meta["annotations"]["example.com/lb"], "internal");
        }
        assert_eq!(
            m[1].1["spec"]["selector"]["matchLabels"],
            json!({"app.kubernetes.io/name": "weir-proxy", "gateway.networking.k8s.io/gateway-name": "gw"})
        );
        // Without infrastructure: weir's labels only, no annotations.
        let mut plain = gw.clone();
        plain.spec.infrastructure = None;
        let m = manifests(&data_planes(), &plain);
        assert_eq!(m[0].1["metadata"]["labels"].as_object().unwrap().len(), 3);
        assert_eq!(m[0].1["metadata"]["annotations"], json!({}));
    }

    #[test]
    fn embedded_mode_publishes_one_service_selecting_the_controller() {
        let gw = gateway_with_infrastructure();
        let p = Provision::Services(GatewayServiceOptions {
            selector: [("app.kubernetes.io/name".to_string(), "weir".to_string())].into(),
            service_type: "LoadBalancer".into(),
        });
        let m = manifests(&p, &gw);
        assert_eq!(m.len(), 1);
        let (ar, svc) = &m[0];
        assert_eq!(ar.kind, "Service");
        assert_eq!(svc["metadata"]["name"], "weir-gw");
        assert_eq!(
            svc["metadata"]["labels"]["app.kubernetes.io/name"],
            "weir-gateway"
        );
        assert_eq!(svc["metadata"]["labels"]["team"], "a");
        assert_eq!(svc["metadata"]["annotations"]["example.com/lb"], "internal");
        assert_eq!(
            svc["spec"]["selector"],
            json!({"app.kubernetes.io/name": "weir"})
        );
        assert_eq!(svc["spec"]["type"], "LoadBalancer");
        assert_eq!(svc["spec"]["ports"][0]["port"], 80);
    }

    #[test]
    fn cluster_ip_is_an_address_only_in_split_mode() {
        let svc = json!({"spec": {"clusterIP": "10.0.0.7"}});
        assert_eq!(service_addresses(&svc, true), ["10.0.0.7"]);
        assert!(service_addresses(&svc, false).is_empty());
        let lb = json!({"spec": {"clusterIP": "10.0.0.7"},
                        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}});
        assert_eq!(service_addresses(&lb, false), ["192.0.2.1"]);
    }
}
