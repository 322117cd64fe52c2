//! Ingress → rules on the synthetic Ingress listeners, and TLS hosts.

use std::fmt::Display;
use std::sync::Arc;

use weir_api::{Ingress, IngressBackend, Kind, ObjectKey, Reason};
use weir_model::{
    Action, Certificate, ClusterKey, HostMatch, PathMatch, PathRewrite, Redirect, RequestMatch,
    RouteKind, RouteRef, RouteRule, Timeouts, WeightedBackend,
};

use crate::TranslatorOptions;
use crate::compile::backend::{self, ClusterSource, RefError, Resolved, WantProtocol};
use crate::compile::fields::normalize_prefix;
use crate::compile::ingress_nginx;
use crate::compile::ingress_nginx_tls::IngressTls;
use crate::compile::order::{Age, RuleOrder, RuleOrigin};
use crate::compile::policy::PolicySettings;
use crate::compile::route_kind::L4Target;
use crate::store::{Dep, Store};

/// What an Ingress compiles to.
#[derive(Default)]
pub(crate) struct CompiledIngress {
    /// Rules by host, with their precedence.
    pub(crate) rules: Vec<(HostMatch, Arc<RuleOrder>, Arc<RouteRule>)>,
    /// Valid TLS hosts and their certificates.
    pub(crate) tls: Vec<(HostMatch, Arc<Certificate>)>,
    /// Problems, each naming its field.
    pub(crate) problems: Vec<String>,
    /// Usable backend references.
    pub(crate) clusters: Vec<Resolved>,
    /// Objects the result depends on.
    pub(crate) deps: Vec<Dep>,
    /// The settings of its ingress-nginx policy annotations (`ingress_nginx`).
    pub(crate) policy: Option<Arc<PolicySettings>>,
    /// Which of its rules on the plaintext listener redirect to HTTPS (`ssl-redirect`).
    pub(crate) ssl_redirect: ingress_nginx::SslRedirect,
    /// Hosts whose TLS connections are passed through to a backend (`ssl-passthrough`),
    /// and whether that backend is the one of the host's `/` path.
    pub(crate) passthrough: Vec<(HostMatch, Arc<L4Target>, bool)>,
}

/// The annotation that marks an IngressClass as the cluster default.
const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";

/// Whether `ing` is ours: it names one of our classes (in `spec.ingressClassName`, or
/// without one in the legacy `kubernetes.io/ingress.class` annotation), or names none
/// while we are standalone or our (first) IngressClass is marked as the default class.
pub(crate) fn is_ours(store: &Store, opts: &TranslatorOptions, ing: &Ingress) -> bool {
    match ing.class() {
        Some(c) => c == opts.ingress_class || opts.more_ingress_classes.iter().any(|m| m == c),
        None => {
            opts.standalone
                || store.ingress_class(&opts.ingress_class).is_some_and(|c| {
                    c.metadata
                        .annotations
                        .get(DEFAULT_CLASS_ANNOTATION)
                        .map(String::as_str)
                        == Some("true")
                })
        }
    }
}

