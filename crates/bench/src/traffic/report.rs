//! The traffic report: JSON, markdown tables and PNG charts.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::plot::{CategorySeries, YScale, category_png};
use crate::report::Machine;
use crate::traffic::loadgen::{Latency, LoadResult};
use crate::traffic::proxies::ProxyKind;
use crate::traffic::sys::{TreeStats, Versions};
use crate::traffic::{PROXY_CPU, Scenario};

/// Everything one traffic run measured.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct TrafficReport {
    pub(crate) tool: &'static str,
    pub(crate) bench_version: &'static str,
    pub(crate) started_unix: u64,
    pub(crate) machine: Machine,
    pub(crate) pinning: String,
    pub(crate) versions: Versions,
    pub(crate) params: Params,
    /// One per proxy and setup (1 domain, or the large one).
    pub(crate) runs: Vec<ProxyRun>,
    pub(crate) results: Vec<Measured>,
    /// weir against the peers in every round, not only the median one.
    pub(crate) per_round: Vec<RoundRatios>,
    pub(crate) total_seconds: f64,
}

/// weir / the best peer in each round of one scenario: req/s over the highest peer's,
/// CPU per request over the lowest peer's (`None` where weir or every peer failed).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct RoundRatios {
    pub(crate) scenario: String,
    pub(crate) rps: Vec<Option<f64>>,
    pub(crate) cpu: Vec<Option<f64>>,
}

/// The requests of a load that did not fail.
fn good_requests(load: &LoadResult) -> u64 {
    load.requests.saturating_sub(load.errors)
}

/// The best of the peers' figures: the highest req/s (`None` when none served) and the
/// lowest CPU per request.
fn best_of_peers<'a>(peers: impl IntoIterator<Item = &'a Measured>) -> (Option<f64>, Option<f64>) {
    let (mut rps, mut cpu) = (0.0f64, None::<f64>);
    for m in peers {
        if let Some(r) = m.rps() {
            rps = rps.max(r);
        }
        if let Some(c) = m.cpu_s_per_100k.filter(|c| *c > 0.0) {
            cpu = Some(cpu.map_or(c, |b| b.min(c)));
        }
    }
    ((rps > 0.0).then_some(rps), cpu)
}

/// Issue #17's traffic bar: at least this much of the best peer's req/s...
const BAR_RPS: f64 = 1.1;
/// ...at no more than this much of its CPU per request, in every round.
const BAR_CPU: f64 = 0.9;

impl RoundRatios {
    /// The ratios of every round of every scenario in `raw` (measurements in run order:
    /// a proxy's k-th measurement of a scenario is its round k).
    pub(crate) fn of(raw: &[Measured]) -> Vec<RoundRatios> {
        let mut scenarios: Vec<&str> = Vec::new();
        let mut peers: Vec<ProxyKind> = Vec::new();
        for m in raw {
            if !scenarios.contains(&m.scenario.as_str()) {
                scenarios.push(&m.scenario);
            }
            if m.proxy.is_peer() && !peers.contains(&m.proxy) {
                peers.push(m.proxy);
            }
        }
        let rounds_of = |scenario: &str, proxy: ProxyKind| -> Vec<&Measured> {
            raw.iter()
                .filter(|m| m.scenario == scenario && m.proxy == proxy)
                .collect()
        };
        let mut out = Vec::new();
        for sc in scenarios {
            let weir = rounds_of(sc, ProxyKind::Weir);
            let peer_rounds: Vec<Vec<&Measured>> = peers
                .iter()
                .map(|p| rounds_of(sc, *p))
                .filter(|r| !r.is_empty())
                .collect();
            if weir.is_empty() || peer_rounds.is_empty() {
                continue;
            }
            let (mut rps, mut cpu) = (Vec::new(), Vec::new());
            for (k, w) in weir.iter().enumerate() {
                let (best_rps, best_cpu) =
                    best_of_peers(peer_rounds.iter().filter_map(|r| r.get(k).copied()));
                rps.push(w.rps().zip(best_rps).map(|(w, b)| w / b));
                cpu.push(w.cpu_s_per_100k.zip(best_cpu).map(|(w, b)| w / b));
            }
            out.push(RoundRatios {
                scenario: sc.to_owned(),
                rps,
                cpu,
            });
        }
        out
    }

    /// Whether every round met the bar (>= 1.1x req/s at <= 0.9x CPU per request).
    pub(crate) fn bar_met(&self) -> bool {
        !self.rps.is_empty()
            && self.rps.iter().all(|r| r.is_some_and(|r| r >= BAR_RPS))
            && self.cpu.iter().all(|c| c.is_some_and(|c| c <= BAR_CPU))
    }
}

/// The run's parameters.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Params {
    pub(crate) quick: bool,
    pub(crate) duration_s: f64,
    pub(crate) warmup_s: f64,
    pub(crate) domains: usize,
    pub(crate) rate: u64,
    pub(crate) weir: String,
    /// Rounds per scenario and proxy (the median round is reported).
    pub(crate) rounds: usize,
    /// Slices per keep-alive measurement (each proxy's slices of a round alternate with
    /// the other proxies' and are added up).
    pub(crate) slices: u32,
    /// (id, description) in run order.
    pub(crate) scenarios: Vec<(String, String)>,
}

