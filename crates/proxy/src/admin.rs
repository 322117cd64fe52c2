//! The admin HTTP server: readiness, health, Prometheus metrics, the live config, and
//! the status page with its JSON API.

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus_client::registry::Registry;

use crate::dataplane::DataPlane;
use crate::status;

/// Serves the admin endpoints on `listener` until the task is dropped:
///
/// - `GET /ready`: 200 `ready` once [`DataPlane::set_ready`] was called, else 503;
/// - `GET /healthz`: 200 while the process serves;
/// - `GET /metrics`: `registry` in the Prometheus/OpenMetrics text format;
/// - `GET /config`: the live snapshot as pretty JSON (never private keys);
/// - `GET /` (or `/status`): the status page, which polls
/// - `GET /api/v1/status` (counts, listeners, propagation, recent rejections),
///   `/api/v1/routes`, `/api/v1/backends`, `/api/v1/certificates` and
///   `/api/v1/rejections` (lists taking `q`, `limit`, `after`; backends `unhealthy=1`).
///   Lists are built on a blocking thread from one snapshot, loaded without a lock.
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
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let dataplane = Arc::clone(&dataplane);
                let registry = Arc::clone(&registry);
                async move {
                    let resp = match status_request(&req) {
                        Some(asked) => status_answer(asked, &dataplane).await,
                        None => admin_response(&req, &dataplane, &registry),
                    };
                    Ok::<_, Infallible>(resp)
                }
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

/// What the status page or its API was asked for.
enum StatusAsked {
    Page,
    Api(&'static str, status::Query),
}

/// The status page and its API; `None` for other paths.
fn status_request(req: &Request<Incoming>) -> Option<StatusAsked> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return None;
    }
    let path = req.uri().path();
    if path == "/" || path == "/status" {
        return Some(StatusAsked::Page);
    }
    let which = match path.strip_prefix("/api/v1/")? {
        "status" => "status",
        "routes" => "routes",
        "backends" => "backends",
        "certificates" => "certificates",
        "rejections" => "rejections",
        _ => return None,
    };
    Some(StatusAsked::Api(
        which,
        status::Query::parse(req.uri().query()),
    ))
}

async fn status_answer(asked: StatusAsked, dataplane: &Arc<DataPlane>) -> Response<Full<Bytes>> {
    let (which, query) = match asked {
        StatusAsked::Page => {
            let mut resp = with_type(
                StatusCode::OK,
                Bytes::from_static(status::PAGE.as_bytes()),
                "text/html; charset=utf-8",
            );
            let h = resp.headers_mut();
            h.insert(header::CONTENT_SECURITY_POLICY, page_policy().clone());
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            return resp;
        }
        StatusAsked::Api(which, query) => (which, query),
    };
    let dataplane = Arc::clone(dataplane);
    // Off the runtime: a list scans every host or cluster of the snapshot (milliseconds at
    // 100,000), and a certificate's first listing reads it.
    let built = tokio::task::spawn_blocking(move || {
        let snap = dataplane.snapshot();
        let now = SystemTime::now();
        let v = match which {
            "status" => status::summary(&snap, &dataplane.status_context(now)),
            "routes" => status::routes(&snap, &query),
            "backends" => status::backends(&snap, &query),
            "certificates" => status::certificates(&snap, &query, now),
            _ => status::rejections(dataplane.status_board(), &query),
        };
        status::to_body(&v)
    })
    .await;
    let mut resp = match built {
        Ok(body) => with_type(StatusCode::OK, body.into(), "application/json"),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "status failed\n"),
    };
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The page's Content-Security-Policy: nothing but its own inline script (by hash) and
/// style, and requests to this server. Markup slipped into the page could run nothing.
fn page_policy() -> &'static HeaderValue {
    static POLICY: OnceLock<HeaderValue> = OnceLock::new();
    POLICY.get_or_init(|| {
        use base64::Engine;
        let page = status::PAGE;
        let script = page
            .split_once("<script>")
            .and_then(|(_, rest)| rest.split_once("</script>"))
            .map_or("", |(s, _)| s);
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, script.as_bytes());
        let hash = base64::engine::general_purpose::STANDARD.encode(digest.as_ref());
        let policy = format!(
            "default-src 'none'; script-src 'sha256-{hash}'; style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        );
        HeaderValue::from_str(&policy).unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'"))
    })
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
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}
