//! Gateways and listener sets: their validated state, what routes see of them, what they
//! contributed, and what is attached to them.

use std::sync::Arc;

use foldhash::{HashMap, HashSet};

use weir_api::{ObjectKey, ObjectStatus};
use weir_model::ListenerKey;

use crate::compile::gateway::GatewayState;
use crate::compile::gateway_status;
use crate::compile::listener::ListenerView;
use crate::incremental::{HostKey, RefCount, SniOwner};

/// What one Gateway or listener set currently contributes, so that settling it again
/// can undo exactly that.
#[derive(Default)]
pub(crate) struct GatewayOutputs {
    /// Its sockets with a Listener resource.
    pub(crate) listeners: Vec<ListenerKey>,
    /// The listeners are a listener set's share of its Gateway's sockets
    /// (`Sockets::share`), not sockets of its own (`Sockets::add_listener`).
    pub(crate) shared: bool,
    /// Its SNI entries.
    pub(crate) sni: Vec<(HostKey, SniOwner)>,
    /// Virtual hosts that exist even without routes (listener isolation).
    pub(crate) isolated: Vec<HostKey>,
    /// Its listeners' sections on their sockets (`Sockets::add_section`).
    pub(crate) sections: Vec<(weir_model::ListenerKey, crate::incremental::SectionOrder)>,
}

/// Per Gateway and listener set of ours: state, listener views, outputs, and the counts
/// its status reports (attached routes per listener, attached sets).
#[derive(Default)]
pub(crate) struct GatewayIndex {
    /// Boxed: a `GatewayState` is hundreds of bytes, and a table at hashbrown's
    /// power-of-two sizes holds room for up to twice as many as it has (20,000
    /// ListenerSets: a 20 MiB table, most of it empty slots of that size).
    states: HashMap<ObjectKey, Box<GatewayState>>,
    /// What routes are matched against; a change recomputes the attached routes.
    views: HashMap<ObjectKey, Vec<ListenerView>>,
    outputs: HashMap<ObjectKey, GatewayOutputs>,
    /// Attached listener sets (accepted, with a valid listener) → their Gateway, and how
    /// many each Gateway has.
    set_parents: HashMap<ObjectKey, ObjectKey>,
    sets_attached: RefCount<ObjectKey>,
    /// Routes attached per (Gateway or listener set, listener name).
    attached: RefCount<(ObjectKey, Arc<str>)>,
}

impl GatewayIndex {
    /// The state of Gateway or listener set `gk`, if it is ours.
    pub(crate) fn state(&self, gk: &ObjectKey) -> Option<&GatewayState> {
        self.states.get(gk).map(|s| &**s)
    }

    /// Sets (or, with `None`, removes) the state of `gk`.
    pub(crate) fn set_state(&mut self, gk: &ObjectKey, state: Option<GatewayState>) {
        match state {
            Some(s) => self.states.insert(gk.clone(), Box::new(s)),
            None => self.states.remove(gk),
        };
    }

    /// Takes the state of `gk` out (to settle it; [`Self::set_state`] puts it back).
    pub(crate) fn take_state(&mut self, gk: &ObjectKey) -> Option<GatewayState> {
        self.states.remove(gk).map(|s| *s)
    }

    /// The listener views of `gk`, if it is ours.
    pub(crate) fn views(&self, gk: &ObjectKey) -> Option<&[ListenerView]> {
        self.views.get(gk).map(Vec::as_slice)
    }

    /// Sets (or removes) the listener views of `gk`; returns whether they changed (the
    /// routes attached to it must then be recomputed).
    pub(crate) fn set_views(&mut self, gk: &ObjectKey, views: Option<Vec<ListenerView>>) -> bool {
        match views {
            None => self.views.remove(gk).is_some(),
            Some(v) if self.views.get(gk) == Some(&v) => false,
            Some(v) => {
                self.views.insert(gk.clone(), v);
                true
            }
        }
    }

    /// Takes out what `gk` contributed (to undo it).
    pub(crate) fn take_outputs(&mut self, gk: &ObjectKey) -> Option<GatewayOutputs> {
        self.outputs.remove(gk)
    }

    /// Records what `gk` contributes.
    pub(crate) fn set_outputs(&mut self, gk: &ObjectKey, outputs: GatewayOutputs) {
        self.outputs.insert(gk.clone(), outputs);
    }

    /// Records the Gateway listener set `set` is attached to (`None`: none). A Gateway
    /// whose count changes (its `attachedListenerSets`, and the `AttachedListenerSets`
    /// condition when the count leaves or reaches zero) is added to `statuses`.
    pub(crate) fn set_parent(
        &mut self,
        set: &ObjectKey,
        parent: Option<ObjectKey>,
        statuses: &mut HashSet<ObjectKey>,
    ) {
        let old = self.set_parents.remove(set);
        // Every change of a Gateway's count changes its status (`attachedListenerSets`),
        // not only 0 <-> 1 (the `AttachedListenerSets` condition).
        if old != parent {
            if let Some(p) = &old {
                self.sets_attached.dec(p);
                statuses.insert(p.clone());
            }
            if let Some(p) = &parent {
                self.sets_attached.inc(p.clone(), ());
                statuses.insert(p.clone());
            }
        }
        if let Some(p) = parent {
            self.set_parents.insert(set.clone(), p);
        }
    }

    /// Replaces one route's attachments (Gateway or set, listener name) `old` by `new`;
    /// the Gateways and sets involved are added to `statuses`.
    pub(crate) fn attach_route(
        &mut self,
        old: &[(ObjectKey, Arc<str>)],
        new: &[(ObjectKey, Arc<str>)],
        statuses: &mut HashSet<ObjectKey>,
    ) {
        if old == new {
            return;
        }
        for a in old {
            self.attached.dec(a);
            statuses.insert(a.0.clone());
        }
        for a in new {
            self.attached.inc(a.clone(), ());
            statuses.insert(a.0.clone());
        }
    }

    /// The status of Gateway or listener set `gk` (`None` when it is not ours).
    pub(crate) fn status(&self, gk: &ObjectKey) -> Option<ObjectStatus> {
        let s = self.states.get(gk)?;
        let attached = |l: &Arc<str>| self.attached.count(&(gk.clone(), l.clone()));
        Some(if gk.kind.is_listener_set() {
            ObjectStatus::ListenerSet(gateway_status::set_status(s, attached))
        } else {
            let sets = self.sets_attached.count(gk);
            ObjectStatus::Gateway(gateway_status::status(s, attached, sets))
        })
    }
}
