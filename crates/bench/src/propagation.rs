//! The propagation bench: N domains served by a real weir process, then K adds, K
//! modifications and K removals timed one by one while a side client checks that the
//! untouched domains never fail.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use tokio::time::Instant;

use crate::certs::{Leaf, Pki};
use crate::client::{Seen, Tls, admin_get};
use crate::manifests::{
    ConfigDir, LISTENER_SET_ADDR, LISTENERS_PER_GATEWAY, PASSTHROUGH_ADDR, backend_yaml, domain,
    domain_yaml, gateway_yaml, listener_set_domain_yaml, listener_set_gateway_yaml,
    passthrough_domain_yaml, passthrough_gateway_yaml, route_domain_yaml,
};
use crate::metrics::Propagation;
use crate::ops::{Changer, Pacing};
use crate::procs::{ChildGuard, free_port, log_tail, proc_stats};
use crate::progress::Progress;
use crate::report::{
    CertReport, Machine, MetricsReport, OpReport, Ops, Params, PerOp, Report, Startup, WeirReport,
};
use crate::side::{SideStats, SideWorker};

/// Manifest layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Layout {
    /// One file per domain with its Ingress and TLS Secret, plus one shared Backend file.
    Ingress,
    /// Gateway API: Gateways of 64 HTTPS listeners (one per domain, each with its
    /// certificate), one file per domain with its Secret and an HTTPRoute.
    Gateway,
    /// Gateway API with XListenerSets: one Gateway; one file per domain with its Secret,
    /// an XListenerSet adding its HTTPS listener and an HTTPRoute on that listener.
    Listenerset,
    /// TLS passthrough: one Gateway with a TLS Passthrough listener; one file per domain
    /// with a TLSRoute for its host to weir's own Ingress HTTPS listener, and the
    /// `ingress` layout's Secret and Ingress that terminate it there.
    Passthrough,
}

impl Layout {
    /// The name used on the command line and in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Layout::Ingress => "ingress",
            Layout::Gateway => "gateway",
            Layout::Listenerset => "listenerset",
            Layout::Passthrough => "passthrough",
        }
    }

    /// Domain `i`'s file, routing `path` (`https_port`: where HTTPS listeners bind).
    pub(crate) fn domain_file(self, i: usize, leaf: &Leaf, path: &str, https_port: u16) -> String {
        match self {
            Layout::Ingress => domain_yaml(i, leaf, path, &[]),
            Layout::Gateway => route_domain_yaml(i, leaf, path),
            Layout::Listenerset => listener_set_domain_yaml(i, leaf, path, https_port),
            Layout::Passthrough => passthrough_domain_yaml(i, leaf, path),
        }
    }
}

/// The bench's settings (see `--help`).
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub(crate) domains: usize,
    pub(crate) changes: usize,
    pub(crate) layout: Layout,
    pub(crate) weir: PathBuf,
    pub(crate) out: PathBuf,
    pub(crate) cache: PathBuf,
    /// Where the temporary manifest directory is made.
    pub(crate) work: PathBuf,
    pub(crate) pacing: Pacing,
    pub(crate) startup_timeout: Duration,
    /// Idle window after startup over which weir's CPU use is measured.
    pub(crate) idle: Duration,
    pub(crate) side_concurrency: usize,
    pub(crate) side_pause: Duration,
    pub(crate) check_concurrency: usize,
    /// CPUs to pin weir to (a `taskset -c` list), so that its startup CPU time is that
    /// of the given cores.
    pub(crate) weir_cpus: Option<String>,
    /// Keep the manifest directory after the run.
    pub(crate) keep_work: bool,
}

/// Where the run's files went.
pub(crate) struct Outputs {
    pub(crate) json: PathBuf,
    pub(crate) png: Option<PathBuf>,
    pub(crate) weir_log: PathBuf,
}

