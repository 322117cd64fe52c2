//! Active health checks: one prober per endpoint address and probe settings, however
//! many clusters, routes and listeners use the endpoint.
//!
//! Probers are endpoint state outside the snapshot (like [`crate::endpoints`]): each
//! snapshot's [`crate::balance::ClusterState`] holds an `Arc<Prober>` per endpoint of a
//! cluster whose Service or Backend has a `healthCheck` policy, found in the
//! [`Probers`] registry by (address, settings). The registry holds weak references, so a
//! prober starts when the first snapshot needs it and stops (its task aborted) when the
//! last snapshot holding it is gone; a config change that keeps the endpoint and the
//! settings keeps the prober, its task and what it learned. The HTTP/1.1 and h2c
//! clusters of one Service port, or two Services selecting one pod, share one prober
//! when their settings are equal.
//!
//! A new prober starts healthy (a newly attached health check never takes a working
//! endpoint out before it has failed its probes) and probes at once, after a random
//! share of the jitter. When an unhealthy endpoint passes its probes again, an ejection
//! by passive outlier detection of that endpoint (in every cluster using the prober)
//! ends too, so it gets traffic at once. The balancer skips an unhealthy endpoint; when every endpoint
//! of a cluster is unhealthy or ejected, it ignores both (see [`crate::balance`]).
//!
//! HTTP and gRPC probes of a cluster with upstream TLS (BackendTLSPolicy) are made over
//! TLS with the cluster's [`TlsTarget`] (its SNI and verifier; ALPN `http/1.1` for HTTP,
//! `h2` for gRPC): a failed handshake or verification is a failed probe, and a cluster
//! whose TLS settings are unusable fails its probes rather than probing in plaintext. The
//! TLS identity is part of the registry's key, so a cluster version that changes its TLS
//! settings gets new probers for its endpoints while every other prober (and any TCP
//! prober, which only connects) is kept.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::net::TcpStream;
use weir_model::{EndpointAddr, HealthCheck, HealthProbe};

use crate::endpoints::EndpointState;
use crate::upstream_tls::TlsTarget;

/// How a prober reaches its endpoint beyond the TCP connect.
#[derive(Clone, Debug)]
pub(crate) enum ProbeTls {
    /// Plaintext (no upstream TLS, or a TCP probe).
    Plain,
    /// Over TLS with the cluster's settings.
    Tls(Arc<TlsTarget>),
    /// The cluster has upstream TLS that cannot be used: HTTP and gRPC probes fail.
    Unusable,
}

impl ProbeTls {
    /// The TLS of a cluster's probes: `tls` is the cluster's, if it has any. TCP probes
    /// only connect, so they are always `Plain` (and keep their prober across TLS
    /// changes).
    pub(crate) fn of(
        probe: &HealthProbe,
        tls: Option<&Result<Arc<TlsTarget>, Arc<str>>>,
    ) -> ProbeTls {
        match (probe, tls) {
            (HealthProbe::Tcp, _) | (_, None) => ProbeTls::Plain,
            (_, Some(Ok(t))) => ProbeTls::Tls(Arc::clone(t)),
            (_, Some(Err(_))) => ProbeTls::Unusable,
        }
    }

    /// Its part of a registry key: the TLS identity (0 plaintext, 1 unusable; identities
    /// are 64-bit content hashes).
    fn id(&self) -> u64 {
        match self {
            ProbeTls::Plain => 0,
            ProbeTls::Unusable => 1,
            ProbeTls::Tls(t) => t.id,
        }
    }
}

/// The `result` label of `weir_upstream_health_checks_total`: two values.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabel {
    result: &'static str,
}

/// Health-check metrics (labels bounded: a result of two values).
#[derive(Clone, Debug, Default)]
pub(crate) struct HealthMetrics {
    /// Probes done, by result (`passed`, `failed`).
    pub(crate) checks: Family<ResultLabel, Counter>,
    /// Endpoints (probers) unhealthy right now.
    pub(crate) unhealthy: Gauge,
    /// Probers running.
    pub(crate) probers: Gauge,
}

