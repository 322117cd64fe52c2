//! Incremental translation of Kubernetes-style objects ([`weir_api::Object`]) into IR
//! deltas ([`weir_model::DeltaBatch`]) and per-object statuses.
//!
//! The [`Translator`] keeps every object it was given plus reverse indexes (which routes
//! use which Service, which Gateways use which Secret, …). [`Translator::apply`] marks
//! only the things a change can affect as dirty and recomputes those, so the cost of one
//! changed object is proportional to that object and the hosts it touches, never to the
//! total configuration. Resources are compared by their content hash; only real changes
//! are emitted.
//!
//! The crate is pure: no I/O, no async runtime. The same translator serves standalone
//! files and the Kubernetes API.
//!
//! ```
//! use std::sync::Arc;
//! use weir_api::Object;
//! use weir_model::{Delta, Resource};
//! use weir_translate::{ObjectChange, Translator, TranslatorOptions};
//!
//! let gateway = Object::from_value(serde_json::json!({
//!     "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
//!     "metadata": {"name": "gw"},
//!     "spec": {"gatewayClassName": "weir", "listeners": [{"name": "http", "port": 8080, "protocol": "HTTP"}]}
//! })).unwrap();
//! let mut t = Translator::new(TranslatorOptions { standalone: true, ..Default::default() });
//! let gateway = Arc::new(gateway);
//! let out = t.apply([ObjectChange::upsert(gateway.clone())]);
//! assert!(matches!(&out.batch.deltas[..], [Delta::Upsert(Resource::Listener(_))]));
//! assert_eq!(out.statuses.len(), 1); // the Gateway's status
//! // Applying the same object again changes nothing.
//! assert!(t.apply([ObjectChange::upsert(gateway)]).is_empty());
//! ```

#![warn(missing_docs)]

mod compile;
mod incremental;
mod key_order;
mod pool;
mod store;
mod translator;

use std::net::SocketAddr;
use std::sync::Arc;

pub use pool::{AddressPool, InvalidAddressPool};
pub use translator::{Staged, Translator};

/// The certificate of a `kubernetes.io/tls` Secret (PEM checked, key not parsed), as the
/// translator reads it; `weir check` parses its key too.
pub use compile::tls::certificate_from_secret;

/// What the translator's check of a TLS Secret's PEM (`compile/pem.rs`, which replays
/// rustls-pki-types' reader without decoding) says of `pem`: (read as a certificate chain,
/// a private key found). The translator relies on it answering `true` only when the reader
/// would. Public for the `pem` fuzz target, which compares it with the reader.
pub fn pem_accepts(pem: &[u8]) -> (bool, bool) {
    (
        compile::pem::accepts_chain(pem),
        compile::pem::accepts_key(pem),
    )
}

/// The ingress-nginx annotations of an Ingress as the translator serves them (for
/// `weir migrate`).
pub use compile::ingress_nginx_reading::{
    BackendTlsReading, CanaryReading, HttpsRedirect, INGRESS_NGINX_PREFIX, IngressNginxReader,
    IngressNginxReading,
};

/// Settings of a [`Translator`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TranslatorOptions {
    /// Our GatewayClass `controllerName`, also written into route status entries.
    pub controller_name: Arc<str>,
    /// Standalone mode: a Gateway whose `gatewayClassName` has no GatewayClass object is
    /// accepted, and Ingresses without a class are ours. In Kubernetes mode (`false`) the
    /// class must exist with our controller name.
    pub standalone: bool,
    /// The Ingress class we serve; a class-less Ingress is ours while this class's
    /// IngressClass is the cluster default.
    pub ingress_class: String,
    /// More Ingress classes served as ours (e.g. `nginx`, to take over ingress-nginx's
    /// Ingresses in place: `--ingress-class` given more than once).
    pub more_ingress_classes: Vec<String>,
    /// Where Ingress plaintext traffic is served (no Ingress HTTP listener when `None`).
    pub ingress_http: Option<SocketAddr>,
    /// Where Ingress TLS traffic is served (no Ingress HTTPS listener when `None`).
    pub ingress_https: Option<SocketAddr>,
    /// Where a Gateway that names no IP address in `spec.addresses` listens: its own
    /// address from this pool, or `0.0.0.0` when `None`.
    pub gateway_address_pool: Option<AddressPool>,
    /// Whether objects provisioned per Gateway carry its `infrastructure` labels and
    /// annotations (a controller with `--provision-image` or
    /// `--gateway-service-selector`): only then is `GatewayInfrastructure` among the
    /// GatewayClass's supported features.
    pub provisions_infrastructure: bool,
}

impl Default for TranslatorOptions {
    fn default() -> Self {
        TranslatorOptions {
            controller_name: "weir.dev/gateway-controller".into(),
            standalone: false,
            ingress_class: "weir".into(),
            more_ingress_classes: Vec::new(),
            ingress_http: None,
            ingress_https: None,
            gateway_address_pool: None,
            provisions_infrastructure: false,
        }
    }
}

/// One change to the set of objects.
#[derive(Clone, Debug)]
pub enum ObjectChange {
    /// The object was created or replaced, with its key (equal to `object.key()`). A
    /// provider passes the key it holds, which the translator then keeps instead of
    /// building its own copy (64 bytes per object, 122 MiB at 1,000,000 TLS domains).
    Upsert(weir_api::ObjectKey, Arc<weir_api::Object>),
    /// The object with this key was deleted.
    Delete(weir_api::ObjectKey),
}

impl ObjectChange {
    /// An upsert of `object` under a key built from it.
    pub fn upsert(object: Arc<weir_api::Object>) -> Self {
        ObjectChange::Upsert(object.key(), object)
    }
}

/// What one [`Translator::apply`] changed.
#[derive(Clone, Debug, Default)]
pub struct TranslateOutput {
    /// IR changes, ordered so that a data plane never sees a dangling reference:
    /// listener and certificate upserts, then SNI, cluster and virtual-host upserts, then
    /// virtual-host and SNI removals, then certificate, listener and cluster removals.
    pub batch: weir_model::DeltaBatch,
    /// Statuses that differ from the last ones emitted, sorted by key. A status that
    /// disappears because its problems were fixed is emitted once as an empty
    /// [`weir_api::ObjectStatus::Problems`]. Shared with the translator's own record of
    /// the statuses (and equal statuses with each other: 20,000 listener sets' equal
    /// statuses are one allocation, not 20,000 for this batch alone).
    pub statuses: Vec<(weir_api::ObjectKey, std::sync::Arc<weir_api::ObjectStatus>)>,
}

impl TranslateOutput {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty() && self.statuses.is_empty()
    }
}
