//! Gateway and XListenerSet listeners → validated listeners: protocol, hostname,
//! certificates, which routes may attach, and conflicts among them.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use weir_api::{GatewayListener, Kind, LabelSelector, Reason};
use weir_model::{Certificate, HostMatch, L4Mode, ListenerKey, Protocol};

use crate::compile::route_kind::{GATEWAY_GROUP, Referrer, RouteKind, RouteKinds};
use crate::store::{Dep, Store};

/// A condition outcome: `Err((reason, message))` when it is not met.
pub(crate) type Outcome = Result<(), (Reason, String)>;

/// Which namespaces may attach routes to a listener.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Allowed {
    Same,
    All,
    Selector(LabelSelector),
    /// Invalid `allowedRoutes.namespaces`: nothing may attach.
    Nothing,
}

/// One listener after validation.
#[derive(Clone, Debug)]
pub(crate) struct ListenerState {
    pub(crate) name: Arc<str>,
    pub(crate) port: i32,
    /// The socket, when the port and the Gateway's address are valid.
    pub(crate) key: Option<ListenerKey>,
    pub(crate) protocol: Option<Protocol>,
    pub(crate) hostname: HostMatch,
    pub(crate) accepted: Outcome,
    /// Problems with certificate refs and route kinds.
    pub(crate) resolved: Vec<(Reason, String)>,
    pub(crate) cert: Option<Arc<Certificate>>,
    /// A conflict with an earlier listener of the same Gateway.
    pub(crate) conflict: Option<(Reason, String)>,
    /// The socket is owned by an older Gateway: (reason, message).
    pub(crate) taken_by: Option<(Reason, String)>,
    /// An XListenerSet's listener whose hostname and port an older set of the same
    /// Gateway serves: the message.
    pub(crate) shadowed: Option<String>,
    pub(crate) allowed: Allowed,
    /// The route kinds that may attach (from the protocol and `allowedRoutes.kinds`),
    /// reported as `supportedKinds`.
    pub(crate) kinds: RouteKinds,
    pub(crate) programmed: bool,
}

impl ListenerState {
    /// Whether routes (of one of [`Self::kinds`]) may attach, before namespace and
    /// hostname checks.
    pub(crate) fn routable(&self) -> bool {
        self.accepted.is_ok()
            && self.conflict.is_none()
            && self.taken_by.is_none()
            && self.shadowed.is_none()
            && self.key.is_some()
    }
}

/// What routes see of a listener; when it changes the attached routes are recomputed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ListenerView {
    pub(crate) name: Arc<str>,
    pub(crate) port: i32,
    pub(crate) key: Option<ListenerKey>,
    pub(crate) hostname: HostMatch,
    pub(crate) allowed: Allowed,
    /// Routes may attach (of `kinds`, before namespace and hostname checks).
    pub(crate) routable: bool,
    pub(crate) kinds: RouteKinds,
    pub(crate) programmed: bool,
    /// What this listener's TLSRoutes do with a connection (terminate TLS first or not).
    pub(crate) l4_mode: L4Mode,
}

