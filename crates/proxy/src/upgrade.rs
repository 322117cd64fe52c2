//! HTTP/1.1 upgrades (e.g. WebSocket): the request asks for one, the backend answers 101,
//! and the two connections are joined.

use http::HeaderValue;
use http::Version;
use http::header;

/// The protocol an HTTP/1.1 request asks to upgrade to (`Connection: upgrade` plus an
/// `Upgrade` header), if any.
pub(crate) fn requested(parts: &http::request::Parts) -> Option<HeaderValue> {
    if parts.version != Version::HTTP_11 {
        return None;
    }
    let asks = parts.headers.get_all(header::CONNECTION).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        })
    });
    asks.then(|| parts.headers.get(header::UPGRADE).cloned())
        .flatten()
}

/// Joins an upgraded client connection and the upgraded upstream connection, copying
/// both ways until either side closes.
pub(crate) async fn tunnel(client: hyper::upgrade::OnUpgrade, mut upstream: crate::h1::Upgraded) {
    let client = match client.await {
        Ok(client) => client,
        Err(e) => {
            tracing::debug!(error = %e, "upgrade failed");
            return;
        }
    };
    let mut client = hyper_util::rt::TokioIo::new(client);
    if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        tracing::debug!(error = %e, "upgraded connection closed with an error");
    }
}
