//! The Kubernetes resources weir watches, and how an API object becomes a
//! [`weir_api::Object`].

use kube::core::{ApiResource, DynamicObject};
use serde_json::Value;
use weir_api::{InvalidObject, Kind, Object};

/// One watched resource type.
#[derive(Clone, Debug)]
pub(crate) struct Watched {
    pub(crate) kind: Kind,
    pub(crate) resource: ApiResource,
    /// Server-side field selector, so that the API server filters (Secrets by type).
    pub(crate) fields: Option<&'static str>,
    /// Whether weir writes this kind's status (its live status is then cached).
    pub(crate) has_status: bool,
}

/// The `ApiResource` of a kind (`group` empty for the core group).
pub fn api_resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Every resource the controller watches. ReferenceGrant is read as `v1beta1`, which
/// Gateway API v1.4 through v1.6 all serve (v1 only since v1.5); the other Gateway API
/// kinds as `v1`. ListenerSet (v1.5+) and XListenerSet (experimental, up to v1.4) are
/// both watched: a cluster has the CRD of one, both or neither.
pub(crate) fn watched() -> Vec<Watched> {
    const GW: &str = "gateway.networking.k8s.io";
    const NET: &str = "networking.k8s.io";
    const WEIR: &str = "weir.dev";
    let w = |kind, resource, fields, has_status| Watched {
        kind,
        resource,
        fields,
        has_status,
    };
    vec![
        w(
            Kind::GatewayClass,
            api_resource(GW, "v1", "GatewayClass", "gatewayclasses"),
            None,
            true,
        ),
        w(
            Kind::Gateway,
            api_resource(GW, "v1", "Gateway", "gateways"),
            None,
            true,
        ),
        w(
            Kind::HttpRoute,
            api_resource(GW, "v1", "HTTPRoute", "httproutes"),
            None,
            true,
        ),
        // Without its CRD (v1.5+ clusters have none; v1.4 only in the experimental
        // channel) the watcher reports it synced and empty, and keeps retrying.
        w(
            Kind::XListenerSet,
            api_resource(
                "gateway.networking.x-k8s.io",
                "v1alpha1",
                "XListenerSet",
                "xlistenersets",
            ),
            None,
            true,
        ),
        // Standard channel since v1.5; on older clusters, as XListenerSet above.
        w(
            Kind::ListenerSet,
            api_resource(GW, "v1", "ListenerSet", "listenersets"),
            None,
            true,
        ),
        // v1 since Gateway API v1.6 (both channels; the standard channel serves only v1).
        // Clusters on older CRDs serve only v1alpha2/v1alpha3: there the watchers find
        // no v1 resource and report the kinds synced and empty.
        w(
            Kind::TlsRoute,
            api_resource(GW, "v1", "TLSRoute", "tlsroutes"),
            None,
            true,
        ),
        w(
            Kind::TcpRoute,
            api_resource(GW, "v1", "TCPRoute", "tcproutes"),
            None,
            true,
        ),
        w(
            Kind::UdpRoute,
            api_resource(GW, "v1", "UDPRoute", "udproutes"),
            None,
            true,
        ),
        // Standard channel, v1 since Gateway API v1.4.
        w(
            Kind::BackendTlsPolicy,
            api_resource(GW, "v1", "BackendTLSPolicy", "backendtlspolicies"),
            None,
            true,
        ),
        // CA certificates (`ca.crt`) of BackendTLSPolicies and client certificate
        // validation.
        w(
            Kind::ConfigMap,
            api_resource("", "v1", "ConfigMap", "configmaps"),
            None,
            false,
        ),
        // Standard channel, v1 since Gateway API v1.1.
        w(
            Kind::GrpcRoute,
            api_resource(GW, "v1", "GRPCRoute", "grpcroutes"),
            None,
            true,
        ),
        // weir's own kinds (deploy/crds/weir.dev.yaml); without those CRDs the
        // watchers report them synced and empty, as above.
        w(
            Kind::TrafficPolicy,
            api_resource(WEIR, "v1alpha1", "TrafficPolicy", "trafficpolicies"),
            None,
            true,
        ),
        w(
            Kind::Backend,
            api_resource(WEIR, "v1alpha1", "Backend", "backends"),
            None,
            false,
        ),
        w(
            Kind::DirectResponse,
            api_resource(WEIR, "v1alpha1", "DirectResponse", "directresponses"),
            None,
            false,
        ),
        w(
            Kind::ReferenceGrant,
            api_resource(GW, "v1beta1", "ReferenceGrant", "referencegrants"),
            None,
            false,
        ),
        w(
            Kind::Ingress,
            api_resource(NET, "v1", "Ingress", "ingresses"),
            None,
            true,
        ),
        w(
            Kind::IngressClass,
            api_resource(NET, "v1", "IngressClass", "ingressclasses"),
            None,
            false,
        ),
        // Only TLS and Opaque Secrets: the API server filters, so other Secrets' data
        // (service-account tokens, Helm releases, registry credentials) never reaches (or
        // is cached by) weir. A Secret's type is immutable, so no Secret moves between
        // these two watchers.
        w(
            Kind::Secret,
            api_resource("", "v1", "Secret", "secrets"),
            Some("type=kubernetes.io/tls"),
            false,
        ),
        // Opaque Secrets: the credentials of authentication policies (API keys); TLS
        // ones as well when a Secret of type Opaque holds tls.crt/tls.key.
        w(
            Kind::Secret,
            api_resource("", "v1", "Secret", "secrets"),
            Some("type=Opaque"),
            false,
        ),
        w(
            Kind::Service,
            api_resource("", "v1", "Service", "services"),
            None,
            false,
        ),
        w(
            Kind::EndpointSlice,
            api_resource("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
            None,
            false,
        ),
        w(
            Kind::Namespace,
            api_resource("", "v1", "Namespace", "namespaces"),
            None,
            false,
        ),
        // Only whether a ConfigMap exists reaches the translator (a Gateway's
        // `infrastructure.parametersRef`): its data is not part of the object, so a data
        // change compares equal and is dropped at conversion.
        w(
            Kind::ConfigMap,
            api_resource("", "v1", "ConfigMap", "configmaps"),
            None,
            false,
        ),
    ]
}

/// What the status writer needs to know of an object as the API server has it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Live {
    /// `metadata.resourceVersion`, for optimistic concurrency on status writes.
    pub(crate) resource_version: String,
    /// `status` as stored (`Value::Null` when absent).
    pub(crate) status: Value,
}

