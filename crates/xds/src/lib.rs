//! weir's configuration push protocol (`proto/weir/config/v1/config.proto`): a gRPC
//! bidirectional stream per data plane that carries one Gateway's IR, first as a complete
//! set, then as deltas, every resource versioned by its IR content hash.
//!
//! - [`convert`]: model ⇄ wire. Decoding rebuilds each resource through its constructor
//!   and checks that it hashes to the version it was sent with.

#![warn(missing_docs)]

pub mod convert;
mod hub;

pub use crate::hub::{Hub, Refused, Session};

/// The generated protocol types, client and server.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("weir.config.v1");
}
