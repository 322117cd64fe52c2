//! Endpoint state outside the snapshot: in-flight requests, consecutive failures and
//! ejections per (cluster, endpoint).
//!
//! The snapshot is rebuilt on every configuration change, but what weir has learned
//! about an endpoint (it is failing, it is ejected, it is busy) must not be forgotten
//! because an unrelated route or a sibling endpoint changed. So this state lives in an
//! [`EndpointRegistry`] keyed by cluster and endpoint address; each snapshot's
//! [`crate::balance::ClusterState`] holds `Arc`s into it, and a new `ClusterState` for
//! the same cluster finds the same `Arc`s for the endpoints it keeps. The registry holds
//! weak references: an endpoint's state goes away with the last snapshot that has it.
//!
//! Passive outlier detection: every forwarded request reports its outcome
//! ([`EndpointState::report`]). Each endpoint counts three runs of failures: 5xx answers
//! (with gateway errors and connect failures), gateway errors (connect failure, reset,
//! timeout, or a 502/503/504 answer) and connect failures alone. When a run reaches its
//! threshold ([`Ejection`]: the cluster's Service or Backend policy's `outlierDetection`,
//! else weir's default, 5 gateway errors) the endpoint is ejected for a time that doubles
//! with each ejection in a row, up to a cap; the balancer skips ejected endpoints unless
//! that would leave the cluster with too few (the panic threshold, in
//! [`crate::balance`]). When an ejection ends the endpoint is on probation: one more
//! failure of a kind the cluster counts ejects it again at once, one success clears its
//! record. The settings are the cluster's ([`ClusterHealth`]), replaced when a new
//! version of the cluster is built with another policy; the endpoints' records stay.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use weir_model::{ClusterKey, Ejection, EndpointAddr};

use crate::breaker::{BreakerMetrics, Overflow};
use crate::health::{HealthMetrics, Probers};
use crate::latency::PeakEwma;

/// What became of one forwarded request, as far as its endpoint is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The endpoint answered with a status below 500.
    Success,
    /// A 5xx answer other than 502/503/504.
    ServerError,
    /// Reset, protocol error, timeout, or a 502/503/504 answer.
    GatewayFailure,
    /// The connection to the endpoint could not be opened (a local-origin failure; also
    /// a gateway error).
    ConnectFailure,
    /// The request failed for a reason that says nothing about the endpoint (the
    /// client's body broke, the client went away).
    Neutral,
}

impl Outcome {
    /// The outcome of a response status.
    pub(crate) fn of_status(status: u16) -> Outcome {
        match status {
            502..=504 => Outcome::GatewayFailure,
            500..=599 => Outcome::ServerError,
            _ => Outcome::Success,
        }
    }

    /// Whether it says the endpoint is in trouble (for the response-time estimate, which
    /// counts failures as slow).
    fn is_gateway_error(self) -> bool {
        matches!(self, Outcome::GatewayFailure | Outcome::ConnectFailure)
    }

    /// Whether a cluster ejecting by `e` counts it (which failures end a probation).
    fn counts_for(self, e: &Ejection) -> bool {
        match self {
            Outcome::Success | Outcome::Neutral => false,
            Outcome::ServerError => e.consecutive_5xx != 0,
            Outcome::GatewayFailure => e.consecutive_5xx != 0 || e.consecutive_gateway_errors != 0,
            Outcome::ConnectFailure => {
                e.consecutive_5xx != 0
                    || e.consecutive_gateway_errors != 0
                    || e.consecutive_local_origin_failures != 0
            }
        }
    }
}

/// Counters for outlier detection and retries, shared by every endpoint.
#[derive(Clone, Debug, Default)]
pub(crate) struct OutlierMetrics {
    /// Retries sent.
    pub(crate) retries: Counter,
    /// Retries not sent because the cluster's retry budget was spent.
    pub(crate) retry_budget_exhausted: Counter,
    /// Ejections started.
    pub(crate) ejections: Counter,
    /// Endpoints ejected right now, or whose ejection has ended but who have not
    /// answered since (they count against the cluster's maximum ejected share).
    pub(crate) ejected: Gauge,
    /// Ejections refused because the cluster already had its maximum ejected.
    pub(crate) ejections_refused: Counter,
    /// Requests refused by circuit breakers.
    pub(crate) breaker: BreakerMetrics,
    /// Consistent-hash balancing.
    pub(crate) balancer: BalancerMetrics,
}

/// Counters of the consistent-hash balancer (unlabelled: one per data plane).
#[derive(Clone, Debug, Default)]
pub(crate) struct BalancerMetrics {
    /// Requests whose key's endpoint was unavailable, sent to the next on the ring.
    pub(crate) hash_fallthrough: Counter,
    /// Cookies generated for requests without one.
    pub(crate) hash_cookies: Counter,
}

