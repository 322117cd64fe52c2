//! The data-plane throughput bench: weir, nginx and HAProxy configured alike in front of
//! one tiny backend, the proxy pinned to CPU 0 and everything else (load generator,
//! backend, this tool) to CPU 1 (with `--backend-on proxy`, the backend on CPU 0 too),
//! measured with wrk, h2load and the bench's own clients.

pub(crate) mod backend;
pub(crate) mod clients;
pub(crate) mod loadgen;
pub(crate) mod proxies;
pub(crate) mod report;
pub(crate) mod sys;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use tokio::time::Instant;

use crate::certs::{Leaf, Pki};
use crate::manifests::domain;
use crate::procs::{ChildGuard, free_port, log_tail};
use crate::traffic::loadgen::{
    LoadResult, h2load_args, parse_h2load, parse_h2load_log, parse_wrk, wrk_args, wrk_script_fixed,
    wrk_script_rotating,
};
use crate::traffic::proxies::{Binaries, ProxyKind, Running, Site};
use crate::traffic::report::{Measured, Params, ProxyRun, RoundRatios, TrafficReport};
use crate::traffic::sys::{CpuTimes, Versions, pin_process, run_bounded, tree_stats, which};

/// The CPU the proxy under test runs on.
pub(crate) const PROXY_CPU: usize = 0;
/// The CPU of the load generator, the backend and this tool.
pub(crate) const LOAD_CPU: usize = 1;

/// The bench's settings (see `weir-bench traffic --help`).
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub(crate) quick: bool,
    pub(crate) duration: Duration,
    pub(crate) warmup: Duration,
    /// Domains of the large setup (20k-certificate handshakes, rotating Host).
    pub(crate) domains: usize,
    /// Requests/s of the fixed-rate latency scenario.
    pub(crate) rate: u64,
    pub(crate) proxies: Vec<ProxyKind>,
    /// Only these scenario ids (all when empty).
    pub(crate) only: Vec<String>,
    pub(crate) install: bool,
    pub(crate) weir: PathBuf,
    /// A second weir binary measured as `weir-baseline` (e.g. the build before a change).
    pub(crate) weir_baseline: Option<PathBuf>,
    pub(crate) out: PathBuf,
    pub(crate) cache: PathBuf,
    pub(crate) work: PathBuf,
    pub(crate) startup_timeout: Duration,
    /// Measurements per scenario and proxy (interleaved); the median one is reported.
    pub(crate) rounds: usize,
    /// Slices of each keep-alive measurement: a round measures every proxy for
    /// `duration / slices`, `slices` times over, and adds each proxy's slices up, so
    /// that a slow moment of the machine falls on every proxy of the round.
    pub(crate) slices: u32,
    /// Keep the run's directory (configurations, logs, load generator outputs).
    pub(crate) keep_work: bool,
    /// The CPU the backend is pinned to.
    pub(crate) backend_on: BackendOn,
}

/// Where the backend runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BackendOn {
    /// On the load generator's CPU ([`LOAD_CPU`]): the proxy has its CPU to itself.
    Load,
    /// On the proxy's CPU ([`PROXY_CPU`]): the shared-core placement.
    Proxy,
}

impl BackendOn {
    pub(crate) fn cpu(self) -> usize {
        match self {
            BackendOn::Load => LOAD_CPU,
            BackendOn::Proxy => PROXY_CPU,
        }
    }
}

/// How a scenario loads the proxy.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Load {
    /// wrk, HTTP/1.1 keep-alive over `conns` connections.
    Wrk {
        conns: usize,
        tls: bool,
        path: &'static str,
        /// Host cycles over every domain of the setup.
        rotate: bool,
    },
    /// h2load, HTTP/2 over TLS.
    H2 { clients: usize, streams: usize },
    /// The bench's handshake client; SNI rotates over every domain of the setup. `cold`:
    /// one pass over every domain (each certificate's first use), no warm-up, not timed.
    Handshakes { concurrency: usize, cold: bool },
    /// The bench's open-loop client at a fixed rate.
    Rate { rate: u64, connections: usize },
}

