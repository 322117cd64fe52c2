//! Choosing an endpoint of a cluster.
//!
//! The default balancer prefers healthy, idle endpoints without any policy: it takes the
//! next endpoint of a smooth weighted round-robin cycle and one more at random from the
//! same cycle (so both follow the weights), skips either if outlier detection has ejected
//! it, and of two healthy ones takes the one with fewer requests in flight (the "power of
//! two choices": a slow or stuck endpoint gathers in-flight requests and so gets fewer new
//! ones). With nothing in flight it is exact weighted round robin. An endpoint that
//! failed its active health checks ([`crate::health`]) is skipped like an ejected one.
//! If every endpoint is ejected or unhealthy it ignores both (a panic threshold of 0:
//! better a chance than a certain 503; the same rule as passive outlier detection).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use weir_model::{Cluster, Endpoint, Policy};

use crate::breaker::{self, Overflow};
use crate::endpoints::{ConnectGate, EndpointRegistry, EndpointState};
use crate::health::Prober;
use crate::router;

/// Longest weighted round-robin cycle kept per cluster; larger weight sums are scaled.
const MAX_SCHEDULE: u64 = 10_000;

/// A cluster plus its load-balancing state: the round-robin cycle of this version of the
/// cluster, and the endpoints' states, which outlive it (see [`crate::endpoints`]).
pub struct ClusterState {
    /// The IR cluster.
    pub cluster: Arc<Cluster>,
    /// Endpoint indexes over one smooth weighted round-robin cycle.
    schedule: Box<[u32]>,
    cursor: AtomicUsize,
    /// One per endpoint of `cluster`, in its order.
    states: Box<[Arc<EndpointState>]>,
    /// One per endpoint when its Service or Backend has an active health check; empty
    /// otherwise (the common case costs one length check per pick).
    probers: Box<[Arc<Prober>]>,
    /// The policy of the cluster's Service or Backend ([`PolicyTarget::Backend`]), whose
    /// backend-level fields (health check, circuit breaker) this state applies.
    policy: Option<Arc<Policy>>,
}

impl std::fmt::Debug for ClusterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterState")
            .field("cluster", &self.cluster.key)
            .field("endpoints", &self.cluster.endpoints.len())
            .field("cycle", &self.schedule.len())
            .finish()
    }
}

/// Why [`ClusterState::admit`] found no endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The cluster has no endpoint of weight above 0.
    NoEndpoints,
    /// A circuit breaker's limit.
    Overflow(Overflow),
}

impl From<Refused> for crate::error::ProxyError {
    fn from(r: Refused) -> Self {
        match r {
            Refused::NoEndpoints => crate::error::ProxyError::NoEndpoints,
            Refused::Overflow(why) => crate::error::ProxyError::Overloaded(why),
        }
    }
}

/// An endpoint chosen for one request.
pub(crate) struct Picked<'a> {
    /// The endpoint.
    pub(crate) endpoint: &'a Endpoint,
    /// Its state, for the in-flight count and the outcome.
    pub(crate) state: &'a Arc<EndpointState>,
}

impl ClusterState {
    /// Precomputes the round-robin cycle and finds the endpoints' states in `registry`.
    /// Endpoints of weight 0 are never picked.
    #[cfg(test)]
    pub(crate) fn new(cluster: Arc<Cluster>, registry: &EndpointRegistry) -> Self {
        ClusterState::with_policy(cluster, registry, None)
    }

    /// As [`ClusterState::new`], applying `policy`, the policy of the cluster's Service
    /// or Backend: one prober per endpoint for its health check (shared with every other
    /// cluster probing the same address with the same settings).
    pub(crate) fn with_policy(
        cluster: Arc<Cluster>,
        registry: &EndpointRegistry,
        policy: Option<Arc<Policy>>,
    ) -> Self {
        let weights: Vec<u32> = cluster.endpoints.iter().map(|e| e.weight).collect();
        let schedule = router::wrr_schedule(&weights, MAX_SCHEDULE).into_boxed_slice();
        // Start where the content hash says, so that a change to a busy cluster does not
        // send the next burst of requests to its first endpoint.
        let start = if schedule.is_empty() {
            0
        } else {
            (cluster.hash().0 % schedule.len() as u64) as usize
        };
        let (_, states) = registry.cluster(
            &cluster.key,
            cluster.endpoints.iter().map(|e| e.addr.clone()),
        );
        let probers = match policy.as_ref().and_then(|p| p.health_check.as_ref()) {
            Some(check) => cluster
                .endpoints
                .iter()
                .zip(&states)
                .map(|(e, state)| {
                    let p = registry.probers().prober(&e.addr, check);
                    p.watch(state);
                    p
                })
                .collect(),
            None => Box::default(),
        };
        ClusterState {
            cluster,
            schedule,
            cursor: AtomicUsize::new(start),
            states: states.into_boxed_slice(),
            probers,
            policy,
        }
    }

