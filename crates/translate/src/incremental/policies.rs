//! Policy attachment: which policies target which object, what each target resolves to
//! in the IR ([`PolicyTarget`]) and the merged [`Policy`] resource per target.
//!
//! A policy is never copied into the routes it covers: the data plane finds a request's
//! policies by keys derived from the request (its rule's origin, its listener's
//! Gateway). Editing a policy marks only the `Policy` resources of its own targets
//! dirty, and a route or Gateway change only re-resolves the targetRefs that name it.

use std::sync::Arc;

use foldhash::{HashMap, HashSet};

use weir_api::{
    Condition, ConditionType, Kind, Object, ObjectKey, ObjectStatus, ParentReference,
    PolicyAncestorStatus, PolicyStatus, Reason,
};
use weir_model::{BackendKind, Policy, PolicyTarget, ResourceKey, RouteKind, RouteRef, Timeouts};

use crate::compile::order::Age;
use crate::compile::policy::{CompiledPolicy, Field, PolicySettings, TargetRef};
use crate::incremental::{DirtyResources, MultiIndex, OrdIndex};
use crate::store::Store;

/// Who set a field: the oldest policy wins.
type Owner = (Age, ObjectKey);

/// One policy as last compiled.
struct Entry {
    owner: Owner,
    targets: Vec<TargetRef>,
    settings: Result<Arc<PolicySettings>, String>,
    /// Unusable references (the settings still apply).
    unresolved: Vec<String>,
    /// Skipped parts of references (reported in the `Accepted` message).
    warnings: Vec<String>,
}

/// Policies, their targets and the `Policy` resources.
#[derive(Default)]
pub(crate) struct PolicyIndex {
    policies: HashMap<ObjectKey, Entry>,
    /// Target → the valid policies naming it, oldest first.
    attached: OrdIndex<TargetRef, Owner, Arc<PolicySettings>>,
    /// Object → the targetRefs naming it, with the policy of each (several policies may
    /// name one target; it is resolved while one does).
    by_object: MultiIndex<ObjectKey, (TargetRef, ObjectKey)>,
    /// TargetRef → what it resolved to, while its object exists (and its section).
    resolved: HashMap<TargetRef, PolicyTarget>,
    /// The reverse of `resolved`.
    by_model: HashMap<PolicyTarget, TargetRef>,
    /// Policies an object carries itself rather than by a TrafficPolicy (an Ingress's
    /// ingress-nginx annotations), by the target they apply to. No TrafficPolicy
    /// attaches to those targets, so nothing is merged with them.
    implicit: HashMap<PolicyTarget, Arc<PolicySettings>>,
    /// The upstream TLS of Services (BackendTLSPolicies, `crate::incremental::BtlsIndex`),
    /// a field of their `Policy` resource beside what TrafficPolicies set.
    backend_tls: HashMap<PolicyTarget, Arc<weir_model::BackendTls>>,
    /// The backend client certificates of Gateways (`spec.tls.backend`), a field of
    /// their `Policy` resource beside what TrafficPolicies set.
    client_certs: HashMap<PolicyTarget, Arc<weir_model::Certificate>>,
    /// TargetRefs naming a ListenerSet: they resolve only while its parent Gateway
    /// exists, so a Gateway change settles them again (few: policies on sets).
    set_refs: HashSet<TargetRef>,
    /// Per Gateway (`namespace/name`), how many resolved targetRefs name one of its
    /// listeners or ListenerSets: its sockets carry sections while there are some.
    listener_targets: HashMap<Arc<str>, usize>,
    /// Gateways whose count went from or to zero since [`PolicyIndex::take_flipped`].
    flipped: Vec<Arc<str>>,
    /// TargetRefs naming a listener that carries no HTTP (TCP, UDP, TLS), with its
    /// protocol: a TrafficPolicy has nothing to act on there, so they stay unresolved
    /// (no `Policy` resource) and their status says why.
    not_http: HashMap<TargetRef, String>,
}

