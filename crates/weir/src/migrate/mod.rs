//! `weir migrate`: rewrites Ingresses (with their ingress-nginx annotations) into a
//! Gateway, HTTPRoutes and weir TrafficPolicies that weir serves the same way, and reports
//! every annotation or feature it could not carry over.
//!
//! The annotations are not parsed here: [`weir_translate::IngressNginxReader`] hands over
//! what the translator serves an Ingress with (the same parse), and this module writes
//! that back out as Gateway API and `weir.dev` objects. So a migrated configuration can
//! only differ where the report says so.

mod canary;
mod cluster;
mod gateway;
mod policy;
mod route;

pub use cluster::migrate_cluster;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use weir_api::{Ingress, Object};
use weir_provider_file::FileProvider;
use weir_translate::{IngressNginxReader, IngressNginxReading};

/// Options of `weir migrate`.
#[derive(Clone, Debug)]
pub struct MigrateOptions {
    /// File or directory of manifests holding the Ingresses (and the Services, Secrets
    /// and Backends they use, where available); unused by [`migrate_cluster`].
    pub config: PathBuf,
    /// Name of the Gateway written.
    pub gateway_name: String,
    /// Namespace of the Gateway written.
    pub gateway_namespace: String,
    /// Its `gatewayClassName`.
    pub gateway_class: String,
    /// Port of its plaintext listener (the Ingress HTTP port).
    pub http_port: u16,
    /// Port of its TLS listeners (the Ingress HTTPS port).
    pub https_port: u16,
    /// An IP address for the Gateway's `spec.addresses`, if any.
    pub address: Option<String>,
    /// Ingress classes migrated; Ingresses without a class are migrated too.
    pub ingress_classes: Vec<String>,
}

/// How serious a note of the report is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Carried over, but worth knowing.
    Info,
    /// Needs a step by hand (e.g. a Service port's `appProtocol`).
    Manual,
    /// Not carried over: the migrated objects behave differently here.
    NotCarried,
}

impl Severity {
    fn label(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Manual => "manual step",
            Severity::NotCarried => "not carried over",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// `Ingress namespace/name`, or the input path for problems of the files.
    pub object: String,
    /// How serious.
    pub severity: Severity,
    /// What and why.
    pub message: String,
}

/// The result of a migration.
#[derive(Debug, Default)]
pub struct Migration {
    /// The objects written, in order (Gateway first).
    pub objects: Vec<Value>,
    /// The report.
    pub notes: Vec<Note>,
    /// How many Ingresses were migrated.
    pub ingresses: usize,
}

impl Migration {
    /// The objects as one multi-document YAML stream.
    pub fn yaml(&self) -> anyhow::Result<String> {
        let mut out = String::from(
            "# Written by `weir migrate`; see its report for what was not carried over.\n",
        );
        for o in &self.objects {
            out.push_str("---\n");
            out.push_str(&serde_saphyr::to_string(o)?);
            if !out.ends_with('\n') {
                out.push('\n');
            }
        }
        Ok(out)
    }

    /// The report, one line per note, then a summary line.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for n in &self.notes {
            out.push_str(&format!(
                "{}: {}: {}\n",
                n.object,
                n.severity.label(),
                n.message
            ));
        }
        let not_carried = self
            .notes
            .iter()
            .filter(|n| n.severity == Severity::NotCarried)
            .count();
        let manual = self
            .notes
            .iter()
            .filter(|n| n.severity == Severity::Manual)
            .count();
        out.push_str(&format!(
            "{} Ingress(es) migrated into {} object(s); {not_carried} not carried over, {manual} manual step(s)\n",
            self.ingresses,
            self.objects.len()
        ));
        out
    }
}

/// Reads `opts.config` and migrates its Ingresses. Problems of the files are notes too
/// (an object that cannot be read cannot be migrated).
pub fn migrate(opts: &MigrateOptions) -> Migration {
    let mut provider = FileProvider::new(opts.config.clone());
    let update = provider.load_all();
    let mut out = Migration::default();
    for e in &update.errors {
        out.notes.push(Note {
            object: e.file.display().to_string(),
            severity: Severity::NotCarried,
            message: format!("cannot be read: {}", e.message),
        });
    }
    let objects: Vec<Arc<Object>> = update.upserts.into_iter().map(|(_, o)| o).collect();
    migrate_objects(opts, &objects, &mut out);
    out
}

