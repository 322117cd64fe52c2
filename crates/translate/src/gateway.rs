//! Gateway → validated listeners, and the Gateway's status.

use foldhash::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use weir_api::{
    Condition, Gateway, GatewayStatus, GatewayStatusAddress, Kind, LabelSelector, ListenerStatus,
    ObjectKey, StatusRouteKind,
};
use weir_model::{Certificate, HostMatch, ListenerKey, Protocol};

use crate::order::Age;
use crate::pool::AddressPool;
use crate::store::{Dep, Store};

const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// A condition outcome: `Err((reason, message))` when it is not met.
pub(crate) type Outcome = Result<(), (&'static str, String)>;

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
    pub(crate) resolved: Vec<(&'static str, String)>,
    pub(crate) cert: Option<Arc<Certificate>>,
    /// A conflict with an earlier listener of the same Gateway.
    pub(crate) conflict: Option<(&'static str, String)>,
    /// The socket is owned by an older Gateway: (reason, message).
    pub(crate) taken_by: Option<(&'static str, String)>,
    pub(crate) allowed: Allowed,
    pub(crate) http_routes: bool,
    pub(crate) supported_kinds: Vec<StatusRouteKind>,
    pub(crate) programmed: bool,
}

impl ListenerState {
    /// Whether routes may attach (before namespace and hostname checks).
    pub(crate) fn routable(&self) -> bool {
        self.accepted.is_ok()
            && self.conflict.is_none()
            && self.taken_by.is_none()
            && self.key.is_some()
            && self.http_routes
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
    pub(crate) routable: bool,
    pub(crate) programmed: bool,
}

/// A Gateway of ours after validation.
#[derive(Clone, Debug)]
pub(crate) struct GatewayState {
    pub(crate) key: ObjectKey,
    pub(crate) age: Age,
    pub(crate) generation: Option<i64>,
    pub(crate) accepted: Outcome,
    /// Why the requested addresses cannot be served (`AddressNotUsable`): the Gateway is
    /// accepted but nothing of it is programmed.
    pub(crate) unusable: Option<String>,
    pub(crate) ip: IpAddr,
    pub(crate) listeners: Vec<ListenerState>,
}

/// Whether `gw` belongs to us.
pub(crate) fn is_ours(store: &Store, controller: &str, standalone: bool, gw: &Gateway) -> bool {
    match store.gateway_class(&gw.spec.gateway_class_name) {
        Some(c) => c.spec.controller_name == controller,
        None => standalone,
    }
}

/// Validates a Gateway of ours (socket ownership is settled later by [`settle`]).
pub(crate) fn compile(
    store: &Store,
    key: &ObjectKey,
    age: Age,
    gw: &Gateway,
    pool: Option<&AddressPool>,
    deps: &mut Vec<Dep>,
) -> GatewayState {
    let ns = &*key.namespace;
    let mut accepted: Outcome = Ok(());
    let mut ip = match pool {
        Some(p) => IpAddr::V4(p.address_for(ns, &key.name)),
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    // Requested addresses: an IPAddress is where the Gateway listens (one per Gateway);
    // a Hostname names it from outside (e.g. a load balancer's DNS name) and does not
    // change where it listens; any other type is unsupported. With a pool, only the
    // pool's addresses can be served (they are the ones this controller hands out).
    let mut unusable: Option<String> = None;
    let mut requested: Vec<IpAddr> = Vec::new();
    for (i, a) in gw.spec.addresses.iter().enumerate() {
        match a.type_.as_deref().unwrap_or("IPAddress") {
            "IPAddress" => {}
            "Hostname" => continue,
            t => {
                accepted = Err((
                    "UnsupportedAddress",
                    format!(
                        "spec.addresses[{i}].type: {t:?} is not supported (IPAddress, Hostname)"
                    ),
                ));
                continue;
            }
        }
        if a.value.is_empty() {
            // An empty value asks the implementation to pick (GatewayAddressEmpty).
            continue;
        }
        match a.value.parse::<IpAddr>() {
            Ok(v) => {
                if let Some(p) = pool
                    && !p.contains(v)
                {
                    unusable.get_or_insert(format!(
                        "spec.addresses[{i}].value: {v} is outside the address pool {p}"
                    ));
                }
                requested.push(v);
            }
            Err(_) => {
                accepted = Err((
                    "UnsupportedAddress",
                    format!(
                        "spec.addresses[{i}].value: {:?} is not an IP address",
                        a.value
                    ),
                ))
            }
        }
    }
    if requested.len() > 1 {
        unusable.get_or_insert(format!(
            "spec.addresses: {} addresses requested; a Gateway is served on one",
            requested.len()
        ));
    }
    if let Some(v) = requested.first() {
        ip = *v;
    }
    let mut listeners = Vec::with_capacity(gw.spec.listeners.len());
    for (i, l) in gw.spec.listeners.iter().enumerate() {
        let field = format!("spec.listeners[{i}]");
        let mut acc: Outcome = Ok(());
        let mut resolved = Vec::new();
        let port = u16::try_from(l.port).ok().filter(|p| *p != 0);
        if port.is_none() {
            acc = Err((
                "UnsupportedValue",
                format!("{field}.port: {} is not a valid port", l.port),
            ));
        }
        let hostname = match HostMatch::parse(l.hostname.as_deref()) {
            Ok(h) => h,
            Err(e) => {
                acc = Err(("UnsupportedValue", format!("{field}.hostname: {e}")));
                HostMatch::Any
            }
        };
        let protocol = match l.protocol.as_str() {
            "HTTP" => Some(Protocol::Http),
            "HTTPS" => Some(Protocol::Https),
            other => {
                acc = Err((
                    "UnsupportedProtocol",
                    format!("{field}.protocol: {other:?} is not supported (HTTP, HTTPS)"),
                ));
                None
            }
        };
        let mut cert = None;
        if protocol == Some(Protocol::Https) {
            match &l.tls {
                Some(t) if t.mode.as_deref().is_some_and(|m| m != "Terminate") => {
                    acc = Err((
                        "UnsupportedValue",
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
                                "InvalidCertificateRef",
                                format!("{fr}: unsupported kind {group:?}/{kind:?} (Secret)"),
                            ));
                            continue;
                        }
                        let sns = r
                            .namespace
                            .as_deref()
                            .filter(|n| !n.is_empty())
                            .unwrap_or(ns);
                        deps.push(Dep::Object(ObjectKey::new(Kind::Secret, sns, &r.name)));
                        if sns != ns {
                            deps.push(Dep::GrantsIn(sns.into()));
                            if !store.grant_allows("Gateway", ns, sns, "", "Secret", &r.name) {
                                resolved.push((
                                    "RefNotPermitted",
                                    format!("{fr}: Secret {sns}/{} is in another namespace and no ReferenceGrant allows it", r.name),
                                ));
                                continue;
                            }
                        }
                        match store.certificate(sns, &r.name) {
                            None => resolved.push((
                                "InvalidCertificateRef",
                                format!("{fr}: Secret {sns}/{} not found", r.name),
                            )),
                            Some(Err(m)) => {
                                resolved.push(("InvalidCertificateRef", format!("{fr}: {m}")))
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
                    "InvalidCertificateRef",
                    format!("{field}.tls.certificateRefs: HTTPS needs at least one"),
                )),
            }
        }
        let (allowed, http_routes, supported_kinds) =
            allowed_routes(l, protocol.is_some(), &field, &mut acc, &mut resolved);
        listeners.push(ListenerState {
            name: l.name.as_str().into(),
            port: l.port,
            key: port
                .filter(|_| accepted.is_ok() && unusable.is_none())
                .map(|p| ListenerKey(SocketAddr::new(ip, p))),
            protocol,
            hostname,
            accepted: acc,
            resolved,
            cert,
            conflict: None,
            taken_by: None,
            allowed,
            http_routes,
            supported_kinds,
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
        let earlier = before
            .iter()
            .filter(|o| o.accepted.is_ok() && o.conflict.is_none() && o.key == l.key);
        for o in earlier {
            if o.protocol != l.protocol {
                l.conflict = Some((
                    "ProtocolConflict",
                    format!(
                        "port {} is already used by listener {:?} with another protocol",
                        l.port, o.name
                    ),
                ));
                break;
            }
            if o.hostname == l.hostname {
                l.conflict = Some((
                    "HostnameConflict",
                    format!(
                        "listener {:?} already serves hostname {} on port {}",
                        o.name, l.hostname, l.port
                    ),
                ));
                break;
            }
        }
    }
    GatewayState {
        key: key.clone(),
        age,
        generation: gw.metadata.generation,
        accepted,
        unusable,
        ip,
        listeners,
    }
}

fn allowed_routes(
    l: &weir_api::GatewayListener,
    supported_protocol: bool,
    field: &str,
    acc: &mut Outcome,
    resolved: &mut Vec<(&'static str, String)>,
) -> (Allowed, bool, Vec<StatusRouteKind>) {
    let ar = l.allowed_routes.clone().unwrap_or_default();
    let ns = ar.namespaces.unwrap_or_default();
    let allowed = match ns.from.as_deref().unwrap_or("Same") {
        "Same" => Allowed::Same,
        "All" => Allowed::All,
        "Selector" => match ns.selector {
            Some(s) => Allowed::Selector(s),
            None => {
                *acc = Err((
                    "UnsupportedValue",
                    format!(
                        "{field}.allowedRoutes.namespaces.selector: required for from: Selector"
                    ),
                ));
                Allowed::Nothing
            }
        },
        other => {
            *acc = Err((
                "UnsupportedValue",
                format!("{field}.allowedRoutes.namespaces.from: unsupported {other:?}"),
            ));
            Allowed::Nothing
        }
    };
    if !supported_protocol {
        return (allowed, false, Vec::new());
    }
    let http_route = || StatusRouteKind {
        group: GATEWAY_GROUP.into(),
        kind: "HTTPRoute".into(),
    };
    if ar.kinds.is_empty() {
        return (allowed, true, vec![http_route()]);
    }
    let mut ok = false;
    for (i, k) in ar.kinds.iter().enumerate() {
        let g = k.group.as_deref().unwrap_or(GATEWAY_GROUP);
        if g == GATEWAY_GROUP && k.kind == "HTTPRoute" {
            ok = true;
        } else {
            resolved.push((
                "InvalidRouteKinds",
                format!(
                    "{field}.allowedRoutes.kinds[{i}]: {g}/{} is not supported",
                    k.kind
                ),
            ));
        }
    }
    (
        allowed,
        ok,
        if ok { vec![http_route()] } else { Vec::new() },
    )
}

/// Settles socket ownership: `owner` names the Gateway owning a socket (the oldest
/// claimant) and the protocol it serves there.
pub(crate) fn settle(
    state: &mut GatewayState,
    owner: impl Fn(&ListenerKey) -> Option<(ObjectKey, Option<Protocol>)>,
) {
    for l in &mut state.listeners {
        l.taken_by = None;
        if let Some(k) = &l.key
            && let Some((o, proto)) = owner(k)
            && o != state.key
        {
            let reason = if proto == l.protocol {
                "HostnameConflict"
            } else {
                "ProtocolConflict"
            };
            l.taken_by = Some((
                reason,
                format!("{k} is already used by Gateway {}/{}", o.namespace, o.name),
            ));
        }
        l.programmed = l.accepted.is_ok()
            && l.conflict.is_none()
            && l.taken_by.is_none()
            && l.key.is_some()
            && (l.protocol == Some(Protocol::Http) || l.cert.is_some());
    }
}

/// The protocol a Gateway serves on socket `k` (from its first valid listener there).
pub(crate) fn protocol_on(state: &GatewayState, k: &ListenerKey) -> Option<Protocol> {
    state
        .listeners
        .iter()
        .find(|l| l.key.as_ref() == Some(k) && l.accepted.is_ok() && l.conflict.is_none())
        .and_then(|l| l.protocol)
}

/// The sockets a Gateway claims (those of its valid listeners).
pub(crate) fn claims(state: &GatewayState) -> Vec<ListenerKey> {
    let mut v: Vec<ListenerKey> = state
        .listeners
        .iter()
        .filter(|l| l.accepted.is_ok() && l.conflict.is_none())
        .filter_map(|l| l.key)
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The listener views routes are matched against.
pub(crate) fn views(state: &GatewayState) -> Vec<ListenerView> {
    state
        .listeners
        .iter()
        .map(|l| ListenerView {
            name: l.name.clone(),
            port: l.port,
            key: l.key,
            hostname: l.hostname.clone(),
            allowed: l.allowed.clone(),
            routable: l.routable(),
            programmed: l.programmed,
        })
        .collect()
}

/// The Gateway's status, given how many routes are attached to each listener (by name).
pub(crate) fn status(
    state: &GatewayState,
    attached: Option<&HashMap<Arc<str>, i32>>,
) -> GatewayStatus {
    let g = state.generation;
    let cond = |t: &str, o: &Outcome, ok_reason: &str, ok_msg: &str| match o {
        Ok(()) => Condition::new(t, true, ok_reason, ok_msg, g),
        Err((r, m)) => Condition::new(t, false, r, m.clone(), g),
    };
    let any_programmed = state.listeners.iter().any(|l| l.programmed);
    let conditions = vec![
        cond("Accepted", &state.accepted, "Accepted", "Gateway accepted"),
        if let (Ok(()), Some(m)) = (&state.accepted, &state.unusable) {
            Condition::new("Programmed", false, "AddressNotUsable", m.clone(), g)
        } else if any_programmed {
            Condition::new("Programmed", true, "Programmed", "Gateway programmed", g)
        } else {
            Condition::new(
                "Programmed",
                false,
                "Invalid",
                "no listener is programmed",
                g,
            )
        },
    ];
    let listeners = state
        .listeners
        .iter()
        .map(|l| {
            let accepted = match (&l.accepted, &l.taken_by) {
                (Err(e), _) => Err(e.clone()),
                (Ok(()), Some((_, m))) => Err(("PortUnavailable", m.clone())),
                (Ok(()), None) => Ok(()),
            };
            let resolved = match l.resolved.first() {
                None => Condition::new(
                    "ResolvedRefs",
                    true,
                    "ResolvedRefs",
                    "all references resolved",
                    g,
                ),
                Some((r, _)) => {
                    let msg: Vec<&str> = l.resolved.iter().map(|(_, m)| m.as_str()).collect();
                    Condition::new("ResolvedRefs", false, r, msg.join("; "), g)
                }
            };
            let conflicted = match (&l.conflict, &l.taken_by) {
                (Some((r, m)), _) => Condition::new("Conflicted", true, r, m.clone(), g),
                (None, Some((r, m))) => Condition::new("Conflicted", true, r, m.clone(), g),
                (None, None) => {
                    Condition::new("Conflicted", false, "NoConflicts", "no conflicts", g)
                }
            };
            let programmed = if l.programmed {
                Condition::new("Programmed", true, "Programmed", "listener programmed", g)
            } else {
                Condition::new(
                    "Programmed",
                    false,
                    "Invalid",
                    "listener is not accepted, conflicted or has no valid certificate",
                    g,
                )
            };
            ListenerStatus {
                name: l.name.to_string(),
                supported_kinds: l.supported_kinds.clone(),
                attached_routes: attached.and_then(|a| a.get(&l.name)).copied().unwrap_or(0),
                conditions: vec![
                    cond("Accepted", &accepted, "Accepted", "listener accepted"),
                    resolved,
                    conflicted,
                    programmed,
                ],
            }
        })
        .collect();
    GatewayStatus {
        addresses: if state.accepted.is_ok() && state.unusable.is_none() {
            vec![GatewayStatusAddress {
                type_: "IPAddress".into(),
                value: state.ip.to_string(),
            }]
        } else {
            Vec::new()
        },
        conditions,
        listeners,
    }
}
