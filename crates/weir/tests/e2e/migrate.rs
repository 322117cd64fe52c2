//! `weir migrate` keeps behaviour: a set of Ingresses with ingress-nginx annotations is
//! served by `weir run`, then `weir migrate`'s Gateway API + TrafficPolicy output of the
//! same files is served instead, and the same requests get the same answers — status,
//! the headers the annotations are about, and what the backend received.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{Empty, Full};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;

use crate::support::*;

/// One request of the comparison.
struct Probe {
    tls: bool,
    method: &'static str,
    host: &'static str,
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    /// Bytes of a body sent with a `Content-Length` (0: none).
    body: usize,
}

const fn get(host: &'static str, path: &'static str) -> Probe {
    Probe {
        tls: false,
        method: "GET",
        host,
        path,
        headers: &[],
        body: 0,
    }
}

/// The requests, in order (the rate-limited ones count on it).
const PROBES: &[Probe] = &[
    // rewrite-target, upstream-vhost, x-forwarded-prefix.
    get("shop.test", "/shop/cart"),
    // app-root.
    get("shop.test", "/"),
    // enable-cors: a preflight and a simple request.
    Probe {
        method: "OPTIONS",
        headers: &[
            ("origin", "https://app.example"),
            ("access-control-request-method", "PUT"),
        ],
        ..get("shop.test", "/shop/x")
    },
    Probe {
        headers: &[("origin", "https://app.example")],
        ..get("shop.test", "/shop/x")
    },
    // ssl-redirect on the plaintext listener, also for the default backend.
    get("secure.test", "/api?y=1"),
    get("other.test", "/anything"),
    // basic auth over TLS: refused, wrong, right; the default backend.
    Probe {
        tls: true,
        ..get("secure.test", "/api")
    },
    Probe {
        tls: true,
        headers: &[("authorization", "Basic YW5uOndyb25n")],
        ..get("secure.test", "/api")
    },
    Probe {
        tls: true,
        headers: &[("authorization", "Basic YW5uOnNlY3JldA==")],
        ..get("secure.test", "/api")
    },
    Probe {
        tls: true,
        headers: &[("authorization", "Basic YW5uOnNlY3JldA==")],
        ..get("secure.test", "/elsewhere")
    },
    // permanent-redirect.
    get("moved.test", "/old"),
    // denylist-source-range.
    get("blocked.test", "/"),
    // limit-rpm 1 with burst multiplier 2: two pass, the third is refused.
    get("limited.test", "/a"),
    get("limited.test", "/b"),
    get("limited.test", "/c"),
    // proxy-next-upstream: one of two endpoints refuses connections; every request passes.
    get("retry.test", "/1"),
    get("retry.test", "/2"),
    get("retry.test", "/3"),
    get("retry.test", "/4"),
    // An unsupported annotation is not served either way (reported, not applied).
    get("snippet.test", "/"),
    // force-ssl-redirect, without TLS on the Ingress.
    get("force.test", "/x?y=1"),
    // proxy-body-size 1k: over it 413, at it forwarded.
    Probe {
        method: "POST",
        body: 1025,
        ..get("sized.test", "/up")
    },
    Probe {
        method: "POST",
        body: 1024,
        ..get("sized.test", "/up")
    },
    // proxy-connect-timeout + proxy-read-timeout: 6 s for a backend that takes 10.
    get("timed.test", "/delay/10000"),
    // affinity cookie: the session cookie is set.
    get("sticky.test", "/"),
];

