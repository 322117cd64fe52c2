//! TLS: certificates parsed once per content (the keys of those used lately kept), and the
//! SNI resolver over live snapshots.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use weir_model::{Certificate, ListenerKey};

use crate::drain::Ticket;
use crate::metrics::BoundsMetrics;
use crate::snapshot::Snapshot;

/// Why a certificate could not be turned into a signing key.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CertError {
    /// The chain holds no `CERTIFICATE` block.
    #[error("no certificate in the chain")]
    NoCertificate,
    /// A PEM block of the chain could not be decoded.
    #[error("invalid certificate PEM: {0}")]
    ChainPem(rustls_pki_types::pem::Error),
    /// The key PEM holds no usable private key.
    #[error("invalid private key PEM: {0}")]
    KeyPem(rustls_pki_types::pem::Error),
    /// The key's algorithm is not supported, or the key does not belong to the leaf.
    #[error("unusable private key: {0}")]
    Key(rustls::Error),
}

/// A certificate as held by snapshots: the IR value, and why it is unusable if a handshake
/// found it so. The entry is shared (by `Arc`) by every SNI entry naming the same content
/// hash and by every snapshot version. Its signing key, parsed at the first handshake that
/// needs it, is kept in [`PARSED_KEYS`] (bounded: about a kilobyte per key, which at a
/// million domains all served once held 1.1 GB more for good); a bad certificate is
/// reported once and not parsed again.
#[derive(Debug)]
pub(crate) struct CertEntry {
    cert: Arc<Certificate>,
    /// The error boxed: it is 64 bytes and rare, and an entry is held per certificate
    /// (a million at a million TLS domains).
    failed: OnceLock<Box<CertError>>,
    /// The leaf's names and validity for the status page, read at its first request
    /// (never on the change path, never from the key). Boxed: most certificates are
    /// never shown, and inline it made every entry 152 bytes instead of 96.
    info: OnceLock<Box<Result<crate::status::CertInfo, String>>>,
}

impl CertEntry {
    /// Wraps an IR certificate; nothing is parsed yet.
    pub(crate) fn new(cert: Arc<Certificate>) -> Self {
        CertEntry {
            cert,
            failed: OnceLock::new(),
            info: OnceLock::new(),
        }
    }

    /// The certificate's content hash.
    pub(crate) fn hash(&self) -> weir_model::ContentHash {
        self.cert.hash()
    }
}

/// The snapshot's certificates table stores the entries alone, found by their hash; an
/// entry dropped late frees memory only, so writes patch shared shards.
impl crate::sharded::Keyed for Arc<CertEntry> {
    type Key = weir_model::ContentHash;
    fn key(&self) -> &weir_model::ContentHash {
        self.cert.hash_ref()
    }
    const PATCHED: bool = true;
}

impl CertEntry {
    /// The leaf's names and validity, read from the chain once.
    pub(crate) fn info(&self) -> &Result<crate::status::CertInfo, String> {
        self.info
            .get_or_init(|| Box::new(crate::status::cert_info::read(&self.cert)))
    }

    /// The signing key, parsed unless [`PARSED_KEYS`] holds it; `None` if the certificate
    /// is unusable (the error is logged once, with the certificate's hash).
    pub(crate) fn certified_key(&self) -> Option<Arc<CertifiedKey>> {
        self.certified_key_in(&PARSED_KEYS)
    }

    fn certified_key_in(&self, keys: &KeyCache) -> Option<Arc<CertifiedKey>> {
        if self.failed.get().is_some() {
            return None;
        }
        let hash = self.cert.hash();
        if let Some(key) = keys.get(hash) {
            return Some(key);
        }
        match parse(&self.cert) {
            Ok(key) => Some(keys.insert(hash, key)),
            Err(e) => {
                let message = e.to_string();
                if self.failed.set(Box::new(e)).is_ok() {
                    tracing::warn!(cert = %hash, error = %message, "certificate unusable; handshakes for its names fail");
                }
                None
            }
        }
    }

    /// Why the certificate is unusable, if a parse found it so.
    #[cfg(test)]
    pub(crate) fn parse_error(&self) -> Option<String> {
        self.failed.get().map(|e| e.to_string())
    }
}

