//! One Ingress → its HTTPRoutes (one per host, as an Ingress's paths belong to their
//! host), the TrafficPolicy of its policy annotations, and the Secrets and Backends those
//! need.

use serde_json::{Value, json};
use weir_api::{Ingress, IngressBackend};
use weir_model::{Filter, HashOn, HeaderModifier, LoadBalancer, PathRewrite, Redirect};
use weir_translate::{HttpsRedirect, INGRESS_NGINX_PREFIX, IngressNginxReading};

use super::canary::{self, Canaries};
use super::gateway::{GatewayBuilder, HTTP_LISTENER};
use super::{Inputs, MigrateOptions, Migration, Note, Severity, ingress_name};

use super::policy;

/// The annotations (after [`INGRESS_NGINX_PREFIX`]) whose effect is carried over; every
/// other one of the prefix is reported.
const CARRIED: &[&str] = &[
    "limit-rps",
    "limit-rpm",
    "limit-burst-multiplier",
    "auth-type",
    "auth-secret",
    "auth-secret-type",
    "auth-realm",
    "auth-url",
    "auth-signin",
    "auth-response-headers",
    "enable-cors",
    "cors-allow-origin",
    "cors-allow-methods",
    "cors-allow-headers",
    "cors-expose-headers",
    "cors-allow-credentials",
    "cors-max-age",
    "whitelist-source-range",
    "denylist-source-range",
    "upstream-vhost",
    "x-forwarded-prefix",
    "rewrite-target",
    "permanent-redirect",
    "permanent-redirect-code",
    "temporal-redirect",
    "temporal-redirect-code",
    "ssl-redirect",
    "force-ssl-redirect",
    "app-root",
    "backend-protocol",
    "enable-websockets",
    "proxy-next-upstream",
    "proxy-next-upstream-tries",
    "proxy-body-size",
    "limit-connections",
    "proxy-connect-timeout",
    "proxy-read-timeout",
    "proxy-send-timeout",
    "affinity",
    "affinity-mode",
    "session-cookie-name",
    "session-cookie-path",
    "session-cookie-max-age",
    "session-cookie-expires",
    "canary",
    "canary-by-header",
    "canary-by-header-value",
    "canary-by-header-pattern",
    "canary-by-cookie",
    "canary-weight",
    "canary-weight-total",
    "ssl-passthrough",
    "proxy-ssl-verify",
    "proxy-ssl-secret",
    "proxy-ssl-name",
    "proxy-ssl-server-name",
];

/// The rules of one host of an Ingress.
struct HostRules {
    host: Option<String>,
    rules: Vec<Value>,
}

