//! Host/path/header/query/method routing and precedence, weights, filters and
//! backend failures.

use std::net::SocketAddr;

use bytes::Bytes;
use http::Request;
use http_body_util::Empty;

use crate::support::*;

fn gateway(port: u16) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{type: IPAddress, value: 127.0.0.1}}]
  listeners:
  - {{name: http, protocol: HTTP, port: {port}, allowedRoutes: {{namespaces: {{from: All}}}}}}
"
    )
}

async fn backends(names: &[&str]) -> (String, Vec<SocketAddr>) {
    let mut yaml = String::new();
    let mut addrs = vec![];
    for n in names {
        let a = echo(n).await;
        yaml.push_str(&backend("default", n, &[a]));
        yaml.push_str("---\n");
        addrs.push(a);
    }
    (yaml, addrs)
}

const ROUTES: &str = "
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: precedence}
spec:
  parentRefs: [{name: gw}]
  hostnames: [foo.test]
  rules:
  - matches: [{path: {type: Exact, value: /exact}}]
    backendRefs: [{group: weir.dev, kind: Backend, name: a}]
  - matches: [{path: {type: PathPrefix, value: /api}}]
    backendRefs: [{group: weir.dev, kind: Backend, name: b}]
  - matches: [{path: {type: PathPrefix, value: /api/v2}}]
    backendRefs: [{group: weir.dev, kind: Backend, name: c}]
  - matches: [{path: {type: PathPrefix, value: /api}, headers: [{name: X-Env, value: canary}]}]
    backendRefs: [{group: weir.dev, kind: Backend, name: d}]
  - matches: [{path: {type: PathPrefix, value: /q}, queryParams: [{name: debug, value: '1'}]}]
    backendRefs: [{group: weir.dev, kind: Backend, name: e}]
  - matches: [{path: {type: Exact, value: /m}, method: POST}]
    backendRefs: [{group: weir.dev, kind: Backend, name: e}]
  - matches: [{path: {type: RegularExpression, value: '/re/[0-9]+'}}]
    backendRefs: [{group: weir.dev, kind: Backend, name: a}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: wildcard}
spec:
  parentRefs: [{name: gw}]
  hostnames: ['*.wild.test']
  rules:
  - backendRefs: [{group: weir.dev, kind: Backend, name: a}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: exact-host}
