//! Accept loops: one per [`ListenerKey`], serving plaintext HTTP (HTTP/1.1 and h2c) or
//! TLS (certificate by SNI, HTTP/2 or HTTP/1.1 by ALPN).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::HeaderValue;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus_client::metrics::gauge::Gauge;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use weir_model::{Listener, ListenerKey, Protocol};

use crate::dataplane::Shared;
use crate::drain::{Drain, Ticket};
use crate::metrics::ListenerMetrics;
use crate::protocol::{FirstBytes, Speaks};
use crate::server::{self, ConnContext};
use crate::tls;

/// A TLS handshake that takes longer than this is abandoned (closes that connection only).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after an accept error (e.g. EMFILE) before accepting again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// What an accept loop needs to serve new connections; replaced without rebinding when the
/// listener's protocol or labels change.
struct Runtime {
    listener: Arc<Listener>,
    tls: Option<TlsAcceptor>,
    metrics: ListenerMetrics,
    auto: auto::Builder<TokioExecutor>,
    h1: auto::Builder<TokioExecutor>,
    h2: auto::Builder<TokioExecutor>,
}

impl Runtime {
    fn new(shared: &Arc<Shared>, listener: Arc<Listener>) -> Runtime {
        let tls = match listener.protocol {
            Protocol::Http => None,
            Protocol::Https => Some(TlsAcceptor::from(tls::server_config(
                Arc::clone(&shared.snapshots),
                listener.key,
            ))),
        };
        let metrics = shared.metrics.listener(&listener.gateway, &listener.name);
        Runtime {
            listener,
            tls,
            metrics,
            auto: server_builder(),
            h1: server_builder().http1_only(),
            h2: server_builder().http2_only(),
        }
    }
}

fn server_builder() -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1().timer(TokioTimer::new()).keep_alive(true);
    b.http2().timer(TokioTimer::new());
    b
}

/// A running accept loop.
pub(crate) struct ListenerHandle {
    local_addr: SocketAddr,
    runtime: Arc<ArcSwap<Runtime>>,
    stop: watch::Sender<bool>,
    closed: oneshot::Receiver<()>,
    task: JoinHandle<()>,
}

impl ListenerHandle {
    /// Binds `listener.key` and starts its accept loop.
    pub(crate) async fn bind(
        shared: &Arc<Shared>,
        listener: Arc<Listener>,
    ) -> std::io::Result<ListenerHandle> {
        let key = listener.key;
        // Bound here so that a failure is reported to the caller; the socket then moves
        // to a worker, whose runtime registers it.
        let tcp = TcpListener::bind(key.0).await?;
        let local_addr = tcp.local_addr()?;
        let tcp = tcp.into_std()?;
        let runtime = Arc::new(ArcSwap::from_pointee(Runtime::new(shared, listener)));
        let (stop, stop_rx) = watch::channel(false);
        let (closed_tx, closed) = oneshot::channel();
        let l = AcceptLoop {
            shared: Arc::clone(shared),
            key,
            local_port: local_addr.port(),
            runtime: Arc::clone(&runtime),
            stop: stop_rx,
            closed: closed_tx,
        };
        let worker = shared.workers.pick();
        let task = shared.workers.spawn_on(worker, async move {
            match TcpListener::from_std(tcp) {
                Ok(tcp) => accept_loop(tcp, l).await,
                Err(e) => {
                    tracing::warn!(listener = %key, error = %e, "cannot register the listener");
                    let _ = l.closed.send(());
                }
            }
        });
        tracing::info!(listener = %key, addr = %local_addr, "listening");
        Ok(ListenerHandle {
            local_addr,
            runtime,
            stop,
            closed,
            task,
        })
    }

    /// The address actually bound.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves new connections with the changed listener (protocol, labels); existing
    /// connections keep their settings. A no-op when nothing changed.
    pub(crate) fn update(&self, shared: &Arc<Shared>, listener: &Arc<Listener>) {
        if self.runtime.load().listener.hash() != listener.hash() {
            self.runtime
                .store(Arc::new(Runtime::new(shared, Arc::clone(listener))));
        }
    }

    /// Stops accepting and waits until the socket is closed. In-flight requests keep
    /// going: the returned task finishes once they are drained (or the drain timeout hit).
    pub(crate) async fn stop(self) -> JoinHandle<()> {
        let _ = self.stop.send(true);
        let _ = self.closed.await;
        self.task
    }
}

struct AcceptLoop {
    shared: Arc<Shared>,
    key: ListenerKey,
    local_port: u16,
    runtime: Arc<ArcSwap<Runtime>>,
    stop: watch::Receiver<bool>,
    closed: oneshot::Sender<()>,
}

