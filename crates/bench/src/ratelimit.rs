//! `weir-bench ratelimit`: how closely rate limits hold under overload.
//!
//! Offered load is `--load` × the limit (default 3×), open loop (paced keep-alive
//! connections), for `--duration` seconds per scenario, to one HTTPRoute whose backend is
//! served by this process:
//! - `local`: one weir, a local limit (token bucket, key `Target`, burst 1/20 of the
//!   rate) — the admitted rate against the limit (bar ±5 %);
//! - `global`: two weir processes sharing one `redis-server`, a global limit (sliding
//!   window, key `Target`), each offered half the load — their admitted rates together
//!   against the limit (bar ±10 %);
//! - `outage`: two weir processes, two routes with a global limit each, one failing open
//!   and one failing closed; Redis is stopped after a third of the run and started again
//!   (empty) after two thirds — per phase, what each route answered.
//!
//! - `overhead` (with `--overhead SECS`): closed-loop keep-alive requests/s through one
//!   weir to a route without policy, one with a local limit, one with a global limit
//!   (limits far above the load, so that only their cost shows) and one with a JWT check
//!   (ES256, every request carrying the same valid token), in one run, in 1 s slices
//!   taken in turn (bars: local and JWT ≥ 0.9×, global ≥ 0.8× the plain route).
//!
//! Every process is started here (weir, redis-server on free 127.0.0.1 ports, no
//! persistence) and stopped at the end; every loop is bounded in time and count.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::{TcpListener, TcpStream};

use crate::client::admin_get;
use crate::procs::{ChildGuard, free_port, log_tail};

/// Options of `weir-bench ratelimit`.
pub(crate) struct Options {
    pub(crate) weir: PathBuf,
    pub(crate) redis_server: PathBuf,
    /// Requests per second the limits allow.
    pub(crate) limit: u32,
    /// Offered load as a multiple of the limit.
    pub(crate) load: f64,
    pub(crate) duration: Duration,
    /// Keep-alive connections per load stream.
    pub(crate) connections: usize,
    /// Seconds per route of the overhead comparison (0: skipped).
    pub(crate) overhead: Duration,
    /// Closed-loop clients of the overhead comparison.
    pub(crate) clients: usize,
    pub(crate) out: PathBuf,
}

#[derive(Debug, Serialize)]
struct Overhead {
    route: &'static str,
    requests_per_s: f64,
    errors: u64,
    /// Against the plain route (the mean of its two runs).
    ratio: f64,
    bar: Option<f64>,
}

/// What one route answered over one span of time.
#[derive(Clone, Debug, Default, Serialize)]
struct Tally {
    offered_per_s: f64,
    admitted_per_s: f64,
    limited_per_s: f64,
    unavailable_per_s: f64,
    /// Anything else (connection errors, 5xx other than the 503 of a closed limit).
    errors: u64,
}

#[derive(Debug, Serialize)]
struct Accuracy {
    scenario: &'static str,
    limit_per_s: u32,
    tally: Tally,
    /// Admitted rate ÷ limit − 1.
    deviation: f64,
    bar: f64,
    pass: bool,
}

#[derive(Debug, Serialize)]
struct OutagePhase {
    phase: &'static str,
    route: &'static str,
    tally: Tally,
}

#[derive(Debug, Serialize)]
struct Results {
    accuracy: Vec<Accuracy>,
    outage: Vec<OutagePhase>,
    overhead: Vec<Overhead>,
}

