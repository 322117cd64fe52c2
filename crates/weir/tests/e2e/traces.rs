//! OpenTelemetry traces against real OTLP receivers built on the official protocol
//! definitions (`opentelemetry-proto`), started by the test: a tonic `TraceService`
//! server (plain, and over TLS behind rustls), and an OTLP/HTTP one (plain and TLS).
//! Spans arrive with the HTTP semantic-convention attributes, the route and the
//! endpoint; an incoming `traceparent` is continued and the upstream receives one of the
//! same trace; a sampling ratio of 0 exports nothing; a dead collector fails no request;
//! a retried request has a client span per attempt.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind};
use weir_proxy::{OtlpProtocol, TraceSettings, parse_traceparent};

use crate::support::*;

/// Spans received, with their resource's `service.name`.
pub(crate) type Received = Arc<Mutex<Vec<(String, Span)>>>;

struct Collector {
    got: Received,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        record(&self.got, req.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Keeps the spans of an export call with their resource's `service.name`.
fn record(got: &Received, export: ExportTraceServiceRequest) {
    let mut got = got.lock().unwrap();
    for rs in export.resource_spans {
        let service = rs
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
            .and_then(|a| a.value.as_ref()?.value.as_ref())
            .map(|v| match v {
                Value::StringValue(s) => s.clone(),
                other => format!("{other:?}"),
            })
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                got.push((service.clone(), s));
            }
        }
    }
}

/// An OTLP/gRPC receiver on 127.0.0.1.
pub(crate) async fn collector() -> (SocketAddr, Received) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let got = Received::default();
    let svc = TraceServiceServer::new(Collector {
        got: Arc::clone(&got),
    });
    tokio::spawn(async move {
        let incoming = tonic::transport::server::TcpIncoming::from(l);
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(incoming)
            .await
            .unwrap();
    });
    (addr, got)
}

pub(crate) fn settings(endpoint: String, service: &str, ratio: f64) -> TraceSettings {
    let mut s = TraceSettings::new(endpoint);
    s.service_name = service.into();
    s.sampling_ratio = ratio;
    // Short batches keep the test quick; nothing below depends on them.
    s.interval = Duration::from_millis(20);
    s.timeout = Duration::from_millis(500);
    s
}

async fn start(endpoint: String, service: &str, ratio: f64) -> (Gateway, SocketAddr, SocketAddr) {
    let port = free_port();
    let a = echo("a").await;
    let traces = settings(endpoint, service, ratio);
    let gw = Gateway::start_edited(
        &[(
            "app.yaml",
            crate::policies::manifests(port, &backend("default", "a", &[a])),
        )],
        |o| o.traces = Some(traces),
    )
    .await;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        eventually(Duration::from_secs(5), || async {
            http1(addr, "app.test", "/warmup")
                .await
                .is_ok_and(|r| r.status == 200)
        })
        .await,
        "the route is live"
    );
    (gw, addr, a)
}

async fn call(addr: SocketAddr, path: &str, traceparent: Option<&str>) -> Resp {
    let mut req = get("app.test", path);
    if let Some(tp) = traceparent {
        req = req
            .header("traceparent", tp)
            .header("tracestate", "vendor=1");
    }
    send_http1(addr, req.body(http_body_util::Empty::new()).unwrap())
        .await
        .unwrap()
}

/// The `traceparent` the echo backend received.
pub(crate) fn upstream_traceparent(r: &Resp) -> weir_proxy::TraceParent {
    let v = r.json()["headers"]["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("no traceparent upstream: {}", r.body))
        .to_owned();
    parse_traceparent(v.as_bytes()).unwrap_or_else(|| panic!("bad traceparent {v}"))
}

fn attr<'a>(s: &'a Span, key: &str) -> Option<&'a Value> {
    s.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.as_ref())
}

pub(crate) fn str_attr<'a>(s: &'a Span, key: &str) -> &'a str {
    match attr(s, key) {
        Some(Value::StringValue(v)) => v,
        other => panic!("{key}: {other:?} in {s:?}"),
    }
}

fn int_attr(s: &Span, key: &str) -> i64 {
    match attr(s, key) {
        Some(Value::IntValue(v)) => *v,
        other => panic!("{key}: {other:?} in {s:?}"),
    }
}

