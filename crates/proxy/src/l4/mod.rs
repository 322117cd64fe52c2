//! The L4 path: TLS (the ClientHello's SNI picks an [`L4Route`]; passed through, the TLS
//! session is the backend's; terminated, weir's certificate for the SNI serves it and the
//! backend gets plaintext) and TCP (the listener's one route), spliced byte for byte to
//! an endpoint of a weighted backend; and UDP (`udp`: datagrams relayed through
//! per-client sessions).
//!
//! Bounds: reading the ClientHello is limited to [`hello::MAX_HELLO`] bytes and to the
//! listener's `handshake` timeout from accept; connecting to the upstream to the data
//! plane's connect timeout; a spliced connection with no bytes in either direction for
//! [`IDLE_TIMEOUT`] is closed; on drain a spliced connection keeps going until the drain
//! timeout (raw bytes have no graceful close of their own).

pub(crate) mod hello;
pub(crate) mod udp;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use weir_model::{EndpointAddr, L4Backend, L4Mode, L4Route, ListenerKey};

use crate::dataplane::Shared;
use crate::drain::Ticket;
use crate::endpoints::{InFlight, Outcome};
use crate::metrics::BoundsMetrics;
use crate::router;
use crate::tls;

pub use hello::{ClientHello, InvalidClientHello, MAX_HELLO, parse_client_hello};

/// A spliced connection with no bytes in either direction for this long is closed
/// (Envoy's TCP proxy default). Longer than HTTP's idle timeout: L4 protocols (databases,
/// SSH, long polls in TLS) often sit silent for minutes.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

/// The L4 counters of one listener (labels gateway, listener), resolved when its accept
/// loop starts.
#[derive(Clone)]
pub(crate) struct L4Metrics {
    /// Connections spliced to an upstream.
    pub(crate) connections: Counter,
    /// Connections closed for want of a route (no SNI match, no TCP route, no backend or
    /// endpoint).
    pub(crate) unrouted: Counter,
    /// Bytes received from clients and sent upstream.
    pub(crate) received_bytes: Counter,
    /// Bytes received from upstreams and sent to clients.
    pub(crate) sent_bytes: Counter,
    /// Failed connection attempts to upstream endpoints.
    pub(crate) connect_errors: Counter,
}

/// One accepted connection on an L4-capable listener.
pub(crate) struct L4Conn<'a> {
    pub(crate) shared: &'a Arc<Shared>,
    pub(crate) key: ListenerKey,
    pub(crate) remote: SocketAddr,
    pub(crate) accepted_at: Instant,
    /// The listener's `handshake` timeout (zero: none), counted from accept.
    pub(crate) handshake: Duration,
    pub(crate) metrics: &'a L4Metrics,
    pub(crate) bounds: &'a BoundsMetrics,
}

/// Serves a TCP listener's connection: spliced to its route's backend.
pub(crate) async fn serve_tcp(stream: TcpStream, c: L4Conn<'_>, ticket: &mut Ticket) {
    let route = {
        let snap = c.shared.snapshots.load();
        snap.listener(&c.key)
            .and_then(|l| l.socket_route())
            .cloned()
    };
    splice(stream, Vec::new(), route, &c, ticket).await;
}

/// What [`read_hello`] found.
pub(crate) enum Hello {
    /// The bytes read (to be replayed) and the server name, if any.
    Read(Vec<u8>, Option<String>),
    /// Not a ClientHello weir can route, the client went away, or it was too slow:
    /// close the connection.
    Closed,
}

/// Reads a connection's first bytes until they hold a complete ClientHello, within the
/// handshake timeout and [`MAX_HELLO`] bytes.
pub(crate) async fn read_hello(stream: &mut TcpStream, c: &L4Conn<'_>) -> Hello {
    use tokio::io::AsyncReadExt;
    let mut buf: Vec<u8> = Vec::with_capacity(2048);
    let reading = async {
        loop {
            if buf.len() == buf.capacity() {
                buf.reserve(buf.capacity().min(MAX_HELLO - buf.len()).max(1));
            }
            let room = (MAX_HELLO - buf.len()).min(buf.capacity() - buf.len());
            let start = buf.len();
            buf.resize(start + room, 0);
            let n = match stream.read(&mut buf[start..]).await {
                Ok(n) => n,
                Err(e) => {
                    buf.truncate(start);
                    return Err(e.to_string());
                }
            };
            buf.truncate(start + n);
            if n == 0 {
                return Err("closed before a complete ClientHello".to_owned());
            }
            match parse_client_hello(&buf) {
                Ok(ClientHello::Incomplete) => continue,
                Ok(ClientHello::Complete(sni)) => return Ok(sni),
                Err(e) => return Err(e.to_string()),
            }
        }
    };
    let result = if c.handshake.is_zero() {
        Ok(reading.await)
    } else {
        tokio::time::timeout_at((c.accepted_at + c.handshake).into(), reading).await
    };
    match result {
        Ok(Ok(sni)) => Hello::Read(buf, sni),
        Ok(Err(why)) => {
            tracing::debug!(listener = %c.key, remote = %c.remote, %why, "no ClientHello to route");
            Hello::Closed
        }
        Err(_) => {
            c.bounds.timeout_handshake.inc();
            tracing::debug!(listener = %c.key, remote = %c.remote, "ClientHello timed out");
            Hello::Closed
        }
    }
}

