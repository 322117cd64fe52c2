//! ingress-nginx behaviours in standalone mode beyond the single annotations of
//! `ingress.rs`: the order of redirects and access checks, the legacy class annotation,
//! body size limits, TLS passthrough, TLS to backends, custom error pages.

use std::net::SocketAddr;

use base64::Engine;

use crate::support::*;

/// `openssl passwd -apr1 -salt xyzabc secret`, user `ann`.
const HTPASSWD: &str = "apiVersion: v1
kind: Secret
metadata: {name: htpasswd}
type: Opaque
stringData:
  auth: |
    ann:$apr1$xyzabc$cTvtri5GYS9vQXkM4wcQi.
";

fn basic(req: http::request::Builder, creds: &str) -> http::request::Builder {
    let token = base64::engine::general_purpose::STANDARD.encode(creds);
    req.header("authorization", format!("Basic {token}"))
}

/// ingress-nginx redirects to https before any access check (its rewrite phase runs
/// before the access phase): a plaintext request to a TLS host with `ssl-redirect`, Basic
/// auth and `limit-rps` gets 308, not 401, and spends none of the rate; over https the
/// checks apply (401, 200, then 429). With `force-ssl-redirect`, a source range that
/// refuses the client and an `auth-url` that cannot be reached, a plaintext request is
/// still 308, not 403 or 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_redirect_comes_before_access_checks() {
    let pki = Pki::new();
    let (crt, key) = pki.leaf(&["vault.test"]);
    let a = echo("a").await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let https_port = free_port();
    let https_addr: SocketAddr = ([127, 0, 0, 1], https_port).into();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let ingresses = format!(
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: vault
  annotations:
    nginx.ingress.kubernetes.io/ssl-redirect: \"true\"
    nginx.ingress.kubernetes.io/auth-type: basic
    nginx.ingress.kubernetes.io/auth-secret: htpasswd
    nginx.ingress.kubernetes.io/limit-rps: \"1\"
    nginx.ingress.kubernetes.io/limit-burst-multiplier: \"1\"
spec:
  tls:
  - hosts: [vault.test]
    secretName: vault-cert
  rules:
  - host: vault.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{resource: {{apiGroup: weir.dev, kind: Backend, name: a}}}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: office
  annotations:
    nginx.ingress.kubernetes.io/force-ssl-redirect: \"true\"
    nginx.ingress.kubernetes.io/whitelist-source-range: 10.0.0.0/8
    nginx.ingress.kubernetes.io/auth-url: http://{dead}/auth
spec:
  rules:
  - host: office.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{resource: {{apiGroup: weir.dev, kind: Backend, name: a}}}}}}
"
    );
    let files = [
        ("ingress.yaml", ingresses),
        ("htpasswd.yaml", HTPASSWD.to_string()),
        (
            "secret.yaml",
            tls_secret("default", "vault-cert", &crt, &key),
        ),
        ("backends.yaml", backend("default", "a", &[a])),
    ];
    let _gw = Gateway::start_with(&files, Some(http_addr), Some(https_addr)).await;

    // More plaintext requests than the rate allows: each one redirected.
    for _ in 0..3 {
        let r = http1(http_addr, "vault.test", "/secret?q=1").await.unwrap();
        assert_eq!(r.status, 308, "{r:?}");
        assert_eq!(
            r.headers.get("location").unwrap(),
            &format!("https://vault.test:{https_port}/secret?q=1")
        );
        assert!(!r.headers.contains_key("www-authenticate"));
    }
    // With credentials, too: nothing reaches the backend over plaintext.
    let req = basic(get("vault.test", "/"), "ann:secret");
    let r = send_http1(http_addr, req.body(Default::default()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 308);
    assert!(r.echo_name().is_none());

    // Over https the checks apply, and the redirects spent none of the rate.
    let tls = pki.client_config(&[]);
    let send = |creds: Option<&'static str>| {
        let tls = tls.clone();
        async move {
            let mut req = get("vault.test", "/secret");
            if let Some(c) = creds {
                req = basic(req, c);
            }
            https_send(
                https_addr,
                tls,
                "vault.test",
                req.body(Default::default()).unwrap(),
            )
            .await
            .unwrap()
        }
    };
    let r = send(None).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(r.headers.contains_key("www-authenticate"));
    let r = send(Some("ann:secret")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.echo_name(), Some("a"));
    assert_eq!(r.json()["path"], "/secret");
    // Past the burst of one: 429 (looked for among the next few, as the bucket refills
    // one a second and a stalled machine can take that long between two handshakes).
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let status = send(Some("ann:secret")).await.status;
        statuses.push(status);
        if status != 200 {
            break;
        }
    }
    assert_eq!(
        statuses.last().map(|s| s.as_u16()),
        Some(429),
        "{statuses:?}"
    );

    // Refused address and an unreachable auth service: the redirect still comes first.
    let r = http1(http_addr, "office.test", "/x").await.unwrap();
    assert_eq!(r.status, 308, "{r:?}");
    assert_eq!(
        r.headers.get("location").unwrap(),
        &format!("https://office.test:{https_port}/x")
    );
}

