//! External authorization from files: an auth service started by the test allows or
//! refuses by the request's `Authorization`; allowed requests reach the backend with the
//! service's headers, refusals reach the client with the service's status and
//! `WWW-Authenticate`, a service that does not answer in time refuses with 503, answers
//! are cached per credentials, a 401 becomes a redirect to a sign-in URL where the
//! policy names one, and routes without the policy never call the service.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use crate::support::*;

/// What the auth service saw.
#[derive(Default)]
struct Seen {
    calls: AtomicUsize,
    /// `X-Original-URI` and `X-Original-Method` of the last call.
    last: Mutex<(String, String)>,
}

/// An auth service on 127.0.0.1: `Bearer good` → 200 with `X-User: alice`; `Bearer
/// slow` → an answer only after 10 s; anything else → 401 with a challenge.
async fn auth_service() -> (SocketAddr, Arc<Seen>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let s = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = l.accept().await else {
                return;
            };
            let s = Arc::clone(&s);
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let s = Arc::clone(&s);
                async move {
                    s.calls.fetch_add(1, Ordering::SeqCst);
                    let h = |n: &str| {
                        req.headers()
                            .get(n)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_owned()
                    };
                    *s.last.lock().unwrap() = (h("x-original-uri"), h("x-original-method"));
                    let resp = match h("authorization").as_str() {
                        "Bearer good" => Response::builder()
                            .header("x-user", "alice")
                            .header("x-not-copied", "1"),
                        "Bearer slow" => {
                            tokio::time::sleep(Duration::from_secs(10)).await;
                            Response::builder()
                        }
                        _ => Response::builder()
                            .status(401)
                            .header("www-authenticate", "Bearer realm=\"test\""),
                    };
                    Ok::<_, Infallible>(resp.body(Full::new(Bytes::from_static(b"ok"))).unwrap())
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

fn manifests(port: u16, app: SocketAddr, auth: SocketAddr) -> String {
    let objects = [
        http_gateway(port),
        http_route("app", "app.test", "a"),
        http_route("open", "open.test", "a"),
        http_route("portal", "portal.test", "a"),
    ]
    .join("---\n");
    objects
        + "---\n"
        + &format!(
            "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: portal}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: portal}}]
  extAuth:
    url: http://{auth}/verify
    signinUrl: https://login.test/start?app=portal
---
apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: auth}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: app}}]
  extAuth:
    url: http://{auth}/verify
    headersToSend: [authorization]
    responseHeaders: [x-user]
    timeout: 2s
    cache: {{ttl: 1h, maxEntries: 100}}
---
{}",
            backend("default", "a", &[app])
        )
}

async fn call(addr: SocketAddr, host: &str, token: Option<&str>) -> Resp {
    let mut req = get(host, "/shop/cart?item=1").header("x-user", "mallory");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    send_http1(addr, req.body(http_body_util::Empty::new()).unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_authorization_allows_refuses_times_out_and_caches() {
    let port = free_port();
    let a = echo("a").await;
    let (auth, seen) = auth_service().await;
    let gw = Gateway::start(&[("app.yaml", manifests(port, a, auth))]).await;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, "app.test", None).await.status == 401
        })
        .await,
        "the policy applies"
    );

    // Refused: the service's status and challenge reach the client.
    let r = call(addr, "app.test", Some("bad")).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.headers["www-authenticate"], "Bearer realm=\"test\"");
    assert!(r.echo_name().is_none());

    // Allowed: the backend sees the service's X-User, not the client's.
    let r = call(addr, "app.test", Some("good")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let echoed = r.json();
    assert_eq!(echoed["headers"]["x-user"], "alice", "{echoed}");
    assert!(echoed["headers"].get("x-not-copied").is_none(), "{echoed}");
    assert_eq!(
        *seen.last.lock().unwrap(),
        ("/shop/cart?item=1".to_owned(), "GET".to_owned())
    );

    // Cached: the same credentials cost no more calls.
    let calls = seen.calls.load(Ordering::SeqCst);
    for _ in 0..5 {
        assert_eq!(call(addr, "app.test", Some("good")).await.status, 200);
    }
    assert_eq!(seen.calls.load(Ordering::SeqCst), calls);

    // A service that does not answer in time: 503 (the call is abandoned at 2 s).
    let r = call(addr, "app.test", Some("slow")).await;
    assert_eq!(r.status, 503, "{}", r.body);

    // A refusal (401) on a policy with a sign-in URL: a redirect there, with the
    // original URL in `rd`.
    let r = call(addr, "portal.test", Some("bad")).await;
    assert_eq!(r.status, 302);
    assert_eq!(
        r.headers["location"],
        "https://login.test/start?app=portal&rd=http%3A%2F%2Fportal.test%2Fshop%2Fcart%3Fitem%3D1"
    );
    assert_eq!(call(addr, "portal.test", Some("good")).await.status, 200);

    // Another route is not guarded and never calls the service.
    let calls = seen.calls.load(Ordering::SeqCst);
    let r = call(addr, "open.test", None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["headers"]["x-user"], "mallory");
    assert_eq!(seen.calls.load(Ordering::SeqCst), calls);

    let m = gw.admin_get("/metrics").await.body;
    let value = |name: &str| {
        m.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    assert!(value("weir_ext_auth_cache_hits_total") >= 5.0);
    assert!(value("weir_ext_auth_allowed_total") >= 1.0);
    assert!(value("weir_ext_auth_denied_total") >= 2.0);
    assert!(value("weir_ext_auth_errors_total") >= 1.0);
}
