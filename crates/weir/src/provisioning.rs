//! Split mode: keeps one data-plane deployment per accepted Gateway (see
//! [`weir_provider_k8s::Provisioner`]), off the change path: the config loop hands over
//! what changed and a background task writes, newest request per Gateway first.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use weir_api::{Kind, Object, ObjectKey, ObjectStatus};
use weir_provider_k8s::Provisioner;

/// What one Gateway should have.
enum Want {
    Present(Arc<Object>),
    Absent,
}

/// Tracks Gateways and their acceptance; sends provisioning work to its task.
pub(crate) struct Provisioning {
    gateways: BTreeMap<ObjectKey, Arc<Object>>,
    /// Accepted Gateways (their objects are provisioned).
    accepted: std::collections::BTreeSet<ObjectKey>,
    /// XListenerSets: the Gateway each names and its listeners' ports (exposed by the
    /// Gateway's Service and Deployment too).
    sets: BTreeMap<ObjectKey, (ObjectKey, Vec<i32>)>,
    classes: Arc<std::sync::Mutex<BTreeMap<String, Arc<Object>>>>,
    tx: mpsc::UnboundedSender<(ObjectKey, Want)>,
    _watch: AbortOnDrop,
}

/// Stops the Service-address watch when provisioning is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The addresses of each provisioned Gateway's Service, for its status.
pub(crate) type Addresses = Arc<std::sync::Mutex<BTreeMap<ObjectKey, Vec<String>>>>;

