//! End-to-end tests of TLS listeners: certificates by SNI (exact, wildcard, default),
//! HTTP/2 and HTTP/1.1 by ALPN, handshake failures staying local.

mod support;

use http::Version;
use support::*;
use weir_model::{Delta, DeltaBatch, Protocol, Resource, ResourceKey, UpstreamProtocol};

#[tokio::test]
async fn certificate_by_sni_and_alpn() {
    let ca = Ca::new();
    let (a, a_der) = ca.leaf(&["a.test"]);
    let (b, b_der) = ca.leaf(&["b.test"]);
    let (c, c_der) = ca.leaf(&["c.test"]);
    let (wild, wild_der) = ca.leaf(&["*.wild.test"]);
    let (default, default_der) = ca.leaf(&["default.test", "fallback.test"]);
    let backend = Backend::start("b1").await;
    let p = Proxy::start(vec![
        listener(Protocol::Https),
        Resource::Certificate(a.clone()),
        Resource::Certificate(b.clone()),
        Resource::Certificate(c.clone()),
        Resource::Certificate(wild.clone()),
        Resource::Certificate(default.clone()),
        sni(Some("a.test"), &a),
        sni(Some("b.test"), &b),
        sni(Some("c.test"), &c),
        sni(Some("*.wild.test"), &wild),
        sni(None, &default),
        vhost(None, vec![rule("/", forward(&[("c1", 1)]))]),
        cluster("c1", &[backend.addr], UpstreamProtocol::Http1),
    ])
    .await;

    let cases = [
        ("a.test", &a_der),
        ("b.test", &b_der),
        ("c.test", &c_der),
        ("x.wild.test", &wild_der),
        ("default.test", &default_der),
        ("fallback.test", &default_der),
    ];
    for (name, expected) in cases {
        for alpn in [&[&b"h2"[..], &b"http/1.1"[..]][..], &[&b"http/1.1"[..]][..]] {
            let (mut conn, leaf) = Conn::tls(p.addr, name, &ca.der(), alpn)
                .await
                .expect("handshake");
            assert!(leaf == *expected, "certificate presented for {name}");
            let r = conn.get(name, "/tls").await;
            assert_eq!(r.status, 200, "{}", r.body);
            let want = if alpn.len() == 2 {
                Version::HTTP_2
            } else {
                Version::HTTP_11
            };
            assert_eq!(r.version, want, "{name} {alpn:?}");
            assert_eq!(r.field("x-forwarded-proto"), Some("https"));
            assert_eq!(r.field("host"), Some(name));
            assert_eq!(r.backend(), "b1");
        }
    }
    // x.wild.test's wildcard certificate does not cover wild.test itself: the default is
    // presented, and the client rejects it.
    assert!(
        Conn::tls(p.addr, "wild.test", &ca.der(), &[b"h2"])
            .await
            .is_err()
    );
    // a failed handshake closes only that connection
    let (mut conn, _) = Conn::tls(p.addr, "a.test", &ca.der(), &[b"h2"])
        .await
        .expect("handshake");
    assert!(
        Conn::tls(p.addr, "zzz.wild2.test", &ca.der(), &[b"h2"])
            .await
            .is_err()
    );
    assert_eq!(conn.get("a.test", "/still").await.status, 200);
}

#[tokio::test]
async fn no_certificate_fails_the_handshake_until_one_is_added() {
    let ca = Ca::new();
    let (a, _) = ca.leaf(&["a.test"]);
    let p = Proxy::start(vec![
        listener(Protocol::Https),
        vhost(None, vec![rule("/", forward(&[("none", 1)]))]),
    ])
    .await;
    assert!(
        Conn::tls(p.addr, "a.test", &ca.der(), &[b"h2"])
            .await
            .is_err()
    );
    let report =
        p.dp.apply(&upserts(vec![
            Resource::Certificate(a.clone()),
            sni(Some("a.test"), &a),
        ]))
        .await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    let (mut conn, _) = Conn::tls(p.addr, "a.test", &ca.der(), &[b"h2"])
        .await
        .expect("handshake");
    assert_eq!(
        conn.get("a.test", "/").await.status,
        500,
        "cluster is missing"
    );
    let report =
        p.dp.apply(&DeltaBatch {
            deltas: vec![Delta::Remove(ResourceKey::Sni(key(), host(Some("a.test"))))],
        })
        .await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert!(
        Conn::tls(p.addr, "a.test", &ca.der(), &[b"h2"])
            .await
            .is_err()
    );
}

#[tokio::test]
async fn protocol_change_keeps_the_socket() {
    let ca = Ca::new();
    let (a, a_der) = ca.leaf(&["a.test"]);
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        Resource::Certificate(a.clone()),
        sni(Some("a.test"), &a),
        vhost(None, vec![rule("/", forward(&[("none", 1)]))]),
    ])
    .await;
    assert_eq!(get(p.addr, "a.test", "/").await.status, 500);
    let report = p.dp.apply(&upserts(vec![listener(Protocol::Https)])).await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(p.dp.bound_addr(&key()), Some(p.addr));
    let (mut conn, leaf) = Conn::tls(p.addr, "a.test", &ca.der(), &[b"http/1.1"])
        .await
        .expect("handshake");
    assert!(leaf == a_der);
    assert_eq!(conn.get("a.test", "/").await.status, 500);
}

/// Gateway API's `GatewayHTTPSListenerDetectMisdirectedRequests`: on a socket with
/// several HTTPS listeners, a request whose host belongs to another listener than the one
/// the connection's server name chose is answered 421 (over HTTP/2 connection reuse as
/// over HTTP/1.1); hosts of the same listener, and names both left to the catch-all, are
/// served (or 404).
#[tokio::test]
async fn a_host_of_another_listener_than_the_server_name_is_misdirected() {
    let ca = Ca::new();
    // One certificate for every name, as a client coalescing HTTP/2 connections sees it.
    let (all, _) = ca.leaf(&["a.test", "second.test", "*.wild.test", "unknown.test"]);
    let backend = Backend::start("b1").await;
    let p = Proxy::start(vec![
        listener(Protocol::Https),
        Resource::Certificate(all.clone()),
        sni(None, &all),
        sni(Some("second.test"), &all),
        sni(Some("*.wild.test"), &all),
        sni(Some("four.wild.test"), &all),
        vhost(Some("a.test"), vec![rule("/", forward(&[("c1", 1)]))]),
        vhost(Some("second.test"), vec![rule("/", forward(&[("c1", 1)]))]),
        vhost(Some("*.wild.test"), vec![rule("/", forward(&[("c1", 1)]))]),
        vhost(
            Some("four.wild.test"),
            vec![rule("/", forward(&[("c1", 1)]))],
        ),
        cluster("c1", &[backend.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let cases = [
        ("a.test", "a.test", 200),
        ("a.test", "second.test", 421),
        ("a.test", "unknown.test", 404),
        ("second.test", "second.test", 200),
        ("second.test", "a.test", 421),
        ("second.test", "unknown.test", 421),
        ("three.wild.test", "five.wild.test", 200),
        ("three.wild.test", "four.wild.test", 421),
        ("four.wild.test", "five.wild.test", 421),
        ("unknown.test", "a.test", 200),
    ];
    for alpn in [&[&b"h2"[..]][..], &[&b"http/1.1"[..]][..]] {
        for (server_name, host, status) in cases {
            let (mut conn, _) = Conn::tls(p.addr, server_name, &ca.der(), alpn)
                .await
                .expect("handshake");
            let r = conn.get(host, "/").await;
            assert_eq!(r.status, status, "SNI {server_name}, host {host}, {alpn:?}");
        }
    }
}
