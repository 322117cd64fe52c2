//! Ingress v1 in standalone mode: rules, path types, default backend and TLS.

use std::net::SocketAddr;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_rules_and_tls() {
    let pki = Pki::new();
    let (crt, key) = pki.leaf(&["ing.test"]);
    let (a, b, d) = (echo("a").await, echo("b").await, echo("default").await);
    let http_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let https_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let ingress = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  defaultBackend:
    resource: {apiGroup: weir.dev, kind: Backend, name: default}
  tls:
  - hosts: [ing.test]
    secretName: ing-cert
  rules:
  - host: ing.test
    http:
      paths:
      - {path: /exact, pathType: Exact, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: a}}}
      - {path: /app, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: b}}}
";
    let files = [
        ("ingress.yaml", ingress.to_string()),
        ("secret.yaml", tls_secret("default", "ing-cert", &crt, &key)),
        (
            "backends.yaml",
            [
                backend("default", "a", &[a]),
                backend("default", "b", &[b]),
                backend("default", "default", &[d]),
            ]
            .join("---\n"),
        ),
    ];
    let gw = Gateway::start_with(&files, Some(http_addr), Some(https_addr)).await;
    let name = |host: &'static str, path: &'static str| async move {
        http1(http_addr, host, path)
            .await
            .unwrap()
            .echo_name()
            .map(str::to_owned)
    };
    assert_eq!(name("ing.test", "/exact").await.as_deref(), Some("a"));
    assert_eq!(
        name("ing.test", "/exact/no").await.as_deref(),
        Some("default")
    );
    assert_eq!(name("ing.test", "/app/x").await.as_deref(), Some("b"));
    assert_eq!(name("other.test", "/app").await.as_deref(), Some("default"));

    let r = https(https_addr, pki.client_config(&[b"h2"]), "ing.test", "/app")
        .await
        .unwrap();
    assert_eq!(r.peer_cert, der_of(&crt));
    assert_eq!(r.resp.echo_name(), Some("b"));
    gw.gw.stop().await;
}
