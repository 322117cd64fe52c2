//! Accept loops: one per [`ListenerKey`]. Each connection is served by its listener's
//! [`ConnectionHandler`], chosen once when the listener's runtime is built: plaintext
//! HTTP (HTTP/1.1 and h2c), TLS terminated here (certificate by SNI, HTTP/2 or HTTP/1.1
//! by ALPN), TLS by SNI passed through or terminated and spliced, or TCP (`crate::l4`). A
//! UDP listener has no accept loop: its socket is read by `crate::l4::udp::serve`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use futures_util::future::{Either, Ready, ready};
use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use weir_model::{Listener, ListenerKey, Protocol};

use crate::body::ClientBody;
use crate::dataplane::Shared;
use crate::drain::{Drain, Ticket};
use crate::error::{ProxyError, ResponseShape, error_response};
use crate::h1::{self, server::Fallback};
use crate::h2_server;
use crate::idle::{ConnState, Tracked, Watch, Watched};
use crate::l4::udp::{UdpLoop, UdpMetrics};
use crate::l4::{self, Hello, L4Conn, L4Metrics, Rewind};
use crate::limits::{self, AcceptBackoff, Admission, Slot};
use crate::metrics::ListenerMetrics;
use crate::protocol::{FirstBytes, Speaks};
use crate::router;
use crate::server::{self, ConnContext, ProxyBody};
use crate::tls;

/// What an accept loop needs to serve new connections; replaced without rebinding when the
/// listener's protocol, labels or settings change.
pub(crate) struct Runtime {
    pub(crate) listener: Arc<Listener>,
    pub(crate) handler: ConnectionHandler,
    pub(crate) metrics: ListenerMetrics,
}

/// How a listener serves a connection, chosen once per listener (never per connection or
/// request) from its protocol.
pub(crate) enum ConnectionHandler {
    /// Plaintext HTTP/1.1, and HTTP/2 with prior knowledge.
    Http(HttpServers),
    /// TLS terminated here (certificate by SNI), then HTTP by ALPN. When the socket also
    /// has L4 routes (HTTPS and TLS listeners on one port), the ClientHello is read first
    /// and a hostname of one of them is served by its route instead.
    Https(TlsAcceptor, HttpServers, L4Handler),
    /// TLS passthrough or terminate: the ClientHello's SNI picks the L4 route.
    Tls(L4Handler),
    /// TCP: the listener's L4 route.
    Tcp(L4Metrics),
    /// UDP: the listener's L4 route, per client session. Never reaches
    /// `serve_connection`: a UDP socket has no connections to accept.
    Udp(UdpMetrics),
}

/// What a TLS socket needs for its L4 routes: the acceptor of routes that terminate
/// TLS (no ALPN) and the listener's L4 counters.
pub(crate) struct L4Handler {
    terminate: TlsAcceptor,
    metrics: L4Metrics,
}

impl ConnectionHandler {
    /// Whether clients speak plaintext HTTP, so that a refused connection can be told
    /// so with a 503 (TLS and L4 clients are closed without a word).
    fn plaintext_http(&self) -> bool {
        matches!(self, ConnectionHandler::Http(_))
    }
}

/// hyper's connection builders with the listener's limits: one per way a connection may
/// speak HTTP.
pub(crate) struct HttpServers {
    /// Plaintext: HTTP/1.1 or h2c by the first bytes.
    auto: auto::Builder<TokioExecutor>,
    /// TLS with ALPN other than `h2`.
    h1: auto::Builder<TokioExecutor>,
    /// TLS with ALPN `h2`.
    h2: auto::Builder<TokioExecutor>,
}

impl HttpServers {
    fn new(limits: &weir_model::ConnectionLimits) -> HttpServers {
        HttpServers {
            auto: server_builder(limits),
            h1: server_builder(limits).http1_only(),
            h2: server_builder(limits).http2_only(),
        }
    }
}

