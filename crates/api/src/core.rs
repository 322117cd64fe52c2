use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::meta::ObjectMeta;
use crate::str_map::StrMap;

/// v1 Namespace (only its labels matter, for `allowedRoutes` selectors).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Namespace {
    /// Metadata.
    pub metadata: ObjectMeta,
}

/// v1 Secret. For TLS, `type: kubernetes.io/tls` with `tls.crt` and `tls.key`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Secret {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Secret type, e.g. `kubernetes.io/tls`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Base64-encoded values (as stored by Kubernetes).
    pub data: StrMap<String>,
    /// Plain values; take precedence over `data` for the same key. Shared buffers, so
    /// that a certificate built from a value (`tls.crt`, `tls.key`) holds the same bytes
    /// instead of a copy.
    pub string_data: StrMap<Arc<str>>,
}

/// v1 ConfigMap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigMap {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Values.
    pub data: BTreeMap<String, String>,
}

/// v1 Service (the parts that map ports to endpoints).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Service {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: ServiceSpec,
}

/// v1 ServiceSpec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceSpec {
    /// Ports.
    pub ports: Vec<ServicePort>,
    /// `ClusterIP`, `NodePort`, `LoadBalancer` or `ExternalName`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// The Service's virtual IP (`None` for a headless Service), where ingress-nginx's
    /// `service-upstream` sends requests.
    #[serde(rename = "clusterIP", skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<String>,
}

/// v1 ServicePort.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServicePort {
    /// Port name (matches EndpointSlice port names).
    pub name: Option<String>,
    /// Service port number (what backendRefs name).
    pub port: i32,
    /// Target port: a number or a container port name.
    pub target_port: Option<serde_json::Value>,
    /// `TCP` (default), `UDP`, `SCTP`.
    pub protocol: Option<String>,
    /// e.g. `kubernetes.io/h2c` for HTTP/2 prior knowledge.
    pub app_protocol: Option<String>,
}

/// discovery.k8s.io/v1 EndpointSlice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EndpointSlice {
    /// Metadata; the label `kubernetes.io/service-name` names the Service.
    pub metadata: ObjectMeta,
    /// `IPv4`, `IPv6` or `FQDN`.
    pub address_type: String,
    /// Endpoints.
    pub endpoints: Vec<EndpointSliceEndpoint>,
    /// Ports (named like the Service's ports).
    pub ports: Vec<EndpointPort>,
}

/// One endpoint of an [`EndpointSlice`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EndpointSliceEndpoint {
    /// Addresses (usually one).
    pub addresses: Vec<String>,
    /// Readiness.
    pub conditions: EndpointConditions,
}

/// Readiness of an endpoint; absent `ready` means ready.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EndpointConditions {
    /// Ready to receive traffic.
    pub ready: Option<bool>,
    /// Serving (may be terminating).
    pub serving: Option<bool>,
    /// Terminating.
    pub terminating: Option<bool>,
}

/// A port of an [`EndpointSlice`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EndpointPort {
    /// Name (matches the Service port name; empty for a single unnamed port).
    pub name: Option<String>,
    /// Port number on the endpoint.
    pub port: Option<i32>,
    /// Protocol.
    pub protocol: Option<String>,
    /// Application protocol.
    pub app_protocol: Option<String>,
}