/// Serves a TLS listener's connection: the ClientHello's SNI picks the route, which passes
/// the connection through or terminates TLS first (`terminate`).
pub(crate) async fn serve_tls(
    mut stream: TcpStream,
    c: L4Conn<'_>,
    terminate: &TlsAcceptor,
    ticket: &mut Ticket,
) {
    let read = ticket.until_closed(read_hello(&mut stream, &c)).await;
    let Some(Hello::Read(prefix, sni)) = read else {
        return;
    };
    match route_for(&c, sni.as_deref()) {
        Some(route) => serve_route(stream, prefix, route, &c, terminate, ticket).await,
        None => {
            c.metrics.unrouted.inc();
            tracing::debug!(listener = %c.key, remote = %c.remote, ?sni, "no L4 route: closing");
        }
    }
}

/// The L4 route of the connection's listener for a ClientHello with server name `sni`
/// (`None` also when a terminated HTTPS name on the socket is more specific).
pub(crate) fn route_for(c: &L4Conn<'_>, sni: Option<&str>) -> Option<Arc<L4Route>> {
    let snap = c.shared.snapshots.load();
    snap.listener(&c.key).and_then(|l| l.l4_route(sni)).cloned()
}

/// Serves a connection whose ClientHello (`prefix`, already read) chose `route`: the bytes
/// as they are ([`L4Mode::Passthrough`]), or, for [`L4Mode::Terminate`], the plaintext of
/// the TLS session `terminate` accepts (the certificate of the listener's SNI entries;
/// the handshake bounded like HTTPS's).
pub(crate) async fn serve_route(
    stream: TcpStream,
    prefix: Vec<u8>,
    route: Arc<L4Route>,
    c: &L4Conn<'_>,
    terminate: &TlsAcceptor,
    ticket: &mut Ticket,
) {
    match route.mode {
        L4Mode::Passthrough => splice(stream, prefix, Some(route), c, ticket).await,
        L4Mode::Terminate => {
            let Some(tls) = tls::accept(
                terminate,
                Rewind::new(prefix, stream),
                c.accepted_at,
                c.handshake,
                ticket,
                c.bounds,
                (c.key, c.remote),
            )
            .await
            else {
                return;
            };
            splice(tls, Vec::new(), Some(route), c, ticket).await
        }
    }
}

/// Connects to an endpoint of `route` and copies bytes both ways (first `prefix`, what
/// was read from the client already) until both sides have closed; each side's end of
/// input is passed on as a half-close (over terminated TLS: a `close_notify`). No route,
/// backend or endpoint: the client's connection is closed.
pub(crate) async fn splice<S>(
    client: S,
    prefix: Vec<u8>,
    route: Option<Arc<L4Route>>,
    c: &L4Conn<'_>,
    ticket: &mut Ticket,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Some((addr, in_flight)) = route
        .as_deref()
        .and_then(|r| endpoint(c.shared, r, c.remote.ip()))
    else {
        c.metrics.unrouted.inc();
        tracing::debug!(listener = %c.key, remote = %c.remote, "no L4 route or endpoint: closing");
        return;
    };
    let connecting = async {
        let stream = match &addr {
            EndpointAddr::Socket(s) => TcpStream::connect(*s).await?,
            EndpointAddr::Host(h, p) => TcpStream::connect((&**h, *p)).await?,
        };
        stream.set_nodelay(true)?;
        Ok::<_, io::Error>(stream)
    };
    // A connect's outcome feeds the endpoint's outlier detection, as an HTTP attempt's
    // does; the connection counts as in flight to the balancer while it lasts.
    let upstream = match tokio::time::timeout(c.shared.config.connect_timeout, connecting).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            in_flight.finish(Outcome::ConnectFailure);
            c.metrics.connect_errors.inc();
            tracing::debug!(listener = %c.key, upstream = ?addr, error = %e, "L4 connect failed");
            return;
        }
        Err(_) => {
            in_flight.finish(Outcome::ConnectFailure);
            c.metrics.connect_errors.inc();
            tracing::debug!(listener = %c.key, upstream = ?addr, "L4 connect timed out");
            return;
        }
    };
    in_flight.succeeded();
    c.metrics.connections.inc();
    let activity = AtomicBool::new(false);
    let mut client = Counted {
        io: client,
        metrics: c.metrics,
        activity: &activity,
    };
    let mut upstream = upstream;
    let relay = async {
        if !prefix.is_empty() {
            upstream.write_all(&prefix).await?;
            c.metrics.received_bytes.inc_by(prefix.len() as u64);
        }
        drop(prefix);
        let copy = tokio::io::copy_bidirectional(&mut client, &mut upstream);
        tokio::pin!(copy);
        loop {
            tokio::select! {
                r = &mut copy => return r.map(|_| ()),
                _ = tokio::time::sleep(IDLE_TIMEOUT) => {
                    if !activity.swap(false, Ordering::Relaxed) {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "idle"));
                    }
                }
            }
        }
    };
    match ticket.until_closed(relay).await {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            tracing::debug!(listener = %c.key, remote = %c.remote, error = %e, "L4 connection ended");
        }
        None => tracing::debug!(listener = %c.key, remote = %c.remote, "drain timeout: closed"),
    }
}