impl Load {
    /// Whether a round may measure it in slices (`--slices`): the closed-loop keep-alive
    /// loads, whose figures add up over slices. Handshake and fixed-rate runs stay whole.
    fn sliceable(&self) -> bool {
        matches!(self, Load::Wrk { .. } | Load::H2 { .. })
    }
}

/// One measured situation.
#[derive(Clone, Debug)]
pub(crate) struct Scenario {
    pub(crate) id: String,
    pub(crate) label: String,
    /// Served by the large setup (`--domains` domains) rather than by one domain.
    pub(crate) large: bool,
    pub(crate) load: Load,
}

/// The scenarios of a run, in order.
pub(crate) fn scenarios(quick: bool, domains: usize, rate: u64) -> Vec<Scenario> {
    let wrk = |conns, tls, path, rotate| Load::Wrk {
        conns,
        tls,
        path,
        rotate,
    };
    let mut v = Vec::new();
    let conns: &[usize] = if quick { &[1, 64] } else { &[1, 16, 64, 256] };
    for &c in conns {
        v.push(Scenario {
            id: format!("h1-c{c}"),
            label: format!("HTTP/1.1 keep-alive, {c} conn, 0 B"),
            large: false,
            load: wrk(c, false, "/", false),
        });
    }
    if !quick {
        v.push(Scenario {
            id: "h1-c64-4k".into(),
            label: "HTTP/1.1 keep-alive, 64 conn, 4 KiB".into(),
            large: false,
            load: wrk(64, false, "/bytes/4096", false),
        });
    }
    v.push(Scenario {
        id: "https-c64".into(),
        label: "HTTPS/1.1 keep-alive, 64 conn, 0 B".into(),
        large: false,
        load: wrk(64, true, "/", false),
    });
    v.push(Scenario {
        id: "h2-c16-m32".into(),
        label: "HTTP/2 over TLS, 16 conn × 32 streams".into(),
        large: false,
        load: Load::H2 {
            clients: 16,
            streams: 32,
        },
    });
    v.push(Scenario {
        id: "tls-new-1cert".into(),
        label: "new TLS connections/s, 1 certificate".into(),
        large: false,
        load: Load::Handshakes {
            concurrency: 16,
            cold: false,
        },
    });
    v.push(Scenario {
        id: format!("rate-{}", rate),
        label: format!("fixed {rate} req/s, 64 conn (latency)"),
        large: false,
        load: Load::Rate {
            rate,
            connections: 64,
        },
    });
    if !quick {
        // The cold pass runs first on a fresh proxy: the first use of each certificate
        // (weir parses a key on first use; nginx and HAProxy at startup).
        v.push(Scenario {
            id: "tls-new-many-cold".into(),
            label: format!("new TLS connections/s, first use of each of {domains} certificates"),
            large: true,
            load: Load::Handshakes {
                concurrency: 16,
                cold: true,
            },
        });
        v.push(Scenario {
            id: "tls-new-many".into(),
            label: format!("new TLS connections/s, SNI over {domains} certificates"),
            large: true,
            load: Load::Handshakes {
                concurrency: 16,
                cold: false,
            },
        });
        v.push(Scenario {
            id: "hosts-many".into(),
            label: format!("HTTP/1.1 keep-alive, 64 conn, Host over {domains} domains"),
            large: true,
            load: wrk(64, false, "/", true),
        });
    }
    v
}

/// A proxy started for one group of scenarios.
struct Started {
    kind: ProxyKind,
    site: Site,
    dir: PathBuf,
    proxy: Running,
    ready: Duration,
    idle: sys::TreeStats,
    threads: String,
    alive: bool,
}

