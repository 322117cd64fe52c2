//! GatewayClass, Gateway and HTTPRoute status and traffic; tenancy between Gateways; other
//! controllers' status left alone.

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::build::{self, until_http};
use crate::cluster::{self, condition, has, our_parent, wait_status};
use crate::{CLASS_V1, Ctx, GW_V1, ROUTE_V1, support};

fn listener(name: &str, port: u16) -> Value {
    json!({"name": name, "port": port, "protocol": "HTTP"})
}

fn generation_is(conds: &Value, g: i64) -> bool {
    conds
        .as_array()
        .is_some_and(|v| !v.is_empty() && v.iter().all(|c| c["observedGeneration"] == g))
}

pub async fn class_and_gateway_status_and_traffic(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t1";
    let ip = ctx.gateway_ip();
    let port = support::free_port();
    let addr = SocketAddr::from((ip, port));
    cluster::apply(
        c,
        &[
            build::namespace(ns, json!({})),
            build::gateway_class("other", "example.com/other"),
        ],
    )
    .await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    cluster::apply(c, &build::service(ns, "svc-b", &ctx.b)).await;
    cluster::apply(
        c,
        &[
            build::gateway(ns, "gw", ip, json!([listener("http", port)])),
            build::route(
                ns,
                "r1",
                json!([{"name": "gw"}]),
                &["app.t1.test"],
                json!([build::rule("/", "svc-a", None)]),
            ),
        ],
    )
    .await;

    let class = wait_status(c, CLASS_V1, "", "weir", "GatewayClass Accepted", |s| {
        has(&s["conditions"], "Accepted", "True", "Accepted")
    })
    .await;
    let features: Vec<&str> = class["supportedFeatures"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    assert!(
        features.contains(&"HTTPRoute") && features.contains(&"Gateway"),
        "{features:?}"
    );

    let gw = wait_status(c, GW_V1, ns, "gw", "Gateway programmed with 1 route", |s| {
        has(&s["conditions"], "Accepted", "True", "Accepted")
            && has(&s["conditions"], "Programmed", "True", "Programmed")
            && s["listeners"][0]["attachedRoutes"] == 1
    })
    .await;
    assert!(generation_is(&gw["conditions"], 1), "{gw:#}");
    assert_eq!(
        gw["addresses"],
        json!([{"type": "IPAddress", "value": ip.to_string()}])
    );
    let l = &gw["listeners"][0];
    assert_eq!(l["name"], "http");
    assert_eq!(
        l["supportedKinds"],
        json!([
            {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"},
            {"group": "gateway.networking.k8s.io", "kind": "GRPCRoute"}
        ])
    );
    assert!(
        has(&l["conditions"], "Accepted", "True", "Accepted"),
        "{l:#}"
    );
    assert!(
        has(&l["conditions"], "ResolvedRefs", "True", "ResolvedRefs"),
        "{l:#}"
    );
    assert!(
        has(&l["conditions"], "Conflicted", "False", "NoConflicts"),
        "{l:#}"
    );
    assert!(
        has(&l["conditions"], "Programmed", "True", "Programmed"),
        "{l:#}"
    );
    for cond in l["conditions"].as_array().unwrap() {
        assert!(
            cond["lastTransitionTime"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z')),
            "{cond}"
        );
    }

    let route = wait_status(c, ROUTE_V1, ns, "r1", "route accepted", |s| {
        our_parent(s, "gw").is_some_and(|p| {
            has(&p["conditions"], "Accepted", "True", "Accepted")
                && has(&p["conditions"], "ResolvedRefs", "True", "ResolvedRefs")
        })
    })
    .await;
    assert_eq!(
        route["parents"].as_array().unwrap().len(),
        1,
        "exactly one entry per parentRef: {route:#}"
    );

    until_http(addr, "app.t1.test", "/x", Ok("echo-a")).await;
    until_http(addr, "unknown.t1.test", "/x", Err(404)).await;

    // A change of backend: traffic moves, status follows the new generation.
    cluster::apply(
        c,
        &[build::route(
            ns,
            "r1",
            json!([{"name": "gw"}]),
            &["app.t1.test"],
            json!([build::rule("/", "svc-b", None)]),
        )],
    )
    .await;
    until_http(addr, "app.t1.test", "/x", Ok("echo-b")).await;
    wait_status(c, ROUTE_V1, ns, "r1", "observedGeneration 2", |s| {
        our_parent(s, "gw").is_some_and(|p| generation_is(&p["conditions"], 2))
    })
    .await;

    // The other class's GatewayClass is not ours: its status stays as the API server made it.
    let other = cluster::status(c, CLASS_V1.0, CLASS_V1.1, "", "other").await;
    assert!(
        condition(&other["conditions"], "Accepted").is_none_or(|a| a["status"] == "Unknown"),
        "{other:#}"
    );

    cluster::delete(c, ROUTE_V1.0, ROUTE_V1.1, ns, "r1").await;
    wait_status(c, GW_V1, ns, "gw", "0 attached routes", |s| {
        s["listeners"][0]["attachedRoutes"] == 0
    })
    .await;
    until_http(addr, "app.t1.test", "/x", Err(404)).await;
}

pub async fn tls_listener_and_invalid_certificate(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t2";
    let ip = ctx.gateway_ip();
    let (p1, p2, p3) = (
        support::free_port(),
        support::free_port(),
        support::free_port(),
    );
    let (cert, key) = ctx.pki.leaf(&["secure.t2.test"]);
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    let https = |name: &str, port: u16, host: &str, secret: &str| {
        json!({"name": name, "port": port, "protocol": "HTTPS", "hostname": host,
               "tls": {"mode": "Terminate", "certificateRefs": [{"name": secret}]}})
    };
    cluster::apply(
        c,
        &[
            build::tls_secret(ns, "good", &cert, &key),
            build::tls_secret(ns, "bad", "not a certificate", "not a key"),
            build::gateway(
                ns,
                "gw",
                ip,
                json!([
                    https("https", p1, "secure.t2.test", "good"),
                    https("https-bad", p2, "bad.t2.test", "bad"),
                    https("https-missing", p3, "missing.t2.test", "nope"),
                ]),
            ),
            build::route(
                ns,
                "r",
                json!([{"name": "gw", "sectionName": "https"}]),
                &["secure.t2.test"],
                json!([build::rule("/", "svc-a", None)]),
            ),
        ],
    )
    .await;
    let gw = wait_status(c, GW_V1, ns, "gw", "listener statuses", |s| {
        s["listeners"].as_array().is_some_and(|l| l.len() == 3)
            && s["listeners"][0]["attachedRoutes"] == 1
    })
    .await;
    let by_name = |n: &str| {
        gw["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == n)
            .unwrap()
            .clone()
    };
    let good = by_name("https");
    assert!(
        has(&good["conditions"], "ResolvedRefs", "True", "ResolvedRefs"),
        "{good:#}"
    );
    assert!(
        has(&good["conditions"], "Programmed", "True", "Programmed"),
        "{good:#}"
    );
    for n in ["https-bad", "https-missing"] {
        let l = by_name(n);
        assert!(
            has(
                &l["conditions"],
                "ResolvedRefs",
                "False",
                "InvalidCertificateRef"
            ),
            "{l:#}"
        );
        assert!(
            has(&l["conditions"], "Programmed", "False", "Invalid"),
            "{l:#}"
        );
    }
    // The Gateway as a whole stays accepted and serves the good listener.
    assert!(
        has(&gw["conditions"], "Accepted", "True", "Accepted"),
        "{gw:#}"
    );
    let addr = SocketAddr::from((ip, p1));
    let tls = ctx.pki.client_config(&[b"http/1.1"]);
    let ok = support::eventually(std::time::Duration::from_secs(20), || {
        let tls = tls.clone();
        let cert = cert.clone();
        async move {
            match support::https(addr, tls, "secure.t2.test", "/").await {
                Ok(r) => {
                    r.resp.status == 200
                        && r.resp.echo_name() == Some("echo-a")
                        && r.peer_cert == support::der_of(&cert)
                }
                Err(_) => false,
            }
        }
    })
    .await;
    assert!(ok, "HTTPS with SNI secure.t2.test through the Gateway");
}

pub async fn allowed_routes_differ_per_gateway(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ip = ctx.gateway_ip();
    let (p1, p2, p3) = (
        support::free_port(),
        support::free_port(),
        support::free_port(),
    );
    let gw_ns = "t3-gw";
    cluster::apply(
        c,
        &[
            build::namespace(gw_ns, json!({})),
            build::namespace("t3-app", json!({"team": "app"})),
            build::namespace("t3-other", json!({})),
        ],
    )
    .await;
    cluster::apply(c, &build::service("t3-app", "svc-a", &ctx.a)).await;
    cluster::apply(c, &build::service("t3-other", "svc-b", &ctx.b)).await;
    let l = |port: u16, from: Value| json!([{"name": "http", "port": port, "protocol": "HTTP", "allowedRoutes": {"namespaces": from}}]);
    cluster::apply(
        c,
        &[
            build::gateway(gw_ns, "same", ip, l(p1, json!({"from": "Same"}))),
            build::gateway(gw_ns, "all", ip, l(p2, json!({"from": "All"}))),
            build::gateway(
                gw_ns,
                "selected",
                ip,
                l(
                    p3,
                    json!({"from": "Selector", "selector": {"matchLabels": {"team": "app"}}}),
                ),
            ),
        ],
    )
    .await;
    let parents = json!([{"name": "same", "namespace": gw_ns}, {"name": "all", "namespace": gw_ns}, {"name": "selected", "namespace": gw_ns}]);
    cluster::apply(
        c,
        &[
            build::route(
                "t3-app",
                "r",
                parents.clone(),
                &["app.t3.test"],
                json!([build::rule("/", "svc-a", None)]),
            ),
            build::route(
                "t3-other",
                "r",
                parents,
                &["other.t3.test"],
                json!([build::rule("/", "svc-b", None)]),
            ),
        ],
    )
    .await;
    let accepted = |s: &Value, gw: &str, status: &str, reason: &str| {
        our_parent(s, gw).is_some_and(|p| has(&p["conditions"], "Accepted", status, reason))
    };
    wait_status(
        c,
        ROUTE_V1,
        "t3-app",
        "r",
        "app route: same refused, all + selected accepted",
        |s| {
            accepted(s, "same", "False", "NotAllowedByListeners")
                && accepted(s, "all", "True", "Accepted")
                && accepted(s, "selected", "True", "Accepted")
        },
    )
    .await;
    wait_status(
        c,
        ROUTE_V1,
        "t3-other",
        "r",
        "other route: only all accepted",
        |s| {
            accepted(s, "same", "False", "NotAllowedByListeners")
                && accepted(s, "all", "True", "Accepted")
                && accepted(s, "selected", "False", "NotAllowedByListeners")
        },
    )
    .await;
    for (gw, n) in [("same", 0), ("all", 2), ("selected", 1)] {
        wait_status(c, GW_V1, gw_ns, gw, &format!("{n} attached routes"), |s| {
            s["listeners"][0]["attachedRoutes"] == n
        })
        .await;
    }
    until_http(
        SocketAddr::from((ip, p2)),
        "other.t3.test",
        "/",
        Ok("echo-b"),
    )
    .await;
    until_http(SocketAddr::from((ip, p3)), "app.t3.test", "/", Ok("echo-a")).await;
    until_http(SocketAddr::from((ip, p3)), "other.t3.test", "/", Err(404)).await;
    until_http(SocketAddr::from((ip, p1)), "app.t3.test", "/", Err(404)).await;

    // Labels change: the other namespace joins the selector, its route attaches.
    cluster::apply(c, &[build::namespace("t3-other", json!({"team": "app"}))]).await;
    wait_status(c, GW_V1, gw_ns, "selected", "2 attached routes", |s| {
        s["listeners"][0]["attachedRoutes"] == 2
    })
    .await;
    until_http(
        SocketAddr::from((ip, p3)),
        "other.t3.test",
        "/",
        Ok("echo-b"),
    )
    .await;
}

pub async fn other_controllers_entries_are_left_intact(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t4";
    let ip = ctx.gateway_ip();
    let port = support::free_port();
    cluster::apply(
        c,
        &[
            build::namespace(ns, json!({})),
            build::gateway_class("other", "example.com/other"),
        ],
    )
    .await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    let foreign = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "foreign", "namespace": ns},
        "spec": {"gatewayClassName": "other", "listeners": [listener("http", 80)]}});
    let parents = json!([{"name": "gw"}, {"name": "foreign"}]);
    cluster::apply(
        c,
        &[
            build::gateway(ns, "gw", ip, json!([listener("http", port)])),
            foreign,
            build::route(
                ns,
                "r",
                parents.clone(),
                &["a.t4.test"],
                json!([build::rule("/", "svc-a", None)]),
            ),
        ],
    )
    .await;
    let s = wait_status(c, ROUTE_V1, ns, "r", "our entry", |s| {
        our_parent(s, "gw").is_some()
    })
    .await;
    assert_eq!(
        s["parents"].as_array().unwrap().len(),
        1,
        "no entry for a Gateway of another class: {s:#}"
    );

    // Another controller adds its own entry (deliberately odd-looking: it is not ours to judge).
    let theirs = json!({"parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "foreign"},
        "controllerName": "example.com/other",
        "conditions": [{"type": "Accepted", "status": "False", "reason": "SomethingOdd",
                        "message": "looks wrong to weir", "lastTransitionTime": "2020-01-01T00:00:00Z",
                        "observedGeneration": 1}]});
    let mut parents_now = s["parents"].as_array().unwrap().clone();
    parents_now.push(theirs.clone());
    cluster::patch_status(
        c,
        ROUTE_V1.0,
        ROUTE_V1.1,
        ns,
        "r",
        json!({"parents": parents_now}),
    )
    .await;

    // Our status changes (new generation): our entry is rewritten, theirs is kept verbatim.
    cluster::apply(
        c,
        &[build::route(
            ns,
            "r",
            parents,
            &["a.t4.test", "b.t4.test"],
            json!([build::rule("/", "svc-a", None)]),
        )],
    )
    .await;
    let s = wait_status(c, ROUTE_V1, ns, "r", "our entry at generation 2", |s| {
        our_parent(s, "gw").is_some_and(|p| generation_is(&p["conditions"], 2))
    })
    .await;
    let others: Vec<&Value> = s["parents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["controllerName"] != crate::CONTROLLER)
        .collect();
    assert_eq!(others, vec![&theirs], "{s:#}");
    until_http(SocketAddr::from((ip, port)), "b.t4.test", "/", Ok("echo-a")).await;
}

/// UDP: a UDP listener carries UDPRoute (`supportedKinds`, `attachedRoutes`), a UDPRoute
/// to a Service's UDP port is accepted with its references resolved, one on a TCP
/// listener is not allowed there, one to a Service without a UDP port of that number
/// has `BackendNotFound`; the GatewayClass claims UDPRoute. (Datagrams through weir are
/// covered by the e2e `udp.rs` and the conformance suite's GATEWAY-UDP profile.)
pub async fn udp_listener_and_route_status(ctx: Arc<Ctx>) {
    const UDP_ROUTE_V1: (&str, &str) = ("gateway.networking.k8s.io/v1", "UDPRoute");
    let c = &ctx.client;
    let ns = "tudp";
    let ip = ctx.gateway_ip();
    let (udp_port, tcp_port) = (support::free_port(), support::free_port());
    let udp_route = |name: &str, section: &str, svc: &str| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "UDPRoute",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"parentRefs": [{"name": "gw", "sectionName": section}],
                        "rules": [{"backendRefs": [{"name": svc, "port": 53}]}]}})
    };
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(
        c,
        &[
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "dns", "namespace": ns},
                   "spec": {"ports": [{"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                                      {"name": "dns", "port": 53, "protocol": "UDP"}]}}),
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "tcp-only", "namespace": ns},
                   "spec": {"ports": [{"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}}),
            build::gateway(
                ns,
                "gw",
                ip,
                json!([{"name": "dns", "port": udp_port, "protocol": "UDP"},
                       {"name": "tcp", "port": tcp_port, "protocol": "TCP"}]),
            ),
            udp_route("u1", "dns", "dns"),
            udp_route("on-tcp", "tcp", "dns"),
        ],
    )
    .await;
    let gw = wait_status(c, GW_V1, ns, "gw", "UDP listener with 1 route", |s| {
        has(&s["conditions"], "Programmed", "True", "Programmed")
            && s["listeners"][0]["attachedRoutes"] == 1
    })
    .await;
    let l = &gw["listeners"][0];
    assert_eq!(l["name"], "dns");
    assert_eq!(
        l["supportedKinds"],
        json!([{"group": "gateway.networking.k8s.io", "kind": "UDPRoute"}])
    );
    assert!(
        has(&l["conditions"], "Programmed", "True", "Programmed"),
        "{l:#}"
    );
    wait_status(c, UDP_ROUTE_V1, ns, "u1", "UDPRoute accepted", |s| {
        our_parent(s, "gw").is_some_and(|p| {
            has(&p["conditions"], "Accepted", "True", "Accepted")
                && has(&p["conditions"], "ResolvedRefs", "True", "ResolvedRefs")
        })
    })
    .await;
    wait_status(
        c,
        UDP_ROUTE_V1,
        ns,
        "on-tcp",
        "UDPRoute not allowed on TCP",
        |s| {
            our_parent(s, "gw").is_some_and(|p| {
                has(
                    &p["conditions"],
                    "Accepted",
                    "False",
                    "NotAllowedByListeners",
                )
            })
        },
    )
    .await;
    cluster::apply(c, &[udp_route("u1", "dns", "tcp-only")]).await;
    wait_status(
        c,
        UDP_ROUTE_V1,
        ns,
        "u1",
        "UDPRoute without a UDP port",
        |s| {
            our_parent(s, "gw")
                .is_some_and(|p| has(&p["conditions"], "ResolvedRefs", "False", "BackendNotFound"))
        },
    )
    .await;
    let class = wait_status(c, CLASS_V1, "", "weir", "GatewayClass Accepted", |s| {
        has(&s["conditions"], "Accepted", "True", "Accepted")
    })
    .await;
    assert!(
        class["supportedFeatures"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["name"] == "UDPRoute"),
        "{class:#}"
    );
}
