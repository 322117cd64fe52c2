//! Ingress v1 in standalone mode: rules, path types, default backend and TLS.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_rules_and_tls() {
    let pki = Pki::new();
    let (crt, key) = pki.leaf(&["ing.test"]);
    let (a, b, d) = (echo("a").await, echo("b").await, echo("default").await);
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let https_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let ingress = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  defaultBackend:
    resource: {apiGroup: weir.dev, kind: Backend, name: default}
  tls:
  - hosts: [ing.test]
    secretName: ing-cert
  rules:
  - host: ing.test
    http:
      paths:
      - {path: /exact, pathType: Exact, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: a}}}
      - {path: /app, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: b}}}
";
    let files = [
        ("ingress.yaml", ingress.to_string()),
        ("secret.yaml", tls_secret("default", "ing-cert", &crt, &key)),
        (
            "backends.yaml",
            [
                backend("default", "a", &[a]),
                backend("default", "b", &[b]),
                backend("default", "default", &[d]),
            ]
            .join("---\n"),
        ),
    ];
    let gw = Gateway::start_with(&files, Some(http_addr), Some(https_addr)).await;
    let name = |host: &'static str, path: &'static str| async move {
        http1(http_addr, host, path)
            .await
            .unwrap()
            .echo_name()
            .map(str::to_owned)
    };
    assert_eq!(name("ing.test", "/exact").await.as_deref(), Some("a"));
    assert_eq!(
        name("ing.test", "/exact/no").await.as_deref(),
        Some("default")
    );
    assert_eq!(name("ing.test", "/app/x").await.as_deref(), Some("b"));
    assert_eq!(name("other.test", "/app").await.as_deref(), Some("default"));

    let r = https(https_addr, pki.client_config(&[b"h2"]), "ing.test", "/app")
        .await
        .unwrap();
    assert_eq!(r.peer_cert, der_of(&crt));
    assert_eq!(r.resp.echo_name(), Some("b"));
    gw.gw.stop().await;
}

/// An Ingress written for ingress-nginx: `limit-rps` (429 past rate × burst multiplier),
/// `auth-type: basic` with an `auth-secret` (401 with the realm's challenge, then 200),
/// `enable-cors` (a preflight answered by weir with ingress-nginx's default methods), and
/// the annotation weir does not serve left in place without breaking anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_annotations() {
    use base64::Engine;
    let a = echo("a").await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let ingress = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  annotations:
    nginx.ingress.kubernetes.io/limit-rps: \"1\"
    nginx.ingress.kubernetes.io/limit-burst-multiplier: \"3\"
    nginx.ingress.kubernetes.io/auth-type: basic
    nginx.ingress.kubernetes.io/auth-secret: htpasswd
    nginx.ingress.kubernetes.io/auth-realm: Shop
    nginx.ingress.kubernetes.io/enable-cors: \"true\"
    nginx.ingress.kubernetes.io/configuration-snippet: \"more_set_headers 'X: y';\"
spec:
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: a}}}
";
    // `openssl passwd -apr1 -salt xyzabc secret`
    let secret = "apiVersion: v1
kind: Secret
metadata: {name: htpasswd}
type: Opaque
stringData:
  auth: |
    ann:$apr1$xyzabc$cTvtri5GYS9vQXkM4wcQi.
