//! The change path shared by every provider: object changes → translator → data plane,
//! with each phase timed and every rejection logged once, next to where it came from.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_api::{ObjectKey, ObjectStatus};
use weir_model::DeltaBatch;
use weir_proxy::{DataPlane, SnapshotBuild};
use weir_translate::{ObjectChange, Staged, TranslateOutput, Translator, TranslatorOptions};

use weir_proxy::status::{Problem, Rejection, Stage};

use crate::propagation::{Phase, PropagationMetrics};
use crate::report;

/// A provider's update as translator changes: deletions first, then upserts.
pub fn changes(
    deletes: Vec<ObjectKey>,
    upserts: Vec<(ObjectKey, Arc<weir_api::Object>)>,
) -> Vec<ObjectChange> {
    let mut changes: Vec<ObjectChange> = deletes.into_iter().map(ObjectChange::Delete).collect();
    changes.extend(upserts.into_iter().map(|(k, o)| ObjectChange::Upsert(k, o)));
    changes
}

/// What one change cycle did.
#[derive(Debug, Default)]
pub struct CycleReport {
    /// Deltas sent to the data plane.
    pub deltas: usize,
    /// Statuses that changed (to be written back by a provider that has a status API).
    pub statuses: Vec<(ObjectKey, Arc<ObjectStatus>)>,
    /// Resources the data plane rejected.
    pub rejected: usize,
    /// Data plane snapshot version after the cycle.
    pub version: u64,
}

/// Owns the translator and feeds the data plane.
pub struct Pipeline {
    translator: Translator,
    dataplane: Arc<DataPlane>,
    metrics: PropagationMetrics,
    /// Where IR changes go besides (or instead of) the embedded data plane.
    hub: Option<Arc<weir_xds::Hub>>,
    /// Whether the embedded data plane serves traffic (false: split mode, data planes
    /// are separate `weir proxy` processes fed by the hub).
    embedded: bool,
}

impl Pipeline {
    /// A pipeline with an empty translator.
    pub fn new(
        options: TranslatorOptions,
        dataplane: Arc<DataPlane>,
        metrics: PropagationMetrics,
    ) -> Self {
        Pipeline {
            translator: Translator::new(options),
            dataplane,
            metrics,
            hub: None,
            embedded: true,
        }
    }

    /// Also publishes every change to `hub` (the push server); with `embedded` false the
    /// embedded data plane is not fed (and binds no listener).
    pub fn with_hub(mut self, hub: Arc<weir_xds::Hub>, embedded: bool) -> Self {
        self.hub = Some(hub);
        self.embedded = embedded;
        self
    }

    /// The translator's current statuses (for `/status`-like reporting and tests).
    pub fn statuses(&self) -> Vec<(ObjectKey, Arc<ObjectStatus>)> {
        self.translator.statuses()
    }

    /// Translates `changes` and applies the result. `seen` is when the first change of
    /// this cycle was observed; `parse` how long reading it took. `origin` names where an
    /// object came from, for log lines.
    pub async fn process(
        &mut self,
        changes: Vec<ObjectChange>,
        seen: Instant,
        parse: Duration,
        origin: &(dyn Fn(&ObjectKey) -> Option<String> + Sync),
    ) -> CycleReport {
        self.forget_rejections(&changes);
        let t = Instant::now();
        let output = tokio::task::block_in_place(|| self.translator.apply(changes));
        let translate = t.elapsed();
        self.publish(output, None, seen, parse, translate, origin, true)
            .await
    }

    /// Starts a cycle whose changes come in parts while the rest is read (the first
    /// configuration): [`Pipeline::stage`] each part, then [`Pipeline::finish_load`].
    pub fn begin_load(&self) -> Load {
        Load {
            // With a hub, remote data planes are sent the one batch of the cycle.
            streams: self.hub.is_none() && self.embedded,
            ..Load::default()
        }
    }

    /// The snapshot the parts of `load` are applied to as they are translated, when
    /// they are emitted part by part (an embedded data plane and no hub): the batches
    /// [`Pipeline::stage`] returns go to it, in order (on any thread), and it is
    /// published by [`Pipeline::finish_load`].
    pub fn begin_build(&self, load: &Load) -> Option<SnapshotBuild> {
        load.streams.then(|| self.dataplane.begin_build())
    }

    /// Translates one part of a cycle begun with [`Pipeline::begin_load`] (blocking: call
    /// it off the async workers, as the reading does). Nothing is served from it before
    /// [`Pipeline::finish_load`]. `expected`: how many changes the whole cycle is
    /// expected to hold (tables are sized for it). When the load is emitted part by part
    /// ([`Pipeline::begin_build`]), returns the part's batch for the build.
    pub fn stage(
        &mut self,
        load: &mut Load,
        changes: Vec<ObjectChange>,
        expected: usize,
    ) -> Option<DeltaBatch> {
        self.forget_rejections(&changes);
        let t = Instant::now();
        self.translator.stage(&mut load.staged, changes, expected);
        let batch = load
            .streams
            .then(|| self.translator.emit_part(&mut load.staged));
        load.translate += t.elapsed();
        batch
    }

