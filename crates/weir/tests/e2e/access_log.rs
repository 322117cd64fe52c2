//! The access log as written: JSON records read back from the real file, rotated by
//! size, naming the policy that refused a request, the identity and the rate-limit
//! budget of one it let through, and the route, endpoint and attempts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_proxy::{AccessLogFields, AccessLogOutput, AccessLogSettings};

use crate::support::*;

const POLICY: &str = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: keys}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: app}]
  apiKeyAuth: {secretRefs: [{name: keys}], header: x-key}
  rateLimit:
    local: {requests: 100, unit: Hour, burst: 50, key: {type: ClientIP}}
";

const SECRET: &str = "apiVersion: v1
kind: Secret
metadata: {name: keys}
type: Opaque
stringData: {alice: alice-key-1234}
";

async fn call(addr: std::net::SocketAddr, key: Option<&str>, id: &str) -> Resp {
    let mut req = get("app.test", "/logged").header("x-request-id", id);
    if let Some(k) = key {
        req = req.header("x-key", k);
    }
    send_http1(addr, req.body(http_body_util::Empty::new()).unwrap())
        .await
        .unwrap()
}

/// Every record in the log file and its rotated files (newest last).
fn records(path: &Path, keep: usize) -> Vec<serde_json::Value> {
    let mut files: Vec<PathBuf> = (1..=keep)
        .rev()
        .map(|i| PathBuf::from(format!("{}.{i}", path.display())))
        .collect();
    files.push(path.to_path_buf());
    let mut out = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {line}", f.display()));
            out.push(v);
        }
    }
    out
}

/// Records of requests whose id starts with `prefix`.
fn of(records: &[serde_json::Value], prefix: &str) -> Vec<serde_json::Value> {
    records
        .iter()
        .filter(|r| {
            r["request_id"]
                .as_str()
                .is_some_and(|i| i.starts_with(prefix))
        })
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_name_the_policy_and_the_file_rotates() {
    let port = free_port();
    let a = echo("a").await;
    let logs = tempfile::tempdir().unwrap();
    let path = logs.path().join("access.log");
    let keep = 3;
    let settings = AccessLogSettings {
        output: AccessLogOutput::File {
            path: path.clone(),
            max_bytes: 4096,
            every: None,
            keep,
        },
        fields: AccessLogFields::all(),
        queue: 1024,
    };
    let gw = Gateway::start_edited(
        &[
            (
                "app.yaml",
                crate::policies::manifests(port, &backend("default", "a", &[a])),
            ),
            ("secret.yaml", SECRET.to_string()),
            ("policy.yaml", POLICY.to_string()),
        ],
        |o| o.access_log = Some(settings),
    )
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, None, "warmup").await.status == 401
        })
        .await,
        "the policy applies"
    );

    assert_eq!(call(addr, None, "denied-1").await.status, 401);
    // Enough allowed requests to pass 4096 bytes at least once (a record is several
    // hundred bytes), not so many that a file is rotated away (3 kept).
    for i in 0..12 {
        let r = call(addr, Some("alice-key-1234"), &format!("allowed-{i}")).await;
        assert_eq!(r.status, 200);
    }

    // The writer thread writes behind the requests: wait until every record is there.
    let mut all = Vec::new();
    for _ in 0..500 {
        all = records(&path, keep);
        if of(&all, "allowed-").len() == 12 && !of(&all, "denied-").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(of(&all, "allowed-").len(), 12, "records: {all:#?}");
    assert!(
        Path::new(&format!("{}.1", path.display())).exists(),
        "the file was rotated"
    );
    for f in std::iter::once(path.clone())
        .chain((1..=keep).map(|i| PathBuf::from(format!("{}.{i}", path.display()))))
    {
        if let Ok(m) = std::fs::metadata(&f) {
            assert!(m.len() <= 4096, "{} is {} bytes", f.display(), m.len());
        }
    }

    let denied = &of(&all, "denied-")[0];
    assert_eq!(denied["status"], 401, "{denied}");
    assert_eq!(denied["decision"], "deny");
    assert_eq!(denied["policy"], "default/keys");
    assert_eq!(denied["check"], "api_key");
    assert!(
        denied["reason"]
            .as_str()
            .unwrap()
            .contains("not authenticated"),
        "{denied}"
    );
    assert_eq!(denied["route"], "HTTPRoute/default/app#0");
    assert_eq!(denied["upstream"], serde_json::Value::Null);
    assert_eq!(denied["identity"], serde_json::Value::Null);
    assert_eq!(denied["method"], "GET");
    assert_eq!(denied["path"], "/logged");
    assert_eq!(denied["fault"], "policy");

    let allowed = of(&all, "allowed-");
    let first = &allowed[0];
    assert_eq!(first["status"], 200, "{first}");
    assert_eq!(first["decision"], "allow");
    assert_eq!(first["identity"]["kind"], "api_key");
    assert_eq!(first["identity"]["name"], "alice");
    assert_eq!(first["rate_limit"]["policy"], "default/keys");
    assert_eq!(first["rate_limit"]["key"], "127.0.0.1");
    assert_eq!(first["upstream"], a.to_string());
    assert_eq!(first["attempts"], 1);
    let checks: Vec<&str> = first["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert_eq!(checks, ["api_key", "rate_limit"]);
    // The budget goes down by one per request of the client.
    let remaining: Vec<u64> = allowed
        .iter()
        .map(|r| r["rate_limit"]["remaining"].as_u64().unwrap())
        .collect();
    assert!(
        remaining.windows(2).all(|w| w[1] + 1 == w[0]),
        "{remaining:?}"
    );

    // The counters show the rotation and no drop.
    let metrics = gw.admin_get("/metrics").await.body;
    assert!(
        metrics.contains("weir_access_log_rotations_total "),
        "{metrics}"
    );
    assert!(!metrics.contains("weir_access_log_rotations_total 0\n"));
    assert!(metrics.contains("weir_access_log_dropped_total 0\n"));
}

/// Fields not asked for are not written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_carry_only_the_fields_asked_for() {
    let port = free_port();
    let a = echo("a").await;
    let logs = tempfile::tempdir().unwrap();
    let path = logs.path().join("access.log");
    let settings = AccessLogSettings {
        output: AccessLogOutput::File {
            path: path.clone(),
            max_bytes: 0,
            every: None,
            keep: 0,
        },
        fields: AccessLogFields::parse("request_id,status,route").unwrap(),
        queue: 16,
    };
    let _gw = Gateway::start_edited(
        &[(
            "app.yaml",
            crate::policies::manifests(port, &backend("default", "a", &[a])),
        )],
        |o| o.access_log = Some(settings),
    )
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, None, "few-1").await.status == 200
        })
        .await
    );
    // Earlier tries may have been answered 404 before the route was live.
    let mut found = None;
    for _ in 0..500 {
        found = of(&records(&path, 0), "few-")
            .into_iter()
            .find(|r| r["status"] == 200);
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = found.expect("a record");
    let keys: Vec<&str> = r.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    assert_eq!(keys.len(), 3, "{r}");
    assert_eq!(r["status"], 200);
    assert_eq!(r["route"], "HTTPRoute/default/app#0");
}

