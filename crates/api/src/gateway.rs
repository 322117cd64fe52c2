//! gateway.networking.k8s.io/v1 (and v1beta1 ReferenceGrant) types.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::meta::{LabelSelector, ObjectMeta};

/// GatewayClass.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayClass {
    /// Metadata (cluster-scoped).
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: GatewayClassSpec,
}

/// GatewayClass spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayClassSpec {
    /// The controller that owns Gateways of this class.
    pub controller_name: String,
    /// Implementation parameters (weir: a ConfigMap of data-plane provisioning settings).
    pub parameters_ref: Option<ParametersReference>,
}

/// A GatewayClass `parametersRef`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ParametersReference {
    /// API group (`""` for core).
    pub group: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace (for namespaced kinds).
    pub namespace: Option<String>,
}

/// A Gateway's `infrastructure`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayInfrastructure {
    /// Labels for every object provisioned for the Gateway (at most 8; weir's own labels,
    /// the selectors of what it provisions, win over a user label of the same key).
    pub labels: BTreeMap<String, String>,
    /// Annotations for every object provisioned for the Gateway (at most 16).
    pub annotations: BTreeMap<String, String>,
    /// Implementation parameters in the Gateway's namespace (weir: a ConfigMap).
    pub parameters_ref: Option<LocalParametersReference>,
}

/// A Gateway `infrastructure.parametersRef` (same namespace as the Gateway).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalParametersReference {
    /// API group (`""` for core).
    pub group: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Name.
    pub name: String,
}

/// Gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Gateway {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: GatewaySpec,
}

/// Gateway spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewaySpec {
    /// Name of the GatewayClass.
    pub gateway_class_name: String,
    /// Requested addresses; in standalone mode an `IPAddress` is the bind address.
    pub addresses: Vec<GatewayAddress>,
    /// Listeners.
    pub listeners: Vec<GatewayListener>,
    /// Infrastructure settings (parameters for the provisioned data plane).
    pub infrastructure: Option<GatewayInfrastructure>,
    /// Which ListenerSets (and XListenerSets) may add listeners to this Gateway (none
    /// when unset).
    pub allowed_listeners: Option<AllowedListeners>,
    /// Gateway-wide TLS settings: the client certificate presented to backends and the
    /// validation of client certificates on HTTPS listeners.
    pub tls: Option<GatewayTlsSettings>,
}

/// A Gateway's `spec.tls`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayTlsSettings {
    /// TLS towards backends (BackendTLSPolicy connections).
    pub backend: Option<GatewayBackendTls>,
    /// TLS towards clients: client certificate validation.
    pub frontend: Option<FrontendTlsConfig>,
}

/// `spec.tls.backend`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayBackendTls {
    /// A `kubernetes.io/tls` Secret the Gateway presents when a backend asks for a client
    /// certificate.
    pub client_certificate_ref: Option<SecretObjectReference>,
}

/// `spec.tls.frontend`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FrontendTlsConfig {
    /// Settings for every HTTPS listener without a `perPort` entry.
    pub default: TlsConfig,
    /// Settings for the HTTPS listeners of one port.
    pub per_port: Vec<TlsPortConfig>,
}

/// One port's entry of `spec.tls.frontend.perPort`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TlsPortConfig {
    /// The listener port.
    pub port: i32,
    /// Its settings.
    pub tls: TlsConfig,
}

/// Frontend TLS settings of a port (or the default).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TlsConfig {
    /// Client certificate validation; absent: clients are not asked for one.
    pub validation: Option<FrontendTlsValidation>,
}

/// `validation` of a frontend TLS setting.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FrontendTlsValidation {
    /// CA certificates client certificates must chain to (a ConfigMap's `ca.crt`).
    pub ca_certificate_refs: Vec<ObjectReference>,
    /// `AllowValidOnly` (default) or `AllowInsecureFallback`.
    pub mode: Option<String>,
}

/// A reference to an object of any kind, possibly in another namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectReference {
    /// Group (`""` for core).
    pub group: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace; default the referrer's (another needs a ReferenceGrant).
    pub namespace: Option<String>,
}

