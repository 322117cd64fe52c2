//! OpenTelemetry traces: a server span per sampled request and a client span per
//! attempt of its forwarding, W3C `traceparent` propagation, ratio and parent-based sampling, and a
//! batching OTLP/gRPC exporter that never makes a request wait.
//!
//! Per request (only when `--otlp-endpoint` is set): phase 0 reads the client's
//! `traceparent` ([`context::parse_traceparent`]), decides whether to sample, and sets
//! the `traceparent` the upstream receives: the same trace, with the client span's id as
//! parent when sampled; the client's own header unchanged when the caller's decision
//! says not to sample; a new unsampled trace when the client sent none (so that the
//! services behind still share one trace id). `tracestate` is forwarded as sent. Phase 7
//! hands the ended spans to a bounded queue (`try_send`: a full queue drops them,
//! counted), and one task exports them in batches.

pub(crate) mod context;
mod export;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue, Version};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use weir_model::{EndpointAddr, RouteRef};

use crate::access_log::Record;
use crate::router::next_random;

/// How spans travel to the collector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/gRPC: `TraceService/Export` calls (HTTP/2).
    #[default]
    Grpc,
    /// OTLP/HTTP with protobuf bodies: `POST {endpoint}/v1/traces` (HTTP/1.1).
    Http,
}

/// Trace settings (process flags `--otlp-endpoint`, `--trace-sampling-ratio`, …).
#[derive(Clone, Debug, PartialEq)]
pub struct TraceSettings {
    /// The OTLP collector, `http://host:port` or `https://host:port` (TLS, the server
    /// name from the host).
    pub endpoint: String,
    /// gRPC or HTTP.
    pub protocol: OtlpProtocol,
    /// CA certificates (PEM) trusted for an `https://` collector besides the system's
    /// roots.
    pub ca_pem: Option<Vec<u8>>,
    /// `service.name` of the spans' resource.
    pub service_name: String,
    /// Share of new traces sampled, 0 to 1 (by trace id, so every data plane decides a
    /// trace alike).
    pub sampling_ratio: f64,
    /// Follow the caller's decision (the `traceparent` sampled flag) when there is one.
    pub parent_based: bool,
    /// Ended spans waiting for the exporter at most; more are dropped and counted.
    pub queue: usize,
    /// Spans per export call at most.
    pub batch: usize,
    /// A span waits at most this long to be exported (a batch that is not full is sent
    /// then).
    pub interval: Duration,
    /// Limit of one export call (and of connecting to the collector).
    pub timeout: Duration,
}

impl TraceSettings {
    /// Settings with the defaults for everything but the collector.
    pub fn new(endpoint: impl Into<String>) -> TraceSettings {
        TraceSettings {
            endpoint: endpoint.into(),
            protocol: OtlpProtocol::Grpc,
            ca_pem: None,
            service_name: "weir".into(),
            sampling_ratio: 1.0,
            parent_based: true,
            queue: 8192,
            batch: 512,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
        }
    }
}

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// A sampled request's span ids, kept in its record.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpanIds {
    pub(crate) trace_id: [u8; 16],
    /// The server span (the request as weir received it).
    pub(crate) span_id: [u8; 8],
    /// The caller's span, when the request continued a trace.
    pub(crate) parent_id: Option<[u8; 8]>,
    /// The client span (the request as weir forwarded it): the parent the upstream sees.
    pub(crate) client_id: [u8; 8],
    pub(crate) start: SystemTime,
}

impl SpanIds {
    /// The trace id in hex (for the access log).
    pub(crate) fn trace_hex(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        context::hex_into(&self.trace_id, &mut out);
        out
    }
}

/// Phase 0's reading of a request's trace context and its decision, kept until the
/// route's trace policy is known.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Begun {
    trace_id: [u8; 16],
    /// The caller's span and whether it sampled, when the request continued a trace.
    parent: Option<([u8; 8], bool)>,
    start: SystemTime,
    /// The span ids when phase 0 sampled it.
    pub(crate) ids: Option<SpanIds>,
}

impl Begun {
    fn sampled_ids(&self) -> SpanIds {
        SpanIds {
            trace_id: self.trace_id,
            span_id: random_span_id(),
            parent_id: self.parent.map(|(id, _)| id),
            client_id: random_span_id(),
            start: self.start,
        }
    }
}

