//! The TrafficPolicy of an Ingress's policy annotations (rate limit, retry, basic and
//! external auth, client addresses, timeouts, body size, concurrency), targeting the HTTPRoutes the Ingress became, and the
//! htpasswd Secret its basic auth reads.

use std::time::Duration;

use serde_json::{Value, json};
use weir_api::Ingress;
use weir_model::{Cors, CorsNames, CorsOrigin, RateLimitKey};
use weir_translate::IngressNginxReading;

use super::{Migration, Note, Severity, ingress_name};

/// Writes the policy (and Secret) of `ing` into `out`, if its annotations set any.
pub(super) fn policy(
    ing: &Ingress,
    reading: &IngressNginxReading,
    routes: &[String],
    out: &mut Migration,
) {
    let ns = ing.metadata.namespace.as_ref();
    let name = &ing.metadata.name;
    let mut spec = json!({});
    if let Some(l) = &reading.rate_limit {
        let unit = match l.per {
            d if d == Duration::from_secs(1) => "Second",
            d if d == Duration::from_secs(60) => "Minute",
            _ => "Hour",
        };
        let key = match &l.key {
            RateLimitKey::ClientIp => json!({"type": "ClientIP"}),
            RateLimitKey::Header(h) => json!({"type": "Header", "header": h}),
            RateLimitKey::Target => json!({"type": "Target"}),
        };
        spec["rateLimit"] = json!({"local": {
            "requests": l.requests, "unit": unit, "burst": l.burst, "key": key,
        }});
    }
    if let Some(r) = &reading.retry {
        let mut retry = json!({
            "attempts": r.attempts,
            "backoff": format!("{}ms", r.backoff.as_millis()),
        });
        if !r.codes.is_empty() {
            retry["codes"] = json!(r.codes);
        }
        if r.non_idempotent {
            retry["nonIdempotent"] = json!(true);
        }
        spec["retry"] = retry;
    }
    if let Some(t) = reading.timeouts.backend_request {
        spec["timeouts"] = json!({"backendRequest": format!("{}s", t.as_secs())});
    }
    if let Some(t) = reading.timeouts.backend_send {
        spec["timeouts"]["backendSend"] = json!(format!("{}s", t.as_secs()));
    }
    if let Some(t) = reading.timeouts.request {
        spec["timeouts"]["request"] = json!(format!("{}s", t.as_secs()));
    }
    // Cookie affinity is each rule's `sessionPersistence` (route.rs): a TrafficPolicy's
    // `loadBalancer` belongs to a Service or Backend.
    if let Some(l) = &reading.concurrency_limit {
        spec["concurrencyLimit"] = json!({"perClient": l.per_client});
    }
    if let Some(max) = reading
        .request_limits
        .as_ref()
        .and_then(|l| l.max_body_bytes)
    {
        spec["requestLimits"] = json!({"maxBodyBytes": max});
    }
    if let Some(rules) = &reading.ip_rules {
        let nets = |v: &[weir_model::IpNet]| -> Vec<String> {
            v.iter().map(ToString::to_string).collect()
        };
        let mut ip = json!({});
        if !rules.allow.is_empty() {
            ip["allow"] = json!(nets(&rules.allow));
        }
        if !rules.deny.is_empty() {
            ip["deny"] = json!(nets(&rules.deny));
        }
        spec["ipRules"] = ip;
    }
    if let Some(a) = &reading.ext_auth {
        let mut e = json!({"url": a.url.to_string()});
        if !a.response_headers.is_empty() {
            e["responseHeaders"] = json!(a.response_headers);
        }
        if let Some(s) = &a.signin_url {
            e["signinUrl"] = json!(s);
        }
        spec["extAuth"] = e;
    }
    if let Some(a) = &reading.basic_auth {
        // The users as the translator read them (from an auth-file or an auth-map
        // Secret), in the htpasswd layout a TrafficPolicy reads.
        let secret = format!("{name}-basic-auth");
        let auth: String = a.users.iter().map(|(u, h)| format!("{u}:{h}\n")).collect();
        out.objects.push(json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret, "namespace": ns},
            "stringData": {"auth": auth},
        }));
        spec["basicAuth"] = json!({"secretRef": {"name": secret}, "realm": a.realm});
        if a.users.is_empty() {
            out.notes.push(Note {
                object: ingress_name(ing),
                severity: Severity::Info,
                message: format!(
                    "basic auth has no usable user (see above); Secret {ns}/{secret} is empty and every request is refused, as weir serves the Ingress"
                ),
            });
        }
    }
    if spec.as_object().is_none_or(|o| o.is_empty()) {
        return;
    }
    if routes.is_empty() {
        out.notes.push(Note {
            object: ingress_name(ing),
            severity: Severity::NotCarried,
            message: "its policy annotations have no route to apply to".into(),
        });
        return;
    }
    spec["targetRefs"] = routes
        .iter()
        .map(|r| json!({"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": r}))
        .collect();
    out.objects.push(json!({
        "apiVersion": "weir.dev/v1alpha1", "kind": "TrafficPolicy",
        "metadata": {"name": format!("{name}-nginx"), "namespace": ns},
        "spec": spec,
    }));
}

/// A CORS filter's fields as the translator compiled them.
pub(super) fn cors(c: &Cors) -> Value {
    let names = |n: &CorsNames| -> Vec<String> {
        match n {
            CorsNames::Any => vec!["*".into()],
            CorsNames::Listed(v) => v.iter().map(ToString::to_string).collect(),
        }
    };
    let origins: Vec<String> = c
        .allow_origins
        .iter()
        .map(|o| match o {
            CorsOrigin::Any => "*".to_owned(),
            CorsOrigin::Exact(s) => s.to_string(),
            CorsOrigin::Wildcard { prefix, suffix } => format!("{prefix}*{suffix}"),
        })
        .collect();
    let mut out = json!({
        "allowOrigins": origins,
        "allowCredentials": c.allow_credentials,
        "maxAge": c.max_age,
    });
    for (k, v) in [
        ("allowMethods", names(&c.allow_methods)),
        ("allowHeaders", names(&c.allow_headers)),
        ("exposeHeaders", names(&c.expose_headers)),
    ] {
        if !v.is_empty() {
            out[k] = json!(v);
        }
    }
    out
}
