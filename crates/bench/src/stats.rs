//! Latency summaries.

use serde::Serialize;

/// Percentiles of a set of latencies, in milliseconds (nearest-rank).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Summary {
    /// Measurements that succeeded (the percentiles are over these).
    pub(crate) count: usize,
    /// Operations that did not show their new state before the timeout.
    pub(crate) failures: usize,
    pub(crate) mean_ms: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p90_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
}

impl Summary {
    /// Summarises successful latencies `ms`; `failures` counts the timed-out ones.
    pub(crate) fn of(ms: &[f64], failures: usize) -> Summary {
        let mut v: Vec<f64> = ms.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Summary {
                failures,
                ..Summary::default()
            };
        }
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let idx = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            v[idx]
        };
        Summary {
            count: v.len(),
            failures,
            mean_ms: v.iter().sum::<f64>() / v.len() as f64,
            p50_ms: rank(0.50),
            p90_ms: rank(0.90),
            p99_ms: rank(0.99),
            max_ms: v[v.len() - 1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let ms: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&ms, 2);
        assert_eq!((s.count, s.failures), (100, 2));
        assert_eq!(
            (s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms),
            (50.0, 90.0, 99.0, 100.0)
        );
        assert!((s.mean_ms - 50.5).abs() < 1e-9);
    }

    #[test]
    fn small_and_empty_sets() {
        let s = Summary::of(&[3.0, 1.0, 2.0], 0);
        assert_eq!((s.p50_ms, s.p99_ms, s.max_ms), (2.0, 3.0, 3.0));
        let e = Summary::of(&[], 4);
        assert_eq!((e.count, e.failures, e.max_ms), (0, 4, 0.0));
    }
}