/// One attempt of a retried, traced request, as its client span shows it.
#[derive(Clone, Debug)]
pub(crate) struct AttemptSpan {
    span_id: [u8; 8],
    /// 1 for the first attempt.
    number: u32,
    start: SystemTime,
    end: SystemTime,
    endpoint: EndpointAddr,
    /// The response's status, or why the attempt failed (`error.type`).
    outcome: Result<u16, &'static str>,
}

/// The client spans of a retried, traced request: the retry loop adds one per attempt
/// ([`AttemptTrace`]), phase 7 takes them.
#[derive(Clone, Debug, Default)]
pub(crate) struct AttemptSpans(Arc<Mutex<Vec<AttemptSpan>>>);

impl AttemptSpans {
    fn take(&self) -> Vec<AttemptSpan> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// What the retry loop needs to give each attempt of a traced request its client span:
/// the first attempt keeps the span id phase 0 put in `traceparent`; each retry gets a
/// new one, written into the `traceparent` that attempt sends, so the upstream's span
/// hangs under the attempt that reached it.
#[derive(Debug)]
pub(crate) struct AttemptTrace {
    trace_id: [u8; 16],
    first: [u8; 8],
    spans: AttemptSpans,
}

impl AttemptTrace {
    /// The attempts of the request with spans `ids`; `spans` is kept in its record.
    pub(crate) fn new(ids: &SpanIds) -> (AttemptTrace, AttemptSpans) {
        let spans = AttemptSpans::default();
        let t = AttemptTrace {
            trace_id: ids.trace_id,
            first: ids.client_id,
            spans: spans.clone(),
        };
        (t, spans)
    }

    /// The span id of attempt `number` (1-based), and for a retry the `traceparent` of
    /// its head rewritten to name it.
    pub(crate) fn start(&self, number: u32, headers: &mut HeaderMap) -> [u8; 8] {
        if number <= 1 {
            return self.first;
        }
        let id = random_span_id();
        set_traceparent(headers, &self.trace_id, &id, true);
        id
    }

    /// Notes an ended attempt.
    pub(crate) fn ended(
        &self,
        span_id: [u8; 8],
        number: u32,
        start: SystemTime,
        endpoint: EndpointAddr,
        outcome: Result<u16, &'static str>,
    ) {
        let span = AttemptSpan {
            span_id,
            number,
            start,
            end: SystemTime::now(),
            endpoint,
            outcome,
        };
        self.spans
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(span);
    }
}

/// An ended request, as the exporter turns it into spans.
#[derive(Debug)]
pub(crate) struct Ended {
    ids: SpanIds,
    tracestate: Option<HeaderValue>,
    end: SystemTime,
    /// When the upstream endpoint was chosen (the client span's start).
    forwarded_at: Option<SystemTime>,
    method: http::Method,
    path: String,
    host: Option<HeaderValue>,
    version: Version,
    tls: bool,
    local_port: u16,
    client: SocketAddr,
    status: u16,
    route: Option<RouteRef>,
    upstream: Option<EndpointAddr>,
    attempts: u32,
    /// A client span each, when the request was retried (else `forwarded_at` and
    /// `upstream` make its one client span).
    attempt_spans: Vec<AttemptSpan>,
    fault: Option<&'static str>,
}

/// Trace counters.
#[derive(Clone, Debug, Default)]
pub(crate) struct TraceMetrics {
    sampled: Counter,
    dropped: Counter,
    exported: Counter,
    failed: Counter,
    export_errors: Counter,
}

impl TraceMetrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "weir_trace_requests_sampled",
            "Requests traced (a server span, and a client span per attempt when forwarded)",
            self.sampled.clone(),
        );
        registry.register(
            "weir_trace_spans_dropped",
            "Spans dropped because the exporter's queue was full",
            self.dropped.clone(),
        );
        registry.register(
            "weir_trace_spans_exported",
            "Spans the OTLP collector accepted",
            self.exported.clone(),
        );
        registry.register(
            "weir_trace_spans_failed",
            "Spans of export calls that failed (collector unreachable, refused, timed out)",
            self.failed.clone(),
        );
        registry.register(
            "weir_trace_export_errors",
            "OTLP export calls that failed",
            self.export_errors.clone(),
        );
    }
}

/// The request side of tracing: the sampler and the queue to the exporter.
pub(crate) struct Tracer {
    parent_based: bool,
    /// A trace is sampled when the low 64 bits of its id are below this (ratio × 2^64);
    /// `None`: every trace.
    threshold: Option<u64>,
    tx: tokio::sync::mpsc::Sender<Ended>,
    metrics: TraceMetrics,
}

