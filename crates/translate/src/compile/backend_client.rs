//! A Gateway's `spec.tls.backend.clientCertificateRef` → the certificate it presents to
//! backends that ask for one (over BackendTLSPolicy connections).
//!
//! The certificate is a `kubernetes.io/tls` Secret (core); another namespace needs a
//! ReferenceGrant (`from` Gateway). A reference that cannot be used makes the Gateway's
//! `ResolvedRefs` False (`InvalidClientCertificateRef`, or `RefNotPermitted`) and leaves
//! it accepted: its backends that require a client certificate then refuse the
//! handshake, which fails the requests to them rather than anything else.

use std::sync::Arc;

use weir_api::{GatewayTlsSettings, Kind, Reason};
use weir_model::Certificate;

use crate::compile::route_kind::Referrer;
use crate::store::{Dep, Store};

const FIELD: &str = "spec.tls.backend.clientCertificateRef";

/// What a Gateway's backend client certificate reference resolved to: `None` when the
/// Gateway sets none, the certificate, or why it cannot be used.
pub(crate) type BackendClient = Option<Result<Arc<Certificate>, (Reason, String)>>;

/// Resolves the reference of a Gateway in namespace `ns`, adding the objects it reads to
/// `deps` (a Secret edit recompiles only the Gateways naming it).
pub(crate) fn compile(
    store: &Store,
    ns: &str,
    tls: Option<&GatewayTlsSettings>,
    deps: &mut Vec<Dep>,
) -> BackendClient {
    let r = tls?.backend.as_ref()?.client_certificate_ref.as_ref()?;
    let group = r.group.as_deref().unwrap_or("");
    let kind = r.kind.as_deref().unwrap_or("Secret");
    if !(group.is_empty() || group == "core") || kind != "Secret" {
        return Some(Err((
            Reason::InvalidClientCertificateRef,
            format!("{FIELD}: {group:?}/{kind:?} is not supported (a core Secret)"),
        )));
    }
    let rns = r
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(ns);
    deps.push(store.dep_on_ref(Kind::Secret, rns, &r.name));
    if rns != ns {
        deps.push(Dep::grants_in(rns));
        if !store.grant_allows(Referrer::Gateway, ns, rns, "", "Secret", &r.name) {
            return Some(Err((
                Reason::RefNotPermitted,
                format!(
                    "{FIELD}: Secret {rns}/{} is in another namespace and no ReferenceGrant allows it",
                    r.name
                ),
            )));
        }
    }
    let invalid = |why: String| {
        Some(Err((
            Reason::InvalidClientCertificateRef,
            format!("{FIELD}: {why}"),
        )))
    };
    // Every Secret is parsed once per version (`Store::certificate`).
    match store.certificate(rns, &r.name) {
        Some(Ok(c)) => Some(Ok(c.clone())),
        Some(Err(m)) => invalid(m.clone()),
        None => invalid(format!("Secret {rns}/{} not found", r.name)),
    }
}
