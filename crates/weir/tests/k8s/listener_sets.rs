//! ListenerSet (gateway.networking.k8s.io/v1, Gateway API v1.5+) and XListenerSet (v1.4's
//! experimental channel; the test cluster has both CRDs, see scripts/k8s-env): status
//! written by the controller and traffic through a set's listener on its parent Gateway's
//! address, and TrafficPolicies on a set, one of its listeners and a Gateway listener
//! (status and a rate limit). One scenario, run once per kind.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::build;
use crate::cluster::{self, has, our_parent, wait_status};
use crate::{CONTROLLER, Ctx, GW_V1, ROUTE_V1, support};

const POLICY_V1: (&str, &str) = ("weir.dev/v1alpha1", "TrafficPolicy");

const SET_V1: (&str, &str) = ("gateway.networking.k8s.io/v1", "ListenerSet");
const SET_V1A1: (&str, &str) = ("gateway.networking.x-k8s.io/v1alpha1", "XListenerSet");

fn listener_set(
    kind: (&str, &str),
    ns: &str,
    name: &str,
    parent_ns: &str,
    host: &str,
    port: u16,
    secret: &str,
) -> serde_json::Value {
    json!({"apiVersion": kind.0, "kind": kind.1,
           "metadata": {"name": name, "namespace": ns},
           "spec": {"parentRef": {"name": "gw", "namespace": parent_ns},
                    "listeners": [{"name": "https", "port": port, "protocol": "HTTPS",
                                   "hostname": host,
                                   "tls": {"mode": "Terminate", "certificateRefs": [{"name": secret}]}}]}})
}

pub async fn listener_set_status_and_traffic(ctx: Arc<Ctx>) {
    set_status_and_traffic(ctx, SET_V1, "t-sets").await
}

pub async fn xlistener_set_status_and_traffic(ctx: Arc<Ctx>) {
    set_status_and_traffic(ctx, SET_V1A1, "t-xsets").await
}

