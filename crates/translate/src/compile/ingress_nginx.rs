//! ingress-nginx annotations (`nginx.ingress.kubernetes.io/*`) served natively, so that
//! an Ingress written for ingress-nginx behaves the same on weir.
//!
//! Nothing here has an implementation of its own: a policy annotation becomes a setting
//! of the Ingress's *implicit policy* — the same `PolicySettings` a TrafficPolicy
//! compiles to, emitted as the `Policy` resource keyed by the Ingress (`PolicyTarget`
//! route of kind Ingress), which the data plane looks up for every rule of the Ingress
//! as it does for an HTTPRoute's — and a filter annotation becomes the same IR filter an
//! HTTPRoute filter does. Every other annotation of the prefix is named in the Ingress's
//! status as not supported (never ignored silently).
//!
//! | annotation | becomes |
//! |---|---|
//! | `limit-rps`, `limit-rpm`, `limit-burst-multiplier` | a local rate limit per client IP (burst = rate × multiplier, default 5; with both, `limit-rps`) |
//! | `limit-connections` | the policy's concurrency limit: at most that many requests of one client address in progress at once (nginx's `limit_conn` counts an HTTP/1.1 connection while it has a request, each HTTP/2 stream apart), 503 beyond |
//! | `proxy-body-size` (`8m`; units `k`, `m`, `g`; `0`: no limit) | the policy's `requestLimits.maxBodyBytes`: a larger body is answered 413 (unset: no limit, where ingress-nginx's default is 1m) |
//! | `auth-type: basic`, `auth-secret`, `auth-secret-type`, `auth-realm` | basic auth (`auth-file`: the Secret's `auth` key; `auth-map`: a key per user) |
//! | `auth-url`, `auth-signin`, `auth-response-headers` | external authorization (the `extAuth` of a TrafficPolicy; `Authorization` and `Cookie` are sent, not every request header as nginx's subrequest does) |
//! | `whitelist-source-range`, `denylist-source-range` | client address rules (403) |
//! | `upstream-vhost` | the Host rewrite filter |
//! | `x-forwarded-prefix` | a request header filter setting `X-Forwarded-Prefix` |
//! | `rewrite-target` | the path rewrite filter (the whole path, as nginx's `rewrite` does); with `$1`…`$9`, a template filled with the groups of the rule's path regex (`PathRewrite::RegexCaptures`) |
//! | `use-regex` (and `rewrite-target`) | `Prefix`/`ImplementationSpecific` paths become regex path matches: case-insensitive, from the start of the path (nginx's `location ~*`); `Exact` stays exact; only this Ingress's paths (ingress-nginx: every path of the host) |
//! | `proxy-connect-timeout`, `proxy-read-timeout` | the policy's `backendRequest` timeout = connect + read (ingress-nginx's 5 s / 60 s fill in the one not set): how long one attempt may wait for the response headers; weir's connect timeout stays the data plane's 5 s (a shorter one is named as partly applied) |
//! | `proxy-send-timeout` | the policy's `backend_send` timeout: an attempt whose request body the upstream connection takes no more of for that long fails (504), as nginx's timeout between two writes; waiting for the response is not bounded by it |
//! | `affinity: cookie`, `session-cookie-name` (default `INGRESSCOOKIE`), `-path` (default `/`), `-max-age`, `-expires`, `-samesite` (`None`, `Lax`, `Strict`), `-conditional-samesite-none`, `-secure`, `affinity-mode: balanced` | the policy's load balancer: a consistent hash on a cookie weir generates (`Max-Age` from `-max-age`, else `-expires`; `SameSite` as annotated, `None` with `Secure`, and left out for browsers known to mishandle `None` with `-conditional-samesite-none: "true"`; `Secure` over TLS, and on every response with `-secure: "true"`), as `sessionPersistence` is; `persistent` is named as not served |
//! | `server-alias` | every rule of a named host is served under each alias as well |
//! | `service-upstream` | a Service backend's cluster is one endpoint, the Service's cluster IP and port (`/cluster-ip` cluster key), not its endpoints; a headless Service then has none (503) |
//! | `canary: "true"`, `canary-by-header` (`-value`, `-pattern`), `canary-by-cookie`, `canary-weight` (`-total`, default 100) | for each host and path of the canary that the oldest main Ingress (ours, not a canary, same namespace) serves with the same path type: rules of the canary, before the main one's, with the main one's annotations (filters, policy, TLS hosts, as ingress-nginx ignores a canary's own): the header (`always`, or the value / pattern) and the cookie (`always`) send to the canary backend, `never` to the main one, and the rest is split by weight (no weight: the main rule serves it). A canary path no main Ingress serves is named and not served |
//! | `permanent-redirect` (`-code`, default 301), `temporal-redirect` (`-code`, default 302) | every rule answers with that redirect |
//! | `ssl-redirect` / `force-ssl-redirect` (`"true"`) | on the plaintext listener, a 308 to `https` for the hosts served over TLS / for all |
//! | `app-root` | a request for `/` is redirected (302) there |
//! | `backend-protocol` `HTTP`, `GRPC`, `H2C` | HTTP/1.1 or HTTP/2 (h2c) to the backends |
//! | `backend-protocol` `HTTPS`, `GRPCS`, `proxy-ssl-verify`, `proxy-ssl-secret` (`ca.crt`), `proxy-ssl-name`, `proxy-ssl-server-name` | HTTP/1.1 or HTTP/2 over TLS: the Ingress's Service backends get clusters of their own carrying the `UpstreamTls` (`ingress_nginx_tls`); unverified unless `proxy-ssl-verify: "on"` (then the Secret's `ca.crt`, else the system's CAs), no SNI unless `proxy-ssl-server-name: "on"`, the name `proxy-ssl-name` else `<service>.<namespace>.svc`; a BackendTLSPolicy on the Service port wins; the Secret's `tls.crt`/`tls.key` (if any) are the client certificate presented to backends that ask (`UpstreamTls.client_certificate`) |
//! | `enable-websockets` | nothing to do: upgrades are always relayed |
//! | `default-backend` (a Service of the Ingress's namespace, its first port), `custom-http-errors` | the `InterceptErrors` filter on every rule: an upstream response (or weir's own error) with one of the codes, or a backend without endpoints, is replaced by the default backend's answer to `GET /` with `X-Code`, `X-Format`, `X-Original-URI`, `X-Namespace`, `X-Ingress-Name`, `X-Service-Name`, `X-Service-Port` (and `X-Request-ID`); a path whose backend cannot be resolved forwards to the default backend; `custom-http-errors` without `default-backend` is named and ignored (weir has no controller-wide default backend) |
//! | `ssl-passthrough: "true"` | on the Ingress HTTPS listener, a TLS connection whose SNI is one of the Ingress's hosts is spliced to the backend of that host's `/` path (else its first path), TLS and all — the `L4Route` a TLSRoute on a Passthrough listener gets; the host's other annotations do not apply to it (as in ingress-nginx), plaintext requests are served as before |
//! | `proxy-next-upstream`, `proxy-next-upstream-tries` | a retry: `http_NNN` tokens are its codes, `non_idempotent` its `non_idempotent`, `off` none; tries (default 3, ingress-nginx's) count the first attempt; no backoff, as nginx passes a request to the next server at once |
//! | `enable-cors`, `cors-allow-origin`, `-methods`, `-headers`, `-credentials`, `cors-expose-headers`, `cors-max-age` | the CORS filter, with ingress-nginx's defaults |

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use weir_api::{HttpCorsFilter, Ingress};
use weir_model::{
    Filter, GeneratedCookie, HashOn, HeaderModifier, IpRules, LoadBalancer, LocalRateLimit,
    PathRewrite, Pattern, RateLimitKey, Redirect, Retry, SameSite, StringMatch, Timeouts,
};

