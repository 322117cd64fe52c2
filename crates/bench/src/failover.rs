//! `weir-bench failover`: how much of a flapping endpoint's failure clients see.
//!
//! One backend (a weir `Backend`, as a Service would be) with four endpoints served by
//! this process: three steady, one that cycles healthy → answering 503 → healthy →
//! refusing connections, `--period` seconds each. `--routes` HTTPRoutes (one hostname
//! each) send to that backend, and closed-loop keep-alive clients spread their requests
//! over the routes. Every response says which endpoint answered (`x-backend`), so the
//! bench can count, per phase of the flapping endpoint: the requests that reached it while
//! it was failing (its 503s, and weir's 502s for refused connections), the errors clients
//! saw, and how long after it recovered it got traffic again. Each weir build given runs
//! the same schedule in turn (`--weir-baseline` for an older build, e.g. plain round
//! robin).
//!
//! `--health-check` adds runs with an active HTTP health check on the Backend (a
//! TrafficPolicy; `/healthz` answers as the endpoint does, refused while it refuses), once
//! with `--routes` routes and once with `--health-routes` (default 100): each endpoint
//! counts the probes it gets, so the table shows probes per endpoint and second for both
//! route counts (one prober per endpoint: they should match).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::client::admin_get;
use crate::procs::{ChildGuard, free_port, log_tail};

/// One configuration to run the schedule against.
pub(crate) struct Run {
    pub(crate) label: String,
    pub(crate) bin: PathBuf,
    /// Whether the routes retry.
    pub(crate) retry: bool,
    /// An active health check on the Backend, probing every this often.
    pub(crate) health_check: Option<Duration>,
    /// A TrafficPolicy tuning outlier detection on the Backend ([`TUNED_OUTLIER`]).
    pub(crate) tuned_outlier: bool,
    /// HTTPRoutes sending to the Backend.
    pub(crate) routes: usize,
}

/// Options of one failover run.
pub(crate) struct Options {
    /// Runs to compare.
    pub(crate) builds: Vec<Run>,
    pub(crate) duration: Duration,
    pub(crate) period: Duration,
    pub(crate) clients: usize,
    pub(crate) out: PathBuf,
}

/// What the flapping endpoint does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[repr(u8)]
enum Phase {
    Healthy = 0,
    /// Answers every request with 503.
    Failing503 = 1,
    /// Its listening socket is closed: connections are refused.
    Refused = 2,
}

impl Phase {
    fn of(v: u8) -> Phase {
        match v {
            1 => Phase::Failing503,
            2 => Phase::Refused,
            _ => Phase::Healthy,
        }
    }
}

/// One request as the client saw it.
#[derive(Clone, Copy)]
struct Sample {
    /// Microseconds since the load started, when the response (or error) came.
    at_us: u64,
    status: u16,
    /// The flapping endpoint answered (`x-backend: flap`).
    flap: bool,
}

/// The figures of one weir build.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    label: String,
    requests: u64,
    errors: u64,
    /// Whether the routes retried.
    retry: bool,
    /// Requests made while the flapping endpoint was failing (503 or refused phases).
    failing_phase_requests: u64,
    /// Requests that reached it while failing, retries included: the 503s it answered and
    /// the connections weir failed to open to it.
    reached_failing_endpoint: u64,
    /// Client-visible errors during the failing phases.
    failing_phase_errors: u64,
    /// Share of requests the flapping endpoint answered while healthy (1/4 is its share).
    healthy_share: f64,
    /// Per recovery: milliseconds from the endpoint turning healthy to its first answer.
    recovery_ms: Vec<f64>,
    /// weir's `weir_upstream_ejections_total` at the end (absent in older builds).
    ejections: Option<u64>,
    /// weir's `weir_upstream_retries_total` at the end (absent in older builds).
    retries: Option<u64>,
    /// HTTPRoutes of the run.
    routes: usize,
    /// The active health check's interval, if the run had one.
    health_check_ms: Option<u64>,
    /// Whether the Backend had the tuned outlier-detection policy.
    tuned_outlier: bool,
    /// Health probes each endpoint got per second (mean over the four), with a health
    /// check.
    probes_per_endpoint_per_s: Option<f64>,
}

