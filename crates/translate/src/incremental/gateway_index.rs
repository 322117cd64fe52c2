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

/// What the index holds for one Gateway or listener set. One boxed entry instead of a
/// table per part: at 20,000 ListenerSets each table was a power-of-two array of keys
/// and values, most of it empty slots (4 MiB less in one table of pointers).
#[derive(Default)]
struct Entry {
    /// Its validated state (`None` while [`GatewayIndex::take_state`] has it out).
    state: Option<GatewayState>,
    /// What routes are matched against; a change recomputes the attached routes.
    views: Option<Vec<ListenerView>>,
    /// What it contributes.
    outputs: Option<GatewayOutputs>,
    /// A listener set's Gateway, while attached (accepted, with a valid listener).
    parent: Option<ObjectKey>,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.state.is_none()
            && self.views.is_none()
            && self.outputs.is_none()
            && self.parent.is_none()
    }
}

/// Per Gateway and listener set of ours: state, listener views, outputs, and the counts
/// its status reports (attached routes per listener, attached sets).
#[derive(Default)]
pub(crate) struct GatewayIndex {
    entries: HashMap<ObjectKey, Box<Entry>>,
    /// How many attached listener sets each Gateway has.
    sets_attached: RefCount<ObjectKey>,
    /// Routes attached per (Gateway or listener set, listener name).
    attached: RefCount<(ObjectKey, Arc<str>)>,
}

impl GatewayIndex {
    fn entry(&mut self, gk: &ObjectKey) -> &mut Entry {
        self.entries.entry(gk.clone()).or_default()
    }

    /// Applies `f` to the entry of `gk`, if any, dropping the entry once it holds nothing.
    fn update<T>(&mut self, gk: &ObjectKey, f: impl FnOnce(&mut Entry) -> T) -> Option<T> {
        let e = self.entries.get_mut(gk)?;
        let out = f(e);
        if e.is_empty() {
            self.entries.remove(gk);
        }
        Some(out)
    }

    /// The state of Gateway or listener set `gk`, if it is ours.
    pub(crate) fn state(&self, gk: &ObjectKey) -> Option<&GatewayState> {
        self.entries.get(gk)?.state.as_ref()
    }

    /// Sets (or, with `None`, removes) the state of `gk`.
    pub(crate) fn set_state(&mut self, gk: &ObjectKey, state: Option<GatewayState>) {
        match state {
            Some(s) => self.entry(gk).state = Some(s),
            None => {
                self.update(gk, |e| e.state = None);
            }
        }
    }

    /// Takes the state of `gk` out (to settle it; [`Self::set_state`] puts it back).
    pub(crate) fn take_state(&mut self, gk: &ObjectKey) -> Option<GatewayState> {
        self.update(gk, |e| e.state.take()).flatten()
    }

    /// The listener views of `gk`, if it is ours.
    pub(crate) fn views(&self, gk: &ObjectKey) -> Option<&[ListenerView]> {
        self.entries.get(gk)?.views.as_deref()
    }

    /// Sets (or removes) the listener views of `gk`; returns whether they changed (the
    /// routes attached to it must then be recomputed).
    pub(crate) fn set_views(&mut self, gk: &ObjectKey, views: Option<Vec<ListenerView>>) -> bool {
        match views {
            None => self.update(gk, |e| e.views.take().is_some()) == Some(true),
            Some(v) if self.views(gk) == Some(&v[..]) => false,
            Some(v) => {
                self.entry(gk).views = Some(v);
                true
            }
        }
    }

    /// Takes out what `gk` contributed (to undo it).
    pub(crate) fn take_outputs(&mut self, gk: &ObjectKey) -> Option<GatewayOutputs> {
        self.update(gk, |e| e.outputs.take()).flatten()
    }

    /// Records what `gk` contributes.
    pub(crate) fn set_outputs(&mut self, gk: &ObjectKey, outputs: GatewayOutputs) {
        self.entry(gk).outputs = Some(outputs);
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
        let old = self.update(set, |e| e.parent.take()).flatten();
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
            self.entry(set).parent = Some(p);
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
        let s = self.state(gk)?;
        let attached = |l: &Arc<str>| self.attached.count(&(gk.clone(), l.clone()));
        Some(if gk.kind.is_listener_set() {
            ObjectStatus::ListenerSet(gateway_status::set_status(s, attached))
        } else {
            let sets = self.sets_attached.count(gk);
            ObjectStatus::Gateway(gateway_status::status(s, attached, sets))
        })
    }
}