/// Per-cluster figures shared by its endpoints' states (how many are ejected, of how
/// many, for the maximum ejected share) and the cluster's ejection settings.
#[derive(Debug)]
pub(crate) struct ClusterHealth {
    ejected: AtomicU32,
    size: AtomicU32,
    /// Requests in flight to any endpoint of the cluster (circuit breaking).
    in_flight: AtomicU32,
    /// Requests opening an upstream connection (circuit breaking's pending requests).
    connecting: AtomicU32,
    /// When endpoints are ejected (`None`: never), set by each new version of the
    /// cluster ([`EndpointRegistry::cluster`]); read only when a request failed.
    ejection: ArcSwapOption<Ejection>,
    /// Counters shared by every cluster of the registry.
    metrics: Arc<OutlierMetrics>,
    /// Retries this cluster may still get, in hundredths (see [`ClusterHealth::retry`]).
    retry_tokens: AtomicU32,
    /// When the time-based part of the budget was last added ([`millis`]).
    retry_refilled: AtomicU64,
}

/// The retry budget: retries to a cluster are at most this percentage of its requests
/// that may be retried, plus [`RETRY_MIN_PER_SECOND`], so a failing backend gets a
/// bounded multiple of its load, never `attempts` times it (Linkerd's budget has the same
/// two parts).
const RETRY_BUDGET_PERCENT: u32 = 20;
/// Retries a cluster may always get per second, however little traffic it has, so that a
/// quiet cluster's configured retries still happen.
const RETRY_MIN_PER_SECOND: u32 = 10;
/// At most this many retries are banked (also the budget of a new cluster).
const RETRY_RESERVE: u32 = 10;

impl ClusterHealth {
    /// Counts a request that may be retried: it adds a fraction of a retry to the budget.
    pub(crate) fn deposit(&self) {
        let _ = self
            .retry_tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                (t < RETRY_RESERVE * 100)
                    .then(|| (t + RETRY_BUDGET_PERCENT).min(RETRY_RESERVE * 100))
            });
    }

    /// Takes one retry from the budget; `false` (and counted) when it is spent.
    pub(crate) fn retry(&self, now: Instant) -> bool {
        // The time-based part: one hundredth of a retry per (10 / RETRY_MIN_PER_SECOND)
        // ms since the last refill, added by whoever moves the refill time.
        let now_ms = millis(now);
        let last = self.retry_refilled.load(Ordering::Relaxed);
        if now_ms > last
            && self
                .retry_refilled
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let add = (now_ms - last).saturating_mul(u64::from(RETRY_MIN_PER_SECOND)) / 10;
            let add = u32::try_from(add).unwrap_or(u32::MAX);
            let _ = self
                .retry_tokens
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                    Some(t.saturating_add(add).min(RETRY_RESERVE * 100))
                });
        }
        let ok = self
            .retry_tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_sub(100))
            .is_ok();
        let m = &self.metrics;
        if ok {
            m.retries.inc();
        } else {
            m.retry_budget_exhausted.inc();
        }
        ok
    }

    /// Requests in flight to the cluster.
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts a refusal by a circuit breaker.
    pub(crate) fn refused(&self, why: Overflow) {
        self.metrics.breaker.count(why);
    }

    /// Endpoints currently ejected.
    #[cfg(test)]
    fn ejected(&self) -> u32 {
        self.ejected.load(Ordering::Relaxed)
    }
}

/// What weir knows about one endpoint of one cluster.
#[derive(Debug)]
pub(crate) struct EndpointState {
    in_flight: AtomicU32,
    /// Requests opening an upstream connection to it.
    connecting: AtomicU32,
    /// Failures of any kind in a row (5xx answers, gateway errors, connect failures).
    consecutive_5xx: AtomicU32,
    /// Gateway errors in a row (502/503/504, resets, timeouts, connect failures).
    consecutive_gateway: AtomicU32,
    /// Connect failures in a row.
    consecutive_local: AtomicU32,
    /// Milliseconds since [`epoch`] until which the endpoint is ejected; 0 when it is not.
    ejected_until: AtomicU64,
    /// Ejections in a row (reset by a success); sets the next ejection's length.
    ejections_in_a_row: AtomicU32,
    cluster: Arc<ClusterHealth>,
    /// Lifetime counters, for the admin dump and tests.
    successes: AtomicU64,
    failures: AtomicU64,
    /// Response time, for the `LatencyAware` balancer.
    latency: PeakEwma,
}

impl EndpointState {
    fn new(cluster: Arc<ClusterHealth>) -> EndpointState {
        EndpointState {
            in_flight: AtomicU32::new(0),
            connecting: AtomicU32::new(0),
            consecutive_5xx: AtomicU32::new(0),
            consecutive_gateway: AtomicU32::new(0),
            consecutive_local: AtomicU32::new(0),
            ejected_until: AtomicU64::new(0),
            ejections_in_a_row: AtomicU32::new(0),
            cluster,
            successes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            latency: PeakEwma::default(),
        }
    }

