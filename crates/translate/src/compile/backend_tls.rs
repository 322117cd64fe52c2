//! BackendTLSPolicy → the [`UpstreamTls`] of the Service ports it targets.
//!
//! The CA certificates are read from ConfigMaps (key `ca.crt`, one or more PEM blocks),
//! each a dependency of the policy: a ConfigMap change compiles the policy again. A policy
//! none of whose CA references is usable still applies, with [`TrustAnchors::Nothing`]:
//! the Service is then unreachable (every handshake fails) rather than reached in
//! plaintext or with an unverified certificate.

use std::sync::Arc;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use weir_api::{BackendTlsPolicy, Kind, Object, ObjectKey};
use weir_model::{SubjectName, TrustAnchors, UpstreamTls};

use crate::store::{Dep, Store};

/// Why the CA references could not all be used (the `ResolvedRefs` reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefProblem {
    /// A reference to something other than a core ConfigMap.
    InvalidKind,
    /// A ConfigMap that does not exist, has no `ca.crt`, or no certificate in it.
    InvalidCaCertificateRef,
}

/// One targetRef: a Service of the policy's namespace, and optionally a port name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct BtlsTarget {
    /// The Service's name (`None`: not a core Service, which weir does not attach to).
    pub(crate) service: Option<Arc<str>>,
    /// The kind as written, for messages.
    pub(crate) kind: Arc<str>,
    /// The name as written.
    pub(crate) name: Arc<str>,
    /// A port's name.
    pub(crate) section: Option<Arc<str>>,
}

/// A compiled BackendTLSPolicy.
#[derive(Clone, Debug)]
pub(crate) struct CompiledBtls {
    /// Its targets, deduplicated.
    pub(crate) targets: Vec<BtlsTarget>,
    /// The settings (`Err`: invalid in a way that makes it apply nowhere).
    pub(crate) tls: Result<Arc<UpstreamTls>, String>,
    /// The first unusable CA reference, and what was wrong with each.
    pub(crate) ref_problem: Option<(RefProblem, String)>,
    /// Whether no CA is usable (`Accepted: False`, `NoValidCACertificate`).
    pub(crate) no_valid_ca: bool,
    /// ConfigMaps read.
    pub(crate) deps: Vec<Dep>,
}

const CA_KEY: &str = "ca.crt";

/// Compiles `p` against the ConfigMaps in `store`.
pub(crate) fn compile(p: &BackendTlsPolicy, key: &ObjectKey, store: &Store) -> CompiledBtls {
    let ns = &*key.namespace;
    let mut targets: Vec<BtlsTarget> = p
        .spec
        .target_refs
        .iter()
        .map(|t| BtlsTarget {
            service: (t.group.is_empty() && t.kind == "Service").then(|| Arc::from(&*t.name)),
            kind: Arc::from(&*t.kind),
            name: Arc::from(&*t.name),
            section: t.section_name.as_deref().map(Arc::from),
        })
        .collect();
    targets.sort();
    targets.dedup();
    let v = &p.spec.validation;
    let mut deps = Vec::new();
    let mut problems: Vec<(RefProblem, String)> = Vec::new();
    let mut pem: Vec<u8> = Vec::new();
    for r in &v.ca_certificate_refs {
        if !(r.group.is_empty() && r.kind == "ConfigMap") {
            problems.push((
                RefProblem::InvalidKind,
                format!(
                    "caCertificateRefs {}{}{}/{}: only core ConfigMaps hold CA certificates",
                    r.kind,
                    if r.group.is_empty() { "" } else { "." },
                    r.group,
                    r.name
                ),
            ));
            continue;
        }
        let ck = ObjectKey::new(Kind::ConfigMap, ns, &r.name);
        deps.push(Dep::Object(ck.clone()));
        let Some(obj) = store.get(&ck) else {
            problems.push((
                RefProblem::InvalidCaCertificateRef,
                format!("ConfigMap {ns}/{} not found", r.name),
            ));
            continue;
        };
        let Object::ConfigMap(cm) = &**obj else {
            continue;
        };
        match cm.data.get(CA_KEY).map(|s| read_certificates(s.as_bytes())) {
            Some(Ok(n)) if n > 0 => {
                pem.extend_from_slice(cm.data[CA_KEY].as_bytes());
                pem.push(b'\n');
            }
            Some(Ok(_)) | None => problems.push((
                RefProblem::InvalidCaCertificateRef,
                format!("ConfigMap {ns}/{}: no certificate in {CA_KEY}", r.name),
            )),
            Some(Err(e)) => problems.push((
                RefProblem::InvalidCaCertificateRef,
                format!("ConfigMap {ns}/{}: {CA_KEY}: {e}", r.name),
            )),
        }
    }
    let system = v.well_known_ca_certificates.as_deref() == Some("System");
    let trust = if !pem.is_empty() {
        TrustAnchors::Pem(Arc::from(pem))
    } else if system {
        TrustAnchors::System
    } else {
        TrustAnchors::Nothing
    };
    let no_valid_ca = matches!(trust, TrustAnchors::Nothing);
    let ref_problem = problems.first().map(|(k, _)| *k).map(|k| {
        (
            k,
            problems
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        )
    });
    let tls = settings(p, ns, trust);
    CompiledBtls {
        targets,
        tls,
        ref_problem,
        no_valid_ca,
        deps,
    }
}

