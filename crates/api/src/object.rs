use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::core::{ConfigMap, EndpointSlice, Namespace, Secret, Service};
use crate::gateway::{
    BackendTlsPolicy, Gateway, GatewayClass, HttpRoute, ReferenceGrant, XListenerSet,
};
use crate::grpcroute::GrpcRoute;
use crate::ingress::{Ingress, IngressClass};
use crate::l4route::{TcpRoute, TlsRoute, UdpRoute};
use crate::listenerset::ListenerSet;
use crate::meta::ObjectMeta;
use crate::weir::{Backend, DirectResponse, TrafficPolicy};

/// The kinds weir reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// gateway.networking.k8s.io GatewayClass (cluster-scoped).
    GatewayClass,
    /// gateway.networking.k8s.io Gateway.
    Gateway,
    /// gateway.networking.k8s.io HTTPRoute.
    HttpRoute,
    /// gateway.networking.k8s.io ReferenceGrant.
    ReferenceGrant,
    /// networking.k8s.io Ingress.
    Ingress,
    /// networking.k8s.io IngressClass (cluster-scoped).
    IngressClass,
    /// v1 Secret.
    Secret,
    /// v1 Service.
    Service,
    /// discovery.k8s.io EndpointSlice.
    EndpointSlice,
    /// v1 Namespace (cluster-scoped).
    Namespace,
    /// weir.dev Backend.
    Backend,
    /// weir.dev DirectResponse.
    DirectResponse,
    /// gateway.networking.x-k8s.io XListenerSet (experimental; Gateway API up to v1.4).
    XListenerSet,
    /// gateway.networking.k8s.io ListenerSet (standard channel since Gateway API v1.5).
    ListenerSet,
    /// gateway.networking.k8s.io TLSRoute.
    TlsRoute,
    /// gateway.networking.k8s.io TCPRoute.
    TcpRoute,
    /// weir.dev TrafficPolicy.
    TrafficPolicy,
    /// gateway.networking.k8s.io GRPCRoute.
    GrpcRoute,
    /// gateway.networking.k8s.io UDPRoute.
    UdpRoute,
    /// v1 ConfigMap (CA certificates of BackendTLSPolicies and client validation).
    ConfigMap,
    /// gateway.networking.k8s.io BackendTLSPolicy.
    BackendTlsPolicy,
}

impl Kind {
    /// The `kind` field value.
    pub fn name(self) -> &'static str {
        match self {
            Kind::GatewayClass => "GatewayClass",
            Kind::Gateway => "Gateway",
            Kind::HttpRoute => "HTTPRoute",
            Kind::ReferenceGrant => "ReferenceGrant",
            Kind::Ingress => "Ingress",
            Kind::IngressClass => "IngressClass",
            Kind::Secret => "Secret",
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Namespace => "Namespace",
            Kind::Backend => "Backend",
            Kind::DirectResponse => "DirectResponse",
            Kind::XListenerSet => "XListenerSet",
            Kind::ListenerSet => "ListenerSet",
            Kind::TlsRoute => "TLSRoute",
            Kind::TcpRoute => "TCPRoute",
            Kind::TrafficPolicy => "TrafficPolicy",
            Kind::GrpcRoute => "GRPCRoute",
            Kind::UdpRoute => "UDPRoute",
            Kind::ConfigMap => "ConfigMap",
            Kind::BackendTlsPolicy => "BackendTLSPolicy",
        }
    }

    /// The API group (`""` for core).
    pub fn group(self) -> &'static str {
        match self {
            Kind::GatewayClass
            | Kind::Gateway
            | Kind::HttpRoute
            | Kind::ReferenceGrant
            | Kind::ListenerSet
            | Kind::TlsRoute
            | Kind::TcpRoute
            | Kind::UdpRoute
            | Kind::GrpcRoute
            | Kind::BackendTlsPolicy => "gateway.networking.k8s.io",
            Kind::Ingress | Kind::IngressClass => "networking.k8s.io",
            Kind::Secret | Kind::Service | Kind::Namespace | Kind::ConfigMap => "",
            Kind::EndpointSlice => "discovery.k8s.io",
            Kind::Backend | Kind::DirectResponse | Kind::TrafficPolicy => "weir.dev",
            Kind::XListenerSet => "gateway.networking.x-k8s.io",
        }
    }

    /// Whether objects of this kind live in a namespace.
    pub fn namespaced(self) -> bool {
        !matches!(
            self,
            Kind::GatewayClass | Kind::IngressClass | Kind::Namespace
        )
    }

    pub(crate) fn from_type(api_version: &str, kind: &str) -> Option<Kind> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let k = match kind {
            "GatewayClass" => Kind::GatewayClass,
            "Gateway" => Kind::Gateway,
            "HTTPRoute" => Kind::HttpRoute,
            "ReferenceGrant" => Kind::ReferenceGrant,
            "Ingress" => Kind::Ingress,
            "IngressClass" => Kind::IngressClass,
            "Secret" => Kind::Secret,
            "Service" => Kind::Service,
            "EndpointSlice" => Kind::EndpointSlice,
            "Namespace" => Kind::Namespace,
            "Backend" => Kind::Backend,
            "DirectResponse" => Kind::DirectResponse,
            "XListenerSet" => Kind::XListenerSet,
            "ListenerSet" => Kind::ListenerSet,
            "TLSRoute" => Kind::TlsRoute,
            "TCPRoute" => Kind::TcpRoute,
            "TrafficPolicy" => Kind::TrafficPolicy,
            "GRPCRoute" => Kind::GrpcRoute,
            "UDPRoute" => Kind::UdpRoute,
            "ConfigMap" => Kind::ConfigMap,
            "BackendTLSPolicy" => Kind::BackendTlsPolicy,
            _ => return None,
        };
        (k.group() == group).then_some(k)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Identity of an object: kind, namespace (empty for cluster-scoped kinds) and name.