/// One result per scenario and proxy: over several rounds, the round with the median
/// requests/s (the lower middle one for an even count); a failed round counts lowest.
fn median_rounds(raw: Vec<Measured>) -> Vec<Measured> {
    let mut groups: Vec<Vec<Measured>> = Vec::new();
    for m in raw {
        match groups
            .iter_mut()
            .find(|g| g[0].scenario == m.scenario && g[0].proxy == m.proxy)
        {
            Some(g) => g.push(m),
            None => groups.push(vec![m]),
        }
    }
    groups
        .into_iter()
        .map(|mut g| {
            g.sort_by(|a, b| a.rps().unwrap_or(-1.0).total_cmp(&b.rps().unwrap_or(-1.0)));
            let rounds = g.len();
            let mut m = g.swap_remove((rounds - 1) / 2);
            m.rounds = rounds;
            m
        })
        .collect()
}

/// What a scenario needs from the running proxy.
struct Target<'a> {
    site: &'a Site,
    pid: u32,
    /// The backend's process, whose CPU per request is reported beside the proxy's.
    backend_pid: u32,
    dir: &'a Path,
    cache: &'a Path,
    taskset: &'a Path,
    wrk: &'a Path,
    h2load: &'a Path,
    me: &'a Path,
}

/// Runs the bench and writes its JSON, markdown and PNGs into `opts.out`.
pub(crate) async fn run(opts: &Options) -> Result<(TrafficReport, Vec<PathBuf>)> {
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let t_run = Instant::now();
    let say = |msg: &str| eprintln!("[{:7.1}s] {msg}", t_run.elapsed().as_secs_f64());
    sys::ensure_tools(opts.install)?;
    if !opts.weir.is_file() {
        bail!(
            "weir binary not found at {}: build it with `cargo build --release -p weir` (or pass --weir PATH)",
            opts.weir.display()
        );
    }
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    if cores < 2 {
        bail!(
            "the traffic bench needs 2 CPUs (proxy on one, load on the other); this process may use {cores}"
        );
    }
    pin_process(std::process::id(), LOAD_CPU)?;
    let pinning = match opts.backend_on {
        BackendOn::Load => format!(
            "proxy under test on CPU {PROXY_CPU} (taskset -c {PROXY_CPU}); load generator, backend and weir-bench on CPU {LOAD_CPU} (taskset -c {LOAD_CPU})"
        ),
        BackendOn::Proxy => format!(
            "shared core: proxy under test and backend on CPU {PROXY_CPU} (taskset -c {PROXY_CPU}); load generator and weir-bench on CPU {LOAD_CPU} (taskset -c {LOAD_CPU})"
        ),
    };
    say(&pinning);

    let all = scenarios(opts.quick, opts.domains, opts.rate);
    let selected: Vec<Scenario> = all
        .into_iter()
        .filter(|s| opts.only.is_empty() || opts.only.iter().any(|o| o == &s.id))
        .collect();
    if selected.is_empty() {
        bail!("no scenario selected (ids: {})", scenario_ids(opts));
    }
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("creating {}", opts.out.display()))?;
    std::fs::create_dir_all(&opts.work)
        .with_context(|| format!("creating {}", opts.work.display()))?;
    let work = tempfile::Builder::new()
        .prefix("traffic-")
        .tempdir_in(&opts.work)
        .with_context(|| format!("creating a directory in {}", opts.work.display()))?;

    // One copy of weir for the whole run, so that a rebuild meanwhile changes nothing.
    let weir_copy = work.path().join("weir");
    std::fs::copy(&opts.weir, &weir_copy)
        .with_context(|| format!("copying {}", opts.weir.display()))?;
    let weir_baseline = match &opts.weir_baseline {
        Some(path) => {
            let copy = work.path().join("weir-baseline");
            std::fs::copy(path, &copy).with_context(|| format!("copying {}", path.display()))?;
            Some(copy)
        }
        None => None,
    };
    let tool = |name: &str| which(name).with_context(|| format!("{name} not found"));
    let bins = Binaries {
        weir: weir_copy,
        weir_baseline,
        nginx: tool("nginx")?,
        haproxy: tool("haproxy")?,
        taskset: tool("taskset")?,
    };
    let (wrk, h2load) = (tool("wrk")?, tool("h2load")?);
    let me = std::env::current_exe().context("locating weir-bench itself")?;

    // Certificates: the cache's, generated where missing.
    let large = selected.iter().any(|s| s.large);
    let n_max = if large { opts.domains.max(1) } else { 1 };
    say(&format!(
        "certificates for {n_max} domains from {}",
        opts.cache.display()
    ));
    let cache = opts.cache.clone();
    let (pki, leaves) = tokio::task::spawn_blocking(move || -> Result<(Pki, Vec<Leaf>)> {
        let pki = Pki::open(&cache)?;
        let indices: Vec<usize> = (0..n_max).collect();
        let (leaves, used) = pki.leaves(&indices, 2)?;
        if used.generated > 0 {
            eprintln!("weir-bench: generated {} certificates", used.generated);
        }
        Ok((pki, leaves))
    })
    .await??;

    // The backend, pinned with the load generator or (shared core) with the proxy.
    let backend_addr: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
    let backend_log = work.path().join("backend.log");
    let mut backend = ChildGuard::spawn(
        "backend",
        &bins.taskset,
        &[
            "-c".into(),
            opts.backend_on.cpu().to_string(),
            me.display().to_string(),
            "backend".into(),
            "--listen".into(),
            backend_addr.to_string(),
            "--size".into(),
            "0".into(),
        ],
        &backend_log,
    )?;
    wait_port(backend_addr, &mut backend, &backend_log).await?;

    let mut runs = Vec::new();
    let mut results = Vec::new();
    let mut per_round = Vec::new();
    for is_large in [false, true] {
        let group: Vec<&Scenario> = selected.iter().filter(|s| s.large == is_large).collect();
        if group.is_empty() {
            continue;
        }
        let domains = if is_large { opts.domains.max(1) } else { 1 };
        // Every proxy of the group runs at once (idle ones cost nothing on the proxy CPU),
        // so that each scenario measures the proxies one right after the other: on a
        // machine shared with other work, load that comes and goes then hits all of them
        // alike instead of whichever proxy happened to run during it.
        let mut started: Vec<Started> = Vec::new();
        for &kind in &opts.proxies {
            let site = Site {
                domains,
                backend: backend_addr,
                http: ([127, 0, 0, 1], free_port()?).into(),
                https: ([127, 0, 0, 1], free_port()?).into(),
                leaves_dir: opts.cache.join("leaves"),
            };
            let dir = work.path().join(format!("{}-{domains}", kind.name()));
            say(&format!(
                "starting {} with {domains} domain(s)",
                kind.name()
            ));
            let t = Instant::now();
            let mut proxy = Running::start(kind, &site, &dir, &bins, &leaves, PROXY_CPU)?;
            let ready = proxy
                .wait_ready(&site, pki.ca_der(), opts.startup_timeout)
                .await;
            let ready = match ready {
                Ok(_) => t.elapsed(),
                Err(e) => {
                    say(&format!("{} failed to start: {e:#}", kind.name()));
                    runs.push(ProxyRun::failed(kind, domains, format!("{e:#}")));
                    continue;
                }
            };
            let idle = tree_stats(proxy.pid());
            let threads = proxy.describe_threads();
            say(&format!(
                "{} serving after {:.0} ms; PSS {:.1} MiB; {threads}",
                kind.name(),
                ready.as_secs_f64() * 1000.0,
                idle.pss_kib as f64 / 1024.0
            ));
            started.push(Started {
                kind,
                site,
                dir,
                proxy,
                ready,
                idle,
                threads,
                alive: true,
            });
        }
        let mut raw = Vec::new();
        for round in 0..opts.rounds.max(1) {
            for sc in &group {
                let cold = matches!(sc.load, Load::Handshakes { cold: true, .. });
                if cold && round > 0 {
                    continue;
                }
                let slices = if sc.load.sliceable() {
                    opts.slices.max(1)
                } else {
                    1
                };
                let mut parts: Vec<Vec<Measured>> = vec![Vec::new(); started.len()];
                // A proxy whose slice failed skips the round's other slices: they would
                // only repeat the failure.
                let mut failed = vec![false; started.len()];
                for slice in 0..slices {
                    for i in round_order(started.len(), round) {
                        let st = &mut started[i];
                        if !st.alive || failed[i] {
                            continue;
                        }
                        let target = Target {
                            site: &st.site,
                            pid: st.proxy.pid(),
                            backend_pid: backend.pid(),
                            dir: &st.dir,
                            cache: &opts.cache,
                            taskset: &bins.taskset,
                            wrk: &wrk,
                            h2load: &h2load,
                            me: &me,
                        };
                        let span = Span {
                            warm_up: slice == 0,
                            duration: opts.duration / slices,
                        };
                        let m = measure(sc, st.kind, &target, opts, span).await;
                        failed[i] = m.error.is_some();
                        parts[i].push(m);
                        if let Some(status) = st.proxy.exited() {
                            say(&format!(
                                "{} exited ({status}); log:\n{}",
                                st.kind.name(),
                                log_tail(&st.proxy.log, 20)
                            ));
                            st.alive = false;
                        }
                    }
                }
                for i in round_order(started.len(), round) {
                    let measured = std::mem::take(&mut parts[i]);
                    if measured.is_empty() {
                        continue;
                    }
                    let m = Measured::combine(measured);
                    say(&m.one_line());
                    raw.push(m);
                }
            }
        }
        per_round.extend(RoundRatios::of(&raw));
        results.extend(median_rounds(raw));
        for st in started {
            let end = tree_stats(st.proxy.pid());
            let log = st.proxy.log.clone();
            let exit = st.proxy.stop();
            let weir_log_tail = (!st.kind.is_peer()).then(|| log_tail(&log, 10));
            runs.push(ProxyRun {
                proxy: st.kind,
                domains,
                startup_ms: Some(st.ready.as_secs_f64() * 1000.0),
                idle: Some(st.idle),
                end: Some(end),
                threads: Some(st.threads),
                exit,
                log_tail: weir_log_tail,
                error: None,
            });
        }
    }
    backend.stop(Duration::from_secs(2));
    if opts.keep_work {
        say(&format!("kept {}", work.keep().display()));
    }

    let report = TrafficReport {
        tool: "weir-bench traffic",
        bench_version: env!("CARGO_PKG_VERSION"),
        started_unix,
        machine: crate::propagation::machine(cores),
        pinning,
        versions: Versions::probe(),
        params: Params {
            quick: opts.quick,
            duration_s: opts.duration.as_secs_f64(),
            warmup_s: opts.warmup.as_secs_f64(),
            domains: opts.domains,
            rate: opts.rate,
            weir: opts.weir.display().to_string(),
            rounds: opts.rounds.max(1),
            slices: opts.slices.max(1),
            scenarios: selected
                .iter()
                .map(|s| (s.id.clone(), s.label.clone()))
                .collect(),
        },
        runs,
        results,
        per_round,
        total_seconds: t_run.elapsed().as_secs_f64(),
    };
    let files = report::write(&report, &opts.out)?;
    Ok((report, files))
}

