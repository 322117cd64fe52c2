//! gateway.networking.k8s.io/v1 `ListenerSet` (standard channel since Gateway API v1.5),
//! beside the experimental `XListenerSet` it replaces (gateway.networking.x-k8s.io/v1alpha1,
//! still served by clusters with the v1.4 experimental CRDs).
//!
//! Both kinds have the same spec and the same semantics, so they share
//! [`ListenerSetSpec`] and everything downstream reads either through
//! [`Object::as_listener_set`]. What differs is only the identity (group and kind in
//! `parentRef`s, ReferenceGrant `from`s and status) and, on the wire, that the v1
//! listener status has no `port`.

use serde::{Deserialize, Serialize};

use crate::gateway::ListenerSetSpec;
use crate::meta::ObjectMeta;
use crate::object::{Kind, Object, ObjectKey};

/// gateway.networking.k8s.io/v1 ListenerSet: listeners added to a Gateway by another
/// object (the parent Gateway must allow it in `spec.allowedListeners`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListenerSet {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec (the same as an XListenerSet's).
    pub spec: ListenerSetSpec,
}

impl ListenerSet {
    /// The Gateway this set names as its parent (`spec.parentRef`; its namespace defaults
    /// to the set's own).
    pub fn parent(&self) -> ObjectKey {
        self.spec.parent(&self.metadata.namespace)
    }
}

impl ListenerSetSpec {
    /// The Gateway `spec.parentRef` names, for a set in namespace `own_ns` (the
    /// namespace defaults to the set's own).
    pub fn parent(&self, own_ns: &str) -> ObjectKey {
        let pr = &self.parent_ref;
        let ns = pr
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(own_ns);
        ObjectKey::new(Kind::Gateway, ns, &pr.name)
    }
}

impl Kind {
    /// Whether this kind is a listener set (`ListenerSet` or `XListenerSet`).
    pub fn is_listener_set(self) -> bool {
        matches!(self, Kind::ListenerSet | Kind::XListenerSet)
    }
}

impl Object {
    /// The metadata and spec of a `ListenerSet` or an `XListenerSet`; `None` for other
    /// kinds.
    pub fn as_listener_set(&self) -> Option<(&ObjectMeta, &ListenerSetSpec)> {
        match self {
            Object::ListenerSet(s) => Some((&s.metadata, &s.spec)),
            Object::XListenerSet(s) => Some((&s.metadata, &s.spec)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{Kind, Object, ObjectKey};

    fn set(api_version: &str, kind: &str) -> serde_json::Value {
        json!({"apiVersion": api_version, "kind": kind,
               "metadata": {"name": "s", "namespace": "apps"},
               "spec": {"parentRef": {"name": "gw", "namespace": "infra"},
                        "listeners": [{"name": "https", "port": 443, "protocol": "HTTPS",
                                       "hostname": "a.example"}]}})
    }

    #[test]
    fn both_kinds_read_the_same_spec() {
        let v1 = Object::from_value(set("gateway.networking.k8s.io/v1", "ListenerSet")).unwrap();
        let x = Object::from_value(set("gateway.networking.x-k8s.io/v1alpha1", "XListenerSet"))
            .unwrap();
        assert_eq!(v1.kind(), Kind::ListenerSet);
        assert_eq!(x.kind(), Kind::XListenerSet);
        assert_eq!(v1.as_listener_set(), x.as_listener_set());
        let (_, spec) = v1.as_listener_set().unwrap();
        assert_eq!(
            spec.parent("apps"),
            ObjectKey::new(Kind::Gateway, "infra", "gw")
        );
        assert_eq!(spec.listeners[0].port, 443);
        assert!(Kind::ListenerSet.is_listener_set() && Kind::XListenerSet.is_listener_set());
        assert!(!Kind::Gateway.is_listener_set());
    }

    #[test]
    fn groups_are_not_mixed() {
        // ListenerSet is not in the experimental group, nor XListenerSet in the standard one.
        for (av, kind) in [
            ("gateway.networking.x-k8s.io/v1alpha1", "ListenerSet"),
            ("gateway.networking.k8s.io/v1", "XListenerSet"),
        ] {
            assert!(Object::from_value(set(av, kind)).is_err(), "{av} {kind}");
        }
    }

    #[test]
    fn parent_namespace_defaults_to_the_sets() {
        let mut v = set("gateway.networking.k8s.io/v1", "ListenerSet");
        v["spec"]["parentRef"] = json!({"name": "gw"});
        let o = Object::from_value(v).unwrap();
        let Object::ListenerSet(s) = &o else {
            panic!("{o:?}")
        };
        assert_eq!(s.parent(), ObjectKey::new(Kind::Gateway, "apps", "gw"));
    }
}