/// Waits (bounded) until the collector holds spans matching `f`, and returns them.
pub(crate) async fn spans_where(
    got: &Received,
    n: usize,
    f: impl Fn(&(String, Span)) -> bool,
) -> Vec<Span> {
    for _ in 0..500 {
        let found: Vec<Span> = got
            .lock()
            .unwrap()
            .iter()
            .filter(|s| f(s))
            .map(|(_, s)| s.clone())
            .collect();
        if found.len() >= n {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("fewer than {n} matching spans: {:#?}", got.lock().unwrap());
}

const INCOMING: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_a_real_collector_and_continue_the_callers_trace() {
    let (endpoint, got) = collector().await;
    let (_gw, addr, echo_addr) = start(format!("http://{endpoint}"), "weir-test", 1.0).await;
    let incoming = parse_traceparent(INCOMING.as_bytes()).unwrap();

    let r = call(addr, "/traced", Some(INCOMING)).await;
    assert_eq!(r.status, 200);
    // The upstream gets the same trace, with weir's client span as its parent.
    let up = upstream_traceparent(&r);
    assert_eq!(up.trace_id, incoming.trace_id);
    assert_ne!(up.parent_id, incoming.parent_id);
    assert!(up.sampled());
    assert_eq!(r.json()["headers"]["tracestate"], "vendor=1");

    let trace = incoming.trace_id.to_vec();
    let spans = spans_where(&got, 2, |(_, s)| s.trace_id == trace).await;
    let server = spans
        .iter()
        .find(|s| s.kind == SpanKind::Server as i32)
        .expect("a server span");
    let client = spans
        .iter()
        .find(|s| s.kind == SpanKind::Client as i32)
        .expect("a client span");
    assert_eq!(server.parent_span_id, incoming.parent_id.to_vec());
    assert_eq!(server.trace_state, "vendor=1");
    assert_eq!(str_attr(server, "http.request.method"), "GET");
    assert_eq!(str_attr(server, "url.path"), "/traced");
    assert_eq!(str_attr(server, "url.scheme"), "http");
    assert_eq!(str_attr(server, "server.address"), "app.test");
    assert_eq!(int_attr(server, "server.port"), i64::from(addr.port()));
    assert_eq!(str_attr(server, "client.address"), "127.0.0.1");
    assert_eq!(str_attr(server, "network.protocol.version"), "1.1");
    assert_eq!(int_attr(server, "http.response.status_code"), 200);
    assert_eq!(str_attr(server, "weir.route"), "HTTPRoute/default/app#0");
    assert_eq!(str_attr(server, "weir.upstream"), echo_addr.to_string());
    assert!(server.end_time_unix_nano >= server.start_time_unix_nano);
    // The client span is the forwarding: a child of the server span, and the parent the
    // upstream saw.
    assert_eq!(client.parent_span_id, server.span_id);
    assert_eq!(client.span_id, up.parent_id.to_vec());
    assert_eq!(int_attr(client, "server.port"), i64::from(echo_addr.port()));
    assert_eq!(str_attr(client, "server.address"), "127.0.0.1");
    assert_eq!(int_attr(client, "http.response.status_code"), 200);
    let service = got
        .lock()
        .unwrap()
        .iter()
        .find(|(_, s)| s.span_id == server.span_id)
        .map(|(svc, _)| svc.clone());
    assert_eq!(service.as_deref(), Some("weir-test"));

    // Without a traceparent a trace starts here: a root server span, and the upstream
    // gets its id.
    let r = call(addr, "/fresh", None).await;
    let up = upstream_traceparent(&r);
    assert_ne!(up.trace_id, incoming.trace_id);
    let trace = up.trace_id.to_vec();
    let spans = spans_where(&got, 2, |(_, s)| s.trace_id == trace).await;
    let root = spans
        .iter()
        .find(|s| s.kind == SpanKind::Server as i32)
        .unwrap();
    assert!(root.parent_span_id.is_empty());
    assert_eq!(str_attr(root, "url.path"), "/fresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_ratio_exports_nothing_and_a_dead_collector_fails_no_request() {
    let (endpoint, got) = collector().await;
    let (zero, zero_addr, _) = start(format!("http://{endpoint}"), "zero", 0.0).await;
    let (_one, one_addr, _) = start(format!("http://{endpoint}"), "one", 1.0).await;

    for i in 0..20 {
        let r = call(zero_addr, &format!("/z{i}"), None).await;
        assert_eq!(r.status, 200);
        // The trace is still started and passed on, unsampled.
        assert!(!upstream_traceparent(&r).sampled());
    }
    // A sampled span of the other gateway, exported after those requests.
    assert_eq!(call(one_addr, "/marker", None).await.status, 200);
    spans_where(&got, 1, |(svc, s)| {
        svc == "one"
            && s.attributes.iter().any(|a| a.key == "url.path")
            && str_attr(s, "url.path") == "/marker"
    })
    .await;
    assert!(
        got.lock().unwrap().iter().all(|(svc, _)| svc != "zero"),
        "the zero-ratio gateway exported spans"
    );
    let metrics = zero.admin_get("/metrics").await.body;
    assert!(
        metrics.contains("weir_trace_requests_sampled_total 0\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("weir_trace_spans_exported_total 0\n"),
        "{metrics}"
    );

    // A collector that is not there: every request is answered, and the failed exports
    // are counted.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let (gw, addr, _) = start(format!("http://{dead}"), "dead", 1.0).await;
    for i in 0..20 {
        assert_eq!(
            call(addr, &format!("/d{i}"), Some(INCOMING)).await.status,
            200
        );
    }
    let mut errors = false;
    for _ in 0..500 {
        let m = gw.admin_get("/metrics").await.body;
        if m.lines()
            .any(|l| l.starts_with("weir_trace_export_errors_total ") && !l.ends_with(" 0"))
        {
            errors = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(errors, "failed exports are counted");
}

/// An OTLP/HTTP receiver on 127.0.0.1 (`POST /v1/traces`, protobuf bodies), over TLS
/// with `tls` (a certificate and key, PEM). It also notes each request's path and
/// content type.
pub(crate) async fn http_collector(
    tls: Option<(String, String)>,
) -> (SocketAddr, Received, Arc<Mutex<Vec<String>>>) {
    use http_body_util::{BodyExt, Full};
    use prost::Message;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let got = Received::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let acceptor = tls.map(|(cert, key)| tls_acceptor(&cert, &key, &[b"http/1.1"]));
    let (got2, seen2) = (Arc::clone(&got), Arc::clone(&seen));
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = l.accept().await else {
                return;
            };
            let (got, seen, acceptor) = (Arc::clone(&got2), Arc::clone(&seen2), acceptor.clone());
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (got, seen) = (Arc::clone(&got), Arc::clone(&seen));
                        async move {
                            let ct = req
                                .headers()
                                .get("content-type")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_owned();
                            seen.lock().unwrap().push(format!(
                                "{} {} {ct}",
                                req.method(),
                                req.uri().path()
                            ));
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let export = ExportTraceServiceRequest::decode(body).unwrap();
                            record(&got, export);
                            let answer = ExportTraceServiceResponse::default().encode_to_vec();
                            Ok::<_, std::convert::Infallible>(
                                http::Response::builder()
                                    .header("content-type", "application/x-protobuf")
                                    .body(Full::new(bytes::Bytes::from(answer)))
                                    .unwrap(),
                            )
                        }
                    });
                let http1 = hyper::server::conn::http1::Builder::new();
                let _ = match acceptor {
                    Some(a) => match a.accept(tcp).await {
                        Ok(s) => {
                            http1
                                .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                                .await
                        }
                        Err(_) => return,
                    },
                    None => {
                        http1
                            .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                            .await
                    }
                };
            });
        }
    });
    (addr, got, seen)
}