/// Migrates `ing` into `out`.
pub(super) fn migrate_ingress(
    opts: &MigrateOptions,
    ing: &Ingress,
    reading: &IngressNginxReading,
    gw: &GatewayBuilder<'_>,
    inputs: &Inputs<'_>,
    canaries: &Canaries<'_, '_>,
    out: &mut Migration,
) {
    let mut notes = Notes {
        who: ingress_name(ing),
        list: Vec::new(),
    };
    report_annotations(ing, reading, &mut notes);
    let ns = ing.metadata.namespace.as_ref();
    let filters = filters(reading, &mut notes);
    let mut refs = BackendRefs {
        ns,
        h2c: reading.h2c && reading.backend_tls.is_none(),
        inputs,
        h2c_backends: Vec::new(),
        services: Vec::new(),
    };

    // Rules by host, in the Ingress's order.
    let mut hosts: Vec<HostRules> = Vec::new();
    let host_entry = |hosts: &mut Vec<HostRules>, host: Option<String>| -> usize {
        match hosts.iter().position(|h| h.host == host) {
            Some(i) => i,
            None => {
                hosts.push(HostRules {
                    host,
                    rules: Vec::new(),
                });
                hosts.len() - 1
            }
        }
    };
    for (i, rule) in ing.spec.rules.iter().enumerate() {
        let Some(http) = &rule.http else { continue };
        let host = rule.host.as_deref().map(str::to_ascii_lowercase);
        if host.as_deref().is_some_and(|h| h.starts_with("*.")) {
            notes.add(
                Severity::Info,
                format!(
                    "spec.rules[{i}].host {:?}: an Ingress wildcard covers one label, an HTTPRoute hostname wildcard any number",
                    host.as_deref().unwrap_or_default()
                ),
            );
        }
        let at = host_entry(&mut hosts, host);
        for (j, p) in http.paths.iter().enumerate() {
            let field = format!("spec.rules[{i}].http.paths[{j}]");
            let value = p.path.as_deref().unwrap_or("/");
            let path = match &*p.path_type {
                "Exact" => json!({"type": "Exact", "value": value}),
                "Prefix" | "ImplementationSpecific" => {
                    json!({"type": "PathPrefix", "value": value})
                }
                other => {
                    notes.add(
                        Severity::NotCarried,
                        format!("{field}.pathType {other:?} is not served by weir; path left out"),
                    );
                    continue;
                }
            };
            if !value.starts_with('/') {
                notes.add(
                    Severity::NotCarried,
                    format!("{field}.path {value:?} does not start with /; left out"),
                );
                continue;
            }
            let Some(mut forward) = action(
                reading,
                &p.backend,
                &format!("{field}.backend"),
                &filters,
                &mut refs,
                &mut notes,
            ) else {
                continue;
            };
            let found = canaries.of(ing, hosts[at].host.as_deref(), p);
            if let Some(c) = found.first().filter(|_| reading.redirect.is_none()) {
                for other in &found[1..] {
                    notes.add(
                        Severity::NotCarried,
                        format!(
                            "{field}: the canary of {} is carried over; that of {} is not (one canary per path)",
                            c.name, other.name
                        ),
                    );
                }
                if let Some(to_canary) = action(
                    reading,
                    c.backend,
                    &format!("{field} (canary {})", c.name),
                    &filters,
                    &mut refs,
                    &mut notes,
                ) {
                    for (headers, canary_side) in canary::matches(c.canary) {
                        let mut r =
                            json!({"matches": [{"path": path.clone(), "headers": headers}]});
                        merge(
                            &mut r,
                            if canary_side {
                                to_canary.clone()
                            } else {
                                forward.clone()
                            },
                        );
                        hosts[at].rules.push(r);
                    }
                    if let (Some((w, total)), Some(main)) = (
                        c.canary.weight,
                        forward["backendRefs"][0].as_object().cloned(),
                    ) {
                        let mut main = Value::Object(main);
                        let mut other = to_canary["backendRefs"][0].clone();
                        main["weight"] = json!(total - w);
                        other["weight"] = json!(w);
                        forward["backendRefs"] = json!([main, other]);
                    }
                }
            }
            let mut r = json!({"matches": [{"path": path}]});
            merge(&mut r, forward);
            hosts[at].rules.push(r);
        }
    }
    if let Some(root) = &reading.app_root {
        let redirect = Redirect {
            scheme: None,
            hostname: None,
            path: Some(PathRewrite::Full(root.clone())),
            port: None,
            status: 302,
        };
        for h in &mut hosts {
            let mut r = json!({"matches": [{"path": {"type": "Exact", "value": "/"}}]});
            merge(&mut r, redirect_action(&redirect, &filters));
            h.rules.push(r);
        }
    }
    if let Some(b) = &ing.spec.default_backend {
        // weir serves the default backend for whatever no rule matches on this Ingress's
        // hosts as well as on every other host: the last rule of each of its hosts, and a
        // route without hostnames.
        if let Some(action) = action(
            reading,
            b,
            "spec.defaultBackend",
            &filters,
            &mut refs,
            &mut notes,
        ) {
            host_entry(&mut hosts, None);
            for h in &mut hosts {
                let mut r = json!({"matches": [{"path": {"type": "PathPrefix", "value": "/"}}]});
                merge(&mut r, action.clone());
                h.rules.push(r);
            }
        }
    }

    // Cookie affinity: the `sessionPersistence` of every rule that forwards.
    if let Some(sp) = session_persistence(reading, &mut notes) {
        for h in &mut hosts {
            for r in &mut h.rules {
                if r.get("backendRefs").is_some() {
                    r["sessionPersistence"] = sp.clone();
                }
            }
        }
    }

    // Routes: one per host; with an HTTPS redirect, the plaintext listener gets a twin
    // whose rules answer with it.
    let base = ing.metadata.name.as_ref();
    let several = hosts.len() > 1;
    let mut route_names = Vec::new();
    for (k, h) in hosts.iter().enumerate() {
        let name = if several {
            format!("{base}-{k}")
        } else {
            base.to_owned()
        };
        let covering = gw.covering(ing, h.host.as_deref());
        let redirect = match reading.https_redirect {
            HttpsRedirect::Off => false,
            HttpsRedirect::TlsHosts => !covering.is_empty(),
            HttpsRedirect::All => true,
        };
        let mut sections: Vec<&str> = covering.iter().map(String::as_str).collect();
        if !redirect {
            sections.insert(0, HTTP_LISTENER);
        } else {
            let port = (opts.https_port != 443).then_some(opts.https_port);
            let to_https = Redirect {
                scheme: Some("https".into()),
                hostname: None,
                path: None,
                port,
                status: 308,
            };
            let rules: Vec<Value> = h
                .rules
                .iter()
                .map(|r| {
                    let mut r = json!({"matches": r["matches"].clone()});
                    merge(&mut r, redirect_action(&to_https, &[]));
                    r
                })
                .collect();
            let twin = format!("{name}-http");
            out.objects.push(http_route(
                opts,
                ns,
                &twin,
                h.host.as_deref(),
                &[HTTP_LISTENER],
                rules,
            ));
            // The twin is not a target of the Ingress's TrafficPolicy: ingress-nginx
            // redirects before its access checks (weir serves the Ingress so too).
        }
        if sections.is_empty() {
            continue;
        }
        out.objects.push(http_route(
            opts,
            ns,
            &name,
            h.host.as_deref(),
            &sections,
            h.rules.clone(),
        ));
        route_names.push(name);
    }
    if reading.ssl_passthrough {
        passthrough(opts, ing, gw, &mut refs, &mut notes, out);
    }
    if let Some(t) = &reading.backend_tls {
        backend_tls(ing, reading, t, &refs.services, &mut notes, out);
    }
    for b in refs.h2c_backends {
        if let Some(backend) = inputs.backends.get(&(ns, b.as_str())) {
            let mut spec = backend.spec.clone();
            spec.protocol = Some("H2C".into());
            out.objects.push(json!({
                "apiVersion": "weir.dev/v1alpha1", "kind": "Backend",
                "metadata": {"name": b, "namespace": ns},
                "spec": spec,
            }));
            notes.add(
                Severity::Manual,
                format!("backend-protocol: Backend {ns}/{b} is written with protocol H2C; it replaces the input's"),
            );
        }
    }
    out.notes.extend(notes.list);
    policy::policy(ing, reading, &route_names, out);
}

