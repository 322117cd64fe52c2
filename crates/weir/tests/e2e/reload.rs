//! Hot reload: routes added, changed and removed while a client loops on another route
//! with zero failures; invalid input rejected alone while the rest keeps serving.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::*;

fn gateway(port: u16) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  listeners:
  - {{name: http, protocol: HTTP, port: {port}}}
"
    )
}

fn route(name: &str, host: &str, path: &str, backend: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [{host}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
    backendRefs: [{{group: weir.dev, kind: Backend, name: {backend}}}]
"
    )
}

async fn serves(addr: SocketAddr, host: &str, path: &str, want: Option<&str>) -> bool {
    match http1(addr, host, path).await {
        Ok(r) => match want {
            Some(name) => r.status == 200 && r.echo_name() == Some(name),
            None => r.status == 404,
        },
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_change_live_without_failing_other_requests() {
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let (a, b, c) = (echo("a").await, echo("b").await, echo("c").await);
    let backends = [
        backend("default", "a", &[a]),
        backend("default", "b", &[b]),
        backend("default", "c", &[c]),
    ]
    .join("---\n");
    let gw = Gateway::start(&[
        ("gw.yaml", gateway(port)),
        ("backends.yaml", backends),
        ("stable.yaml", route("stable", "stable.test", "/", "a")),
    ])
    .await;

    // A client loops on the stable route for the whole test, on one keep-alive connection.
    let stop = Arc::new(AtomicBool::new(false));
    let looper = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut client = KeepAlive::new(addr);
            let (mut ok, mut failed) = (0u32, Vec::new());
            while !stop.load(Ordering::Relaxed) && ok < 200_000 {
                match client.get("stable.test", "/x").await {
                    Ok(r) if r.status == 200 && r.echo_name() == Some("a") => ok += 1,
                    Ok(r) => failed.push(format!("status {} body {}", r.status, r.body)),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (ok, failed, client.reconnects)
        }
    });

    let limit = Duration::from_secs(10);
    gw.write("new.yaml", &route("new", "new.test", "/", "b"));
    assert!(
        eventually(limit, || serves(addr, "new.test", "/", Some("b"))).await,
        "added route not live"
    );
    gw.write("new.yaml", &route("new", "new.test", "/", "c"));
    assert!(
        eventually(limit, || serves(addr, "new.test", "/", Some("c"))).await,
        "changed backend not live"
    );
    gw.write("new.yaml", &route("new", "new.test", "/only", "c"));
    assert!(
        eventually(limit, || serves(addr, "new.test", "/", None)).await,
        "changed path not live"
    );
    assert!(serves(addr, "new.test", "/only", Some("c")).await);
    gw.remove("new.yaml");
    assert!(
        eventually(limit, || serves(addr, "new.test", "/only", None)).await,
        "removed route still live"
    );

    stop.store(true, Ordering::Relaxed);
    let (ok, failed, reconnects) = looper.await.unwrap();
    assert!(ok > 0);
    assert!(
        failed.is_empty(),
        "{} failures during changes, first: {:?}",
        failed.len(),
        failed.first()
    );
    assert_eq!(reconnects, 0, "the client's connection was dropped");
    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_input_is_rejected_alone() {
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let a = echo("a").await;
    let bad_route = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [bad.test]
  rules:
  - matches: [{path: {type: Sideways, value: /}}]
    backendRefs: [{group: weir.dev, kind: Backend, name: a}]
";
    let gw = Gateway::start(&[
        ("gw.yaml", gateway(port)),
        ("backend.yaml", backend("default", "a", &[a])),
        ("good.yaml", route("good", "good.test", "/", "a")),
        ("bad.yaml", bad_route.into()),
    ])
    .await;
    assert!(serves(addr, "good.test", "/", Some("a")).await);
    assert!(
        serves(addr, "bad.test", "/", None).await,
        "an invalid route must not be served"
    );

    // A file that stops being valid YAML keeps its last good objects.
    gw.write("good.yaml", "this: [is not: valid yaml\n");
    // Prove the broken write was processed: a later valid change to another file is live.
    gw.write("other.yaml", &route("other", "other.test", "/", "a"));
    assert!(
        eventually(Duration::from_secs(10), || serves(
            addr,
            "other.test",
            "/",
            Some("a")
        ))
        .await
    );
    assert!(
        serves(addr, "good.test", "/", Some("a")).await,
        "last good config must keep serving"
    );

    // Fixing the bad route makes it live.
    gw.write("bad.yaml", &route("bad", "bad.test", "/", "a"));
    assert!(
        eventually(Duration::from_secs(10), || serves(
            addr,
            "bad.test",
            "/",
            Some("a")
        ))
        .await
    );
    gw.gw.stop().await;
}

#[test]
fn check_command_names_file_object_and_field() {
    let dir = tempfile::tempdir().unwrap();
    write_atomic(&dir.path().join("gw.yaml"), &gateway(8080));
    write_atomic(
        &dir.path().join("bad.yaml"),
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: Sideways, value: /}}]
",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["check", "-c"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("bad.yaml"), "{stdout}");
    assert!(stdout.contains("default/bad"), "{stdout}");
    assert!(
        stdout.contains("spec.rules[0].matches[0].path.type"),
        "{stdout}"
    );

    // The same verdict as JSON, for tools.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["check", "--output", "json", "-c"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = doc["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{doc}");
    let p = &problems[0];
    assert!(p["file"].as_str().unwrap().ends_with("bad.yaml"), "{doc}");
    assert_eq!(p["document"], 0, "{doc}");
    assert!(
        p["message"]
            .as_str()
            .unwrap()
            .contains("spec.rules[0].matches[0].path.type"),
        "{doc}"
    );

    std::fs::remove_file(dir.path().join("bad.yaml")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["check", "-c"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `weir check` parses every TLS Secret's key: one whose key belongs to another
/// certificate is named (with its file), which `weir run` would only find at the first
/// handshake for its names.
#[test]
fn check_command_finds_a_key_that_is_not_the_certificates() {
    let pki = Pki::new();
    let (cert_a, key_a) = pki.leaf(&["a.test"]);
    let (_, key_b) = pki.leaf(&["b.test"]);
    let dir = tempfile::tempdir().unwrap();
    write_atomic(
        &dir.path().join("good.yaml"),
        &tls_secret("default", "good", &cert_a, &key_a),
    );
    write_atomic(
        &dir.path().join("swapped.yaml"),
        &tls_secret("default", "swapped", &cert_a, &key_b),
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["check", "-c"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let problems: Vec<&str> = stdout.lines().filter(|l| l.contains("unusable")).collect();
    assert_eq!(problems.len(), 1, "{stdout}");
    assert!(problems[0].contains("swapped.yaml"), "{stdout}");
    assert!(problems[0].contains("default/swapped"), "{stdout}");
}
