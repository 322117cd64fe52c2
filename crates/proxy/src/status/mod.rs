//! The live status page and the JSON API behind it (`/`, `/api/v1/…` of the admin
//! server).
//!
//! Built for 100,000 domains: the summary (`/api/v1/status`) holds counts, the listeners,
//! the propagation histograms and the last few rejections — a few kilobytes whatever the
//! configuration's size. Routes, backends and certificates are lists with a filter and
//! keyset pages (`?q=&limit=&after=`, [`page`]). Every answer reads one snapshot, loaded
//! without a lock; the rejection ring's lock is held only to copy `Arc`s out. Nothing
//! here reads a private key: certificates are read from their chain ([`cert_info`]).

mod board;
pub(crate) mod cert_info;
mod page;

use std::collections::{BTreeSet, HashMap};
use std::time::{Instant, SystemTime};

use serde_json::{Value, json};
use weir_model::{ContentHash, HostMatch, L4Mode, Protocol, RouteRef};

pub use board::{
    LatencyHistogram, Problem, REJECTIONS_KEPT, Rejection, RejectionLog, Stage, StatusBoard,
};
pub(crate) use cert_info::CertInfo;
pub(crate) use page::Query;

use crate::balance::ClusterState;
use crate::snapshot::{ListenerState, Snapshot};
use crate::tls::CertEntry;

/// How many route objects one virtual host lists (the count says how many there are).
const ROUTES_PER_HOST: usize = 20;
/// How many endpoints one backend lists.
const ENDPOINTS_PER_BACKEND: usize = 100;
/// How many host patterns one certificate lists.
const HOSTS_PER_CERTIFICATE: usize = 20;
/// How many listeners the summary lists.
const LISTENERS_LISTED: usize = 200;
/// How many rejections the summary carries.
const REJECTIONS_IN_SUMMARY: usize = 10;
/// A certificate expiring within this many days is `expiring`.
const EXPIRING_DAYS: i64 = 30;

/// What the data plane knows beyond its snapshot, for one answer.
pub(crate) struct Context<'a> {
    pub(crate) board: &'a StatusBoard,
    pub(crate) ready: bool,
    /// Endpoints unhealthy by their active health checks right now.
    pub(crate) unhealthy: i64,
    /// Endpoints ejected by passive outlier detection right now.
    pub(crate) ejected: i64,
    pub(crate) now: SystemTime,
}

/// `GET /api/v1/status`: counts, listeners, propagation, the last rejections.
pub(crate) fn summary(snap: &Snapshot, ctx: &Context<'_>) -> Value {
    let stats = snap.stats();
    let now = unix(ctx.now);
    let (mut expiring, mut expired, mut unreadable) = (0, 0, 0);
    for c in snap.certificates() {
        match cert_state(c.info(), now) {
            "expiring" => expiring += 1,
            "expired" => expired += 1,
            "unreadable" => unreadable += 1,
            _ => {}
        }
    }
    let mut listeners: Vec<&ListenerState> = snap.listeners().collect();
    listeners.sort_by_key(|l| l.listener.key);
    let listed: Vec<Value> = listeners
        .iter()
        .take(LISTENERS_LISTED)
        .map(|l| listener_json(l))
        .collect();
    let rejections = ctx.board.rejections();
    let (recent, _) = rejections.recent("", REJECTIONS_IN_SUMMARY);
    json!({
        "mode": ctx.board.mode(),
        "ready": ctx.ready,
        "version": snap.version(),
        "generated_unix_ms": board::unix_ms(ctx.now),
        "counts": {
            "listeners": stats.listeners,
            "virtual_hosts": stats.virtual_hosts,
            "l4_routes": stats.l4_routes,
            "clusters": stats.clusters,
            "certificates": stats.certificates,
            "certificates_expiring": expiring,
            "certificates_expired": expired,
            "certificates_unreadable": unreadable,
            "sni_entries": stats.sni_entries,
            "policies": stats.policies,
            "unhealthy_endpoints": ctx.unhealthy,
            "ejected_endpoints": ctx.ejected,
            "rejected_objects": rejections.rejected_now(),
            "rejections_total": rejections.total(),
        },
        "listeners": listed,
        "listeners_total": listeners.len(),
        "propagation": ctx.board.histograms_json(),
        "rejections": recent.iter().map(|r| json!(&**r)).collect::<Vec<_>>(),
    })
}

