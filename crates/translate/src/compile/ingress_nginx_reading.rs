//! What the translator reads from an Ingress's ingress-nginx annotations, for tools that
//! rewrite Ingresses into other objects (`weir migrate`). It is the result of the same
//! parsing `weir run` and `weir controller` serve Ingresses with (`ingress_nginx`), so a
//! migrated object carries exactly what the Ingress is served with, and every annotation
//! the translator refuses is refused with the same words.

use std::sync::Arc;

use weir_api::{Ingress, Object};
use weir_model::{
    BasicAuth, ConcurrencyLimit, ExtAuth, Filter, IpRules, LoadBalancer, LocalRateLimit, Redirect,
    RequestLimits, Retry, StringMatch, Timeouts, TrustAnchors,
};

use crate::compile::backend::WantProtocol;
use crate::compile::ingress_nginx::{self, SslRedirect};
use crate::store::Store;

/// The annotation prefix of ingress-nginx.
pub const INGRESS_NGINX_PREFIX: &str = ingress_nginx::PREFIX;

/// Which plaintext requests of an Ingress are redirected (308) to HTTPS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpsRedirect {
    /// None.
    Off,
    /// Those for a host the Ingress serves over TLS (`ssl-redirect`).
    TlsHosts,
    /// All of them (`force-ssl-redirect`).
    All,
}

/// The ingress-nginx annotations of one Ingress as the translator serves them.
#[derive(Debug)]
pub struct IngressNginxReading {
    /// Local rate limit of the Ingress's implicit policy.
    pub rate_limit: Option<LocalRateLimit>,
    /// Retry of the implicit policy.
    pub retry: Option<Retry>,
    /// Basic auth of the implicit policy (users already read from the Secret).
    pub basic_auth: Option<Arc<BasicAuth>>,
    /// External authorization of the implicit policy.
    pub ext_auth: Option<Arc<ExtAuth>>,
    /// Client address rules of the implicit policy.
    pub ip_rules: Option<Arc<IpRules>>,
    /// Timeouts of the implicit policy (`proxy-connect-timeout` + `proxy-read-timeout`
    /// as the per-attempt timeout).
    pub timeouts: Timeouts,
    /// Load balancer of the implicit policy (`affinity: cookie`).
    pub load_balancer: Option<LoadBalancer>,
    /// Request size limits of the implicit policy (`proxy-body-size`).
    pub request_limits: Option<RequestLimits>,
    /// Bound on each client's requests in progress (`limit-connections`).
    pub concurrency_limit: Option<ConcurrencyLimit>,
    /// Whether the implicit policy holds a setting none of the fields above shows (an
    /// annotation this view does not know yet); a migration must then report it.
    pub other_policy_settings: bool,
    /// Filters of every rule.
    pub filters: Vec<Filter>,
    /// The redirect every rule answers with instead of forwarding.
    pub redirect: Option<Redirect>,
    /// Plaintext requests redirected to HTTPS.
    pub https_redirect: HttpsRedirect,
    /// `/` redirected (302) here.
    pub app_root: Option<Arc<str>>,
    /// Backends are spoken to over HTTP/2 (h2c, or over TLS with `backend_tls`) whatever
    /// their port declares.
    pub h2c: bool,
    /// Backends are spoken to over TLS (`backend-protocol: HTTPS`/`GRPCS`).
    pub backend_tls: Option<BackendTlsReading>,
    /// The Ingress is a canary of the main Ingress of each of its host and path.
    pub canary: Option<CanaryReading>,
    /// TLS connections to its hosts are passed through to the backend of the host's `/`
    /// path (else its first) by SNI (`ssl-passthrough`).
    pub ssl_passthrough: bool,
    /// Invalid, unsupported or partly applied annotations, each named, as the Ingress's
    /// status names them.
    pub problems: Vec<String>,
}