///
/// One pointer to the parts, which clones share: the key is in every table of the
/// provider and the translator (objects, definitions, dependencies, attachments,
/// statuses), most of them hash tables with up to half their slots empty, and as three
/// inline fields it was 40 bytes in each slot. The parts are read through `Deref`
/// (`key.kind`, `key.namespace`, `key.name`). The parts carry their hash, computed once
/// (with a seed chosen per process, as the tables' own hashers are): a table hashes a key
/// without reading its strings, which at 1,000,000 objects are a cache miss each, and
/// equality compares the pointers, then the hashes, before the strings. Ordering is by
/// kind, namespace and name.
#[derive(Clone)]
pub struct ObjectKey(Arc<KeyParts>);

/// The parts of an [`ObjectKey`].
#[derive(Debug)]
pub struct KeyParts {
    /// Kind.
    pub kind: Kind,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
    hash: u64,
}

impl std::ops::Deref for ObjectKey {
    type Target = KeyParts;

    fn deref(&self) -> &KeyParts {
        &self.0
    }
}

impl PartialEq for ObjectKey {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (&*self.0, &*other.0);
        Arc::ptr_eq(&self.0, &other.0)
            || (a.hash == b.hash
                && a.kind == b.kind
                && a.name == b.name
                && a.namespace == b.namespace)
    }
}

impl Eq for ObjectKey {}

impl std::hash::Hash for ObjectKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.0.hash);
    }
}

impl PartialOrd for ObjectKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ObjectKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return std::cmp::Ordering::Equal;
        }
        let (a, b) = (&*self.0, &*other.0);
        (a.kind, &a.namespace, &a.name).cmp(&(b.kind, &b.namespace, &b.name))
    }
}

/// The seed of the keys' hashes: random per process, so that names chosen to collide
/// cannot be computed in advance.
fn key_hash(kind: Kind, namespace: &str, name: &str) -> u64 {
    use std::hash::BuildHasher;
    static SEED: std::sync::OnceLock<foldhash::fast::RandomState> = std::sync::OnceLock::new();
    SEED.get_or_init(Default::default)
        .hash_one((kind, namespace, name))
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectKey")
            .field("kind", &self.kind)
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish()
    }
}

impl ObjectKey {
    /// The hash a key of these parts has (its [`Hash`] writes this number alone), for
    /// lookups by borrowed parts that build (allocate) no key.
    pub fn hash_of(kind: Kind, namespace: &str, name: &str) -> u64 {
        key_hash(kind, namespace, name)
    }

