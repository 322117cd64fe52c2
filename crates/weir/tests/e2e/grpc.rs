//! GRPCRoute end to end: gRPC-shaped exchanges (HTTP/2 with prior knowledge, framed
//! messages, trailers both ways) through weir to h2c backends, routed by service, method
//! and headers; unmatched methods and unusable backends answered with a `grpc-status`.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};

use crate::support::*;

/// One gRPC message frame: uncompressed flag, big-endian length, payload.
fn grpc_frame(payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + payload.len());
    b.put_u8(0);
    b.put_u32(payload.len() as u32);
    b.put_slice(payload);
    b.freeze()
}

/// A gRPC-shaped h2c backend named `name`: answers every call with one message
/// `<name> <path> <request message>` and trailers `grpc-status: 0` plus
/// `x-request-trailer`, the value of the request's own `x-client-trailer` trailer
/// (`none` without one), so a test sees trailers relayed in both directions. It speaks
/// HTTP/2 only: an HTTP/1.1 request from weir fails the connection.
async fn grpc_backend(name: &'static str) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = l.accept().await else {
                return;
            };
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| async move {
                let path = req.uri().path().to_owned();
                let collected = req.into_body().collect().await?;
                let trailer = collected
                    .trailers()
                    .and_then(|t| t.get("x-client-trailer"))
                    .map(|v| v.to_str().unwrap_or("?").to_owned())
                    .unwrap_or_else(|| "none".into());
                let body = collected.to_bytes();
                let message = body.get(5..).unwrap_or_default();
                let reply = format!("{name} {path} {}", String::from_utf8_lossy(message));
                let mut trailers = HeaderMap::new();
                trailers.insert("grpc-status", HeaderValue::from_static("0"));
                trailers.insert("x-request-trailer", trailer.parse().unwrap());
                let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
                    Ok(Frame::data(grpc_frame(reply.as_bytes()))),
                    Ok(Frame::trailers(trailers)),
                ];
                let resp = Response::builder()
                    .header("content-type", "application/grpc")
                    .body(StreamBody::new(futures_util::stream::iter(frames)))
                    .unwrap();
                Ok::<_, hyper::Error>(resp)
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// What a gRPC call returned: HTTP status and headers, the message, the trailers.
struct Call {
    status: StatusCode,
    headers: HeaderMap,
    message: String,
    trailers: HeaderMap,
}

impl Call {
    /// `grpc-status` from the trailers, or from the headers (a trailers-only response).
    fn grpc_status(&self) -> Option<&str> {
        self.trailers
            .get("grpc-status")
            .or_else(|| self.headers.get("grpc-status"))
            .and_then(|v| v.to_str().ok())
    }
}

