//! Gateway, ListenerSet and XListenerSet statuses (and their listeners').

use std::sync::Arc;

use weir_api::{
    Condition, ConditionType, GatewayStatus, GatewayStatusAddress, ListenerEntryStatus,
    ListenerSetStatus, ListenerStatus, Reason,
};

use crate::compile::gateway::{GatewayState, SetsAllowed};
use crate::compile::listener::{ListenerState, Outcome};

/// The Gateway's status, given how many routes are attached to each listener (by name)
/// and how many listener sets are attached to it.
pub(crate) fn status(
    state: &GatewayState,
    attached: impl Fn(&Arc<str>) -> u32,
    sets_attached: u32,
) -> GatewayStatus {
    let g = state.generation;
    let any_programmed = state.listeners.iter().any(|l| l.programmed);
    let mut conditions = vec![
        gateway_accepted(state),
        if let (Ok(()), Some(m)) = (&state.accepted, &state.unusable) {
            Condition::new(
                ConditionType::Programmed,
                false,
                Reason::AddressNotUsable,
                m.clone(),
                g,
            )
        } else if any_programmed {
            Condition::new(
                ConditionType::Programmed,
                true,
                Reason::Programmed,
                "Gateway programmed",
                g,
            )
        } else {
            Condition::new(
                ConditionType::Programmed,
                false,
                Reason::Invalid,
                "no listener is programmed",
                g,
            )
        },
    ];
    // Refused `weir.dev/…` annotations do not reject the Gateway (their defaults apply);
    // they are named in its Accepted condition.
    if state.accepted.is_ok() && !state.settings_problems.is_empty() {
        let accepted = &mut conditions[0];
        accepted.message = format!(
            "{}; {}",
            accepted.message,
            state.settings_problems.join("; ")
        )
        .into();
    }
    // Reported by Gateways with a backend client certificate (the only reference of a
    // Gateway outside its listeners): whether it can be used. It does not touch
    // `Accepted`: without the certificate, backends that require one refuse the
    // handshake, and the rest is served.
    if let Some(client) = &state.backend_client {
        conditions.push(match client {
            Ok(_) => Condition::new(
                ConditionType::ResolvedRefs,
                true,
                Reason::ResolvedRefs,
                "spec.tls.backend.clientCertificateRef resolved",
                g,
            ),
            Err((reason, m)) => {
                Condition::new(ConditionType::ResolvedRefs, false, *reason, m.clone(), g)
            }
        });
    }
    // Named while any frontend TLS entry serves clients without a valid certificate
    // (removed when none does).
    if state.frontend.insecure {
        conditions.push(Condition::new(
            ConditionType::InsecureFrontendValidationMode,
            true,
            Reason::ConfigurationChanged,
            "spec.tls.frontend: AllowInsecureFallback serves clients without a valid certificate",
            g,
        ));
    }
    // Reported only by Gateways that opted into listener sets (`spec.allowedListeners`):
    // the condition of the v1.4 experimental API and, since v1.5, the count in
    // `status.attachedListenerSets`.
    match &state.sets_allowed {
        None => {}
        Some(SetsAllowed::None) => conditions.push(Condition::new(
            ConditionType::AttachedListenerSets,
            false,
            Reason::ListenerSetsNotAllowed,
            "spec.allowedListeners allows no namespace",
            g,
        )),
        Some(_) if sets_attached > 0 => conditions.push(Condition::new(
            ConditionType::AttachedListenerSets,
            true,
            Reason::ListenerSetsAttached,
            "ListenerSets are attached",
            g,
        )),
        Some(_) => conditions.push(Condition::new(
            ConditionType::AttachedListenerSets,
            false,
            Reason::NoListenerSetsAttached,
            "no ListenerSet is attached",
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
        attached_listener_sets: state.sets_allowed.as_ref().map(|_| sets_attached),
    }
}

/// The Gateway's Accepted condition. A Gateway whose own acceptance is fine but some of
/// whose listeners are invalid (their Accepted is False: an unsupported protocol, a bad
/// port or hostname, …) reports reason `ListenersNotValid`: still accepted if at least one
/// listener is valid, not accepted if none is (Gateway API v1.5+,
/// `GatewayListenerUnsupportedProtocol`).
fn gateway_accepted(state: &GatewayState) -> Condition {
    let g = state.generation;
    let invalid: Vec<&ListenerState> = state
        .listeners
        .iter()
        .filter(|l| l.accepted.is_err())
        .collect();
    if state.accepted.is_err() || invalid.is_empty() {
        return outcome(
            ConditionType::Accepted,
            &state.accepted,
            Reason::Accepted,
            "Gateway accepted",
            g,
        );
    }
    let names: Vec<&str> = invalid.iter().map(|l| &*l.name).collect();
    let some_valid = invalid.len() < state.listeners.len();
    Condition::new(
        ConditionType::Accepted,
        some_valid,
        Reason::ListenersNotValid,
        format!(
            "{} of {} listeners not valid: {}",
            invalid.len(),
            state.listeners.len(),
            names.join(", ")
        ),
        g,
    )
}

/// A ListenerSet's or XListenerSet's status, given how many routes are attached to each
/// listener.
pub(crate) fn set_status(
    state: &GatewayState,
    attached: impl Fn(&Arc<str>) -> u32,
) -> ListenerSetStatus {
    let g = state.generation;
    let any_valid = state.listeners.iter().any(set_listener_valid);
    let accepted = match &state.accepted {
        Ok(()) if !any_valid => Condition::new(
            ConditionType::Accepted,
            false,
            Reason::ListenersNotValid,
            "no listener is valid",
            g,
        ),
        o => outcome(
            ConditionType::Accepted,
            o,
            Reason::Accepted,
            "listener set accepted",
            g,
        ),
    };
    // A set that is not accepted is not programmed, for the same reason (NotAllowed,
    // ParentNotAccepted, ListenersNotValid), as the v1.5+ conformance tests expect.
    let programmed = if !accepted.is_true() {
        Condition {
            type_: ConditionType::Programmed.as_str(),
            ..accepted.clone()
        }
    } else if state.listeners.iter().any(|l| l.programmed) {
        Condition::new(
            ConditionType::Programmed,
            true,
            Reason::Programmed,
            "listener set programmed",
            g,
        )
    } else {
        Condition::new(
            ConditionType::Programmed,
            false,
            Reason::Invalid,
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
                let mut st = listener_status(l, &attached, g);
                conflicted_is_not_accepted(&mut st);
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

/// Whether a set's listener counts as valid for the set's acceptance: accepted, not in
/// conflict with the Gateway's or an older set's listeners, and (HTTPS) with a usable
/// certificate. Unsupported route kinds alone do not make it invalid.
pub(crate) fn set_listener_valid(l: &ListenerState) -> bool {
    l.accepted.is_ok()
        && l.conflict.is_none()
        && l.taken_by.is_none()
        && l.shadowed.is_none()
        && (!l
            .protocol
            .is_some_and(crate::compile::listener::terminates_tls)
            || l.cert.is_some())
}

/// A set's listener in conflict is neither accepted nor programmed, with the conflict's
/// reason (`HostnameConflict`, `ProtocolConflict`) on all three conditions, as Gateway
/// API v1.5+ words it for ListenerSets. (A Gateway's own listeners keep the v1.4 wording,
/// which the Gateway conformance tests check.)
fn conflicted_is_not_accepted(st: &mut ListenerStatus) {
    let Some(c) = st
        .conditions
        .iter()
        .find(|c| c.is(ConditionType::Conflicted) && c.is_true())
        .cloned()
    else {
        return;
    };
    for t in [ConditionType::Accepted, ConditionType::Programmed] {
        if let Some(x) = st.conditions.iter_mut().find(|x| x.is(t)) {
            *x = Condition {
                type_: t.as_str(),
                status: "False",
                ..c.clone()
            };
        }
    }
}

fn outcome(
    t: ConditionType,
    o: &Outcome,
    ok_reason: Reason,
    ok_msg: &'static str,
    g: Option<i64>,
) -> Condition {
    match o {
        Ok(()) => Condition::new(t, true, ok_reason, ok_msg, g),
        Err((r, m)) => Condition::new(t, false, *r, m.clone(), g),
    }
}

fn listener_status(
    l: &ListenerState,
    attached: &impl Fn(&Arc<str>) -> u32,
    g: Option<i64>,
) -> ListenerStatus {
    let accepted = match (&l.accepted, &l.taken_by) {
        (Err(e), _) => Err(e.clone()),
        (Ok(()), Some((_, m))) => Err((Reason::PortUnavailable, m.clone())),
        (Ok(()), None) => Ok(()),
    };
    let resolved = match l.resolved.first() {
        None => Condition::new(
            ConditionType::ResolvedRefs,
            true,
            Reason::ResolvedRefs,
            "all references resolved",
            g,
        ),
        Some((r, _)) => {
            let msg: Vec<&str> = l.resolved.iter().map(|(_, m)| m.as_str()).collect();
            Condition::new(ConditionType::ResolvedRefs, false, *r, msg.join("; "), g)
        }
    };
    let conflicted = match (&l.conflict, &l.taken_by, &l.shadowed) {
        (Some((r, m)), _, _) => Condition::new(ConditionType::Conflicted, true, *r, m.clone(), g),
        (None, Some((r, m)), _) => {
            Condition::new(ConditionType::Conflicted, true, *r, m.clone(), g)
        }
        (None, None, Some(m)) => Condition::new(
            ConditionType::Conflicted,
            true,
            Reason::HostnameConflict,
            m.clone(),
            g,
        ),
        (None, None, None) => Condition::new(
            ConditionType::Conflicted,
            false,
            Reason::NoConflicts,
            "no conflicts",
            g,
        ),
    };
    let programmed = if l.programmed {
        Condition::new(
            ConditionType::Programmed,
            true,
            Reason::Programmed,
            "listener programmed",
            g,
        )
    } else {
        Condition::new(
            ConditionType::Programmed,
            false,
            Reason::Invalid,
            "listener is not accepted, conflicted or has no valid certificate",
            g,
        )
    };
    ListenerStatus {
        name: l.name.to_string(),
        supported_kinds: l.kinds.to_status(),
        attached_routes: i32::try_from(attached(&l.name)).unwrap_or(i32::MAX),
        conditions: vec![
            outcome(
                ConditionType::Accepted,
                &accepted,
                Reason::Accepted,
                "listener accepted",
                g,
            ),
            resolved,
            conflicted,
            programmed,
        ],
    }
}
