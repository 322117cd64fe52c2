//! The HTTP/1.1 upstream pool: idle keep-alive connections per endpoint, on
//! `hyper::client::conn::http1`.
//!
//! Written instead of hyper-util's legacy client because the profile of the keep-alive
//! bench showed that client's per-request work (pool key hashing with SipHash, a boxed
//! connect future built per request, an extra task spawned per response to put the
//! connection back) at several percent of the proxy's CPU, and because its pool has no
//! bound. Here a request takes the most recently used idle sender of its endpoint (one
//! short lock), and the response body gives it back when it ends: no task, no timer.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::net::TcpStream;
use weir_model::EndpointAddr;

use crate::body::RequestBody;
use crate::endpoints::ConnectGate;
use crate::error::ProxyError;
use crate::upstream_tls::TlsTarget;

/// Idle connections kept per endpoint; more are closed when they come back.
const MAX_IDLE_PER_ENDPOINT: usize = 1024;

type Sender = http1::SendRequest<RequestBody>;

/// A connection's task: plaintext or over TLS (the TLS one boxed: its stream is large).
/// Built once per connection and moved into its task, so the plaintext variant's size
/// costs nothing per request.
#[allow(clippy::large_enum_variant)]
enum Connection {
    Plain(http1::Connection<TokioIo<TcpStream>, RequestBody>),
    Tls(Box<http1::Connection<TokioIo<tokio_rustls::client::TlsStream<TcpStream>>, RequestBody>>),
}

struct Idle {
    sender: Sender,
    since: Instant,
}

/// A pool's key: the endpoint, and the identity of the TLS settings its connections
/// were made with (0: plaintext), so that connections of a BackendTLSPolicy are not
/// shared with plaintext ones (or others') to the same address.
type PoolKey = (EndpointAddr, u64);

/// The key of `addr` reached with `tls`.
fn pool_key(addr: &EndpointAddr, tls: Option<&Arc<TlsTarget>>) -> PoolKey {
    (addr.clone(), tls.map_or(0, |t| t.id))
}

/// Idle HTTP/1.1 connections by endpoint.
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

/// A connection lent to one request; the response body returns it with [`Lease::release`].
pub(crate) struct Lease {
    pool: Weak<Http1Pool>,
    addr: PoolKey,
    /// The TLS settings of its connection, to make another if it closed unused.
    tls: Option<Arc<TlsTarget>>,
    sender: Sender,
}