/// Splits an API object into the [`Object`] the translator reads and its [`Live`]
/// status. The object is stripped of `status`, `managedFields` and `resourceVersion`,
/// so that a status write (ours or another controller's) does not look like a change.
pub(crate) fn convert(w: &Watched, obj: DynamicObject) -> (Result<Object, InvalidObject>, Live) {
    // The document `DynamicObject` serializes to (its `data` flattened beside `metadata`),
    // built by moving `data` instead of serializing a copy of it (a Secret's data, a
    // route's spec): only the metadata is converted.
    let DynamicObject { metadata, data, .. } = obj;
    let mut value = match data {
        Value::Object(map) => Value::Object(map),
        Value::Null => Value::Object(serde_json::Map::new()),
        // Not an object: it could not be flattened into a document either.
        _ => Value::Null,
    };
    if let Value::Object(map) = &mut value {
        map.insert(
            "metadata".into(),
            serde_json::to_value(metadata).unwrap_or(Value::Null),
        );
    }
    let mut live = Live {
        resource_version: String::new(),
        status: Value::Null,
    };
    if let Value::Object(map) = &mut value {
        map.insert("apiVersion".into(), w.resource.api_version.clone().into());
        map.insert("kind".into(), w.resource.kind.clone().into());
        if let Some(s) = map.remove("status") {
            live.status = s;
        }
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            meta.remove("managedFields");
            if let Some(Value::String(rv)) = meta.remove("resourceVersion") {
                live.resource_version = rv;
            }
        }
    }
    (Object::from_value(value), live)
}

/// Whether resource version `a` is newer than `b`. Resource versions are opaque to
/// clients, but every API server backed by etcd issues increasing integers; when either
/// is not an integer the newer one is assumed to be `a` (the one seen last).
pub(crate) fn newer(a: &str, b: &str) -> bool {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(a), Ok(b)) => a >= b,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn list_items_without_type_meta_convert() {
        let w = watched()
            .into_iter()
            .find(|w| w.kind == Kind::HttpRoute)
            .unwrap();
        // Items of a list response carry no apiVersion/kind.
        let obj: DynamicObject = serde_json::from_value(json!({
            "metadata": {"name": "r", "namespace": "ns", "resourceVersion": "42",
                         "managedFields": [{"manager": "kubectl"}], "generation": 3},
            "spec": {"parentRefs": [{"name": "gw"}]},
            "status": {"parents": [{"controllerName": "other.example/x"}]}
        }))
        .unwrap();
        let (o, live) = convert(&w, obj);
        let o = o.unwrap();
        assert_eq!(o.kind(), Kind::HttpRoute);
        assert_eq!(o.metadata().generation, Some(3));
        assert_eq!(o.metadata().resource_version, None);
        assert_eq!(live.resource_version, "42");
        assert_eq!(
            live.status["parents"][0]["controllerName"],
            "other.example/x"
        );
    }

    #[test]
    fn status_only_change_is_not_a_change() {
        let w = watched()
            .into_iter()
            .find(|w| w.kind == Kind::Gateway)
            .unwrap();
        let mk = |rv: &str, status: Value| -> DynamicObject {
            serde_json::from_value(json!({
                "metadata": {"name": "g", "namespace": "ns", "resourceVersion": rv},
                "spec": {"gatewayClassName": "weir", "listeners": []},
                "status": status
            }))
            .unwrap()
        };
        let (a, _) = convert(&w, mk("1", json!({})));
        let (b, _) = convert(&w, mk("2", json!({"conditions": []})));
        assert_eq!(a.unwrap(), b.unwrap());
    }

    #[test]
    fn resource_versions_compare_numerically() {
        assert!(newer("10", "9"));
        assert!(!newer("9", "10"));
        assert!(newer("abc", "10"));
    }
}
