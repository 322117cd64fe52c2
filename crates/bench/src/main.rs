//! `weir-bench`: benchmarks that drive the real weir binary.
//!
//! `weir-bench propagation` measures how fast configuration changes reach the data plane
//! when weir serves many TLS domains from a directory of manifests. `weir-bench traffic`
//! measures the data plane's throughput, latency and CPU cost against nginx and HAProxy.

mod certs;
mod client;
mod failover;
mod k8s;
mod manifests;
mod metrics;
mod ops;
mod plot;
mod procs;
mod progress;
mod propagation;
mod ratelimit;
mod report;
mod scale;
mod side;
mod soak;
mod stats;
mod streams;
mod traffic;

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
    /// Data-plane throughput, latency and CPU per request of weir, nginx and HAProxy,
    /// configured alike, each pinned to CPU 0 with the load on CPU 1.
    Traffic(TrafficArgs),
    /// Kubernetes mode: time HTTPRoute create → first 200 (and delete → 404) through
    /// `weir controller` with N routes attached, against a real kube-apiserver.
    K8s(K8sArgs),
    /// Backend failover: one Service of 4 endpoints, one flapping between healthy, 503s
    /// and refused connections, behind N routes; counts what clients see of its failures.
    Failover(FailoverArgs),
    /// Soak: configuration changes at a fixed rate for a long time, with traffic on every
    /// protocol (HTTP/1.1, h2c, HTTPS, TLS passthrough, TCP, UDP); counts failed requests
    /// and samples weir's RSS and open file descriptors.
    Soak(SoakArgs),
    /// Rate-limit accuracy: a local limit (one weir) and a global limit (two weir
    /// processes sharing one redis-server) offered 3× their limit, and a Redis outage
    /// mid-run with a fail-open and a fail-closed limit.
    Ratelimit(RatelimitArgs),
    /// Propagation reports of several sizes side by side: one change's latency and
    /// startup by number of domains, as a markdown table and two PNG charts.
    Scale(ScaleArgs),
    /// The fixed-response backend the traffic bench runs behind the proxies.
    #[command(hide = true)]
    Backend(BackendArgs),
    /// The traffic bench's full-handshake client.
    #[command(hide = true)]
    Handshakes(traffic::clients::HandshakeArgs),
    /// The traffic bench's open-loop fixed-rate client.
    #[command(hide = true)]
    FixedRate(traffic::clients::RateArgs),
}

