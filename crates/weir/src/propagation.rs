//! Propagation metrics: how long each phase of a configuration change takes, from the
//! moment the change was seen to the moment the data plane serves it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::time::Duration;

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

/// Histogram handles resolved once, so observing never takes the family's lock.
#[derive(Clone)]
pub struct PropagationMetrics {
    parse: Histogram,
    translate: Histogram,
    apply: Histogram,
    end_to_end: Histogram,
    changes: Counter,
}

impl PropagationMetrics {
    /// Registers `weir_propagation_seconds{phase}` and `weir_config_changes_total`.
    pub fn new(registry: &mut Registry) -> Self {
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
        }
    }

    /// Records one phase's duration.
    pub fn observe(&self, phase: Phase, d: Duration) {
        let h = match phase {
            Phase::Parse => &self.parse,
            Phase::Translate => &self.translate,
            Phase::Apply => &self.apply,
            Phase::EndToEnd => &self.end_to_end,
        };
        h.observe(d.as_secs_f64());
    }

    /// Counts one processed change cycle.
    pub fn count_cycle(&self) {
        self.changes.inc();
    }
}