impl PolicyIndex {
    /// Replaces what policy `key` contributes with `new` (`None`: deleted). Marks the
    /// `Policy` resources of its old and new targets dirty, and adds to `statuses` every
    /// policy whose status may have changed.
    pub(crate) fn set(
        &mut self,
        key: &ObjectKey,
        new: Option<(CompiledPolicy, Age)>,
        store: &Store,
        dirty: &mut DirtyResources,
        statuses: &mut HashSet<ObjectKey>,
    ) {
        statuses.insert(key.clone());
        let mut touched: Vec<TargetRef> = Vec::new();
        if let Some(old) = self.policies.remove(key) {
            for t in old.targets {
                if old.settings.as_ref().is_ok_and(|s| s.fits(&t).is_ok()) {
                    self.attached.remove(&t, &old.owner);
                }
                self.by_object
                    .remove(&object_of(&t), &(t.clone(), key.clone()));
                touched.push(t);
            }
        }
        if let Some((c, age)) = new {
            let owner = (age, key.clone());
            for t in &c.targets {
                if let Ok(s) = &c.settings
                    && s.fits(t).is_ok()
                {
                    self.attached.insert(t.clone(), owner.clone(), s.clone());
                }
                self.by_object
                    .insert(object_of(t), (t.clone(), key.clone()));
                if t.kind.is_some_and(Kind::is_listener_set) {
                    self.set_refs.insert(t.clone());
                }
                touched.push(t.clone());
            }
            self.policies.insert(
                key.clone(),
                Entry {
                    owner,
                    targets: c.targets,
                    settings: c.settings,
                    unresolved: c.unresolved,
                    warnings: c.warnings,
                },
            );
        }
        touched.sort();
        touched.dedup();
        for t in touched {
            self.settle(&t, store, dirty, statuses);
        }
    }

    /// Re-resolves the targetRefs naming `object` (it was created, changed or deleted).
    pub(crate) fn object_changed(
        &mut self,
        object: &ObjectKey,
        store: &Store,
        dirty: &mut DirtyResources,
        statuses: &mut HashSet<ObjectKey>,
    ) {
        let mut refs: Vec<TargetRef> = self.by_object.get(object).map(|(t, _)| t.clone()).collect();
        if object.kind == Kind::Gateway {
            refs.extend(self.set_refs.iter().cloned());
        }
        refs.sort();
        refs.dedup();
        for t in refs {
            self.settle(&t, store, dirty, statuses);
        }
    }

    /// Resolves `t` again and marks what depends on it: its old and new `Policy`
    /// resources, and the status of every policy naming it.
    fn settle(
        &mut self,
        t: &TargetRef,
        store: &Store,
        dirty: &mut DirtyResources,
        statuses: &mut HashSet<ObjectKey>,
    ) {
        let named = self.by_object.get(&object_of(t)).any(|(r, _)| r == t);
        if !named {
            self.set_refs.remove(t);
        }
        let protocol = if named {
            not_http_listener(t, store)
        } else {
            None
        };
        let now = match &protocol {
            Some(_) => None,
            None if named => resolve(t, store),
            None => None,
        };
        match protocol {
            Some(p) => self.not_http.insert(t.clone(), p),
            None => self.not_http.remove(t),
        };
        let before = match &now {
            Some(m) => self.resolved.insert(t.clone(), m.clone()),
            None => self.resolved.remove(t),
        };
        if before != now {
            self.count_listener_target(before.as_ref(), -1);
            self.count_listener_target(now.as_ref(), 1);
        }
        if let Some(b) = &before {
            if self.by_model.get(b) == Some(t) {
                self.by_model.remove(b);
            }
            dirty.insert(ResourceKey::policy(b.clone()));
        }
        if let Some(m) = now {
            // Two targetRefs resolving to one target (a route with duplicate rule
            // names): the first keeps it.
            self.by_model.entry(m.clone()).or_insert_with(|| t.clone());
            dirty.insert(ResourceKey::policy(m));
        }
        statuses.extend(self.attached.keys(t).map(|(_, k)| k.clone()));
    }

    /// Counts a listener or ListenerSet target in or out of its Gateway's.
    fn count_listener_target(&mut self, t: Option<&PolicyTarget>, delta: isize) {
        let Some(
            PolicyTarget::Listener { gateway, .. } | PolicyTarget::ListenerSet { gateway, .. },
        ) = t
        else {
            return;
        };
        let n = self.listener_targets.entry(gateway.clone()).or_default();
        let was = *n;
        *n = n.saturating_add_signed(delta);
        if (was == 0) != (*n == 0) {
            self.flipped.push(gateway.clone());
        }
        if *n == 0 {
            self.listener_targets.remove(gateway);
        }
    }

