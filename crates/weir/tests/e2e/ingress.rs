//! Ingress v1 in standalone mode: rules, path types, default backend and TLS.

use std::net::SocketAddr;

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
    // Three requests at once (1/s × 3), then 429 for the same client.
    for _ in 0..3 {
        let r = call(Some("ann:secret")).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.echo_name(), Some("a"));
    }
    let r = call(Some("ann:secret")).await;
    assert_eq!(r.status, 429);
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