/// A retried request's record counts its attempts and names the endpoint that answered,
/// whether its first attempt was sent on the request's own future (a request without a
/// body) or by the retry loop from the start (a body kept for replay): with one endpoint
/// refusing connections, every request is answered by the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_count_the_attempts_of_a_retried_request() {
    let port = free_port();
    let a = echo("a").await;
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let logs = tempfile::tempdir().unwrap();
    let path = logs.path().join("access.log");
    let settings = AccessLogSettings {
        output: AccessLogOutput::File {
            path: path.clone(),
            max_bytes: 0,
            every: None,
            keep: 0,
        },
        fields: AccessLogFields::parse("request_id,method,status,upstream,attempts").unwrap(),
        queue: 64,
    };
    let retry = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: retry, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: app}]
  retry: {attempts: 2, codes: [503], backoff: 1ms}
";
    let manifests = format!(
        "{}---\n{retry}",
        crate::policies::manifests(port, &backend("default", "a", &[refused, a]))
    );
    let _gw = Gateway::start_edited(&[("app.yaml", manifests)], |o| {
        o.access_log = Some(settings)
    })
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, None, "warmup").await.status == 200
        })
        .await,
        "the route is live"
    );
    // Round robin over two endpoints: of four requests of each kind, some start on the
    // refusing one (before outlier detection ejects it after five failures).
    for i in 0..4 {
        assert_eq!(call(addr, None, &format!("get-{i}")).await.status, 200);
        let req = http::Request::post("http://app.test/logged")
            .header("host", "app.test")
            .header("x-request-id", format!("post-{i}"))
            .body(http_body_util::Full::new(bytes::Bytes::from_static(
                b"kept",
            )))
            .unwrap();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let io = hyper_util::rt::TokioIo::new(tcp);
        let (mut tx, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        assert_eq!(tx.send_request(req).await.unwrap().status(), 200);
    }
    let mut all = Vec::new();
    for _ in 0..500 {
        all = records(&path, 0);
        if of(&all, "get-").len() == 4 && of(&all, "post-").len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for prefix in ["get-", "post-"] {
        let recs = of(&all, prefix);
        assert_eq!(recs.len(), 4, "records: {all:#?}");
        for r in &recs {
            assert_eq!(r["status"], 200, "{r}");
            assert_eq!(r["upstream"], a.to_string(), "the answering endpoint: {r}");
            let n = r["attempts"].as_u64().unwrap();
            assert!((1..=2).contains(&n), "{r}");
        }
        assert!(
            recs.iter().any(|r| r["attempts"] == 2),
            "a {prefix} request was retried: {recs:#?}"
        );
    }
}
