//! Sockets: which Gateway group owns each one, which XListenerSet serves each hostname
//! on them, and the Listener resources.

use std::sync::Arc;

use foldhash::{HashMap, HashSet};

use weir_api::ObjectKey;
use weir_model::{
    HostMatch, Listener, ListenerKey, ListenerSection, ListenerSettings, Protocol, Resource,
    ResourceKey,
};

use crate::compile::order::Age;
use crate::incremental::{DirtyResources, HostKey, MultiIndex, OrdIndex, RefCount};

/// Where a Gateway listener's section sorts on its socket: by hostname, the Gateway's
/// own listeners before its sets', then by age (the first of a hostname serves it).
pub(crate) type SectionOrder = (HostMatch, bool, Age, ObjectKey, Arc<str>);

/// The sockets one Gateway or XListenerSet claims, with the age and key of its group
/// (the Gateway that owns them: itself, or a set's parent).
pub(crate) type Claim = (Age, ObjectKey, Vec<ListenerKey>);

/// Socket ownership and the Listener resources.
///
/// A group (a Gateway and its XListenerSets) claims a socket while at least one of its
/// members does; the oldest group claiming a socket owns it. Within a group, the oldest
/// XListenerSet asking for a (socket, hostname) serves it.
#[derive(Default)]
pub(crate) struct Sockets {
    /// What each member claims.
    claims: HashMap<ObjectKey, Claim>,
    /// Per socket, the groups claiming it, oldest first.
    groups: OrdIndex<ListenerKey, (Age, ObjectKey)>,
    /// How many members of a group claim a socket.
    members_claiming: RefCount<(ListenerKey, (Age, ObjectKey))>,
    /// The members of each group that claim sockets.
    members: MultiIndex<ObjectKey, ObjectKey>,
    /// Per (socket, hostname), the XListenerSets asking for it, oldest first.
    host_claims: OrdIndex<HostKey, (Age, ObjectKey)>,
    /// What each XListenerSet asks for.
    set_hosts: HashMap<ObjectKey, (Age, Vec<HostKey>)>,
    /// Listener resources of Gateways (and of the Ingress listeners).
    listeners: HashMap<ListenerKey, Arc<Listener>>,
    /// Sockets XListenerSets listen on: how many sets, with the protocol and Gateway
    /// label of the first and the settings of the newest. The Listener resource comes from the Gateway's own listener
    /// there if it has one.
    set_sockets: RefCount<ListenerKey, (Protocol, Arc<str>, ListenerSettings)>,
    /// The Gateway listeners programmed on each socket (HTTP and HTTPS), for the
    /// Listener resource's sections.
    sections: HashMap<ListenerKey, std::collections::BTreeMap<SectionOrder, ListenerSection>>,
    /// Gateways (`namespace/name`) with a policy on one of their listeners or
    /// ListenerSets: only their sockets' Listener resources carry sections.
    sectioned: HashSet<Arc<str>>,
}

impl Sockets {
    /// Records what `member` claims (`None`: nothing). Sockets that a group started or
    /// stopped claiming are added to `touched`: their ownership may have moved.
    pub(crate) fn claim(
        &mut self,
        member: &ObjectKey,
        new: Option<Claim>,
        touched: &mut HashSet<ListenerKey>,
    ) {
        let old = self.claims.remove(member);
        if old != new {
            if let Some((age, group, keys)) = &old {
                let entry = (age.clone(), group.clone());
                for k in keys {
                    if self.members_claiming.dec(&(*k, entry.clone())).is_some() {
                        self.groups.remove(k, &entry);
                        touched.insert(*k);
                    }
                }
                self.members.remove(group, member);
            }
            if let Some((age, group, keys)) = &new {
                let entry = (age.clone(), group.clone());
                for k in keys {
                    if self.members_claiming.inc((*k, entry.clone()), ()) {
                        self.groups.insert(*k, entry.clone(), ());
                        touched.insert(*k);
                    }
                }
                self.members.insert(group.clone(), member.clone());
            }
        }
        if let Some(c) = new {
            self.claims.insert(member.clone(), c);
        }
    }