";
    let files = [
        ("ingress.yaml", ingress.to_string()),
        ("secret.yaml", secret.to_string()),
        ("backends.yaml", backend("default", "a", &[a])),
    ];
    let _gw = Gateway::start_with(&files, Some(http_addr), None).await;
    let call = |creds: Option<&'static str>| async move {
        let mut req = get("shop.test", "/");
        if let Some(c) = creds {
            let token = base64::engine::general_purpose::STANDARD.encode(c);
            req = req.header("authorization", format!("Basic {token}"));
        }
        send_http1(http_addr, req.body(http_body_util::Empty::new()).unwrap())
            .await
            .unwrap()
    };
    // A CORS preflight is answered by weir (no credentials needed, no budget spent).
    let preflight = http::Request::options("/")
        .header("host", "shop.test")
        .header("origin", "https://app.test")
        .header("access-control-request-method", "PUT")
        .body(http_body_util::Empty::new())
        .unwrap();
    let r = send_http1(http_addr, preflight).await.unwrap();
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(
        r.headers.get("access-control-allow-origin").unwrap(),
        "https://app.test"
    );
    assert!(r.echo_name().is_none(), "answered by weir");

    let r = call(None).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.headers.get("www-authenticate").unwrap(),
        "Basic realm=\"Shop\", charset=\"UTF-8\""
    );
    assert_eq!(call(Some("ann:wrong")).await.status, 401);
    // Three requests at once (1/s × 3), then 429 for the same client. (The bucket refills
    // one a second, so on a stalled machine a request past the burst may still find a
    // token: the 429 is looked for among the next few.)
    for _ in 0..3 {
        let r = call(Some("ann:secret")).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.echo_name(), Some("a"));
    }
    let mut limited = None;
    for _ in 0..10 {
        let r = call(Some("ann:secret")).await;
        if r.status == 429 {
            limited = Some(r);
            break;
        }
        assert_eq!(r.status, 200);
    }
    let r = limited.expect("a 429 past the burst");
    assert!(r.headers.contains_key("retry-after"));
}

/// ingress-nginx's rewrite and redirect annotations through `weir run`: `rewrite-target`
/// and `upstream-vhost` change what the backend sees, `x-forwarded-prefix` is added,
/// `app-root` redirects `/`, `force-ssl-redirect` answers 308 to https on the plaintext
/// listener, and `permanent-redirect` answers every request of its Ingress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_rewrites_and_redirects() {
    let a = echo("a").await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let https_port = free_port();
    let https_addr: SocketAddr = ([127, 0, 0, 1], https_port).into();
    let ingresses = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  annotations:
    nginx.ingress.kubernetes.io/rewrite-target: /
    nginx.ingress.kubernetes.io/upstream-vhost: internal.test
    nginx.ingress.kubernetes.io/x-forwarded-prefix: /shop
    nginx.ingress.kubernetes.io/app-root: /shop
spec:
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /shop, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: a}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: secure
  annotations:
    nginx.ingress.kubernetes.io/force-ssl-redirect: \"true\"
spec:
  rules:
  - host: secure.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: a}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: moved
  annotations:
    nginx.ingress.kubernetes.io/permanent-redirect: https://new.example.com/landing
spec:
  rules:
  - host: moved.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: a}}}
";
    let files = [
        ("ingress.yaml", ingresses.to_string()),
        ("backends.yaml", backend("default", "a", &[a])),
    ];
    let _gw = Gateway::start_with(&files, Some(http_addr), Some(https_addr)).await;
    let r = http1(http_addr, "shop.test", "/shop/cart").await.unwrap();
    assert_eq!(r.status, 200);
    let seen = r.json();
    assert_eq!(seen["path"], "/", "{seen}");
    assert_eq!(seen["headers"]["host"], "internal.test", "{seen}");
    assert_eq!(seen["headers"]["x-forwarded-prefix"], "/shop", "{seen}");

    let r = http1(http_addr, "shop.test", "/").await.unwrap();
    assert_eq!(r.status, 302);
    assert_eq!(
        r.headers.get("location").unwrap(),
        &format!("http://shop.test:{}/shop", http_addr.port())
    );

    let r = http1(http_addr, "secure.test", "/x?y=1").await.unwrap();
    assert_eq!(r.status, 308);
    assert_eq!(
        r.headers.get("location").unwrap(),
        &format!("https://secure.test:{https_port}/x?y=1")
    );

    let r = http1(http_addr, "moved.test", "/old").await.unwrap();
    assert_eq!(r.status, 301);
    assert_eq!(
        r.headers.get("location").unwrap(),
        "https://new.example.com/landing"
    );
}

