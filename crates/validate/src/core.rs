//! The Kubernetes core kinds weir reads, validated the way the API server's built-in
//! validation does (`pkg/apis/{core,networking,discovery}/validation`): the fields weir
//! reads and the rules that decide whether such an object is accepted at all.

use serde_json::Value;

use crate::doc::Doc;
use crate::error::{ErrorType, FieldError, quote};
use crate::names;

type Errs = Vec<FieldError>;

fn str_of<'a, D: Doc>(v: &'a D, key: &str) -> Option<&'a str> {
    v.get(key).and_then(D::as_str)
}

fn list<'a, D: Doc>(v: &'a D, key: &str) -> &'a [D] {
    v.get(key).and_then(D::as_array).unwrap_or(&[])
}

fn unsupported(field: &str, value: &str, supported: &[&str], errs: &mut Errs) {
    let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
    errs.push(FieldError {
        field: field.to_owned(),
        kind: ErrorType::Unsupported(quote(value)),
        detail: format!("supported values: {}", list.join(", ")),
    });
}

fn check(field: &str, value: &str, problem: Option<String>, errs: &mut Errs) {
    if let Some(p) = problem {
        errs.push(FieldError::invalid(field, value, p));
    }
}

/// A field path built only when an error names it: valid objects are read by the ten
/// thousand.
type Field<'a> = &'a dyn Fn() -> String;

/// [`check`] with a field path built on error.
fn check_at(field: Field<'_>, value: &str, problem: Option<String>, errs: &mut Errs) {
    if let Some(p) = problem {
        errs.push(FieldError::invalid(&field(), value, p));
    }
}

fn port_number<D: Doc>(field: &str, v: &D, errs: &mut Errs) {
    match v.as_i64() {
        Some(1..=65535) => {}
        _ => errs.push(FieldError::invalid(
            field,
            &v.to_json(),
            "must be between 1 and 65535, inclusive",
        )),
    }
}

/// A host of an Ingress rule or TLS entry: a DNS subdomain or a wildcard one, never an IP.
fn ingress_host(field: Field<'_>, host: &str, errs: &mut Errs) {
    if names::is_ip(host) {
        errs.push(FieldError::invalid(
            &field(),
            host,
            "must be a DNS name, not an IP address",
        ));
    } else if host.contains('*') {
        check_at(field, host, names::wildcard_subdomain(host), errs);
    } else {
        check_at(field, host, names::dns1123_subdomain(host), errs);
    }
}

fn ingress_backend<D: Doc>(field: Field<'_>, b: &D, errs: &mut Errs) {
    let service = b.get("service");
    match (service, b.get("resource")) {
        (Some(_), Some(_)) => errs.push(FieldError::invalid(
            &field(),
            "",
            "cannot set both resource and service backends",
        )),
        (None, None) => errs.push(FieldError::invalid(
            &field(),
            "",
            "resource or service backend is required",
        )),
        (None, Some(r)) => {
            for key in ["kind", "name"] {
                if str_of(r, key).is_none_or(str::is_empty) {
                    errs.push(FieldError::required(
                        &format!("{}.resource.{key}", field()),
                        "",
                    ));
                }
            }
        }
        (Some(s), None) => {
            let name = str_of(s, "name").unwrap_or("");
            check_at(
                &|| format!("{}.service.name", field()),
                name,
                names::dns1035_label(name),
                errs,
            );
            let port = s.get("port");
            let pf = || format!("{}.service.port", field());
            match (
                port.and_then(|p| str_of(p, "name"))
                    .filter(|n| !n.is_empty()),
                port.and_then(|p| p.get("number")),
            ) {
                (Some(_), Some(n)) if n.as_i64() != Some(0) => errs.push(FieldError::invalid(
                    &pf(),
                    "",
                    "cannot set both port name & port number",
                )),
                (Some(n), _) => check_at(
                    &|| format!("{}.name", pf()),
                    n,
                    names::iana_svc_name(n),
                    errs,
                ),
                (None, Some(n)) => {
                    if !matches!(n.as_i64(), Some(1..=65535)) {
                        port_number(&format!("{}.number", pf()), n, errs);
                    }
                }
                (None, None) => errs.push(FieldError::invalid(
                    &pf(),
                    "",
                    "port name or number is required",
                )),
            }
        }
    }
}

