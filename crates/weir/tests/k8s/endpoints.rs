//! EndpointSlices as a Deployment's controllers write them: a Service scaled to zero and
//! back, and a rolling update of three endpoints under traffic.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::build::{self, until_http};
use crate::cluster::{self, has, our_parent, wait_status};
use crate::env::NetnsBackend;
use crate::{Ctx, ROUTE_V1, support};

/// An EndpointSlice of Service `svc` with these endpoints (address, ready, serving,
/// terminating), all on the backends' port 8080.
fn slice(ns: &str, svc: &str, endpoints: &[(Ipv4Addr, bool, bool, bool)]) -> Value {
    let eps: Vec<Value> = endpoints
        .iter()
        .map(|(b, ready, serving, terminating)| {
            json!({"addresses": [b.to_string()],
                   "conditions": {"ready": ready, "serving": serving, "terminating": terminating}})
        })
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": format!("{svc}-1"), "namespace": ns,
                        "labels": {"kubernetes.io/service-name": svc}},
           "addressType": "IPv4",
           "endpoints": eps,
           "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
}

async fn gateway_and_route(ctx: &Ctx, ns: &str, host: &str) -> SocketAddr {
    let c = &ctx.client;
    let ip = ctx.gateway_ip();
    let addr = SocketAddr::from((ip, support::free_port()));
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(
        c,
        &[
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "namespace": ns},
                   "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
            build::gateway(
                ns,
                "gw",
                ip,
                json!([{"name": "http", "port": addr.port(), "protocol": "HTTP"}]),
            ),
            build::route(
                ns,
                "r",
                json!([{"name": "gw"}]),
                &[host],
                json!([build::rule("/", "svc", None)]),
            ),
        ],
    )
    .await;
    wait_status(c, ROUTE_V1, ns, "r", "Accepted", |s| {
        our_parent(s, "gw").is_some_and(|p| has(&p["conditions"], "Accepted", "True", "Accepted"))
    })
    .await;
    addr
}

/// Scaled to zero, a Service's slice has no endpoints (the API server stores the emptied
/// lists as `null`): weir answers 503 instead of sending traffic to the gone pods'
/// addresses (the backend here keeps running, so a stale endpoint would answer 200).
pub async fn scale_to_zero_and_back(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let (ns, host) = ("t-zero", "zero.test");
    let addr = gateway_and_route(&ctx, ns, host).await;
    cluster::apply(c, &[slice(ns, "svc", &[(ctx.a.addr, true, true, false)])]).await;
    until_http(addr, host, "/", Ok("echo-a")).await;

    // What the EndpointSlice controller writes when the last pod is gone: empty lists,
    // which the API server (protobuf in etcd) hands back as `null`.
    let mut empty = slice(ns, "svc", &[]);
    empty["ports"] = json!([]);
    cluster::apply(c, &[empty]).await;
    let stored = cluster::get(c, "discovery.k8s.io/v1", "EndpointSlice", ns, "svc-1").await;
    println!(
        "  scaled to zero, the API server stores endpoints = {}, ports = {}",
        stored["endpoints"], stored["ports"]
    );
    until_http(addr, host, "/", Err(503)).await;

    cluster::apply(c, &[slice(ns, "svc", &[(ctx.b.addr, true, true, false)])]).await;
    until_http(addr, host, "/", Ok("echo-b")).await;
}

/// Three old endpoints replaced by three new ones while a client loops on the route: the
/// old pods turn terminating (still serving through their grace period) before the new
/// ones are ready — so for a while no endpoint is ready and the serving terminating ones
/// must take the traffic, as kube-proxy does — then the new ones turn ready one at a time
/// and each old pod is removed and stopped after its grace period. Not one request fails.
pub async fn rolling_update_loses_no_request(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let (ns, host) = ("t-roll", "roll.test");
    let addr = gateway_and_route(&ctx, ns, host).await;
    let old: Vec<NetnsBackend> = (0..3)
        .map(|i| NetnsBackend::start(20 + i, &format!("old-{i}")))
        .collect();
    let new: Vec<NetnsBackend> = (0..3)
        .map(|i| NetnsBackend::start(30 + i, &format!("new-{i}")))
        .collect();
    let all_ready: Vec<_> = old.iter().map(|b| (b.addr, true, true, false)).collect();
    cluster::apply(c, &[slice(ns, "svc", &all_ready)]).await;
    until_http(addr, host, "/", Ok("old-0")).await;

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let client = {
        let (stop, ok, failures) = (stop.clone(), ok.clone(), failures.clone());
        let host = host.to_string();
        tokio::spawn(async move {
            // Bounded: at most 200,000 requests or until told to stop.
            for _ in 0..200_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                match support::http1(addr, &host, "/").await {
                    Ok(r) if r.status == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(r) => failures
                        .lock()
                        .unwrap()
                        .push(format!("status {}", r.status)),
                    Err(e) => failures.lock().unwrap().push(format!("error {e}")),
                }
            }
        })
    };
    let grace = Duration::from_millis(1500);
    // 1. Every old pod terminating but serving; the new pods exist, not ready yet.
    let mut eps: Vec<(Ipv4Addr, bool, bool, bool)> = old
        .iter()
        .map(|b| (b.addr, false, true, true))
        .chain(new.iter().map(|b| (b.addr, false, false, false)))
        .collect();
    cluster::apply(c, &[slice(ns, "svc", &eps)]).await;
    tokio::time::sleep(grace).await;
    // 2. The new pods turn ready one at a time; then each old pod, past its grace period,
    //    is removed from the slice and stopped.
    for i in 0..3 {
        eps[3 + i] = (new[i].addr, true, true, false);
        cluster::apply(c, &[slice(ns, "svc", &eps)]).await;
        tokio::time::sleep(grace / 3).await;
    }
    tokio::time::sleep(grace).await;
    // Old pods are stopped only once the data plane sends to the new ones alone (ready
    // endpoints are preferred over terminating ones): kubelet's grace period stands for
    // the time that takes to propagate, which on a loaded machine can outlast the sleeps.
    let admin = ctx.controller.admin_addr;
    let quoted = |b: &NetnsBackend| format!("\"{}:8080\"", b.addr);
    assert!(
        support::eventually(Duration::from_secs(20), || async {
            let config = support::http1(admin, "localhost", "/config")
                .await
                .map(|r| r.body)
                .unwrap_or_default();
            new.iter().all(|b| config.contains(&quoted(b)))
                && !old.iter().any(|b| config.contains(&quoted(b)))
        })
        .await,
        "the data plane does not send to the new pods alone"
    );
    let mut old = old;
    for _ in 0..3 {
        eps.remove(0);
        cluster::apply(c, &[slice(ns, "svc", &eps)]).await;
        tokio::time::sleep(grace / 3).await;
        drop(old.remove(0));
    }
    tokio::time::sleep(grace).await;
    stop.store(true, Ordering::Relaxed);
    client.await.unwrap();
    let failures = failures.lock().unwrap().clone();
    let ok = ok.load(Ordering::Relaxed);
    println!(
        "  rolling update: {ok} requests answered 200, {} failed",
        failures.len()
    );
    assert!(ok > 0, "the client sent no request");
    assert!(
        failures.is_empty(),
        "{} requests failed during the rolling update, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    // Only the new pods answer now.
    let r = support::http1(addr, host, "/").await.unwrap();
    assert!(
        r.echo_name().is_some_and(|n| n.starts_with("new-")),
        "{:?}",
        r.echo_name()
    );
}
