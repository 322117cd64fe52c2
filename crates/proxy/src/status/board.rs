//! What the status page shows beside the snapshot: the process's mode, the last
//! rejections with their reasons, and latency histograms of the change path.
//!
//! The data plane owns one [`StatusBoard`]; the control plane of the same process (the
//! pipeline of `weir run` or `weir controller`) writes the rejections it makes and the
//! propagation phases it times into it, so one admin server shows both.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{Value, json};

/// How many rejections the ring keeps: the status page shows what went wrong lately,
/// not a history (the log has that).
pub const REJECTIONS_KEPT: usize = 256;

/// Which stage refused an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Refused when read: the validation an API server applies (schema, CEL, core rules),
    /// or a document that is not an object at all.
    Validation,
    /// Read, but the translator refused it or part of it (its status conditions).
    Translation,
    /// The data plane refused an IR resource (a listener it cannot bind, a resource it
    /// cannot decode); the rest of the batch applied.
    DataPlane,
}

impl Stage {
    fn bit(self) -> u8 {
        match self {
            Stage::Validation => 1,
            Stage::Translation => 2,
            Stage::DataPlane => 0,
        }
    }
}

/// One thing wrong with a rejected object: a status condition (with the scope it applies
/// to, e.g. `parent gw/http`), or a bare message for kinds without conditions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// What part of the object: `listener https`, `parent gw/http`; empty for the object.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub scope: String,
    /// The condition as `Type=Status` (`Accepted=False`); empty for a bare message.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub condition: String,
    /// The condition's reason (`NotAllowedByListeners`); empty for a bare message.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// What is wrong, naming the field when known.
    pub message: String,
}

/// One rejection: an object (or data-plane resource), when, by which stage, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Rejection {
    /// When it was recorded, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// The stage that refused it.
    pub stage: Stage,
    /// The object, `Kind namespace/name`; for a file that names no object, the file.
    pub object: String,
    /// Where it came from (`file#document`), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Why.
    pub problems: Vec<Problem>,
}

impl Rejection {
    /// A rejection recorded now.
    pub fn now(
        stage: Stage,
        object: String,
        origin: Option<String>,
        problems: Vec<Problem>,
    ) -> Rejection {
        Rejection {
            at_unix_ms: unix_ms(SystemTime::now()),
            stage,
            object,
            origin,
            problems,
        }
    }

    /// Whether `q` (lower-case) occurs in the object, origin or a problem.
    fn matches(&self, q: &str) -> bool {
        let has = |s: &str| s.to_ascii_lowercase().contains(q);
        q.is_empty()
            || has(&self.object)
            || self.origin.as_deref().is_some_and(has)
            || self
                .problems
                .iter()
                .any(|p| has(&p.message) || has(&p.reason) || has(&p.scope))
    }
}

/// The last [`REJECTIONS_KEPT`] rejections, and which objects are rejected right now.
///
/// Writers hold the lock for one push or one map update; readers for copying out at
/// most the ring's `Arc`s.
#[derive(Debug, Default)]
pub struct RejectionLog {
    inner: Mutex<Log>,
    /// `current.len()`, readable without the lock: the change path clears objects only
    /// when some are rejected (20,000 accepted objects at startup take no lock).
    rejected: AtomicUsize,
}

#[derive(Debug, Default)]
struct Log {
    ring: VecDeque<Arc<Rejection>>,
    total: u64,
    /// Objects rejected now, with the stages (bits of [`Stage::bit`]) that reject them.
    current: HashMap<String, u8>,
}

