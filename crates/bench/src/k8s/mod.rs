//! `weir-bench k8s`: propagation in Kubernetes mode, through a real API server.
//!
//! Layout `httproute`: N HTTPRoutes attached to one Gateway's HTTP listener, probed over
//! plain HTTP. Layout `ingress`: N TLS domains, each an Ingress (class `weir`) and its own
//! TLS Secret (ECDSA P-256, from the propagation bench's certificate cache), probed over
//! HTTPS with SNI on weir's Ingress HTTPS listener — the standalone propagation bench's
//! `ingress` layout, in Kubernetes mode. K creations are timed from the API call to the
//! first 200 through weir, K modifications of existing domains (the one rule moved from
//! `/` to `/v2-<k>`) to the first response that shows only the new rule, and K deletions
//! of other existing domains to the first 404 (or failed handshake), API server and watch
//! latency included, while a side client loops on the untouched domains and counts every
//! failure.

mod env;
mod http;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures_util::StreamExt;
use serde::Serialize;

use crate::certs::{Leaf, Pki};
use crate::client::{self, Get, Seen, Tls, admin_get};
use crate::manifests::domain;
use crate::metrics::Propagation;
use crate::ops::{Pacing, Want, wait_for};
use crate::plot::{self, Series};
use crate::procs::{self, ChildGuard, ProcStats};
use crate::progress::Progress;
use crate::side::{SideReport, SideStats, SideWorker};
use crate::stats::Summary;

/// What the bench creates per domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Layout {
    /// An HTTPRoute on one Gateway's HTTP listener (plain HTTP).
    Httproute,
    /// An Ingress with its own TLS Secret, served on weir's Ingress HTTPS listener.
    Ingress,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::Httproute => "httproute",
            Layout::Ingress => "ingress",
        }
    }

    /// The host name of domain `i`.
    fn host(self, i: usize) -> String {
        match self {
            Layout::Httproute => format!("r{i}.bench.test"),
            Layout::Ingress => domain(i),
        }
    }
}

/// Settings of one run.
pub(crate) struct Options {
    pub(crate) layout: Layout,
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
    /// The certificate cache (layout `ingress`), shared with `propagation`.
    pub(crate) cache: PathBuf,
}

/// What a run measured.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    /// `embedded` or `split`.
    pub(crate) mode: &'static str,
    /// `httproute` or `ingress`.
    pub(crate) layout: &'static str,
    /// Domains (routes, or Ingresses with their Secrets) before the timed changes.
    pub(crate) routes: usize,
    pub(crate) changes: usize,
    /// Creating the N domains (before weir starts).
    pub(crate) create_all_ms: f64,
    /// weir started → `/ready` (every watcher listed, first snapshot applied).
    pub(crate) ready_ms: f64,
    /// weir's RSS, peak RSS and CPU time when `/ready` first answered.
    pub(crate) weir_at_ready: ProcStats,
    /// CPU seconds kube-apiserver and etcd spent from weir's start to `/ready`.
    pub(crate) cluster_cpu_to_ready_s: f64,
    /// weir started → Gateway status shows N attached routes (layout `httproute`).
    pub(crate) attached_all_ms: Option<f64>,
    /// weir started → every initial status written.
    pub(crate) statuses_settled_ms: f64,
    /// Create → first 200 per domain.
    pub(crate) add: Summary,
    /// Rule moved → the new path 200 and `/` 404.
    pub(crate) modify: Summary,
    /// Delete → first 404 (or failed handshake) per domain.
    pub(crate) remove: Summary,
    /// Of each latency, the API call alone (request → response).
    pub(crate) add_api: Summary,
    pub(crate) modify_api: Summary,
    pub(crate) remove_api: Summary,
    pub(crate) add_ms: Vec<Option<f64>>,
    pub(crate) modify_ms: Vec<Option<f64>>,
    pub(crate) remove_ms: Vec<Option<f64>>,
    pub(crate) side_requests: u64,
    pub(crate) side_failures: u64,
    /// The HTTPS side client's own report (layout `ingress`).
    pub(crate) side: Option<SideReport>,
    /// weir at the end of the run.
    pub(crate) weir: ProcStats,
    /// The `weir proxy` process in split mode.
    pub(crate) proxy: Option<ProcStats>,
    /// weir's own `weir_propagation_seconds` during each phase (watch event received →
    /// snapshot published).
    pub(crate) weir_during_adds: Propagation,
    pub(crate) weir_during_modifies: Propagation,
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
        let what = match self.layout {
            "ingress" => "Ingresses, each with its own TLS Secret, on the Ingress HTTPS listener",
            _ => "HTTPRoutes on one Gateway",
        };
        let attached = self
            .attached_all_ms
            .map(|ms| format!(", → attachedRoutes={} {ms:.0} ms", self.routes))
            .unwrap_or_default();
        let mut out = format!(
            "weir controller ({} data plane), {} {what}; {} changes per operation\n\n\
             create {} domains: {:.0} ms; weir start → /ready {:.0} ms (RSS {:.0} MiB, peak {:.0} MiB, \
             CPU {:.1} s; API server + etcd CPU {:.1} s){attached}, → all statuses written {:.0} ms\n\n\
             | operation | n | timeouts | mean ms | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|---|\n",
            self.mode,
            self.routes,
            self.changes,
            self.routes,
            self.create_all_ms,
            self.ready_ms,
            self.weir_at_ready.rss_kib as f64 / 1024.0,
            self.weir_at_ready.peak_rss_kib as f64 / 1024.0,
            self.weir_at_ready.cpu_seconds,
            self.cluster_cpu_to_ready_s,
            self.statuses_settled_ms
        );
        out += &row("add (create → 200)", &self.add);
        out += &row("modify (path moved → new path 200, / 404)", &self.modify);
        out += &row("remove (delete → 404)", &self.remove);
        out += &row("of which add API call", &self.add_api);
        out += &row("of which modify API call", &self.modify_api);
        out += &row("of which remove API call", &self.remove_api);
        let phases = |p: &Propagation| {
            p.phases
                .iter()
                .map(|(k, v)| format!("{k} {:.3} ms", v.mean_ms))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out += &format!(
            "\nweir's own mean per change (watch event → published): adds: {}; modifications: {}; removals: {}\n",
            phases(&self.weir_during_adds),
            phases(&self.weir_during_modifies),
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
        if let Some(side) = self.side.as_ref().filter(|s| !s.first_errors.is_empty()) {
            out += &format!("\nside client's first problems: {:?}\n", side.first_errors);
        }
        out
    }
}