/// Signing keys at most in [`PARSED_KEYS`]: about 64 MiB of parsed keys. A handshake for
/// a certificate whose key was dropped parses it again (about 17 µs for P-256 here).
const PARSED_KEYS_MAX: usize = 65_536;
const KEY_SHARDS: usize = 64;

/// The parsed signing keys of the certificates handshakes used lately, by content hash
/// (one per content, whichever entries and snapshots share it), for the whole process.
pub(crate) static PARSED_KEYS: std::sync::LazyLock<KeyCache> =
    std::sync::LazyLock::new(|| KeyCache::new(KEY_SHARDS, PARSED_KEYS_MAX / KEY_SHARDS));

/// A bounded map of parsed keys: shards under a lock each (held for a lookup or an
/// insert, never while parsing), each dropping a key handshakes have not used since it
/// was last passed over when full (the clock algorithm's second chance).
pub(crate) struct KeyCache {
    shards: Box<[std::sync::Mutex<KeyShard>]>,
    per_shard: usize,
}

#[derive(Default)]
struct KeyShard {
    /// The key, and whether it was used since the clock last passed it.
    keys: std::collections::HashMap<weir_model::ContentHash, (Arc<CertifiedKey>, bool)>,
    /// The clock: every key of `keys` once, oldest pass first.
    order: std::collections::VecDeque<weir_model::ContentHash>,
}

impl KeyCache {
    fn new(shards: usize, per_shard: usize) -> KeyCache {
        KeyCache {
            shards: (0..shards.max(1)).map(|_| Default::default()).collect(),
            per_shard: per_shard.max(1),
        }
    }

    fn shard(&self, hash: weir_model::ContentHash) -> std::sync::MutexGuard<'_, KeyShard> {
        let shard = &self.shards[(hash.0 % self.shards.len() as u64) as usize];
        shard
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn get(&self, hash: weir_model::ContentHash) -> Option<Arc<CertifiedKey>> {
        let mut shard = self.shard(hash);
        let (key, used) = shard.keys.get_mut(&hash)?;
        *used = true;
        Some(key.clone())
    }

    /// Keeps `key` as the parsed key of `hash`, dropping one not used lately if the shard
    /// is full; returns the key kept (another thread's, if it parsed the same first).
    fn insert(&self, hash: weir_model::ContentHash, key: Arc<CertifiedKey>) -> Arc<CertifiedKey> {
        let mut shard = self.shard(hash);
        if let Some((kept, _)) = shard.keys.get(&hash) {
            return kept.clone();
        }
        // At most two passes: the first clears every flag it meets.
        while shard.keys.len() >= self.per_shard {
            let Some(old) = shard.order.pop_front() else {
                break;
            };
            match shard.keys.get_mut(&old) {
                Some((_, used)) if *used => {
                    *used = false;
                    shard.order.push_back(old);
                }
                _ => {
                    shard.keys.remove(&old);
                }
            }
        }
        shard.keys.insert(hash, (key.clone(), false));
        shard.order.push_back(hash);
        key
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .keys
                    .len()
            })
            .sum()
    }
}

/// The certificates of a chain, leaf first: the DER of a packed certificate as it is,
/// PEM text decoded.
pub(crate) fn chain_der(
    cert: &Certificate,
) -> Result<Vec<CertificateDer<'static>>, rustls_pki_types::pem::Error> {
    match cert.as_packed() {
        Some(p) => Ok(p
            .chain_der()
            .map(|d| CertificateDer::from(d.to_vec()))
            .collect()),
        None => CertificateDer::pem_slice_iter(&cert.chain_pem()).collect(),
    }
}

/// The private key: the DER of a packed certificate as it is, PEM text decoded (by
/// rustls' constant-time reader).
pub(crate) fn key_der(
    cert: &Certificate,
) -> Result<PrivateKeyDer<'static>, rustls_pki_types::pem::Error> {
    use rustls_pki_types::{PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};
    use weir_model::KeyKind;
    match cert.as_packed().map(weir_model::PackedTls::key_der) {
        Some((KeyKind::Pkcs8, der)) => Ok(PrivatePkcs8KeyDer::from(der.to_vec()).into()),
        Some((KeyKind::Sec1, der)) => Ok(PrivateSec1KeyDer::from(der.to_vec()).into()),
        Some((KeyKind::Pkcs1, der)) => Ok(PrivatePkcs1KeyDer::from(der.to_vec()).into()),
        None => PrivateKeyDer::from_pem_slice(&cert.key_pem()),
    }
}

