//! Reading an object straight from a self-describing deserializer, without building a
//! `serde_json::Value` first: the fast path for bulk loads of YAML files.

use std::fmt;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, Error as _, MapAccess, Visitor};

use crate::object::{Kind, Object, normalize_namespace};

impl Object {
    /// Reads an object directly from `deserializer` (for example a YAML parser), skipping
    /// the intermediate `serde_json::Value` of [`Object::from_value`]: about half the work
    /// for a large manifest.
    ///
    /// It only succeeds on the common shape: a mapping whose first two keys are
    /// `apiVersion` and `kind` (in either order), naming a kind weir reads, with a
    /// non-empty `metadata.name`. Anything else (a `List`, a late `kind`, a wrong field)
    /// is an error without detail: callers fall back to [`Object::from_value`], which
    /// names the problem. On success the object equals what `from_value` returns for the
    /// same data, provided the deserializer types scalars the way it does for a
    /// `serde_json::Value` (a deserializer more lenient than that, e.g. one reading a
    /// quoted `"80"` as a number, is accepted as is).
    pub fn deserialize_direct<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Object, D::Error> {
        deserializer.deserialize_map(DirectVisitor)
    }
}

struct DirectVisitor;

impl<'de> Visitor<'de> for DirectVisitor {
    type Value = Object;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object starting with apiVersion and kind")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object, A::Error> {
        let (mut api_version, mut kind_name): (Option<String>, Option<String>) = (None, None);
        while api_version.is_none() || kind_name.is_none() {
            let Some(key) = map.next_key::<String>()? else {
                return Err(A::Error::custom("missing apiVersion or kind"));
            };
            let slot = match key.as_str() {
                "apiVersion" if api_version.is_none() => &mut api_version,
                "kind" if kind_name.is_none() => &mut kind_name,
                _ => return Err(A::Error::custom("apiVersion and kind are not first")),
            };
            *slot = Some(map.next_value()?);
        }
        let (Some(api_version), Some(kind_name)) = (api_version, kind_name) else {
            return Err(A::Error::custom("missing apiVersion or kind"));
        };
        let Some(kind) = Kind::from_type(&api_version, &kind_name) else {
            return Err(A::Error::custom("not a kind weir reads"));
        };
        // The rest of the mapping is the typed object's own fields.
        let rest = MapAccessDeserializer::new(map);
        let mut obj = match kind {
            Kind::GatewayClass => Object::GatewayClass(Deserialize::deserialize(rest)?),
            Kind::Gateway => Object::Gateway(Deserialize::deserialize(rest)?),
            Kind::HttpRoute => Object::HttpRoute(Deserialize::deserialize(rest)?),
            Kind::ReferenceGrant => Object::ReferenceGrant(Deserialize::deserialize(rest)?),
            Kind::Ingress => Object::Ingress(Deserialize::deserialize(rest)?),
            Kind::IngressClass => Object::IngressClass(Deserialize::deserialize(rest)?),
            Kind::Secret => Object::Secret(Deserialize::deserialize(rest)?),
            Kind::Service => Object::Service(Deserialize::deserialize(rest)?),
            Kind::EndpointSlice => Object::EndpointSlice(Deserialize::deserialize(rest)?),
            Kind::Namespace => Object::Namespace(Deserialize::deserialize(rest)?),
            Kind::Backend => Object::Backend(Deserialize::deserialize(rest)?),
            Kind::DirectResponse => Object::DirectResponse(Deserialize::deserialize(rest)?),
            Kind::XListenerSet => Object::XListenerSet(Deserialize::deserialize(rest)?),
            Kind::ListenerSet => Object::ListenerSet(Deserialize::deserialize(rest)?),
            Kind::TlsRoute => Object::TlsRoute(Deserialize::deserialize(rest)?),
            Kind::TcpRoute => Object::TcpRoute(Deserialize::deserialize(rest)?),
            Kind::TrafficPolicy => Object::TrafficPolicy(Deserialize::deserialize(rest)?),
            Kind::GrpcRoute => Object::GrpcRoute(Deserialize::deserialize(rest)?),
            Kind::UdpRoute => Object::UdpRoute(Deserialize::deserialize(rest)?),
        };
        let meta = obj.metadata_mut();
        if meta.name.is_empty() {
            return Err(A::Error::custom("metadata.name is required"));
        }
        normalize_namespace(kind, meta);
        Ok(obj)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{Kind, Object, ObjectKey};

    fn both(v: serde_json::Value) -> (Result<Object, String>, Result<Object, String>) {
        let direct = Object::deserialize_direct(&v).map_err(|e| e.to_string());
        let slow = Object::from_value(v).map_err(|e| e.to_string());
        (direct, slow)
    }

    #[test]
    fn agrees_with_from_value() {
        let (d, s) = both(json!({
            "kind": "Ingress", "apiVersion": "networking.k8s.io/v1",
            "metadata": {"name": "i"},
            "spec": {"rules": [{"host": "a.example", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "s", "port": {"number": 80}}}}]}}]}
        }));
        assert_eq!(d, s);
        let d = d.unwrap();
        assert_eq!(d.key(), ObjectKey::new(Kind::Ingress, "default", "i"));
        // Cluster-scoped kinds lose a namespace.
        let (d, s) = both(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "n", "namespace": "x"}}));
        assert_eq!(d, s);
        assert_eq!(d.unwrap().metadata().namespace, "");
    }

    #[test]
    fn declines_what_needs_from_value() {
        for v in [
            // unsupported kind, List (a `kind` after other keys is covered where YAML keeps
            // key order: serde_json sorts them)
            json!({"apiVersion": "v1", "kind": "List", "items": []}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment"}),
            // missing name, wrong field type
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": 5}}),
            json!("not a mapping"),
        ] {
            assert!(Object::deserialize_direct(&v).is_err(), "{v}");
        }
    }
}