fn listener_json(l: &ListenerState) -> Value {
    let (hosts, sni, l4) = l.table_sizes();
    let li = &l.listener;
    json!({
        "address": li.key.to_string(),
        "protocol": protocol_name(li.protocol),
        "gateway": &*li.gateway,
        "name": &*li.name,
        "virtual_hosts": hosts,
        "sni_entries": sni,
        "l4_routes": l4,
    })
}

fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Http => "HTTP",
        Protocol::Https => "HTTPS",
        Protocol::TlsPassthrough => "TLS passthrough",
        Protocol::TlsTerminate => "TLS",
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
    }
}

fn route_name(r: &RouteRef) -> String {
    format!("{} {}/{}", r.kind.object_kind(), r.namespace, r.name)
}

/// One row of the routes list, borrowed from the snapshot until it is on the page.
enum RouteRow<'a> {
    Http(&'a ListenerState, &'a weir_model::VirtualHost),
    L4(&'a ListenerState, &'a weir_model::L4Route),
}

/// `GET /api/v1/routes`: virtual hosts and L4 routes by host then listener, each with the
/// route objects programmed there. `q` matches the host, the listener, the Gateway and
/// the route names.
pub(crate) fn routes(snap: &Snapshot, query: &Query) -> Value {
    let rows = snap.listeners().flat_map(|l| {
        let http = l
            .virtual_hosts()
            .map(move |(h, vh)| (h, RouteRow::Http(l, vh)));
        let l4 = l.l4_routes().map(move |(h, r)| (h, RouteRow::L4(l, r)));
        http.chain(l4)
    });
    let matching = rows.filter_map(|(host, row)| {
        let l = match &row {
            RouteRow::Http(l, _) | RouteRow::L4(l, _) => l,
        };
        let key = format!("{host} {}", l.listener.key);
        let hit = query.q.is_empty()
            || query.matches(&key)
            || query.matches(&l.listener.gateway)
            || match &row {
                RouteRow::Http(_, vh) => vh.rules.iter().any(|r| query.matches(&r.route.name)),
                RouteRow::L4(_, r) => query.matches(&r.route.name),
            };
        hit.then_some((key, (host, row)))
    });
    let p = page::page(matching, query.after.as_ref(), query.limit);
    let items: Vec<Value> = p
        .items
        .iter()
        .map(|(_, (host, row))| route_row_json(host, row))
        .collect();
    json!({"items": items, "matched": p.matched, "next": p.next})
}

fn route_row_json(host: &HostMatch, row: &RouteRow<'_>) -> Value {
    match row {
        RouteRow::Http(l, vh) => {
            let names: BTreeSet<String> = vh.rules.iter().map(|r| route_name(&r.route)).collect();
            let total = names.len();
            json!({
                "host": host.to_string(),
                "listener": l.listener.key.to_string(),
                "gateway": &*l.listener.gateway,
                "protocol": protocol_name(l.listener.protocol),
                "rules": vh.rules.len(),
                "routes": names.into_iter().take(ROUTES_PER_HOST).collect::<Vec<_>>(),
                "routes_total": total,
            })
        }
        RouteRow::L4(l, r) => {
            let protocol = match (l.listener.protocol, r.mode) {
                (Protocol::Tcp | Protocol::Udp, _) => protocol_name(l.listener.protocol),
                (_, L4Mode::Terminate) => "TLS",
                _ => "TLS passthrough",
            };
            json!({
                "host": host.to_string(),
                "listener": l.listener.key.to_string(),
                "gateway": &*l.listener.gateway,
                "protocol": protocol,
                "rules": 1,
                "routes": [route_name(&r.route)],
                "routes_total": 1,
                "backends": r.backends.iter().map(|b| b.cluster.to_string()).collect::<Vec<_>>(),
            })
        }
    }
}

