//! `weir-bench soak`: configuration churn under traffic on every protocol, for a long,
//! bounded time. Passes when no request on a route that was never touched fails, no
//! request on a live churned route fails, and weir's memory and file descriptors stay
//! flat.
//!
//! One standalone `weir run` serves a Gateway with five listeners — HTTP (HTTP/1.1, h2c,
//! gRPC and WebSocket), HTTPS (terminated, HTTP/1.1), TLS passthrough, TCP and UDP — and a
//! route of each kind to backends this process runs: an HTTP echo (two endpoints), a gRPC
//! echo (GRPCRoute), a WebSocket echo, a TLS server, a TCP echo and a UDP echo
//! (`streams.rs` has the gRPC and WebSocket ends). At `--rate` changes per second the bench edits the manifest
//! directory weir watches: HTTPRoutes added (one file each), modified (a response header
//! filter toggled) and removed, between half of `--churn-routes` and all of them live;
//! every 20th change moves the echo Backend between one and two endpoints, every 50th
//! adds or removes an extra listener on the Gateway. Meanwhile one paced client per
//! protocol loops on the stable routes, and one on the churned routes that have been
//! live for a second (a 404 there is an error unless the route was being removed when
//! the answer came). weir's RSS and open file descriptors are sampled every 5 s.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinSet;

use crate::certs::Pki;
use crate::client::{Get, Probe, Seen, Tls, admin_get};
use crate::failover::serve;
use crate::manifests::{domain, secret_yaml};
use crate::procs::{ChildGuard, free_port, log_tail, proc_stats};
use crate::streams;

/// Options of a soak run.
pub(crate) struct Options {
    pub(crate) weir: PathBuf,
    pub(crate) duration: Duration,
    /// Configuration changes per second.
    pub(crate) rate: f64,
    /// Most churned HTTPRoutes live at once.
    pub(crate) churn_routes: usize,
    /// Requests per second of each client.
    pub(crate) client_rate: f64,
    pub(crate) cache: PathBuf,
    pub(crate) out: PathBuf,
}

/// Bound on one request or exchange.
pub(crate) const IO_LIMIT: Duration = Duration::from_secs(5);
/// The first samples are taken while weir warms up (allocator arenas, pools).
const WARM_UP: Duration = Duration::from_secs(60);
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// Requests and failures of one client.
#[derive(Default)]
pub(crate) struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    first_failures: Mutex<Vec<String>>,
}

impl Tally {
    pub(crate) fn record(&self, at: Duration, outcome: Result<(), String>) {
        match outcome {
            Ok(()) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut first = self.first_failures.lock().expect("tally");
                if first.len() < 5 {
                    first.push(format!("{:.1} s: {e}", at.as_secs_f64()));
                }
            }
        }
    }
}

/// One client's figures in the report.
#[derive(Serialize)]
pub(crate) struct ClientReport {
    pub(crate) client: &'static str,
    pub(crate) ok: u64,
    pub(crate) failed: u64,
    pub(crate) first_failures: Vec<String>,
}

/// What a soak run measured.
#[derive(Serialize)]
pub(crate) struct Report {
    pub(crate) duration_s: u64,
    pub(crate) changes: u64,
    pub(crate) clients: Vec<ClientReport>,
    /// (seconds since start, RSS KiB, open fds).
    pub(crate) samples: Vec<(u64, u64, u64)>,
    pub(crate) rss_after_warm_up_kib: u64,
    pub(crate) rss_end_kib: u64,
    pub(crate) rss_max_kib: u64,
    pub(crate) fds_after_warm_up: u64,
    pub(crate) fds_end: u64,
}

/// The ports of the Gateway's listeners.
#[derive(Clone, Copy)]
struct Ports {
    http: u16,
    https: u16,
    pass: u16,
    tcp: u16,
    udp: u16,
    extra: u16,
}

/// The backends' addresses.
struct Backends {
    echo: [SocketAddr; 2],
    tls: SocketAddr,
    tcp: SocketAddr,
    udp: SocketAddr,
    grpc: SocketAddr,
    ws: SocketAddr,
}

const STABLE_HOST: &str = "stable.soak.test";

