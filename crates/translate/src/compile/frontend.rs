//! A Gateway's `spec.tls.frontend` → client certificate validation per port, and what it
//! does to the HTTPS listeners of those ports (Gateway API GEP-91).
//!
//! `perPort` entries override `default` for the HTTPS listeners of their port (a listener
//! set's included: it listens on its Gateway's sockets). A reference that cannot be used
//! makes `ResolvedRefs` False on those listeners (`InvalidCACertificateRef`,
//! `InvalidCACertificateKind`, `RefNotPermitted`); when none can, they are not accepted
//! (`NoValidCACertificate`) and so not served: clients are never let in unchecked because
//! a CA is missing.

use std::sync::Arc;

use weir_api::{FrontendTlsConfig, FrontendTlsValidation, Kind, Reason};
use weir_model::{ClientValidation, ClientValidationMode, Protocol};

use crate::compile::listener::ListenerState;
use crate::compile::route_kind::Referrer;
use crate::store::{Dep, Store};

/// One port's (or the default's) validation, its references resolved.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PortValidation {
    /// References that cannot be used: reported on the listeners' `ResolvedRefs`.
    pub(crate) problems: Vec<(Reason, String)>,
    /// What the data plane checks; `None` when no reference could be used.
    pub(crate) validation: Option<ClientValidation>,
}

/// A Gateway's frontend TLS settings, resolved.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Frontend {
    /// `default.validation` (`None`: no validation unless a port asks for it).
    default: Option<Arc<PortValidation>>,
    /// `perPort`: the port's validation (`None`: an entry without `validation`, which
    /// turns the default off on that port).
    per_port: Vec<(i32, Option<Arc<PortValidation>>)>,
    /// Some entry asks for `AllowInsecureFallback` (the Gateway reports
    /// `InsecureFrontendValidationMode`).
    pub(crate) insecure: bool,
    /// The objects and grants the references were resolved from (listener sets of the
    /// Gateway depend on them too).
    pub(crate) deps: Vec<Dep>,
}

impl Frontend {
    /// The validation of the HTTPS listeners on `port`, if any.
    pub(crate) fn for_port(&self, port: i32) -> Option<&PortValidation> {
        match self.per_port.iter().find(|(p, _)| *p == port) {
            Some((_, v)) => v.as_deref(),
            None => self.default.as_deref(),
        }
    }

    /// What the data plane checks on an HTTPS socket of `port`.
    pub(crate) fn socket_validation(&self, port: u16) -> Option<ClientValidation> {
        self.for_port(i32::from(port))
            .and_then(|v| v.validation.clone())
    }

    /// Reports the validation on the HTTPS listeners it applies to: its problems on
    /// `ResolvedRefs`, and, when no reference is usable, `Accepted` False
    /// (`NoValidCACertificate`).
    pub(crate) fn apply(&self, listeners: &mut [ListenerState]) {
        if self.default.is_none() && self.per_port.is_empty() {
            return;
        }
        for l in listeners
            .iter_mut()
            .filter(|l| l.protocol == Some(Protocol::Https))
        {
            let Some(v) = self.for_port(l.port) else {
                continue;
            };
            l.resolved.extend(v.problems.iter().cloned());
            if v.validation.is_none() && l.accepted.is_ok() {
                l.accepted = Err((
                    Reason::NoValidCACertificate,
                    format!(
                        "no usable CA certificate for client certificate validation on port {}",
                        l.port
                    ),
                ));
            }
        }
    }
}

/// Resolves the `spec.tls.frontend` of a Gateway in namespace `ns`.
pub(crate) fn compile(store: &Store, ns: &str, cfg: Option<&FrontendTlsConfig>) -> Frontend {
    let Some(cfg) = cfg else {
        return Frontend::default();
    };
    let mut out = Frontend::default();
    let resolve = |field: &str, v: &Option<FrontendTlsValidation>, out: &mut Frontend| {
        v.as_ref().map(|v| {
            if v.mode.as_deref() == Some("AllowInsecureFallback") {
                out.insecure = true;
            }
            Arc::new(validation(store, ns, field, v, &mut out.deps))
        })
    };
    out.default = resolve(
        "spec.tls.frontend.default.validation",
        &cfg.default.validation,
        &mut out,
    );
    for (i, p) in cfg.per_port.iter().enumerate() {
        let field = format!("spec.tls.frontend.perPort[{i}].tls.validation");
        let v = resolve(&field, &p.tls.validation, &mut out);
        out.per_port.push((p.port, v));
    }
    out
}

/// Resolves one `validation`'s CA references (every usable one's PEM, in order).
fn validation(
    store: &Store,
    ns: &str,
    field: &str,
    v: &FrontendTlsValidation,
    deps: &mut Vec<Dep>,
) -> PortValidation {
    let mut problems = Vec::new();
    let mut pem: Vec<u8> = Vec::new();
    for (i, r) in v.ca_certificate_refs.iter().enumerate() {
        let fr = format!("{field}.caCertificateRefs[{i}]");
        let core = r.group.is_empty() || r.group == "core";
        let secret = match r.kind.as_str() {
            "ConfigMap" if core => false,
            "Secret" if core => true,
            _ => {
                problems.push((
                    Reason::InvalidCACertificateKind,
                    format!(
                        "{fr}: {:?}/{:?} is not supported (ConfigMap, Secret)",
                        r.group, r.kind
                    ),
                ));
                continue;
            }
        };
        let kind = if secret {
            Kind::Secret
        } else {
            Kind::ConfigMap
        };
        let rns = r
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(ns);
        deps.push(store.dep_on_ref(kind, rns, &r.name));
        if rns != ns {
            deps.push(Dep::grants_in(rns));
            if !store.grant_allows(Referrer::Gateway, ns, rns, "", kind.name(), &r.name) {
                problems.push((
                    Reason::RefNotPermitted,
                    format!(
                        "{fr}: {kind} {rns}/{} is in another namespace and no ReferenceGrant allows it",
                        r.name
                    ),
                ));
                continue;
            }
        }
        match store.ca_bundle(secret, rns, &r.name) {
            None => problems.push((
                Reason::InvalidCACertificateRef,
                format!("{fr}: {kind} {rns}/{} not found", r.name),
            )),
            Some(Err(m)) => problems.push((
                Reason::InvalidCACertificateRef,
                format!("{fr}: {kind} {rns}/{}: {m}", r.name),
            )),
            Some(Ok(b)) => {
                if !pem.is_empty() && !pem.ends_with(b"\n") {
                    pem.push(b'\n');
                }
                pem.extend_from_slice(&b);
            }
        }
    }
    let mode = match v.mode.as_deref() {
        Some("AllowInsecureFallback") => ClientValidationMode::AllowInsecureFallback,
        _ => ClientValidationMode::AllowValidOnly,
    };
    PortValidation {
        problems,
        validation: (!pem.is_empty()).then(|| ClientValidation {
            ca_pem: Arc::from(pem),
            mode,
        }),
    }
}
