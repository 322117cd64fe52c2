//! Gateway and XListenerSet → validated state, and socket ownership settled against
//! other Gateways.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use weir_api::{Gateway, Kind, LabelSelector, ListenerSetSpec, ObjectKey, ObjectMeta, Reason};
use weir_model::{HostMatch, L4Mode, ListenerKey, ListenerSettings, Protocol};

use crate::compile::backend_client::{self, BackendClient};
use crate::compile::frontend::{self, Frontend};
use crate::compile::listener::{
    ListenerState, ListenerView, Outcome, compile_listeners, first_conflict,
};
use crate::compile::order::Age;
use crate::compile::route_kind::{GATEWAY_GROUP, Referrer};
use crate::compile::settings;
use crate::pool::AddressPool;
use crate::store::{Dep, Store};

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
    /// What the Gateway's `weir.dev/…` annotations ask of its sockets (an XListenerSet
    /// has its parent's: it listens on the parent's sockets).
    /// Shared with the Gateway's listener sets (176 bytes each otherwise: a listener
    /// set's state was 568 bytes, 640 in the allocator's size class).
    pub(crate) settings: Arc<ListenerSettings>,
    /// Annotations refused (the default applies), reported in the Accepted condition.
    pub(crate) settings_problems: Vec<String>,
    /// Client certificate validation of the HTTPS sockets (`spec.tls.frontend`; an
    /// XListenerSet has its parent's).
    pub(crate) frontend: Arc<Frontend>,
    /// The certificate presented to backends (`spec.tls.backend.clientCertificateRef`;
    /// `None` when unset, and for listener sets: the Gateway's policy covers their
    /// listeners).
    pub(crate) backend_client: BackendClient,
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
                    Reason::UnsupportedAddress,
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
                    Reason::UnsupportedAddress,
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
    if let Some(problem) = parameters_problem(store, ns, gw, deps)
        && accepted.is_ok()
    {
        accepted = Err((Reason::InvalidParameters, problem));
    }
    let socket_ip = (accepted.is_ok() && unusable.is_none()).then_some(ip);
    let mut listeners = compile_listeners(
        store,
        ns,
        Referrer::Gateway,
        "spec.listeners",
        &gw.spec.listeners,
        socket_ip,
        deps,
    );
    let frontend = frontend::compile(
        store,
        ns,
        gw.spec.tls.as_ref().and_then(|t| t.frontend.as_ref()),
    );
    deps.extend(frontend.deps.iter().cloned());
    frontend.apply(&mut listeners);
    let backend_client = backend_client::compile(store, ns, gw.spec.tls.as_ref(), deps);
    let sets_allowed = gw.spec.allowed_listeners.as_ref().map(|a| {
        let n = a.namespaces.clone().unwrap_or_default();
        match n.from.as_deref().unwrap_or("None") {
            "Same" => SetsAllowed::Same,
            "All" => SetsAllowed::All,
            "Selector" => n.selector.map_or(SetsAllowed::None, SetsAllowed::Selector),
            _ => SetsAllowed::None,
        }
    });
    let (settings, settings_problems) = settings::listener_settings(&gw.metadata.annotations);
    GatewayState {
        settings: Arc::new(settings),
        settings_problems,
        frontend: Arc::new(frontend),
        backend_client,
        key: key.clone(),
        group: key.clone(),
        group_age: age.clone(),
        label: format!("{}/{}", key.namespace, key.name).into(),
        sets_allowed,
        age,
        generation: gw.metadata.generation(),
        accepted,
        unusable,
        ip,
        listeners,
    }
}

/// What is wrong with the Gateway's `infrastructure.parametersRef`, if anything: weir
/// takes a ConfigMap (core group) in the Gateway's namespace, the same kind as for a
/// GatewayClass's `parametersRef`, and it must exist (its existence is a dependency, so
/// the Gateway is compiled again when it appears or goes).
fn parameters_problem(
    store: &Store,
    ns: &str,
    gw: &Gateway,
    deps: &mut Vec<Dep>,
) -> Option<String> {
    let r = gw.spec.infrastructure.as_ref()?.parameters_ref.as_ref()?;
    if !r.group.is_empty() || r.kind != "ConfigMap" {
        let gk = if r.group.is_empty() {
            r.kind.clone()
        } else {
            format!("{}/{}", r.group, r.kind)
        };
        return Some(format!(
            "spec.infrastructure.parametersRef: kind {gk} is not supported (weir takes a ConfigMap)"
        ));
    }
    let key = ObjectKey::new(Kind::ConfigMap, ns, &r.name);
    let exists = store.get(&key).is_some();
    deps.push(Dep::Object(key));
    (!exists).then(|| {
        format!(
            "spec.infrastructure.parametersRef: ConfigMap {:?} not found in namespace {ns}",
            r.name
        )
    })
}