/// Runs the schedule against each build in turn and prints a table.
pub(crate) async fn run(opts: Options) -> Result<Vec<Report>> {
    std::fs::create_dir_all(&opts.out)?;
    let mut reports = Vec::new();
    for (i, run) in opts.builds.iter().enumerate() {
        eprintln!("failover: {} ({})", run.label, run.bin.display());
        let report = run_one(&opts, run, i)
            .await
            .with_context(|| format!("failover run of {}", run.label))?;
        reports.push(report);
    }
    print_table(&opts, &reports);
    let json = serde_json::to_string_pretty(&reports)?;
    std::fs::write(opts.out.join("failover.json"), json)?;
    eprintln!(
        "failover: wrote {}",
        opts.out.join("failover.json").display()
    );
    Ok(reports)
}

async fn run_one(opts: &Options, run: &Run, index: usize) -> Result<Report> {
    let (label, bin, retry) = (run.label.as_str(), run.bin.as_path(), run.retry);
    // The endpoints, each counting the health probes it gets.
    let probes = Arc::new(AtomicU64::new(0));
    let mut steady = Vec::new();
    let mut addrs = Vec::new();
    for name in ["s1", "s2", "s3"] {
        let tcp = TcpListener::bind("127.0.0.1:0").await?;
        addrs.push(tcp.local_addr()?);
        steady.push(tokio::spawn(serve(tcp, name, None, Arc::clone(&probes))));
    }
    let flap_tcp = TcpListener::bind("127.0.0.1:0").await?;
    let flap_addr = flap_tcp.local_addr()?;
    addrs.push(flap_addr);
    let phase = Arc::new(AtomicU8::new(Phase::Healthy as u8));
    let failed_answers = Arc::new(AtomicU64::new(0));

    // weir with `routes` HTTPRoutes to one Backend of those four endpoints.
    let dir = opts
        .out
        .join(format!("{index}-{}", label.replace(['/', ' ', ','], "_")));
    let cfg = dir.join("manifests");
    std::fs::create_dir_all(&cfg)?;
    let port = free_port()?;
    std::fs::write(
        cfg.join("config.yaml"),
        manifests(
            port,
            &addrs,
            run.routes,
            retry,
            run.health_check,
            run.tuned_outlier,
        ),
    )?;
    let admin: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
    let args = vec![
        "run".to_owned(),
        "-c".to_owned(),
        cfg.display().to_string(),
        "--admin".to_owned(),
        admin.to_string(),
        "--ingress-http".to_owned(),
        format!("127.0.0.1:{}", free_port()?),
        "--ingress-https".to_owned(),
        format!("127.0.0.1:{}", free_port()?),
        "--no-access-log".to_owned(),
    ];
    // The flapping endpoint answers (healthy) from the start: a bound socket that never
    // accepts would hold weir's readiness requests and first probes without an answer.
    let flap = FlapControl::start(
        flap_tcp,
        flap_addr,
        Arc::clone(&phase),
        Arc::clone(&failed_answers),
        Arc::clone(&probes),
    );
    let log = dir.join("weir.log");
    let mut weir = ChildGuard::spawn("weir", bin, &args, &log)?;
    let target: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_ready(&mut weir, admin, target, &log).await?;

    // The flapping endpoint's schedule.
    let probes_before = probes.load(Ordering::Relaxed);
    let start = Instant::now();
    let deadline = start + opts.duration;
    let schedule = {
        let phase = Arc::clone(&phase);
        let period = opts.period;
        tokio::spawn(async move {
            let cycle = [
                Phase::Healthy,
                Phase::Failing503,
                Phase::Healthy,
                Phase::Refused,
            ];
            let mut timeline = Vec::new();
            let mut flap = flap;
            for p in cycle.iter().cycle() {
                if Instant::now() >= deadline {
                    break;
                }
                flap.set(*p).await;
                timeline.push((start.elapsed().as_micros() as u64, *p));
                tokio::time::sleep(period).await;
            }
            flap.set(Phase::Healthy).await;
            drop(phase);
            timeline
        })
    };

    // The load.
    let mut clients = JoinSet::new();
    for c in 0..opts.clients {
        let routes = run.routes;
        clients.spawn(client(target, c, routes, start, deadline));
    }
    let mut samples = Vec::new();
    while let Some(done) = clients.join_next().await {
        samples.extend(done??);
    }
    let timeline = schedule.await?;
    let probed = probes.load(Ordering::Relaxed) - probes_before;
    let metrics = match admin_get(admin, "/metrics").await {
        Ok((200, text)) => text,
        _ => String::new(),
    };
    weir.stop(Duration::from_secs(5));
    for s in steady {
        s.abort();
    }
    let mut report = analyse(
        label,
        &samples,
        &timeline,
        opts.duration,
        metric(&metrics, "weir_upstream_ejections_total"),
    );
    report.retry = retry;
    report.routes = run.routes;
    report.health_check_ms = run.health_check.map(|d| d.as_millis() as u64);
    report.tuned_outlier = run.tuned_outlier;
    report.probes_per_endpoint_per_s = run
        .health_check
        .map(|_| probed as f64 / 4.0 / opts.duration.as_secs_f64());
    report.retries = metric(&metrics, "weir_upstream_retries_total");
    // What reached the flapping endpoint while it failed, counted where it happened: the
    // 503s it answered, and the connections weir could not open to it.
    report.reached_failing_endpoint = failed_answers.load(Ordering::Relaxed)
        + metric(&metrics, "weir_upstream_connect_errors_total").unwrap_or(0);
    Ok(report)
}

