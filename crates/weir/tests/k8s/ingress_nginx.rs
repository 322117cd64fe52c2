//! ingress-nginx annotations read from Ingresses the API server stores: those that change
//! one request (rewrites, redirects, address ranges, CORS, header canaries, affinity),
//! those that refuse, limit or replace answers (basic and external authorization, rate,
//! timeouts, error pages), `limit-connections` (requests of one client in progress at once) and `ssl-passthrough`
//! (TLS spliced by SNI on the Ingress HTTPS listener).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::{ServerName, pem::PemObject};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Ctx;
use crate::build::{self, until_http};
use crate::cluster;
use crate::ingress_nginx_backends::{endpoint_service, host_side};
use crate::support::{self, BoxError, Pki, der_of, eventually, holding_backend, send};

pub const ING: (&str, &str) = ("networking.k8s.io/v1", "Ingress");

pub fn ingress(ns: &str, name: &str, host: &str, svc: &str, annotations: Value) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
    "metadata": {"name": name, "namespace": ns, "annotations": annotations},
    "spec": {"ingressClassName": "weir", "rules": [{"host": host, "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": svc, "port": {"number": 80}}}}
    ]}}]}})
}

/// A plaintext HTTP/1.1 GET from source address `from`; its status (0: no answer).
pub async fn get_from(from: IpAddr, to: SocketAddr, host: &str, path: &str) -> u16 {
    let run = async {
        let sock = tokio::net::TcpSocket::new_v4().ok()?;
        sock.bind(SocketAddr::new(from, 0)).ok()?;
        let mut s = sock.connect(to).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out)
            .split(' ')
            .nth(1)?
            .parse()
            .ok()
    };
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// `limit-connections: "1"` through the API server: while a request of a client is in
/// progress (held by a backend the test runs on the host side of backend `a`'s veth
/// pair), that client's next request is answered 503 and another client address is
/// served; once the held request is answered the client is served again. An Ingress
/// without the annotation serves the same client's requests side by side.
pub async fn ingress_nginx_limit_connections(ctx: Arc<Ctx>) {
    use std::sync::atomic::Ordering;
    let c = &ctx.client;
    let ns = "t7c";
    let (held, release, waiting) = holding_backend(host_side(&ctx).into()).await;
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &endpoint_service(ns, "held", &[held])).await;
    let limited = ingress(
        ns,
        "limited",
        "limited.t7c.test",
        "held",
        json!({"nginx.ingress.kubernetes.io/limit-connections": "1"}),
    );
    let free = ingress(ns, "free", "free.t7c.test", "held", json!({}));
    cluster::apply(c, &[limited, free]).await;
    let addr = ctx.ingress_http;
    until_http(addr, "limited.t7c.test", "/", Err(200)).await;
    until_http(addr, "free.t7c.test", "/", Err(200)).await;
    let me: IpAddr = [127, 0, 0, 1].into();
    let other: IpAddr = [127, 0, 0, 2].into();

    for host in ["limited.t7c.test", "free.t7c.test"] {
        release.send_replace(false);
        let slow = tokio::spawn(get_from(me, addr, host, "/hold"));
        // Probe only once the held request is in progress: a probe racing it could take
        // the client's one place first and have the held request refused instead.
        assert!(
            eventually(Duration::from_secs(10), || async {
                waiting.load(Ordering::SeqCst) == 1
            })
            .await,
            "{host}: the held request reaches the backend"
        );
        if host == "limited.t7c.test" {
            assert_eq!(
                get_from(me, addr, host, "/").await,
                503,
                "a second request of one client in progress is refused 503"
            );
            assert_eq!(
                get_from(other, addr, host, "/").await,
                200,
                "another client address is served meanwhile"
            );
        } else {
            // Without the annotation, the same client's requests run side by side.
            for _ in 0..5 {
                assert_eq!(get_from(me, addr, host, "/").await, 200);
            }
        }
        release.send_replace(true);
        assert_eq!(
            slow.await.unwrap(),
            200,
            "{host}: the held request is served"
        );
        // The place is given back when weir drops the response, just after sending it.
        assert!(
            eventually(Duration::from_secs(10), || async {
                get_from(me, addr, host, "/").await == 200
            })
            .await,
            "{host}: the place is given back once the held request is answered"
        );
    }
    for name in ["limited", "free"] {
        cluster::delete(c, ING.0, ING.1, ns, name).await;
    }
}