    /// Whether this key has these parts.
    pub fn is(&self, kind: Kind, namespace: &str, name: &str) -> bool {
        self.kind == kind && *self.name == *name && *self.namespace == *namespace
    }

    /// Builds a key.
    pub fn new(kind: Kind, namespace: &str, name: &str) -> Self {
        Self::from_parts(kind, namespace.into(), name.into())
    }

    /// A key of strings already shared (an object's own name and namespace).
    pub fn from_parts(kind: Kind, namespace: Arc<str>, name: Arc<str>) -> Self {
        let hash = key_hash(kind, &namespace, &name);
        ObjectKey(Arc::new(KeyParts {
            kind,
            namespace,
            name,
            hash,
        }))
    }

    /// A key in namespace `ns` that shares its buffer: the key of an object another one
    /// refers to in its own namespace (an Ingress's Secret, Service or Backend), kept in
    /// the translator's dependency index for as long as the referrer exists.
    pub fn in_namespace(kind: Kind, ns: &Arc<str>, name: &str) -> Self {
        Self::in_namespace_shared(kind, ns, name.into())
    }

    /// [`ObjectKey::in_namespace`] for a name already in an `Arc` (a reference read into
    /// a shared string): 20,000 Ingresses naming one Backend hold one name.
    pub fn in_namespace_shared(kind: Kind, ns: &Arc<str>, name: Arc<str>) -> Self {
        Self::from_parts(kind, ns.clone(), name)
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// One object of a kind weir reads.
///
/// Kinds larger than 256 bytes are boxed, so that the enum (and each `Arc<Object>` the
/// provider and the translator keep) is the size of a Secret or an HTTPRoute rather than
/// of a Gateway: with 616-byte variants inline, 20,000 Secrets held 7 MiB of padding.
/// An Ingress fits (its rare large fields are boxed in [`crate::IngressSpec`]): boxed,
/// each one cost its 264-byte `Object` of padding plus a 384-byte box.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Object {
    GatewayClass(Box<GatewayClass>),
    Gateway(Box<Gateway>),
    HttpRoute(HttpRoute),
    ReferenceGrant(ReferenceGrant),
    Ingress(Ingress),
    IngressClass(IngressClass),
    Secret(Secret),
    ConfigMap(ConfigMap),
    Service(Service),
    EndpointSlice(EndpointSlice),
    Namespace(Namespace),
    Backend(Backend),
    DirectResponse(DirectResponse),
    XListenerSet(Box<XListenerSet>),
    ListenerSet(Box<ListenerSet>),
    TlsRoute(TlsRoute),
    TcpRoute(TcpRoute),
    TrafficPolicy(Box<TrafficPolicy>),
    GrpcRoute(GrpcRoute),
    UdpRoute(UdpRoute),
    BackendTlsPolicy(Box<BackendTlsPolicy>),
}

/// Why a document could not be read as an object. Names the field when it can.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidObject {
    /// The document is not valid YAML (syntax, duplicate keys, nesting or alias budget).
    #[error("invalid YAML: {0}")]
    Syntax(String),
    /// The document is not a mapping with `apiVersion` and `kind` strings.
    #[error("not a Kubernetes object: {0}")]
    NotAnObject(String),
    /// `apiVersion`/`kind` name a type weir does not read.
    #[error("unsupported kind {kind} (apiVersion {api_version})")]
    UnsupportedKind {
        /// The document's apiVersion.
        api_version: String,
        /// The document's kind.
        kind: String,
    },
    /// The object breaks rules the Kubernetes API server enforces (its CRD schema and CEL
    /// rules, or a core kind's validation): it would be refused on create.
    #[error("{object} is invalid: {}", .errors.join("; "))]
    Rejected {
        /// `Kind namespace/name` (or `Kind name`).
        object: String,
        /// Every problem, `field: what` in the API server's words.
        errors: Vec<String>,
    },
    /// A field has the wrong shape.
    #[error("{kind} {name}: field {field}: {message}")]
    Field {
        /// Kind.
        kind: Kind,
        /// `namespace/name` or `name` if known, else `?`.
        name: String,
        /// Path such as `spec.rules[0].matches[0].path.type`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl Object {
    /// Reads an object from a JSON-shaped value (a YAML document or an API server
    /// response). Namespaced kinds without a namespace get `default`.
    ///
    /// A field whose value is `null` reads as absent: the API server writes an emptied
    /// list (an EndpointSlice's `endpoints` after a scale to zero, its `ports`) as `null`,
    /// and Kubernetes treats `null` as unset for every optional field of every kind.
    pub fn from_value(value: Value) -> Result<Object, InvalidObject> {
        Self::read(value, true).map_err(|e| {
            e.unwrap_or_else(|| InvalidObject::NotAnObject("unreadable document".into()))
        })
    }

    /// [`from_value`](Self::from_value) without tracking what only a field error needs
    /// (the path of every value read, the object's display name), for bulk loads where
    /// nearly every document is valid: the same object when `from_value` succeeds, the
    /// same error when it is not about a field, and `Err(None)` when it is (call
    /// `from_value` on the same value for that error).
    pub fn from_value_quick(value: Value) -> Result<Object, Option<InvalidObject>> {
        Self::read(value, false)
    }

    /// `kind`'s object read straight from its JSON text (an API server's response item),
    /// without a `Value`: the same object [`from_value`](Self::from_value) reads from the
    /// text's `Value` (with `apiVersion` and `kind` naming `kind`), or `None` when this
    /// cannot be sure of that and the caller must take the `Value` path. It is not sure
    /// when the text holds `null` anywhere (`from_value` reads a `null` field as absent,
    /// serde as a type error or `None`), when a field does not read (a duplicate key, a
    /// wrong type: the `Value` path words the error) or when the name is missing.
    /// `apiVersion`, `kind` and `status` in the text are ignored, as the object types
    /// have no such fields.
    pub fn from_json_quick(kind: Kind, json: &str) -> Option<Object> {
        if json.contains("null") {
            return None;
        }
        let mut obj = Self::typed(kind, FromJson(json)).ok()?;
        let meta = obj.metadata_mut();
        if meta.name.is_empty() {
            return None;
        }
        normalize_namespace(kind, meta);
        Some(obj)
    }

    /// The object of `kind` that `reader` reads: the one place that maps a kind to its
    /// type.
    fn typed<R: ReadTyped>(kind: Kind, reader: R) -> Result<Object, Option<InvalidObject>> {
        Ok(match kind {
            Kind::GatewayClass => Object::GatewayClass(Box::new(reader.read()?)),
            Kind::Gateway => Object::Gateway(Box::new(reader.read()?)),
            Kind::HttpRoute => Object::HttpRoute(reader.read()?),
            Kind::ReferenceGrant => Object::ReferenceGrant(reader.read()?),
            Kind::Ingress => Object::Ingress(reader.read()?),
            Kind::IngressClass => Object::IngressClass(reader.read()?),
            Kind::Secret => {
                let mut s: Secret = reader.read()?;
                s.pack_tls();
                Object::Secret(s)
            }
            Kind::Service => Object::Service(reader.read()?),
            Kind::EndpointSlice => Object::EndpointSlice(reader.read()?),
            Kind::Namespace => Object::Namespace(reader.read()?),
            Kind::Backend => Object::Backend(reader.read()?),
            Kind::DirectResponse => Object::DirectResponse(reader.read()?),
            Kind::XListenerSet => Object::XListenerSet(Box::new(reader.read()?)),
            Kind::ListenerSet => Object::ListenerSet(Box::new(reader.read()?)),
            Kind::TlsRoute => Object::TlsRoute(reader.read()?),
            Kind::TcpRoute => Object::TcpRoute(reader.read()?),
            Kind::TrafficPolicy => Object::TrafficPolicy(Box::new(reader.read()?)),
            Kind::GrpcRoute => Object::GrpcRoute(reader.read()?),
            Kind::UdpRoute => Object::UdpRoute(reader.read()?),
            Kind::ConfigMap => Object::ConfigMap(reader.read()?),
            Kind::BackendTlsPolicy => Object::BackendTlsPolicy(Box::new(reader.read()?)),
        })
    }

    /// Reads the object; `precise`: report a field error with its path (without it, a
    /// field error is `None`).
    fn read(mut value: Value, precise: bool) -> Result<Object, Option<InvalidObject>> {
        drop_null_fields(&mut value);
        let Value::Object(map) = &value else {
            return Err(Some(InvalidObject::NotAnObject(
                "document is not a mapping".into(),
            )));
        };
        let field = |f: &str| map.get(f).and_then(Value::as_str);
        let (Some(api_version), Some(kind_name)) = (field("apiVersion"), field("kind")) else {
            return Err(Some(InvalidObject::NotAnObject(
                "missing apiVersion or kind".into(),
            )));
        };
        let Some(kind) = Kind::from_type(api_version, kind_name) else {
            return Err(Some(InvalidObject::UnsupportedKind {
                api_version: api_version.to_owned(),
                kind: kind_name.to_owned(),
            }));
        };
        let display_name = if !precise {
            String::new()
        } else {
            let meta = map.get("metadata");
            let get = |f| {
                meta.and_then(|m| m.get(f))
                    .and_then(Value::as_str)
                    .unwrap_or("")
            };
            match (get("namespace"), get("name")) {
                (_, "") => "?".to_string(),
                ("", n) => n.to_string(),
                (ns, n) => format!("{ns}/{n}"),
            }
        };
        let mut obj = Self::typed(
            kind,
            FromValue {
                value,
                kind,
                name: &display_name,
                precise,
            },
        )?;
        let meta = obj.metadata_mut();
        if meta.name.is_empty() {
            return Err(precise.then(|| InvalidObject::Field {
                kind,
                name: display_name,
                field: "metadata.name".into(),
                message: "required".into(),
            }));
        }
        normalize_namespace(kind, meta);
        Ok(obj)
    }

    /// The object's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Object::GatewayClass(_) => Kind::GatewayClass,
            Object::Gateway(_) => Kind::Gateway,
            Object::HttpRoute(_) => Kind::HttpRoute,
            Object::ReferenceGrant(_) => Kind::ReferenceGrant,
            Object::Ingress(_) => Kind::Ingress,
            Object::IngressClass(_) => Kind::IngressClass,
            Object::Secret(_) => Kind::Secret,
            Object::Service(_) => Kind::Service,
            Object::EndpointSlice(_) => Kind::EndpointSlice,
            Object::Namespace(_) => Kind::Namespace,
            Object::Backend(_) => Kind::Backend,
            Object::DirectResponse(_) => Kind::DirectResponse,
            Object::XListenerSet(_) => Kind::XListenerSet,
            Object::ListenerSet(_) => Kind::ListenerSet,
            Object::TlsRoute(_) => Kind::TlsRoute,
            Object::TcpRoute(_) => Kind::TcpRoute,
            Object::TrafficPolicy(_) => Kind::TrafficPolicy,
            Object::GrpcRoute(_) => Kind::GrpcRoute,
            Object::UdpRoute(_) => Kind::UdpRoute,
            Object::ConfigMap(_) => Kind::ConfigMap,
            Object::BackendTlsPolicy(_) => Kind::BackendTlsPolicy,
        }
    }

    /// The object's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Object::GatewayClass(o) => &o.metadata,
            Object::Gateway(o) => &o.metadata,
            Object::HttpRoute(o) => &o.metadata,
            Object::ReferenceGrant(o) => &o.metadata,
            Object::Ingress(o) => &o.metadata,
            Object::IngressClass(o) => &o.metadata,
            Object::Secret(o) => &o.metadata,
            Object::Service(o) => &o.metadata,
            Object::EndpointSlice(o) => &o.metadata,
            Object::Namespace(o) => &o.metadata,
            Object::Backend(o) => &o.metadata,
            Object::DirectResponse(o) => &o.metadata,
            Object::XListenerSet(o) => &o.metadata,
            Object::ListenerSet(o) => &o.metadata,
            Object::TlsRoute(o) => &o.metadata,
            Object::TcpRoute(o) => &o.metadata,
            Object::TrafficPolicy(o) => &o.metadata,
            Object::GrpcRoute(o) => &o.metadata,
            Object::UdpRoute(o) => &o.metadata,
            Object::ConfigMap(o) => &o.metadata,
            Object::BackendTlsPolicy(o) => &o.metadata,
        }
    }

    /// The object's metadata, to change (a reader clearing what it does not keep).
    pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Object::GatewayClass(o) => &mut o.metadata,
            Object::Gateway(o) => &mut o.metadata,
            Object::HttpRoute(o) => &mut o.metadata,
            Object::ReferenceGrant(o) => &mut o.metadata,
            Object::Ingress(o) => &mut o.metadata,
            Object::IngressClass(o) => &mut o.metadata,
            Object::Secret(o) => &mut o.metadata,
            Object::Service(o) => &mut o.metadata,
            Object::EndpointSlice(o) => &mut o.metadata,
            Object::Namespace(o) => &mut o.metadata,
            Object::Backend(o) => &mut o.metadata,
            Object::DirectResponse(o) => &mut o.metadata,
            Object::XListenerSet(o) => &mut o.metadata,
            Object::ListenerSet(o) => &mut o.metadata,
            Object::TlsRoute(o) => &mut o.metadata,
            Object::TcpRoute(o) => &mut o.metadata,
            Object::TrafficPolicy(o) => &mut o.metadata,
            Object::GrpcRoute(o) => &mut o.metadata,
            Object::UdpRoute(o) => &mut o.metadata,
            Object::ConfigMap(o) => &mut o.metadata,
            Object::BackendTlsPolicy(o) => &mut o.metadata,
        }
    }

    /// The object's key.
    pub fn key(&self) -> ObjectKey {
        let m = self.metadata();
        ObjectKey::from_parts(self.kind(), m.namespace.clone(), m.name.clone())
    }
}