/// Compiles an Ingress of ours.
pub(crate) fn compile(
    store: &Store,
    opts: &TranslatorOptions,
    key: &ObjectKey,
    age: &Age,
    ing: &Ingress,
) -> CompiledIngress {
    let mut out = CompiledIngress::default();
    let mut annotations = ingress_nginx::compile(store, ing);
    if let Some(c) = annotations.canary.take() {
        // The canary serves with its main Ingress's annotations; its own are ignored.
        out.problems = annotations.problems;
        crate::compile::ingress_canary::compile(store, opts, key, age, ing, &c, &mut out);
        return out;
    }
    let mut reach = Reach::of(&mut annotations);
    reach.default_backend = default_backend(store, &key.namespace, &mut annotations, &mut out);
    out.problems.extend(annotations.problems);
    out.deps.extend(annotations.deps);
    out.policy = annotations.policy;
    out.ssl_redirect = annotations.ssl_redirect;
    let filters = annotations.filters;
    let redirect = annotations.redirect;
    let app_root = annotations.app_root;
    let regex_paths = annotations.regex_paths;
    let aliases: Vec<HostMatch> = annotations
        .aliases
        .iter()
        .filter_map(|a| HostMatch::parse(Some(a)).ok())
        .collect();
    let ns = &key.namespace;
    // With `permanent-redirect`/`temporal-redirect` every rule answers with it.
    let action =
        |b: &IngressBackend, field: &dyn Display, out: &mut CompiledIngress| match &redirect {
            Some(r) => Action::Redirect(Box::new(r.clone())),
            None => action(store, ns, b, field, out, &reach),
        };
    let origin = RuleOrigin {
        age,
        kind: RouteKind::Ingress,
        namespace: &key.namespace,
        name: &key.name,
    };
    let mut flat: u32 = 0;
    let push = |out: &mut CompiledIngress,
                host: HostMatch,
                path: PathMatch,
                action: Action,
                default: bool,
                flat: u32| {
        let m = RequestMatch {
            path,
            headers: vec![],
            query: vec![],
            method: None,
        };
        let order = Arc::new(RuleOrder::new(&origin, &m, default, flat, 0));
        let r = RouteRef {
            kind: RouteKind::Ingress,
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            rule: flat,
        };
        out.rules.push((
            host,
            order,
            Arc::new(RouteRule::new(
                r,
                m,
                filters.clone(),
                action,
                Timeouts::default(),
            )),
        ));
    };
    for (i, rule) in ing.spec.rules.iter().enumerate() {
        let host = match HostMatch::parse_shared(rule.host.as_ref()) {
            Ok(h) => h,
            Err(e) => {
                out.problems
                    .push(format!("spec.rules[{i}].host: {e}; rule ignored"));
                flat += rule.http.as_ref().map_or(0, |h| h.paths.len() as u32);
                continue;
            }
        };
        let Some(http) = &rule.http else { continue };
        for (j, p) in http.paths.iter().enumerate() {
            let field = RulePath(i, j);
            let idx = flat;
            flat += 1;
            let path = match path_match(p, regex_paths, &field) {
                Ok(m) => m,
                Err(e) => {
                    out.problems.push(e);
                    continue;
                }
            };
            let action = action(&p.backend, &Sub(&field, ".backend"), &mut out);
            if annotations.ssl_passthrough {
                passthrough(&mut out, &host, &path, &action, key, idx);
            }
            // `server-alias`: the names serve what every named host of the Ingress does.
            if host != HostMatch::ANY {
                for alias in &aliases {
                    push(
                        &mut out,
                        alias.clone(),
                        path.clone(),
                        action.clone(),
                        false,
                        idx,
                    );
                }
            }
            push(&mut out, host.clone(), path, action, false, idx);
        }
    }
    if let Some(root) = &app_root {
        // `app-root`: `/` itself redirects (302) there, on every host of the Ingress.
        let mut hosts: Vec<HostMatch> = out.rules.iter().map(|(h, _, _)| h.clone()).collect();
        hosts.sort();
        hosts.dedup();
        let to = Action::Redirect(Box::new(Redirect {
            scheme: None,
            hostname: None,
            path: Some(PathRewrite::Full(root.clone())),
            port: None,
            status: 302,
        }));
        for host in hosts {
            push(
                &mut out,
                host,
                PathMatch::Exact("/".into()),
                to.clone(),
                false,
                flat,
            );
        }
        flat += 1;
    }
    if let Some(b) = &ing.spec.default_backend {
        let action = action(b, &"spec.defaultBackend", &mut out);
        // The default backend answers whatever no rule matches, also on the hosts that
        // have rules (an exact host hides the catch-all host), so it closes every host
        // of this Ingress as well as the catch-all.
        let mut hosts: Vec<HostMatch> = out.rules.iter().map(|(h, _, _)| h.clone()).collect();
        hosts.push(HostMatch::ANY);
        hosts.sort();
        hosts.dedup();
        for host in hosts {
            push(
                &mut out,
                host,
                PathMatch::Prefix("/".into()),
                action.clone(),
                true,
                flat,
            );
        }
    }
    tls(store, ns, ing, &mut out);
    out
}