/// One proxy process serving one setup.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ProxyRun {
    pub(crate) proxy: ProxyKind,
    pub(crate) domains: usize,
    /// Spawn → the last domain answered over plaintext and TLS.
    pub(crate) startup_ms: Option<f64>,
    /// Memory and CPU after startup and at the end.
    pub(crate) idle: Option<TreeStats>,
    pub(crate) end: Option<TreeStats>,
    /// Processes and threads, as seen in /proc after startup.
    pub(crate) threads: Option<String>,
    pub(crate) exit: Option<String>,
    /// weir's last log lines (errors show up there).
    pub(crate) log_tail: Option<String>,
    pub(crate) error: Option<String>,
}

impl ProxyRun {
    /// A proxy that did not start.
    pub(crate) fn failed(proxy: ProxyKind, domains: usize, error: String) -> ProxyRun {
        ProxyRun {
            proxy,
            domains,
            startup_ms: None,
            idle: None,
            end: None,
            threads: None,
            exit: None,
            log_tail: None,
            error: Some(error),
        }
    }
}

/// One proxy in one scenario.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Measured {
    pub(crate) scenario: String,
    pub(crate) proxy: ProxyKind,
    pub(crate) load: Option<LoadResult>,
    /// Proxy CPU time (all its processes) during the measurement.
    pub(crate) proxy_cpu_seconds: f64,
    /// Proxy CPU seconds per 100,000 requests (or connections).
    pub(crate) cpu_s_per_100k: Option<f64>,
    /// The kernel's part of `cpu_s_per_100k` (system time: system calls, and on
    /// loopback the receiving side's TCP processing too).
    pub(crate) system_s_per_100k: Option<f64>,
    /// Proxy CPU as % of one core over the measurement.
    pub(crate) proxy_cpu_percent: Option<f64>,
    /// The proxy's processes at the end of the measurement.
    pub(crate) end: TreeStats,
    /// How busy each CPU was: the proxy's, and the load generator's + backend's.
    pub(crate) proxy_cpu_busy_percent: Option<f64>,
    pub(crate) load_cpu_busy_percent: Option<f64>,
    pub(crate) error: Option<String>,
    /// Rounds measured; this one had the median requests/s.
    pub(crate) rounds: usize,
    /// Context switches of the proxy's threads per request (or connection) during the
    /// measurement: (voluntary, involuntary).
    pub(crate) switches_per_request: Option<(f64, f64)>,
    /// The backend's CPU seconds per 100,000 requests (or connections) during the
    /// measurement: what the proxy's way of talking to it costs on the backend's core.
    pub(crate) backend_cpu_s_per_100k: Option<f64>,
}