/// Names every annotation of the prefix that is not carried over, and the translator's
/// own problems with the annotations.
fn report_annotations(ing: &Ingress, reading: &IngressNginxReading, notes: &mut Notes) {
    for p in &reading.problems {
        notes.add(
            Severity::NotCarried,
            format!("{p} (weir serves the Ingress the same way)"),
        );
    }
    for key in ing.metadata.annotations.keys() {
        let Some(k) = key.strip_prefix(INGRESS_NGINX_PREFIX) else {
            continue;
        };
        // The translator names the annotations it does not serve itself (above).
        if !CARRIED.contains(&k) && !reading.problems.iter().any(|p| p.contains(key.as_str())) {
            notes.add(
                Severity::NotCarried,
                format!("annotation {key}: weir migrate does not carry it over"),
            );
        }
    }
    if reading.other_policy_settings {
        notes.add(
            Severity::NotCarried,
            "a policy setting of the annotations has no TrafficPolicy field in weir migrate yet"
                .into(),
        );
    }
}

/// The Ingress's filters as HTTPRoute filters.
fn filters(reading: &IngressNginxReading, notes: &mut Notes) -> Vec<Value> {
    let mut out = Vec::new();
    for f in &reading.filters {
        match f {
            Filter::RequestHeaders(m) => out.push(json!({
                "type": "RequestHeaderModifier", "requestHeaderModifier": header_modifier(m),
            })),
            Filter::ResponseHeaders(m) => out.push(json!({
                "type": "ResponseHeaderModifier", "responseHeaderModifier": header_modifier(m),
            })),
            Filter::UrlRewrite { hostname, path } => {
                let mut r = json!({});
                if let Some(h) = hostname {
                    r["hostname"] = json!(h);
                }
                match path {
                    Some(PathRewrite::RegexCaptures(t)) => notes.add(
                        Severity::NotCarried,
                        format!(
                            "rewrite-target {t:?} uses capture groups of a regex path, which \
                             an HTTPRoute URLRewrite cannot express; the path is left as sent"
                        ),
                    ),
                    Some(p) => r["path"] = path_modifier(p),
                    None => {}
                }
                if r.as_object().is_some_and(|o| !o.is_empty()) {
                    out.push(json!({"type": "URLRewrite", "urlRewrite": r}));
                }
            }
            Filter::Cors(c) => out.push(json!({"type": "CORS", "cors": policy::cors(c)})),
            Filter::Mirror { .. } => notes.add(
                Severity::NotCarried,
                "a request mirror of the annotations is not carried over".into(),
            ),
            // Built with the Ingress's backends, never among the annotations' filters
            // (`default-backend` and `custom-http-errors` are reported as annotations).
            Filter::InterceptErrors(_) => notes.add(
                Severity::NotCarried,
                "error responses replaced by another backend: Gateway API has no filter for it"
                    .into(),
            ),
        }
    }
    out
}