/// Runs the three scenarios and prints the tables.
pub(crate) async fn run(opts: Options) -> Result<()> {
    std::fs::create_dir_all(&opts.out)?;
    let backend = start_backend().await?;
    let mut results = Results {
        accuracy: Vec::new(),
        outage: Vec::new(),
        overhead: Vec::new(),
    };
    if !opts.overhead.is_zero() {
        results.overhead = overhead(&opts, backend).await?;
    }
    results.accuracy.push(local(&opts, backend).await?);
    results.accuracy.push(global(&opts, backend).await?);
    results.outage = outage(&opts, backend).await?;

    println!();
    println!(
        "rate-limit accuracy: offered {:.1}× the limit of {}/s for {} s",
        opts.load,
        opts.limit,
        opts.duration.as_secs()
    );
    println!("| scenario | offered/s | admitted/s | 429/s | deviation | bar | pass |");
    println!("|---|---|---|---|---|---|---|");
    for a in &results.accuracy {
        println!(
            "| {} | {:.0} | {:.1} | {:.0} | {:+.1} % | ±{:.0} % | {} |",
            a.scenario,
            a.tally.offered_per_s,
            a.tally.admitted_per_s,
            a.tally.limited_per_s,
            a.deviation * 100.0,
            a.bar * 100.0,
            if a.pass { "yes" } else { "NO" }
        );
    }
    println!();
    println!(
        "Redis outage (two weir processes, limit {}/s per route):",
        opts.limit
    );
    println!("| phase | route | offered/s | admitted/s | 429/s | 503/s | errors |");
    println!("|---|---|---|---|---|---|---|");
    for p in &results.outage {
        println!(
            "| {} | {} | {:.0} | {:.1} | {:.0} | {:.0} | {} |",
            p.phase,
            p.route,
            p.tally.offered_per_s,
            p.tally.admitted_per_s,
            p.tally.limited_per_s,
            p.tally.unavailable_per_s,
            p.tally.errors
        );
    }
    if !results.overhead.is_empty() {
        println!();
        println!(
            "overhead: {} closed-loop keep-alive clients, {} s per route, one weir",
            opts.clients,
            opts.overhead.as_secs()
        );
        println!("| route | req/s | errors | × plain | bar |");
        println!("|---|---|---|---|---|");
        for o in &results.overhead {
            println!(
                "| {} | {:.0} | {} | {:.3} | {} |",
                o.route,
                o.requests_per_s,
                o.errors,
                o.ratio,
                o.bar.map_or("-".to_owned(), |b| format!("≥ {b}"))
            );
        }
    }
    let json = opts.out.join("ratelimit.json");
    std::fs::write(&json, serde_json::to_string_pretty(&results)?)?;
    println!("\n(results: {})", json.display());
    Ok(())
}

async fn local(opts: &Options, backend: SocketAddr) -> Result<Accuracy> {
    let burst = (opts.limit / 20).max(1);
    let policy = format!(
        "rateLimit:\n    local: {{requests: {}, unit: Second, burst: {burst}, key: {{type: Target}}}}",
        opts.limit
    );
    let dir = opts.out.join("local");
    let port = free_port()?;
    let _weir = Weir::start(opts, &dir, port, backend, &[("limited", &policy)], None).await?;
    eprintln!(
        "local: {:?} at {:.0}/s",
        opts.duration,
        f64::from(opts.limit) * opts.load
    );
    let rate = f64::from(opts.limit) * opts.load;
    let samples = load(port, "limited.test", rate, opts).await;
    let tally = tally(&samples, 0, opts.duration.as_millis() as u64);
    Ok(accuracy("local", opts.limit, tally, 0.05))
}

async fn global(opts: &Options, backend: SocketAddr) -> Result<Accuracy> {
    let redis = Redis::start(&opts.redis_server, &opts.out.join("global"))?;
    redis.wait_ready().await?;
    let policy = format!(
        "rateLimit:\n    global: {{requests: {}, unit: Second, key: {{type: Target}}}}",
        opts.limit
    );
    let (pa, pb) = (free_port()?, free_port()?);
    let routes = [("limited", policy.as_str())];
    let url = Some(redis.url());
    let _a = Weir::start(
        opts,
        &opts.out.join("global/a"),
        pa,
        backend,
        &routes,
        url.as_deref(),
    )
    .await?;
    let _b = Weir::start(
        opts,
        &opts.out.join("global/b"),
        pb,
        backend,
        &routes,
        url.as_deref(),
    )
    .await?;
    let half = f64::from(opts.limit) * opts.load / 2.0;
    eprintln!("global: {:?} at 2 × {half:.0}/s", opts.duration);
    let (sa, sb) = tokio::join!(
        load(pa, "limited.test", half, opts),
        load(pb, "limited.test", half, opts)
    );
    let mut samples = sa;
    samples.extend(sb);
    let tally = tally(&samples, 0, opts.duration.as_millis() as u64);
    Ok(accuracy("global (2 processes)", opts.limit, tally, 0.10))
}

