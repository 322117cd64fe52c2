//! Gateway → validated listeners, and the Gateway's status.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use weir_api::{
    Condition, Gateway, GatewayListener, GatewayStatus, GatewayStatusAddress, Kind, LabelSelector,
    ListenerEntryStatus, ListenerSetStatus, ListenerStatus, ObjectKey, XListenerSet,
};
use weir_model::{Certificate, HostMatch, ListenerKey, Protocol};

use crate::order::Age;
use crate::pool::AddressPool;
use crate::route_kind::{GATEWAY_GROUP, Referrer, RouteKind, RouteKinds};
use crate::store::{Dep, Store};

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
}

/// Which namespaces' XListenerSets may add listeners to a Gateway
/// (`spec.allowedListeners`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum SetsAllowed {
    None,
    Same,
    All,
    Selector(LabelSelector),
}

/// A Gateway of ours, or an XListenerSet attached to one, after validation.
///
/// An XListenerSet's listeners live on its parent Gateway's sockets: `group` is the
/// Gateway that owns those sockets (the object itself for a Gateway) and `label` the
/// metrics/data-plane label of its listeners (`namespace/name` of that Gateway).
#[derive(Clone, Debug)]
pub(crate) struct GatewayState {
    pub(crate) key: ObjectKey,
    pub(crate) group: ObjectKey,
    /// The group Gateway's age (socket ownership between Gateways: oldest wins).
    pub(crate) group_age: Age,
    pub(crate) label: Arc<str>,
    /// `spec.allowedListeners` of a Gateway (`None` when the field is unset, and for sets).
    pub(crate) sets_allowed: Option<SetsAllowed>,
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
    let socket_ip = (accepted.is_ok() && unusable.is_none()).then_some(ip);
    let listeners = compile_listeners(
        store,
        ns,
        Referrer::Gateway,
        "spec.listeners",
        &gw.spec.listeners,
        socket_ip,
        deps,
    );
    let sets_allowed = gw.spec.allowed_listeners.as_ref().map(|a| {
        let n = a.namespaces.clone().unwrap_or_default();
        match n.from.as_deref().unwrap_or("None") {
            "Same" => SetsAllowed::Same,
            "All" => SetsAllowed::All,
            "Selector" => n.selector.map_or(SetsAllowed::None, SetsAllowed::Selector),
            _ => SetsAllowed::None,
        }
    });
    GatewayState {
        key: key.clone(),
        group: key.clone(),
        group_age: age.clone(),
        label: format!("{}/{}", key.namespace, key.name).into(),
        sets_allowed,
        age,
        generation: gw.metadata.generation,
        accepted,
        unusable,
        ip,
        listeners,
    }
}

/// Validates an XListenerSet whose parent Gateway is ours (`parent`: its state, `None`
/// when the Gateway does not exist). Its listeners listen on the parent's address and
/// conflict with the parent's own listeners (which win) on the same port.
pub(crate) fn compile_set(
    store: &Store,
    key: &ObjectKey,
    age: Age,
    set: &XListenerSet,
    parent: Option<&GatewayState>,
    deps: &mut Vec<Dep>,
) -> GatewayState {
    let ns = &*key.namespace;
    let pk = set.parent();
    deps.push(Dep::Object(pk.clone()));
    let pr = &set.spec.parent_ref;
    let mut accepted: Outcome = Ok(());
    if pr.group.as_deref().unwrap_or(GATEWAY_GROUP) != GATEWAY_GROUP
        || pr.kind.as_deref().unwrap_or("Gateway") != "Gateway"
    {
        accepted = Err((
            "ParentNotAccepted",
            format!(
                "spec.parentRef: {}/{} is not supported (gateway.networking.k8s.io/Gateway)",
                pr.group.as_deref().unwrap_or(GATEWAY_GROUP),
                pr.kind.as_deref().unwrap_or("Gateway")
            ),
        ));
    }
    let gw_name = format!("Gateway {}/{}", pk.namespace, pk.name);
    match parent {
        _ if accepted.is_err() => {}
        None => accepted = Err(("ParentNotAccepted", format!("{gw_name} not found"))),
        Some(p) if p.accepted.is_err() || p.unusable.is_some() => {
            accepted = Err(("ParentNotAccepted", format!("{gw_name} is not accepted")))
        }
        Some(p) => {
            let allowed = match &p.sets_allowed {
                None | Some(SetsAllowed::None) => false,
                Some(SetsAllowed::Same) => *pk.namespace == *ns,
                Some(SetsAllowed::All) => true,
                Some(SetsAllowed::Selector(sel)) => {
                    deps.push(Dep::Object(ObjectKey::new(Kind::Namespace, "", ns)));
                    sel.matches(&store.namespace_labels(ns))
                }
            };
            if !allowed {
                accepted = Err((
                    "NotAllowed",
                    format!(
                        "{gw_name} does not allow XListenerSets from namespace {ns} (spec.allowedListeners)"
                    ),
                ));
            }
        }
    }
    let socket_ip = match (parent, &accepted) {
        (Some(p), Ok(())) => Some(p.ip),
        _ => None,
    };
    let mut listeners = compile_listeners(
        store,
        ns,
        Referrer::ListenerSet,
        "spec.listeners",
        &set.spec.listeners,
        socket_ip,
        deps,
    );
    if let Some(p) = parent {
        let of = format!(" of {gw_name}");
        for l in &mut listeners {
            if l.accepted.is_err() || l.conflict.is_some() || l.key.is_none() {
                continue;
            }
            l.conflict = first_conflict(l, &p.listeners, &of);
        }
    }
    let (group_age, label, ip) = match parent {
        Some(p) => (p.group_age.clone(), p.label.clone(), p.ip),
        None => (
            Age::new(None, u64::MAX),
            format!("{}/{}", pk.namespace, pk.name).into(),
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        ),
    };
    GatewayState {
        key: key.clone(),
        group: pk,
        group_age,
        label,
        sets_allowed: None,
        age,
        generation: set.metadata.generation,
        accepted,
        unusable: None,
        ip,
        listeners,
    }
}

