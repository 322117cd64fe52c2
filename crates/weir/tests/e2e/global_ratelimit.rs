//! Global rate limits against a real `redis-server` (started here on a free port, no
//! persistence): two data planes share one budget; with Redis killed a fail-open limit
//! admits, a fail-closed one refuses (503) and routes without a global limit see no
//! failure; with Redis back, limiting resumes.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use weir::standalone::{RunOptions, Standalone};
use weir_proxy::RedisSettings;

use crate::support::*;

/// A `redis-server` child process on 127.0.0.1:`port`, killed on drop.
struct Redis {
    port: u16,
    child: Option<Child>,
    /// `redis-cli` arguments for a TLS-only server (`--tls --cacert FILE`).
    tls: Vec<String>,
}

impl Redis {
    async fn start(port: u16) -> Redis {
        Redis::start_with(port, &[]).await
    }

    async fn start_with(port: u16, extra: &[&str]) -> Redis {
        Redis::spawn(port, extra, Vec::new()).await
    }

    async fn spawn(port: u16, extra: &[&str], tls: Vec<String>) -> Redis {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (apt-get install redis-server)");
        let r = Redis {
            port,
            child: Some(child),
            tls,
        };
        assert!(
            eventually(Duration::from_secs(10), || async {
                r.cli(&["PING"]).as_deref() == Some("PONG")
            })
            .await,
            "redis-server answers on {port}"
        );
        r
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// One command through `redis-cli`; its output, trimmed.
    fn cli(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(&self.tls)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The sum of every rate-limit window count in Redis.
    fn total(&self) -> u64 {
        let keys = self
            .cli(&["--scan", "--pattern", "weir:rl:*"])
            .unwrap_or_default();
        keys.lines()
            .filter_map(|k| self.cli(&["GET", k])?.parse::<u64>().ok())
            .sum()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

fn settings(redis: &Redis) -> RedisSettings {
    let mut s = RedisSettings::new(vec![redis.url()]);
    // A slow round trip on a loaded machine is not an outage (the default is 100 ms).
    s.timeout = Duration::from_secs(1);
    s
}

/// Waits until `gw`'s sync task has finished three more Redis round trips than it had
/// when called: the reply of one that began after this call has then been applied to the
/// gateway's local views (a round trip is counted just before its reply is applied).
async fn synced_since_now(gw: &Gateway) {
    let syncs = || async {
        gw.admin_get("/metrics")
            .await
            .body
            .lines()
            .find_map(|l| l.strip_prefix("weir_global_ratelimit_sync_duration_seconds_count "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let now = syncs().await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            syncs().await >= now + 3
        })
        .await,
        "the gateway's Redis syncs stalled"
    );
}

/// A gateway from manifests with `--redis`.
async fn start(files: &[(&str, String)], redis: Option<RedisSettings>) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in files {
        write_atomic(&dir.path().join(name), body);
    }
    let gw = Standalone::start(RunOptions {
        config: dir.path().to_path_buf(),
        admin: "127.0.0.1:0".parse().unwrap(),
        ingress_http: None,
        ingress_https: None,
        ingress_class: "weir".into(),
        more_ingress_classes: Vec::new(),
        access_log: None,
        traces: None,
        watch: false,
        redis,
        on_loaded: None,
    })
    .await
    .unwrap();
    Gateway { dir, gw }
}

/// A Gateway on `port` with HTTPRoutes `hosts` (`<name>.test`) to one echo backend.
fn manifests(port: u16, backend_addr: SocketAddr, routes: &[&str]) -> String {
    let mut m = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{type: IPAddress, value: 127.0.0.1}}]
  listeners:
  - {{name: http, protocol: HTTP, port: {port}}}
---
{}",
        backend("default", "a", &[backend_addr])
    );
    for r in routes {
        m += &format!(
            "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {r}}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [{r}.test]
  rules:
  - backendRefs: [{{group: weir.dev, kind: Backend, name: a}}]
"
        );
    }
    m
}

fn global_limit(route: &str, requests: u32, key: &str, fail_mode: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: {route}-limit}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: {route}}}]
  rateLimit:
    global: {{requests: {requests}, unit: Hour, key: {key}, failMode: {fail_mode}}}
"
    )
}

async fn call(port: u16, host: &str, client: &str) -> u16 {
    let req = get(host, "/")
        .header("x-client", client)
        .body(http_body_util::Empty::new())
        .unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    send_http1(addr, req).await.map_or(0, |r| r.status.as_u16())
}

