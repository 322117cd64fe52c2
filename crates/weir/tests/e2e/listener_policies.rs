//! Policies on one Gateway listener (`sectionName`) and on a ListenerSet (whole, and one
//! of its listeners), from files: on one socket shared by four listeners, each level's
//! local rate-limit burst shows which policy a request got — rule > route > listener >
//! Gateway, a set's listener > the set > the Gateway — and a listener policy covers only
//! its own listener's hosts. Removing the listener policy gives its hosts the Gateway's.

use std::time::Duration;

use crate::support::*;

/// A Gateway `gw` with listeners `a` (a.test) and `b` (b.test) on one port, a
/// ListenerSet `set` with `s` (s.test) and `t` (t.test) there too, and routes: `ra` on
/// listener `a` (rules `plain` on `/` and `ruled` on `/rule`), `rr` (a.test `/route`),
/// `rb` on `b`, `rs` on the set's listeners.
fn manifests(port: u16, backend_yaml: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{type: IPAddress, value: 127.0.0.1}}]
  allowedListeners: {{namespaces: {{from: Same}}}}
  listeners:
  - {{name: a, protocol: HTTP, port: {port}, hostname: a.test}}
  - {{name: b, protocol: HTTP, port: {port}, hostname: b.test}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {{name: set}}
spec:
  parentRef: {{name: gw}}
  listeners:
  - {{name: s, protocol: HTTP, port: {port}, hostname: s.test}}
  - {{name: t, protocol: HTTP, port: {port}, hostname: t.test}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: ra}}
spec:
  parentRefs: [{{name: gw, sectionName: a}}]
  rules:
  - name: plain
    backendRefs: [{{group: weir.dev, kind: Backend, name: a}}]
  - name: ruled
    matches: [{{path: {{type: PathPrefix, value: /rule}}}}]
    backendRefs: [{{group: weir.dev, kind: Backend, name: a}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: rr}}
spec:
  parentRefs: [{{name: gw, sectionName: a}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /route}}}}]
    backendRefs: [{{group: weir.dev, kind: Backend, name: a}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: rb}}
spec:
  parentRefs: [{{name: gw, sectionName: b}}]
  rules: [{{backendRefs: [{{group: weir.dev, kind: Backend, name: a}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: rs}}
spec:
  parentRefs: [{{group: gateway.networking.k8s.io, kind: ListenerSet, name: set}}]
  rules: [{{backendRefs: [{{group: weir.dev, kind: Backend, name: a}}]}}]
---
{backend_yaml}"
    )
}

/// A TrafficPolicy `name` on `target` (a flow-style targetRef) allowing `burst` requests
/// per client (then 429 for an hour).
fn limit(name: &str, target: &str, burst: u32) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: {name}}}
spec:
  targetRefs: [{target}]
  rateLimit:
    local: {{requests: 1, unit: Hour, burst: {burst}, key: {{type: Header, header: x-client}}}}
"
    )
}

fn policies() -> String {
    [
        limit(
            "gateway",
            "{group: gateway.networking.k8s.io, kind: Gateway, name: gw}",
            1,
        ),
        limit(
            "listener",
            "{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: a}",
            2,
        ),
        limit(
            "route",
            "{group: gateway.networking.k8s.io, kind: HTTPRoute, name: rr}",
            3,
        ),
        limit(
            "rule",
            "{group: gateway.networking.k8s.io, kind: HTTPRoute, name: ra, sectionName: ruled}",
            4,
        ),
        limit(
            "set",
            "{group: gateway.networking.k8s.io, kind: ListenerSet, name: set}",
            5,
        ),
        limit(
            "set-listener",
            "{group: gateway.networking.k8s.io, kind: ListenerSet, name: set, sectionName: t}",
            6,
        ),
    ]
    .join("---\n")
}

async fn call(addr: std::net::SocketAddr, host: &str, path: &str, client: &str) -> u16 {
    let req = get(host, path)
        .header("x-client", client)
        .body(http_body_util::Empty::new())
        .unwrap();
    send_http1(addr, req).await.unwrap().status.as_u16()
}

/// How many requests of a new client pass before the first 429 (at most 10).
async fn burst(addr: std::net::SocketAddr, host: &str, path: &str, client: &str) -> u32 {
    for n in 0..10 {
        match call(addr, host, path, client).await {
            200 => {}
            429 => return n,
            other => panic!("{host}{path}: status {other}"),
        }
    }
    10
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_and_listener_set_policies_take_their_place_in_the_precedence() {
    let port = free_port();
    let a = echo("a").await;
    let gw = Gateway::start(&[
        ("app.yaml", manifests(port, &backend("default", "a", &[a]))),
        ("policy.yaml", policies()),
    ])
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    // A new client per probe: one whose burst straddles the load spends budgets of
    // both configurations.
    let probe = std::sync::atomic::AtomicU32::new(0);
    let next = || {
        let n = probe.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("probe-{n}")
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            burst(addr, "t.test", "/", &next()).await == 6
        })
        .await,
        "the policies apply"
    );
    // Rule > route > listener > Gateway.
    assert_eq!(burst(addr, "a.test", "/rule", "c1").await, 4, "rule");
    assert_eq!(burst(addr, "a.test", "/route", "c1").await, 3, "route");
    assert_eq!(burst(addr, "a.test", "/", "c1").await, 2, "listener a");
    // Listener b shares the socket but not listener a's policy: the Gateway's.
    assert_eq!(burst(addr, "b.test", "/", "c1").await, 1, "Gateway on b");
    // The set's listeners: `t` has its own policy, `s` the set's.
    assert_eq!(burst(addr, "t.test", "/", "c1").await, 6, "set listener t");
    assert_eq!(burst(addr, "s.test", "/", "c1").await, 5, "set on s");

    // Without the listener policy, listener a's hosts get the Gateway's.
    let without: Vec<String> = policies()
        .split("---\n")
        .filter(|p| !p.contains("name: listener}"))
        .map(str::to_owned)
        .collect();
    gw.write("policy.yaml", &without.join("---\n"));
    assert!(
        eventually(Duration::from_secs(5), || async {
            burst(addr, "a.test", "/", &next()).await == 1
        })
        .await,
        "listener a falls back to the Gateway's policy"
    );
    assert_eq!(burst(addr, "a.test", "/", "c3").await, 1, "Gateway on a");
    assert_eq!(burst(addr, "a.test", "/route", "c3").await, 3, "route");
    assert_eq!(burst(addr, "s.test", "/", "c3").await, 5, "set on s");
}