impl Tracer {
    /// Starts the exporter on the current runtime; an endpoint that is not a URI is an
    /// error.
    pub(crate) fn start(
        settings: &TraceSettings,
        metrics: TraceMetrics,
    ) -> std::io::Result<Tracer> {
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|e| std::io::Error::other(format!("traces need a runtime: {e}")))?;
        let exporter = {
            let _entered = rt.enter();
            export::Exporter::new(settings)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?
        };
        let (tx, rx) = tokio::sync::mpsc::channel(settings.queue.max(1));
        rt.spawn(export::run(exporter, rx, settings.clone(), metrics.clone()));
        let ratio = settings.sampling_ratio;
        let threshold = if ratio >= 1.0 {
            None
        } else if ratio > 0.0 {
            // The float product is exact enough: the ratio is a configuration value.
            Some((ratio * 18_446_744_073_709_551_616.0) as u64)
        } else {
            Some(0)
        };
        Ok(Tracer {
            parent_based: settings.parent_based,
            threshold,
            tx,
            metrics,
        })
    }

    fn samples(&self, trace_id: &[u8; 16]) -> bool {
        samples_at(self.threshold, trace_id)
    }

    /// Phase 0: reads the caller's `traceparent`, decides by the process settings, and
    /// sets the `traceparent` the upstream gets. The decision may be revised once the
    /// route's policies are known ([`Tracer::apply_policy`]).
    pub(crate) fn begin(&self, headers: &mut HeaderMap) -> Begun {
        let parent = headers
            .get(&TRACEPARENT)
            .and_then(|v| context::parse_traceparent(v.as_bytes()));
        let trace_id = match &parent {
            Some(p) => p.trace_id,
            None => random_trace_id(),
        };
        let sampled = match &parent {
            Some(p) if self.parent_based => p.sampled(),
            _ => self.samples(&trace_id),
        };
        let begun = Begun {
            trace_id,
            parent: parent.as_ref().map(|p| (p.parent_id, p.sampled())),
            start: SystemTime::now(),
            ids: None,
        };
        if !sampled {
            if parent.is_none() {
                // A trace of its own, unsampled, so the services behind share its id.
                set_traceparent(headers, &trace_id, &random_span_id(), false);
            }
            return begun;
        }
        let ids = begun.sampled_ids();
        set_traceparent(headers, &trace_id, &ids.client_id, true);
        Begun {
            ids: Some(ids),
            ..begun
        }
    }

    /// After routing: the decision of phase 0 revised by the request's trace policy
    /// (`tracing` of its rule's, route's or Gateway's policy). `disabled` unsamples it;
    /// a sampling ratio replaces the process's for a trace weir decides itself (no
    /// caller's decision, or not parent-based). Returns the span ids the request now has,
    /// and rewrites the `traceparent` the upstream gets when the decision changed.
    pub(crate) fn apply_policy(
        &self,
        begun: &Begun,
        policy: &weir_model::TracingPolicy,
        headers: &mut HeaderMap,
    ) -> Option<SpanIds> {
        let sampled = if policy.disabled {
            false
        } else {
            match (begun.parent, policy.sampling) {
                (Some((_, caller)), _) if self.parent_based => caller,
                (_, Some(ppm)) => samples_at(threshold_ppm(ppm), &begun.trace_id),
                (_, None) => self.samples(&begun.trace_id),
            }
        };
        match (sampled, begun.ids) {
            (true, Some(ids)) => Some(ids),
            (false, None) => None,
            (true, None) => {
                let ids = begun.sampled_ids();
                set_traceparent(headers, &begun.trace_id, &ids.client_id, true);
                Some(ids)
            }
            (false, Some(ids)) => {
                // The services behind keep the trace id, unsampled.
                set_traceparent(headers, &begun.trace_id, &ids.client_id, false);
                None
            }
        }
    }

    /// Phase 7: queues a sampled request's spans; never waits.
    pub(crate) fn end(&self, r: &Record, ids: SpanIds, tls: bool, local_port: u16) {
        let Some(done) = &r.done else { return };
        let ended = Ended {
            ids,
            tracestate: r.tracestate.clone(),
            end: done.time,
            forwarded_at: r.forwarded_at,
            method: r.method.clone(),
            path: r.path.clone(),
            host: r.host.clone(),
            version: r.version,
            tls,
            local_port,
            client: done.client,
            status: done.status,
            route: r.route.clone(),
            upstream: r.upstream.clone(),
            attempts: r.attempts,
            attempt_spans: r
                .attempt_spans
                .as_ref()
                .map(AttemptSpans::take)
                .unwrap_or_default(),
            fault: done.fault,
        };
        self.metrics.sampled.inc();
        if self.tx.try_send(ended).is_err() {
            self.metrics.dropped.inc();
        }
    }
}