/// Ingresses without `spec.ingressClassName` are served by the class in the legacy
/// `kubernetes.io/ingress.class` annotation, as ingress-nginx reads it: `weir` is served,
/// `nginx` left to ingress-nginx, and without either one a standalone weir serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_class_annotation() {
    let a = echo("a").await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let ingress = |name: &str, annotation: Option<&str>| {
        let annotations = annotation.map_or(String::new(), |c| {
            format!("\n  annotations: {{kubernetes.io/ingress.class: {c}}}")
        });
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}{annotations}
spec:
  rules:
  - host: {name}.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{resource: {{apiGroup: weir.dev, kind: Backend, name: a}}}}}}
"
        )
    };
    let files = [
        (
            "ingress.yaml",
            [
                ingress("ours", Some("weir")),
                ingress("theirs", Some("nginx")),
                ingress("classless", None),
            ]
            .join("---\n"),
        ),
        ("backends.yaml", backend("default", "a", &[a])),
    ];
    let gw = Gateway::start_with(&files, Some(http_addr), None).await;
    let r = http1(http_addr, "ours.test", "/").await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.echo_name(), Some("a"));
    assert_eq!(
        http1(http_addr, "theirs.test", "/").await.unwrap().status,
        404
    );
    assert_eq!(
        http1(http_addr, "classless.test", "/")
            .await
            .unwrap()
            .status,
        200
    );

    // Moving an Ingress to the other class by its annotation takes it away, and back
    // (the class-less one keeps the Ingress listener bound).
    let keeper = ingress("classless", None);
    gw.write(
        "ingress.yaml",
        &[ingress("ours", Some("nginx")), keeper.clone()].join("---\n"),
    );
    assert!(
        eventually(std::time::Duration::from_secs(10), || async {
            http1(http_addr, "ours.test", "/").await.unwrap().status == 404
        })
        .await
    );
    gw.write(
        "ingress.yaml",
        &[ingress("theirs", Some("weir")), keeper].join("---\n"),
    );
    assert!(
        eventually(std::time::Duration::from_secs(10), || async {
            http1(http_addr, "theirs.test", "/").await.unwrap().status == 200
        })
        .await
    );
}

/// `proxy-body-size` as nginx's `client_max_body_size`: a body over it is refused 413
/// before anything reaches the backend, one at the limit is forwarded whole; `0` is no
/// limit; a bogus size is named and no limit applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_body_size() {
    let a = echo("a").await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let ingress = |name: &str, size: &str| {
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  annotations: {{nginx.ingress.kubernetes.io/proxy-body-size: \"{size}\"}}
spec:
  rules:
  - host: {name}.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{resource: {{apiGroup: weir.dev, kind: Backend, name: a}}}}}}
