//! `weir-bench k8s`: propagation in Kubernetes mode. With N HTTPRoutes attached to one
//! Gateway, times K route creations from the API call to the first 200 through weir (and
//! K deletions to the first 404), API server watch latency included, while a side client
//! loops on the N untouched routes and counts every failure.

mod env;
mod http;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures_util::StreamExt;
use serde::Serialize;

use crate::client::admin_get;
use crate::metrics::Propagation;
use crate::plot::{self, Series};
use crate::procs::{self, ChildGuard, ProcStats};
use crate::progress::Progress;
use crate::stats::Summary;

/// Settings of one run.
pub(crate) struct Options {
    pub(crate) routes: usize,
    pub(crate) changes: usize,
    /// Split mode: the controller serves no traffic; a `weir proxy` fed over the push
    /// protocol does.
    pub(crate) split: bool,
    pub(crate) side_workers: usize,
    pub(crate) poll: Duration,
    pub(crate) timeout: Duration,
    pub(crate) weir: PathBuf,
    pub(crate) workspace: PathBuf,
    pub(crate) work: PathBuf,
    pub(crate) out: PathBuf,
}

/// What a run measured.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    /// `embedded` or `split`.
    pub(crate) mode: &'static str,
    pub(crate) routes: usize,
    pub(crate) changes: usize,
    /// Creating the N routes (before weir starts).
    pub(crate) create_all_ms: f64,
    /// weir started → `/ready` (every watcher listed, first snapshot applied).
    pub(crate) ready_ms: f64,
    /// weir started → Gateway status shows N attached routes.
    pub(crate) attached_all_ms: f64,
    /// weir started → every initial status written.
    pub(crate) statuses_settled_ms: f64,
    /// Create → first 200 per route.
    pub(crate) add: Summary,
    /// Delete → first 404 per route.
    pub(crate) remove: Summary,
    /// Of the add latency, the API call alone (create request → response).
    pub(crate) add_api: Summary,
    /// Of the remove latency, the API call alone.
    pub(crate) remove_api: Summary,
    pub(crate) add_ms: Vec<Option<f64>>,
    pub(crate) remove_ms: Vec<Option<f64>>,
    pub(crate) side_requests: u64,
    pub(crate) side_failures: u64,
    pub(crate) weir: ProcStats,
    /// The `weir proxy` process in split mode.
    pub(crate) proxy: Option<ProcStats>,
    /// weir's own `weir_propagation_seconds` during the adds and during the removals
    /// (watch event received → snapshot published), per phase.
    pub(crate) weir_during_adds: Propagation,
    pub(crate) weir_during_removals: Propagation,
    /// Status writes by weir during the whole run (from its /metrics).
    pub(crate) status_writes: u64,
}