/// Migrates the Ingresses among `objects` into `out`.
pub fn migrate_objects(opts: &MigrateOptions, objects: &[Arc<Object>], out: &mut Migration) {
    let inputs = Inputs::new(objects);
    let mut ingresses: Vec<&Ingress> = Vec::new();
    for ing in &inputs.ingresses {
        match ing.class() {
            Some(c) if !opts.ingress_classes.iter().any(|x| x == c) => out.notes.push(Note {
                object: ingress_name(ing),
                severity: Severity::Info,
                message: format!(
                    "class {c:?} is not among --ingress-class {:?}; left alone",
                    opts.ingress_classes
                ),
            }),
            _ => ingresses.push(ing),
        }
    }
    let reader = IngressNginxReader::new(objects.iter().cloned());
    let readings: Vec<(&Ingress, IngressNginxReading)> =
        ingresses.iter().map(|i| (*i, reader.read(i))).collect();
    let mut gw = gateway::GatewayBuilder::new(opts);
    for (ing, reading) in &readings {
        if reading.canary.is_some() {
            // A canary is served with its main Ingress's TLS hosts, not its own.
            continue;
        }
        if reading.ssl_passthrough {
            gw.add_passthrough(ing, &mut out.notes);
        } else {
            gw.add_tls(ing, &inputs, &mut out.notes);
        }
    }
    out.objects.push(gw.gateway());
    out.objects.extend(gw.reference_grants());
    let mains: Vec<&Ingress> = readings
        .iter()
        .filter(|(_, r)| r.canary.is_none())
        .map(|(i, _)| *i)
        .collect();
    let canaries: Vec<canary::CanaryIngress<'_>> = readings
        .iter()
        .filter_map(|(ing, r)| {
            Some(canary::CanaryIngress {
                ing,
                canary: r.canary.as_ref()?,
            })
        })
        .collect();
    for (ing, reading) in &readings {
        if reading.canary.is_some() {
            canary::report(ing, &mains, out);
        } else {
            let canaries = canary::Canaries {
                mains: &mains,
                all: &canaries,
            };
            route::migrate_ingress(opts, ing, reading, &gw, &inputs, &canaries, out);
        }
        out.ingresses += 1;
    }
}

/// `Ingress namespace/name`.
fn ingress_name(ing: &Ingress) -> String {
    format!("Ingress {}/{}", ing.metadata.namespace, ing.metadata.name)
}

/// The input objects a migration looks up.
struct Inputs<'a> {
    ingresses: Vec<&'a Ingress>,
    services: BTreeMap<(&'a str, &'a str), &'a weir_api::Service>,
    backends: BTreeMap<(&'a str, &'a str), &'a weir_api::Backend>,
    secrets: BTreeMap<(&'a str, &'a str), &'a weir_api::Secret>,
}

impl<'a> Inputs<'a> {
    fn new(objects: &'a [Arc<Object>]) -> Self {
        let mut i = Inputs {
            ingresses: Vec::new(),
            services: BTreeMap::new(),
            backends: BTreeMap::new(),
            secrets: BTreeMap::new(),
        };
        for o in objects {
            match &**o {
                Object::Ingress(x) => i.ingresses.push(x),
                Object::Service(x) => {
                    i.services
                        .insert((&x.metadata.namespace, &x.metadata.name), x);
                }
                Object::Backend(x) => {
                    i.backends
                        .insert((&x.metadata.namespace, &x.metadata.name), x);
                }
                Object::Secret(x) => {
                    i.secrets
                        .insert((&x.metadata.namespace, &x.metadata.name), x);
                }
                _ => {}
            }
        }
        i.ingresses.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        i
    }
}

#[cfg(test)]
mod tests;