/// Validates listeners (of a Gateway or an XListenerSet in namespace `ns`), including
/// conflicts among them (the earlier listener wins). `socket_ip` is where they listen,
/// `None` when the owner is not accepted (no listener gets a socket then).
fn compile_listeners(
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
                            if !store.grant_allows(from, ns, sns, "", "Secret", &r.name) {
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
        let (allowed, kinds) = allowed_routes(l, protocol, &field, &mut acc, &mut resolved);
        listeners.push(ListenerState {
            name: l.name.as_str().into(),
            port: l.port,
            key: port
                .zip(socket_ip)
                .map(|(p, ip)| ListenerKey(SocketAddr::new(ip, p))),
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
fn first_conflict(
    l: &ListenerState,
    winners: &[ListenerState],
    of: &str,
) -> Option<(&'static str, String)> {
    let on_socket = winners
        .iter()
        .filter(|o| o.accepted.is_ok() && o.conflict.is_none() && o.key == l.key);
    for o in on_socket {
        if o.protocol != l.protocol {
            return Some((
                "ProtocolConflict",
                format!(
                    "port {} is already used by listener {:?}{of} with another protocol",
                    l.port, o.name
                ),
            ));
        }
        if o.hostname == l.hostname {
            return Some((
                "HostnameConflict",
                format!(
                    "listener {:?}{of} already serves hostname {} on port {}",
                    o.name, l.hostname, l.port
                ),
            ));
        }
    }
    None
}

/// Which namespaces and route kinds may attach to listener `l` (`allowedRoutes`).
fn allowed_routes(
    l: &weir_api::GatewayListener,
    protocol: Option<Protocol>,
    field: &str,
    acc: &mut Outcome,
    resolved: &mut Vec<(&'static str, String)>,
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
                "InvalidRouteKinds",
                format!(
                    "{field}.allowedRoutes.kinds[{i}]: {g}/{} is not supported",
                    k.kind
                ),
            )),
        }
    }
    (allowed, kinds)
}

/// Settles socket ownership: `owner` names the Gateway owning a socket (the oldest
/// claimant) and the protocol it serves there; `host_owner` (XListenerSets only) names the
/// oldest set serving a hostname on a socket.
pub(crate) fn settle(
    state: &mut GatewayState,
    owner: impl Fn(&ListenerKey) -> Option<(ObjectKey, Option<Protocol>)>,
    host_owner: impl Fn(&ListenerKey, &HostMatch) -> Option<ObjectKey>,
) {
    for l in &mut state.listeners {
        l.taken_by = None;
        l.shadowed = None;
        if let Some(k) = &l.key
            && let Some((o, proto)) = owner(k)
            && o != state.group
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
        if l.taken_by.is_none()
            && l.accepted.is_ok()
            && l.conflict.is_none()
            && let Some(k) = &l.key
            && let Some(o) = host_owner(k, &l.hostname)
            && o != state.key
        {
            l.shadowed = Some(format!(
                "XListenerSet {}/{} already serves hostname {} on port {}",
                o.namespace, o.name, l.hostname, l.port
            ));
        }
        l.programmed = l.accepted.is_ok()
            && l.conflict.is_none()
            && l.taken_by.is_none()
            && l.shadowed.is_none()
            && l.key.is_some()
            && (l.protocol == Some(Protocol::Http) || l.cert.is_some());
    }
}

/// The (socket, hostname) pairs an XListenerSet's valid listeners ask for.
pub(crate) fn host_claims(state: &GatewayState) -> Vec<(ListenerKey, HostMatch)> {
    let mut v: Vec<(ListenerKey, HostMatch)> = state
        .listeners
        .iter()
        .filter(|l| l.accepted.is_ok() && l.conflict.is_none())
        .filter_map(|l| l.key.map(|k| (k, l.hostname.clone())))
        .collect();
    v.sort();
    v.dedup();
    v
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
            kinds: l.kinds,
            programmed: l.programmed,
        })
        .collect()
}

