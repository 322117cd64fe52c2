//! End-to-end tests of request normalization: the path and the host a request is routed
//! on are the ones the backend gets (HTTP/1.1 and HTTP/2 clients, raw TCP for requests
//! that client libraries refuse to send).

mod support;

use support::*;
use weir_model::{ListenerSettings, Protocol, UpstreamProtocol};

/// The case: a route whose only rule is `PathPrefix /public` must not reach
/// `/private` through dot segments, in any spelling, over either protocol.
#[tokio::test]
async fn dot_segments_cannot_leave_a_prefix_route() {
    let public = Backend::start("public").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(
            Some("a.test"),
            vec![rule("/public", forward(&[("public", 1)]))],
        ),
        cluster("public", &[public.addr], UpstreamProtocol::Http1),
    ])
    .await;
    for mut c in [Conn::h1(p.addr).await, Conn::h2c(p.addr).await] {
        for path in [
            "/public/../private",
            "/public/%2e%2e/private",
            "/public/%2E%2E/private",
            "/public/.%2e/private",
            "/public/%2e./private",
            "/public/./../private",
            "/public/a/../../private",
        ] {
            let r = c.get("a.test", path).await;
            assert_eq!(
                (r.status, r.backend()),
                (404, ""),
                "{path} reached a backend: {}",
                r.body
            );
        }
        for (path, forwarded) in [
            ("/public/./a/%2e%2e/b", "/public/b"),
            ("/x/../public/%7Euser", "/public/~user"),
            ("/public//a///b", "/public/a/b"),
            ("/public/%61%2d", "/public/a-"),
            ("/public/a%2fb%5c/c", "/public/a%2Fb%5C/c"),
            ("/public/p?q=/../%2e&r=%2F", "/public/p?q=/../%2e&r=%2F"),
            ("/public/%2e%2e%2Fsecret", "/public/..%2Fsecret"),
        ] {
            let r = c.get("a.test", path).await;
            assert_eq!(r.status, 200, "{path}: {}", r.body);
            assert_eq!(r.field("path"), Some(forwarded), "{path}");
        }
    }
}

#[tokio::test]
async fn paths_that_cannot_be_normalized_are_rejected() {
    let b = Backend::start("b").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(None, vec![rule("/", forward(&[("b", 1)]))]),
        cluster("b", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    for mut c in [Conn::h1(p.addr).await, Conn::h2c(p.addr).await] {
        for path in ["/a%00b", "/a/%zz", "/a/%4", "/a%", "/%2e%00/x"] {
            let r = c.get("a.test", path).await;
            assert_eq!(
                (r.status, r.body.as_str()),
                (400, "bad request\n"),
                "{path}"
            );
        }
    }
    let raw_control = raw(
        p.addr,
        b"GET /a\x01b HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&raw_control), 400);
    assert_eq!(b.connections(), 0, "nothing reached the backend");
}

#[tokio::test]
async fn slashes_are_kept_when_merging_is_off() {
    let b = Backend::start("b").await;
    let mut settings = ListenerSettings::default();
    settings.paths.merge_slashes = false;
    let p = Proxy::start(vec![
        listener_with(Protocol::Http, settings),
        vhost(None, vec![rule("/public", forward(&[("b", 1)]))]),
        cluster("b", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let mut c = Conn::h1(p.addr).await;
    for (path, forwarded) in [
        ("/public//a", "/public//a"),
        ("/public//../a", "/public/a"),
        ("/public/%2E/a//", "/public/a//"),
    ] {
        let r = c.get("a.test", path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert_eq!(r.field("path"), Some(forwarded), "{path}");
    }
    assert_eq!(c.get("a.test", "/public/../private").await.status, 404);
}

/// Absolute-form targets are normalized too; `*` is routed as it is (and matches no
/// path rule), not rejected.
#[tokio::test]
async fn absolute_form_and_asterisk_targets() {
    let b = Backend::start("b").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(None, vec![rule("/public", forward(&[("b", 1)]))]),
        cluster("b", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let escaped = raw(
        p.addr,
        b"GET http://a.test/public/%2e%2e/private HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(
        raw_status(&escaped),
        404,
        "{}",
        String::from_utf8_lossy(&escaped)
    );
    let kept = raw(
        p.addr,
        b"GET http://a.test/public/./x?y=/./ HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    let text = String::from_utf8_lossy(&kept);
    assert_eq!(raw_status(&kept), 200, "{text}");
    assert!(text.contains("\npath=/public/x?y=/./\n"), "{text}");
    let options = raw(
        p.addr,
        b"OPTIONS * HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(
        raw_status(&options),
        404,
        "{}",
        String::from_utf8_lossy(&options)
    );
}