fn route_name(i: usize) -> String {
    format!("r{i}")
}

/// A probe of one domain in either layout.
enum Prober {
    Plain(http::Probe),
    Tls(client::Probe),
}

impl Get for Prober {
    async fn get(&mut self, path: &str) -> Seen {
        match self {
            Prober::Plain(p) => p.get(path).await,
            Prober::Tls(p) => p.get(path).await,
        }
    }
}

/// The side client of either layout.
enum SideClient {
    Plain(Side),
    Tls {
        stats: Arc<SideStats>,
        stop: Arc<AtomicBool>,
        tasks: Vec<tokio::task::JoinHandle<()>>,
        workers: usize,
        domains: usize,
    },
}

impl SideClient {
    /// Requests, failures, and the HTTPS side client's report.
    async fn stop(self) -> (u64, u64, Option<SideReport>) {
        match self {
            SideClient::Plain(side) => {
                let (requests, failures) = side.stop().await;
                (requests, failures, None)
            }
            SideClient::Tls {
                stats,
                stop,
                tasks,
                workers,
                domains,
            } => {
                stop.store(true, Ordering::Relaxed);
                for t in tasks {
                    let _ = t.await;
                }
                let report = stats.report(workers, domains);
                (
                    report.requests,
                    report.non_200 + report.errors,
                    Some(report),
                )
            }
        }
    }
}

/// The bench's view of the cluster and of weir during the timed changes.
struct Bench<'a> {
    opts: &'a Options,
    objects: &'a env::Objects,
    listen: SocketAddr,
    tls: Option<Tls>,
    leaves: &'a [Leaf],
    pacing: Pacing,
    progress: &'a Progress,
}

