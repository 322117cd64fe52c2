//! Clients: HTTPS with SNI over kept HTTP/1.1 connections (the bench CA as the only
//! root), and plain HTTP/1.1 to weir's admin server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

/// Bound on any single connect, handshake or request, so that no poll can hang.
const IO_LIMIT: Duration = Duration::from_secs(5);

/// What one HTTPS request observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// A response with this status.
    Status(u16),
    /// TCP connected but the TLS handshake failed (unknown name, certificate rejected).
    Handshake(String),
    /// Anything else: refused connection, reset, timeout, broken response.
    Failed(String),
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Seen::Status(s) => write!(f, "status {s}"),
            Seen::Handshake(e) => write!(f, "TLS handshake failed: {e}"),
            Seen::Failed(e) => write!(f, "error: {e}"),
        }
    }
}

/// A TLS client for the ingress HTTPS listener.
#[derive(Clone)]
pub(crate) struct Tls {
    addr: SocketAddr,
    /// Layout `gateway`: each domain's Gateway has its own address, on this port.
    per_gateway_port: Option<u16>,
    connector: tokio_rustls::TlsConnector,
}

impl Tls {
    /// A client of `addr` that trusts only `ca` and offers HTTP/1.1.
    pub(crate) fn new(addr: SocketAddr, ca: &CertificateDer<'static>) -> Result<Tls> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone())?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        // Every poll must do a real handshake against the current certificate table.
        cfg.resumption = rustls::client::Resumption::disabled();
        Ok(Tls {
            addr,
            per_gateway_port: None,
            connector: tokio_rustls::TlsConnector::from(Arc::new(cfg)),
        })
    }

    /// A client that connects to each domain's Gateway address (layout `gateway`).
    pub(crate) fn per_gateway(port: u16, ca: &CertificateDer<'static>) -> Result<Tls> {
        let mut tls = Tls::new(SocketAddr::from(([127, 1, 0, 0], port)), ca)?;
        tls.per_gateway_port = Some(port);
        Ok(tls)
    }

    fn addr_of(&self, host: &str) -> SocketAddr {
        match (self.per_gateway_port, crate::manifests::domain_index(host)) {
            (Some(port), Some(i)) => crate::manifests::gateway_addr(i, port),
            _ => self.addr,
        }
    }

    /// Opens a new connection with SNI `host`.
    pub(crate) async fn connect(&self, host: &str) -> Result<Conn, Seen> {
        let name =
            ServerName::try_from(host.to_owned()).map_err(|e| Seen::Failed(e.to_string()))?;
        let addr = self.addr_of(host);
        let tcp = match tokio::time::timeout(IO_LIMIT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(Seen::Failed(format!("connect: {e}"))),
            Err(_) => return Err(Seen::Failed("connect timed out".into())),
        };
        let _ = tcp.set_nodelay(true);
        let tls = match tokio::time::timeout(IO_LIMIT, self.connector.connect(name, tcp)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(Seen::Handshake(e.to_string())),
            Err(_) => return Err(Seen::Handshake("handshake timed out".into())),
        };
        let (tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| Seen::Failed(format!("http handshake: {e}")))?;
        tokio::spawn(conn);
        Ok(Conn {
            tx,
            host: host.to_owned(),
        })
    }
}

/// A kept HTTP/1.1 connection to one host.
pub(crate) struct Conn {
    tx: SendRequest<Empty<Bytes>>,
    host: String,
}

impl Conn {
    /// Whether the server closed the connection.
    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// GET `path`; reads the whole body so that the connection can be reused.
    pub(crate) async fn get(&mut self, path: &str) -> Seen {
        let fut = async {
            self.tx.ready().await?;
            let req = Request::get(path)
                .header("host", &self.host)
                .body(Empty::<Bytes>::new())
                .map_err(std::io::Error::other)?;
            let resp = self.tx.send_request(req).await?;
            let status = resp.status().as_u16();
            resp.into_body().collect().await?;
            Ok::<u16, Box<dyn std::error::Error + Send + Sync>>(status)
        };
        match tokio::time::timeout(IO_LIMIT, fut).await {
            Ok(Ok(status)) => Seen::Status(status),
            Ok(Err(e)) => Seen::Failed(e.to_string()),
            Err(_) => Seen::Failed("request timed out".into()),
        }
    }
}