/// What a prober has found, shared between its task and the balancer.
#[derive(Debug, Default)]
pub(crate) struct ProbeStatus {
    unhealthy: AtomicBool,
    probes: AtomicU64,
    /// Set when the prober is dropped. Changes of `unhealthy` (and of the gauge counting
    /// it) happen under this lock, so an aborted task finishing its last probe on another
    /// thread cannot count an endpoint that is gone.
    stopped: Mutex<bool>,
}

impl ProbeStatus {
    /// Moves the endpoint in or out (`unhealthy`), counted in `gauge`; nothing once
    /// stopped. Called on a change only, never per request.
    fn set(&self, unhealthy: bool, gauge: &Gauge) -> bool {
        let stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        if *stopped || self.unhealthy.load(Ordering::Relaxed) == unhealthy {
            return false;
        }
        self.unhealthy.store(unhealthy, Ordering::Relaxed);
        if unhealthy {
            gauge.inc();
        } else {
            gauge.dec();
        }
        true
    }

    /// Stops counting: the endpoint leaves the gauge if it was unhealthy.
    fn stop(&self, gauge: &Gauge) {
        let mut stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        *stopped = true;
        if self.unhealthy.swap(false, Ordering::Relaxed) {
            gauge.dec();
        }
    }
}

/// The endpoint states (one per cluster using the prober) whose ejection ends when the
/// prober sees the endpoint turn healthy; weak, as the registry's.
type Watchers = Mutex<Vec<Weak<EndpointState>>>;

/// One endpoint's prober: the task probing it, stopped when the last snapshot using it
/// drops it.
#[derive(Debug)]
pub(crate) struct Prober {
    status: Arc<ProbeStatus>,
    watchers: Arc<Watchers>,
    task: Option<tokio::task::AbortHandle>,
    metrics: HealthMetrics,
}

impl Prober {
    /// Whether its last probes took the endpoint out. One relaxed load.
    pub(crate) fn is_unhealthy(&self) -> bool {
        self.status.unhealthy.load(Ordering::Relaxed)
    }

    /// Adds an endpoint state (of one cluster) to readmit when the endpoint turns
    /// healthy. Called when a snapshot builds a cluster's state, never per request.
    pub(crate) fn watch(&self, state: &Arc<EndpointState>) {
        let mut w = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        w.retain(|x| x.strong_count() > 0);
        if !w
            .iter()
            .any(|x| std::ptr::eq(x.as_ptr(), Arc::as_ptr(state)))
        {
            w.push(Arc::downgrade(state));
        }
    }

    /// A JSON view for the admin dump.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "healthy": !self.is_unhealthy(),
            "probes": self.status.probes.load(Ordering::Relaxed),
        })
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            self.metrics.probers.dec();
        }
        self.status.stop(&self.metrics.unhealthy);
    }
}

type Key = (EndpointAddr, Arc<HealthCheck>, u64);

/// The probers of a data plane, by (endpoint address, settings, TLS identity). See the
/// module docs.
#[derive(Debug, Default)]
pub(crate) struct Probers {
    probers: Mutex<HashMap<Key, Weak<Prober>>>,
    metrics: HealthMetrics,
}

impl Probers {
    /// An empty registry counting into `metrics`.
    pub(crate) fn new(metrics: HealthMetrics) -> Probers {
        Probers {
            probers: Mutex::default(),
            metrics,
        }
    }

    /// The prober of `addr` with `check` over `tls` (from [`ProbeTls::of`]): the running
    /// one, or a new one started on the current tokio runtime. Without a runtime (a
    /// snapshot built outside one) the prober does not probe and the endpoint stays
    /// healthy.
    pub(crate) fn prober(
        &self,
        addr: &EndpointAddr,
        check: &Arc<HealthCheck>,
        tls: ProbeTls,
    ) -> Arc<Prober> {
        let mut map = self.probers.lock().unwrap_or_else(|e| e.into_inner());
        let key = (addr.clone(), Arc::clone(check), tls.id());
        if let Some(p) = map.get(&key).and_then(Weak::upgrade) {
            return p;
        }
        let status = Arc::new(ProbeStatus::default());
        let watchers = Arc::new(Watchers::default());
        let task = tokio::runtime::Handle::try_current().ok().map(|rt| {
            self.metrics.probers.inc();
            rt.spawn(run(
                addr.clone(),
                Arc::clone(check),
                tls,
                Arc::clone(&status),
                Arc::clone(&watchers),
                self.metrics.clone(),
            ))
            .abort_handle()
        });
        let p = Arc::new(Prober {
            status,
            watchers,
            task,
            metrics: self.metrics.clone(),
        });
        map.insert(key, Arc::downgrade(&p));
        // Dead entries go when the map has grown (amortized O(1) per insertion).
        if map.len() >= 64 && map.len().is_power_of_two() {
            map.retain(|_, w| w.strong_count() > 0);
        }
        p
    }