/// An OTLP/gRPC receiver on 127.0.0.1 over TLS (ALPN `h2`): the tonic service of
/// [`collector`] behind rustls and hyper's HTTP/2 server.
pub(crate) async fn tls_grpc_collector(cert: &str, key: &str) -> (SocketAddr, Received) {
    use tonic::codegen::Service;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let got = Received::default();
    let svc = TraceServiceServer::new(Collector {
        got: Arc::clone(&got),
    });
    let acceptor = tls_acceptor(cert, key, &[b"h2"]);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = l.accept().await else {
                return;
            };
            let (svc, acceptor) = (svc.clone(), acceptor.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let hyper_svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let mut svc = svc.clone();
                        async move { svc.call(req).await }
                    });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), hyper_svc)
                        .await;
            });
        }
    });
    (addr, got)
}

fn tls_acceptor(cert: &str, key: &str, alpn: &[&[u8]]) -> tokio_rustls::TlsAcceptor {
    use rustls_pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der_of(cert)], key)
        .unwrap();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
}

/// Spans exported by a gateway reach an OTLP/HTTP collector, plain and over TLS, and an
/// OTLP/gRPC collector over TLS, each trusting the test CA; a gateway that does not
/// trust the collector's CA exports nothing and counts its failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_over_http_and_over_tls() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf(&["127.0.0.1"]);
    let ca = pki.ca_pem().into_bytes();

    let with = |endpoint: String, protocol, ca: Option<Vec<u8>>, service: &str| {
        let mut s = settings(endpoint, service, 1.0);
        s.protocol = protocol;
        s.ca_pem = ca;
        s
    };
    let start_with = |traces: TraceSettings| async move {
        let port = free_port();
        let a = echo("a").await;
        let gw = Gateway::start_edited(
            &[(
                "app.yaml",
                crate::policies::manifests(port, &backend("default", "a", &[a])),
            )],
            |o| o.traces = Some(traces),
        )
        .await;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        assert!(
            eventually(Duration::from_secs(5), || async {
                http1(addr, "app.test", "/warmup")
                    .await
                    .is_ok_and(|r| r.status == 200)
            })
            .await,
            "the route is live"
        );
        (gw, addr)
    };
    let server_span_of = |path: &'static str| {
        move |(_, s): &(String, Span)| {
            s.kind == SpanKind::Server as i32 && str_attr(s, "url.path") == path
        }
    };

    // OTLP/HTTP, plain.
    let (plain, got, seen) = http_collector(None).await;
    let (_gw, addr) = start_with(with(
        format!("http://{plain}/"),
        OtlpProtocol::Http,
        None,
        "http-plain",
    ))
    .await;
    assert_eq!(call(addr, "/over-http", None).await.status, 200);
    let spans = spans_where(&got, 1, server_span_of("/over-http")).await;
    assert_eq!(str_attr(&spans[0], "weir.route"), "HTTPRoute/default/app#0");
    assert!(
        got.lock()
            .unwrap()
            .iter()
            .all(|(svc, _)| svc == "http-plain")
    );
    let requests = seen.lock().unwrap().clone();
    assert!(
        requests
            .iter()
            .all(|r| r == "POST /v1/traces application/x-protobuf"),
        "{requests:?}"
    );

    // OTLP/HTTP over TLS, the test CA trusted.
    let (tls_http, got, _) = http_collector(Some((cert.clone(), key.clone()))).await;
    let (_gw, addr) = start_with(with(
        format!("https://{tls_http}"),
        OtlpProtocol::Http,
        Some(ca.clone()),
        "http-tls",
    ))
    .await;
    assert_eq!(call(addr, "/over-https", None).await.status, 200);
    spans_where(&got, 1, server_span_of("/over-https")).await;

    // OTLP/gRPC over TLS.
    let (tls_grpc, got) = tls_grpc_collector(&cert, &key).await;
    let (_gw, addr) = start_with(with(
        format!("https://{tls_grpc}"),
        OtlpProtocol::Grpc,
        Some(ca.clone()),
        "grpc-tls",
    ))
    .await;
    assert_eq!(call(addr, "/over-grpcs", Some(INCOMING)).await.status, 200);
    let spans = spans_where(&got, 1, server_span_of("/over-grpcs")).await;
    assert_eq!(
        spans[0].parent_span_id,
        parse_traceparent(INCOMING.as_bytes())
            .unwrap()
            .parent_id
            .to_vec()
    );

    // Neither collector is trusted without the test CA: every request is answered, no
    // span arrives, and the failed exports are counted.
    let (untrusted, got, _) = http_collector(Some((cert.clone(), key.clone()))).await;
    for (endpoint, protocol) in [
        (format!("https://{untrusted}"), OtlpProtocol::Http),
        (format!("https://{tls_grpc}"), OtlpProtocol::Grpc),
    ] {
        let (gw, addr) = start_with(with(endpoint, protocol, None, "untrusted")).await;
        for i in 0..5 {
            assert_eq!(call(addr, &format!("/u{i}"), None).await.status, 200);
        }
        let mut errors = false;
        for _ in 0..500 {
            let m = gw.admin_get("/metrics").await.body;
            if m.lines()
                .any(|l| l.starts_with("weir_trace_export_errors_total ") && !l.ends_with(" 0"))
            {
                errors = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(errors, "{protocol:?}: failed exports are counted");
    }
    assert!(
        got.lock().unwrap().is_empty(),
        "an untrusted collector got spans"
    );
}

/// A backend that answers its first request 503 and the next ones 200, noting the
/// `traceparent` of each.
async fn fails_once() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen2 = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = l.accept().await else {
                return;
            };
            let seen = Arc::clone(&seen2);
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let seen = Arc::clone(&seen);
                        async move {
                            let tp = req
                                .headers()
                                .get("traceparent")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_owned();
                            let status = {
                                let mut seen = seen.lock().unwrap();
                                seen.push(tp);
                                if seen.len() == 1 { 503 } else { 200 }
                            };
                            Ok::<_, std::convert::Infallible>(
                                http::Response::builder()
                                    .status(status)
                                    .body(http_body_util::Full::new(bytes::Bytes::from_static(
                                        b"ok",
                                    )))
                                    .unwrap(),
                            )
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

/// A retried request has a client span per attempt, each a child of the server span,
/// with its attempt number, endpoint and outcome; each attempt's `traceparent` names
/// its own span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_request_has_a_client_span_per_attempt() {
    let (endpoint, got) = collector().await;
    let (b, seen) = fails_once().await;
    let port = free_port();
    let retry = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: retry, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: app}]
  retry: {attempts: 1, codes: [503], backoff: 1ms}