"
        )
    };
    let files = [
        (
            "ingress.yaml",
            [
                ingress("small", "1k"),
                ingress("unlimited", "0"),
                ingress("bogus", "1.5m"),
            ]
            .join("---\n"),
        ),
        ("backends.yaml", backend("default", "a", &[a])),
    ];
    let _gw = Gateway::start_with(&files, Some(http_addr), None).await;
    let post = |host: &'static str, len: usize| async move {
        let head = format!(
            "POST /up HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
        );
        crate::request_limits::raw(http_addr, &head, &vec![b'x'; len]).await
    };
    let (status, text) = post("small.test", 1025).await;
    assert_eq!(status, 413, "{text}");
    assert!(!text.contains("body_bytes"), "not forwarded: {text}");
    let (status, text) = post("small.test", 1024).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"body_bytes\":1024"), "{text}");
    for host in ["unlimited.test", "bogus.test"] {
        let (status, text) = post(host, 100_000).await;
        assert_eq!(status, 200, "{host}: {text}");
        assert!(text.contains("\"body_bytes\":100000"), "{text}");
    }
}

/// `ssl-passthrough`: on the Ingress HTTPS listener, a TLS connection for the Ingress's
/// host is spliced to its backend, which does the handshake with its own certificate
/// (weir holds none for that name); another Ingress's TLS host on the same port is still
/// terminated by weir; a name neither serves gets no handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_passthrough_splices_by_sni() {
    let pki = Pki::new();
    let pass = crate::l4::tls_backend(&pki, &["pass.test"], "pass").await;
    let a = echo("a").await;
    let (crt, key) = pki.leaf(&["web.test"]);
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let https_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let ingresses = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: pass
  annotations:
    nginx.ingress.kubernetes.io/ssl-passthrough: \"true\"
spec:
  rules:
  - host: pass.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: pass}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  tls:
  - {hosts: [web.test], secretName: web-cert}
  rules:
  - host: web.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: a}}}
";
    let files = [
        ("ingress.yaml", ingresses.to_string()),
        ("secret.yaml", tls_secret("default", "web-cert", &crt, &key)),
        (
            "backends.yaml",
            [
                backend("default", "pass", &[pass]),
                backend("default", "a", &[a]),
            ]
            .join("---\n"),
        ),
    ];
    let _gw = Gateway::start_with(&files, Some(http_addr), Some(https_addr)).await;
    let got = crate::l4::tls_exchange(https_addr, &pki, "pass.test", "hello")
        .await
        .unwrap();
    assert_eq!(got, "pass:hello");
    let r = https(https_addr, pki.client_config(&[b"h2"]), "web.test", "/")
        .await
        .unwrap();
    assert_eq!(r.peer_cert, der_of(&crt));
    assert_eq!(r.resp.echo_name(), Some("a"));
    assert!(
        crate::l4::tls_exchange(https_addr, &pki, "none.test", "x")
            .await
            .is_err()
    );
}

/// A plaintext HTTP/1.1 GET from source address `from`; the status.
async fn get_from(from: std::net::IpAddr, to: SocketAddr, host: &str, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(from, 0)).unwrap();
    let mut s = sock.connect(to).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(20), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out)
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// `limit-connections: "1"`: while one request of a client is in progress, its next one
/// is answered 503 (ingress-nginx's answer); another client address is served, and once
/// the first request is answered the client is served again. An Ingress without the
/// annotation serves the same client's requests side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_connections_bounds_a_clients_requests_in_progress() {
    let (held, release, waiting) = holding_backend([127, 0, 0, 1].into()).await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let ingress = |name: &str, annotations: &str| {
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  annotations: {{{annotations}}}
spec:
  rules:
  - host: {name}.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{resource: {{apiGroup: weir.dev, kind: Backend, name: held}}}}}}
