use std::sync::Arc;

use serde::Serialize;

use crate::cluster::{Cluster, ClusterKey};
use crate::hash::ContentHash;
use crate::host::HostMatch;
use crate::l4::L4Route;
use crate::listener::{Listener, ListenerKey};
use crate::policy::{Policy, PolicyTarget};
use crate::route::{Action, Filter, VirtualHost};
use crate::tls::{Certificate, SniCert};

/// The address of one IR resource.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum ResourceKey {
    /// A listener socket.
    Listener(ListenerKey),
    /// A host's rules on a listener.
    VirtualHost(ListenerKey, HostMatch),
    /// A cluster.
    Cluster(ClusterKey),
    /// A certificate, by content.
    Certificate(ContentHash),
    /// An SNI table entry.
    Sni(ListenerKey, HostMatch),
    /// An L4 route: a passthrough SNI pattern (or a TCP or UDP socket's one entry) on a
    /// listener.
    L4Route(ListenerKey, HostMatch),
    /// The policies attached to one target. Boxed: a target is up to 56 bytes and every
    /// other key at most 24, and keys are held by the million (a batch's dirty keys and
    /// its deltas at the initial load). Build with [`ResourceKey::policy`].
    Policy(Box<PolicyTarget>),
}

// ---------------------------------------------------------------- relations
//
// The one place that knows which resource references which and in what order a data
// plane applies them. The translator's emitter orders batches with it, the push hub
// decides what a data plane must be sent with it, the snapshot and the tests check
// batches against it. A new resource kind adds its arms here (ARCHITECTURE.md, "adding a
// resource kind").

impl ResourceKey {
    /// The key of the policies attached to `target`.
    pub fn policy(target: PolicyTarget) -> Self {
        ResourceKey::Policy(Box::new(target))
    }

    /// The listener this resource belongs to: its own key for a listener, the listener a
    /// virtual host or SNI entry hangs under; `None` for resources shared by every
    /// listener (clusters, certificates). A split data plane receives the resources of
    /// its Gateway's listeners and what they reference.
    pub fn listener(&self) -> Option<ListenerKey> {
        match self {
            ResourceKey::Listener(l)
            | ResourceKey::VirtualHost(l, _)
            | ResourceKey::Sni(l, _)
            | ResourceKey::L4Route(l, _) => Some(*l),
            ResourceKey::Cluster(_) | ResourceKey::Certificate(_) | ResourceKey::Policy(_) => None,
        }
    }

    /// The Gateway (`namespace/name`, as in [`Listener::gateway`]) a resource that hangs
    /// under no single listener belongs to: a Gateway-wide policy, which applies to every
    /// listener of its Gateway, or a listener or ListenerSet policy, which applies to
    /// listeners of that Gateway. A split data plane receives its Gateway's. `None` for
    /// everything else (under a listener, or shared and sent while referenced).
    pub fn gateway(&self) -> Option<&Arc<str>> {
        match self {
            ResourceKey::Policy(t) => match &**t {
                PolicyTarget::Gateway(g)
                | PolicyTarget::Listener { gateway: g, .. }
                | PolicyTarget::ListenerSet { gateway: g, .. } => Some(g),
                _ => None,
            },
            _ => None,
        }
    }

    /// Position of this change in a batch that a data plane can apply in order without a
    /// dangling reference: upserts of what is referenced (listeners, certificates,
    /// clusters) before upserts of what references them; removals in the reverse order.
    pub fn apply_rank(&self, upsert: bool) -> u8 {
        match (self, upsert) {
            (ResourceKey::Listener(_), true) => 0,
            (ResourceKey::Certificate(_), true) => 1,
            (ResourceKey::Cluster(_) | ResourceKey::Policy(_), true) => 2,
            (ResourceKey::VirtualHost(..), true) => 3,
            (ResourceKey::Sni(..) | ResourceKey::L4Route(..), true) => 4,
            (ResourceKey::VirtualHost(..) | ResourceKey::L4Route(..), false) => 5,
            (ResourceKey::Sni(..), false) => 6,
            (ResourceKey::Certificate(_), false) => 7,
            (ResourceKey::Cluster(_) | ResourceKey::Policy(_), false) => 8,
            (ResourceKey::Listener(_), false) => 9,
        }
    }
}

impl Delta {
    /// The key of the resource this delta changes.
    pub fn key(&self) -> ResourceKey {
        match self {
            Delta::Upsert(r) => r.key(),
            Delta::Remove(k) => k.clone(),
        }
    }

    /// See [`ResourceKey::apply_rank`].
    pub fn apply_rank(&self) -> u8 {
        match self {
            Delta::Upsert(r) => r.key().apply_rank(true),
            Delta::Remove(k) => k.apply_rank(false),
        }
    }
}

