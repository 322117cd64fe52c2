use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::hash::{ContentHash, content_hash, eq_by_content_hash};
use crate::host::HostMatch;

/// The address a data-plane listener binds. Gateway listeners that share an address and
/// port (e.g. several HTTPS hostnames on :443) share one key and one socket.
///
/// Interned: the key is 4 bytes naming the address's slot in the process's table of
/// listener addresses ([`crate::listener_addrs`]), where a `SocketAddr` is 32. Every
/// (listener, host) pair (a virtual host, an SNI entry, and the translator's tables of
/// them, several per TLS domain) holds one. It hashes, orders, prints and serializes as
/// its address, so content hashes and the order of resources are the address's.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ListenerKey(u32);

impl ListenerKey {
    /// The key of `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        ListenerKey(crate::listener_addrs::intern(addr))
    }

    /// The address.
    pub fn addr(self) -> SocketAddr {
        crate::listener_addrs::get(self.0)
    }
}

impl From<SocketAddr> for ListenerKey {
    fn from(addr: SocketAddr) -> Self {
        ListenerKey::new(addr)
    }
}

impl std::hash::Hash for ListenerKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.addr().hash(state);
    }
}

impl Ord for ListenerKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if self.0 == other.0 {
            return std::cmp::Ordering::Equal;
        }
        self.addr().cmp(&other.addr())
    }
}

impl PartialOrd for ListenerKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for ListenerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ListenerKey").field(&self.addr()).finish()
    }
}

impl Serialize for ListenerKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.addr().serialize(s)
    }
}

impl std::fmt::Display for ListenerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.addr().fmt(f)
    }
}

/// What a listener speaks on its socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Protocol {
    /// Plaintext HTTP/1.1, and HTTP/2 with prior knowledge (h2c).
    Http,
    /// TLS, certificate chosen by SNI; HTTP/2 or HTTP/1.1 by ALPN. When the socket also
    /// has [`crate::L4Route`]s (HTTPS and TLS listeners on one port), a ClientHello whose
    /// SNI one of them matches is served by that route instead (passed through, or
    /// terminated and spliced).
    Https,
    /// TLS passed through: the ClientHello's SNI picks an [`crate::L4Route`], whose
    /// backend gets the connection's bytes unchanged.
    TlsPassthrough,
    /// TLS with routes that terminate it (Gateway API `TLS` listeners in `Terminate`
    /// mode, possibly beside `Passthrough` ones): the ClientHello's SNI picks an
    /// [`crate::L4Route`]; one in [`crate::L4Mode::Terminate`] is served the certificate
    /// of the socket's SNI entries and gets the decrypted bytes, one in
    /// [`crate::L4Mode::Passthrough`] the bytes unchanged. Never carries HTTP.
    TlsTerminate,
    /// TCP: the socket's [`crate::L4Route`] (host [`crate::HostMatch::ANY`]) gets the
    /// connection's bytes.
    Tcp,
    /// UDP: the socket's [`crate::L4Route`] (host [`crate::HostMatch::ANY`]) gets the
    /// datagrams; a client address's datagrams form a session pinned to one endpoint.
    /// A UDP socket is keyed like the others, so a UDP listener and a TCP-based one on
    /// the same address and port conflict (Gateway API leaves that combination to the
    /// implementation).
    Udp,
}

/// A socket to bind and the labels its traffic is reported under.
#[derive(Clone, Debug, Serialize)]
pub struct Listener {
    /// Where to bind.
    pub key: ListenerKey,
    /// Plaintext or TLS.
    pub protocol: Protocol,
    /// Metrics/log label: the owning Gateway (`namespace/name`) or `ingress`.
    pub gateway: Arc<str>,
    /// Metrics/log label: the Gateway listener name(s) sharing this socket.
    pub name: Arc<str>,
    /// Limits, timeouts and request normalization for this socket's clients.
    #[serde(skip_serializing_if = "ListenerSettings::is_default")]
    pub settings: ListenerSettings,
    /// The Gateway listeners on this socket by hostname, present only while a policy
    /// targets a listener or ListenerSet of its Gateway (push protocol version 6): the
    /// data plane picks the section serving a request's host (exact, longest wildcard,
    /// catch-all, as Gateway API matches listeners) and looks its policies up.
    #[serde(skip_serializing_if = "<[ListenerSection]>::is_empty")]
    pub sections: Arc<[ListenerSection]>,
    hash: ContentHash,
}

/// One Gateway listener on a socket, as listener-targeted policies name it
/// ([`crate::PolicyTarget::Listener`], [`crate::PolicyTarget::ListenerSet`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ListenerSection {
    /// The listener's hostname ([`HostMatch::ANY`] without one).
    pub hostname: HostMatch,
    /// The ListenerSet (`namespace/name`) the listener comes from; `None`: the Gateway's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<Arc<str>>,
    /// The listener's name.
    pub name: Arc<str>,
}
eq_by_content_hash!(Listener);