"
        )
    };
    let files = [
        (
            "ingress.yaml",
            [
                ingress(
                    "one",
                    "nginx.ingress.kubernetes.io/limit-connections: \"1\"",
                ),
                ingress("free", ""),
            ]
            .join("---\n"),
        ),
        ("backends.yaml", backend("default", "held", &[held])),
    ];
    let _gw = Gateway::start_with(&files, Some(http_addr), None).await;
    let me: std::net::IpAddr = [127, 0, 0, 1].into();
    let other: std::net::IpAddr = [127, 0, 0, 2].into();
    assert_eq!(get_from(me, http_addr, "one.test", "/").await, 200);

    for host in ["one.test", "free.test"] {
        release.send_replace(false);
        let slow = tokio::spawn(get_from(me, http_addr, host, "/hold"));
        // Probe only once the held request is in progress: a probe racing it could take
        // the client's one place first and have the held request refused instead.
        assert!(
            eventually(std::time::Duration::from_secs(10), || async {
                waiting.load(std::sync::atomic::Ordering::SeqCst) == 1
            })
            .await,
            "{host}: the held request reaches the backend"
        );
        if host == "one.test" {
            // Once the held request is in progress, the client's next one is refused.
            assert!(
                eventually(std::time::Duration::from_secs(10), || async {
                    get_from(me, http_addr, host, "/").await == 503
                })
                .await,
                "a second request in progress is refused"
            );
            assert_eq!(
                get_from(other, http_addr, host, "/").await,
                200,
                "another client"
            );
        } else {
            assert_eq!(get_from(me, http_addr, host, "/").await, 200);
        }
        release.send_replace(true);
        assert_eq!(
            slow.await.unwrap(),
            200,
            "{host}: the held request is served"
        );
        // The place is given back when weir drops the response, just after sending it.
        assert!(
            eventually(std::time::Duration::from_secs(10), || async {
                get_from(me, http_addr, host, "/").await == 200
            })
            .await,
            "{host}: place given back"
        );
    }
}

/// `backend-protocol: HTTPS` through `weir run` towards a real TLS backend (a Service
/// whose cluster IP is loopback, reached with `service-upstream`): without
/// `proxy-ssl-verify` the backend's certificate is not checked and no SNI is sent; with
/// it, the CA of `proxy-ssl-secret` verifies the certificate for `proxy-ssl-name`, sent
/// as SNI with `proxy-ssl-server-name`; a CA that did not sign it fails the request
/// (502); without `backend-protocol` the TLS port is spoken to in plaintext and fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_https_backends() {
    let pki = Pki::new();
    let other = Pki::new();
    let (crt, key) = pki.leaf(&["app.internal"]);
    let tls_backend = https_backend((&crt, &key)).await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let indent = |pem: &str| {
        pem.lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    };
    let ingress = |name: &str, extra: &str| {
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  annotations:
    nginx.ingress.kubernetes.io/service-upstream: \"true\"
{extra}spec:
  rules:
  - host: {name}.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: app, port: {{number: {port}}}}}}}}}
---
",
            port = tls_backend.port()
        )
    };
    let objects = format!(
        "apiVersion: v1
kind: Service
metadata: {{name: app}}
spec:
  clusterIP: 127.0.0.1
  ports: [{{name: https, port: {port}, targetPort: 8443}}]
---
apiVersion: v1
kind: Secret
metadata: {{name: app-ca}}
stringData:
  ca.crt: |
{ca}---
apiVersion: v1
kind: Secret
metadata: {{name: other-ca}}
stringData:
  ca.crt: |
{other_ca}---
{unverified}{verified}{wrong_ca}{plaintext}",
        port = tls_backend.port(),
        ca = indent(&pki.ca_pem()),
        other_ca = indent(&other.ca_pem()),
        unverified = ingress(
            "unverified",
            "    nginx.ingress.kubernetes.io/backend-protocol: HTTPS\n"
        ),
        verified = ingress(
            "verified",
            "    nginx.ingress.kubernetes.io/backend-protocol: HTTPS
    nginx.ingress.kubernetes.io/proxy-ssl-verify: \"on\"
    nginx.ingress.kubernetes.io/proxy-ssl-secret: default/app-ca
    nginx.ingress.kubernetes.io/proxy-ssl-name: app.internal
    nginx.ingress.kubernetes.io/proxy-ssl-server-name: \"on\"
"
        ),
        wrong_ca = ingress(
            "wrong-ca",
            "    nginx.ingress.kubernetes.io/backend-protocol: HTTPS
    nginx.ingress.kubernetes.io/proxy-ssl-verify: \"on\"
    nginx.ingress.kubernetes.io/proxy-ssl-secret: other-ca
    nginx.ingress.kubernetes.io/proxy-ssl-name: app.internal
"
        ),
        plaintext = ingress("plaintext", ""),
    );
    let _gw = Gateway::start_with(&[("all.yaml", objects)], Some(http_addr), None).await;
    let r = http1(http_addr, "unverified.test", "/").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, "sni=");
    let r = http1(http_addr, "verified.test", "/").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, "sni=app.internal");
    let r = http1(http_addr, "wrong-ca.test", "/").await.unwrap();
    assert_eq!(r.status, 502, "{}", r.body);
    let r = http1(http_addr, "plaintext.test", "/").await.unwrap();
    assert_eq!(r.status, 502, "{}", r.body);
}