/// How strongly a resource depends on another it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference {
    /// Must be present when the referrer is applied (a data plane refuses the referrer
    /// otherwise): a virtual host's or SNI entry's listener, an SNI entry's certificate.
    Required,
    /// Looked up when used; missing is a runtime answer (a rule whose cluster is absent
    /// answers 500; a rule without policies has none), not an invalid configuration: a
    /// rule's clusters, the policies of its route and of itself.
    Used,
}

/// One IR resource, shared by `Arc` between the translator's state, batches and
/// data-plane snapshots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Resource {
    /// See [`Listener`].
    Listener(Arc<Listener>),
    /// See [`VirtualHost`].
    VirtualHost(Arc<VirtualHost>),
    /// See [`Cluster`].
    Cluster(Arc<Cluster>),
    /// See [`Certificate`].
    Certificate(Arc<Certificate>),
    /// See [`SniCert`].
    Sni(Arc<SniCert>),
    /// See [`L4Route`].
    L4Route(Arc<L4Route>),
    /// See [`Policy`].
    Policy(Arc<Policy>),
}

/// Adds, for each cluster in `keys`, the policy of the Service or Backend it is built
/// from (health checks, circuit breaking): whoever uses a cluster looks that policy up.
fn with_backend_policies(keys: &mut Vec<ResourceKey>) {
    let targets: Vec<ResourceKey> = keys
        .iter()
        .filter_map(|k| match k {
            ResourceKey::Cluster(c) => c.backend_target().map(ResourceKey::policy),
            _ => None,
        })
        .collect();
    keys.extend(targets);
}

impl Resource {
    /// This resource's key.
    pub fn key(&self) -> ResourceKey {
        match self {
            Resource::Listener(l) => ResourceKey::Listener(l.key),
            Resource::VirtualHost(v) => ResourceKey::VirtualHost(v.listener, v.host.clone()),
            Resource::Cluster(c) => ResourceKey::Cluster(c.key.clone()),
            Resource::Certificate(c) => ResourceKey::Certificate(c.hash()),
            Resource::Sni(s) => ResourceKey::Sni(s.listener, s.host.clone()),
            Resource::L4Route(r) => ResourceKey::L4Route(r.listener, r.host.clone()),
            Resource::Policy(p) => ResourceKey::policy(p.target.clone()),
        }
    }

    /// The resources that must be present when this one is applied (the
    /// [`Reference::Required`] part of [`Resource::references`], without allocating).
    pub fn required(&self) -> impl Iterator<Item = ResourceKey> + use<> {
        let (a, b) = match self {
            Resource::Listener(_)
            | Resource::Cluster(_)
            | Resource::Certificate(_)
            | Resource::Policy(_) => (None, None),
            Resource::VirtualHost(v) => (Some(ResourceKey::Listener(v.listener)), None),
            Resource::L4Route(r) => (Some(ResourceKey::Listener(r.listener)), None),
            Resource::Sni(s) => (
                Some(ResourceKey::Listener(s.listener)),
                Some(ResourceKey::Certificate(s.cert)),
            ),
        };
        a.into_iter().chain(b)
    }

    /// Every other resource this one names, each once, with how strongly. A data plane
    /// that holds this resource must hold these too (the push hub sends them with it).
    pub fn references(&self) -> Vec<(ResourceKey, Reference)> {
        match self {
            Resource::Listener(_)
            | Resource::Cluster(_)
            | Resource::Certificate(_)
            | Resource::Policy(_) => Vec::new(),
            Resource::VirtualHost(v) => {
                let mut used: Vec<ResourceKey> = Vec::new();
                // The policies a request of each rule looks up (Gateway-wide ones are
                // sent by ownership, see `ResourceKey::gateway`).
                for rule in &v.rules {
                    used.push(ResourceKey::policy(PolicyTarget::route_of(&rule.route)));
                    used.push(ResourceKey::policy(PolicyTarget::Rule(rule.route.clone())));
                }
                // Backends, and the used mirror filters copy requests to (on the rule
                // or on a backend).
                let mirrors = |filters: &[Filter], out: &mut Vec<ResourceKey>| {
                    for f in filters {
                        match f {
                            Filter::Mirror { cluster, .. } => {
                                out.push(ResourceKey::Cluster(cluster.clone()));
                            }
                            Filter::InterceptErrors(e) => {
                                out.push(ResourceKey::Cluster(e.cluster.clone()));
                            }
                            _ => {}
                        }
                    }
                };
                for rule in &v.rules {
                    mirrors(&rule.filters, &mut used);
                    if let Action::Forward(backends) = &rule.action {
                        for b in backends {
                            used.push(ResourceKey::Cluster(b.cluster.clone()));
                            mirrors(&b.filters, &mut used);
                        }
                    }
                }
                with_backend_policies(&mut used);
                used.sort();
                used.dedup();
                let mut out = vec![(ResourceKey::Listener(v.listener), Reference::Required)];
                out.extend(used.into_iter().map(|k| (k, Reference::Used)));
                out
            }
            Resource::Sni(s) => vec![
                (ResourceKey::Listener(s.listener), Reference::Required),
                (ResourceKey::Certificate(s.cert), Reference::Required),
            ],
            Resource::L4Route(r) => {
                let mut clusters: Vec<ResourceKey> = r
                    .backends
                    .iter()
                    .map(|b| ResourceKey::Cluster(b.cluster.clone()))
                    .collect();
                with_backend_policies(&mut clusters);
                clusters.sort();
                clusters.dedup();
                let mut out = vec![(ResourceKey::Listener(r.listener), Reference::Required)];
                out.extend(clusters.into_iter().map(|k| (k, Reference::Used)));
                out
            }
        }
    }

