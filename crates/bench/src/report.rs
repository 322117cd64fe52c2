//! The propagation report: JSON for machines, markdown for BENCHMARKS.md.

use std::fmt::Write as _;

use serde::Serialize;

use crate::metrics::Propagation;
use crate::procs::ProcStats;
use crate::side::SideReport;
use crate::stats::Summary;

/// Everything one propagation run measured.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) tool: &'static str,
    pub(crate) bench_version: &'static str,
    /// Seconds since the Unix epoch at the start of the run.
    pub(crate) started_unix: u64,
    pub(crate) machine: Machine,
    pub(crate) params: Params,
    pub(crate) certs: CertReport,
    pub(crate) startup: Startup,
    pub(crate) ops: Ops,
    pub(crate) side: SideReport,
    pub(crate) weir: WeirReport,
    pub(crate) metrics: MetricsReport,
    pub(crate) total_seconds: f64,
}

/// The machine the run was on.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Machine {
    pub(crate) cores: usize,
    pub(crate) cpu_model: Option<String>,
    pub(crate) kernel: Option<String>,
}

/// The run's parameters.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Params {
    pub(crate) domains: usize,
    pub(crate) changes: usize,
    pub(crate) layout: String,
    pub(crate) weir: String,
    pub(crate) poll_interval_us: u64,
    pub(crate) timeout_ms: u64,
    pub(crate) settle_ms: u64,
    pub(crate) side_concurrency: usize,
    pub(crate) side_pause_us: u64,
    pub(crate) check_concurrency: usize,
}

/// Certificate preparation.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct CertReport {
    pub(crate) cached: usize,
    pub(crate) generated: usize,
    pub(crate) seconds: f64,
    pub(crate) threads: usize,
}

/// From spawning weir to serving.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Startup {
    /// Spawn → GET /ready answered 200.
    pub(crate) ready_ms: f64,
    /// weir's CPU time (user + system, all threads) and RSS read right after /ready
    /// answered 200: the cost of loading the configuration, independent of how busy the
    /// machine was, unlike `ready_ms`.
    pub(crate) at_ready: ProcStats,
    /// The CPUs weir was pinned to (`--weir-cpus`), if any.
    pub(crate) weir_cpus: Option<String>,
    /// Spawn → every domain answered 200 over HTTPS with its SNI.
    pub(crate) all_domains_ms: f64,
    /// Domains that did not answer 200 before the startup timeout.
    pub(crate) domains_not_serving: usize,
}

/// Results per kind of change.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Ops {
    pub(crate) add: OpReport,
    pub(crate) modify: OpReport,
    pub(crate) remove: OpReport,
}

impl Ops {
    /// (name, report) in report order.
    pub(crate) fn each(&self) -> [(&'static str, &OpReport); 3] {
        [
            ("add", &self.add),
            ("modify", &self.modify),
            ("remove", &self.remove),
        ]
    }
}

/// One kind of change.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct OpReport {
    pub(crate) summary: Summary,
    pub(crate) results: Vec<OpResult>,
}

impl OpReport {
    /// Summarises `results`.
    pub(crate) fn new(results: Vec<OpResult>) -> OpReport {
        let ms: Vec<f64> = results.iter().filter_map(|r| r.ms).collect();
        let failures = results.iter().filter(|r| r.ms.is_none()).count();
        OpReport {
            summary: Summary::of(&ms, failures),
            results,
        }
    }
}

/// One timed change.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct OpResult {
    /// Change index (x axis of the plot).
    pub(crate) change: usize,
    pub(crate) domain: String,
    /// Rename/unlink → first response showing the new state; None when it timed out.
    pub(crate) ms: Option<f64>,
    /// How long the timed rename or unlink call itself took: the file system's work,
    /// and whatever ran on this thread's core before it returned (weir's watcher may).
    pub(crate) call_ms: f64,
    /// Polls made.
    pub(crate) polls: u32,
    /// What the last poll saw.
    pub(crate) last_seen: String,
}

/// weir's process.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct WeirReport {
    /// CPU use (% of one core) over an idle window after startup: no changes, no clients.
    pub(crate) idle_cpu_percent: Option<f64>,
    pub(crate) after_startup: ProcStats,
    pub(crate) end: ProcStats,
    /// How weir exited when asked to stop.
    pub(crate) exit: Option<String>,
}

/// weir's own propagation metrics.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct MetricsReport {
    pub(crate) after_startup: Propagation,
    pub(crate) end: Propagation,
    /// end minus after_startup: the changes of the bench only.
    pub(crate) during_changes: Propagation,
    /// The same, per operation (scraped between the operations).
    pub(crate) per_op: PerOp,
}

/// weir's propagation metrics during each operation's changes.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PerOp {
    pub(crate) add: Propagation,
    pub(crate) modify: Propagation,
    pub(crate) remove: Propagation,
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