async fn outage(opts: &Options, backend: SocketAddr) -> Result<Vec<OutagePhase>> {
    let dir = opts.out.join("outage");
    let mut redis = Redis::start(&opts.redis_server, &dir)?;
    redis.wait_ready().await?;
    let policy = |mode: &str| {
        format!(
            "rateLimit:\n    global: {{requests: {}, unit: Second, key: {{type: Target}}, failMode: {mode}}}",
            opts.limit
        )
    };
    let (open, closed) = (policy("Open"), policy("Closed"));
    let routes = [("open", open.as_str()), ("closed", closed.as_str())];
    let (pa, pb) = (free_port()?, free_port()?);
    let url = Some(redis.url());
    let _a = Weir::start(opts, &dir.join("a"), pa, backend, &routes, url.as_deref()).await?;
    let _b = Weir::start(opts, &dir.join("b"), pb, backend, &routes, url.as_deref()).await?;
    let half = f64::from(opts.limit) * opts.load / 2.0;
    let third = opts.duration / 3;
    eprintln!(
        "outage: {:?}, Redis stopped at {third:?} and started at {:?}",
        opts.duration,
        third * 2
    );
    let schedule = async {
        tokio::time::sleep(third).await;
        redis.stop();
        tokio::time::sleep(third).await;
        let restarted = Redis::start_on(&opts.redis_server, &dir, redis.port);
        if let Ok(r) = &restarted {
            let _ = r.wait_ready().await;
        }
        restarted
    };
    let (open_a, open_b, closed_a, closed_b, restarted) = tokio::join!(
        load(pa, "open.test", half, opts),
        load(pb, "open.test", half, opts),
        load(pa, "closed.test", half, opts),
        load(pb, "closed.test", half, opts),
        schedule,
    );
    let _redis = restarted?;
    let t = third.as_millis() as u64;
    let mut phases = Vec::new();
    for (route, a, b) in [("open", open_a, open_b), ("closed", closed_a, closed_b)] {
        let mut s = a;
        s.extend(b);
        for (phase, from, to) in [
            ("Redis up", 0, t),
            ("Redis stopped", t, 2 * t),
            ("Redis back", 2 * t, 3 * t),
        ] {
            phases.push(OutagePhase {
                phase,
                route,
                tally: tally(&s, from, to),
            });
        }
    }
    Ok(phases)
}