impl Runtime {
    fn new(shared: &Arc<Shared>, listener: Arc<Listener>) -> Runtime {
        let limits = &listener.settings.limits;
        let l4 = || {
            shared
                .metrics
                .l4_listener(&listener.gateway, &listener.name)
        };
        // Client certificates are asked for on HTTP connections only: Gateway API's
        // frontend validation concerns HTTPS listeners, not the TLSRoutes terminated on
        // the same socket.
        let acceptor = |carries| {
            let client = match (carries, &listener.settings.client_validation) {
                (tls::Carries::Http, Some(v)) => Some((
                    v,
                    shared
                        .metrics
                        .client_certs_rejected(&listener.gateway, &listener.name),
                )),
                _ => None,
            };
            TlsAcceptor::from(tls::server_config(
                Arc::clone(&shared.snapshots),
                listener.key,
                carries,
                client,
            ))
        };
        let l4_tls = || L4Handler {
            terminate: acceptor(tls::Carries::Opaque),
            metrics: l4(),
        };
        let handler = match listener.protocol {
            Protocol::Http => ConnectionHandler::Http(HttpServers::new(limits)),
            Protocol::Https => ConnectionHandler::Https(
                acceptor(tls::Carries::Http),
                HttpServers::new(limits),
                l4_tls(),
            ),
            Protocol::TlsPassthrough | Protocol::TlsTerminate => ConnectionHandler::Tls(l4_tls()),
            Protocol::Tcp => ConnectionHandler::Tcp(l4()),
            Protocol::Udp => ConnectionHandler::Udp(
                shared
                    .metrics
                    .udp_listener(&listener.gateway, &listener.name),
            ),
        };
        let metrics = shared.metrics.listener(&listener.gateway, &listener.name);
        Runtime {
            listener,
            handler,
            metrics,
        }
    }
}