/// Chain + key → rustls signing key (aws-lc-rs), checking the key matches the leaf.
pub(crate) fn parse(cert: &Certificate) -> Result<Arc<CertifiedKey>, CertError> {
    let chain = chain_der(cert).map_err(CertError::ChainPem)?;
    if chain.is_empty() {
        return Err(CertError::NoCertificate);
    }
    let key = key_der(cert).map_err(CertError::KeyPem)?;
    let key = rustls::crypto::aws_lc_rs::sign::any_supported_type(&key).map_err(CertError::Key)?;
    let certified = CertifiedKey::new(chain, key);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(e) => return Err(CertError::Key(e)),
    }
    Ok(Arc::new(certified))
}

/// rustls certificate resolver for one TLS listener: reads the live snapshot on every
/// ClientHello (lock-free) and calls [`ListenerState::certificate`](crate::snapshot::ListenerState::certificate).
pub(crate) struct SniResolver {
    snapshots: Arc<ArcSwap<Snapshot>>,
    listener: ListenerKey,
}

impl SniResolver {
    /// A resolver for `listener` over the published snapshots.
    pub(crate) fn new(snapshots: Arc<ArcSwap<Snapshot>>, listener: ListenerKey) -> Self {
        SniResolver {
            snapshots,
            listener,
        }
    }
}

impl std::fmt::Debug for SniResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SniResolver")
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let snapshot = self.snapshots.load();
        let key = snapshot
            .listener(&self.listener)?
            .certificate(client_hello.server_name());
        if key.is_none() {
            tracing::debug!(listener = %self.listener, sni = ?client_hello.server_name(), "no certificate for server name");
        }
        key
    }
}

/// What a terminated TLS connection carries, which decides the ALPN offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carries {
    /// HTTP: ALPN `h2` and `http/1.1`.
    Http,
    /// Bytes spliced to an L4 backend (a TLSRoute on a `Terminate` listener): no ALPN,
    /// since weir does not know the protocol inside, and agreeing to one of the client's
    /// would be a promise the backend may not keep.
    Opaque,
}

/// Builds the ServerConfig for a TLS listener: aws-lc-rs provider, TLS 1.2 and 1.3, ALPN
/// h2 + http/1.1 when it `carries` HTTP (none otherwise), certificates chosen by
/// [`SniResolver`].
///
/// Cipher suites: the server's order wins, and AES-128-GCM comes first (then AES-256-GCM,
/// then ChaCha20-Poly1305). Clients such as OpenSSL list AES-256-GCM-SHA384 first, whose
/// SHA-384 key schedule took a fifth of a full handshake's CPU here; AES-128-GCM's
/// SHA-256 runs on the CPU's SHA extensions (BENCHMARKS.md).
///
/// `client`: the listener's client certificate validation, with the counter of rejected
/// certificates (`None`: clients are not asked for one).
pub(crate) fn server_config(
    snapshots: Arc<ArcSwap<Snapshot>>,
    listener: ListenerKey,
    carries: Carries,
    client: Option<(
        &weir_model::ClientValidation,
        prometheus_client::metrics::counter::Counter,
    )>,
) -> Arc<rustls::ServerConfig> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    // A stable sort keeps the default order within each group.
    provider.cipher_suites.sort_by_key(|s| {
        !matches!(
            s.suite(),
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
                | rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                | rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
        )
    });
    let provider = Arc::new(provider);
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("the aws-lc-rs default provider supports the default TLS versions");
    let builder = match client {
        Some((v, rejected)) => builder.with_client_cert_verifier(crate::client_cert::verifier(
            v, provider, listener, rejected,
        )),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(SniResolver::new(snapshots, listener)));
    if carries == Carries::Http {
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    }
    config.ignore_client_order = true;
    Arc::new(config)
}

