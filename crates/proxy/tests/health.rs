//! Active health checks against real backends on 127.0.0.1: an endpoint failing its
//! probe stops getting traffic and gets it back once it passes again (HTTP, TCP and
//! gRPC probes), and there is one prober per endpoint however many routes and clusters
//! use it.

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use support::*;
use tokio::net::TcpListener;
use weir_model::{
    BackendKind, HealthCheck, HealthProbe, Policy, PolicyTarget, Protocol, Resource, Timeouts,
    UpstreamProtocol,
};

/// The cluster key the translator gives Service `default/app` port 80: the data plane
/// derives the Service's policy target from it.
const APP: &str = "service/default/app:80";

fn app_target() -> PolicyTarget {
    PolicyTarget::Backend {
        kind: BackendKind::Service,
        namespace: "default".into(),
        name: "app".into(),
    }
}

fn health_policy(probe: HealthProbe, interval_ms: u64) -> Resource {
    let check = HealthCheck {
        probe,
        interval: Duration::from_millis(interval_ms),
        timeout: Duration::from_secs(2).max(Duration::from_millis(interval_ms)),
        jitter: Duration::ZERO,
        healthy_threshold: 1,
        unhealthy_threshold: 2,
    };
    Resource::Policy(Arc::new(
        Policy::new(app_target(), Timeouts::default(), None, None)
            .with_health_check(Some(Arc::new(check))),
    ))
}

fn http_probe() -> HealthProbe {
    HealthProbe::Http {
        path: "/healthz".into(),
        host: Some("health.test".into()),
        statuses: vec![(200, 299)],
    }
}

/// An HTTP/1.1 + h2c backend whose traffic always succeeds and whose health can be
/// switched: `/healthz` answers 200 or 503 (only an active health check can see it go
/// bad, passive outlier detection cannot). gRPC health checks
/// (`/grpc.health.v1.Health/Check`) answer SERVING or NOT_SERVING by the same switch.
struct Pod {
    addr: SocketAddr,
    healthy: Arc<AtomicBool>,
    /// Traffic (not probes) answered 503.
    failing: Arc<AtomicBool>,
    served: Arc<AtomicUsize>,
    probed: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Pod {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Pod {
    async fn start() -> Pod {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let healthy = Arc::new(AtomicBool::new(true));
        let failing = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let probed = Arc::new(AtomicUsize::new(0));
        let (h, f, s, p) = (
            healthy.clone(),
            failing.clone(),
            served.clone(),
            probed.clone(),
        );
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = tcp.accept().await else {
                    continue;
                };
                let (h, f, s, p) = (h.clone(), f.clone(), s.clone(), p.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (h, f, s, p) = (h.clone(), f.clone(), s.clone(), p.clone());
                        async move { Ok::<_, Infallible>(answer(req, &h, &f, &s, &p).await) }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Pod {
            addr,
            healthy,
            failing,
            served,
            probed,
            task,
        }
    }

    fn set_healthy(&self, healthy: bool) {
        self.healthy.store(healthy, Ordering::SeqCst);
    }

    fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }

    fn probed(&self) -> usize {
        self.probed.load(Ordering::SeqCst)
    }
}

async fn answer(
    req: Request<Incoming>,
    healthy: &AtomicBool,
    failing: &AtomicBool,
    served: &AtomicUsize,
    probed: &AtomicUsize,
) -> Response<BoxBody<Bytes, Infallible>> {
    let ok = healthy.load(Ordering::SeqCst);
    match req.uri().path() {
        "/healthz" => {
            probed.fetch_add(1, Ordering::SeqCst);
            assert_eq!(req.headers()["host"], "health.test", "the probe's Host");
            Response::builder()
                .status(if ok { 200 } else { 503 })
                .body(Full::new(Bytes::new()).boxed())
                .unwrap()
        }
        "/grpc.health.v1.Health/Check" => {
            probed.fetch_add(1, Ordering::SeqCst);
            assert_eq!(req.headers()["content-type"], "application/grpc");
            let body = req.into_body().collect().await.unwrap().to_bytes();
            // HealthCheckRequest { service: "echo.Echo" }.
            assert_eq!(&body[5..], b"\x0a\x09echo.Echo", "the probe's request");
            // HealthCheckResponse { status: SERVING (1) | NOT_SERVING (2) }.
            let mut frame = BytesMut::new();
            frame.put_u8(0);
            frame.put_u32(2);
            frame.put_slice(&[0x08, if ok { 1 } else { 2 }]);
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", "0".parse().unwrap());
            let body = http_body_util::StreamBody::new(futures_util::stream::iter([
                Ok::<_, Infallible>(hyper::body::Frame::data(frame.freeze())),
                Ok(hyper::body::Frame::trailers(trailers)),
            ]));
            Response::builder()
                .header("content-type", "application/grpc")
                .body(body.boxed())
                .unwrap()
        }
        _ => {
            served.fetch_add(1, Ordering::SeqCst);
            let status = if failing.load(Ordering::SeqCst) {
                503
            } else {
                200
            };
            Response::builder()
                .status(status)
                .body(Full::new(Bytes::from_static(b"ok")).boxed())
                .unwrap()
        }
    }
}

/// Polls `cond` every 20 ms for up to 10 s.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `n` requests and returns how many each pod served.
async fn spread(p: &Proxy, pods: &[&Pod], n: usize) -> Vec<usize> {
    let before: Vec<usize> = pods.iter().map(|p| p.served()).collect();
    let mut conn = Conn::h1(p.addr).await;
    for _ in 0..n {
        assert_eq!(conn.get("app.test", "/").await.status, 200);
    }
    pods.iter()
        .zip(before)
        .map(|(p, b)| p.served() - b)
        .collect()
}

async fn proxy_for(pods: &[&Pod], probe: HealthProbe, protocol: UpstreamProtocol) -> Proxy {
    let addrs: Vec<SocketAddr> = pods.iter().map(|p| p.addr).collect();
    Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("app.test"), vec![rule("/", forward(&[(APP, 1)]))]),
        cluster(APP, &addrs, protocol),
        health_policy(probe, 100),
    ])
    .await
}

