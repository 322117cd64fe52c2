//! Circuit breaking (admission): the limits a Service or Backend policy sets on the
//! requests and connections of each of its clusters and each endpoint. A request over a
//! limit is answered at once (503, `weir-circuit-open: <reason>`; UNAVAILABLE to gRPC)
//! by [`crate::error::error_response`], never queued.
//!
//! What is counted is what weir already counts per request ([`crate::endpoints`]): the
//! requests in flight (from the choice of an endpoint to the response head; for L4, a
//! spliced connection for as long as it lasts) of each endpoint, and their sum per
//! cluster. So:
//! - `maxRequests`: requests in flight over the cluster / to one endpoint.
//! - `maxConnections`: upstream connections. An HTTP/1.1 request in flight holds one
//!   connection of its own, and an L4 connection is one upstream connection, so the
//!   limit bounds those in flight; an h2c cluster multiplexes one connection per
//!   endpoint and is not bounded by it.
//! - `maxPendingRequests`: HTTP/1.1 requests opening an upstream connection (no idle
//!   one was ready): the pool never makes a request wait for another's connection, so a
//!   request is pending while its connect and handshake last, and a slow or
//!   unresponsive endpoint gathers them; over the limit, the request is refused instead
//!   of adding one more connect.
//!
//! An endpoint at its own limit is passed over for another of the cluster that is not
//! (found once the balancer's two picks are at their limits); only when none is left is
//! the request refused.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use weir_model::{CircuitBreaker, Limits, UpstreamProtocol};

/// Which limit refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Overflow {
    /// The cluster's requests in flight.
    ClusterRequests,
    /// The cluster's connections.
    ClusterConnections,
    /// Every endpoint's requests in flight.
    EndpointRequests,
    /// Every endpoint's connections.
    EndpointConnections,
    /// The cluster's requests opening a connection.
    ClusterPending,
    /// The endpoint's requests opening a connection.
    EndpointPending,
}

impl Overflow {
    /// All of them (metric label values).
    pub(crate) const ALL: [Overflow; 6] = [
        Overflow::ClusterRequests,
        Overflow::ClusterConnections,
        Overflow::EndpointRequests,
        Overflow::EndpointConnections,
        Overflow::ClusterPending,
        Overflow::EndpointPending,
    ];

    /// The name in the metric label and the `weir-circuit-open` header.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Overflow::ClusterRequests => "cluster_max_requests",
            Overflow::ClusterConnections => "cluster_max_connections",
            Overflow::EndpointRequests => "endpoint_max_requests",
            Overflow::EndpointConnections => "endpoint_max_connections",
            Overflow::ClusterPending => "cluster_max_pending_requests",
            Overflow::EndpointPending => "endpoint_max_pending_requests",
        }
    }

    /// The body of the 503 (and the gRPC message).
    pub(crate) fn message(self) -> &'static str {
        match self {
            Overflow::ClusterRequests => "circuit open: cluster max requests\n",
            Overflow::ClusterConnections => "circuit open: cluster max connections\n",
            Overflow::EndpointRequests => "circuit open: endpoint max requests\n",
            Overflow::EndpointConnections => "circuit open: endpoint max connections\n",
            Overflow::ClusterPending => "circuit open: cluster max pending requests\n",
            Overflow::EndpointPending => "circuit open: endpoint max pending requests\n",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabel {
    reason: &'static str,
}

/// `weir_upstream_circuit_open_total{reason}` (six label values).
#[derive(Clone, Debug, Default)]
pub(crate) struct BreakerMetrics {
    pub(crate) family: Family<ReasonLabel, Counter>,
}

impl BreakerMetrics {
    /// Creates the counter of `why` (at 0).
    pub(crate) fn touch(&self, why: Overflow) {
        let _ = self
            .family
            .get_or_create(&ReasonLabel { reason: why.name() });
    }

    /// Counts one refusal. Refusals are the overload path, so the family's lock is
    /// acceptable here (never taken by an admitted request).
    pub(crate) fn count(&self, why: Overflow) {
        self.family
            .get_or_create(&ReasonLabel { reason: why.name() })
            .inc();
    }
}

/// The bound `limits` set on what is in flight (requests or connections); `None`:
/// unbounded.
fn in_flight_bound(limits: &Limits, protocol: UpstreamProtocol) -> [(Option<u32>, bool); 2] {
    let connections = match protocol {
        // One connection per request in flight.
        UpstreamProtocol::Http1 => limits.max_connections,
        UpstreamProtocol::H2c => None,
    };
    [(limits.max_requests, false), (connections, true)]
}

/// Whether `in_flight` more requests fit the cluster's limits: `Err` names the first
/// limit that does not.
pub(crate) fn admit_cluster(
    b: &CircuitBreaker,
    protocol: UpstreamProtocol,
    in_flight: u32,
) -> Result<(), Overflow> {
    for (bound, connections) in in_flight_bound(&b.cluster, protocol) {
        if bound.is_some_and(|max| in_flight >= max) {
            return Err(if connections {
                Overflow::ClusterConnections
            } else {
                Overflow::ClusterRequests
            });
        }
    }
    Ok(())
}

/// As [`admit_cluster`] for one endpoint's limits.
pub(crate) fn admit_endpoint(
    b: &CircuitBreaker,
    protocol: UpstreamProtocol,
    in_flight: u32,
) -> Result<(), Overflow> {
    for (bound, connections) in in_flight_bound(&b.endpoint, protocol) {
        if bound.is_some_and(|max| in_flight >= max) {
            return Err(if connections {
                Overflow::EndpointConnections
            } else {
                Overflow::EndpointRequests
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_bound_what_is_in_flight() {
        let b = CircuitBreaker {
            cluster: Limits {
                max_connections: Some(4),
                max_pending_requests: Some(2),
                max_requests: Some(10),
            },
            endpoint: Limits {
                max_requests: Some(3),
                ..Limits::default()
            },
        };
        let h1 = UpstreamProtocol::Http1;
        assert_eq!(admit_cluster(&b, h1, 3), Ok(()));
        assert_eq!(
            admit_cluster(&b, h1, 4),
            Err(Overflow::ClusterConnections),
            "one connection per request in flight"
        );
        // h2c multiplexes: only maxRequests bounds it.
        assert_eq!(admit_cluster(&b, UpstreamProtocol::H2c, 9), Ok(()));
        assert_eq!(
            admit_cluster(&b, UpstreamProtocol::H2c, 10),
            Err(Overflow::ClusterRequests)
        );
        assert_eq!(admit_endpoint(&b, h1, 2), Ok(()));
        assert_eq!(admit_endpoint(&b, h1, 3), Err(Overflow::EndpointRequests));
        assert_eq!(
            admit_endpoint(&CircuitBreaker::default(), h1, u32::MAX - 1),
            Ok(())
        );
    }
}