impl Report {
    /// Markdown tables for BENCHMARKS.md.
    pub(crate) fn markdown(&self) -> String {
        let mut s = String::new();
        let p = &self.params;
        let _ = writeln!(
            s,
            "### Propagation: {} domains (layout `{}`), {} changes per operation, {} cores{}\n",
            p.domains,
            p.layout,
            p.changes,
            self.machine.cores,
            self.machine
                .cpu_model
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        );
        let _ = writeln!(
            s,
            "| startup → /ready | weir CPU / RSS / peak RSS at /ready{} | → all {} domains 200 over HTTPS | RSS after startup | RSS at end | weir CPU after startup | weir CPU at end | weir idle CPU | side requests | side errors |",
            self.startup
                .weir_cpus
                .as_deref()
                .map(|c| format!(" (pinned to CPU {c})"))
                .unwrap_or_default(),
            p.domains
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
        let w = &self.weir;
        let r = &self.startup.at_ready;
        let _ = writeln!(
            s,
            "| {:.0} ms | {:.2} s / {} / {} | {:.0} ms{} | {} | {} | {:.2} s | {:.2} s | {} | {} | {} |\n",
            self.startup.ready_ms,
            r.cpu_seconds,
            mib(r.rss_kib),
            mib(r.peak_rss_kib),
            self.startup.all_domains_ms,
            if self.startup.domains_not_serving > 0 {
                format!(" ({} not serving)", self.startup.domains_not_serving)
            } else {
                String::new()
            },
            mib(w.after_startup.rss_kib),
            mib(w.end.rss_kib),
            w.after_startup.cpu_seconds,
            w.end.cpu_seconds,
            w.idle_cpu_percent
                .map_or("–".to_owned(), |p| format!("{p:.1} % of a core")),
            self.side.requests,
            self.side.non_200 + self.side.errors,
        );
        let _ = writeln!(
            s,
            "| operation (rename/unlink → HTTPS shows it) | n | failures | mean ms | p50 ms | p90 ms | p99 ms | max ms | the call itself, p50 ms | more than one poll |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
        for (name, op) in self.ops.each() {
            let m = &op.summary;
            let mut calls: Vec<f64> = op.results.iter().map(|r| r.call_ms).collect();
            calls.sort_by(f64::total_cmp);
            let call_p50 = calls.get(calls.len() / 2).copied();
            let repolled = op.results.iter().filter(|r| r.polls > 1).count();
            let _ = writeln!(
                s,
                "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {repolled} |",
                m.count,
                m.failures,
                ms(m.mean_ms),
                ms(m.p50_ms),
                ms(m.p90_ms),
                ms(m.p99_ms),
                ms(m.max_ms),
                call_p50.map_or("–".to_owned(), ms)
            );
        }
        let m = &self.metrics;
        if !m.during_changes.phases.is_empty() {
            let cycles =
                |p: &Propagation| p.change_cycles.map_or("?".to_owned(), |c| c.to_string());
            let _ = writeln!(
                s,
                "\n| weir phase (`weir_propagation_seconds`), mean ms (count) | startup | adds | modifications | removals | all changes |"
            );
            let _ = writeln!(s, "|---|---|---|---|---|---|");
            let cell = |p: &Propagation, phase: &str| {
                p.phases.get(phase).map_or("–".to_owned(), |t| {
                    format!("{} ({})", ms(t.mean_ms), t.count)
                })
            };
            for phase in m.during_changes.phases.keys() {
                let _ = writeln!(
                    s,
                    "| {phase} | {} | {} | {} | {} | {} |",
                    cell(&m.after_startup, phase),
                    cell(&m.per_op.add, phase),
                    cell(&m.per_op.modify, phase),
                    cell(&m.per_op.remove, phase),
                    cell(&m.during_changes, phase),
                );
            }
            let _ = writeln!(
                s,
                "| change cycles | {} | {} | {} | {} | {} |",
                cycles(&m.after_startup),
                cycles(&m.per_op.add),
                cycles(&m.per_op.modify),
                cycles(&m.per_op.remove),
                cycles(&m.during_changes),
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(change: usize, ms: Option<f64>) -> OpResult {
        OpResult {
            change,
            domain: format!("d{change}.bench.test"),
            ms,
            call_ms: 0.0,
            polls: 1,
            last_seen: "status 200".into(),
        }
    }

    #[test]
    fn op_report_counts_timeouts_as_failures() {
        let r = OpReport::new(vec![
            result(0, Some(2.0)),
            result(1, None),
            result(2, Some(4.0)),
        ]);
        assert_eq!(
            (r.summary.count, r.summary.failures, r.summary.max_ms),
            (2, 1, 4.0)
        );
    }
}