/// Whether a trace id falls under a sampling threshold (`None`: every trace).
fn samples_at(threshold: Option<u64>, trace_id: &[u8; 16]) -> bool {
    match threshold {
        None => true,
        Some(t) => {
            let low = u64::from_be_bytes(trace_id[8..].try_into().unwrap_or_default());
            low < t
        }
    }
}

/// The threshold of a share in parts per million ([`weir_model::SAMPLING_SCALE`]).
fn threshold_ppm(ppm: u32) -> Option<u64> {
    if ppm >= weir_model::SAMPLING_SCALE {
        return None;
    }
    // ppm × 2^64 / 10^6, exact in 128 bits.
    Some(((u128::from(ppm) << 64) / u128::from(weir_model::SAMPLING_SCALE)) as u64)
}

fn set_traceparent(headers: &mut HeaderMap, trace_id: &[u8; 16], span_id: &[u8; 8], sampled: bool) {
    let value = context::format_traceparent(trace_id, span_id, sampled);
    if let Ok(v) = HeaderValue::from_bytes(&value) {
        headers.insert(TRACEPARENT, v);
    }
}

fn random_trace_id() -> [u8; 16] {
    loop {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&next_random().to_be_bytes());
        id[8..].copy_from_slice(&next_random().to_be_bytes());
        if id != [0; 16] {
            return id;
        }
    }
}