fn header_modifier(m: &HeaderModifier) -> Value {
    let pairs = |v: &[(std::sync::Arc<str>, std::sync::Arc<str>)]| -> Vec<Value> {
        v.iter()
            .map(|(n, v)| json!({"name": n, "value": v}))
            .collect()
    };
    let mut out = json!({});
    if !m.set.is_empty() {
        out["set"] = json!(pairs(&m.set));
    }
    if !m.add.is_empty() {
        out["add"] = json!(pairs(&m.add));
    }
    if !m.remove.is_empty() {
        out["remove"] = json!(m.remove);
    }
    out
}

fn path_modifier(p: &PathRewrite) -> Value {
    match p {
        PathRewrite::Full(s) => json!({"type": "ReplaceFullPath", "replaceFullPath": s}),
        PathRewrite::PrefixMatch(s) => {
            json!({"type": "ReplacePrefixMatch", "replacePrefixMatch": s})
        }
        // Reported by the caller (no Gateway API form).
        PathRewrite::RegexCaptures(_) => Value::Null,
    }
}

/// `ssl-passthrough`: a TLSRoute per host of the Ingress on its Passthrough listener,
/// to the backend of the host's `/` path (else its first), as weir serves it.
fn passthrough(
    opts: &MigrateOptions,
    ing: &Ingress,
    gw: &GatewayBuilder<'_>,
    refs: &mut BackendRefs<'_, '_>,
    notes: &mut Notes,
    out: &mut Migration,
) {
    let ns = ing.metadata.namespace.as_ref();
    let mut done: Vec<String> = Vec::new();
    for (i, rule) in ing.spec.rules.iter().enumerate() {
        let Some(host) = rule.host.as_deref().map(str::to_ascii_lowercase) else {
            continue;
        };
        if done.contains(&host) {
            continue;
        }
        let Some(http) = &rule.http else { continue };
        let Some((j, p)) = http
            .paths
            .iter()
            .enumerate()
            .find(|(_, p)| p.path.as_deref().unwrap_or("/") == "/")
            .or_else(|| http.paths.iter().enumerate().next())
        else {
            continue;
        };
        let Some(section) = gw.passthrough_listener(&host) else {
            continue;
        };
        let field = format!("spec.rules[{i}].http.paths[{j}].backend");
        let Some(backend) = refs.backend_ref(&p.backend, &field, notes) else {
            continue;
        };
        let name = format!("{}-passthrough-{}", ing.metadata.name, done.len());
        done.push(host.clone());
        out.objects.push(json!({
            "apiVersion": "gateway.networking.k8s.io/v1alpha2",
            "kind": "TLSRoute",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "parentRefs": [{
                    "group": "gateway.networking.k8s.io", "kind": "Gateway",
                    "name": opts.gateway_name, "namespace": opts.gateway_namespace,
                    "sectionName": section,
                }],
                "hostnames": [host],
                "rules": [{"backendRefs": [backend]}],
            },
        }));
    }
    if !ing.spec.tls.is_empty() {
        notes.add(
            Severity::Info,
            "spec.tls is not used: with ssl-passthrough the backends terminate TLS (as in ingress-nginx)"
                .into(),
        );
    }
}

