//! The backend behind every proxy: a tiny HTTP/1.1 keep-alive server that answers every
//! request with 200 and a fixed body, so that its cost stays far below the proxy's.
//!
//! `GET /bytes/<n>` answers with `n` bytes (at most [`MAX_BODY`]); any other path with
//! the default size given on the command line.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

/// The largest body `/bytes/<n>` serves.
pub(crate) const MAX_BODY: usize = 1 << 20;

/// The body size for `path`: `/bytes/<n>` → n (capped), otherwise `default`.
pub(crate) fn body_size(path: &str, default: usize) -> usize {
    path.strip_prefix("/bytes/")
        .and_then(|n| n.parse::<usize>().ok())
        .map_or(default, |n| n.min(MAX_BODY))
}

/// Serves on `listen` until the process is killed.
pub(crate) async fn serve(listen: SocketAddr, default_size: usize) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let body = Bytes::from(vec![b'x'; MAX_BODY]);
    let default_size = default_size.min(MAX_BODY);
    eprintln!(
        "weir-bench backend listening on {}, {default_size}-byte bodies",
        listener.local_addr()?
    );
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                eprintln!("weir-bench backend: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let body = body.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let n = body_size(req.uri().path(), default_size);
                let resp = Response::builder()
                    .header(header::CONTENT_TYPE, "application/octet-stream")
                    .body(Full::new(body.slice(..n)));
                async move { resp }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(tcp), svc)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_by_path() {
        assert_eq!(body_size("/", 0), 0);
        assert_eq!(body_size("/bytes/4096", 0), 4096);
        assert_eq!(body_size("/bytes/x", 7), 7);
        assert_eq!(body_size("/bytes/999999999", 0), MAX_BODY);
    }

    #[tokio::test]
    async fn answers_with_the_requested_size() {
        use http_body_util::{BodyExt, Empty};
        let port = crate::procs::free_port().unwrap();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let server = tokio::spawn(serve(addr, 3));
        let mut conn = None;
        for _ in 0..200 {
            if let Ok(s) = tokio::net::TcpStream::connect(addr).await {
                conn = Some(s);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let (mut tx, c) = hyper::client::conn::http1::handshake(TokioIo::new(conn.unwrap()))
            .await
            .unwrap();
        tokio::spawn(c);
        for (path, want) in [("/", 3), ("/bytes/4096", 4096), ("/", 3)] {
            let req = Request::get(path)
                .header("host", "x")
                .body(Empty::<Bytes>::new())
                .unwrap();
            let resp = tx.send_request(req).await.unwrap();
            assert_eq!(resp.status(), 200);
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body.len(), want);
        }
        server.abort();
    }
}