/// A TLS server on `ip` (certificate for `names`, signed by `pki`) that answers each
/// connection with `label:` followed by everything the client sent.
async fn tls_backend(ip: Ipv4Addr, pki: &Pki, names: &[&str], label: &'static str) -> SocketAddr {
    let (crt, key) = pki.leaf(names);
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der_of(&crt)], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let mut got = Vec::new();
                if tls.read_to_end(&mut got).await.is_ok() {
                    let mut out = format!("{label}:").into_bytes();
                    out.extend_from_slice(&got);
                    let _ = tls.write_all(&out).await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    addr
}

/// TLS to `addr` with SNI `sni` trusting `pki`: sends `msg`, half-closes, reads the
/// answer.
async fn tls_exchange(
    addr: SocketAddr,
    pki: &Pki,
    sni: &str,
    msg: &str,
) -> Result<String, BoxError> {
    let run = async {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        let connector = tokio_rustls::TlsConnector::from(pki.client_config(&[]));
        let mut tls = connector
            .connect(ServerName::try_from(sni.to_string())?, stream)
            .await?;
        tls.write_all(msg.as_bytes()).await?;
        tls.shutdown().await?;
        let mut out = String::new();
        tls.read_to_string(&mut out).await?;
        Ok::<_, BoxError>(out)
    };
    tokio::time::timeout(Duration::from_secs(5), run).await?
}

/// `ssl-passthrough: "true"` through the API server: on the Ingress HTTPS listener a TLS
/// connection for the Ingress's host is spliced to its Service's endpoint, which does the
/// handshake with its own certificate (weir holds none for that name); another
/// Ingress's TLS host on the same port is terminated by weir with its Secret; a name
/// neither serves gets no handshake. Deleting the passthrough Ingress stops the splice.
///
/// The TLS backend runs in this process on the host side of backend `a`'s veth pair
/// (the API server refuses loopback endpoints, and `a`'s namespace runs `weir echo`).
pub async fn ingress_nginx_ssl_passthrough(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7d";
    let backend = tls_backend(host_side(&ctx), &ctx.pki, &["pass.t7d.test"], "pass").await;
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    cluster::apply(
        c,
        &[
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "tls-pass", "namespace": ns},
                   "spec": {"clusterIP": "None", "ports": [{"name": "https", "port": 80, "targetPort": backend.port()}]}}),
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": "tls-pass-1", "namespace": ns,
                                "labels": {"kubernetes.io/service-name": "tls-pass"}},
                   "addressType": "IPv4",
                   "endpoints": [{"addresses": [backend.ip().to_string()], "conditions": {"ready": true}}],
                   "ports": [{"name": "https", "port": backend.port(), "protocol": "TCP"}]}),
        ],
    )
    .await;
    let (crt, key) = ctx.pki.leaf(&["web.t7d.test"]);
    let mut web = ingress(ns, "web", "web.t7d.test", "svc-a", json!({}));
    web["spec"]["tls"] = json!([{"hosts": ["web.t7d.test"], "secretName": "web-cert"}]);
    let pass = ingress(
        ns,
        "pass",
        "pass.t7d.test",
        "tls-pass",
        json!({"nginx.ingress.kubernetes.io/ssl-passthrough": "true"}),
    );
    cluster::apply(
        c,
        &[build::tls_secret(ns, "web-cert", &crt, &key), web, pass],
    )
    .await;
    let https = ctx.ingress_https;
    let spliced = eventually(Duration::from_secs(20), || async {
        tls_exchange(https, &ctx.pki, "pass.t7d.test", "hello")
            .await
            .is_ok_and(|got| got == "pass:hello")
    })
    .await;
    assert!(
        spliced,
        "pass.t7d.test is spliced to the backend, whose certificate the client verified"
    );
    let terminated = eventually(Duration::from_secs(20), || async {
        support::https(https, ctx.pki.client_config(&[b"h2"]), "web.t7d.test", "/")
            .await
            .is_ok_and(|r| r.peer_cert == der_of(&crt) && r.resp.echo_name() == Some("echo-a"))
    })
    .await;
    assert!(
        terminated,
        "web.t7d.test is terminated by weir with its Secret and routed to svc-a"
    );
    assert!(
        tls_exchange(https, &ctx.pki, "none.t7d.test", "x")
            .await
            .is_err(),
        "a name nothing serves gets no handshake"
    );
    cluster::delete(c, ING.0, ING.1, ns, "pass").await;
    let stopped = eventually(Duration::from_secs(20), || async {
        tls_exchange(https, &ctx.pki, "pass.t7d.test", "hello")
            .await
            .is_err()
    })
    .await;
    assert!(stopped, "no splice once the Ingress is deleted");
    cluster::delete(c, ING.0, ING.1, ns, "web").await;
}