/// ingress-nginx's `proxy-next-upstream` through `weir run`: with it, a Backend of which
/// one endpoint refuses connections serves every request (each failed attempt goes to
/// the other endpoint); the same endpoints without it fail a request (no retry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_next_upstream_retries() {
    let a = echo("a").await;
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let ingresses = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: retried
  annotations:
    nginx.ingress.kubernetes.io/proxy-next-upstream: \"error timeout http_503\"
    nginx.ingress.kubernetes.io/proxy-next-upstream-tries: \"3\"
spec:
  rules:
  - host: retried.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: flaky}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: plain}
spec:
  rules:
  - host: plain.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: flaky-too}}}
";
    let files = [
        ("ingress.yaml", ingresses.to_string()),
        (
            "backends.yaml",
            [
                backend("default", "flaky", &[refused, a]),
                backend("default", "flaky-too", &[refused, a]),
            ]
            .join("---\n"),
        ),
    ];
    let _gw = Gateway::start_with(&files, Some(http_addr), None).await;
    let status = |host: &'static str| async move {
        let req = get(host, "/").body(http_body_util::Empty::new()).unwrap();
        send_http1(http_addr, req).await.unwrap().status
    };
    for i in 0..20 {
        assert_eq!(status("retried.test").await, 200, "request {i}");
    }
    let mut failed = 0;
    for _ in 0..4 {
        failed += usize::from(status("plain.test").await != 200);
    }
    assert!(
        failed >= 1,
        "without the annotation a refused attempt reaches the client"
    );
}

/// ingress-nginx's `rewrite-target` with capture groups and `use-regex` through `weir
/// run`: the path is an nginx regex (case-insensitive, from the start), `/$2` sends the
/// backend what the second group took (query kept), a path the regex does not match is
/// not served by that rule, and `server-alias` serves the same rules under another name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_capture_rewrites_regex_paths_and_aliases() {
    let a = echo("a").await;
    let b = echo("b").await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let ingresses = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: api
  annotations:
    nginx.ingress.kubernetes.io/rewrite-target: /$2
    nginx.ingress.kubernetes.io/server-alias: www.api.test
spec:
  rules:
  - host: api.test
    http:
      paths:
      - {path: /something(/|$)(.*), pathType: ImplementationSpecific, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: a}}}
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: b}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: versions
  annotations:
    nginx.ingress.kubernetes.io/use-regex: \"true\"
spec:
  rules:
  - host: versions.test
    http:
      paths:
      - {path: \"/v[0-9]+/items\", pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: a}}}
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: b}}}
";
    let files = [
        ("ingress.yaml", ingresses.to_string()),
        (
            "backends.yaml",
            [backend("default", "a", &[a]), backend("default", "b", &[b])].join("---\n"),
        ),
    ];
    let _gw = Gateway::start_with(&files, Some(http_addr), None).await;
    // (host, request path, backend, path the backend sees), as ingress-nginx's
    // documented example: /something → /, /something/ → /, /something/new → /new.
    let cases = [
        ("api.test", "/something", "a", "/"),
        ("api.test", "/something/", "a", "/"),
        ("api.test", "/something/new?x=1", "a", "/new?x=1"),
        ("api.test", "/SomeThing/Case", "a", "/Case"),
        ("www.api.test", "/something/alias", "a", "/alias"),
        // `/` is a regex too, and the rewrite applies to it: nothing captured by $2.
        ("api.test", "/other", "b", "/"),
        ("versions.test", "/v2/items/7", "a", "/v2/items/7"),
        ("versions.test", "/V10/ITEMS", "a", "/V10/ITEMS"),
        ("versions.test", "/vx/items", "b", "/vx/items"),
    ];
    for (host, path, want, seen_path) in cases {
        let r = http1(http_addr, host, path).await.unwrap();
        assert_eq!(r.status, 200, "{host}{path}: {}", r.body);
        assert_eq!(r.echo_name(), Some(want), "{host}{path}");
        let seen = r.json();
        let full = match seen["query"].as_str().filter(|q| !q.is_empty()) {
            Some(q) => format!("{}?{q}", seen["path"].as_str().unwrap()),
            None => seen["path"].as_str().unwrap().to_owned(),
        };
        assert_eq!(full, seen_path, "{host}{path}: {seen}");
    }
}