impl Lease {
    /// Gives the connection back once the response has been read to its end. Usually
    /// the connection task has already finished the exchange; when it has not (another
    /// worker thread runs it), a small task waits for it, as hyper-util does for every
    /// request. A closed connection is dropped.
    pub(crate) fn release(mut self) {
        if self.sender.is_closed() {
            return;
        }
        let Some(pool) = self.pool.upgrade() else {
            return;
        };
        if self.sender.is_ready() {
            pool.put(self.addr, self.sender);
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let limit = pool.idle_timeout;
        drop(pool);
        rt.spawn(async move {
            if let Ok(Ok(())) = tokio::time::timeout(limit, self.sender.ready()).await
                && let Some(pool) = self.pool.upgrade()
            {
                pool.put(self.addr, self.sender);
            }
        });
    }
}

type TrySendError = hyper::client::conn::TrySendError<Request<RequestBody>>;

/// The boxed general case of [`Http1Pool::send`].
type SlowSend =
    Pin<Box<dyn Future<Output = Result<(Response<Incoming>, Lease), ProxyError>> + Send>>;

pin_project_lite::pin_project! {
    /// The response head of a request sent with [`Http1Pool::send`], with the lease of
    /// its connection.
    #[project = SendingProj]
    pub(crate) enum Sending<F> {
        /// Handed to a ready idle connection; `lease` is taken when the answer comes.
        Sent {
            #[pin]
            response: F,
            lease: Option<Lease>,
        },
        /// Anything else, including a retry after the idle connection closed.
        Slow { fut: SlowSend },
    }
}

impl<F> Future for Sending<F>
where
    F: Future<Output = Result<Response<Incoming>, TrySendError>>,
{
    type Output = Result<(Response<Incoming>, Lease), ProxyError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (sent, lease) = match self.as_mut().project() {
            SendingProj::Slow { fut } => return fut.as_mut().poll(cx),
            SendingProj::Sent { response, lease } => {
                let sent = ready!(response.poll(cx));
                (sent, lease.take())
            }
        };
        let Some(lease) = lease else {
            return Poll::Ready(Err(ProxyError::Upstream("polled after completion".into())));
        };
        match sent {
            Ok(resp) => Poll::Ready(Ok((resp, lease))),
            Err(mut e) => match (e.take_message(), lease.pool.upgrade()) {
                // Closed before the request was written: it never reached the upstream,
                // so it goes again (the closed connection is dropped with the lease).
                (Some(req), Some(pool)) => {
                    let fut = Box::pin(pool.send_slow(lease.addr, lease.tls, req, None, None));
                    self.set(Sending::Slow { fut });
                    self.poll(cx)
                }
                (Some(_), None) => {
                    Poll::Ready(Err(ProxyError::Connect("upstream pool closed".into())))
                }
                (None, _) => Poll::Ready(Err(ProxyError::upstream_send(Box::new(e.into_error())))),
            },
        }
    }
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
    /// new one. A request that a reused connection closed before sending it is sent
    /// again on a new connection (it never reached the upstream).
    ///
    /// The usual case (an idle connection ready for the next request) hands the request
    /// over right here and returns a future that only waits for the response head; the
    /// rest (waiting for a connection, retrying, connecting) is one boxed future. The
    /// returned future is moved with the request's (see `server::handle`), so it is
    /// kept small.
    pub(crate) fn send(
        self: &Arc<Self>,
        addr: &EndpointAddr,
        tls: Option<&Arc<TlsTarget>>,
        req: Request<RequestBody>,
        gate: Option<ConnectGate>,
    ) -> Sending<impl Future<Output = Result<Response<Incoming>, TrySendError>> + Send + use<>>
    {
        let key = pool_key(addr, tls);
        match self.take(&key) {
            Some(mut sender) if sender.is_ready() => {
                let response = sender.try_send_request(req);
                Sending::Sent {
                    response,
                    lease: Some(self.lease(key, tls.cloned(), sender)),
                }
            }
            taken => Sending::Slow {
                fut: Box::pin(Arc::clone(self).send_slow(key, tls.cloned(), req, taken, gate)),
            },
        }
    }