use crate::compile::backend::WantProtocol;
use crate::compile::ingress_nginx_tls::IngressTls;

use crate::compile::policy::{
    HtpasswdLayout, PolicySettings, Refs, check_realm, htpasswd_users, ip_rules,
};
use crate::store::{Dep, Store};

/// The annotation prefix.
pub(crate) const PREFIX: &str = "nginx.ingress.kubernetes.io/";

/// What an Ingress's annotations ask for.
pub(crate) struct Annotations {
    /// Settings of the Ingress's implicit policy (`None`: no policy annotation).
    pub(crate) policy: Option<Arc<PolicySettings>>,
    /// Filters for every rule of the Ingress.
    pub(crate) filters: Vec<Filter>,
    /// What every rule does instead of forwarding (`permanent-redirect`,
    /// `temporal-redirect`).
    pub(crate) redirect: Option<Redirect>,
    /// Which requests on the plaintext listener are redirected to HTTPS.
    pub(crate) ssl_redirect: SslRedirect,
    /// Requests for `/` are redirected here (`app-root`).
    pub(crate) app_root: Option<Arc<str>>,
    /// The protocol to the backends (`backend-protocol`).
    pub(crate) want: WantProtocol,
    /// TLS to the backends (`backend-protocol: HTTPS`/`GRPCS`, `proxy-ssl-*`).
    pub(crate) upstream_tls: Option<IngressTls>,
    /// `default-backend` (a Service of the Ingress's namespace) and the status codes of
    /// `custom-http-errors` it answers for.
    pub(crate) default_backend: Option<(String, Vec<u16>)>,
    /// Service backends are reached at their cluster IP (`service-upstream`).
    pub(crate) service_upstream: bool,
    /// Whether `Prefix` and `ImplementationSpecific` paths are regular expressions
    /// (`use-regex`, `rewrite-target`).
    pub(crate) regex_paths: bool,
    /// More host names served with the rules of every host of the Ingress
    /// (`server-alias`).
    pub(crate) aliases: Vec<String>,
    /// The Ingress is a canary of the main Ingress of each of its host and path
    /// (`canary: "true"`).
    pub(crate) canary: Option<Canary>,
    /// TLS connections to the Ingress's hosts are passed through to the backend by SNI
    /// (`ssl-passthrough`).
    pub(crate) ssl_passthrough: bool,
    /// Invalid, unsupported or partly applied annotations, each named.
    pub(crate) problems: Vec<String>,
    /// Objects read (Secrets).
    pub(crate) deps: Vec<Dep>,
}

impl Default for Annotations {
    fn default() -> Self {
        Annotations {
            policy: None,
            filters: Vec::new(),
            redirect: None,
            ssl_redirect: SslRedirect::Off,
            app_root: None,
            want: WantProtocol::Declared,
            upstream_tls: None,
            default_backend: None,
            service_upstream: false,
            regex_paths: false,
            aliases: Vec::new(),
            canary: None,
            ssl_passthrough: false,
            problems: Vec::new(),
            deps: Vec::new(),
        }
    }
}

/// Which plaintext requests of an Ingress are redirected to HTTPS (308).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum SslRedirect {
    /// None (weir's default, unlike ingress-nginx's: only the annotations turn it on).
    #[default]
    Off,
    /// Those for a host the Ingress serves over TLS (`ssl-redirect: "true"`).
    TlsHosts,
    /// All (`force-ssl-redirect: "true"`: TLS ends before weir, e.g. at a load balancer).
    All,
}

/// The annotations weir reads; every other one of [`PREFIX`] is reported.
const SUPPORTED: &[&str] = &[
    "limit-rps",
    "limit-rpm",
    "limit-burst-multiplier",
    "limit-connections",
    "proxy-body-size",
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
    "proxy-connect-timeout",
    "proxy-read-timeout",
    "proxy-send-timeout",
    "use-regex",
    "affinity",
    "affinity-mode",
    "session-cookie-name",
    "session-cookie-path",
    "session-cookie-max-age",
    "session-cookie-expires",
    "session-cookie-samesite",
    "session-cookie-conditional-samesite-none",
    "session-cookie-secure",
    "server-alias",
    "service-upstream",
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
    "custom-http-errors",
    "default-backend",
];

