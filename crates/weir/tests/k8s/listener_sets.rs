//! XListenerSet (Gateway API experimental channel): status written by the controller and
//! traffic through a set's listener on its parent Gateway's address.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::build;
use crate::cluster::{self, has, our_parent, wait_status};
use crate::{Ctx, GW_V1, ROUTE_V1, support};

const SET_V1A1: (&str, &str) = ("gateway.networking.x-k8s.io/v1alpha1", "XListenerSet");

fn listener_set(
    ns: &str,
    name: &str,
    parent_ns: &str,
    host: &str,
    port: u16,
    secret: &str,
) -> serde_json::Value {
    json!({"apiVersion": SET_V1A1.0, "kind": SET_V1A1.1,
           "metadata": {"name": name, "namespace": ns},
           "spec": {"parentRef": {"name": "gw", "namespace": parent_ns},
                    "listeners": [{"name": "https", "port": port, "protocol": "HTTPS",
                                   "hostname": host,
                                   "tls": {"mode": "Terminate", "certificateRefs": [{"name": secret}]}}]}})
}

pub async fn listener_set_status_and_traffic(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let (ns, other) = ("t-sets", "t-sets-other");
    let ip = ctx.gateway_ip();
    let (http_port, https_port) = (support::free_port(), support::free_port());
    let (cert, key) = ctx.pki.leaf(&["set.t-sets.test"]);
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
            listener_set(ns, "set", ns, "set.t-sets.test", https_port, "set-cert"),
            listener_set(
                other,
                "foreign",
                ns,
                "foreign.t-sets.test",
                https_port,
                "set-cert",
            ),
            build::route(
                ns,
                "r",
                json!([{"group": "gateway.networking.x-k8s.io", "kind": "XListenerSet",
                        "name": "set", "sectionName": "https"}]),
                &[],
                json!([build::rule("/", "svc-a", None)]),
            ),
        ],
    )
    .await;

    let set = wait_status(c, SET_V1A1, ns, "set", "set accepted with a route", |s| {
        has(&s["conditions"], "Accepted", "True", "Accepted")
            && s["listeners"][0]["attachedRoutes"] == 1
    })
    .await;
    assert!(
        has(&set["conditions"], "Programmed", "True", "Programmed"),
        "{set:#}"
    );
    assert_eq!(set["listeners"][0]["port"], https_port, "{set:#}");
    let l = &set["listeners"][0]["conditions"];
    assert!(has(l, "ResolvedRefs", "True", "ResolvedRefs"), "{set:#}");
    assert!(has(l, "Programmed", "True", "Programmed"), "{set:#}");

    let foreign = wait_status(c, SET_V1A1, other, "foreign", "foreign set refused", |s| {
        has(&s["conditions"], "Accepted", "False", "NotAllowed")
    })
    .await;
    assert!(
        has(&foreign["conditions"], "Programmed", "False", "Invalid"),
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
    let route = wait_status(c, ROUTE_V1, ns, "r", "route accepted by the set", |s| {
        our_parent(s, "set").is_some_and(|p| has(&p["conditions"], "Accepted", "True", "Accepted"))
    })
    .await;
    assert_eq!(
        our_parent(&route, "set").unwrap()["parentRef"]["kind"],
        "XListenerSet"
    );

    // Traffic: the set's hostname on the Gateway's address, with the set's certificate.
    let addr = SocketAddr::from((ip, https_port));
    let served = support::eventually(Duration::from_secs(20), || {
        let tls = ctx.pki.client_config(&[b"http/1.1"]);
        async move {
            support::https(addr, tls, "set.t-sets.test", "/")
                .await
                .is_ok_and(|r| r.resp.status == 200 && r.resp.echo_name() == Some("echo-a"))
        }
    })
    .await;
    assert!(
        served,
        "set.t-sets.test not served through the XListenerSet"
    );
    let r = support::https(
        addr,
        ctx.pki.client_config(&[b"http/1.1"]),
        "set.t-sets.test",
        "/",
    )
    .await
    .unwrap();
    assert_eq!(r.peer_cert, support::der_of(&cert));
    // The refused set's hostname is not served.
    assert!(
        support::https(
            addr,
            ctx.pki.client_config(&[b"http/1.1"]),
            "foreign.t-sets.test",
            "/"
        )
        .await
        .is_err()
    );

    // Deleting the set takes its hostname away and detaches it from the Gateway.
    cluster::delete(c, SET_V1A1.0, SET_V1A1.1, ns, "set").await;
    let gone = support::eventually(Duration::from_secs(20), || {
        let tls = ctx.pki.client_config(&[b"http/1.1"]);
        async move {
            support::https(addr, tls, "set.t-sets.test", "/")
                .await
                .is_err()
        }
    })
    .await;
    assert!(
        gone,
        "set.t-sets.test still served after its XListenerSet was deleted"
    );
    wait_status(c, GW_V1, ns, "gw", "no set attached", |s| {
        has(
            &s["conditions"],
            "AttachedListenerSets",
            "False",
            "NoListenerSetsAttached",
        )
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