async fn accept_loop(tcp: TcpListener, mut l: AcceptLoop) {
    let drain = Drain::default();
    loop {
        tokio::select! {
            biased;
            _ = l.stop.changed() => break,
            accepted = tcp.accept() => match accepted {
                Ok((stream, remote)) => {
                    let _ = stream.set_nodelay(true);
                    let conn = Conn {
                        remote,
                        runtime: l.runtime.load_full(),
                        shared: Arc::clone(&l.shared),
                        key: l.key,
                        local_port: l.local_port,
                        ticket: drain.ticket(),
                    };
                    hand_over(&l.shared, stream, conn);
                }
                Err(e) => {
                    tracing::warn!(listener = %l.key, error = %e, "accept failed");
                    tokio::select! {
                        _ = l.stop.changed() => break,
                        _ = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => {}
                    }
                }
            },
        }
    }
    drop(tcp);
    let _ = l.closed.send(());
    tracing::info!(listener = %l.key, "stopped accepting; draining");
    if !drain.drain(l.shared.config.drain_timeout).await {
        tracing::warn!(listener = %l.key, "drain timeout: closing remaining connections");
    }
}

struct Conn {
    remote: SocketAddr,
    runtime: Arc<Runtime>,
    shared: Arc<Shared>,
    key: ListenerKey,
    local_port: u16,
    ticket: Ticket,
}

/// Decrements the downstream connection gauge when the connection ends.
struct GaugeGuard(Gauge);

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Serves the connection on the next worker: here if that is this thread, else the
/// socket moves to the worker's runtime.
fn hand_over(shared: &Shared, stream: TcpStream, conn: Conn) {
    let target = shared.workers.pick();
    if crate::workers::current() == Some(target) || shared.workers.len() == 1 {
        tokio::spawn(serve_connection(stream, conn));
        return;
    }
    match stream.into_std() {
        Ok(std) => {
            shared.workers.spawn_on(target, async move {
                match TcpStream::from_std(std) {
                    Ok(stream) => serve_connection(stream, conn).await,
                    Err(e) => tracing::debug!(error = %e, "cannot register a connection"),
                }
            });
        }
        Err(e) => tracing::debug!(error = %e, "cannot move a connection to its worker"),
    }
}

async fn serve_connection(stream: TcpStream, c: Conn) {
    let mut ticket = c.ticket;
    let rt = c.runtime;
    rt.metrics.downstream_connections.inc();
    let _guard = GaugeGuard(rt.metrics.downstream_connections.clone());
    let ctx = Arc::new(ConnContext {
        shared: c.shared,
        key: c.key,
        local_port: c.local_port,
        remote: c.remote,
        client_ip: HeaderValue::try_from(c.remote.ip().to_string())
            .unwrap_or_else(|_| HeaderValue::from_static("unknown")),
        tls: rt.tls.is_some(),
        metrics: rt.metrics.clone(),
        listener_label: Arc::clone(&rt.listener.name),
    });
    let svc = hyper::service::service_fn(move |req| server::handle(Arc::clone(&ctx), req));
    let result = match &rt.tls {
        None => {
            let io = TokioIo::new(FirstBytes::new(stream, Speaks::Http1OrH2));
            let conn = rt.auto.serve_connection_with_upgrades(io, svc);
            ticket.serve(conn).await
        }
        Some(acceptor) => {
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
            let tls = match ticket.until_closed(handshake).await {
                None => return,
                Some(Ok(Ok(tls))) => tls,
                Some(Ok(Err(e))) => {
                    tracing::debug!(listener = %c.key, remote = %c.remote, error = %e, "TLS handshake failed");
                    return;
                }
                Some(Err(_)) => {
                    tracing::debug!(listener = %c.key, remote = %c.remote, "TLS handshake timed out");
                    return;
                }
            };
            // ALPN decides: `h2` is served as HTTP/2 only (`serve_connection` honours
            // `http2_only`), anything else as HTTP/1.1 only (`serve_connection_with_upgrades`
            // ignores `http1_only`, so the first bytes are checked instead).
            if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                let conn = rt.h2.serve_connection(TokioIo::new(tls), svc);
                ticket.serve(conn).await
            } else {
                let io = TokioIo::new(FirstBytes::new(tls, Speaks::Http1));
                let conn = rt.h1.serve_connection_with_upgrades(io, svc);
                ticket.serve(conn).await
            }
        }
    };
    if let Some(Err(e)) = result {
        tracing::debug!(listener = %c.key, remote = %c.remote, error = %e, "connection error");
    }
}