    /// This resource's content hash (its version).
    pub fn hash(&self) -> ContentHash {
        match self {
            Resource::Listener(l) => l.hash(),
            Resource::VirtualHost(v) => v.hash(),
            Resource::Cluster(c) => c.hash(),
            Resource::Certificate(c) => c.hash(),
            Resource::Sni(s) => s.hash(),
            Resource::L4Route(r) => r.hash(),
            Resource::Policy(p) => p.hash(),
        }
    }
}

/// A change to one resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Delta {
    /// Add or replace the resource with this key.
    Upsert(Resource),
    /// Remove the resource with this key (a no-op if absent).
    Remove(ResourceKey),
}

/// Deltas a data plane applies together, publishing one new snapshot for all of them.
/// Within a batch, deltas are in [`Delta::apply_rank`] order: everything a resource
/// requires ([`Resource::references`]) is upserted before it and removed after it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeltaBatch {
    /// The changes, in the order they were produced.
    pub deltas: Vec<Delta>,
}

impl DeltaBatch {
    /// Whether the batch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.deltas.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Cluster, Endpoint, EndpointAddr, L4Backend, PathMatch, Protocol, RequestMatch, RouteKind,
        RouteRef, RouteRule, Timeouts, UpstreamProtocol, WeightedBackend,
    };

    fn key(port: u16) -> ListenerKey {
        ListenerKey::new(([127, 0, 0, 1], port).into())
    }

    /// Keys and deltas are held by the million at the initial load (a batch's dirty keys
    /// and deltas): a policy target (56 bytes) is boxed so that neither is larger than a
    /// (listener, host) pair.
    #[test]
    fn keys_and_deltas_are_24_bytes() {
        assert_eq!(size_of::<ResourceKey>(), 24);
        assert_eq!(size_of::<Delta>(), 24);
        let t = PolicyTarget::Gateway("ns/gw".into());
        assert_eq!(
            ResourceKey::policy(t.clone()),
            ResourceKey::Policy(Box::new(t))
        );
    }

    #[test]
    fn virtual_host_references_its_listener_clusters_and_policies_once() {
        let rule = |cluster: &str| {
            Arc::new(RouteRule::new(
                RouteRef {
                    kind: RouteKind::HttpRoute,
                    namespace: "ns".into(),
                    name: "r".into(),
                    rule: 0,
                },
                RequestMatch {
                    path: PathMatch::Prefix("/".into()),
                    headers: vec![],
                    query: vec![],
                    method: None,
                },
                vec![],
                Action::Forward(vec![WeightedBackend {
                    cluster: ClusterKey(cluster.into()),
                    weight: 1,
                    filters: vec![],
                }]),
                Timeouts::default(),
            ))
        };
        let v = Resource::VirtualHost(Arc::new(VirtualHost::new(
            key(80),
            HostMatch::ANY,
            vec![rule("b"), rule("a"), rule("b")],
        )));
        assert_eq!(
            v.references(),
            vec![
                (ResourceKey::Listener(key(80)), Reference::Required),
                (
                    ResourceKey::Cluster(ClusterKey("a".into())),
                    Reference::Used
                ),
                (
                    ResourceKey::Cluster(ClusterKey("b".into())),
                    Reference::Used
                ),
                (
                    ResourceKey::policy(PolicyTarget::Route {
                        kind: RouteKind::HttpRoute,
                        namespace: "ns".into(),
                        name: "r".into(),
                    }),
                    Reference::Used
                ),
                (
                    ResourceKey::policy(PolicyTarget::Rule(RouteRef {
                        kind: RouteKind::HttpRoute,
                        namespace: "ns".into(),
                        name: "r".into(),
                        rule: 0,
                    })),
                    Reference::Used
                ),
            ]
        );
        assert_eq!(v.key().listener(), Some(key(80)));
        assert_eq!(v.key().gateway(), None);
    }

    /// The cluster an InterceptErrors filter sends error requests to is used by the
    /// virtual host (split mode sends it with the route).
    #[test]
    fn virtual_host_uses_the_error_cluster_of_its_rules() {
        let filter = Filter::InterceptErrors(Arc::new(crate::InterceptErrors {
            codes: vec![503],
            no_endpoints: true,
            cluster: ClusterKey("errors".into()),
        }));
        let rule = Arc::new(RouteRule::new(
            RouteRef {
                kind: RouteKind::Ingress,
                namespace: "ns".into(),
                name: "i".into(),
                rule: 0,
            },
            RequestMatch {
                path: PathMatch::Prefix("/".into()),
                headers: vec![],
                query: vec![],
                method: None,
            },
            vec![filter],
            Action::Forward(vec![WeightedBackend {
                cluster: ClusterKey("app".into()),
                weight: 1,
                filters: vec![],
            }]),
            Timeouts::default(),
        ));
        let v = Resource::VirtualHost(Arc::new(VirtualHost::new(
            key(80),
            HostMatch::ANY,
            vec![rule],
        )));
        let clusters: Vec<_> = v
            .references()
            .into_iter()
            .filter(|(k, _)| matches!(k, ResourceKey::Cluster(_)))
            .collect();
        assert_eq!(
            clusters,
            vec![
                (
                    ResourceKey::Cluster(ClusterKey("app".into())),
                    Reference::Used
                ),
                (
                    ResourceKey::Cluster(ClusterKey("errors".into())),
                    Reference::Used
                ),
            ]
        );
    }

    /// Whatever a resource requires comes earlier in a batch when upserted and later
    /// when removed, for every pair of kinds.
    #[test]
    fn apply_rank_puts_required_resources_first() {
        let cluster = Resource::Cluster(Arc::new(Cluster::new(
            ClusterKey("c".into()),
            vec![Endpoint {
                addr: EndpointAddr::Socket(([127, 0, 0, 1], 1).into()),
                weight: 1,
            }],
            UpstreamProtocol::Http1,
        )));
        let listener = Resource::Listener(Arc::new(Listener::new(
            key(443),
            Protocol::Https,
            "ns/gw".into(),
            "https".into(),
        )));
        let cert = Certificate::new(Arc::from(&b"cert"[..]), Arc::from(&b"key"[..]));
        let sni = Resource::Sni(Arc::new(SniCert::new(
            key(443),
            HostMatch::ANY,
            cert.hash(),
        )));
        let vhost =
            Resource::VirtualHost(Arc::new(VirtualHost::new(key(443), HostMatch::ANY, vec![])));
        let l4 = Resource::L4Route(Arc::new(L4Route::new(
            key(443),
            HostMatch::parse(Some("*.example.com")).unwrap(),
            RouteRef {
                kind: RouteKind::TlsRoute,
                namespace: "ns".into(),
                name: "t".into(),
                rule: 0,
            },
            vec![L4Backend {
                cluster: ClusterKey("c".into()),
                weight: 1,
            }],
        )));
        assert_eq!(
            l4.references(),
            vec![
                (ResourceKey::Listener(key(443)), Reference::Required),
                (
                    ResourceKey::Cluster(ClusterKey("c".into())),
                    Reference::Used
                ),
            ]
        );
        assert_eq!(l4.key().listener(), Some(key(443)));
        let policy = Resource::Policy(Arc::new(Policy::new(
            PolicyTarget::Gateway("ns/gw".into()),
            Timeouts {
                request: Some(std::time::Duration::from_secs(1)),
                backend_request: None,
                backend_send: None,
            },
            None,
            None,
        )));
        assert_eq!(policy.key().listener(), None);
        assert_eq!(policy.key().gateway().map(|g| &**g), Some("ns/gw"));
        assert!(policy.references().is_empty());
        for r in [&cluster, &listener, &sni, &vhost, &l4, &policy] {
            let required: Vec<_> = r
                .references()
                .into_iter()
                .filter(|(_, how)| *how == Reference::Required)
                .map(|(k, _)| k)
                .collect();
            assert_eq!(required, r.required().collect::<Vec<_>>());
            for (dep, how) in r.references() {
                if how == Reference::Required {
                    assert!(dep.apply_rank(true) < r.key().apply_rank(true), "{dep:?}");
                    assert!(dep.apply_rank(false) > r.key().apply_rank(false), "{dep:?}");
                }
            }
        }
        assert!(
            ResourceKey::Certificate(cert.hash()).apply_rank(true) < sni.key().apply_rank(true)
        );
    }
}