fn scenario_ids(opts: &Options) -> String {
    scenarios(opts.quick, opts.domains, opts.rate)
        .iter()
        .map(|s| s.id.clone())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The order in which round `round` measures `n` proxies: each round starts with the next
/// one (weir first in the first round, the first peer in the second, ...), so that no
/// proxy always runs right after another scenario's load, or always first while the
/// machine drifts.
fn round_order(n: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |k| (k + round) % n)
}

/// The backend's CPU time so far: one process (no children), so its /proc stat alone.
fn backend_cpu_seconds(pid: u32) -> f64 {
    crate::procs::proc_stats(pid).map_or(0.0, |s| s.cpu_seconds)
}

/// One measurement's span: whether to warm up first (a round's first slice) and how long.
struct Span {
    warm_up: bool,
    duration: Duration,
}

/// Warms up, then measures one scenario with the proxy's CPU and RSS around it.
async fn measure(
    sc: &Scenario,
    kind: ProxyKind,
    t: &Target<'_>,
    opts: &Options,
    span: Span,
) -> Measured {
    let cold = matches!(sc.load, Load::Handshakes { cold: true, .. });
    if !cold
        && span.warm_up
        && !opts.warmup.is_zero()
        && let Err(e) = drive(sc, t, opts.warmup, "warmup").await
    {
        return Measured::error(sc, kind, format!("warm-up: {e:#}"));
    }
    let before = tree_stats(t.pid);
    let backend_before = backend_cpu_seconds(t.backend_pid);
    let cpus = CpuTimes::now();
    let wall = Instant::now();
    // A cold pass runs until every domain was visited once (bounded by 10 minutes).
    let duration = if cold {
        Duration::from_secs(600)
    } else {
        span.duration
    };
    let result = drive(sc, t, duration, "run").await;
    let wall = wall.elapsed().as_secs_f64();
    let after = tree_stats(t.pid);
    let backend_cpu = backend_cpu_seconds(t.backend_pid) - backend_before;
    let cpus_after = CpuTimes::now();
    match result {
        Ok(r) => {
            // Proxy CPU % over the load's own duration when it reports one (the bench's
            // clients read certificates or dial before their clock starts).
            let secs = if r.seconds > 0.0 {
                r.seconds.min(wall)
            } else {
                wall
            };
            Measured::new(
                sc,
                kind,
                r,
                after.cpu_seconds - before.cpu_seconds,
                secs,
                before,
                after,
                cpus_after.busy_percent_since(&cpus, PROXY_CPU),
                cpus_after.busy_percent_since(&cpus, LOAD_CPU),
            )
            .with_backend_cpu(backend_cpu)
        }
        Err(e) => Measured::error(sc, kind, format!("{e:#}")),
    }
}