const BAD_PATH_PARTS: [&str; 5] = ["//", "/./", "/../", "%2f", "%2F"];

fn ingress_path<D: Doc>(field: Field<'_>, p: &D, errs: &mut Errs) {
    let path = str_of(p, "path").unwrap_or("");
    let pf = || format!("{}.path", field());
    match str_of(p, "pathType") {
        None => errs.push(FieldError::required(
            &format!("{}.pathType", field()),
            "pathType must be specified",
        )),
        Some("Exact" | "Prefix") => {
            if !path.starts_with('/') {
                errs.push(FieldError::invalid(&pf(), path, "must be an absolute path"));
            }
            for bad in BAD_PATH_PARTS {
                if path.contains(bad) {
                    errs.push(FieldError::invalid(
                        &pf(),
                        path,
                        format!("must not contain '{bad}'"),
                    ));
                }
            }
            for bad in ["/..", "/."] {
                if path.ends_with(bad) {
                    errs.push(FieldError::invalid(
                        &pf(),
                        path,
                        format!("cannot end with '{bad}'"),
                    ));
                }
            }
        }
        Some("ImplementationSpecific") => {
            if !path.is_empty() && !path.starts_with('/') {
                errs.push(FieldError::invalid(&pf(), path, "must be an absolute path"));
            }
        }
        Some(other) => unsupported(
            &format!("{}.pathType", field()),
            other,
            &["Exact", "ImplementationSpecific", "Prefix"],
            errs,
        ),
    }
    match p.get("backend") {
        Some(b) => ingress_backend(&|| format!("{}.backend", field()), b, errs),
        None => errs.push(FieldError::required(&format!("{}.backend", field()), "")),
    }
}

