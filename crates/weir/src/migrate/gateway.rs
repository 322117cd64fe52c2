//! The Gateway of a migration: one plaintext listener for every Ingress host, and one
//! TLS listener per TLS host of the Ingresses (with its Secret), as weir's Ingress
//! listeners serve them; ReferenceGrants where a Secret lives in another namespace.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use weir_api::Ingress;

use super::{Inputs, MigrateOptions, Note, Severity, ingress_name};

/// The name of the plaintext listener.
pub(super) const HTTP_LISTENER: &str = "http";

/// One TLS listener.
struct TlsListener {
    name: String,
    /// `None`: every host (an Ingress TLS entry without hosts).
    host: Option<String>,
    secret_namespace: String,
    secret: String,
}

/// Collects the TLS listeners while the Ingresses are read.
pub(super) struct GatewayBuilder<'o> {
    opts: &'o MigrateOptions,
    tls: Vec<TlsListener>,
    /// Hosts passed through by SNI (`ssl-passthrough`), one Passthrough listener each.
    passthrough: Vec<String>,
}

impl<'o> GatewayBuilder<'o> {
    pub(super) fn new(opts: &'o MigrateOptions) -> Self {
        GatewayBuilder {
            opts,
            tls: Vec::new(),
            passthrough: Vec::new(),
        }
    }

    /// Adds a Passthrough listener for every named host of `ing` (`ssl-passthrough`)
    /// that has none yet; a host that already has a TLS-terminating listener keeps it
    /// (named), as a Gateway cannot have both for one hostname and port.
    pub(super) fn add_passthrough(&mut self, ing: &Ingress, notes: &mut Vec<Note>) {
        for r in &ing.spec.rules {
            let Some(h) = r.host.as_deref().map(str::to_ascii_lowercase) else {
                continue;
            };
            if self.passthrough.contains(&h) {
                continue;
            }
            if self
                .tls
                .iter()
                .any(|l| l.host.as_deref() == Some(h.as_str()))
            {
                notes.push(Note {
                    object: ingress_name(ing),
                    severity: Severity::NotCarried,
                    message: format!(
                        "ssl-passthrough: host {h} has a TLS-terminating listener from an earlier Ingress; not passed through"
                    ),
                });
                continue;
            }
            self.passthrough.push(h);
        }
    }

    /// The Passthrough listener of `host`, if it has one.
    pub(super) fn passthrough_listener(&self, host: &str) -> Option<String> {
        self.passthrough
            .iter()
            .position(|h| h == host)
            .map(|i| format!("passthrough-{i}"))
    }

    /// Adds a listener for every TLS host of `ing` that has none yet (the first Ingress,
    /// in name order, keeps a host, as the oldest does for weir's Ingress listener).
    pub(super) fn add_tls(&mut self, ing: &Ingress, inputs: &Inputs<'_>, notes: &mut Vec<Note>) {
        let ns = &ing.metadata.namespace;
        for t in &ing.spec.tls {
            let Some(secret) = t.secret_name.as_deref().filter(|s| !s.is_empty()) else {
                continue;
            };
            if !inputs.secrets.contains_key(&(ns.as_ref(), secret)) {
                notes.push(Note {
                    object: ingress_name(ing),
                    severity: Severity::Info,
                    message: format!(
                        "TLS Secret {ns}/{secret} is not among the input; its listeners name it and need it in the cluster"
                    ),
                });
            }
            let hosts: Vec<Option<&str>> = if t.hosts.is_empty() {
                vec![None]
            } else {
                t.hosts.iter().map(|h| Some(&**h)).collect()
            };
            for h in hosts {
                let h = h.map(str::to_ascii_lowercase);
                if let Some(other) = self.tls.iter().find(|l| l.host == h) {
                    if (other.secret_namespace.as_str(), other.secret.as_str())
                        != (ns.as_ref(), secret)
                    {
                        notes.push(Note {
                            object: ingress_name(ing),
                            severity: Severity::NotCarried,
                            message: format!(
                                "TLS host {} already has Secret {}/{} from an earlier Ingress; {ns}/{secret} is not used for it",
                                h.as_deref().unwrap_or("(any)"),
                                other.secret_namespace,
                                other.secret
                            ),
                        });
                    }
                    continue;
                }
                self.tls.push(TlsListener {
                    name: format!("https-{}", self.tls.len()),
                    host: h,
                    secret_namespace: ns.to_string(),
                    secret: secret.to_owned(),
                });
            }
        }
    }