/// Runs the scenario's load for `duration`, pinned to the load CPU.
async fn drive(sc: &Scenario, t: &Target<'_>, duration: Duration, tag: &str) -> Result<LoadResult> {
    let base = t.dir.join(format!("{}-{tag}", sc.id));
    let limit = duration + Duration::from_secs(60);
    let secs = format!("{:.3}", duration.as_secs_f64());
    let (program, args, kind): (&Path, Vec<String>, &str) = match &sc.load {
        Load::Wrk {
            conns,
            tls,
            path,
            rotate,
        } => {
            let script = base.with_extension("lua");
            let text = if *rotate {
                wrk_script_rotating(t.site.domains, path)
            } else {
                wrk_script_fixed(&domain(0), path)
            };
            std::fs::write(&script, text)?;
            let (scheme, addr) = if *tls {
                ("https", t.site.https)
            } else {
                ("http", t.site.http)
            };
            let url = format!("{scheme}://{}:{}{path}", domain(0), addr.port());
            (t.wrk, wrk_args(&url, *conns, duration, &script), "wrk")
        }
        Load::H2 { clients, streams } => {
            let log = base.with_extension("tsv");
            (
                t.h2load,
                h2load_args(
                    t.site.https,
                    &domain(0),
                    "/",
                    *clients,
                    *streams,
                    duration,
                    &log,
                ),
                "h2load",
            )
        }
        Load::Handshakes { concurrency, cold } => (
            t.me,
            vec![
                "handshakes".into(),
                "--max-connections".into(),
                if *cold {
                    t.site.domains.to_string()
                } else {
                    "0".into()
                },
                "--connect".into(),
                t.site.https.to_string(),
                "--cache".into(),
                t.cache.display().to_string(),
                "--domains".into(),
                t.site.domains.to_string(),
                "--concurrency".into(),
                concurrency.to_string(),
                "--seconds".into(),
                secs,
            ],
            "json",
        ),
        Load::Rate { rate, connections } => (
            t.me,
            vec![
                "fixed-rate".into(),
                "--connect".into(),
                t.site.http.to_string(),
                "--host".into(),
                domain(0),
                "--rate".into(),
                rate.to_string(),
                "--connections".into(),
                connections.to_string(),
                "--seconds".into(),
                secs,
            ],
            "json",
        ),
    };
    let mut full = vec![
        "-c".to_owned(),
        LOAD_CPU.to_string(),
        program.display().to_string(),
    ];
    full.extend(args);
    let taskset = t.taskset.to_path_buf();
    let log = base.clone();
    let (ok, stdout, stderr) =
        tokio::task::spawn_blocking(move || run_bounded(&taskset, &full, &log, limit)).await??;
    let parsed = match kind {
        "wrk" => parse_wrk(&stdout).map_err(anyhow::Error::from),
        "h2load" => parse_h2load(&stdout).map_err(anyhow::Error::from),
        _ => serde_json::from_str::<LoadResult>(stdout.trim()).map_err(anyhow::Error::from),
    };
    let mut result = parsed.with_context(|| {
        format!(
            "{} (exit {}): {}{}",
            program.display(),
            if ok { "ok" } else { "failed" },
            stdout.lines().take(5).collect::<Vec<_>>().join(" | "),
            stderr.lines().take(5).collect::<Vec<_>>().join(" | ")
        )
    })?;
    if let Load::H2 { .. } = sc.load {
        let log = base.with_extension("tsv");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        result.latency = loadgen::Latency::of_micros(&parse_h2load_log(&text));
        let _ = std::fs::remove_file(&log);
    }
    if !stderr.trim().is_empty() && kind == "json" {
        eprintln!("    {}", stderr.trim());
    }
    Ok(result)
}

