//! OpenTelemetry traces against a real OTLP receiver: a tonic `TraceService` server built
//! on the official protocol definitions (`opentelemetry-proto`), started by the test.
//! Spans arrive with the HTTP semantic-convention attributes, the route and the
//! endpoint; an incoming `traceparent` is continued and the upstream receives one of the
//! same trace; a sampling ratio of 0 exports nothing; a dead collector fails no request.

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
use weir_proxy::{TraceSettings, parse_traceparent};

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
        let mut got = self.got.lock().unwrap();
        for rs in req.into_inner().resource_spans {
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
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
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
