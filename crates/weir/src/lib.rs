//! The `weir` binary's library: wiring of provider → translator → data plane, the
//! `check`, `migrate` and `echo` commands. `main.rs` only parses the command line.

pub mod check;
pub mod controller;
pub mod echo;
pub mod logging;
pub mod migrate;
pub mod pipeline;
pub mod propagation;
mod provisioning;
pub mod proxy;
pub mod report;
pub mod standalone;