fn ingresses() -> String {
    let ing = |name: &str, annotations: &str, host: &str, backend: &str| {
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  annotations:
{annotations}spec:
  rules:
  - host: {host}
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{resource: {{apiGroup: weir.dev, kind: Backend, name: {backend}}}}}}}
---
"
        )
    };
    let mut out = String::new();
    out += "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  annotations:
    nginx.ingress.kubernetes.io/rewrite-target: /
    nginx.ingress.kubernetes.io/upstream-vhost: internal.test
    nginx.ingress.kubernetes.io/x-forwarded-prefix: /shop
    nginx.ingress.kubernetes.io/app-root: /shop
    nginx.ingress.kubernetes.io/enable-cors: \"true\"
    nginx.ingress.kubernetes.io/cors-allow-origin: https://app.example
    nginx.ingress.kubernetes.io/cors-allow-methods: GET, PUT
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
    nginx.ingress.kubernetes.io/ssl-redirect: \"true\"
    nginx.ingress.kubernetes.io/auth-type: basic
    nginx.ingress.kubernetes.io/auth-secret: htpasswd
    nginx.ingress.kubernetes.io/auth-realm: Shop
spec:
  tls:
  - hosts: [secure.test]
    secretName: secure-cert
  defaultBackend: {resource: {apiGroup: weir.dev, kind: Backend, name: b}}
  rules:
  - host: secure.test
    http:
      paths:
      - {path: /api, pathType: Exact, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: a}}}
---
";
    out += &ing(
        "moved",
        "    nginx.ingress.kubernetes.io/permanent-redirect: https://new.example.com/landing\n",
        "moved.test",
        "a",
    );
    out += &ing(
        "blocked",
        "    nginx.ingress.kubernetes.io/denylist-source-range: 127.0.0.0/8\n",
        "blocked.test",
        "a",
    );
    out += &ing(
        "limited",
        "    nginx.ingress.kubernetes.io/limit-rpm: \"1\"\n    nginx.ingress.kubernetes.io/limit-burst-multiplier: \"2\"\n",
        "limited.test",
        "a",
    );
    out += &ing(
        "retry",
        "    nginx.ingress.kubernetes.io/proxy-next-upstream: error timeout\n",
        "retry.test",
        "flaky",
    );
    out += &ing(
        "force",
        "    nginx.ingress.kubernetes.io/force-ssl-redirect: \"true\"\n",
        "force.test",
        "a",
    );
    out += &ing(
        "sized",
        "    nginx.ingress.kubernetes.io/proxy-body-size: 1k\n",
        "sized.test",
        "a",
    );
    out += &ing(
        "timed",
        "    nginx.ingress.kubernetes.io/proxy-connect-timeout: \"5\"\n    nginx.ingress.kubernetes.io/proxy-read-timeout: \"1\"\n",
        "timed.test",
        "a",
    );
    out += &ing(
        "sticky",
        "    nginx.ingress.kubernetes.io/affinity: cookie\n    nginx.ingress.kubernetes.io/session-cookie-name: STICKY\n    nginx.ingress.kubernetes.io/session-cookie-max-age: \"3600\"\n",
        "sticky.test",
        "a",
    );
    out += &ing(
        "snippet",
        "    nginx.ingress.kubernetes.io/configuration-snippet: \"more_set_headers 'x-snippet: 1';\"\n",
        "snippet.test",
        "a",
    );
    out
}

/// What one answer shows: status, the headers the annotations are about (ports of the
/// listeners replaced by names), and what the backend saw.
fn summary(r: &Resp, http_port: u16, https_port: u16) -> String {
    let mut out = format!("{}", r.status.as_u16());
    for h in [
        "location",
        "www-authenticate",
        "access-control-allow-origin",
        "access-control-allow-methods",
        "access-control-allow-credentials",
        "access-control-max-age",
        "x-echo-name",
        "x-snippet",
    ] {
        if let Some(v) = r.headers.get(h) {
            let v = v
                .to_str()
                .unwrap_or("?")
                .replace(&format!(":{https_port}"), ":HTTPS")
                .replace(&format!(":{http_port}"), ":HTTP");
            out += &format!(" {h}={v}");
        }
    }
    // A generated cookie: its name and attributes (the value is random).
    if let Some(c) = r.headers.get("set-cookie").and_then(|v| v.to_str().ok()) {
        let (pair, attrs) = c.split_once(';').unwrap_or((c, ""));
        let name = pair.split('=').next().unwrap_or("");
        out += &format!(" set-cookie={name}=…;{attrs}");
    }
    if r.echo_name().is_some() {
        let v = r.json();
        out += &format!(
            " upstream: {} {} host={} x-forwarded-prefix={} authorization={} body={}",
            v["method"],
            v["path"],
            v["headers"]["host"],
            v["headers"]["x-forwarded-prefix"],
            v["headers"]["authorization"],
            v["body_bytes"]
        );
    }
    out
}