/// Runs the bench and writes its JSON (and PNG) into `opts.out`.
pub(crate) async fn run(opts: &Options) -> Result<(Report, Outputs)> {
    if !opts.weir.is_file() {
        bail!(
            "weir binary not found at {}: build it with `cargo build --release -p weir` (or pass --weir PATH)",
            opts.weir.display()
        );
    }
    let (n, k) = (opts.domains, opts.changes);
    if n < 2 * k + 1 {
        bail!(
            "--domains ({n}) must be at least 2 × --changes + 1 ({}): modified and removed domains are distinct and the side client needs at least one untouched domain",
            2 * k + 1
        );
    }
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let run_start = Instant::now();
    let progress = Progress::new();
    let ticker = tokio::spawn(
        progress
            .clone()
            .ticker(Duration::from_secs(3), Duration::from_secs(24 * 3600)),
    );
    let _ticker = AbortOnDrop(ticker);
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("creating {}", opts.out.display()))?;
    std::fs::create_dir_all(&opts.work)
        .with_context(|| format!("creating {}", opts.work.display()))?;

    // 1. Certificates for the N initial domains and the K added ones.
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    progress.phase(
        &format!("certificates for {} domains ({} threads)", n + k, cores),
        n + k,
    );
    let t = Instant::now();
    let cache = opts.cache.clone();
    let (pki, leaves, used) = tokio::task::spawn_blocking(move || -> Result<_> {
        let pki = Pki::open(&cache)?;
        let indices: Vec<usize> = (0..n + k).collect();
        let (leaves, used) = pki.leaves(&indices, cores)?;
        Ok((pki, leaves, used))
    })
    .await??;
    let certs = CertReport {
        cached: used.cached,
        generated: used.generated,
        seconds: t.elapsed().as_secs_f64(),
        threads: cores,
    };
    progress.say(&format!(
        "certificates: {} cached, {} generated in {:.1} s",
        certs.cached, certs.generated, certs.seconds
    ));

    // 2. The manifest directory.
    let work = tempfile::Builder::new()
        .prefix("propagation-")
        .tempdir_in(&opts.work)
        .with_context(|| format!("creating a directory in {}", opts.work.display()))?;
    let dir = ConfigDir::new(work.path());
    let echo_addr: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
    progress.phase(
        &format!("writing {n} domain files to {}", dir.path().display()),
        n,
    );
    dir.write_plain("backend.yaml", &backend_yaml(echo_addr))?;
    let admin: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
    let http: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
    let https: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
    for (i, leaf) in leaves.iter().enumerate().take(n) {
        dir.write_domain(i, &opts.layout.domain_file(i, leaf, "/", https.port()))?;
    }
    // From here on only the changes' leaves are needed: the modified domains' (0..K) and
    // the added ones' (N..N+K). The rest is freed before weir starts (the allocator keeps
    // much of it: the bench's RSS at `/ready` is printed, 818 MiB at 1,000,000 domains).
    let (modified, added) = {
        let mut leaves = leaves;
        let added = leaves.split_off(n);
        leaves.truncate(k);
        (leaves, added)
    };
    // The files just written are flushed before weir starts: otherwise the kernel
    // writes them back (1.5 GB at 1,000,000 domains) during weir's startup, on the same
    // two cores, which is the bench's cost, not weir's (a gateway starts on a
    // configuration written before).
    progress.phase("flushing the written files to disk", 1);
    let synced = std::process::Command::new("sync")
        .arg("-f")
        .arg(dir.path())
        .status();
    if !synced.is_ok_and(|s| s.success()) {
        progress.say("`sync -f` failed; weir starts while the files are written back");
    }

    // 3. The echo backend, then weir.
    let base = format!("propagation-{n}");
    let echo_log = opts.out.join(format!("{base}.echo.log"));
    let weir_log = opts.out.join(format!("{base}.weir.log"));
    let mut echo = ChildGuard::spawn(
        "weir echo",
        &opts.weir,
        &[
            "echo".into(),
            "--listen".into(),
            echo_addr.to_string(),
            "--name".into(),
            "bench".into(),
        ],
        &echo_log,
    )?;
    wait_for_port(echo_addr, &mut echo, &echo_log).await?;

    if opts.layout == Layout::Listenerset {
        dir.write_plain("sets.yaml", &listener_set_gateway_yaml(http.port()))?;
    }
    if opts.layout == Layout::Passthrough {
        dir.write_plain("pass.yaml", &passthrough_gateway_yaml(https.port(), https))?;
    }
    if opts.layout == Layout::Gateway {
        for j in 0..n.div_ceil(LISTENERS_PER_GATEWAY) {
            dir.write_gateway(j, &gateway_yaml(j, n, https.port()))?;
        }
    }
    progress.phase(
        &format!("starting weir on {n} domains (admin {admin}, https {https})"),
        1,
    );
    let mut args: Vec<String> = vec![
        "run".into(),
        "-c".into(),
        dir.path().display().to_string(),
        "--admin".into(),
        admin.to_string(),
        "--ingress-http".into(),
        http.to_string(),
        "--ingress-https".into(),
        https.to_string(),
        "--no-access-log".into(),
    ];
    // `taskset` sets the affinity and then execs weir, so the pid is weir's.
    let program = match &opts.weir_cpus {
        Some(cpus) => {
            let weir = opts.weir.display().to_string();
            args.splice(0..0, ["-c".to_owned(), cpus.clone(), weir]);
            PathBuf::from("taskset")
        }
        None => opts.weir.clone(),
    };
    let spawned = Instant::now();
    let mut weir = ChildGuard::spawn("weir", &program, &args, &weir_log)?;
    progress.set_weir_pid(weir.pid());
    let ready = wait_ready(admin, &mut weir, &weir_log, opts.startup_timeout).await?;
    let at_ready = proc_stats(weir.pid()).unwrap_or_default();
    let bench_rss = proc_stats(std::process::id()).map_or(0, |s| s.rss_kib);
    progress.say(&format!(
        "/ready after {:.0} ms; weir CPU {:.2} s, RSS {:.1} MiB (peak {:.1} MiB); the bench's own RSS {:.1} MiB",
        ready.as_secs_f64() * 1000.0,
        at_ready.cpu_seconds,
        at_ready.rss_kib as f64 / 1024.0,
        at_ready.peak_rss_kib as f64 / 1024.0,
        bench_rss as f64 / 1024.0
    ));

    // 4. Every domain answering over HTTPS.
    let tls = match opts.layout {
        Layout::Ingress => Tls::new(https, pki.ca_der())?,
        Layout::Gateway => Tls::per_gateway(https.port(), pki.ca_der())?,
        Layout::Listenerset => Tls::new((LISTENER_SET_ADDR, https.port()).into(), pki.ca_der())?,
        Layout::Passthrough => Tls::new((PASSTHROUGH_ADDR, https.port()).into(), pki.ca_der())?,
    };
    progress.phase(
        &format!("checking that all {n} domains answer 200 over HTTPS"),
        n,
    );
    let deadline = spawned + opts.startup_timeout;
    let not_serving = check_all(&tls, n, opts.check_concurrency, deadline, &progress).await;
    let all_domains = spawned.elapsed();
    if let Some(status) = weir.exited() {
        bail!(
            "weir exited during startup ({status}); last log lines:\n{}",
            log_tail(&weir_log, 30)
        );
    }
    let after_startup = proc_stats(weir.pid()).unwrap_or_default();
    let metrics_start = scrape(admin).await;
    progress.say(&format!(
        "all domains answered after {:.0} ms ({not_serving} not serving); weir RSS {:.1} MiB",
        all_domains.as_secs_f64() * 1000.0,
        after_startup.rss_kib as f64 / 1024.0
    ));
    let idle_cpu_percent = measure_idle(weir.pid(), opts.idle, &progress).await;

    // 5. The side client on the untouched domains 2K..N.
    let side_stats = Arc::new(SideStats::default());
    progress.set_side(side_stats.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let untouched: Vec<usize> = (2 * k..n).collect();
    let workers = opts.side_concurrency.min(untouched.len());
    let side_limit = opts.pacing.timeout * (3 * k as u32 + 1) + Duration::from_secs(60);
    let side_tasks: Vec<_> = (0..workers)
        .map(|w| {
            let worker = SideWorker {
                tls: tls.clone(),
                domains: untouched.iter().copied().skip(w).step_by(workers).collect(),
                stats: side_stats.clone(),
                stop: stop.clone(),
                pause: opts.side_pause,
                deadline: Instant::now() + side_limit,
                max_requests: 50_000_000,
            };
            tokio::spawn(worker.run())
        })
        .collect();

    // 6. The timed changes.
    let changer = Changer {
        dir: &dir,
        tls: &tls,
        layout: opts.layout,
        https_port: https.port(),
        pacing: opts.pacing,
        progress: progress.clone(),
    };
    let changes = run_changes(&changer, admin, n, k, &modified, &added).await;
    stop.store(true, Ordering::Relaxed);
    for t in side_tasks {
        let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
    }
    let (ops, per_op) = changes?;
    let side = side_stats.report(workers, untouched.len());

    // 7. Final state, then stop the processes.
    let end = proc_stats(weir.pid()).unwrap_or_default();
    let metrics_end = scrape(admin).await;
    if let Some(status) = weir.exited() {
        progress.say(&format!("weir exited during the run ({status})"));
    }
    // weir frees its tables when it exits: 5.7 s after SIGTERM at 1,000,000 domains
    // (BENCHMARKS.md, "Session 35"), so the wait grows with the configuration.
    let grace = Duration::from_secs(5) + Duration::from_secs(15).mul_f64(n as f64 / 1e6);
    let exit = weir.stop(grace).map(|s| s.to_string());
    echo.stop(Duration::from_secs(2));
    if opts.keep_work {
        progress.say(&format!("kept {}", work.keep().display()));
    }

    let report = Report {
        tool: "weir-bench propagation",
        bench_version: env!("CARGO_PKG_VERSION"),
        started_unix,
        machine: machine(cores),
        params: Params {
            domains: n,
            changes: k,
            layout: opts.layout.name().into(),
            weir: opts.weir.display().to_string(),
            poll_interval_us: opts.pacing.poll_interval.as_micros() as u64,
            timeout_ms: opts.pacing.timeout.as_millis() as u64,
            settle_ms: opts.pacing.settle.as_millis() as u64,
            side_concurrency: workers,
            side_pause_us: opts.side_pause.as_micros() as u64,
            check_concurrency: opts.check_concurrency,
        },
        certs,
        startup: Startup {
            ready_ms: ready.as_secs_f64() * 1000.0,
            at_ready,
            weir_cpus: opts.weir_cpus.clone(),
            all_domains_ms: all_domains.as_secs_f64() * 1000.0,
            domains_not_serving: not_serving,
        },
        ops,
        side,
        weir: WeirReport {
            idle_cpu_percent,
            after_startup,
            end,
            exit,
        },
        metrics: MetricsReport {
            during_changes: metrics_end.since(&metrics_start),
            after_startup: metrics_start,
            end: metrics_end,
            per_op,
        },
        total_seconds: run_start.elapsed().as_secs_f64(),
    };
    let outputs = write_outputs(&report, &opts.out, &base, weir_log)?;
    Ok((report, outputs))
}

