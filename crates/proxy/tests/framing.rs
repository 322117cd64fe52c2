//! End-to-end tests of message framing and protocol detection: what an upstream or a
//! client sends that a client library would not (raw TCP), and which protocol a
//! connection is served in (plaintext detection, TLS by ALPN).

mod support;

use http::Method;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_model::{Protocol, UpstreamProtocol};

/// RFC 9112 §6.3: an upstream response with both `Content-Length` and chunked
/// `Transfer-Encoding` is framed by the chunks; relayed with its stale length, the client
/// would get 5 of 10 bytes and believe it had all of them.
#[tokio::test]
async fn upstream_length_and_chunked_is_relayed_by_its_chunks() {
    let (backend, _task) = raw_backend(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n0\r\n\r\n",
        8,
    )
    .await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(None, vec![rule("/", forward(&[("raw", 1)]))]),
        cluster("raw", &[backend], UpstreamProtocol::Http1),
    ])
    .await;
    for mut c in [Conn::h1(p.addr).await, Conn::h2c(p.addr).await] {
        for _ in 0..2 {
            let r = c.get("a.test", "/").await;
            assert_eq!(r.status, 200);
            assert_eq!(r.body, "0123456789", "{:?}", r.version);
            assert_eq!(r.headers.get("content-length"), None, "{:?}", r.version);
        }
    }
}

/// A malformed chunked request body is the client's fault: 400, not 502.
#[tokio::test]
async fn malformed_chunked_request_body_is_a_client_error() {
    let b = Backend::start("b").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(Some("h1.test"), vec![rule("/", forward(&[("h1", 1)]))]),
        vhost(Some("h2c.test"), vec![rule("/", forward(&[("h2c", 1)]))]),
        cluster("h1", &[b.addr], UpstreamProtocol::Http1),
        cluster("h2c", &[b.addr], UpstreamProtocol::H2c),
    ])
    .await;
    for host in ["h1.test", "h2c.test"] {
        for body in ["zz\r\nhello\r\n0\r\n\r\n", "5\r\nhello\r\n-1\r\n\r\n"] {
            let req = format!(
                "POST /up HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{body}"
            );
            let resp = raw(p.addr, req.as_bytes()).await;
            let text = String::from_utf8_lossy(&resp);
            assert_eq!(raw_status(&resp), 400, "{host} {body:?}: {text}");
            assert!(text.ends_with("bad request body\n"), "{text}");
        }
    }
    let m = p.metrics();
    assert!(
        m.contains(r#"weir_requests_total{gateway="test/gw",listener="web",class="4xx"} 4"#),
        "{m}"
    );
    // A well-formed chunked body still goes through.
    let resp = raw(
        p.addr,
        b"POST /up HTTP/1.1\r\nHost: h1.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    let text = String::from_utf8_lossy(&resp);
    assert_eq!(raw_status(&resp), 200, "{text}");
    assert!(text.contains("\nbody-len=5\n"), "{text}");
}

/// What h2spec sends in its case 3.5/2: on a plaintext listener (HTTP/1.1 and h2c), a
/// connection that opens with neither is closed without an answer, not sent an HTTP/1.1
/// 400 that an HTTP/2 client reads as a broken frame.
#[tokio::test]
async fn plaintext_connections_must_open_with_http1_or_the_http2_preface() {
    let b = Backend::start("b").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(None, vec![rule("/", forward(&[("b", 1)]))]),
        cluster("b", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    for opening in [
        &b"INVALID CONNECTION PREFACE\r\n\r\n"[..],
        b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n",
        b"GET / HTTP/2.0\r\nHost: a.test\r\n\r\n",
        b"\x16\x03\x01\x00\x05hello",
    ] {
        // h2spec needs the close to be a FIN: it reads a reset as an error.
        let mut tcp = tokio::net::TcpStream::connect(p.addr)
            .await
            .expect("connect");
        tcp.write_all(opening).await.expect("write");
        let mut buf = [0u8; 1024];
        let read = tokio::time::timeout(STEP, tcp.read(&mut buf))
            .await
            .expect("closed within the step limit");
        assert!(
            matches!(read, Ok(0)),
            "{:?}: {:?}",
            String::from_utf8_lossy(opening),
            read.map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
        );
    }
    // HTTP/1.1 still works, also when its request line arrives one byte at a time.
    let mut tcp = tokio::net::TcpStream::connect(p.addr)
        .await
        .expect("connect");
    let request = b"\r\nGET /slowly HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n";
    for byte in &request[..request.len() - 4] {
        tcp.write_all(std::slice::from_ref(byte))
            .await
            .expect("write");
    }
    let resp = exchange(&mut tcp, b"\r\n\r\n").await;
    assert_eq!(raw_status(&resp), 200, "{}", String::from_utf8_lossy(&resp));
    // And so does h2c with prior knowledge.
    let r = Conn::h2c(p.addr).await.get("a.test", "/h2").await;
    assert_eq!((r.status, r.version), (200, http::Version::HTTP_2));
}

/// Over TLS, ALPN decides the protocol: `h2` is served as HTTP/2 only and anything else
/// as HTTP/1.1 only.
#[tokio::test]
async fn tls_serves_only_the_protocol_alpn_chose() {
    let ca = Ca::new();
    let (cert, _) = ca.leaf(&["a.test"]);
    let b = Backend::start("b").await;
    let p = Proxy::start(vec![
        listener(Protocol::Https),
        weir_model::Resource::Certificate(cert.clone()),
        sni(None, &cert),
        vhost(None, vec![rule("/", forward(&[("b", 1)]))]),
        cluster("b", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let request = b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n";
    // The HTTP/2 preface and an empty SETTINGS frame.
    let mut h2_opening = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    h2_opening.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);

    for alpn in [&[&b"http/1.1"[..]][..], &[]] {
        let mut tls = tls_stream(p.addr, "a.test", &ca.der(), alpn)
            .await
            .expect("TLS handshake");
        let resp = exchange(&mut tls, &h2_opening).await;
        assert!(
            resp.is_empty(),
            "HTTP/2 spoken after ALPN {alpn:?}: {resp:?}"
        );
        let mut tls = tls_stream(p.addr, "a.test", &ca.der(), alpn)
            .await
            .expect("TLS handshake");
        let resp = exchange(&mut tls, request).await;
        assert_eq!(raw_status(&resp), 200, "{}", String::from_utf8_lossy(&resp));
    }

    let mut tls = tls_stream(p.addr, "a.test", &ca.der(), &[b"h2"])
        .await
        .expect("TLS handshake");
    let resp = exchange(&mut tls, request).await;
    assert!(
        !resp.starts_with(b"HTTP/"),
        "HTTP/1.1 spoken after ALPN h2: {}",
        String::from_utf8_lossy(&resp)
    );
    let (mut c, _) = Conn::tls(p.addr, "a.test", &ca.der(), &[b"h2"])
        .await
        .expect("handshake");
    let r = c.request(Method::GET, "a.test", "/", &[]).await;
    assert_eq!((r.status, r.version), (200, http::Version::HTTP_2));
}