/// ingress-nginx's proxy timeouts through `weir run`: with `proxy-read-timeout: 1` (and
/// `proxy-connect-timeout: 1`) a backend that answers after 10 s gets a 504; the same
/// backend answers through an Ingress without the annotations, and through the timed
/// Ingress when it answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_proxy_timeouts() {
    let a = echo("a").await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let ingresses = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: timed
  annotations:
    nginx.ingress.kubernetes.io/proxy-connect-timeout: \"1\"
    nginx.ingress.kubernetes.io/proxy-read-timeout: \"1\"
spec:
  rules:
  - host: timed.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: a}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: patient}
spec:
  rules:
  - host: patient.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: a}}}
";
    let files = [
        ("ingress.yaml", ingresses.to_string()),
        ("backends.yaml", backend("default", "a", &[a])),
    ];
    let _gw = Gateway::start_with(&files, Some(http_addr), None).await;
    let r = http1(http_addr, "timed.test", "/delay/10000")
        .await
        .unwrap();
    assert_eq!(r.status, 504, "{}", r.body);
    let r = http1(http_addr, "timed.test", "/now").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let r = http1(http_addr, "patient.test", "/delay/3000")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
}

/// ingress-nginx's `affinity: cookie` through `weir run`: the first response sets the
/// session cookie (`session-cookie-name`, `-path`, `-max-age`), and every request that
/// sends it back reaches the same endpoint of a two-endpoint Backend; sessions spread
/// over both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_cookie_affinity() {
    let eps = [echo("e1").await, echo("e2").await];
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let ingresses = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: sticky
  annotations:
    nginx.ingress.kubernetes.io/affinity: cookie
    nginx.ingress.kubernetes.io/session-cookie-name: route
    nginx.ingress.kubernetes.io/session-cookie-path: /
    nginx.ingress.kubernetes.io/session-cookie-max-age: \"600\"
spec:
  rules:
  - host: sticky.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: pair}}}
";
    let files = [
        ("ingress.yaml", ingresses.to_string()),
        ("backends.yaml", backend("default", "pair", &eps)),
    ];
    let _gw = Gateway::start_with(&files, Some(http_addr), None).await;
    let with_cookie = |cookie: Option<String>| async move {
        let mut req = get("sticky.test", "/");
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        send_http1(http_addr, req.body(http_body_util::Empty::new()).unwrap())
            .await
            .unwrap()
    };
    let first = with_cookie(None).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let set = first.headers["set-cookie"].to_str().unwrap().to_owned();
    assert!(set.starts_with("route="), "{set}");
    assert!(set.contains("Max-Age=600"), "{set}");
    assert!(set.contains("Path=/"), "{set}");
    let value = set.split(';').next().unwrap().to_owned();
    let owner = first.echo_name().unwrap().to_owned();
    for i in 0..20 {
        let r = with_cookie(Some(value.clone())).await;
        assert_eq!(r.echo_name(), Some(owner.as_str()), "request {i} moved");
        assert!(r.headers.get("set-cookie").is_none(), "set once");
    }
    let mut seen = std::collections::BTreeSet::new();
    for k in 0..32 {
        let r = with_cookie(Some(format!("route=s{k}"))).await;
        seen.insert(r.echo_name().unwrap().to_owned());
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
}