impl Measured {
    /// A finished measurement.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        sc: &Scenario,
        proxy: ProxyKind,
        load: LoadResult,
        cpu: f64,
        wall: f64,
        start: TreeStats,
        end: TreeStats,
        proxy_busy: Option<f64>,
        load_busy: Option<f64>,
    ) -> Measured {
        let ok = good_requests(&load);
        Measured {
            scenario: sc.id.clone(),
            proxy,
            cpu_s_per_100k: (ok > 0).then(|| cpu * 100_000.0 / ok as f64),
            system_s_per_100k: (ok > 0).then(|| {
                (end.system_seconds - start.system_seconds).max(0.0) * 100_000.0 / ok as f64
            }),
            proxy_cpu_percent: (wall > 0.0).then(|| cpu * 100.0 / wall),
            load: Some(load),
            proxy_cpu_seconds: cpu,
            end,
            proxy_cpu_busy_percent: proxy_busy,
            load_cpu_busy_percent: load_busy,
            error: None,
            rounds: 1,
            switches_per_request: (ok > 0).then(|| {
                let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / ok as f64;
                (
                    per(end.voluntary_switches, start.voluntary_switches),
                    per(end.involuntary_switches, start.involuntary_switches),
                )
            }),
            backend_cpu_s_per_100k: None,
        }
    }

    /// Adds the backend's CPU seconds over the measurement.
    pub(crate) fn with_backend_cpu(mut self, seconds: f64) -> Measured {
        let ok = self.load.as_ref().map_or(0, good_requests);
        self.backend_cpu_s_per_100k = (ok > 0).then(|| seconds.max(0.0) * 100_000.0 / ok as f64);
        self
    }

    /// A measurement that failed.
    pub(crate) fn error(sc: &Scenario, proxy: ProxyKind, error: String) -> Measured {
        Measured {
            scenario: sc.id.clone(),
            proxy,
            load: None,
            proxy_cpu_seconds: 0.0,
            cpu_s_per_100k: None,
            system_s_per_100k: None,
            proxy_cpu_percent: None,
            end: TreeStats::default(),
            proxy_cpu_busy_percent: None,
            load_cpu_busy_percent: None,
            error: Some(error),
            rounds: 1,
            switches_per_request: None,
            backend_cpu_s_per_100k: None,
        }
    }

    /// One measurement from the slices of a round (`--slices`): counts and times summed,
    /// per-request figures weighted by each slice's successful requests, busy percentages
    /// by its seconds, latency percentiles the request-weighted means of the slices' (wrk
    /// reports percentiles, not samples), the maximum the largest. The first failed slice
    /// makes the whole a failure.
    pub(crate) fn combine(parts: Vec<Measured>) -> Measured {
        let mut parts = parts.into_iter();
        let Some(first) = parts.next() else {
            panic!("Measured::combine needs at least one measurement");
        };
        let rest: Vec<Measured> = parts.collect();
        if rest.is_empty() || first.error.is_some() {
            return first;
        }
        if let Some(failed) = rest.iter().find(|m| m.error.is_some()) {
            return failed.clone();
        }
        let all: Vec<&Measured> = std::iter::once(&first).chain(rest.iter()).collect();
        let loads: Vec<&LoadResult> = all.iter().filter_map(|m| m.load.as_ref()).collect();
        let ok: Vec<f64> = all
            .iter()
            .map(|m| m.load.as_ref().map_or(0, good_requests) as f64)
            .collect();
        let secs: Vec<f64> = loads.iter().map(|l| l.seconds).collect();
        let total_ok: f64 = ok.iter().sum();
        let total_secs: f64 = secs.iter().sum();
        // Weighted mean of an optional figure; None when any part lacks it.
        let mean = |vals: Vec<Option<f64>>, w: &[f64], total: f64| -> Option<f64> {
            if total <= 0.0 {
                return None;
            }
            let mut sum = 0.0;
            for (v, w) in vals.into_iter().zip(w) {
                sum += v? * w;
            }
            Some(sum / total)
        };
        let requests: u64 = loads.iter().map(|l| l.requests).sum();
        let errors: u64 = loads.iter().map(|l| l.errors).sum();
        let latency = (|| {
            let lats: Vec<Latency> = loads.iter().map(|l| l.latency).collect::<Option<_>>()?;
            let pick = |f: &dyn Fn(&Latency) -> f64| {
                mean(lats.iter().map(|l| Some(f(l))).collect(), &ok, total_ok)
            };
            Some(Latency {
                p50_ms: pick(&|l| l.p50_ms)?,
                p90_ms: pick(&|l| l.p90_ms)?,
                p99_ms: pick(&|l| l.p99_ms)?,
                p999_ms: mean(lats.iter().map(|l| l.p999_ms).collect(), &ok, total_ok),
                max_ms: lats
                    .iter()
                    .map(|l| l.max_ms)
                    .collect::<Option<Vec<f64>>>()
                    .map(|v| v.into_iter().fold(0.0, f64::max)),
            })
        })();
        let cpu: f64 = all.iter().map(|m| m.proxy_cpu_seconds).sum();
        // A per-request figure over all slices, and a per-second one.
        let by_requests = |f: &dyn Fn(&Measured) -> Option<f64>| {
            mean(all.iter().map(|m| f(m)).collect(), &ok, total_ok)
        };
        let by_seconds = |f: &dyn Fn(&Measured) -> Option<f64>| {
            mean(all.iter().map(|m| f(m)).collect(), &secs, total_secs)
        };
        let last = all[all.len() - 1];
        Measured {
            scenario: first.scenario.clone(),
            proxy: first.proxy,
            load: Some(LoadResult {
                requests,
                seconds: total_secs,
                rps: if total_secs > 0.0 {
                    requests as f64 / total_secs
                } else {
                    0.0
                },
                errors,
                latency,
            }),
            proxy_cpu_seconds: cpu,
            cpu_s_per_100k: by_requests(&|m| m.cpu_s_per_100k),
            system_s_per_100k: by_requests(&|m| m.system_s_per_100k),
            proxy_cpu_percent: (total_secs > 0.0).then(|| cpu * 100.0 / total_secs),
            end: last.end,
            proxy_cpu_busy_percent: by_seconds(&|m| m.proxy_cpu_busy_percent),
            load_cpu_busy_percent: by_seconds(&|m| m.load_cpu_busy_percent),
            error: None,
            rounds: 1,
            switches_per_request: by_requests(&|m| m.switches_per_request.map(|s| s.0))
                .zip(by_requests(&|m| m.switches_per_request.map(|s| s.1))),
            backend_cpu_s_per_100k: by_requests(&|m| m.backend_cpu_s_per_100k),
        }
    }

    pub(crate) fn rps(&self) -> Option<f64> {
        self.load.as_ref().map(|l| l.rps)
    }

    fn latency(&self) -> Option<Latency> {
        self.load.as_ref().and_then(|l| l.latency)
    }

    /// A progress line.
    pub(crate) fn one_line(&self) -> String {
        match (&self.load, &self.error) {
            (Some(l), _) => format!(
                "  {:<14} {:<8} {:>9.0} req/s  p50 {}  p99 {}  errors {}  CPU {:.2} s/100k  load CPU {:.0} %  backend CPU {:.2} s/100k  switches/req {:.2} + {:.2}",
                self.scenario,
                self.proxy.name(),
                l.rps,
                ms_opt(l.latency.map(|x| x.p50_ms)),
                ms_opt(l.latency.map(|x| x.p99_ms)),
                l.errors,
                self.cpu_s_per_100k.unwrap_or(0.0),
                self.load_cpu_busy_percent.unwrap_or(0.0),
                self.backend_cpu_s_per_100k.unwrap_or(0.0),
                self.switches_per_request.map_or(0.0, |s| s.0),
                self.switches_per_request.map_or(0.0, |s| s.1),
            ),
            (None, e) => format!(
                "  {:<14} {:<8} failed: {}",
                self.scenario,
                self.proxy.name(),
                e.as_deref().unwrap_or("?")
            ),
        }
    }
}

