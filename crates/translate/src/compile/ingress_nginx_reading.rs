//! What the translator reads from an Ingress's ingress-nginx annotations, for tools that
//! rewrite Ingresses into other objects (`weir migrate`). It is the result of the same
//! parsing `weir run` and `weir controller` serve Ingresses with (`ingress_nginx`), so a
//! migrated object carries exactly what the Ingress is served with, and every annotation
//! the translator refuses is refused with the same words.

use std::sync::Arc;

use weir_api::{Ingress, Object};
use weir_model::{
    BasicAuth, ConcurrencyLimit, ExtAuth, Filter, IpRules, LoadBalancer, LocalRateLimit, Redirect,
    RequestLimits, Retry, Timeouts,
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
    /// Backends are spoken to over HTTP/2 without TLS (h2c) whatever their port declares.
    pub h2c: bool,
    /// Invalid, unsupported or partly applied annotations, each named, as the Ingress's
    /// status names them.
    pub problems: Vec<String>,
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