    /// The `LatencyAware` balancer's cost at `now`: the response-time estimate times the
    /// requests in flight plus one ([`crate::latency`]).
    pub(crate) fn latency_cost(&self, now: Instant) -> f64 {
        self.latency.estimate(nanos(now)) * f64::from(self.in_flight() + 1)
    }

    /// The response-time estimate in nanoseconds at `now`.
    #[cfg(test)]
    pub(crate) fn latency_estimate(&self, now: Instant) -> f64 {
        self.latency.estimate(nanos(now))
    }

    /// The figures of the endpoint's cluster.
    pub(crate) fn cluster_health(&self) -> &Arc<ClusterHealth> {
        &self.cluster
    }

    /// Requests sent to the endpoint whose response head has not arrived yet.
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Whether the endpoint is ejected at `now`. One relaxed load when it is not.
    pub(crate) fn is_ejected(&self, now: Instant) -> bool {
        let until = self.ejected_until.load(Ordering::Relaxed);
        until != 0 && millis(now) < until
    }

    /// Counts a request sent to the endpoint; the guard's report (or drop) ends it.
    pub(crate) fn start(self: &Arc<Self>) -> InFlight {
        self.start_at(Instant::now())
    }

    /// As [`EndpointState::start`], the request's response time counted from `now`.
    pub(crate) fn start_at(self: &Arc<Self>, now: Instant) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.cluster.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight {
            state: Some(Arc::clone(self)),
            started: nanos(now),
        }
    }

    /// Records an outcome; may eject the endpoint (returns the ejection's length).
    fn report(&self, outcome: Outcome, now: Instant) -> Option<Duration> {
        let metrics = &*self.cluster.metrics;
        match outcome {
            Outcome::Neutral => None,
            // A cluster that does not count 5xx answers takes a 500 as an answer, as weir
            // always has (it clears the records).
            Outcome::ServerError
                if self
                    .cluster
                    .ejection
                    .load()
                    .as_deref()
                    .is_none_or(|e| e.consecutive_5xx == 0) =>
            {
                self.report(Outcome::Success, now)
            }
            Outcome::Success => {
                self.successes.fetch_add(1, Ordering::Relaxed);
                for run in [
                    &self.consecutive_5xx,
                    &self.consecutive_gateway,
                    &self.consecutive_local,
                    &self.ejections_in_a_row,
                ] {
                    if run.load(Ordering::Relaxed) != 0 {
                        run.store(0, Ordering::Relaxed);
                    }
                }
                self.end_ejection(metrics);
                None
            }
            Outcome::ServerError | Outcome::GatewayFailure | Outcome::ConnectFailure => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                let run = |n: &AtomicU32, counts: bool| {
                    if counts {
                        n.fetch_add(1, Ordering::Relaxed) + 1
                    } else {
                        if n.load(Ordering::Relaxed) != 0 {
                            n.store(0, Ordering::Relaxed);
                        }
                        0
                    }
                };
                let any = run(&self.consecutive_5xx, true);
                let gateway = run(&self.consecutive_gateway, outcome.is_gateway_error());
                let local = run(&self.consecutive_local, outcome == Outcome::ConnectFailure);
                let settings = self.cluster.ejection.load();
                let e = settings.as_deref()?;
                let reached = |n: u32, threshold: u32| threshold != 0 && n >= threshold;
                let due = reached(any, e.consecutive_5xx)
                    || reached(gateway, e.consecutive_gateway_errors)
                    || reached(local, e.consecutive_local_origin_failures)
                    // Probation: ejected before and no success since.
                    || (self.ejections_in_a_row.load(Ordering::Relaxed) != 0
                        && outcome.counts_for(e));
                if !due {
                    return None;
                }
                self.eject(now, e, metrics)
            }
        }
    }

    /// Ejects the endpoint unless it is ejected already or the cluster is at its
    /// maximum ejected share.
    fn eject(&self, now: Instant, config: &Ejection, metrics: &OutlierMetrics) -> Option<Duration> {
        let now_ms = millis(now);
        let until = self.ejected_until.load(Ordering::Relaxed);
        if until != 0 && now_ms < until {
            return None;
        }
        let size = self.cluster.size.load(Ordering::Relaxed);
        let max = (u64::from(size) * u64::from(config.max_ejected_percent) / 100).max(1) as u32;
        let ejected = self.cluster.ejected.load(Ordering::Relaxed);
        // An expired ejection of this endpoint still counts in `ejected` until replaced.
        let counted_already = until != 0;
        let after = if counted_already {
            ejected
        } else {
            ejected + 1
        };
        if size < 2 || after > max {
            metrics.ejections_refused.inc();
            // The runs go on: the next failure tries again.
            return None;
        }
        let in_a_row = self.ejections_in_a_row.fetch_add(1, Ordering::Relaxed);
        let length = config
            .base_ejection
            .saturating_mul(1u32 << in_a_row.min(16))
            .min(config.max_ejection.max(config.base_ejection));
        let new_until = now_ms + length.as_millis() as u64;
        if self
            .ejected_until
            .compare_exchange(until, new_until, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            // Another worker ejected or cleared it at the same moment.
            return None;
        }
        if !counted_already {
            self.cluster.ejected.fetch_add(1, Ordering::Relaxed);
            metrics.ejected.inc();
        }
        metrics.ejections.inc();
        Some(length)
    }

    /// Ends an ejection because the endpoint's active health checks turned healthy again
    /// (Envoy's `successful_active_health_check_uneject_host`, on by default there too):
    /// its failures are forgotten and it gets traffic at once rather than when the
    /// ejection would have ended. Returns whether it was ejected.
    pub(crate) fn readmit(&self) -> bool {
        let was = self.ejected_until.load(Ordering::Relaxed) != 0;
        self.consecutive_5xx.store(0, Ordering::Relaxed);
        self.consecutive_gateway.store(0, Ordering::Relaxed);
        self.consecutive_local.store(0, Ordering::Relaxed);
        self.ejections_in_a_row.store(0, Ordering::Relaxed);
        self.end_ejection(&self.cluster.metrics);
        was
    }

    /// Clears an ejection (expired or not) after a success.
    fn end_ejection(&self, metrics: &OutlierMetrics) {
        let until = self.ejected_until.load(Ordering::Relaxed);
        if until == 0 {
            return;
        }
        if self
            .ejected_until
            .compare_exchange(until, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.cluster.ejected.fetch_sub(1, Ordering::Relaxed);
            metrics.ejected.dec();
        }
    }

    /// A JSON view for the admin dump.
    pub(crate) fn to_json(&self, now: Instant) -> serde_json::Value {
        serde_json::json!({
            "in_flight": self.in_flight(),
            "ejected": self.is_ejected(now),
            "consecutive_failures": self.consecutive_5xx.load(Ordering::Relaxed),
            "consecutive_gateway_errors": self.consecutive_gateway.load(Ordering::Relaxed),
            "consecutive_connect_failures": self.consecutive_local.load(Ordering::Relaxed),
            "successes": self.successes.load(Ordering::Relaxed),
            "failures": self.failures.load(Ordering::Relaxed),
            "latency_ms": self.latency.estimate(nanos(now)) / 1e6,
        })
    }
}