pub(crate) async fn run(opts: &Options) -> Result<Report> {
    let dir = opts.out.join("work");
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = dir.join("manifests");
    std::fs::create_dir_all(&cfg)?;
    let pki = {
        let cache = opts.cache.clone();
        tokio::task::spawn_blocking(move || -> Result<_> {
            let pki = Pki::open(&cache)?;
            let (leaves, _) = pki.leaves(&[0, 1], 2)?;
            Ok((pki, leaves))
        })
        .await??
    };
    let (pki, leaves) = pki;
    let ca = pki.ca_der().clone();

    // Backends.
    let mut tasks = JoinSet::new();
    let mut echo = Vec::new();
    for name in ["e1", "e2"] {
        let tcp = TcpListener::bind("127.0.0.1:0").await?;
        echo.push(tcp.local_addr()?);
        tasks.spawn(serve(tcp, name, None, Default::default()));
    }
    let tls_backend = TcpListener::bind("127.0.0.1:0").await?;
    let tcp_backend = TcpListener::bind("127.0.0.1:0").await?;
    let udp_backend = UdpSocket::bind("127.0.0.1:0").await?;
    let grpc_backend = TcpListener::bind("127.0.0.1:0").await?;
    let ws_backend = TcpListener::bind("127.0.0.1:0").await?;
    let backends = Backends {
        grpc: grpc_backend.local_addr()?,
        ws: ws_backend.local_addr()?,
        echo: [echo[0], echo[1]],
        tls: tls_backend.local_addr()?,
        tcp: tcp_backend.local_addr()?,
        udp: udp_backend.local_addr()?,
    };
    tasks.spawn(serve_tls(tls_backend, tls_acceptor(&leaves[1])?));
    tasks.spawn(tcp_echo(tcp_backend));
    tasks.spawn(udp_echo(udp_backend));
    tasks.spawn(streams::grpc_echo(grpc_backend));
    tasks.spawn(streams::websocket_echo(ws_backend));

    let ports = Ports {
        http: free_port()?,
        https: free_port()?,
        pass: free_port()?,
        tcp: free_port()?,
        udp: free_port()?,
        extra: free_port()?,
    };
    write_atomic(&cfg, "gateway.yaml", &gateway_yaml(ports, false))?;
    write_atomic(&cfg, "backends.yaml", &backends_yaml(&backends, 2))?;
    write_atomic(
        &cfg,
        "stable.yaml",
        &format!("{}---\n{}", secret_yaml(0, &leaves[0]), stable_yaml()),
    )?;

    let admin: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
    let args: Vec<String> = [
        "run",
        "-c",
        &cfg.display().to_string(),
        "--admin",
        &admin.to_string(),
        "--ingress-http",
        &format!("127.0.0.1:{}", free_port()?),
        "--ingress-https",
        &format!("127.0.0.1:{}", free_port()?),
        "--no-access-log",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let log = dir.join("weir.log");
    let mut weir = ChildGuard::spawn("weir", &opts.weir, &args, &log)?;
    let http: SocketAddr = ([127, 0, 0, 1], ports.http).into();
    wait_ready(&mut weir, admin, http, &log).await?;
    eprintln!(
        "soak: weir ready (pid {}); {} s at {} changes/s",
        weir.pid(),
        opts.duration.as_secs(),
        opts.rate
    );

    let start = Instant::now();
    let deadline = start + opts.duration;
    let pace = Duration::from_secs_f64(1.0 / opts.client_rate.max(0.1));
    let live = Arc::new(Mutex::new(Churn::default()));
    let names = [
        "http1",
        "h2c",
        "https",
        "tls-passthrough",
        "tcp",
        "udp",
        "churned-routes",
        "grpc",
        "websocket",
    ];
    let tallies: Vec<Arc<Tally>> = names.iter().map(|_| Arc::new(Tally::default())).collect();
    let mut clients = JoinSet::new();
    let t = |i: usize| (Arc::clone(&tallies[i]), start, deadline, pace);
    clients.spawn(http1_client(http, t(0)));
    clients.spawn(h2c_client(http, t(1)));
    let https = Tls::new(([127, 0, 0, 1], ports.https).into(), &ca)?;
    clients.spawn(https_client(https, t(2)));
    let pass = Tls::new(([127, 0, 0, 1], ports.pass).into(), &ca)?;
    clients.spawn(passthrough_client(pass, t(3)));
    clients.spawn(tcp_client(([127, 0, 0, 1], ports.tcp).into(), t(4)));
    clients.spawn(udp_client(([127, 0, 0, 1], ports.udp).into(), t(5)));
    clients.spawn(churn_client(http, Arc::clone(&live), t(6)));
    clients.spawn(streams::grpc_client(http, t(7)));
    clients.spawn(streams::websocket_client(http, t(8)));

    // Changes and samples until the deadline.
    let every = Duration::from_secs_f64(1.0 / opts.rate.max(0.01));
    let mut next_change = start + every;
    let mut next_sample = start;
    let mut changes = 0u64;
    let mut rng = 0x5eed_u64;
    let mut samples = Vec::new();
    while Instant::now() < deadline {
        if let Some(status) = weir.exited() {
            bail!("weir exited ({status}); log:\n{}", log_tail(&log, 30));
        }
        let now = Instant::now();
        if now >= next_sample {
            let s = proc_stats(weir.pid())?;
            let fds = std::fs::read_dir(format!("/proc/{}/fd", weir.pid()))
                .map(|d| d.count() as u64)
                .unwrap_or(0);
            samples.push((start.elapsed().as_secs(), s.rss_kib, fds));
            let failed: u64 = tallies
                .iter()
                .map(|t| t.failed.load(Ordering::Relaxed))
                .sum();
            let ok: u64 = tallies.iter().map(|t| t.ok.load(Ordering::Relaxed)).sum();
            if samples.len() % 12 == 1 {
                eprintln!(
                    "soak: {:>5} s  changes {changes}  requests {ok} ok / {failed} failed  rss {} KiB  fds {fds}",
                    start.elapsed().as_secs(),
                    s.rss_kib
                );
            }
            next_sample += SAMPLE_EVERY;
        }
        if now >= next_change {
            changes += 1;
            change(
                &cfg,
                &live,
                changes,
                &mut rng,
                opts.churn_routes,
                ports,
                &backends,
                start,
            )?;
            next_change += every;
        }
        let wake = next_change.min(next_sample).min(deadline);
        tokio::time::sleep_until(wake.into()).await;
    }
    while clients.join_next().await.is_some() {}
    weir.stop(Duration::from_secs(5));
    tasks.abort_all();

    let clients = names
        .iter()
        .zip(&tallies)
        .map(|(name, t)| ClientReport {
            client: name,
            ok: t.ok.load(Ordering::Relaxed),
            failed: t.failed.load(Ordering::Relaxed),
            first_failures: t.first_failures.lock().expect("tally").clone(),
        })
        .collect();
    Ok(report(opts, changes, clients, samples))
}

fn report(
    opts: &Options,
    changes: u64,
    clients: Vec<ClientReport>,
    samples: Vec<(u64, u64, u64)>,
) -> Report {
    // The median of ten samples after the warm-up, and of the last ten.
    let median = |s: &[(u64, u64, u64)], f: fn(&(u64, u64, u64)) -> u64| {
        let mut v: Vec<u64> = s.iter().map(f).collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    let after: Vec<_> = samples
        .iter()
        .copied()
        .filter(|s| s.0 >= WARM_UP.as_secs())
        .take(10)
        .collect();
    let end = &samples[samples.len().saturating_sub(10)..];
    Report {
        duration_s: opts.duration.as_secs(),
        changes,
        clients,
        rss_after_warm_up_kib: median(&after, |s| s.1),
        rss_end_kib: median(end, |s| s.1),
        rss_max_kib: samples.iter().map(|s| s.1).max().unwrap_or(0),
        fds_after_warm_up: median(&after, |s| s.2),
        fds_end: median(end, |s| s.2),
        samples,
    }
}

impl Report {
    /// Whether every request succeeded.
    pub(crate) fn failures(&self) -> u64 {
        self.clients.iter().map(|c| c.failed).sum()
    }

    pub(crate) fn markdown(&self) -> String {
        let mut s = format!(
            "soak: {} s, {} configuration changes\n\n| client | ok | failed | first failures |\n|---|---:|---:|---|\n",
            self.duration_s, self.changes
        );
        for c in &self.clients {
            s.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                c.client,
                c.ok,
                c.failed,
                c.first_failures.join("; ")
            ));
        }
        s.push_str(&format!(
            "\nRSS after warm-up (median of 10 samples from {} s) {} KiB, at the end (median of the last 10) {} KiB, max {} KiB; open fds {} → {}\n",
            WARM_UP.as_secs(),
            self.rss_after_warm_up_kib,
            self.rss_end_kib,
            self.rss_max_kib,
            self.fds_after_warm_up,
            self.fds_end
        ));
        s
    }
}