impl Listener {
    /// Builds a listener and computes its content hash.
    /// The listener has the default [`ListenerSettings`].
    pub fn new(key: ListenerKey, protocol: Protocol, gateway: Arc<str>, name: Arc<str>) -> Self {
        Self::with_settings(key, protocol, gateway, name, ListenerSettings::default())
    }

    /// Builds a listener with its settings and computes its content hash.
    pub fn with_settings(
        key: ListenerKey,
        protocol: Protocol,
        gateway: Arc<str>,
        name: Arc<str>,
        settings: ListenerSettings,
    ) -> Self {
        // Default settings leave the hash as it was before listeners had settings, so a
        // data plane built before them still accepts (re-hashes equal) what a newer
        // controller sends whenever the settings are the defaults.
        let hash = if settings.is_default() {
            content_hash(&(&key, &protocol, &gateway, &name))
        } else {
            content_hash(&(&key, &protocol, &gateway, &name, &settings))
        };
        Listener {
            key,
            protocol,
            gateway,
            name,
            settings,
            sections: Arc::from([]),
            hash,
        }
    }

    /// This listener with its sections (see [`Listener::sections`]). The sections are
    /// folded into the hash only when there are some, so a listener without them keeps
    /// the hash of push protocol version 5.
    pub fn with_sections(mut self, sections: Arc<[ListenerSection]>) -> Self {
        let base = Listener::with_settings(
            self.key,
            self.protocol,
            self.gateway.clone(),
            self.name.clone(),
            self.settings.clone(),
        );
        self.hash = if sections.is_empty() {
            base.hash
        } else {
            content_hash(&(base.hash.0, 6u8, &*sections))
        };
        self.sections = sections;
        self
    }

    /// The content hash computed at construction.
    pub fn hash(&self) -> ContentHash {
        self.hash
    }
}

/// What a listener allows its clients: how long each connection state may last, how
/// many connections and how large a request head, and how request paths are normalized
/// before routing. Every field has a production default (SECURITY.md compares them with
/// nginx's, Envoy's and HAProxy's); a Gateway overrides them with `weir.dev/…`
/// annotations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ListenerSettings {
    /// Connection-state timeouts.
    pub timeouts: ConnectionTimeouts,
    /// Connection and request-head limits.
    pub limits: ConnectionLimits,
    /// Path normalization before routing (the normalized path is what is forwarded).
    pub paths: PathNormalization,
    /// Peers whose `X-Forwarded-For` is believed: for a request from one of them, the
    /// client is the rightmost address of that header not in these networks (what
    /// `ipRules` and client-IP rate limits see). Empty: the peer is the client.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trusted_proxies: Vec<crate::IpNet>,
    /// Connections start with a PROXY protocol header (version 1 or 2) naming the client,
    /// whose address then stands for the peer's (push protocol version 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<ProxyProtocol>,
    /// Client certificates asked for and checked in the TLS handshake (an HTTPS socket
    /// only; push protocol version 4). `None`: clients are not asked for one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_validation: Option<ClientValidation>,
}

/// By hand, as the derive of the release before `proxy_protocol` hashed it (field by
/// field, in order), plus `proxy_protocol` only when set: a listener without it keeps the
/// hash data planes of earlier releases compute.
impl std::hash::Hash for ListenerSettings {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.timeouts.hash(h);
        self.limits.hash(h);
        self.paths.hash(h);
        self.trusted_proxies.hash(h);
        if let Some(p) = &self.proxy_protocol {
            p.hash(h);
        }
        // Folded in only when set, as `proxy_protocol`: version 4's field.
        if let Some(v) = &self.client_validation {
            v.hash(h);
        }
    }
}

/// Client certificate validation on an HTTPS socket (Gateway API `spec.tls.frontend`):
/// the handshake asks the client for a certificate and verifies it against these CAs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ClientValidation {
    /// PEM `CERTIFICATE` blocks a client certificate must chain to (every valid
    /// reference's, in order). The translator has checked that it holds at least one
    /// well-formed block.
    #[serde(skip)]
    pub ca_pem: Arc<[u8]>,
    /// What happens to a client without a valid certificate.
    pub mode: ClientValidationMode,
}

/// What a client without a valid certificate gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub enum ClientValidationMode {
    /// The handshake fails: no certificate, or one that does not chain to the CAs.
    #[default]
    AllowValidOnly,
    /// The connection is served anyway (the certificate is still asked for and checked,
    /// and a failure is counted): authorization is left to the backend.
    AllowInsecureFallback,
}

