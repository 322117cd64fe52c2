//! RequestMirror: copies of requests sent to other backends in the background, their
//! responses discarded.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header;
use http::uri::PathAndQuery;
use http::{Request, Version};
use weir_model::{EndpointAddr, Filter, RouteRule, UpstreamProtocol};

use crate::server::{ConnContext, upstream_uri};
use crate::snapshot::Snapshot;

/// How long a mirrored copy may take when the rule sets no timeout.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The endpoint of each RequestMirror filter of `rule` that this request is sampled for
/// (no allocation when the rule mirrors nothing). A mirror cluster that is missing or
/// empty is skipped.
pub(crate) fn targets(
    snapshot: &Snapshot,
    rule: &RouteRule,
) -> Vec<(EndpointAddr, UpstreamProtocol)> {
    rule.filters
        .iter()
        .filter_map(|f| match f {
            Filter::Mirror {
                cluster,
                per_million,
            } if sampled(*per_million) => {
                let c = snapshot.cluster(cluster)?;
                // Copies go out through a plaintext client: none to a TLS Service port.
                if c.tls().is_some() {
                    return None;
                }
                let e = c.pick(std::time::Instant::now(), None)?;
                Some((e.endpoint.addr.clone(), c.cluster.protocol))
            }
            _ => None,
        })
        .collect()
}

/// Whether a request falls in a share of `per_million` millionths: a counter through a
/// SplitMix64 finalizer, uniform enough for traffic shares and lock-free.
fn sampled(per_million: u32) -> bool {
    if per_million >= 1_000_000 {
        return true;
    }
    static STATE: AtomicU64 = AtomicU64::new(0x853c_49e6_748f_ea9b);
    let mut z = STATE.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z % 1_000_000 < u64::from(per_million)
}

/// Sends a copy of a bodiless request head to each mirror endpoint in the background,
/// each bounded by `limit`. Requests with a body are not mirrored (the body is streamed
/// to the chosen backend once, not buffered).
pub(crate) fn send(
    ctx: &ConnContext,
    parts: &http::request::Parts,
    has_body: bool,
    mirrors: Vec<(EndpointAddr, UpstreamProtocol)>,
    limit: Duration,
) {
    if has_body {
        tracing::debug!("request with a body not mirrored");
        return;
    }
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    for (addr, protocol) in mirrors {
        let Ok(uri) = upstream_uri(&addr, path.clone()) else {
            continue;
        };
        let mut req = Request::new(http_body_util::Empty::<Bytes>::new());
        *req.method_mut() = parts.method.clone();
        *req.uri_mut() = uri;
        *req.headers_mut() = parts.headers.clone();
        // A copy never upgrades (its connection is not joined to anything).
        req.headers_mut().remove(header::CONNECTION);
        req.headers_mut().remove(header::UPGRADE);
        *req.version_mut() = match protocol {
            UpstreamProtocol::Http1 => Version::HTTP_11,
            UpstreamProtocol::H2c => Version::HTTP_2,
        };
        let shared = Arc::clone(&ctx.shared);
        tokio::spawn(async move {
            let sent = tokio::time::timeout(limit, shared.upstreams.send_mirror(protocol, req));
            match sent.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(upstream = %addr, error = %e, "mirror failed"),
                Err(_) => tracing::debug!(upstream = %addr, "mirror timed out"),
            }
        });
    }
}