async fn admitted(port: u16, host: &str, client: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        if call(port, host, client).await == 200 {
            ok += 1;
        }
    }
    ok
}

/// Two data planes with the same policy count into one budget: what one admitted is
/// refused by the other once a sync has carried it over (no timing: each step waits
/// until Redis holds the expected total).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_data_planes_share_one_global_limit() {
    let redis = Redis::start(free_port()).await;
    let echo_addr = echo("a").await;
    let (pa, pb) = (free_port(), free_port());
    let policy = global_limit("app", 20, "{type: Target}", "Open");
    let a = start(
        &[
            ("app.yaml", manifests(pa, echo_addr, &["app"])),
            ("policy.yaml", policy.clone()),
        ],
        Some(settings(&redis)),
    )
    .await;
    let b = start(
        &[
            ("app.yaml", manifests(pb, echo_addr, &["app"])),
            ("policy.yaml", policy),
        ],
        Some(settings(&redis)),
    )
    .await;

    assert_eq!(admitted(pa, "app.test", "x", 15).await, 15);
    let settled = |n: u64| {
        let redis = &redis;
        async move { eventually(Duration::from_secs(10), || async { redis.total() == n }).await }
    };
    assert!(
        settled(15).await,
        "A's counts reach Redis: {}",
        redis.total()
    );
    // B's first request creates its view of the key; once its sync has read the total
    // back, B has 20 − 16 = 4 left.
    assert_eq!(admitted(pb, "app.test", "x", 1).await, 1);
    assert!(
        settled(16).await,
        "B's count reaches Redis: {}",
        redis.total()
    );
    // B has applied a reply that carries the total.
    synced_since_now(&b).await;
    assert_eq!(admitted(pb, "app.test", "x", 10).await, 4);
    // A's view follows B's counts too: nothing left.
    assert!(settled(20).await);
    synced_since_now(&a).await;
    assert_eq!(admitted(pa, "app.test", "x", 5).await, 0);
    let r = {
        let req = get("app.test", "/")
            .body(http_body_util::Empty::new())
            .unwrap();
        send_http1(SocketAddr::from(([127, 0, 0, 1], pa)), req)
            .await
            .unwrap()
    };
    assert_eq!(r.status, 429);
    assert!(r.headers.contains_key("retry-after"));
    assert_eq!(r.headers.get("ratelimit-limit").unwrap(), "20");
    drop((a, b));
}

/// Redis killed: the fail-open route admits, the fail-closed one answers 503, a route
/// without a global limit never fails; Redis back (empty, on the same port): the
/// fail-closed route serves again and limits again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_follows_the_fail_mode_and_limiting_resumes() {
    let port = free_port();
    let mut redis = Redis::start(port).await;
    let echo_addr = echo("a").await;
    let p = free_port();
    let gw = start(
        &[
            (
                "app.yaml",
                manifests(p, echo_addr, &["open", "closed", "plain"]),
            ),
            (
                "open.yaml",
                global_limit("open", 1000, "{type: Target}", "Open"),
            ),
            (
                "closed.yaml",
                global_limit("closed", 3, "{type: Header, header: x-client}", "Closed"),
            ),
        ],
        Some(settings(&redis)),
    )
    .await;
    assert_eq!(admitted(p, "closed.test", "c1", 5).await, 3, "limited");
    assert_eq!(admitted(p, "open.test", "o", 5).await, 5);

    redis.stop();
    assert!(
        eventually(Duration::from_secs(10), || async {
            call(p, "closed.test", "c2").await == 503
        })
        .await,
        "fail closed once Redis is gone"
    );
    let mut failures = 0;
    for i in 0..50 {
        if call(p, "open.test", "o").await != 200 {
            failures += 1;
        }
        if call(p, "plain.test", "o").await != 200 {
            failures += 1;
        }
        if i % 10 == 0 {
            assert_eq!(call(p, "closed.test", "c3").await, 503);
        }
    }
    assert_eq!(
        failures, 0,
        "fail-open and unlimited routes serve through the outage"
    );
    let metrics = gw.admin_get("/metrics").await.body;
    assert!(
        metrics.contains("weir_global_ratelimit_redis_up 0"),
        "{metrics}"
    );

    let redis = Redis::start(port).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            call(p, "closed.test", "probe").await == 200
        })
        .await,
        "serving again once Redis is back"
    );
    assert_eq!(
        admitted(p, "closed.test", "c4", 5).await,
        3,
        "limiting again"
    );
    assert!(
        eventually(Duration::from_secs(10), || async { redis.total() >= 3 }).await,
        "the new counts reach the restarted Redis"
    );
    drop(gw);
}