    /// The policy of the cluster's Service or Backend this state applies.
    pub(crate) fn policy(&self) -> Option<&Arc<Policy>> {
        self.policy.as_ref()
    }

    /// Whether endpoint `i` should get no new requests: ejected by outlier detection or
    /// failing its health checks.
    fn unavailable(&self, i: usize, now: Instant) -> bool {
        self.states[i].is_ejected(now) || self.probers.get(i).is_some_and(|p| p.is_unhealthy())
    }

    /// The endpoints' probers, in the cluster's order (empty without a health check).
    pub(crate) fn probers(&self) -> &[Arc<Prober>] {
        &self.probers
    }

    /// The endpoint for the next request (see the module docs); `None` when the cluster
    /// has no endpoints of weight above 0.
    pub(crate) fn pick(&self, now: Instant) -> Option<Picked<'_>> {
        let len = self.schedule.len();
        if len == 0 {
            return None;
        }
        let n = self.cursor.fetch_add(1, Ordering::Relaxed);
        let a = self.schedule[n % len] as usize;
        if self.states.len() == 1 {
            return self.picked(a);
        }
        let other = (router::next_random() % (len as u64 - 1).max(1)) as usize;
        let b = self.schedule[(n + 1 + other) % len] as usize;
        let (sa, sb) = (&self.states[a], &self.states[b]);
        let chosen = match (self.unavailable(a, now), self.unavailable(b, now)) {
            (false, false) => {
                if sb.in_flight() < sa.in_flight() {
                    b
                } else {
                    a
                }
            }
            (false, true) => a,
            (true, false) => b,
            (true, true) => self.first_healthy(a, now).unwrap_or(a),
        };
        self.picked(chosen)
    }

    /// The endpoint for the next request within the circuit breaker of the cluster's
    /// Service or Backend ([`crate::breaker`]): [`ClusterState::pick`], passed over for
    /// another endpoint when it is at its own limit; `Err` when the cluster is at its
    /// limit or every endpoint is (counted), or it has no endpoints. Without a breaker,
    /// one branch more than `pick`.
    pub(crate) fn admit(&self, now: Instant) -> Result<Picked<'_>, Refused> {
        let picked = self.pick(now).ok_or(Refused::NoEndpoints)?;
        let Some(b) = self
            .policy
            .as_ref()
            .and_then(|p| p.circuit_breaker.as_ref())
        else {
            return Ok(picked);
        };
        let protocol = self.cluster.protocol;
        let health = picked.state.cluster_health();
        if let Err(why) = breaker::admit_cluster(b, protocol, health.in_flight()) {
            health.refused(why);
            return Err(Refused::Overflow(why));
        }
        let Err(why) = breaker::admit_endpoint(b, protocol, picked.state.in_flight()) else {
            return Ok(picked);
        };
        // Another endpoint with room, skipping unavailable ones first.
        let n = self.states.len();
        let fits = |i: usize| {
            self.cluster.endpoints[i].weight > 0
                && breaker::admit_endpoint(b, protocol, self.states[i].in_flight()).is_ok()
        };
        let start = self
            .cluster
            .endpoints
            .iter()
            .position(|e| std::ptr::eq(e, picked.endpoint))
            .unwrap_or(0);
        let other = (1..n)
            .map(|k| (start + k) % n)
            .find(|&i| fits(i) && !self.unavailable(i, now))
            .or_else(|| (1..n).map(|k| (start + k) % n).find(|&i| fits(i)));
        match other.and_then(|i| self.picked(i)) {
            Some(p) => Ok(p),
            None => {
                health.refused(why);
                Err(Refused::Overflow(why))
            }
        }
    }

    /// The pending-request limits to check if the pool must connect for a request to
    /// endpoint `state` (`None` without such limits).
    pub(crate) fn connect_gate(&self, state: &Arc<EndpointState>) -> Option<ConnectGate> {
        let b = self.policy.as_ref()?.circuit_breaker.as_ref()?;
        let (endpoint_max, cluster_max) = (
            b.endpoint.max_pending_requests,
            b.cluster.max_pending_requests,
        );
        (endpoint_max.is_some() || cluster_max.is_some()).then(|| ConnectGate {
            state: Arc::clone(state),
            endpoint_max,
            cluster_max,
        })
    }

    /// The first endpoint of weight above 0 after `from` (round the list) that is not
    /// ejected.
    fn first_healthy(&self, from: usize, now: Instant) -> Option<usize> {
        let n = self.states.len();
        (1..n)
            .map(|i| (from + i) % n)
            .find(|&i| self.cluster.endpoints[i].weight > 0 && !self.unavailable(i, now))
    }

    fn picked(&self, i: usize) -> Option<Picked<'_>> {
        Some(Picked {
            endpoint: self.cluster.endpoints.get(i)?,
            state: self.states.get(i)?,
        })
    }

    /// The endpoints' states, in the cluster's order (for the admin dump).
    pub(crate) fn states(&self) -> &[Arc<EndpointState>] {
        &self.states
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use weir_model::{ClusterKey, EndpointAddr, UpstreamProtocol};

    use super::*;
    use crate::endpoints::Outcome;

    /// A cluster of endpoints `10.0.0.<i>:80` with these weights (also used by the
    /// snapshot's tests).
    pub(crate) fn cluster(name: &str, weights: &[u32]) -> Arc<Cluster> {
        let endpoints = weights
            .iter()
            .enumerate()
            .map(|(i, w)| Endpoint {
                addr: EndpointAddr::Socket(([10, 0, 0, i as u8], 80).into()),
                weight: *w,
            })
            .collect();
        Arc::new(Cluster::new(
            ClusterKey(name.into()),
            endpoints,
            UpstreamProtocol::Http1,
        ))
    }

    fn addr_of(state: &ClusterState) -> String {
        state
            .pick(Instant::now())
            .unwrap()
            .endpoint
            .addr
            .to_string()
    }

    #[test]
    fn idle_cluster_is_smooth_weighted_round_robin() {
        let reg = EndpointRegistry::default();
        let state = ClusterState::new(cluster("c", &[2, 1]), &reg);
        let picks: Vec<String> = (0..300).map(|_| addr_of(&state)).collect();
        let first = picks.iter().filter(|p| p.as_str() == "10.0.0.0:80").count();
        assert_eq!(first, 200);
        // Never three of the weight-2 endpoint in a row, never two of the weight-1 one.
        for w in picks.windows(3) {
            assert!(!(w[0] == w[1] && w[1] == w[2]), "{w:?}");
        }
        for w in picks.windows(2) {
            assert!(!(w[0] == "10.0.0.1:80" && w[1] == "10.0.0.1:80"), "{w:?}");
        }
        assert!(
            ClusterState::new(cluster("empty", &[]), &reg)
                .pick(Instant::now())
                .is_none()
        );
        assert!(
            ClusterState::new(cluster("zero", &[0]), &reg)
                .pick(Instant::now())
                .is_none()
        );
    }

    #[test]
    fn busy_endpoints_get_fewer_requests() {
        let reg = EndpointRegistry::default();
        let state = ClusterState::new(cluster("c", &[1, 1, 1, 1]), &reg);
        // Endpoint 0 is stuck: its requests never finish.
        let stuck: Vec<_> = (0..50).map(|_| state.states()[0].start()).collect();
        let mut counts = [0u32; 4];
        for _ in 0..4000 {
            let p = state.pick(Instant::now()).unwrap();
            let i = state
                .cluster
                .endpoints
                .iter()
                .position(|e| std::ptr::eq(e, p.endpoint))
                .unwrap();
            counts[i] += 1;
        }
        // Round robin would give it 1000; it is only picked when both choices are it.
        assert!(counts[0] < 400, "{counts:?}");
        drop(stuck);
    }

    #[test]
    fn ejected_endpoints_are_skipped_unless_all_are() {
        let reg = EndpointRegistry::default();
        let state = ClusterState::new(cluster("c", &[1, 1, 1, 1]), &reg);
        let failing = &state.states()[2];
        for _ in 0..5 {
            failing.start().finish(Outcome::GatewayFailure);
        }
        assert!(failing.is_ejected(Instant::now()));
        for _ in 0..1000 {
            assert_ne!(addr_of(&state), "10.0.0.2:80");
        }
        // A new version of the cluster (another endpoint added) keeps the ejection.
        let next = ClusterState::new(cluster("c", &[1, 1, 1, 1, 1]), &reg);
        for _ in 0..1000 {
            assert_ne!(addr_of(&next), "10.0.0.2:80");
        }
        // A cluster whose endpoints are all ejected still answers (panic threshold).
        let two = ClusterState::new(cluster("two", &[1, 1]), &reg);
        for _ in 0..5 {
            two.states()[0].start().finish(Outcome::GatewayFailure);
        }
        assert!(two.states()[0].is_ejected(Instant::now()));
        for _ in 0..100 {
            assert_eq!(addr_of(&two), "10.0.0.1:80");
        }
    }
}