spec:
  parentRefs: [{name: gw}]
  hostnames: [bar.wild.test]
  rules:
  - backendRefs: [{group: weir.dev, kind: Backend, name: b}]
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_by_host_path_header_query_and_method_with_precedence() {
    let port = free_port();
    let (bk, _) = backends(&["a", "b", "c", "d", "e"]).await;
    let gw = Gateway::start(&[
        ("gw.yaml", gateway(port)),
        ("backends.yaml", bk),
        ("routes.yaml", ROUTES.into()),
    ])
    .await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();

    let name = |host: &'static str, path: &'static str| async move {
        let r = http1(addr, host, path).await.unwrap();
        (r.status.as_u16(), r.echo_name().map(str::to_owned))
    };
    let ok = |n: &str| (200, Some(n.to_string()));
    assert_eq!(name("foo.test", "/exact").await, ok("a"));
    assert_eq!(name("foo.test", "/api/x").await, ok("b"));
    assert_eq!(name("foo.test", "/api").await, ok("b"));
    assert_eq!(name("foo.test", "/api/v2/x").await, ok("c"));
    assert_eq!(
        name("foo.test", "/api/v2x").await,
        ok("b"),
        "prefixes match whole segments"
    );
    assert_eq!(
        name("FOO.test:80", "/api/x").await,
        ok("b"),
        "host is case-insensitive, port ignored"
    );
    assert_eq!(name("foo.test", "/q?debug=1").await, ok("e"));
    assert_eq!(name("foo.test", "/q?debug=2").await.0, 404);
    assert_eq!(name("foo.test", "/re/123").await, ok("a"));
    assert_eq!(name("foo.test", "/re/12x").await.0, 404);
    assert_eq!(
        name("foo.test", "/m").await.0,
        404,
        "GET does not match a POST-only rule"
    );
    assert_eq!(name("foo.test", "/nothing").await.0, 404);
    assert_eq!(name("x.wild.test", "/").await, ok("a"));
    assert_eq!(
        name("a.b.wild.test", "/").await,
        ok("a"),
        "wildcards cover several labels"
    );
    assert_eq!(
        name("bar.wild.test", "/").await,
        ok("b"),
        "exact host beats wildcard"
    );
    assert_eq!(name("wild.test", "/").await.0, 404);
    assert_eq!(name("other.test", "/").await.0, 404);

    let canary = Request::get("/api/x")
        .header("host", "foo.test")
        .header("x-env", "canary");
    let r = send_http1(addr, canary.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(
        r.echo_name(),
        Some("d"),
        "more header matches win at equal path"
    );
    let post = Request::post("/m").header("host", "foo.test");
    let r = send_http1(addr, post.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.echo_name(), Some("e"));

    // The echo backend saw proxy headers.
    let r = http1(addr, "foo.test", "/exact").await.unwrap().json();
    let h = &r["headers"];
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-host"], "foo.test");
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
    assert!(h["x-request-id"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(r["host"], "foo.test");

    // h2c with prior knowledge on the plaintext listener.
    let r = h2c(addr, "foo.test", "/api/v2/y").await.unwrap();
    assert_eq!(r.version, http::Version::HTTP_2);
    assert_eq!(r.echo_name(), Some("c"));
    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_split_traffic() {
    let port = free_port();
    let (bk, _) = backends(&["heavy", "light", "never"]).await;
    let route = "
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: split}
spec:
  parentRefs: [{name: gw}]
  rules:
  - backendRefs:
    - {group: weir.dev, kind: Backend, name: heavy, weight: 3}
    - {group: weir.dev, kind: Backend, name: light, weight: 1}
    - {group: weir.dev, kind: Backend, name: never, weight: 0}
";
    let gw = Gateway::start(&[
        ("gw.yaml", gateway(port)),
        ("b.yaml", bk),
        ("r.yaml", route.into()),
    ])
    .await;
    let mut client = KeepAlive::new(([127, 0, 0, 1], port).into());
    let (mut heavy, mut light, n) = (0, 0, 2000);
    for _ in 0..n {
        let r = client.get("any.test", "/").await.unwrap();
        match r.echo_name() {
            Some("heavy") => heavy += 1,
            Some("light") => light += 1,
            other => panic!("unexpected backend {other:?}"),
        }
    }
    let share = heavy as f64 / n as f64;
    assert!(
        (0.70..=0.80).contains(&share),
        "heavy got {heavy}, light {light}"
    );
    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_edit_requests_and_responses() {
    let port = free_port();
    let (bk, _) = backends(&["a"]).await;
    let route = "
apiVersion: weir.dev/v1alpha1
kind: DirectResponse
metadata: {name: teapot}
spec: {status: 418, body: short and stout, headers: [{name: x-direct, value: 'yes'}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: filters}
spec:
  parentRefs: [{name: gw}]
  hostnames: [f.test]
  rules:
  - matches: [{path: {type: PathPrefix, value: /headers}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: X-Set, value: set}], add: [{name: X-Add, value: added}], remove: [x-remove]}
    - type: ResponseHeaderModifier
      responseHeaderModifier: {add: [{name: X-Resp, value: 'yes'}], remove: [x-echo-name]}
    backendRefs: [{group: weir.dev, kind: Backend, name: a}]
  - matches: [{path: {type: PathPrefix, value: /old}}]
    filters:
    - type: URLRewrite
      urlRewrite: {hostname: rewritten.test, path: {type: ReplacePrefixMatch, replacePrefixMatch: /new}}
    backendRefs: [{group: weir.dev, kind: Backend, name: a}]
  - matches: [{path: {type: PathPrefix, value: /full}}]
    filters:
    - type: URLRewrite
      urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /replaced}}
    backendRefs: [{group: weir.dev, kind: Backend, name: a}]
  - matches: [{path: {type: PathPrefix, value: /moved}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {scheme: https, hostname: new.test, statusCode: 301}
  - matches: [{path: {type: PathPrefix, value: /port}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {port: 8443, path: {type: ReplaceFullPath, replaceFullPath: /elsewhere}}
  - matches: [{path: {type: Exact, value: /tea}}]
    filters:
    - type: ExtensionRef
      extensionRef: {group: weir.dev, kind: DirectResponse, name: teapot}
";
    let gw = Gateway::start(&[
        ("gw.yaml", gateway(port)),
        ("b.yaml", bk),
        ("r.yaml", route.into()),
    ])
    .await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();

    let req = Request::get("/headers")
        .header("host", "f.test")
        .header("x-set", "original")
        .header("x-remove", "gone")
        .header("x-add", "first");
    let r = send_http1(addr, req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.headers["x-resp"], "yes");
    assert!(r.headers.get("x-echo-name").is_none());
    let j = r.json();
    assert_eq!(j["headers"]["x-set"], "set");
    assert!(j["headers"].get("x-remove").is_none());
    assert_eq!(j["headers"]["x-add"], serde_json::json!(["first", "added"]));

    let j = http1(addr, "f.test", "/old/x?y=1").await.unwrap().json();
    assert_eq!(j["path"], "/new/x");
    assert_eq!(j["query"], "y=1");
    assert_eq!(j["host"], "rewritten.test");
    let j = http1(addr, "f.test", "/full/a/b").await.unwrap().json();
    assert_eq!(j["path"], "/replaced");

    let r = http1(addr, "f.test", "/moved/here?a=b").await.unwrap();
    assert_eq!(r.status, 301);
    assert_eq!(r.headers["location"], "https://new.test/moved/here?a=b");
    let r = http1(addr, "f.test", "/port").await.unwrap();
    assert_eq!(r.status, 302);
    assert_eq!(r.headers["location"], "http://f.test:8443/elsewhere");

    let r = http1(addr, "f.test", "/tea").await.unwrap();
    assert_eq!(r.status, 418);
    assert_eq!(r.body, "short and stout");
    assert_eq!(r.headers["x-direct"], "yes");
    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_or_empty_backends_fail_with_a_reason() {
    let port = free_port();
    let closed: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let yaml = format!(
        "{}---
apiVersion: weir.dev/v1alpha1
kind: Backend
metadata: {{name: empty}}
spec: {{endpoints: []}}
---
apiVersion: v1
kind: Service
metadata: {{name: no-endpoints}}
spec: {{ports: [{{port: 80}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: broken}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /down}}}}]
    backendRefs: [{{group: weir.dev, kind: Backend, name: down}}]
  - matches: [{{path: {{type: PathPrefix, value: /empty}}}}]
    backendRefs: [{{group: weir.dev, kind: Backend, name: empty}}]
  - matches: [{{path: {{type: PathPrefix, value: /svc}}}}]
    backendRefs: [{{name: no-endpoints, port: 80}}]
  - matches: [{{path: {{type: PathPrefix, value: /missing}}}}]
    backendRefs: [{{name: does-not-exist, port: 80}}]
",
        backend("default", "down", &[closed])
    );
    let gw = Gateway::start(&[("gw.yaml", gateway(port)), ("r.yaml", yaml)]).await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    assert_eq!(http1(addr, "x.test", "/down").await.unwrap().status, 502);
    assert_eq!(http1(addr, "x.test", "/empty").await.unwrap().status, 503);
    assert_eq!(http1(addr, "x.test", "/svc").await.unwrap().status, 503);
    assert_eq!(http1(addr, "x.test", "/missing").await.unwrap().status, 500);
    gw.gw.stop().await;
}

/// The HTTPRoute CORS filter through `weir run`: a preflight from an allowed origin is
/// answered by weir (the echo backend would have answered 200 with a body), one from
/// another origin is refused, and an actual request's response carries the headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflights_are_answered_and_responses_get_the_headers() {
    let port = free_port();
    let (bk, _) = backends(&["a"]).await;
    let route = "
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cors}
spec:
  parentRefs: [{name: gw}]
  hostnames: [cors.test]
  rules:
  - filters:
    - type: CORS
      cors:
        allowOrigins: ['https://app.example.com', 'https://*.apps.example.com']
        allowMethods: [GET, PUT]
        allowHeaders: [x-token]
        exposeHeaders: [x-request-id]
        allowCredentials: true
        maxAge: 600
    backendRefs: [{group: weir.dev, kind: Backend, name: a}]
";
    let gw = Gateway::start(&[
        ("gw.yaml", gateway(port)),
        ("b.yaml", bk),
        ("r.yaml", route.into()),
    ])
    .await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let preflight = |origin: &str| {
        Request::options("/items")
            .header("host", "cors.test")
            .header("origin", origin)
            .header("access-control-request-method", "PUT")
            .header("access-control-request-headers", "x-token")
            .body(Empty::<Bytes>::new())
            .unwrap()
    };
    let r = send_http1(addr, preflight("https://team.apps.example.com"))
        .await
        .unwrap();
    assert_eq!(r.status, 204);
    assert_eq!(r.body, "", "answered by weir, not the backend");
    let h = |r: &Resp, n: &str| r.headers.get(n).map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(
        h(&r, "access-control-allow-origin").as_deref(),
        Some("https://team.apps.example.com")
    );
    assert_eq!(
        h(&r, "access-control-allow-methods").as_deref(),
        Some("GET, PUT")
    );
    assert_eq!(
        h(&r, "access-control-allow-headers").as_deref(),
        Some("x-token")
    );
    assert_eq!(h(&r, "access-control-max-age").as_deref(), Some("600"));
    assert_eq!(
        h(&r, "access-control-allow-credentials").as_deref(),
        Some("true")
    );

    let r = send_http1(addr, preflight("https://evil.example.net"))
        .await
        .unwrap();
    assert_eq!(r.status, 403);
    assert_eq!(h(&r, "access-control-allow-origin"), None);

    let req = get("cors.test", "/items")
        .header("origin", "https://app.example.com")
        .body(Empty::new())
        .unwrap();
    let r = send_http1(addr, req).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.echo_name(), Some("a"));
    assert_eq!(
        h(&r, "access-control-allow-origin").as_deref(),
        Some("https://app.example.com")
    );
    assert_eq!(
        h(&r, "access-control-expose-headers").as_deref(),
        Some("x-request-id")
    );
    gw.gw.stop().await;
}