/// The shared check of every probe kind: the sick pod's traffic stops while it fails its
/// probes and resumes once it passes again; the others' never stops.
async fn out_and_back(p: &Proxy, a: &Pod, b: &Pod, sick: &Pod) {
    eventually("three probers", || {
        p.metric("weir_upstream_health_probers") == 3
    })
    .await;
    let all = spread(p, &[a, b, sick], 90).await;
    assert!(all.iter().all(|n| *n >= 15), "{all:?}");

    sick.set_healthy(false);
    eventually("the pod taken out", || {
        p.metric("weir_upstream_unhealthy_endpoints") == 1
    })
    .await;
    let out = spread(p, &[a, b, sick], 200).await;
    assert_eq!(out[2], 0, "an unhealthy endpoint gets no traffic: {out:?}");
    assert!(p.metric("weir_upstream_health_checks_total{result=\"failed\"}") >= 2);

    sick.set_healthy(true);
    eventually("the pod back", || {
        p.metric("weir_upstream_unhealthy_endpoints") == 0
    })
    .await;
    let back = spread(p, &[a, b, sick], 150).await;
    assert!(
        back[2] >= 25,
        "a recovered endpoint gets its share: {back:?}"
    );
    assert!(p.metric("weir_upstream_health_checks_total{result=\"passed\"}") >= 3);
}

#[tokio::test]
async fn http_probe_takes_a_failing_endpoint_out_and_brings_it_back() {
    let (a, b, sick) = (Pod::start().await, Pod::start().await, Pod::start().await);
    let p = proxy_for(&[&a, &b, &sick], http_probe(), UpstreamProtocol::Http1).await;
    out_and_back(&p, &a, &b, &sick).await;
    assert!(sick.probed() >= 3);
}

#[tokio::test]
async fn grpc_probe_takes_a_not_serving_endpoint_out_and_brings_it_back() {
    let (a, b, sick) = (Pod::start().await, Pod::start().await, Pod::start().await);
    let probe = HealthProbe::Grpc {
        service: "echo.Echo".into(),
    };
    let p = proxy_for(&[&a, &b, &sick], probe, UpstreamProtocol::H2c).await;
    out_and_back(&p, &a, &b, &sick).await;
    assert!(sick.probed() >= 3);
}

/// A TCP probe sees a refused connect: an endpoint whose port closes is taken out
/// before any request of a client fails on it... and is back once it listens again.
#[tokio::test]
async fn tcp_probe_takes_a_closed_port_out() {
    let (a, b) = (Pod::start().await, Pod::start().await);
    let gone = refused_addr().await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("app.test"), vec![rule("/", forward(&[(APP, 1)]))]),
        cluster(APP, &[a.addr, b.addr, gone], UpstreamProtocol::Http1),
        health_policy(HealthProbe::Tcp, 100),
    ])
    .await;
    eventually("the closed port taken out", || {
        p.metric("weir_upstream_unhealthy_endpoints") == 1
    })
    .await;
    let ejections = p.metric("weir_upstream_ejections_total");
    let mut conn = Conn::h1(p.addr).await;
    for _ in 0..200 {
        assert_eq!(conn.get("app.test", "/").await.status, 200);
    }
    assert_eq!(
        p.metric("weir_upstream_ejections_total"),
        ejections,
        "no request went to the closed port (nothing for outlier detection to see)"
    );
    // It listens again.
    let _back = TcpListener::bind(gone).await.unwrap();
    eventually("the port back", || {
        p.metric("weir_upstream_unhealthy_endpoints") == 0
    })
    .await;
}

