//! End-to-end tests of request normalization: the path and the host a request is routed
//! on are the ones the backend gets (HTTP/1.1 and HTTP/2 clients, raw TCP for requests
//! that client libraries refuse to send).

mod support;

use http::Method;
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

/// Routes by host to backends `a`, `b` and a catch-all `any`, so that a host weir
/// used to accept shows up as a 200 from some backend.
async fn host_routing_proxy(a: &Backend, b: &Backend, any: &Backend) -> Proxy {
    Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("a.test"), vec![rule("/", forward(&[("a", 1)]))]),
        vhost(Some("b.test"), vec![rule("/", forward(&[("b", 1)]))]),
        vhost(Some("h2c.test"), vec![rule("/", forward(&[("b-h2c", 1)]))]),
        vhost(None, vec![rule("/", forward(&[("any", 1)]))]),
        cluster("a", &[a.addr], UpstreamProtocol::Http1),
        cluster("b", &[b.addr], UpstreamProtocol::Http1),
        cluster("b-h2c", &[b.addr], UpstreamProtocol::H2c),
        cluster("any", &[any.addr], UpstreamProtocol::Http1),
    ])
    .await
}

#[tokio::test]
async fn repeated_missing_and_malformed_hosts_are_rejected() {
    let (a, b, any) = (
        Backend::start("a").await,
        Backend::start("b").await,
        Backend::start("any").await,
    );
    let p = host_routing_proxy(&a, &b, &any).await;
    for host_lines in [
        "Host: a.test\r\nHost: a.test\r\n",
        "Host: a.test\r\nHost: b.test\r\n",
        "Host: a.test:99999\r\n",
        "Host: a.test:8o\r\n",
        "Host: a@b.test\r\n",
        "Host: a.test,b.test\r\n",
        "Host: :80\r\n",
        "Host: a .test\r\n",
        "",
    ] {
        let req = format!("GET / HTTP/1.1\r\n{host_lines}Connection: close\r\n\r\n");
        let resp = raw(p.addr, req.as_bytes()).await;
        assert_eq!(
            raw_status(&resp),
            400,
            "{host_lines:?}: {}",
            String::from_utf8_lossy(&resp)
        );
    }
    assert_eq!(
        a.connections() + b.connections() + any.connections(),
        0,
        "nothing reached a backend"
    );
    // HTTP/1.0 may name no host: the catch-all serves it.
    let resp = raw(p.addr, b"GET / HTTP/1.0\r\n\r\n").await;
    assert_eq!(raw_status(&resp), 200, "{}", String::from_utf8_lossy(&resp));
    assert!(String::from_utf8_lossy(&resp).contains("backend=any"));
}

/// RFC 9112 §3.2.2: the authority of an absolute-form target wins over Host, and the
/// backend that is routed to gets that host.
#[tokio::test]
async fn absolute_form_authority_is_routed_and_forwarded() {
    let (a, b, any) = (
        Backend::start("a").await,
        Backend::start("b").await,
        Backend::start("any").await,
    );
    let p = host_routing_proxy(&a, &b, &any).await;
    let resp = raw(
        p.addr,
        b"GET http://b.test/x HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    let text = String::from_utf8_lossy(&resp);
    assert_eq!(raw_status(&resp), 200, "{text}");
    assert!(text.contains("backend=b\n"), "{text}");
    assert!(text.contains("\nhost=b.test\n"), "{text}");
    assert!(text.contains("\nx-forwarded-host=b.test\n"), "{text}");
}

/// RFC 9113 §8.3.1: with both `:authority` and a different `host`, `:authority` is
/// routed on and `host` is replaced by it, for HTTP/1.1 and h2c upstreams alike.
#[tokio::test]
async fn http2_authority_replaces_a_different_host_header() {
    let (a, b, any) = (
        Backend::start("a").await,
        Backend::start("b").await,
        Backend::start("any").await,
    );
    let p = host_routing_proxy(&a, &b, &any).await;
    let mut c = Conn::h2c(p.addr).await;
    for authority in ["b.test", "h2c.test"] {
        let r = c
            .request(Method::GET, authority, "/x", &[("host", "a.test")])
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.backend(), "b", "routed on :authority");
        assert_eq!(
            r.field("host"),
            Some(authority),
            "the backend sees the routed host"
        );
        assert_eq!(r.field("x-forwarded-host"), Some(authority));
    }
    // The same host in both is kept, once.
    let r = c
        .request(Method::GET, "b.test", "/x", &[("host", "b.test")])
        .await;
    assert_eq!((r.backend(), r.field("host")), ("b", Some("b.test")));
    let r = c.get("b.test:8080", "/x").await;
    assert_eq!((r.backend(), r.field("host")), ("b", Some("b.test:8080")));
}