/// `spec.allowedListeners` of a Gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AllowedListeners {
    /// Namespaces XListenerSets may come from.
    pub namespaces: Option<ListenerNamespaces>,
}

/// `allowedListeners.namespaces`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListenerNamespaces {
    /// `None` (default), `Same`, `All` or `Selector`.
    pub from: Option<String>,
    /// Selector over Namespace labels when `from: Selector`.
    pub selector: Option<LabelSelector>,
}

/// gateway.networking.x-k8s.io/v1alpha1 XListenerSet: listeners added to a Gateway by
/// another object, so that one Gateway can serve more than 64 listeners and each
/// domain's listener can live (and change) on its own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct XListenerSet {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: ListenerSetSpec,
}

/// ListenerSet and XListenerSet spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListenerSetSpec {
    /// The Gateway the listeners are added to.
    pub parent_ref: ParentGatewayReference,
    /// The listeners (same shape as a Gateway's).
    pub listeners: Vec<GatewayListener>,
}

impl XListenerSet {
    /// The Gateway this set names as its parent (`spec.parentRef`; its namespace defaults
    /// to the set's own).
    pub fn parent(&self) -> crate::ObjectKey {
        self.spec.parent(&self.metadata.namespace)
    }
}

/// `spec.parentRef` of an XListenerSet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ParentGatewayReference {
    /// Group; default `gateway.networking.k8s.io`.
    pub group: Option<String>,
    /// Kind; default `Gateway`.
    pub kind: Option<String>,
    /// Gateway name.
    pub name: String,
    /// Namespace; default the XListenerSet's.
    pub namespace: Option<String>,
}

/// A requested Gateway address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayAddress {
    /// `IPAddress` (default) or `Hostname`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// The address.
    pub value: String,
}

/// A Gateway listener.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayListener {
    /// Unique name within the Gateway.
    pub name: String,
    /// Hostname (may be a `*.` wildcard).
    pub hostname: Option<String>,
    /// Port.
    pub port: i32,
    /// `HTTP`, `HTTPS`, `TLS`, `TCP`, `UDP`.
    pub protocol: String,
    /// TLS settings (HTTPS).
    pub tls: Option<GatewayTlsConfig>,
    /// Which routes may attach.
    pub allowed_routes: Option<AllowedRoutes>,
}

/// Listener TLS settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayTlsConfig {
    /// `Terminate` (default) or `Passthrough`.
    pub mode: Option<String>,
    /// Certificates (Secrets).
    pub certificate_refs: Vec<SecretObjectReference>,
}

/// A reference to a Secret (or another certificate holder).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SecretObjectReference {
    /// API group; empty for core.
    pub group: Option<String>,
    /// Kind; default `Secret`.
    pub kind: Option<String>,
    /// Name.
    pub name: String,
    /// Namespace; default the referrer's.
    pub namespace: Option<String>,
}

/// Listener `allowedRoutes`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AllowedRoutes {
    /// Namespaces routes may come from.
    pub namespaces: Option<RouteNamespaces>,
    /// Route kinds; empty means the protocol's default (HTTPRoute for HTTP/HTTPS).
    pub kinds: Vec<RouteGroupKind>,
}

/// `allowedRoutes.namespaces`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteNamespaces {
    /// `Same` (default), `All` or `Selector`.
    pub from: Option<String>,
    /// Selector over Namespace labels when `from: Selector`.
    pub selector: Option<LabelSelector>,
}

/// A route kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteGroupKind {
    /// Group; default `gateway.networking.k8s.io`.
    pub group: Option<String>,
    /// Kind.
    pub kind: String,
}

/// HTTPRoute.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRoute {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: HttpRouteSpec,
}

/// HTTPRoute spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteSpec {
    /// Gateways (and listeners) to attach to.
    pub parent_refs: Vec<ParentReference>,
    /// Hostnames; empty means the listener's.
    pub hostnames: Vec<String>,
    /// Rules; empty means one rule matching `/` with no backends.
    pub rules: Vec<HttpRouteRule>,
}

