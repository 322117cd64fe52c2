//! Data-plane metrics (prometheus-client).
//!
//! Every labelled handle the request path touches is resolved once, when an accept loop
//! starts ([`Metrics::listener`]): `Family::get_or_create` takes a lock, so it is never
//! called per request.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::endpoints::OutlierMetrics;
use crate::ext_auth::ExtAuthMetrics;
use crate::global_ratelimit::GlobalRateLimitMetrics;
use crate::health::HealthMetrics;
use crate::l4::L4Metrics;
use crate::l4::udp::UdpMetrics;
use crate::ratelimit::RateLimitMetrics;
use crate::snapshot::SnapshotStats;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    gateway: String,
    listener: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    gateway: String,
    listener: String,
    class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn request_histogram() -> Histogram {
    // 100 µs .. ~26 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 19))
}

/// All data-plane metrics, registered once per [`crate::DataPlane`].
#[derive(Clone)]
pub(crate) struct Metrics {
    requests: Family<RequestLabels, Counter>,
    request_duration: HistogramFamily<ListenerLabels>,
    /// Open upstream connections.
    pub(crate) upstream_connections: Gauge,
    /// Failed upstream connection attempts.
    pub(crate) upstream_connect_errors: Counter,
    /// Open downstream (client) connections.
    pub(crate) downstream_connections: Gauge,
    refused: Family<ReasonLabels, Counter>,
    timeouts: Family<StateLabels, Counter>,
    accept_errors: Counter,
    /// Applied batches.
    pub(crate) config_applies: Counter,
    /// Resources rejected by applies.
    pub(crate) config_rejected: Counter,
    /// Time to apply one batch, in seconds.
    pub(crate) config_apply_duration: Histogram,
    /// Version of the live snapshot.
    pub(crate) config_version: Gauge,
    resources: Family<KindLabels, Gauge>,
    /// Passive outlier detection (`crate::endpoints`). Unlabelled: per-endpoint labels
    /// would grow with every pod ever seen; the admin dump shows per-endpoint state.
    pub(crate) outlier: OutlierMetrics,
    /// Active health checks.
    pub(crate) health: HealthMetrics,
    /// Local rate limits (`crate::ratelimit`).
    pub(crate) ratelimit: RateLimitMetrics,
    /// External authorization (`crate::ext_auth`).
    pub(crate) ext_auth: ExtAuthMetrics,
    /// Remote JWK Sets (`crate::jwks`).
    pub(crate) jwks: crate::jwks::JwksMetrics,
    /// Global rate limits (`crate::global_ratelimit`).
    pub(crate) global_ratelimit: GlobalRateLimitMetrics,
    l4_connections: Family<ListenerLabels, Counter>,
    l4_unrouted: Family<ListenerLabels, Counter>,
    l4_received: Family<ListenerLabels, Counter>,
    l4_sent: Family<ListenerLabels, Counter>,
    l4_connect_errors: Family<ListenerLabels, Counter>,
    udp_sessions: Family<ListenerLabels, Counter>,
    udp_open: Family<ListenerLabels, Gauge>,
    udp_refused: Family<ListenerLabels, Counter>,
    udp_received: Family<ListenerLabels, Counter>,
    udp_sent: Family<ListenerLabels, Counter>,
    udp_unrouted: Family<ListenerLabels, Counter>,
    udp_dropped: Family<ListenerLabels, Counter>,
    client_certs_rejected: Family<ListenerLabels, Counter>,
}

/// Per-listener handles, resolved when an accept loop starts.
#[derive(Clone)]
pub(crate) struct ListenerMetrics {
    /// Request counters by status class: 2xx (and 1xx), 3xx, 4xx, 5xx.
    classes: [Counter; 4],
    duration: Histogram,
    /// Open downstream connections (shared, unlabelled).
    pub(crate) downstream_connections: Gauge,
    /// Refusals, timeouts and accept failures (shared, one pointer per clone).
    pub(crate) bounds: Arc<BoundsMetrics>,
}

/// What the connection limits and timeouts count (`crate::limits`, `crate::idle`).
pub(crate) struct BoundsMetrics {
    /// Connections refused because the listener holds `max_connections`.
    pub(crate) refused_listener: Counter,
    /// Connections refused because their client holds `max_connections_per_client`.
    pub(crate) refused_client: Counter,
    /// Connections closed before their first byte or TLS handshake completed.
    pub(crate) timeout_handshake: Counter,
    /// HTTP/1.1 connections closed with a request head that did not end in time.
    pub(crate) timeout_request_header: Counter,
    /// Connections closed (HTTP/2: sent a GOAWAY) for having no request in flight.
    pub(crate) timeout_idle: Counter,
    /// Failed `accept` calls (e.g. out of file descriptors).
    pub(crate) accept_errors: Counter,
}