    /// Probers alive.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let map = self.probers.lock().unwrap_or_else(|e| e.into_inner());
        map.values().filter(|w| w.strong_count() > 0).count()
    }
}

/// A prober's loop: probe, count, wait `interval` plus jitter, until aborted.
async fn run(
    addr: EndpointAddr,
    check: Arc<HealthCheck>,
    tls: ProbeTls,
    status: Arc<ProbeStatus>,
    watchers: Arc<Watchers>,
    metrics: HealthMetrics,
) {
    let jitter = |max: Duration| {
        let ns = max.as_nanos() as u64;
        Duration::from_nanos(if ns == 0 {
            0
        } else {
            crate::router::next_random() % (ns + 1)
        })
    };
    tokio::time::sleep(jitter(check.jitter)).await;
    let (mut passed, mut failed) = (0u32, 0u32);
    loop {
        let started = tokio::time::Instant::now();
        let ok = tokio::time::timeout(check.timeout, probe(&addr, &check.probe, &tls))
            .await
            .unwrap_or(false);
        status.probes.fetch_add(1, Ordering::Relaxed);
        metrics
            .checks
            .get_or_create(&ResultLabel {
                result: if ok { "passed" } else { "failed" },
            })
            .inc();
        let unhealthy = status.unhealthy.load(Ordering::Relaxed);
        if ok {
            (passed, failed) = (passed.saturating_add(1), 0);
            if unhealthy
                && passed >= check.healthy_threshold
                && status.set(false, &metrics.unhealthy)
            {
                // Back: an ejection by passive outlier detection ends too.
                let states: Vec<Arc<EndpointState>> = {
                    let w = watchers.lock().unwrap_or_else(|e| e.into_inner());
                    w.iter().filter_map(Weak::upgrade).collect()
                };
                let readmitted = states.iter().filter(|s| s.readmit()).count();
                tracing::info!(endpoint = %addr, readmitted, "endpoint passed its health checks");
            }
        } else {
            (passed, failed) = (0, failed.saturating_add(1));
            if !unhealthy
                && failed >= check.unhealthy_threshold
                && status.set(true, &metrics.unhealthy)
            {
                tracing::warn!(endpoint = %addr, failed, "endpoint failed its health checks");
            }
        }
        tokio::time::sleep_until(started + check.interval + jitter(check.jitter)).await;
    }
}

/// One probe of `addr` (the caller bounds it by the timeout).
async fn probe(addr: &EndpointAddr, probe: &HealthProbe, tls: &ProbeTls) -> bool {
    let Some(sock) = resolve(addr).await else {
        return false;
    };
    let Ok(stream) = TcpStream::connect(sock).await else {
        return false;
    };
    let _ = stream.set_nodelay(true);
    let passed = match (probe, tls) {
        (HealthProbe::Tcp, _) => Ok(true),
        (_, ProbeTls::Unusable) => Ok(false),
        (
            HealthProbe::Http {
                path,
                host,
                statuses,
            },
            ProbeTls::Plain,
        ) => http_probe(stream, addr, path, host.as_deref(), statuses).await,
        (
            HealthProbe::Http {
                path,
                host,
                statuses,
            },
            ProbeTls::Tls(t),
        ) => {
            let connector = tokio_rustls::TlsConnector::from(Arc::clone(&t.config));
            match connector.connect(t.server_name.clone(), stream).await {
                Ok(s) => http_probe(s, addr, path, host.as_deref(), statuses).await,
                Err(e) => Err(e.into()),
            }
        }
        (HealthProbe::Grpc { service }, ProbeTls::Plain) => {
            grpc_probe(stream, "http", addr, service).await
        }
        (HealthProbe::Grpc { service }, ProbeTls::Tls(t)) => match t.connect_h2(stream).await {
            Ok(s) => grpc_probe(s, "https", addr, service).await,
            Err(e) => Err(e),
        },
    };
    match passed {
        Ok(ok) => ok,
        Err(e) => {
            tracing::debug!(endpoint = %addr, error = %e, "health probe failed");
            false
        }
    }
}