/// The timed changes, with weir's propagation metrics scraped between the operations so
/// that each operation's own phase times are known.
async fn run_changes(
    changer: &Changer<'_>,
    admin: SocketAddr,
    n: usize,
    k: usize,
    modified: &[Leaf],
    added: &[Leaf],
) -> Result<(Ops, PerOp)> {
    let progress = &changer.progress;
    let before = scrape(admin).await;
    progress.phase(&format!("{k} adds"), k);
    let mut add = Vec::with_capacity(k);
    for (c, leaf) in added.iter().enumerate() {
        add.push(changer.add(c, n + c, leaf).await?);
    }
    let after_add = scrape(admin).await;
    progress.phase(&format!("{k} modifications"), k);
    let mut modify = Vec::with_capacity(k);
    for (c, leaf) in modified.iter().enumerate() {
        modify.push(changer.modify(c, c, leaf).await?);
    }
    let after_modify = scrape(admin).await;
    progress.phase(&format!("{k} removals"), k);
    let mut remove = Vec::with_capacity(k);
    for c in 0..k {
        remove.push(changer.remove(c, k + c).await?);
    }
    let after_remove = scrape(admin).await;
    let ops = Ops {
        add: OpReport::new(add),
        modify: OpReport::new(modify),
        remove: OpReport::new(remove),
    };
    let per_op = PerOp {
        add: after_add.since(&before),
        modify: after_modify.since(&after_add),
        remove: after_remove.since(&after_modify),
    };
    Ok((ops, per_op))
}

