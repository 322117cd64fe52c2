//! weir's configuration push protocol (`proto/weir/config/v1/config.proto`): a gRPC
//! bidirectional stream per data plane that carries one Gateway's IR, first as a complete
//! set, then as deltas, every resource versioned by its IR content hash.
//!
//! - [`convert`]: model ⇄ wire. Decoding rebuilds each resource through its constructor
//!   and checks that it hashes to the version it was sent with.
//! - [`Hub`] / [`Session`]: the controller's view of what each data plane holds; an update
//!   carries only the keys that changed for that data plane's Gateway (and the clusters and
//!   certificates they reference), one update in flight at a time, so a slow data plane
//!   gets the latest state rather than a backlog.
//! - [`XdsService`]: the gRPC service; [`client::run`]: the data-plane side, which
//!   reconnects with backoff and resumes by version.

#![warn(missing_docs)]

#[cfg(test)]
mod tests {
    #[test]
    fn a_controller_serves_four_versions_back_and_every_newer_one() {
        assert!(
            super::serves(3, 0),
            "v0 data planes (before versioning) are served"
        );
        assert!(
            super::serves(3, 2),
            "the last release's data planes are served"
        );
        assert!(super::serves(3, 3));
        assert!(
            super::serves(3, 7),
            "a newer data plane reads what it knows"
        );
        assert!(super::serves(4, 0), "four versions back is served");
        assert!(super::serves(6, 2));
        assert!(!super::serves(6, 1), "five versions back is refused");
        assert!(!super::serves(5, 0));
        assert!(
            !super::serves(super::PROTOCOL_VERSION, 1),
            "version-1 data planes are no longer served"
        );
        assert!(super::serves(super::PROTOCOL_VERSION, 2));
    }
}

pub mod client;
pub mod convert;
mod hub;
mod server;

pub use crate::hub::{Hub, Refused, Session};

/// The push protocol version this build speaks, announced in `Subscribe` and `Update`.
/// Raise it when the message set gains something an older peer would misread or lose;
/// ARCHITECTURE.md ("Push protocol versions") has the rule. 1: the version fields
/// themselves (0 is the message set before them) and `Policy.jwt_auth`; 2: policies on a
/// Service or Backend (`PolicyTarget.backend`, `Policy.health_check`,
/// `Policy.circuit_breaker`); 3: policy fields of this release (see
/// `weir_model::Policy::as_version_2` for the list), which reach older data planes
/// without them, or closed where they guard access; 4: TLS towards clients and backends
/// (client certificate validation on listeners, upstream TLS), withheld from or adapted
/// for older data planes by `convert::sent_to_version` and `convert::for_version`; 5:
/// per-Gateway, per-route and per-rule access-log and trace settings (`Policy.access_log`,
/// `Policy.tracing`), which reach older data planes without them
/// (`weir_model::Policy::as_version_4`). Version 0 is no longer served from here on; 6:
/// policies on a Gateway listener or a ListenerSet (`PolicyTarget.listener`,
/// `PolicyTarget.listener_set`, `Listener.sections`), withheld from older data planes
/// with the listeners they cover (`convert::withheld`), and settings inside fields older
/// releases know, the send timeout (`Timeouts.backend_send_ns`) and a generated affinity
/// cookie's `SameSite` and `Secure`, which reach older data planes without them
/// (`weir_model::Policy::as_version_5`). Version 1 is no longer served.
pub const PROTOCOL_VERSION: u32 = 6;

/// Whether a controller speaking version `ours` serves a data plane announcing `peer`: a
/// data plane up to four versions older (the last releases' message sets, adapted by
/// `convert::for_version` and `convert::sent_to_version`) or newer (it reads what it
/// knows of ours and ignores the rest) is served; an older one is refused with a message
/// saying so, rather than fed messages it would misread.
pub fn serves(ours: u32, peer: u32) -> bool {
    peer.saturating_add(4) >= ours
}
pub use crate::server::{AllowAll, Authorize, ServerMetrics, XdsService};

/// The message set of push protocol version 0 (the release before versions), frozen in
/// `tests/proto/v0`: tests speak it as a data plane of that release would.
#[cfg(feature = "testing")]
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod v0 {
    include!(concat!(env!("OUT_DIR"), "/v0/weir.config.v1.rs"));
}

/// The generated protocol types, client and server.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("weir.config.v1");
}