fn random_span_id() -> [u8; 8] {
    loop {
        let id = next_random().to_be_bytes();
        if id != [0; 8] {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracer(ratio: f64, parent_based: bool) -> (Tracer, tokio::sync::mpsc::Receiver<Ended>) {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let threshold = if ratio >= 1.0 {
            None
        } else {
            Some((ratio.max(0.0) * 18_446_744_073_709_551_616.0) as u64)
        };
        let t = Tracer {
            parent_based,
            threshold,
            tx,
            metrics: TraceMetrics::default(),
        };
        (t, rx)
    }

    const SAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const UNSAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";

    fn sent(h: &HeaderMap) -> context::TraceParent {
        context::parse_traceparent(h.get("traceparent").unwrap().as_bytes()).unwrap()
    }

    #[test]
    fn an_incoming_trace_is_continued() {
        let (t, _rx) = tracer(0.0, true);
        let mut h = HeaderMap::new();
        h.insert("traceparent", HeaderValue::from_static(SAMPLED));
        let ids = t.begin(&mut h).ids.expect("the caller sampled it");
        let incoming = context::parse_traceparent(SAMPLED.as_bytes()).unwrap();
        assert_eq!(ids.trace_id, incoming.trace_id);
        assert_eq!(ids.parent_id, Some(incoming.parent_id));
        let out = sent(&h);
        assert_eq!(out.trace_id, incoming.trace_id);
        assert_eq!(out.parent_id, ids.client_id);
        assert!(out.sampled());
        assert_ne!(ids.span_id, ids.client_id);
    }

    #[test]
    fn an_unsampled_caller_is_followed_and_passed_on_unchanged() {
        let (t, _rx) = tracer(1.0, true);
        let mut h = HeaderMap::new();
        h.insert("traceparent", HeaderValue::from_static(UNSAMPLED));
        assert!(t.begin(&mut h).ids.is_none());
        assert_eq!(h.get("traceparent").unwrap(), UNSAMPLED);
        // Not parent-based: the ratio decides, on the caller's trace id.
        let (t, _rx) = tracer(1.0, false);
        let ids = t.begin(&mut h).ids.expect("ratio 1");
        assert_eq!(ids.trace_id, sent(&h).trace_id);
    }

    #[test]
    fn without_a_caller_a_trace_starts_and_the_ratio_decides() {
        let (never, _rx) = tracer(0.0, true);
        let mut h = HeaderMap::new();
        assert!(never.begin(&mut h).ids.is_none());
        assert!(!sent(&h).sampled(), "an unsampled trace is started");
        let (always, _rx) = tracer(1.0, true);
        let mut h = HeaderMap::new();
        let ids = always.begin(&mut h).ids.unwrap();
        assert_eq!(ids.parent_id, None);
        assert!(sent(&h).sampled());
        // About half at 0.5: trace ids are random.
        let (half, _rx) = tracer(0.5, true);
        let n = (0..2000)
            .filter(|_| half.begin(&mut HeaderMap::new()).ids.is_some())
            .count();
        assert!((800..1200).contains(&n), "{n} of 2000");
    }

    /// The first attempt is the span phase 0 announced; a retry gets a span of its own,
    /// announced in the `traceparent` of its head, and both are kept in order.
    #[test]
    fn each_attempt_has_its_span_and_a_retry_announces_its_own() {
        let (t, _rx) = tracer(1.0, true);
        let mut h = HeaderMap::new();
        let ids = t.begin(&mut h).ids.unwrap();
        let (at, spans) = AttemptTrace::new(&ids);
        let first = at.start(1, &mut h);
        assert_eq!(first, ids.client_id);
        assert_eq!(
            sent(&h).parent_id,
            ids.client_id,
            "the first head is unchanged"
        );
        let ep = EndpointAddr::Socket("127.0.0.1:1".parse().unwrap());
        at.ended(first, 1, SystemTime::now(), ep.clone(), Err("connect"));
        let mut retry = h.clone();
        let second = at.start(2, &mut retry);
        assert_ne!(second, first);
        assert_eq!(sent(&retry).parent_id, second);
        assert_eq!(sent(&retry).trace_id, ids.trace_id);
        assert!(sent(&retry).sampled());
        at.ended(second, 2, SystemTime::now(), ep, Ok(200));
        let taken = spans.take();
        assert_eq!(
            taken
                .iter()
                .map(|s| (s.span_id, s.number, s.outcome))
                .collect::<Vec<_>>(),
            vec![(first, 1, Err("connect")), (second, 2, Ok(200))]
        );
    }

    /// A route's trace policy revises phase 0's decision: `disabled` unsamples even a
    /// sampled caller, a ratio replaces the process's for traces weir starts, and the
    /// `traceparent` sent on says what was decided.
    #[test]
    fn a_trace_policy_revises_the_decision() {
        use weir_model::TracingPolicy;
        let ratio = |ppm| TracingPolicy {
            disabled: false,
            sampling: Some(ppm),
        };
        let off = TracingPolicy {
            disabled: true,
            sampling: None,
        };
        // Sampled by the process (ratio 1), then sampling 0 on the route: no spans, and
        // the upstream gets the same trace unsampled.
        let (t, _rx) = tracer(1.0, true);
        let mut h = HeaderMap::new();
        let begun = t.begin(&mut h);
        assert!(begun.ids.is_some());
        assert!(t.apply_policy(&begun, &ratio(0), &mut h).is_none());
        assert!(!sent(&h).sampled());
        assert_eq!(sent(&h).trace_id, begun.ids.unwrap().trace_id);
        // Unsampled by the process (ratio 0), then sampling 1 on the route: spans.
        let (t, _rx) = tracer(0.0, true);
        let mut h = HeaderMap::new();
        let begun = t.begin(&mut h);
        let ids = t
            .apply_policy(&begun, &ratio(1_000_000), &mut h)
            .expect("sampled by the route's ratio");
        assert!(sent(&h).sampled());
        assert_eq!(sent(&h).parent_id, ids.client_id);
        // A sampled caller is followed over a ratio, but not over `disabled`.
        let mut h = HeaderMap::new();
        h.insert("traceparent", HeaderValue::from_static(SAMPLED));
        let begun = t.begin(&mut h);
        assert!(t.apply_policy(&begun, &ratio(0), &mut h).is_some());
        assert!(t.apply_policy(&begun, &off, &mut h).is_none());
        assert!(!sent(&h).sampled());
        // About a quarter at 250,000 ppm.
        let n = (0..2000)
            .filter(|_| {
                let mut h = HeaderMap::new();
                let b = t.begin(&mut h);
                t.apply_policy(&b, &ratio(250_000), &mut h).is_some()
            })
            .count();
        assert!((350..650).contains(&n), "{n} of 2000");
        assert_eq!(threshold_ppm(500_000), Some(1 << 63));
        assert_eq!(threshold_ppm(1_000_000), None);
        assert_eq!(threshold_ppm(0), Some(0));
    }
}
