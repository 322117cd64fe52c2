//! Backend references (Service ports, weir Backends) and the clusters built from them.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use weir_api::{Backend, EndpointSlice, Reason};
use weir_model::{Cluster, ClusterKey, Endpoint, EndpointAddr, UpstreamProtocol, UpstreamTls};

use crate::store::Store;

const H2C: &str = "kubernetes.io/h2c";

/// What a cluster is built from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ClusterSource {
    /// One port of a Service.
    Service {
        ns: Arc<str>,
        name: Arc<str>,
        port: u16,
        /// HTTP/2 upstream whatever the port's appProtocol says (GRPCRoute backends).
        h2c: bool,
        /// The Service port of protocol UDP (UDPRoute backends); otherwise one of
        /// another protocol (TCP), the first with the number if there is none.
        udp: bool,
        /// One endpoint, the Service's cluster IP and port, instead of its endpoints
        /// (ingress-nginx's `service-upstream`; none for a headless Service).
        cluster_ip: bool,
        /// TLS towards the endpoints (ingress-nginx's `backend-protocol: HTTPS`).
        tls: Option<Arc<UpstreamTls>>,
    },
    /// A weir Backend object.
    Backend {
        ns: Arc<str>,
        name: Arc<str>,
        /// HTTP/2 upstream unless the Backend names a protocol (GRPCRoute backends).
        h2c: bool,
    },
}

/// The upstream protocol a route kind asks of its backends: gRPC needs HTTP/2, so a
/// GRPCRoute's clusters are h2c even when the Service port has no appProtocol (as other
/// implementations infer it from the route kind); an HTTPRoute's follow appProtocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WantProtocol {
    /// As the Service port or Backend says (HTTP/1.1 by default).
    Declared,
    /// HTTP/2 (h2c).
    Http2,
    /// Datagrams (UDPRoute): a Service's port of protocol UDP, which may share its number
    /// with a TCP port (DNS's 53) and then has endpoints of its own.
    Udp,
}

impl WantProtocol {
    fn h2c(self) -> bool {
        self == WantProtocol::Http2
    }

    /// Keeps the clusters of the two apart: the same Service port may back an HTTPRoute
    /// (HTTP/1.1) and a GRPCRoute (h2c).
    fn key_suffix(self) -> &'static str {
        match self {
            WantProtocol::Declared => "",
            WantProtocol::Http2 => "/h2c",
            WantProtocol::Udp => "/udp",
        }
    }
}

/// The key of the cluster built from Backend `ns`/`name` for routes wanting `want`.
/// Shared with the recent equal keys ([`weir_api::shared_str`]): the rules of 20,000
/// Ingresses naming one Backend hold one key, not one string each.
pub(crate) fn backend_cluster_key(ns: &str, name: &str, want: WantProtocol) -> ClusterKey {
    ClusterKey(weir_api::shared_str(&format!(
        "backend/{ns}/{name}{}",
        want.key_suffix()
    )))
}

/// The keys of every cluster Backend `ns`/`name` may be built into.
pub(crate) fn backend_cluster_keys(ns: &str, name: &str) -> [ClusterKey; 2] {
    [WantProtocol::Declared, WantProtocol::Http2].map(|w| backend_cluster_key(ns, name, w))
}

/// A backend reference that cannot be used, with its Gateway API reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RefError {
    pub(crate) reason: Reason,
    pub(crate) message: String,
}

impl RefError {
    pub(crate) fn new(reason: Reason, message: String) -> Self {
        RefError { reason, message }
    }
}

/// A usable reference: the cluster it names and how to build it.
pub(crate) type Resolved = (ClusterKey, ClusterSource);

/// The cluster key of an unusable reference: never the key of a real cluster, so the data
/// plane answers 500 for the share of traffic that goes there.
pub(crate) fn invalid_cluster_key(what: &str) -> ClusterKey {
    ClusterKey(format!("invalid/{what}").into())
}