    /// Emits and applies what the parts of `load` changed, as one cycle. `seen` is when
    /// the cycle began; its parse phase is the time since then not spent translating
    /// (reading ran meanwhile on other threads). The report holds no statuses: they are
    /// logged, and dropped before the data plane builds its snapshot (the standalone
    /// mode, which loads in parts, has no status API; at 1,000,000 TLS domains they are
    /// tens of MiB at the load's peak).
    ///
    /// `build`: the snapshot of [`Pipeline::begin_build`], every batch of the parts
    /// applied; the rest is applied to it and it is published. Its apply time is the
    /// cycle's apply phase (most of it overlapped the translation).
    pub async fn finish_load(
        &mut self,
        load: Load,
        build: Option<SnapshotBuild>,
        seen: Instant,
        origin: &(dyn Fn(&ObjectKey) -> Option<String> + Sync),
    ) -> CycleReport {
        let Load {
            staged, translate, ..
        } = load;
        let parse = seen.elapsed().saturating_sub(translate);
        let t = Instant::now();
        let output = tokio::task::block_in_place(|| self.translator.emit(staged));
        let translate = translate + t.elapsed();
        self.publish(output, build, seen, parse, translate, origin, false)
            .await
    }

    /// Clears the status page's rejections of the objects `changes` replace or delete.
    fn forget_rejections(&self, changes: &[ObjectChange]) {
        let board = self.dataplane.status_board();
        let rejections = board.rejections();
        if rejections.any_rejected() {
            for change in changes {
                match change {
                    ObjectChange::Delete(key) => rejections.forget(&key.to_string()),
                    // Read, so it passed validation.
                    ObjectChange::Upsert(key, _) => {
                        rejections.clear(&key.to_string(), Stage::Validation)
                    }
                }
            }
        }
    }

    /// Logs the statuses of a translated cycle and applies its deltas (to `build`, then
    /// published, when the cycle's earlier batches were applied to it). With
    /// `keep_statuses` false the statuses are dropped once logged, before the deltas are
    /// applied, and the report has none.
    #[allow(clippy::too_many_arguments)]
    async fn publish(
        &mut self,
        output: TranslateOutput,
        build: Option<SnapshotBuild>,
        seen: Instant,
        parse: Duration,
        translate: Duration,
        origin: &(dyn Fn(&ObjectKey) -> Option<String> + Sync),
        keep_statuses: bool,
    ) -> CycleReport {
        let TranslateOutput {
            batch,
            mut statuses,
        } = output;
        let board = Arc::clone(self.dataplane.status_board());
        let rejections = board.rejections();
        for (key, status) in &statuses {
            let found = report::findings(status);
            log_status(key, &found, origin);
            if !found.is_empty() {
                rejections.push(Rejection::now(
                    Stage::Translation,
                    key.to_string(),
                    origin(key),
                    found,
                ));
            } else if rejections.any_rejected() {
                rejections.clear(&key.to_string(), Stage::Translation);
            }
        }
        let logged = statuses.len();
        if !keep_statuses {
            statuses = Vec::new();
        }
        let t = Instant::now();
        if let Some(hub) = &self.hub {
            hub.apply(&batch);
        }
        let mut deltas = batch.deltas.len();
        let mut earlier = Duration::ZERO;
        let applied = match build {
            Some(mut build) => {
                earlier = build.took();
                tokio::task::block_in_place(|| build.apply(&batch));
                deltas = build.deltas();
                match self.dataplane.finish_build(build).await {
                    Ok(applied) => applied,
                    Err(stale) => {
                        tracing::error!(%stale, "the configuration was not applied");
                        weir_proxy::ApplyReport::default()
                    }
                }
            }
            None if self.embedded => self.dataplane.apply(&batch).await,
            None => weir_proxy::ApplyReport::default(),
        };
        let apply = earlier + t.elapsed();
        for (key, reason) in &applied.rejected {
            tracing::warn!(resource = ?key, %reason, "data plane rejected a resource; the rest is applied");
        }
        self.metrics.observe(Phase::Parse, parse);
        self.metrics.observe(Phase::Translate, translate);
        self.metrics.observe(Phase::Apply, apply);
        self.metrics.observe(Phase::EndToEnd, seen.elapsed());
        self.metrics.count_cycle();
        tracing::debug!(
            deltas,
            statuses = logged,
            version = applied.version,
            parse_us = parse.as_micros() as u64,
            translate_us = translate.as_micros() as u64,
            apply_us = apply.as_micros() as u64,
            "configuration applied"
        );
        CycleReport {
            deltas,
            statuses,
            rejected: applied.rejected.len(),
            version: applied.version,
        }
    }
}

/// A cycle translated in parts (see [`Pipeline::begin_load`]).
#[derive(Default)]
pub struct Load {
    staged: Staged,
    /// Time spent translating the parts so far.
    translate: Duration,
    /// Whether every part is emitted as it is staged (see [`Pipeline::begin_build`]).
    streams: bool,
}

/// Records, on the status page, an object a provider could not read (the validation an
/// API server applies, or a document that is no object): `object` as `Kind ns/name`
/// when known, `origin` as `file#document`.
pub fn record_refused(
    dataplane: &DataPlane,
    object: Option<String>,
    origin: Option<String>,
    message: String,
) {
    let object = object
        .or_else(|| origin.clone())
        .unwrap_or_else(|| "-".into());
    dataplane.status_board().rejections().push(Rejection::now(
        Stage::Validation,
        object,
        origin,
        vec![Problem {
            message,
            ..Problem::default()
        }],
    ));
}

fn log_status(
    key: &ObjectKey,
    problems: &[Problem],
    origin: &(dyn Fn(&ObjectKey) -> Option<String> + Sync),
) {
    if problems.is_empty() && !tracing::enabled!(tracing::Level::DEBUG) {
        // Nothing to log: skip formatting the origin (20,000 of them at startup).
        return;
    }
    let at = origin(key).unwrap_or_else(|| "-".into());
    if problems.is_empty() {
        tracing::debug!(object = %key, origin = %at, "object accepted");
    }
    for p in problems {
        tracing::warn!(object = %key, origin = %at, "{}", report::line(p));
    }
}