/// `proxy-ssl-secret` with `tls.crt`/`tls.key`: the client certificate is presented to a
/// backend that requires one (its CA is the test's), which refuses a client without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_https_backend_client_certificate() {
    let pki = Pki::new();
    let (crt, key) = pki.leaf(&["app.internal"]);
    let (client_crt, client_key) = pki.leaf(&["gateway.test"]);
    let backend = https_backend_mtls((&crt, &key), &pki.ca_pem()).await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let indent = |pem: &str| {
        pem.lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    };
    let ingress = |name: &str, secret: &str| {
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  annotations:
    nginx.ingress.kubernetes.io/service-upstream: \"true\"
    nginx.ingress.kubernetes.io/backend-protocol: HTTPS
    nginx.ingress.kubernetes.io/proxy-ssl-verify: \"on\"
    nginx.ingress.kubernetes.io/proxy-ssl-secret: {secret}
    nginx.ingress.kubernetes.io/proxy-ssl-name: app.internal
spec:
  rules:
  - host: {name}.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: app, port: {{number: {port}}}}}}}}}
---
",
            port = backend.port()
        )
    };
    let objects = format!(
        "apiVersion: v1
kind: Service
metadata: {{name: app}}
spec:
  clusterIP: 127.0.0.1
  ports: [{{name: https, port: {port}, targetPort: 8443}}]
---
apiVersion: v1
kind: Secret
metadata: {{name: ca-only}}
stringData:
  ca.crt: |
{ca}---
apiVersion: v1
kind: Secret
metadata: {{name: with-client}}
type: kubernetes.io/tls
stringData:
  ca.crt: |
{ca}  tls.crt: |
{client_crt}  tls.key: |
{client_key}---
{mutual}{anonymous}",
        port = backend.port(),
        ca = indent(&pki.ca_pem()),
        client_crt = indent(&client_crt),
        client_key = indent(&client_key),
        mutual = ingress("mutual", "with-client"),
        anonymous = ingress("anonymous", "ca-only"),
    );
    let _gw = Gateway::start_with(&[("all.yaml", objects)], Some(http_addr), None).await;
    let r = http1(http_addr, "mutual.test", "/").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let r = http1(http_addr, "anonymous.test", "/").await.unwrap();
    assert_eq!(r.status, 502, "{}", r.body);
}

/// `default-backend` with `custom-http-errors` through `weir run` (Services whose
/// cluster IP is loopback, reached with `service-upstream`): a backend answering 503 is
/// replaced by the default backend's answer, which received the error in `X-Code` and
/// the request in the other `X-*` headers; a 500 (not listed) and a 200 pass; a path
/// whose Service does not exist and a Service without endpoints go to the default
/// backend too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_custom_errors_go_to_the_default_backend() {
    let app = echo("app").await;
    let errors = echo("errors").await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let objects = format!(
        "apiVersion: v1
kind: Service
metadata: {{name: app}}
spec:
  clusterIP: 127.0.0.1
  ports: [{{name: web, port: {app_port}, targetPort: 8080}}]
---
apiVersion: v1
kind: Service
metadata: {{name: errors}}
spec:
  clusterIP: 127.0.0.1
  ports: [{{name: web, port: {errors_port}, targetPort: 8080}}]
---
apiVersion: v1
kind: Service
metadata: {{name: headless}}
spec:
  clusterIP: None
  ports: [{{name: web, port: 8080}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  annotations:
    nginx.ingress.kubernetes.io/service-upstream: \"true\"
    nginx.ingress.kubernetes.io/default-backend: errors
    nginx.ingress.kubernetes.io/custom-http-errors: \"404,503\"
spec:
  rules:
  - host: shop.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: app, port: {{number: {app_port}}}}}}}}}
      - {{path: /gone, pathType: Prefix, backend: {{service: {{name: gone, port: {{number: 80}}}}}}}}
      - {{path: /empty, pathType: Prefix, backend: {{service: {{name: headless, port: {{number: 8080}}}}}}}}