/// One request in flight to an endpoint. [`InFlight::finish`] reports its outcome;
/// dropping it without one (the client went away) only ends the count.
#[derive(Debug)]
pub(crate) struct InFlight {
    state: Option<Arc<EndpointState>>,
    /// When it was sent ([`nanos`]), for the response time.
    started: u64,
}

impl InFlight {
    /// The figures of the endpoint's cluster (its retry budget).
    pub(crate) fn cluster(&self) -> Option<Arc<ClusterHealth>> {
        self.state.as_ref().map(|s| Arc::clone(&s.cluster))
    }

    /// Records a success without ending the count (an L4 connection that was opened and
    /// stays in flight while it lasts).
    pub(crate) fn succeeded(&self) {
        if let Some(state) = &self.state {
            state.report(Outcome::Success, Instant::now());
        }
    }

    /// Ends the request with its outcome.
    pub(crate) fn finish(mut self, outcome: Outcome) {
        if let Some(state) = self.state.take() {
            state.in_flight.fetch_sub(1, Ordering::Relaxed);
            state.cluster.in_flight.fetch_sub(1, Ordering::Relaxed);
            let now = Instant::now();
            if outcome != Outcome::Neutral {
                let now_ns = nanos(now);
                let took = now_ns.saturating_sub(self.started) as f64;
                let failed = outcome.is_gateway_error();
                state.latency.observe(took, failed, now_ns);
            }
            if let Some(length) = state.report(outcome, now) {
                tracing::warn!(
                    ejection_ms = length.as_millis() as u64,
                    "endpoint ejected after consecutive failures"
                );
            }
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            state.in_flight.fetch_sub(1, Ordering::Relaxed);
            state.cluster.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The pending-request limits of one request's endpoint and cluster, checked when the
/// HTTP/1.1 pool must open a connection for it ([`ConnectGate::enter`]).
#[derive(Debug)]
pub(crate) struct ConnectGate {
    pub(crate) state: Arc<EndpointState>,
    pub(crate) endpoint_max: Option<u32>,
    pub(crate) cluster_max: Option<u32>,
}

/// A request counted as pending (opening a connection) until dropped.
#[derive(Debug)]
pub(crate) struct Connecting {
    state: Arc<EndpointState>,
}

impl ConnectGate {
    /// Counts the request as pending, or refuses it when the endpoint or its cluster has
    /// its maximum of pending requests already.
    pub(crate) fn enter(self) -> Result<Connecting, Overflow> {
        let s = &self.state;
        let over = |n: &AtomicU32, max: Option<u32>| {
            max.is_some_and(|m| {
                n.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                    (c < m).then_some(c + 1)
                })
                .is_err()
            })
        };
        if over(&s.cluster.connecting, self.cluster_max) {
            s.cluster.refused(Overflow::ClusterPending);
            return Err(Overflow::ClusterPending);
        }
        if self.cluster_max.is_none() {
            s.cluster.connecting.fetch_add(1, Ordering::Relaxed);
        }
        if over(&s.connecting, self.endpoint_max) {
            s.cluster.connecting.fetch_sub(1, Ordering::Relaxed);
            s.cluster.refused(Overflow::EndpointPending);
            return Err(Overflow::EndpointPending);
        }
        if self.endpoint_max.is_none() {
            s.connecting.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Connecting { state: self.state })
    }
}

impl Drop for Connecting {
    fn drop(&mut self) {
        self.state.connecting.fetch_sub(1, Ordering::Relaxed);
        self.state
            .cluster
            .connecting
            .fetch_sub(1, Ordering::Relaxed);
    }
}

type Key = (ClusterKey, EndpointAddr);

/// The endpoint states of every cluster, by (cluster, address). See the module docs.
pub(crate) struct EndpointRegistry {
    endpoints: Mutex<Registered>,
    metrics: Arc<OutlierMetrics>,
    /// Active health checkers, one per (address, settings) ([`crate::health`]).
    probers: Probers,
}

#[derive(Default)]
struct Registered {
    endpoints: HashMap<Key, Weak<EndpointState>>,
    clusters: HashMap<ClusterKey, Weak<ClusterHealth>>,
    /// Dead entries are swept when the maps grow past this.
    sweep_at: usize,
}

impl std::fmt::Debug for EndpointRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointRegistry").finish_non_exhaustive()
    }
}