fn server_builder(limits: &weir_model::ConnectionLimits) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    // No header-read timeout from hyper: it starts when a connection goes idle (so it
    // would cut keep-alive at the head limit) and arms a new timer per request;
    // `idle::Watched` bounds heads and idle connections separately.
    b.http1()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(None);
    b.http2().timer(TokioTimer::new());
    limits::configure(&mut b, limits);
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
        if listener.protocol == Protocol::Udp {
            return Self::bind_udp(shared, listener).await;
        }
        let key = listener.key;
        // Bound here so that a failure is reported to the caller; the socket then moves
        // to a worker, whose runtime registers it.
        let tcp = TcpListener::bind(key.addr()).await?;
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
            admission: Admission::default(),
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

    /// Binds a UDP listener's socket and starts the loop that reads it.
    async fn bind_udp(
        shared: &Arc<Shared>,
        listener: Arc<Listener>,
    ) -> std::io::Result<ListenerHandle> {
        let key = listener.key;
        let socket = UdpSocket::bind(key.addr()).await?;
        let local_addr = socket.local_addr()?;
        let socket = socket.into_std()?;
        let runtime = Arc::new(ArcSwap::from_pointee(Runtime::new(shared, listener)));
        let (stop, stop_rx) = watch::channel(false);
        let (closed_tx, closed) = oneshot::channel();
        let l = UdpLoop {
            shared: Arc::clone(shared),
            key,
            runtime: Arc::clone(&runtime),
            stop: stop_rx,
        };
        let worker = shared.workers.pick();
        let task = shared.workers.spawn_on(worker, async move {
            match l4::udp::register(socket) {
                Ok(socket) => l4::udp::serve(socket, l).await,
                Err(e) => {
                    tracing::warn!(listener = %key, error = %e, "cannot register the listener")
                }
            }
            // The socket is closed once `serve` returns (sessions included).
            let _ = closed_tx.send(());
        });
        tracing::info!(listener = %key, addr = %local_addr, "listening (UDP)");
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

    /// Serves new connections with the changed listener (protocol, labels, settings);
    /// existing connections keep their settings (and count against the new limits). A
    /// no-op when nothing changed. Returns false, changing nothing, when the listener
    /// moved between UDP and a stream protocol: its socket must be bound again.
    pub(crate) fn update(&self, shared: &Arc<Shared>, listener: &Arc<Listener>) -> bool {
        let current = self.runtime.load();
        if (current.listener.protocol == Protocol::Udp) != (listener.protocol == Protocol::Udp) {
            return false;
        }
        if current.listener.hash() != listener.hash() {
            self.runtime
                .store(Arc::new(Runtime::new(shared, Arc::clone(listener))));
        }
        true
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
    /// Open connections, across runtime replacements.
    admission: Admission,
    stop: watch::Receiver<bool>,
    closed: oneshot::Sender<()>,
}

async fn accept_loop(tcp: TcpListener, mut l: AcceptLoop) {
    let drain = Drain::default();
    let mut backoff = AcceptBackoff::default();
    loop {
        tokio::select! {
            biased;
            _ = l.stop.changed() => break,
            accepted = tcp.accept() => match accepted {
                Ok((stream, remote)) => {
                    backoff.succeeded(l.key);
                    let accepted_at = Instant::now();
                    let runtime = l.runtime.load_full();
                    let limits = &runtime.listener.settings.limits;
                    let slot = match l.admission.admit(remote.ip(), limits) {
                        Ok(slot) => slot,
                        Err(why) => {
                            tracing::debug!(listener = %l.key, %remote, ?why, "connection refused");
                            let silent = !runtime.handler.plaintext_http();
                            limits::refuse(stream, silent, why, &runtime.metrics.bounds);
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let conn = Conn {
                        remote,
                        accepted_at,
                        runtime,
                        shared: Arc::clone(&l.shared),
                        key: l.key,
                        local_port: l.local_port,
                        ticket: drain.ticket(),
                        _slot: slot,
                    };
                    hand_over(&l.shared, stream, conn);
                }
                Err(e) => {
                    let bounds = &l.runtime.load().metrics.bounds;
                    if let Some(pause) = backoff.failed(l.key, &e, bounds) {
                        tokio::select! {
                            _ = l.stop.changed() => break,
                            _ = tokio::time::sleep(pause) => {}
                        }
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
    accepted_at: Instant,
    runtime: Arc<Runtime>,
    shared: Arc<Shared>,
    key: ListenerKey,
    local_port: u16,
    ticket: Ticket,
    /// Counted against the connection limits until the connection ends.
    _slot: Slot,
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

/// The response of the per-request service: served by `server::handle`, or refused
/// here (an HTTP/2 head over the field limit).
pub(crate) type Served<F> = Tracked<Either<Ready<Result<Response<ProxyBody>, Infallible>>, F>>;

async fn serve_connection(mut stream: TcpStream, mut c: Conn) {
    let rt = Arc::clone(&c.runtime);
    rt.metrics.downstream_connections.inc();
    let _guard = GaugeGuard(rt.metrics.downstream_connections.clone());
    if let Some(pp) = &rt.listener.settings.proxy_protocol {
        match read_proxy_header(&mut stream, &mut c, pp).await {
            Some(client) => c.remote = client,
            None => return,
        }
    }
    let l4 = |metrics| L4Conn {
        shared: &c.shared,
        key: c.key,
        remote: c.remote,
        accepted_at: c.accepted_at,
        handshake: rt.listener.settings.timeouts.handshake,
        metrics,
        bounds: &rt.metrics.bounds,
    };
    match &rt.handler {
        ConnectionHandler::Http(servers) => {
            serve_http(crate::batch::Batched::new(stream), c, servers, None).await
        }
        ConnectionHandler::Https(acceptor, servers, l4h) => {
            let mixed = c
                .shared
                .snapshots
                .load()
                .listener(&c.key)
                .is_some_and(|l| l.has_l4_routes());
            if !mixed {
                let stream = crate::batch::Batched::new(stream);
                return serve_http(stream, c, servers, Some(acceptor)).await;
            }
            let mut stream = stream;
            let lc = l4(&l4h.metrics);
            let Some(Hello::Read(prefix, sni)) = c
                .ticket
                .until_closed(l4::read_hello(&mut stream, &lc))
                .await
            else {
                return;
            };
            match l4::route_for(&lc, sni.as_deref()) {
                Some(route) => {
                    l4::serve_route(stream, prefix, route, &lc, &l4h.terminate, &mut c.ticket).await
                }
                None => {
                    let stream = Rewind::new(prefix, stream);
                    serve_http(stream, c, servers, Some(acceptor)).await
                }
            }
        }
        ConnectionHandler::Tls(l4h) => {
            l4::serve_tls(stream, l4(&l4h.metrics), &l4h.terminate, &mut c.ticket).await
        }
        ConnectionHandler::Tcp(metrics) => l4::serve_tcp(stream, l4(metrics), &mut c.ticket).await,
        // A UDP listener's runtime only ever serves `l4::udp::serve`.
        ConnectionHandler::Udp(_) => {}
    }
}

/// Reads the PROXY protocol header of a connection to a listener that expects one
/// (before TLS, HTTP or a ClientHello; bounded by the handshake timeout from accept and
/// by the header's size): the client it names — from then on the connection's remote
/// address for `ipRules`, rate-limit keys, `X-Forwarded-For` and logs — or the peer for a
/// header that names none (`LOCAL`, `UNKNOWN`). `None`: close the connection (a peer
/// outside the listener's sources, no valid header in time).
async fn read_proxy_header(
    stream: &mut TcpStream,
    c: &mut Conn,
    pp: &weir_model::ProxyProtocol,
) -> Option<SocketAddr> {
    if !pp.accepts_from(c.remote.ip()) {
        tracing::debug!(listener = %c.key, remote = %c.remote, "PROXY protocol peer not among the listener's sources: closing");
        return None;
    }
    let handshake = c.runtime.listener.settings.timeouts.handshake;
    let deadline = (!handshake.is_zero()).then(|| (c.accepted_at + handshake).into());
    let read = crate::proxy_protocol::read(stream, deadline);
    let runtime = Arc::clone(&c.runtime);
    match c.ticket.until_closed(read).await? {
        Ok(client) => Some(client.unwrap_or(c.remote)),
        Err(e) => {
            if matches!(e, crate::proxy_protocol::ReadError::TimedOut) {
                runtime.metrics.bounds.timeout_handshake.inc();
            }
            tracing::debug!(listener = %c.key, remote = %c.remote, error = %e, "no PROXY protocol header: closing");
            None
        }
    }
}

/// Serves HTTP on a connection: plaintext, or TLS terminated with `tls`.
async fn serve_http<S>(stream: S, c: Conn, servers: &HttpServers, tls: Option<&TlsAcceptor>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut ticket = c.ticket;
    let rt = c.runtime;
    let settings = &rt.listener.settings;
    let timeouts = &settings.timeouts;
    let bounds = &*rt.metrics.bounds;
    let shared = c.shared;
    let context = |sni: Option<Box<str>>| {
        Arc::new(ConnContext {
            shared,
            key: c.key,
            local_port: c.local_port,
            remote: c.remote,
            client_ip: HeaderValue::try_from(c.remote.ip().to_string())
                .unwrap_or_else(|_| HeaderValue::from_static("unknown")),
            tls: tls.is_some(),
            sni,
            metrics: rt.metrics.clone(),
            listener_label: Arc::clone(&rt.listener.name),
            timeouts: timeouts.clone(),
        })
    };
    let max_headers = settings.limits.max_headers;
    // hyper's connections (HTTP/2, and HTTP/1.1 handed over) get the request's future
    // boxed: hyper's HTTP/2 server moves each stream's future several times on its way
    // into a task of its own, and a pointer is cheaper to move than the whole future.
    let service = |state: Arc<ConnState>, ctx: Arc<ConnContext>| {
        hyper::service::service_fn(move |req: Request<Incoming>| {
            Box::pin(serve_request(
                &state,
                &ctx,
                max_headers,
                req.map(ClientBody::from),
            ))
        })
    };
    let result = match tls {
        None if lean_http1() => {
            let state = ConnState::new(false);
            let io = FirstBytes::new(stream, Speaks::Http1OrH2);
            let io = Watch::new(io, Arc::clone(&state), true);
            let ctx = context(None);
            let svc = service(Arc::clone(&state), Arc::clone(&ctx));
            let h2 = (Arc::clone(&state), Arc::clone(&ctx));
            let handler = lean_handler(&state, ctx, &settings.limits, true);
            let auto = &servers.auto;
            let limits = &settings.limits;
            let conn = h1::server::Conn::new(io, handler, move |io| -> Fallback<'_> {
                // h2c with prior knowledge: weir's own HTTP/2 server, as over TLS.
                if h2_server::own_http2() && io.replays(h1::server::H2_PREFACE) {
                    return Box::pin(h2_server::serve(io, h2.0, h2.1, limits));
                }
                Box::pin(auto.serve_connection_with_upgrades(TokioIo::new(io), svc))
            });
            let conn = ticket.serve(conn);
            Watched::new(conn, state, timeouts, bounds, c.accepted_at).await
        }
        None => {
            let state = ConnState::new(false);
            let io = FirstBytes::new(stream, Speaks::Http1OrH2);
            let io = TokioIo::new(Watch::new(io, Arc::clone(&state), true));
            let conn = servers
                .auto
                .serve_connection_with_upgrades(io, service(Arc::clone(&state), context(None)));
            let conn = ticket.serve(conn);
            Watched::new(conn, state, timeouts, bounds, c.accepted_at).await
        }
        Some(acceptor) => {
            // The handshake (ClientHello included) gets the `handshake` timeout.
            let Some(tls) = tls::accept(
                acceptor,
                stream,
                c.accepted_at,
                timeouts.handshake,
                &mut ticket,
                bounds,
                (c.key, c.remote),
            )
            .await
            else {
                return;
            };
            // ALPN decides: `h2` is served as HTTP/2 only (`serve_connection` honours
            // `http2_only`), anything else as HTTP/1.1 only (`serve_connection_with_upgrades`
            // ignores `http1_only`, so the first bytes are checked instead).
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            let ctx = context(
                tls.get_ref()
                    .1
                    .server_name()
                    .map(|n| router::normalize_host(n).into_owned().into_boxed_str()),
            );
            let state = ConnState::new(h2);
            if h2 && h2_server::own_http2() {
                let io = Watch::new(tls, Arc::clone(&state), false);
                let conn = h2_server::serve(io, Arc::clone(&state), ctx, &settings.limits);
                let conn = ticket.serve(conn);
                Watched::new(conn, state, timeouts, bounds, Instant::now()).await
            } else if h2 {
                let io = TokioIo::new(Watch::new(tls, Arc::clone(&state), false));
                let conn = servers
                    .h2
                    .serve_connection(io, service(Arc::clone(&state), ctx));
                let conn = ticket.serve(conn);
                Watched::new(conn, state, timeouts, bounds, Instant::now()).await
            } else if lean_http1() {
                let io = FirstBytes::new(tls, Speaks::Http1);
                let io = Watch::new(io, Arc::clone(&state), false);
                let svc = service(Arc::clone(&state), Arc::clone(&ctx));
                let handler = lean_handler(&state, ctx, &settings.limits, false);
                let h1 = &servers.h1;
                let conn = h1::server::Conn::new(io, handler, move |io| -> Fallback<'_> {
                    Box::pin(h1.serve_connection_with_upgrades(TokioIo::new(io), svc))
                });
                let conn = ticket.serve(conn);
                Watched::new(conn, state, timeouts, bounds, Instant::now()).await
            } else {
                let io = FirstBytes::new(tls, Speaks::Http1);
                let io = TokioIo::new(Watch::new(io, Arc::clone(&state), false));
                let conn = servers
                    .h1
                    .serve_connection_with_upgrades(io, service(Arc::clone(&state), ctx));
                let conn = ticket.serve(conn);
                Watched::new(conn, state, timeouts, bounds, Instant::now()).await
            }
        }
    };
    match result {
        Some(Some(Err(e))) => {
            tracing::debug!(listener = %c.key, remote = %c.remote, error = %e, "connection error");
        }
        None => tracing::debug!(listener = %c.key, remote = %c.remote, "connection timed out"),
        _ => {}
    }
}

/// Whether HTTP/1.1 connections are served by weir's own server ([`h1::server`]), the
/// default; `WEIR_HTTP1_SERVER=hyper` serves them with hyper's, as before (a way to
/// compare the two, and a way back should a client meet a difference).
fn lean_http1() -> bool {
    static LEAN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LEAN.get_or_init(|| std::env::var("WEIR_HTTP1_SERVER").map_or(true, |v| v != "hyper"))
}

/// What weir's own HTTP/1.1 server serves a connection's requests with.
fn lean_handler(
    state: &Arc<ConnState>,
    ctx: Arc<ConnContext>,
    limits: &weir_model::ConnectionLimits,
    h2_preface: bool,
) -> h1::server::Handler {
    h1::server::Handler {
        state: Arc::clone(state),
        ctx,
        max_headers: limits.max_headers,
        max_head: limits::h1_max_buf(limits),
        h2_preface,
    }
}

/// Serves one request of a connection (hyper's service, or weir's own HTTP/1.1 server).
pub(crate) fn serve_request(
    state: &Arc<ConnState>,
    ctx: &Arc<ConnContext>,
    max_headers: u32,
    req: Request<ClientBody>,
) -> Served<impl Future<Output = Result<Response<ProxyBody>, Infallible>> + Send + use<>> {
    let fut = if limits::too_many_headers(&req, max_headers) {
        Either::Left(ready(Ok(too_many_headers(
            ctx,
            ResponseShape::of(req.headers()),
        ))))
    } else {
        Either::Right(server::handle(Arc::clone(ctx), req))
    };
    Tracked::new(state, fut)
}

/// The answer to an HTTP/2 request with more header fields than the listener allows
/// (counted like every response).
#[cold]
fn too_many_headers(ctx: &ConnContext, shape: ResponseShape) -> Response<ProxyBody> {
    let (resp, _) = error_response(&ProxyError::TooManyHeaders, shape);
    ctx.metrics.record(resp.status().as_u16(), 0.0);
    resp
}