/// `backend-protocol: HTTPS` with `proxy-ssl-verify`: a BackendTLSPolicy per Service
/// (and a ConfigMap with the CA of `proxy-ssl-secret`). Without verification, or for
/// GRPCS, there is no Gateway API form: reported.
fn backend_tls(
    ing: &Ingress,
    reading: &IngressNginxReading,
    t: &weir_translate::BackendTlsReading,
    services: &[String],
    notes: &mut Notes,
    out: &mut Migration,
) {
    let ns = ing.metadata.namespace.as_ref();
    if reading.h2c {
        notes.add(
            Severity::NotCarried,
            "backend-protocol: GRPCS: HTTP/2 over TLS to a Service has no HTTPRoute form weir serves yet; the backendRefs are written as plain HTTP".into(),
        );
        return;
    }
    if !t.verify {
        notes.add(
            Severity::NotCarried,
            "backend-protocol: HTTPS without proxy-ssl-verify: a BackendTLSPolicy always verifies the backend's certificate and weir has no unverified form of it; the backendRefs are written as plain HTTP".into(),
        );
        return;
    }
    let ca = t.ca_pem.as_ref().map(|pem| {
        let name = format!("{}-backend-ca", ing.metadata.name);
        out.objects.push(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns},
            "data": {"ca.crt": String::from_utf8_lossy(pem)},
        }));
        name
    });
    for svc in services {
        let hostname = t
            .name
            .as_deref()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{svc}.{ns}.svc"));
        let validation = match &ca {
            Some(cm) => json!({
                "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": cm}],
                "hostname": hostname,
            }),
            None => json!({"wellKnownCACertificates": "System", "hostname": hostname}),
        };
        out.objects.push(json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "BackendTLSPolicy",
            "metadata": {"name": format!("{}-{svc}", ing.metadata.name), "namespace": ns},
            "spec": {
                "targetRefs": [{"group": "", "kind": "Service", "name": svc}],
                "validation": validation,
            },
        }));
        notes.add(
            Severity::Info,
            format!("backend-protocol: HTTPS: BackendTLSPolicy {ns}/{}-{svc} applies to every route to Service {ns}/{svc}, not only this Ingress's", ing.metadata.name),
        );
    }
    if t.client_certificate {
        notes.add(
            Severity::NotCarried,
            "proxy-ssl-secret's tls.crt/tls.key: a client certificate towards backends is a Gateway's spec.tls.backend, which weir migrate does not write".into(),
        );
    }
    if !t.send_sni {
        notes.add(
            Severity::Info,
            "proxy-ssl-server-name is off: a BackendTLSPolicy sends its hostname as SNI".into(),
        );
    }
}

