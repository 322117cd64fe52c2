//! ingress-nginx's TLS towards backends: `backend-protocol: HTTPS`/`GRPCS` and the
//! `proxy-ssl-*` annotations, as the [`UpstreamTls`] of the Ingress's own clusters.
//!
//! The setting is not a policy on the Service (the Service's other users, HTTPRoutes or
//! other Ingresses, may reach it in plaintext or with other settings): every backend of
//! the Ingress gets a cluster of its own, keyed by the Service port *and* the settings'
//! hash (`service/<ns>/<name>:<port>[/h2c]/tls-<hash>`), so Ingresses with the same
//! settings share it, and a change is one cluster added and one removed. A
//! BackendTLSPolicy on the same Service port takes precedence in the data plane
//! (`ClusterState::with_policy`): the Gateway API object, written for the Service, wins
//! over an annotation of one of its users (the policy's own status shows it applies).
//!
//! As in ingress-nginx, the backend's certificate is not verified unless
//! `proxy-ssl-verify: "on"` ([`TrustAnchors::Unverified`], logged by the data plane), and
//! no SNI is sent unless `proxy-ssl-server-name: "on"`.

use std::collections::BTreeMap;
use std::sync::Arc;

use weir_api::Kind;
use weir_model::{TrustAnchors, UpstreamTls};

use crate::compile::ingress_nginx::PREFIX;
use crate::store::{Dep, Store};

/// The `proxy-ssl-*` annotations that only mean something with TLS to the backends.
pub(crate) const PROXY_SSL: &[&str] = &[
    "proxy-ssl-verify",
    "proxy-ssl-secret",
    "proxy-ssl-name",
    "proxy-ssl-server-name",
];

/// What an Ingress asks of its TLS connections to its backends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IngressTls {
    /// The certificates the backend's must chain to, or [`TrustAnchors::Unverified`].
    pub(crate) trust: TrustAnchors,
    /// `proxy-ssl-name`: the name sent as SNI and verified (default: the Service's
    /// cluster name, `<service>.<namespace>.svc`).
    pub(crate) name: Option<Arc<str>>,
    /// `proxy-ssl-server-name: "on"`: the name is sent as SNI.
    pub(crate) send_sni: bool,
    /// `namespace/name (Ingress annotations)`, for logs and errors.
    pub(crate) source: Arc<str>,
    /// The `tls.crt`/`tls.key` of `proxy-ssl-secret`, presented when a backend asks.
    pub(crate) client_certificate: Option<Arc<weir_model::Certificate>>,
}

impl IngressTls {
    /// The upstream TLS towards Service `ns`/`service`.
    pub(crate) fn for_service(&self, ns: &str, service: &str) -> Arc<UpstreamTls> {
        let sni = match &self.name {
            Some(n) => n.clone(),
            None => format!("{service}.{ns}.svc").to_ascii_lowercase().into(),
        };
        Arc::new(UpstreamTls {
            sni,
            hide_sni: !self.send_sni,
            trust: self.trust.clone(),
            subject_names: Vec::new(),
            policy: self.source.clone(),
            client_certificate: self.client_certificate.clone(),
        })
    }
}

/// Reads the `proxy-ssl-*` annotations of an Ingress whose backend protocol is HTTPS or
/// GRPCS (`tls`), or names them as ignored when it is not. The Secret of
/// `proxy-ssl-secret` becomes a dependency.
pub(crate) fn read(
    store: &Store,
    ns: &str,
    source: &Arc<str>,
    ours: &BTreeMap<&str, &str>,
    tls: bool,
    problems: &mut Vec<String>,
    deps: &mut Vec<Dep>,
) -> Option<IngressTls> {
    let field = |k: &str| format!("metadata.annotations[{PREFIX}{k}]");
    if !tls {
        let set: Vec<String> = PROXY_SSL
            .iter()
            .filter(|k| ours.contains_key(**k))
            .map(|k| field(k))
            .collect();
        if !set.is_empty() {
            problems.push(format!(
                "{}: ignored: backend-protocol is not HTTPS or GRPCS",
                set.join(", ")
            ));
        }
        return None;
    }
    let on_off = |k: &str, problems: &mut Vec<String>| match ours.get(k).copied() {
        None | Some("off") => false,
        Some("on") => true,
        Some(other) => {
            problems.push(format!(
                "{}: {other:?} is not on or off; off used",
                field(k)
            ));
            false
        }
    };
    let verify = on_off("proxy-ssl-verify", problems);
    let send_sni = on_off("proxy-ssl-server-name", problems);
    let name = match ours.get("proxy-ssl-name").copied() {
        None => None,
        Some(n) => {
            let n = n.to_ascii_lowercase();
            let precise = n.parse::<std::net::IpAddr>().is_err()
                && weir_model::HostMatch::parse(Some(&n)).is_ok_and(|h| h.as_exact().is_some());
            if precise {
                Some(Arc::from(n))
            } else {
                problems.push(format!(
                    "{}: {n:?} is not a DNS name; the Service's name used",
                    field("proxy-ssl-name")
                ));
                None
            }
        }
    };
    // `namespace/name`, of the Ingress's own namespace (as `auth-secret`).
    let secret = match ours.get("proxy-ssl-secret").map(|s| s.split_once('/')) {
        None => None,
        Some(Some((sns, name))) if sns == ns => Some(name),
        Some(Some((sns, _))) => {
            problems.push(format!(
                "{}: a Secret of namespace {sns:?}, not the Ingress's; not read",
                field("proxy-ssl-secret")
            ));
            None
        }
        Some(None) => ours.get("proxy-ssl-secret").copied(),
    };
    let mut ca = None;
    let mut client_certificate = None;
    if let Some(name) = secret {
        deps.push(store.dep_on_ref(Kind::Secret, ns, name));
        match store.ca_bundle(true, ns, name) {
            None => problems.push(format!(
                "{}: Secret {ns}/{name} not found",
                field("proxy-ssl-secret")
            )),
            Some(Err(e)) => problems.push(format!(
                "{}: Secret {ns}/{name}: {e}",
                field("proxy-ssl-secret")
            )),
            Some(Ok(pem)) => ca = Some(pem),
        }
        // A Secret with only `ca.crt` is no client certificate: not a problem.
        if let Some(Ok(c)) = store.certificate(ns, name) {
            client_certificate = Some(c.clone());
        }
    }
    let trust = match (verify, ca) {
        (false, _) => TrustAnchors::Unverified,
        (true, Some(pem)) => TrustAnchors::Pem(pem),
        // Asked to verify with a CA that cannot be read: fail closed.
        (true, None) if secret.is_some() || ours.contains_key("proxy-ssl-secret") => {
            problems.push(format!(
                "{}: no usable CA: every connection to the backends fails",
                field("proxy-ssl-verify")
            ));
            TrustAnchors::Nothing
        }
        (true, None) => TrustAnchors::System,
    };
    Some(IngressTls {
        trust,
        name,
        send_sni,
        source: source.clone(),
        client_certificate,
    })
}
