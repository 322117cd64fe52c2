//! The HTTP/1.1 upstream pool: idle keep-alive connections per endpoint and worker, for
//! weir's own HTTP/1.1 client ([`crate::h1`]).
//!
//! A request takes the most recently used idle connection of its endpoint made on its own
//! worker thread (one short lock), and its response body gives it back when it ends: no
//! task, no timer, no channel. Connections stay with the worker that made them, whose
//! runtime watches their sockets: an exchange on another worker's connection would be
//! woken by that worker's reactor, which runs only between that worker's tasks. An idle
//! connection that the upstream closed (or that received bytes nobody asked for) is seen
//! from the runtime's readiness when it is taken, without a system call, and dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use http::Request;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::net::TcpStream;
use weir_model::EndpointAddr;

use crate::body::RequestBody;
use crate::endpoints::ConnectGate;
use crate::error::ProxyError;
use crate::h1::{Conn, Exchange, Io};
use crate::upstream_tls::TlsTarget;

/// Idle connections kept per endpoint and worker; more are closed when they come back.
const MAX_IDLE_PER_ENDPOINT: usize = 1024;

struct Idle {
    conn: Box<Conn>,
    since: Instant,
}

/// A pool's key: the endpoint; the identity of the TLS settings its connections were
/// made with (0: plaintext), so that connections of a BackendTLSPolicy are not shared with
/// plaintext ones (or others') to the same address; and the worker thread that made them.
pub(crate) type PoolKey = (EndpointAddr, u64, usize);

/// The key of `addr` reached with `tls` from the current worker.
fn pool_key(addr: &EndpointAddr, tls: Option<&Arc<TlsTarget>>) -> PoolKey {
    (
        addr.clone(),
        tls.map_or(0, |t| t.id),
        crate::workers::current().unwrap_or(usize::MAX),
    )
}

/// Idle HTTP/1.1 connections by endpoint and worker.
pub(crate) struct Http1Pool {
    idle: Mutex<HashMap<PoolKey, Vec<Idle>, foldhash::fast::FixedState>>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    open: Gauge,
    connect_errors: Counter,
    /// Set once the idle sweeper runs (it is started by the first connection, inside
    /// the runtime).
    sweeper: std::sync::Once,
}

impl Http1Pool {
    pub(crate) fn new(
        connect_timeout: Duration,
        idle_timeout: Duration,
        open: Gauge,
        connect_errors: Counter,
    ) -> Http1Pool {
        Http1Pool {
            idle: Mutex::new(HashMap::with_hasher(foldhash::fast::FixedState::default())),
            connect_timeout,
            idle_timeout,
            open,
            connect_errors,
            sweeper: std::sync::Once::new(),
        }
    }

    /// Sends `req` (origin-form URI, Host set) to `addr` on an idle connection, or on a
    /// new one: the returned exchange resolves to the response head. The head is encoded
    /// here, into the taken connection's buffer; the exchange is moved with the request's
    /// future (see `server::handle`), so it is kept small.
    pub(crate) fn send(
        self: &Arc<Self>,
        addr: &EndpointAddr,
        tls: Option<&Arc<TlsTarget>>,
        req: Request<RequestBody>,
        gate: Option<ConnectGate>,
    ) -> Exchange {
        let key = pool_key(addr, tls);
        let conn = self.take(&key);
        Exchange::new(Arc::clone(self), key, tls.cloned(), gate, conn, req)
    }

    /// The most recently used idle connection of `key` that is still open and fresh.
    pub(crate) fn take(&self, key: &PoolKey) -> Option<Box<Conn>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let stack = idle.get_mut(key)?;
        while let Some(mut entry) = stack.pop() {
            if entry.since.elapsed() < self.idle_timeout && entry.conn.still_open() {
                return Some(entry.conn);
            }
        }
        None
    }

    /// Keeps `conn` (its exchange ended cleanly) for the next request of its key.
    pub(crate) fn put(&self, conn: Box<Conn>) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let stack = idle.entry(conn.key().clone()).or_default();
        if stack.len() < MAX_IDLE_PER_ENDPOINT {
            stack.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }

    /// Opens a connection for `key` (TCP_NODELAY, then the TLS handshake when `tls` is
    /// given), bounded by the connect timeout.
    pub(crate) async fn connect(
        self: Arc<Self>,
        key: PoolKey,
        tls: Option<&TlsTarget>,
    ) -> Result<Box<Conn>, ProxyError> {
        self.start_sweeper();
        let stream = connect_tcp(&key.0, self.connect_timeout)
            .await
            .inspect_err(|_| {
                self.connect_errors.inc();
            })?;
        let io = match tls {
            None => Io::Plain(crate::batch::Batched::new(stream)),
            Some(tls) => {
                let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                let stream = crate::batch::Batched::new(stream);
                let handshake = connector.connect(tls.server_name.clone(), stream);
                match tokio::time::timeout(self.connect_timeout, handshake).await {
                    Ok(Ok(s)) => Io::Tls(Box::new(s)),
                    Ok(Err(e)) => {
                        self.connect_errors.inc();
                        tracing::debug!(policy = %tls.policy, error = %e, "upstream TLS handshake");
                        return Err(ProxyError::Connect(Box::new(e)));
                    }
                    Err(_) => {
                        self.connect_errors.inc();
                        return Err(ProxyError::Connect("upstream TLS handshake timeout".into()));
                    }
                }
            }
        };
        Ok(Box::new(Conn::new(
            io,
            Arc::downgrade(&self),
            key,
            self.open.clone(),
        )))
    }

    /// Closes connections idle for longer than the idle timeout, also for endpoints that
    /// get no more requests. Runs while the pool lives.
    fn start_sweeper(self: &Arc<Self>) {
        self.sweeper.call_once(|| {
            let pool = Arc::downgrade(self);
            let period = (self.idle_timeout / 2).max(Duration::from_millis(100));
            tokio::spawn(sweep(pool, period));
        });
    }

    /// Drops idle connections older than the idle timeout or closed by their upstream,
    /// and empty endpoint entries.
    fn sweep_now(&self) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.retain(|_, stack| {
            stack.retain_mut(|e| e.since.elapsed() < self.idle_timeout && e.conn.still_open());
            !stack.is_empty()
        });
    }

    #[cfg(test)]
    pub(crate) fn idle_count(&self) -> usize {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.values().map(Vec::len).sum()
    }
}

