//! HTTP/2 connections served by weir's own server ([`weir_h2::server`]): every stream in
//! the connection's task, no lock between them (see ARCHITECTURE.md, "HTTP/2 on weir's
//! own server"). `WEIR_HTTP2_SERVER=hyper` serves them with hyper's server as before.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Request};
use tokio::io::{AsyncRead, AsyncWrite};
use weir_h2::server::{Config, Connection, RecvBody};

use crate::body::ClientBody;
use crate::drain::Shutdown;
use crate::error::BoxError;
use crate::idle::ConnState;
use crate::listeners::serve_request;
use crate::server::{ADDED_FIELDS, ConnContext};

/// Whether HTTP/2 connections are served by weir's own server (the default).
pub(crate) fn own_http2() -> bool {
    static OWN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| std::env::var("WEIR_HTTP2_SERVER").map_or(true, |v| v != "hyper"))
}

/// What a listener's connections advertise and allow: hyper's defaults (200 streams,
/// windows of 1 MiB), the listener's head limit.
fn config(limits: &weir_model::ConnectionLimits) -> Config {
    Config {
        max_header_list_size: limits.max_header_bytes,
        header_room: ADDED_FIELDS,
        date: Some(date),
        ..Config::default()
    }
}

fn date() -> HeaderValue {
    let mut text = Vec::with_capacity(29);
    crate::h1::server::date_text(&mut text);
    HeaderValue::from_maybe_shared(Bytes::from(text))
        .unwrap_or_else(|_| HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"))
}

/// Serves an HTTP/2 connection on `io`.
pub(crate) fn serve<IO>(
    io: IO,
    state: Arc<ConnState>,
    ctx: Arc<ConnContext>,
    limits: &weir_model::ConnectionLimits,
) -> impl Shutdown<Output = Result<(), BoxError>> + Send
where
    IO: AsyncRead + AsyncWrite + Unpin + Send,
{
    let max_headers = limits.max_headers;
    let service = move |req: Request<RecvBody>| {
        serve_request(&state, &ctx, max_headers, req.map(ClientBody::H2))
    };
    Own(Connection::new(io, config(limits), service))
}

/// weir's connection, with the drain's graceful shut-down.
struct Own<C>(C);

impl<IO, S, F, B> Future for Own<Connection<IO, S, F, B>>
where
    Connection<IO, S, F, B>: Future<Output = Result<(), weir_h2::server::Error>> + Unpin,
{
    type Output = Result<(), BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.get_mut().0).poll(cx).map_err(Into::into)
    }
}

impl<IO, S, F, B> Shutdown for Own<Connection<IO, S, F, B>>
where
    Connection<IO, S, F, B>: Future<Output = Result<(), weir_h2::server::Error>> + Unpin,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        self.get_mut().0.graceful_shutdown();
    }
}
