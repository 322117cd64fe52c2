//! Controller high availability with real processes: two `weir controller` replicas
//! electing a leader on a Lease (short timings) and a `weir proxy` that knows both.
//! Killing the leader: the other takes over, status writes and config changes resume,
//! traffic through the data plane never fails. The API server stopped for 30 s: traffic
//! keeps flowing, leadership is given up (nobody writes), and after the restart the
//! watchers relist without a burst of status writes; a change made then is served and
//! its status written.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::build::{self, until_http};
use crate::cluster::{self, has, wait_status};
use crate::{Ctx, GW_V1, ROUTE_V1, support};

const NAME: &str = "weir.dev/ha-check";
const CLASS: &str = "weir-ha";

/// A child process killed (SIGKILL) on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where each process's log goes (kept after the run, for a failing test's reader).
fn log_file(name: &str) -> std::fs::File {
    let dir = std::env::temp_dir().join(format!("weir-k8s-ha-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::File::create(dir.join(format!("{name}.log"))).unwrap()
}

/// One controller replica. Lease timings are short so that the test is quick: a 4 s
/// lease renewed every 0.5 s and given up after 3 s without renewal (a leader stalled
/// for 3 s on this shared machine would lose it: the margin keeps that unlikely).
struct Replica {
    id: &'static str,
    xds: SocketAddr,
    admin: SocketAddr,
    lease_ns: String,
    kubeconfig: PathBuf,
}

impl Replica {
    fn new(id: &'static str, lease_ns: &str, kubeconfig: &Path) -> Replica {
        Replica {
            id,
            xds: SocketAddr::from(([127, 0, 0, 1], support::free_port())),
            admin: SocketAddr::from(([127, 0, 0, 1], support::free_port())),
            lease_ns: lease_ns.into(),
            kubeconfig: kubeconfig.into(),
        }
    }

    fn start(&self) -> Proc {
        Proc(
            Command::new(env!("CARGO_BIN_EXE_weir"))
                .args(["controller", "--kubeconfig"])
                .arg(&self.kubeconfig)
                .args([
                    "--controller-name",
                    NAME,
                    "--ingress-class",
                    "none-here",
                    "--no-embedded-proxy",
                    "--no-access-log",
                    "--xds-auth",
                    "none",
                    "--leader-elect",
                    "--leader-elect-lease-name",
                    "weir-ha",
                    "--leader-elect-lease-duration",
                    "4s",
                    "--leader-elect-renew-deadline",
                    "3s",
                    "--leader-elect-retry-period",
                    "500ms",
                ])
                .arg(format!("--leader-elect-namespace={}", self.lease_ns))
                .arg(format!("--leader-elect-identity={}", self.id))
                .arg(format!("--xds-listen={}", self.xds))
                .arg(format!("--admin={}", self.admin))
                .env("RUST_LOG", "info")
                .stdout(Stdio::null())
                .stderr(log_file(&format!("{}-{}", self.lease_ns, self.id)))
                .spawn()
                .expect("starting weir controller"),
        )
    }
}

/// A data plane for `gateway` that knows both replicas' push endpoints.
fn proxy(replicas: &[&Replica], gateway: &str, admin: SocketAddr) -> Proc {
    let endpoints: Vec<String> = replicas
        .iter()
        .map(|r| format!("http://{}", r.xds))
        .collect();
    Proc(
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["proxy", "--no-access-log", "--gateway", gateway])
            .arg(format!("--controller={}", endpoints.join(",")))
            .arg(format!("--admin={admin}"))
            .args(["--node", "ha"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log_file(&format!("proxy-{}", gateway.replace('/', "-"))))
            .spawn()
            .expect("starting weir proxy"),
    )
}

async fn page(admin: SocketAddr) -> Option<String> {
    support::http1(admin, "localhost", "/metrics")
        .await
        .ok()
        .filter(|r| r.status == 200)
        .map(|r| r.body)
}

/// The sum of the samples whose line starts with `prefix` (a name, or a name and the
/// first labels); `None` when the admin server does not answer.
async fn metric(admin: SocketAddr, prefix: &str) -> Option<u64> {
    let page = page(admin).await?;
    Some(
        page.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64,
    )
}

const LEADER: &str = "weir_controller_leader ";
const WRITTEN: &str = "weir_status_writes_total{result=\"written\",";

async fn until_ready(admin: SocketAddr) {
    let ok = support::eventually(Duration::from_secs(60), || async {
        support::http1(admin, "localhost", "/ready")
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(ok, "{admin} never became ready");
}

/// Waits until exactly `want` (of `replicas`) say they lead; returns the leaders' ids.
async fn until_leaders(replicas: &[&Replica], want: usize, within: Duration) -> Vec<&'static str> {
    let deadline = Instant::now() + within;
    loop {
        let mut leaders = Vec::new();
        for r in replicas {
            if metric(r.admin, LEADER).await == Some(1) {
                leaders.push(r.id);
            }
        }
        if leaders.len() == want {
            return leaders;
        }
        assert!(
            Instant::now() < deadline,
            "expected {want} leader(s) among {:?} within {within:?}, have {leaders:?}",
            replicas.iter().map(|r| r.id).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Requests in a loop (a new connection each) until stopped; counts answers and failures.
struct Loop {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failures: Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Loop {
    fn start(addr: SocketAddr, host: &str, want: &'static str) -> Loop {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
        let task = {
            let (stop, ok, failures) = (stop.clone(), ok.clone(), failures.clone());
            let host = host.to_string();
            tokio::spawn(async move {
                // Bounded: at most 500,000 requests or until told to stop.
                for _ in 0..500_000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    match support::http1(addr, &host, "/").await {
                        Ok(r) if r.status == 200 && r.echo_name() == Some(want) => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) => failures.lock().unwrap().push(format!(
                            "status {} from {:?}",
                            r.status,
                            r.echo_name()
                        )),
                        Err(e) => failures.lock().unwrap().push(format!("error {e}")),
                    }
                    // A steady trickle, not a flood: this machine is shared.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        };
        Loop {
            stop,
            ok,
            failures,
            task,
        }
    }

    /// Stops the loop and asserts that every request was answered by the backend.
    async fn finish(self, what: &str) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        let failures = self.failures.lock().unwrap().clone();
        let ok = self.ok.load(Ordering::Relaxed);
        println!(
            "  {what}: {ok} requests answered 200, {} failed",
            failures.len()
        );
        assert!(ok > 0, "{what}: the client sent no request");
        assert!(
            failures.is_empty(),
            "{what}: {} requests failed, first: {:?}",
            failures.len(),
            &failures[..failures.len().min(5)]
        );
    }
}

/// A Gateway of the HA class with one route to svc-a, served by a proxy; returns the
/// traffic address.
async fn gateway_with_route(ctx: &Ctx, ns: &str) -> SocketAddr {
    let c = &ctx.client;
    let ip = ctx.gateway_ip();
    let addr = SocketAddr::from((ip, support::free_port()));
    cluster::apply(
        c,
        &[
            build::namespace(ns, json!({})),
            build::gateway_class(CLASS, NAME),
        ],
    )
    .await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    cluster::apply(c, &build::service(ns, "svc-b", &ctx.b)).await;
    let mut gw = build::gateway(
        ns,
        "gw",
        ip,
        json!([{"name": "http", "port": addr.port(), "protocol": "HTTP"}]),
    );
    gw["spec"]["gatewayClassName"] = CLASS.into();
    cluster::apply(
        c,
        &[
            gw,
            build::route(
                ns,
                "r0",
                json!([{"name": "gw"}]),
                &["r0.ha.test"],
                json!([build::rule("/", "svc-a", None)]),
            ),
        ],
    )
    .await;
    addr
}

fn route(ns: &str, name: &str, host: &str, svc: &str) -> Value {
    build::route(
        ns,
        name,
        json!([{"name": "gw"}]),
        &[host],
        json!([build::rule("/", svc, None)]),
    )
}

async fn route_accepted(c: &kube::Client, ns: &str, name: &str) {
    wait_status(
        c,
        ROUTE_V1,
        ns,
        name,
        "accepted by the HA controllers",
        |s| {
            s["parents"].as_array().is_some_and(|ps| {
                ps.iter().any(|p| {
                    p["controllerName"] == NAME
                        && p["parentRef"]["name"] == "gw"
                        && has(&p["conditions"], "Accepted", "True", "Accepted")
                })
            })
        },
    )
    .await;
}

pub async fn leader_failover_keeps_serving(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t-ha";
    let addr = gateway_with_route(&ctx, ns).await;
    let (ra, rb) = (
        Replica::new("ctl-a", ns, &ctx.kubeconfig),
        Replica::new("ctl-b", ns, &ctx.kubeconfig),
    );
    // A first, so that it leads and the data plane (which tries A first) is connected to
    // the leader: killing it then exercises both the takeover and the reconnection.
    let mut a = Some(ra.start());
    until_ready(ra.admin).await;
    until_leaders(&[&ra], 1, Duration::from_secs(30)).await;
    let b = rb.start();
    until_ready(rb.admin).await;
    let padmin = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let _proxy = proxy(&[&ra, &rb], &format!("{ns}/gw"), padmin);
    until_ready(padmin).await;
    wait_status(c, GW_V1, ns, "gw", "programmed", |s| {
        has(&s["conditions"], "Programmed", "True", "Programmed")
            && s["listeners"][0]["attachedRoutes"] == 1
    })
    .await;
    route_accepted(c, ns, "r0").await;
    until_http(addr, "r0.ha.test", "/", Ok("echo-a")).await;
    // Exactly one leader, and the follower has written nothing.
    assert_eq!(
        until_leaders(&[&ra, &rb], 1, Duration::from_secs(10)).await,
        ["ctl-a"]
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        until_leaders(&[&ra, &rb], 1, Duration::ZERO).await,
        ["ctl-a"]
    );
    assert_eq!(
        metric(rb.admin, WRITTEN).await,
        Some(0),
        "the follower wrote status"
    );
    let b_written = metric(rb.admin, WRITTEN).await.unwrap();

    let traffic = Loop::start(addr, "r0.ha.test", "echo-a");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Kill the leader (SIGKILL: no chance to hand the Lease over) and change the config.
    let killed = Instant::now();
    drop(a.take());
    cluster::apply(c, &[route(ns, "r1", "r1.ha.test", "svc-b")]).await;
    until_http(addr, "r1.ha.test", "/", Ok("echo-b")).await;
    let served = killed.elapsed();
    route_accepted(c, ns, "r1").await;
    let written = killed.elapsed();
    assert_eq!(
        until_leaders(&[&rb], 1, Duration::from_secs(10)).await,
        ["ctl-b"]
    );
    let took_over = killed.elapsed();
    wait_status(c, GW_V1, ns, "gw", "two attached routes", |s| {
        s["listeners"][0]["attachedRoutes"] == 2
    })
    .await;
    println!(
        "  HA failover: change served after {} ms, its status written after {} ms, ctl-b leads after {} ms",
        served.as_millis(),
        written.as_millis(),
        took_over.as_millis()
    );
    // Bounds with a wide margin over the 4 s lease on this slow shared machine.
    assert!(
        written < Duration::from_secs(20),
        "status writes resumed after {written:?}"
    );
    assert!(
        served < Duration::from_secs(20),
        "config changes resumed after {served:?}"
    );
    // No burst on takeover: the new leader rewrote only what changed (r1 and the
    // Gateway's attachedRoutes), not every status.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = metric(rb.admin, WRITTEN).await.unwrap() - b_written;
    println!("  HA failover: the new leader wrote {after} statuses");
    assert!(
        (1..=3).contains(&after),
        "the new leader wrote {after} statuses (the route and the Gateway changed)"
    );
    traffic.finish("HA failover").await;

    let l = lease(c, ns).await;
    assert_eq!(l["spec"]["holderIdentity"], "ctl-b", "{l}");
    assert!(l["spec"]["leaseTransitions"].as_i64() >= Some(1), "{l}");

    // The old leader comes back: it follows (still exactly one leader) and writes nothing.
    let _a = ra.start();
    until_ready(ra.admin).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        until_leaders(&[&ra, &rb], 1, Duration::from_secs(10)).await,
        ["ctl-b"]
    );
    assert_eq!(
        metric(ra.admin, WRITTEN).await,
        Some(0),
        "a follower wrote status"
    );

    // A graceful stop (SIGTERM, as in a rolling update) frees the Lease before the
    // process exits: it never names the stopped replica afterwards, and the other takes
    // it over.
    let mut b = b;
    let pid = b.0.id().to_string();
    let ok = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(ok.success());
    let exited = support::eventually(Duration::from_secs(30), || {
        let done = b.0.try_wait().unwrap().is_some();
        async move { done }
    })
    .await;
    assert!(exited, "ctl-b did not exit on SIGTERM");
    let l = lease(c, ns).await;
    assert_ne!(l["spec"]["holderIdentity"], "ctl-b", "released: {l}");
    assert_eq!(
        until_leaders(&[&ra], 1, Duration::from_secs(20)).await,
        ["ctl-a"]
    );
}

async fn lease(c: &kube::Client, ns: &str) -> Value {
    cluster::get(c, "coordination.k8s.io/v1", "Lease", ns, "weir-ha").await
}

pub async fn api_server_outage(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t-outage";
    let addr = gateway_with_route(&ctx, ns).await;
    let (ra, rb) = (
        Replica::new("ctl-a", ns, &ctx.kubeconfig),
        Replica::new("ctl-b", ns, &ctx.kubeconfig),
    );
    let _a = ra.start();
    let _b = rb.start();
    until_ready(ra.admin).await;
    until_ready(rb.admin).await;
    let padmin = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let _proxy = proxy(&[&ra, &rb], &format!("{ns}/gw"), padmin);
    until_ready(padmin).await;
    route_accepted(c, ns, "r0").await;
    until_http(addr, "r0.ha.test", "/", Ok("echo-a")).await;
    until_leaders(&[&ra, &rb], 1, Duration::from_secs(30)).await;
    // The in-process controller of the other tests (no leader election) rides it out
    // too: an Ingress-less Gateway of its own class with a route.
    let ip = ctx.gateway_ip();
    let own = SocketAddr::from((ip, support::free_port()));
    cluster::apply(
        c,
        &[
            build::gateway(
                ns,
                "own",
                ip,
                json!([{"name": "http", "port": own.port(), "protocol": "HTTP"}]),
            ),
            build::route(
                ns,
                "own-r",
                json!([{"name": "own"}]),
                &["own.ha.test"],
                json!([build::rule("/", "svc-b", None)]),
            ),
        ],
    )
    .await;
    until_http(own, "own.ha.test", "/", Ok("echo-b")).await;
    wait_status(c, GW_V1, ns, "own", "attached", |s| {
        s["listeners"][0]["attachedRoutes"] == 1
    })
    .await;
    ctx.controller.statuses_written().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let written_before =
        metric(ra.admin, WRITTEN).await.unwrap() + metric(rb.admin, WRITTEN).await.unwrap();
    let in_process_before = ctx.controller.status_stats.written();

    let split_traffic = Loop::start(addr, "r0.ha.test", "echo-a");
    let embedded_traffic = Loop::start(own, "own.ha.test", "echo-b");
    let api = ctx.apiserver.clone();
    let stopped = Instant::now();
    api.stop_apiserver().await;
    // Neither replica may act as leader while it cannot renew the Lease.
    until_leaders(&[&ra, &rb], 0, Duration::from_secs(10)).await;
    println!(
        "  outage: no leader {} ms after the API server began to stop",
        stopped.elapsed().as_millis()
    );
    tokio::time::sleep(Duration::from_secs(30).saturating_sub(stopped.elapsed())).await;
    for r in [&ra, &rb] {
        assert!(
            metric(r.admin, LEADER).await.is_some(),
            "{} is still up during the outage",
            r.id
        );
    }
    let restarted = Instant::now();
    api.start_apiserver().await;
    println!(
        "  outage: the API server was down {} ms and took {} ms to be ready again",
        (restarted - stopped).as_millis(),
        restarted.elapsed().as_millis()
    );
    until_leaders(&[&ra, &rb], 1, Duration::from_secs(30)).await;
    println!(
        "  outage: a leader again {} ms after the restart began",
        restarted.elapsed().as_millis()
    );
    // Let the watchers relist and the new leader reconcile every status.
    tokio::time::sleep(Duration::from_secs(5)).await;
    ctx.controller.statuses_written().await;
    let after_relist = metric(ra.admin, WRITTEN).await.unwrap()
        + metric(rb.admin, WRITTEN).await.unwrap()
        - written_before;
    let in_process_after_relist = ctx.controller.status_stats.written() - in_process_before;
    println!(
        "  outage: status writes after the relist: {after_relist} (HA replicas), {in_process_after_relist} (in-process controller)"
    );
    assert_eq!(
        after_relist, 0,
        "nothing changed, yet statuses were rewritten"
    );
    assert_eq!(
        in_process_after_relist, 0,
        "nothing changed, yet the in-process controller rewrote statuses"
    );

    // A change after the outage is served and its status written; only what it changed.
    cluster::apply(c, &[route(ns, "r1", "r1.ha.test", "svc-b")]).await;
    until_http(addr, "r1.ha.test", "/", Ok("echo-b")).await;
    route_accepted(c, ns, "r1").await;
    wait_status(c, GW_V1, ns, "gw", "two attached routes", |s| {
        s["listeners"][0]["attachedRoutes"] == 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_change = metric(ra.admin, WRITTEN).await.unwrap()
        + metric(rb.admin, WRITTEN).await.unwrap()
        - written_before;
    println!("  outage: status writes after one change: {after_change}");
    assert!(
        (1..=3).contains(&after_change),
        "one new route: {after_change} status writes"
    );
    split_traffic.finish("outage, split data plane").await;
    embedded_traffic.finish("outage, embedded data plane").await;
}

/// The Lease loop itself, three candidates in this process racing for one Lease with
/// short timings: never two leaders at once (sampled throughout), exactly one while
/// they all run, a released Lease taken by another candidate within a few retry periods,
/// and a candidate that vanishes without releasing replaced once its Lease expires.
pub async fn lease_election_among_three_candidates(ctx: Arc<Ctx>) {
    use weir_provider_k8s::{Leadership, LeaseOptions};
    let c = &ctx.client;
    let ns = "t-lease";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    let opts = |id: &str| {
        let mut o = LeaseOptions::new(ns.into(), "race".into(), id.into());
        // A leader gives up after 1.5 s without a renewal, others wait 4 s: a leader's
        // task stalled on a loaded machine cannot overlap a successor.
        o.lease_duration = Duration::from_secs(4);
        o.renew_deadline = Duration::from_millis(1500);
        o.retry_period = Duration::from_millis(200);
        o
    };
    let mut candidates: Vec<(&str, Option<Leadership>)> = ["x", "y", "z"]
        .into_iter()
        .map(|id| (id, Some(Leadership::start(c.clone(), opts(id)).unwrap())))
        .collect();
    // Who leads now among the running candidates; panics if two do.
    let leaders = |cands: &[(&str, Option<Leadership>)]| -> Vec<String> {
        let l: Vec<String> = cands
            .iter()
            .filter(|(_, l)| l.as_ref().is_some_and(|l| *l.watch().borrow()))
            .map(|(id, _)| id.to_string())
            .collect();
        assert!(l.len() <= 1, "two leaders at once: {l:?}");
        l
    };
    async fn one_leader(
        cands: &[(&str, Option<Leadership>)],
        leaders: &impl Fn(&[(&str, Option<Leadership>)]) -> Vec<String>,
        within: Duration,
    ) -> String {
        let deadline = Instant::now() + within;
        loop {
            if let [l] = &leaders(cands)[..] {
                return l.clone();
            }
            assert!(Instant::now() < deadline, "no leader within {within:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let first = one_leader(&candidates, &leaders, Duration::from_secs(20)).await;
    // Steady state for 6 s (past a lease duration): the same single leader.
    for _ in 0..300 {
        assert_eq!(
            leaders(&candidates),
            vec![first.clone()],
            "leadership moved"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let l = cluster::get(c, "coordination.k8s.io/v1", "Lease", ns, "race").await;
    assert_eq!(l["spec"]["holderIdentity"], first.as_str(), "{l}");

    // The leader releases: another takes over, quickly (a released Lease has no holder).
    let i = candidates.iter().position(|(id, _)| *id == first).unwrap();
    let released = Instant::now();
    candidates[i].1.take().unwrap().release().await;
    let second = one_leader(&candidates, &leaders, Duration::from_secs(10)).await;
    println!(
        "  lease: {first} released, {second} leads {} ms later",
        released.elapsed().as_millis()
    );
    assert_ne!(second, first);

    // The new leader vanishes without releasing (its task aborted, as in a crash): the
    // last candidate takes the Lease once it has not changed for a lease duration.
    let j = candidates.iter().position(|(id, _)| *id == second).unwrap();
    drop(candidates[j].1.take());
    let third = one_leader(&candidates, &leaders, Duration::from_secs(15)).await;
    assert!(third != first && third != second, "{third}");
    let l = cluster::get(c, "coordination.k8s.io/v1", "Lease", ns, "race").await;
    assert_eq!(l["spec"]["holderIdentity"], third.as_str(), "{l}");
    assert!(l["spec"]["leaseTransitions"].as_i64() >= Some(2), "{l}");
    for (_, l) in candidates {
        if let Some(l) = l {
            l.release().await;
        }
    }
}