/// An Ingress whose paths are `(path, pathType, Service)`.
pub fn ingress_paths(
    ns: &str,
    name: &str,
    host: &str,
    paths: &[(&str, &str, &str)],
    annotations: Value,
) -> Value {
    let paths: Vec<Value> = paths
        .iter()
        .map(|(path, kind, svc)| {
            json!({"path": path, "pathType": kind,
                   "backend": {"service": {"name": svc, "port": {"number": 80}}}})
        })
        .collect();
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
    "metadata": {"name": name, "namespace": ns, "annotations": annotations},
    "spec": {"ingressClassName": "weir", "rules": [{"host": host, "http": {"paths": paths}}]}})
}

/// One HTTP/1.1 request to `addr` built by `req`.
/// The ingress-nginx annotations that change one request, read from Ingresses stored by
/// the API server (the standalone tests read the same from files): `rewrite-target`
/// with capture groups on an `ImplementationSpecific` regex path, `use-regex`,
/// `server-alias`, `upstream-vhost`, `x-forwarded-prefix`, `app-root`,
/// `permanent-redirect`, `temporal-redirect`, `whitelist-source-range` and
/// `denylist-source-range` (the client is 127.0.0.1), `enable-cors` (a preflight
/// answered by weir), `canary-by-header` and cookie `affinity`.
pub async fn ingress_nginx_request_annotations(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7e";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    cluster::apply(c, &build::service(ns, "svc-b", &ctx.b)).await;
    let a = |name: &str, host: &str, annotations: Value| {
        ingress_paths(ns, name, host, &[("/", "Prefix", "svc-a")], annotations)
    };
    let objects = [
        ingress_paths(
            ns,
            "api",
            "api.t7e.test",
            &[
                ("/something(/|$)(.*)", "ImplementationSpecific", "svc-a"),
                ("/", "Prefix", "svc-b"),
            ],
            json!({"nginx.ingress.kubernetes.io/rewrite-target": "/$2",
                   "nginx.ingress.kubernetes.io/server-alias": "www.api.t7e.test"}),
        ),
        ingress_paths(
            ns,
            "versions",
            "versions.t7e.test",
            &[
                ("/v[0-9]+/items", "ImplementationSpecific", "svc-a"),
                ("/", "Prefix", "svc-b"),
            ],
            json!({"nginx.ingress.kubernetes.io/use-regex": "true"}),
        ),
        ingress_paths(
            ns,
            "shop",
            "shop.t7e.test",
            &[("/shop", "Prefix", "svc-a")],
            json!({"nginx.ingress.kubernetes.io/rewrite-target": "/",
                   "nginx.ingress.kubernetes.io/upstream-vhost": "internal.t7e.test",
                   "nginx.ingress.kubernetes.io/x-forwarded-prefix": "/shop",
                   "nginx.ingress.kubernetes.io/app-root": "/shop"}),
        ),
        a(
            "moved",
            "moved.t7e.test",
            json!({"nginx.ingress.kubernetes.io/permanent-redirect": "https://new.example.com/landing"}),
        ),
        a(
            "away",
            "away.t7e.test",
            json!({"nginx.ingress.kubernetes.io/temporal-redirect": "https://elsewhere.example.com/"}),
        ),
        a(
            "inside",
            "inside.t7e.test",
            json!({"nginx.ingress.kubernetes.io/whitelist-source-range": "10.0.0.0/8"}),
        ),
        a(
            "local",
            "local.t7e.test",
            json!({"nginx.ingress.kubernetes.io/whitelist-source-range": "127.0.0.0/8"}),
        ),
        a(
            "denied",
            "denied.t7e.test",
            json!({"nginx.ingress.kubernetes.io/denylist-source-range": "127.0.0.0/8"}),
        ),
        a(
            "cors",
            "cors.t7e.test",
            json!({"nginx.ingress.kubernetes.io/enable-cors": "true"}),
        ),
        a("stable", "canary.t7e.test", json!({})),
        ingress_paths(
            ns,
            "stable-canary",
            "canary.t7e.test",
            &[("/", "Prefix", "svc-b")],
            json!({"nginx.ingress.kubernetes.io/canary": "true",
                   "nginx.ingress.kubernetes.io/canary-by-header": "X-Canary"}),
        ),
        a(
            "sticky",
            "sticky.t7e.test",
            json!({"nginx.ingress.kubernetes.io/affinity": "cookie",
                   "nginx.ingress.kubernetes.io/session-cookie-name": "route"}),
        ),
    ];
    let names: Vec<String> = objects
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    cluster::apply(c, &objects).await;
    let addr = ctx.ingress_http;
    // The last Ingresses applied are served once these are.
    until_http(addr, "sticky.t7e.test", "/", Ok("echo-a")).await;
    until_http(addr, "canary.t7e.test", "/", Ok("echo-a")).await;

    // (host, request path, backend, path and query the backend sees)
    let rewrites = [
        ("api.t7e.test", "/something", "echo-a", "/"),
        ("api.t7e.test", "/something/new?x=1", "echo-a", "/new?x=1"),
        ("www.api.t7e.test", "/something/alias", "echo-a", "/alias"),
        ("api.t7e.test", "/other", "echo-b", "/"),
        ("versions.t7e.test", "/v2/items/7", "echo-a", "/v2/items/7"),
        ("versions.t7e.test", "/vx/items", "echo-b", "/vx/items"),
    ];
    for (host, path, want, seen_path) in rewrites {
        let r = support::http1(addr, host, path).await.unwrap();
        assert_eq!(r.status, 200, "{host}{path}: {}", r.body);
        assert_eq!(r.echo_name(), Some(want), "{host}{path}");
        let seen = r.json();
        let full = match seen["query"].as_str().filter(|q| !q.is_empty()) {
            Some(q) => format!("{}?{q}", seen["path"].as_str().unwrap()),
            None => seen["path"].as_str().unwrap().to_owned(),
        };
        assert_eq!(full, seen_path, "{host}{path}: {seen}");
    }

    let r = support::http1(addr, "shop.t7e.test", "/shop/cart")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let seen = r.json();
    assert_eq!(seen["path"], "/", "{seen}");
    assert_eq!(seen["headers"]["host"], "internal.t7e.test", "{seen}");
    assert_eq!(seen["headers"]["x-forwarded-prefix"], "/shop", "{seen}");
    let r = support::http1(addr, "shop.t7e.test", "/").await.unwrap();
    assert_eq!(r.status, 302, "app-root");
    assert_eq!(
        r.headers.get("location").unwrap(),
        &format!("http://shop.t7e.test:{}/shop", addr.port())
    );

    let r = support::http1(addr, "moved.t7e.test", "/old")
        .await
        .unwrap();
    assert_eq!(r.status, 301);
    assert_eq!(
        r.headers.get("location").unwrap(),
        "https://new.example.com/landing"
    );
    let r = support::http1(addr, "away.t7e.test", "/old").await.unwrap();
    assert_eq!(r.status, 302);
    assert_eq!(
        r.headers.get("location").unwrap(),
        "https://elsewhere.example.com/"
    );

    for (host, want) in [
        ("inside.t7e.test", 403),
        ("local.t7e.test", 200),
        ("denied.t7e.test", 403),
    ] {
        let r = support::http1(addr, host, "/").await.unwrap();
        assert_eq!(r.status.as_u16(), want, "{host}: {}", r.body);
    }

    let preflight = http::Request::options("/")
        .header("host", "cors.t7e.test")
        .header("origin", "https://app.t7e.test")
        .header("access-control-request-method", "PUT");
    let r = send(addr, preflight).await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(
        r.headers.get("access-control-allow-origin").unwrap(),
        "https://app.t7e.test"
    );
    assert!(r.echo_name().is_none(), "the preflight is answered by weir");

    let r = send(
        addr,
        support::get("canary.t7e.test", "/").header("x-canary", "always"),
    )
    .await;
    assert_eq!(
        r.echo_name(),
        Some("echo-b"),
        "X-Canary: always goes to the canary"
    );
    let r = send(
        addr,
        support::get("canary.t7e.test", "/").header("x-canary", "never"),
    )
    .await;
    assert_eq!(r.echo_name(), Some("echo-a"), "X-Canary: never stays");

    let r = support::http1(addr, "sticky.t7e.test", "/").await.unwrap();
    let set = r
        .headers
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(
        set.starts_with("route="),
        "the affinity cookie is set: {set:?}"
    );

    for name in names {
        cluster::delete(c, ING.0, ING.1, ns, &name).await;
    }
}