impl Provisioning {
    /// `addresses` receives each Gateway's Service addresses; `changed` is called with the
    /// Gateway whose addresses changed (to write its status again).
    ///
    /// Only the leader provisions (`leader`, always `true` without leader election):
    /// while this replica follows, requests are kept (newest per Gateway) and carried out
    /// when it becomes the leader, after which [`Provisioning::resync`] asks for every
    /// accepted Gateway again.
    pub(crate) fn start(
        provisioner: Provisioner,
        addresses: Addresses,
        changed: impl Fn(ObjectKey) + Send + Sync + 'static,
        mut leader: tokio::sync::watch::Receiver<bool>,
    ) -> Provisioning {
        let changed = Arc::new(changed);
        // Addresses assigned later (a load balancer's) reach the Gateway's status as soon
        // as its Service shows them. Only Gateways provisioned now are followed: a
        // removed one's Service events are ignored.
        //
        // A follower provisions nothing, so it learns the addresses of the Services the
        // leader provisioned from this watch alone: when it becomes the leader, the
        // Gateway statuses it reconciles then carry the same addresses as the stored ones
        // (no rewrite without them before its own apply returns).
        let watch_task = {
            let addresses = addresses.clone();
            let changed = changed.clone();
            let leader = leader.clone();
            provisioner.watch_addresses(move |key, a| {
                let mut all = addresses.lock().unwrap_or_else(|p| p.into_inner());
                match all.get_mut(&key) {
                    Some(old) if *old != a => {
                        *old = a;
                        drop(all);
                        changed(key);
                    }
                    None if !*leader.borrow() => {
                        all.insert(key, a);
                    }
                    _ => {}
                }
            })
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<(ObjectKey, Want)>();
        let classes: Arc<std::sync::Mutex<BTreeMap<String, Arc<Object>>>> = Default::default();
        let task_classes = classes.clone();
        tokio::spawn(async move {
            // Requests received while following, carried out on becoming the leader.
            let mut deferred: BTreeMap<ObjectKey, Want> = BTreeMap::new();
            loop {
                // The newest request per Gateway wins.
                let mut batch = BTreeMap::new();
                tokio::select! {
                    first = rx.recv() => match first {
                        Some((k, w)) => {
                            batch.insert(k, w);
                        }
                        None => return,
                    },
                    Ok(()) = leader.changed() => {}
                }
                while let Ok((k, w)) = rx.try_recv() {
                    batch.insert(k, w);
                }
                if !*leader.borrow_and_update() {
                    deferred.append(&mut batch);
                    continue;
                }
                let mut all = std::mem::take(&mut deferred);
                all.append(&mut batch);
                for (key, want) in all {
                    let r = match &want {
                        Want::Present(o) => match &**o {
                            Object::Gateway(gw) => {
                                let class = task_classes
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .get(&gw.spec.gateway_class_name)
                                    .cloned();
                                let class = class.as_deref().and_then(|c| match c {
                                    Object::GatewayClass(c) => Some(&**c),
                                    _ => None,
                                });
                                provisioner.ensure(gw, class).await.map(|a| {
                                    let mut all =
                                        addresses.lock().unwrap_or_else(|p| p.into_inner());
                                    if all.get(&key) != Some(&a) {
                                        all.insert(key.clone(), a);
                                        drop(all);
                                        changed(key.clone());
                                    }
                                })
                            }
                            _ => Ok(()),
                        },
                        Want::Absent => {
                            addresses
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .remove(&key);
                            provisioner.remove(&key).await
                        }
                    };
                    match r {
                        Ok(()) => {
                            tracing::info!(gateway = %key, present = matches!(want, Want::Present(_)), "data-plane objects provisioned")
                        }
                        Err(e) => {
                            tracing::warn!(gateway = %key, error = %e, "provisioning failed; retried on the Gateway's next change")
                        }
                    }
                }
            }
        });
        Provisioning {
            gateways: BTreeMap::new(),
            accepted: Default::default(),
            sets: BTreeMap::new(),
            classes,
            tx,
            _watch: AbortOnDrop(watch_task),
        }
    }

    /// Asks for every accepted Gateway's objects again (on becoming the leader: the
    /// previous leader may have left work undone). Server-side apply makes a repeat of
    /// unchanged objects a no-op on the API server.
    pub(crate) fn resync(&self) {
        for key in &self.accepted {
            if let Some(o) = self.with_sets(key) {
                let _ = self.tx.send((key.clone(), Want::Present(o)));
            }
        }
    }

    /// Notes Gateway, GatewayClass and XListenerSet objects among the changes (before
    /// they are translated). A set that changes the ports of an accepted Gateway
    /// provisions it again.
    pub(crate) fn observe(&mut self, upserts: &[(ObjectKey, Arc<Object>)], deletes: &[ObjectKey]) {
        let mut ports_changed: Vec<ObjectKey> = Vec::new();
        for (key, o) in upserts {
            match &**o {
                Object::Gateway(_) => {
                    self.gateways.insert(key.clone(), o.clone());
                }
                Object::GatewayClass(_) => {
                    let mut c = self.classes.lock().unwrap_or_else(|p| p.into_inner());
                    c.insert(o.metadata().name.to_string(), o.clone());
                }
                Object::XListenerSet(_) | Object::ListenerSet(_) => {
                    let Some((meta, set)) = o.as_listener_set() else {
                        continue;
                    };
                    let key = key.clone();
                    let parent = set.parent(&meta.namespace);
                    let new_ports = ports(&set.listeners);
                    match self.sets.insert(key, (parent.clone(), new_ports.clone())) {
                        Some((old_parent, old_ports))
                            if old_parent == parent && old_ports == new_ports => {}
                        Some((old_parent, _)) => {
                            ports_changed.push(old_parent);
                            ports_changed.push(parent);
                        }
                        None => ports_changed.push(parent),
                    }
                }
                _ => {}
            }
        }
        for k in deletes {
            if k.kind == Kind::Gateway && self.gateways.remove(k).is_some() {
                self.accepted.remove(k);
                let _ = self.tx.send((k.clone(), Want::Absent));
            }
            if k.kind.is_listener_set()
                && let Some((parent, _)) = self.sets.remove(k)
            {
                ports_changed.push(parent);
            }
        }
        ports_changed.sort();
        ports_changed.dedup();
        for g in ports_changed {
            if self.accepted.contains(&g)
                && let Some(o) = self.with_sets(&g)
            {
                let _ = self.tx.send((g, Want::Present(o)));
            }
        }
    }

    /// Gateway `key`'s object with one listener appended per port of the XListenerSets
    /// naming it that the Gateway does not already listen on (only ports matter to the
    /// provisioned objects).
    fn with_sets(&self, key: &ObjectKey) -> Option<Arc<Object>> {
        let o = self.gateways.get(key)?;
        let Object::Gateway(gw) = &**o else {
            return Some(o.clone());
        };
        let own: std::collections::BTreeSet<i32> =
            gw.spec.listeners.iter().map(|l| l.port).collect();
        let extra: std::collections::BTreeSet<i32> = self
            .sets
            .values()
            .filter(|(p, _)| p == key)
            .flat_map(|(_, ports)| ports.iter().copied())
            .filter(|p| !own.contains(p))
            .collect();
        if extra.is_empty() {
            return Some(o.clone());
        }
        let mut gw = gw.clone();
        gw.spec
            .listeners
            .extend(extra.into_iter().map(|port| weir_api::GatewayListener {
                name: format!("xlistenerset-{port}"),
                port,
                protocol: "HTTP".into(),
                ..Default::default()
            }));
        Some(Arc::new(Object::Gateway(gw)))
    }

    /// Provisions accepted Gateways of ours and removes the objects of refused ones, from
    /// the statuses a change produced.
    pub(crate) fn statuses(&mut self, statuses: &[(ObjectKey, Arc<ObjectStatus>)]) {
        for (key, status) in statuses {
            let ObjectStatus::Gateway(s) = &**status else {
                continue;
            };
            let accepted = s
                .conditions
                .iter()
                .any(|c| c.type_ == "Accepted" && c.is_true());
            let want = match (accepted, self.with_sets(key)) {
                (true, Some(o)) => {
                    self.accepted.insert(key.clone());
                    Want::Present(o)
                }
                _ => {
                    self.accepted.remove(key);
                    Want::Absent
                }
            };
            let _ = self.tx.send((key.clone(), want));
        }
    }
}

fn ports(listeners: &[weir_api::GatewayListener]) -> Vec<i32> {
    let mut v: Vec<i32> = listeners.iter().map(|l| l.port).collect();
    v.sort();
    v.dedup();
    v
}
