//! The host table: virtual-host rules, isolated hosts and SNI entries per (socket, host).

use std::sync::Arc;

use weir_api::ObjectKey;
use weir_model::{
    Certificate, HostMatch, ListenerKey, ResourceKey, RouteRule, SniCert, VirtualHost,
};

use crate::compile::order::{Age, RuleOrder};
use crate::incremental::{DirtyResources, OrdIndex, RefCount};

/// A host on a listener: the key of a VirtualHost and of an SNI entry.
pub(crate) type HostKey = (ListenerKey, HostMatch);
/// Who contributed an SNI entry (oldest wins).
pub(crate) type SniOwner = (Age, ObjectKey);

/// Everything that makes up the VirtualHost and SNI resources. Every change marks the
/// resource it touches as dirty.
#[derive(Default)]
pub(crate) struct HostTable {
    /// Rules by precedence, from every route and Ingress serving the host.
    rules: OrdIndex<HostKey, Arc<RuleOrder>, Arc<RouteRule>>,
    /// Listener hostnames that shadow a less specific listener on the same socket, with
    /// how many Gateways ask for them: their virtual host exists even with no routes, so
    /// that their hosts never fall through to the less specific listener's routes.
    isolated: RefCount<HostKey>,
    /// Certificates by owner age (the oldest is served).
    sni: OrdIndex<HostKey, SniOwner, Arc<Certificate>>,
}

impl HostTable {
    /// Adds (or replaces) rule `order` of host `hk`.
    pub(crate) fn add_rule(
        &mut self,
        hk: HostKey,
        order: Arc<RuleOrder>,
        rule: Arc<RouteRule>,
        dirty: &mut DirtyResources,
    ) {
        dirty.insert(ResourceKey::VirtualHost(hk.0, hk.1.clone()));
        self.rules.insert(hk, order, rule);
    }

    /// Removes rule `order` of host `hk`.
    pub(crate) fn remove_rule(
        &mut self,
        hk: HostKey,
        order: &Arc<RuleOrder>,
        dirty: &mut DirtyResources,
    ) {
        self.rules.remove(&hk, order);
        dirty.insert(ResourceKey::VirtualHost(hk.0, hk.1));
    }

    /// One more Gateway needs host `hk` to exist even without rules.
    pub(crate) fn isolate(&mut self, hk: HostKey, dirty: &mut DirtyResources) {
        dirty.insert(ResourceKey::VirtualHost(hk.0, hk.1.clone()));
        self.isolated.inc(hk, ());
    }

    /// One Gateway fewer needs host `hk` to exist without rules.
    pub(crate) fn unisolate(&mut self, hk: HostKey, dirty: &mut DirtyResources) {
        self.isolated.dec(&hk);
        dirty.insert(ResourceKey::VirtualHost(hk.0, hk.1));
    }

    /// Adds (or replaces) `owner`'s certificate for host `hk`.
    pub(crate) fn add_sni(
        &mut self,
        hk: HostKey,
        owner: SniOwner,
        cert: Arc<Certificate>,
        dirty: &mut DirtyResources,
    ) {
        dirty.insert(ResourceKey::Sni(hk.0, hk.1.clone()));
        self.sni.insert(hk, owner, cert);
    }

    /// Removes `owner`'s certificate for host `hk`.
    pub(crate) fn remove_sni(&mut self, hk: HostKey, owner: &SniOwner, dirty: &mut DirtyResources) {
        self.sni.remove(&hk, owner);
        dirty.insert(ResourceKey::Sni(hk.0, hk.1));
    }

    /// The certificate served for host `hk` (the oldest owner's).
    pub(crate) fn sni_certificate(&self, hk: &HostKey) -> Option<&Arc<Certificate>> {
        self.sni.first(hk).map(|(_, c)| c)
    }

    /// The VirtualHost resource of `host` on listener `k`, if it should exist.
    pub(crate) fn virtual_host(&self, k: ListenerKey, host: &HostMatch) -> Option<VirtualHost> {
        let hk = (k, host.clone());
        let rules = match self.rules.get(&hk) {
            Some(rules) => rules.values().cloned().collect(),
            None if self.isolated.contains_key(&hk) => Vec::new(),
            None => return None,
        };
        Some(VirtualHost::new(k, host.clone(), rules))
    }

    /// The SNI resource of `host` on listener `k`, if it should exist.
    pub(crate) fn sni_entry(&self, k: ListenerKey, host: &HostMatch) -> Option<SniCert> {
        let cert = self.sni_certificate(&(k, host.clone()))?;
        Some(SniCert::new(k, host.clone(), cert.hash()))
    }

    /// Makes room for `hosts` more virtual hosts and `sni` more SNI entries.
    pub(crate) fn reserve(&mut self, hosts: usize, sni: usize) {
        self.rules.reserve(hosts);
        self.sni.reserve(sni);
    }
}