impl RejectionLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a rejection (the oldest one leaves the ring when it is full) and, for the
    /// validation and translation stages, marks its object rejected until cleared. (A
    /// refused data-plane resource is only recorded: the control plane's statuses say
    /// what is wrong now.)
    pub fn push(&self, r: Rejection) {
        let mut log = self.lock();
        if r.stage != Stage::DataPlane {
            *log.current.entry(r.object.clone()).or_default() |= r.stage.bit();
            self.rejected.store(log.current.len(), Ordering::Relaxed);
        }
        if log.ring.len() == REJECTIONS_KEPT {
            log.ring.pop_front();
        }
        log.ring.push_back(Arc::new(r));
        log.total += 1;
    }

    /// Marks `object` as no longer rejected by `stage` (it was read, or translated
    /// without a problem). The ring keeps its past rejections.
    pub fn clear(&self, object: &str, stage: Stage) {
        let mut log = self.lock();
        if let Some(bits) = log.current.get_mut(object) {
            *bits &= !stage.bit();
            if *bits == 0 {
                log.current.remove(object);
            }
        }
        self.rejected.store(log.current.len(), Ordering::Relaxed);
    }

    /// Forgets `object` altogether (it was deleted).
    pub fn forget(&self, object: &str) {
        let mut log = self.lock();
        log.current.remove(object);
        self.rejected.store(log.current.len(), Ordering::Relaxed);
    }

    /// Whether any object is rejected now (no lock taken).
    pub fn any_rejected(&self) -> bool {
        self.rejected.load(Ordering::Relaxed) != 0
    }

    /// Rejections ever recorded.
    pub fn total(&self) -> u64 {
        self.lock().total
    }

    /// Objects rejected now (by any stage).
    pub fn rejected_now(&self) -> usize {
        self.rejected.load(Ordering::Relaxed)
    }

    /// Up to `limit` rejections matching `q` (lower-case; empty: all), newest first, and
    /// how many of the ring matched.
    pub fn recent(&self, q: &str, limit: usize) -> (Vec<Arc<Rejection>>, usize) {
        let ring: Vec<Arc<Rejection>> = self.lock().ring.iter().cloned().collect();
        // Matching runs outside the lock.
        let matching: Vec<Arc<Rejection>> =
            ring.into_iter().rev().filter(|r| r.matches(q)).collect();
        let n = matching.len();
        (matching.into_iter().take(limit).collect(), n)
    }
}

/// Upper bounds of [`LatencyHistogram`]'s buckets: 50 µs to ~3.3 s in factor-2 steps (the
/// buckets of `weir_propagation_seconds`), then +Inf.
const BOUNDS: usize = 17;

fn bound(i: usize) -> f64 {
    0.000_05 * f64::from(1u32 << i)
}

/// A latency histogram the status page can read (prometheus-client's has no reader):
/// one relaxed atomic add per bucket and observation, observed once per change cycle.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Non-cumulative counts; the last is +Inf.
    buckets: [AtomicU64; BOUNDS + 1],
    sum_nanos: AtomicU64,
}

impl LatencyHistogram {
    /// Counts one duration.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = (0..BOUNDS).find(|&i| s <= bound(i)).unwrap_or(BOUNDS);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// `{count, sum_seconds, p50_seconds, p99_seconds, buckets: [{le, count}]}` with
    /// non-cumulative bucket counts (`le` null for +Inf); quantiles are the upper bound
    /// of the bucket holding them (null when empty or in +Inf).
    pub fn to_json(&self) -> Value {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let count: u64 = counts.iter().sum();
        let quantile = |q: f64| -> Value {
            if count == 0 {
                return Value::Null;
            }
            let rank = (q * count as f64).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return if i < BOUNDS {
                        json!(bound(i))
                    } else {
                        Value::Null
                    };
                }
            }
            Value::Null
        };
        let buckets: Vec<Value> = counts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let le = if i < BOUNDS {
                    json!(bound(i))
                } else {
                    Value::Null
                };
                json!({"le": le, "count": c})
            })
            .collect();
        json!({
            "count": count,
            "sum_seconds": self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            "p50_seconds": quantile(0.5),
            "p99_seconds": quantile(0.99),
            "buckets": buckets,
        })
    }
}

/// The status page's state beside the snapshot. See the module docs.
#[derive(Debug, Default)]
pub struct StatusBoard {
    mode: RwLock<String>,
    rejections: RejectionLog,
    /// Histograms in the order they were first asked for.
    histograms: Mutex<Vec<(&'static str, Arc<LatencyHistogram>)>>,
}

impl StatusBoard {
    /// Names what this process is (`weir run`, `weir controller`, `weir proxy for ns/gw`).
    pub fn set_mode(&self, mode: impl Into<String>) {
        *self.mode.write().unwrap_or_else(|e| e.into_inner()) = mode.into();
    }

    /// What [`StatusBoard::set_mode`] said.
    pub fn mode(&self) -> String {
        self.mode.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The rejections.
    pub fn rejections(&self) -> &RejectionLog {
        &self.rejections
    }

    /// The histogram of phase `name`, created on first use. Resolve it once and keep the
    /// `Arc`: this takes a lock.
    pub fn histogram(&self, name: &'static str) -> Arc<LatencyHistogram> {
        let mut list = self.histograms.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, h)) = list.iter().find(|(n, _)| *n == name) {
            return Arc::clone(h);
        }
        let h = Arc::new(LatencyHistogram::default());
        list.push((name, Arc::clone(&h)));
        h
    }

