//! The Kubernetes resources weir watches, and how an API object becomes a
//! [`weir_api::Object`].

use std::borrow::Cow;

use kube::Resource;
use kube::core::{ApiResource, DynamicResourceScope, ObjectMeta};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;
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

/// An object as the API server sent it: its JSON text, read into a typed [`Object`]
/// only by [`convert`]. kube's `DynamicObject` would read it into a `serde_json::Value`
/// first (through serde's buffered content, as its data is a flattened field), and the
/// object was then read from that `Value`: three trees built and dropped per object, the
/// largest part of the controller's CPU while it lists 100,000 Secrets and Ingresses.
/// The metadata kube's watcher reads (`resourceVersion`) and the key are read up front.
#[derive(Clone, Debug)]
pub(crate) struct RawObject {
    /// Only `name`, `namespace` and `resourceVersion`.
    pub(crate) meta: ObjectMeta,
    json: Box<RawValue>,
}

impl Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

impl<'de> Deserialize<'de> for RawObject {
    /// Needs serde_json's own deserializer (a list's items, a watch event whose `type`
    /// comes before its `object`, as the API server writes them).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawObject, D::Error> {
        #[derive(Deserialize)]
        struct Head {
            #[serde(default)]
            metadata: Option<HeadMeta>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct HeadMeta {
            name: Option<String>,
            namespace: Option<String>,
            resource_version: Option<String>,
        }
        let json = Box::<RawValue>::deserialize(d)?;
        let head: Head = serde_json::from_str(json.get()).map_err(serde::de::Error::custom)?;
        let meta = head
            .metadata
            .map_or_else(ObjectMeta::default, |m| ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                resource_version: m.resource_version,
                ..ObjectMeta::default()
            });
        Ok(RawObject { meta, json })
    }
}

#[cfg(test)]
impl RawObject {
    /// `value` as the API server would send it.
    pub(crate) fn from_value(value: &Value) -> RawObject {
        serde_json::from_str(&value.to_string()).expect("an object")
    }
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
/// status (read only for kinds whose status weir writes). The object is read without
/// `status`, `managedFields` and `resourceVersion`, so that a status write (ours or
/// another controller's) does not look like a change.
pub(crate) fn convert(w: &Watched, raw: RawObject) -> (Result<Object, InvalidObject>, Live) {
    let json = raw.json.get();
    let live = Live {
        resource_version: raw.meta.resource_version.unwrap_or_default(),
        status: if w.has_status {
            status_of(json)
        } else {
            Value::Null
        },
    };
    // Straight from the text when that reads the object the `Value` would (nearly
    // always); the object types have no `status` or `managedFields`.
    if let Some(mut o) = Object::from_json_quick(w.kind, json) {
        if let Some(s) = o.metadata_mut().server.as_mut() {
            s.resource_version = None;
        }
        return (Ok(o), live);
    }
    let mut value = match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(map)) => Value::Object(map),
        // Not an object: reported as one that is not.
        _ => Value::Null,
    };
    if let Value::Object(map) = &mut value {
        map.insert("apiVersion".into(), w.resource.api_version.clone().into());
        map.insert("kind".into(), w.resource.kind.clone().into());
        map.remove("status");
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            meta.remove("managedFields");
            meta.remove("resourceVersion");
        }
    }
    let object = match Object::from_value_quick(value.clone()) {
        Ok(o) => Ok(o),
        // Read again for the error's wording (the field's path).
        Err(None) => Object::from_value(value),
        Err(Some(e)) => Err(e),
    };
    (object, live)
}