async fn overhead(opts: &Options, backend: SocketAddr) -> Result<Vec<Overhead>> {
    let dir = opts.out.join("overhead");
    let redis = Redis::start(&opts.redis_server, &dir)?;
    redis.wait_ready().await?;
    // Far above what the machine can serve: the limits never refuse, only cost. (A
    // burst of a whole second: at absurd rates a token bucket's burst window shrinks to
    // below the time a request waits for a worker, which then reads as over budget.)
    let local = "rateLimit:\n    local: {requests: 1000000, unit: Second, burst: 1000000, key: {type: ClientIP}}";
    let global = "rateLimit:\n    global: {requests: 1000000, unit: Second, key: {type: ClientIP}}";
    let (jwks, token) = bench_jwt()?;
    let jwt = format!(
        "jwtAuth:\n    providers:\n    - name: bench\n      issuer: https://bench.test\n      audiences: [bench]\n      jwks: {{inline: '{jwks}'}}\n      claimsToHeaders: [{{claim: sub, header: x-user}}]"
    );
    let plain = "";
    let routes = [
        ("plain", plain),
        ("local", local),
        ("global", global),
        ("jwt", jwt.as_str()),
    ];
    let port = free_port()?;
    let url = redis.url();
    let _weir = Weir::start(opts, &dir, port, backend, &routes, Some(&url)).await?;
    // One-second slices in turn, so that a change of the machine's background load
    // falls on every route alike.
    let names = ["plain", "local", "global", "jwt"];
    let mut sums = [(0u64, 0u64, Duration::ZERO); 4];
    eprintln!(
        "overhead: {} s per route, in 1 s slices",
        opts.overhead.as_secs()
    );
    for _ in 0..opts.overhead.as_secs().max(1) {
        for (i, route) in names.iter().enumerate() {
            let host = format!("{route}.test");
            let bearer = (*route == "jwt").then_some(token.as_str());
            let (ok, errors, took) =
                closed_loop(port, &host, bearer, opts, Duration::from_secs(1)).await;
            sums[i].0 += ok;
            sums[i].1 += errors;
            sums[i].2 += took;
        }
    }
    let rate = |i: usize| sums[i].0 as f64 / sums[i].2.as_secs_f64().max(0.001);
    let plain_rate = rate(0);
    Ok(names
        .into_iter()
        .enumerate()
        .map(|(i, route)| Overhead {
            route,
            requests_per_s: rate(i),
            errors: sums[i].1,
            ratio: rate(i) / plain_rate.max(1.0),
            bar: match route {
                "local" | "jwt" => Some(0.9),
                "global" => Some(0.8),
                _ => None,
            },
        })
        .collect())
}

/// An ES256 key's JWK Set (one key, `kid` `bench`) and a token it signed for the `jwt`
/// route (issuer `https://bench.test`, audience `bench`, valid for a day). The same token
/// on every request: what a client holding a session token sends.
fn bench_jwt() -> Result<(String, String)> {
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING as ALG, EcdsaKeyPair, KeyPair};
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ALG, &rng).map_err(|_| anyhow::anyhow!("key"))?;
    let pair =
        EcdsaKeyPair::from_pkcs8(&ALG, pkcs8.as_ref()).map_err(|_| anyhow::anyhow!("key"))?;
    let point = pair.public_key().as_ref();
    let jwks = format!(
        r#"{{"keys": [{{"kty": "EC", "crv": "P-256", "kid": "bench", "alg": "ES256", "x": "{}", "y": "{}"}}]}}"#,
        b64(&point[1..33]),
        b64(&point[33..65])
    );
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs()
        + 86_400;
    let signed = format!(
        "{}.{}",
        b64(br#"{"alg":"ES256","typ":"JWT","kid":"bench"}"#),
        b64(format!(
            r#"{{"iss":"https://bench.test","aud":"bench","sub":"bench-user","exp":{exp}}}"#
        )
        .as_bytes())
    );
    let sig = pair
        .sign(&rng, signed.as_bytes())
        .map_err(|_| anyhow::anyhow!("signing"))?;
    Ok((jwks, format!("{signed}.{}", b64(sig.as_ref()))))
}

