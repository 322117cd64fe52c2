//! A peak-sensitive moving average of an endpoint's response time, for the
//! `LatencyAware` balancer ([`crate::balance`]).
//!
//! Each response (its head) is one sample: the time from the choice of the endpoint to the
//! head. The estimate moves toward a sample by a weight that grows with the time since the
//! last one (`1 - e^(-Δt/τ)`), so it averages over about `τ` of traffic however busy the
//! endpoint is; a sample above the estimate replaces it at once (the "peak": an endpoint
//! that turns slow is avoided from its first slow answer, and earns its way back as fast
//! answers come in). Read, the estimate fades toward zero with the time since the last
//! sample, so an endpoint that got no traffic because it looked slow is tried again.
//! A gateway failure (refused connection, reset, timeout, 502–504) counts as at least
//! twice the current estimate and at least [`FAILURE_FLOOR`]: a fast failure must not
//! make an endpoint look fast.
//!
//! The state lives in the endpoint's [`crate::endpoints::EndpointState`], outside the
//! snapshot, so it survives configuration changes. Updates are two relaxed stores; two
//! concurrent samples may lose one of them, which an estimate can afford.

use std::sync::atomic::{AtomicU64, Ordering};

/// The time constant `τ` of the average, in nanoseconds (1 s).
const DECAY_NS: f64 = 1e9;
/// The estimate of an endpoint never measured (1 ms): low enough that a new endpoint is
/// tried soon, and measured by its first answers.
const INITIAL_NS: f64 = 1e6;
/// The least a gateway failure counts for (10 ms).
pub(crate) const FAILURE_FLOOR: f64 = 1e7;

/// The moving average (see the module docs).
#[derive(Debug)]
pub(crate) struct PeakEwma {
    /// The estimate in nanoseconds, as `f64` bits.
    estimate: AtomicU64,
    /// When it was last updated, in nanoseconds since the process epoch; 0 never.
    stamp: AtomicU64,
}

impl Default for PeakEwma {
    fn default() -> Self {
        PeakEwma {
            estimate: AtomicU64::new(INITIAL_NS.to_bits()),
            stamp: AtomicU64::new(0),
        }
    }
}

impl PeakEwma {
    /// The estimate at `now_ns`, faded toward zero since the last sample.
    pub(crate) fn estimate(&self, now_ns: u64) -> f64 {
        let estimate = f64::from_bits(self.estimate.load(Ordering::Relaxed));
        let stamp = self.stamp.load(Ordering::Relaxed);
        if stamp == 0 || now_ns <= stamp {
            return estimate;
        }
        estimate * (-((now_ns - stamp) as f64) / DECAY_NS).exp()
    }

    /// Adds a sample of `sample_ns` taken at `now_ns`; `failed` for a gateway failure.
    pub(crate) fn observe(&self, sample_ns: f64, failed: bool, now_ns: u64) {
        let estimate = f64::from_bits(self.estimate.load(Ordering::Relaxed));
        let stamp = self.stamp.load(Ordering::Relaxed);
        let sample = if failed {
            sample_ns
                .max(2.0 * self.estimate(now_ns))
                .max(FAILURE_FLOOR)
        } else {
            sample_ns
        };
        let next = if sample >= estimate || stamp == 0 {
            sample
        } else {
            let dt = now_ns.saturating_sub(stamp) as f64;
            let keep = (-dt / DECAY_NS).exp();
            estimate * keep + sample * (1.0 - keep)
        };
        self.estimate.store(next.to_bits(), Ordering::Relaxed);
        self.stamp.store(now_ns.max(1), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: f64 = 1e6;

    #[test]
    fn peaks_at_once_and_comes_down_with_fast_samples() {
        let e = PeakEwma::default();
        let mut now = 1_000_000_000u64;
        e.observe(2.0 * MS, false, now);
        assert_eq!(
            e.estimate(now),
            2.0 * MS,
            "the first sample is the estimate"
        );
        now += 10_000_000;
        e.observe(50.0 * MS, false, now);
        assert_eq!(e.estimate(now), 50.0 * MS, "a slower sample replaces it");
        // 1 ms answers every 10 ms: after a second the estimate is near them again.
        for _ in 0..100 {
            now += 10_000_000;
            e.observe(MS, false, now);
        }
        let after = e.estimate(now);
        assert!(after < 20.0 * MS && after > MS, "{after}");
        for _ in 0..400 {
            now += 10_000_000;
            e.observe(MS, false, now);
        }
        assert!(e.estimate(now) < 1.5 * MS, "{}", e.estimate(now));
    }

    #[test]
    fn fades_without_samples_and_failures_count_as_slow() {
        let e = PeakEwma::default();
        let now = 5_000_000_000u64;
        e.observe(100.0 * MS, false, now);
        let later = now + 3_000_000_000;
        assert!(e.estimate(later) < 100.0 * MS * 0.06, "faded over 3τ");
        let f = PeakEwma::default();
        f.observe(MS, false, now);
        f.observe(0.1 * MS, true, now + 1);
        assert!(
            f.estimate(now + 1) >= FAILURE_FLOOR,
            "a fast failure is not fast"
        );
        f.observe(0.1 * MS, true, now + 2);
        assert!(f.estimate(now + 2) >= 2.0 * FAILURE_FLOOR * 0.99);
    }
}