/// The `status` of an object's JSON text (`Value::Null` when it has none).
fn status_of(json: &str) -> Value {
    #[derive(Deserialize)]
    struct StatusOnly {
        #[serde(default)]
        status: Value,
    }
    serde_json::from_str::<StatusOnly>(json).map_or(Value::Null, |s| s.status)
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
        let obj = RawObject::from_value(&json!({
            "metadata": {"name": "r", "namespace": "ns", "resourceVersion": "42",
                         "managedFields": [{"manager": "kubectl"}], "generation": 3},
            "spec": {"parentRefs": [{"name": "gw"}]},
            "status": {"parents": [{"controllerName": "other.example/x"}]}
        }));
        let (o, live) = convert(&w, obj);
        let o = o.unwrap();
        assert_eq!(o.kind(), Kind::HttpRoute);
        assert_eq!(o.metadata().generation(), Some(3));
        assert_eq!(o.metadata().resource_version(), None);
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
        let mk = |rv: &str, status: Value| -> RawObject {
            RawObject::from_value(&json!({
                "metadata": {"name": "g", "namespace": "ns", "resourceVersion": rv},
                "spec": {"gatewayClassName": "weir", "listeners": []},
                "status": status
            }))
        };
        let (a, _) = convert(&w, mk("1", json!({})));
        let (b, _) = convert(&w, mk("2", json!({"conditions": []})));
        assert_eq!(a.unwrap(), b.unwrap());
    }

    /// The fast path reads an object as the `Watched` entry's kind; the `Value` path as
    /// the kind its `apiVersion` and `kind` name. They must be the same.
    #[test]
    fn every_watched_resource_names_its_kind() {
        for w in watched() {
            assert_eq!(w.resource.kind, w.kind.name(), "{w:?}");
            assert_eq!(w.resource.group, w.kind.group(), "{w:?}");
        }
    }

    /// The same object and live status whether it is read from its text or (a `null`
    /// in it) through a `Value`: `resourceVersion`, `managedFields` and `status` are
    /// left out either way.
    #[test]
    fn text_and_value_paths_read_the_same_object() {
        let items = [
            (
                Kind::Secret,
                json!({
                    "metadata": {"name": "d1", "namespace": "default", "uid": "u-1",
                                 "resourceVersion": "1001",
                                 "creationTimestamp": "2026-12-02T20:14:40Z",
                                 "managedFields": [{"manager": "bench", "operation": "Update",
                                     "fieldsType": "FieldsV1",
                                     "fieldsV1": {"f:data": {".": {}, "f:tls.crt": {}}}}]},
                    "data": {"tls.crt": "Y3J0", "tls.key": "a2V5"},
                    "type": "kubernetes.io/tls"
                }),
            ),
            (
                Kind::Ingress,
                json!({
                    "metadata": {"name": "i", "namespace": "ns", "resourceVersion": "7",
                                 "generation": 2, "annotations": {"a": "b"}},
                    "spec": {"ingressClassName": "weir",
                             "tls": [{"hosts": ["a.example"], "secretName": "s"}],
                             "rules": [{"host": "a.example", "http": {"paths": [
                                 {"path": "/", "pathType": "Prefix", "backend":
                                     {"service": {"name": "svc", "port": {"number": 80}}}}]}}]},
                    "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}
                }),
            ),
            (
                Kind::HttpRoute,
                json!({
                    "metadata": {"name": "r", "namespace": "ns", "resourceVersion": "9"},
                    "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["a.example"]},
                    "status": {"parents": []}
                }),
            ),
        ];
        for (kind, item) in items {
            let w = watched().into_iter().find(|w| w.kind == kind).unwrap();
            let (quick, quick_live) = convert(&w, RawObject::from_value(&item));
            let mut with_null = item.clone();
            with_null["metadata"]["labels"] = Value::Null;
            let raw = RawObject::from_value(&with_null);
            assert!(Object::from_json_quick(kind, raw.json.get()).is_none());
            let (slow, slow_live) = convert(&w, raw);
            let quick = quick.unwrap();
            assert_eq!(quick, slow.unwrap(), "{kind}");
            assert_eq!(quick_live, slow_live, "{kind}");
            assert_eq!(quick.metadata().resource_version(), None);
            assert_eq!(
                quick_live.resource_version,
                item["metadata"]["resourceVersion"].as_str().unwrap()
            );
            if w.has_status {
                assert_eq!(
                    quick_live.status,
                    item.get("status").cloned().unwrap_or_default()
                );
            }
        }
    }

    /// A list's items and a watch event's object are read by serde_json itself (the
    /// raw text needs it), in the shapes the API server sends.
    #[test]
    fn lists_and_watch_events_carry_raw_objects() {
        let list: kube::core::ObjectList<RawObject> = serde_json::from_str(
            r#"{"kind":"SecretList","apiVersion":"v1","metadata":{"resourceVersion":"5"},
                "items":[{"metadata":{"name":"a","namespace":"n","resourceVersion":"4"},"type":"Opaque"}]}"#,
        )
        .unwrap();
        assert_eq!(list.items[0].meta.name.as_deref(), Some("a"));
        assert_eq!(list.items[0].meta.resource_version.as_deref(), Some("4"));
        let ev: kube::core::WatchEvent<RawObject> = serde_json::from_str(
            r#"{"type":"MODIFIED","object":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"a","namespace":"n","resourceVersion":"6"},"type":"Opaque"}}"#,
        )
        .unwrap();
        let kube::core::WatchEvent::Modified(o) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(o.meta.resource_version.as_deref(), Some("6"));
        let w = watched()
            .into_iter()
            .find(|w| w.kind == Kind::Secret)
            .unwrap();
        let (o, _) = convert(&w, o);
        assert_eq!(
            o.unwrap().key(),
            weir_api::ObjectKey::new(Kind::Secret, "n", "a")
        );
    }

    #[test]
    fn resource_versions_compare_numerically() {
        assert!(newer("10", "9"));
        assert!(!newer("9", "10"));
        assert!(newer("abc", "10"));
    }
}