/// What the changes have made so far.
#[derive(Default)]
struct Churn {
    /// Live churned routes, oldest first: (number, when clients may use it, generation).
    /// A route leaves this list before its file is removed.
    live: VecDeque<(u64, Duration, u64)>,
    /// The next route number.
    next: u64,
    /// Whether the Gateway has its extra listener.
    extra_listener: bool,
}

/// One configuration change.
#[allow(clippy::too_many_arguments)]
fn change(
    cfg: &Path,
    churn: &Mutex<Churn>,
    n: u64,
    rng: &mut u64,
    most: usize,
    ports: Ports,
    backends: &Backends,
    start: Instant,
) -> Result<()> {
    if n.is_multiple_of(50) {
        let mut c = churn.lock().expect("churn");
        c.extra_listener = !c.extra_listener;
        return write_atomic(cfg, "gateway.yaml", &gateway_yaml(ports, c.extra_listener));
    }
    if n.is_multiple_of(20) {
        let endpoints = if n.is_multiple_of(40) { 2 } else { 1 };
        return write_atomic(cfg, "backends.yaml", &backends_yaml(backends, endpoints));
    }
    *rng = rng
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let roll = (*rng >> 33) % 4;
    let mut c = churn.lock().expect("churn");
    let len = c.live.len();
    let add = len < most / 2 || (len < most && roll == 0);
    let remove = !add && (len >= most || roll == 1);
    if add {
        let k = c.next;
        c.next += 1;
        drop(c);
        write_atomic(cfg, &format!("c{k}.yaml"), &churn_yaml(k, 0))?;
        // Live for the clients a second after the file is in place.
        churn.lock().expect("churn").live.push_back((
            k,
            start.elapsed() + Duration::from_secs(1),
            0,
        ));
        Ok(())
    } else if remove {
        let Some((k, _, _)) = c.live.pop_front() else {
            return Ok(());
        };
        drop(c);
        let path = cfg.join(format!("c{k}.yaml"));
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))
    } else {
        let i = (*rng >> 40) as usize % len.max(1);
        let Some(entry) = c.live.get_mut(i) else {
            return Ok(());
        };
        entry.2 += 1;
        let (k, _, generation) = *entry;
        drop(c);
        write_atomic(cfg, &format!("c{k}.yaml"), &churn_yaml(k, generation))
    }
}