/// A listener behind a load balancer that speaks the PROXY protocol: each connection's
/// first bytes are a version 1 or 2 header naming the client, read before TLS or HTTP
/// (within the handshake timeout); a connection without a valid one is closed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct ProxyProtocol {
    /// Peers whose headers are accepted; a connection from another peer is closed.
    /// Empty: any peer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<crate::IpNet>,
}

impl ProxyProtocol {
    /// Whether a connection from `peer` may carry a header.
    pub fn accepts_from(&self, peer: std::net::IpAddr) -> bool {
        self.sources.is_empty() || self.sources.iter().any(|n| n.contains(peer))
    }
}

impl ListenerSettings {
    /// The client of a request from `peer` carrying `forwarded_for` (the values of its
    /// `X-Forwarded-For` headers, in order): the peer itself unless it is a trusted
    /// proxy; then, walking the list from the right, the first address that is not a
    /// trusted proxy (the leftmost when all are; the peer when an entry is not an
    /// address, since what lies left of it cannot be trusted either). `forwarded_for`
    /// is called only for a trusted peer: the header's lookup (a hashed custom name) is
    /// not made on every request of a listener without trusted proxies.
    pub fn client_ip<'a, I>(
        &self,
        peer: std::net::IpAddr,
        forwarded_for: impl FnOnce() -> I,
    ) -> std::net::IpAddr
    where
        I: DoubleEndedIterator<Item = &'a str>,
    {
        let trusted = |ip: std::net::IpAddr| self.trusted_proxies.iter().any(|n| n.contains(ip));
        if self.trusted_proxies.is_empty() || !trusted(peer) {
            return peer;
        }
        let mut client = peer;
        for value in forwarded_for().rev() {
            for entry in value.rsplit(',') {
                let Ok(ip) = entry.trim().parse::<std::net::IpAddr>() else {
                    return client;
                };
                client = ip;
                if !trusted(ip) {
                    return ip;
                }
            }
        }
        client
    }

    /// Whether every field has its default (golden outputs leave such settings out).
    pub fn is_default(&self) -> bool {
        *self == ListenerSettings::default()
    }
}

/// How long each state of a client connection may last. A connection that overstays is
/// closed (or, for a request, answered: 408 for a stalled body, 504 for an upstream that
/// does not answer). A zero duration disables that timeout (as `0s` does for Gateway API
/// route timeouts).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ConnectionTimeouts {
    /// From accept until the first byte, and until the TLS handshake is complete; after a
    /// TLS handshake, again until the first byte of the first request. Also how long an
    /// HTTP/2 client gets to close after an idle GOAWAY.
    pub handshake: Duration,
    /// From the first byte of a request head until its end (HTTP/1.1).
    pub request_header: Duration,
    /// A connection with no request in flight: HTTP/1.1 keep-alive between requests, an
    /// HTTP/2 connection without open streams.
    pub idle: Duration,
    /// A request body (or an HTTP/2 stream) that receives no data for this long.
    pub body_idle: Duration,
    /// The upstream's response head, when the route sets no timeout of its own.
    pub upstream_response: Duration,
}

impl Default for ConnectionTimeouts {
    fn default() -> Self {
        ConnectionTimeouts {
            handshake: Duration::from_secs(10),
            request_header: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            body_idle: Duration::from_secs(60),
            upstream_response: Duration::from_secs(60),
        }
    }
}

/// How many client connections a listener takes and how large a request head may be.
/// A connection limit of 0 means no limit.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ConnectionLimits {
    /// Open client connections on this listener; past it new connections are refused
    /// (closed at once, counted).
    pub max_connections: u32,
    /// Open connections from one client IP address (an IPv6 client: its /64). Behind a
    /// load balancer that hides client addresses, every client shares the balancer's.
    pub max_connections_per_client: u32,
    /// Bytes of one request head (request line and headers): 431 beyond. For HTTP/2, the
    /// header list size of RFC 9113 (names, values and 32 bytes per field).
    pub max_header_bytes: u32,
    /// Header fields in one request head: 431 beyond.
    pub max_headers: u32,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 50_000,
            max_connections_per_client: 1_000,
            max_header_bytes: 64 * 1024,
            max_headers: 100,
        }
    }
}

/// Path normalization (RFC 3986 §6.2.2) before routing. Dot segments are always
/// removed and percent-encoded unreserved characters decoded (a prefix match on `/public`
/// must not admit `/public/../private` or `/public/%2e%2e/private`); merging slashes is a
/// choice.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct PathNormalization {
    /// `//a///b` is routed and forwarded as `/a/b`.
    pub merge_slashes: bool,
}

