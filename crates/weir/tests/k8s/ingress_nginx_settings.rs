//! More ingress-nginx annotations read from Ingresses the API server stores, each with
//! the echo backends only: the `cors-*` settings, `session-cookie-*`,
//! `canary-by-header-value`, `backend-protocol: GRPC`, `ssl-redirect` (a TLS host and a
//! plaintext one), `service-upstream` and `limit-rps`.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::Ctx;
use crate::build::{self, until_http};
use crate::cluster;
use crate::ingress_nginx::{ING, get_from, ingress};
use crate::support::{self, eventually, send};

/// A Service (port 80) whose one EndpointSlice holds both echo backends (both listen on
/// the same port in their namespaces).
fn service_of_both(ctx: &Ctx, ns: &str, name: &str) -> [serde_json::Value; 2] {
    [
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
               "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80, "targetPort": ctx.a.port}]}}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": format!("{name}-1"), "namespace": ns,
                            "labels": {"kubernetes.io/service-name": name}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": [ctx.a.addr.to_string()], "conditions": {"ready": true}},
                             {"addresses": [ctx.b.addr.to_string()], "conditions": {"ready": true}}],
               "ports": [{"name": "http", "port": ctx.a.port, "protocol": "TCP"}]}),
    ]
}

/// The annotations that shape one answer, through the API server: a CORS preflight from
/// one of the `cors-allow-origin` list answered with that origin, the configured
/// methods, headers, credentials and max age, another origin refused, and an actual
/// request given the origin and `cors-expose-headers`; cookie affinity with
/// `session-cookie-name`/`-path`/`-max-age`/`-samesite` over a Service of two endpoints
/// (the cookie's attributes, `SameSite=None` with `Secure`, and every request carrying it
/// answered by one endpoint),
/// `session-cookie-expires` alone (weir writes it as `Max-Age`; not `Secure` over
/// plaintext) and `session-cookie-secure` (`Secure` over plaintext too); the cookie of
/// an Ingress served over TLS is `Secure`;
/// `canary-by-header-value` (the value sends to the canary, any other value stays);
/// `backend-protocol: GRPC` (the backend is spoken to over h2c: the echo backend reports
/// HTTP/2 where the same Service without it sees HTTP/1.1); `ssl-redirect` (plaintext
/// requests for the Ingress's TLS host 308 to https, which serves them; a host of the
/// same annotation without TLS served over plaintext); `service-upstream` (the Service's
/// cluster IP instead of its endpoints: a headless Service then has none, 503, where the
/// same Service without it is served).
pub async fn ingress_nginx_answer_settings(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7h";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    cluster::apply(c, &build::service(ns, "svc-b", &ctx.b)).await;
    cluster::apply(c, &service_of_both(&ctx, ns, "svc-ab")).await;
    let a = |name: &str, annotations: serde_json::Value| {
        ingress(ns, name, &format!("{name}.t7h.test"), "svc-a", annotations)
    };
    let (crt, key) = ctx.pki.leaf(&["secure.t7h.test"]);
    let mut secure = a(
        "secure",
        json!({"nginx.ingress.kubernetes.io/ssl-redirect": "true",
               "nginx.ingress.kubernetes.io/affinity": "cookie"}),
    );
    secure["spec"]["tls"] = json!([{"hosts": ["secure.t7h.test"], "secretName": "secure-cert"}]);
    let objects = [
        build::tls_secret(ns, "secure-cert", &crt, &key),
        a(
            "cors",
            json!({"nginx.ingress.kubernetes.io/enable-cors": "true",
                   "nginx.ingress.kubernetes.io/cors-allow-origin": "https://one.t7h.test, https://two.t7h.test",
                   "nginx.ingress.kubernetes.io/cors-allow-methods": "GET, PUT",
                   "nginx.ingress.kubernetes.io/cors-allow-headers": "X-Custom-Header",
                   "nginx.ingress.kubernetes.io/cors-expose-headers": "X-Trace",
                   "nginx.ingress.kubernetes.io/cors-allow-credentials": "true",
                   "nginx.ingress.kubernetes.io/cors-max-age": "600"}),
        ),
        ingress(
            ns,
            "sticky",
            "sticky.t7h.test",
            "svc-ab",
            json!({"nginx.ingress.kubernetes.io/affinity": "cookie",
                   "nginx.ingress.kubernetes.io/session-cookie-name": "SESS",
                   "nginx.ingress.kubernetes.io/session-cookie-path": "/app",
                   "nginx.ingress.kubernetes.io/session-cookie-max-age": "3600",
                   "nginx.ingress.kubernetes.io/session-cookie-samesite": "None"}),
        ),
        a(
            "expiring",
            json!({"nginx.ingress.kubernetes.io/affinity": "cookie",
                   "nginx.ingress.kubernetes.io/session-cookie-expires": "120"}),
        ),
        a(
            "securecookie",
            json!({"nginx.ingress.kubernetes.io/affinity": "cookie",
                   "nginx.ingress.kubernetes.io/session-cookie-secure": "true"}),
        ),
        a("valued", json!({})),
        ingress(
            ns,
            "valued-canary",
            "valued.t7h.test",
            "svc-b",
            json!({"nginx.ingress.kubernetes.io/canary": "true",
                   "nginx.ingress.kubernetes.io/canary-by-header": "X-Region",
                   "nginx.ingress.kubernetes.io/canary-by-header-value": "eu-west"}),
        ),
        a(
            "grpc",
            json!({"nginx.ingress.kubernetes.io/backend-protocol": "GRPC"}),
        ),
        a("plain", json!({})),
        secure,
        a(
            "notls",
            json!({"nginx.ingress.kubernetes.io/ssl-redirect": "true"}),
        ),
        a(
            "upstream",
            json!({"nginx.ingress.kubernetes.io/service-upstream": "true"}),
        ),
    ];
    let names: Vec<String> = objects[1..]
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    cluster::apply(c, &objects).await;
    let addr = ctx.ingress_http;
    until_http(addr, "upstream.t7h.test", "/", Err(503)).await;
    until_http(addr, "notls.t7h.test", "/", Ok("echo-a")).await;

    // CORS: the listed origins, methods, headers, credentials and max age.
    let r = support::check_ingress_nginx_cors(addr, "t7h.test", "echo-a").await;
    assert_eq!(r.header("access-control-allow-credentials"), "true");

    // Cookie affinity: the cookie's attributes, then one endpoint for every request
    // sending it (the Service has two).
    let r = support::http1(addr, "sticky.t7h.test", "/app/x")
        .await
        .unwrap();
    let set = r.header("set-cookie").to_owned();
    assert!(set.starts_with("SESS="), "{set:?}");
    assert!(set.contains("Path=/app"), "{set:?}");
    assert!(set.contains("Max-Age=3600"), "{set:?}");
    assert!(set.ends_with("; SameSite=None; Secure"), "{set:?}");
    let cookie = set.split(';').next().unwrap().to_owned();
    let first = r.echo_name().unwrap().to_owned();
    for _ in 0..12 {
        let r = send(
            addr,
            support::get("sticky.t7h.test", "/app/x").header("cookie", &cookie),
        )
        .await;
        assert_eq!(r.echo_name(), Some(first.as_str()), "{cookie} stays put");
    }
    let r = support::http1(addr, "expiring.t7h.test", "/")
        .await
        .unwrap();
    let set = r.header("set-cookie");
    assert!(
        set.starts_with("INGRESSCOOKIE="),
        "the default name: {set:?}"
    );
    assert!(set.contains("Max-Age=120"), "{set:?}");
    assert!(!set.contains("SameSite"), "{set:?}");
    assert!(
        !set.contains("Secure"),
        "not asked for, over plaintext: {set:?}"
    );
    // session-cookie-secure: `Secure` over plaintext as well.
    let r = support::http1(addr, "securecookie.t7h.test", "/")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let set = r.header("set-cookie");
    assert!(set.starts_with("INGRESSCOOKIE="), "{set:?}");
    assert!(set.ends_with("; Path=/; HttpOnly; Secure"), "{set:?}");

    // canary-by-header-value: only that value goes to the canary.
    until_http(addr, "valued.t7h.test", "/", Ok("echo-a")).await;
    for (value, want) in [("eu-west", "echo-b"), ("us-east", "echo-a")] {
        let r = send(
            addr,
            support::get("valued.t7h.test", "/").header("x-region", value),
        )
        .await;
        assert_eq!(r.echo_name(), Some(want), "X-Region: {value}");
    }

    // backend-protocol: GRPC speaks HTTP/2 without TLS to the backend.
    for (host, want) in [
        ("grpc.t7h.test", "HTTP/2.0"),
        ("plain.t7h.test", "HTTP/1.1"),
    ] {
        let r = support::http1(addr, host, "/").await.unwrap();
        assert_eq!(r.status, 200, "{host}: {}", r.body);
        assert_eq!(r.json()["protocol"], want, "{host}: {}", r.body);
    }

    // ssl-redirect: the TLS host is redirected, and served over https.
    let r = support::http1(addr, "secure.t7h.test", "/page?q=1")
        .await
        .unwrap();
    assert_eq!(r.status, 308, "{r:?}");
    assert_eq!(
        r.header("location"),
        format!(
            "https://secure.t7h.test:{}/page?q=1",
            ctx.ingress_https.port()
        )
    );
    assert!(r.echo_name().is_none());
    let served = eventually(Duration::from_secs(20), || async {
        support::https(
            ctx.ingress_https,
            ctx.pki.client_config(&[]),
            "secure.t7h.test",
            "/page",
        )
        .await
        .is_ok_and(|r| r.peer_cert == support::der_of(&crt) && r.resp.echo_name() == Some("echo-a"))
    })
    .await;
    assert!(served, "secure.t7h.test is served over https");
    // Its affinity cookie, set over TLS, is `Secure` (ingress-nginx's default there).
    let r = support::https(
        ctx.ingress_https,
        ctx.pki.client_config(&[]),
        "secure.t7h.test",
        "/page",
    )
    .await
    .unwrap();
    let set = r.resp.header("set-cookie");
    assert!(set.starts_with("INGRESSCOOKIE="), "{set:?}");
    assert!(
        set.ends_with("; Path=/; HttpOnly; Secure"),
        "over TLS: {set:?}"
    );
    let r = support::http1(addr, "notls.t7h.test", "/page")
        .await
        .unwrap();
    assert_eq!(
        r.echo_name(),
        Some("echo-a"),
        "without TLS the host is served over plaintext: {r:?}"
    );

    // service-upstream: the headless Service has no cluster IP to send to.
    let r = support::http1(addr, "upstream.t7h.test", "/")
        .await
        .unwrap();
    assert_eq!(r.status, 503, "{r:?}");
    until_http(addr, "plain.t7h.test", "/", Ok("echo-a")).await;

    for name in names {
        cluster::delete(c, ING.0, ING.1, ns, &name).await;
    }
}

