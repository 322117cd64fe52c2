//! Upstream connection pools: weir's own per-endpoint pool for HTTP/1.1 keep-alive
//! ([`crate::pool`], plaintext or TLS), a hyper-util client for HTTP/2 with prior
//! knowledge (h2c, one multiplexed connection per endpoint), and weir's own pool for
//! HTTP/2 over TLS ([`crate::h2_tls`]), all counting open connections.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::net::TcpStream;
use weir_model::{EndpointAddr, UpstreamProtocol};

use crate::body::{RequestBody, SendWatch, Stall};
use crate::dataplane::ProxyConfig;
use crate::endpoints::ConnectGate;
use crate::error::{BoxError, ProxyError};
use crate::h1;
use crate::h2_tls::H2TlsPool;
use crate::pool::Http1Pool;
use crate::upstream_tls::TlsTarget;

/// The pools for both upstream protocols.
pub(crate) struct Upstreams {
    http1: Arc<Http1Pool>,
    h2c: Client<CountingConnector, RequestBody>,
    /// HTTP/2 to clusters with upstream TLS.
    h2_tls: Arc<H2TlsPool>,
    /// Mirrored copies (RequestMirror) carry no body of their own.
    mirror_http1: Client<CountingConnector, Empty<Bytes>>,
    mirror_h2c: Client<CountingConnector, Empty<Bytes>>,
}

impl Upstreams {
    /// Builds both clients. `open` counts open upstream connections, `connect_errors`
    /// failed connection attempts.
    pub(crate) fn new(config: &ProxyConfig, open: Gauge, connect_errors: Counter) -> Upstreams {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.connect_timeout));
        let http1 = Arc::new(Http1Pool::new(
            config.connect_timeout,
            config.upstream_idle_timeout,
            open.clone(),
            connect_errors.clone(),
        ));
        let h2_tls = Arc::new(H2TlsPool::new(
            config.connect_timeout,
            config.upstream_idle_timeout,
            open.clone(),
            connect_errors.clone(),
        ));
        let connector = CountingConnector {
            inner: http,
            open,
            connect_errors,
        };
        let builder = |h2: bool| {
            let mut b = Client::builder(TokioExecutor::new());
            b.pool_idle_timeout(config.upstream_idle_timeout)
                .pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .http2_only(h2);
            b
        };
        Upstreams {
            http1,
            h2_tls,
            h2c: builder(true).build(connector.clone()),
            mirror_http1: builder(false).build(connector.clone()),
            mirror_h2c: builder(true).build(connector),
        }
    }

    /// Sends a mirrored copy and reads its response to the end (the response is
    /// discarded; reading it lets the connection be reused). A copy to a cluster with
    /// upstream TLS goes through the pools of the forwarded requests, with the mirror
    /// cluster's TLS settings.
    pub(crate) async fn send_mirror(
        &self,
        protocol: UpstreamProtocol,
        addr: &EndpointAddr,
        tls: Option<&Arc<TlsTarget>>,
        req: Request<Empty<Bytes>>,
    ) -> Result<(), BoxError> {
        if let Some(tls) = tls {
            let req = req.map(|_| RequestBody::empty());
            let resp = self.send(protocol, addr, Some(tls), req, None).await?;
            resp.into_body().collect().await?;
            return Ok(());
        }
        let client = match protocol {
            UpstreamProtocol::Http1 => &self.mirror_http1,
            UpstreamProtocol::H2c => &self.mirror_h2c,
        };
        let resp = client.request(req).await?;
        resp.into_body().collect().await?;
        Ok(())
    }

    /// Sends one request to `addr`; the returned future waits for the response head.
    /// HTTP/1.1 requests carry an origin-form URI, and their response body returns the
    /// connection to the pool at its end; h2c requests carry an absolute URI naming the
    /// endpoint. A request whose body stalls before the answer fails with
    /// [`ProxyError::BodyTimeout`].
    pub(crate) fn send(
        &self,
        protocol: UpstreamProtocol,
        addr: &EndpointAddr,
        tls: Option<&Arc<TlsTarget>>,
        req: Request<RequestBody>,
        gate: Option<ConnectGate>,
    ) -> UpstreamResponse {
        let stall = req.body().stall();
        let send_watch = req.body().send_watch();
        let sending = match protocol {
            UpstreamProtocol::Http1 => Sending::Http1 {
                fut: self.http1.send(addr, tls, req, gate),
            },
            UpstreamProtocol::H2c => match tls {
                None => Sending::H2c {
                    fut: self.h2c.request(req),
                },
                Some(tls) => Sending::H2Tls {
                    fut: Box::pin(Arc::clone(&self.h2_tls).send(
                        addr.clone(),
                        Arc::clone(tls),
                        req,
                        gate,
                    )),
                },
            },
        };
        UpstreamResponse {
            sending,
            stall,
            send_watch,
        }
    }
}