/// A route's parent reference. Its strings are shared: a route's status names its
/// parents as written, for every parent of every route.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ParentReference {
    /// Group; default `gateway.networking.k8s.io`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<Arc<str>>,
    /// Kind; default `Gateway`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<Arc<str>>,
    /// Namespace; default the route's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<Arc<str>>,
    /// Gateway name.
    pub name: Arc<str>,
    /// Listener name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section_name: Option<Arc<str>>,
    /// Listener port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// An HTTPRoute rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteRule {
    /// Optional rule name.
    pub name: Option<String>,
    /// Matches (OR); empty means prefix `/`.
    pub matches: Vec<HttpRouteMatch>,
    /// Filters.
    pub filters: Vec<HttpRouteFilter>,
    /// Backends.
    pub backend_refs: Vec<HttpBackendRef>,
    /// Timeouts.
    pub timeouts: Option<HttpRouteTimeouts>,
    /// Retries (experimental channel in Gateway API v1.4).
    pub retry: Option<HttpRouteRetry>,
    /// Session persistence (experimental channel in Gateway API v1.6).
    pub session_persistence: Option<SessionPersistence>,
}

/// An HTTPRoute match (AND of its conditions).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteMatch {
    /// Path condition.
    pub path: Option<HttpPathMatch>,
    /// Header conditions.
    pub headers: Vec<HttpHeaderMatch>,
    /// Query parameter conditions.
    pub query_params: Vec<HttpQueryParamMatch>,
    /// Method.
    pub method: Option<String>,
}

/// Path match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpPathMatch {
    /// `Exact`, `PathPrefix` (default) or `RegularExpression`.
    #[serde(rename = "type")]
    #[schemars(extend("enum" = ["Exact", "PathPrefix", "RegularExpression"]))]
    pub type_: Option<String>,
    /// Value; default `/`.
    #[schemars(length(max = 1024))]
    pub value: Option<String>,
}

/// Header match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpHeaderMatch {
    /// `Exact` (default) or `RegularExpression`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Header name (case-insensitive).
    pub name: String,
    /// Value.
    pub value: String,
}

/// Query parameter match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpQueryParamMatch {
    /// `Exact` (default) or `RegularExpression`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Parameter name (case-sensitive).
    pub name: String,
    /// Value.
    pub value: String,
}

/// An HTTPRoute filter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteFilter {
    /// `RequestHeaderModifier`, `ResponseHeaderModifier`, `RequestRedirect`,
    /// `URLRewrite`, `RequestMirror`, `CORS`, `ExtensionRef`.
    #[serde(rename = "type")]
    pub type_: String,
    /// For `RequestHeaderModifier`.
    pub request_header_modifier: Option<HttpHeaderFilter>,
    /// For `ResponseHeaderModifier`.
    pub response_header_modifier: Option<HttpHeaderFilter>,
    /// For `RequestRedirect`.
    pub request_redirect: Option<HttpRequestRedirectFilter>,
    /// For `URLRewrite`.
    #[serde(rename = "urlRewrite")]
    pub url_rewrite: Option<HttpUrlRewriteFilter>,
    /// For `ExtensionRef` (weir: `DirectResponse`).
    pub extension_ref: Option<LocalObjectReference>,
    /// For `RequestMirror`.
    pub request_mirror: Option<HttpRequestMirrorFilter>,
    /// For `CORS` (experimental channel, Gateway API v1.2+).
    pub cors: Option<HttpCorsFilter>,
}