    /// The Gateways that gained their first or lost their last listener-targeted
    /// targetRef since the last call (their sockets' sections come or go).
    pub(crate) fn take_flipped(&mut self) -> Vec<Arc<str>> {
        std::mem::take(&mut self.flipped)
    }

    /// Whether a targetRef names a listener or ListenerSet of Gateway `label`.
    pub(crate) fn has_listener_targets(&self, label: &str) -> bool {
        self.listener_targets.contains_key(label)
    }

    /// Sets (or, with `None`, removes) the implicit policy of `target`, marking its
    /// `Policy` resource dirty when it changes.
    pub(crate) fn set_implicit(
        &mut self,
        target: PolicyTarget,
        settings: Option<Arc<PolicySettings>>,
        dirty: &mut DirtyResources,
    ) {
        let changed = match settings {
            Some(s) => self.implicit.insert(target.clone(), s.clone()).as_deref() != Some(&*s),
            None => self.implicit.remove(&target).is_some(),
        };
        if changed {
            dirty.insert(ResourceKey::policy(target));
        }
    }

    /// Sets (or, with `None`, removes) the upstream TLS of a Service target, marking its
    /// `Policy` resource dirty when it changes.
    pub(crate) fn set_backend_tls(
        &mut self,
        target: PolicyTarget,
        tls: Option<Arc<weir_model::BackendTls>>,
        dirty: &mut DirtyResources,
    ) {
        let changed = match tls {
            Some(t) => {
                self.backend_tls
                    .insert(target.clone(), t.clone())
                    .as_deref()
                    != Some(&*t)
            }
            None => self.backend_tls.remove(&target).is_some(),
        };
        if changed {
            dirty.insert(ResourceKey::policy(target));
        }
    }

    /// Sets (or, with `None`, removes) the backend client certificate of a Gateway
    /// target, marking its `Policy` resource dirty when it changes.
    pub(crate) fn set_client_certificate(
        &mut self,
        target: PolicyTarget,
        cert: Option<Arc<weir_model::Certificate>>,
        dirty: &mut DirtyResources,
    ) {
        let changed = match cert {
            Some(c) => self
                .client_certs
                .insert(target.clone(), c.clone())
                .is_none_or(|old| old.hash() != c.hash()),
            None => self.client_certs.remove(&target).is_some(),
        };
        if changed {
            dirty.insert(ResourceKey::policy(target));
        }
    }

    /// The `Policy` resource of `target`: its implicit policy and every valid policy on it
    /// merged field by field (the implicit one, then the oldest, sets each field); `None`
    /// when nothing is attached or nothing is set.
    pub(crate) fn resource(&self, target: &PolicyTarget) -> Option<Policy> {
        // An object's own policy (Ingress annotations, a rule's sessionPersistence) first,
        // then the policies attached to it.
        let implicit = self.implicit.get(target);
        let attached = self
            .by_model
            .get(target)
            .and_then(|t| self.attached.get(t))
            .into_iter()
            .flat_map(|a| a.iter().map(|(_, s)| s));
        let merged = merged(target, implicit.into_iter().chain(attached));
        let empty = || Policy::new(target.clone(), Timeouts::default(), None, None);
        let merged = match self.backend_tls.get(target) {
            None => merged,
            Some(tls) => Some(
                merged
                    .unwrap_or_else(empty)
                    .with_backend_tls(Some(tls.clone())),
            ),
        };
        match self.client_certs.get(target) {
            None => merged,
            Some(cert) => Some(
                merged
                    .unwrap_or_else(empty)
                    .with_client_certificate(Some(cert.clone())),
            ),
        }
    }