/// `ssl-passthrough`: the backend of `host`'s `/` path, else of its first path, takes
/// the host's TLS connections (the Ingress's default backend takes none: a passthrough
/// host needs a name to be found by).
fn passthrough(
    out: &mut CompiledIngress,
    host: &HostMatch,
    path: &PathMatch,
    action: &Action,
    key: &ObjectKey,
    rule: u32,
) {
    if *host == HostMatch::ANY {
        return;
    }
    let Action::Forward(backends) = action else {
        return;
    };
    let root = matches!(path, PathMatch::Prefix(p) | PathMatch::Exact(p) if &**p == "/");
    let at = out.passthrough.iter().position(|(h, _, _)| h == host);
    if at.is_some_and(|i| out.passthrough[i].2 || !root) {
        return;
    }
    let target = Arc::new(L4Target {
        route: RouteRef {
            kind: RouteKind::Ingress,
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            rule,
        },
        backends: backends
            .iter()
            .map(|b| weir_model::L4Backend {
                cluster: b.cluster.clone(),
                weight: b.weight,
            })
            .collect(),
    });
    match at {
        // The host's first `/` path replaces an earlier path's backend.
        Some(i) => out.passthrough[i] = (host.clone(), target, true),
        None => out.passthrough.push((host.clone(), target, root)),
    }
}

/// The path match of an Ingress path at `field` (ingress-nginx regex paths with
/// `regex_paths`), or why it is ignored.
pub(crate) fn path_match(
    p: &weir_api::HttpIngressPath,
    regex_paths: bool,
    field: &dyn Display,
) -> Result<PathMatch, String> {
    let value = p.path.as_deref().unwrap_or("/");
    if !value.starts_with('/') {
        return Err(format!("{field}.path: must start with \"/\"; path ignored"));
    }
    Ok(match &*p.path_type {
        "Exact" => PathMatch::Exact(value.into()),
        "Prefix" | "ImplementationSpecific" if regex_paths => PathMatch::Regex(
            nginx_regex(value)
                .map_err(|e| format!("{field}.path: {value:?}: {e}; path ignored"))?,
        ),
        "Prefix" | "ImplementationSpecific" => PathMatch::Prefix(normalize_prefix(value)),
        other => {
            return Err(format!(
                "{field}.pathType: unsupported {other:?}; path ignored"
            ));
        }
    })
}

/// A field's path, written only when a problem names it: an Ingress names a dozen fields
/// in passing, and formatting them was 1 % of the first load's CPU at 1,000,000 TLS
/// domains.
struct Sub<'a>(&'a dyn Display, &'static str);

impl Display for Sub<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.0, self.1)
    }
}

/// `name[i]`.
struct Indexed(&'static str, usize);

impl Display for Indexed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}]", self.0, self.1)
    }
}

/// `spec.rules[i].http.paths[j]`.
struct RulePath(usize, usize);

impl Display for RulePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "spec.rules[{}].http.paths[{}]", self.0, self.1)
    }
}

/// The TLS hosts of `ing` and their certificates, into `out`.
pub(crate) fn tls(store: &Store, ns: &Arc<str>, ing: &Ingress, out: &mut CompiledIngress) {
    for (i, t) in ing.spec.tls.iter().enumerate() {
        let field = Indexed("spec.tls", i);
        let Some(secret) = t.secret_name.as_deref().filter(|s| !s.is_empty()) else {
            out.problems.push(format!("{field}.secretName: required"));
            continue;
        };
        out.deps.push(store.dep_in(Kind::Secret, ns, secret));
        let cert = match store.certificate(ns, secret) {
            None => {
                out.problems.push(format!("{field}.secretName: Secret {ns}/{secret} not found; its hosts get no certificate"));
                continue;
            }
            Some(Err(m)) => {
                out.problems.push(format!(
                    "{field}.secretName: {m}; its hosts get no certificate"
                ));
                continue;
            }
            Some(Ok(c)) => c.clone(),
        };
        let hosts: Vec<Option<&Arc<str>>> = if t.hosts.is_empty() {
            vec![None]
        } else {
            t.hosts.iter().map(Some).collect()
        };
        for (j, h) in hosts.into_iter().enumerate() {
            match HostMatch::parse_shared(h) {
                Ok(m) => {
                    if !out.tls.iter().any(|(x, _)| *x == m) {
                        // The rules' equal host, if any, so that the SNI entry's key and
                        // the virtual hosts' share one string.
                        let m = out
                            .rules
                            .iter()
                            .find(|(r, _, _)| *r == m)
                            .map_or(m, |(r, _, _)| r.clone());
                        out.tls.push((m, cert.clone()));
                    }
                }
                Err(e) => out
                    .problems
                    .push(format!("{field}.hosts[{j}]: {e}; ignored")),
            }
        }
    }
}