/// One connection's TLS handshake, the ClientHello included, within the listener's
/// `handshake` timeout counted from accept (zero: none). `None` when it failed, timed out
/// (counted in `bounds`) or the listener closed meanwhile; each is logged at debug.
pub(crate) async fn accept<S>(
    acceptor: &TlsAcceptor,
    stream: S,
    accepted_at: Instant,
    limit: Duration,
    ticket: &mut Ticket,
    bounds: &BoundsMetrics,
    (key, remote): (ListenerKey, SocketAddr),
) -> Option<TlsStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let handshake = async {
        if limit.is_zero() {
            Ok(acceptor.accept(stream).await)
        } else {
            tokio::time::timeout_at((accepted_at + limit).into(), acceptor.accept(stream)).await
        }
    };
    match ticket.until_closed(handshake).await {
        None => None,
        Some(Ok(Ok(tls))) => Some(tls),
        Some(Ok(Err(e))) => {
            tracing::debug!(listener = %key, %remote, error = %e, "TLS handshake failed");
            None
        }
        Some(Err(_)) => {
            bounds.timeout_handshake.inc();
            tracing::debug!(listener = %key, %remote, "TLS handshake timed out");
            None
        }
    }
}

#[cfg(test)]
pub(crate) mod test_certs {
    //! Certificates generated for tests.

    use std::sync::Arc;

    use weir_model::Certificate;