/// Which requests a canary Ingress takes from its main Ingress, in this order: by header,
/// by cookie, by weight (ingress-nginx's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Canary {
    /// `canary-by-header`: the header (lower-case) and the values that send a request to
    /// the canary (`None`: `always`; then `never` keeps it on the main backend).
    pub(crate) header: Option<(Arc<str>, Option<StringMatch>)>,
    /// `canary-by-cookie`: `always` sends to the canary, `never` keeps on the main backend.
    pub(crate) cookie: Option<Arc<str>>,
    /// `canary-weight` of `canary-weight-total` (default 100) of the remaining requests.
    pub(crate) weight: Option<(u32, u32)>,
}

/// Whether `ing` is marked as a canary (`canary: "true"`).
pub(crate) fn is_canary(ing: &Ingress) -> bool {
    ing.metadata
        .annotations
        .get(&format!("{PREFIX}canary"))
        .is_some_and(|v| v.trim() == "true")
}

/// The `canary-*` annotations of a canary Ingress.
fn canary(ours: &BTreeMap<&str, &str>, problems: &mut Vec<String>) -> Canary {
    let field = |k: &str| format!("metadata.annotations[{PREFIX}{k}]");
    let mut c = Canary::default();
    if let Some(name) = ours.get("canary-by-header").copied() {
        if RateLimitKey::is_header_name(name) {
            let value = if let Some(v) = ours.get("canary-by-header-value") {
                Some(StringMatch::Exact((*v).into()))
            } else if let Some(p) = ours.get("canary-by-header-pattern") {
                // nginx searches the value for the pattern; weir's patterns match whole.
                match Pattern::new(&format!(".*(?:{p}).*")) {
                    Ok(p) => Some(StringMatch::Regex(p)),
                    Err(e) => {
                        problems.push(format!(
                            "{}: {}; the header's value always/never used",
                            field("canary-by-header-pattern"),
                            crate::compile::fields::regex_error(e)
                        ));
                        None
                    }
                }
            } else {
                None
            };
            c.header = Some((name.to_ascii_lowercase().into(), value));
        } else {
            problems.push(format!(
                "{}: {name:?} is not a header name; ignored",
                field("canary-by-header")
            ));
        }
    }
    if let Some(name) = ours.get("canary-by-cookie").copied() {
        if weir_model::is_cookie_name(name) {
            c.cookie = Some(name.into());
        } else {
            problems.push(format!(
                "{}: {name:?} is not a cookie name; ignored",
                field("canary-by-cookie")
            ));
        }
    }
    let total = match ours.get("canary-weight-total") {
        None => 100,
        Some(v) => match v.parse::<u32>() {
            Ok(n) if n > 0 && n <= 1_000_000 => n,
            _ => {
                problems.push(format!(
                    "{}: {v:?} is not a positive integer; 100 used",
                    field("canary-weight-total")
                ));
                100
            }
        },
    };
    if let Some(v) = ours.get("canary-weight") {
        match v.parse::<u32>() {
            Ok(0) => {}
            Ok(w) if w <= total => c.weight = Some((w, total)),
            _ => problems.push(format!(
                "{}: {v:?} is not an integer from 0 to {total}; ignored",
                field("canary-weight")
            )),
        }
    }
    c
}

/// The largest `proxy-body-size` (a TrafficPolicy's `maxBodyBytes` bound).
const MAX_BODY_BYTES: u64 = 1 << 40;