async fn sweep(pool: Weak<Http1Pool>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        match pool.upgrade() {
            Some(p) => p.sweep_now(),
            None => return,
        }
    }
}

/// A TCP connection to `addr` with TCP_NODELAY, within `timeout` (shared by the HTTP/1.1
/// pool and the HTTP/2-over-TLS pool; each counts its own failures).
pub(crate) async fn connect_tcp(
    addr: &EndpointAddr,
    timeout: Duration,
) -> Result<TcpStream, ProxyError> {
    let connecting = async {
        let stream = match addr {
            EndpointAddr::Socket(s) => TcpStream::connect(*s).await?,
            EndpointAddr::Host(h, p) => TcpStream::connect((&**h, *p)).await?,
        };
        stream.set_nodelay(true)?;
        Ok::<_, std::io::Error>(stream)
    };
    match tokio::time::timeout(timeout, connecting).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(ProxyError::Connect(Box::new(e))),
        Err(_) => Err(ProxyError::Connect("connect timeout".into())),
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use http::Response;
    use http_body_util::BodyExt;
    use hyper::body::Incoming;
    use hyper::client::conn::http1;
    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A raw HTTP/1.1 upstream that answers each request with a fixed response and
    /// reports how many connections it accepted.
    async fn upstream(
        close_after_first: bool,
    ) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    loop {
                        let mut got = Vec::new();
                        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                            match s.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => got.extend_from_slice(&buf[..n]),
                            }
                        }
                        let resp = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if s.write_all(resp).await.is_err() || close_after_first {
                            return;
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    /// Requests with an `Incoming` body come from a hyper server; a loopback hyper
    /// server that forwards to the pool stands in for the proxy.
    async fn through_pool(pool: Arc<Http1Pool>, target: EndpointAddr, n: usize) -> Vec<String> {
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front_addr = front.local_addr().unwrap();
        tokio::spawn(async move {
            let (s, _) = front.accept().await.unwrap();
            let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                let pool = Arc::clone(&pool);
                let target = target.clone();
                async move {
                    *req.uri_mut() = http::Uri::from_static("/");
                    let req = req.map(RequestBody::unlimited);
                    let resp = pool
                        .send(&target, None, req, None)
                        .await
                        .map_err(|e| e.to_string())?;
                    let body = resp
                        .into_body()
                        .collect()
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok::<_, String>(Response::new(http_body_util::Full::new(body.to_bytes())))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(s), svc)
                .await;
        });
        let s = TcpStream::connect(front_addr).await.unwrap();
        let (mut sender, conn) = http1::handshake::<_, String>(TokioIo::new(s))
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut out = Vec::new();
        for _ in 0..n {
            let req = Request::builder()
                .uri("/")
                .header("host", "x")
                .body(String::new())
                .unwrap();
            let resp = sender.send_request(req).await.unwrap();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            out.push(String::from_utf8_lossy(&body).into_owned());
        }
        out
    }

    fn pool() -> Arc<Http1Pool> {
        Arc::new(Http1Pool::new(
            Duration::from_secs(1),
            Duration::from_secs(30),
            Gauge::default(),
            Counter::default(),
        ))
    }

    #[tokio::test]
    async fn reuses_one_connection_for_sequential_requests() {
        let (addr, accepted) = upstream(false).await;
        let p = pool();
        let got = through_pool(Arc::clone(&p), EndpointAddr::Socket(addr), 5).await;
        assert_eq!(got, vec!["ok"; 5]);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(p.idle_count(), 1);
    }

    #[tokio::test]
    async fn upstream_closing_idle_connections_costs_no_request() {
        let (addr, accepted) = upstream(true).await;
        let p = pool();
        let got = through_pool(Arc::clone(&p), EndpointAddr::Socket(addr), 4).await;
        assert_eq!(got, vec!["ok"; 4]);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn connect_failure_is_a_connect_error_and_counted() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let errors = Counter::default();
        let p = Arc::new(Http1Pool::new(
            Duration::from_secs(1),
            Duration::from_secs(30),
            Gauge::default(),
            errors.clone(),
        ));
        let key = pool_key(&EndpointAddr::Socket(addr), None);
        let err = Arc::clone(&p).connect(key, None).await.err();
        assert!(matches!(err, Some(ProxyError::Connect(_))));
        assert_eq!(errors.get(), 1);
    }

    #[tokio::test]
    async fn sweep_drops_stale_idle_connections() {
        let (addr, _) = upstream(false).await;
        let p = Arc::new(Http1Pool::new(
            Duration::from_secs(1),
            Duration::from_millis(50),
            Gauge::default(),
            Counter::default(),
        ));
        through_pool(Arc::clone(&p), EndpointAddr::Socket(addr), 1).await;
        assert_eq!(p.idle_count(), 1);
        tokio::time::sleep(Duration::from_millis(80)).await;
        p.sweep_now();
        assert_eq!(p.idle_count(), 0);
    }
}
