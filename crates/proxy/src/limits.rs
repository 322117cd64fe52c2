//! Connection and request-head limits: how many connections a listener holds, in all and
//! per client address, what a refused client gets, how large a request head may be, and
//! how the accept loop reacts to running out of file descriptors.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Request;
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use weir_model::{ConnectionLimits, ListenerKey};

use crate::metrics::BoundsMetrics;

/// hyper's HTTP/1.1 parser keeps up to this many header fields on the stack; a larger
/// limit makes it allocate them for every request (hyper: "about 5 %" slower).
const HYPER_STACK_HEADERS: usize = 100;
/// The smallest read buffer hyper accepts.
const HYPER_MIN_BUF: usize = 8192;

/// Applies the request-head limits to a server builder.
///
/// HTTP/1.1: the read buffer is limited to `max_header_bytes` (at least hyper's minimum,
/// 8 KiB). hyper answers 431 and closes the connection when a head does not fit in it,
/// or has more than `max_headers` fields; the buffer goes with the connection, and a
/// slow head can never hold more than the limit. (hyper's own `max_header_size` would
/// leave the buffer at its ~400 KiB default, but hyper-util's auto builder does not
/// expose it; a smaller buffer only means body reads of at most that size.)
///
/// HTTP/2 (hyper's server with `WEIR_HTTP2_SERVER=hyper`; weir's own takes the same limit
/// in `h2_server::config`): `max_header_bytes` is advertised as SETTINGS_MAX_HEADER_LIST_SIZE
/// and a larger header block is answered 431 (and the stream reset if the client was still
/// sending); the field count is checked per request ([`too_many_headers`]).
pub(crate) fn configure(b: &mut auto::Builder<TokioExecutor>, limits: &ConnectionLimits) {
    let mut h1 = b.http1();
    h1.max_buf_size(h1_max_buf(limits));
    let fields = limits.max_headers as usize;
    if fields != HYPER_STACK_HEADERS {
        h1.max_headers(fields);
    }
    b.http2().max_header_list_size(limits.max_header_bytes);
}

/// The most bytes an HTTP/1.1 request head may take (hyper's read buffer limit, and
/// weir's own server's).
pub(crate) fn h1_max_buf(limits: &ConnectionLimits) -> usize {
    (limits.max_header_bytes as usize).max(HYPER_MIN_BUF)
}

/// Whether a request has more header fields than `max` (HTTP/2; HTTP/1.1 heads over the
/// limit never reach the service).
pub(crate) fn too_many_headers<B>(req: &Request<B>, max: u32) -> bool {
    req.headers().len() > max as usize
}

// ---------------------------------------------------------------- admission

/// The open connections of one listening socket, in all and by client. Lives as long as
/// the accept loop (connections outlive configuration changes); the limits are read from
/// the listener's current settings at each accept.
#[derive(Clone, Default)]
pub(crate) struct Admission {
    inner: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    open: AtomicU32,
    /// Only clients with open connections have an entry.
    by_client: Mutex<HashMap<Client, u32, foldhash::fast::FixedState>>,
}

/// Whom a per-client limit counts: an IPv4 address, or an IPv6 /64 (one host controls
/// its whole /64; counting single addresses would not limit it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Client {
    V4(Ipv4Addr),
    V6(u64),
}

impl Client {
    fn of(ip: IpAddr) -> Client {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Client::V4(v4),
            IpAddr::V6(v6) => Client::V6((v6.to_bits() >> 64) as u64),
        }
    }
}

/// Why a connection was refused (the metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The listener holds `max_connections`.
    Listener,
    /// The client holds `max_connections_per_client`.
    Client,
}

/// A connection's place in its listener's counts; given back when dropped.
pub(crate) struct Slot {
    counts: Arc<Counts>,
    /// `None` when the per-client limit was off at accept.
    client: Option<Client>,
}

impl Admission {
    /// Counts a new connection from `ip` unless a limit (0: none) is reached.
    pub(crate) fn admit(&self, ip: IpAddr, limits: &ConnectionLimits) -> Result<Slot, Refusal> {
        let counts = &self.inner;
        let open = counts.open.fetch_add(1, Ordering::Relaxed);
        // A slot exists from here on, so every early return gives the count back.
        let mut slot = Slot {
            counts: Arc::clone(counts),
            client: None,
        };
        if limits.max_connections != 0 && open >= limits.max_connections {
            return Err(Refusal::Listener);
        }
        if limits.max_connections_per_client != 0 {
            let client = Client::of(ip);
            let mut by_client = lock(&counts.by_client);
            let n = by_client.entry(client).or_insert(0);
            if *n >= limits.max_connections_per_client {
                return Err(Refusal::Client);
            }
            *n += 1;
            slot.client = Some(client);
        }
        Ok(slot)
    }

    /// Open connections counted now.
    #[cfg(test)]
    fn open(&self) -> u32 {
        self.inner.open.load(Ordering::Relaxed)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.counts.open.fetch_sub(1, Ordering::Relaxed);
        if let Some(client) = self.client {
            let mut by_client = lock(&self.counts.by_client);
            if let Some(n) = by_client.get_mut(&client) {
                *n -= 1;
                if *n == 0 {
                    by_client.remove(&client);
                }
            }
        }
    }
}