/// networking.k8s.io/v1 Ingress.
pub(crate) fn ingress<D: Doc>(doc: &D, errs: &mut Errs) {
    let spec = doc.get("spec");
    let rules = spec.map_or(&[][..], |s| list(s, "rules"));
    if let Some(b) = spec.and_then(|s| s.get("defaultBackend")) {
        ingress_backend(&|| "spec.defaultBackend".to_owned(), b, errs);
    } else if rules.is_empty() {
        errs.push(FieldError::invalid(
            "spec",
            "",
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    if let Some(class) = spec.and_then(|s| str_of(s, "ingressClassName")) {
        check(
            "spec.ingressClassName",
            class,
            names::dns1123_subdomain(class),
            errs,
        );
    }
    for (i, rule) in rules.iter().enumerate() {
        if let Some(host) = str_of(rule, "host").filter(|h| !h.is_empty()) {
            ingress_host(&|| format!("spec.rules[{i}].host"), host, errs);
        }
        if let Some(http) = rule.get("http") {
            let paths = list(http, "paths");
            if paths.is_empty() {
                errs.push(FieldError::required(
                    &format!("spec.rules[{i}].http.paths"),
                    "",
                ));
            }
            for (j, p) in paths.iter().enumerate() {
                ingress_path(&|| format!("spec.rules[{i}].http.paths[{j}]"), p, errs);
            }
        }
    }
    for (i, tls) in spec.map_or(&[][..], |s| list(s, "tls")).iter().enumerate() {
        for (j, host) in list(tls, "hosts").iter().enumerate() {
            let host = host.as_str().unwrap_or("");
            let field = || format!("spec.tls[{i}].hosts[{j}]");
            if host.contains('*') {
                check_at(&field, host, names::wildcard_subdomain(host), errs);
            } else {
                check_at(&field, host, names::dns1123_subdomain(host), errs);
            }
        }
    }
}

/// networking.k8s.io/v1 IngressClass.
pub(crate) fn ingress_class(doc: &Value, errs: &mut Errs) {
    let spec = &doc["spec"];
    match str_of(spec, "controller") {
        None | Some("") => errs.push(FieldError::required("spec.controller", "")),
        Some(c) => {
            if c.len() > 250 {
                errs.push(FieldError {
                    field: "spec.controller".into(),
                    kind: ErrorType::TooLong,
                    detail: "may not be more than 250 bytes".into(),
                });
            }
            let ok = c.split_once('/').is_some_and(|(domain, path)| {
                names::dns1123_subdomain(domain).is_none()
                    && !path.is_empty()
                    && path.bytes().all(|b| b.is_ascii_graphic())
            });
            if !ok {
                errs.push(FieldError::invalid(
                    "spec.controller",
                    c,
                    "must be a domain-prefixed path (such as \"acme.io/foo\")",
                ));
            }
        }
    }
    if let Some(p) = spec.get("parameters") {
        for key in ["kind", "name"] {
            if str_of(p, key).is_none_or(str::is_empty) {
                errs.push(FieldError::required(&format!("spec.parameters.{key}"), ""));
            }
        }
        match (str_of(p, "scope"), p.get("namespace")) {
            (Some("Namespace"), None) => errs.push(FieldError::required(
                "spec.parameters.namespace",
                "`parameters.scope` is set to 'Namespace'",
            )),
            (Some("Cluster") | None, Some(_)) => errs.push(FieldError::forbidden(
                "spec.parameters.namespace",
                "`parameters.scope` is set to 'Cluster'",
            )),
            (Some(s), _) if s != "Namespace" && s != "Cluster" => {
                unsupported("spec.parameters.scope", s, &["Cluster", "Namespace"], errs)
            }
            _ => {}
        }
    }
}

/// v1 Service.
pub(crate) fn service(doc: &Value, errs: &mut Errs) {
    let spec = &doc["spec"];
    let ty = str_of(spec, "type").unwrap_or("ClusterIP");
    const TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    if !TYPES.contains(&ty) {
        unsupported("spec.type", ty, &TYPES, errs);
    }
    let headless = str_of(spec, "clusterIP") == Some("None");
    let ports = list(spec, "ports");
    if ports.is_empty() && ty != "ExternalName" && !headless {
        errs.push(FieldError::required("spec.ports", ""));
    }
    if ty == "ExternalName" {
        match str_of(spec, "externalName") {
            None | Some("") => errs.push(FieldError::required("spec.externalName", "")),
            Some(n) => {
                let name = n.strip_suffix('.').unwrap_or(n);
                check("spec.externalName", n, names::dns1123_subdomain(name), errs);
            }
        }
    }
    if let Some(ip) = str_of(spec, "clusterIP")
        && !ip.is_empty()
        && ip != "None"
        && !names::is_ip(ip)
    {
        errs.push(FieldError::invalid(
            "spec.clusterIP",
            ip,
            "must be a valid IP address or \"None\"",
        ));
    }
    if let Some(a) = str_of(spec, "sessionAffinity")
        && a != "ClientIP"
        && a != "None"
    {
        unsupported("spec.sessionAffinity", a, &["ClientIP", "None"], errs);
    }
    let mut seen_names = Vec::new();
    let mut seen_ports = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let field = format!("spec.ports[{i}]");
        match str_of(p, "name").filter(|n| !n.is_empty()) {
            None if ports.len() > 1 => {
                errs.push(FieldError::required(&format!("{field}.name"), ""))
            }
            None => {}
            Some(n) => {
                check(&format!("{field}.name"), n, names::dns1123_label(n), errs);
                if seen_names.contains(&n) {
                    errs.push(FieldError {
                        field: format!("{field}.name"),
                        kind: ErrorType::Duplicate(quote(n)),
                        detail: String::new(),
                    });
                }
                seen_names.push(n);
            }
        }
        port_number(
            &format!("{field}.port"),
            p.get("port").unwrap_or(&Value::Null),
            errs,
        );
        let protocol = str_of(p, "protocol").unwrap_or("TCP");
        if !["TCP", "UDP", "SCTP"].contains(&protocol) {
            unsupported(
                &format!("{field}.protocol"),
                protocol,
                &["SCTP", "TCP", "UDP"],
                errs,
            );
        }
        match p.get("targetPort") {
            Some(Value::String(s)) => check(
                &format!("{field}.targetPort"),
                s,
                names::iana_svc_name(s),
                errs,
            ),
            Some(n @ Value::Number(_)) if n.as_i64() != Some(0) => {
                port_number(&format!("{field}.targetPort"), n, errs)
            }
            _ => {}
        }
        if ty == "ClusterIP" && p.get("nodePort").is_some_and(|n| n.as_i64() != Some(0)) {
            errs.push(FieldError::forbidden(
                &format!("{field}.nodePort"),
                "may not be used when `type` is 'ClusterIP'",
            ));
        }
        let key = (p.get("port").and_then(Value::as_i64), protocol);
        if seen_ports.contains(&key) {
            errs.push(FieldError {
                field: field.clone(),
                kind: ErrorType::Duplicate(format!(
                    "{{port: {}, protocol: {protocol}}}",
                    key.0.unwrap_or(0)
                )),
                detail: String::new(),
            });
        }
        seen_ports.push(key);
    }
    if let Some(selector) = spec.get("selector").and_then(Value::as_object) {
        for (k, v) in selector {
            check("spec.selector", k, names::qualified_name(k), errs);
            let v = v.as_str().unwrap_or("");
            check("spec.selector", v, names::label_value(v), errs);
        }
    }
}

/// A Secret (or ConfigMap) may hold at most this many bytes of data.
const MAX_SECRET_BYTES: usize = 1024 * 1024;

/// ConfigMap: keys of `data` and `binaryData` (a key in both is refused; the values of
/// `binaryData` are base64), at most 1 MiB in all, as the API server checks them.
pub(crate) fn config_map(doc: &Value, errs: &mut Errs) {
    let mut size = 0;
    let mut seen: Vec<&str> = Vec::new();
    for field in ["data", "binaryData"] {
        let Some(map) = doc.get(field).and_then(Value::as_object) else {
            continue;
        };
        for (k, v) in map {
            if let Some(p) = names::config_map_key(k) {
                errs.push(FieldError::invalid(&format!("{field}[{k}]"), k, p));
            }
            if field == "data" && !v.is_string() {
                errs.push(FieldError::invalid(
                    &format!("data[{k}]"),
                    "<value omitted>",
                    "must be a string",
                ));
            }
            let text = v.as_str().unwrap_or("");
            size += k.len()
                + if field == "data" {
                    text.len()
                } else {
                    match decoded_len(text) {
                        Some(n) => n,
                        None => {
                            errs.push(FieldError::invalid(
                                &format!("binaryData[{k}]"),
                                "<value omitted>",
                                "illegal base64 data",
                            ));
                            0
                        }
                    }
                };
            if seen.contains(&k.as_str()) {
                errs.push(FieldError::invalid(
                    &format!("data[{k}]"),
                    k,
                    "duplicate of key present in binaryData",
                ));
            }
            seen.push(k);
        }
    }
    if size > MAX_SECRET_BYTES {
        errs.push(FieldError {
            field: "".into(),
            kind: ErrorType::TooLong,
            detail: format!("may not be more than {MAX_SECRET_BYTES} bytes"),
        });
    }
}

/// v1 Secret. `data` values must be base64 (the API server cannot decode the object
/// otherwise); the keys of `data` and `stringData` together must be valid config keys, be
/// at most 1 MiB, and include what the Secret's type requires.
pub(crate) fn secret<D: Doc>(doc: &D, errs: &mut Errs) {
    let mut keys: Vec<&str> = Vec::new();
    let mut size = 0;
    for (field, map) in [
        ("data", doc.get("data")),
        ("stringData", doc.get("stringData")),
    ] {
        let Some(map) = map.and_then(D::entries) else {
            continue;
        };
        for (k, v) in map {
            if let Some(p) = names::config_map_key(k) {
                errs.push(FieldError::invalid(&format!("{field}[{k}]"), k, p));
            }
            let text = v.as_str().unwrap_or("");
            size += if field == "data" {
                match decoded_len(text) {
                    Some(n) => n,
                    None => {
                        errs.push(FieldError::invalid(
                            &format!("data[{k}]"),
                            "<value omitted>",
                            "illegal base64 data",
                        ));
                        0
                    }
                }
            } else {
                text.len()
            };
            keys.push(k);
        }
    }
    if size > MAX_SECRET_BYTES {
        errs.push(FieldError {
            field: "data".into(),
            kind: ErrorType::TooLong,
            detail: format!("may not be more than {MAX_SECRET_BYTES} bytes"),
        });
    }
    let has = |k: &str| keys.contains(&k);
    let data_of = |k: &str| {
        let value = |field: &str| doc.get(field).and_then(|m| str_of(m, k));
        value("stringData")
            .map(str::to_owned)
            .or_else(|| value("data").and_then(decode))
    };
    match str_of(doc, "type").unwrap_or("Opaque") {
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    errs.push(FieldError::required(&format!("data[{k}]"), ""));
                }
            }
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            errs.push(FieldError::required(
                "data[username]",
                "either username or password is required",
            ));
        }
        "kubernetes.io/ssh-auth" if !has("ssh-privatekey") => {
            errs.push(FieldError::required("data[ssh-privatekey]", ""));
        }
        "kubernetes.io/service-account-token"
            if doc
                .get("metadata")
                .and_then(|m| m.get("annotations"))
                .and_then(|a| str_of(a, "kubernetes.io/service-account.name"))
                .is_none_or(str::is_empty) =>
        {
            errs.push(FieldError::required(
                "metadata.annotations[kubernetes.io/service-account.name]",
                "",
            ));
        }
        ty @ ("kubernetes.io/dockercfg" | "kubernetes.io/dockerconfigjson") => {
            let key = if ty == "kubernetes.io/dockercfg" {
                ".dockercfg"
            } else {
                ".dockerconfigjson"
            };
            match data_of(key) {
                None => errs.push(FieldError::required(&format!("data[{key}]"), "")),
                Some(text) => {
                    if serde_json::from_str::<Value>(&text).is_err() {
                        errs.push(FieldError::invalid(
                            &format!("data[{key}]"),
                            "<secret contents redacted>",
                            "must be valid JSON",
                        ));
                    }
                }
            }
        }
        "" => errs.push(FieldError::required("type", "")),
        _ => {}
    }
}

