//! ingress-nginx annotations through `weir run` that the other standalone tests leave
//! out: `temporal-redirect` (and its `-code`), `auth-url` with `auth-response-headers`
//! and `auth-signin`, the `cors-*` settings, `session-cookie-expires`,
//! `session-cookie-samesite` (and `-conditional-samesite-none`), `session-cookie-secure`,
//! `canary-by-header-value`, `backend-protocol: GRPC` and `enable-websockets`.

use std::net::SocketAddr;

use crate::support::*;

/// An Ingress of `host` whose `/` goes to Backend `backend`, with `annotations` (YAML
/// lines, indented by four spaces; none: an empty map).
fn ingress(name: &str, host: &str, backend: &str, annotations: &str) -> String {
    let annotations = if annotations.is_empty() {
        "    {}\n"
    } else {
        annotations
    };
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
}

/// Each annotation's documented answer: `temporal-redirect` 302 (307 with
/// `temporal-redirect-code`); `auth-url` answered 200 lets the request through with the
/// `auth-response-headers` of the answer set on it, answered 401 refuses it, and with
/// `auth-signin` redirects to the sign-in page with `rd=` the original URL; a preflight
/// from an origin of the `cors-allow-origin` list gets it back with the configured
/// methods, headers, credentials and max age, another origin none, and an actual request
/// the `cors-expose-headers`; `session-cookie-expires` gives the cookie its lifetime
/// (`Max-Age`); `session-cookie-samesite` its `SameSite` (`None` with `Secure`, left out
/// for an old Chrome with `session-cookie-conditional-samesite-none`);
/// `session-cookie-secure` makes it `Secure` over plain HTTP (without it, and without
/// `SameSite=None`, a cookie set over plain HTTP is not); `canary-by-header-value` sends only that value to the canary;
/// `backend-protocol: GRPC` speaks h2c to the backend (the echo backend sees HTTP/2,
/// where the same backend without it sees HTTP/1.1); and a WebSocket upgrade with
/// `enable-websockets` reaches a WebSocket server, whose accept key and frames come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_answer_annotations() {
    let a = echo("a").await;
    let b = echo("b").await;
    let ws = websocket_backend([127, 0, 0, 1].into()).await;
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let n = "    nginx.ingress.kubernetes.io";
    let ingresses = [
        ingress(
            "away",
            "away.test",
            "a",
            &format!("{n}/temporal-redirect: https://elsewhere.test/x\n"),
        ),
        ingress(
            "away-307",
            "away307.test",
            "a",
            &format!(
                "{n}/temporal-redirect: https://elsewhere.test/y\n{n}/temporal-redirect-code: \"307\"\n"
            ),
        ),
        ingress(
            "allowed",
            "allowed.test",
            "a",
            &format!(
                "{n}/auth-url: http://{b}/status/200\n{n}/auth-response-headers: X-Echo-Name\n"
            ),
        ),
        ingress(
            "refused",
            "refused.test",
            "a",
            &format!("{n}/auth-url: http://{b}/status/401\n"),
        ),
        ingress(
            "signin",
            "signin.test",
            "a",
            &format!(
                "{n}/auth-url: http://{b}/status/401\n{n}/auth-signin: https://login.test/start\n"
            ),
        ),
        ingress(
            "cors",
            "cors.test",
            "a",
            &format!(
                "{n}/enable-cors: \"true\"\n{n}/cors-allow-origin: \"https://one.test, https://two.test\"\n{n}/cors-allow-methods: \"GET, PUT\"\n{n}/cors-allow-headers: X-Custom-Header\n{n}/cors-expose-headers: X-Trace\n{n}/cors-allow-credentials: \"true\"\n{n}/cors-max-age: \"600\"\n"
            ),
        ),
        ingress(
            "expiring",
            "expiring.test",
            "a",
            &format!("{n}/affinity: cookie\n{n}/session-cookie-expires: \"120\"\n"),
        ),
        ingress(
            "cross-site",
            "cross.test",
            "a",
            &format!(
                "{n}/affinity: cookie\n{n}/session-cookie-samesite: None\n{n}/session-cookie-conditional-samesite-none: \"true\"\n"
            ),
        ),
        ingress(
            "same-site",
            "samesite.test",
            "a",
            &format!("{n}/affinity: cookie\n{n}/session-cookie-samesite: Strict\n"),
        ),
        ingress(
            "secure-cookie",
            "secure.test",
            "a",
            &format!("{n}/affinity: cookie\n{n}/session-cookie-secure: \"true\"\n"),
        ),
        ingress("valued", "valued.test", "a", ""),
        ingress(
            "valued-canary",
            "valued.test",
            "b",
            &format!(
                "{n}/canary: \"true\"\n{n}/canary-by-header: X-Region\n{n}/canary-by-header-value: eu-west\n"
            ),
        ),
        ingress(
            "grpc",
            "grpc.test",
            "a",
            &format!("{n}/backend-protocol: GRPC\n"),
        ),
        ingress("plain", "plain.test", "a", ""),
        ingress(
            "chat",
            "chat.test",
            "ws",
            &format!("{n}/enable-websockets: \"true\"\n"),
        ),
    ]
    .concat();
    let backends = [
        backend("default", "a", &[a]),
        backend("default", "b", &[b]),
        backend("default", "ws", &[ws]),
    ]
    .join("---\n");
    let files = [("ingress.yaml", ingresses), ("backends.yaml", backends)];
    let _gw = Gateway::start_with(&files, Some(http_addr), None).await;
    let addr = http_addr;

    for (host, code, location) in [
        ("away.test", 302, "https://elsewhere.test/x"),
        ("away307.test", 307, "https://elsewhere.test/y"),
    ] {
        let r = http1(addr, host, "/old").await.unwrap();
        assert_eq!(r.status, code, "{host}: {r:?}");
        assert_eq!(r.header("location"), location);
        assert!(r.echo_name().is_none());
    }

    let r = http1(addr, "allowed.test", "/page").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.echo_name(), Some("a"));
    assert_eq!(
        r.json()["headers"]["x-echo-name"],
        "b",
        "the authorization answer's header is set on the request: {}",
        r.body
    );
    let r = http1(addr, "refused.test", "/page").await.unwrap();
    assert_eq!(r.status, 401);
    assert!(r.echo_name().is_none(), "the backend is not reached");
    let r = http1(addr, "signin.test", "/page?q=1").await.unwrap();
    assert_eq!(r.status, 302, "{r:?}");
    let location = r.header("location");
    assert!(
        location.starts_with("https://login.test/start?rd="),
        "{location}"
    );
    assert!(location.contains("signin.test"), "{location}");

    check_ingress_nginx_cors(addr, "test", "a").await;

    let r = http1(addr, "expiring.test", "/").await.unwrap();
    let set = r.header("set-cookie");
    assert!(
        set.starts_with("INGRESSCOOKIE="),
        "the default name: {set:?}"
    );
    assert!(set.contains("Max-Age=120"), "{set:?}");
    assert!(!set.contains("SameSite"), "{set:?}");
    assert!(
        !set.contains("Secure"),
        "not asked for, over plain HTTP: {set:?}"
    );

    // `session-cookie-samesite`: as annotated, `None` with `Secure`, and left out for a
    // browser known to mishandle `None` with `session-cookie-conditional-samesite-none`.
    let firefox = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0";
    let chrome_60 = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/60.0.3112.90 Safari/537.36";
    for (host, agent, want) in [
        ("cross.test", firefox, Some("; SameSite=None; Secure")),
        ("cross.test", chrome_60, None),
        ("samesite.test", chrome_60, Some("; SameSite=Strict")),
    ] {
        let r = send(addr, get(host, "/").header("user-agent", agent)).await;
        assert_eq!(r.status, 200, "{host}: {}", r.body);
        let set = r.header("set-cookie");
        assert!(set.starts_with("INGRESSCOOKIE="), "{host}: {set:?}");
        match want {
            Some(tail) => assert!(set.ends_with(tail), "{host}, {agent}: {set:?}"),
            None => assert!(!set.contains("SameSite"), "{host}, {agent}: {set:?}"),
        }
        if host != "cross.test" || agent == chrome_60 {
            assert!(!set.contains("Secure"), "{host}, {agent}: {set:?}");
        }
    }
    // `session-cookie-secure: "true"`: `Secure` over plain HTTP as well.
    let r = http1(addr, "secure.test", "/").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let set = r.header("set-cookie");
    assert!(set.starts_with("INGRESSCOOKIE="), "{set:?}");
    assert!(set.ends_with("; Path=/; HttpOnly; Secure"), "{set:?}");

    for (value, want) in [("eu-west", "b"), ("us-east", "a")] {
        let r = send(addr, get("valued.test", "/").header("x-region", value)).await;
        assert_eq!(r.echo_name(), Some(want), "X-Region: {value}");
    }
    assert_eq!(
        http1(addr, "valued.test", "/").await.unwrap().echo_name(),
        Some("a")
    );

    for (host, want) in [("grpc.test", "HTTP/2.0"), ("plain.test", "HTTP/1.1")] {
        let r = http1(addr, host, "/").await.unwrap();
        assert_eq!(r.status, 200, "{host}: {}", r.body);
        assert_eq!(r.json()["protocol"], want, "{host}: {}", r.body);
    }

    let (head, frame) = websocket_exchange(addr, "chat.test").await.unwrap();
    assert!(
        head.contains(&format!(
            "sec-websocket-accept: {}",
            websocket_accept(WEBSOCKET_KEY).to_ascii_lowercase()
        )),
        "{head}"
    );
    assert_eq!(frame, b"\x81\x05HELLO", "the server's frame comes back");
}