/// Resolves a Service port (the caller has checked permission).
pub(crate) fn resolve_service(
    store: &Store,
    ns: &str,
    name: &str,
    port: Option<i32>,
    want: WantProtocol,
    field: &dyn std::fmt::Display,
) -> Result<Resolved, RefError> {
    let Some(port) = port else {
        return Err(RefError::new(
            Reason::UnsupportedValue,
            format!("{field}.port: required for a Service"),
        ));
    };
    let Some(svc) = store.service(ns, name) else {
        return Err(RefError::new(
            Reason::BackendNotFound,
            format!("{field}: Service {ns}/{name} not found"),
        ));
    };
    let Some(p) = u16::try_from(port).ok().filter(|p| *p != 0) else {
        return Err(RefError::new(
            Reason::UnsupportedValue,
            format!("{field}.port: {port} is not a valid port"),
        ));
    };
    if !svc
        .spec
        .ports
        .iter()
        .any(|sp| sp.port == port && (want != WantProtocol::Udp || is_udp(sp)))
    {
        return Err(RefError::new(
            Reason::BackendNotFound,
            format!(
                "{field}: Service {ns}/{name} has no {}port {port}",
                if want == WantProtocol::Udp {
                    "UDP "
                } else {
                    ""
                }
            ),
        ));
    }
    Ok((
        ClusterKey(format!("service/{ns}/{name}:{p}{}", want.key_suffix()).into()),
        ClusterSource::Service {
            ns: ns.into(),
            name: name.into(),
            port: p,
            h2c: want.h2c(),
            udp: want == WantProtocol::Udp,
            cluster_ip: false,
            tls: None,
        },
    ))
}

fn is_udp(sp: &weir_api::ServicePort) -> bool {
    sp.protocol.as_deref() == Some("UDP")
}

/// Resolves a weir Backend (the caller has checked permission).
pub(crate) fn resolve_backend(
    store: &Store,
    ns: &str,
    name: &str,
    want: WantProtocol,
    field: &dyn std::fmt::Display,
) -> Result<Resolved, RefError> {
    // A Backend's endpoints are addresses: the same cluster serves datagrams.
    let want = match want {
        WantProtocol::Udp => WantProtocol::Declared,
        w => w,
    };
    if store.backend(ns, name).is_none() {
        return Err(RefError::new(
            Reason::BackendNotFound,
            format!("{field}: Backend {ns}/{name} not found"),
        ));
    }
    Ok((
        backend_cluster_key(ns, name, want),
        ClusterSource::Backend {
            ns: ns.into(),
            name: name.into(),
            h2c: want.h2c(),
        },
    ))
}

/// Builds the cluster `key` from the store; `None` when its source is gone.
pub(crate) fn build_cluster(
    store: &Store,
    key: &ClusterKey,
    src: &ClusterSource,
) -> Option<Cluster> {
    match src {
        ClusterSource::Service {
            ns,
            name,
            port,
            h2c: want_h2c,
            udp,
            cluster_ip,
            tls,
        } => {
            let svc = store.service(ns, name)?;
            let numbered = || svc.spec.ports.iter().filter(|p| p.port == i32::from(*port));
            let sp = numbered()
                .find(|p| is_udp(p) == *udp)
                .or_else(|| numbered().next().filter(|_| !*udp))?;
            let sp_name = sp.name.as_deref().unwrap_or("");
            let mut h2c = *want_h2c || sp.app_protocol.as_deref() == Some(H2C);
            // As kube-proxy does: ready endpoints take the traffic; only when none is
            // ready do endpoints that are terminating but still serving take it (a
            // rolling update's last old pod during its grace period). `ready` absent
            // means ready, `serving` absent means as `ready`.
            let mut endpoints = Vec::new();
            let mut terminating = Vec::new();
            let vip = svc
                .spec
                .cluster_ip
                .as_deref()
                .and_then(|ip| ip.parse::<IpAddr>().ok());
            if *cluster_ip {
                endpoints.extend(vip.map(|ip| Endpoint {
                    addr: EndpointAddr::Socket(SocketAddr::new(ip, *port)),
                    weight: 1,
                }));
            }
            for slice in store
                .slices_of(ns, name)
                .into_iter()
                .filter(|_| !*cluster_ip)
            {
                let single = slice.ports.len() == 1;
                let Some(ep) = slice
                    .ports
                    .iter()
                    .find(|p| p.name.as_deref().unwrap_or("") == sp_name)
                    .or_else(|| slice.ports.first().filter(|_| single && sp_name.is_empty()))
                else {
                    continue;
                };
                let Some(target) = ep.port.and_then(|p| u16::try_from(p).ok()) else {
                    continue;
                };
                h2c |= ep.app_protocol.as_deref() == Some(H2C);
                for e in &slice.endpoints {
                    let c = &e.conditions;
                    let ready = c.ready.unwrap_or(true);
                    let serving = c.serving.unwrap_or(ready);
                    let into = if ready {
                        &mut endpoints
                    } else if serving && c.terminating == Some(true) {
                        &mut terminating
                    } else {
                        continue;
                    };
                    for a in &e.addresses {
                        if let Ok(ip) = a.parse::<IpAddr>() {
                            into.push(Endpoint {
                                addr: EndpointAddr::Socket(SocketAddr::new(ip, target)),
                                weight: 1,
                            });
                        }
                    }
                }
            }
            if endpoints.is_empty() {
                endpoints = terminating;
            }
            endpoints.sort_by(|a, b| a.addr.cmp(&b.addr));
            endpoints.dedup();
            let protocol = if h2c {
                UpstreamProtocol::H2c
            } else {
                UpstreamProtocol::Http1
            };
            Some(Cluster::new(key.clone(), endpoints, protocol).with_tls(tls.clone()))
        }
        ClusterSource::Backend { ns, name, h2c } => {
            let b = store.backend(ns, name)?;
            let (endpoints, mut protocol, _) = backend_endpoints(b);
            if *h2c && b.spec.protocol.is_none() {
                protocol = UpstreamProtocol::H2c;
            }
            Some(Cluster::new(key.clone(), endpoints, protocol))
        }
    }
}