fn write_atomic(dir: &Path, name: &str, body: &str) -> Result<()> {
    // Not ending in .yaml, so the watcher ignores it until the rename.
    let tmp = dir.join(format!(".{name}.tmp"));
    let path = dir.join(name);
    std::fs::write(&tmp, body).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("renaming into {}", path.display()))
}

fn gateway_yaml(p: Ports, extra: bool) -> String {
    let host = domain(0);
    let pass = domain(1);
    let mut s = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: soak}}
spec:
  gatewayClassName: weir
  addresses: [{{type: IPAddress, value: 127.0.0.1}}]
  listeners:
  - {{name: http, protocol: HTTP, port: {http}}}
  - name: https
    protocol: HTTPS
    port: {https}
    hostname: {host}
    tls: {{mode: Terminate, certificateRefs: [{{name: d0-tls}}]}}
  - name: pass
    protocol: TLS
    port: {pass_port}
    hostname: {pass}
    tls: {{mode: Passthrough}}
  - {{name: tcp, protocol: TCP, port: {tcp}}}
  - {{name: udp, protocol: UDP, port: {udp}}}
",
        http = p.http,
        https = p.https,
        pass_port = p.pass,
        tcp = p.tcp,
        udp = p.udp,
    );
    if extra {
        s.push_str(&format!(
            "  - {{name: extra, protocol: HTTP, port: {}}}\n",
            p.extra
        ));
    }
    s
}