/// What a rule does: forward to `b` with the Ingress's filters, or answer with the
/// Ingress's redirect. `None`: the backend cannot be written (noted).
fn action(
    reading: &IngressNginxReading,
    b: &IngressBackend,
    field: &str,
    filters: &[Value],
    refs: &mut BackendRefs<'_, '_>,
    notes: &mut Notes,
) -> Option<Value> {
    if let Some(r) = &reading.redirect {
        return Some(redirect_action(r, filters));
    }
    let backend = refs.backend_ref(b, field, notes)?;
    let mut out = json!({"backendRefs": [backend]});
    if !filters.is_empty() {
        out["filters"] = json!(filters);
    }
    Some(out)
}

/// A rule's redirect, beside the filters that still apply to an answer (a rewrite
/// cannot stand beside a redirect in an HTTPRoute, and means nothing without a forward).
fn redirect_action(r: &Redirect, filters: &[Value]) -> Value {
    let mut redirect = json!({"statusCode": r.status});
    if let Some(s) = &r.scheme {
        redirect["scheme"] = json!(s);
    }
    if let Some(h) = &r.hostname {
        redirect["hostname"] = json!(h);
    }
    if let Some(p) = &r.path {
        redirect["path"] = path_modifier(p);
    }
    if let Some(p) = r.port {
        redirect["port"] = json!(p);
    }
    let mut all: Vec<Value> = filters
        .iter()
        .filter(|f| {
            !matches!(
                f["type"].as_str(),
                Some("URLRewrite" | "RequestHeaderModifier")
            )
        })
        .cloned()
        .collect();
    all.push(json!({"type": "RequestRedirect", "requestRedirect": redirect}));
    json!({"filters": all})
}

/// Writes backendRefs of one Ingress's backends.
struct BackendRefs<'i, 'a> {
    ns: &'i str,
    /// `backend-protocol` asks for HTTP/2 without TLS.
    h2c: bool,
    inputs: &'i Inputs<'a>,
    /// Backends of the input to write again with protocol H2C.
    h2c_backends: Vec<String>,
    /// The Services named, each once.
    services: Vec<String>,
}