fn ms_opt(v: Option<f64>) -> String {
    match v {
        Some(v) if v >= 100.0 => format!("{v:.0} ms"),
        Some(v) if v >= 10.0 => format!("{v:.1} ms"),
        Some(v) => format!("{v:.2} ms"),
        None => "–".into(),
    }
}

fn num(v: f64) -> String {
    // Thousands separators for request rates.
    let s = format!("{:.0}", v);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Proxy CPU (% of its core) under which a throughput figure is marked as not the
/// proxy's limit.
const SATURATED: f64 = 90.0;

/// How to read the tables.
const NOTES: &str = "
\\* the proxy used less than 90 % of its core: the load core (load generator + backend) or the \
scenario's concurrency limited the figure, not the proxy. Proxy CPU s / 100k req is then the \
fairer comparison: user + system time of all the proxy's processes (from /proc) over the \
measurement, per 100,000 successful requests (connections for `tls-new-*`); in brackets \
the kernel's part of it (system time: system calls and, on loopback, the receiving side's \
TCP processing too). Backend CPU s / 100k req is the same for the backend's process: it \
shares a core with the load generator or with the proxy, so its cost per request bounds \
what any proxy can reach there. Memory is PSS summed over the \
proxy's processes (shared pages split between them; the JSON also has the RSS sum). Latency: wrk's percentiles (closed loop), h2load's per-request log, and \
the bench's own clients: `tls-new-*` time connect + full TLS 1.3 handshake (X25519 only, \
no resumption, the leaf compared byte for byte, signatures not checked) + one GET with \
`connection: close`; `rate-*` is open loop over 64 kept connections, paced by a 1 ms timer \
(bursts of rate/1000 requests), latency counted from the scheduled send time when the client \
was behind.";

impl TrafficReport {
    fn proxies(&self) -> Vec<ProxyKind> {
        let mut v: Vec<ProxyKind> = Vec::new();
        for r in &self.results {
            if !v.contains(&r.proxy) {
                v.push(r.proxy);
            }
        }
        v
    }

    fn get(&self, scenario: &str, proxy: ProxyKind) -> Option<&Measured> {
        self.results
            .iter()
            .find(|m| m.scenario == scenario && m.proxy == proxy)
    }

    /// weir's throughput divided by the best peer's, per scenario.
    pub(crate) fn ratio(&self, scenario: &str) -> Option<f64> {
        let weir = self.get(scenario, ProxyKind::Weir)?.rps()?;
        Some(weir / self.best_of_peers(scenario).0?)
    }

    /// weir's proxy CPU per request divided by the lowest peer's, per scenario (below 1:
    /// weir spends less CPU per request).
    pub(crate) fn cpu_ratio(&self, scenario: &str) -> Option<f64> {
        let weir = self.get(scenario, ProxyKind::Weir)?.cpu_s_per_100k?;
        Some(weir / self.best_of_peers(scenario).1?)
    }

    /// The peers' best figures in one scenario (see [`best_of_peers`]).
    fn best_of_peers(&self, scenario: &str) -> (Option<f64>, Option<f64>) {
        best_of_peers(
            self.results
                .iter()
                .filter(|m| m.scenario == scenario && m.proxy.is_peer()),
        )
    }