async fn send(p: &Probe, http: SocketAddr, https: SocketAddr, pki: &Pki) -> Resp {
    let mut req = Request::builder()
        .method(p.method)
        .uri(p.path)
        .header("host", p.host);
    for (k, v) in p.headers {
        req = req.header(*k, *v);
    }
    if !p.tls && p.body == 0 {
        return send_http1(http, req.body(Empty::<Bytes>::new()).unwrap())
            .await
            .unwrap();
    }
    let req = req
        .body(Full::new(Bytes::from(vec![b'x'; p.body])))
        .unwrap();
    let resp = if p.tls {
        let stream = TcpStream::connect(https).await.unwrap();
        let connector = tokio_rustls::TlsConnector::from(pki.client_config(&[b"http/1.1"]));
        let tls = connector
            .connect(ServerName::try_from(p.host.to_string()).unwrap(), stream)
            .await
            .unwrap();
        let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        tx.send_request(req).await.unwrap()
    } else {
        let stream = TcpStream::connect(http).await.unwrap();
        let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        tx.send_request(req).await.unwrap()
    };
    let (parts, body) = resp.into_parts();
    use http_body_util::BodyExt;
    let body = body.collect().await.unwrap().to_bytes();
    Resp {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        version: parts.version,
    }
}

/// Waits until a gateway serves (without spending the rate-limited budget), then sends
/// every probe and returns the summaries.
async fn run_probes(http: SocketAddr, https: SocketAddr, pki: &Pki) -> Vec<String> {
    let ready = eventually(Duration::from_secs(10), || async {
        let shop = send(&PROBES[0], http, https, pki).await;
        let auth = send(&PROBES[6], http, https, pki).await;
        shop.status == 200 && auth.status == 401
    })
    .await;
    assert!(ready, "the gateway on {http} / {https} serves");
    let mut out = Vec::new();
    for p in PROBES {
        let r = send(p, http, https, pki).await;
        out.push(format!(
            "{} {}://{}{} -> {}",
            p.method,
            if p.tls { "https" } else { "http" },
            p.host,
            p.path,
            summary(&r, http.port(), https.port())
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrated_ingresses_behave_the_same() {
    let (a, b) = (echo("a").await, echo("b").await);
    let refused: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let pki = Pki::new();
    let (cert, key) = pki.leaf(&["secure.test"]);
    let htpasswd = "apiVersion: v1
kind: Secret
metadata: {name: htpasswd}
type: Opaque
stringData:
  auth: |
    ann:$apr1$xyzabc$cTvtri5GYS9vQXkM4wcQi.
";
    let shared = [
        (
            "backends.yaml",
            format!(
                "{}---\n{}---\n{}",
                backend("default", "a", &[a]),
                backend("default", "b", &[b]),
                backend("default", "flaky", &[refused, a])
            ),
        ),
        (
            "secrets.yaml",
            format!(
                "{}---\n{htpasswd}",
                tls_secret("default", "secure-cert", &cert, &key)
            ),
        ),
    ];

    // 1. The Ingresses, served as Ingresses.
    let http1_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let https1_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut files = vec![("ingress.yaml", ingresses())];
    files.extend(shared.iter().cloned());
    let served = Gateway::start_with(&files, Some(http1_addr), Some(https1_addr)).await;
    let before = run_probes(http1_addr, https1_addr, &pki).await;

    // 2. `weir migrate` of the same files.
    let (http_port, https_port) = (free_port(), free_port());
    let opts = weir::migrate::MigrateOptions {
        config: served.dir.path().to_path_buf(),
        gateway_name: "weir".into(),
        gateway_namespace: "default".into(),
        gateway_class: "weir".into(),
        http_port,
        https_port,
        address: Some("127.0.0.1".into()),
        ingress_classes: vec!["weir".into(), "nginx".into()],
    };
    let migration = weir::migrate::migrate(&opts);
    let report = migration.report();
    assert_eq!(migration.ingresses, 11, "{report}");
    assert!(
        report.contains("nginx.ingress.kubernetes.io/configuration-snippet"),
        "the snippet is named: {report}"
    );
    let not_carried: Vec<&str> = report
        .lines()
        .filter(|l| l.contains("not carried over:"))
        .collect();
    assert_eq!(not_carried.len(), 1, "only the snippet: {report}");
    let yaml = migration.yaml().unwrap();
    drop(served);

    // `weir check` accepts it, with the objects it uses.
    let mut files = vec![("migrated.yaml", yaml.clone())];
    files.extend(shared.iter().cloned());
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in &files {
        std::fs::write(dir.path().join(name), body).unwrap();
    }
    let mut out = Vec::new();
    let problems = weir::check::check(
        &weir::check::CheckOptions {
            config: dir.path().to_path_buf(),
            ingress_http: None,
            ingress_https: None,
            ingress_class: "weir".into(),
            more_ingress_classes: Vec::new(),
            json: false,
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(
        problems,
        0,
        "weir check: {}\n{yaml}",
        String::from_utf8_lossy(&out)
    );

    // 3. The migrated objects, served without Ingresses: the same answers.
    let _migrated = Gateway::start(&files).await;
    let after = run_probes(
        ([127, 0, 0, 1], http_port).into(),
        ([127, 0, 0, 1], https_port).into(),
        &pki,
    )
    .await;
    let diff: Vec<String> = before
        .iter()
        .zip(&after)
        .filter(|(x, y)| x != y)
        .map(|(x, y)| format!("ingress:  {x}\nmigrated: {y}"))
        .collect();
    assert!(
        diff.is_empty(),
        "{}\n\nmigrated objects:\n{yaml}",
        diff.join("\n")
    );
    // The answers are the ones the annotations ask for (so that equal is not "equally broken").
    let expect = [
        (
            0,
            "200 x-echo-name=a upstream: \"GET\" \"/\" host=\"internal.test\" x-forwarded-prefix=\"/shop\"",
        ),
        (1, "302 location=http://shop.test:HTTP/shop"),
        // The HTTPS redirect comes before the Ingress's basic auth, as in ingress-nginx.
        (4, "308 location=https://secure.test:HTTPS/api?y=1"),
        (6, "401 www-authenticate=Basic realm=\"Shop\""),
        (8, "200 x-echo-name=a"),
        (9, "200 x-echo-name=b"),
        (10, "301 location=https://new.example.com/landing"),
        (11, "403"),
        (13, "200"),
        (14, "429"),
        (18, "200"),
        (19, "200 x-echo-name=a"),
        (20, "308 location=https://force.test:HTTPS/x?y=1"),
        (21, "413"),
        (22, "200 x-echo-name=a upstream: \"POST\" \"/up\""),
        (23, "504"),
        (
            24,
            "200 x-echo-name=a set-cookie=STICKY=…; Path=/; Max-Age=3600; HttpOnly",
        ),
    ];
    for (i, want) in expect {
        let got = before[i].split(" -> ").nth(1).unwrap();
        assert!(got.starts_with(want), "probe {i}: {got} (want {want}…)");
    }
    assert!(
        before[2].contains("access-control-allow-origin=https://app.example"),
        "{}",
        before[2]
    );
    assert!(!before[19].contains("x-snippet"), "{}", before[19]);
    assert!(before[22].ends_with("body=1024"), "{}", before[22]);
}