fn b64_value(c: u8) -> Option<u32> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    } as u32)
}

/// Decodes standard, padded base64 (what the API server's JSON decoding of `[]byte`
/// accepts; newlines are tolerated as Go's decoder does).
fn decode(text: &str) -> Option<String> {
    let bytes: Vec<u8> = text.bytes().filter(|&c| c != b'\n' && c != b'\r').collect();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (n, chunk) in bytes.chunks(4).enumerate() {
        let last = n == bytes.len() / 4 - 1;
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || pad > 0 && !last {
            return None;
        }
        let mut acc = 0u32;
        for &c in &chunk[..4 - pad] {
            acc = acc << 6 | b64_value(c)?;
        }
        acc <<= 6 * pad as u32;
        let decoded = [(acc >> 16) as u8, (acc >> 8) as u8, acc as u8];
        out.extend_from_slice(&decoded[..3 - pad]);
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// The length `text` decodes to, if it is valid base64 (as [`decode`] reads it), without
/// decoding it: Secrets are found by the ten thousand.
fn decoded_len(text: &str) -> Option<usize> {
    let mut n = 0;
    let mut pad = 0;
    for c in text.bytes().filter(|&c| c != b'\n' && c != b'\r') {
        match c {
            b'=' => pad += 1,
            _ if pad > 0 => return None,
            _ => {
                b64_value(c)?;
            }
        }
        n += 1;
    }
    // `=` pads only the last group, by at most two.
    if n % 4 != 0 || pad > 2 {
        return None;
    }
    Some(n / 4 * 3 - pad)
}

/// discovery.k8s.io/v1 EndpointSlice.
pub(crate) fn endpoint_slice(doc: &Value, errs: &mut Errs) {
    let ty = str_of(doc, "addressType");
    match ty {
        None => errs.push(FieldError::required("addressType", "")),
        Some("IPv4" | "IPv6" | "FQDN") => {}
        Some(other) => unsupported("addressType", other, &["FQDN", "IPv4", "IPv6"], errs),
    }
    let endpoints = list(doc, "endpoints");
    if endpoints.len() > 1000 {
        errs.push(FieldError {
            field: "endpoints".into(),
            kind: ErrorType::TooMany(endpoints.len()),
            detail: "must have at most 1000 items".into(),
        });
    }
    for (i, e) in endpoints.iter().enumerate() {
        let addresses = list(e, "addresses");
        let field = format!("endpoints[{i}].addresses");
        if addresses.is_empty() {
            errs.push(FieldError::required(
                &field,
                "must contain at least 1 address",
            ));
        } else if addresses.len() > 100 {
            errs.push(FieldError {
                field: field.clone(),
                kind: ErrorType::TooMany(addresses.len()),
                detail: "must have at most 100 items".into(),
            });
        }
        for (j, a) in addresses.iter().enumerate() {
            let a = a.as_str().unwrap_or("");
            endpoint_address(&format!("{field}[{j}]"), a, ty.unwrap_or(""), errs);
        }
        if let Some(h) = str_of(e, "hostname") {
            check(
                &format!("endpoints[{i}].hostname"),
                h,
                names::dns1123_label(h),
                errs,
            );
        }
        if let Some(n) = str_of(e, "nodeName") {
            check(
                &format!("endpoints[{i}].nodeName"),
                n,
                names::dns1123_subdomain(n),
                errs,
            );
        }
    }
    let mut seen = Vec::new();
    for (i, p) in list(doc, "ports").iter().enumerate() {
        let name = str_of(p, "name").unwrap_or("");
        if !name.is_empty() {
            check(
                &format!("ports[{i}].name"),
                name,
                names::dns1123_label(name),
                errs,
            );
        }
        if seen.contains(&name) {
            errs.push(FieldError {
                field: format!("ports[{i}].name"),
                kind: ErrorType::Duplicate(quote(name)),
                detail: String::new(),
            });
        }
        seen.push(name);
        if let Some(proto) = str_of(p, "protocol")
            && !["TCP", "UDP", "SCTP"].contains(&proto)
        {
            unsupported(
                &format!("ports[{i}].protocol"),
                proto,
                &["SCTP", "TCP", "UDP"],
                errs,
            );
        }
    }
}

fn endpoint_address(field: &str, a: &str, ty: &str, errs: &mut Errs) {
    let ip = match ty {
        "IPv4" => a
            .parse::<std::net::Ipv4Addr>()
            .map(std::net::IpAddr::V4)
            .ok(),
        "IPv6" => a
            .parse::<std::net::Ipv6Addr>()
            .map(std::net::IpAddr::V6)
            .ok(),
        "FQDN" => return check(field, a, names::dns1123_subdomain(a), errs),
        _ => return,
    };
    let Some(ip) = ip else {
        return errs.push(FieldError::invalid(
            field,
            a,
            format!("must be a valid {ty} address"),
        ));
    };
    let special = if ip.is_unspecified() {
        Some("may not be unspecified (0.0.0.0)")
    } else if ip.is_loopback() {
        Some("may not be in the loopback range (127.0.0.0/8, ::1/128)")
    } else if link_local(ip) {
        Some("may not be in the link-local range (169.254.0.0/16, fe80::/10)")
    } else {
        None
    };
    if let Some(s) = special {
        errs.push(FieldError::invalid(field, a, s));
    }
}

fn link_local(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_link_local() || v4.octets()[..3] == [224, 0, 0],
        std::net::IpAddr::V6(v6) => {
            let s = v6.segments()[0];
            s & 0xffc0 == 0xfe80 || s & 0xff0f == 0xff02
        }
    }
}

/// v1 Namespace: only its metadata (checked by the caller) and finalizers.
pub(crate) fn namespace(doc: &Value, errs: &mut Errs) {
    for (i, f) in list(&doc["spec"], "finalizers").iter().enumerate() {
        let f = f.as_str().unwrap_or("");
        check(
            &format!("spec.finalizers[{i}]"),
            f,
            names::qualified_name(f),
            errs,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64() {
        assert_eq!(decode("aGVsbG8=").as_deref(), Some("hello"));
        assert_eq!(decode("aGVsbG8h").as_deref(), Some("hello!"));
        assert_eq!(decode("").as_deref(), Some(""));
        for bad in ["aGVsbG8", "a===", "aG=s", "!!!!"] {
            assert_eq!(decode(bad), None, "{bad}");
            assert_eq!(decoded_len(bad), None, "{bad}");
        }
        for good in ["aGVsbG8=", "aGVsbG8h", "aGVs\nbG8=", "aA==", ""] {
            assert_eq!(decoded_len(good), decode(good).map(|s| s.len()), "{good}");
        }
    }
}
