//! weir.dev/v1alpha1 kinds: static backends and direct responses.

use serde::{Deserialize, Serialize};

use crate::meta::ObjectMeta;

/// A static backend outside Kubernetes: `endpoints` are `host:port` strings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Backend {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: BackendSpec,
}

/// Backend spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BackendSpec {
    /// `host:port` (IP literal or DNS name; IPv6 as `[::1]:80`).
    pub endpoints: Vec<String>,
    /// `HTTP` (HTTP/1.1, default) or `H2C` (HTTP/2 prior knowledge).
    pub protocol: Option<String>,
}

/// A fixed response, used from an HTTPRoute filter
/// `{type: ExtensionRef, extensionRef: {group: weir.dev, kind: DirectResponse, name}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DirectResponse {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: DirectResponseSpec,
}

/// DirectResponse spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DirectResponseSpec {
    /// Status code; default 200.
    pub status: Option<i32>,
    /// Response headers.
    pub headers: Vec<HeaderValue>,
    /// Body text.
    pub body: Option<String>,
}

/// A header name and value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HeaderValue {
    /// Name.
    pub name: String,
    /// Value.
    pub value: String,
}
