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
//! better a chance than a certain 503; the same rule as passive outlier detection). A
//! Service or Backend policy's `outlierDetection.panicThresholdPercent` raises it: when
//! fewer than that share of the endpoints (of weight above 0) are available, every
//! algorithm balances over all of them, as if none were ejected or unhealthy. The share
//! is counted only when a pick meets an unavailable endpoint, at most once a millisecond
//! per cluster version ([`ClusterState::panicking`]), so a healthy cluster pays nothing.
//! With `outlierDetection.enabled: false` ejections are ignored (health checks are not).
//!
//! A Service or Backend policy's `loadBalancer` picks another algorithm
//! ([`weir_model::LoadBalancer`]), fixed per cluster version ([`Algorithm`]):
//! - `RoundRobin`: the cycle alone, passing over unavailable endpoints to the next of
//!   the cycle;
//! - `LeastRequest`: both choices at random from the cycle (so in proportion to the
//!   weights), the one with fewer requests in flight taken;
//! - `LatencyAware`: the same two choices, the one with the lower
//!   [`EndpointState::latency_cost`] taken (response-time estimate × (in flight + 1),
//!   [`crate::latency`]);
//! - `ConsistentHash`: the owner of the request's key on the cluster's ring
//!   ([`crate::ring`], built here once per cluster version), or, when it is unavailable,
//!   the next endpoint clockwise that is not (counted:
//!   `weir_upstream_hash_fallthrough_total`); a request without a key (no such header or
//!   cookie) is balanced by the default. The key is read from the request by
//!   [`crate::affinity`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use weir_model::{Cluster, Endpoint, HashOn, LoadBalancer, Policy};

use crate::breaker::{self, Overflow};
use crate::endpoints::{self, ConnectGate, EndpointRegistry, EndpointState};
use crate::health::Prober;
use crate::ring::Ring;
use crate::router;

/// Positions of the round-robin cycle tried for an available endpoint before looking
/// through the endpoints one by one.
const MAX_CYCLE_SKIPS: usize = 64;
/// Points of the ring walked for an available endpoint before looking through the
/// endpoints one by one (every endpoint unavailable is the only long walk).
const MAX_RING_STEPS: usize = 256;

