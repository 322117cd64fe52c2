//! 1,000 HTTPRoutes attached to one Gateway: `attachedRoutes` follows creates and deletes
//! closely, in few Gateway status writes. Prints the figures (BENCHMARKS.md quotes them);
//! asserts only the outcome, never a time.

use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use serde_json::json;

use crate::build;
use crate::cluster::{self, wait_status};
use crate::{Ctx, GW_V1, ROUTE_V1, support};

const ROUTES: usize = 1000;

pub async fn attached_routes_follow_a_thousand_routes(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t8";
    let ip = ctx.gateway_ip();
    let port = support::free_port();
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    cluster::apply(
        c,
        &[build::gateway(
            ns,
            "gw",
            ip,
            json!([{"name": "http", "port": port, "protocol": "HTTP"}]),
        )],
    )
    .await;
    wait_status(c, GW_V1, ns, "gw", "Gateway programmed", |s| {
        s["listeners"][0]["attachedRoutes"] == 0
    })
    .await;
    ctx.controller.statuses_written().await;

    let stats = &ctx.controller.status_stats;
    let (gw0, all0) = (stats.gateway_writes(), stats.written());
    let t0 = Instant::now();
    futures_util::stream::iter(0..ROUTES)
        .map(|i| {
            let c = c.clone();
            async move {
                let host = format!("r{i}.t8.test");
                let r = build::route(
                    ns,
                    &format!("r{i}"),
                    json!([{"name": "gw"}]),
                    &[&host],
                    json!([build::rule("/", "svc-a", None)]),
                );
                cluster::create(&c, &r).await;
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let created = Instant::now();
    wait_status(c, GW_V1, ns, "gw", "1000 attached routes", |s| {
        s["listeners"][0]["attachedRoutes"] == ROUTES
    })
    .await;
    let attach_ms = created.elapsed().as_millis();
    ctx.controller.statuses_written().await;
    let (gw1, all1) = (stats.gateway_writes(), stats.written());
    println!(
        "SCALE create: {ROUTES} routes created in {} ms; attachedRoutes={ROUTES} {attach_ms} ms after the last create; Gateway status writes {}, all status writes {}",
        (created - t0).as_millis(),
        gw1 - gw0,
        all1 - all0
    );

    let t0 = Instant::now();
    futures_util::stream::iter(0..ROUTES)
        .map(|i| {
            let c = c.clone();
            async move { cluster::delete(&c, ROUTE_V1.0, ROUTE_V1.1, ns, &format!("r{i}")).await }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let deleted = Instant::now();
    wait_status(c, GW_V1, ns, "gw", "0 attached routes", |s| {
        s["listeners"][0]["attachedRoutes"] == 0
    })
    .await;
    let detach_ms = deleted.elapsed().as_millis();
    ctx.controller.statuses_written().await;
    println!(
        "SCALE delete: {ROUTES} routes deleted in {} ms; attachedRoutes=0 {detach_ms} ms after the last delete; Gateway status writes {}",
        (deleted - t0).as_millis(),
        stats.gateway_writes() - gw1
    );
}
