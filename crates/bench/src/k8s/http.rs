//! A plain HTTP/1.1 probe on a kept connection (re-dialled after an error).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::client::{Get, Seen};

/// Longest a single request may take.
const REQUEST_LIMIT: Duration = Duration::from_secs(2);

pub(crate) struct Probe {
    addr: SocketAddr,
    host: String,
    conn: Option<SendRequest<Empty<Bytes>>>,
}

impl Probe {
    pub(crate) fn new(addr: SocketAddr, host: String) -> Probe {
        Probe {
            addr,
            host,
            conn: None,
        }
    }

    pub(crate) fn set_host(&mut self, host: String) {
        self.host = host;
    }

    /// GET / with this probe's Host: the status, or None on a connection error.
    pub(crate) async fn status(&mut self) -> Option<u16> {
        self.status_of("/").await
    }

    /// GET `path` with this probe's Host: the status, or None on a connection error.
    pub(crate) async fn status_of(&mut self, path: &str) -> Option<u16> {
        let r = tokio::time::timeout(REQUEST_LIMIT, self.send(path))
            .await
            .ok()
            .flatten();
        if r.is_none() {
            self.conn = None;
        }
        r
    }

    async fn send(&mut self, path: &str) -> Option<u16> {
        if self.conn.as_ref().is_none_or(|c| c.is_closed()) {
            let stream = TcpStream::connect(self.addr).await.ok()?;
            let _ = stream.set_nodelay(true);
            let (tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .ok()?;
            tokio::spawn(conn);
            self.conn = Some(tx);
        }
        let tx = self.conn.as_mut()?;
        tx.ready().await.ok()?;
        let req = http::Request::get(path)
            .header("host", &self.host)
            .body(Empty::new())
            .ok()?;
        let resp = tx.send_request(req).await.ok()?;
        let status = resp.status().as_u16();
        resp.into_body().collect().await.ok()?;
        Some(status)
    }
}

impl Get for Probe {
    async fn get(&mut self, path: &str) -> Seen {
        match self.status_of(path).await {
            Some(status) => Seen::Status(status),
            None => Seen::Failed("no response".into()),
        }
    }
}
