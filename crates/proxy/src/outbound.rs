//! A small HTTP client for the services the data plane itself calls (an external
//! authorization service, a JWKS endpoint): `http` and `https` URLs, connections pooled
//! by hyper-util's client, TLS by rustls (aws-lc-rs) with the system's trust roots plus
//! any extra CA given.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::error::BoxError;

/// A client for bodiless requests (`GET`) to `http` and `https` URLs.
pub(crate) type OutboundClient = Client<Connector, Empty<Bytes>>;

/// Where the system keeps its trust roots (Debian/Ubuntu, Fedora/RHEL, Alpine, SUSE).
const SYSTEM_ROOTS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
    "/etc/ssl/ca-bundle.pem",
];

/// The system's trust roots (the first bundle found), plus the certificates of
/// `extra_pem`. Fails when `extra_pem` holds no certificate.
pub(crate) fn roots(extra_pem: Option<&[u8]>) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(bundle) = SYSTEM_ROOTS.iter().find_map(|p| std::fs::read(p).ok()) {
        let certs = CertificateDer::pem_slice_iter(&bundle).filter_map(Result::ok);
        roots.add_parsable_certificates(certs);
    }
    if let Some(pem) = extra_pem {
        let mut added = 0;
        for der in CertificateDer::pem_slice_iter(pem) {
            let der = der.map_err(|e| format!("CA bundle: {e}"))?;
            roots.add(der).map_err(|e| format!("CA certificate: {e}"))?;
            added += 1;
        }
        if added == 0 {
            return Err("CA bundle: no certificate".into());
        }
    }
    Ok(roots)
}

/// A client trusting `roots`, its connections kept idle for `idle`.
pub(crate) fn client(
    roots: rustls::RootCertStore,
    connect_timeout: Duration,
    idle: Duration,
) -> OutboundClient {
    let connector = connector(roots, connect_timeout, &[]);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(idle)
        .pool_max_idle_per_host(32)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector)
}

/// TCP, then TLS trusting `roots` for an `https` URI, offering `alpn` (none: no ALPN).
pub(crate) fn connector(
    roots: rustls::RootCertStore,
    connect_timeout: Duration,
    alpn: &[&[u8]],
) -> Connector {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("aws-lc-rs supports rustls's default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    Connector {
        http,
        tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
    }
}

/// TCP, then TLS for an `https` URI (the server name from the URI's host).
#[derive(Clone)]
pub(crate) struct Connector {
    http: HttpConnector,
    tls: tokio_rustls::TlsConnector,
}

impl tower_service::Service<Uri> for Connector {
    type Response = Io;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Io, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let https = dst.scheme() == Some(&http::uri::Scheme::HTTPS);
        let host = dst
            .host()
            .unwrap_or("")
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let connecting = self.http.call(dst);
        let tls = self.tls.clone();
        Box::pin(async move {
            let tcp = connecting.await?;
            if !https {
                return Ok(Io::Plain(tcp));
            }
            let name = ServerName::try_from(host)?;
            let stream = tls.connect(name, tcp.into_inner()).await?;
            Ok(Io::Tls(Box::new(TokioIo::new(stream))))
        })
    }
}

/// A plain or TLS connection.
pub(crate) enum Io {
    Plain(TokioIo<TcpStream>),
    Tls(Box<TokioIo<TlsStream<TcpStream>>>),
}

impl Connection for Io {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}
