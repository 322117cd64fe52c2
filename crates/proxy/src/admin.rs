//! The admin HTTP server: readiness, health, Prometheus metrics and the live config.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus_client::registry::Registry;

use crate::dataplane::DataPlane;

/// Serves the admin endpoints on `listener` until the task is dropped:
///
/// - `GET /ready`: 200 `ready` once [`DataPlane::set_ready`] was called, else 503;
/// - `GET /healthz`: 200 while the process serves;
/// - `GET /metrics`: `registry` in the Prometheus/OpenMetrics text format;
/// - `GET /config`: the live snapshot as pretty JSON (never private keys).
pub async fn serve_admin(
    listener: tokio::net::TcpListener,
    dataplane: Arc<DataPlane>,
    registry: Arc<Registry>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let dataplane = Arc::clone(&dataplane);
        let registry = Arc::clone(&registry);
        let builder = Arc::clone(&builder);
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let resp = admin_response(&req, &dataplane, &registry);
                async move { Ok::<_, Infallible>(resp) }
            });
            if let Err(e) = builder.serve_connection(TokioIo::new(stream), svc).await {
                tracing::debug!(error = %e, "admin connection error");
            }
        });
    }
}

fn admin_response(
    req: &Request<Incoming>,
    dataplane: &DataPlane,
    registry: &Registry,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    match req.uri().path() {
        "/ready" if dataplane.is_ready() => text(StatusCode::OK, "ready\n"),
        "/ready" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/metrics" => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => with_type(
                    StatusCode::OK,
                    body.into(),
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
                Err(_) => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "metrics encoding failed\n",
                ),
            }
        }
        "/config" => match serde_json::to_vec_pretty(&dataplane.snapshot().to_json()) {
            Ok(body) => with_type(StatusCode::OK, body.into(), "application/json"),
            Err(_) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "config encoding failed\n",
            ),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    with_type(
        status,
        Bytes::from_static(body.as_bytes()),
        "text/plain; charset=utf-8",
    )
}

fn with_type(status: StatusCode, body: Bytes, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}
