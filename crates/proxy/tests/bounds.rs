//! Every connection state has a limit, and connections and request heads are bounded:
//! silent connections, TLS sessions that say nothing, slow request heads, idle keep-alive
//! and HTTP/2 connections, stalled request bodies and streams, upstreams that never
//! answer, too many connections, oversized heads. Timeouts are set short (hundreds of
//! milliseconds) and each expected outcome is awaited for at most `STEP`; nothing asserts
//! how long anything took.

mod support;

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Version};
use http_body::{Body, Frame};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_model::{ListenerSettings, Protocol, Resource, UpstreamProtocol};

fn settings(f: impl FnOnce(&mut ListenerSettings)) -> ListenerSettings {
    let mut s = ListenerSettings::default();
    f(&mut s);
    s
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn raw_get(s: &mut TcpStream, host: &str, path: &str) -> Option<RawResp> {
    let req = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    read_raw_response(s).await
}

/// Everything the peer sends until it closes (at most `STEP`).
async fn read_until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(STEP, s.read_to_end(&mut out)).await;
    out
}

/// A backend that accepts connections and reads requests but never answers.
async fn mute_backend() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
            });
        }
    });
    addr
}

// ---------------------------------------------------------------- handshake

#[tokio::test]
async fn silent_connections_are_closed_and_others_still_served() {
    let p = Proxy::start(vec![
        listener_with(Protocol::Http, settings(|s| s.timeouts.handshake = ms(500))),
        ok_rule(),
    ])
    .await;
    let mut silent = Vec::with_capacity(300);
    for _ in 0..300 {
        silent.push(TcpStream::connect(p.addr).await.expect("connect"));
    }
    // While they are open, a client that speaks is served.
    let r = get(p.addr, "a.test", "/").await;
    assert_eq!(r.status, 200, "{}", r.body);
    for (i, s) in silent.iter_mut().enumerate() {
        assert!(closed_by_peer(s).await, "silent connection {i} still open");
    }
    let closed = p.metric(r#"weir_downstream_timeouts_total{state="handshake"}"#);
    assert!(closed >= 300, "{}", p.metrics());
}

#[tokio::test]
async fn tls_connections_that_say_nothing_are_closed() {
    let ca = Ca::new();
    let (cert, _) = ca.leaf(&["a.test"]);
    let p = Proxy::start(vec![
        listener_with(
            Protocol::Https,
            settings(|s| s.timeouts.handshake = ms(300)),
        ),
        Resource::Certificate(cert.clone()),
        sni(None, &cert),
        ok_rule(),
    ])
    .await;
    // No ClientHello at all.
    let mut tcp = TcpStream::connect(p.addr).await.expect("connect");
    // Half a ClientHello (a TLS record header announcing more than follows).
    let mut partial = TcpStream::connect(p.addr).await.expect("connect");
    partial
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .expect("write");
    // A completed handshake and then no request.
    let mut quiet = tls_stream(p.addr, "a.test", &ca.der(), &[b"http/1.1"])
        .await
        .expect("handshake");
    assert!(closed_by_peer(&mut tcp).await, "no ClientHello");
    assert!(closed_by_peer(&mut partial).await, "partial ClientHello");
    assert!(
        closed_by_peer(&mut quiet).await,
        "no request after the handshake"
    );
    // A client that speaks is served.
    let (mut c, _) = Conn::tls(p.addr, "a.test", &ca.der(), &[b"h2"])
        .await
        .expect("handshake");
    assert_eq!(c.get("a.test", "/").await.status, 200);
    assert!(p.metric(r#"weir_downstream_timeouts_total{state="handshake"}"#) >= 3);
}

// ---------------------------------------------------------------- request heads

#[tokio::test]
async fn request_heads_that_do_not_end_are_closed() {
    let p = Proxy::start(vec![
        listener_with(
            Protocol::Http,
            settings(|s| s.timeouts.request_header = ms(300)),
        ),
        ok_rule(),
    ])
    .await;
    // A head that stops half-way, after a request on the same (keep-alive) connection:
    // the idle limit (60 s) does not apply once a head has begun.
    let mut s = TcpStream::connect(p.addr).await.expect("connect");
    assert_eq!(
        raw_get(&mut s, "a.test", "/").await.map(|r| r.status),
        Some(200)
    );
    s.write_all(b"GET / HTTP/1.1\r\nhost: a.te")
        .await
        .expect("write");
    assert!(closed_by_peer(&mut s).await, "unfinished head kept open");

    // A head trickled one field at a time is bounded from its first byte, not per byte.
    let mut s = TcpStream::connect(p.addr).await.expect("connect");
    let mut closed = false;
    for i in 0..200 {
        let line = format!("x-field-{i}: 1\r\n");
        let line = if i == 0 {
            "GET / HTTP/1.1\r\n".to_string()
        } else {
            line
        };
        if s.write_all(line.as_bytes()).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(ms(50)).await;
    }
    assert!(closed, "a trickled head kept the connection open for 10 s");
    assert!(p.metric(r#"weir_downstream_timeouts_total{state="request_header"}"#) >= 2);
}

#[tokio::test]
async fn http1_head_limits_answer_431() {
    let b = Backend::start("b1").await;
    let p = Proxy::start(vec![
        listener_with(Protocol::Http, settings(|s| s.limits.max_headers = 20)),
        vhost(None, vec![rule("/", forward(&[("c1", 1)]))]),
        cluster("c1", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let mut good = Conn::h1(p.addr).await;
    assert_eq!(good.get("a.test", "/").await.status, 200);

    // 70 KiB of header (the default limit is 64 KiB): 431, connection closed.
    let mut s = TcpStream::connect(p.addr).await.expect("connect");
    let big = format!(
        "GET / HTTP/1.1\r\nhost: a.test\r\nx-big: {}\r\n\r\n",
        "a".repeat(70 * 1024)
    );
    let _ = s.write_all(big.as_bytes()).await;
    let answer = read_until_closed(&mut s).await;
    assert!(
        answer.starts_with(b"HTTP/1.1 431"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    assert_eq!(good.get("a.test", "/").await.status, 200);

    // 60 KiB fits.
    let mut s = TcpStream::connect(p.addr).await.expect("connect");
    let fits = format!(
        "GET / HTTP/1.1\r\nhost: a.test\r\nx-big: {}\r\n\r\n",
        "a".repeat(60 * 1024)
    );
    s.write_all(fits.as_bytes()).await.expect("write");
    let r = read_raw_response(&mut s).await.expect("response");
    assert_eq!(r.status, 200, "{}", r.head);

    // 21 fields (the limit here is 20): 431; 20 pass.
    for (fields, status) in [(21, 431), (20, 200)] {
        let mut s = TcpStream::connect(p.addr).await.expect("connect");
        let mut req = String::from("GET / HTTP/1.1\r\nhost: a.test\r\n");
        for i in 1..fields {
            req.push_str(&format!("x-f{i}: v\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).await.expect("write");
        let r = read_raw_response(&mut s).await.expect("response");
        assert_eq!(r.status, status, "{fields} fields: {}", r.head);
        assert_eq!(good.get("a.test", "/").await.status, 200);
    }
}

#[tokio::test]
async fn http2_head_limits_answer_431() {
    let b = Backend::start("b1").await;
    let p = Proxy::start(vec![
        listener(Protocol::Http),
        vhost(None, vec![rule("/", forward(&[("c1", 1)]))]),
        cluster("c1", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let mut good = Conn::h2c(p.addr).await;
    assert_eq!(good.get("a.test", "/").await.status, 200);
    let tcp = TcpStream::connect(p.addr).await.expect("connect");
    let (mut send, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
        .await
        .expect("h2 handshake");
    tokio::spawn(conn);
    let mut status_of = async |headers: &[(String, String)]| {
        let mut req = Request::builder()
            .uri("http://a.test/")
            .version(Version::HTTP_2)
            .body(http_body_util::Empty::<Bytes>::new())
            .expect("request");
        for (n, v) in headers {
            req.headers_mut().append(
                http::HeaderName::from_bytes(n.as_bytes()).expect("name"),
                v.parse().expect("value"),
            );
        }
        let sent = tokio::time::timeout(STEP, send.send_request(req))
            .await
            .expect("answer within the step limit");
        // h2 answers an oversized block with 431 and resets the stream; either is a refusal.
        sent.map_or(0, |r| r.status().as_u16())
    };
    let big = |kib: usize| vec![("x-big".to_string(), "a".repeat(kib * 1024))];
    // 20 KiB is within the listener's 64 KiB (hyper's own default is 16 KiB).
    assert_eq!(status_of(&big(20)).await, 200);
    let refused = status_of(&big(70)).await;
    assert!(refused == 431 || refused == 0, "70 KiB head: {refused}");
    assert_eq!(good.get("a.test", "/").await.status, 200);
    // 101 fields; the limit is 100.
    let many: Vec<_> = (0..101)
        .map(|i| (format!("x-f{i}"), "v".to_string()))
        .collect();
    assert_eq!(status_of(&many).await, 431);
    // (The test backend, hyper, takes 100 fields too, and weir adds x-forwarded-* and
    // x-request-id on the way.)
    assert_eq!(status_of(&many[..90]).await, 200);
    assert_eq!(good.get("a.test", "/").await.status, 200);
}

// ---------------------------------------------------------------- connection limits

#[tokio::test]
async fn per_client_limit_refuses_the_sixth_connection() {
    let p = Proxy::start(vec![
        listener_with(
            Protocol::Http,
            settings(|s| s.limits.max_connections_per_client = 5),
        ),
        ok_rule(),
    ])
    .await;
    assert_refused_past(&p, 5, "client_limit").await;
}

#[tokio::test]
async fn listener_limit_refuses_past_max_connections() {
    let p = Proxy::start(vec![
        listener_with(Protocol::Http, settings(|s| s.limits.max_connections = 3)),
        ok_rule(),
    ])
    .await;
    assert_refused_past(&p, 3, "listener_limit").await;
}

/// `open` connections are served, the next is refused with 503, and once one closes a
/// new one is served again.
async fn assert_refused_past(p: &Proxy, open: usize, reason: &str) {
    let mut conns = Vec::new();
    for i in 0..open {
        let mut s = TcpStream::connect(p.addr).await.expect("connect");
        let r = raw_get(&mut s, "a.test", "/").await;
        assert_eq!(r.map(|r| r.status), Some(200), "connection {i}");
        conns.push(s);
    }
    let mut extra = TcpStream::connect(p.addr).await.expect("connect");
    let answer = read_until_closed(&mut extra).await;
    assert!(
        answer.starts_with(b"HTTP/1.1 503"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    let sample = format!("weir_downstream_connections_refused_total{{reason=\"{reason}\"}}");
    assert_eq!(p.metric(&sample), 1, "{}", p.metrics());
    // The open connections are still served.
    assert_eq!(
        raw_get(&mut conns[0], "a.test", "/")
            .await
            .map(|r| r.status),
        Some(200)
    );
    // Closing one frees its place (once the proxy has seen the close).
    drop(conns.pop());
    let mut served = false;
    for _ in 0..100 {
        let mut s = TcpStream::connect(p.addr).await.expect("connect");
        if raw_get(&mut s, "a.test", "/").await.map(|r| r.status) == Some(200) {
            served = true;
            break;
        }
        tokio::time::sleep(ms(20)).await;
    }
    assert!(served, "a freed place is not given to a new connection");
}

// ---------------------------------------------------------------- idle connections

#[tokio::test]
async fn idle_keep_alive_connections_are_closed() {
    let b = Backend::start("b1").await;
    let p = Proxy::start(vec![
        listener_with(Protocol::Http, settings(|s| s.timeouts.idle = ms(600))),
        vhost(None, vec![rule("/", forward(&[("c1", 1)]))]),
        cluster("c1", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let mut s = TcpStream::connect(p.addr).await.expect("connect");
    // A request in flight for longer than the idle limit (the backend answers /slow
    // after 1 s) is not idleness: answered, and the connection stays open.
    let r = raw_get(&mut s, "a.test", "/slow").await.expect("response");
    assert_eq!(r.status, 200, "{}", r.head);
    let r = raw_get(&mut s, "a.test", "/").await.expect("response");
    assert_eq!(r.status, 200, "{}", r.head);
    assert!(
        closed_by_peer(&mut s).await,
        "idle keep-alive connection kept"
    );
    assert!(p.metric(r#"weir_downstream_timeouts_total{state="idle"}"#) >= 1);
}

/// Reads HTTP/2 frames until a GOAWAY (type 7); returns whether one came.
async fn goaway_received(s: &mut TcpStream) -> bool {
    let read = async {
        loop {
            let mut head = [0u8; 9];
            if s.read_exact(&mut head).await.is_err() {
                return false;
            }
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let mut payload = vec![0u8; len];
            if s.read_exact(&mut payload).await.is_err() {
                return false;
            }
            if head[3] == 7 {
                return true;
            }
        }
    };
    tokio::time::timeout(STEP, read).await.unwrap_or(false)
}

#[tokio::test]
async fn idle_http2_connections_get_a_goaway_and_are_closed() {
    let b = Backend::start("b1").await;
    let p = Proxy::start(vec![
        listener_with(
            Protocol::Http,
            settings(|s| {
                s.timeouts.idle = ms(300);
                s.timeouts.handshake = ms(300);
            }),
        ),
        vhost(None, vec![rule("/", forward(&[("c1", 1)]))]),
        cluster("c1", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    // A raw client: preface and SETTINGS, then nothing (it never answers the GOAWAY's
    // PING either, so the proxy closes after its grace period).
    let mut s = TcpStream::connect(p.addr).await.expect("connect");
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .expect("preface");
    assert!(
        goaway_received(&mut s).await,
        "no GOAWAY on an idle connection"
    );
    assert!(closed_by_peer(&mut s).await, "not closed after the GOAWAY");

    // A hyper client after a request (slower than the idle limit): the connection ends.
    let tcp = TcpStream::connect(p.addr).await.expect("connect");
    let (mut send, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
        .await
        .expect("h2 handshake");
    let conn = tokio::spawn(conn);
    let req = Request::builder()
        .uri("http://a.test/slow")
        .body(http_body_util::Empty::<Bytes>::new())
        .expect("request");
    let resp = send.send_request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    let ended = tokio::time::timeout(STEP, conn).await;
    assert!(ended.is_ok(), "idle HTTP/2 connection kept");
}

// ---------------------------------------------------------------- requests in flight

#[tokio::test]
async fn stalled_request_bodies_get_408() {
    let b = Backend::start("b1").await;
    let p = Proxy::start(vec![
        listener_with(Protocol::Http, settings(|s| s.timeouts.body_idle = ms(500))),
        vhost(Some("h1.test"), vec![rule("/", forward(&[("c1", 1)]))]),
        vhost(Some("h2.test"), vec![rule("/", forward(&[("c2", 1)]))]),
        cluster("c1", &[b.addr], UpstreamProtocol::Http1),
        cluster("c2", &[b.addr], UpstreamProtocol::H2c),
    ])
    .await;
    for host in ["h1.test", "h2.test"] {
        // 10 of 100 announced bytes, then silence.
        let mut s = TcpStream::connect(p.addr).await.expect("connect");
        let head = format!("POST / HTTP/1.1\r\nhost: {host}\r\ncontent-length: 100\r\n\r\n");
        s.write_all(head.as_bytes()).await.expect("head");
        s.write_all(&[b'x'; 10]).await.expect("body");
        let r = read_raw_response(&mut s).await.expect("an answer");
        assert_eq!(r.status, 408, "{host}: {}", r.head);

        // A body that keeps arriving, slowly, is fine.
        let mut s = TcpStream::connect(p.addr).await.expect("connect");
        let head = format!("POST / HTTP/1.1\r\nhost: {host}\r\ncontent-length: 8\r\n\r\n");
        s.write_all(head.as_bytes()).await.expect("head");
        for _ in 0..8 {
            tokio::time::sleep(ms(100)).await;
            s.write_all(b"x").await.expect("body");
        }
        let r = read_raw_response(&mut s).await.expect("an answer");
        assert_eq!(r.status, 200, "{host}: {}", r.head);
        assert!(String::from_utf8_lossy(&r.body).contains("body-len=8"));
    }
}

/// A request body of one chunk that ends, or never does.
struct TestBody {
    chunk: Option<Bytes>,
    ends: bool,
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.chunk.take() {
            Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
            None if self.ends => Poll::Ready(None),
            None => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ends && self.chunk.is_none()
    }
}

#[tokio::test]
async fn http2_streams_without_their_body_get_408() {
    let b = Backend::start("b1").await;
    let p = Proxy::start(vec![
        listener_with(Protocol::Http, settings(|s| s.timeouts.body_idle = ms(300))),
        vhost(None, vec![rule("/", forward(&[("c1", 1)]))]),
        cluster("c1", &[b.addr], UpstreamProtocol::Http1),
    ])
    .await;
    let tcp = TcpStream::connect(p.addr).await.expect("connect");
    let (mut send, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
        .await
        .expect("h2 handshake");
    tokio::spawn(conn);
    let stalled = Request::builder()
        .method("POST")
        .uri("http://a.test/upload")
        .body(TestBody {
            chunk: Some(Bytes::from_static(b"start")),
            ends: false,
        })
        .expect("request");
    let resp = tokio::time::timeout(STEP, send.send_request(stalled))
        .await
        .expect("an answer within the step limit");
    match resp {
        Ok(r) => assert_eq!(r.status(), 408),
        Err(e) => assert!(e.to_string().contains("reset"), "{e}"),
    }
    // The connection still serves other streams.
    let fine = Request::builder()
        .uri("http://a.test/")
        .body(TestBody {
            chunk: None,
            ends: true,
        })
        .expect("request");
    let resp = tokio::time::timeout(STEP, send.send_request(fine))
        .await
        .expect("an answer within the step limit")
        .expect("response");
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn unanswered_requests_get_504_by_default() {
    let mute = mute_backend().await;
    let p = Proxy::start(vec![
        listener_with(
            Protocol::Http,
            settings(|s| s.timeouts.upstream_response = ms(300)),
        ),
        vhost(Some("h1.test"), vec![rule("/", forward(&[("c1", 1)]))]),
        vhost(Some("h2.test"), vec![rule("/", forward(&[("c2", 1)]))]),
        cluster("c1", &[mute], UpstreamProtocol::Http1),
        cluster("c2", &[mute], UpstreamProtocol::H2c),
    ])
    .await;
    for host in ["h1.test", "h2.test"] {
        let r = get(p.addr, host, "/").await;
        assert_eq!(r.status, 504, "{host}: {}", r.body);
    }
}

/// A route timeout of `0s` disables the timeout (Gateway API): such a route waits for a
/// slow upstream past the listener's default, where a route without timeouts gets 504.
#[tokio::test]
async fn a_zero_route_timeout_disables_the_default() {
    let slow = Backend::start("slow").await; // `/slow` answers after 1 s
    let disabled = weir_model::Timeouts {
        request: Some(Duration::ZERO),
        backend_request: None,
        backend_send: None,
    };
    let p = Proxy::start(vec![
        listener_with(
            Protocol::Http,
            settings(|s| s.timeouts.upstream_response = ms(300)),
        ),
        vhost(
            Some("off.test"),
            vec![rule_with("/", forward(&[("c", 1)]), disabled)],
        ),
        vhost(Some("default.test"), vec![rule("/", forward(&[("c", 1)]))]),
        cluster("c", &[slow.addr], UpstreamProtocol::Http1),
    ])
    .await;
    assert_eq!(get(p.addr, "default.test", "/slow").await.status, 504);
    let r = get(p.addr, "off.test", "/slow").await;
    assert_eq!(r.status, 200, "{}", r.body);
}