async fn set_status_and_traffic(ctx: Arc<Ctx>, kind: (&'static str, &'static str), ns: &str) {
    let c = &ctx.client;
    let other = &format!("{ns}-other");
    let (set_host, foreign_host) = (format!("set.{ns}.test"), format!("foreign.{ns}.test"));
    let group = kind.0.rsplit_once('/').unwrap().0;
    let ip = ctx.gateway_ip();
    let (http_port, https_port) = (support::free_port(), support::free_port());
    let (cert, key) = ctx.pki.leaf(&[set_host.as_str()]);
    cluster::apply(
        c,
        &[
            build::namespace(ns, json!({})),
            build::namespace(other, json!({})),
        ],
    )
    .await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    let mut gw = build::gateway(
        ns,
        "gw",
        ip,
        json!([{"name": "http", "port": http_port, "protocol": "HTTP"}]),
    );
    gw["spec"]["allowedListeners"] = json!({"namespaces": {"from": "Same"}});
    cluster::apply(
        c,
        &[
            build::tls_secret(ns, "set-cert", &cert, &key),
            build::tls_secret(other, "set-cert", &cert, &key),
            gw,
            listener_set(kind, ns, "set", ns, &set_host, https_port, "set-cert"),
            listener_set(
                kind,
                other,
                "foreign",
                ns,
                &foreign_host,
                https_port,
                "set-cert",
            ),
            build::route(
                ns,
                "r",
                json!([{"group": group, "kind": kind.1,
                        "name": "set", "sectionName": "https"}]),
                &[],
                json!([build::rule("/", "svc-a", None)]),
            ),
        ],
    )
    .await;

    let set = wait_status(c, kind, ns, "set", "set accepted with a route", |s| {
        has(&s["conditions"], "Accepted", "True", "Accepted")
            && s["listeners"][0]["attachedRoutes"] == 1
    })
    .await;
    assert!(
        has(&set["conditions"], "Programmed", "True", "Programmed"),
        "{set:#}"
    );
    // Only v1alpha1 has (and requires) the port in a listener's status.
    if kind == SET_V1A1 {
        assert_eq!(set["listeners"][0]["port"], https_port, "{set:#}");
    } else {
        assert!(set["listeners"][0].get("port").is_none(), "{set:#}");
    }
    let l = &set["listeners"][0]["conditions"];
    assert!(has(l, "ResolvedRefs", "True", "ResolvedRefs"), "{set:#}");
    assert!(has(l, "Programmed", "True", "Programmed"), "{set:#}");

    let foreign = wait_status(c, kind, other, "foreign", "foreign set refused", |s| {
        has(&s["conditions"], "Accepted", "False", "NotAllowed")
    })
    .await;
    assert!(
        has(&foreign["conditions"], "Programmed", "False", "NotAllowed"),
        "{foreign:#}"
    );

    let gw = wait_status(c, GW_V1, ns, "gw", "AttachedListenerSets", |s| {
        has(
            &s["conditions"],
            "AttachedListenerSets",
            "True",
            "ListenerSetsAttached",
        )
    })
    .await;
    assert!(
        has(&gw["conditions"], "Programmed", "True", "Programmed"),
        "{gw:#}"
    );
    // The count of Gateway API v1.5+ (the refused set is not attached). The Gateway CRD
    // of older versions has no such field (the API server drops it), and those versions
    // have no ListenerSet CRD either (`WEIR_GATEWAY_API_VERSION=v1.4.0`).
    let v1_5 = cluster::served(c, SET_V1.0, SET_V1.1).await;
    if v1_5 {
        assert_eq!(gw["attachedListenerSets"], 1, "{gw:#}");
    }
    let route = wait_status(c, ROUTE_V1, ns, "r", "route accepted by the set", |s| {
        our_parent(s, "set").is_some_and(|p| has(&p["conditions"], "Accepted", "True", "Accepted"))
    })
    .await;
    assert_eq!(
        our_parent(&route, "set").unwrap()["parentRef"]["kind"],
        kind.1
    );

    // Traffic: the set's hostname on the Gateway's address, with the set's certificate.
    let addr = SocketAddr::from((ip, https_port));
    let served = support::eventually(Duration::from_secs(20), || {
        let tls = ctx.pki.client_config(&[b"http/1.1"]);
        let h = set_host.clone();
        async move {
            support::https(addr, tls, &h, "/")
                .await
                .is_ok_and(|r| r.resp.status == 200 && r.resp.echo_name() == Some("echo-a"))
        }
    })
    .await;
    assert!(served, "{set_host} not served through the {}", kind.1);
    let r = support::https(addr, ctx.pki.client_config(&[b"http/1.1"]), &set_host, "/")
        .await
        .unwrap();
    assert_eq!(r.peer_cert, support::der_of(&cert));
    // The refused set's hostname is not served.
    assert!(
        support::https(
            addr,
            ctx.pki.client_config(&[b"http/1.1"]),
            &foreign_host,
            "/"
        )
        .await
        .is_err()
    );

    // Policies on a Gateway listener (`sectionName`) and on the set (whole, and one of
    // its listeners): Accepted where the listener exists, TargetNotFound where it does
    // not; the set's rate limit answers its hostname.
    let gw_ref = |section: &str| {
        json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw",
               "sectionName": section})
    };
    let set_ref = |section: Option<&str>| {
        let mut r = json!({"group": group, "kind": kind.1, "name": "set"});
        if let Some(s) = section {
            r["sectionName"] = s.into();
        }
        r
    };
    let traffic_policy = |name: &str, targets: serde_json::Value, spec: serde_json::Value| {
        let mut spec = spec;
        spec["targetRefs"] = targets;
        json!({"apiVersion": POLICY_V1.0, "kind": POLICY_V1.1,
               "metadata": {"name": name, "namespace": ns}, "spec": spec})
    };
    cluster::apply(
        c,
        &[
            traffic_policy(
                "on-listener",
                json!([gw_ref("http"), gw_ref("nope")]),
                json!({"timeouts": {"request": "30s"}}),
            ),
            traffic_policy(
                "on-set",
                json!([set_ref(None), set_ref(Some("https")), set_ref(Some("nope"))]),
                json!({"rateLimit": {"local": {"requests": 1, "unit": "Hour", "burst": 1,
                                               "key": {"type": "Target"}}}}),
            ),
        ],
    )
    .await;
    let entry =
        |s: &serde_json::Value, name: &str, section: Option<&str>, status: &str, reason: &str| {
            s["ancestors"].as_array().is_some_and(|a| {
                a.iter().any(|e| {
                    e["controllerName"] == CONTROLLER
                        && e["ancestorRef"]["name"] == name
                        && e["ancestorRef"]["sectionName"].as_str() == section
                        && has(&e["conditions"], "Accepted", status, reason)
                })
            })
        };
    wait_status(c, POLICY_V1, ns, "on-listener", "listener targets", |s| {
        entry(s, "gw", Some("http"), "True", "Accepted")
            && entry(s, "gw", Some("nope"), "False", "TargetNotFound")
    })
    .await;
    wait_status(c, POLICY_V1, ns, "on-set", "set targets", |s| {
        entry(s, "set", None, "True", "Accepted")
            && entry(s, "set", Some("https"), "True", "Accepted")
            && entry(s, "set", Some("nope"), "False", "TargetNotFound")
    })
    .await;
    let limited = support::eventually(Duration::from_secs(20), || {
        let tls = ctx.pki.client_config(&[b"http/1.1"]);
        let h = set_host.clone();
        async move {
            support::https(addr, tls, &h, "/")
                .await
                .is_ok_and(|r| r.resp.status == 429)
        }
    })
    .await;
    assert!(limited, "the set's rate limit never answered {set_host}");
    cluster::delete(c, POLICY_V1.0, POLICY_V1.1, ns, "on-set").await;
    cluster::delete(c, POLICY_V1.0, POLICY_V1.1, ns, "on-listener").await;

    // Deleting the set takes its hostname away and detaches it from the Gateway.
    cluster::delete(c, kind.0, kind.1, ns, "set").await;
    let gone = support::eventually(Duration::from_secs(20), || {
        let tls = ctx.pki.client_config(&[b"http/1.1"]);
        let h = set_host.clone();
        async move { support::https(addr, tls, &h, "/").await.is_err() }
    })
    .await;
    assert!(
        gone,
        "{set_host} still served after its {} was deleted",
        kind.1
    );
    wait_status(c, GW_V1, ns, "gw", "no set attached", |s| {
        has(
            &s["conditions"],
            "AttachedListenerSets",
            "False",
            "NoListenerSetsAttached",
        ) && (!v1_5 || s["attachedListenerSets"] == 0)
    })
    .await;

    // Deleting the Gateway: the status writer forgets it (its memory follows the live
    // Gateways).
    let remembered = ctx.controller.remembered_gateways();
    cluster::delete(c, GW_V1.0, GW_V1.1, ns, "gw").await;
    let forgotten = support::eventually(Duration::from_secs(20), || {
        let ctx = ctx.clone();
        async move { ctx.controller.remembered_gateways() + 1 == remembered }
    })
    .await;
    assert!(
        forgotten,
        "the status writer still remembers {} Gateways (was {remembered})",
        ctx.controller.remembered_gateways()
    );
}