/// Reads one typed object (the type chosen by [`Object::typed`]).
trait ReadTyped {
    fn read<T: DeserializeOwned>(self) -> Result<T, Option<InvalidObject>>;
}

/// From a `Value`; `precise`: a field error names its path (else it is `None`).
struct FromValue<'a> {
    value: Value,
    kind: Kind,
    /// The object's display name, for a field error.
    name: &'a str,
    precise: bool,
}

impl ReadTyped for FromValue<'_> {
    fn read<T: DeserializeOwned>(self) -> Result<T, Option<InvalidObject>> {
        if !self.precise {
            return T::deserialize(self.value).map_err(|_| None);
        }
        serde_path_to_error::deserialize(self.value).map_err(|e| {
            Some(InvalidObject::Field {
                kind: self.kind,
                name: self.name.to_string(),
                field: e.path().to_string(),
                message: e.into_inner().to_string(),
            })
        })
    }
}

/// From JSON text; any error is `None`.
struct FromJson<'a>(&'a str);

impl ReadTyped for FromJson<'_> {
    fn read<T: DeserializeOwned>(self) -> Result<T, Option<InvalidObject>> {
        serde_json::from_str(self.0).map_err(|_| None)
    }
}

/// Removes every mapping entry whose value is `null`, at any depth (see
/// [`Object::from_value`]). List items are kept as they are: a `null` item is an error.
fn drop_null_fields(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_null_fields);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null_fields),
        _ => {}
    }
}

