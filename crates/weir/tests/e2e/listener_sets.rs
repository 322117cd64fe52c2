//! ListenerSets (gateway.networking.k8s.io/v1) and XListenerSets (the v1.4 experimental
//! kind) in standalone mode: a set adds an HTTPS hostname (with its own certificate) to a
//! Gateway's socket while it runs, routes attach to the set's listener, and deleting the
//! set's file takes the hostname away without disturbing the Gateway. Both kinds serve
//! the same Gateway side by side.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;

/// `(apiVersion, kind)` of the v1 ListenerSet and of the experimental XListenerSet.
const SET_V1: (&str, &str) = ("gateway.networking.k8s.io/v1", "ListenerSet");
const SET_V1A1: (&str, &str) = ("gateway.networking.x-k8s.io/v1alpha1", "XListenerSet");

fn listener_set(
    (api_version, kind): (&str, &str),
    name: &str,
    parent: &str,
    host: &str,
    port: u16,
    secret: &str,
    backend: &str,
) -> String {
    let group = api_version.rsplit_once('/').unwrap().0;
    format!(
        "apiVersion: {api_version}
kind: {kind}
metadata: {{name: {name}}}
spec:
  parentRef: {{name: {parent}}}
  listeners:
  - {{name: https, protocol: HTTPS, port: {port}, hostname: {host}, tls: {{certificateRefs: [{{name: {secret}}}]}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}}}
spec:
  parentRefs: [{{group: {group}, kind: {kind}, name: {name}, sectionName: https}}]
  rules: [{{backendRefs: [{{group: weir.dev, kind: Backend, name: {backend}}}]}}]
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_sets_add_and_remove_hostnames_on_a_running_gateway() {
    let pki = Pki::new();
    let port = free_port();
    let closed_port = free_port();
    let (a, b, c) = (echo("a").await, echo("b").await, echo("c").await);
    let (crt_a, key_a) = pki.leaf(&["a.test"]);
    let (crt_b, key_b) = pki.leaf(&["b.test"]);
    let (crt_c, key_c) = pki.leaf(&["c.test"]);
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  allowedListeners: {{namespaces: {{from: Same}}}}
  listeners:
  - {{name: a, protocol: HTTPS, port: {port}, hostname: a.test, tls: {{certificateRefs: [{{name: cert-a}}]}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: closed}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  listeners:
  - {{name: a, protocol: HTTPS, port: {closed_port}, hostname: a.test, tls: {{certificateRefs: [{{name: cert-a}}]}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: a}}
spec:
  parentRefs: [{{name: gw}}, {{name: closed}}]
  rules: [{{backendRefs: [{{group: weir.dev, kind: Backend, name: a}}]}}]
---
{}
---
{}
---
{}
---
{}
---
{}",
        backend("default", "a", &[a]),
        backend("default", "b", &[b]),
        backend("default", "c", &[c]),
        tls_secret("default", "cert-b", &crt_b, &key_b),
        tls_secret("default", "cert-c", &crt_c, &key_c),
    );
    let gw = Gateway::start(&[
        ("gw.yaml", gateway),
        (
            "cert-a.yaml",
            tls_secret("default", "cert-a", &crt_a, &key_a),
        ),
    ])
    .await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let closed: SocketAddr = ([127, 0, 0, 1], closed_port).into();
    let tls = pki.client_config(&[b"h2", b"http/1.1"]);
    let serves = |addr: SocketAddr, sni: &'static str, name: &'static str| {
        let tls = tls.clone();
        async move {
            https(addr, tls, sni, "/")
                .await
                .is_ok_and(|r| r.resp.status == 200 && r.resp.echo_name() == Some(name))
        }
    };
    assert!(serves(addr, "a.test", "a").await);
    let fresh = || pki.client_config(&[b"h2", b"http/1.1"]);
    assert!(https(addr, fresh(), "b.test", "/").await.is_err());

    // A set adds b.test, with its own certificate, to the Gateway's socket.
    gw.write(
        "set-b.yaml",
        &listener_set(SET_V1, "b", "gw", "b.test", port, "cert-b", "b"),
    );
    assert!(
        eventually(Duration::from_secs(10), || serves(addr, "b.test", "b")).await,
        "b.test not served after its ListenerSet was added"
    );
    let r = https(addr, tls.clone(), "b.test", "/").await.unwrap();
    assert_eq!(r.peer_cert, der_of(&crt_b));
    assert!(serves(addr, "a.test", "a").await);

    // A Gateway without allowedListeners ignores sets.
    gw.write(
        "set-c.yaml",
        &listener_set(SET_V1, "c", "closed", "c.test", closed_port, "cert-c", "c"),
    );
    // ...while a second set on the open Gateway, of the experimental kind, is served
    // beside the v1 one, so the change has been applied.
    gw.write(
        "set-c2.yaml",
        &listener_set(SET_V1A1, "c2", "gw", "c.test", port, "cert-c", "c"),
    );
    assert!(
        eventually(Duration::from_secs(10), || serves(addr, "c.test", "c")).await,
        "c.test not served through the open Gateway"
    );
    assert!(https(closed, fresh(), "c.test", "/").await.is_err());
    assert!(serves(closed, "a.test", "a").await);

    // Deleting the set's file takes b.test away; a.test and c.test stay.
    // (A fresh client each time: a cached TLS session would resume without a
    // certificate being chosen.)
    gw.remove("set-b.yaml");
    assert!(
        eventually(Duration::from_secs(10), || {
            let fresh = pki.client_config(&[b"h2", b"http/1.1"]);
            async move { https(addr, fresh, "b.test", "/").await.is_err() }
        })
        .await,
        "b.test still served after its ListenerSet was deleted"
    );
    assert!(serves(addr, "a.test", "a").await);
    assert!(serves(addr, "c.test", "c").await);
    gw.gw.stop().await;
}

/// `weir check` reads both kinds and reports a set's problem by its kind and field.
#[test]
fn check_reads_both_listener_set_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  gatewayClassName: weir
  allowedListeners: {namespaces: {from: Same}}
  listeners: [{name: http, protocol: HTTP, port: 8080}]
";
    let sets = "apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: v1}
spec:
  parentRef: {name: gw}
  listeners: [{name: extra, protocol: HTTP, port: 8081, hostname: v1.test}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XListenerSet
metadata: {name: x}
spec:
  parentRef: {name: gw}
  listeners: [{name: extra, protocol: HTTP, port: 8082, hostname: x.test}]
";
    std::fs::write(dir.path().join("gw.yaml"), gateway).unwrap();
    std::fs::write(dir.path().join("sets.yaml"), sets).unwrap();
    let check = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["check", "-c"])
            .arg(dir.path())
            .output()
            .unwrap()
    };
    let out = check();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");

    // A port that is not a number: the v1 set is named by its kind and the field.
    let bad = sets.replace("port: 8081", "port: eighty");
    std::fs::write(dir.path().join("sets.yaml"), bad).unwrap();
    let out = check();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "ListenerSet default/v1 is invalid: spec.listeners[0].port: Invalid value: \"string\": must be of type integer"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("XListenerSet"), "{stdout}");
    // The other two objects (the Gateway and the XListenerSet) are still read.
    assert!(stdout.contains("2 objects read"), "{stdout}");
}
