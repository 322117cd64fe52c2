//! UDP listeners (UDPRoute): datagrams relayed through per-client sessions.
//!
//! A listener's socket is read by one loop. The datagrams of one client address form a
//! **session**, pinned when it starts to one endpoint of the listener's route (a backend
//! by weight, then the cluster's balancer): the session owns a connected UDP socket
//! toward that endpoint, and its own task reads the endpoint's replies and sends them to
//! the client from the listener's socket (so the client sees replies from the address
//! it wrote to). A route change applies to sessions that start after it; a running
//! session keeps its endpoint until it ends.
//!
//! Bounds:
//! - No queue anywhere: a datagram is sent at once with a non-blocking `try_send`, or
//!   dropped and counted when the socket buffer is full (UDP's own contract: loss is
//!   the sender's problem). A session task handles at most [`BURST`] replies per wakeup.
//! - Sessions count against the listener's connection limits (`max_connections`,
//!   `max_connections_per_client`, the same [`Admission`] as TCP connections): a session
//!   costs one socket, a spliced TCP connection two. A datagram that would start a
//!   session past a limit is dropped and counted
//!   (`weir_l4_udp_sessions_refused_total`), so a flood of spoofed source addresses
//!   holds at most `max_connections` sockets, each for one idle timeout.
//! - A session ends after [`ProxyConfig::udp_session_idle_timeout`] without a datagram
//!   either way (default 60 s, as Envoy's UDP proxy: long enough for DNS retries,
//!   request/response game or VPN keep-alives every few tens of seconds, short enough
//!   that a spoofed flood's sessions go within a minute), when its endpoint refuses
//!   (ICMP port unreachable: the next datagram starts a session on a live endpoint), and
//!   all at once when the listener goes away.
//! - Reply buffers are one 64 KiB buffer per worker thread, not per session (a session
//!   holds a socket and a few words).
//!
//! Sockets are std sockets in tokio's `AsyncFd`: a send is one non-blocking syscall,
//! always attempted (tokio's `UdpSocket::try_send` refuses to try until the reactor has
//! seen the socket writable, which a session's new socket has not when its first
//! datagram goes out); only reads wait for readiness.
//!
//! [`ProxyConfig::udp_session_idle_timeout`]: crate::ProxyConfig::udp_session_idle_timeout

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::net::UdpSocket;

use tokio::io::unix::AsyncFd;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use weir_model::{EndpointAddr, ListenerKey};

use crate::dataplane::Shared;
use crate::endpoints::InFlight;
use crate::limits::{Admission, Refusal, Slot};
use crate::listeners::{ConnectionHandler, Runtime};

/// The largest UDP payload (IPv4: 65,535 − 8 − 20).
const MAX_DATAGRAM: usize = 65_507;
/// Replies a session relays per wakeup before yielding to the worker's other tasks.
const BURST: usize = 64;

/// The UDP counters of one listener (labels gateway, listener), resolved when its loop
/// starts or its listener changes.
#[derive(Clone)]
pub(crate) struct UdpMetrics {
    /// Sessions started.
    pub(crate) sessions: Counter,
    /// Sessions open now.
    pub(crate) open: Gauge,
    /// Datagrams dropped because a session limit was reached.
    pub(crate) refused: Counter,
    /// Datagrams received from clients.
    pub(crate) received: Counter,
    /// Datagrams sent to clients.
    pub(crate) sent: Counter,
    /// Datagrams dropped for want of a route, backend or endpoint.
    pub(crate) unrouted: Counter,
    /// Datagrams dropped because a socket could not take them (buffer full, error).
    pub(crate) dropped: Counter,
    /// Bytes from clients (shared with TCP's `weir_l4_received_bytes_total`).
    pub(crate) received_bytes: Counter,
    /// Bytes to clients (shared with TCP's `weir_l4_sent_bytes_total`).
    pub(crate) sent_bytes: Counter,
}

/// What a UDP listener's loop reads on every datagram: the listener's current runtime.
pub(crate) struct UdpLoop {
    pub(crate) shared: Arc<Shared>,
    pub(crate) key: ListenerKey,
    pub(crate) runtime: Arc<ArcSwap<Runtime>>,
    pub(crate) stop: watch::Receiver<bool>,
}

/// One client's session.
struct Session {
    upstream: AsyncFd<UdpSocket>,
    /// Milliseconds after `born` of the last datagram either way.
    last_active: AtomicU64,
    born: Instant,
    metrics: UdpMetrics,
    _slot: Slot,
    /// The endpoint counts the session as in flight (the balancer prefers endpoints with
    /// fewer) while it lasts.
    _in_flight: InFlight,
}