/// TLS towards an Ingress's backends as the translator serves it.
#[derive(Debug)]
pub struct BackendTlsReading {
    /// The CA the backend's certificate must chain to (`proxy-ssl-verify` with the
    /// `ca.crt` of `proxy-ssl-secret`).
    pub ca_pem: Option<Arc<[u8]>>,
    /// Whether the certificate is verified at all (`proxy-ssl-verify: "on"`); without a
    /// CA, against the system's (or, when the Secret was unusable, never successfully).
    pub verify: bool,
    /// `proxy-ssl-name` (else `<service>.<namespace>.svc`).
    pub name: Option<Arc<str>>,
    /// The name is sent as SNI (`proxy-ssl-server-name`).
    pub send_sni: bool,
    /// A client certificate is presented (`proxy-ssl-secret` with `tls.crt`/`tls.key`).
    pub client_certificate: bool,
}

/// Which requests a canary Ingress takes from its main Ingress: by header, then cookie,
/// then weight.
#[derive(Debug)]
pub struct CanaryReading {
    /// `canary-by-header`: the header (lower case) and the values that send to the
    /// canary (`None`: `always`, and `never` keeps a request on the main backend).
    pub header: Option<(Arc<str>, Option<StringMatch>)>,
    /// `canary-by-cookie`: `always` sends to the canary, `never` to the main backend.
    pub cookie: Option<Arc<str>>,
    /// `canary-weight` of `canary-weight-total` of the remaining requests.
    pub weight: Option<(u32, u32)>,
}

impl CanaryReading {
    /// The regular expression a whole `Cookie` header matches when it holds the
    /// canary's cookie with `value` (as weir serves `canary-by-cookie`).
    pub fn cookie_regex(&self, value: &str) -> Option<String> {
        let name = self.cookie.as_deref()?;
        Some(crate::compile::ingress_canary::cookie_regex(name, value))
    }
}

/// Reads Ingress annotations against a set of objects (the Secrets that `auth-secret`
/// names are looked up among them).
pub struct IngressNginxReader {
    store: Store,
}

impl IngressNginxReader {
    /// A reader over `objects` (only Secrets are consulted).
    pub fn new(objects: impl IntoIterator<Item = Arc<Object>>) -> Self {
        let mut store = Store::default();
        for obj in objects {
            if matches!(&*obj, Object::Secret(_)) {
                let key = obj.key();
                let _ = store.upsert(&key, obj);
            }
        }
        IngressNginxReader { store }
    }

    /// What `ing`'s annotations are served as.
    pub fn read(&self, ing: &Ingress) -> IngressNginxReading {
        let a = ingress_nginx::compile(&self.store, ing);
        let mut out = IngressNginxReading {
            rate_limit: None,
            retry: None,
            basic_auth: None,
            ext_auth: None,
            ip_rules: None,
            timeouts: Timeouts::default(),
            load_balancer: None,
            request_limits: None,
            concurrency_limit: None,
            other_policy_settings: false,
            filters: a.filters,
            redirect: a.redirect,
            https_redirect: match a.ssl_redirect {
                SslRedirect::Off => HttpsRedirect::Off,
                SslRedirect::TlsHosts => HttpsRedirect::TlsHosts,
                SslRedirect::All => HttpsRedirect::All,
            },
            app_root: a.app_root,
            h2c: !matches!(a.want, WantProtocol::Declared),
            backend_tls: a.upstream_tls.map(|t| BackendTlsReading {
                ca_pem: match &t.trust {
                    TrustAnchors::Pem(p) => Some(p.clone()),
                    _ => None,
                },
                verify: t.trust != TrustAnchors::Unverified,
                client_certificate: t.client_certificate.is_some(),
                name: t.name,
                send_sni: t.send_sni,
            }),
            canary: a.canary.map(|c| CanaryReading {
                header: c.header,
                cookie: c.cookie,
                weight: c.weight,
            }),
            ssl_passthrough: a.ssl_passthrough,
            problems: a.problems,
        };
        if let Some(p) = a.policy {
            let mut rest = (*p).clone();
            out.rate_limit = rest.rate_limit.take();
            out.retry = rest.retry.take();
            out.basic_auth = rest.basic_auth.take();
            out.ext_auth = rest.ext_auth.take();
            out.ip_rules = rest.ip_rules.take();
            out.timeouts = std::mem::take(&mut rest.timeouts);
            out.load_balancer = rest.load_balancer.take();
            out.request_limits = rest.request_limits.take();
            out.concurrency_limit = rest.concurrency_limit.take();
            rest.name = Arc::default();
            out.other_policy_settings = rest != Default::default();
        }
        out
    }
}