/// A client that GETs a path of one host and tells what it saw: what a timed change polls.
pub(crate) trait Get {
    fn get(&mut self, path: &str) -> impl Future<Output = Seen>;
}

/// A probe of one host that keeps its connection while it works and re-dials when it
/// does not (a handshake is part of what an add or a removal waits for).
pub(crate) struct Probe {
    tls: Tls,
    host: String,
    conn: Option<Conn>,
}

impl Probe {
    /// A probe of `host`, not yet connected.
    pub(crate) fn new(tls: &Tls, host: String) -> Probe {
        Probe {
            tls: tls.clone(),
            host,
            conn: None,
        }
    }

    /// Connects now (outside the timed window) if not connected.
    pub(crate) async fn warm(&mut self) -> Result<(), Seen> {
        if self.conn.as_ref().is_none_or(Conn::is_closed) {
            self.conn = Some(self.tls.connect(&self.host).await?);
        }
        Ok(())
    }
}

impl Get for Probe {
    /// One GET of `path`, on the kept connection or a fresh one.
    async fn get(&mut self, path: &str) -> Seen {
        if let Err(seen) = self.warm().await {
            self.conn = None;
            return seen;
        }
        let Some(conn) = self.conn.as_mut() else {
            return Seen::Failed("no connection".into());
        };
        let seen = conn.get(path).await;
        if !matches!(seen, Seen::Status(_)) {
            self.conn = None;
        }
        seen
    }
}

/// GET `path` on weir's admin server: status and body.
pub(crate) async fn admin_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let fut = async {
        let stream = TcpStream::connect(addr).await?;
        let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let req = Request::get(path)
            .header("host", addr.to_string())
            .body(Empty::<Bytes>::new())?;
        let resp = tx.send_request(req).await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok::<_, anyhow::Error>((status, String::from_utf8_lossy(&body).into_owned()))
    };
    tokio::time::timeout(IO_LIMIT, fut)
        .await
        .context("admin request timed out")?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::Pki;
    use http_body_util::Full;
    use rustls_pki_types::PrivateKeyDer;
    use rustls_pki_types::pem::PemObject;

    /// A TLS server with one certificate for `d0.bench.test`: `/` → 200, else 404.
    async fn server(pki: &Pki) -> SocketAddr {
        let (leaves, _) = pki.leaves(&[0], 1).unwrap();
        let cert = CertificateDer::from_pem_slice(leaves[0].cert_pem.as_bytes()).unwrap();
        let key = PrivateKeyDer::from_pem_slice(leaves[0].key_pem.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for _ in 0..100 {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(
                        |req: Request<hyper::body::Incoming>| async move {
                            let status = if req.uri().path() == "/" { 200 } else { 404 };
                            http::Response::builder()
                                .status(status)
                                .body(Full::new(Bytes::from_static(b"{}")))
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn kept_connection_sni_and_handshake_failures() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::open(dir.path()).unwrap();
        let addr = server(&pki).await;
        let tls = Tls::new(addr, pki.ca_der()).unwrap();

        let mut probe = Probe::new(&tls, "d0.bench.test".into());
        probe.warm().await.unwrap();
        assert_eq!(probe.get("/").await, Seen::Status(200));
        assert_eq!(probe.get("/missing").await, Seen::Status(404));
        assert_eq!(probe.get("/").await, Seen::Status(200));

        // The server's certificate does not name d1: the handshake must fail.
        let mut other = Probe::new(&tls, "d1.bench.test".into());
        assert!(matches!(other.get("/").await, Seen::Handshake(_)));

        // Nothing listening: a plain failure, not a handshake failure.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let nobody = Tls::new(closed, pki.ca_der()).unwrap();
        assert!(matches!(
            nobody.connect("d0.bench.test").await,
            Err(Seen::Failed(_))
        ));
    }
}