/// What a refused plaintext client reads before the close: a minimal response it can
/// show, rather than a bare reset (an h2c client reads it as a protocol error, which is
/// still a clean failure).
const OVERLOADED: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// Closes a refused connection, counting it; plaintext clients get [`OVERLOADED`].
/// Never waits: the write is one non-blocking attempt (a fresh socket's send buffer is
/// empty), so a flood of refusals costs the accept loop no more than the accepts.
pub(crate) fn refuse(stream: TcpStream, tls: bool, why: Refusal, metrics: &BoundsMetrics) {
    let counter = match why {
        Refusal::Listener => &metrics.refused_listener,
        Refusal::Client => &metrics.refused_client,
    };
    counter.inc();
    if !tls {
        // Through the std socket: tokio's `try_write` does not even try until its reactor
        // has reported the new socket writable, which it has not yet.
        if let Ok(mut std) = stream.into_std() {
            let _ = std::io::Write::write(&mut std, OVERLOADED);
        }
    }
}

// ---------------------------------------------------------------- accept errors

/// First pause after a failed accept; doubled per failure up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// The accept loop's state across failed accepts.
///
/// Out of file descriptors (EMFILE, ENFILE) or memory, `accept` fails at once for as
/// long as the condition lasts, and the pending connection stays queued, so retrying at
/// once spins. The loop pauses instead, exponentially longer up to a second, and logs
/// one warning when an episode starts and one line with the count when it ends (rather
/// than a warning per failure).
#[derive(Debug, Default)]
pub(crate) struct AcceptBackoff {
    /// Set during an episode: its start, failures so far, the current pause.
    episode: Option<(Instant, u64, Duration)>,
}

impl AcceptBackoff {
    /// Records a failed accept; returns how long to pause before the next one.
    pub(crate) fn failed(
        &mut self,
        key: ListenerKey,
        e: &std::io::Error,
        metrics: &BoundsMetrics,
    ) -> Option<Duration> {
        metrics.accept_errors.inc();
        if is_per_connection(e) {
            // The failed connection is gone; the next one may be fine.
            tracing::debug!(listener = %key, error = %e, "accept failed");
            return None;
        }
        let pause = match &mut self.episode {
            Some((_, failures, pause)) => {
                *failures += 1;
                *pause = (*pause * 2).min(MAX_PAUSE);
                *pause
            }
            None => {
                tracing::warn!(
                    listener = %key,
                    error = %e,
                    "accept failing; pausing accepts (up to 1 s) until it succeeds"
                );
                self.episode = Some((Instant::now(), 1, FIRST_PAUSE));
                FIRST_PAUSE
            }
        };
        Some(pause)
    }

    /// Records a successful accept, ending an episode of failures if there was one.
    pub(crate) fn succeeded(&mut self, key: ListenerKey) {
        if let Some((start, failures, _)) = self.episode.take() {
            tracing::warn!(
                listener = %key,
                failures,
                seconds = start.elapsed().as_secs_f64(),
                "accepting again"
            );
        }
    }
}

/// Errors that concern only the connection being accepted (Linux reports some network
/// errors of a pending connection from `accept`); the listener itself is fine.
fn is_per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted
            | ConnectionReset
            | Interrupted
            | WouldBlock
            | PermissionDenied
            | HostUnreachable
            | NetworkUnreachable
            | NetworkDown
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: u32, per_client: u32) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: total,
            max_connections_per_client: per_client,
            ..ConnectionLimits::default()
        }
    }

    #[test]
    fn per_client_and_total_limits() {
        let a = Admission::default();
        let one: IpAddr = "10.0.0.1".parse().unwrap();
        let two: IpAddr = "10.0.0.2".parse().unwrap();
        let l = limits(3, 2);
        let s1 = a.admit(one, &l).unwrap();
        let _s2 = a.admit(one, &l).unwrap();
        assert_eq!(a.admit(one, &l).err(), Some(Refusal::Client));
        let _s3 = a.admit(two, &l).unwrap();
        assert_eq!(a.admit(two, &l).err(), Some(Refusal::Listener));
        assert_eq!(a.open(), 3, "refusals give their count back");
        drop(s1);
        let _s4 = a.admit(one, &l).unwrap();
        // 0: no limit
        let _s5 = a.admit(one, &limits(0, 0)).unwrap();
        assert_eq!(a.open(), 4);
    }

    #[test]
    fn ipv6_clients_are_counted_by_64() {
        let a = Admission::default();
        let l = limits(0, 1);
        let _s = a.admit("2001:db8::1".parse().unwrap(), &l).unwrap();
        assert_eq!(
            a.admit("2001:db8::2".parse().unwrap(), &l).err(),
            Some(Refusal::Client)
        );
        assert!(a.admit("2001:db8:0:1::1".parse().unwrap(), &l).is_ok());
        // IPv4-mapped addresses count as their IPv4 address.
        let _v4 = a.admit("192.0.2.1".parse().unwrap(), &l).unwrap();
        assert_eq!(
            a.admit("::ffff:192.0.2.1".parse().unwrap(), &l).err(),
            Some(Refusal::Client)
        );
    }

    #[test]
    fn backoff_doubles_to_a_second_and_resets() {
        let m = crate::metrics::Metrics::register(&mut Default::default()).listener("g", "l");
        let key = ListenerKey::new("127.0.0.1:1".parse().unwrap());
        let emfile = std::io::Error::from_raw_os_error(24);
        let mut b = AcceptBackoff::default();
        let pauses: Vec<_> = (0..12)
            .map(|_| b.failed(key, &emfile, &m.bounds).unwrap())
            .collect();
        assert_eq!(pauses[0], FIRST_PAUSE);
        assert_eq!(pauses[1], FIRST_PAUSE * 2);
        assert_eq!(*pauses.last().unwrap(), MAX_PAUSE);
        b.succeeded(key);
        assert_eq!(b.failed(key, &emfile, &m.bounds), Some(FIRST_PAUSE));
        let aborted = std::io::Error::from(std::io::ErrorKind::ConnectionAborted);
        assert_eq!(b.failed(key, &aborted, &m.bounds), None);
        assert_eq!(m.bounds.accept_errors.get(), 14);
    }
}