/// Validates a ListenerSet or XListenerSet (`key.kind` says which) whose parent Gateway
/// is ours (`parent`: its state, `None` when the Gateway does not exist). Its listeners
/// listen on the parent's address and conflict with the parent's own listeners (which
/// win) on the same port.
pub(crate) fn compile_set(
    store: &Store,
    key: &ObjectKey,
    age: Age,
    (meta, set): (&ObjectMeta, &ListenerSetSpec),
    parent: Option<&GatewayState>,
    deps: &mut Vec<Dep>,
) -> GatewayState {
    let ns = &*key.namespace;
    let pk = set.parent(ns);
    deps.push(Dep::Object(pk.clone()));
    let pr = &set.parent_ref;
    let mut accepted: Outcome = Ok(());
    if pr.group.as_deref().unwrap_or(GATEWAY_GROUP) != GATEWAY_GROUP
        || pr.kind.as_deref().unwrap_or("Gateway") != "Gateway"
    {
        accepted = Err((
            Reason::ParentNotAccepted,
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
        None => accepted = Err((Reason::ParentNotAccepted, format!("{gw_name} not found"))),
        Some(p) if p.accepted.is_err() || p.unusable.is_some() => {
            accepted = Err((
                Reason::ParentNotAccepted,
                format!("{gw_name} is not accepted"),
            ))
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
                    Reason::NotAllowed,
                    format!(
                        "{gw_name} does not allow {}s from namespace {ns} (spec.allowedListeners)",
                        key.kind
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
        Referrer::ListenerSet(key.kind),
        "spec.listeners",
        &set.listeners,
        socket_ip,
        deps,
    );
    // The parent's client certificate validation applies to the HTTPS listeners of the
    // set on its ports (they share its sockets).
    let frontend = parent.map(|p| p.frontend.clone()).unwrap_or_default();
    deps.extend(frontend.deps.iter().cloned());
    frontend.apply(&mut listeners);
    if let Some(p) = parent {
        let of = format!(" of {gw_name}");
        for l in &mut listeners {
            if l.accepted.is_err() || l.conflict.is_some() || l.key.is_none() {
                continue;
            }
            l.conflict = first_conflict(l, &p.listeners, &of);
        }
    }
    let (group_age, label, ip, settings) = match parent {
        Some(p) => (
            p.group_age.clone(),
            p.label.clone(),
            p.ip,
            p.settings.clone(),
        ),
        None => (
            Age::new(None, u64::MAX),
            format!("{}/{}", pk.namespace, pk.name).into(),
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            Arc::new(ListenerSettings::default()),
        ),
    };
    GatewayState {
        settings,
        settings_problems: Vec::new(),
        frontend,
        backend_client: None,
        key: key.clone(),
        group: pk,
        group_age,
        label,
        sets_allowed: None,
        age,
        generation: meta.generation(),
        accepted,
        unusable: None,
        ip,
        listeners,
    }
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
        // Only a listener that claims its socket can find it taken: one that is not
        // accepted claims nothing, and is not settled again when the owner changes.
        if l.accepted.is_ok()
            && l.conflict.is_none()
            && let Some(k) = &l.key
            && let Some((o, proto)) = owner(k)
            && o != state.group
        {
            let reason = if crate::compile::listener::shares_socket(proto, l.protocol) {
                Reason::HostnameConflict
            } else {
                Reason::ProtocolConflict
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
                "{} {}/{} already serves hostname {} on port {}",
                o.kind, o.namespace, o.name, l.hostname, l.port
            ));
        }
        l.programmed = l.accepted.is_ok()
            && l.conflict.is_none()
            && l.taken_by.is_none()
            && l.shadowed.is_none()
            && l.key.is_some()
            && match l.protocol {
                Some(Protocol::Https | Protocol::TlsTerminate) => l.cert.is_some(),
                Some(Protocol::Http | Protocol::TlsPassthrough | Protocol::Tcp | Protocol::Udp) => {
                    true
                }
                None => false,
            };
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
            l4_mode: if l.protocol == Some(Protocol::TlsTerminate) {
                L4Mode::Terminate
            } else {
                L4Mode::Passthrough
            },
        })
        .collect()
}