/// Opens and closes the flapping endpoint's socket and sets what it answers.
struct FlapControl {
    addr: SocketAddr,
    phase: Arc<AtomicU8>,
    failed: Arc<AtomicU64>,
    probes: Arc<AtomicU64>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl FlapControl {
    fn start(
        tcp: TcpListener,
        addr: SocketAddr,
        phase: Arc<AtomicU8>,
        failed: Arc<AtomicU64>,
        probes: Arc<AtomicU64>,
    ) -> FlapControl {
        let flapping = Some((Arc::clone(&phase), Arc::clone(&failed)));
        let server = tokio::spawn(serve(tcp, "flap", flapping, Arc::clone(&probes)));
        FlapControl {
            addr,
            phase,
            failed,
            probes,
            server: Some(server),
        }
    }

    async fn set(&mut self, p: Phase) {
        self.phase.store(p as u8, Ordering::SeqCst);
        match p {
            // Closing the listener and every open connection: new connections are
            // refused and kept-alive ones are reset, as when a pod dies.
            Phase::Refused => {
                if let Some(s) = self.server.take() {
                    s.abort();
                    let _ = s.await;
                }
            }
            Phase::Healthy | Phase::Failing503 => {
                if self.server.is_none() {
                    // The port was just released; rebinding may need a moment.
                    for _ in 0..100 {
                        match TcpListener::bind(self.addr).await {
                            Ok(tcp) => {
                                let flapping =
                                    Some((Arc::clone(&self.phase), Arc::clone(&self.failed)));
                                self.server = Some(tokio::spawn(serve(
                                    tcp,
                                    "flap",
                                    flapping,
                                    Arc::clone(&self.probes),
                                )));
                                break;
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                        }
                    }
                }
            }
        }
    }
}

/// An HTTP/1.1 endpoint answering `x-backend: name`, 200, or (for the flapping one) 503
/// while its phase says so, counted. `GET /healthz` (a health probe) answers the same
/// status and is counted in `probes`, not as a failed answer. Aborting the task closes
/// the listener and every connection it serves.
pub(crate) async fn serve(
    tcp: TcpListener,
    name: &'static str,
    flapping: Option<(Arc<AtomicU8>, Arc<AtomicU64>)>,
    probes: Arc<AtomicU64>,
) {
    let mut conns = JoinSet::new();
    loop {
        let Ok((stream, _)) = tcp.accept().await else {
            continue;
        };
        let flapping = flapping.clone();
        let probes = Arc::clone(&probes);
        conns.spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let probe = req.uri().path() == "/healthz";
                if probe {
                    probes.fetch_add(1, Ordering::Relaxed);
                }
                let failing = flapping.as_ref().is_some_and(|(p, failed)| {
                    let failing = Phase::of(p.load(Ordering::Relaxed)) == Phase::Failing503;
                    if failing && !probe {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    failing
                });
                let status = if failing {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::OK
                };
                let resp = Response::builder()
                    .status(status)
                    .header("x-backend", name)
                    .body(Full::new(Bytes::from_static(b"ok\n")));
                async move { Ok::<_, Infallible>(resp.unwrap_or_default()) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
        // Reap finished connections so the set does not grow.
        while conns.try_join_next().is_some() {}
    }
}

async fn connect(
    target: SocketAddr,
) -> Result<hyper::client::conn::http1::SendRequest<Empty<Bytes>>> {
    let stream = TcpStream::connect(target).await?;
    stream.set_nodelay(true)?;
    let (tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(tx)
}

/// One closed-loop client on a keep-alive connection (reconnecting after errors),
/// cycling over the routes' hostnames.
async fn client(
    target: SocketAddr,
    id: usize,
    routes: usize,
    start: Instant,
    deadline: Instant,
) -> Result<Vec<Sample>> {
    let mut samples = Vec::new();
    let mut sender: Option<hyper::client::conn::http1::SendRequest<Empty<Bytes>>> = None;
    let mut n = id;
    // Bounded in time and in count.
    while Instant::now() < deadline && samples.len() < 5_000_000 {
        n += 1;
        if sender.as_ref().is_none_or(|s| s.is_closed()) {
            match connect(target).await {
                Ok(tx) => sender = Some(tx),
                Err(_) => {
                    // Counted as an error (weir refused or reset the connection).
                    samples.push(Sample {
                        at_us: start.elapsed().as_micros() as u64,
                        status: 0,
                        flap: false,
                    });
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let Some(tx) = sender.as_mut() else { continue };
        let req = Request::get("/")
            .header("host", format!("r{}.failover.test", n % routes))
            .body(Empty::new())?;
        let out = tokio::time::timeout(Duration::from_secs(10), async {
            tx.ready().await?;
            let resp = tx.send_request(req).await?;
            let status = resp.status().as_u16();
            let flap = resp
                .headers()
                .get("x-backend")
                .is_some_and(|v| v.as_bytes() == b"flap");
            resp.into_body().collect().await?;
            Ok::<_, hyper::Error>((status, flap))
        })
        .await;
        let (status, flap) = match out {
            Ok(Ok(v)) => v,
            // A broken connection or a stuck request counts as an error (status 0).
            _ => {
                sender = None;
                (0, false)
            }
        };
        samples.push(Sample {
            at_us: start.elapsed().as_micros() as u64,
            status,
            flap,
        });
    }
    Ok(samples)
}

fn analyse(
    label: &str,
    samples: &[Sample],
    timeline: &[(u64, Phase)],
    duration: Duration,
    ejections: Option<u64>,
) -> Report {
    let end = duration.as_micros() as u64;
    let phase_at = |t: u64| -> (Phase, u64) {
        let i = timeline.partition_point(|(start, _)| *start <= t);
        if i == 0 {
            (Phase::Healthy, 0)
        } else {
            (timeline[i - 1].1, timeline[i - 1].0)
        }
    };
    let mut r = Report {
        label: label.to_owned(),
        retry: false,
        requests: samples.len() as u64,
        errors: 0,
        failing_phase_requests: 0,
        reached_failing_endpoint: 0,
        failing_phase_errors: 0,
        healthy_share: 0.0,
        recovery_ms: Vec::new(),
        ejections,
        retries: None,
        routes: 0,
        health_check_ms: None,
        tuned_outlier: false,
        probes_per_endpoint_per_s: None,
    };
    let (mut healthy, mut healthy_flap) = (0u64, 0u64);
    for s in samples {
        let error = s.status != 200;
        r.errors += u64::from(error);
        match phase_at(s.at_us).0 {
            Phase::Healthy => {
                healthy += 1;
                healthy_flap += u64::from(s.flap);
            }
            Phase::Failing503 => {
                r.failing_phase_requests += 1;
                r.failing_phase_errors += u64::from(error);
            }
            Phase::Refused => {
                r.failing_phase_requests += 1;
                r.failing_phase_errors += u64::from(error);
            }
        }
    }
    r.healthy_share = healthy_flap as f64 / healthy.max(1) as f64;
    // Recovery: from each switch back to healthy (after a failing phase) to the first
    // answer from the flapping endpoint.
    let mut by_time: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.flap && s.status == 200)
        .collect();
    by_time.sort_by_key(|s| s.at_us);
    for w in timeline.windows(2) {
        let ((_, before), (t0, now)) = (w[0], w[1]);
        if now == Phase::Healthy && before != Phase::Healthy && t0 < end {
            let i = by_time.partition_point(|s| s.at_us < t0);
            if let Some(s) = by_time.get(i) {
                r.recovery_ms.push((s.at_us - t0) as f64 / 1000.0);
            }
        }
    }
    r
}

fn print_table(opts: &Options, reports: &[Report]) {
    println!(
        "\nfailover: 4 endpoints (1 flapping every {:?}: healthy, 503, healthy, refused), {} clients, {:?}\n",
        opts.period, opts.clients, opts.duration
    );
    println!(
        "| build | routes | requests | errors | requests during failing phases | reached the failing endpoint | client errors then | error % then | healthy share | recovery ms (median, max) | ejections | retries | probes per endpoint per s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|");
    for r in reports {
        let mut rec = r.recovery_ms.clone();
        rec.sort_by(f64::total_cmp);
        let median = rec.get(rec.len() / 2).copied();
        let max = rec.last().copied();
        let fmt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0}"));
        println!(
            "| {}{}{}{} | {} | {} | {} | {} | {} | {} | {:.2} | {:.3} | {}, {} | {} | {} | {} |",
            r.label,
            if r.retry { " + retry" } else { "" },
            if r.tuned_outlier {
                " + outlierDetection {consecutiveGatewayErrors: 1}"
            } else {
                ""
            },
            r.health_check_ms
                .map_or(String::new(), |ms| format!(" + health check {ms} ms")),
            r.routes,
            r.requests,
            r.errors,
            r.failing_phase_requests,
            r.reached_failing_endpoint,
            r.failing_phase_errors,
            100.0 * r.failing_phase_errors as f64 / r.failing_phase_requests.max(1) as f64,
            r.healthy_share,
            fmt(median),
            fmt(max),
            r.ejections.map_or("-".to_owned(), |v| v.to_string()),
            r.retries.map_or("-".to_owned(), |v| v.to_string()),
            r.probes_per_endpoint_per_s
                .map_or("-".to_owned(), |v| format!("{v:.2}")),
        );
    }
}

async fn wait_ready(
    weir: &mut ChildGuard,
    admin: SocketAddr,
    target: SocketAddr,
    log: &Path,
) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Some(status) = weir.exited() {
            bail!("weir exited ({status}); log:\n{}", log_tail(log, 30));
        }
        // Each probe is bounded: one that hangs is retried, not waited on.
        if matches!(admin_get(admin, "/ready").await, Ok((200, _)))
            && tokio::time::timeout(Duration::from_secs(2), probe(target))
                .await
                .is_ok_and(|r| r.is_ok_and(|s| s == 200))
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("weir not ready in 30 s; log:\n{}", log_tail(log, 30))
}

async fn probe(target: SocketAddr) -> Result<u16> {
    let stream = TcpStream::connect(target).await?;
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = Request::get("/")
        .header("host", "r0.failover.test")
        .body(Empty::<Bytes>::new())?;
    Ok(tx.send_request(req).await?.status().as_u16())
}

fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// The `outlierDetection` of the `--tuned-outlier` run: one gateway error ejects (the
/// default needs five in a row), for the default times (0.5 s doubling to 2 s, so that a
/// recovered endpoint is back within 2 s).
pub(crate) const TUNED_OUTLIER: &str = "{consecutiveGatewayErrors: 1}";

/// A Gateway on 127.0.0.1:`port`, a Backend with the endpoints, `routes` HTTPRoutes
/// (retrying 503s and connection failures twice when `retry`), with `health` a
/// TrafficPolicy probing the Backend's endpoints (`GET /healthz`) at that interval, and
/// with `tuned_outlier` one setting [`TUNED_OUTLIER`] on the Backend.
fn manifests(
    port: u16,
    endpoints: &[SocketAddr],
    routes: usize,
    retry: bool,
    health: Option<Duration>,
    tuned_outlier: bool,
) -> String {
    let retry = if retry {
        "      retry: {codes: [503], attempts: 2, backoff: 10ms}\n"
    } else {
        ""
    };
    let mut out = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: failover
spec:
  gatewayClassName: weir
  addresses:
    - type: IPAddress
      value: 127.0.0.1
  listeners:
    - name: http
      protocol: HTTP
      port: {port}
---
apiVersion: weir.dev/v1alpha1
kind: Backend
metadata:
  name: svc
spec:
  endpoints:
"
    );
    for e in endpoints {
        out.push_str(&format!("    - {e}\n"));
    }
    if let Some(every) = health {
        // A probe may take half the interval; one failure takes an endpoint out, one
        // pass brings it back (the quickest reaction the policy allows).
        let ms = every.as_millis().max(100);
        out.push_str(&format!(
            "---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata:
  name: health
spec:
  targetRefs:
    - group: weir.dev
      kind: Backend
      name: svc
  healthCheck:
    type: HTTP
    http: {{path: /healthz}}
    interval: {ms}ms
    timeout: {}ms
    unhealthyThreshold: 1
    healthyThreshold: 1
",
            (ms / 2).max(50)
        ));
    }
    if tuned_outlier {
        out.push_str(&format!(
            "---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata:
  name: outlier
spec:
  targetRefs:
    - group: weir.dev
      kind: Backend
      name: svc
  outlierDetection: {TUNED_OUTLIER}
"
        ));
    }
    for i in 0..routes {
        out.push_str(&format!(
            "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: r{i}
spec:
  parentRefs:
    - name: failover
  hostnames:
    - r{i}.failover.test
  rules:
    - backendRefs:
        - group: weir.dev
          kind: Backend
          name: svc
{retry}"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at_ms: u64, status: u16, flap: bool) -> Sample {
        Sample {
            at_us: at_ms * 1000,
            status,
            flap,
        }
    }

    #[test]
    fn phases_errors_and_recovery_are_counted() {
        let timeline = [
            (0, Phase::Healthy),
            (1_000_000, Phase::Failing503),
            (2_000_000, Phase::Healthy),
            (3_000_000, Phase::Refused),
            (4_000_000, Phase::Healthy),
        ];
        let samples = [
            s(100, 200, true),
            s(200, 200, false),
            s(1100, 503, true),
            s(1200, 200, false),
            s(2100, 200, false),
            s(2300, 200, true),
            s(3100, 502, false),
            s(3200, 200, false),
            s(4500, 200, true),
        ];
        let r = analyse("x", &samples, &timeline, Duration::from_secs(5), Some(2));
        assert_eq!(r.probes_per_endpoint_per_s, None);
        assert_eq!(r.requests, 9);
        assert_eq!(r.errors, 2);
        assert_eq!(r.failing_phase_requests, 4);
        assert_eq!(r.failing_phase_errors, 2);
        assert_eq!(r.recovery_ms, [300.0, 500.0]);
        assert!((r.healthy_share - 0.6).abs() < 1e-9);
    }

    #[test]
    fn manifests_name_every_route_and_endpoint() {
        let eps: Vec<SocketAddr> = (1..=4)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], 9000 + i)))
            .collect();
        let m = manifests(8080, &eps, 20, true, None, false);
        assert_eq!(m.matches("retry:").count(), 20);
        assert!(!m.contains("healthCheck"));
        let h = manifests(
            8080,
            &eps,
            100,
            false,
            Some(Duration::from_millis(500)),
            false,
        );
        assert_eq!(h.matches("kind: HTTPRoute").count(), 100);
        assert_eq!(h.matches("kind: TrafficPolicy").count(), 1);
        assert!(h.contains("interval: 500ms") && h.contains("timeout: 250ms"));
        assert_eq!(m.matches("kind: HTTPRoute").count(), 20);
        assert!(m.contains("r19.failover.test"));
        assert!(m.contains("- 127.0.0.1:9004"));
        assert!(m.contains("port: 8080"));
        assert!(!m.contains("outlierDetection"));
        let o = manifests(8080, &eps, 20, false, None, true);
        assert!(o.contains("outlierDetection: {consecutiveGatewayErrors: 1}"));
        assert_eq!(o.matches("kind: TrafficPolicy").count(), 1);
    }
}