impl ListenerMetrics {
    /// Records one finished request (status and time to response headers).
    pub(crate) fn record(&self, status: u16, seconds: f64) {
        let i = match status {
            0..=299 => 0,
            300..=399 => 1,
            400..=499 => 2,
            _ => 3,
        };
        self.classes[i].inc();
        self.duration.observe(seconds);
    }
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub(crate) fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            requests: Family::default(),
            request_duration: Family::new_with_constructor(request_histogram),
            upstream_connections: Gauge::default(),
            upstream_connect_errors: Counter::default(),
            downstream_connections: Gauge::default(),
            refused: Family::default(),
            timeouts: Family::default(),
            accept_errors: Counter::default(),
            config_applies: Counter::default(),
            config_rejected: Counter::default(),
            // 10 µs .. ~5 s
            config_apply_duration: Histogram::new(exponential_buckets(0.00001, 2.0, 20)),
            config_version: Gauge::default(),
            resources: Family::default(),
            outlier: OutlierMetrics::default(),
            health: HealthMetrics::default(),
            ratelimit: RateLimitMetrics::default(),
            ext_auth: ExtAuthMetrics::default(),
            jwks: crate::jwks::JwksMetrics::default(),
            global_ratelimit: GlobalRateLimitMetrics::default(),
            l4_connections: Family::default(),
            l4_unrouted: Family::default(),
            l4_received: Family::default(),
            l4_sent: Family::default(),
            l4_connect_errors: Family::default(),
            udp_sessions: Family::default(),
            udp_open: Family::default(),
            udp_refused: Family::default(),
            udp_received: Family::default(),
            udp_sent: Family::default(),
            udp_unrouted: Family::default(),
            udp_dropped: Family::default(),
            client_certs_rejected: Family::default(),
        };
        registry.register(
            "weir_client_certificates_rejected",
            "Client certificates that failed verification against a listener's CAs \
             (refused handshakes, or served anyway with AllowInsecureFallback)",
            m.client_certs_rejected.clone(),
        );
        registry.register(
            "weir_requests",
            "Requests answered, by gateway, listener and status class",
            m.requests.clone(),
        );
        registry.register(
            "weir_request_duration_seconds",
            "Time from receiving a request to sending its response headers",
            m.request_duration.clone(),
        );
        registry.register(
            "weir_upstream_connections",
            "Open connections to upstream endpoints",
            m.upstream_connections.clone(),
        );
        registry.register(
            "weir_upstream_connect_errors",
            "Failed connection attempts to upstream endpoints",
            m.upstream_connect_errors.clone(),
        );
        registry.register(
            "weir_downstream_connections",
            "Open client connections",
            m.downstream_connections.clone(),
        );
        registry.register(
            "weir_downstream_connections_refused",
            "Client connections closed at accept by a connection limit, by reason \
             (listener_limit, client_limit)",
            m.refused.clone(),
        );
        registry.register(
            "weir_downstream_timeouts",
            "Client connections closed by a connection-state timeout, by state \
             (handshake, request_header, idle)",
            m.timeouts.clone(),
        );
        registry.register(
            "weir_downstream_accept_errors",
            "Failed accepts on listening sockets (e.g. out of file descriptors)",
            m.accept_errors.clone(),
        );
        registry.register(
            "weir_config_applies",
            "Configuration batches applied",
            m.config_applies.clone(),
        );
        registry.register(
            "weir_config_rejected_resources",
            "Resources rejected while applying configuration",
            m.config_rejected.clone(),
        );
        registry.register(
            "weir_config_apply_duration_seconds",
            "Time to apply one configuration batch and publish its snapshot",
            m.config_apply_duration.clone(),
        );
        registry.register(
            "weir_config_version",
            "Version of the live configuration snapshot",
            m.config_version.clone(),
        );
        for why in crate::breaker::Overflow::ALL {
            // Every reason shows, at 0 until a refusal.
            m.outlier.breaker.touch(why);
        }
        registry.register(
            "weir_upstream_circuit_open",
            "Requests (and L4 connections) refused at once by a circuit breaker, by the \
             limit that refused them",
            m.outlier.breaker.family.clone(),
        );
        registry.register(
            "weir_upstream_health_checks",
            "Active health probes done, by result (passed, failed)",
            m.health.checks.clone(),
        );
        registry.register(
            "weir_upstream_unhealthy_endpoints",
            "Endpoints (address and probe settings) whose active health checks failed",
            m.health.unhealthy.clone(),
        );
        registry.register(
            "weir_upstream_health_probers",
            "Active health probers running: one per endpoint address and probe settings, \
             however many routes use the endpoint",
            m.health.probers.clone(),
        );
        registry.register(
            "weir_upstream_ejections",
            "Endpoints ejected by outlier detection after consecutive gateway failures",
            m.outlier.ejections.clone(),
        );
        registry.register(
            "weir_upstream_retries",
            "Retries sent after failed attempts (HTTPRoute retry)",
            m.outlier.retries.clone(),
        );
        registry.register(
            "weir_upstream_retry_budget_exhausted",
            "Retries not sent because the cluster's retry budget (20 % of its retryable \
             requests plus 10 a second) was spent",
            m.outlier.retry_budget_exhausted.clone(),
        );
        registry.register(
            "weir_upstream_ejected_endpoints",
            "Endpoints ejected, or back from an ejection and not yet answering",
            m.outlier.ejected.clone(),
        );
        registry.register(
            "weir_upstream_hash_fallthrough",
            "Requests of a ConsistentHash balancer whose key's endpoint was ejected or \
             unhealthy, sent to the next endpoint on the ring",
            m.outlier.balancer.hash_fallthrough.clone(),
        );
        registry.register(
            "weir_upstream_hash_cookies",
            "Cookies generated by a ConsistentHash balancer for requests without one",
            m.outlier.balancer.hash_cookies.clone(),
        );
        registry.register(
            "weir_upstream_ejections_refused",
            "Ejections not made because the cluster had its maximum share ejected",
            m.outlier.ejections_refused.clone(),
        );
        registry.register(
            "weir_ratelimit_limited",
            "Requests refused (429) by a local rate limit",
            m.ratelimit.limited.clone(),
        );
        registry.register(
            "weir_ratelimit_untracked",
            "Requests let through a local rate limit without a bucket because every \
             bucket of their shard was in use (the limiter's memory bound)",
            m.ratelimit.untracked.clone(),
        );
        m.global_ratelimit.register(registry);
        registry.register(
            "weir_ext_auth_allowed",
            "Calls to external authorization services answered 2xx (the request passed)",
            m.ext_auth.allowed.clone(),
        );
        registry.register(
            "weir_ext_auth_denied",
            "Calls to external authorization services answered with a refusal",
            m.ext_auth.denied.clone(),
        );
        registry.register(
            "weir_ext_auth_errors",
            "Calls to external authorization services that failed (timeout, connection \
             error, 5xx)",
            m.ext_auth.errors.clone(),
        );
        registry.register(
            "weir_ext_auth_cache_hits",
            "Requests decided by a remembered answer of an external authorization service",
            m.ext_auth.cache_hits.clone(),
        );
        registry.register(
            "weir_jwks_fetches",
            "Fetches of remote JWK Sets that succeeded",
            m.jwks.fetches.clone(),
        );
        registry.register(
            "weir_jwks_fetch_failures",
            "Fetches of remote JWK Sets that failed (the last good keys are kept)",
            m.jwks.failures.clone(),
        );
        registry.register(
            "weir_jwks_keys",
            "Keys held from remote JWK Sets",
            m.jwks.keys.clone(),
        );
        registry.register(
            "weir_config_resources",
            "Resources in the live configuration snapshot, by kind",
            m.resources.clone(),
        );
        registry.register(
            "weir_l4_connections",
            "TLS passthrough and TCP connections spliced to an upstream, by gateway and listener",
            m.l4_connections.clone(),
        );
        registry.register(
            "weir_l4_unrouted_connections",
            "TLS passthrough and TCP connections closed without a route, backend or endpoint",
            m.l4_unrouted.clone(),
        );
        registry.register(
            "weir_l4_received_bytes",
            "Bytes received from TLS passthrough, TCP and UDP clients (sent upstream)",
            m.l4_received.clone(),
        );
        registry.register(
            "weir_l4_sent_bytes",
            "Bytes sent to TLS passthrough, TCP and UDP clients (received from upstreams)",
            m.l4_sent.clone(),
        );
        registry.register(
            "weir_l4_connect_errors",
            "Failed connection attempts to the upstreams of TLS passthrough and TCP routes",
            m.l4_connect_errors.clone(),
        );
        let udp = [
            (
                "weir_l4_udp_sessions",
                "UDP sessions started (one per client address until idle)",
                &m.udp_sessions,
            ),
            (
                "weir_l4_udp_sessions_refused",
                "Datagrams dropped because starting their session would pass the listener's connection limits",
                &m.udp_refused,
            ),
            (
                "weir_l4_udp_datagrams_received",
                "Datagrams received from UDP clients",
                &m.udp_received,
            ),
            (
                "weir_l4_udp_datagrams_sent",
                "Datagrams sent to UDP clients (replies of their session's endpoint)",
                &m.udp_sent,
            ),
            (
                "weir_l4_udp_unrouted_datagrams",
                "UDP datagrams dropped without a route, backend or endpoint for a new session",
                &m.udp_unrouted,
            ),
            (
                "weir_l4_udp_dropped_datagrams",
                "UDP datagrams dropped because a socket could not take them (buffer full, error)",
                &m.udp_dropped,
            ),
        ];
        for (name, help, family) in udp {
            registry.register(name, help, family.clone());
        }
        registry.register(
            "weir_l4_udp_open_sessions",
            "UDP sessions open now",
            m.udp_open.clone(),
        );
        m
    }

    /// The counter of client certificates a listener rejected (resolved when its runtime
    /// is built, only for listeners that validate them).
    pub(crate) fn client_certs_rejected(&self, gateway: &str, listener: &str) -> Counter {
        self.client_certs_rejected
            .get_or_create_owned(&ListenerLabels {
                gateway: gateway.to_owned(),
                listener: listener.to_owned(),
            })
    }

    /// Resolves the UDP handles of one listener (takes the family locks; call once per
    /// listener change, only for UDP listeners).
    pub(crate) fn udp_listener(&self, gateway: &str, listener: &str) -> UdpMetrics {
        let labels = ListenerLabels {
            gateway: gateway.to_owned(),
            listener: listener.to_owned(),
        };
        UdpMetrics {
            sessions: self.udp_sessions.get_or_create_owned(&labels),
            open: self.udp_open.get_or_create_owned(&labels),
            refused: self.udp_refused.get_or_create_owned(&labels),
            received: self.udp_received.get_or_create_owned(&labels),
            sent: self.udp_sent.get_or_create_owned(&labels),
            unrouted: self.udp_unrouted.get_or_create_owned(&labels),
            dropped: self.udp_dropped.get_or_create_owned(&labels),
            received_bytes: self.l4_received.get_or_create_owned(&labels),
            sent_bytes: self.l4_sent.get_or_create_owned(&labels),
        }
    }

    /// Resolves the L4 handles of one listener (takes the family locks; call once per
    /// loop, only for listeners that may splice).
    pub(crate) fn l4_listener(&self, gateway: &str, listener: &str) -> L4Metrics {
        let labels = ListenerLabels {
            gateway: gateway.to_owned(),
            listener: listener.to_owned(),
        };
        L4Metrics {
            connections: self.l4_connections.get_or_create_owned(&labels),
            unrouted: self.l4_unrouted.get_or_create_owned(&labels),
            received_bytes: self.l4_received.get_or_create_owned(&labels),
            sent_bytes: self.l4_sent.get_or_create_owned(&labels),
            connect_errors: self.l4_connect_errors.get_or_create_owned(&labels),
        }
    }

    /// Resolves the handles of one listener (takes the family locks; call once per loop).
    pub(crate) fn listener(&self, gateway: &str, listener: &str) -> ListenerMetrics {
        let class = |class: &'static str| {
            self.requests.get_or_create_owned(&RequestLabels {
                gateway: gateway.to_owned(),
                listener: listener.to_owned(),
                class,
            })
        };
        ListenerMetrics {
            classes: [class("2xx"), class("3xx"), class("4xx"), class("5xx")],
            duration: self.request_duration.get_or_create_owned(&ListenerLabels {
                gateway: gateway.to_owned(),
                listener: listener.to_owned(),
            }),
            downstream_connections: self.downstream_connections.clone(),
            bounds: Arc::new(self.bounds()),
        }
    }

    fn bounds(&self) -> BoundsMetrics {
        let refused = |reason| self.refused.get_or_create_owned(&ReasonLabels { reason });
        let timeout = |state| self.timeouts.get_or_create_owned(&StateLabels { state });
        BoundsMetrics {
            refused_listener: refused("listener_limit"),
            refused_client: refused("client_limit"),
            timeout_handshake: timeout("handshake"),
            timeout_request_header: timeout("request_header"),
            timeout_idle: timeout("idle"),
            accept_errors: self.accept_errors.clone(),
        }
    }

    /// Publishes the resource counts of the live snapshot.
    pub(crate) fn record_stats(&self, stats: &SnapshotStats) {
        let set = |kind: &'static str, n: usize| {
            self.resources
                .get_or_create(&KindLabels { kind })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        };
        set("listener", stats.listeners);
        set("virtual_host", stats.virtual_hosts);
        set("cluster", stats.clusters);
        set("certificate", stats.certificates);
        set("sni", stats.sni_entries);
        set("l4_route", stats.l4_routes);
        set("policy", stats.policies);
    }
}