/// An nginx size (`client_max_body_size`): bytes, or a number followed by `k`, `m` or
/// `g` (either case) for KiB, MiB, GiB.
fn nginx_size(v: &str) -> Option<u64> {
    let (digits, unit) = match v.as_bytes().last()? {
        b'k' | b'K' => (&v[..v.len() - 1], 1 << 10),
        b'm' | b'M' => (&v[..v.len() - 1], 1 << 20),
        b'g' | b'G' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// ingress-nginx's `limit-burst-multiplier` default.
const DEFAULT_BURST_MULTIPLIER: u32 = 5;

/// Reads the annotations of `ing`.
pub(crate) fn compile(store: &Store, ing: &Ingress) -> Annotations {
    let mut out = Annotations::default();
    let ours: BTreeMap<&str, &str> = ing
        .metadata
        .annotations
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(PREFIX)?, v.trim())))
        .collect();
    if ours.is_empty() {
        return out;
    }
    let unsupported: Vec<&str> = ours
        .keys()
        .copied()
        .filter(|k| !SUPPORTED.contains(k))
        .collect();
    if !unsupported.is_empty() {
        out.problems.push(format!(
            "annotations not supported by weir, ignored: {}",
            unsupported
                .iter()
                .map(|k| format!("{PREFIX}{k}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let field = |k: &str| format!("metadata.annotations[{PREFIX}{k}]");
    let ns = &ing.metadata.namespace;
    let name: Arc<str> = format!("{ns}/{} (Ingress annotations)", ing.metadata.name).into();
    let mut settings = PolicySettings {
        name,
        ..PolicySettings::default()
    };

    // Rate limits.
    let number = |k: &str, out: &mut Annotations| -> Option<u32> {
        let v = ours.get(k)?;
        match v.parse::<u32>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                out.problems.push(format!(
                    "{}: {v:?} is not a positive integer; ignored",
                    field(k)
                ));
                None
            }
        }
    };
    let rps = number("limit-rps", &mut out);
    let rpm = number("limit-rpm", &mut out);
    let multiplier = number("limit-burst-multiplier", &mut out).unwrap_or(DEFAULT_BURST_MULTIPLIER);
    if rps.is_some() && rpm.is_some() {
        out.problems.push(format!(
            "{}: applies; {} is ignored (weir keeps one limit per Ingress)",
            field("limit-rps"),
            field("limit-rpm")
        ));
    }
    if let Some((requests, per)) = rps
        .map(|n| (n, Duration::from_secs(1)))
        .or(rpm.map(|n| (n, Duration::from_secs(60))))
    {
        settings.rate_limit = Some(LocalRateLimit {
            requests,
            per,
            burst: requests.saturating_mul(multiplier).min(1_000_000),
            key: RateLimitKey::ClientIp,
        });
    }

    // Retries.
    if ours.contains_key("proxy-next-upstream") || ours.contains_key("proxy-next-upstream-tries") {
        settings.retry = next_upstream(&ours, &mut out.problems);
    }

    // Requests in progress per client address.
    if let Some(n) = number("limit-connections", &mut out) {
        settings.concurrency_limit = Some(weir_model::ConcurrencyLimit {
            per_client: n.min(1_000_000),
        });
    }

    // Request body size.
    if let Some(v) = ours.get("proxy-body-size") {
        match nginx_size(v) {
            // nginx: 0 turns the check off.
            Some(0) => {}
            Some(n) if n <= MAX_BODY_BYTES => {
                settings.request_limits = Some(weir_model::RequestLimits {
                    max_body_bytes: Some(n),
                    ..Default::default()
                });
            }
            _ => out.problems.push(format!(
                "{}: {v:?} is not a size (bytes, or a number with k, m or g) up to 1 TiB; ignored",
                field("proxy-body-size")
            )),
        }
    }

    // Timeouts and session affinity.
    settings.timeouts = proxy_timeouts(&ours, &mut out.problems);
    settings.load_balancer = affinity(&ours, &mut out.problems);

    // Client address rules. An invalid list fails closed: every client is refused.
    let cidrs = |k: &str| -> Vec<String> {
        ours.get(k)
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    };
    let (allow, deny) = (
        cidrs("whitelist-source-range"),
        cidrs("denylist-source-range"),
    );
    if !allow.is_empty() || !deny.is_empty() {
        let fields = (
            field("whitelist-source-range"),
            field("denylist-source-range"),
        );
        settings.ip_rules = Some(Arc::new(
            match ip_rules(&allow, &deny, (&fields.0, &fields.1)) {
                Ok(r) => r,
                Err(e) => {
                    out.problems
                        .push(format!("{e}; every client is refused (403)"));
                    IpRules::deny_all()
                }
            },
        ));
    }

    // Basic auth.
    match ours.get("auth-type").copied() {
        None => {}
        Some("basic") => basic_auth(store, ing, &ours, &mut settings, &mut out),
        Some(other) => out.problems.push(format!(
            "{}: {other:?} is not supported (weir supports basic); ignored",
            field("auth-type")
        )),
    }

    // External authorization. An invalid one fails closed: every request is refused.
    if let Some(url) = ours.get("auth-url") {
        let list = |k: &str| -> Vec<String> {
            ours.get(k)
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default()
        };
        let spec = weir_api::ExtAuthSpec {
            url: (*url).to_owned(),
            response_headers: list("auth-response-headers"),
            signin_url: ours.get("auth-signin").map(|s| (*s).to_owned()),
            ..Default::default()
        };
        match crate::compile::ext_auth::ext_auth(&spec, "auth", None) {
            Ok(a) => settings.ext_auth = Some(Arc::new(a)),
            Err(e) => {
                // The error names the TrafficPolicy field; name the annotation instead.
                let (f, why) = e.split_once(": ").unwrap_or(("", &e));
                let annotation = match f {
                    "auth.signinUrl" => "auth-signin",
                    "auth.responseHeaders" => "auth-response-headers",
                    f if f.starts_with("auth.responseHeaders") => "auth-response-headers",
                    _ => "auth-url",
                };
                out.problems.push(format!(
                    "{}: {why}; every request is refused (403)",
                    field(annotation)
                ));
                settings.ip_rules = Some(Arc::new(IpRules::deny_all()));
            }
        }
    } else {
        for k in ["auth-signin", "auth-response-headers"] {
            if ours.contains_key(k) {
                out.problems.push(format!(
                    "{}: ignored without {}",
                    field(k),
                    field("auth-url")
                ));
            }
        }
    }

    // CORS.
    if ours.get("enable-cors").copied() == Some("true") {
        match cors(&ours) {
            Ok(f) => out.filters.push(f),
            Err(e) => out.problems.push(format!("{e}; CORS not enabled")),
        }
    }

    let tls_backend = filters_and_redirects(&ours, &mut out);
    out.upstream_tls = crate::compile::ingress_nginx_tls::read(
        store,
        ns,
        &settings.name,
        &ours,
        tls_backend,
        &mut out.problems,
        &mut out.deps,
    );
    out.aliases = server_aliases(&ours, &mut out.problems);
    out.default_backend = default_backend(&ours, &mut out.problems);
    match ours.get("canary").copied() {
        None | Some("false") => {
            let stray: Vec<&str> = ours
                .keys()
                .copied()
                .filter(|k| k.starts_with("canary-"))
                .collect();
            if !stray.is_empty() {
                out.problems.push(format!(
                    "{}: ignored without {PREFIX}canary: \"true\"",
                    stray
                        .iter()
                        .map(|k| field(k))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        Some("true") => {
            out.canary = Some(canary(&ours, &mut out.problems));
            // As in ingress-nginx, a canary's requests get the main Ingress's annotations.
            let own: Vec<String> = ours
                .keys()
                .filter(|k| SUPPORTED.contains(k) && !k.starts_with("canary"))
                .map(|k| field(k))
                .collect();
            if !own.is_empty() {
                out.problems.push(format!(
                    "{}: not applied on a canary Ingress (its requests get the main Ingress's annotations)",
                    own.join(", ")
                ));
            }
        }
        Some(other) => out.problems.push(format!(
            "{}: {other:?} is not true or false; ignored",
            field("canary")
        )),
    }

    let sets = settings.rate_limit.is_some()
        || settings.request_limits.is_some()
        || settings.concurrency_limit.is_some()
        || settings.timeouts.is_set()
        || settings.timeouts.backend_send.is_some()
        || settings.load_balancer.is_some()
        || settings.retry.is_some()
        || settings.basic_auth.is_some()
        || settings.ext_auth.is_some()
        || settings.ip_rules.is_some();
    if sets {
        out.policy = Some(Arc::new(settings));
    }
    out
}

fn basic_auth(
    store: &Store,
    ing: &Ingress,
    ours: &BTreeMap<&str, &str>,
    settings: &mut PolicySettings,
    out: &mut Annotations,
) {
    let field = |k: &str| format!("metadata.annotations[{PREFIX}{k}]");
    let ns = ing.metadata.namespace.as_ref();
    let realm = ours
        .get("auth-realm")
        .copied()
        .unwrap_or("Authentication Required");
    if let Err(e) = check_realm(realm) {
        out.problems.push(format!(
            "{}: {realm:?} {e}; every request is refused (401)",
            field("auth-realm")
        ));
    }
    let layout = match ours.get("auth-secret-type").copied() {
        None | Some("auth-file") => Some(HtpasswdLayout::File),
        Some("auth-map") => Some(HtpasswdLayout::Map),
        Some(other) => {
            out.problems.push(format!(
                "{}: {other:?} is not auth-file or auth-map; every request is refused (401)",
                field("auth-secret-type")
            ));
            None
        }
    };
    // `name` or `namespace/name`; only the Ingress's own namespace (another namespace's
    // Secret would need a grant Ingress has no way to express).
    let secret = match ours.get("auth-secret").map(|s| s.split_once('/')) {
        None => {
            out.problems.push(format!(
                "{}: required with auth-type basic; every request is refused (401)",
                field("auth-secret")
            ));
            None
        }
        Some(Some((sns, name))) if sns == ns => Some(name),
        Some(Some((sns, _))) => {
            out.problems.push(format!(
                "{}: a Secret of namespace {sns:?}, not the Ingress's; every request is refused (401)",
                field("auth-secret")
            ));
            None
        }
        Some(None) => ours.get("auth-secret").copied(),
    };
    let realm_ok = check_realm(realm).is_ok();
    let mut refs = Refs {
        store,
        namespace: ns,
        unresolved: Vec::new(),
        warnings: Vec::new(),
        deps: Vec::new(),
    };
    let auth = match (secret, layout) {
        (Some(name), Some(layout)) if realm_ok => {
            htpasswd_users(realm, name, layout, &field("auth-secret"), &mut refs)
        }
        // Fail closed: an Ingress asking for auth never serves without it.
        _ => weir_model::BasicAuth::new("weir".into(), Vec::new()),
    };
    out.problems.extend(refs.unresolved);
    out.problems.extend(refs.warnings);
    out.deps.extend(refs.deps);
    settings.basic_auth = Some(Arc::new(auth));
}

/// The annotations that become filters, redirects or the backend protocol.
/// ingress-nginx's `proxy-next-upstream-tries` default.
const DEFAULT_TRIES: u32 = 3;

/// The retry of `proxy-next-upstream` (nginx's `proxy_next_upstream`: when a request is
/// passed to the next server) and `proxy-next-upstream-tries` (how many servers it is
/// tried on, the first included). Connection errors, resets and timeouts (`error`,
/// `timeout`, `invalid_header`) are what weir always retries; `http_NNN` adds status
/// codes; `non_idempotent` lets POST and the like be retried after an answer; `off`:
/// no retry.
fn next_upstream(ours: &BTreeMap<&str, &str>, problems: &mut Vec<String>) -> Option<Retry> {
    let field = |k: &str| format!("metadata.annotations[{PREFIX}{k}]");
    let mut retry = Retry {
        attempts: DEFAULT_TRIES - 1,
        backoff: Duration::ZERO,
        ..Retry::default()
    };
    let tokens = ours
        .get("proxy-next-upstream")
        .copied()
        .unwrap_or("error timeout");
    for token in tokens.split_whitespace() {
        match token {
            "off" => return None,
            "error" | "timeout" | "invalid_header" => {}
            "non_idempotent" => retry.non_idempotent = true,
            _ => match token
                .strip_prefix("http_")
                .and_then(|c| c.parse::<u16>().ok())
            {
                Some(code) if (400..=599).contains(&code) => retry.codes.push(code),
                _ => problems.push(format!(
                    "{}: {token:?} is not a proxy_next_upstream condition; ignored",
                    field("proxy-next-upstream")
                )),
            },
        }
    }
    if !tokens
        .split_whitespace()
        .any(|t| t == "error" || t == "timeout")
    {
        problems.push(format!(
            "{}: weir retries connection errors and timeouts in any case",
            field("proxy-next-upstream")
        ));
    }
    retry.codes.sort_unstable();
    retry.codes.dedup();
    if let Some(v) = ours.get("proxy-next-upstream-tries") {
        match v.parse::<u32>() {
            // nginx: 0 is no limit; weir's most.
            Ok(0) => retry.attempts = MAX_RETRIES,
            Ok(n) => {
                if n - 1 > MAX_RETRIES {
                    problems.push(format!(
                        "{}: {n} tries; weir makes at most {} (the first and {MAX_RETRIES} retries)",
                        field("proxy-next-upstream-tries"),
                        MAX_RETRIES + 1
                    ));
                }
                retry.attempts = (n - 1).min(MAX_RETRIES);
            }
            Err(_) => problems.push(format!(
                "{}: {v:?} is not a number; {DEFAULT_TRIES} tries",
                field("proxy-next-upstream-tries")
            )),
        }
    }
    (retry.attempts > 0).then_some(retry)
}

/// The most retries of a request (as a policy's `retry.attempts`).
const MAX_RETRIES: u32 = 10;

///
/// Returns whether the backends are reached over TLS (`backend-protocol: HTTPS`/`GRPCS`).
fn filters_and_redirects(ours: &BTreeMap<&str, &str>, out: &mut Annotations) -> bool {
    let field = |k: &str| format!("metadata.annotations[{PREFIX}{k}]");
    // One URL rewrite: the host (`upstream-vhost`) and the path (`rewrite-target`).
    let (mut rewrite_host, mut rewrite_path) = (None, None);
    if let Some(host) = ours.get("upstream-vhost").copied() {
        if is_host(host) {
            rewrite_host = Some(host.to_ascii_lowercase().into());
        } else {
            out.problems.push(format!(
                "{}: {host:?} is not a host name; ignored",
                field("upstream-vhost")
            ));
        }
    }
    if let Some(prefix) = ours.get("x-forwarded-prefix").copied() {
        match http::HeaderValue::from_str(prefix) {
            Ok(_) if !prefix.is_empty() => {
                out.filters.push(Filter::RequestHeaders(HeaderModifier {
                    set: vec![("x-forwarded-prefix".into(), prefix.into())],
                    add: vec![],
                    remove: vec![],
                }))
            }
            _ => out.problems.push(format!(
                "{}: {prefix:?} is not a header value; ignored",
                field("x-forwarded-prefix")
            )),
        }
    }
    match ours.get("service-upstream").copied() {
        None | Some("false") => {}
        Some("true") => out.service_upstream = true,
        Some(other) => out.problems.push(format!(
            "{}: {other:?} is not true or false; ignored",
            field("service-upstream")
        )),
    }
    match ours.get("ssl-passthrough").copied() {
        None | Some("false") => {}
        Some("true") => out.ssl_passthrough = true,
        Some(other) => out.problems.push(format!(
            "{}: {other:?} is not true or false; ignored",
            field("ssl-passthrough")
        )),
    }
    match ours.get("use-regex").copied() {
        None | Some("false") => {}
        Some("true") => out.regex_paths = true,
        Some(other) => out.problems.push(format!(
            "{}: {other:?} is not true or false; ignored",
            field("use-regex")
        )),
    }
    if let Some(target) = ours.get("rewrite-target").copied() {
        // As ingress-nginx does, a rewrite makes the paths regular expressions, whose
        // groups `$1`…`$9` of the target refer to.
        if target.starts_with('/')
            && !target.contains('?')
            && http::uri::PathAndQuery::try_from(target).is_ok()
        {
            out.regex_paths = true;
            rewrite_path = Some(if target.contains('$') {
                PathRewrite::RegexCaptures(target.into())
            } else {
                PathRewrite::Full(target.into())
            });
        } else {
            out.problems.push(format!(
                "{}: {target:?} is not a path without a query; ignored",
                field("rewrite-target")
            ));
        }
    }
    if rewrite_host.is_some() || rewrite_path.is_some() {
        out.filters.push(Filter::UrlRewrite {
            hostname: rewrite_host,
            path: rewrite_path,
        });
    }
    for (k, default) in [("permanent-redirect", 301), ("temporal-redirect", 302)] {
        let Some(url) = ours.get(k).copied() else {
            continue;
        };
        if out.redirect.is_some() {
            out.problems.push(format!(
                "{}: ignored (permanent-redirect applies)",
                field(k)
            ));
            continue;
        }
        let code_key = format!("{k}-code");
        let status = match ours.get(code_key.as_str()) {
            None => default,
            Some(c) => match c.parse::<u16>() {
                Ok(c) if (300..400).contains(&c) => c,
                _ => {
                    out.problems.push(format!(
                        "{}: {c:?} is not a 3xx status; {default} used",
                        field(&code_key)
                    ));
                    default
                }
            },
        };
        match redirect_to(url, status) {
            Some(r) => out.redirect = Some(r),
            None => out.problems.push(format!(
                "{}: {url:?} is not an absolute http(s) URL without a query; ignored",
                field(k)
            )),
        }
    }
    for (k, mode) in [
        ("ssl-redirect", SslRedirect::TlsHosts),
        ("force-ssl-redirect", SslRedirect::All),
    ] {
        match ours.get(k).copied() {
            None | Some("false") => {}
            Some("true") => out.ssl_redirect = out.ssl_redirect.max(mode),
            Some(other) => out.problems.push(format!(
                "{}: {other:?} is not true or false; ignored",
                field(k)
            )),
        }
    }
    if let Some(root) = ours.get("app-root").copied() {
        if root.starts_with('/') && root != "/" && http::uri::PathAndQuery::try_from(root).is_ok() {
            out.app_root = Some(root.into());
        } else {
            out.problems.push(format!(
                "{}: {root:?} is not a path other than /; ignored",
                field("app-root")
            ));
        }
    }
    match ours
        .get("backend-protocol")
        .map(|p| p.to_ascii_uppercase())
        .as_deref()
    {
        None | Some("HTTP") => false,
        Some("GRPC" | "H2C") => {
            out.want = WantProtocol::Http2;
            false
        }
        Some("HTTPS") => true,
        Some("GRPCS") => {
            out.want = WantProtocol::Http2;
            true
        }
        Some(other) => {
            out.problems.push(format!(
                "{}: {other:?} is not served (weir serves HTTP, HTTPS, GRPC, GRPCS and H2C; not AJP or FCGI); HTTP used",
                field("backend-protocol")
            ));
            false
        }
    }
}

/// `default-backend` and `custom-http-errors` (status codes, comma-separated, 300 to
/// 599 as nginx's `error_page` takes them).
fn default_backend(
    ours: &BTreeMap<&str, &str>,
    problems: &mut Vec<String>,
) -> Option<(String, Vec<u16>)> {
    let field = |k: &str| format!("metadata.annotations[{PREFIX}{k}]");
    let mut codes = Vec::new();
    if let Some(v) = ours.get("custom-http-errors") {
        for c in v.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            match c.parse::<u16>() {
                Ok(n) if (300..=599).contains(&n) => codes.push(n),
                _ => problems.push(format!(
                    "{}: {c:?} is not a status code from 300 to 599; ignored",
                    field("custom-http-errors")
                )),
            }
        }
        codes.sort_unstable();
        codes.dedup();
    }
    match ours.get("default-backend").copied() {
        Some(name) if weir_model::HostMatch::parse(Some(name)).is_ok() && !name.contains('.') => {
            Some((name.to_owned(), codes))
        }
        Some(name) => {
            problems.push(format!(
                "{}: {name:?} is not the name of a Service of the Ingress's namespace; ignored",
                field("default-backend")
            ));
            None
        }
        None => {
            if ours.contains_key("custom-http-errors") {
                problems.push(format!(
                    "{}: ignored without {} (weir has no controller-wide default backend)",
                    field("custom-http-errors"),
                    field("default-backend")
                ));
            }
            None
        }
    }
}

/// ingress-nginx's `proxy-connect-timeout` and `proxy-read-timeout` defaults.
const DEFAULT_CONNECT: Duration = Duration::from_secs(5);
const DEFAULT_READ: Duration = Duration::from_secs(60);

/// `proxy-connect-timeout`, `proxy-read-timeout` and `proxy-send-timeout` (seconds): the
/// first two as the policy's `backendRequest` timeout: one attempt, from connecting to
/// the response headers, may take the connect timeout plus the read timeout (the longest
/// nginx waits for a backend that does not answer; ingress-nginx's defaults fill in the
/// one not set). weir has no timeout of its own for connecting (the data plane's, 5 s,
/// like nginx's default): a shorter one is named as partly applied. `proxy-send-timeout`
/// is the policy's `backend_send` timeout, nginx's between two writes of the request
/// (unset: none, where ingress-nginx's default is 60 s; the attempt's timeout bounds
/// sending then).
fn proxy_timeouts(ours: &BTreeMap<&str, &str>, problems: &mut Vec<String>) -> Timeouts {
    let field = |k: &str| format!("metadata.annotations[{PREFIX}{k}]");
    let seconds = |k: &str, problems: &mut Vec<String>| -> Option<Duration> {
        let v = ours.get(k)?;
        match v.strip_suffix('s').unwrap_or(v).parse::<u32>() {
            Ok(n) if n > 0 && n <= 86_400 => Some(Duration::from_secs(u64::from(n))),
            _ => {
                problems.push(format!(
                    "{}: {v:?} is not a number of seconds (1 to 86400); ignored",
                    field(k)
                ));
                None
            }
        }
    };
    let connect = seconds("proxy-connect-timeout", problems);
    let read = seconds("proxy-read-timeout", problems);
    let send = seconds("proxy-send-timeout", problems);
    if connect.is_some_and(|c| c < DEFAULT_CONNECT) {
        problems.push(format!(
            "{}: partly applied: weir gives up connecting after 5 s whatever it says; it is part of the attempt's timeout (connect + read)",
            field("proxy-connect-timeout")
        ));
    }
    let backend_request = (connect.is_some() || read.is_some())
        .then(|| connect.unwrap_or(DEFAULT_CONNECT) + read.unwrap_or(DEFAULT_READ));
    Timeouts {
        request: None,
        backend_request,
        backend_send: send,
    }
}

/// ingress-nginx's `session-cookie-name` default.
const DEFAULT_COOKIE: &str = "INGRESSCOOKIE";

/// `affinity: cookie` and its `session-cookie-*` annotations, as the consistent hash on a
/// cookie weir generates (as Gateway API `sessionPersistence` does): a client without
/// the cookie gets one, and every request carrying it goes to the same endpoint while
/// the endpoints stay the same; when they change, few move (`affinity-mode: balanced`,
/// ingress-nginx's default; `persistent` is named as not served).
fn affinity(ours: &BTreeMap<&str, &str>, problems: &mut Vec<String>) -> Option<LoadBalancer> {
    let field = |k: &str| format!("metadata.annotations[{PREFIX}{k}]");
    match ours.get("affinity").copied() {
        Some("cookie") => {}
        None => {
            for k in [
                "affinity-mode",
                "session-cookie-name",
                "session-cookie-path",
                "session-cookie-max-age",
                "session-cookie-expires",
                "session-cookie-samesite",
                "session-cookie-conditional-samesite-none",
                "session-cookie-secure",
            ] {
                if ours.contains_key(k) {
                    problems.push(format!(
                        "{}: ignored without {}: cookie",
                        field(k),
                        field("affinity")
                    ));
                }
            }
            return None;
        }
        Some(other) => {
            problems.push(format!(
                "{}: {other:?} is not supported (weir serves cookie); ignored",
                field("affinity")
            ));
            return None;
        }
    }
    match ours.get("affinity-mode").copied() {
        None | Some("balanced") => {}
        Some(other) => problems.push(format!(
            "{}: {other:?} is not served (weir's is balanced: when endpoints change, some sessions move)",
            field("affinity-mode")
        )),
    }
    let name = ours
        .get("session-cookie-name")
        .copied()
        .unwrap_or(DEFAULT_COOKIE);
    if !weir_model::is_cookie_name(name) {
        problems.push(format!(
            "{}: {name:?} is not a cookie name; affinity not enabled",
            field("session-cookie-name")
        ));
        return None;
    }
    let path = ours.get("session-cookie-path").copied().unwrap_or("/");
    if !weir_model::is_cookie_path(path) {
        problems.push(format!(
            "{}: {path:?} is not a cookie path; affinity not enabled",
            field("session-cookie-path")
        ));
        return None;
    }
    // `Max-Age` wins over `Expires` in browsers; weir sets `Max-Age` from either.
    let mut ttl = None;
    for k in ["session-cookie-expires", "session-cookie-max-age"] {
        if let Some(v) = ours.get(k) {
            match v.parse::<u32>() {
                Ok(n) if n > 0 => ttl = Some(Duration::from_secs(u64::from(n))),
                _ => problems.push(format!(
                    "{}: {v:?} is not a positive number of seconds; ignored",
                    field(k)
                )),
            }
        }
    }
    Some(LoadBalancer::ConsistentHash(HashOn::Cookie {
        name: name.into(),
        generate: Some(GeneratedCookie {
            ttl,
            path: path.into(),
            same_site: same_site(ours, problems),
            secure: match ours.get("session-cookie-secure").map(|v| v.trim()) {
                None | Some("false") => false,
                Some("true") => true,
                Some(other) => {
                    problems.push(format!(
                        "{}: {other:?} is not true or false; ignored (the cookie is Secure over TLS)",
                        field("session-cookie-secure")
                    ));
                    false
                }
            },
        }),
    }))
}

/// `session-cookie-samesite` (`None`, `Lax` or `Strict`, any case) and
/// `session-cookie-conditional-samesite-none` (`"true"`: `None` is left out for browsers
/// known to mishandle it), as the generated cookie's `SameSite`.
fn same_site(ours: &BTreeMap<&str, &str>, problems: &mut Vec<String>) -> Option<SameSite> {
    let field = |k: &str| format!("metadata.annotations[{PREFIX}{k}]");
    let conditional = match ours
        .get("session-cookie-conditional-samesite-none")
        .map(|v| v.trim())
    {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            problems.push(format!(
                "{}: {other:?} is not true or false; ignored",
                field("session-cookie-conditional-samesite-none")
            ));
            false
        }
    };
    let same_site = match ours.get("session-cookie-samesite").map(|v| v.trim()) {
        None => None,
        Some(v) if v.eq_ignore_ascii_case("none") => Some(SameSite::None {
            unless_incompatible: conditional,
        }),
        Some(v) if v.eq_ignore_ascii_case("lax") => Some(SameSite::Lax),
        Some(v) if v.eq_ignore_ascii_case("strict") => Some(SameSite::Strict),
        Some(other) => {
            problems.push(format!(
                "{}: {other:?} is not None, Lax or Strict; the cookie is set without SameSite",
                field("session-cookie-samesite")
            ));
            None
        }
    };
    if conditional && !matches!(same_site, Some(SameSite::None { .. })) {
        problems.push(format!(
            "{}: ignored without {}: None",
            field("session-cookie-conditional-samesite-none"),
            field("session-cookie-samesite")
        ));
    }
    same_site
}

/// `server-alias`: more host names (comma-separated) served as the Ingress's hosts are.
/// A wildcard is not taken (ingress-nginx's aliases are names).
fn server_aliases(ours: &BTreeMap<&str, &str>, problems: &mut Vec<String>) -> Vec<String> {
    let Some(v) = ours.get("server-alias") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for a in v.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let host = a.to_ascii_lowercase();
        if is_host(&host) && !host.contains(':') {
            if !out.contains(&host) {
                out.push(host);
            }
        } else {
            problems.push(format!(
                "metadata.annotations[{PREFIX}server-alias]: {a:?} is not a host name; ignored"
            ));
        }
    }
    out
}

/// A host name (letters, digits, `-`, `.`), optionally with a port.
fn is_host(s: &str) -> bool {
    let host = match s.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => h,
        _ => s,
    };
    !host.is_empty()
        && host.len() <= 253
        && host
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

/// A redirect to an absolute `http(s)` URL (path and query kept as given).
fn redirect_to(url: &str, status: u16) -> Option<Redirect> {
    let uri: http::Uri = url.parse().ok()?;
    let scheme = uri
        .scheme_str()
        .filter(|s| matches!(*s, "http" | "https"))?;
    let authority = uri.authority()?;
    if !is_host(authority.host()) || authority.as_str().contains('@') {
        return None;
    }
    // The query of the request is kept (as for every redirect); one in the URL is not.
    if uri.query().is_some() {
        return None;
    }
    let path = uri.path();
    Some(Redirect {
        scheme: Some(scheme.into()),
        hostname: Some(authority.host().to_ascii_lowercase().into()),
        path: Some(PathRewrite::Full(path.into())),
        port: authority.port_u16(),
        status,
    })
}

/// ingress-nginx's CORS defaults, for the annotations not set.
fn cors(ours: &BTreeMap<&str, &str>) -> Result<Filter, String> {
    let list = |k: &str, default: &str| -> Vec<String> {
        ours.get(k)
            .copied()
            .unwrap_or(default)
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let credentials = match ours.get("cors-allow-credentials").copied() {
        None | Some("true") => true,
        Some("false") => false,
        Some(other) => {
            return Err(format!(
                "metadata.annotations[{PREFIX}cors-allow-credentials]: {other:?} is not true or false"
            ));
        }
    };
    let max_age = match ours.get("cors-max-age") {
        None => 1_728_000,
        Some(v) => v.parse::<i32>().map_err(|_| {
            format!("metadata.annotations[{PREFIX}cors-max-age]: {v:?} is not a number of seconds")
        })?,
    };
    let spec = HttpCorsFilter {
        allow_origins: list("cors-allow-origin", "*"),
        allow_methods: list(
            "cors-allow-methods",
            "GET, PUT, POST, DELETE, PATCH, OPTIONS",
        ),
        allow_headers: list(
            "cors-allow-headers",
            "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization",
        ),
        expose_headers: list("cors-expose-headers", ""),
        allow_credentials: Some(credentials),
        max_age: Some(max_age),
    };
    crate::compile::cors::compile(&spec, &format!("metadata.annotations[{PREFIX}cors-*]"))
        .map(|c| Filter::Cors(Arc::new(c)))
}

#[cfg(test)]
mod tests {
    use super::nginx_size;

    #[test]
    fn nginx_sizes_read_as_nginx_reads_them() {
        assert_eq!(nginx_size("0"), Some(0));
        assert_eq!(nginx_size("1024"), Some(1024));
        assert_eq!(nginx_size("8k"), Some(8 << 10));
        assert_eq!(nginx_size("8K"), Some(8 << 10));
        assert_eq!(nginx_size("1m"), Some(1 << 20));
        assert_eq!(nginx_size("2G"), Some(2 << 30));
        for bad in [
            "",
            "m",
            "1.5m",
            "-1",
            "1mb",
            "1 m",
            "k1",
            "99999999999999999999",
        ] {
            assert_eq!(nginx_size(bad), None, "{bad:?}");
        }
        assert_eq!(nginx_size("18446744073709551615g"), None);
    }
}