/// One unary call `/<service>/<method>` on `host` with `headers`, over a new h2c
/// connection; the request ends with the trailer `x-client-trailer: <client_trailer>`.
async fn call(
    addr: SocketAddr,
    host: &str,
    service_method: &str,
    headers: &[(&str, &str)],
    client_trailer: &str,
) -> Result<Call, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    let (mut tx, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut trailers = HeaderMap::new();
    trailers.insert("x-client-trailer", client_trailer.parse()?);
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
        Ok(Frame::data(grpc_frame(b"hello"))),
        Ok(Frame::trailers(trailers)),
    ];
    let mut req = Request::post(format!("http://{host}/{service_method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let req = req.body(StreamBody::new(futures_util::stream::iter(frames)))?;
    let resp = tx.send_request(req).await?;
    let (parts, body) = resp.into_parts();
    let collected = body.collect().await?;
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let body = collected.to_bytes();
    Ok(Call {
        status: parts.status,
        headers: parts.headers,
        message: String::from_utf8_lossy(body.get(5..).unwrap_or_default()).into_owned(),
        trailers,
    })
}

fn config(port: u16, v1: SocketAddr, v2: SocketAddr, v3: SocketAddr) -> String {
    // Backends without `protocol`: a GRPCRoute reaches them over HTTP/2 (h2c).
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{type: IPAddress, value: 127.0.0.1}}]
  listeners:
  - {{name: http, protocol: HTTP, port: {port}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: echo}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [grpc.test]
  rules:
  - matches: [{{method: {{service: pkg.Echo, method: Echo}}}}]
    filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier: {{set: [{{name: x-route, value: echo}}]}}
    backendRefs: [{{group: weir.dev, kind: Backend, name: v1}}]
  - matches:
    - method: {{service: pkg.Echo}}
      headers: [{{name: version, value: two}}]
    backendRefs: [{{group: weir.dev, kind: Backend, name: v2}}]
  - matches: [{{method: {{type: RegularExpression, service: 'pkg\\.(Admin|Ops)', method: 'Get.*'}}}}]
    backendRefs: [{{group: weir.dev, kind: Backend, name: v3}}]
  - matches: [{{method: {{service: pkg.Echo, method: Broken}}}}]
    backendRefs: [{{group: weir.dev, kind: Backend, name: missing}}]
---
{}---
{}---
{}",
        backend("default", "v1", &[v1]),
        backend("default", "v2", &[v2]),
        backend("default", "v3", &[v3]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_routes_by_method_and_header_and_relays_trailers() {
    let (v1, v2, v3) = (
        grpc_backend("v1").await,
        grpc_backend("v2").await,
        grpc_backend("v3").await,
    );
    let port = free_port();
    let gw = Gateway::start(&[("gw.yaml", config(port, v1, v2, v3))]).await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();

    // Exact service and method; trailers relayed both ways; the rule's response filter.
    let c = call(addr, "grpc.test", "pkg.Echo/Echo", &[], "t1")
        .await
        .unwrap();
    assert_eq!(c.status, StatusCode::OK);
    assert_eq!(c.message, "v1 /pkg.Echo/Echo hello");
    assert_eq!(c.grpc_status(), Some("0"));
    assert_eq!(c.trailers["x-request-trailer"], "t1");
    assert_eq!(c.headers["x-route"], "echo");
    assert_eq!(c.headers["content-type"], "application/grpc");

    // The exact method wins over the service with a header; another method of the
    // service needs the header.
    let c = call(
        addr,
        "grpc.test",
        "pkg.Echo/Echo",
        &[("version", "two")],
        "t2",
    )
    .await
    .unwrap();
    assert_eq!(c.message, "v1 /pkg.Echo/Echo hello");
    let c = call(
        addr,
        "grpc.test",
        "pkg.Echo/Other",
        &[("version", "two")],
        "t3",
    )
    .await
    .unwrap();
    assert_eq!(c.message, "v2 /pkg.Echo/Other hello");
    assert_eq!(c.trailers["x-request-trailer"], "t3");
    assert!(c.headers.get("x-route").is_none());

    // Regular expressions over service and method.
    let c = call(addr, "grpc.test", "pkg.Ops/GetStatus", &[], "t4")
        .await
        .unwrap();
    assert_eq!(c.message, "v3 /pkg.Ops/GetStatus hello");
    assert_eq!(c.grpc_status(), Some("0"));

    // No rule: UNIMPLEMENTED, the gRPC way (HTTP 200, status in the headers).
    for (host, method, headers) in [
        ("grpc.test", "pkg.Echo/Other", &[][..]),
        ("grpc.test", "pkg.Ops/SetStatus", &[][..]),
        ("grpc.test", "pkg.Other/Echo", &[("version", "two")][..]),
        ("other.test", "pkg.Echo/Echo", &[][..]),
    ] {
        let c = call(addr, host, method, headers, "x").await.unwrap();
        assert_eq!(c.status, StatusCode::OK, "{host} {method}");
        assert_eq!(c.grpc_status(), Some("12"), "{host} {method}");
        assert!(c.message.is_empty(), "{host} {method}: {}", c.message);
    }

    // A rule whose only backend does not exist: UNAVAILABLE.
    let c = call(addr, "grpc.test", "pkg.Echo/Broken", &[], "x")
        .await
        .unwrap();
    assert_eq!(c.status, StatusCode::OK);
    assert_eq!(c.grpc_status(), Some("14"));

    // A plain HTTP request that matches no rule still gets a plain 404.
    let r = h2c(addr, "grpc.test", "/pkg.Nothing/Here").await.unwrap();
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.headers.get("grpc-status").is_none());
    drop(gw);
}

/// An h2-only backend cannot be reached over HTTP/1.1: the same Backend behind an
/// HTTPRoute (HTTP/1.1 by default) fails, behind a GRPCRoute it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_route_backends_default_to_h2c() {
    let v1 = grpc_backend("v1").await;
    let port = free_port();
    let yaml = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: weir
  addresses: [{{type: IPAddress, value: 127.0.0.1}}]
  listeners:
  - {{name: http, protocol: HTTP, port: {port}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: g}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [grpc.test]
  rules: [{{backendRefs: [{{group: weir.dev, kind: Backend, name: v1}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: h}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [http.test]
  rules: [{{backendRefs: [{{group: weir.dev, kind: Backend, name: v1}}]}}]
---
{}",
        backend("default", "v1", &[v1]),
    );
    let _gw = Gateway::start(&[("gw.yaml", yaml)]).await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let c = call(addr, "grpc.test", "any.Service/Any", &[], "t")
        .await
        .unwrap();
    assert_eq!(c.message, "v1 /any.Service/Any hello");
    assert_eq!(c.grpc_status(), Some("0"));
    let c = call(addr, "http.test", "any.Service/Any", &[], "t")
        .await
        .unwrap();
    assert_eq!(c.status, StatusCode::OK);
    assert_eq!(c.grpc_status(), Some("14"), "{:?}", c.headers);
}
