//! `weir-bench scale`: propagation reports of several sizes side by side — what a change
//! and startup cost as the number of domains grows (the O(change) question), as a
//! markdown table and two PNG charts.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::plot::{CategorySeries, YScale, category_png};

/// What one propagation report says about its size.
struct Point {
    domains: u64,
    layout: String,
    /// Client-observed p50 and p99 per operation (add, modify, remove), ms.
    ops: [(Option<f64>, Option<f64>); 3],
    /// weir's own end-to-end mean per change (`weir_propagation_seconds`), per operation, ms.
    inside: [Option<f64>; 3],
    ready_s: Option<f64>,
    cpu_at_ready_s: Option<f64>,
    rss_at_ready_mib: Option<f64>,
    peak_rss_mib: Option<f64>,
    side_errors: Option<u64>,
}

const OPS: [&str; 3] = ["add", "modify", "remove"];

fn num(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_f64()
}

fn point(path: &Path) -> Result<Point> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let Some(domains) = v.pointer("/params/domains").and_then(Value::as_u64) else {
        bail!(
            "{} is not a propagation report (no params.domains)",
            path.display()
        );
    };
    let op = |o: &str| {
        (
            num(&v, &["ops", o, "summary", "p50_ms"]),
            num(&v, &["ops", o, "summary", "p99_ms"]),
        )
    };
    let inside = |o: &str| {
        num(
            &v,
            &["metrics", "per_op", o, "phases", "end_to_end", "mean_ms"],
        )
    };
    Ok(Point {
        domains,
        layout: v
            .pointer("/params/layout")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned(),
        ops: OPS.map(op),
        inside: OPS.map(inside),
        ready_s: num(&v, &["startup", "ready_ms"]).map(|ms| ms / 1000.0),
        cpu_at_ready_s: num(&v, &["startup", "at_ready", "cpu_seconds"]),
        rss_at_ready_mib: num(&v, &["startup", "at_ready", "rss_kib"]).map(|k| k / 1024.0),
        peak_rss_mib: num(&v, &["startup", "at_ready", "peak_rss_kib"]).map(|k| k / 1024.0),
        side_errors: v.pointer("/side/errors").and_then(Value::as_u64),
    })
}

fn cell(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
}

/// Reads `reports`, writes `scale-changes.png` and `scale-startup.png` to `out`, and
/// returns the markdown table (sorted by size) and the charts written.
pub(crate) fn run(reports: &[PathBuf], out: &Path) -> Result<(String, Vec<PathBuf>)> {
    let mut points: Vec<Point> = reports.iter().map(|p| point(p)).collect::<Result<_>>()?;
    if points.is_empty() {
        bail!("no reports given");
    }
    points.sort_by_key(|p| p.domains);
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;

    let mut md = String::from(
        "| domains | layout | add p50 / p99 ms | modify p50 / p99 ms | remove p50 / p99 ms | weir end-to-end per add / modify / remove ms | /ready s | CPU at /ready s | RSS / peak at /ready MiB | side errors |\n|---:|---|---|---|---|---|---:|---:|---|---:|\n",
    );
    for p in &points {
        let ops: Vec<String> = p
            .ops
            .iter()
            .map(|(a, b)| format!("{} / {}", cell(*a, 2), cell(*b, 2)))
            .collect();
        let inside: Vec<String> = p.inside.iter().map(|v| cell(*v, 2)).collect();
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |\n",
            p.domains,
            p.layout,
            ops[0],
            ops[1],
            ops[2],
            inside.join(" / "),
            cell(p.ready_s, 2),
            cell(p.cpu_at_ready_s, 2),
            cell(p.rss_at_ready_mib, 0),
            cell(p.peak_rss_mib, 0),
            p.side_errors
                .map_or_else(|| "–".to_owned(), |e| e.to_string()),
        ));
    }

    let labels: Vec<String> = points.iter().map(|p| p.domains.to_string()).collect();
    let mut changes = Vec::new();
    for (i, op) in OPS.iter().enumerate() {
        changes.push(CategorySeries {
            name: format!("{op} p50 (client)"),
            values: points.iter().map(|p| p.ops[i].0).collect(),
        });
        changes.push(CategorySeries {
            name: format!("{op} in weir (mean)"),
            values: points.iter().map(|p| p.inside[i]).collect(),
        });
    }
    let charts = [out.join("scale-changes.png"), out.join("scale-startup.png")];
    category_png(
        &charts[0],
        "one change live over HTTPS, by number of TLS domains loaded",
        ("domains", "ms (log)", YScale::Log),
        &labels,
        &changes,
    )?;
    let startup = vec![
        CategorySeries {
            name: "spawn → /ready (s)".to_owned(),
            values: points.iter().map(|p| p.ready_s).collect(),
        },
        CategorySeries {
            name: "CPU at /ready (s)".to_owned(),
            values: points.iter().map(|p| p.cpu_at_ready_s).collect(),
        },
        CategorySeries {
            name: "RSS at /ready (GiB)".to_owned(),
            values: points
                .iter()
                .map(|p| p.rss_at_ready_mib.map(|m| m / 1024.0))
                .collect(),
        },
    ];
    category_png(
        &charts[1],
        "startup by number of TLS domains",
        ("domains", "s / GiB (log)", YScale::Log),
        &labels,
        &startup,
    )?;
    Ok((md, charts.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_reports_and_draws_both_charts() {
        let dir = tempfile::tempdir().unwrap();
        let report = |n: u64, add: f64| {
            serde_json::json!({
                "params": {"domains": n, "layout": "ingress"},
                "ops": {
                    "add": {"summary": {"p50_ms": add, "p99_ms": add * 3.0}},
                    "modify": {"summary": {"p50_ms": 1.0, "p99_ms": 2.0}},
                    "remove": {"summary": {"p50_ms": 1.5, "p99_ms": 2.5}},
                },
                "metrics": {"per_op": {"add": {"phases": {"end_to_end": {"mean_ms": 0.4}}}}},
                "startup": {"ready_ms": n as f64, "at_ready": {"cpu_seconds": 1.0, "rss_kib": 2048.0, "peak_rss_kib": 4096.0}},
                "side": {"errors": 0},
            })
        };
        let mut paths = Vec::new();
        for (n, add) in [(100_000, 4.0), (1000, 2.5)] {
            let p = dir.path().join(format!("propagation-{n}.json"));
            std::fs::write(&p, report(n, add).to_string()).unwrap();
            paths.push(p);
        }
        let (md, charts) = run(&paths, dir.path()).unwrap();
        assert_eq!(charts.len(), 2);
        let rows: Vec<&str> = md.lines().skip(2).collect();
        assert_eq!(rows.len(), 2);
        // Sorted by size; missing figures shown as a dash, present ones as read.
        assert!(rows[0].starts_with("| 1000 | ingress | 2.50 / 7.50 | 1.00 / 2.00 | 1.50 / 2.50 | 0.40 / – / – | 1.00 | 1.00 | 2 / 4 | 0 |"), "{}", rows[0]);
        assert!(rows[1].starts_with("| 100000 |"), "{}", rows[1]);
        for png in ["scale-changes.png", "scale-startup.png"] {
            let bytes = std::fs::read(dir.path().join(png)).unwrap();
            assert!(bytes.starts_with(b"\x89PNG"), "{png}");
        }
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{}").unwrap();
        assert!(run(&[bad], dir.path()).is_err());
    }
}