impl BackendRefs<'_, '_> {
    /// The backendRef of an Ingress backend.
    fn backend_ref(&mut self, b: &IngressBackend, field: &str, notes: &mut Notes) -> Option<Value> {
        let (ns, h2c, inputs, h2c_backends) =
            (self.ns, self.h2c, self.inputs, &mut self.h2c_backends);
        if let Some(s) = &b.service {
            let svc = inputs.services.get(&(ns, s.name.as_str()));
            let port = match (s.port.number, &s.port.name) {
                (Some(n), _) => Some(n),
                (None, Some(name)) => svc.and_then(|svc| {
                    svc.spec
                        .ports
                        .iter()
                        .find(|p| p.name.as_deref() == Some(name.as_str()))
                        .map(|p| p.port)
                }),
                (None, None) => None,
            };
            let Some(port) = port else {
                notes.add(
                Severity::NotCarried,
                format!(
                    "{field}.service.port: an HTTPRoute names a Service port by number; Service {ns}/{} with its port {:?} is not among the input; path left out",
                    s.name,
                    s.port.name.as_deref().unwrap_or_default()
                ),
            );
                return None;
            };
            if h2c {
                let declared = svc
                    .and_then(|svc| svc.spec.ports.iter().find(|p| p.port == port))
                    .and_then(|p| p.app_protocol.as_deref())
                    == Some("kubernetes.io/h2c");
                if !declared {
                    notes.add(
                    Severity::Manual,
                    format!(
                        "backend-protocol: set appProtocol: kubernetes.io/h2c on port {port} of Service {ns}/{} (an HTTPRoute speaks HTTP/2 to a Service port that says so)",
                        s.name
                    ),
                );
                }
            }
            if !self.services.contains(&s.name) {
                self.services.push(s.name.clone());
            }
            return Some(json!({"name": s.name, "port": port}));
        }
        if let Some(r) = &b.resource
            && r.api_group.as_deref() == Some("weir.dev")
            && &*r.kind == "Backend"
        {
            if h2c && !h2c_backends.iter().any(|n| **n == *r.name) {
                let declared = inputs.backends.get(&(ns, &*r.name)).map(|b| {
                    b.spec
                        .protocol
                        .as_deref()
                        .is_some_and(|p| p.eq_ignore_ascii_case("h2c"))
                });
                match declared {
                Some(true) => {}
                Some(false) => h2c_backends.push(r.name.to_string()),
                None => notes.add(
                    Severity::Manual,
                    format!("backend-protocol: set protocol: H2C on Backend {ns}/{} (not among the input)", r.name),
                ),
            }
            }
            return Some(json!({"group": "weir.dev", "kind": "Backend", "name": r.name}));
        }
        notes.add(
            Severity::NotCarried,
            format!("{field}: neither a Service nor a weir.dev Backend; path left out"),
        );
        None
    }
}

/// The notes of one Ingress.
pub(super) struct Notes {
    who: String,
    list: Vec<Note>,
}

impl Notes {
    pub(super) fn add(&mut self, severity: Severity, message: String) {
        self.list.push(Note {
            object: self.who.clone(),
            severity,
            message,
        });
    }
}

/// `affinity: cookie` as Gateway API `sessionPersistence` (a cookie weir generates,
/// `Permanent` with the annotations' `Max-Age`), which weir serves with the same
/// consistent hash as the annotation.
fn session_persistence(reading: &IngressNginxReading, notes: &mut Notes) -> Option<Value> {
    let lb = reading.load_balancer.as_ref()?;
    let LoadBalancer::ConsistentHash(HashOn::Cookie {
        name,
        generate: Some(g),
    }) = lb
    else {
        notes.add(
            Severity::NotCarried,
            format!("load balancer {lb:?} has no HTTPRoute form"),
        );
        return None;
    };
    if &*g.path != "/" {
        notes.add(
            Severity::NotCarried,
            format!(
                "session-cookie-path {:?}: a sessionPersistence cookie's path is /",
                &*g.path
            ),
        );
    }
    let mut sp = json!({"type": "Cookie", "sessionName": &**name});
    if let Some(ttl) = g.ttl {
        sp["absoluteTimeout"] = json!(format!("{}s", ttl.as_secs()));
        sp["cookieConfig"] = json!({"lifetimeType": "Permanent"});
    }
    Some(sp)
}

fn http_route(
    opts: &MigrateOptions,
    ns: &str,
    name: &str,
    host: Option<&str>,
    sections: &[&str],
    rules: Vec<Value>,
) -> Value {
    let parents: Vec<Value> = sections
        .iter()
        .map(|s| {
            json!({
                "group": "gateway.networking.k8s.io", "kind": "Gateway",
                "name": opts.gateway_name, "namespace": opts.gateway_namespace, "sectionName": s,
            })
        })
        .collect();
    let mut spec = json!({"parentRefs": parents, "rules": rules});
    if let Some(h) = host {
        spec["hostnames"] = json!([h]);
    }
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

/// Adds the fields of `from` (an object) to `to`.
fn merge(to: &mut Value, from: Value) {
    if let (Some(to), Value::Object(from)) = (to.as_object_mut(), from) {
        to.extend(from);
    }
}