impl Session {
    fn touch(&self) {
        let ms = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_active.store(ms, Ordering::Relaxed);
    }

    fn idle_deadline(&self, idle: Duration) -> Instant {
        self.born + Duration::from_millis(self.last_active.load(Ordering::Relaxed)) + idle
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.metrics.open.dec();
    }
}

type Sessions = Arc<Mutex<HashMap<SocketAddr, (Arc<Session>, AbortHandle)>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

thread_local! {
    /// The reply buffer of this worker's sessions (never held across an await).
    static REPLY_BUF: RefCell<Vec<u8>> = RefCell::new(vec![0; MAX_DATAGRAM]);
}

/// Reads the listener's socket until the listener stops; then ends every session.
pub(crate) async fn serve(socket: AsyncFd<UdpSocket>, mut l: UdpLoop) {
    let socket = Arc::new(socket);
    let sessions: Sessions = Arc::default();
    let admission = Admission::default();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let (n, client) = tokio::select! {
            biased;
            _ = l.stop.changed() => break,
            r = recv_from(&socket, &mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    // ICMP errors for earlier sends surface here on some systems; the
                    // socket itself stays usable.
                    tracing::debug!(listener = %l.key, error = %e, "UDP receive failed");
                    continue;
                }
            },
        };
        let rt = l.runtime.load();
        let ConnectionHandler::Udp(m) = &rt.handler else {
            // The listener became a TCP one: `ListenerHandle::update` rebinds instead.
            continue;
        };
        m.received.inc();
        m.received_bytes.inc_by(n as u64);
        let datagram = &buf[..n];
        let existing = lock(&sessions).get(&client).map(|(s, _)| Arc::clone(s));
        if let Some(s) = existing {
            s.touch();
            match s.upstream.get_ref().send(datagram) {
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    m.dropped.inc();
                    continue;
                }
                // The endpoint refused an earlier datagram (ICMP port unreachable): this
                // one starts a session on an endpoint chosen afresh.
                Err(e) => {
                    tracing::debug!(listener = %l.key, %client, error = %e, "UDP session ended");
                    end(&sessions, client, &s);
                }
            }
        }
        let slot = match admission.admit(client.ip(), &rt.listener.settings.limits) {
            Ok(slot) => slot,
            Err(why) => {
                m.refused.inc();
                let bounds = &rt.metrics.bounds;
                match why {
                    Refusal::Listener => bounds.refused_listener.inc(),
                    Refusal::Client => bounds.refused_client.inc(),
                };
                continue;
            }
        };
        let Some((addr, in_flight)) = endpoint(&l.shared, l.key, client.ip()) else {
            m.unrouted.inc();
            tracing::debug!(listener = %l.key, %client, "no UDP route or endpoint: dropped");
            continue;
        };
        let upstream = match connect(addr) {
            Ok(u) => u,
            Err(e) => {
                m.dropped.inc();
                tracing::debug!(listener = %l.key, upstream = %addr, error = %e, "cannot open a UDP session socket");
                continue;
            }
        };
        m.sessions.inc();
        m.open.inc();
        let session = Arc::new(Session {
            upstream,
            last_active: AtomicU64::new(0),
            born: Instant::now(),
            metrics: m.clone(),
            _slot: slot,
            _in_flight: in_flight,
        });
        if session.upstream.get_ref().send(datagram).is_err() {
            m.dropped.inc();
        }
        let idle = l.shared.config.udp_session_idle_timeout;
        let task = tokio::spawn(relay_replies(
            Arc::downgrade(&socket),
            client,
            Arc::clone(&session),
            Arc::clone(&sessions),
            idle,
        ));
        lock(&sessions).insert(client, (session, task.abort_handle()));
    }
    let all: Vec<_> = lock(&sessions).drain().collect();
    for (_, (_, task)) in all {
        task.abort();
    }
    tracing::info!(listener = %l.key, "UDP listener stopped");
}

/// Removes `client`'s session if it is still `s`, and stops its reply task.
fn end(sessions: &Sessions, client: SocketAddr, s: &Arc<Session>) {
    let mut map = lock(sessions);
    if map.get(&client).is_some_and(|(x, _)| Arc::ptr_eq(x, s))
        && let Some((_, task)) = map.remove(&client)
    {
        task.abort();
    }
}

