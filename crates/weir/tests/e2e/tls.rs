//! TLS termination: SNI picks exact, then wildcard, then the default certificate; ALPN
//! picks HTTP/2 or HTTP/1.1; a broken certificate disables only its own listener.

use std::net::SocketAddr;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_selects_certificates_and_alpn_selects_the_protocol() {
    let pki = Pki::new();
    let port = free_port();
    let a = echo("a").await;
    let mut files = vec![];
    let mut certs = vec![];
    for (secret, names) in [
        ("cert-a", vec!["a.test"]),
        ("cert-b", vec!["b.test"]),
        ("cert-c", vec!["c.test"]),
        ("cert-wild", vec!["*.wild.test"]),
        ("cert-default", vec!["default.test"]),
    ] {
        let (crt, key) = pki.leaf(&names);
        files.push((
            format!("{secret}.yaml"),
            tls_secret("default", secret, &crt, &key),
        ));
        certs.push(crt);
    }
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: tls}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  listeners:
  - {{name: a, protocol: HTTPS, port: {port}, hostname: a.test, tls: {{certificateRefs: [{{name: cert-a}}]}}}}
  - {{name: b, protocol: HTTPS, port: {port}, hostname: b.test, tls: {{certificateRefs: [{{name: cert-b}}]}}}}
  - {{name: c, protocol: HTTPS, port: {port}, hostname: c.test, tls: {{certificateRefs: [{{name: cert-c}}]}}}}
  - {{name: wild, protocol: HTTPS, port: {port}, hostname: '*.wild.test', tls: {{certificateRefs: [{{name: cert-wild}}]}}}}
  - {{name: default, protocol: HTTPS, port: {port}, tls: {{certificateRefs: [{{name: cert-default}}]}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: all}}
spec:
  parentRefs: [{{name: tls}}]
  rules:
  - backendRefs: [{{group: weir.dev, kind: Backend, name: a}}]
---
{}",
        backend("default", "a", &[a])
    );
    let mut all: Vec<(&str, String)> = files.iter().map(|(n, y)| (n.as_str(), y.clone())).collect();
    all.push(("gw.yaml", gateway));
    let gw = Gateway::start(&all).await;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();

    let h2 = pki.client_config(&[b"h2", b"http/1.1"]);
    let h1 = pki.client_config(&[b"http/1.1"]);
    for (sni, cert) in [
        ("a.test", &certs[0]),
        ("b.test", &certs[1]),
        ("c.test", &certs[2]),
        ("x.wild.test", &certs[3]),
        ("default.test", &certs[4]),
    ] {
        let r = https(addr, h2.clone(), sni, "/hello")
            .await
            .unwrap_or_else(|e| panic!("{sni}: {e}"));
        assert_eq!(r.peer_cert, der_of(cert), "certificate for {sni}");
        assert_eq!(r.alpn.as_deref(), Some(&b"h2"[..]));
        assert_eq!(r.resp.version, http::Version::HTTP_2);
        assert_eq!(r.resp.status, 200, "{sni}");
        assert_eq!(r.resp.echo_name(), Some("a"));
        assert_eq!(r.resp.json()["headers"]["x-forwarded-proto"], "https");
    }
    let r = https(addr, h1, "b.test", "/").await.unwrap();
    assert_eq!(r.resp.version, http::Version::HTTP_11);
    assert_eq!(r.resp.status, 200);
    assert_eq!(r.peer_cert, der_of(&certs[1]));

    // An unknown name gets the default certificate, which does not name it: the client
    // refuses it. (The default listener has no hostname, so it serves every host.)
    let err = https(addr, h2.clone(), "unknown.test", "/")
        .await
        .err()
        .expect("certificate mismatch");
    assert!(err.to_string().contains("certificate"), "{err}");

    // A broken certificate disables only the listener that uses it.
    gw.write(
        "cert-b.yaml",
        &tls_secret("default", "cert-b", "not a certificate", "nor a key"),
    );
    assert!(
        eventually(std::time::Duration::from_secs(10), || {
            let h2 = h2.clone();
            async move { https(addr, h2, "b.test", "/").await.is_err() }
        })
        .await,
        "b.test still served with a broken certificate"
    );
    let r = https(addr, h2.clone(), "a.test", "/").await.unwrap();
    assert_eq!(r.resp.status, 200);
    assert_eq!(r.peer_cert, der_of(&certs[0]));
    gw.gw.stop().await;
}