/// Validates listeners (of a Gateway or an XListenerSet in namespace `ns`), including
/// conflicts among them (the earlier listener wins). `socket_ip` is where they listen,
/// `None` when the owner is not accepted (no listener gets a socket then).
pub(crate) fn compile_listeners(
    store: &Store,
    ns: &str,
    from: Referrer,
    prefix: &str,
    specs: &[GatewayListener],
    socket_ip: Option<IpAddr>,
    deps: &mut Vec<Dep>,
) -> Vec<ListenerState> {
    let mut listeners = Vec::with_capacity(specs.len());
    for (i, l) in specs.iter().enumerate() {
        let field = format!("{prefix}[{i}]");
        let mut acc: Outcome = Ok(());
        let mut resolved = Vec::new();
        let port = u16::try_from(l.port).ok().filter(|p| *p != 0);
        if port.is_none() {
            acc = Err((
                Reason::UnsupportedValue,
                format!("{field}.port: {} is not a valid port", l.port),
            ));
        }
        let hostname = match HostMatch::parse(l.hostname.as_deref()) {
            Ok(h) => h,
            Err(e) => {
                acc = Err((Reason::UnsupportedValue, format!("{field}.hostname: {e}")));
                HostMatch::ANY
            }
        };
        let protocol = match l.protocol.as_str() {
            "HTTP" => Some(Protocol::Http),
            "HTTPS" => Some(Protocol::Https),
            // Gateway API's default mode is Terminate.
            "TLS" => match l.tls.as_ref().and_then(|t| t.mode.as_deref()) {
                Some("Passthrough") => Some(Protocol::TlsPassthrough),
                None | Some("Terminate") => Some(Protocol::TlsTerminate),
                Some(mode) => {
                    acc = Err((
                        Reason::UnsupportedValue,
                        format!(
                            "{field}.tls.mode: {mode:?} is not supported (Terminate, Passthrough)"
                        ),
                    ));
                    None
                }
            },
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            other => {
                acc = Err((
                    Reason::UnsupportedProtocol,
                    format!(
                        "{field}.protocol: {other:?} is not supported (HTTP, HTTPS, TLS, TCP, UDP)"
                    ),
                ));
                None
            }
        };
        // TCP and UDP carry no hostname (Gateway API: ignored for TCP and UDP listeners).
        let hostname = if matches!(protocol, Some(Protocol::Tcp | Protocol::Udp)) {
            HostMatch::ANY
        } else {
            hostname
        };
        let mut cert = None;
        if protocol.is_some_and(terminates_tls) {
            match &l.tls {
                Some(t)
                    if protocol == Some(Protocol::Https)
                        && t.mode.as_deref().is_some_and(|m| m != "Terminate") =>
                {
                    acc = Err((
                        Reason::UnsupportedValue,
                        format!(
                            "{field}.tls.mode: {:?} is not supported (Terminate)",
                            t.mode.as_deref().unwrap_or("")
                        ),
                    ));
                }
                Some(t) if !t.certificate_refs.is_empty() => {
                    for (j, r) in t.certificate_refs.iter().enumerate() {
                        let fr = format!("{field}.tls.certificateRefs[{j}]");
                        let group = r.group.as_deref().unwrap_or("");
                        let kind = r.kind.as_deref().unwrap_or("Secret");
                        if !(group.is_empty() || group == "core") || kind != "Secret" {
                            resolved.push((
                                Reason::InvalidCertificateRef,
                                format!("{fr}: unsupported kind {group:?}/{kind:?} (Secret)"),
                            ));
                            continue;
                        }
                        let sns = r
                            .namespace
                            .as_deref()
                            .filter(|n| !n.is_empty())
                            .unwrap_or(ns);
                        deps.push(store.dep_on_ref(Kind::Secret, sns, &r.name));
                        if sns != ns {
                            deps.push(Dep::grants_in(sns));
                            if !store.grant_allows(from, ns, sns, "", "Secret", &r.name) {
                                resolved.push((
                                    Reason::RefNotPermitted,
                                    format!("{fr}: Secret {sns}/{} is in another namespace and no ReferenceGrant allows it", r.name),
                                ));
                                continue;
                            }
                        }
                        match store.certificate(sns, &r.name) {
                            None => resolved.push((
                                Reason::InvalidCertificateRef,
                                format!("{fr}: Secret {sns}/{} not found", r.name),
                            )),
                            Some(Err(m)) => {
                                resolved.push((Reason::InvalidCertificateRef, format!("{fr}: {m}")))
                            }
                            Some(Ok(c)) => {
                                if cert.is_none() {
                                    cert = Some(c.clone());
                                }
                            }
                        }
                    }
                }
                _ => resolved.push((
                    Reason::InvalidCertificateRef,
                    format!(
                        "{field}.tls.certificateRefs: {} needs at least one",
                        l.protocol
                    ),
                )),
            }
        }
        let (allowed, kinds) = allowed_routes(l, protocol, &field, &mut acc, &mut resolved);
        listeners.push(ListenerState {
            name: l.name.as_str().into(),
            port: l.port,
            key: port
                .zip(socket_ip)
                .map(|(p, ip)| ListenerKey::new(SocketAddr::new(ip, p))),
            protocol,
            hostname,
            accepted: acc,
            resolved,
            cert,
            conflict: None,
            taken_by: None,
            shadowed: None,
            allowed,
            kinds,
            programmed: false,
        });
    }
    // Conflicts among this Gateway's own listeners: the earlier listener wins.
    for i in 0..listeners.len() {
        let (before, rest) = listeners.split_at_mut(i);
        let l = &mut rest[0];
        if l.accepted.is_err() || l.key.is_none() {
            continue;
        }
        l.conflict = first_conflict(l, before, "");
    }
    listeners
}