/// Namespaced kinds without a namespace get `default`; cluster-scoped kinds get none.
pub(crate) fn normalize_namespace(kind: Kind, meta: &mut ObjectMeta) {
    if kind.namespaced() {
        if meta.namespace.is_empty() {
            meta.namespace = crate::meta::shared_str("default");
        }
    } else if !meta.namespace.is_empty() {
        meta.namespace = crate::meta::shared_str("");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An Ingress read from JSON text holds its lists at their length, as one read
    /// from a `Value` does (serde reads text lists without knowing their length).
    #[test]
    fn ingress_lists_read_from_text_hold_no_spare_room() {
        let text = json!({
            "metadata": {"name": "i", "namespace": "ns"},
            "spec": {"tls": [{"hosts": ["a.example"], "secretName": "s"}],
                     "rules": [{"host": "a.example", "http": {"paths": [
                         {"path": "/", "pathType": "Prefix",
                          "backend": {"service": {"name": "svc", "port": {"number": 80}}}}]}}]}
        })
        .to_string();
        let Some(Object::Ingress(i)) = Object::from_json_quick(Kind::Ingress, &text) else {
            panic!("an Ingress");
        };
        let spec = &i.spec;
        let paths = &spec.rules[0].http.as_ref().unwrap().paths;
        assert_eq!(
            [
                spec.tls.capacity(),
                spec.tls[0].hosts.capacity(),
                spec.rules.capacity(),
                paths.capacity()
            ],
            [1, 1, 1, 1]
        );
    }

    /// Keys built apart are equal, hash alike and order by kind, namespace and name,
    /// whatever the pointers; a key is one pointer.
    #[test]
    fn keys_built_apart_are_one_key() {
        use std::collections::HashSet;
        assert_eq!(std::mem::size_of::<ObjectKey>(), 8);
        let a = ObjectKey::new(Kind::HttpRoute, "ns", "r");
        let b = ObjectKey::from_parts(Kind::HttpRoute, "ns".into(), "r".into());
        assert!(!Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(a, b);
        assert_eq!(a.cmp(&b), std::cmp::Ordering::Equal);
        let set: HashSet<ObjectKey> = [a.clone()].into();
        assert!(set.contains(&b));
        for other in [
            ObjectKey::new(Kind::GrpcRoute, "ns", "r"),
            ObjectKey::new(Kind::HttpRoute, "ns2", "r"),
            ObjectKey::new(Kind::HttpRoute, "ns", "r2"),
            ObjectKey::new(Kind::HttpRoute, "n", "sr"),
        ] {
            assert_ne!(a, other);
            assert!(!set.contains(&other));
        }
        let mut keys = vec![
            ObjectKey::new(Kind::Secret, "a", "x"),
            ObjectKey::new(Kind::HttpRoute, "b", "a"),
            ObjectKey::new(Kind::HttpRoute, "a", "z"),
            ObjectKey::new(Kind::HttpRoute, "a", "b"),
        ];
        keys.sort();
        let names: Vec<String> = keys.iter().map(ToString::to_string).collect();
        let mut by_parts = keys.clone();
        by_parts.sort_by(|x, y| {
            (x.kind, &*x.namespace, &*x.name).cmp(&(y.kind, &*y.namespace, &*y.name))
        });
        assert_eq!(keys, by_parts, "{names:?}");
        assert_eq!(
            format!("{a:?}"),
            r#"ObjectKey { kind: HttpRoute, namespace: "ns", name: "r" }"#
        );
    }

    /// An Ingress sits inline without growing the enum past its largest inline kind (a
    /// Secret): every object the provider and the translator keep is that size.
    #[test]
    fn ingress_inline_does_not_grow_objects() {
        use std::mem::size_of;
        assert!(size_of::<Ingress>() <= size_of::<Secret>());
        assert!(size_of::<Object>() <= size_of::<Secret>() + size_of::<usize>());
    }

    #[test]
    fn reads_route_and_defaults_namespace() {
        let o = Object::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r"},
            "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"matches": [{"path": {"type": "Exact", "value": "/x"}}]}]}
        }))
        .unwrap();
        assert_eq!(o.key(), ObjectKey::new(Kind::HttpRoute, "default", "r"));
    }

    #[test]
    fn names_the_bad_field() {
        let e = Object::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {"rules": [{"matches": [{"path": {"value": 5}}]}]}
        }))
        .unwrap_err();
        match e {
            InvalidObject::Field { field, name, .. } => {
                assert_eq!(field, "spec.rules[0].matches[0].path.value");
                assert_eq!(name, "ns/r");
            }
            other => panic!("{other:?}"),
        }
    }

    /// What the API server returns for a slice of a Service scaled to zero.
    #[test]
    fn null_lists_read_as_empty() {
        let o = Object::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "echo-abc", "namespace": "ns", "labels": null,
                         "annotations": null},
            "addressType": "IPv4", "endpoints": null, "ports": null
        }))
        .unwrap();
        let Object::EndpointSlice(s) = o else {
            panic!("{o:?}")
        };
        assert!(s.endpoints.is_empty() && s.ports.is_empty());
        let o = Object::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r"},
            "spec": {"parentRefs": null, "hostnames": null,
                     "rules": [{"matches": null, "filters": null, "backendRefs": null}]}
        }));
        assert!(o.is_ok(), "{o:?}");
        let o = Object::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "type": "kubernetes.io/tls", "data": null, "stringData": null
        }));
        assert!(o.is_ok(), "{o:?}");
    }

    /// Every version of TLSRoute that Gateway API releases serve reads into one type.
    #[test]
    fn reads_l4_routes_of_every_served_version() {
        for v in ["v1alpha2", "v1alpha3", "v1"] {
            let o = Object::from_value(json!({
                "apiVersion": format!("gateway.networking.k8s.io/{v}"), "kind": "TLSRoute",
                "metadata": {"name": "t"},
                "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["a.example"],
                         "rules": [{"backendRefs": [{"name": "s", "port": 443, "weight": 2}]}]}
            }))
            .unwrap();
            let Object::TlsRoute(t) = o else {
                panic!("{o:?}")
            };
            assert_eq!(t.spec.rules[0].backend_refs[0].name, "s");
            assert_eq!(t.spec.rules[0].backend_refs[0].weight, Some(2));
        }
        let o = Object::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": "TCPRoute",
            "metadata": {"name": "t", "namespace": "ns"},
            "spec": {"parentRefs": [{"name": "gw"}],
                     "rules": [{"backendRefs": [{"name": "s", "port": 5432}]}]}
        }))
        .unwrap();
        assert_eq!(o.key(), ObjectKey::new(Kind::TcpRoute, "ns", "t"));
    }

    /// UDPRoute: v1 and v1alpha2 read into one type; what the CRD schema refuses (no
    /// rules, a Service reference without a port, a weight out of range) is refused on
    /// both read paths with its field.
    #[test]
    fn reads_udp_route() {
        let route = |spec: serde_json::Value| {
            let v = json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "UDPRoute",
                "metadata": {"name": "u", "namespace": "ns"}, "spec": spec,
            });
            Object::from_value(v).map_err(|e| e.to_string())
        };
        let o = route(json!({"parentRefs": [{"name": "gw"}],
            "rules": [{"backendRefs": [{"name": "dns", "port": 53, "weight": 2}]}]}))
        .unwrap();
        assert_eq!(o.key(), ObjectKey::new(Kind::UdpRoute, "ns", "u"));
        // A Backend (not a Service) needs no port.
        route(json!({"rules": [{"backendRefs": [{"group": "weir.dev", "kind": "Backend", "name": "b"}]}]}))
            .unwrap();
    }

    /// GRPCRoute: matches, filters and backends read; `null` reads as absent, and the
    /// fast path agrees with `from_value`.
    #[test]
    fn reads_grpc_route() {
        let v = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GRPCRoute",
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"parentRefs": [{"name": "gw"}], "hostnames": null,
                     "rules": [{"name": "r0",
                                "matches": [{"method": {"service": "pkg.Svc", "method": "Get",
                                                        "type": null},
                                             "headers": [{"name": "version", "value": "2"}]}],
                                "filters": [{"type": "RequestHeaderModifier",
                                             "requestHeaderModifier": {"set": [{"name": "x", "value": "y"}]}}],
                                "backendRefs": [{"name": "s", "port": 8080, "weight": 3,
                                                 "filters": null}]},
                               {"matches": null, "backendRefs": null}]}
        });
        let o = Object::from_value(v.clone()).unwrap();
        assert_eq!(o.key(), ObjectKey::new(Kind::GrpcRoute, "ns", "g"));
        let Object::GrpcRoute(g) = &o else {
            panic!("{o:?}")
        };
        let m = g.spec.rules[0].matches[0].method.as_ref().unwrap();
        assert_eq!(m.service.as_deref(), Some("pkg.Svc"));
        assert_eq!(m.type_, None);
        assert_eq!(g.spec.rules[0].matches[0].headers[0].value, "2");
        assert_eq!(g.spec.rules[0].backend_refs[0].weight, Some(3));
        assert_eq!(g.spec.rules[0].name.as_deref(), Some("r0"));
        assert!(g.spec.rules[1].matches.is_empty());
    }

    #[test]
    fn rejects_wrong_group() {
        let e = Object::from_value(
            json!({"apiVersion": "v1", "kind": "HTTPRoute", "metadata": {"name": "r"}}),
        );
        assert!(matches!(e, Err(InvalidObject::UnsupportedKind { .. })));
    }
}
