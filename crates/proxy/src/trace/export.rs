//! The OTLP/gRPC exporter: one task that batches ended requests into spans and sends
//! them to the collector, each call bounded by the timeout. A collector that is down or
//! slow costs spans (counted), never a request's time: the request side only `try_send`s.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    ResourceSpans, ScopeSpans, Span, Status, span, status,
};
use tonic::transport::{Channel, Endpoint};
use weir_model::EndpointAddr;

use super::{Ended, TraceMetrics, TraceSettings};

/// The collector's endpoint, checked.
pub(super) fn endpoint(settings: &TraceSettings) -> Result<Endpoint, String> {
    let e = Endpoint::from_shared(settings.endpoint.clone())
        .map_err(|e| format!("--otlp-endpoint {:?}: {e}", settings.endpoint))?;
    Ok(e.connect_timeout(settings.timeout)
        .timeout(settings.timeout))
}

/// Gathers ended requests into batches (full, or `interval` after the first span of a
/// batch) and exports them; ends when every sender is gone and the queue is exported.
pub(super) async fn run(
    endpoint: Endpoint,
    mut rx: tokio::sync::mpsc::Receiver<Ended>,
    settings: TraceSettings,
    metrics: TraceMetrics,
) {
    let channel: Channel = endpoint.connect_lazy();
    let mut client = TraceServiceClient::new(channel);
    let resource = Resource {
        attributes: vec![text("service.name", settings.service_name.clone())],
        ..Default::default()
    };
    let batch_size = settings.batch.max(1);
    let mut batch: Vec<Ended> = Vec::with_capacity(batch_size.min(1024));
    let mut failing = false;
    loop {
        match rx.recv().await {
            Some(e) => batch.push(e),
            None => break,
        }
        let deadline = tokio::time::Instant::now() + settings.interval;
        while batch.len() < batch_size {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(e)) => batch.push(e),
                Ok(None) | Err(_) => break,
            }
        }
        let spans: Vec<Span> = batch.drain(..).flat_map(spans_of).collect();
        let n = spans.len() as u64;
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "weir".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let sent = tokio::time::timeout(settings.timeout, client.export(request)).await;
        match sent {
            Ok(Ok(_)) => {
                metrics.exported.inc_by(n);
                if failing {
                    tracing::info!(endpoint = %settings.endpoint, "trace export works again");
                    failing = false;
                }
            }
            Ok(Err(e)) => failed(&metrics, n, &mut failing, &settings.endpoint, &e),
            Err(e) => failed(&metrics, n, &mut failing, &settings.endpoint, &e),
        }
    }
}

/// Counts a failed export; logs the first of a run of failures.
fn failed(
    metrics: &TraceMetrics,
    spans: u64,
    failing: &mut bool,
    endpoint: &str,
    e: &dyn std::fmt::Display,
) {
    metrics.export_errors.inc();
    metrics.failed.inc_by(spans);
    if !*failing {
        tracing::warn!(%endpoint, error = %e, "cannot export traces");
        *failing = true;
    }
}

fn text(key: &str, v: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn int(key: &str, v: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(v)),
        }),
        ..Default::default()
    }
}

fn nanos(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn protocol_version(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "0.9",
        http::Version::HTTP_10 => "1.0",
        http::Version::HTTP_2 => "2",
        http::Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

/// The endpoint's address and port, as `server.address` / `server.port` of the client
/// span.
fn endpoint_parts(e: &EndpointAddr) -> (String, u16) {
    match e {
        EndpointAddr::Socket(s) => (s.ip().to_string(), s.port()),
        EndpointAddr::Host(h, p) => (h.to_string(), *p),
    }
}

fn route_text(r: &weir_model::RouteRef) -> String {
    format!(
        "{}/{}/{}#{}",
        r.kind.object_kind(),
        r.namespace,
        r.name,
        r.rule
    )
}

/// The server span of an ended request, and its client span when it was forwarded.
/// Attributes follow the OpenTelemetry HTTP semantic conventions (stable names), plus
/// `weir.route`, `weir.upstream` and `weir.attempts`.
fn spans_of(e: Ended) -> Vec<Span> {
    let ids = e.ids;
    let method = e.method.as_str().to_owned();
    let host = e
        .host
        .as_ref()
        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned());
    let server_address = host
        .as_deref()
        .map(|h| {
            h.rsplit_once(':')
                .filter(|(_, p)| p.parse::<u16>().is_ok())
                .map_or(h, |(a, _)| a)
        })
        .unwrap_or("")
        .to_owned();
    let tracestate = e
        .tracestate
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let status_code = i64::from(e.status);
    let mut server_attrs = vec![
        text("http.request.method", method.clone()),
        text("url.path", e.path),
        text("url.scheme", if e.tls { "https" } else { "http" }),
        text("server.address", server_address),
        int("server.port", i64::from(e.local_port)),
        text("client.address", e.client.ip().to_string()),
        int("client.port", i64::from(e.client.port())),
        text("network.protocol.name", "http"),
        text("network.protocol.version", protocol_version(e.version)),
        int("http.response.status_code", status_code),
        int("weir.attempts", i64::from(e.attempts)),
    ];
    if let Some(r) = &e.route {
        server_attrs.push(text("weir.route", route_text(r)));
    }
    if let Some(u) = &e.upstream {
        server_attrs.push(text("weir.upstream", u.to_string()));
    }
    let error = e.status >= 500;
    if error {
        server_attrs.push(text("error.type", e.status.to_string()));
    }
    if let Some(fault) = e.fault {
        server_attrs.push(text("weir.fault", fault));
    }
    let span_status = |error: bool| {
        Some(Status {
            code: if error {
                status::StatusCode::Error as i32
            } else {
                status::StatusCode::Unset as i32
            },
            ..Default::default()
        })
    };
    let name = match &e.route {
        Some(r) => format!("{method} {}", route_text(r)),
        None => method.clone(),
    };
    // Span flags: bit 0 sampled; bit 8 "whether the parent is remote" is known; bit 9
    // the parent is remote (the caller's span).
    let server_flags = if ids.parent_id.is_some() {
        0x301
    } else {
        0x101
    };
    let mut out = Vec::with_capacity(2);
    out.push(Span {
        trace_id: ids.trace_id.to_vec(),
        span_id: ids.span_id.to_vec(),
        trace_state: tracestate.clone(),
        parent_span_id: ids.parent_id.map(|p| p.to_vec()).unwrap_or_default(),
        flags: server_flags,
        name,
        kind: span::SpanKind::Server as i32,
        start_time_unix_nano: nanos(ids.start),
        end_time_unix_nano: nanos(e.end),
        attributes: server_attrs,
        status: span_status(error),
        ..Default::default()
    });
    if let (Some(upstream), Some(at)) = (&e.upstream, e.forwarded_at) {
        let (address, port) = endpoint_parts(upstream);
        out.push(Span {
            trace_id: ids.trace_id.to_vec(),
            span_id: ids.client_id.to_vec(),
            trace_state: tracestate,
            parent_span_id: ids.span_id.to_vec(),
            flags: 1 | 0x100,
            name: method.clone(),
            kind: span::SpanKind::Client as i32,
            start_time_unix_nano: nanos(at),
            end_time_unix_nano: nanos(e.end),
            attributes: vec![
                text("http.request.method", method),
                text("server.address", address),
                int("server.port", i64::from(port)),
                int("http.response.status_code", status_code),
                int("weir.attempts", i64::from(e.attempts)),
            ],
            status: span_status(error),
            ..Default::default()
        });
    }
    out
}