/// The algorithm of one cluster version (see the module docs).
#[derive(Debug)]
enum Algorithm {
    Default,
    RoundRobin,
    LeastRequest,
    LatencyAware,
    ConsistentHash(Ring),
}

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
    /// How endpoints are chosen (the policy's `loadBalancer`).
    algorithm: Algorithm,
    /// The ring of a cluster balanced by another algorithm, built by the first request
    /// with a key from its route (`sessionPersistence`), once per cluster version.
    lazy_ring: OnceLock<Ring>,
    /// Fall-throughs on the ring and generated keys.
    counters: (Counter, Counter),
    /// Whether outlier detection's ejections count (the policy's `outlierDetection` did
    /// not turn it off).
    ejecting: bool,
    /// The panic threshold, a percentage (0: only when no endpoint is available).
    panic_percent: u32,
    /// Endpoints of weight above 0.
    weighted: u32,
    /// The last panic decision: the millisecond it was taken ([`endpoints::millis`]),
    /// shifted left by one, with the decision in the low bit.
    panic: AtomicU64,
    /// TLS towards the endpoints (the BackendTLSPolicy of the cluster's Service port),
    /// built once per cluster version: `Err` when it cannot be (requests fail, never
    /// going out in plaintext).
    tls: Option<Result<Arc<crate::upstream_tls::TlsTarget>, Arc<str>>>,
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
        let outlier = policy
            .as_ref()
            .and_then(|p| p.outlier_detection)
            .unwrap_or_default();
        let (_, states) = registry.cluster(
            &cluster.key,
            cluster.endpoints.iter().map(|e| e.addr.clone()),
            outlier.ejection,
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
        let algorithm = match policy.as_ref().and_then(|p| p.load_balancer.as_ref()) {
            None => Algorithm::Default,
            Some(LoadBalancer::RoundRobin) => Algorithm::RoundRobin,
            Some(LoadBalancer::LeastRequest) => Algorithm::LeastRequest,
            Some(LoadBalancer::LatencyAware) => Algorithm::LatencyAware,
            Some(LoadBalancer::ConsistentHash(_)) => {
                Algorithm::ConsistentHash(Ring::new(&cluster.endpoints))
            }
        };
        let m = registry.balancer_metrics();
        let counters = (m.hash_fallthrough.clone(), m.hash_cookies.clone());
        let tls = policy
            .as_ref()
            .and_then(|p| p.backend_tls.as_ref())
            .and_then(|t| t.for_port(cluster.key.service_port()?))
            .map(|t| match crate::upstream_tls::TlsTarget::new(t) {
                Ok(target) => Ok(Arc::new(target)),
                Err(e) => {
                    tracing::warn!(cluster = %cluster.key, policy = %t.policy, error = %e, "upstream TLS");
                    Err(Arc::from(e))
                }
            });
        ClusterState {
            cluster,
            schedule,
            cursor: AtomicUsize::new(start),
            states: states.into_boxed_slice(),
            probers,
            policy,
            algorithm,
            lazy_ring: OnceLock::new(),
            counters,
            ejecting: outlier.ejection.is_some(),
            panic_percent: outlier.panic_threshold_percent.min(100),
            weighted: cluster_weighted(&weights),
            panic: AtomicU64::new(0),
            tls,
        }
    }

    /// How connections to the endpoints are made over TLS, if they are.
    pub(crate) fn tls(&self) -> Option<&Result<Arc<crate::upstream_tls::TlsTarget>, Arc<str>>> {
        self.tls.as_ref()
    }

    /// What the cluster's consistent hash reads from a request, if it balances by one.
    pub(crate) fn hash_on(&self) -> Option<&HashOn> {
        match self.policy.as_ref()?.load_balancer.as_ref()? {
            LoadBalancer::ConsistentHash(on) => Some(on),
            _ => None,
        }
    }

    /// Counts a key generated (a cookie or session header set) for a request to it.
    pub(crate) fn key_generated(&self) {
        self.counters.1.inc();
    }

    /// The policy of the cluster's Service or Backend this state applies.
    pub(crate) fn policy(&self) -> Option<&Arc<Policy>> {
        self.policy.as_ref()
    }

    /// Whether endpoint `i` should get no new requests: ejected by outlier detection or
    /// failing its health checks.
    fn unavailable(&self, i: usize, now: Instant) -> bool {
        self.out(i, now) && !self.panicking(now)
    }

    /// Whether endpoint `i` is ejected (and ejections count) or failing its health checks.
    fn out(&self, i: usize, now: Instant) -> bool {
        (self.ejecting && self.states[i].is_ejected(now))
            || self.probers.get(i).is_some_and(|p| p.is_unhealthy())
    }

    /// Whether fewer than the panic threshold's share of the endpoints are available, so
    /// that all of them are used. Counted at most once a millisecond (a relaxed load
    /// otherwise); never with a threshold of 0.
    pub(crate) fn panicking(&self, now: Instant) -> bool {
        if self.panic_percent == 0 {
            return false;
        }
        let ms = endpoints::millis(now);
        let last = self.panic.load(Ordering::Relaxed);
        if last >> 1 == ms {
            return last & 1 == 1;
        }
        let available = (0..self.states.len())
            .filter(|&i| self.cluster.endpoints[i].weight > 0 && !self.out(i, now))
            .count() as u64;
        let panic = available * 100 < u64::from(self.panic_percent) * u64::from(self.weighted);
        self.panic
            .store(ms << 1 | u64::from(panic), Ordering::Relaxed);
        panic
    }

    /// The endpoints' probers, in the cluster's order (empty without a health check).
    pub(crate) fn probers(&self) -> &[Arc<Prober>] {
        &self.probers
    }

    /// The endpoint for the next request (see the module docs), `key` being the request's
    /// consistent-hash key if it has one; `None` when the cluster has no endpoints of
    /// weight above 0.
    pub(crate) fn pick(&self, now: Instant, key: Option<u64>) -> Option<Picked<'_>> {
        let len = self.schedule.len();
        if len == 0 {
            return None;
        }
        if self.states.len() == 1 {
            return self.picked(self.schedule[0] as usize);
        }
        let chosen = match (&self.algorithm, key) {
            (Algorithm::ConsistentHash(ring), Some(key)) => self.on_ring(ring, key, now),
            (_, Some(key)) => {
                let ring = self
                    .lazy_ring
                    .get_or_init(|| Ring::new(&self.cluster.endpoints));
                self.on_ring(ring, key, now)
            }
            (Algorithm::RoundRobin, None) => self.round_robin(now),
            (Algorithm::LeastRequest, None) => self.two_random(now, |a, b| {
                self.states[b].in_flight() < self.states[a].in_flight()
            }),
            (Algorithm::LatencyAware, None) => self.two_random(now, |a, b| {
                self.states[b].latency_cost(now) < self.states[a].latency_cost(now)
            }),
            _ => self.default_pick(now),
        };
        self.picked(chosen)
    }

    /// The default balancer: the next of the cycle against a random one, by requests in
    /// flight.
    fn default_pick(&self, now: Instant) -> usize {
        let len = self.schedule.len();
        let n = self.cursor.fetch_add(1, Ordering::Relaxed);
        let a = self.schedule[n % len] as usize;
        let other = (router::next_random() % (len as u64 - 1).max(1)) as usize;
        let b = self.schedule[(n + 1 + other) % len] as usize;
        self.better(a, b, now, |a, b| {
            self.states[b].in_flight() < self.states[a].in_flight()
        })
    }

    /// Two random positions of the cycle (in proportion to the weights); `b_wins(a, b)`
    /// says whether the second is better when both are available.
    fn two_random(&self, now: Instant, b_wins: impl Fn(usize, usize) -> bool) -> usize {
        let len = self.schedule.len() as u64;
        let first = router::next_random() % len;
        let second = (first + 1 + router::next_random() % (len - 1).max(1)) % len;
        let a = self.schedule[first as usize] as usize;
        let b = self.schedule[second as usize] as usize;
        self.better(a, b, now, b_wins)
    }

    /// Of two endpoints, the available one, or by `b_wins` when both are; when neither
    /// is, the first available after `a`, else `a`.
    fn better(
        &self,
        a: usize,
        b: usize,
        now: Instant,
        b_wins: impl Fn(usize, usize) -> bool,
    ) -> usize {
        match (self.unavailable(a, now), self.unavailable(b, now)) {
            (false, false) => {
                if a != b && b_wins(a, b) {
                    b
                } else {
                    a
                }
            }
            (false, true) => a,
            (true, false) => b,
            (true, true) => self.first_healthy(a, now).unwrap_or(a),
        }
    }

    /// The next endpoint of the cycle that is available. Unavailable ones use up their
    /// positions (the cursor moves past them), so the others keep their weights' shares.
    fn round_robin(&self, now: Instant) -> usize {
        let len = self.schedule.len();
        let mut first = None;
        for _ in 0..len.min(MAX_CYCLE_SKIPS) {
            let n = self.cursor.fetch_add(1, Ordering::Relaxed);
            let i = self.schedule[n % len] as usize;
            if !self.unavailable(i, now) {
                return i;
            }
            first.get_or_insert(i);
        }
        let first = first.unwrap_or(self.schedule[0] as usize);
        self.first_healthy(first, now).unwrap_or(first)
    }

    /// The owner of `key` on the ring, or the next available endpoint clockwise.
    fn on_ring(&self, ring: &Ring, key: u64, now: Instant) -> usize {
        let mut walk = ring.walk(key);
        let Some(owner) = walk.next() else {
            return self.default_pick(now);
        };
        if !self.unavailable(owner, now) {
            return owner;
        }
        self.counters.0.inc();
        walk.take(MAX_RING_STEPS)
            .find(|&i| i != owner && !self.unavailable(i, now))
            .or_else(|| self.first_healthy(owner, now))
            .unwrap_or(owner)
    }

    /// The endpoint for the next request within the circuit breaker of the cluster's
    /// Service or Backend ([`crate::breaker`]): [`ClusterState::pick`], passed over for
    /// another endpoint when it is at its own limit; `Err` when the cluster is at its
    /// limit or every endpoint is (counted), or it has no endpoints. Without a breaker,
    /// one branch more than `pick`.
    pub(crate) fn admit(&self, now: Instant, key: Option<u64>) -> Result<Picked<'_>, Refused> {
        let picked = self.pick(now, key).ok_or(Refused::NoEndpoints)?;
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