fn backends_yaml(b: &Backends, echo_endpoints: usize) -> String {
    let mut s =
        "apiVersion: weir.dev/v1alpha1\nkind: Backend\nmetadata: {name: echo}\nspec:\n  endpoints:\n"
            .to_owned();
    for e in &b.echo[..echo_endpoints.clamp(1, 2)] {
        s.push_str(&format!("  - \"{e}\"\n"));
    }
    for (name, addr) in [
        ("tls", b.tls),
        ("tcp", b.tcp),
        ("udp", b.udp),
        ("grpc", b.grpc),
        ("ws", b.ws),
    ] {
        s.push_str(&format!(
            "---\napiVersion: weir.dev/v1alpha1\nkind: Backend\nmetadata: {{name: {name}}}\nspec:\n  endpoints: [\"{addr}\"]\n"
        ));
    }
    s
}

/// The routes that are never changed (after domain 0's Secret, `d0-tls`).
fn stable_yaml() -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: stable}}
spec:
  parentRefs: [{{name: soak, sectionName: http}}, {{name: soak, sectionName: https}}]
  hostnames: [{STABLE_HOST}, {host}]
  rules:
  - backendRefs: [{{group: weir.dev, kind: Backend, name: echo}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: pass}}
spec:
  parentRefs: [{{name: soak, sectionName: pass}}]
  hostnames: [{pass}]
  rules:
  - backendRefs: [{{group: weir.dev, kind: Backend, name: tls}}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: tcp}}
spec:
  parentRefs: [{{name: soak, sectionName: tcp}}]
  rules:
  - backendRefs: [{{group: weir.dev, kind: Backend, name: tcp}}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {{name: udp}}
spec:
  parentRefs: [{{name: soak, sectionName: udp}}]
  rules:
  - backendRefs: [{{group: weir.dev, kind: Backend, name: udp}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: grpc}}
spec:
  parentRefs: [{{name: soak, sectionName: http}}]
  hostnames: [{grpc}]
  rules:
  - backendRefs: [{{group: weir.dev, kind: Backend, name: grpc}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: ws}}
spec:
  parentRefs: [{{name: soak, sectionName: http}}]
  hostnames: [{ws}]
  rules:
  - backendRefs: [{{group: weir.dev, kind: Backend, name: ws}}]
",
        grpc = streams::GRPC_HOST,
        ws = streams::WS_HOST,
        host = domain(0),
        pass = domain(1),
    )
}

fn churn_yaml(k: u64, generation: u64) -> String {
    let filter = if generation % 2 == 1 {
        format!(
            "    filters:\n    - type: ResponseHeaderModifier\n      responseHeaderModifier: {{set: [{{name: x-soak-generation, value: \"{generation}\"}}]}}\n"
        )
    } else {
        String::new()
    };
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: c{k}}}
spec:
  parentRefs: [{{name: soak, sectionName: http}}]
  hostnames: [c{k}.soak.test]
  rules:
  - backendRefs: [{{group: weir.dev, kind: Backend, name: echo}}]
{filter}"
    )
}

async fn wait_ready(
    weir: &mut ChildGuard,
    admin: SocketAddr,
    http: SocketAddr,
    log: &Path,
) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Some(status) = weir.exited() {
            bail!("weir exited ({status}); log:\n{}", log_tail(log, 30));
        }
        if matches!(admin_get(admin, "/ready").await, Ok((200, _)))
            && http1_get(http, STABLE_HOST).await == Ok(200)
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("weir not ready in 30 s; log:\n{}", log_tail(log, 30))
}

/// What each client loop gets: its tally, the run's start and end, its pace.
pub(crate) type Loop = (Arc<Tally>, Instant, Instant, Duration);

/// One GET on a new HTTP/1.1 connection: its status.
async fn http1_get(addr: SocketAddr, host: &str) -> Result<u16, String> {
    let fut = async {
        let stream = TcpStream::connect(addr).await?;
        let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let req = Request::get("/")
            .header("host", host)
            .body(Empty::<Bytes>::new())?;
        let resp = tx.send_request(req).await?;
        let status = resp.status().as_u16();
        resp.into_body().collect().await?;
        Ok::<u16, Box<dyn std::error::Error + Send + Sync>>(status)
    };
    match tokio::time::timeout(IO_LIMIT, fut).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("timed out".into()),
    }
}

fn expect_200(r: Result<u16, String>) -> Result<(), String> {
    match r {
        Ok(200) => Ok(()),
        Ok(s) => Err(format!("status {s}")),
        Err(e) => Err(e),
    }
}