impl Default for PathNormalization {
    fn default() -> Self {
        PathNormalization {
            merge_slashes: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings without `proxy_protocol` hash as the derived `Hash` of the release before
    /// it did (so such listeners keep their hashes for older data planes); with it, they
    /// hash differently.
    #[test]
    fn proxy_protocol_is_hashed_only_when_set() {
        #[derive(Hash)]
        struct Before<'a> {
            timeouts: &'a ConnectionTimeouts,
            limits: &'a ConnectionLimits,
            paths: &'a PathNormalization,
            trusted_proxies: &'a Vec<crate::IpNet>,
        }
        let s = ListenerSettings {
            trusted_proxies: vec![crate::IpNet::parse("10.0.0.0/8").unwrap()],
            ..ListenerSettings::default()
        };
        let before = Before {
            timeouts: &s.timeouts,
            limits: &s.limits,
            paths: &s.paths,
            trusted_proxies: &s.trusted_proxies,
        };
        assert_eq!(crate::content_hash(&s), crate::content_hash(&before));
        let with = ListenerSettings {
            proxy_protocol: Some(ProxyProtocol::default()),
            ..s.clone()
        };
        assert_ne!(crate::content_hash(&with), crate::content_hash(&s));
        let validating = ListenerSettings {
            client_validation: Some(ClientValidation {
                ca_pem: Arc::from(&b"-----BEGIN CERTIFICATE-----"[..]),
                mode: ClientValidationMode::AllowValidOnly,
            }),
            ..s.clone()
        };
        assert_ne!(crate::content_hash(&validating), crate::content_hash(&s));
        let fallback = ListenerSettings {
            client_validation: Some(ClientValidation {
                mode: ClientValidationMode::AllowInsecureFallback,
                ..validating.client_validation.clone().unwrap()
            }),
            ..s.clone()
        };
        assert_ne!(
            crate::content_hash(&validating),
            crate::content_hash(&fallback)
        );
        let p = ProxyProtocol {
            sources: vec![crate::IpNet::parse("10.0.0.0/8").unwrap()],
        };
        assert!(p.accepts_from("10.1.2.3".parse().unwrap()));
        assert!(!p.accepts_from("192.0.2.1".parse().unwrap()));
        assert!(ProxyProtocol::default().accepts_from("192.0.2.1".parse().unwrap()));
    }

    #[test]
    fn the_client_is_found_through_trusted_proxies_only() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let s = ListenerSettings {
            trusted_proxies: vec![
                crate::IpNet::parse("10.0.0.0/8").unwrap(),
                crate::IpNet::parse("127.0.0.1").unwrap(),
            ],
            ..ListenerSettings::default()
        };
        let client = |peer: &str, xff: &[&str]| s.client_ip(ip(peer), || xff.iter().copied());
        // An untrusted peer is the client, whatever it claims.
        assert_eq!(client("192.0.2.1", &["203.0.113.9"]), ip("192.0.2.1"));
        // Through trusted hops, the rightmost untrusted address.
        assert_eq!(
            client("127.0.0.1", &["203.0.113.9, 10.1.1.1"]),
            ip("203.0.113.9")
        );
        assert_eq!(
            client("10.0.0.2", &["198.51.100.7, 203.0.113.9", "10.1.1.1"]),
            ip("203.0.113.9"),
            "a spoofed leftmost entry is not believed"
        );
        assert_eq!(
            client("127.0.0.1", &["10.1.1.1"]),
            ip("10.1.1.1"),
            "all trusted"
        );
        assert_eq!(client("127.0.0.1", &[]), ip("127.0.0.1"));
        assert_eq!(client("127.0.0.1", &["unknown, 10.1.1.1"]), ip("10.1.1.1"));
        // No trusted proxies: the header is never read.
        assert_eq!(
            ListenerSettings::default().client_ip(ip("127.0.0.1"), || ["203.0.113.9"].into_iter()),
            ip("127.0.0.1")
        );
    }

    #[test]
    fn a_listener_key_behaves_as_its_address() {
        // Interned in the opposite of address order: keys still sort by address.
        let addrs: Vec<SocketAddr> = ["[::1]:443", "10.0.0.2:80", "10.0.0.1:8080", "10.0.0.1:80"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let mut keys: Vec<ListenerKey> = addrs.iter().map(|a| ListenerKey::new(*a)).collect();
        keys.sort();
        let mut sorted = addrs.clone();
        sorted.sort();
        assert_eq!(keys.iter().map(|k| k.addr()).collect::<Vec<_>>(), sorted);
        for a in addrs {
            let k = ListenerKey::new(a);
            assert_eq!(k, ListenerKey::from(a));
            assert_eq!(content_hash(&k), content_hash(&a));
            assert_eq!(
                serde_json::to_string(&k).unwrap(),
                serde_json::to_string(&a).unwrap()
            );
            assert_eq!(k.to_string(), a.to_string());
            assert_eq!(format!("{k:?}"), format!("ListenerKey({a:?})"));
        }
        assert_eq!(std::mem::size_of::<ListenerKey>(), 4);
    }
}