/// The endpoints and protocol of a Backend, and the problems found on the way.
pub(crate) fn backend_endpoints(b: &Backend) -> (Vec<Endpoint>, UpstreamProtocol, Vec<String>) {
    let mut problems = Vec::new();
    let mut endpoints = Vec::new();
    for (i, e) in b.spec.endpoints.iter().enumerate() {
        match parse_endpoint(e) {
            Some(addr) => endpoints.push(Endpoint { addr, weight: 1 }),
            None => problems.push(format!(
                "spec.endpoints[{i}]: {e:?} is not host:port (IPv6 as [addr]:port); endpoint skipped"
            )),
        }
    }
    let protocol = match b.spec.protocol.as_deref() {
        None | Some("HTTP") => UpstreamProtocol::Http1,
        Some("H2C") => UpstreamProtocol::H2c,
        Some(other) => {
            problems.push(format!(
                "spec.protocol: {other:?} is not HTTP or H2C; using HTTP"
            ));
            UpstreamProtocol::Http1
        }
    };
    (endpoints, protocol, problems)
}

fn parse_endpoint(s: &str) -> Option<EndpointAddr> {
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Some(EndpointAddr::Socket(sa));
    }
    let (host, port) = s.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    if host.is_empty() || host.contains(':') || host.contains('[') {
        return None;
    }
    let ok = host.split('.').all(|l| {
        !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    ok.then(|| EndpointAddr::Host(host.to_ascii_lowercase().into(), port))
}

/// Problems with an EndpointSlice (addresses that are not IPs are skipped).
pub(crate) fn slice_problems(s: &EndpointSlice) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, e) in s.endpoints.iter().enumerate() {
        for (j, a) in e.addresses.iter().enumerate() {
            if a.parse::<IpAddr>().is_err() {
                problems.push(format!(
                    "endpoints[{i}].addresses[{j}]: {a:?} is not an IP address; skipped"
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            parse_endpoint("10.0.0.1:80"),
            Some(EndpointAddr::Socket("10.0.0.1:80".parse().unwrap()))
        );
        assert_eq!(
            parse_endpoint("[::1]:80"),
            Some(EndpointAddr::Socket("[::1]:80".parse().unwrap()))
        );
        assert_eq!(
            parse_endpoint("Echo.local:8080"),
            Some(EndpointAddr::Host("echo.local".into(), 8080))
        );
        assert_eq!(parse_endpoint("echo"), None);
        assert_eq!(parse_endpoint("echo:0"), None);
        assert_eq!(parse_endpoint("::1:80"), None);
    }
}