/// A Redis Cluster of three masters (`--redis` with three seed nodes): keys of different
/// clients land in different slots, each client's budget holds, and the counts reach the
/// nodes that own them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_limit_over_a_redis_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    for _ in 0..3 {
        let port = free_port();
        // The cluster bus port, chosen like the client port: Redis's default (the port
        // plus 10,000) lands in the kernel's ephemeral range, where another test's
        // connection may hold it.
        let bus = free_port().to_string();
        let conf = dir.path().join(format!("nodes-{port}.conf"));
        let node_dir = dir.path().display().to_string();
        let conf = conf.display().to_string();
        let extra = [
            "--cluster-port",
            bus.as_str(),
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            conf.as_str(),
            "--dir",
            node_dir.as_str(),
        ];
        nodes.push(Redis::start_with(port, &extra).await);
    }
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let created = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("redis-cli");
    assert!(created.success(), "redis-cli --cluster create");
    assert!(
        eventually(Duration::from_secs(20), || async {
            nodes.iter().all(|n| {
                n.cli(&["CLUSTER", "INFO"])
                    .is_some_and(|i| i.contains("cluster_state:ok"))
            })
        })
        .await,
        "the cluster is up"
    );
    let mut redis = RedisSettings::new(nodes.iter().map(Redis::url).collect());
    redis.timeout = Duration::from_secs(1);
    let echo_addr = echo("a").await;
    let p = free_port();
    let _gw = start(
        &[
            ("app.yaml", manifests(p, echo_addr, &["app"])),
            (
                "policy.yaml",
                global_limit("app", 5, "{type: Header, header: x-client}", "Closed"),
            ),
        ],
        Some(redis),
    )
    .await;
    // Fail closed until the first sync has reached the cluster.
    assert!(
        eventually(Duration::from_secs(10), || async {
            call(p, "app.test", "probe").await == 200
        })
        .await,
        "the cluster is reachable"
    );
    let clients = ["c1", "c2", "c3", "c4", "c5", "c6"];
    for c in clients {
        assert_eq!(admitted(p, "app.test", c, 8).await, 5, "client {c}");
    }
    let total = || nodes.iter().map(Redis::total).sum::<u64>();
    assert!(
        eventually(Duration::from_secs(10), || async {
            (30..=31).contains(&total())
        })
        .await,
        "5 per client (and the probe, unless it was admitted before a failed first \
         connect dropped it) reach the cluster: {}",
        total()
    );
    let holding = nodes.iter().filter(|n| n.total() > 0).count();
    assert!(holding >= 2, "keys spread over the nodes: {holding}");
}

/// TLS to Redis (`rediss://`, the server's certificate signed by a CA given as
/// `RedisSettings::ca_pem`, as `--redis-ca` does): the counts reach a TLS-only server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_limit_over_tls_to_redis() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf(&["127.0.0.1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.display().to_string()
    };
    let (cert, key, ca) = (
        file("redis.crt", &cert),
        file("redis.key", &key),
        file("ca.crt", &pki.ca_pem()),
    );
    let port = free_port();
    let tls_args = [
        "--port",
        "0",
        "--tls-port",
        &port.to_string(),
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ]
    .map(str::to_owned);
    let extra: Vec<&str> = tls_args.iter().map(String::as_str).collect();
    // `--port 0` after the helper's `--port`: the last one wins, no plaintext port.
    let redis = Redis::spawn(
        port,
        &extra,
        vec!["--tls".into(), "--cacert".into(), ca.clone()],
    )
    .await;
    let mut settings = RedisSettings::new(vec![format!("rediss://127.0.0.1:{port}")]);
    settings.ca_pem = Some(pki.ca_pem().into_bytes());
    settings.timeout = Duration::from_secs(1);
    let echo_addr = echo("a").await;
    let p = free_port();
    let _gw = start(
        &[
            ("app.yaml", manifests(p, echo_addr, &["app"])),
            (
                "policy.yaml",
                global_limit("app", 3, "{type: Target}", "Closed"),
            ),
        ],
        Some(settings),
    )
    .await;
    assert_eq!(admitted(p, "app.test", "x", 5).await, 3);
    assert!(
        eventually(Duration::from_secs(10), || async { redis.total() == 3 }).await,
        "the counts reach Redis over TLS: {}",
        redis.total()
    );
    assert_eq!(admitted(p, "app.test", "x", 2).await, 0);
}
