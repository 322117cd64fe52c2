//! Ingress v1: traffic, `status.loadBalancer`, Ingresses of other classes left alone, and
//! the class in the legacy `kubernetes.io/ingress.class` annotation.

use std::sync::Arc;

use serde_json::json;

use crate::Ctx;
use crate::build::{self, until_http};
use crate::cluster::{self, wait_status};

const ING: (&str, &str) = ("networking.k8s.io/v1", "Ingress");

fn ingress(ns: &str, name: &str, class: &str, host: &str, svc: &str) -> serde_json::Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
    "metadata": {"name": name, "namespace": ns},
    "spec": {"ingressClassName": class, "rules": [{"host": host, "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": svc, "port": {"number": 80}}}},
        {"path": "/exact", "pathType": "Exact", "backend": {"service": {"name": "svc-b", "port": {"name": "http"}}}}
    ]}}]}})
}

/// An Ingress without `spec.ingressClassName` whose class is in the legacy annotation.
fn legacy(ns: &str, name: &str, class: &str, host: &str, svc: &str) -> serde_json::Value {
    let mut ing = ingress(ns, name, class, host, svc);
    ing["spec"]
        .as_object_mut()
        .unwrap()
        .remove("ingressClassName");
    ing["metadata"]["annotations"] = json!({"kubernetes.io/ingress.class": class});
    ing
}

pub async fn ingress_traffic_and_status(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    cluster::apply(c, &build::service(ns, "svc-b", &ctx.b)).await;
    cluster::apply(
        c,
        &[
            ingress(ns, "ours", "weir", "ing.t7.test", "svc-a"),
            ingress(ns, "theirs", "nginx", "theirs.t7.test", "svc-a"),
            legacy(ns, "legacy", "weir", "legacy.t7.test", "svc-b"),
            legacy(
                ns,
                "legacy-theirs",
                "nginx",
                "legacy-theirs.t7.test",
                "svc-a",
            ),
            // Keeps the Ingress listener bound after "ours" is deleted (it is unbound with the
            // last Ingress).
            ingress(ns, "keeper", "weir", "keeper.t7.test", "svc-b"),
        ],
    )
    .await;
    until_http(ctx.ingress_http, "ing.t7.test", "/anything", Ok("echo-a")).await;
    until_http(ctx.ingress_http, "ing.t7.test", "/exact", Ok("echo-b")).await;
    until_http(ctx.ingress_http, "ing.t7.test", "/exact/more", Ok("echo-a")).await;
    until_http(ctx.ingress_http, "theirs.t7.test", "/", Err(404)).await;
    // No ingressClassName: the legacy annotation names the class.
    until_http(ctx.ingress_http, "legacy.t7.test", "/", Ok("echo-b")).await;
    until_http(ctx.ingress_http, "legacy-theirs.t7.test", "/", Err(404)).await;
    let ip = ctx.ingress_http.ip().to_string();
    for name in ["ours", "legacy"] {
        wait_status(c, ING, ns, name, "loadBalancer address", |s| {
            s["loadBalancer"]["ingress"] == json!([{"ip": ip}])
        })
        .await;
    }
    // Give the writer every chance to (wrongly) write the other class's Ingresses.
    ctx.controller.statuses_written().await;
    for name in ["theirs", "legacy-theirs"] {
        let theirs = cluster::status(c, ING.0, ING.1, ns, name).await;
        assert!(theirs["loadBalancer"]["ingress"].is_null(), "{theirs:#}");
    }
    cluster::delete(c, ING.0, ING.1, ns, "legacy").await;
    until_http(ctx.ingress_http, "legacy.t7.test", "/", Err(404)).await;

    cluster::delete(c, ING.0, ING.1, ns, "ours").await;
    until_http(ctx.ingress_http, "ing.t7.test", "/anything", Err(404)).await;
}

/// An ingress-nginx canary Ingress through the API server: created before its main
/// Ingress it serves nothing; once the main Ingress exists, `canary-weight: "100"` sends
/// every request to the canary's Service; deleting the canary leaves the main one's.
pub async fn ingress_nginx_canary_follows_its_main_ingress(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7n";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    cluster::apply(c, &build::service(ns, "svc-b", &ctx.b)).await;
    let mut canary = ingress(ns, "canary", "weir", "canary.t7n.test", "svc-b");
    canary["metadata"]["annotations"] = json!({
        "nginx.ingress.kubernetes.io/canary": "true",
        "nginx.ingress.kubernetes.io/canary-weight": "100",
    });
    cluster::apply(c, &[canary]).await;
    until_http(ctx.ingress_http, "canary.t7n.test", "/", Err(404)).await;
    cluster::apply(
        c,
        &[ingress(ns, "main", "weir", "canary.t7n.test", "svc-a")],
    )
    .await;
    until_http(ctx.ingress_http, "canary.t7n.test", "/", Ok("echo-b")).await;
    cluster::delete(c, ING.0, ING.1, ns, "canary").await;
    until_http(ctx.ingress_http, "canary.t7n.test", "/", Ok("echo-a")).await;
    cluster::delete(c, ING.0, ING.1, ns, "main").await;
}

/// The status of one request with a declared body of `len` bytes (sent whole), on a new
/// connection: `None` when nothing parsable came back.
async fn post_status(addr: std::net::SocketAddr, host: &str, len: usize) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let run = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let head = format!(
            "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
        );
        s.write_all(head.as_bytes()).await.ok()?;
        // The answer may come (and the connection close) before the body is taken.
        let _ = s.write_all(&vec![b'x'; len]).await;
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out)
            .split(' ')
            .nth(1)?
            .parse()
            .ok()
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), run)
        .await
        .ok()
        .flatten()
}