/// Kept HTTP/1.1 connections (a new one every 200 requests, and after a failure).
async fn http1_client(addr: SocketAddr, (tally, start, deadline, pace): Loop) {
    let mut conn: Option<hyper::client::conn::http1::SendRequest<Empty<Bytes>>> = None;
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        if n.is_multiple_of(200) {
            conn = None;
        }
        let outcome = async {
            if conn.as_ref().is_none_or(|c| c.is_closed()) {
                let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
                let (tx, c) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(c);
                conn = Some(tx);
            }
            let tx = conn.as_mut().ok_or("no connection")?;
            tx.ready().await.map_err(|e| e.to_string())?;
            let req = Request::get("/")
                .header("host", STABLE_HOST)
                .body(Empty::<Bytes>::new())
                .map_err(|e| e.to_string())?;
            let resp = tx.send_request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            resp.into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?;
            Ok(status)
        };
        let r = tokio::time::timeout(IO_LIMIT, outcome)
            .await
            .unwrap_or_else(|_| Err("timed out".into()));
        if r.is_err() {
            conn = None;
        }
        tally.record(start.elapsed(), expect_200(r));
        tokio::time::sleep(pace).await;
    }
}

/// One kept h2c connection (prior knowledge), renewed every 500 requests.
async fn h2c_client(addr: SocketAddr, (tally, start, deadline, pace): Loop) {
    let mut conn: Option<hyper::client::conn::http2::SendRequest<Empty<Bytes>>> = None;
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        if n.is_multiple_of(500) {
            conn = None;
        }
        let outcome = async {
            if conn.as_ref().is_none_or(|c| c.is_closed()) {
                let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
                let (tx, c) = hyper::client::conn::http2::handshake(
                    TokioExecutor::new(),
                    TokioIo::new(stream),
                )
                .await
                .map_err(|e| e.to_string())?;
                tokio::spawn(c);
                conn = Some(tx);
            }
            let tx = conn.as_mut().ok_or("no connection")?;
            let req = Request::get(format!("http://{STABLE_HOST}/"))
                .body(Empty::<Bytes>::new())
                .map_err(|e| e.to_string())?;
            let resp = tx.send_request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            resp.into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?;
            Ok(status)
        };
        let r = tokio::time::timeout(IO_LIMIT, outcome)
            .await
            .unwrap_or_else(|_| Err("timed out".into()));
        if r.is_err() {
            conn = None;
        }
        tally.record(start.elapsed(), expect_200(r));
        tokio::time::sleep(pace).await;
    }
}

fn seen_200(seen: Seen) -> Result<(), String> {
    match seen {
        Seen::Status(200) => Ok(()),
        other => Err(other.to_string()),
    }
}

/// HTTPS with SNI, kept connections, a new handshake every 100 requests.
async fn https_client(tls: Tls, (tally, start, deadline, pace): Loop) {
    let mut probe = Probe::new(&tls, domain(0));
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        if n.is_multiple_of(100) {
            probe = Probe::new(&tls, domain(0));
        }
        tally.record(start.elapsed(), seen_200(probe.get("/").await));
        tokio::time::sleep(pace).await;
    }
}

/// A new TLS session per request, through the passthrough listener to the TLS backend.
async fn passthrough_client(tls: Tls, (tally, start, deadline, pace): Loop) {
    while Instant::now() < deadline {
        let seen = match tls.connect(&domain(1)).await {
            Ok(mut conn) => conn.get("/").await,
            Err(seen) => seen,
        };
        tally.record(start.elapsed(), seen_200(seen));
        tokio::time::sleep(pace).await;
    }
}

/// A new TCP connection per exchange: 64 bytes out, the same 64 back.
async fn tcp_client(addr: SocketAddr, (tally, start, deadline, pace): Loop) {
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let outcome = async {
            let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
            let msg = [(n % 251) as u8; 64];
            s.write_all(&msg).await.map_err(|e| e.to_string())?;
            let mut back = [0u8; 64];
            s.read_exact(&mut back).await.map_err(|e| e.to_string())?;
            if back != msg {
                return Err("echo differs".to_owned());
            }
            Ok(())
        };
        let r = tokio::time::timeout(IO_LIMIT, outcome)
            .await
            .unwrap_or_else(|_| Err("timed out".into()));
        tally.record(start.elapsed(), r);
        tokio::time::sleep(pace).await;
    }
}