";
    let manifests = format!(
        "{}---\n{retry}",
        crate::policies::manifests(port, &backend("default", "a", &[b]))
    );
    let traces = settings(format!("http://{endpoint}"), "retries", 1.0);
    let _gw = Gateway::start_edited(&[("app.yaml", manifests)], |o| o.traces = Some(traces)).await;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // The first request the backend sees is answered 503 and retried: wait for the
    // route with a request that must come back 200 after its retry.
    let mut resp = None;
    for _ in 0..100 {
        match http1(addr, "app.test", "/retried").await {
            Ok(r) if r.status != 404 => {
                resp = Some(r);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let resp = resp.expect("the route is live");
    assert_eq!(resp.status, 200, "the retry succeeded");
    let upstream: Vec<String> = seen.lock().unwrap().clone();
    assert_eq!(upstream.len(), 2, "two attempts reached the backend");

    let server = spans_where(&got, 1, |(_, s)| {
        s.kind == SpanKind::Server as i32
            && str_attr(s, "url.path") == "/retried"
            && int_attr(s, "http.response.status_code") == 200
    })
    .await
    .remove(0);
    assert_eq!(int_attr(&server, "weir.attempts"), 2);
    let mut clients = spans_where(&got, 2, |(_, s)| {
        s.kind == SpanKind::Client as i32 && s.parent_span_id == server.span_id
    })
    .await;
    clients.sort_by_key(|s| int_attr(s, "weir.attempt"));
    assert_eq!(clients.len(), 2, "{clients:#?}");
    for (i, c) in clients.iter().enumerate() {
        assert_eq!(c.trace_id, server.trace_id);
        assert_eq!(int_attr(c, "weir.attempt"), i as i64 + 1);
        assert_eq!(str_attr(c, "server.address"), "127.0.0.1");
        assert_eq!(int_attr(c, "server.port"), i64::from(b.port()));
        // The attempt's traceparent named this span.
        let tp = parse_traceparent(upstream[i].as_bytes()).unwrap();
        assert_eq!(tp.trace_id.to_vec(), server.trace_id);
        assert_eq!(tp.parent_id.to_vec(), c.span_id, "attempt {}", i + 1);
    }
    assert_ne!(clients[0].span_id, clients[1].span_id);
    assert_eq!(int_attr(&clients[0], "http.response.status_code"), 503);
    assert_eq!(str_attr(&clients[0], "error.type"), "503");
    assert_eq!(
        clients[0].status.as_ref().unwrap().code,
        opentelemetry_proto::tonic::trace::v1::status::StatusCode::Error as i32
    );
    assert_eq!(int_attr(&clients[1], "http.response.status_code"), 200);
    assert!(clients[1].start_time_unix_nano >= clients[0].end_time_unix_nano);
}