/// CORS filter (GEP-1767): the gateway answers preflight requests from allowed origins
/// and adds the CORS response headers to their actual requests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpCorsFilter {
    /// Origins (`scheme://host[:port]`, the host may start with `*.`), or `*` for any.
    #[schemars(length(max = 64), inner(length(min = 1, max = 253)))]
    pub allow_origins: Vec<String>,
    /// Methods a preflight allows, or `*`.
    #[schemars(length(max = 9), transform = crate::crd::cors_methods)]
    pub allow_methods: Vec<String>,
    /// Request headers a preflight allows, or `*`.
    #[schemars(length(max = 64), inner(length(min = 1, max = 256)))]
    pub allow_headers: Vec<String>,
    /// Response headers the browser may expose to the page.
    #[schemars(length(max = 64), inner(length(min = 1, max = 256)))]
    pub expose_headers: Vec<String>,
    /// Whether requests with credentials are allowed.
    pub allow_credentials: Option<bool>,
    /// How long (seconds) a preflight's answer may be cached; default 5.
    #[schemars(range(min = 1, max = 86400))]
    pub max_age: Option<i32>,
}

/// Mirror filter: a copy of each (or a share of the) request goes to another backend;
/// its response is discarded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRequestMirrorFilter {
    /// Where copies go.
    pub backend_ref: BackendObjectReference,
    /// Share of requests mirrored, in percent (0–100); all when neither this nor
    /// `fraction` is set.
    pub percent: Option<i32>,
    /// Share of requests mirrored as a fraction.
    pub fraction: Option<Fraction>,
}

/// `numerator / denominator` (denominator default 100).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Fraction {
    /// Numerator.
    pub numerator: i32,
    /// Denominator; default 100.
    pub denominator: Option<i32>,
}

/// A reference to a backend object (no weight, no filters).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BackendObjectReference {
    /// Group; empty for core (Service).
    pub group: Option<String>,
    /// Kind; default `Service`.
    pub kind: Option<String>,
    /// Name.
    pub name: String,
    /// Namespace; default the route's (other namespaces need a ReferenceGrant).
    pub namespace: Option<String>,
    /// Service port (required for Services).
    pub port: Option<i32>,
}

/// Header edits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpHeaderFilter {
    /// Set (replace).
    pub set: Vec<HttpHeader>,
    /// Add (append).
    pub add: Vec<HttpHeader>,
    /// Remove by name.
    pub remove: Vec<String>,
}

/// A header name and value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpHeader {
    /// Name.
    pub name: String,
    /// Value.
    pub value: String,
}

/// Redirect filter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRequestRedirectFilter {
    /// `http` or `https`.
    pub scheme: Option<String>,
    /// New hostname.
    pub hostname: Option<String>,
    /// New path.
    pub path: Option<HttpPathModifier>,
    /// New port.
    pub port: Option<i32>,
    /// 301 or 302 (default 302).
    pub status_code: Option<i32>,
}

/// URL rewrite filter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpUrlRewriteFilter {
    /// New Host.
    pub hostname: Option<String>,
    /// New path.
    pub path: Option<HttpPathModifier>,
}

/// Path modifier of a redirect or rewrite.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpPathModifier {
    /// `ReplaceFullPath` or `ReplacePrefixMatch`.
    #[serde(rename = "type")]
    pub type_: String,
    /// For `ReplaceFullPath`.
    pub replace_full_path: Option<String>,
    /// For `ReplacePrefixMatch`.
    pub replace_prefix_match: Option<String>,
}

/// A reference to an object in the same namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalObjectReference {
    /// Group.
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
}

/// A backend reference of an HTTPRoute rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpBackendRef {
    /// Group; empty for core (Service).
    pub group: Option<String>,
    /// Kind; default `Service`.
    pub kind: Option<String>,
    /// Name.
    pub name: String,
    /// Namespace; default the route's (other namespaces need a ReferenceGrant).
    pub namespace: Option<String>,
    /// Service port (required for Services).
    pub port: Option<i32>,
    /// Weight; default 1.
    pub weight: Option<i32>,
    /// Per-backend filters.
    pub filters: Vec<HttpRouteFilter>,
}

/// Rule timeouts (Gateway API durations such as `10s`, `500ms`, `1h`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteTimeouts {
    /// Whole request.
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub request: Option<String>,
    /// One backend attempt.
    #[schemars(regex(pattern = crate::crd::DURATION))]
    pub backend_request: Option<String>,
}