/// The Gateway's status, given how many routes are attached to each listener (by name)
/// and how many XListenerSets are attached to it.
pub(crate) fn status(
    state: &GatewayState,
    attached: impl Fn(&Arc<str>) -> u32,
    sets_attached: u32,
) -> GatewayStatus {
    let g = state.generation;
    let any_programmed = state.listeners.iter().any(|l| l.programmed);
    let mut conditions = vec![
        outcome(
            "Accepted",
            &state.accepted,
            "Accepted",
            "Gateway accepted",
            g,
        ),
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
    // Reported only by Gateways that opted into XListenerSets (`spec.allowedListeners`).
    match &state.sets_allowed {
        None => {}
        Some(SetsAllowed::None) => conditions.push(Condition::new(
            "AttachedListenerSets",
            false,
            "ListenerSetsNotAllowed",
            "spec.allowedListeners allows no namespace",
            g,
        )),
        Some(_) if sets_attached > 0 => conditions.push(Condition::new(
            "AttachedListenerSets",
            true,
            "ListenerSetsAttached",
            "XListenerSets are attached",
            g,
        )),
        Some(_) => conditions.push(Condition::new(
            "AttachedListenerSets",
            false,
            "NoListenerSetsAttached",
            "no XListenerSet is attached",
            g,
        )),
    }
    let listeners = state
        .listeners
        .iter()
        .map(|l| listener_status(l, &attached, g))
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

/// An XListenerSet's status, given how many routes are attached to each listener.
pub(crate) fn set_status(
    state: &GatewayState,
    attached: impl Fn(&Arc<str>) -> u32,
) -> ListenerSetStatus {
    let g = state.generation;
    let any_accepted = state.listeners.iter().any(|l| {
        l.accepted.is_ok() && l.conflict.is_none() && l.taken_by.is_none() && l.shadowed.is_none()
    });
    let accepted = match &state.accepted {
        Ok(()) if !any_accepted => Condition::new(
            "Accepted",
            false,
            "ListenersNotValid",
            "no listener is valid",
            g,
        ),
        o => outcome("Accepted", o, "Accepted", "XListenerSet accepted", g),
    };
    let programmed = if state.listeners.iter().any(|l| l.programmed) {
        Condition::new(
            "Programmed",
            true,
            "Programmed",
            "XListenerSet programmed",
            g,
        )
    } else {
        Condition::new(
            "Programmed",
            false,
            "Invalid",
            "no listener is programmed",
            g,
        )
    };
    ListenerSetStatus {
        conditions: vec![accepted, programmed],
        listeners: state
            .listeners
            .iter()
            .map(|l| {
                let st = listener_status(l, &attached, g);
                ListenerEntryStatus {
                    name: st.name,
                    port: l.port,
                    supported_kinds: st.supported_kinds,
                    attached_routes: st.attached_routes,
                    conditions: st.conditions,
                }
            })
            .collect(),
    }
}

fn outcome(t: &str, o: &Outcome, ok_reason: &str, ok_msg: &str, g: Option<i64>) -> Condition {
    match o {
        Ok(()) => Condition::new(t, true, ok_reason, ok_msg, g),
        Err((r, m)) => Condition::new(t, false, r, m.clone(), g),
    }
}

fn listener_status(
    l: &ListenerState,
    attached: &impl Fn(&Arc<str>) -> u32,
    g: Option<i64>,
) -> ListenerStatus {
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
    let conflicted = match (&l.conflict, &l.taken_by, &l.shadowed) {
        (Some((r, m)), _, _) => Condition::new("Conflicted", true, r, m.clone(), g),
        (None, Some((r, m)), _) => Condition::new("Conflicted", true, r, m.clone(), g),
        (None, None, Some(m)) => {
            Condition::new("Conflicted", true, "HostnameConflict", m.clone(), g)
        }
        (None, None, None) => Condition::new("Conflicted", false, "NoConflicts", "no conflicts", g),
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
        supported_kinds: l.kinds.to_status(),
        attached_routes: i32::try_from(attached(&l.name)).unwrap_or(i32::MAX),
        conditions: vec![
            outcome("Accepted", &accepted, "Accepted", "listener accepted", g),
            resolved,
            conflicted,
            programmed,
        ],
    }
}