#[derive(clap::Args)]
struct RatelimitArgs {
    /// The weir binary [default: <workspace>/target/release/weir].
    #[arg(long)]
    weir: Option<PathBuf>,
    /// The redis-server binary.
    #[arg(long, default_value = "redis-server")]
    redis_server: PathBuf,
    /// Requests per second the limits allow.
    #[arg(long, default_value_t = 200)]
    limit: u32,
    /// Offered load, as a multiple of the limit.
    #[arg(long, default_value_t = 3.0)]
    load: f64,
    /// Seconds of load per scenario (at most 120).
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Keep-alive connections per load stream.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Also compare keep-alive requests/s of a route without policy, with a local and
    /// with a global limit, this many seconds per route (0: skip; at most 60).
    #[arg(long, default_value_t = 0)]
    overhead: u64,
    /// Closed-loop keep-alive clients of the overhead comparison.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Where configurations, logs and ratelimit.json go
    /// [default: <workspace>/target/weir-bench/ratelimit].
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args)]
struct FailoverArgs {
    /// The weir binary [default: <workspace>/target/release/weir].
    #[arg(long)]
    weir: Option<PathBuf>,
    /// Another weir build run on the same schedule after the first (e.g. one without
    /// outlier detection).
    #[arg(long)]
    weir_baseline: Option<PathBuf>,
    /// HTTPRoutes sending to the one backend.
    #[arg(long, default_value_t = 20)]
    routes: usize,
    /// Seconds of load per build.
    #[arg(long, default_value_t = 48)]
    duration: u64,
    /// Seconds per phase of the flapping endpoint (healthy, 503, healthy, refused).
    #[arg(long, default_value_t = 3)]
    period: u64,
    /// Closed-loop keep-alive clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Skip the run whose routes retry 503s and connection failures.
    #[arg(long)]
    no_retry_run: bool,
    /// Add runs with an active HTTP health check on the Backend: one with `--routes`
    /// routes and one with `--health-routes`, comparing the probes each endpoint gets.
    #[arg(long)]
    health_check: bool,
    /// Milliseconds between health probes of the `--health-check` runs.
    #[arg(long, default_value_t = 500)]
    health_interval_ms: u64,
    /// Routes of the second `--health-check` run.
    #[arg(long, default_value_t = 100)]
    health_routes: usize,
    /// Add a run whose Backend has a TrafficPolicy tuning outlier detection (one gateway
    /// error ejects, where the default needs five in a row).
    #[arg(long)]
    tuned_outlier: bool,
    /// Output directory [default: <workspace>/target/weir-bench/failover].
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args)]
struct SoakArgs {
    /// Seconds of churn and traffic.
    #[arg(long, default_value_t = 1800)]
    duration: u64,
    /// Configuration changes per second.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// Most churned HTTPRoutes live at once.
    #[arg(long, default_value_t = 200)]
    churn_routes: usize,
    /// Requests per second of each of the nine clients.
    #[arg(long, default_value_t = 50.0)]
    client_rate: f64,
    /// The weir binary [default: <workspace>/target/release/weir].
    #[arg(long)]
    weir: Option<PathBuf>,
    /// Output directory [default: <workspace>/target/weir-bench/soak].
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args)]
struct K8sArgs {
    /// What each domain is: an HTTPRoute on a Gateway's HTTP listener, or an Ingress with
    /// its own TLS Secret (served over HTTPS).
    #[arg(long, value_enum, default_value_t = k8s::Layout::Httproute)]
    layout: k8s::Layout,
    /// Domains (HTTPRoutes, or Ingresses with their Secrets) before the timed changes.
    #[arg(long, default_value_t = 1000)]
    routes: usize,
    /// Timed creations (then as many modifications and deletions).
    #[arg(long, default_value_t = 100)]
    changes: usize,
    /// Side-client workers looping on the untouched routes.
    #[arg(long, default_value_t = 2)]
    side_workers: usize,
    /// Split mode: traffic goes through a `weir proxy` fed by the controller's push
    /// protocol (the controller serves none).
    #[arg(long)]
    split: bool,
    /// Poll interval while waiting for a change to be served, in microseconds. Finer
    /// than the changes it times (a change missed by a poll costs a whole interval; at
    /// 1 ms the ratios between runs were mostly that rounding: BENCHMARKS.md,
    /// "Session 43").
    #[arg(long, default_value_t = 200)]
    poll_interval_us: u64,
    /// Longest wait for one change, in milliseconds (then counted as a timeout).
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// The weir binary [default: <workspace>/target/release/weir].
    #[arg(long)]
    weir: Option<PathBuf>,
    /// Directory for the JSON and PNG outputs [default: <workspace>/target/weir-bench/results].
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args)]
struct TrafficArgs {
    /// Short run: 3 s per scenario and fewer scenarios (no large setup).
    #[arg(long)]
    quick: bool,
    /// Seconds measured per scenario and proxy [default: 10, or 3 with --quick].
    #[arg(long)]
    duration: Option<u64>,
    /// Warm-up seconds before each measurement (same load, not counted).
    #[arg(long, default_value_t = 1)]
    warmup: u64,
    /// Domains of the large setup (handshakes with SNI over all certificates, Host
    /// rotating over all domains).
    #[arg(long, default_value_t = 20_000)]
    domains: usize,
    /// Requests/s of the fixed-rate latency scenario.
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Proxies to measure, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [
        traffic::proxies::ProxyKind::Weir,
        traffic::proxies::ProxyKind::Nginx,
        traffic::proxies::ProxyKind::Haproxy,
    ])]
    proxies: Vec<traffic::proxies::ProxyKind>,
    /// Only these scenario ids, comma-separated [default: all]. Ids: h1-c1, h1-c16, h1-c64,
    /// h1-c256, h1-c64-4k, https-c64, h2-c16-m32, tls-new-1cert, rate-<RATE>, and on the
    /// large setup tls-new-many-cold (run it before tls-new-many: it is the first use of
    /// each certificate), tls-new-many, hosts-many.
    #[arg(long, value_delimiter = ',')]
    scenarios: Vec<String>,
    /// Do not install missing Debian packages (nginx-light, haproxy, wrk, nghttp2-client).
    #[arg(long)]
    no_install: bool,
    /// The weir binary [default: <workspace>/target/release/weir].
    #[arg(long)]
    weir: Option<PathBuf>,
    /// A second weir binary, measured in the same run as `weir-baseline` right after weir
    /// (e.g. the build before a change); not a peer in the ratios.
    #[arg(long)]
    weir_baseline: Option<PathBuf>,
    /// Directory for the JSON, markdown and PNG outputs
    /// [default: <workspace>/target/weir-bench/results].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Certificate cache (shared with `propagation`) [default: <workspace>/target/weir-bench/certs].
    #[arg(long)]
    cache: Option<PathBuf>,
    /// Longest wait for a proxy to serve after it is started, in seconds.
    #[arg(long, default_value_t = 600)]
    startup_timeout_s: u64,
    /// Rounds per scenario: each round measures every proxy in turn; the round with the
    /// median requests/s is reported (the cold handshake pass runs once).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Slices per keep-alive measurement (wrk, h2load): each round measures every proxy
    /// for duration/slices seconds, slices times over in turn, and adds each proxy's
    /// slices up, so that a slow moment of a shared machine falls on all of them. The
    /// warm-up runs before a round's first slice only.
    #[arg(long, default_value_t = 1)]
    slices: u32,
    /// Keep the run's directory under <workspace>/target/weir-bench/work (proxy
    /// configurations and logs, load generator outputs).
    #[arg(long)]
    keep_work: bool,
    /// Where the backend runs: `load` (its own CPU, with the load generator) or `proxy`
    /// (pinned to the proxy's CPU, as on a small node or beside a sidecar, so that the
    /// proxy's wake-ups and context switches compete with the backend's).
    #[arg(long, value_enum, default_value_t = traffic::BackendOn::Load)]
    backend_on: traffic::BackendOn,
}