/// The endpoint for a new connection: a backend by weight, then the cluster's balancer
/// (which skips ejected endpoints and prefers those with fewer connections; a
/// consistent hash by source IP keeps a client on one endpoint).
fn endpoint(
    shared: &Shared,
    route: &L4Route,
    client: std::net::IpAddr,
) -> Option<(EndpointAddr, InFlight)> {
    let backend = pick(&route.backends)?;
    let snap = shared.snapshots.load();
    let cluster = snap.cluster(&backend.cluster)?;
    // A circuit breaker's refusal closes the connection (counted by `admit`).
    let key = crate::affinity::l4_key(cluster, client);
    let picked = cluster.admit(std::time::Instant::now(), key).ok()?;
    Some((picked.endpoint.addr.clone(), picked.state.start()))
}

/// A backend chosen at random in proportion to the weights (0 = never).
fn pick(backends: &[L4Backend]) -> Option<&L4Backend> {
    router::pick_weighted(backends, |b| b.weight).map(|i| &backends[i])
}

/// The client side of a spliced connection: counts bytes each way and notes activity
/// for the idle timeout.
struct Counted<'a, S> {
    io: S,
    metrics: &'a L4Metrics,
    activity: &'a AtomicBool,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.metrics.received_bytes.inc_by(n as u64);
            self.activity.store(true, Ordering::Relaxed);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r
            && *n > 0
        {
            self.metrics.sent_bytes.inc_by(*n as u64);
            self.activity.store(true, Ordering::Relaxed);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A connection whose first bytes were already read (the ClientHello of a mixed
/// listener that is terminated after all): they are read again first.
pub(crate) struct Rewind<S> {
    prefix: Vec<u8>,
    at: usize,
    io: S,
}

impl<S> Rewind<S> {
    pub(crate) fn new(prefix: Vec<u8>, io: S) -> Rewind<S> {
        Rewind { prefix, at: 0, io }
    }

    /// Whether the bytes still to be replayed begin with `bytes`.
    pub(crate) fn replays(&self, bytes: &[u8]) -> bool {
        self.prefix[self.at..].starts_with(bytes)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = buf.remaining().min(self.prefix.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            if self.at == self.prefix.len() {
                self.prefix = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn b(cluster: &str, weight: u32) -> L4Backend {
        L4Backend {
            cluster: weir_model::ClusterKey(cluster.into()),
            weight,
        }
    }

    #[test]
    fn picks_by_weight() {
        assert!(pick(&[]).is_none());
        assert!(pick(&[b("a", 0)]).is_none());
        assert_eq!(
            pick(&[b("a", 0), b("b", 2)]).unwrap().cluster.0.as_ref(),
            "b"
        );
        let backends = [b("a", 1), b("b", 3)];
        let n = 4000;
        let a = (0..n)
            .filter(|_| &*pick(&backends).unwrap().cluster.0 == "a")
            .count();
        // Expected 1000; a generous band that a fair pick leaves with overwhelming odds.
        assert!((700..1300).contains(&a), "{a}");
    }

    #[tokio::test]
    async fn rewind_replays_its_prefix_first() {
        let (mut w, r) = tokio::io::duplex(64);
        w.write_all(b" world").await.unwrap();
        drop(w);
        let mut io = Rewind::new(b"hello".to_vec(), r);
        let mut out = String::new();
        io.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