/// An endpoint ejected by passive outlier detection (its traffic failed) that also failed
/// its probes is readmitted the moment its probes pass again, without waiting for the
/// ejection to end or for a request to succeed on it.
#[tokio::test]
async fn passing_probes_end_an_ejection() {
    let (a, b, sick) = (Pod::start().await, Pod::start().await, Pod::start().await);
    let p = proxy_for(&[&a, &b, &sick], http_probe(), UpstreamProtocol::Http1).await;
    sick.failing.store(true, Ordering::SeqCst);
    let mut conn = Conn::h1(p.addr).await;
    for _ in 0..100 {
        conn.get("app.test", "/").await;
        if p.metric("weir_upstream_ejections_total") >= 1 {
            break;
        }
    }
    assert_eq!(p.metric("weir_upstream_ejected_endpoints"), 1, "ejected");
    sick.set_healthy(false);
    eventually("the pod taken out by its probes", || {
        p.metric("weir_upstream_unhealthy_endpoints") == 1
    })
    .await;
    // Its ejection has ended by now, but no request has succeeded on it since, so it
    // still counts as ejected; only passing probes can end that without traffic.
    sick.failing.store(false, Ordering::SeqCst);
    sick.set_healthy(true);
    eventually("the pod back", || {
        p.metric("weir_upstream_unhealthy_endpoints") == 0
    })
    .await;
    assert_eq!(
        p.metric("weir_upstream_ejected_endpoints"),
        0,
        "the ejection ended with the passing probe"
    );
    let back = spread(&p, &[&a, &b, &sick], 150).await;
    assert!(back[2] >= 25, "{back:?}");
}

/// When every endpoint fails its probes, the balancer ignores the health checks (as it
/// ignores ejections): clients get the backends' answers rather than weir's 503.
#[tokio::test]
async fn all_unhealthy_falls_back_to_every_endpoint() {
    let (a, b) = (Pod::start().await, Pod::start().await);
    let p = proxy_for(&[&a, &b], http_probe(), UpstreamProtocol::Http1).await;
    a.set_healthy(false);
    b.set_healthy(false);
    eventually("both taken out", || {
        p.metric("weir_upstream_unhealthy_endpoints") == 2
    })
    .await;
    let got = spread(&p, &[&a, &b], 100).await;
    assert_eq!(got.iter().sum::<usize>(), 100, "{got:?}");
    assert!(
        got.iter().all(|n| *n > 0),
        "both still get traffic: {got:?}"
    );
}

/// One prober per endpoint: 100 routes, 100 virtual hosts and the Service's second
/// cluster (h2c, for gRPC routes) over the same two pods still probe each pod once per
/// interval, as one route does.
#[tokio::test]
async fn probes_per_endpoint_do_not_grow_with_routes() {
    let (a, b) = (Pod::start().await, Pod::start().await);
    let interval_ms = 100;
    let window = Duration::from_millis(1500);
    // At most one probe per interval per endpoint over the window, plus the first one.
    let bound = (window.as_millis() as usize / interval_ms) + 2;

    let one = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("app.test"), vec![rule("/", forward(&[(APP, 1)]))]),
        cluster(APP, &[a.addr, b.addr], UpstreamProtocol::Http1),
        health_policy(http_probe(), interval_ms as u64),
    ])
    .await;
    let before = (a.probed(), b.probed());
    tokio::time::sleep(window).await;
    let with_one = (a.probed() - before.0, b.probed() - before.1);
    assert_eq!(one.metric("weir_upstream_health_probers"), 2);
    drop(one);

    let (c, d) = (Pod::start().await, Pod::start().await);
    let mut many = vec![
        listener(Protocol::Http),
        cluster(APP, &[c.addr, d.addr], UpstreamProtocol::Http1),
        cluster(
            "service/default/app:80/h2c",
            &[c.addr, d.addr],
            UpstreamProtocol::Http1,
        ),
        health_policy(http_probe(), interval_ms as u64),
    ];
    for i in 0..100 {
        let rules = (0..1)
            .map(|_| rule(&format!("/r{i}"), forward(&[(APP, 1)])))
            .collect();
        many.push(vhost(Some(&format!("app{i}.test")), rules));
    }
    let p = Proxy::start(many).await;
    let before = (c.probed(), d.probed());
    tokio::time::sleep(window).await;
    let with_many = (c.probed() - before.0, d.probed() - before.1);
    assert_eq!(
        p.metric("weir_upstream_health_probers"),
        2,
        "one prober per endpoint"
    );
    eprintln!("probes per endpoint in {window:?}: 1 route {with_one:?}, 100 routes {with_many:?}");
    for n in [with_one.0, with_one.1, with_many.0, with_many.1] {
        assert!((1..=bound).contains(&n), "{n} probes (bound {bound})");
    }
}
