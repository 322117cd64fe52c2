//! Client certificate validation on HTTPS listeners (Gateway `spec.tls.frontend`): a
//! client certificate of the configured CA is served, none or another CA's is refused
//! (`AllowValidOnly`) or served anyway (`AllowInsecureFallback`), and changing one port's
//! CA ConfigMap fails no request on another port.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use crate::support::*;

/// A ConfigMap holding `ca_pem` under `ca.crt`.
fn ca_config_map(name: &str, ca_pem: &str) -> String {
    let indent: String = ca_pem.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: default}}\ndata:\n  ca.crt: |\n{indent}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ftls_client_certificates_are_validated_per_port_and_cas_change_live() {
    // `ours` signs the server certificate and the clients it trusts; `theirs` is another
    // CA with a client of its own.
    let ours = Pki::new();
    let theirs = Pki::new();
    let (strict, fallback, other) = (free_port(), free_port(), free_port());
    let a = echo("a").await;
    let (crt, key) = ours.leaf(&["mtls.test"]);
    let good_client = ours.leaf(&["client.ours"]);
    let their_client = theirs.leaf(&["client.theirs"]);
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: mtls}}
spec:
  gatewayClassName: weir
  addresses: [{{value: 127.0.0.1}}]
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{{group: '', kind: ConfigMap, name: client-ca}}]
      perPort:
      - port: {fallback}
        tls:
          validation:
            mode: AllowInsecureFallback
            caCertificateRefs: [{{group: '', kind: ConfigMap, name: client-ca}}]
      - port: {other}
        tls:
          validation:
            caCertificateRefs: [{{group: '', kind: ConfigMap, name: other-ca}}]
  listeners:
  - {{name: strict, protocol: HTTPS, port: {strict}, tls: {{certificateRefs: [{{name: server}}]}}}}
  - {{name: fallback, protocol: HTTPS, port: {fallback}, tls: {{certificateRefs: [{{name: server}}]}}}}
  - {{name: other, protocol: HTTPS, port: {other}, tls: {{certificateRefs: [{{name: server}}]}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: all}}
spec:
  parentRefs: [{{name: mtls}}]
  rules:
  - backendRefs: [{{group: weir.dev, kind: Backend, name: a}}]
---
{}",
        backend("default", "a", &[a])
    );
    let gw = Gateway::start(&[
        ("gw.yaml", gateway),
        ("server.yaml", tls_secret("default", "server", &crt, &key)),
        ("client-ca.yaml", ca_config_map("client-ca", &ours.ca_pem())),
        ("other-ca.yaml", ca_config_map("other-ca", &theirs.ca_pem())),
    ])
    .await;
    let at = |port: u16| -> SocketAddr { ([127, 0, 0, 1], port).into() };
    let alpn: &[&[u8]] = &[b"h2", b"http/1.1"];
    let with_ours = ours.client_config_with_cert(alpn, (&good_client.0, &good_client.1));
    let with_theirs = ours.client_config_with_cert(alpn, (&their_client.0, &their_client.1));
    let without = ours.client_config(alpn);
    let status = |port: u16, cfg: Arc<rustls::ClientConfig>| async move {
        https(at(port), cfg, "mtls.test", "/")
            .await
            .map(|r| r.resp.status)
    };

    // AllowValidOnly: only a certificate of the configured CA gets in.
    assert_eq!(status(strict, with_ours.clone()).await.unwrap(), 200);
    assert!(
        status(strict, without.clone()).await.is_err(),
        "served without a client certificate"
    );
    assert!(
        status(strict, with_theirs.clone()).await.is_err(),
        "served with another CA's certificate"
    );
    // AllowInsecureFallback: everyone gets in.
    for cfg in [&with_ours, &with_theirs, &without] {
        assert_eq!(status(fallback, cfg.clone()).await.unwrap(), 200);
    }
    // The per-port CA: their client gets in there, ours does not.
    assert_eq!(status(other, with_theirs.clone()).await.unwrap(), 200);
    assert!(status(other, with_ours.clone()).await.is_err());
    let rejected = gw.admin_get("/metrics").await;
    assert!(
        rejected.body.lines().any(
            |l| l.starts_with("weir_client_certificates_rejected_total{") && !l.ends_with(" 0")
        ),
        "rejections are counted"
    );

    // Changing the CA of the strict port, while a client loops on the other port: no
    // request there fails.
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicU32::new(0));
    let loop_task = {
        let (stop, failures, cfg) = (stop.clone(), failures.clone(), with_theirs.clone());
        tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(Ordering::SeqCst) && n < 20_000 {
                match https(at(other), cfg.clone(), "mtls.test", "/").await {
                    Ok(r) if r.resp.status == 200 => {}
                    _ => {
                        failures.fetch_add(1, Ordering::SeqCst);
                    }
                }
                n += 1;
            }
            n
        })
    };
    gw.write(
        "client-ca.yaml",
        &ca_config_map("client-ca", &theirs.ca_pem()),
    );
    assert!(
        eventually(Duration::from_secs(10), || {
            let cfg = with_theirs.clone();
            async move { https(at(strict), cfg, "mtls.test", "/").await.is_ok() }
        })
        .await,
        "the new CA was not applied"
    );
    assert!(
        status(strict, with_ours.clone()).await.is_err(),
        "the old CA still admits"
    );
    stop.store(true, Ordering::SeqCst);
    let requests = loop_task.await.unwrap();
    assert!(requests > 0);
    assert_eq!(
        failures.load(Ordering::SeqCst),
        0,
        "{requests} requests on the other port"
    );

    // A CA ConfigMap that goes away takes its listener down (never open without a CA).
    gw.remove("client-ca.yaml");
    assert!(
        eventually(Duration::from_secs(10), || {
            let cfg = with_theirs.clone();
            async move { https(at(strict), cfg, "mtls.test", "/").await.is_err() }
        })
        .await,
        "the strict listener is still served without its CA"
    );
    assert_eq!(status(other, with_theirs.clone()).await.unwrap(), 200);
    gw.gw.stop().await;
}