    /// Every histogram as `[{phase, count, sum_seconds, p50_seconds, p99_seconds, buckets}]`.
    pub(crate) fn histograms_json(&self) -> Vec<Value> {
        let list: Vec<(&'static str, Arc<LatencyHistogram>)> = self
            .histograms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        list.into_iter()
            .map(|(name, h)| {
                let mut v = h.to_json();
                v["phase"] = json!(name);
                v
            })
            .collect()
    }
}

/// Milliseconds since the Unix epoch (0 before it).
pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejection(object: &str, stage: Stage, msg: &str) -> Rejection {
        Rejection::now(
            stage,
            object.into(),
            None,
            vec![Problem {
                message: msg.into(),
                ..Problem::default()
            }],
        )
    }

    #[test]
    fn the_ring_keeps_the_last_rejections_and_counts_all() {
        let log = RejectionLog::default();
        for i in 0..REJECTIONS_KEPT + 10 {
            log.push(rejection(
                &format!("HTTPRoute default/r{i}"),
                Stage::Translation,
                "bad",
            ));
        }
        assert_eq!(log.total(), (REJECTIONS_KEPT + 10) as u64);
        let (recent, matched) = log.recent("", 3);
        assert_eq!(matched, REJECTIONS_KEPT);
        let names: Vec<&str> = recent.iter().map(|r| r.object.as_str()).collect();
        let last = REJECTIONS_KEPT + 9;
        assert_eq!(
            names,
            [
                format!("HTTPRoute default/r{last}"),
                format!("HTTPRoute default/r{}", last - 1),
                format!("HTTPRoute default/r{}", last - 2)
            ]
        );
        // The oldest ten left the ring.
        let (all, _) = log.recent("", usize::MAX);
        assert!(all.iter().all(|r| r.object != "HTTPRoute default/r9"));
        assert_eq!(log.recent("r10", 300).1, 1 + 10, "r10 and r100..r109");
    }

    #[test]
    fn an_object_is_rejected_until_every_stage_clears_it() {
        let log = RejectionLog::default();
        log.push(rejection("HTTPRoute a/b", Stage::Validation, "bad-x"));
        log.push(rejection("HTTPRoute a/b", Stage::Translation, "bad-y"));
        log.push(rejection("Gateway a/gw", Stage::Translation, "bad-z"));
        assert_eq!(log.rejected_now(), 2);
        log.clear("HTTPRoute a/b", Stage::Validation);
        assert_eq!(log.rejected_now(), 2);
        log.clear("HTTPRoute a/b", Stage::Translation);
        assert_eq!(log.rejected_now(), 1);
        log.forget("Gateway a/gw");
        assert_eq!(log.rejected_now(), 0);
        assert_eq!(log.total(), 3, "the ring remembers");
        // Search covers messages, case-insensitively (the query is lower-case).
        assert_eq!(log.recent("bad-y", 10).1, 1);
    }

    #[test]
    fn histogram_buckets_and_quantiles() {
        let h = LatencyHistogram::default();
        let empty = h.to_json();
        assert_eq!(empty["count"], 0);
        assert!(empty["p50_seconds"].is_null());
        for _ in 0..98 {
            h.observe(Duration::from_micros(40));
        }
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(10));
        let v = h.to_json();
        assert_eq!(v["count"], 100);
        assert_eq!(v["p50_seconds"], json!(0.000_05));
        assert_eq!(
            v["p99_seconds"],
            json!(0.0032),
            "3 ms falls in the 3.2 ms bucket"
        );
        let buckets = v["buckets"].as_array().unwrap();
        assert_eq!(buckets.len(), BOUNDS + 1);
        assert_eq!(buckets[0]["count"], 98);
        assert!(buckets[BOUNDS]["le"].is_null());
        assert_eq!(buckets[BOUNDS]["count"], 1);
        let sum = v["sum_seconds"].as_f64().unwrap();
        assert!((sum - (98.0 * 40e-6 + 0.003 + 10.0)).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn histograms_are_listed_in_the_order_first_asked_for() {
        let board = StatusBoard::default();
        let parse = board.histogram("parse");
        board.histogram("apply").observe(Duration::from_millis(1));
        assert!(Arc::ptr_eq(&parse, &board.histogram("parse")));
        let phases: Vec<Value> = board
            .histograms_json()
            .iter()
            .map(|h| h["phase"].clone())
            .collect();
        assert_eq!(phases, [json!("parse"), json!("apply")]);
    }
}