/// Endpoints of weight above 0.
fn cluster_weighted(weights: &[u32]) -> u32 {
    weights.iter().filter(|w| **w > 0).count() as u32
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
            .pick(Instant::now(), None)
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
                .pick(Instant::now(), None)
                .is_none()
        );
        assert!(
            ClusterState::new(cluster("zero", &[0]), &reg)
                .pick(Instant::now(), None)
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
            let p = state.pick(Instant::now(), None).unwrap();
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

    /// A cluster of four endpoints whose Service policy sets `outlier`, with endpoints
    /// 0, 1 and 2 ejected (by one gateway error each, every endpoint ejectable).
    fn three_of_four_ejected(
        name: &str,
        panic_threshold_percent: u32,
        reg: &EndpointRegistry,
    ) -> ClusterState {
        let outlier = weir_model::OutlierDetection {
            ejection: Some(weir_model::Ejection {
                consecutive_gateway_errors: 1,
                max_ejected_percent: 100,
                ..Default::default()
            }),
            panic_threshold_percent,
        };
        let policy = Policy::new(
            weir_model::PolicyTarget::Backend {
                kind: weir_model::BackendKind::Service,
                namespace: "ns".into(),
                name: name.into(),
            },
            weir_model::Timeouts::default(),
            None,
            None,
        )
        .with_outlier_detection(Some(outlier));
        let state =
            ClusterState::with_policy(cluster(name, &[1, 1, 1, 1]), reg, Some(Arc::new(policy)));
        for i in 0..3 {
            state.states()[i].start().finish(Outcome::GatewayFailure);
            assert!(state.states()[i].is_ejected(Instant::now()));
        }
        state
    }

    fn spread(state: &ClusterState, lb: bool) -> [usize; 4] {
        let mut counts = [0; 4];
        for _ in 0..400 {
            let now = Instant::now();
            let picked = if lb {
                state.round_robin(now)
            } else {
                let p = state.pick(now, None).unwrap();
                state
                    .states()
                    .iter()
                    .position(|s| Arc::ptr_eq(s, p.state))
                    .unwrap()
            };
            counts[picked] += 1;
        }
        counts
    }

    #[test]
    fn below_the_panic_threshold_every_endpoint_gets_traffic() {
        let reg = EndpointRegistry::default();
        // 1 of 4 available (25 %) is below 50 %: all four are used.
        let panicking = three_of_four_ejected("p50", 50, &reg);
        for lb in [false, true] {
            let counts = spread(&panicking, lb);
            assert!(counts.iter().all(|&n| n >= 50), "{counts:?}");
        }
        assert!(panicking.panicking(Instant::now()));
        // With a threshold of 0 (the default), only the available one.
        let strict = three_of_four_ejected("p0", 0, &reg);
        for lb in [false, true] {
            assert_eq!(spread(&strict, lb), [0, 0, 0, 400]);
        }
        // 25 % available is not below a threshold of 25 %.
        let at = three_of_four_ejected("p25", 25, &reg);
        assert_eq!(spread(&at, false), [0, 0, 0, 400]);
        assert!(!at.panicking(Instant::now()));
        // Back above the threshold once endpoints recover (a success ends an ejection).
        for i in 0..2 {
            panicking.states()[i].start().finish(Outcome::Success);
        }
        let later = Instant::now() + std::time::Duration::from_millis(5);
        assert!(!panicking.panicking(later), "3 of 4 available");
        for _ in 0..100 {
            let p = panicking.pick(later, None).unwrap();
            assert!(!Arc::ptr_eq(p.state, &panicking.states()[2]));
        }
    }

    #[test]
    fn detection_turned_off_ignores_ejections() {
        let reg = EndpointRegistry::default();
        let on = ClusterState::new(cluster("off", &[1, 1]), &reg);
        for _ in 0..5 {
            on.states()[0].start().finish(Outcome::GatewayFailure);
        }
        assert!(on.states()[0].is_ejected(Instant::now()));
        assert_eq!(spread(&on, false), [0, 400, 0, 0]);
        let policy = Policy::new(
            weir_model::PolicyTarget::Backend {
                kind: weir_model::BackendKind::Service,
                namespace: "ns".into(),
                name: "off".into(),
            },
            weir_model::Timeouts::default(),
            None,
            None,
        )
        .with_outlier_detection(Some(weir_model::OutlierDetection {
            ejection: None,
            panic_threshold_percent: 0,
        }));
        let off = ClusterState::with_policy(cluster("off", &[1, 1]), &reg, Some(Arc::new(policy)));
        let counts = spread(&off, false);
        assert_eq!(counts[0] + counts[1], 400);
        assert!(counts[0] >= 100, "{counts:?}");
        // The record is kept, so the old version still skips it.
        assert!(off.states()[0].is_ejected(Instant::now()));
    }

    fn balanced(
        name: &str,
        weights: &[u32],
        lb: LoadBalancer,
        reg: &EndpointRegistry,
    ) -> ClusterState {
        let policy = Policy::new(
            weir_model::PolicyTarget::Backend {
                kind: weir_model::BackendKind::Service,
                namespace: "ns".into(),
                name: name.into(),
            },
            weir_model::Timeouts::default(),
            None,
            None,
        )
        .with_load_balancer(Some(lb));
        ClusterState::with_policy(cluster(name, weights), reg, Some(Arc::new(policy)))
    }

    fn index_of(state: &ClusterState, p: &Picked<'_>) -> usize {
        state
            .cluster
            .endpoints
            .iter()
            .position(|e| std::ptr::eq(e, p.endpoint))
            .unwrap()
    }

    fn counts(state: &ClusterState, n: usize, key: Option<u64>) -> Vec<u32> {
        let mut counts = vec![0u32; state.cluster.endpoints.len()];
        for _ in 0..n {
            let p = state.pick(Instant::now(), key).unwrap();
            counts[index_of(state, &p)] += 1;
        }
        counts
    }

    #[test]
    fn round_robin_follows_weights_and_skips_ejected() {
        let reg = EndpointRegistry::default();
        let state = balanced("rr", &[2, 1, 1], LoadBalancer::RoundRobin, &reg);
        // Busy endpoints make no difference to plain round robin.
        let _busy: Vec<_> = (0..20).map(|_| state.states()[0].start()).collect();
        assert_eq!(counts(&state, 400, None), [200, 100, 100]);
        for _ in 0..5 {
            state.states()[0].start().finish(Outcome::GatewayFailure);
        }
        assert!(state.states()[0].is_ejected(Instant::now()));
        assert_eq!(counts(&state, 400, None), [0, 200, 200]);
    }

    #[test]
    fn least_request_follows_weights_when_idle_and_avoids_busy_endpoints() {
        let reg = EndpointRegistry::default();
        let state = balanced("lr", &[3, 1], LoadBalancer::LeastRequest, &reg);
        let c = counts(&state, 8000, None);
        // 3:1 by weight (random draws: within a wide margin).
        assert!((5400..6600).contains(&c[0]), "{c:?}");
        let even = balanced("lr4", &[1, 1, 1, 1], LoadBalancer::LeastRequest, &reg);
        let _stuck: Vec<_> = (0..50).map(|_| even.states()[0].start()).collect();
        let c = counts(&even, 4000, None);
        assert_eq!(c[0], 0, "never taken against an idle one: {c:?}");
    }

    #[test]
    fn latency_aware_prefers_the_fast_endpoint() {
        let reg = EndpointRegistry::default();
        let state = balanced("la", &[1, 1, 1, 1], LoadBalancer::LatencyAware, &reg);
        let now = Instant::now();
        // Endpoint 2 answers in 50 ms, the others in about 1 ms.
        for round in 0..20 {
            for (i, s) in state.states().iter().enumerate() {
                let took = if i == 2 { 50 } else { 1 + round % 2 };
                s.start_at(now - std::time::Duration::from_millis(took))
                    .finish(Outcome::Success);
            }
        }
        let slow = state.states()[2].latency_estimate(Instant::now());
        let fast = state.states()[0].latency_estimate(Instant::now());
        assert!(slow > 10.0 * fast, "{slow} vs {fast}");
        let c = counts(&state, 4000, None);
        assert_eq!(c[2], 0, "the slow endpoint loses every pair: {c:?}");
        // The fast ones share the rest (by their small differences in estimate).
        assert!(
            c.iter().enumerate().all(|(i, n)| i == 2 || *n > 100),
            "{c:?}"
        );
        // Requests in flight count too: a fast endpoint with many of them loses.
        let _held: Vec<_> = (0..200).map(|_| state.states()[0].start()).collect();
        let c = counts(&state, 3000, None);
        assert!(c[0] < 100, "{c:?}");
        // The estimate survives a new version of the cluster.
        let next = balanced("la", &[1, 1, 1, 1, 1], LoadBalancer::LatencyAware, &reg);
        assert!(next.states()[2].latency_estimate(Instant::now()) > 10.0 * fast);
    }

    #[test]
    fn consistent_hash_sticks_and_falls_through_unavailable_endpoints() {
        let reg = EndpointRegistry::default();
        let lb = LoadBalancer::ConsistentHash(HashOn::SourceIp);
        let state = balanced("ch", &[1, 1, 1, 1, 1], lb.clone(), &reg);
        let key = |ip: &str| crate::affinity::ip_key(ip.parse().unwrap());
        let mut owners = std::collections::HashSet::new();
        for client in 0..50u8 {
            let k = key(&format!("192.0.2.{client}"));
            let c = counts(&state, 20, Some(k));
            assert_eq!(c.iter().filter(|n| **n > 0).count(), 1, "sticky: {c:?}");
            owners.insert(c.iter().position(|n| *n > 0).unwrap());
        }
        assert!(
            owners.len() >= 4,
            "keys spread over the endpoints: {owners:?}"
        );
        // The owner of a key is ejected: its requests go to one other endpoint, the next on
        // the ring, and come back once the ejection is over.
        let k = key("198.51.100.1");
        let owner = index_of(&state, &state.pick(Instant::now(), Some(k)).unwrap());
        for _ in 0..5 {
            state.states()[owner]
                .start()
                .finish(Outcome::GatewayFailure);
        }
        let c = counts(&state, 20, Some(k));
        assert_eq!(c[owner], 0, "{c:?}");
        assert_eq!(
            c.iter().filter(|n| **n > 0).count(),
            1,
            "still sticky: {c:?}"
        );
        assert_eq!(reg.balancer_metrics().hash_fallthrough.get(), 20);
        state.states()[owner].readmit();
        assert_eq!(counts(&state, 5, Some(k))[owner], 5);
        // Without a key: the default balancer.
        let c = counts(&state, 500, None);
        assert!(c.iter().all(|n| *n == 100), "{c:?}");
    }

    #[test]
    fn a_key_from_the_route_uses_a_ring_of_any_cluster() {
        let reg = EndpointRegistry::default();
        // A cluster balanced by round robin, and a request with a key (a route's
        // sessionPersistence): the key decides, the same endpoint every time.
        let state = balanced("rr-key", &[1, 1, 1], LoadBalancer::RoundRobin, &reg);
        let c = counts(&state, 30, Some(42));
        assert_eq!(c.iter().filter(|n| **n > 0).count(), 1, "{c:?}");
        let plain = ClusterState::new(cluster("plain", &[1, 1, 1]), &reg);
        let c = counts(&plain, 30, Some(7));
        assert_eq!(c.iter().filter(|n| **n > 0).count(), 1, "{c:?}");
        assert_eq!(counts(&plain, 30, None), [10, 10, 10]);
    }
}