    /// The TLS listeners of `ing`'s own TLS hosts that cover `host` (`None`: the rules
    /// without a host), as weir's Ingress listener decides which rules it serves over TLS.
    pub(super) fn covering(&self, ing: &Ingress, host: Option<&str>) -> Vec<String> {
        let own: BTreeSet<Option<String>> = ing
            .spec
            .tls
            .iter()
            .filter(|t| t.secret_name.as_deref().is_some_and(|s| !s.is_empty()))
            .flat_map(|t| {
                if t.hosts.is_empty() {
                    vec![None]
                } else {
                    t.hosts
                        .iter()
                        .map(|h| Some(h.to_ascii_lowercase()))
                        .collect()
                }
            })
            .collect();
        let host = host.map(str::to_ascii_lowercase);
        self.tls
            .iter()
            .filter(|l| own.contains(&l.host))
            .filter(|l| match (&l.host, &host) {
                (None, _) | (_, None) => true,
                (Some(t), Some(h)) => t == h || wildcard_covers(t, h),
            })
            .map(|l| l.name.clone())
            .collect()
    }

    /// The Gateway object.
    pub(super) fn gateway(&self) -> Value {
        let o = self.opts;
        let all = json!({"namespaces": {"from": "All"}});
        let mut listeners = vec![json!({
            "name": HTTP_LISTENER, "protocol": "HTTP", "port": o.http_port, "allowedRoutes": all,
        })];
        for l in &self.tls {
            let mut cert = json!({"kind": "Secret", "name": l.secret});
            if l.secret_namespace != o.gateway_namespace {
                cert["namespace"] = json!(l.secret_namespace);
            }
            let mut listener = json!({
                "name": l.name, "protocol": "HTTPS", "port": o.https_port,
                "tls": {"mode": "Terminate", "certificateRefs": [cert]},
                "allowedRoutes": all,
            });
            if let Some(h) = &l.host {
                listener["hostname"] = json!(h);
            }
            listeners.push(listener);
        }
        for (i, h) in self.passthrough.iter().enumerate() {
            listeners.push(json!({
                "name": format!("passthrough-{i}"), "protocol": "TLS", "port": o.https_port,
                "hostname": h, "tls": {"mode": "Passthrough"},
                "allowedRoutes": {"namespaces": {"from": "All"}, "kinds": [{"kind": "TLSRoute"}]},
            }));
        }
        let mut spec = json!({"gatewayClassName": o.gateway_class, "listeners": listeners});
        if let Some(a) = &o.address {
            spec["addresses"] = json!([{"type": "IPAddress", "value": a}]);
        }
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": o.gateway_name, "namespace": o.gateway_namespace},
            "spec": spec,
        })
    }

    /// One ReferenceGrant per namespace whose Secrets the Gateway's listeners use from
    /// another namespace.
    pub(super) fn reference_grants(&self) -> Vec<Value> {
        let o = self.opts;
        let mut by_ns: std::collections::BTreeMap<&str, BTreeSet<&str>> = Default::default();
        for l in self
            .tls
            .iter()
            .filter(|l| l.secret_namespace != o.gateway_namespace)
        {
            by_ns
                .entry(&l.secret_namespace)
                .or_default()
                .insert(&l.secret);
        }
        by_ns
            .into_iter()
            .map(|(ns, secrets)| {
                let to: Vec<Value> = secrets
                    .into_iter()
                    .map(|s| json!({"group": "", "kind": "Secret", "name": s}))
                    .collect();
                json!({
                    "apiVersion": "gateway.networking.k8s.io/v1beta1",
                    "kind": "ReferenceGrant",
                    "metadata": {"name": format!("{}-tls", o.gateway_name), "namespace": ns},
                    "spec": {
                        "from": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": o.gateway_namespace}],
                        "to": to,
                    },
                })
            })
            .collect()
    }
}

/// Whether the Ingress TLS host `pattern` (`*.example.com`: one label) covers `host`.
fn wildcard_covers(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host
            .strip_suffix(suffix)
            .and_then(|l| l.strip_suffix('.'))
            .is_some_and(|label| !label.is_empty() && !label.contains('.')),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::wildcard_covers;

    #[test]
    fn a_wildcard_tls_host_covers_one_label() {
        assert!(wildcard_covers("*.example.com", "a.example.com"));
        assert!(!wildcard_covers("*.example.com", "a.b.example.com"));
        assert!(!wildcard_covers("*.example.com", "example.com"));
        assert!(!wildcard_covers("a.example.com", "a.example.com"));
    }
}
