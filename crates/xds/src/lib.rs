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

pub mod client;
pub mod convert;
mod hub;
mod server;

pub use crate::hub::{Hub, Refused, Session};
pub use crate::server::{AllowAll, Authorize, ServerMetrics, XdsService};

/// The generated protocol types, client and server.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("weir.config.v1");
}