    /// Markdown: setup, a throughput summary and the full table.
    pub(crate) fn markdown(&self) -> String {
        let mut s = String::new();
        let p = &self.params;
        let _ = writeln!(
            s,
            "### Data-plane throughput: {} s per scenario (+{} s warm-up){}, {} cores{}\n",
            p.duration_s,
            p.warmup_s,
            if p.quick { ", quick" } else { "" },
            self.machine.cores,
            self.machine
                .cpu_model
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        );
        let _ = writeln!(s, "Pinning: {}.\n", self.pinning);
        let v = &self.versions;
        let _ = writeln!(
            s,
            "Versions: {}; {}; {}; {}.\n",
            v.nginx.as_deref().unwrap_or("nginx ?"),
            v.haproxy.as_deref().unwrap_or("HAProxy ?"),
            v.wrk.as_deref().unwrap_or("wrk ?"),
            v.h2load.as_deref().unwrap_or("h2load ?")
        );
        let _ = writeln!(
            s,
            "| proxy | domains | startup | memory idle (PSS) | memory at end (PSS) | processes / threads |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for r in &self.runs {
            let mib = |t: Option<TreeStats>| {
                t.map_or("–".into(), |t| {
                    format!("{:.1} MiB", t.pss_kib as f64 / 1024.0)
                })
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                r.proxy.name(),
                num(r.domains as f64),
                r.startup_ms
                    .map_or("failed".into(), |m| format!("{m:.0} ms")),
                mib(r.idle),
                mib(r.end),
                r.threads
                    .as_deref()
                    .or(r.error.as_deref())
                    .unwrap_or("–")
                    .replace('\n', " ")
            );
        }
        let _ = writeln!(
            s,
            "\nWorkers: weir starts one worker thread (a single-threaded tokio runtime) per CPU of its affinity mask (`taskset -c {PROXY_CPU}` → one CPU → the `weir-worker-*` count above); nginx `worker_processes 1`; HAProxy `nbthread 1`."
        );
        let _ = writeln!(
            s,
            "\nOrder: the proxies of a setup run side by side (idle ones use no CPU) and each scenario measures them one right after the other, so that load from elsewhere on the machine falls on all alike, each round starting with the next proxy; {} round(s) per scenario, the round with the median requests/s reported.{}",
            self.params.rounds,
            if self.params.slices > 1 {
                format!(
                    " Each keep-alive measurement was taken in {} slices of {:.2} s: every proxy's first slice, then every proxy's second, and so on, each proxy's slices of a round added up (percentiles: the request-weighted means of the slices').",
                    self.params.slices,
                    self.params.duration_s / f64::from(self.params.slices)
                )
            } else {
                String::new()
            }
        );
        let proxies = self.proxies();
        let _ = write!(s, "\n| scenario |");
        for px in &proxies {
            let _ = write!(s, " {} req/s |", px.name());
        }
        let _ = write!(s, " weir / best peer (req/s) |");
        for px in &proxies {
            let _ = write!(s, " {} CPU s / 100k |", px.name());
        }
        let _ = writeln!(s, " weir / best peer (CPU per req) |");
        let _ = write!(s, "|---|");
        for _ in 0..proxies.len() * 2 + 2 {
            let _ = write!(s, "---|");
        }
        let _ = writeln!(s);
        for (id, label) in &p.scenarios {
            let _ = write!(s, "| {label} (`{id}`) |");
            for px in &proxies {
                let cell = match self.get(id, *px) {
                    Some(m) => {
                        // A star: the proxy's core was not the limit.
                        let star = if m.proxy_cpu_percent.is_some_and(|c| c < SATURATED) {
                            "*"
                        } else {
                            ""
                        };
                        match &m.load {
                            Some(l) if l.errors > 0 => {
                                format!("{}{star} ({} err)", num(l.rps), l.errors)
                            }
                            Some(l) => format!("{}{star}", num(l.rps)),
                            None => "failed".into(),
                        }
                    }
                    None => "–".into(),
                };
                let _ = write!(s, " {cell} |");
            }
            let _ = write!(
                s,
                " {} |",
                self.ratio(id).map_or("–".into(), |r| format!("{r:.2}"))
            );
            for px in &proxies {
                let cell = self
                    .get(id, *px)
                    .and_then(|m| m.cpu_s_per_100k)
                    .map_or("–".into(), |c| format!("{c:.2}"));
                let _ = write!(s, " {cell} |");
            }
            let _ = writeln!(
                s,
                " {} |",
                self.cpu_ratio(id).map_or("–".into(), |r| format!("{r:.2}"))
            );
        }
        if !self.per_round.is_empty() {
            let _ = writeln!(
                s,
                "\nweir / best peer in every round (req/s over the highest peer's, CPU per request over the lowest peer's; issue #17's bar: at least {BAR_RPS}x and at most {BAR_CPU}x in every round):\n"
            );
            let _ = writeln!(
                s,
                "| scenario | rounds (req/s / CPU per request) | bar met in every round |"
            );
            let _ = writeln!(s, "|---|---|---|");
            for r in &self.per_round {
                let f = |v: &Option<f64>| v.map_or("–".into(), |v| format!("{v:.2}"));
                let cells: Vec<String> = r
                    .rps
                    .iter()
                    .zip(&r.cpu)
                    .map(|(q, c)| format!("{}/{}", f(q), f(c)))
                    .collect();
                let _ = writeln!(
                    s,
                    "| `{}` | {} | {} |",
                    r.scenario,
                    cells.join(", "),
                    if r.bar_met() { "yes" } else { "no" }
                );
            }
        }
        let _ = writeln!(s, "{NOTES}");
        let _ = writeln!(
            s,
            "\n| scenario | proxy | req/s | p50 | p90 | p99 | p99.9 | proxy CPU s / 100k req (kernel's part) | proxy CPU | proxy PSS / RSS | errors | load CPU busy | backend CPU s / 100k req | context switches / req (voluntary + involuntary) |"
        );
        let _ = writeln!(
            s,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for (id, _) in &p.scenarios {
            for px in &proxies {
                let Some(m) = self.get(id, *px) else { continue };
                match &m.load {
                    Some(l) => {
                        let lat = m.latency();
                        let _ = writeln!(
                            s,
                            "| `{id}` | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} / {:.1} MiB | {} | {} | {} | {} |",
                            px.name(),
                            num(l.rps),
                            ms_opt(lat.map(|x| x.p50_ms)),
                            ms_opt(lat.map(|x| x.p90_ms)),
                            ms_opt(lat.map(|x| x.p99_ms)),
                            ms_opt(lat.and_then(|x| x.p999_ms)),
                            match (m.cpu_s_per_100k, m.system_s_per_100k) {
                                (Some(c), Some(k)) => format!("{c:.2} ({k:.2})"),
                                (Some(c), None) => format!("{c:.2}"),
                                _ => "–".into(),
                            },
                            m.proxy_cpu_percent
                                .map_or("–".into(), |c| format!("{c:.0} %")),
                            m.end.pss_kib as f64 / 1024.0,
                            m.end.rss_kib as f64 / 1024.0,
                            l.errors,
                            m.load_cpu_busy_percent
                                .map_or("–".into(), |c| format!("{c:.0} %")),
                            m.backend_cpu_s_per_100k
                                .map_or("–".into(), |c| format!("{c:.2}")),
                            m.switches_per_request
                                .map_or("–".into(), |(v, i)| format!("{v:.2} + {i:.2}")),
                        );
                    }
                    None => {
                        let _ = writeln!(
                            s,
                            "| `{id}` | {} | failed: {} |  |  |  |  |  |  |  |  |  |  |  |",
                            px.name(),
                            m.error.as_deref().unwrap_or("?").replace(['\n', '|'], " ")
                        );
                    }
                }
            }
        }
        s
    }

    /// Chart: HTTP/1.1 plaintext throughput against the number of connections.
    fn throughput_chart(&self, path: &Path) -> Result<bool> {
        let conns: Vec<(String, String)> = self
            .params
            .scenarios
            .iter()
            .filter_map(|(id, _)| {
                let c = id.strip_prefix("h1-c")?;
                c.parse::<usize>().ok().map(|_| (id.clone(), c.to_owned()))
            })
            .collect();
        if conns.len() < 2 {
            return Ok(false);
        }
        let labels: Vec<String> = conns.iter().map(|(_, c)| c.clone()).collect();
        let series: Vec<CategorySeries> = self
            .proxies()
            .into_iter()
            .map(|px| CategorySeries {
                name: px.name().to_owned(),
                values: conns
                    .iter()
                    .map(|(id, _)| self.get(id, px).and_then(Measured::rps))
                    .collect(),
            })
            .collect();
        category_png(
            path,
            "HTTP/1.1 keep-alive through one proxy core: throughput",
            ("connections", "requests / s", YScale::Linear),
            &labels,
            &series,
        )?;
        Ok(true)
    }

    /// Chart: p99 latency per scenario and proxy.
    fn latency_chart(&self, path: &Path) -> Result<bool> {
        let ids: Vec<&String> = self
            .params
            .scenarios
            .iter()
            .map(|(id, _)| id)
            .filter(|id| {
                self.results
                    .iter()
                    .any(|m| &m.scenario == *id && m.latency().is_some())
            })
            .collect();
        if ids.is_empty() {
            return Ok(false);
        }
        let labels: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        let series: Vec<CategorySeries> = self
            .proxies()
            .into_iter()
            .map(|px| CategorySeries {
                name: px.name().to_owned(),
                values: ids
                    .iter()
                    .map(|id| self.get(id, px).and_then(|m| m.latency()).map(|l| l.p99_ms))
                    .collect(),
            })
            .collect();
        category_png(
            path,
            "p99 latency per scenario (closed loop except rate-*), log scale",
            ("scenario", "p99 latency, ms", YScale::Log),
            &labels,
            &series,
        )?;
        Ok(true)
    }
}

/// Draws one chart to a path; false when there is nothing to draw.
type Chart = fn(&TrafficReport, &Path) -> Result<bool>;

/// Writes `traffic.json`, `traffic.md` and the charts into `out`; returns their paths.
pub(crate) fn write(report: &TrafficReport, out: &Path) -> Result<Vec<PathBuf>> {
    let base = if report.params.quick {
        "traffic-quick"
    } else {
        "traffic"
    };
    let mut files = Vec::new();
    let json = out.join(format!("{base}.json"));
    std::fs::write(&json, serde_json::to_vec_pretty(report)?)
        .with_context(|| format!("writing {}", json.display()))?;
    files.push(json);
    let md = out.join(format!("{base}.md"));
    std::fs::write(&md, report.markdown()).with_context(|| format!("writing {}", md.display()))?;
    files.push(md);
    let charts: [(&str, Chart); 2] = [
        ("throughput", TrafficReport::throughput_chart),
        ("latency", TrafficReport::latency_chart),
    ];
    for (name, draw) in charts {
        let path = out.join(format!("{base}-{name}.png"));
        match draw(report, &path) {
            Ok(true) => files.push(path),
            Ok(false) => {}
            Err(e) => eprintln!("weir-bench: no {name} chart: {e:#}"),
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::scenarios;

    fn load(rps: f64, errors: u64) -> LoadResult {
        LoadResult {
            requests: (rps * 3.0) as u64,
            seconds: 3.0,
            rps,
            errors,
            latency: Some(Latency {
                p50_ms: 1.0,
                p90_ms: 2.0,
                p99_ms: 3.0,
                p999_ms: None,
                max_ms: None,
            }),
        }
    }

    fn report() -> TrafficReport {
        let sc = scenarios(true, 10, 1000);
        let m = |i: usize, px, rps, err| {
            Measured::new(
                &sc[i],
                px,
                load(rps, err),
                1.5,
                3.0,
                TreeStats::default(),
                TreeStats {
                    voluntary_switches: 3 * rps as u64,
                    involuntary_switches: 0,
                    system_seconds: 0.6,
                    ..TreeStats::default()
                },
                Some(99.0),
                Some(60.0),
            )
        };
        TrafficReport {
            tool: "t",
            bench_version: "0",
            started_unix: 0,
            machine: Machine {
                cores: 2,
                cpu_model: None,
                kernel: None,
            },
            pinning: "p".into(),
            versions: Versions::default(),
            params: Params {
                quick: true,
                duration_s: 3.0,
                warmup_s: 1.0,
                domains: 10,
                rate: 1000,
                weir: "w".into(),
                rounds: 1,
                slices: 1,
                scenarios: sc.iter().map(|s| (s.id.clone(), s.label.clone())).collect(),
            },
            runs: vec![ProxyRun::failed(ProxyKind::Haproxy, 1, "boom".into())],
            results: vec![
                m(0, ProxyKind::Weir, 30_000.0, 0),
                m(0, ProxyKind::Nginx, 40_000.0, 2),
                m(1, ProxyKind::Weir, 50_000.0, 0),
                Measured::error(&sc[1], ProxyKind::Nginx, "broken | pipe".into()),
            ],
            per_round: vec![RoundRatios {
                scenario: "h1-c1".into(),
                rps: vec![Some(1.2), None],
                cpu: vec![Some(0.5), Some(0.8)],
            }],
            total_seconds: 1.0,
        }
    }

    #[test]
    fn slices_add_up_to_one_measurement() {
        let sc = scenarios(true, 10, 1000);
        // A slice of `reqs` requests in `secs` seconds costing `cpu` proxy seconds, the
        // backend `bcpu`, with p99 `p99` ms.
        let slice = |reqs: u64, secs: f64, cpu: f64, bcpu: f64, p99: f64, busy: f64| {
            Measured::new(
                &sc[0],
                ProxyKind::Weir,
                LoadResult {
                    requests: reqs,
                    seconds: secs,
                    rps: reqs as f64 / secs,
                    errors: 0,
                    latency: Some(Latency {
                        p50_ms: p99 / 4.0,
                        p90_ms: p99 / 2.0,
                        p99_ms: p99,
                        p999_ms: None,
                        max_ms: Some(p99 * 2.0),
                    }),
                },
                cpu,
                secs,
                TreeStats::default(),
                TreeStats {
                    voluntary_switches: reqs / 10,
                    system_seconds: cpu / 2.0,
                    ..TreeStats::default()
                },
                Some(busy),
                Some(busy),
            )
            .with_backend_cpu(bcpu)
        };
        let m = Measured::combine(vec![
            slice(100_000, 1.0, 1.0, 0.5, 1.0, 100.0),
            slice(300_000, 3.0, 6.0, 1.5, 3.0, 50.0),
        ]);
        let l = m.load.as_ref().unwrap();
        assert_eq!(l.requests, 400_000);
        assert_eq!(l.seconds, 4.0);
        assert_eq!(l.rps, 100_000.0);
        // 7 CPU seconds over 400,000 requests; the kernel's half of it.
        assert!((m.cpu_s_per_100k.unwrap() - 1.75).abs() < 1e-9);
        assert!((m.system_s_per_100k.unwrap() - 0.875).abs() < 1e-9);
        assert!((m.backend_cpu_s_per_100k.unwrap() - 0.5).abs() < 1e-9);
        assert!((m.proxy_cpu_percent.unwrap() - 175.0).abs() < 1e-9);
        // Busy percentages by seconds, percentiles by requests, the largest maximum.
        assert!((m.load_cpu_busy_percent.unwrap() - 62.5).abs() < 1e-9);
        let lat = l.latency.unwrap();
        assert!((lat.p99_ms - 2.5).abs() < 1e-9);
        assert_eq!(lat.max_ms, Some(6.0));
        assert!((m.switches_per_request.unwrap().0 - 0.1).abs() < 1e-9);
        // One failed slice fails the whole.
        let failed = Measured::combine(vec![
            slice(100_000, 1.0, 1.0, 0.5, 1.0, 100.0),
            Measured::error(&sc[0], ProxyKind::Weir, "gone".into()),
        ]);
        assert_eq!(failed.error.as_deref(), Some("gone"));
        assert!(failed.load.is_none());
    }

    #[test]
    fn every_round_against_the_best_peer_of_that_round() {
        let sc = scenarios(true, 10, 1000);
        // `cpu` seconds over 3 s of `rps`: CPU per 100k requests = cpu * 100k / (3 * rps).
        let m = |i: usize, px, rps: f64, cpu: f64| {
            Measured::new(
                &sc[i],
                px,
                load(rps, 0),
                cpu,
                3.0,
                TreeStats::default(),
                TreeStats::default(),
                None,
                None,
            )
        };
        let per_100k = |cpu: f64, rps: f64| cpu * 100_000.0 / (3.0 * rps);
        let raw = vec![
            // Round 1 of scenario 0 (weir-baseline is not a peer, whatever its figures).
            m(0, ProxyKind::Weir, 120_000.0, 1.0),
            m(0, ProxyKind::WeirBaseline, 500_000.0, 0.1),
            m(0, ProxyKind::Nginx, 100_000.0, 2.0),
            m(0, ProxyKind::Haproxy, 90_000.0, 1.5),
            // Scenario 1: weir failed its first round; scenario 2: every round met.
            Measured::error(&sc[1], ProxyKind::Weir, "x".into()),
            m(1, ProxyKind::Nginx, 100_000.0, 2.0),
            m(2, ProxyKind::Weir, 130_000.0, 1.0),
            m(2, ProxyKind::Nginx, 100_000.0, 2.0),
            // Round 2, in another order.
            m(0, ProxyKind::Haproxy, 105_000.0, 1.5),
            m(0, ProxyKind::Nginx, 104_000.0, 2.0),
            m(0, ProxyKind::Weir, 115_000.0, 1.0),
            m(0, ProxyKind::WeirBaseline, 500_000.0, 0.1),
            m(1, ProxyKind::Weir, 120_000.0, 1.0),
            m(1, ProxyKind::Nginx, 100_000.0, 2.0),
            m(2, ProxyKind::Nginx, 100_000.0, 2.0),
            m(2, ProxyKind::Weir, 125_000.0, 1.0),
        ];
        let r = RoundRatios::of(&raw);
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].scenario, sc[0].id);
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
        // Round 1: the best req/s is nginx's, the lowest CPU per request HAProxy's.
        assert!(close(r[0].rps[0], 1.2));
        assert!(close(
            r[0].cpu[0],
            per_100k(1.0, 120_000.0) / per_100k(1.5, 90_000.0)
        ));
        // Round 2: HAProxy's 105,000 req/s is the best; 1.095 < 1.1, so not met.
        assert!(close(r[0].rps[1], 115.0 / 105.0));
        assert!(!r[0].bar_met());
        assert_eq!(r[1].rps[0], None);
        assert_eq!(r[1].cpu[0], None);
        assert!(close(r[1].rps[1], 1.2));
        assert!(!r[1].bar_met());
        assert!(close(r[2].rps[0], 1.3));
        assert!(close(r[2].rps[1], 1.25));
        assert!(r[2].bar_met());
        // No peer measured: no ratios.
        assert!(RoundRatios::of(&raw[..2]).is_empty());
    }

    #[test]
    fn ratio_is_weir_over_best_peer() {
        let r = report();
        assert_eq!(r.ratio("h1-c1"), Some(0.75));
        assert_eq!(r.ratio("h1-c64"), None);
        assert_eq!(r.cpu_ratio("h1-c64"), None);
        // The same CPU time over 90,000 (weir) and 119,998 good requests (nginx).
        let c = r.cpu_ratio("h1-c1").unwrap();
        assert!((c - 119_998.0 / 90_000.0).abs() < 1e-9);
        let m = r.get("h1-c1", ProxyKind::Weir).unwrap();
        // 1.5 s of CPU for 90,000 requests.
        assert!((m.cpu_s_per_100k.unwrap() - 1.5 * 100_000.0 / 90_000.0).abs() < 1e-9);
        // 0.6 s of it in the kernel.
        assert!((m.system_s_per_100k.unwrap() - 0.6 * 100_000.0 / 90_000.0).abs() < 1e-9);
        assert_eq!(m.proxy_cpu_percent, Some(50.0));
        // No backend figure until one is added: 0.9 s of the backend's CPU over the same
        // 90,000 good requests.
        assert_eq!(m.backend_cpu_s_per_100k, None);
        let with = m.clone().with_backend_cpu(0.9);
        let b = with.backend_cpu_s_per_100k.unwrap();
        assert!((b - 0.9 * 100_000.0 / 90_000.0).abs() < 1e-9);
        assert!(
            with.one_line().contains("backend CPU 1.00 s/100k"),
            "{}",
            with.one_line()
        );
        let failed = r.get("h1-c64", ProxyKind::Nginx).unwrap().clone();
        assert_eq!(failed.with_backend_cpu(0.9).backend_cpu_s_per_100k, None);
    }

    #[test]
    fn markdown_tables() {
        let md = report().markdown();
        assert!(md.contains(
            "| scenario | weir req/s | nginx req/s | weir / best peer (req/s) | weir CPU s / 100k | nginx CPU s / 100k | weir / best peer (CPU per req) |"
        ));
        assert!(md.contains("| 30,000* | 40,000* (2 err) | 0.75 | 1.67 | 1.25 | 1.33 |"));
        assert!(md.contains(
            "| `h1-c1` | weir | 30,000 | 1.00 ms | 2.00 ms | 3.00 ms | – | 1.67 (0.67) | 50 % | 0.0 / 0.0 MiB | 0 | 60 % | – | 1.00 + 0.00 |"
        ));
        assert!(md.contains("failed: broken   pipe"));
        assert!(md.contains("| `h1-c1` | 1.20/0.50, –/0.80 | no |"));
        assert!(md.contains("| haproxy | 1 | failed |"));
        assert_eq!(num(1_234_567.4), "1,234,567");
        assert_eq!(num(999.0), "999");
    }
}