/// ingress-nginx annotations through the API server: `proxy-body-size: 1k` answers a
/// declared 2 KiB body 413 while a 512-byte one reaches the Service; with
/// `force-ssl-redirect` and Basic auth on one Ingress, a plain-HTTP request is
/// redirected (308) before any credentials are asked for (ingress-nginx's order).
pub async fn ingress_nginx_body_size_and_redirect_first(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7b";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    let mut sized = ingress(ns, "sized", "weir", "sized.t7b.test", "svc-a");
    sized["metadata"]["annotations"] = json!({"nginx.ingress.kubernetes.io/proxy-body-size": "1k"});
    let mut guarded = ingress(ns, "guarded", "weir", "guarded.t7b.test", "svc-a");
    guarded["metadata"]["annotations"] = json!({
        "nginx.ingress.kubernetes.io/force-ssl-redirect": "true",
        "nginx.ingress.kubernetes.io/auth-type": "basic",
        "nginx.ingress.kubernetes.io/auth-secret": "no-such-secret",
    });
    cluster::apply(c, &[sized, guarded]).await;
    until_http(ctx.ingress_http, "sized.t7b.test", "/", Ok("echo-a")).await;
    let over = crate::support::eventually(std::time::Duration::from_secs(20), || async {
        post_status(ctx.ingress_http, "sized.t7b.test", 2048).await == Some(413)
    })
    .await;
    assert!(over, "a 2 KiB body over proxy-body-size 1k is refused 413");
    assert_eq!(
        post_status(ctx.ingress_http, "sized.t7b.test", 512).await,
        Some(200),
        "a body within the limit is forwarded"
    );
    until_http(ctx.ingress_http, "guarded.t7b.test", "/", Err(308)).await;
    for name in ["sized", "guarded"] {
        cluster::delete(c, ING.0, ING.1, ns, name).await;
    }
}

/// `weir migrate --from-cluster` (`migrate_cluster`) reads the Ingresses through the API
/// server: an ingress-nginx Ingress (legacy class annotation) with Basic auth from a
/// Secret and a named Service port is written as an HTTPRoute with the port resolved, a
/// TrafficPolicy and the users' Secret; an Ingress of another class is named and left.
pub async fn migrate_reads_the_ingresses_of_a_cluster(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7m";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-b", &ctx.b)).await;
    // `openssl passwd -apr1 -salt xyzabc secret`
    let htpasswd = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "htpasswd", "namespace": ns},
        "stringData": {"auth": "ann:$apr1$xyzabc$cTvtri5GYS9vQXkM4wcQi.\n"}});
    let mut shop = legacy(ns, "shop", "nginx", "shop.t7m.test", "svc-b");
    shop["metadata"]["annotations"] = json!({
        "kubernetes.io/ingress.class": "nginx",
        "nginx.ingress.kubernetes.io/auth-type": "basic",
        "nginx.ingress.kubernetes.io/auth-secret": "htpasswd",
        "nginx.ingress.kubernetes.io/limit-connections": "4",
    });
    let other = ingress(ns, "other", "traefik", "other.t7m.test", "svc-b");
    cluster::apply(c, &[htpasswd, shop, other]).await;

    let opts = weir::migrate::MigrateOptions {
        config: Default::default(),
        gateway_name: "weir".into(),
        gateway_namespace: "weir-system".into(),
        gateway_class: "weir".into(),
        http_port: 80,
        https_port: 443,
        address: None,
        ingress_classes: vec!["nginx".into()],
    };
    let m = weir::migrate::migrate_cluster(&opts, c.clone())
        .await
        .unwrap();
    let report = m.report();
    let find = |kind: &str, name: &str| {
        m.objects
            .iter()
            .find(|o| {
                o["kind"] == kind
                    && o["metadata"]["name"] == name
                    && o["metadata"]["namespace"] == ns
            })
            .unwrap_or_else(|| panic!("no {kind} {ns}/{name}: {report}"))
            .clone()
    };
    let route = find("HTTPRoute", "shop");
    let refs = &route["spec"]["rules"][1]["backendRefs"][0];
    assert_eq!(refs["name"], "svc-b", "{route:#}");
    // The `/exact` path names its port `http`, read from the Service: 80.
    assert_eq!(refs["port"], 80, "{route:#}");
    let policy = find("TrafficPolicy", "shop-nginx");
    assert_eq!(
        policy["spec"]["basicAuth"]["secretRef"]["name"],
        "shop-basic-auth"
    );
    assert_eq!(policy["spec"]["concurrencyLimit"]["perClient"], 4);
    let users = find("Secret", "shop-basic-auth");
    assert_eq!(
        users["stringData"]["auth"], "ann:$apr1$xyzabc$cTvtri5GYS9vQXkM4wcQi.\n",
        "the users read from the cluster's Secret"
    );
    assert!(
        report.contains(&format!("Ingress {ns}/other: info: class \"traefik\"")),
        "{report}"
    );
    assert!(
        !m.objects.iter().any(|o| o["metadata"]["name"] == "other"),
        "{report}"
    );
    for name in ["shop", "other"] {
        cluster::delete(c, ING.0, ING.1, ns, name).await;
    }
}
