//! XListenerSets in standalone mode: a set adds an HTTPS hostname (with its own
//! certificate) to a Gateway's socket while it runs, routes attach to the set's listener,
//! and deleting the set's file takes the hostname away without disturbing the Gateway.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;

fn listener_set(
    name: &str,
    parent: &str,
    host: &str,
    port: u16,
    secret: &str,
    backend: &str,
) -> String {
    format!(
        "apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XListenerSet
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
  parentRefs: [{{group: gateway.networking.x-k8s.io, kind: XListenerSet, name: {name}, sectionName: https}}]
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
        &listener_set("b", "gw", "b.test", port, "cert-b", "b"),
    );
    assert!(
        eventually(Duration::from_secs(10), || serves(addr, "b.test", "b")).await,
        "b.test not served after its XListenerSet was added"
    );
    let r = https(addr, tls.clone(), "b.test", "/").await.unwrap();
    assert_eq!(r.peer_cert, der_of(&crt_b));
    assert!(serves(addr, "a.test", "a").await);

    // A Gateway without allowedListeners ignores sets.
    gw.write(
        "set-c.yaml",
        &listener_set("c", "closed", "c.test", closed_port, "cert-c", "c"),
    );
    // ...while a second set on the open Gateway is served, so the change has been applied.
    gw.write(
        "set-c2.yaml",
        &listener_set("c2", "gw", "c.test", port, "cert-c", "c"),
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
        "b.test still served after its XListenerSet was deleted"
    );
    assert!(serves(addr, "a.test", "a").await);
    assert!(serves(addr, "c.test", "c").await);
    gw.gw.stop().await;
}