/// The endpoint for a new session: the listener's route, a backend by weight, then the
/// cluster's balancer. Only IP endpoints: a session is set up inside the receive loop,
/// which must not wait for a name lookup.
fn endpoint(
    shared: &Shared,
    key: ListenerKey,
    client: std::net::IpAddr,
) -> Option<(SocketAddr, InFlight)> {
    let snap = shared.snapshots.load();
    let route = snap.listener(&key)?.socket_route()?;
    let backend = super::pick(&route.backends)?;
    let cluster = snap.cluster(&backend.cluster)?;
    let picked = cluster
        .admit(Instant::now(), crate::affinity::l4_key(cluster, client))
        .ok()?;
    match &picked.endpoint.addr {
        EndpointAddr::Socket(s) => Some((*s, picked.state.start())),
        EndpointAddr::Host(..) => None,
    }
}

/// Waits for a datagram on the listener's socket.
async fn recv_from(socket: &AsyncFd<UdpSocket>, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
    loop {
        let mut guard = socket.readable().await?;
        match guard.try_io(|s| s.get_ref().recv_from(buf)) {
            Ok(r) => return r,
            Err(_would_block) => continue,
        }
    }
}

/// A socket of its own for a session, connected to `addr` (a UDP connect only records
/// the peer: it never waits, and replies from anyone else are filtered by the kernel).
fn connect(addr: SocketAddr) -> io::Result<AsyncFd<UdpSocket>> {
    let local: SocketAddr = if addr.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = std::net::UdpSocket::bind(local)?;
    s.connect(addr)?;
    s.set_nonblocking(true)?;
    register(s)
}

/// Registers a UDP socket with the current runtime's reactor. tokio 1.54 deprecates
/// `AsyncFd::new` because it takes any raw fd, which its owner could close (and the
/// number be reused) while it is registered; here the `AsyncFd` owns the
/// `std::net::UdpSocket` itself, so its fd stays open and the same for as long as it is
/// registered. (`AsyncFd::register`, the replacement, is `unsafe` for that same promise,
/// and the crate forbids `unsafe`.)
#[allow(deprecated)]
pub(crate) fn register(socket: UdpSocket) -> io::Result<AsyncFd<UdpSocket>> {
    AsyncFd::new(socket)
}

/// Relays the endpoint's replies to the client until the session is idle for `idle`,
/// the endpoint refuses, or the task is aborted (listener gone, session replaced). The
/// listener's socket is held only while replies are relayed, so it closes as soon as
/// the listener's loop ends (its address can be bound again at once).
async fn relay_replies(
    listener: Weak<AsyncFd<UdpSocket>>,
    client: SocketAddr,
    s: Arc<Session>,
    sessions: Sessions,
    idle: Duration,
) {
    let m = &s.metrics;
    'session: loop {
        let deadline = s.idle_deadline(idle);
        tokio::select! {
            r = s.upstream.readable() => {
                let Ok(mut guard) = r else {
                    break 'session;
                };
                let Some(listener) = listener.upgrade() else {
                    break 'session;
                };
                for _ in 0..BURST {
                    let done = REPLY_BUF.with_borrow_mut(|buf| {
                        match s.upstream.get_ref().recv(buf) {
                            Ok(n) => {
                                s.touch();
                                match listener.get_ref().send_to(&buf[..n], client) {
                                    Ok(_) => {
                                        m.sent.inc();
                                        m.sent_bytes.inc_by(n as u64);
                                    }
                                    Err(_) => {
                                        m.dropped.inc();
                                    }
                                }
                                Ok(false)
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                guard.clear_ready();
                                Ok(true)
                            }
                            Err(e) => Err(e),
                        }
                    });
                    match done {
                        Ok(false) => continue,
                        Ok(true) => continue 'session,
                        Err(e) => {
                            // ECONNREFUSED: nothing listens at the endpoint (any more).
                            tracing::debug!(%client, error = %e, "UDP session ended by its endpoint");
                            break 'session;
                        }
                    }
                }
                // A full burst: let the worker's other connections run first.
                drop(guard);
                drop(listener);
                tokio::task::yield_now().await;
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                if Instant::now() >= s.idle_deadline(idle) {
                    break 'session;
                }
            }
        }
    }
    let mut map = lock(&sessions);
    if map.get(&client).is_some_and(|(x, _)| Arc::ptr_eq(x, &s)) {
        map.remove(&client);
    }
}