/// Datagrams from one socket (one session): each answered with itself.
async fn udp_client(addr: SocketAddr, (tally, start, deadline, pace): Loop) {
    let Ok(socket) = UdpSocket::bind("127.0.0.1:0").await else {
        tally.record(start.elapsed(), Err("bind".into()));
        return;
    };
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let msg = n.to_be_bytes();
        let outcome = async {
            socket
                .send_to(&msg, addr)
                .await
                .map_err(|e| e.to_string())?;
            let mut buf = [0u8; 64];
            loop {
                let (len, _) = socket
                    .recv_from(&mut buf)
                    .await
                    .map_err(|e| e.to_string())?;
                // A late answer to an earlier datagram is skipped.
                if buf[..len] == msg {
                    return Ok(());
                }
            }
        };
        let r = tokio::time::timeout(Duration::from_secs(2), outcome)
            .await
            .unwrap_or_else(|_| Err("no answer in 2 s".into()));
        tally.record(start.elapsed(), r);
        tokio::time::sleep(pace).await;
    }
}

/// GETs on churned routes live for at least a second; a failure counts unless the route
/// was removed by the time the answer came.
async fn churn_client(
    addr: SocketAddr,
    churn: Arc<Mutex<Churn>>,
    (tally, start, deadline, pace): Loop,
) {
    let mut n = 0usize;
    while Instant::now() < deadline {
        n += 1;
        let pick = {
            let c = churn.lock().expect("churn");
            let now = start.elapsed();
            let ready: Vec<u64> = c
                .live
                .iter()
                .filter(|(_, since, _)| *since <= now)
                .map(|(k, _, _)| *k)
                .collect();
            (!ready.is_empty()).then(|| ready[n % ready.len()])
        };
        if let Some(k) = pick {
            let r = expect_200(http1_get(addr, &format!("c{k}.soak.test")).await);
            let still_live = churn
                .lock()
                .expect("churn")
                .live
                .iter()
                .any(|(j, _, _)| *j == k);
            if r.is_ok() || still_live {
                tally.record(start.elapsed(), r.map_err(|e| format!("c{k}: {e}")));
            }
        }
        tokio::time::sleep(pace).await;
    }
}

fn tls_acceptor(leaf: &crate::certs::Leaf) -> Result<tokio_rustls::TlsAcceptor> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .context("leaf certificate")?;
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).context("leaf key")?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
}

/// The TLS backend behind the passthrough listener: HTTP/1.1, 200 to everything.
async fn serve_tls(tcp: TcpListener, acceptor: tokio_rustls::TlsAcceptor) {
    let mut conns = JoinSet::new();
    loop {
        let Ok((stream, _)) = tcp.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        conns.spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let svc = hyper::service::service_fn(|_req| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                    Bytes::from_static(b"tls ok\n"),
                )))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), svc)
                .await;
        });
        while conns.try_join_next().is_some() {}
    }
}

async fn tcp_echo(tcp: TcpListener) {
    let mut conns = JoinSet::new();
    loop {
        let Ok((mut stream, _)) = tcp.accept().await else {
            continue;
        };
        conns.spawn(async move {
            let (mut r, mut w) = stream.split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
        });
        while conns.try_join_next().is_some() {}
    }
}

async fn udp_echo(socket: UdpSocket) {
    let mut buf = [0u8; 2048];
    loop {
        if let Ok((len, from)) = socket.recv_from(&mut buf).await {
            let _ = socket.send_to(&buf[..len], from).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_compares_warm_and_end_samples() {
        let samples: Vec<_> = (0..40).map(|i| (i * 5, 1000 + i, 20)).collect();
        let opts = Options {
            weir: PathBuf::new(),
            duration: Duration::from_secs(200),
            rate: 10.0,
            churn_routes: 10,
            client_rate: 10.0,
            cache: PathBuf::new(),
            out: PathBuf::new(),
        };
        let r = report(&opts, 7, Vec::new(), samples);
        // From 60 s: samples 12..22, median index 5 → 1017; the last ten: 30..40 → 1035.
        assert_eq!(r.rss_after_warm_up_kib, 1017);
        assert_eq!(r.rss_end_kib, 1035);
        assert_eq!(r.rss_max_kib, 1039);
        assert_eq!(r.failures(), 0);
    }
}