async fn resolve(addr: &EndpointAddr) -> Option<SocketAddr> {
    match addr {
        EndpointAddr::Socket(a) => Some(*a),
        EndpointAddr::Host(h, p) => tokio::net::lookup_host((&**h, *p)).await.ok()?.next(),
    }
}

/// The most of a probe's response body read (and held) by weir.
const MAX_PROBE_BODY: usize = 64 * 1024;

/// Errors of a probe are only "failed": the endpoint's logs say more.
type ProbeResult = Result<bool, Box<dyn std::error::Error + Send + Sync>>;

async fn http_probe<S>(
    stream: S,
    addr: &EndpointAddr,
    path: &str,
    host: Option<&str>,
    statuses: &[(u16, u16)],
) -> ProbeResult
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream)).await?;
    let conn = tokio::spawn(conn);
    let host = host.map_or_else(|| addr.to_string(), str::to_owned);
    let req = http::Request::get(path)
        .header(http::header::HOST, host)
        .header(http::header::USER_AGENT, "weir-health-check")
        .header(http::header::CONNECTION, "close")
        .body(Empty::new())?;
    let resp = sender.send_request(req).await?;
    let ok = HealthProbe::passes(statuses, resp.status().as_u16());
    // Read the body so the endpoint sees a complete exchange, up to a bound: an endless or
    // huge body must not be buffered (the status has decided already).
    let _ = Limited::new(resp.into_body(), MAX_PROBE_BODY)
        .collect()
        .await;
    conn.abort();
    Ok(ok)
}

/// `grpc.health.v1.HealthCheckResponse.ServingStatus.SERVING`.
const SERVING: u64 = 1;

async fn grpc_probe<S>(stream: S, scheme: &str, addr: &EndpointAddr, service: &str) -> ProbeResult
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http2::handshake::<_, _, Full<Bytes>>(
        TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await?;
    let conn = tokio::spawn(conn);
    // HealthCheckRequest { string service = 1; } in one gRPC message frame.
    let mut msg = Vec::with_capacity(service.len() + 16);
    if !service.is_empty() {
        msg.push(0x0a);
        put_varint(&mut msg, service.len() as u64);
        msg.extend_from_slice(service.as_bytes());
    }
    let mut frame = Vec::with_capacity(msg.len() + 5);
    frame.push(0);
    frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    frame.extend_from_slice(&msg);
    let uri = format!("{scheme}://{addr}/grpc.health.v1.Health/Check");
    let req = http::Request::post(uri)
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .header(http::header::USER_AGENT, "weir-health-check")
        .body(Full::new(Bytes::from(frame)))?;
    let resp = sender.send_request(req).await?;
    let header_status = resp.headers().get("grpc-status").cloned();
    if resp.status() != http::StatusCode::OK {
        conn.abort();
        return Ok(false);
    }
    // A HealthCheckResponse is a few bytes; a larger answer fails the probe unbuffered.
    let collected = Limited::new(resp.into_body(), MAX_PROBE_BODY)
        .collect()
        .await?;
    let trailer_status = collected
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .cloned();
    conn.abort();
    if trailer_status
        .or(header_status)
        .as_ref()
        .map(|v| v.as_bytes())
        != Some(b"0")
    {
        return Ok(false);
    }
    Ok(serving(collected.to_bytes()))
}

