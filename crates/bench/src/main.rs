//! `weir-bench`: benchmarks that drive the real weir binary.
//!
//! `weir-bench propagation` measures how fast configuration changes reach the data plane
//! when weir serves many TLS domains from a directory of manifests.

mod certs;
mod client;
mod manifests;
mod metrics;
mod ops;
mod plot;
mod procs;
mod progress;
mod propagation;
mod report;
mod side;
mod stats;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::ops::Pacing;
use crate::propagation::{Layout, Options};

/// The workspace root, where the default paths are anchored.
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

#[derive(Parser)]
#[command(
    name = "weir-bench",
    version,
    about = "Benchmarks that drive the real weir binary"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Time how long adds, modifications and removals of TLS domains take to be served, with
    /// N domains live, while a side client checks that untouched domains never fail.
    Propagation(PropagationArgs),
}

#[derive(clap::Args)]
struct PropagationArgs {
    /// Number of domains d<i>.bench.test served from the start, each with its own
    /// certificate and manifest file.
    #[arg(long, default_value_t = 20_000)]
    domains: usize,
    /// Number of timed changes per operation (K adds, then K modifications, then K
    /// removals, one at a time). --domains must be at least 2 × K + 1.
    #[arg(long, default_value_t = 200)]
    changes: usize,
    /// Manifest layout. `ingress`: one file per domain holding its Ingress and TLS Secret,
    /// plus one shared Backend file.
    #[arg(long, value_enum, default_value_t = Layout::Ingress)]
    layout: Layout,
    /// The weir binary (also runs `weir echo`) [default: <workspace>/target/release/weir].
    #[arg(long)]
    weir: Option<PathBuf>,
    /// Directory for the JSON report, the PNG plot and the weir and echo logs
    /// [default: <workspace>/target/weir-bench/results].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Certificate cache (bench CA and one key + certificate per domain index, reused by
    /// later runs of any size) [default: <workspace>/target/weir-bench/certs].
    #[arg(long)]
    cache: Option<PathBuf>,
    /// Pause between two polls of a change that has not shown yet, in microseconds.
    #[arg(long, default_value_t = 1000)]
    poll_interval_us: u64,
    /// Longest wait for one change to show, in milliseconds; longer counts as a failure.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Side-client workers looping over untouched domains on kept HTTPS connections.
    #[arg(long, default_value_t = 4)]
    side_concurrency: usize,
    /// Pause of each side-client worker between two requests, in microseconds (0: as fast
    /// as possible; note the side load competes with weir for the same cores).
    #[arg(long, default_value_t = 1000)]
    side_pause_us: u64,
    /// Pause between writing a change's temporary file and the timed rename, in
    /// milliseconds (keeps the staging write's watcher events out of the timed window).
    #[arg(long, default_value_t = 20)]
    settle_ms: u64,
    /// Longest wait from spawning weir to /ready and to all domains answering, in seconds.
    #[arg(long, default_value_t = 600)]
    startup_timeout_s: u64,
    /// Idle window after startup (no changes, no side client) over which weir's CPU use is
    /// measured, in milliseconds (0: skip).
    #[arg(long, default_value_t = 2000)]
    idle_ms: u64,
    /// Concurrent HTTPS clients checking that every domain answers after startup.
    #[arg(long, default_value_t = 32)]
    check_concurrency: usize,
}

fn workspace_path(rel: &str) -> PathBuf {
    let root = Path::new(WORKSPACE);
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    root.join(rel)
}

impl PropagationArgs {
    fn options(self) -> Options {
        let bench_dir = workspace_path("target/weir-bench");
        Options {
            domains: self.domains,
            changes: self.changes,
            layout: self.layout,
            weir: self
                .weir
                .unwrap_or_else(|| workspace_path("target/release/weir")),
            out: self.out.unwrap_or_else(|| bench_dir.join("results")),
            cache: self.cache.unwrap_or_else(|| bench_dir.join("certs")),
            work: bench_dir.join("work"),
            pacing: Pacing {
                poll_interval: Duration::from_micros(self.poll_interval_us),
                timeout: Duration::from_millis(self.timeout_ms),
                settle: Duration::from_millis(self.settle_ms),
            },
            startup_timeout: Duration::from_secs(self.startup_timeout_s),
            idle: Duration::from_millis(self.idle_ms),
            side_concurrency: self.side_concurrency,
            side_pause: Duration::from_micros(self.side_pause_us),
            check_concurrency: self.check_concurrency.max(1),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weir-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = match cli.command {
        Command::Propagation(args) => {
            let opts = args.options();
            runtime.block_on(async {
                // Ctrl-C drops the run, and with it the guards that kill weir and echo.
                let result = tokio::select! {
                    r = propagation::run(&opts) => r,
                    _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
                };
                match result {
                    Ok((report, outputs)) => {
                        println!("{}", report.markdown());
                        println!("JSON:    {}", outputs.json.display());
                        if let Some(png) = &outputs.png {
                            println!("plot:    {}", png.display());
                        }
                        println!("weir log: {}", outputs.weir_log.display());
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("weir-bench: {e:#}");
                        ExitCode::FAILURE
                    }
                }
            })
        }
    };
    runtime.shutdown_timeout(Duration::from_secs(2));
    code
}