/// ingress-nginx canary Ingresses through `weir run`: a canary by header (`always` /
/// `never`), by cookie and by weight (20 of 100) beside a main Ingress of the same host
/// and path; the canary's traffic carries the main Ingress's annotations (here
/// `x-forwarded-prefix`). The canary is written first: it finds its main Ingress when
/// that appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_canary() {
    let stable = echo("stable").await;
    let next = echo("next").await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let canary = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop-canary
  annotations:
    nginx.ingress.kubernetes.io/canary: \"true\"
    nginx.ingress.kubernetes.io/canary-by-header: X-Canary
    nginx.ingress.kubernetes.io/canary-by-cookie: canary
    nginx.ingress.kubernetes.io/canary-weight: \"20\"
spec:
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: next}}}
";
    let main = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  annotations:
    nginx.ingress.kubernetes.io/x-forwarded-prefix: /shop
spec:
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: stable}}}
";
    let files = [
        ("canary.yaml", canary.to_string()),
        (
            "backends.yaml",
            [
                backend("default", "stable", &[stable]),
                backend("default", "next", &[next]),
            ]
            .join("---\n"),
        ),
    ];
    let gw = Gateway::start_with(&files, Some(http_addr), None).await;
    // Without its main Ingress the canary serves nothing.
    let r = http1(http_addr, "shop.test", "/").await.unwrap();
    assert_eq!(r.status, 404, "{}", r.body);
    gw.write("main.yaml", main);
    assert!(
        eventually(Duration::from_secs(10), || async {
            http1(http_addr, "shop.test", "/")
                .await
                .is_ok_and(|r| r.status == 200)
        })
        .await,
        "the main Ingress is served"
    );
    let send = |headers: &'static [(&'static str, &'static str)]| async move {
        let mut req = get("shop.test", "/x");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        send_http1(http_addr, req.body(http_body_util::Empty::new()).unwrap())
            .await
            .unwrap()
    };
    let cases: [(&[(&str, &str)], &str); 5] = [
        (&[("x-canary", "always")], "next"),
        (
            &[("x-canary", "never"), ("cookie", "canary=always")],
            "stable",
        ),
        (&[("cookie", "a=1; canary=always")], "next"),
        (
            &[("x-canary", "always"), ("cookie", "canary=never")],
            "next",
        ),
        (&[("cookie", "canary=never")], "stable"),
    ];
    for (headers, want) in cases {
        for _ in 0..5 {
            let r = send(headers).await;
            assert_eq!(r.status, 200, "{headers:?}: {}", r.body);
            assert_eq!(r.echo_name(), Some(want), "{headers:?}");
            assert_eq!(r.json()["headers"]["x-forwarded-prefix"], "/shop");
        }
    }
    // By weight: both backends serve requests without header or cookie.
    let mut names = std::collections::BTreeMap::<String, usize>::new();
    for _ in 0..60 {
        let r = send(&[]).await;
        *names.entry(r.echo_name().unwrap().to_owned()).or_default() += 1;
    }
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names["stable"] > names["next"], "{names:?}");
}

/// ingress-nginx's `service-upstream` through `weir run`: a Service whose cluster IP and
/// port reach an echo backend, without endpoints (an EndpointSlice may not name a
/// loopback address); the Ingress with the annotation reaches the cluster IP, the one
/// without it has no endpoint to send to (503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_service_upstream() {
    let vip = echo("vip").await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let objects = format!(
        "apiVersion: v1
kind: Service
metadata: {{name: svc}}
spec:
  clusterIP: 127.0.0.1
  ports: [{{name: web, port: {vip_port}, targetPort: 8080}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: vip
  annotations:
    nginx.ingress.kubernetes.io/service-upstream: \"true\"
spec:
  rules:
  - host: vip.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: svc, port: {{number: {vip_port}}}}}}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: pods}}
spec:
  rules:
  - host: pods.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: svc, port: {{number: {vip_port}}}}}}}}}
",
        vip_port = vip.port(),
    );
    let _gw = Gateway::start_with(&[("all.yaml", objects)], Some(http_addr), None).await;
    let r = http1(http_addr, "vip.test", "/").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.echo_name(), Some("vip"));
    let r = http1(http_addr, "pods.test", "/").await.unwrap();
    assert_eq!(r.status, 503, "{}", r.body);
}