/// How many certificates a PEM `ca.crt` holds; an error for a malformed block.
fn read_certificates(pem: &[u8]) -> Result<usize, String> {
    let mut n = 0;
    for c in CertificateDer::pem_slice_iter(pem) {
        let der = c.map_err(|e| format!("not PEM certificates: {e}"))?;
        x509_check(&der)?;
        n += 1;
    }
    Ok(n)
}

/// A certificate's DER must at least be a SEQUENCE of plausible length; full parsing
/// happens in the data plane's verifier.
fn x509_check(der: &CertificateDer<'_>) -> Result<(), String> {
    match der.as_ref() {
        [0x30, ..] if der.len() > 64 => Ok(()),
        _ => Err("a CERTIFICATE block that is not an X.509 certificate".into()),
    }
}

/// The SNI and names of a policy (the CEL rules of the CRD, for standalone mode).
fn settings(
    p: &BackendTlsPolicy,
    ns: &str,
    trust: TrustAnchors,
) -> Result<Arc<UpstreamTls>, String> {
    let v = &p.spec.validation;
    let hostname = v.hostname.trim();
    if hostname.is_empty() {
        return Err("spec.validation.hostname: required".into());
    }
    if hostname.parse::<std::net::IpAddr>().is_ok() {
        return Err("spec.validation.hostname: must be a DNS name, not an IP address".into());
    }
    weir_model::HostMatch::parse(Some(hostname))
        .ok()
        .filter(|h| h.as_exact().is_some())
        .ok_or_else(|| {
            format!("spec.validation.hostname: {hostname:?} is not a precise DNS name")
        })?;
    match (
        &v.well_known_ca_certificates,
        v.ca_certificate_refs.is_empty(),
    ) {
        (Some(w), _) if w != "System" => {
            return Err(format!(
                "spec.validation.wellKnownCACertificates: {w:?} (only \"System\")"
            ));
        }
        (Some(_), false) => {
            return Err("spec.validation: caCertificateRefs and wellKnownCACertificates are mutually exclusive".into());
        }
        (None, true) => {
            return Err(
                "spec.validation: one of caCertificateRefs and wellKnownCACertificates is required"
                    .into(),
            );
        }
        _ => {}
    }
    let mut subject_names = Vec::with_capacity(v.subject_alt_names.len());
    for (i, san) in v.subject_alt_names.iter().enumerate() {
        let field = format!("spec.validation.subjectAltNames[{i}]");
        match (san.type_.as_str(), &san.hostname, &san.uri) {
            ("Hostname", Some(h), None) if !h.is_empty() => {
                subject_names.push(SubjectName::Dns(Arc::from(h.to_ascii_lowercase())))
            }
            ("URI", None, Some(u)) if u.contains("://") || u.starts_with("spiffe:") => {
                subject_names.push(SubjectName::Uri(Arc::from(&**u)))
            }
            ("Hostname" | "URI", _, _) => {
                return Err(format!(
                    "{field}: type {} needs its own field ({}) and only that one",
                    san.type_,
                    if san.type_ == "URI" {
                        "uri, an absolute URI"
                    } else {
                        "hostname"
                    }
                ));
            }
            (t, _, _) => return Err(format!("{field}.type: {t:?} (Hostname or URI)")),
        }
    }
    Ok(Arc::new(UpstreamTls {
        sni: Arc::from(hostname.to_ascii_lowercase()),
        hide_sni: false,
        client_certificate: None,
        trust,
        subject_names,
        policy: Arc::from(format!("{ns}/{}", p.metadata.name)),
    }))
}
