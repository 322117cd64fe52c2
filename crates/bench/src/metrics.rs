//! What the bench reads from weir's /metrics: the propagation histograms' sums and counts
//! per phase, and the number of change cycles.

use std::collections::BTreeMap;

use serde::Serialize;

/// One phase of `weir_propagation_seconds`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub(crate) struct PhaseTotals {
    pub(crate) sum_seconds: f64,
    pub(crate) count: u64,
    /// sum / count, in milliseconds (0 when count is 0).
    pub(crate) mean_ms: f64,
}

/// The propagation metrics at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Propagation {
    /// Per phase label (parse, translate, apply, end_to_end, …).
    pub(crate) phases: BTreeMap<String, PhaseTotals>,
    /// `weir_config_changes_total`, if exposed.
    pub(crate) change_cycles: Option<u64>,
}

impl Propagation {
    /// Parses the Prometheus text exposition; unknown lines are ignored.
    pub(crate) fn parse(text: &str) -> Propagation {
        let mut out = Propagation::default();
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('#') {
                continue;
            }
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            if series == "weir_config_changes_total" {
                out.change_cycles = Some(value as u64);
                continue;
            }
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}')),
                None => (series, ""),
            };
            let is_sum = name == "weir_propagation_seconds_sum";
            if !is_sum && name != "weir_propagation_seconds_count" {
                continue;
            }
            let Some(phase) = label(labels, "phase") else {
                continue;
            };
            let entry = out.phases.entry(phase.to_owned()).or_default();
            if is_sum {
                entry.sum_seconds = value;
            } else {
                entry.count = value as u64;
            }
        }
        for p in out.phases.values_mut() {
            p.mean_ms = if p.count > 0 {
                p.sum_seconds * 1000.0 / p.count as f64
            } else {
                0.0
            };
        }
        out
    }

    /// What happened between `earlier` and `self` (phases missing earlier count from 0).
    pub(crate) fn since(&self, earlier: &Propagation) -> Propagation {
        let mut phases = BTreeMap::new();
        for (name, now) in &self.phases {
            let before = earlier.phases.get(name).copied().unwrap_or_default();
            let count = now.count.saturating_sub(before.count);
            let sum_seconds = (now.sum_seconds - before.sum_seconds).max(0.0);
            let mean_ms = if count > 0 {
                sum_seconds * 1000.0 / count as f64
            } else {
                0.0
            };
            phases.insert(
                name.clone(),
                PhaseTotals {
                    sum_seconds,
                    count,
                    mean_ms,
                },
            );
        }
        let change_cycles = match (self.change_cycles, earlier.change_cycles) {
            (Some(a), Some(b)) => Some(a.saturating_sub(b)),
            (a, _) => a,
        };
        Propagation {
            phases,
            change_cycles,
        }
    }
}

/// The value of label `key` in `a="x",key="y"` (values without escaped quotes).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP weir_propagation_seconds Time spent per phase.
# TYPE weir_propagation_seconds histogram
weir_propagation_seconds_sum{phase="parse"} 0.5
weir_propagation_seconds_count{phase="parse"} 4
weir_propagation_seconds_bucket{le="0.001",phase="parse"} 1
weir_propagation_seconds_sum{phase="apply"} 0.01
weir_propagation_seconds_count{phase="apply"} 2
# TYPE weir_config_changes counter
weir_config_changes_total 4
weir_other_total 9
"#;

    #[test]
    fn parses_sums_and_counts_per_phase() {
        let p = Propagation::parse(TEXT);
        assert_eq!(p.change_cycles, Some(4));
        assert_eq!(p.phases.len(), 2);
        let parse = p.phases["parse"];
        assert_eq!(
            (parse.sum_seconds, parse.count, parse.mean_ms),
            (0.5, 4, 125.0)
        );
        assert_eq!(p.phases["apply"].mean_ms, 5.0);
    }

    #[test]
    fn differences_between_scrapes() {
        let before = Propagation::parse(TEXT);
        let after = Propagation::parse(&TEXT.replace("} 0.5", "} 0.7").replace("} 4\n", "} 6\n"));
        let d = after.since(&before);
        assert_eq!(d.phases["parse"].count, 2);
        assert!((d.phases["parse"].mean_ms - 100.0).abs() < 1e-9);
        assert_eq!(d.phases["apply"].count, 0);
        assert_eq!(d.change_cycles, Some(0));
    }
}
