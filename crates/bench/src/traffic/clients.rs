//! The bench's own load clients, run as pinned child processes (hidden subcommands) that
//! print one JSON [`LoadResult`] on stdout:
//!
//! - `handshakes`: new TLS connections as fast as they complete, each a full handshake
//!   (no resumption, X25519 only) with SNI rotating over N domains, then one
//!   `GET /` with `connection: close`. The server's certificate must be the domain's own
//!   leaf (compared byte for byte); signatures are not checked, to keep the client cheap.
//! - `fixed-rate`: an open-loop HTTP/1.1 client sending R requests/s over kept
//!   connections. A request's latency counts from its scheduled time when the client was
//!   behind (no coordinated omission), else from when it was sent.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::manifests::domain;
use crate::traffic::loadgen::{Latency, LoadResult};

/// Bound on one connection's connect + handshake + request.
const OP_LIMIT: Duration = Duration::from_secs(5);

/// Settings of the `handshakes` client.
#[derive(Clone, Debug, clap::Args)]
pub(crate) struct HandshakeArgs {
    /// The proxy's TLS listener.
    #[arg(long)]
    pub(crate) connect: SocketAddr,
    /// The certificate cache holding `leaves/d<i>.pem`.
    #[arg(long)]
    pub(crate) cache: PathBuf,
    /// SNI rotates over d0..d<domains-1>.bench.test.
    #[arg(long, default_value_t = 1)]
    pub(crate) domains: usize,
    /// Connections in flight at once.
    #[arg(long, default_value_t = 16)]
    pub(crate) concurrency: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 3.0)]
    pub(crate) seconds: f64,
    /// Stop after this many connections (0: no limit); with --domains N, N visits every
    /// domain once.
    #[arg(long, default_value_t = 0)]
    pub(crate) max_connections: u64,
}

/// Settings of the `fixed-rate` client.
#[derive(Clone, Debug, clap::Args)]
pub(crate) struct RateArgs {
    /// The proxy's plaintext listener.
    #[arg(long)]
    pub(crate) connect: SocketAddr,
    /// Host header.
    #[arg(long, default_value = "d0.bench.test")]
    pub(crate) host: String,
    /// Request path.
    #[arg(long, default_value = "/")]
    pub(crate) path: String,
    /// Requests per second.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) rate: u64,
    /// Kept connections (at most this many requests in flight).
    #[arg(long, default_value_t = 64)]
    pub(crate) connections: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 3.0)]
    pub(crate) seconds: f64,
}

/// Accepts exactly the expected leaf of each name; skips signature checks.
#[derive(Debug)]
struct Pinned {
    leaves: HashMap<String, Vec<u8>>,
    schemes: Vec<SignatureScheme>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let name = match server_name {
            ServerName::DnsName(d) => d.as_ref(),
            _ => "",
        };
        match self.leaves.get(name) {
            Some(der) if der.as_slice() == end_entity.as_ref() => {
                Ok(ServerCertVerified::assertion())
            }
            _ => Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes.clone()
    }
}

/// The certificate (first PEM block) of every domain 0..n in the cache.
fn load_leaves(cache: &std::path::Path, n: usize) -> Result<HashMap<String, Vec<u8>>> {
    let mut out = HashMap::with_capacity(n);
    for i in 0..n {
        let path = cache.join("leaves").join(format!("d{i}.pem"));
        let pem = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let der = CertificateDer::from_pem_slice(&pem)
            .with_context(|| format!("no certificate in {}", path.display()))?;
        out.insert(domain(i), der.as_ref().to_vec());
    }
    Ok(out)
}

/// A client config for full handshakes only: X25519 (what every peer picks first, and the
/// same work for all of them), no session resumption, ALPN http/1.1.
fn handshake_config(leaves: HashMap<String, Vec<u8>>) -> Result<rustls::ClientConfig> {
    let base = rustls::crypto::aws_lc_rs::default_provider();
    let schemes = base.signature_verification_algorithms.supported_schemes();
    let provider = rustls::crypto::CryptoProvider {
        kx_groups: vec![rustls::crypto::aws_lc_rs::kx_group::X25519],
        ..base
    };
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned { leaves, schemes }))
        .with_no_client_auth();
    cfg.resumption = rustls::client::Resumption::disabled();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// One new connection: TCP, full TLS handshake with SNI `host`, `GET /`, read to the end.