/// An ingress-nginx regex path (`use-regex`, `rewrite-target`): nginx's `location ~*`,
/// matched case-insensitively from the start of the path, whatever follows. weir's
/// [`Pattern`](weir_model::Pattern) matches the whole path, hence the `.*` after the
/// expression (a group, so that `$1`… keep counting the user's own).
fn nginx_regex(value: &str) -> Result<weir_model::Pattern, String> {
    weir_model::Pattern::new(&format!("(?i)(?:{value}).*"))
        .map_err(crate::compile::fields::regex_error)
}

/// How an Ingress's backends are reached, from its annotations.
pub(crate) struct Reach {
    /// The protocol (`backend-protocol`).
    pub(crate) want: WantProtocol,
    /// At the Service's cluster IP (`service-upstream`).
    pub(crate) service_upstream: bool,
    /// Over TLS (`backend-protocol: HTTPS`/`GRPCS`).
    pub(crate) tls: Option<IngressTls>,
    /// The cluster of `default-backend`: where a backend that cannot be resolved goes.
    pub(crate) default_backend: Option<ClusterKey>,
}

/// `default-backend` (and `custom-http-errors`): resolves the Service (its first port,
/// plain HTTP/1.1 whatever the Ingress's `backend-protocol`; at its cluster IP with
/// `service-upstream`, as the Ingress's other Services), adds its cluster, and the
/// `InterceptErrors` filter to the Ingress's filters. `None` when it is not set or not
/// found (named).
pub(crate) fn default_backend(
    store: &Store,
    ns: &Arc<str>,
    ann: &mut ingress_nginx::Annotations,
    out: &mut CompiledIngress,
) -> Option<ClusterKey> {
    let service_upstream = ann.service_upstream;
    let (name, codes) = ann.default_backend.take()?;
    let field = format!(
        "metadata.annotations[{}default-backend]",
        ingress_nginx::PREFIX
    );
    out.deps
        .push(store.dep_in(Kind::Service, ns, name.as_str()));
    let port = store
        .service(ns, &name)
        .and_then(|s| s.spec.ports.first())
        .map(|p| p.port);
    let resolved = match port {
        Some(port) => {
            backend::resolve_service(store, ns, &name, Some(port), WantProtocol::Declared, &field)
        }
        None => Err(RefError::new(
            Reason::BackendNotFound,
            format!("{field}: Service {ns}/{name} not found or without ports"),
        )),
    };
    match resolved {
        Ok((key, mut src)) => {
            let key = match &mut src {
                ClusterSource::Service { cluster_ip, .. } if service_upstream => {
                    *cluster_ip = true;
                    ClusterKey(format!("{}/cluster-ip", key.0).into())
                }
                _ => key,
            };
            if !out.clusters.iter().any(|(k, _)| *k == key) {
                out.clusters.push((key.clone(), src));
            }
            ann.filters
                .push(weir_model::Filter::InterceptErrors(Arc::new(
                    weir_model::InterceptErrors {
                        codes,
                        no_endpoints: true,
                        cluster: key.clone(),
                    },
                )));
            Some(key)
        }
        Err(e) => {
            out.problems
                .push(format!("{}; custom error pages not served", e.message));
            None
        }
    }
}

impl Reach {
    /// Takes what it needs of `a`.
    pub(crate) fn of(a: &mut ingress_nginx::Annotations) -> Self {
        Reach {
            want: a.want,
            service_upstream: a.service_upstream,
            tls: a.upstream_tls.take(),
            default_backend: None,
        }
    }
}