",
        app_port = app.port(),
        errors_port = errors.port(),
    );
    let _gw = Gateway::start_with(&[("all.yaml", objects)], Some(http_addr), None).await;
    let req = get("shop.test", "/status/503?x=1").header("accept", "application/json");
    let r = send_http1(http_addr, req.body(Default::default()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.echo_name(), Some("errors"), "{}", r.body);
    let j = r.json();
    assert_eq!(j["path"], "/");
    assert_eq!(j["method"], "GET");
    let h = &j["headers"];
    assert_eq!(h["x-code"], "503");
    assert_eq!(h["x-format"], "application/json");
    assert_eq!(h["x-original-uri"], "/status/503?x=1");
    assert_eq!(h["x-namespace"], "default");
    assert_eq!(h["x-ingress-name"], "shop");
    assert_eq!(h["x-service-name"], "app");
    assert_eq!(h["x-service-port"], app.port().to_string());
    assert_eq!(h["host"], "shop.test");

    let r = http1(http_addr, "shop.test", "/status/404").await.unwrap();
    assert_eq!(r.echo_name(), Some("errors"));
    assert_eq!(r.json()["headers"]["x-code"], "404");
    let r = http1(http_addr, "shop.test", "/status/500").await.unwrap();
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(r.echo_name(), Some("app"));
    let r = http1(http_addr, "shop.test", "/status/200").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.echo_name(), Some("app"));

    // No such Service: forwarded to the default backend as it is.
    let r = http1(http_addr, "shop.test", "/gone").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.echo_name(), Some("errors"));
    assert_eq!(r.json()["path"], "/gone");
    // No endpoints: replaced, with the 503 weir would have answered.
    let r = http1(http_addr, "shop.test", "/empty").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.echo_name(), Some("errors"));
    let h = &r.json()["headers"];
    assert_eq!(h["x-code"], "503");
    assert_eq!(h["x-service-name"], "headless");
}

/// `backend-protocol: GRPCS` through `weir run`: HTTP/2 over TLS (ALPN `h2`) to a TLS
/// backend, unverified as ingress-nginx's default (an h2c cluster carrying the upstream
/// TLS, sent through the HTTP/2-over-TLS pool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_grpcs_backend() {
    let pki = Pki::new();
    let (crt, key) = pki.leaf(&["grpc.internal"]);
    let backend = https_backend_h2((&crt, &key)).await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let objects = format!(
        "apiVersion: v1
kind: Service
metadata: {{name: grpc}}
spec:
  clusterIP: 127.0.0.1
  ports: [{{name: grpcs, port: {port}, targetPort: 8443}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: grpcs
  annotations:
    nginx.ingress.kubernetes.io/service-upstream: \"true\"
    nginx.ingress.kubernetes.io/backend-protocol: GRPCS
spec:
  rules:
  - host: grpcs.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: grpc, port: {{number: {port}}}}}}}}}
",
        port = backend.port()
    );
    let _gw = Gateway::start_with(&[("all.yaml", objects)], Some(http_addr), None).await;
    let r = h2c(http_addr, "grpcs.test", "/pkg.Svc/Call").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, "sni=");
    assert_eq!(r.header("x-request-version"), "HTTP/2.0");
}
