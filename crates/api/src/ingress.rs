//! networking.k8s.io/v1 Ingress and IngressClass.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::meta::ObjectMeta;

/// Ingress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Ingress {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: IngressSpec,
}

/// The annotation that named an Ingress's class before `spec.ingressClassName` existed.
pub const LEGACY_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

impl Ingress {
    /// The Ingress's class: `spec.ingressClassName`, else the legacy
    /// `kubernetes.io/ingress.class` annotation (as ingress-nginx reads it); `None` for a
    /// class-less Ingress.
    pub fn class(&self) -> Option<&str> {
        self.spec.ingress_class_name.as_deref().or_else(|| {
            self.metadata
                .annotations
                .get(LEGACY_CLASS_ANNOTATION)
                .map(|c| c.trim())
        })
    }
}

/// Ingress spec.
///
/// The class and the default backend are boxed (rare, and the backend is 128 bytes), so
/// that an [`Ingress`] is no larger than a Secret and sits inline in its
/// [`crate::Object`] (see there).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressSpec {
    /// Class; weir serves `weir` and (in standalone mode) Ingresses without a class.
    pub ingress_class_name: Option<Box<str>>,
    /// Backend for requests no rule matches.
    pub default_backend: Option<Box<IngressBackend>>,
    /// TLS hosts and their Secrets.
    #[serde(deserialize_with = "crate::meta::exact_vec")]
    pub tls: Vec<IngressTls>,
    /// Host rules.
    #[serde(deserialize_with = "crate::meta::exact_vec")]
    pub rules: Vec<IngressRule>,
}

/// An Ingress backend.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressBackend {
    /// A Service backend.
    pub service: Option<IngressServiceBackend>,
    /// A typed resource backend (weir: `weir.dev` `Backend`).
    pub resource: Option<TypedLocalObjectReference>,
}

/// A Service backend of an Ingress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressServiceBackend {
    /// Service name.
    pub name: String,
    /// Port by number or name.
    pub port: ServiceBackendPort,
}

/// A Service port by number or name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceBackendPort {
    /// Port number.
    pub number: Option<i32>,
    /// Port name.
    pub name: Option<String>,
}

/// A typed reference in the same namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TypedLocalObjectReference {
    /// API group.
    #[serde(deserialize_with = "crate::meta::shared_opt")]
    pub api_group: Option<Arc<str>>,
    /// Kind.
    #[serde(deserialize_with = "crate::meta::shared")]
    pub kind: Arc<str>,
    /// Name.
    #[serde(deserialize_with = "crate::meta::shared")]
    pub name: Arc<str>,
}

/// Ingress TLS entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressTls {
    /// Hosts the certificate serves.
    /// Shared: read with [`crate::shared_str`], the host a rule of the same Ingress names
    /// is the same buffer, and so is everything the translator builds from it.
    #[serde(deserialize_with = "crate::meta::shared_vec")]
    pub hosts: Vec<Arc<str>>,
    /// Secret (same namespace) with `tls.crt`/`tls.key`.
    pub secret_name: Option<String>,
}

/// Ingress rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressRule {
    /// Host (may be a `*.` wildcard covering one label, per the Ingress spec). Shared
    /// like the TLS hosts.
    #[serde(deserialize_with = "crate::meta::shared_opt")]
    pub host: Option<Arc<str>>,
    /// Paths.
    pub http: Option<HttpIngressRuleValue>,
}

/// The paths of an Ingress rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpIngressRuleValue {
    /// Paths.
    #[serde(deserialize_with = "crate::meta::exact_vec")]
    pub paths: Vec<HttpIngressPath>,
}

/// One Ingress path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpIngressPath {
    /// Path; default `/`.
    #[serde(deserialize_with = "crate::meta::shared_opt")]
    pub path: Option<Arc<str>>,
    /// `Exact`, `Prefix` or `ImplementationSpecific` (weir: same as `Prefix`).
    #[serde(deserialize_with = "crate::meta::shared")]
    pub path_type: Arc<str>,
    /// Backend.
    pub backend: IngressBackend,
}

/// IngressClass.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressClass {
    /// Metadata (cluster-scoped).
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: IngressClassSpec,
}

/// IngressClass spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressClassSpec {
    /// Controller, e.g. `weir.dev/ingress-controller`.
    pub controller: String,
}