/// Session persistence of a route rule (Gateway API `SessionPersistence`): requests of
/// one session (a cookie or header weir hands out) reach the same backend and endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SessionPersistence {
    /// The cookie's or header's name (default `weir-session`).
    pub session_name: Option<String>,
    /// How long a session lasts (the cookie's `Max-Age` when `Permanent`).
    pub absolute_timeout: Option<String>,
    /// `Cookie` (default) or `Header`.
    #[serde(rename = "type")]
    pub type_: Option<SessionPersistenceType>,
    /// Cookie settings.
    pub cookie_config: Option<SessionCookieConfig>,
}

/// How a session is carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub enum SessionPersistenceType {
    /// A cookie.
    Cookie,
    /// A header.
    Header,
}

/// Cookie settings of session persistence.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SessionCookieConfig {
    /// `Permanent` (`Max-Age` = `absoluteTimeout`) or `Session` (default).
    pub lifetime_type: Option<CookieLifetimeType>,
}

/// A session cookie's lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub enum CookieLifetimeType {
    /// Until its `Max-Age`.
    Permanent,
    /// Until the browser session ends.
    Session,
}

/// Rule retries (Gateway API `HTTPRouteRetry`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteRetry {
    /// Retryable response statuses (400–599).
    pub codes: Option<Vec<i64>>,
    /// Retries after the first attempt.
    pub attempts: Option<i64>,
    /// Least wait between attempts (a Gateway API duration).
    pub backoff: Option<String>,
}

/// ReferenceGrant (v1beta1): lets objects in `from` namespaces refer to objects in this
/// grant's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReferenceGrant {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: ReferenceGrantSpec,
}

/// ReferenceGrant spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReferenceGrantSpec {
    /// Who may refer.
    pub from: Vec<ReferenceGrantFrom>,
    /// What may be referred to.
    pub to: Vec<ReferenceGrantTo>,
}

/// ReferenceGrant `from` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReferenceGrantFrom {
    /// Group of the referrer.
    pub group: String,
    /// Kind of the referrer.
    pub kind: String,
    /// Namespace of the referrer.
    pub namespace: String,
}

/// ReferenceGrant `to` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReferenceGrantTo {
    /// Group of the target ("" for core).
    pub group: String,
    /// Kind of the target.
    pub kind: String,
    /// Name of the target; absent means any.
    pub name: Option<String>,
}

/// gateway.networking.k8s.io/v1 BackendTLSPolicy: how the Gateway connects to a Service
/// (or one of its ports) over TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BackendTlsPolicy {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: BackendTlsPolicySpec,
}

/// BackendTLSPolicy spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BackendTlsPolicySpec {
    /// Services (or one port, by its name in `sectionName`) in the policy's namespace.
    pub target_refs: Vec<crate::weir::PolicyTargetReference>,
    /// How the backend's certificate is verified.
    pub validation: BackendTlsPolicyValidation,
    /// Implementation-specific options (none read by weir).
    pub options: std::collections::BTreeMap<String, String>,
}

/// `spec.validation` of a BackendTLSPolicy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BackendTlsPolicyValidation {
    /// ConfigMaps (key `ca.crt`) holding the CA certificates the backend's must chain to.
    pub ca_certificate_refs: Vec<LocalObjectReference>,
    /// `System`: the platform's trusted CAs instead.
    #[serde(rename = "wellKnownCACertificates")]
    pub well_known_ca_certificates: Option<String>,
    /// The SNI sent, and the name the certificate must carry unless `subjectAltNames` is set.
    pub hostname: String,
    /// Names of which the certificate must carry at least one (instead of `hostname`).
    pub subject_alt_names: Vec<SubjectAltName>,
}

/// One subject alternative name to accept.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubjectAltName {
    /// `Hostname` or `URI`.
    #[serde(rename = "type")]
    pub type_: String,
    /// For `Hostname`.
    pub hostname: Option<String>,
    /// For `URI`.
    pub uri: Option<String>,
}