impl Bench<'_> {
    fn probe(&self, i: usize) -> Prober {
        let host = self.opts.layout.host(i);
        match &self.tls {
            Some(tls) => Prober::Tls(client::Probe::new(tls, host)),
            None => Prober::Plain(http::Probe::new(self.listen, host)),
        }
    }

    /// A probe of domain `i` that has just been served (its connection kept for the polls).
    async fn warmed(&self, i: usize) -> Prober {
        let mut probe = self.probe(i);
        let seen = probe.get("/").await;
        if seen != Seen::Status(200) {
            self.progress.say(&format!(
                "{} did not answer 200 before its change: {seen}",
                self.opts.layout.host(i)
            ));
        }
        probe
    }

    /// Creates domain `i` (its Secret first, outside the timed window, in layout
    /// `ingress`); the latency to the first 200 and the API call's time.
    async fn add(&self, i: usize) -> Result<(Option<f64>, f64)> {
        let mut probe = self.probe(i);
        if self.opts.layout == Layout::Httproute {
            probe.get("/").await; // connect before the clock starts
        }
        if self.opts.layout == Layout::Ingress {
            self.objects.create_secret(i, &self.leaves[i]).await?;
        }
        let t = tokio::time::Instant::now();
        match self.opts.layout {
            Layout::Httproute => {
                self.objects
                    .create_route(&route_name(i), &self.opts.layout.host(i))
                    .await?
            }
            Layout::Ingress => self.objects.create_ingress(i).await?,
        }
        let api = ms(t.elapsed());
        let (latency, _, _) = wait_for(&mut probe, &Want::Serving, t, self.pacing).await;
        Ok((latency.map(ms), api))
    }

    /// Moves domain `i`'s rule to `/v2-<k>`.
    async fn modify(&self, i: usize, k: usize) -> Result<(Option<f64>, f64)> {
        let path = format!("/v2-{k}");
        let mut probe = self.warmed(i).await;
        let t = tokio::time::Instant::now();
        match self.opts.layout {
            Layout::Httproute => self.objects.move_route(&route_name(i), &path).await?,
            Layout::Ingress => self.objects.move_ingress(i, &path).await?,
        }
        let api = ms(t.elapsed());
        let (latency, _, _) = wait_for(&mut probe, &Want::Moved { path }, t, self.pacing).await;
        Ok((latency.map(ms), api))
    }

    /// Deletes domain `i` (its Secret afterwards, outside the timed window).
    async fn remove(&self, i: usize) -> Result<(Option<f64>, f64)> {
        let mut probe = self.warmed(i).await;
        let t = tokio::time::Instant::now();
        match self.opts.layout {
            Layout::Httproute => self.objects.delete_route(&route_name(i)).await?,
            Layout::Ingress => self.objects.delete_ingress(i).await?,
        }
        let api = ms(t.elapsed());
        let (latency, _, _) = wait_for(&mut probe, &Want::Gone, t, self.pacing).await;
        if self.opts.layout == Layout::Ingress {
            self.objects.delete_secret(i).await?;
        }
        Ok((latency.map(ms), api))
    }
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
    let (n, k) = (opts.routes, opts.changes);
    if n <= 2 * k {
        bail!(
            "--routes ({n}) must be more than twice --changes ({k}): the changes modify domains 0..K and remove K..2K, and the side client needs the rest"
        );
    }
    let progress = Progress::new();
    let (pki, leaves) = if opts.layout == Layout::Ingress {
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        progress.phase(&format!("certificates for {} domains", n + k), 1);
        let cache = opts.cache.clone();
        let (pki, leaves) = tokio::task::spawn_blocking(move || -> Result<_> {
            let pki = Pki::open(&cache)?;
            let indices: Vec<usize> = (0..n + k).collect();
            let (leaves, _) = pki.leaves(&indices, cores)?;
            Ok((pki, leaves))
        })
        .await??;
        (Some(pki), leaves)
    } else {
        (None, Vec::new())
    };
    progress.phase("starting kube-apiserver (scripts/k8s-env)", 1);
    let apiserver = env::ApiServer::start(
        &opts.workspace,
        opts.work.join(format!("k8s-{}", std::process::id())),
    )?;
    let backend = env::Backend::start(&opts.weir, &opts.work.join("k8s-echo.log"))?;
    let client = weir_provider_k8s::client(Some(&apiserver.kubeconfig())).await?;
    let objects = Arc::new(env::Objects::new(client));
    let listen = SocketAddr::from(([127, 0, 1, 1], procs::free_port()?));
    let ingress_https = SocketAddr::from(([127, 0, 2, 1], procs::free_port()?));
    objects.base(backend.addr, listen).await?;

    progress.phase(&format!("creating {n} domains ({})", opts.layout.name()), n);
    let t = Instant::now();
    let leaves = Arc::new(leaves);
    let results: Vec<Result<()>> = futures_util::stream::iter(0..n)
        .map(|i| {
            let (objects, progress, leaves) = (objects.clone(), progress.clone(), leaves.clone());
            let layout = opts.layout;
            async move {
                let r = match layout {
                    Layout::Httproute => {
                        objects.create_route(&route_name(i), &layout.host(i)).await
                    }
                    Layout::Ingress => match objects.create_secret(i, &leaves[i]).await {
                        Ok(()) => objects.create_ingress(i).await,
                        Err(e) => Err(e),
                    },
                };
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
        ingress_https.to_string(),
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
    let cluster_cpu_at_start = apiserver.cpu_seconds();
    let started = Instant::now();
    let mut weir = ChildGuard::spawn("weir", &opts.weir, &args, &log)?;
    progress.set_weir_pid(weir.pid());
    // 300 s, or 5 ms per domain when more: at 100,000 the initial status writes alone
    // take minutes (one PATCH per route or Ingress).
    let deadline = started + Duration::from_secs(300).max(Duration::from_millis(n as u64 * 5));
    let (weir_at_ready, cluster_cpu_to_ready_s) = loop {
        if let Some(status) = weir.exited() {
            bail!("weir exited ({status}): {}", procs::log_tail(&log, 20));
        }
        if matches!(admin_get(admin, "/ready").await, Ok((200, _))) {
            break (
                procs::proc_stats(weir.pid()).unwrap_or_default(),
                apiserver.cpu_seconds() - cluster_cpu_at_start,
            );
        }
        if Instant::now() > deadline {
            bail!("weir not ready in time: {}", procs::log_tail(&log, 20));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
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
    let attached_all_ms = if opts.layout == Layout::Httproute {
        while objects.attached_routes().await.ok().flatten() != Some(n as i64) {
            if Instant::now() > deadline {
                bail!("attachedRoutes never reached {n}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Some(ms(started.elapsed()))
    } else {
        None
    };
    // Changes are timed on a steady state: wait until weir has written every initial
    // status (1 PATCH per route or Ingress, which keeps the API server busy for a while).
    progress.phase("waiting for the initial status writes", 1);
    // Settled once nothing has been pending for 2 s: right after `/ready` the writer may
    // not have been handed the first statuses yet (a run read 0 pending there and timed
    // its changes against 87,000 status writes still to come).
    let mut zero_since: Option<Instant> = None;
    let settled_ms = loop {
        let pending = match admin_get(admin, "/metrics").await {
            Ok((200, text)) => text
                .lines()
                .find_map(|l| l.strip_prefix("weir_status_pending_objects "))
                .and_then(|v| v.trim().parse::<f64>().ok()),
            _ => None,
        };
        if pending == Some(0.0) {
            let since = *zero_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_secs(2) {
                break ms(since - started);
            }
        } else {
            zero_since = None;
        }
        if Instant::now() > deadline {
            bail!("status writes never settled");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let tls = match &pki {
        Some(pki) => Some(Tls::new(ingress_https, pki.ca_der())?),
        None => None,
    };
    let bench = Bench {
        opts,
        objects: &objects,
        listen,
        tls: tls.clone(),
        leaves: &leaves,
        pacing: Pacing {
            poll_interval: opts.poll,
            timeout: opts.timeout,
            settle: Duration::ZERO,
        },
        progress: &progress,
    };
    // Every existing domain answers before changes start: the last one created does.
    let mut last = bench.probe(n - 1);
    if wait_for(
        &mut last,
        &Want::Serving,
        tokio::time::Instant::now(),
        bench.pacing,
    )
    .await
    .0
    .is_none()
    {
        bail!("{} never answered", opts.layout.host(n - 1));
    }

    let scrape = || async {
        match admin_get(admin, "/metrics").await {
            Ok((200, text)) => Propagation::parse(&text),
            _ => Propagation::default(),
        }
    };
    let side = match &tls {
        None => SideClient::Plain(Side::start(listen, 2 * k..n, opts.side_workers)),
        Some(tls) => {
            let stats = Arc::new(SideStats::default());
            progress.set_side(stats.clone());
            let stop = Arc::new(AtomicBool::new(false));
            let workers = opts.side_workers.min(n - 2 * k);
            let limit = opts.timeout * (3 * k as u32 + 1) + Duration::from_secs(60);
            let tasks = (0..workers)
                .map(|w| {
                    tokio::spawn(
                        SideWorker {
                            tls: tls.clone(),
                            domains: (2 * k + w..n).step_by(workers).collect(),
                            stats: stats.clone(),
                            stop: stop.clone(),
                            pause: Duration::from_millis(1),
                            deadline: tokio::time::Instant::now() + limit,
                            max_requests: 50_000_000,
                        }
                        .run(),
                    )
                })
                .collect();
            SideClient::Tls {
                stats,
                stop,
                tasks,
                workers,
                domains: n - 2 * k,
            }
        }
    };
    // As in `propagation`: adds create domains N..N+K, modifications move domains 0..K,
    // removals delete domains K..2K, and the side client loops on 2K..N.
    let before_adds = scrape().await;
    let (mut add_ms, mut add_api) = (Vec::with_capacity(k), Vec::with_capacity(k));
    progress.phase("adds: create → first 200", k);
    for c in 0..k {
        record(
            &progress,
            bench.add(n + c).await?,
            &mut add_ms,
            &mut add_api,
        );
    }
    let after_adds = scrape().await;
    let (mut modify_ms, mut modify_api) = (Vec::with_capacity(k), Vec::with_capacity(k));
    progress.phase("modifications: path moved → served", k);
    for c in 0..k {
        record(
            &progress,
            bench.modify(c, c).await?,
            &mut modify_ms,
            &mut modify_api,
        );
    }
    let after_modifies = scrape().await;
    let (mut remove_ms, mut remove_api) = (Vec::with_capacity(k), Vec::with_capacity(k));
    progress.phase("removals: delete → first 404", k);
    for c in 0..k {
        record(
            &progress,
            bench.remove(k + c).await?,
            &mut remove_ms,
            &mut remove_api,
        );
    }
    let after_removals = scrape().await;
    let (side_requests, side_failures, side_report) = side.stop().await;
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

    let summary = |v: &[Option<f64>]| -> Summary {
        let ok: Vec<f64> = v.iter().flatten().copied().collect();
        Summary::of(&ok, v.iter().filter(|x| x.is_none()).count())
    };
    let report = Report {
        mode: if opts.split { "split" } else { "embedded" },
        layout: opts.layout.name(),
        proxy: proxy_stats,
        routes: n,
        changes: k,
        create_all_ms,
        ready_ms,
        weir_at_ready,
        cluster_cpu_to_ready_s,
        attached_all_ms,
        statuses_settled_ms: settled_ms,
        add: summary(&add_ms),
        modify: summary(&modify_ms),
        remove: summary(&remove_ms),
        add_api: Summary::of(&add_api, 0),
        modify_api: Summary::of(&modify_api, 0),
        remove_api: Summary::of(&remove_api, 0),
        add_ms,
        modify_ms,
        remove_ms,
        side_requests,
        side_failures,
        side: side_report,
        weir_during_adds: after_adds.since(&before_adds),
        weir_during_modifies: after_modifies.since(&after_adds),
        weir_during_removals: after_removals.since(&after_modifies),
        weir: weir_stats,
        status_writes,
    };
    let base = format!(
        "k8s-propagation-{}{}{}",
        if opts.layout == Layout::Ingress {
            "ingress-"
        } else {
            ""
        },
        n,
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
            "weir controller: change → served, {n} domains ({})",
            opts.layout.name()
        ),
        "ms from the API call to the new state",
        &[
            series("add (create → 200)", &report.add_ms),
            series("modify (path moved → served)", &report.modify_ms),
            series("remove (delete → 404)", &report.remove_ms),
        ],
    ) {
        Ok(()) => files.push(png),
        Err(e) => eprintln!("no plot: {e:#}"),
    }
    Ok((report, files))
}

/// Keeps one timed change: its latency (None: timed out) and its API call's time.
fn record(
    progress: &Progress,
    (latency, api): (Option<f64>, f64),
    latencies: &mut Vec<Option<f64>>,
    apis: &mut Vec<f64>,
) {
    progress.step(latency.map(|l| Duration::from_secs_f64(l / 1000.0)));
    latencies.push(latency);
    apis.push(api);
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
    /// Workers looping on routes `untouched` (a non-empty range).
    fn start(addr: SocketAddr, untouched: std::ops::Range<usize>, workers: usize) -> Side {
        let (first, routes) = (untouched.start, untouched.len());
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(AtomicU64::new(0));
        let tasks = (0..workers)
            .map(|w| {
                let (stop, requests, failures) = (stop.clone(), requests.clone(), failures.clone());
                tokio::spawn(async move {
                    let mut i = w;
                    let mut probe =
                        http::Probe::new(addr, Layout::Httproute.host(first + i % routes));
                    while !stop.load(Ordering::Relaxed) {
                        i = (i + 7919) % routes;
                        probe.set_host(Layout::Httproute.host(first + i));
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