/// Whether an endpoint (by index) of a cluster is out: unhealthy by its health check,
/// or ejected.
fn endpoint_out(c: &ClusterState, i: usize, now: Instant) -> bool {
    c.probers().get(i).is_some_and(|p| p.is_unhealthy())
        || c.states().get(i).is_some_and(|s| s.is_ejected(now))
}

/// `GET /api/v1/backends`: clusters by name with their endpoints' state. `q` matches the
/// cluster name and endpoint addresses; `unhealthy=1` keeps clusters with an endpoint
/// out.
pub(crate) fn backends(snap: &Snapshot, query: &Query) -> Value {
    let now = Instant::now();
    let matching = snap.clusters().filter_map(|(k, c)| {
        let out = (0..c.cluster.endpoints.len()).any(|i| endpoint_out(c, i, now));
        if query.unhealthy && !out {
            return None;
        }
        let hit = query.matches(&k.0)
            || c.cluster
                .endpoints
                .iter()
                .any(|e| query.matches(&e.addr.to_string()));
        hit.then(|| (k.0.to_string(), c))
    });
    let p = page::page(matching, query.after.as_ref(), query.limit);
    let items: Vec<Value> = p
        .items
        .iter()
        .map(|(name, c)| backend_json(name, c, now))
        .collect();
    json!({"items": items, "matched": p.matched, "next": p.next})
}

fn backend_json(name: &str, c: &ClusterState, now: Instant) -> Value {
    let eps = &c.cluster.endpoints;
    let mut out = 0;
    let mut listed = Vec::new();
    for (i, e) in eps.iter().enumerate() {
        let down = endpoint_out(c, i, now);
        out += usize::from(down);
        if listed.len() >= ENDPOINTS_PER_BACKEND {
            continue;
        }
        let mut v = c
            .states()
            .get(i)
            .map_or_else(|| json!({}), |s| s.to_json(now));
        let checked = c.probers().get(i);
        let health = match (checked.map(|p| p.is_unhealthy()), v["ejected"].as_bool()) {
            (Some(true), _) => "unhealthy",
            (_, Some(true)) => "ejected",
            (Some(false), _) => "healthy",
            _ => "unchecked",
        };
        v["address"] = json!(e.addr.to_string());
        v["weight"] = json!(e.weight);
        v["health"] = json!(health);
        if let Some(p) = checked {
            v["health_check"] = p.to_json();
        }
        listed.push(v);
    }
    json!({
        "name": name,
        "protocol": serde_json::to_value(c.cluster.protocol).unwrap_or(Value::Null),
        "policy": c.policy().is_some(),
        "endpoints": listed,
        "endpoints_total": eps.len(),
        "endpoints_out": out,
    })
}

fn unix(t: SystemTime) -> i64 {
    i64::try_from(board::unix_ms(t) / 1000).unwrap_or(i64::MAX)
}

fn cert_state(info: &Result<CertInfo, String>, now: i64) -> &'static str {
    match info {
        Err(_) => "unreadable",
        Ok(i) if i.not_after < now => "expired",
        Ok(i) if i.not_before > now => "not_yet_valid",
        Ok(i) if i.not_after - now < EXPIRING_DAYS * 86_400 => "expiring",
        Ok(_) => "valid",
    }
}

