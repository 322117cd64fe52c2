//! A plain HTTP/1.1 probe on a kept connection (re-dialled after an error).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

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
        let r = tokio::time::timeout(REQUEST_LIMIT, self.send())
            .await
            .ok()
            .flatten();
        if r.is_none() {
            self.conn = None;
        }
        r
    }

    async fn send(&mut self) -> Option<u16> {
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
        let req = http::Request::get("/")
            .header("host", &self.host)
            .body(Empty::new())
            .ok()?;
        let resp = tx.send_request(req).await.ok()?;
        let status = resp.status().as_u16();
        resp.into_body().collect().await.ok()?;
        Some(status)
    }

    /// Polls every `poll` until the status is `want`; the time since `since`, or None after
    /// `timeout`.
    pub(crate) async fn until(
        &mut self,
        want: u16,
        since: Instant,
        poll: Duration,
        timeout: Duration,
    ) -> Option<Duration> {
        loop {
            if self.status().await == Some(want) {
                return Some(since.elapsed());
            }
            if since.elapsed() > timeout {
                return None;
            }
            tokio::time::sleep(poll).await;
        }
    }
}

/// Polls a fresh probe until `host` answers `want` (bounded by `timeout`).
pub(crate) async fn until(
    addr: SocketAddr,
    host: &str,
    want: u16,
    timeout: Duration,
) -> anyhow::Result<()> {
    let mut p = Probe::new(addr, host.to_string());
    match p
        .until(want, Instant::now(), Duration::from_millis(5), timeout)
        .await
    {
        Some(_) => Ok(()),
        None => anyhow::bail!("{host} did not answer {want} within {timeout:?}"),
    }
}