    /// The status of policy `key`: one ancestor entry per target (the target itself).
    pub(crate) fn status(
        &self,
        key: &ObjectKey,
        controller: &str,
        generation: Option<i64>,
    ) -> Option<ObjectStatus> {
        let e = self.policies.get(key)?;
        let ancestors = e
            .targets
            .iter()
            .map(|t| {
                let (ok, reason, message) = self.accepted(e, t);
                PolicyAncestorStatus {
                    ancestor_ref: ParentReference {
                        group: Some(t.group.to_string().into()),
                        kind: Some(t.kind_name.to_string().into()),
                        namespace: Some(t.namespace.to_string().into()),
                        name: t.name.clone(),
                        section_name: t.section.as_deref().map(Into::into),
                        port: None,
                    },
                    controller_name: controller.to_owned(),
                    conditions: vec![Condition::new(
                        ConditionType::Accepted,
                        ok,
                        reason,
                        message,
                        generation,
                    )],
                }
            })
            .collect();
        Some(ObjectStatus::Policy(PolicyStatus { ancestors }))
    }

    /// The `Accepted` condition of policy `e` for target `t`.
    fn accepted(&self, e: &Entry, t: &TargetRef) -> (bool, Reason, String) {
        let settings = match &e.settings {
            Ok(s) => s,
            Err(why) => return (false, Reason::Invalid, why.clone()),
        };
        match (t.kind, &t.section) {
            (None, _) => {
                return (
                    false,
                    Reason::Invalid,
                    format!(
                        "{}{}{}: TrafficPolicies attach to a Gateway or a ListenerSet (and one of its listeners by sectionName), an HTTPRoute or a GRPCRoute (and one of its rules by sectionName), a Service or a weir.dev Backend",
                        t.kind_name,
                        if t.group.is_empty() { "" } else { "." },
                        t.group
                    ),
                );
            }
            (Some(Kind::Service | Kind::Backend), Some(_)) => {
                return (
                    false,
                    Reason::Invalid,
                    format!(
                        "sectionName on a {} is not supported; target the {} (every port)",
                        t.kind_name, t.kind_name
                    ),
                );
            }
            _ => {}
        }
        if let Err(why) = settings.fits(t) {
            return (false, Reason::Invalid, why);
        }
        if let Some(protocol) = self.not_http.get(t) {
            return (
                false,
                Reason::Invalid,
                format!(
                    "{} {}/{} listener {:?} is a {protocol} listener: a TrafficPolicy acts on HTTP and HTTPS listeners (and on the routes, Services and Backends behind them)",
                    t.kind_name,
                    t.namespace,
                    t.name,
                    t.section.as_deref().unwrap_or_default()
                ),
            );
        }
        if !self.resolved.contains_key(t) {
            let part = if t
                .kind
                .is_some_and(|k| k == Kind::Gateway || k.is_listener_set())
            {
                "listener"
            } else {
                "rule"
            };
            let what = match &t.section {
                Some(s) => format!("{} {}/{} {part} {s:?}", t.kind_name, t.namespace, t.name),
                None => format!("{} {}/{}", t.kind_name, t.namespace, t.name),
            };
            let what = if t.kind.is_some_and(Kind::is_listener_set) {
                format!("{what}, or its parent Gateway,")
            } else {
                what
            };
            return (false, Reason::TargetNotFound, format!("{what} not found"));
        }
        // Fields an older policy on the same target already sets.
        let mut lost: Vec<(&'static str, &ObjectKey)> = Vec::new();
        let mut kept = 0;
        for f in Field::ALL {
            if !settings.sets(f) {
                continue;
            }
            let first = self
                .attached
                .get(t)
                .and_then(|m| m.iter().find(|(_, s)| s.sets(f)).map(|(o, _)| &o.1));
            match first {
                Some(k) if *k != e.owner.1 => lost.push((f.name(), k)),
                _ => kept += 1,
            }
        }
        let describe = |lost: &[(&str, &ObjectKey)]| {
            lost.iter()
                .map(|(f, k)| format!("{f} (set by {}/{})", k.namespace, k.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if kept > 0 && !e.unresolved.is_empty() {
            (false, Reason::Invalid, e.unresolved.join("; "))
        } else if kept == 0 {
            (
                false,
                Reason::Conflicted,
                format!(
                    "every field is set by an older policy on the same target: {}",
                    describe(&lost)
                ),
            )
        } else {
            let mut m = String::from("Accepted");
            if !lost.is_empty() {
                m += &format!(
                    "; overridden by older policies on the same target: {}",
                    describe(&lost)
                );
            }
            for w in &e.warnings {
                m += "; ";
                m += w;
            }
            (true, Reason::Accepted, m)
        }
    }
}

/// Policies on one target merged field by field, in the order given (the first that
/// sets a field sets it); `None` when nothing is set.
fn merged<'a>(
    target: &PolicyTarget,
    settings: impl Iterator<Item = &'a Arc<PolicySettings>>,
) -> Option<Policy> {
    let mut timeouts = Timeouts::default();
    let (mut retry, mut rate_limit) = (None, None);
    let (mut api_key_auth, mut basic_auth, mut ip_rules, mut jwt_auth) = (None, None, None, None);
    let (mut health_check, mut circuit_breaker) = (None, None);
    let (mut ext_auth, mut load_balancer, mut global_rate_limit) = (None, None, None);
    let (mut authorization, mut cors, mut request_limits) = (None, None, None);
    let (mut concurrency_limit, mut outlier_detection) = (None, None);
    let (mut access_log, mut tracing) = (None, None);
    for s in settings {
        if timeouts.request.is_none() {
            timeouts.request = s.timeouts.request;
        }
        if timeouts.backend_request.is_none() {
            timeouts.backend_request = s.timeouts.backend_request;
        }
        if timeouts.backend_send.is_none() {
            timeouts.backend_send = s.timeouts.backend_send;
        }
        if retry.is_none() {
            retry = s.retry.clone();
        }
        if rate_limit.is_none() {
            rate_limit = s.rate_limit.clone().map(|l| (s.name.clone(), l));
        }
        if api_key_auth.is_none() {
            api_key_auth = s.api_key_auth.clone().map(|a| (s.name.clone(), a));
        }
        if basic_auth.is_none() {
            basic_auth = s.basic_auth.clone().map(|b| (s.name.clone(), b));
        }
        if ip_rules.is_none() {
            ip_rules = s.ip_rules.clone().map(|r| (s.name.clone(), r));
        }
        if jwt_auth.is_none() {
            jwt_auth = s.jwt_auth.clone().map(|j| (s.name.clone(), j));
        }
        if health_check.is_none() {
            health_check = s.health_check.clone();
        }
        if circuit_breaker.is_none() {
            circuit_breaker = s.circuit_breaker;
        }
        if ext_auth.is_none() {
            ext_auth = s.ext_auth.clone().map(|e| (s.name.clone(), e));
        }
        if load_balancer.is_none() {
            load_balancer = s.load_balancer.clone();
        }
        if global_rate_limit.is_none() {
            global_rate_limit = s.global_rate_limit.clone().map(|g| (s.name.clone(), g));
        }
        if authorization.is_none() {
            authorization = s.authorization.clone().map(|a| (s.name.clone(), a));
        }
        if cors.is_none() {
            cors = s.cors.clone().map(|c| (s.name.clone(), c));
        }
        if request_limits.is_none() {
            request_limits = s.request_limits.clone().map(|l| (s.name.clone(), l));
        }
        if concurrency_limit.is_none() {
            concurrency_limit = s.concurrency_limit.map(|l| (s.name.clone(), l));
        }
        if outlier_detection.is_none() {
            outlier_detection = s.outlier_detection;
        }
        if access_log.is_none() {
            access_log = s.access_log.map(|l| (s.name.clone(), l));
        }
        if tracing.is_none() {
            tracing = s.tracing.map(|t| (s.name.clone(), t));
        }
    }
    let p = Policy::new(target.clone(), timeouts, retry, rate_limit)
        .with_api_key_auth(api_key_auth)
        .with_basic_auth(basic_auth)
        .with_ip_rules(ip_rules)
        .with_jwt_auth(jwt_auth)
        .with_health_check(health_check)
        .with_circuit_breaker(circuit_breaker)
        .with_ext_auth(ext_auth)
        .with_load_balancer(load_balancer)
        .with_global_rate_limit(global_rate_limit)
        .with_authorization(authorization)
        .with_cors(cors)
        .with_request_limits(request_limits)
        .with_concurrency_limit(concurrency_limit)
        .with_outlier_detection(outlier_detection)
        .with_access_log(access_log)
        .with_tracing(tracing);
    (!p.is_empty()).then_some(p)
}

/// The object a targetRef names (its section aside).
fn object_of(t: &TargetRef) -> ObjectKey {
    // Unsupported kinds are keyed by a kind that never changes their resolution.
    let kind = t.kind.unwrap_or(Kind::TrafficPolicy);
    ObjectKey::from_parts(kind, t.namespace.clone(), t.name.clone())
}

/// What `t` names in the IR, if its object (and section) exists.
/// The protocol of the listener `t` names (by `sectionName`, on a Gateway or a
/// ListenerSet) when that listener carries no HTTP: `TCP`, `UDP`, `TLS`
/// (`TLS (Passthrough)`). `None` for any other target, or a listener not found.
fn not_http_listener(t: &TargetRef, store: &Store) -> Option<String> {
    t.kind?;
    let section = t.section.as_deref()?;
    let obj = store.get(&object_of(t))?;
    let listeners = match &**obj {
        Object::Gateway(g) => &g.spec.listeners,
        o => &o.as_listener_set()?.1.listeners,
    };
    let l = listeners.iter().find(|l| l.name == section)?;
    if matches!(l.protocol.as_str(), "HTTP" | "HTTPS") {
        return None;
    }
    let passthrough = l
        .tls
        .as_ref()
        .and_then(|tls| tls.mode.as_deref())
        .is_some_and(|m| m == "Passthrough");
    Some(if passthrough {
        format!("{} (Passthrough)", l.protocol)
    } else {
        l.protocol.clone()
    })
}

fn resolve(t: &TargetRef, store: &Store) -> Option<PolicyTarget> {
    t.kind?;
    let obj = store.get(&object_of(t))?;
    // A route: its kind in the IR and its rules' names (a rule is targeted by name).
    let (kind, names): (RouteKind, Vec<Option<&str>>) = match &**obj {
        Object::Gateway(_) if t.section.is_none() => {
            return Some(PolicyTarget::Gateway(
                format!("{}/{}", t.namespace, t.name).into(),
            ));
        }
        // One listener of the Gateway, by name.
        Object::Gateway(g) => {
            let section = t.section.clone()?;
            g.spec
                .listeners
                .iter()
                .any(|l| *l.name == *section)
                .then_some(())?;
            return Some(PolicyTarget::Listener {
                gateway: format!("{}/{}", t.namespace, t.name).into(),
                set: None,
                section,
            });
        }
        // A ListenerSet (or one of its listeners) whose parent Gateway exists.
        o if o.as_listener_set().is_some() => {
            let (_, spec) = o.as_listener_set()?;
            let parent = spec.parent(&t.namespace);
            store.gateway(&parent)?;
            let gateway: Arc<str> = format!("{}/{}", parent.namespace, parent.name).into();
            let set: Arc<str> = format!("{}/{}", t.namespace, t.name).into();
            return match &t.section {
                None => Some(PolicyTarget::ListenerSet { gateway, set }),
                Some(section) => {
                    spec.listeners
                        .iter()
                        .any(|l| *l.name == **section)
                        .then_some(())?;
                    Some(PolicyTarget::Listener {
                        gateway,
                        set: Some(set),
                        section: section.clone(),
                    })
                }
            };
        }
        Object::HttpRoute(r) => (
            RouteKind::HttpRoute,
            r.spec.rules.iter().map(|x| x.name.as_deref()).collect(),
        ),
        Object::GrpcRoute(r) => (
            RouteKind::GrpcRoute,
            r.spec.rules.iter().map(|x| x.name.as_deref()).collect(),
        ),
        // Every cluster of the Service or Backend (its ports and protocols); the data
        // plane derives the target from a cluster's key.
        Object::Service(_) | Object::Backend(_) if t.section.is_none() => {
            let kind = if matches!(&**obj, Object::Service(_)) {
                BackendKind::Service
            } else {
                BackendKind::Backend
            };
            return Some(PolicyTarget::Backend {
                kind,
                namespace: t.namespace.clone(),
                name: t.name.clone(),
            });
        }
        _ => return None,
    };
    match &t.section {
        None => Some(PolicyTarget::Route {
            kind,
            namespace: t.namespace.clone(),
            name: t.name.clone(),
        }),
        Some(section) => {
            let i = names.iter().position(|n| *n == Some(&**section))?;
            Some(PolicyTarget::Rule(RouteRef {
                kind,
                namespace: t.namespace.clone(),
                name: t.name.clone(),
                rule: u32::try_from(i).ok()?,
            }))
        }
    }
}
