//! TrafficPolicy `authorization` from files: ordered allow/deny rules by method, path and
//! header on one route (403 from the rules, 200 past them); edited while another route
//! serves a steady stream of requests, none of which fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use crate::support::*;

fn manifests(port: u16, backend_yaml: &str) -> String {
    [
        http_gateway(port),
        http_route("guarded", "guarded.test", "a"),
        http_route("open", "open.test", "a"),
        backend_yaml.to_string(),
    ]
    .join("---\n")
}

/// Deny `/admin` unless the request carries `x-team: ops`; allow reads; deny the rest
/// (`default`).
fn rules(admin_team: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: authz}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: guarded}}]
  authorization:
    default: Deny
    rules:
    - action: Allow
      paths: [{{type: PathPrefix, value: /admin}}]
      headers: [{{name: x-team, value: {admin_team}}}]
    - action: Deny
      paths: [{{type: PathPrefix, value: /admin}}]
    - action: Allow
      methods: [GET, HEAD]
"
    )
}

async fn call(
    addr: std::net::SocketAddr,
    host: &str,
    method: &str,
    path: &str,
    team: Option<&str>,
) -> u16 {
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", host);
    if let Some(t) = team {
        req = req.header("x-team", t);
    }
    let req = req.body(http_body_util::Empty::new()).unwrap();
    send_http1(addr, req).await.unwrap().status.as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_rules_apply_and_change_live() {
    let port = free_port();
    let a = echo("a").await;
    let gw = Gateway::start(&[
        ("app.yaml", manifests(port, &backend("default", "a", &[a]))),
        ("policy.yaml", rules("ops")),
    ])
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let g = "guarded.test";
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, g, "POST", "/x", None).await == 403
        })
        .await,
        "the policy applies"
    );
    assert_eq!(call(addr, g, "GET", "/x", None).await, 200, "reads allowed");
    assert_eq!(call(addr, g, "GET", "/admin/users", None).await, 403);
    assert_eq!(call(addr, g, "GET", "/admin/users", Some("dev")).await, 403);
    assert_eq!(
        call(addr, g, "POST", "/admin/users", Some("ops")).await,
        200,
        "the first matching rule decides"
    );
    assert_eq!(
        call(addr, "open.test", "POST", "/x", None).await,
        200,
        "other route"
    );

    // Traffic on the other route while the policy is edited twice: no request fails.
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let load = {
        let (stop, sent, failed) = (stop.clone(), sent.clone(), failed.clone());
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            while !stop.load(Ordering::Relaxed)
                && sent.load(Ordering::Relaxed) < 20_000
                && started.elapsed() < Duration::from_secs(30)
            {
                if call(addr, "open.test", "POST", "/x", None).await != 200 {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    gw.write("policy.yaml", &rules("dev"));
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, g, "POST", "/admin/users", Some("dev")).await == 200
        })
        .await,
        "the edited rule applies"
    );
    assert_eq!(
        call(addr, g, "POST", "/admin/users", Some("ops")).await,
        403
    );
    gw.remove("policy.yaml");
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, g, "POST", "/x", None).await == 200
        })
        .await,
        "removing the policy lifts the rules"
    );
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    assert!(sent.load(Ordering::Relaxed) > 0);
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "requests to the other route failed"
    );
}

/// The runnable examples of these policies (and every other under `examples/`) pass
/// `weir check` without a problem.
#[test]
fn every_example_passes_weir_check() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    let names: Vec<String> = dirs
        .iter()
        .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n == "authorization"), "{names:?}");
    assert!(names.iter().any(|n| n == "proxy-protocol"), "{names:?}");
    for dir in dirs {
        let opts = weir::check::CheckOptions {
            config: dir.clone(),
            ingress_http: None,
            ingress_https: None,
            ingress_class: "weir".into(),
            more_ingress_classes: Vec::new(),
            json: false,
        };
        let mut out = Vec::new();
        let problems = weir::check::check(&opts, &mut out).unwrap();
        assert_eq!(
            problems,
            0,
            "{}: {}",
            dir.display(),
            String::from_utf8_lossy(&out)
        );
    }
}