/// `GET /api/v1/certificates`: certificates by expiry, soonest first, with their names
/// and the SNI patterns that present them. `q` matches names, subject and patterns.
/// Reading a certificate's validity happens once per content, at its first request.
pub(crate) fn certificates(snap: &Snapshot, query: &Query, now: SystemTime) -> Value {
    let now = unix(now);
    // Which SNI patterns present each certificate: one pass over the SNI tables.
    let mut hosts: HashMap<ContentHash, Vec<String>> = HashMap::new();
    for l in snap.listeners() {
        for (h, cert) in l.sni_entries() {
            hosts
                .entry(cert)
                .or_default()
                .push(format!("{h} {}", l.listener.key));
        }
    }
    let matching = snap.certificates().filter_map(|c| {
        let info = c.info();
        let pats = hosts.get(&c.hash());
        let hit = query.q.is_empty()
            || query.matches(&c.hash().to_string())
            || pats.is_some_and(|p| p.iter().any(|h| query.matches(h)))
            || info.as_ref().is_ok_and(|i| {
                query.matches(&i.subject) || i.names.iter().any(|n| query.matches(n))
            });
        // Sorted by expiry (unreadable ones first: they serve no handshake), then hash;
        // the cursor is `NOT_AFTER.HASH`.
        let not_after = info.as_ref().map_or(i64::MIN, |i| i.not_after);
        hit.then(|| (CertKey(not_after, c.hash().to_string()), c))
    });
    let after = query.after.as_deref().and_then(CertKey::parse);
    let p = page::page(matching, after.as_ref(), query.limit);
    let items: Vec<Value> = p
        .items
        .iter()
        .map(|(_, c)| certificate_json(c, hosts.get(&c.hash()), now))
        .collect();
    json!({
        "items": items,
        "matched": p.matched,
        "next": p.next.map(|k| k.to_string()),
    })
}

/// The sort key of a certificate: its `notAfter`, then its hash.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct CertKey(i64, String);

impl CertKey {
    fn parse(s: &str) -> Option<CertKey> {
        let (t, h) = s.split_once('.')?;
        Some(CertKey(t.parse().ok()?, h.to_string()))
    }
}

impl std::fmt::Display for CertKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

fn certificate_json(c: &CertEntry, hosts: Option<&Vec<String>>, now: i64) -> Value {
    let mut pats: Vec<&String> = hosts.map(|h| h.iter().collect()).unwrap_or_default();
    pats.sort();
    let mut v = json!({
        "id": c.hash().to_string(),
        "state": cert_state(c.info(), now),
        "hosts": pats.iter().take(HOSTS_PER_CERTIFICATE).collect::<Vec<_>>(),
        "hosts_total": pats.len(),
    });
    match c.info() {
        Ok(i) => {
            v["subject"] = json!(i.subject);
            v["names"] = json!(i.names);
            v["not_before"] = json!(cert_info::rfc3339(i.not_before));
            v["not_after"] = json!(cert_info::rfc3339(i.not_after));
            v["days_left"] = json!((i.not_after - now).div_euclid(86_400));
        }
        Err(e) => v["error"] = json!(e),
    }
    v
}

/// `GET /api/v1/rejections`: the ring, newest first, filtered by `q`.
pub(crate) fn rejections(board: &StatusBoard, query: &Query) -> Value {
    let log = board.rejections();
    let (items, matched) = log.recent(&query.q, query.limit);
    json!({
        "items": items.iter().map(|r| json!(&**r)).collect::<Vec<_>>(),
        "matched": matched,
        "total": log.total(),
        "rejected_objects": log.rejected_now(),
        "kept": REJECTIONS_KEPT,
    })
}

/// JSON for an admin answer: compact, with `<`, `>` and `&` escaped as `\u003c`… so that
/// no browser sniffing the body as HTML finds markup in it.
pub(crate) fn to_body(v: &Value) -> Vec<u8> {
    let text = v.to_string();
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            c => out.push(c),
        }
    }
    out.into_bytes()
}

/// The status page: one self-contained HTML document (inline CSS and script, no external
/// asset) that polls the JSON API and writes every value as text, never as markup.
pub(crate) const PAGE: &str = include_str!("page.html");

#[cfg(test)]
mod tests;
