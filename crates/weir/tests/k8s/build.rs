//! Object builders (JSON, with the real field names).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::env::NetnsBackend;
use crate::support;

pub fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

pub fn gateway_class(name: &str, controller: &str) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
           "metadata": {"name": name}, "spec": {"controllerName": controller}})
}

/// A Gateway of class `weir` bound to `ip` (its requested address).
pub fn gateway(ns: &str, name: &str, ip: Ipv4Addr, listeners: Value) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"gatewayClassName": "weir",
                    "addresses": [{"type": "IPAddress", "value": ip.to_string()}],
                    "listeners": listeners}})
}

pub fn route(ns: &str, name: &str, parents: Value, hostnames: &[&str], rules: Value) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"parentRefs": parents, "hostnames": hostnames, "rules": rules}})
}

/// One rule: `prefix` to Service `svc` (port 80) in `svc_ns` (None: the route's).
pub fn rule(prefix: &str, svc: &str, svc_ns: Option<&str>) -> Value {
    let mut b = json!({"name": svc, "port": 80});
    if let Some(ns) = svc_ns {
        b["namespace"] = ns.into();
    }
    json!({"matches": [{"path": {"type": "PathPrefix", "value": prefix}}], "backendRefs": [b]})
}

/// A Service (port 80 → 8080) and its EndpointSlice pointing at `backend`.
pub fn service(ns: &str, name: &str, backend: &NetnsBackend) -> [Value; 2] {
    [
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
               "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80, "targetPort": backend.port}]}}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": format!("{name}-1"), "namespace": ns,
                            "labels": {"kubernetes.io/service-name": name}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": [backend.addr.to_string()], "conditions": {"ready": true}}],
               "ports": [{"name": "http", "port": backend.port, "protocol": "TCP"}]}),
    ]
}

pub fn tls_secret(ns: &str, name: &str, cert: &str, key: &str) -> Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
           "metadata": {"name": name, "namespace": ns},
           "data": {"tls.crt": b64(cert), "tls.key": b64(key)}})
}

/// Polls `GET http://addr/path` with `host` until the echo backend `name` answers
/// (`Err(status)`: until the status is `status`); bounded. Returns the last status seen.
pub async fn until_http(addr: SocketAddr, host: &str, path: &str, want: Result<&str, u16>) -> u16 {
    let last = AtomicU16::new(0);
    let ok = support::eventually(Duration::from_secs(20), || async {
        match support::http1(addr, host, path).await {
            Ok(r) => {
                last.store(r.status.as_u16(), Ordering::Relaxed);
                match want {
                    Ok(name) => r.status == 200 && r.echo_name() == Some(name),
                    Err(code) => r.status.as_u16() == code,
                }
            }
            Err(_) => false,
        }
    })
    .await;
    let last = last.load(Ordering::Relaxed);
    assert!(
        ok,
        "GET http://{addr}{path} (Host {host}): wanted {want:?}, last status {last}"
    );
    last
}