/// The ingress-nginx annotations that refuse, limit or replace answers, read from
/// Ingresses the API server stores: `auth-type: basic` with an htpasswd Secret (401, then
/// 200 with the user's password), `limit-rpm` with `limit-burst-multiplier: "1"` (the
/// second request of the minute 429), `canary-by-cookie`, `proxy-connect-timeout` +
/// `proxy-read-timeout` of 1 s each (504 for a backend answering after 10 s: weir gives an
/// attempt their sum to answer) and `custom-http-errors` with `default-backend`
/// (a 503 of the Service answered by the default backend, told the code; a 500 passed).
pub async fn ingress_nginx_access_limits_and_errors(ctx: Arc<Ctx>) {
    use base64::Engine;
    let c = &ctx.client;
    let ns = "t7f";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    cluster::apply(c, &build::service(ns, "svc-b", &ctx.b)).await;
    let a = |name: &str, annotations: Value| {
        ingress(ns, name, &format!("{name}.t7f.test"), "svc-a", annotations)
    };
    // `openssl passwd -apr1 -salt xyzabc secret`
    let htpasswd = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "htpasswd", "namespace": ns},
        "stringData": {"auth": "ann:$apr1$xyzabc$cTvtri5GYS9vQXkM4wcQi.\n"}});
    let objects = [
        htpasswd,
        a(
            "locked",
            json!({"nginx.ingress.kubernetes.io/auth-type": "basic",
                   "nginx.ingress.kubernetes.io/auth-secret": "htpasswd"}),
        ),
        a(
            "rpm",
            json!({"nginx.ingress.kubernetes.io/limit-rpm": "1",
                   "nginx.ingress.kubernetes.io/limit-burst-multiplier": "1"}),
        ),
        a("cookie", json!({})),
        ingress(
            ns,
            "cookie-canary",
            "cookie.t7f.test",
            "svc-b",
            json!({"nginx.ingress.kubernetes.io/canary": "true",
                   "nginx.ingress.kubernetes.io/canary-by-cookie": "canary"}),
        ),
        a(
            "slow",
            json!({"nginx.ingress.kubernetes.io/proxy-connect-timeout": "1",
                   "nginx.ingress.kubernetes.io/proxy-read-timeout": "1"}),
        ),
        a(
            "errors",
            json!({"nginx.ingress.kubernetes.io/custom-http-errors": "404,503",
                   "nginx.ingress.kubernetes.io/default-backend": "svc-b"}),
        ),
    ];
    let names: Vec<String> = objects[1..]
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    cluster::apply(c, &objects).await;
    let addr = ctx.ingress_http;

    // The first answer of the limited Ingress spends its one request of the minute.
    until_http(addr, "rpm.t7f.test", "/", Ok("echo-a")).await;
    let r = support::http1(addr, "rpm.t7f.test", "/").await.unwrap();
    assert_eq!(
        r.status, 429,
        "the second request of the minute: {}",
        r.body
    );

    until_http(addr, "locked.t7f.test", "/", Err(401)).await;
    let r = support::http1(addr, "locked.t7f.test", "/").await.unwrap();
    assert!(
        r.headers.contains_key("www-authenticate"),
        "a Basic challenge: {:?}",
        r.headers
    );
    let login = |creds: &str| {
        let token = base64::engine::general_purpose::STANDARD.encode(creds);
        support::get("locked.t7f.test", "/").header("authorization", format!("Basic {token}"))
    };
    assert_eq!(send(addr, login("ann:wrong")).await.status, 401);
    let r = send(addr, login("ann:secret")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.echo_name(), Some("echo-a"));

    until_http(addr, "cookie.t7f.test", "/", Ok("echo-a")).await;
    // The canary Ingress was applied after the main one: wait for its own effect.
    assert!(
        support::eventually(Duration::from_secs(20), || async {
            send(
                addr,
                support::get("cookie.t7f.test", "/").header("cookie", "canary=always"),
            )
            .await
            .echo_name()
                == Some("echo-b")
        })
        .await,
        "canary=always goes to the canary"
    );
    let r = send(
        addr,
        support::get("cookie.t7f.test", "/").header("cookie", "canary=never"),
    )
    .await;
    assert_eq!(r.echo_name(), Some("echo-a"), "canary=never stays");

    until_http(addr, "slow.t7f.test", "/", Ok("echo-a")).await;
    let r = support::http1(addr, "slow.t7f.test", "/delay/10000")
        .await
        .unwrap();
    assert_eq!(
        r.status, 504,
        "a backend slower than proxy-read-timeout: {}",
        r.body
    );

    until_http(addr, "errors.t7f.test", "/", Ok("echo-a")).await;
    let r = support::http1(addr, "errors.t7f.test", "/status/503")
        .await
        .unwrap();
    assert_eq!(r.echo_name(), Some("echo-b"), "{}", r.body);
    assert_eq!(r.json()["headers"]["x-code"], "503", "{}", r.body);
    assert_eq!(
        r.json()["headers"]["x-ingress-name"],
        "errors",
        "{}",
        r.body
    );
    let r = support::http1(addr, "errors.t7f.test", "/status/500")
        .await
        .unwrap();
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(r.echo_name(), Some("echo-a"));

    for name in names {
        cluster::delete(c, ING.0, ING.1, ns, &name).await;
    }
}