impl Default for EndpointRegistry {
    fn default() -> Self {
        EndpointRegistry::new(OutlierMetrics::default(), HealthMetrics::default())
    }
}

impl EndpointRegistry {
    /// An empty registry.
    pub(crate) fn new(metrics: OutlierMetrics, health: HealthMetrics) -> EndpointRegistry {
        epoch();
        EndpointRegistry {
            endpoints: Mutex::new(Registered::default()),
            metrics: Arc::new(metrics),
            probers: Probers::new(health),
        }
    }

    /// The consistent-hash balancer's counters.
    pub(crate) fn balancer_metrics(&self) -> &BalancerMetrics {
        &self.metrics.balancer
    }

    /// The active health checkers.
    pub(crate) fn probers(&self) -> &Probers {
        &self.probers
    }

    /// The states of a cluster's endpoints, in the order given: existing ones where the
    /// registry has them, new ones otherwise; `ejection` becomes the cluster's setting
    /// (`None`: no ejections), the endpoints keeping their records and ejections. Called
    /// when a snapshot takes a new version of the cluster (once per cluster change, never
    /// per request).
    pub(crate) fn cluster(
        &self,
        cluster: &ClusterKey,
        addrs: impl ExactSizeIterator<Item = EndpointAddr>,
        ejection: Option<Ejection>,
    ) -> (Arc<ClusterHealth>, Vec<Arc<EndpointState>>) {
        let mut reg = self.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        let health = match reg.clusters.get(cluster).and_then(Weak::upgrade) {
            Some(h) => h,
            None => {
                let h = Arc::new(ClusterHealth {
                    ejected: AtomicU32::new(0),
                    size: AtomicU32::new(0),
                    in_flight: AtomicU32::new(0),
                    connecting: AtomicU32::new(0),
                    ejection: ArcSwapOption::empty(),
                    metrics: Arc::clone(&self.metrics),
                    retry_tokens: AtomicU32::new(RETRY_RESERVE * 100),
                    retry_refilled: AtomicU64::new(millis(Instant::now())),
                });
                reg.clusters.insert(cluster.clone(), Arc::downgrade(&h));
                h
            }
        };
        health.size.store(addrs.len() as u32, Ordering::Relaxed);
        if health.ejection.load().as_deref() != ejection.as_ref() {
            health.ejection.store(ejection.map(Arc::new));
        }
        let mut states = Vec::with_capacity(addrs.len());
        for addr in addrs {
            let key = (cluster.clone(), addr);
            let state = match reg.endpoints.get(&key).and_then(Weak::upgrade) {
                Some(s) => s,
                None => {
                    let s = Arc::new(EndpointState::new(Arc::clone(&health)));
                    reg.endpoints.insert(key, Arc::downgrade(&s));
                    s
                }
            };
            states.push(state);
        }
        reg.sweep();
        (health, states)
    }

