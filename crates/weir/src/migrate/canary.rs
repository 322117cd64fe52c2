//! Canary Ingresses (`canary: "true"`): not routes of their own, but rules in the
//! HTTPRoute of their main Ingress, found as the translator finds it (the oldest Ingress
//! of the namespace, not a canary, with the same host, path and path type): header and
//! cookie matches (the cookie as a regular expression on the `Cookie` header, the one
//! weir serves `canary-by-cookie` with) that send to the canary's backend or, for
//! `never`, to the main one, and weighted backendRefs for `canary-weight`.

use serde_json::{Value, json};
use weir_api::{HttpIngressPath, Ingress};
use weir_model::StringMatch;
use weir_translate::CanaryReading;

use super::{Migration, Note, Severity, ingress_name};

/// A canary Ingress and what it asks for.
pub(super) struct CanaryIngress<'a> {
    pub(super) ing: &'a Ingress,
    pub(super) canary: &'a CanaryReading,
}

/// The Ingresses a main Ingress's canaries are looked up among.
pub(super) struct Canaries<'c, 'a> {
    /// Every Ingress migrated that is not a canary.
    pub(super) mains: &'c [&'a Ingress],
    pub(super) all: &'c [CanaryIngress<'a>],
}

/// A canary of one path of a main Ingress: its settings and its backend.
pub(super) struct PathCanary<'a> {
    pub(super) canary: &'a CanaryReading,
    pub(super) backend: &'a weir_api::IngressBackend,
    pub(super) name: String,
}

impl<'a> Canaries<'_, 'a> {
    /// The canaries of `main`'s path `p` of `host` (`None`: a rule without host), first
    /// by name.
    pub(super) fn of(
        &self,
        main: &Ingress,
        host: Option<&str>,
        p: &HttpIngressPath,
    ) -> Vec<PathCanary<'a>> {
        let mut out = Vec::new();
        for c in self.all {
            if c.ing.metadata.namespace != main.metadata.namespace {
                continue;
            }
            let Some(cp) = paths(c.ing, host).find(|cp| same_path(cp, p)) else {
                continue;
            };
            if main_of(self.mains, c.ing, host, cp).is_some_and(|m| std::ptr::eq(m, main)) {
                out.push(PathCanary {
                    canary: c.canary,
                    backend: &cp.backend,
                    name: ingress_name(c.ing),
                });
            }
        }
        out
    }
}

/// The paths of `ing`'s rules for `host`.
fn paths<'i>(ing: &'i Ingress, host: Option<&str>) -> impl Iterator<Item = &'i HttpIngressPath> {
    let host = host.map(str::to_ascii_lowercase);
    ing.spec
        .rules
        .iter()
        .filter(move |r| r.host.as_deref().map(str::to_ascii_lowercase) == host)
        .filter_map(|r| r.http.as_ref())
        .flat_map(|h| &h.paths)
}

fn same_path(a: &HttpIngressPath, b: &HttpIngressPath) -> bool {
    a.path.as_deref().unwrap_or("/") == b.path.as_deref().unwrap_or("/")
        && a.path_type == b.path_type
}

/// The main Ingress of canary `c`'s path `p` of `host`: the oldest (creation time, then
/// name) Ingress of its namespace serving the same host, path and path type.
fn main_of<'a>(
    mains: &[&'a Ingress],
    c: &Ingress,
    host: Option<&str>,
    p: &HttpIngressPath,
) -> Option<&'a Ingress> {
    mains
        .iter()
        .filter(|m| m.metadata.namespace == c.metadata.namespace)
        .filter(|m| paths(m, host).any(|mp| same_path(mp, p)))
        .min_by_key(|m| {
            (
                m.metadata.creation_timestamp().is_none(),
                m.metadata.creation_timestamp(),
                m.metadata.name.clone(),
            )
        })
        .copied()
}

/// Notes for a canary Ingress itself: where it went, and the paths no main Ingress
/// serves (weir does not serve them either).
pub(super) fn report(ing: &Ingress, mains: &[&Ingress], out: &mut Migration) {
    let who = ingress_name(ing);
    for r in &ing.spec.rules {
        let Some(http) = &r.http else { continue };
        for p in &http.paths {
            if main_of(mains, ing, r.host.as_deref(), p).is_none() {
                out.notes.push(Note {
                    object: who.clone(),
                    severity: Severity::NotCarried,
                    message: format!(
                        "canary path {:?} ({}) of host {:?}: no main Ingress serves it (nor does weir); left out",
                        p.path.as_deref().unwrap_or("/"),
                        p.path_type,
                        r.host.as_deref().unwrap_or("")
                    ),
                });
            }
        }
    }
    out.notes.push(Note {
        object: who,
        severity: Severity::Info,
        message: "a canary: its paths are rules of its main Ingress's HTTPRoute (header and cookie matches, weighted backendRefs), with the main Ingress's annotations, as ingress-nginx serves it".into(),
    });
}

/// The rules of one canary of a path: `(headers, to the canary?)` for each match that
/// decides by header or cookie, in ingress-nginx's order (header, then cookie).
pub(super) fn matches(c: &CanaryReading) -> Vec<(Value, bool)> {
    let mut out = Vec::new();
    if let Some((name, value)) = &c.header {
        match value {
            None => {
                out.push((json!([{"name": name, "value": "always"}]), true));
                out.push((json!([{"name": name, "value": "never"}]), false));
            }
            Some(StringMatch::Exact(v)) => out.push((json!([{"name": name, "value": v}]), true)),
            Some(StringMatch::Regex(p)) => out.push((
                json!([{"name": name, "type": "RegularExpression", "value": p.source()}]),
                true,
            )),
        }
    }
    for (value, to_canary) in [("always", true), ("never", false)] {
        if let Some(re) = c.cookie_regex(value) {
            out.push((
                json!([{"name": "cookie", "type": "RegularExpression", "value": re}]),
                to_canary,
            ));
        }
    }
    out
}