/// The proxies to run: with a baseline binary, `weir-baseline` right after weir (unless
/// listed explicitly); without one, never.
fn with_baseline(
    mut proxies: Vec<traffic::proxies::ProxyKind>,
    baseline: bool,
) -> Vec<traffic::proxies::ProxyKind> {
    use traffic::proxies::ProxyKind;
    if !baseline {
        proxies.retain(|p| *p != ProxyKind::WeirBaseline);
    } else if !proxies.contains(&ProxyKind::WeirBaseline) {
        let at = proxies
            .iter()
            .position(|p| *p == ProxyKind::Weir)
            .map_or(0, |i| i + 1);
        proxies.insert(at, ProxyKind::WeirBaseline);
    }
    proxies
}

impl TrafficArgs {
    fn options(self) -> traffic::Options {
        let bench_dir = workspace_path("target/weir-bench");
        let default = if self.quick { 3 } else { 10 };
        traffic::Options {
            quick: self.quick,
            duration: Duration::from_secs(self.duration.unwrap_or(default).max(1)),
            warmup: Duration::from_secs(self.warmup),
            domains: self.domains.max(1),
            rate: self.rate.max(1),
            only: self.scenarios,
            install: !self.no_install,
            weir: self
                .weir
                .unwrap_or_else(|| workspace_path("target/release/weir")),
            proxies: with_baseline(self.proxies, self.weir_baseline.is_some()),
            weir_baseline: self.weir_baseline,
            out: self.out.unwrap_or_else(|| bench_dir.join("results")),
            cache: self.cache.unwrap_or_else(|| bench_dir.join("certs")),
            work: bench_dir.join("work"),
            startup_timeout: Duration::from_secs(self.startup_timeout_s),
            rounds: self.rounds.max(1),
            slices: self.slices.max(1),
            keep_work: self.keep_work,
            backend_on: self.backend_on,
        }
    }
}

