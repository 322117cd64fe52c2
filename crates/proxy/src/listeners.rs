//! Accept loops: one per [`ListenerKey`], serving plaintext HTTP (HTTP/1.1 and h2c) or
//! TLS (certificate by SNI, HTTP/2 or HTTP/1.1 by ALPN).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::HeaderValue;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use prometheus_client::metrics::gauge::Gauge;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use weir_model::{Listener, ListenerKey, Protocol};

use crate::dataplane::Shared;
use crate::metrics::ListenerMetrics;
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
        let tcp = TcpListener::bind(key.0).await?;
        let local_addr = tcp.local_addr()?;
        let runtime = Arc::new(ArcSwap::from_pointee(Runtime::new(shared, listener)));
        let (stop, stop_rx) = watch::channel(false);
        let (closed_tx, closed) = oneshot::channel();
        let task = tokio::spawn(accept_loop(AcceptLoop {
            tcp,
            shared: Arc::clone(shared),
            key,
            local_port: local_addr.port(),
            runtime: Arc::clone(&runtime),
            stop: stop_rx,
            closed: closed_tx,
        }));
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
    tcp: TcpListener,
    shared: Arc<Shared>,
    key: ListenerKey,
    local_port: u16,
    runtime: Arc<ArcSwap<Runtime>>,
    stop: watch::Receiver<bool>,
    closed: oneshot::Sender<()>,
}

async fn accept_loop(mut l: AcceptLoop) {
    let graceful = GracefulShutdown::new();
    // Fired when the drain timeout expires: connections still open are closed.
    let (force_tx, force) = watch::channel(false);
    loop {
        tokio::select! {
            biased;
            _ = l.stop.changed() => break,
            accepted = l.tcp.accept() => match accepted {
                Ok((stream, remote)) => {
                    let _ = stream.set_nodelay(true);
                    let conn = Conn {
                        stream,
                        remote,
                        runtime: l.runtime.load_full(),
                        shared: Arc::clone(&l.shared),
                        key: l.key,
                        local_port: l.local_port,
                        watcher: graceful.watcher(),
                        force: force.clone(),
                    };
                    tokio::spawn(serve_connection(conn));
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
    drop(l.tcp);
    let _ = l.closed.send(());
    tracing::info!(listener = %l.key, "stopped accepting; draining");
    let drain = l.shared.config.drain_timeout;
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(listener = %l.key, "drain timeout: closing remaining connections");
        let _ = force_tx.send(true);
    }
}

struct Conn {
    stream: TcpStream,
    remote: SocketAddr,
    runtime: Arc<Runtime>,
    shared: Arc<Shared>,
    key: ListenerKey,
    local_port: u16,
    watcher: Watcher,
    force: watch::Receiver<bool>,
}

/// Decrements the downstream connection gauge when the connection ends.
struct GaugeGuard(Gauge);

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

async fn serve_connection(c: Conn) {
    let mut force = c.force.clone();
    tokio::select! {
        () = serve_until_done(c) => {}
        _ = force.wait_for(|closed| *closed) => {}
    }
}

async fn serve_until_done(c: Conn) {
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
            let conn = rt
                .auto
                .serve_connection_with_upgrades(TokioIo::new(c.stream), svc);
            c.watcher.watch(conn).await
        }
        Some(acceptor) => {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(c.stream)).await
            {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(listener = %c.key, remote = %c.remote, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(listener = %c.key, remote = %c.remote, "TLS handshake timed out");
                    return;
                }
            };
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            let builder = if h2 { &rt.h2 } else { &rt.h1 };
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), svc);
            c.watcher.watch(conn).await
        }
    };
    if let Err(e) = result {
        tracing::debug!(listener = %c.key, remote = %c.remote, error = %e, "connection error");
    }
}