    /// Every member of every group claiming socket `k`.
    pub(crate) fn members_on<'a>(
        &'a self,
        k: &ListenerKey,
    ) -> impl Iterator<Item = &'a ObjectKey> + use<'a> {
        self.groups
            .keys(k)
            .flat_map(|(_, group)| self.members.get(group))
    }

    /// The group owning socket `k` (the oldest claiming it).
    pub(crate) fn owner(&self, k: &ListenerKey) -> Option<&ObjectKey> {
        self.groups.first(k).map(|((_, g), _)| g)
    }

    /// Whether any Gateway claims socket `k`.
    pub(crate) fn is_claimed(&self, k: &ListenerKey) -> bool {
        self.groups.contains_key(k)
    }

    /// Records which (socket, hostname) pairs set `set` asks for (`None`: nothing).
    /// Where that changes which set is the oldest claimant, the old one and every
    /// claimant are added to `settle`: each status names the set that serves the
    /// hostname.
    pub(crate) fn claim_hosts(
        &mut self,
        set: &ObjectKey,
        new: Option<(Age, Vec<HostKey>)>,
        settle: &mut HashSet<ObjectKey>,
    ) {
        let old = self.set_hosts.remove(set);
        if old != new {
            let changes = old
                .iter()
                .flat_map(|(age, hosts)| hosts.iter().map(move |hk| (age, hk, false)))
                .chain(
                    new.iter()
                        .flat_map(|(age, hosts)| hosts.iter().map(move |hk| (age, hk, true))),
                );
            for (age, hk, insert) in changes {
                let before = self.host_owner(hk).cloned();
                let entry = (age.clone(), set.clone());
                if insert {
                    self.host_claims.insert(hk.clone(), entry, ());
                } else {
                    self.host_claims.remove(hk, &entry);
                }
                if before.as_ref() != self.host_owner(hk) {
                    settle.extend(before);
                    settle.extend(self.host_claims.keys(hk).map(|(_, k)| k.clone()));
                }
            }
        }
        if let Some(n) = new.filter(|(_, v)| !v.is_empty()) {
            self.set_hosts.insert(set.clone(), n);
        }
    }

    /// The XListenerSet serving hostname `hk` (the oldest asking for it).
    pub(crate) fn host_owner(&self, hk: &HostKey) -> Option<&ObjectKey> {
        self.host_claims.first(hk).map(|((_, s), _)| s)
    }

    /// Sets the Listener resource on its socket.
    pub(crate) fn add_listener(&mut self, listener: Listener, dirty: &mut DirtyResources) {
        let k = listener.key;
        self.listeners.insert(k, Arc::new(listener));
        dirty.insert(ResourceKey::Listener(k));
    }

    /// Removes the Listener resource on socket `k`.
    pub(crate) fn remove_listener(&mut self, k: ListenerKey, dirty: &mut DirtyResources) {
        self.listeners.remove(&k);
        dirty.insert(ResourceKey::Listener(k));
    }

    /// One more XListenerSet listens on socket `k` (the first brings the protocol and
    /// Gateway label of the Listener resource, should its Gateway have none there).
    pub(crate) fn share(
        &mut self,
        k: ListenerKey,
        protocol: Protocol,
        label: Arc<str>,
        settings: ListenerSettings,
        dirty: &mut DirtyResources,
    ) {
        // The newest share brings its Gateway's settings: a settings change recompiles
        // the Gateway's sets, which share again.
        match self.set_sockets.get(&k) {
            Some((p, l, _)) => {
                let (p, l) = (*p, l.clone());
                self.set_sockets.inc_replace(k, (p, l, settings));
            }
            None => {
                self.set_sockets.inc(k, (protocol, label, settings));
            }
        }
        dirty.insert(ResourceKey::Listener(k));
    }

    /// One XListenerSet fewer listens on socket `k`.
    pub(crate) fn unshare(&mut self, k: ListenerKey, dirty: &mut DirtyResources) {
        self.set_sockets.dec(&k);
        dirty.insert(ResourceKey::Listener(k));
    }

    /// Records a Gateway listener on socket `k` (marks the Listener resource dirty).
    pub(crate) fn add_section(
        &mut self,
        k: ListenerKey,
        order: SectionOrder,
        section: ListenerSection,
        dirty: &mut DirtyResources,
    ) {
        self.sections.entry(k).or_default().insert(order, section);
        dirty.insert(ResourceKey::Listener(k));
    }

    /// Forgets a Gateway listener on socket `k`.
    pub(crate) fn remove_section(
        &mut self,
        k: ListenerKey,
        order: &SectionOrder,
        dirty: &mut DirtyResources,
    ) {
        if let Some(m) = self.sections.get_mut(&k) {
            m.remove(order);
            if m.is_empty() {
                self.sections.remove(&k);
            }
        }
        dirty.insert(ResourceKey::Listener(k));
    }

    /// Whether the sockets of Gateway `label` carry sections; marks the Listener
    /// resources of its sockets dirty when that changes. Rare (a Gateway's first or last
    /// listener policy), so it looks at every socket with sections.
    pub(crate) fn set_sectioned(&mut self, label: Arc<str>, on: bool, dirty: &mut DirtyResources) {
        let changed = if on {
            self.sectioned.insert(label.clone())
        } else {
            self.sectioned.remove(&label)
        };
        if !changed {
            return;
        }
        for k in self.sections.keys() {
            if self.label_on(k) == Some(&label) {
                dirty.insert(ResourceKey::Listener(*k));
            }
        }
    }

    /// The Gateway label of the Listener resource of socket `k`.
    fn label_on(&self, k: &ListenerKey) -> Option<&Arc<str>> {
        match self.listeners.get(k) {
            Some(l) => Some(&l.gateway),
            None => self.set_sockets.get(k).map(|(_, label, _)| label),
        }
    }

    /// The sections of socket `k` when its Gateway is sectioned, one per hostname.
    fn sections_of(&self, k: &ListenerKey, gateway: &Arc<str>) -> Arc<[ListenerSection]> {
        if !self.sectioned.contains(gateway) {
            return Arc::from([]);
        }
        let mut out: Vec<ListenerSection> = Vec::new();
        for s in self.sections.get(k).into_iter().flat_map(|m| m.values()) {
            if out.last().is_none_or(|l| l.hostname != s.hostname) {
                out.push(s.clone());
            }
        }
        out.into()
    }

    /// The Listener resource a Gateway (or the Ingress listeners) put on socket `k`.
    pub(crate) fn listener(&self, k: &ListenerKey) -> Option<&Arc<Listener>> {
        self.listeners.get(k)
    }

    /// The Listener resource of socket `k`, if it should exist.
    pub(crate) fn listener_resource(&self, k: &ListenerKey) -> Option<Resource> {
        let l = match self.listeners.get(k) {
            Some(l) => l.clone(),
            None => self.set_sockets.get(k).map(|(protocol, label, settings)| {
                Arc::new(Listener::with_settings(
                    *k,
                    *protocol,
                    label.clone(),
                    "xlistenersets".into(),
                    settings.clone(),
                ))
            })?,
        };
        let sections = self.sections_of(k, &l.gateway);
        Some(Resource::Listener(if sections.is_empty() {
            l
        } else {
            Arc::new((*l).clone().with_sections(sections))
        }))
    }
}