/// The first of `winners` (valid listeners that take precedence) that `l` conflicts
/// with on its socket: another protocol, or the same hostname. `of` names their owner
/// in the message (empty for the same Gateway).
pub(crate) fn first_conflict(
    l: &ListenerState,
    winners: &[ListenerState],
    of: &str,
) -> Option<(Reason, String)> {
    let on_socket = winners
        .iter()
        .filter(|o| o.accepted.is_ok() && o.conflict.is_none() && o.key == l.key);
    for o in on_socket {
        if !shares_socket(o.protocol, l.protocol) {
            return Some((
                Reason::ProtocolConflict,
                format!(
                    "port {} is already used by listener {:?}{of} with another protocol",
                    l.port, o.name
                ),
            ));
        }
        if o.hostname == l.hostname {
            return Some((
                Reason::HostnameConflict,
                format!(
                    "listener {:?}{of} already serves hostname {} on port {}",
                    o.name, l.hostname, l.port
                ),
            ));
        }
    }
    None
}

/// Whether a listener of `protocol` terminates TLS with its `certificateRefs` (HTTPS, and
/// TLS in `Terminate` mode): its certificates become the socket's SNI entries.
pub(crate) fn terminates_tls(protocol: Protocol) -> bool {
    matches!(protocol, Protocol::Https | Protocol::TlsTerminate)
}

/// Whether listeners of protocols `a` and `b` can serve one socket: the same protocol, or
/// two kinds of TLS listener — HTTPS, TLS passthrough, TLS terminate (the data plane reads
/// each ClientHello's SNI and picks the listener's route by it; Gateway API's
/// `TLSRouteModeMixed`).
pub(crate) fn shares_socket(a: Option<Protocol>, b: Option<Protocol>) -> bool {
    let tls = |p: Option<Protocol>| {
        matches!(
            p,
            Some(Protocol::Https | Protocol::TlsPassthrough | Protocol::TlsTerminate)
        )
    };
    a == b || (tls(a) && tls(b))
}

/// The protocol of a socket its (compatible) listeners serve: HTTPS when one of them
/// serves HTTP over TLS, else TLS terminate when one of them terminates TLS (the L4
/// routes of the others are checked first in both cases).
pub(crate) fn socket_protocol(protocols: impl Iterator<Item = Protocol>) -> Option<Protocol> {
    let rank = |p: Protocol| match p {
        Protocol::Https => 2,
        Protocol::TlsTerminate => 1,
        _ => 0,
    };
    let mut out: Option<Protocol> = None;
    for p in protocols {
        if out.is_none_or(|o| rank(p) > rank(o)) {
            out = Some(p);
        }
    }
    out
}

/// Which namespaces and route kinds may attach to listener `l` (`allowedRoutes`).
fn allowed_routes(
    l: &weir_api::GatewayListener,
    protocol: Option<Protocol>,
    field: &str,
    acc: &mut Outcome,
    resolved: &mut Vec<(Reason, String)>,
) -> (Allowed, RouteKinds) {
    let ar = l.allowed_routes.clone().unwrap_or_default();
    let ns = ar.namespaces.unwrap_or_default();
    let allowed = match ns.from.as_deref().unwrap_or("Same") {
        "Same" => Allowed::Same,
        "All" => Allowed::All,
        "Selector" => match ns.selector {
            Some(s) => Allowed::Selector(s),
            None => {
                *acc = Err((
                    Reason::UnsupportedValue,
                    format!(
                        "{field}.allowedRoutes.namespaces.selector: required for from: Selector"
                    ),
                ));
                Allowed::Nothing
            }
        },
        other => {
            *acc = Err((
                Reason::UnsupportedValue,
                format!("{field}.allowedRoutes.namespaces.from: unsupported {other:?}"),
            ));
            Allowed::Nothing
        }
    };
    let Some(protocol) = protocol else {
        return (allowed, RouteKinds::NONE);
    };
    let served = RouteKinds::for_protocol(protocol);
    if ar.kinds.is_empty() {
        return (allowed, served);
    }
    let mut kinds = RouteKinds::NONE;
    for (i, k) in ar.kinds.iter().enumerate() {
        let g = k.group.as_deref().unwrap_or(GATEWAY_GROUP);
        match RouteKind::from_group_kind(g, &k.kind).filter(|rk| served.contains(*rk)) {
            Some(rk) => kinds = kinds.with(rk),
            None => resolved.push((
                Reason::InvalidRouteKinds,
                format!(
                    "{field}.allowedRoutes.kinds[{i}]: {g}/{} is not supported",
                    k.kind
                ),
            )),
        }
    }
    (allowed, kinds)
}