    /// A self-signed certificate for `names`.
    pub(crate) fn self_signed(names: &[&str]) -> Arc<Certificate> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let c = rcgen::generate_simple_self_signed(names).expect("rcgen");
        Arc::new(Certificate::new(
            c.cert.pem().into_bytes().into(),
            c.signing_key.serialize_pem().into_bytes().into(),
        ))
    }

    /// A certificate whose key is garbage.
    pub(crate) fn broken() -> Arc<Certificate> {
        let good = self_signed(&["broken.test"]);
        Arc::new(Certificate::new(
            Arc::from(&*good.chain_pem()),
            b"not a key".to_vec().into(),
        ))
    }

    /// The leaf of `a` with the key of `b`.
    pub(crate) fn mismatched(a: &Certificate, b: &Certificate) -> Arc<Certificate> {
        Arc::new(Certificate::new(
            Arc::from(&*a.chain_pem()),
            Arc::from(&*b.key_pem()),
        ))
    }

    /// `c` packed (its chain and key as DER), as the translator holds a Secret's
    /// certificate.
    pub(crate) fn packed(c: &Certificate) -> Arc<Certificate> {
        Arc::new(
            Certificate::pack(&c.chain_pem(), &c.key_pem()).expect("rcgen writes canonical PEM"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::test_certs::*;
    use super::*;

    /// One entry per certificate is held by every snapshot: 40 bytes, so that its `Arc`
    /// is in the 64-byte class (it was 96 and 112, then 48 with the parsed key in it).
    #[test]
    fn an_entry_is_40_bytes() {
        assert_eq!(size_of::<CertEntry>(), 40);
    }

    #[test]
    fn parses_once_and_shares() {
        let entry = CertEntry::new(self_signed(&["a.test"]));
        let k1 = entry.certified_key().expect("valid certificate");
        let k2 = entry.certified_key().expect("valid certificate");
        assert!(Arc::ptr_eq(&k1, &k2));
        assert_eq!(k1.cert.len(), 1);
        assert!(entry.parse_error().is_none());
    }

    /// Parsed keys are bounded: a full shard drops a key not used since the clock last
    /// passed it (a key in use stays), and a dropped key is parsed again when asked.
    #[test]
    fn parsed_keys_are_bounded_and_the_used_ones_stay() {
        let keys = KeyCache::new(1, 3);
        let entries: Vec<CertEntry> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| CertEntry::new(self_signed(&[&format!("{n}.test")])))
            .collect();
        let a1 = entries[0].certified_key_in(&keys).expect("valid");
        entries[1].certified_key_in(&keys).expect("valid");
        entries[2].certified_key_in(&keys).expect("valid");
        assert_eq!(keys.len(), 3);
        // `a` used again: the next key drops `b` (not used since it was parsed) instead.
        assert!(Arc::ptr_eq(
            &entries[0].certified_key_in(&keys).unwrap(),
            &a1
        ));
        entries[3].certified_key_in(&keys).expect("valid");
        assert_eq!(keys.len(), 3);
        assert!(keys.get(entries[1].hash()).is_none(), "b dropped");
        assert!(
            keys.get(entries[0].hash())
                .is_some_and(|k| Arc::ptr_eq(&k, &a1))
        );
        // Full again with every flag set: one pass clears them, and a key still goes.
        for e in &entries[..4] {
            let _ = keys.get(e.hash());
        }
        entries[4].certified_key_in(&keys).expect("valid");
        assert_eq!(keys.len(), 3);
        // A dropped key is parsed again, the same certificate.
        let b = entries[1].certified_key_in(&keys).expect("parsed again");
        assert_eq!(b.cert, parse(&entries[1].cert).unwrap().cert);
        assert_eq!(keys.len(), 3);
    }

    #[test]
    fn a_packed_certificate_serves_what_its_text_does() {
        let text = self_signed(&["a.test"]);
        let packed = packed(&text);
        assert_eq!(packed.hash(), text.hash());
        let (a, b) = (
            CertEntry::new(text).certified_key().expect("valid"),
            CertEntry::new(packed.clone())
                .certified_key()
                .expect("valid"),
        );
        assert_eq!(a.cert, b.cert);
        assert_eq!(chain_der(&packed).unwrap(), a.cert);
        // A packed leaf with another certificate's key is refused as the text is.
        let other = self_signed(&["b.test"]);
        let wrong = packed_with_key(&packed, &other);
        assert!(CertEntry::new(wrong).certified_key().is_none());
    }

    fn packed_with_key(c: &Certificate, key_of: &Certificate) -> Arc<Certificate> {
        Arc::new(Certificate::pack(&c.chain_pem(), &key_of.key_pem()).unwrap())
    }

    #[test]
    fn bad_certificates_are_rejected_and_cached() {
        let entry = CertEntry::new(broken());
        assert!(entry.certified_key().is_none());
        assert!(
            entry
                .parse_error()
                .is_some_and(|e| e.contains("private key")),
            "{:?}",
            entry.parse_error()
        );

        let empty = CertEntry::new(Arc::new(Certificate::new(
            b"".to_vec().into(),
            Arc::from(self_signed(&["x.test"]).key_pem()),
        )));
        assert!(empty.certified_key().is_none());
        assert_eq!(
            empty.parse_error().as_deref(),
            Some("no certificate in the chain")
        );

        let a = self_signed(&["a.test"]);
        let b = self_signed(&["b.test"]);
        let wrong = CertEntry::new(mismatched(&a, &b));
        assert!(wrong.certified_key().is_none());
        assert!(wrong.parse_error().is_some());
    }

    type TestResult<T> = Result<T, Box<dyn std::error::Error>>;

    /// Feeds everything `from` has to send into `to`.
    fn transfer(
        from: &mut impl std::ops::DerefMut<Target = rustls::ConnectionCommon<impl Sized>>,
        to: &mut impl std::ops::DerefMut<Target = rustls::ConnectionCommon<impl Sized>>,
    ) -> TestResult<()> {
        let mut buf = Vec::new();
        while from.wants_write() {
            from.write_tls(&mut buf)?;
        }
        let mut rest = &buf[..];
        while !rest.is_empty() {
            to.read_tls(&mut rest)?;
            to.process_new_packets()?;
        }
        Ok(())
    }

    /// An in-memory handshake; returns the leaf the server presented and the ALPN.
    fn handshake(
        server: &Arc<rustls::ServerConfig>,
        trusted: &[&Certificate],
        name: &str,
    ) -> TestResult<(CertificateDer<'static>, Option<Vec<u8>>)> {
        handshake_with_suite(server, trusted, name).map(|(leaf, alpn, _)| (leaf, alpn))
    }

    /// As [`handshake`], with the negotiated cipher suite (the client offers rustls's
    /// default order, AES-256-GCM first, as OpenSSL does).
    fn handshake_with_suite(
        server: &Arc<rustls::ServerConfig>,
        trusted: &[&Certificate],
        name: &str,
    ) -> TestResult<(
        CertificateDer<'static>,
        Option<Vec<u8>>,
        rustls::CipherSuite,
    )> {
        let mut roots = rustls::RootCertStore::empty();
        for c in trusted {
            for der in CertificateDer::pem_slice_iter(&c.chain_pem()) {
                roots.add(der?)?;
            }
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut client_config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client_config.alpn_protocols = vec![b"h2".to_vec()];
        let server_name = rustls_pki_types::ServerName::try_from(name.to_string())?;
        let mut client = rustls::ClientConnection::new(Arc::new(client_config), server_name)?;
        let mut conn = rustls::ServerConnection::new(server.clone())?;
        for _ in 0..10 {
            transfer(&mut client, &mut conn)?;
            transfer(&mut conn, &mut client)?;
            if !client.is_handshaking() && !conn.is_handshaking() {
                let leaf = client
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .ok_or("no certificate")?;
                let suite = client
                    .negotiated_cipher_suite()
                    .ok_or("no cipher suite")?
                    .suite();
                return Ok((
                    leaf.clone().into_owned(),
                    client.alpn_protocol().map(<[u8]>::to_vec),
                    suite,
                ));
            }
        }
        Err("handshake did not finish".into())
    }

    fn leaf_of(c: &Certificate) -> CertificateDer<'static> {
        CertificateDer::pem_slice_iter(&c.chain_pem())
            .next()
            .unwrap()
            .unwrap()
    }

    #[test]
    fn handshakes_follow_the_live_snapshot() -> TestResult<()> {
        use weir_model::{Delta, DeltaBatch, HostMatch, Listener, Protocol, Resource, SniCert};

        let key = ListenerKey::new("127.0.0.1:443".parse()?);
        let a = self_signed(&["a.test"]);
        let wild = self_signed(&["*.wild.test"]);
        let bad = broken();
        let sni = |host: &str, cert: &Certificate| {
            let h = HostMatch::parse(Some(host)).unwrap();
            Delta::Upsert(Resource::Sni(Arc::new(SniCert::new(key, h, cert.hash()))))
        };
        let batch = DeltaBatch {
            deltas: vec![
                Delta::Upsert(Resource::Listener(Arc::new(Listener::new(
                    key,
                    Protocol::Https,
                    "gw".into(),
                    "l".into(),
                )))),
                Delta::Upsert(Resource::Certificate(a.clone())),
                Delta::Upsert(Resource::Certificate(wild.clone())),
                Delta::Upsert(Resource::Certificate(bad.clone())),
                sni("a.test", &a),
                sni("*.wild.test", &wild),
                sni("bad.test", &bad),
            ],
        };
        let (snapshot, rejected) = Snapshot::empty().apply(&batch);
        assert!(rejected.is_empty(), "{rejected:?}");
        let snapshots = Arc::new(ArcSwap::from_pointee(snapshot));
        let config = server_config(snapshots.clone(), key, Carries::Http, None);

        let (leaf, alpn, suite) = handshake_with_suite(&config, &[&a], "a.test")?;
        assert_eq!(leaf, leaf_of(&a));
        assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
        // The server's cipher order wins over a client that lists AES-256-GCM first.
        assert_eq!(suite, rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
        assert_eq!(
            handshake(&config, &[&wild], "x.wild.test")?.0,
            leaf_of(&wild)
        );
        assert!(handshake(&config, &[&bad], "bad.test").is_err());
        assert!(handshake(&config, &[&a], "unknown.test").is_err());
        // The bad certificate does not affect the others.
        assert_eq!(handshake(&config, &[&a], "a.test")?.0, leaf_of(&a));

        // A new name goes live with the next published snapshot, same ServerConfig.
        let b = self_signed(&["b.test"]);
        let next = snapshots.load().apply(&DeltaBatch {
            deltas: vec![
                Delta::Upsert(Resource::Certificate(b.clone())),
                sni("b.test", &b),
            ],
        });
        assert!(next.1.is_empty());
        assert!(handshake(&config, &[&b], "b.test").is_err());
        snapshots.store(Arc::new(next.0));
        assert_eq!(handshake(&config, &[&b], "b.test")?.0, leaf_of(&b));
        Ok(())
    }

    #[test]
    fn server_config_offers_h2_and_http1_only_for_http() {
        let snapshots = Arc::new(ArcSwap::from_pointee(Snapshot::empty()));
        let key = ListenerKey::new("127.0.0.1:443".parse().unwrap());
        let config = server_config(snapshots.clone(), key, Carries::Http, None);
        assert_eq!(
            config.alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        // Spliced bytes: no protocol is agreed on the backend's behalf.
        let config = server_config(snapshots, key, Carries::Opaque, None);
        assert!(config.alpn_protocols.is_empty());
    }
}