    /// The general case of [`Http1Pool::send`], starting with `first` (an idle sender
    /// that was not ready yet), if any.
    async fn send_slow(
        self: Arc<Self>,
        addr: PoolKey,
        tls: Option<Arc<TlsTarget>>,
        req: Request<RequestBody>,
        first: Option<Sender>,
        gate: Option<ConnectGate>,
    ) -> Result<(Response<Incoming>, Lease), ProxyError> {
        let mut req = req;
        let mut next = first;
        while let Some(mut sender) = next.take().or_else(|| self.take(&addr)) {
            if !sender.is_ready() && sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok((resp, self.lease(addr.clone(), tls.clone(), sender))),
                Err(mut e) => match e.take_message() {
                    Some(back) => req = back,
                    None => return Err(ProxyError::upstream_send(Box::new(e.into_error()))),
                },
            }
        }
        // A pending request from here until its connection is up: a circuit breaker may
        // refuse one more.
        let pending = gate
            .map(ConnectGate::enter)
            .transpose()
            .map_err(ProxyError::Overloaded)?;
        let mut sender = self.connect(&addr.0, tls.as_deref()).await?;
        drop(pending);
        match sender.send_request(req).await {
            Ok(resp) => Ok((resp, self.lease(addr, tls, sender))),
            Err(e) => Err(ProxyError::upstream_send(Box::new(e))),
        }
    }

    fn lease(
        self: &Arc<Self>,
        addr: PoolKey,
        tls: Option<Arc<TlsTarget>>,
        sender: Sender,
    ) -> Lease {
        Lease {
            pool: Arc::downgrade(self),
            addr,
            tls,
            sender,
        }
    }

    /// The most recently used idle sender of `addr` that is still open and fresh.
    fn take(&self, addr: &PoolKey) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let stack = idle.get_mut(addr)?;
        while let Some(entry) = stack.pop() {
            if !entry.sender.is_closed() && entry.since.elapsed() < self.idle_timeout {
                return Some(entry.sender);
            }
        }
        None
    }

    fn put(&self, addr: PoolKey, sender: Sender) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let stack = idle.entry(addr).or_default();
        if stack.len() < MAX_IDLE_PER_ENDPOINT {
            stack.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }

    /// Opens a connection (TCP_NODELAY, then the TLS handshake when `tls` is given) and
    /// starts its task; bounded by the connect timeout.
    async fn connect(
        self: &Arc<Self>,
        addr: &EndpointAddr,
        tls: Option<&TlsTarget>,
    ) -> Result<Sender, ProxyError> {
        self.start_sweeper();
        let connecting = async {
            let stream = match addr {
                EndpointAddr::Socket(s) => TcpStream::connect(*s).await?,
                EndpointAddr::Host(h, p) => TcpStream::connect((&**h, *p)).await?,
            };
            stream.set_nodelay(true)?;
            Ok::<_, std::io::Error>(stream)
        };
        let stream = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                self.connect_errors.inc();
                return Err(ProxyError::Connect(Box::new(e)));
            }
            Err(_) => {
                self.connect_errors.inc();
                return Err(ProxyError::Connect("connect timeout".into()));
            }
        };
        let (sender, conn) = match tls {
            None => http1::handshake(TokioIo::new(stream))
                .await
                .map(|(s, c)| (s, Connection::Plain(c))),
            Some(tls) => {
                let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                let handshake = connector.connect(tls.server_name.clone(), stream);
                let stream = match tokio::time::timeout(self.connect_timeout, handshake).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        self.connect_errors.inc();
                        tracing::debug!(policy = %tls.policy, error = %e, "upstream TLS handshake");
                        return Err(ProxyError::Connect(Box::new(e)));
                    }
                    Err(_) => {
                        self.connect_errors.inc();
                        return Err(ProxyError::Connect("upstream TLS handshake timeout".into()));
                    }
                };
                http1::handshake(TokioIo::new(stream))
                    .await
                    .map(|(s, c)| (s, Connection::Tls(Box::new(c))))
            }
        }
        .map_err(|e| ProxyError::Connect(Box::new(e)))?;
        let open = self.open.clone();
        open.inc();
        tokio::spawn(async move {
            // With upgrades: after a 101 (WebSocket) the connection is handed to the
            // tunnel instead of being closed; its sender is closed then, so the lease is
            // not returned to the pool.
            let ended = match conn {
                Connection::Plain(c) => c.with_upgrades().await,
                Connection::Tls(c) => c.with_upgrades().await,
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "upstream connection ended");
            }
            open.dec();
        });
        Ok(sender)
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

    /// Drops idle connections older than the idle timeout and empty endpoint entries.
    fn sweep_now(&self) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.retain(|_, stack| {
            stack.retain(|e| !e.sender.is_closed() && e.since.elapsed() < self.idle_timeout);
            !stack.is_empty()
        });
    }

    #[cfg(test)]
    fn idle_count(&self) -> usize {
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

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use http_body_util::BodyExt;
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
                    let (resp, lease) = pool
                        .send(&target, None, req, None)
                        .await
                        .map_err(|e| e.to_string())?;
                    let body = resp
                        .into_body()
                        .collect()
                        .await
                        .map_err(|e| e.to_string())?;
                    lease.release();
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
        let err = p.connect(&EndpointAddr::Socket(addr), None).await.err();
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
