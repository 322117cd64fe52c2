//! Log setup: human-readable by default, JSON on request; `RUST_LOG` filters.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber (once; later calls are ignored, which tests rely on).
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