pub(crate) fn action(
    store: &Store,
    ns: &Arc<str>,
    b: &IngressBackend,
    field: &dyn Display,
    out: &mut CompiledIngress,
    reach: &Reach,
) -> Action {
    match resolve(store, ns, b, field, &mut out.deps, reach.want) {
        Ok((key, mut src)) => {
            // `service-upstream`: the Service's cluster IP, a cluster of its own.
            let mut key = match &mut src {
                ClusterSource::Service { cluster_ip, .. } if reach.service_upstream => {
                    *cluster_ip = true;
                    ClusterKey(format!("{}/cluster-ip", key.0).into())
                }
                _ => key,
            };
            // `backend-protocol: HTTPS`/`GRPCS`: a cluster of its own per TLS setting.
            if let Some(t) = &reach.tls {
                match &mut src {
                    ClusterSource::Service { ns, name, tls, .. } => {
                        let upstream = t.for_service(ns, name);
                        key = ClusterKey(
                            format!(
                                "{}/tls-{:016x}",
                                key.0,
                                weir_model::content_hash(&*upstream).0
                            )
                            .into(),
                        );
                        *tls = Some(upstream);
                    }
                    ClusterSource::Backend { .. } => {
                        out.problems.push(format!(
                            "{field}: backend-protocol HTTPS/GRPCS is served for Service backends only; this backend answers 500"
                        ));
                        return Action::Fail {
                            status: 500,
                            reason: "no TLS to a weir Backend from an Ingress".into(),
                        };
                    }
                }
            }
            if !out.clusters.iter().any(|(k, _)| *k == key) {
                out.clusters.push((key.clone(), src));
            }
            Action::Forward(vec![WeightedBackend {
                filters: Vec::new(),
                cluster: key,
                weight: 1,
            }])
        }
        Err(e) => {
            let served = if reach.default_backend.is_some() {
                "; the default backend serves it"
            } else {
                ""
            };
            out.problems.push(format!("{}{served}", e.message));
            match &reach.default_backend {
                // ingress-nginx sends a path whose Service has no endpoints (or does not
                // exist) to the default backend.
                Some(key) => Action::Forward(vec![WeightedBackend {
                    filters: Vec::new(),
                    cluster: key.clone(),
                    weight: 1,
                }]),
                None => Action::Fail {
                    status: 500,
                    reason: "invalid backend".into(),
                },
            }
        }
    }
}

fn resolve(
    store: &Store,
    ns: &Arc<str>,
    b: &IngressBackend,
    field: &dyn Display,
    deps: &mut Vec<Dep>,
    want: WantProtocol,
) -> Result<Resolved, RefError> {
    if let Some(s) = &b.service {
        deps.push(store.dep_in(Kind::Service, ns, &*s.name));
        let fs = Sub(field, ".service");
        let port = match (&s.port.number, &s.port.name) {
            (Some(n), _) => *n,
            (None, Some(name)) => {
                let Some(svc) = store.service(ns, &s.name) else {
                    return Err(RefError::new(
                        Reason::BackendNotFound,
                        format!("{fs}: Service {ns}/{} not found", s.name),
                    ));
                };
                match svc
                    .spec
                    .ports
                    .iter()
                    .find(|p| p.name.as_deref() == Some(name.as_str()))
                {
                    Some(p) => p.port,
                    None => {
                        return Err(RefError::new(
                            Reason::BackendNotFound,
                            format!(
                                "{fs}.port.name: Service {ns}/{} has no port named {name:?}",
                                s.name
                            ),
                        ));
                    }
                }
            }
            (None, None) => {
                return Err(RefError::new(
                    Reason::UnsupportedValue,
                    format!("{fs}.port: number or name required"),
                ));
            }
        };
        return backend::resolve_service(store, ns, &s.name, Some(port), want, &fs);
    }
    if let Some(r) = &b.resource {
        if r.api_group.as_deref() == Some("weir.dev") && &*r.kind == "Backend" {
            deps.push(store.dep_in(Kind::Backend, ns, r.name.clone()));
            return backend::resolve_backend(store, ns, &r.name, want, &Sub(field, ".resource"));
        }
        return Err(RefError::new(
            Reason::InvalidKind,
            format!(
                "{field}.resource: unsupported {:?}/{:?} (weir.dev/Backend)",
                r.api_group.as_deref().unwrap_or(""),
                r.kind
            ),
        ));
    }
    Err(RefError::new(
        Reason::UnsupportedValue,
        format!("{field}: service or resource required"),
    ))
}
