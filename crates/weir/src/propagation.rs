//! Propagation metrics: how long each phase of a configuration change takes, from the
//! moment the change was seen to the moment the data plane serves it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;

use weir_proxy::status::{LatencyHistogram, StatusBoard};

/// A phase of the change path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Files re-read and parsed into objects.
    Parse,
    /// Objects translated into IR deltas and statuses.
    Translate,
    /// Deltas applied to the data plane and the new snapshot published.
    Apply,
    /// From the change being seen to the new snapshot being published.
    EndToEnd,
}

impl Phase {
    fn label(self) -> &'static str {
        match self {
            Phase::Parse => "parse",
            Phase::Translate => "translate",
            Phase::Apply => "apply",
            Phase::EndToEnd => "end_to_end",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

/// Histogram handles resolved once, so observing never takes the family's lock. Each
/// phase is recorded twice: for Prometheus, and for the status page (whose histograms
/// can be read back).
#[derive(Clone)]
pub struct PropagationMetrics {
    parse: Histogram,
    translate: Histogram,
    apply: Histogram,
    end_to_end: Histogram,
    changes: Counter,
    /// The status page's copies, in [`Phase`] order.
    shown: [Arc<LatencyHistogram>; 4],
}

impl PropagationMetrics {
    /// Registers `weir_propagation_seconds{phase}` and `weir_config_changes_total`, and
    /// the phases' histograms on the status page's `board`.
    pub fn new(registry: &mut Registry, board: &StatusBoard) -> Self {
        // 50 µs … ~3.3 s in factor-2 steps: the interesting range is sub-millisecond.
        let family = Family::<PhaseLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                0.000_05, 2.0, 17,
            ))
        });
        registry.register(
            "weir_propagation_seconds",
            "Time spent per phase of applying a configuration change (parse, translate, apply) and end to end",
            family.clone(),
        );
        let changes = Counter::default();
        registry.register(
            "weir_config_changes",
            "Configuration change cycles processed (a cycle may coalesce several changes)",
            changes.clone(),
        );
        let get = |p: Phase| {
            family
                .get_or_create(&PhaseLabel { phase: p.label() })
                .clone()
        };
        PropagationMetrics {
            parse: get(Phase::Parse),
            translate: get(Phase::Translate),
            apply: get(Phase::Apply),
            end_to_end: get(Phase::EndToEnd),
            changes,
            shown: [
                Phase::EndToEnd,
                Phase::Parse,
                Phase::Translate,
                Phase::Apply,
            ]
            .map(|p| board.histogram(p.label())),
        }
    }

    /// Records one phase's duration.
    pub fn observe(&self, phase: Phase, d: Duration) {
        let (h, shown) = match phase {
            Phase::EndToEnd => (&self.end_to_end, 0),
            Phase::Parse => (&self.parse, 1),
            Phase::Translate => (&self.translate, 2),
            Phase::Apply => (&self.apply, 3),
        };
        h.observe(d.as_secs_f64());
        self.shown[shown].observe(d);
    }

    /// Counts one processed change cycle.
    pub fn count_cycle(&self) {
        self.changes.inc();
    }
}