impl Report {
    pub(crate) fn markdown(&self) -> String {
        let row = |name: &str, s: &Summary| {
            format!(
                "| {name} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
                s.count, s.failures, s.mean_ms, s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms
            )
        };
        let mut out = format!(
            "weir controller ({} data plane), {} HTTPRoutes on one Gateway; {} changes per operation\n\n\
             create {} routes: {:.0} ms; weir start → /ready {:.0} ms, → attachedRoutes={} {:.0} ms, \
             → all statuses written {:.0} ms\n\n\
             | operation | n | timeouts | mean ms | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|---|\n",
            self.mode,
            self.routes,
            self.changes,
            self.routes,
            self.create_all_ms,
            self.ready_ms,
            self.routes,
            self.attached_all_ms,
            self.statuses_settled_ms
        );
        out += &row("add (create → 200)", &self.add);
        out += &row("remove (delete → 404)", &self.remove);
        out += &row("of which add API call", &self.add_api);
        out += &row("of which remove API call", &self.remove_api);
        let phases = |p: &Propagation| {
            p.phases
                .iter()
                .map(|(k, v)| format!("{k} {:.3} ms", v.mean_ms))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out += &format!(
            "\nweir's own mean per change (watch event → published): adds: {}; removals: {}\n",
            phases(&self.weir_during_adds),
            phases(&self.weir_during_removals)
        );
        out += &format!(
            "\nside client: {} requests, {} failures; weir RSS {:.0} MiB, CPU {:.1} s; status writes {}\n",
            self.side_requests,
            self.side_failures,
            self.weir.rss_kib as f64 / 1024.0,
            self.weir.cpu_seconds,
            self.status_writes
        );
        out
    }
}

fn route_name(i: usize) -> String {
    format!("r{i}")
}
fn host(i: usize) -> String {
    format!("r{i}.bench.test")
}

pub(crate) async fn run(opts: &Options) -> Result<(Report, Vec<PathBuf>)> {
    if !opts.weir.exists() {
        bail!(
            "{} not found (cargo build --release -p weir)",
            opts.weir.display()
        );
    }
    std::fs::create_dir_all(&opts.work)?;
    std::fs::create_dir_all(&opts.out)?;
    let progress = Progress::new();
    progress.phase("starting kube-apiserver (scripts/k8s-env)", 1);
    let apiserver = env::ApiServer::start(
        &opts.workspace,
        opts.work.join(format!("k8s-{}", std::process::id())),
    )?;
    let backend = env::Backend::start(&opts.weir, &opts.work.join("k8s-echo.log"))?;
    let client = weir_provider_k8s::client(Some(&apiserver.kubeconfig())).await?;
    let objects = Arc::new(env::Objects::new(client));
    let listen = SocketAddr::from(([127, 0, 1, 1], procs::free_port()?));
    objects.base(backend.addr, listen).await?;

    progress.phase(&format!("creating {} HTTPRoutes", opts.routes), opts.routes);
    let t = Instant::now();
    let results: Vec<Result<()>> = futures_util::stream::iter(0..opts.routes)
        .map(|i| {
            let objects = objects.clone();
            let progress = progress.clone();
            async move {
                let r = objects.create_route(&route_name(i), &host(i)).await;
                progress.step(r.is_ok().then(Duration::default));
                r
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<()>>>()?;
    let create_all_ms = ms(t.elapsed());

    progress.phase("starting weir controller", 1);
    let admin = SocketAddr::from(([127, 0, 0, 1], procs::free_port()?));
    let xds = SocketAddr::from(([127, 0, 0, 1], procs::free_port()?));
    let mut args: Vec<String> = vec![
        "controller".into(),
        "--kubeconfig".into(),
        apiserver.kubeconfig().display().to_string(),
        "--admin".into(),
        admin.to_string(),
        "--ingress-http".into(),
        format!("127.0.2.1:{}", procs::free_port()?),
        "--ingress-https".into(),
        format!("127.0.2.1:{}", procs::free_port()?),
        "--no-access-log".into(),
    ];
    if opts.split {
        // The bench's proxy presents no ServiceAccount token (authentication is covered
        // by the Kubernetes tests, not timed here).
        args.extend([
            format!("--xds-listen={xds}"),
            "--no-embedded-proxy".into(),
            "--xds-auth=none".into(),
        ]);
    }
    let log = opts.work.join("k8s-weir.log");
    let started = Instant::now();
    let mut weir = ChildGuard::spawn("weir", &opts.weir, &args, &log)?;
    progress.set_weir_pid(weir.pid());
    // 300 s, or 5 ms per route when more: at 100,000 routes the initial status writes
    // alone take minutes (one PATCH per route).
    let deadline =
        started + Duration::from_secs(300).max(Duration::from_millis(opts.routes as u64 * 5));
    loop {
        if let Some(status) = weir.exited() {
            bail!("weir exited ({status}): {}", procs::log_tail(&log, 20));
        }
        if matches!(admin_get(admin, "/ready").await, Ok((200, _))) {
            break;
        }
        if Instant::now() > deadline {
            bail!("weir not ready in time: {}", procs::log_tail(&log, 20));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Split mode: the data plane is a separate process fed by the controller.
    let mut proxy = None;
    if opts.split {
        let padmin = SocketAddr::from(([127, 0, 0, 1], procs::free_port()?));
        let plog = opts.work.join("k8s-proxy.log");
        let pargs: Vec<String> = vec![
            "proxy".into(),
            format!("--controller=http://{xds}"),
            format!("--gateway={}/gw", env::NS),
            format!("--admin={padmin}"),
            "--no-access-log".into(),
        ];
        let mut p = ChildGuard::spawn("weir proxy", &opts.weir, &pargs, &plog)?;
        loop {
            if let Some(status) = p.exited() {
                bail!(
                    "weir proxy exited ({status}): {}",
                    procs::log_tail(&plog, 20)
                );
            }
            if matches!(admin_get(padmin, "/ready").await, Ok((200, _))) {
                break;
            }
            if Instant::now() > deadline {
                bail!("weir proxy not ready: {}", procs::log_tail(&plog, 20));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        proxy = Some(p);
    }
    let ready_ms = ms(started.elapsed());
    while objects.attached_routes().await.ok().flatten() != Some(opts.routes as i64) {
        if Instant::now() > deadline {
            bail!("attachedRoutes never reached {}", opts.routes);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let attached_all_ms = ms(started.elapsed());
    // Changes are timed on a steady state: wait until weir has written every route's
    // status (1 PATCH per route at startup, which keeps the API server busy for a while).
    progress.phase("waiting for the initial status writes", 1);
    loop {
        let pending = match admin_get(admin, "/metrics").await {
            Ok((200, text)) => text
                .lines()
                .find_map(|l| l.strip_prefix("weir_status_pending_objects "))
                .and_then(|v| v.trim().parse::<f64>().ok()),
            _ => None,
        };
        if pending == Some(0.0) {
            break;
        }
        if Instant::now() > deadline {
            bail!("status writes never settled");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let settled_ms = ms(started.elapsed());
    // Every existing route answers before changes start.
    http::until(listen, &host(opts.routes - 1), 200, opts.timeout)
        .await
        .context("the last route never answered")?;

    let scrape = || async {
        match admin_get(admin, "/metrics").await {
            Ok((200, text)) => Propagation::parse(&text),
            _ => Propagation::default(),
        }
    };
    let side = Side::start(listen, opts.routes, opts.side_workers);
    let before_adds = scrape().await;
    let mut add_ms = Vec::with_capacity(opts.changes);
    let mut add_api = Vec::with_capacity(opts.changes);
    progress.phase("adds: create → first 200", opts.changes);
    for k in 0..opts.changes {
        let i = opts.routes + k;
        let mut probe = http::Probe::new(listen, host(i));
        probe.status().await; // connect before the clock starts
        let t = Instant::now();
        objects.create_route(&route_name(i), &host(i)).await?;
        add_api.push(ms(t.elapsed()));
        let r = probe.until(200, t, opts.poll, opts.timeout).await;
        progress.step(r);
        add_ms.push(r.map(ms));
    }
    let after_adds = scrape().await;
    let mut remove_ms = Vec::with_capacity(opts.changes);
    let mut remove_api = Vec::with_capacity(opts.changes);
    progress.phase("removals: delete → first 404", opts.changes);
    for k in 0..opts.changes {
        let i = opts.routes + k;
        let mut probe = http::Probe::new(listen, host(i));
        probe.status().await;
        let t = Instant::now();
        objects.delete_route(&route_name(i)).await?;
        remove_api.push(ms(t.elapsed()));
        let r = probe.until(404, t, opts.poll, opts.timeout).await;
        progress.step(r);
        remove_ms.push(r.map(ms));
    }
    let after_removals = scrape().await;
    let (side_requests, side_failures) = side.stop().await;
    let weir_stats = procs::proc_stats(weir.pid()).unwrap_or_default();
    let status_writes = match admin_get(admin, "/metrics").await {
        Ok((200, text)) => text
            .lines()
            .filter(|l| {
                l.starts_with("weir_status_writes_total{") && l.contains("result=\"written\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum(),
        _ => 0,
    };
    let proxy_stats = proxy.as_ref().and_then(|p| procs::proc_stats(p.pid()).ok());
    if let Some(mut p) = proxy {
        p.stop(Duration::from_secs(5));
    }
    weir.stop(Duration::from_secs(5));
    drop(backend);
    drop(apiserver);

    let finite = |v: &[Option<f64>]| -> (Vec<f64>, usize) {
        (
            v.iter().flatten().copied().collect(),
            v.iter().filter(|x| x.is_none()).count(),
        )
    };
    let (a, af) = finite(&add_ms);
    let (r, rf) = finite(&remove_ms);
    let report = Report {
        mode: if opts.split { "split" } else { "embedded" },
        proxy: proxy_stats,
        routes: opts.routes,
        changes: opts.changes,
        create_all_ms,
        ready_ms,
        attached_all_ms,
        statuses_settled_ms: settled_ms,
        add: Summary::of(&a, af),
        remove: Summary::of(&r, rf),
        add_api: Summary::of(&add_api, 0),
        remove_api: Summary::of(&remove_api, 0),
        add_ms,
        remove_ms,
        side_requests,
        side_failures,
        weir_during_adds: after_adds.since(&before_adds),
        weir_during_removals: after_removals.since(&after_adds),
        weir: weir_stats,
        status_writes,
    };
    let base = format!(
        "k8s-propagation-{}{}",
        opts.routes,
        if opts.split { "-split" } else { "" }
    );
    let json = opts.out.join(format!("{base}.json"));
    std::fs::write(&json, serde_json::to_vec_pretty(&report)?)?;
    let mut files = vec![json];
    let png = opts.out.join(format!("{base}.png"));
    let series = |name, v: &[Option<f64>]| Series {
        name,
        points: v.iter().copied().enumerate().collect(),
    };
    match plot::latency_png(
        &png,
        &format!(
            "weir controller: HTTPRoute change → served, {} routes",
            opts.routes
        ),
        "ms from the API call to the new state over HTTP",
        &[
            series("add (create → 200)", &report.add_ms),
            series("remove (delete → 404)", &report.remove_ms),
        ],
    ) {
        Ok(()) => files.push(png),
        Err(e) => eprintln!("no plot: {e:#}"),
    }
    Ok((report, files))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Keep-alive clients looping on the untouched routes; every non-200 or error counts.
struct Side {
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Side {
    fn start(addr: SocketAddr, routes: usize, workers: usize) -> Side {
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(AtomicU64::new(0));
        let tasks = (0..workers)
            .map(|w| {
                let (stop, requests, failures) = (stop.clone(), requests.clone(), failures.clone());
                tokio::spawn(async move {
                    let mut i = w;
                    let mut probe = http::Probe::new(addr, host(i % routes));
                    while !stop.load(Ordering::Relaxed) {
                        i = (i + 7919) % routes;
                        probe.set_host(host(i));
                        requests.fetch_add(1, Ordering::Relaxed);
                        if probe.status().await != Some(200) {
                            failures.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                })
            })
            .collect();
        Side {
            stop,
            requests,
            failures,
            tasks,
        }
    }

    async fn stop(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            let _ = t.await;
        }
        (
            self.requests.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
        )
    }
}