/// Waits until the backend accepts connections.
async fn wait_port(addr: SocketAddr, child: &mut ChildGuard, log: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if let Some(status) = child.exited() {
            bail!("the backend exited ({status}); log:\n{}", log_tail(log, 20));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    bail!("the backend did not listen on {addr} within 10 s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_round_starts_with_the_next_proxy() {
        let order = |n, round| round_order(n, round).collect::<Vec<_>>();
        assert_eq!(order(3, 0), [0, 1, 2]);
        assert_eq!(order(3, 1), [1, 2, 0]);
        assert_eq!(order(3, 2), [2, 0, 1]);
        assert_eq!(order(3, 3), [0, 1, 2]);
        assert_eq!(order(1, 5), [0]);
        assert!(order(0, 2).is_empty());
    }

    #[test]
    fn median_round_per_scenario_and_proxy() {
        let sc = &scenarios(true, 10, 1000)[0];
        let run = |proxy, rps: f64| {
            let load = LoadResult {
                requests: 100,
                seconds: 1.0,
                rps,
                errors: 0,
                latency: None,
            };
            Measured::new(
                sc,
                proxy,
                load,
                1.0,
                1.0,
                Default::default(),
                Default::default(),
                None,
                None,
            )
        };
        let raw = vec![
            run(ProxyKind::Weir, 30.0),
            run(ProxyKind::Nginx, 5.0),
            run(ProxyKind::Weir, 10.0),
            Measured::error(sc, ProxyKind::Nginx, "x".into()),
            run(ProxyKind::Weir, 20.0),
        ];
        let picked = median_rounds(raw);
        assert_eq!(picked.len(), 2);
        let weir = picked.iter().find(|m| m.proxy == ProxyKind::Weir).unwrap();
        assert_eq!((weir.rps(), weir.rounds), (Some(20.0), 3));
        // Of two rounds the lower one; a failed round counts lowest.
        let nginx = picked.iter().find(|m| m.proxy == ProxyKind::Nginx).unwrap();
        assert_eq!((nginx.rps(), nginx.rounds), (None, 2));
    }

    #[test]
    fn full_and_quick_scenario_sets() {
        let full = scenarios(false, 20_000, 10_000);
        let ids: Vec<&str> = full.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "h1-c1",
                "h1-c16",
                "h1-c64",
                "h1-c256",
                "h1-c64-4k",
                "https-c64",
                "h2-c16-m32",
                "tls-new-1cert",
                "rate-10000",
                "tls-new-many-cold",
                "tls-new-many",
                "hosts-many"
            ]
        );
        assert!(
            full.iter()
                .filter(|s| s.large)
                .all(|s| s.id.contains("-many"))
        );
        let quick = scenarios(true, 20_000, 10_000);
        assert!(quick.len() < full.len());
        assert!(quick.iter().all(|s| !s.large));
    }
}