fn write_outputs(report: &Report, out: &Path, base: &str, weir_log: PathBuf) -> Result<Outputs> {
    let json = out.join(format!("{base}.json"));
    std::fs::write(&json, serde_json::to_vec_pretty(report)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let png_path = out.join(format!("{base}.png"));
    let series: Vec<crate::plot::Series<'_>> = report
        .ops
        .each()
        .into_iter()
        .map(|(name, op)| crate::plot::Series {
            name,
            points: op.results.iter().map(|r| (r.change, r.ms)).collect(),
        })
        .collect();
    let title = format!(
        "weir propagation, {} domains: latency per change",
        report.params.domains
    );
    let png = match crate::plot::latency_png(
        &png_path,
        &title,
        "ms from rename/unlink to the new state over HTTPS",
        &series,
    ) {
        Ok(()) => Some(png_path),
        Err(e) => {
            eprintln!("weir-bench: no plot: {e:#}");
            None
        }
    };
    Ok(Outputs {
        json,
        png,
        weir_log,
    })
}

/// Waits until `addr` accepts TCP connections (the echo backend is up).
async fn wait_for_port(addr: SocketAddr, child: &mut ChildGuard, log: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if let Some(status) = child.exited() {
            bail!("weir echo exited ({status}); log:\n{}", log_tail(log, 20));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    bail!("weir echo did not listen on {addr} within 10 s")
}

/// Polls /ready every 5 ms; returns the time since the spawn when it answered 200.
async fn wait_ready(
    admin: SocketAddr,
    weir: &mut ChildGuard,
    log: &Path,
    limit: Duration,
) -> Result<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Ok((200, _)) = admin_get(admin, "/ready").await {
            return Ok(start.elapsed());
        }
        if let Some(status) = weir.exited() {
            bail!(
                "weir exited before /ready ({status}); last log lines:\n{}",
                log_tail(log, 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    bail!(
        "weir was not ready within {limit:?}; last log lines:\n{}",
        log_tail(log, 30)
    )
}

/// Checks domains 0..n on fresh HTTPS connections with `concurrency` clients until each
/// answered 200 or `deadline` passed. Returns how many never did.
async fn check_all(
    tls: &Tls,
    n: usize,
    concurrency: usize,
    deadline: Instant,
    progress: &Arc<Progress>,
) -> usize {
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..concurrency.clamp(1, n.max(1)))
        .map(|_| {
            let (tls, next, failed, progress) =
                (tls.clone(), next.clone(), failed.clone(), progress.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let host = domain(i);
                    let mut ok = false;
                    while Instant::now() < deadline {
                        if let Ok(mut conn) = tls.connect(&host).await
                            && conn.get("/").await == Seen::Status(200)
                        {
                            ok = true;
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    if !ok {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    progress.step(if ok { Some(Duration::ZERO) } else { None });
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    failed.load(Ordering::Relaxed)
}

/// weir's CPU use while nothing changes and no client sends anything, in percent of one
/// core over `window` (None if the window is zero or /proc cannot be read).
async fn measure_idle(pid: u32, window: Duration, progress: &Progress) -> Option<f64> {
    if window.is_zero() {
        return None;
    }
    progress.phase(&format!("measuring weir's idle CPU for {window:?}"), 1);
    let before = proc_stats(pid).ok()?;
    let t = Instant::now();
    tokio::time::sleep(window).await;
    let after = proc_stats(pid).ok()?;
    let pct = (after.cpu_seconds - before.cpu_seconds) * 100.0 / t.elapsed().as_secs_f64();
    progress.say(&format!("weir idle CPU: {pct:.1} % of a core"));
    Some(pct)
}

/// Scrapes weir's propagation metrics (empty when /metrics cannot be read).
async fn scrape(admin: SocketAddr) -> Propagation {
    match admin_get(admin, "/metrics").await {
        Ok((200, body)) => Propagation::parse(&body),
        _ => Propagation::default(),
    }
}

/// The machine the run is on (cores, CPU model, kernel).
pub(crate) fn machine(cores: usize) -> Machine {
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_owned())
    });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_owned());
    Machine {
        cores,
        cpu_model,
        kernel,
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