    /// Live endpoint states.
    #[cfg(test)]
    fn len(&self) -> usize {
        let reg = self.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        reg.endpoints
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }
}

impl Registered {
    /// Drops entries whose states are gone, when the maps have doubled since the last
    /// sweep (amortized O(1) per insertion).
    fn sweep(&mut self) {
        let size = self.endpoints.len() + self.clusters.len();
        if size < self.sweep_at.max(64) {
            return;
        }
        self.endpoints.retain(|_, w| w.strong_count() > 0);
        self.clusters.retain(|_, w| w.strong_count() > 0);
        self.sweep_at = 2 * (self.endpoints.len() + self.clusters.len());
    }
}

/// Ejected endpoints forget nothing when the snapshot changes, so a departed endpoint's
/// ejection must also leave the cluster's count: done when the state is dropped.
impl Drop for EndpointState {
    fn drop(&mut self) {
        if self.ejected_until.load(Ordering::Relaxed) != 0 {
            self.cluster.ejected.fetch_sub(1, Ordering::Relaxed);
            self.cluster.metrics.ejected.dec();
        }
    }
}

/// The process-wide start instant of [`millis`] and [`nanos`].
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    // A minute back where the clock allows, so that times taken just before the first
    // call (a request's start) still fall after it.
    *EPOCH.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(60))
            .unwrap_or(now - Duration::from_millis(1))
    })
}

/// Milliseconds since a process-wide start instant (never 0 for a real time, so 0 can
/// mean "not ejected").
pub(crate) fn millis(now: Instant) -> u64 {
    now.saturating_duration_since(epoch()).as_millis() as u64 + 1
}