async fn one_connection(
    connector: &tokio_rustls::TlsConnector,
    addr: SocketAddr,
    host: &str,
) -> Result<()> {
    let name = ServerName::try_from(host.to_owned())?;
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let mut tls = connector.connect(name, tcp).await?;
    let req = format!("GET / HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    tls.write_all(req.as_bytes()).await?;
    let mut resp = Vec::with_capacity(512);
    // Servers may end with a TCP close rather than close_notify: what was read counts.
    let _ = tls.read_to_end(&mut resp).await;
    if !resp.starts_with(b"HTTP/1.1 200") {
        bail!(
            "unexpected response: {:?}",
            String::from_utf8_lossy(&resp[..resp.len().min(40)])
        );
    }
    Ok(())
}

/// Runs the `handshakes` client.
pub(crate) async fn handshakes(args: &HandshakeArgs) -> Result<LoadResult> {
    let n = args.domains.max(1);
    let leaves = load_leaves(&args.cache, n)?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(handshake_config(leaves)?));
    let hosts: Arc<Vec<String>> = Arc::new((0..n).map(domain).collect());
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.seconds);
    let max = if args.max_connections == 0 {
        u64::MAX
    } else {
        args.max_connections
    };
    let tasks: Vec<_> = (0..args.concurrency.max(1))
        .map(|_| {
            let (connector, hosts, next, errors, first_error) = (
                connector.clone(),
                hosts.clone(),
                next.clone(),
                errors.clone(),
                first_error.clone(),
            );
            let addr = args.connect;
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < end {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= max {
                        break;
                    }
                    let i = k as usize % hosts.len();
                    let t = Instant::now();
                    let r =
                        tokio::time::timeout(OP_LIMIT, one_connection(&connector, addr, &hosts[i]))
                            .await;
                    match r {
                        Ok(Ok(())) => lat.push(t.elapsed().as_micros() as u64),
                        Ok(Err(e)) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            if let Ok(mut f) = first_error.lock() {
                                f.get_or_insert_with(|| format!("{}: {e:#}", hosts[i]));
                            }
                        }
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                lat
            })
        })
        .collect();
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await?);
    }
    let seconds = start.elapsed().as_secs_f64();
    if let Ok(Some(e)) = first_error.lock().map(|f| f.clone()) {
        eprintln!("weir-bench handshakes: first error: {e}");
    }
    let errors = errors.load(Ordering::Relaxed);
    let requests = lat.len() as u64 + errors;
    Ok(LoadResult {
        requests,
        seconds,
        rps: lat.len() as f64 / seconds,
        errors,
        latency: Latency::of_micros(&lat),
    })
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn connect_h1(addr: SocketAddr) -> Result<Sender> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    Ok(tx)
}

async fn get(tx: &mut Sender, host: &str, path: &str) -> Result<u16> {
    tx.ready().await?;
    let req = Request::get(path)
        .header("host", host)
        .body(Empty::<Bytes>::new())?;
    let resp = tx.send_request(req).await?;
    let status = resp.status().as_u16();
    resp.into_body().collect().await?;
    Ok(status)
}

/// Runs the `fixed-rate` client.
pub(crate) async fn fixed_rate(args: &RateArgs) -> Result<LoadResult> {
    if args.rate == 0 {
        bail!("--rate must be positive");
    }
    let mut senders = Vec::with_capacity(args.connections);
    for _ in 0..args.connections.max(1) {
        senders.push(connect_h1(args.connect).await?);
    }
    let total = (args.rate as f64 * args.seconds).round() as u64;
    let period = Duration::from_secs_f64(1.0 / args.rate as f64);
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now() + Duration::from_millis(20);
    let hard_end = t0 + Duration::from_secs_f64(args.seconds) + OP_LIMIT * 2;
    let tasks: Vec<_> = senders
        .into_iter()
        .map(|mut tx| {
            let (next, errors) = (next.clone(), errors.clone());
            let (host, path, addr) = (args.host.clone(), args.path.clone(), args.connect);
            tokio::spawn(async move {
                let mut lat = Vec::new();
                loop {
                    let idx = next.fetch_add(1, Ordering::Relaxed);
                    if idx >= total || Instant::now() > hard_end {
                        break;
                    }
                    let scheduled = t0 + period.mul_f64(idx as f64);
                    let start = if Instant::now() < scheduled {
                        tokio::time::sleep_until(scheduled).await;
                        Instant::now()
                    } else {
                        scheduled
                    };
                    match tokio::time::timeout(OP_LIMIT, get(&mut tx, &host, &path)).await {
                        Ok(Ok(200)) => lat.push(start.elapsed().as_micros() as u64),
                        other => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            if !matches!(other, Ok(Ok(_))) {
                                // The connection is broken or stuck: dial a new one.
                                match connect_h1(addr).await {
                                    Ok(t) => tx = t,
                                    Err(_) => break,
                                }
                            }
                        }
                    }
                }
                lat
            })
        })
        .collect();
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await?);
    }
    let seconds = t0.elapsed().as_secs_f64();
    let errors = errors.load(Ordering::Relaxed);
    Ok(LoadResult {
        requests: lat.len() as u64 + errors,
        seconds,
        rps: lat.len() as f64 / seconds,
        errors,
        latency: Latency::of_micros(&lat),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::Pki;

    #[test]
    fn pinned_verifier_accepts_only_the_domains_own_leaf() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::open(dir.path()).unwrap();
        pki.leaves(&[0, 1], 1).unwrap();
        let leaves = load_leaves(dir.path(), 2).unwrap();
        let d0 = CertificateDer::from(leaves["d0.bench.test"].clone());
        let cfg = handshake_config(leaves.clone()).unwrap();
        assert_eq!(cfg.alpn_protocols, vec![b"http/1.1".to_vec()]);
        let v = Pinned {
            leaves,
            schemes: vec![],
        };
        let name = |s: &str| ServerName::try_from(s.to_owned()).unwrap();
        let now = UnixTime::now();
        assert!(
            v.verify_server_cert(&d0, &[], &name("d0.bench.test"), &[], now)
                .is_ok()
        );
        assert!(
            v.verify_server_cert(&d0, &[], &name("d1.bench.test"), &[], now)
                .is_err()
        );
        assert!(
            v.verify_server_cert(&d0, &[], &name("d9.bench.test"), &[], now)
                .is_err()
        );
    }
}