/// `clients` keep-alive connections sending back to back for `span` (with `bearer` as an
/// `Authorization: Bearer` token when given): the 200s, the other answers, and the time
/// taken.
async fn closed_loop(
    port: u16,
    host: &str,
    bearer: Option<&str>,
    opts: &Options,
    span: Duration,
) -> (u64, u64, Duration) {
    let target: SocketAddr = ([127, 0, 0, 1], port).into();
    let start = Instant::now();
    let deadline = start + span;
    let tasks: Vec<_> = (0..opts.clients.max(1))
        .map(|_| {
            let host = host.to_owned();
            let bearer = bearer.map(|t| format!("Bearer {t}"));
            tokio::spawn(async move {
                let (mut ok, mut errors) = (0u64, 0u64);
                let mut sender = None;
                while Instant::now() < deadline && ok + errors < 100_000_000 {
                    if sender
                        .as_ref()
                        .is_none_or(|s: &hyper::client::conn::http1::SendRequest<_>| s.is_closed())
                    {
                        sender = connect(target).await.ok();
                    }
                    let Some(tx) = sender.as_mut() else {
                        errors += 1;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let mut req = Request::get("/").header("host", &host);
                    if let Some(b) = &bearer {
                        req = req.header("authorization", b);
                    }
                    let Ok(req) = req.body(Empty::new()) else {
                        break;
                    };
                    let out = tokio::time::timeout(Duration::from_secs(5), async {
                        tx.ready().await?;
                        let resp = tx.send_request(req).await?;
                        let status = resp.status().as_u16();
                        resp.into_body().collect().await?;
                        Ok::<_, hyper::Error>(status)
                    })
                    .await;
                    match out {
                        Ok(Ok(200)) => ok += 1,
                        Ok(Ok(_)) => errors += 1,
                        _ => {
                            errors += 1;
                            sender = None;
                        }
                    }
                }
                (ok, errors)
            })
        })
        .collect();
    let (mut ok, mut errors) = (0, 0);
    for t in tasks {
        if let Ok((o, e)) = t.await {
            ok += o;
            errors += e;
        }
    }
    (ok, errors, start.elapsed())
}

fn accuracy(scenario: &'static str, limit: u32, tally: Tally, bar: f64) -> Accuracy {
    let deviation = tally.admitted_per_s / f64::from(limit) - 1.0;
    Accuracy {
        scenario,
        limit_per_s: limit,
        pass: deviation.abs() <= bar,
        tally,
        deviation,
        bar,
    }
}

/// One answered (or failed: status 0) request, by when it was sent.
struct Sample {
    at_ms: u64,
    status: u16,
}

fn tally(samples: &[Sample], from_ms: u64, to_ms: u64) -> Tally {
    let secs = (to_ms.saturating_sub(from_ms)) as f64 / 1000.0;
    let mut t = Tally::default();
    let (mut offered, mut ok, mut limited, mut unavailable) = (0u64, 0u64, 0u64, 0u64);
    for s in samples
        .iter()
        .filter(|s| (from_ms..to_ms).contains(&s.at_ms))
    {
        offered += 1;
        match s.status {
            200 => ok += 1,
            429 => limited += 1,
            503 => unavailable += 1,
            _ => t.errors += 1,
        }
    }
    let per_s = |n: u64| n as f64 / secs.max(0.001);
    t.offered_per_s = per_s(offered);
    t.admitted_per_s = per_s(ok);
    t.limited_per_s = per_s(limited);
    t.unavailable_per_s = per_s(unavailable);
    t
}

/// `rate` requests per second to `host` on `port` for the run's duration, open loop:
/// `connections` keep-alive connections, each paced at its share.
async fn load(port: u16, host: &str, rate: f64, opts: &Options) -> Vec<Sample> {
    let start = Instant::now();
    let deadline = start + opts.duration;
    let n = opts.connections.max(1);
    let every = Duration::from_secs_f64(n as f64 / rate.max(1.0));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let host = host.to_owned();
            tokio::spawn(async move {
                // Spread the connections' ticks over one period.
                tokio::time::sleep(every.mul_f64(i as f64 / n as f64)).await;
                paced(port, host, every, start, deadline).await
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        if let Ok(s) = t.await {
            all.extend(s);
        }
    }
    all
}

async fn paced(
    port: u16,
    host: String,
    every: Duration,
    start: Instant,
    deadline: Instant,
) -> Vec<Sample> {
    let target: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut samples = Vec::new();
    let mut sender: Option<hyper::client::conn::http1::SendRequest<Empty<Bytes>>> = None;
    while Instant::now() < deadline && samples.len() < 10_000_000 {
        tick.tick().await;
        let at_ms = start.elapsed().as_millis() as u64;
        if sender.as_ref().is_none_or(|s| s.is_closed()) {
            sender = connect(target).await.ok();
        }
        let Some(tx) = sender.as_mut() else {
            samples.push(Sample { at_ms, status: 0 });
            continue;
        };
        let Ok(req) = Request::get("/").header("host", &host).body(Empty::new()) else {
            break;
        };
        let out = tokio::time::timeout(Duration::from_secs(5), async {
            tx.ready().await?;
            let resp = tx.send_request(req).await?;
            let status = resp.status().as_u16();
            resp.into_body().collect().await?;
            Ok::<_, hyper::Error>(status)
        })
        .await;
        let status = match out {
            Ok(Ok(s)) => s,
            _ => {
                sender = None;
                0
            }
        };
        samples.push(Sample { at_ms, status });
    }
    samples
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

/// The backend every route sends to: `200 ok` to everything.
async fn start_backend() -> Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = l.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok\n"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(addr)
}

/// A weir process serving a Gateway on `port` with one HTTPRoute per `(name, policy)`
/// (`<name>.test`), each with a TrafficPolicy of that spec (none when it is empty).
struct Weir {
    _child: ChildGuard,
}

impl Weir {
    async fn start(
        opts: &Options,
        dir: &Path,
        port: u16,
        backend: SocketAddr,
        routes: &[(&str, &str)],
        redis: Option<&str>,
    ) -> Result<Weir> {
        let cfg = dir.join("manifests");
        std::fs::create_dir_all(&cfg)?;
        let mut m = format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: weir
  addresses: [{{type: IPAddress, value: 127.0.0.1}}]
  listeners:
  - {{name: http, protocol: HTTP, port: {port}}}
---
apiVersion: weir.dev/v1alpha1
kind: Backend
metadata: {{name: be, namespace: default}}
spec:
  endpoints: [\"{backend}\"]
"
        );
        for (name, policy) in routes {
            m += &format!(
                "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [{name}.test]
  rules:
  - backendRefs: [{{group: weir.dev, kind: Backend, name: be}}]
"
            );
            if policy.is_empty() {
                continue;
            }
            m += &format!(
                "---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: {name}, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: {name}}}]
  {policy}
"
            );
        }
        std::fs::write(cfg.join("config.yaml"), m)?;
        let admin: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        let mut args = vec![
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
        if let Some(url) = redis {
            args.extend(["--redis".to_owned(), url.to_owned()]);
        }
        let log = dir.join("weir.log");
        let mut child = ChildGuard::spawn("weir", &opts.weir, &args, &log)?;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Some(status) = child.exited() {
                bail!("weir exited ({status}); log:\n{}", log_tail(&log, 30));
            }
            if matches!(admin_get(admin, "/ready").await, Ok((200, _))) {
                return Ok(Weir { _child: child });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("weir not ready in 30 s; log:\n{}", log_tail(&log, 30))
    }
}

/// A `redis-server` on a free 127.0.0.1 port, without persistence.
struct Redis {
    port: u16,
    child: Option<ChildGuard>,
}

impl Redis {
    fn start(bin: &Path, dir: &Path) -> Result<Redis> {
        Redis::start_on(bin, dir, free_port()?)
    }

    fn start_on(bin: &Path, dir: &Path, port: u16) -> Result<Redis> {
        std::fs::create_dir_all(dir)?;
        let args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let child = ChildGuard::spawn("redis-server", bin, &args, &dir.join("redis.log"))
            .context("redis-server (apt-get install redis-server)")?;
        Ok(Redis {
            port,
            child: Some(child),
        })
    }

    async fn wait_ready(&self) -> Result<()> {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if TcpStream::connect(("127.0.0.1", self.port)).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("redis-server not listening on {} in 10 s", self.port)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.stop(Duration::from_secs(2));
        }
    }
}