/// Nanoseconds since the same instant (never 0 for a real time).
pub(crate) fn nanos(now: Instant) -> u64 {
    now.saturating_duration_since(epoch()).as_nanos() as u64 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: Option<Ejection> = Some(Ejection {
        consecutive_5xx: 0,
        consecutive_gateway_errors: 5,
        consecutive_local_origin_failures: 0,
        base_ejection: Duration::from_millis(500),
        max_ejection: Duration::from_secs(2),
        max_ejected_percent: 50,
    });

    #[test]
    fn the_default_is_the_models() {
        assert_eq!(DEFAULT, Some(Ejection::default()));
    }

    #[test]
    fn retries_are_a_bounded_share_of_requests() {
        let reg = EndpointRegistry::default();
        let (health, _eps) = reg.cluster(&key("c"), [addr(1)].into_iter(), DEFAULT);
        // One instant throughout: no time-based refill.
        let now = Instant::now() + Duration::from_secs(1);
        assert!(health.retry(now), "the reserve, and one second's allowance");
        for _ in 1..RETRY_RESERVE {
            assert!(health.retry(now));
        }
        assert!(!health.retry(now));
        // Then one retry per 5 requests (20 %).
        let mut granted = 0;
        for _ in 0..1000 {
            health.deposit();
            granted += u32::from(health.retry(now));
        }
        assert_eq!(granted, 200);
        assert_eq!(reg.metrics.retries.get(), 210);
        // Deposits never bank more than the reserve.
        for _ in 0..10_000 {
            health.deposit();
        }
        let burst = (0..100).filter(|_| health.retry(now)).count();
        assert_eq!(burst, RETRY_RESERVE as usize);
        // Without requests, time adds RETRY_MIN_PER_SECOND a second.
        let later = now + Duration::from_millis(500);
        let granted = (0..100).filter(|_| health.retry(later)).count();
        assert_eq!(granted, RETRY_MIN_PER_SECOND as usize / 2);
    }

    fn addr(i: u8) -> EndpointAddr {
        EndpointAddr::Socket(([10, 0, 0, i], 80).into())
    }

    fn key(name: &str) -> ClusterKey {
        ClusterKey(name.into())
    }

    fn fail(s: &Arc<EndpointState>, n: u32) {
        for _ in 0..n {
            s.start().finish(Outcome::GatewayFailure);
        }
    }

    #[test]
    fn state_survives_a_new_version_of_its_cluster() {
        let reg = EndpointRegistry::default();
        let (_, a) = reg.cluster(&key("c"), [addr(1), addr(2)].into_iter(), DEFAULT);
        let (_, b) = reg.cluster(&key("c"), [addr(2), addr(3)].into_iter(), DEFAULT);
        assert!(Arc::ptr_eq(&a[1], &b[0]), "endpoint 2 keeps its state");
        assert!(!Arc::ptr_eq(&a[0], &b[1]));
        // The same address in another cluster is another endpoint.
        let (_, other) = reg.cluster(&key("d"), [addr(2)].into_iter(), DEFAULT);
        assert!(!Arc::ptr_eq(&other[0], &b[0]));
        drop((a, b, other));
        assert_eq!(
            reg.len(),
            0,
            "states go with the last snapshot holding them"
        );
    }

    #[test]
    fn consecutive_failures_eject_and_a_success_clears() {
        let reg = EndpointRegistry::default();
        let (health, eps) =
            reg.cluster(&key("c"), [addr(1), addr(2), addr(3)].into_iter(), DEFAULT);
        let now = Instant::now();
        fail(&eps[0], 4);
        assert!(!eps[0].is_ejected(now));
        eps[0].start().finish(Outcome::Success);
        fail(&eps[0], 4);
        assert!(
            !eps[0].is_ejected(Instant::now()),
            "a success resets the count"
        );
        fail(&eps[0], 1);
        assert!(eps[0].is_ejected(Instant::now()));
        assert_eq!(health.ejected(), 1);
        assert_eq!(reg.metrics.ejections.get(), 1);
        // It is over after the ejection's length.
        assert!(!eps[0].is_ejected(Instant::now() + Duration::from_millis(600)));
        // A success ends it and clears the count of ejections in a row.
        eps[0].start().finish(Outcome::Success);
        assert_eq!(health.ejected(), 0);
        assert_eq!(reg.metrics.ejected.get(), 0);
        // Neutral outcomes change nothing; the in-flight count always ends.
        let g = eps[1].start();
        assert_eq!(eps[1].in_flight(), 1);
        g.finish(Outcome::Neutral);
        drop(eps[1].start());
        assert_eq!(eps[1].in_flight(), 0);
    }

    #[test]
    fn ejections_in_a_row_grow_up_to_the_cap_and_probation_is_one_failure() {
        let reg = EndpointRegistry::default();
        let (_, eps) = reg.cluster(&key("c"), [addr(1), addr(2)].into_iter(), DEFAULT);
        let mut now = Instant::now();
        let mut lengths = Vec::new();
        let mut failures = Vec::new();
        for _ in 0..5 {
            let mut ejected = None;
            for n in 1..=5 {
                if let Some(l) = eps[0].report(Outcome::GatewayFailure, now) {
                    ejected = Some(l);
                    failures.push(n);
                    break;
                }
            }
            let l = ejected.expect("ejected");
            lengths.push(l.as_millis());
            now += l + Duration::from_millis(1);
            assert!(!eps[0].is_ejected(now));
        }
        assert_eq!(lengths, [500, 1000, 2000, 2000, 2000]);
        // After the first ejection, a single failure ejects again (probation).
        assert_eq!(failures, [5, 1, 1, 1, 1]);
        // A success ends the probation: five failures again.
        eps[0].report(Outcome::Success, now);
        for _ in 0..4 {
            assert_eq!(eps[0].report(Outcome::GatewayFailure, now), None);
        }
        assert_eq!(
            eps[0].report(Outcome::GatewayFailure, now),
            Some(Duration::from_millis(500))
        );
    }

    fn tuned(f: impl FnOnce(&mut Ejection)) -> Option<Ejection> {
        let mut e = Ejection::default();
        f(&mut e);
        Some(e)
    }

    #[test]
    fn each_run_ejects_at_its_own_threshold() {
        let reg = EndpointRegistry::default();
        let addrs = || (1..=4).map(addr);
        let now = Instant::now();
        // By default a 500 is an answer, not a failure of the endpoint: never ejected.
        let (_, eps) = reg.cluster(&key("c"), addrs(), DEFAULT);
        for _ in 0..20 {
            assert_eq!(eps[0].report(Outcome::ServerError, now), None);
        }
        // consecutive5xx: 1 ejects on the first 5xx of any kind.
        let one_5xx = tuned(|e| e.consecutive_5xx = 1);
        let (_, eps) = reg.cluster(&key("c"), addrs(), one_5xx);
        assert!(eps[0].report(Outcome::ServerError, now).is_some());
        assert!(eps[1].report(Outcome::GatewayFailure, now).is_some());
        // Gateway errors: 2 in a row; a 500 in between breaks the run.
        let two_gateway = tuned(|e| e.consecutive_gateway_errors = 2);
        let (_, eps) = reg.cluster(&key("g"), addrs(), two_gateway);
        assert_eq!(eps[0].report(Outcome::GatewayFailure, now), None);
        assert_eq!(eps[0].report(Outcome::ServerError, now), None);
        assert_eq!(eps[0].report(Outcome::GatewayFailure, now), None);
        assert!(eps[0].report(Outcome::ConnectFailure, now).is_some());
        // Connect failures alone: 3 in a row; an answer (even a 503) breaks the run.
        let three_connects = tuned(|e| {
            e.consecutive_gateway_errors = 0;
            e.consecutive_local_origin_failures = 3;
        });
        let (_, eps) = reg.cluster(&key("l"), addrs(), three_connects);
        for _ in 0..2 {
            assert_eq!(eps[0].report(Outcome::ConnectFailure, now), None);
        }
        assert_eq!(eps[0].report(Outcome::GatewayFailure, now), None);
        for _ in 0..2 {
            assert_eq!(eps[0].report(Outcome::ConnectFailure, now), None);
        }
        for _ in 0..10 {
            assert_eq!(eps[1].report(Outcome::GatewayFailure, now), None);
        }
        assert_eq!(
            eps[0].report(Outcome::ConnectFailure, now),
            Some(Duration::from_millis(500))
        );
        // Custom ejection times.
        let long = tuned(|e| {
            e.consecutive_gateway_errors = 1;
            e.base_ejection = Duration::from_secs(3);
            e.max_ejection = Duration::from_secs(5);
        });
        let (_, eps) = reg.cluster(&key("t"), addrs(), long);
        let l = eps[0].report(Outcome::GatewayFailure, now).unwrap();
        assert_eq!(l, Duration::from_secs(3));
        let later = now + l + Duration::from_millis(1);
        let l = eps[0].report(Outcome::GatewayFailure, later).unwrap();
        assert_eq!(l, Duration::from_secs(5), "doubled, capped");
    }

    #[test]
    fn detection_off_never_ejects_and_a_policy_edit_keeps_the_records() {
        let reg = EndpointRegistry::default();
        let addrs = || (1..=4).map(addr);
        let (_, eps) = reg.cluster(&key("c"), addrs(), None);
        fail(&eps[0], 50);
        assert!(!eps[0].is_ejected(Instant::now()));
        // The run is remembered: turned on, the next failure ejects.
        let (_, again) = reg.cluster(&key("c"), addrs(), DEFAULT);
        assert!(Arc::ptr_eq(&eps[0], &again[0]));
        fail(&again[0], 1);
        assert!(again[0].is_ejected(Instant::now()));
        // Another edit keeps the ejection.
        let (health, edited) = reg.cluster(&key("c"), addrs(), tuned(|e| e.consecutive_5xx = 1));
        assert!(edited[0].is_ejected(Instant::now()));
        assert_eq!(health.ejected(), 1);
        // All of a cluster may be ejected when the policy says 100 %.
        let all = tuned(|e| {
            e.consecutive_gateway_errors = 1;
            e.max_ejected_percent = 100;
        });
        let (health, eps) = reg.cluster(&key("all"), addrs(), all);
        for e in &eps {
            fail(e, 1);
        }
        assert_eq!(health.ejected(), 4);
    }

    #[test]
    fn at_most_half_a_cluster_is_ejected() {
        let reg = EndpointRegistry::default();
        let (health, eps) = reg.cluster(&key("c"), (1..=4).map(addr), DEFAULT);
        for e in &eps {
            fail(e, 5);
        }
        assert_eq!(health.ejected(), 2);
        assert_eq!(reg.metrics.ejections_refused.get(), 2);
        let now = Instant::now();
        assert_eq!(eps.iter().filter(|e| e.is_ejected(now)).count(), 2);
        // A single endpoint is never ejected (there is nowhere else to go).
        let (_, one) = reg.cluster(&key("one"), [addr(9)].into_iter(), DEFAULT);
        fail(&one[0], 10);
        assert!(!one[0].is_ejected(Instant::now()));
        // A removed ejected endpoint leaves the count.
        let kept: Vec<_> = eps.iter().filter(|e| !e.is_ejected(now)).cloned().collect();
        drop(eps);
        assert_eq!(health.ejected(), 0);
        drop(kept);
    }

    #[test]
    fn pending_requests_are_bounded_per_endpoint_and_cluster() {
        let reg = EndpointRegistry::default();
        let (health, eps) = reg.cluster(&key("c"), [addr(1), addr(2)].into_iter(), DEFAULT);
        let gate = |i: usize, ep: Option<u32>, cl: Option<u32>| ConnectGate {
            state: Arc::clone(&eps[i]),
            endpoint_max: ep,
            cluster_max: cl,
        };
        let a = gate(0, Some(1), Some(2)).enter().unwrap();
        assert_eq!(
            gate(0, Some(1), Some(2)).enter().unwrap_err(),
            Overflow::EndpointPending
        );
        let b = gate(1, Some(1), Some(2)).enter().unwrap();
        assert_eq!(
            gate(1, None, Some(2)).enter().unwrap_err(),
            Overflow::ClusterPending
        );
        assert_eq!(health.connecting.load(Ordering::Relaxed), 2);
        drop(a);
        let c = gate(0, Some(1), Some(2)).enter().unwrap();
        drop((b, c));
        assert_eq!(health.connecting.load(Ordering::Relaxed), 0);
        assert_eq!(eps[0].connecting.load(Ordering::Relaxed), 0);
        // In flight counts per cluster too.
        let f = eps[0].start();
        let g = eps[1].start();
        assert_eq!(health.in_flight(), 2);
        f.finish(Outcome::Success);
        drop(g);
        assert_eq!(health.in_flight(), 0);
    }
}