/// Whether a gRPC message frame holds a `HealthCheckResponse` with status `SERVING`.
pub(crate) fn serving(mut body: Bytes) -> bool {
    if body.len() < 5 || body[0] != 0 {
        return false;
    }
    body.advance(1);
    let len = body.get_u32() as usize;
    if body.len() < len {
        return false;
    }
    let mut msg = body.split_to(len);
    let mut status = 0; // UNKNOWN when absent
    while msg.has_remaining() {
        let Some(tag) = get_varint(&mut msg) else {
            return false;
        };
        match (tag >> 3, tag & 7) {
            (1, 0) => match get_varint(&mut msg) {
                Some(v) => status = v,
                None => return false,
            },
            // Unknown fields are skipped by wire type.
            (_, 0) => {
                if get_varint(&mut msg).is_none() {
                    return false;
                }
            }
            (_, 2) => match get_varint(&mut msg) {
                Some(n) if (n as usize) <= msg.remaining() => msg.advance(n as usize),
                _ => return false,
            },
            (_, 1) if msg.remaining() >= 8 => msg.advance(8),
            (_, 5) if msg.remaining() >= 4 => msg.advance(4),
            _ => return false,
        }
    }
    status == SERVING
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(b: &mut Bytes) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        if !b.has_remaining() {
            return None;
        }
        let byte = b.get_u8();
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(msg: &[u8]) -> Bytes {
        let mut f = vec![0];
        f.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        f.extend_from_slice(msg);
        Bytes::from(f)
    }

    #[test]
    fn grpc_health_responses_are_read() {
        assert!(serving(frame(&[0x08, 0x01])));
        assert!(!serving(frame(&[0x08, 0x02])), "NOT_SERVING");
        assert!(!serving(frame(&[])), "UNKNOWN");
        // Unknown fields before the status are skipped.
        assert!(serving(frame(&[0x12, 0x02, b'h', b'i', 0x08, 0x01])));
        assert!(!serving(frame(&[0x08])), "truncated");
        assert!(
            !serving(Bytes::from_static(&[1, 0, 0, 0, 2, 0x08, 0x01])),
            "compressed"
        );
        let mut v = Vec::new();
        put_varint(&mut v, 300);
        assert_eq!(get_varint(&mut Bytes::from(v)), Some(300));
    }

    fn check(interval_ms: u64) -> Arc<HealthCheck> {
        Arc::new(HealthCheck {
            probe: HealthProbe::Tcp,
            interval: Duration::from_millis(interval_ms),
            timeout: Duration::from_millis(interval_ms),
            jitter: Duration::ZERO,
            healthy_threshold: 1,
            unhealthy_threshold: 2,
        })
    }

    #[tokio::test]
    async fn one_prober_per_address_and_settings_stopped_with_its_last_user() {
        let metrics = HealthMetrics::default();
        let reg = Probers::new(metrics.clone());
        let a = EndpointAddr::Socket(([127, 0, 0, 1], 9).into());
        let b = EndpointAddr::Socket(([127, 0, 0, 2], 9).into());
        let p1 = reg.prober(&a, &check(100), ProbeTls::Plain);
        let p2 = reg.prober(&a, &check(100), ProbeTls::Plain);
        assert!(Arc::ptr_eq(&p1, &p2), "equal settings share the prober");
        let p3 = reg.prober(&a, &check(200), ProbeTls::Plain);
        let p4 = reg.prober(&b, &check(100), ProbeTls::Plain);
        assert!(!Arc::ptr_eq(&p1, &p3) && !Arc::ptr_eq(&p1, &p4));
        assert_eq!(reg.len(), 3);
        assert_eq!(metrics.probers.get(), 3);
        drop((p1, p3, p4));
        assert_eq!(reg.len(), 1);
        drop(p2);
        assert_eq!(reg.len(), 0);
        assert_eq!(metrics.probers.get(), 0);
    }

    fn tls(sni: &str) -> ProbeTls {
        let t = weir_model::UpstreamTls {
            sni: sni.into(),
            hide_sni: false,
            client_certificate: None,
            trust: weir_model::TrustAnchors::Nothing,
            subject_names: Vec::new(),
            policy: "default/tls".into(),
        };
        ProbeTls::Tls(Arc::new(TlsTarget::new(&t, None).unwrap()))
    }

    /// A cluster version with other TLS settings gets a new prober; one with equal
    /// settings (a new `TlsTarget` of the same content) keeps the running one, and a TCP
    /// probe, which only connects, ignores TLS.
    #[tokio::test]
    async fn tls_settings_are_part_of_a_probers_identity() {
        let reg = Probers::new(HealthMetrics::default());
        let a = EndpointAddr::Socket(([127, 0, 0, 1], 9).into());
        let http = Arc::new(HealthCheck {
            probe: HealthProbe::Http {
                path: "/".into(),
                host: None,
                statuses: vec![(200, 299)],
            },
            ..(*check(100)).clone()
        });
        let first = reg.prober(&a, &http, tls("a.example.com"));
        let same = reg.prober(&a, &http, tls("a.example.com"));
        assert!(
            Arc::ptr_eq(&first, &same),
            "equal TLS settings keep the prober"
        );
        let changed = reg.prober(&a, &http, tls("b.example.com"));
        assert!(
            !Arc::ptr_eq(&first, &changed),
            "new TLS settings: a new prober"
        );
        let plain = reg.prober(&a, &http, ProbeTls::Plain);
        assert!(!Arc::ptr_eq(&first, &plain) && !Arc::ptr_eq(&changed, &plain));
        let tcp = check(100);
        let of = |t: &Result<Arc<TlsTarget>, Arc<str>>| ProbeTls::of(&tcp.probe, Some(t));
        let ProbeTls::Tls(t) = tls("a.example.com") else {
            unreachable!()
        };
        let p1 = reg.prober(&a, &tcp, of(&Ok(t)));
        let p2 = reg.prober(&a, &tcp, ProbeTls::of(&tcp.probe, None));
        assert!(Arc::ptr_eq(&p1, &p2), "a TCP probe ignores TLS");
        assert!(matches!(
            ProbeTls::of(&http.probe, Some(&Err("bad".into()))),
            ProbeTls::Unusable
        ));
    }

    /// An endpoint answering its HTTP probe 200 with an endless body passes, and weir
    /// reads no more of the body than `MAX_PROBE_BODY` (before the bound, the probe read
    /// and held all of it: here 64 MiB).
    #[tokio::test]
    async fn an_endless_probe_body_is_not_buffered() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sent = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&sent);
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut head = [0u8; 1024];
            let _ = s.read(&mut head).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                .await;
            let chunk = [b'x'; 16 * 1024];
            // Bounded: 64 MiB at most, far past the probe's bound.
            for _ in 0..4096 {
                if s.write_all(b"4000\r\n").await.is_err()
                    || s.write_all(&chunk).await.is_err()
                    || s.write_all(b"\r\n").await.is_err()
                {
                    return;
                }
                counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
        });
        let probe_of = HealthProbe::Http {
            path: "/healthz".into(),
            host: None,
            statuses: vec![(200, 299)],
        };
        let passed = tokio::time::timeout(
            Duration::from_secs(5),
            probe(&EndpointAddr::Socket(addr), &probe_of, &ProbeTls::Plain),
        )
        .await;
        assert_eq!(
            passed.ok(),
            Some(true),
            "passes without reading the whole body"
        );
        // What the server got out before the probe hung up: the bound plus what the
        // socket buffers hold, not the 64 MiB it would send.
        assert!(sent.load(Ordering::Relaxed) < 16 * 1024 * 1024);
    }

    #[tokio::test]
    async fn a_refused_endpoint_turns_unhealthy_after_its_threshold_and_back() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let metrics = HealthMetrics::default();
        let reg = Probers::new(metrics.clone());
        let p = reg.prober(&EndpointAddr::Socket(addr), &check(100), ProbeTls::Plain);
        assert!(!p.is_unhealthy(), "a new prober starts healthy");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !p.is_unhealthy() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(p.is_unhealthy(), "refused connects make it unhealthy");
        assert!(p.status.probes.load(Ordering::Relaxed) >= 2);
        assert_eq!(metrics.unhealthy.get(), 1);
        // It listens again: one passed probe brings it back.
        let _listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        while p.is_unhealthy() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!p.is_unhealthy(), "a passed probe brings it back");
        assert_eq!(metrics.unhealthy.get(), 0);
    }
}