/// ingress-nginx's external authorization read from Ingresses the API server stores, with
/// backend `b`'s echo server as the authorization service (its `/status/<code>` answers
/// that code): `auth-url` answered 2xx lets the request through with the answer's
/// `auth-response-headers` set on it, answered 401 refuses it with that 401, and with
/// `auth-signin` the 401 becomes a redirect to the sign-in page carrying the original URL.
pub async fn ingress_nginx_external_auth(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t7g";
    cluster::apply(c, &[build::namespace(ns, json!({}))]).await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    let service = format!("http://{}:{}", ctx.b.addr, ctx.b.port);
    let a = |name: &str, annotations: Value| {
        ingress(ns, name, &format!("{name}.t7g.test"), "svc-a", annotations)
    };
    let objects = [
        a(
            "allowed",
            json!({"nginx.ingress.kubernetes.io/auth-url": format!("{service}/status/200"),
                   "nginx.ingress.kubernetes.io/auth-response-headers": "X-Echo-Name"}),
        ),
        a(
            "refused",
            json!({"nginx.ingress.kubernetes.io/auth-url": format!("{service}/status/401")}),
        ),
        a(
            "signin",
            json!({"nginx.ingress.kubernetes.io/auth-url": format!("{service}/status/401"),
                   "nginx.ingress.kubernetes.io/auth-signin": "https://login.t7g.test/start"}),
        ),
    ];
    cluster::apply(c, &objects).await;
    let addr = ctx.ingress_http;

    until_http(addr, "allowed.t7g.test", "/", Ok("echo-a")).await;
    let r = support::http1(addr, "allowed.t7g.test", "/page")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["headers"]["x-echo-name"],
        "echo-b",
        "the authorization answer's header is set on the request: {}",
        r.body
    );

    until_http(addr, "refused.t7g.test", "/", Err(401)).await;
    let r = support::http1(addr, "refused.t7g.test", "/page")
        .await
        .unwrap();
    assert_eq!(r.status, 401);
    assert!(r.echo_name().is_none(), "the backend is not reached");

    until_http(addr, "signin.t7g.test", "/", Err(302)).await;
    let r = support::http1(addr, "signin.t7g.test", "/page")
        .await
        .unwrap();
    assert_eq!(r.status, 302);
    let location = r.headers.get("location").unwrap().to_str().unwrap();
    assert!(
        location.starts_with("https://login.t7g.test/start?rd="),
        "{location}"
    );
    assert!(location.contains("signin.t7g.test"), "{location}");

    for name in ["allowed", "refused", "signin"] {
        cluster::delete(c, ING.0, ING.1, ns, name).await;
    }
}