/// `limit-rps: "1"` with `limit-burst-multiplier: "2"` through the API server, tested so
/// that it cannot depend on timing: 20 requests of one client sent one after another see
/// 429s (at most the burst, plus one per second spent, are served — far fewer than 20
/// unless sending them took many seconds), the 429 carries `Retry-After`, another client
/// address is served at once (the limit is per client), and the first client is served
/// again once its bucket refills. An Ingress without the annotation serves all 20.
pub async fn ingress_nginx_limit_rps(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7i";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    let limited = ingress(
        ns,
        "limited",
        "limited.t7i.test",
        "svc-a",
        json!({"nginx.ingress.kubernetes.io/limit-rps": "1",
               "nginx.ingress.kubernetes.io/limit-burst-multiplier": "2"}),
    );
    let free = ingress(ns, "free", "free.t7i.test", "svc-a", json!({}));
    cluster::apply(c, &[limited, free]).await;
    let addr = ctx.ingress_http;
    let me: IpAddr = [127, 0, 0, 1].into();
    let other: IpAddr = [127, 0, 0, 3].into();
    until_http(addr, "free.t7i.test", "/", Ok("echo-a")).await;
    until_http(addr, "limited.t7i.test", "/", Ok("echo-a")).await;

    // From 127.0.0.1, the address the kernel picks for the loopback connections below.
    let mut statuses = Vec::new();
    let mut refusal = None;
    for _ in 0..20 {
        let r = support::http1(addr, "limited.t7i.test", "/").await.unwrap();
        statuses.push(r.status.as_u16());
        if r.status == 429 {
            refusal.get_or_insert(r);
        }
    }
    let refusal = refusal.unwrap_or_else(|| panic!("a burst of 20 sees 429s: {statuses:?}"));
    assert!(
        refusal.headers.contains_key("retry-after") && refusal.echo_name().is_none(),
        "{refusal:?}"
    );
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    assert_eq!(
        get_from(other, addr, "limited.t7i.test", "/").await,
        200,
        "another client has its own bucket"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            get_from(me, addr, "limited.t7i.test", "/").await == 200
        })
        .await,
        "the first client is served again once its bucket refills"
    );
    for _ in 0..20 {
        assert_eq!(get_from(me, addr, "free.t7i.test", "/").await, 200);
    }
    for name in ["limited", "free"] {
        cluster::delete(c, ING.0, ING.1, ns, name).await;
    }
}