#[derive(clap::Args)]
struct BackendArgs {
    /// Address to listen on.
    #[arg(long)]
    listen: std::net::SocketAddr,
    /// Body size of every response except `/bytes/<n>`.
    #[arg(long, default_value_t = 0)]
    size: usize,
}

#[derive(clap::Args)]
struct ScaleArgs {
    /// `propagation-<N>.json` reports (from `weir-bench propagation`), one per size.
    #[arg(required = true)]
    reports: Vec<PathBuf>,
    /// Directory for `scale-changes.png` and `scale-startup.png`
    /// [default: <workspace>/target/weir-bench/results].
    #[arg(long)]
    out: Option<PathBuf>,
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
    /// plus one shared Backend file. `gateway`: Gateways of 64 HTTPS listeners (one per
    /// domain, each on its own loopback address 127.1.x.y) and one file per domain with its
    /// Secret and an HTTPRoute. `listenerset`: one Gateway on 127.2.0.1 and one file per
    /// domain with its Secret, an XListenerSet adding its HTTPS listener and an HTTPRoute.
    /// `passthrough`: a TLS Passthrough listener on 127.3.0.1 and one file per domain with
    /// a TLSRoute to weir's own Ingress HTTPS listener plus the Secret and Ingress there.
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
    /// Finer than the changes it times, which are served in 0.4–1.5 ms (a change missed
    /// by a poll costs a whole pause; at 1 ms the ratios between runs were mostly that
    /// rounding: BENCHMARKS.md, "Session 43").
    #[arg(long, default_value_t = 200)]
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
    /// Pin weir to these CPUs (a `taskset -c` list, e.g. `1`), so that the startup CPU
    /// time reported at /ready is that of one core. `--changes 0 --idle-ms 0` measures
    /// startup alone.
    #[arg(long)]
    weir_cpus: Option<String>,
    /// Keep the manifest directory under <workspace>/target/weir-bench/work (to start weir
    /// on it again, e.g. under a profiler).
    #[arg(long)]
    keep_work: bool,
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
            weir_cpus: self.weir_cpus,
            keep_work: self.keep_work,
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
        Command::Traffic(args) => run_traffic(&runtime, args.options()),
        Command::Backend(args) => match traffic::backend::serve(args.listen, args.size) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("weir-bench backend: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Ratelimit(a) => {
            let opts = ratelimit::Options {
                weir: a
                    .weir
                    .unwrap_or_else(|| workspace_path("target/release/weir")),
                redis_server: a.redis_server,
                limit: a.limit.max(1),
                load: a.load.clamp(0.1, 100.0),
                duration: Duration::from_secs(a.duration.clamp(1, 120)),
                connections: a.connections.clamp(1, 256),
                overhead: Duration::from_secs(a.overhead.min(60)),
                clients: a.clients.clamp(1, 1024),
                out: a
                    .out
                    .unwrap_or_else(|| workspace_path("target/weir-bench/ratelimit")),
            };
            match runtime.block_on(ratelimit::run(opts)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("weir-bench ratelimit: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Failover(a) => {
            let weir = a
                .weir
                .unwrap_or_else(|| workspace_path("target/release/weir"));
            let routes = a.routes.max(1);
            let run = |label: &str, bin: &PathBuf, retry, health_check, routes| failover::Run {
                label: label.to_owned(),
                bin: bin.clone(),
                retry,
                health_check,
                tuned_outlier: false,
                routes,
            };
            let mut builds = vec![run("weir", &weir, false, None, routes)];
            if !a.no_retry_run {
                builds.push(run("weir", &weir, true, None, routes));
            }
            if a.health_check {
                let every = Some(Duration::from_millis(a.health_interval_ms.max(100)));
                builds.push(run("weir", &weir, false, every, routes));
                builds.push(run("weir", &weir, false, every, a.health_routes.max(1)));
            }
            if a.tuned_outlier {
                builds.push(failover::Run {
                    tuned_outlier: true,
                    ..run("weir", &weir, false, None, routes)
                });
            }
            if let Some(b) = a.weir_baseline {
                builds.push(run("weir-baseline", &b, false, None, routes));
            }
            let opts = failover::Options {
                builds,
                duration: Duration::from_secs(a.duration.max(1)),
                period: Duration::from_secs(a.period.max(1)),
                clients: a.clients.max(1),
                out: a
                    .out
                    .unwrap_or_else(|| workspace_path("target/weir-bench/failover")),
            };
            match runtime.block_on(failover::run(opts)) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("weir-bench failover: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Soak(a) => {
            let bench_dir = workspace_path("target/weir-bench");
            let out = a.out.unwrap_or_else(|| bench_dir.join("soak"));
            let opts = soak::Options {
                weir: a
                    .weir
                    .unwrap_or_else(|| workspace_path("target/release/weir")),
                duration: Duration::from_secs(a.duration.max(1)),
                rate: a.rate,
                churn_routes: a.churn_routes.max(2),
                client_rate: a.client_rate,
                cache: bench_dir.join("certs"),
                out: out.clone(),
            };
            run_with_files(
                &runtime,
                async {
                    let report = soak::run(&opts).await?;
                    std::fs::create_dir_all(&out)?;
                    let json = out.join("soak.json");
                    std::fs::write(&json, serde_json::to_string_pretty(&report)?)?;
                    if report.failures() > 0 {
                        eprintln!("{}", report.markdown());
                        anyhow::bail!("{} requests failed", report.failures());
                    }
                    Ok((report, vec![json]))
                },
                soak::Report::markdown,
            )
        }
        Command::K8s(a) => {
            let bench_dir = workspace_path("target/weir-bench");
            let opts = k8s::Options {
                layout: a.layout,
                cache: bench_dir.join("certs"),
                routes: a.routes.max(1),
                changes: a.changes,
                split: a.split,
                side_workers: a.side_workers,
                poll: Duration::from_micros(a.poll_interval_us),
                timeout: Duration::from_millis(a.timeout_ms),
                weir: a
                    .weir
                    .unwrap_or_else(|| workspace_path("target/release/weir")),
                workspace: workspace_path(""),
                work: bench_dir.join("work"),
                out: a.out.unwrap_or_else(|| bench_dir.join("results")),
            };
            run_with_files(&runtime, k8s::run(&opts), |r| r.markdown())
        }
        Command::Handshakes(args) => run_client(&runtime, traffic::clients::handshakes(&args)),
        Command::FixedRate(args) => run_client(&runtime, traffic::clients::fixed_rate(&args)),
        Command::Scale(a) => {
            let out = a
                .out
                .unwrap_or_else(|| workspace_path("target/weir-bench/results"));
            run_with_files(&runtime, async { scale::run(&a.reports, &out) }, |md| {
                md.clone()
            })
        }
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

fn run_traffic(runtime: &tokio::runtime::Runtime, opts: traffic::Options) -> ExitCode {
    run_with_files(runtime, traffic::run(&opts), |r| r.markdown())
}

/// Runs a bench that reports markdown and the files it wrote. Ctrl-C drops the run, and
/// with it the guards that kill the processes it started.
fn run_with_files<R>(
    runtime: &tokio::runtime::Runtime,
    run: impl std::future::Future<Output = anyhow::Result<(R, Vec<PathBuf>)>>,
    markdown: impl Fn(&R) -> String,
) -> ExitCode {
    runtime.block_on(async {
        let result = tokio::select! {
            r = run => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        };
        match result {
            Ok((report, files)) => {
                println!("{}", markdown(&report));
                for f in files {
                    println!("wrote {}", f.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("weir-bench: {e:#}");
                ExitCode::FAILURE
            }
        }
    })
}

/// Runs a hidden client and prints its result as one JSON line.
fn run_client<F>(runtime: &tokio::runtime::Runtime, fut: F) -> ExitCode
where
    F: std::future::Future<Output = anyhow::Result<traffic::loadgen::LoadResult>>,
{
    match runtime.block_on(fut) {
        Ok(r) => match serde_json::to_string(&r) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("weir-bench: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("weir-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
