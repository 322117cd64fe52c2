//! HTTP/2 over TLS to upstreams: the h2c and gRPC clusters of a Service port with a
//! BackendTLSPolicy. One multiplexed connection per (endpoint, TLS identity), made with
//! ALPN `h2`, the policy's SNI and verifier ([`TlsTarget::connect_h2`]), on
//! `hyper::client::conn::http2`.
//!
//! Plaintext h2c keeps hyper-util's client (whose pool is keyed by URI authority only
//! and whose connector sees no more than the URI): the TLS identity is part of this
//! pool's key, so that connections of different policies to one address are never
//! shared. Concurrent requests to an endpoint without a connection wait for one
//! connect (a `OnceCell` per key); a failed connect leaves the cell empty, and each
//! waiting request then tries its own (each counted and answered as a connect failure).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::OnceCell;
use weir_model::EndpointAddr;

use crate::body::RequestBody;
use crate::endpoints::{ConnectGate, millis};
use crate::error::ProxyError;
use crate::upstream_tls::TlsTarget;

type Sender = http2::SendRequest<RequestBody>;

/// An endpoint reached with one TLS identity (see [`crate::pool`]'s key).
type PoolKey = (EndpointAddr, u64);

/// The connection of one key, once made, and when a request last used it.
#[derive(Default)]
struct Slot {
    conn: OnceCell<Sender>,
    /// [`millis`] of the last use.
    used: AtomicU64,
}

/// HTTP/2 connections over TLS by endpoint and TLS identity.
pub(crate) struct H2TlsPool {
    slots: Mutex<HashMap<PoolKey, Arc<Slot>, foldhash::fast::FixedState>>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    open: Gauge,
    connect_errors: Counter,
    /// Set once the idle sweeper runs (started by the first connection, inside the
    /// runtime).
    sweeper: std::sync::Once,
}

impl H2TlsPool {
    pub(crate) fn new(
        connect_timeout: Duration,
        idle_timeout: Duration,
        open: Gauge,
        connect_errors: Counter,
    ) -> H2TlsPool {
        H2TlsPool {
            slots: Mutex::new(HashMap::with_hasher(foldhash::fast::FixedState::default())),
            connect_timeout,
            idle_timeout,
            open,
            connect_errors,
            sweeper: std::sync::Once::new(),
        }
    }

    /// Sends `req` (absolute `https` URI naming the endpoint) to `addr` over the shared
    /// connection of (`addr`, `tls`), making it first if there is none. A request that a
    /// closing connection did not take is sent once more on a new connection (it never
    /// reached the upstream). `gate` bounds the requests pending while a connection is
    /// made (the circuit breaker).
    pub(crate) async fn send(
        self: Arc<Self>,
        addr: EndpointAddr,
        tls: Arc<TlsTarget>,
        req: Request<RequestBody>,
        gate: Option<ConnectGate>,
    ) -> Result<Response<Incoming>, ProxyError> {
        let key = (addr, tls.id);
        let mut req = req;
        let mut gate = gate;
        // Bounded: the second connection is a new one; if it too closes before taking
        // the request, the request fails.
        for _ in 0..2 {
            let mut sender = self.sender(&key, &tls, gate.take()).await?;
            if sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok(resp),
                Err(mut e) => match e.take_message() {
                    Some(back) => req = back,
                    None => return Err(ProxyError::upstream_send(Box::new(e.into_error()))),
                },
            }
        }
        Err(ProxyError::Connect(
            "upstream HTTP/2 connection closed before taking the request".into(),
        ))
    }

    /// The open connection of `key`, or a new one (one connect for concurrent callers).
    async fn sender(
        self: &Arc<Self>,
        key: &PoolKey,
        tls: &TlsTarget,
        gate: Option<ConnectGate>,
    ) -> Result<Sender, ProxyError> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            match slots.get(key) {
                Some(s) if s.conn.get().is_none_or(|c| !c.is_closed()) => Arc::clone(s),
                _ => {
                    let s = Arc::new(Slot::default());
                    slots.insert(key.clone(), Arc::clone(&s));
                    s
                }
            }
        };
        slot.used.store(millis(Instant::now()), Ordering::Relaxed);
        let sender = slot
            .conn
            .get_or_try_init(|| async {
                // Pending from here until the connection is up: a circuit breaker may
                // refuse one more.
                let pending = gate
                    .map(ConnectGate::enter)
                    .transpose()
                    .map_err(ProxyError::Overloaded)?;
                let made = self.connect(&key.0, tls).await;
                drop(pending);
                made
            })
            .await?;
        Ok(sender.clone())
    }

    /// Opens a connection (TCP_NODELAY, the TLS handshake with ALPN `h2`, the HTTP/2
    /// handshake) and starts its task; TCP and TLS each bounded by the connect timeout.
    /// Every failure is counted as a failed connect.
    async fn connect(
        self: &Arc<Self>,
        addr: &EndpointAddr,
        tls: &TlsTarget,
    ) -> Result<Sender, ProxyError> {
        self.start_sweeper();
        let failed = |e: crate::error::BoxError| {
            self.connect_errors.inc();
            tracing::warn!(upstream = %addr, policy = %tls.policy, error = %e, "upstream HTTP/2 over TLS");
            ProxyError::Connect(e)
        };
        // A refused connect is not about TLS: counted, not logged as a warning.
        let stream = crate::pool::connect_tcp(addr, self.connect_timeout)
            .await
            .inspect_err(|_| {
                self.connect_errors.inc();
            })?;
        let stream = match tokio::time::timeout(self.connect_timeout, tls.connect_h2(stream)).await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(failed(e)),
            Err(_) => return Err(failed("upstream TLS handshake timeout".into())),
        };
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| failed(Box::new(e)))?;
        let open = self.open.clone();
        open.inc();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream HTTP/2 connection ended");
            }
            open.dec();
        });
        Ok(sender)
    }

    /// Forgets connections unused for longer than the idle timeout (also of endpoints
    /// that get no more requests); a connection closes once its last request is done.
    fn start_sweeper(self: &Arc<Self>) {
        self.sweeper.call_once(|| {
            let pool = Arc::downgrade(self);
            let period = (self.idle_timeout / 2).max(Duration::from_millis(100));
            tokio::spawn(sweep(pool, period));
        });
    }

    fn sweep_now(&self) {
        let idle_ms = self.idle_timeout.as_millis() as u64;
        let now = millis(Instant::now());
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.retain(|_, s| {
            let fresh = now.saturating_sub(s.used.load(Ordering::Relaxed)) < idle_ms;
            // A slot still connecting is kept (its requests hold it anyway).
            match s.conn.get() {
                Some(c) => fresh && !c.is_closed(),
                None => fresh,
            }
        });
    }
}

async fn sweep(pool: Weak<H2TlsPool>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        match pool.upgrade() {
            Some(p) => p.sweep_now(),
            None => return,
        }
    }
}
