//! The OTLP exporter: one task that batches ended requests into spans and sends them to
//! the collector over gRPC or HTTP (protobuf bodies), plain or TLS, each call bounded by
//! the timeout. A collector that is down or slow costs spans (counted), never a
//! request's time: the request side only `try_send`s.

use std::time::SystemTime;

use bytes::Bytes;
use http::Uri;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    ResourceSpans, ScopeSpans, Span, Status, span, status,
};
use prost::Message;
use tonic::transport::{Channel, Endpoint};
use weir_model::EndpointAddr;

use super::{Ended, OtlpProtocol, TraceMetrics, TraceSettings};
use crate::outbound::{self, Connector};

/// The client of the collector, by protocol (hyper-util's client boxed: it is several
/// times the size of the gRPC one).
pub(super) enum Exporter {
    Grpc(TraceServiceClient<Channel>),
    Http {
        client: Box<Client<Connector, Full<Bytes>>>,
        /// `{endpoint}/v1/traces`.
        uri: Uri,
    },
}

impl Exporter {
    /// The client of `settings`' collector, checked (URL, CA bundle); connects lazily.
    /// Needs a runtime (the gRPC channel spawns its worker).
    pub(super) fn new(settings: &TraceSettings) -> Result<Exporter, String> {
        let url = settings.endpoint.trim_end_matches('/');
        let parsed: Uri = url
            .parse()
            .map_err(|e| format!("--otlp-endpoint {:?}: {e}", settings.endpoint))?;
        let https = match parsed.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => {
                return Err(format!(
                    "--otlp-endpoint {:?}: expected an http:// or https:// URL",
                    settings.endpoint
                ));
            }
        };
        if parsed.host().is_none() {
            return Err(format!("--otlp-endpoint {:?}: no host", settings.endpoint));
        }
        let roots = if https {
            outbound::roots(settings.ca_pem.as_deref())
                .map_err(|e| format!("--otlp-ca-file: {e}"))?
        } else {
            rustls::RootCertStore::empty()
        };
        match settings.protocol {
            OtlpProtocol::Grpc => {
                // gRPC needs HTTP/2: over TLS it must be agreed by ALPN.
                let connector = outbound::connector(roots, settings.timeout, &[b"h2"]);
                let endpoint = Endpoint::from_shared(url.to_owned())
                    .map_err(|e| format!("--otlp-endpoint {:?}: {e}", settings.endpoint))?
                    .connect_timeout(settings.timeout)
                    .timeout(settings.timeout);
                let channel = endpoint.connect_with_connector_lazy(connector);
                Ok(Exporter::Grpc(TraceServiceClient::new(channel)))
            }
            OtlpProtocol::Http => {
                let uri = format!("{url}/v1/traces")
                    .parse()
                    .map_err(|e| format!("--otlp-endpoint {:?}: {e}", settings.endpoint))?;
                let connector = outbound::connector(roots, settings.timeout, &[b"http/1.1"]);
                let client = Client::builder(TokioExecutor::new())
                    .pool_idle_timeout(std::time::Duration::from_secs(60))
                    .pool_max_idle_per_host(2)
                    .pool_timer(TokioTimer::new())
                    .timer(TokioTimer::new())
                    .build(connector);
                Ok(Exporter::Http {
                    client: Box::new(client),
                    uri,
                })
            }
        }
    }

    /// One export call (the caller bounds its time).
    async fn export(&mut self, request: ExportTraceServiceRequest) -> Result<(), String> {
        match self {
            Exporter::Grpc(client) => client
                .export(request)
                .await
                .map(drop)
                .map_err(|e| e.to_string()),
            Exporter::Http { client, uri } => {
                let body = Full::new(Bytes::from(request.encode_to_vec()));
                let req = http::Request::post(uri.clone())
                    .header(http::header::CONTENT_TYPE, "application/x-protobuf")
                    .body(body)
                    .map_err(|e| e.to_string())?;
                let resp = client.request(req).await.map_err(|e| e.to_string())?;
                let status = resp.status();
                // Read the answer whole, so that the connection is kept for the next call.
                resp.into_body()
                    .collect()
                    .await
                    .map_err(|e| e.to_string())?;
                if status.is_success() {
                    Ok(())
                } else {
                    Err(format!("the collector answered {status}"))
                }
            }
        }
    }
}

/// Gathers ended requests into batches (full, or `interval` after the first span of a
/// batch) and exports them; ends when every sender is gone and the queue is exported.
pub(super) async fn run(
    mut exporter: Exporter,
    mut rx: tokio::sync::mpsc::Receiver<Ended>,
    settings: TraceSettings,
    metrics: TraceMetrics,
) {
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
        let sent = tokio::time::timeout(settings.timeout, exporter.export(request)).await;
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

/// The server span of an ended request, and a client span per attempt when it was
/// forwarded.
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
    let mut out = Vec::with_capacity(1 + e.attempt_spans.len().max(1));
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
    let client_span = |span_id: [u8; 8],
                       number: u32,
                       start: SystemTime,
                       end: SystemTime,
                       endpoint: &EndpointAddr,
                       outcome: Result<u16, &'static str>| {
        let (address, port) = endpoint_parts(endpoint);
        let mut attributes = vec![
            text("http.request.method", method.clone()),
            text("server.address", address),
            int("server.port", i64::from(port)),
            text("weir.upstream", endpoint.to_string()),
            int("weir.attempt", i64::from(number)),
        ];
        let error = match outcome {
            Ok(code) => {
                attributes.push(int("http.response.status_code", i64::from(code)));
                if code >= 500 {
                    attributes.push(text("error.type", code.to_string()));
                }
                code >= 500
            }
            Err(kind) => {
                attributes.push(text("error.type", kind));
                true
            }
        };
        Span {
            trace_id: ids.trace_id.to_vec(),
            span_id: span_id.to_vec(),
            trace_state: tracestate.clone(),
            parent_span_id: ids.span_id.to_vec(),
            flags: 1 | 0x100,
            name: method.clone(),
            kind: span::SpanKind::Client as i32,
            start_time_unix_nano: nanos(start),
            end_time_unix_nano: nanos(end),
            attributes,
            status: span_status(error),
            ..Default::default()
        }
    };
    if !e.attempt_spans.is_empty() {
        // A retried request: one client span per attempt, each with its own outcome.
        for a in &e.attempt_spans {
            out.push(client_span(
                a.span_id,
                a.number,
                a.start,
                a.end,
                &a.endpoint,
                a.outcome,
            ));
        }
    } else if let (Some(upstream), Some(at)) = (&e.upstream, e.forwarded_at) {
        // One attempt: from the choice of the endpoint to the response head.
        out.push(client_span(
            ids.client_id,
            e.attempts.max(1),
            at,
            e.end,
            upstream,
            Ok(e.status),
        ));
    }
    out
}