pin_project_lite::pin_project! {
    /// An upstream's response head, bounded by the body's send timeout when it has one.
    pub(crate) struct UpstreamResponse {
        #[pin]
        sending: Sending,
        stall: Option<Stall>,
        // Boxed: most requests have no send timeout.
        send_watch: Option<Box<SendWatch>>,
    }
}

pin_project_lite::pin_project! {
    #[project = SendingProj]
    enum Sending {
        Http1 { fut: h1::Exchange },
        H2c { #[pin] fut: ResponseFuture },
        H2Tls { fut: H2TlsSend },
    }
}

/// A request to the HTTP/2-over-TLS pool.
type H2TlsSend = Pin<Box<dyn Future<Output = Result<Response<Incoming>, ProxyError>> + Send>>;

impl Future for UpstreamResponse {
    type Output = Result<Response<UpstreamBody>, ProxyError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let polled = match this.sending.project() {
            SendingProj::Http1 { fut } => Pin::new(fut)
                .poll(cx)
                .map(|r| r.map(|r| r.map(UpstreamBody::H1))),
            SendingProj::H2c { fut } => fut.poll(cx).map(|r| match r {
                Ok(resp) => Ok(resp.map(UpstreamBody::H2)),
                Err(e) if e.is_connect() => Err(ProxyError::Connect(Box::new(e))),
                Err(e) => Err(ProxyError::upstream_send(Box::new(e))),
            }),
            SendingProj::H2Tls { fut } => fut
                .as_mut()
                .poll(cx)
                .map(|r| r.map(|r| r.map(UpstreamBody::H2))),
        };
        let out = match polled {
            Poll::Ready(out) => out,
            Poll::Pending => {
                // The upstream connection took none of the body for the send timeout.
                if let Some(watch) = this.send_watch
                    && watch.poll_expired(cx).is_ready()
                {
                    *this.send_watch = None;
                    return Poll::Ready(Err(ProxyError::Timeout));
                }
                return Poll::Pending;
            }
        };
        Poll::Ready(match this.stall {
            Some(stall) => out.map_err(|e| stall.explain(e)),
            None => out,
        })
    }
}

/// An upstream's response body: from weir's HTTP/1.1 client (which gives the connection
/// back at its end), or from hyper's HTTP/2 clients.
pub(crate) enum UpstreamBody {
    H1(h1::ResponseBody),
    H2(Incoming),
}

impl UpstreamBody {
    /// The upstream connection after a `101 Switching Protocols` (HTTP/1.1 only).
    pub(crate) fn upgrade(&mut self) -> Option<h1::Upgraded> {
        match self {
            UpstreamBody::H1(b) => b.upgrade(),
            UpstreamBody::H2(_) => None,
        }
    }
}

impl http_body::Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        // Both variants are Unpin.
        match self.get_mut() {
            UpstreamBody::H1(b) => Pin::new(b).poll_frame(cx),
            UpstreamBody::H2(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::H1(b) => b.is_end_stream(),
            UpstreamBody::H2(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            UpstreamBody::H1(b) => b.size_hint(),
            UpstreamBody::H2(b) => b.size_hint(),
        }
    }
}

/// `HttpConnector` plus bookkeeping: the open-connection gauge follows each connection's
/// lifetime and failed attempts are counted.
#[derive(Clone)]
pub(crate) struct CountingConnector {
    inner: HttpConnector,
    open: Gauge,
    connect_errors: Counter,
}

type ConnectFuture = Pin<Box<dyn Future<Output = Result<CountedIo, BoxError>> + Send>>;

impl tower_service::Service<Uri> for CountingConnector {
    type Response = CountedIo;
    type Error = BoxError;
    type Future = ConnectFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let connecting = self.inner.call(dst);
        let open = self.open.clone();
        let errors = self.connect_errors.clone();
        Box::pin(async move {
            match connecting.await {
                Ok(io) => {
                    open.inc();
                    Ok(CountedIo { inner: io, open })
                }
                Err(e) => {
                    errors.inc();
                    Err(e.into())
                }
            }
        })
    }
}

/// An upstream TCP connection that decrements the open-connection gauge when dropped.
pub(crate) struct CountedIo {
    inner: TokioIo<TcpStream>,
    open: Gauge,
}

impl Drop for CountedIo {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl Connection for CountedIo {
    fn connected(&self) -> Connected {
        self.inner.connected()
    }
}

impl hyper::rt::Read for CountedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for CountedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
}
