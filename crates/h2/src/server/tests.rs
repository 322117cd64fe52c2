//! The server against the `h2` crate's client, over an in-memory pipe.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body::{Body, Frame as BodyFrame};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;

use super::{BoxError, Config, Connection, RecvBody};
use crate::frame::{Head, Reason};

type TestBody = UnsyncBoxBody<Bytes, BoxError>;

/// A body of the given frames, handed out one per poll.
struct Frames(VecDeque<BodyFrame<Bytes>>);

impl Body for Frames {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<BodyFrame<Bytes>, BoxError>>> {
        std::task::Poll::Ready(self.0.pop_front().map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }
}

fn boxed<B>(b: B) -> TestBody
where
    B: Body<Data = Bytes, Error = BoxError> + Send + 'static,
{
    UnsyncBoxBody::new(b)
}

/// A body of one buffer, its length known (so the response gets `content-length`).
/// Serves `io` with `service` until `stop` fires, then shuts the connection down
/// gracefully and serves what began; its end (an error as text).
fn serve_until_stopped<S, F>(
    io: tokio::io::DuplexStream,
    service: S,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<Result<(), String>>
where
    S: FnMut(Request<RecvBody>) -> F + Unpin + Send + 'static,
    F: Future<Output = Result<Response<TestBody>, Infallible>> + Send + 'static,
{
    tokio::spawn(async move {
        let mut conn = Box::pin(Connection::new(io, Config::default(), service));
        let mut stop = stop;
        tokio::select! {
            r = conn.as_mut() => return r.map_err(|e| e.to_string()),
            _ = &mut stop => {}
        }
        conn.as_mut().get_mut().graceful_shutdown();
        conn.await.map_err(|e| e.to_string())
    })
}

fn full(s: &'static str) -> TestBody {
    boxed(http_body_util::Full::new(Bytes::from_static(s.as_bytes())).map_err(|e| match e {}))
}

/// Serves `service` on one end of a pipe and returns an `h2` client on the other.
async fn connect<S, F>(cfg: Config, service: S) -> h2::client::SendRequest<Bytes>
where
    S: FnMut(Request<RecvBody>) -> F + Unpin + Send + 'static,
    F: Future<Output = Result<Response<TestBody>, Infallible>> + Send + 'static,
{
    let (client, server) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let conn = Connection::new(server, cfg, service);
        let _ = conn.await;
    });
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(65_535)
        .handshake(client)
        .await
        .expect("handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

fn get(path: &str) -> Request<()> {
    Request::get(format!("https://example.test{path}"))
        .body(())
        .unwrap()
}

async fn read_all(mut body: h2::RecvStream) -> (Vec<u8>, Option<HeaderMap>) {
    let mut out = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("data");
        out.extend_from_slice(&chunk);
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.expect("trailers");
    (out, trailers)
}

#[tokio::test]
async fn answers_a_get_with_its_head_and_body() {
    let mut send = connect(Config::default(), |req: Request<RecvBody>| async move {
        assert_eq!(req.uri().path(), "/hello");
        assert_eq!(req.uri().host(), Some("example.test"));
        assert_eq!(req.version(), http::Version::HTTP_2);
        assert!(req.body().is_end_stream());
        let resp = Response::builder()
            .header("x-test", "yes")
            .header("connection", "close")
            .body(full("hello"))
            .unwrap();
        Ok::<_, Infallible>(resp)
    })
    .await;
    for _ in 0..3 {
        let (resp, _) = send.send_request(get("/hello"), true).unwrap();
        let resp = resp.await.expect("response");
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["x-test"], "yes");
        assert_eq!(resp.headers()["content-length"], "5");
        assert!(resp.headers().get("connection").is_none());
        let (body, trailers) = read_all(resp.into_body()).await;
        assert_eq!(body, b"hello");
        assert!(trailers.is_none());
    }
}

#[tokio::test]
async fn echoes_large_bodies_within_both_windows() {
    // Small windows both ways: the server must wait for WINDOW_UPDATEs and send them.
    let cfg = Config {
        stream_window: 16 * 1024,
        conn_window: 32 * 1024,
        ..Config::default()
    };
    let mut send = connect(cfg, |req: Request<RecvBody>| async move {
        Ok::<_, Infallible>(Response::new(boxed(req.into_body())))
    })
    .await;
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (resp, mut stream) = send
            .send_request(
                Request::post("https://example.test/echo").body(()).unwrap(),
                false,
            )
            .unwrap();
        let payload = payload.clone();
        tasks.push(tokio::spawn(async move {
            let sender = tokio::spawn(async move {
                let mut rest = Bytes::from(payload);
                while !rest.is_empty() {
                    stream.reserve_capacity(rest.len().min(20_000));
                    let cap = std::future::poll_fn(|cx| stream.poll_capacity(cx))
                        .await
                        .expect("capacity")
                        .expect("capacity");
                    let chunk = rest.split_to(cap.min(rest.len()));
                    stream.send_data(chunk, rest.is_empty()).unwrap();
                }
            });
            let resp = resp.await.expect("response");
            let (body, _) = read_all(resp.into_body()).await;
            sender.await.unwrap();
            body
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), payload);
    }
}

#[tokio::test]
async fn passes_trailers_both_ways() {
    let mut send = connect(Config::default(), |req: Request<RecvBody>| async move {
        let collected = req.into_body().collect().await.expect("body");
        let trailers = collected.trailers().cloned().expect("request trailers");
        assert_eq!(trailers["grpc-timeout"], "1S");
        let data = collected.to_bytes();
        let mut t = HeaderMap::new();
        t.insert("grpc-status", "0".parse().unwrap());
        let body = Frames(VecDeque::from([
            BodyFrame::data(data),
            BodyFrame::trailers(t),
        ]));
        Ok::<_, Infallible>(Response::new(boxed(body)))
    })
    .await;
    let (resp, mut stream) = send
        .send_request(
            Request::post("https://example.test/svc/Method")
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .unwrap(),
            false,
        )
        .unwrap();
    stream.send_data(Bytes::from_static(b"abc"), false).unwrap();
    let mut t = HeaderMap::new();
    t.insert("grpc-timeout", "1S".parse().unwrap());
    stream.send_trailers(t).unwrap();
    let resp = resp.await.expect("response");
    let (body, trailers) = read_all(resp.into_body()).await;
    assert_eq!(body, b"abc");
    assert_eq!(trailers.expect("trailers")["grpc-status"], "0");
}

#[tokio::test]
async fn serves_many_streams_at_once() {
    let mut send = connect(Config::default(), |req: Request<RecvBody>| async move {
        // Answers out of order: the later paths sooner.
        let n: u64 = req.uri().path()[1..].parse().unwrap();
        tokio::time::sleep(Duration::from_millis(50 - n % 50)).await;
        let body = Frames(VecDeque::from([BodyFrame::data(Bytes::from(
            n.to_string(),
        ))]));
        Ok::<_, Infallible>(Response::new(boxed(body)))
    })
    .await;
    let mut pending = Vec::new();
    for n in 0..100u64 {
        let (resp, _) = send.send_request(get(&format!("/{n}")), true).unwrap();
        pending.push((n, resp));
    }
    for (n, resp) in pending {
        let (body, _) = read_all(resp.await.expect("response").into_body()).await;
        assert_eq!(body, n.to_string().as_bytes());
    }
}

#[tokio::test]
async fn a_reset_stream_drops_its_request() {
    struct Dropped(Arc<AtomicUsize>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicUsize::new(0));
    let d = Arc::clone(&dropped);
    let mut send = connect(Config::default(), move |_req: Request<RecvBody>| {
        let guard = Dropped(Arc::clone(&d));
        async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            Ok::<_, Infallible>(Response::new(full("never")))
        }
    })
    .await;
    let (resp, mut stream) = send.send_request(get("/slow"), false).unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    stream.send_reset(h2::Reason::CANCEL);
    drop(resp);
    for _ in 0..100 {
        if dropped.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn refuses_streams_over_the_limit() {
    let cfg = Config {
        max_concurrent_streams: 2,
        ..Config::default()
    };
    let mut send = connect(cfg, |_req: Request<RecvBody>| async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        Ok::<_, Infallible>(Response::new(full("ok")))
    })
    .await;
    // The client honours the advertised limit: five requests, at most two at once.
    let mut pending = Vec::new();
    for _ in 0..5 {
        send = send.ready().await.unwrap();
        let (resp, _) = send.send_request(get("/"), true).unwrap();
        pending.push(resp);
    }
    for resp in pending {
        assert_eq!(resp.await.expect("response").status(), StatusCode::OK);
    }
}

#[tokio::test]
async fn answers_an_oversized_head_with_431() {
    let cfg = Config {
        max_header_list_size: 1024,
        ..Config::default()
    };
    let mut send = connect(cfg, |_req: Request<RecvBody>| async move {
        Ok::<_, Infallible>(Response::new(full("ok")))
    })
    .await;
    let big = "x".repeat(2000);
    let req = Request::get("https://example.test/")
        .header("x-big", big.as_str())
        .body(())
        .unwrap();
    let (resp, _) = send.send_request(req, true).unwrap();
    match resp.await {
        Ok(resp) => assert_eq!(resp.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
        // The h2 client checks the advertised limit itself, if it learnt it in time.
        Err(e) => assert!(e.to_string().contains("header"), "{e}"),
    }
    // The connection goes on (the compression state stayed in step).
    let (resp, _) = send.send_request(get("/"), true).unwrap();
    assert_eq!(resp.await.expect("response").status(), StatusCode::OK);
}

#[tokio::test]
async fn graceful_shutdown_finishes_what_began() {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let service = |_req: Request<RecvBody>| async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok::<_, Infallible>(Response::new(full("done")))
    };
    let srv = serve_until_stopped(server, service, rx);
    let (mut send, conn) = h2::client::handshake(client).await.unwrap();
    let client_conn = tokio::spawn(conn);
    let (resp, _) = send.send_request(get("/"), true).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    tx.send(()).unwrap();
    let resp = resp.await.expect("the request in flight is answered");
    let (body, _) = read_all(resp.into_body()).await;
    assert_eq!(body, b"done");
    assert_eq!(srv.await.unwrap(), Ok(()));
    let _ = client_conn.await;
}

#[tokio::test]
async fn many_uploads_share_a_small_connection_window() {
    // Each stream takes far less than half its own window, so only the connection's
    // credit keeps the client going.
    let cfg = Config {
        conn_window: 64 * 1024,
        ..Config::default()
    };
    let mut send = connect(cfg, |req: Request<RecvBody>| async move {
        let n = req
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .len();
        let body = Frames(VecDeque::from([BodyFrame::data(Bytes::from(
            n.to_string(),
        ))]));
        Ok::<_, Infallible>(Response::new(boxed(body)))
    })
    .await;
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (resp, mut stream) = send
            .send_request(
                Request::post("https://example.test/up").body(()).unwrap(),
                false,
            )
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let mut left = 200_000usize;
            while left > 0 {
                stream.reserve_capacity(left.min(16_384));
                let cap = std::future::poll_fn(|cx| stream.poll_capacity(cx))
                    .await
                    .expect("capacity")
                    .expect("capacity");
                let n = cap.min(left);
                left -= n;
                stream
                    .send_data(Bytes::from(vec![7u8; n]), left == 0)
                    .unwrap();
            }
            let resp = resp.await.expect("response");
            read_all(resp.into_body()).await.0
        }));
    }
    let all = async {
        for t in tasks {
            assert_eq!(t.await.unwrap(), b"200000");
        }
    };
    tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .expect("every upload finished (no stall on the connection's window)");
}

#[tokio::test]
async fn head_gets_no_body_and_a_failed_body_resets_its_stream() {
    struct Failing(bool);
    impl Body for Failing {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<BodyFrame<Bytes>, BoxError>>> {
            if std::mem::replace(&mut self.0, true) {
                std::task::Poll::Ready(Some(Err("upstream went away".into())))
            } else {
                std::task::Poll::Ready(Some(Ok(BodyFrame::data(Bytes::from_static(b"part")))))
            }
        }
    }
    let mut send = connect(Config::default(), |req: Request<RecvBody>| async move {
        let body = if req.uri().path() == "/fail" {
            boxed(Failing(false))
        } else {
            full("hello")
        };
        Ok::<_, Infallible>(Response::new(body))
    })
    .await;
    let (resp, _) = send
        .send_request(
            Request::head("https://example.test/").body(()).unwrap(),
            true,
        )
        .unwrap();
    let resp = resp.await.expect("response");
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.body().is_end_stream());
    let (resp, _) = send.send_request(get("/fail"), true).unwrap();
    let mut body = resp.await.expect("response head").into_body();
    assert_eq!(&body.data().await.unwrap().unwrap()[..], b"part");
    let err = body.data().await.unwrap().unwrap_err();
    assert_eq!(err.reason(), Some(h2::Reason::INTERNAL_ERROR));
    // The connection goes on.
    let (resp, _) = send.send_request(get("/"), true).unwrap();
    assert_eq!(resp.await.expect("response").status(), StatusCode::OK);
}

#[tokio::test]
async fn split_cookies_reach_the_service_as_one_field() {
    let mut send = connect(Config::default(), |req: Request<RecvBody>| async move {
        let cookies: Vec<_> = req.headers().get_all("cookie").iter().collect();
        assert_eq!(cookies, ["a=1; b=2; c=3"]);
        Ok::<_, Infallible>(Response::new(full("ok")))
    })
    .await;
    let req = Request::get("https://example.test/")
        .header("cookie", "a=1")
        .header("x-other", "between")
        .header("cookie", "b=2")
        .header("cookie", "c=3")
        .body(())
        .unwrap();
    let (resp, _) = send.send_request(req, true).unwrap();
    assert_eq!(resp.await.expect("response").status(), StatusCode::OK);
}

/// A client of raw frames: the preface and `frames` written at once, then every frame
/// the server writes until it closes (or 5 s pass).
async fn raw_exchange<S, F>(cfg: Config, service: S, frames: Vec<u8>) -> Vec<(Head, Bytes)>
where
    S: FnMut(Request<RecvBody>) -> F + Unpin + Send + 'static,
    F: Future<Output = Result<Response<TestBody>, Infallible>> + Send + 'static,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client, server) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        let _ = Connection::new(server, cfg, service).await;
    });
    let mut out = crate::frame::PREFACE.to_vec();
    crate::frame::write_settings(&mut out, &crate::frame::Settings::default());
    out.extend_from_slice(&frames);
    client.write_all(&out).await.unwrap();
    let mut got = Vec::new();
    let read = async {
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    frames_of(&Bytes::from(got))
}

/// The whole frames of `got`, heads and payloads.
fn frames_of(got: &Bytes) -> Vec<(Head, Bytes)> {
    let mut frames = Vec::new();
    let mut at = 0;
    while got.len() - at >= crate::frame::HEAD_LEN {
        let head = Head::parse(got[at..at + crate::frame::HEAD_LEN].try_into().unwrap());
        let end = at + crate::frame::HEAD_LEN + head.len as usize;
        if end > got.len() {
            break;
        }
        frames.push((head, got.slice(at + crate::frame::HEAD_LEN..end)));
        at = end;
    }
    frames
}

/// A GET's header block (HPACK: :method GET, :scheme https, :path /, :authority a.test).
const GET_BLOCK: &[u8] = b"\x82\x87\x84\x01\x06a.test";

fn goaway_reason(frames: &[(Head, Bytes)]) -> Option<u32> {
    frames
        .iter()
        .find(|(h, _)| h.kind == crate::frame::kind::GOAWAY)
        .map(|(_, p)| u32::from_be_bytes(p[4..8].try_into().unwrap()))
}

#[tokio::test]
async fn resets_the_client_provokes_count_as_its_own() {
    // Each stream is opened and at once ended by an overflowing WINDOW_UPDATE (a
    // stream error the server answers with RST_STREAM), before its response.
    let cfg = Config {
        max_client_resets: 5,
        ..Config::default()
    };
    let mut frames = Vec::new();
    for n in 0..20u32 {
        let id = 1 + 2 * n;
        crate::frame::write_headers(&mut frames, id, GET_BLOCK, true, 16_384);
        crate::frame::write_window_update(&mut frames, id, crate::frame::MAX_WINDOW);
    }
    let service = |_req: Request<RecvBody>| async move {
        std::future::pending::<()>().await;
        Ok::<_, Infallible>(Response::new(full("never")))
    };
    let got = raw_exchange(cfg, service, frames).await;
    assert_eq!(goaway_reason(&got), Some(Reason::ENHANCE_YOUR_CALM.0));
}

#[tokio::test]
async fn padding_is_credited_to_the_stream_too() {
    // 300 frames of 10 data bytes and 200 of padding: 63,300 bytes of window for 3,000
    // bytes of body, through a 16 KiB stream window.
    let cfg = Config {
        stream_window: 16 * 1024,
        ..Config::default()
    };
    let service = |req: Request<RecvBody>| async move {
        let n = req
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .len();
        Ok::<_, Infallible>(Response::new(boxed(Frames(VecDeque::from([
            BodyFrame::data(Bytes::from(n.to_string())),
        ])))))
    };
    let mut frames = Vec::new();
    crate::frame::write_headers(&mut frames, 1, GET_BLOCK, false, 16_384);
    let mut window = 65_535i64; // the client's view: our SETTINGS may come later
    let mut sent = 0;
    for i in 0..300 {
        let mut payload = vec![200u8];
        payload.extend_from_slice(&[b'x'; 10]);
        payload.extend_from_slice(&[0u8; 200]);
        let flags = crate::frame::flag::PADDED
            | if i == 299 {
                crate::frame::flag::END_STREAM
            } else {
                0
            };
        crate::frame::write_head(&mut frames, payload.len() as u32, 0, flags, 1);
        frames.extend_from_slice(&payload);
        window -= payload.len() as i64;
        sent += 1;
        if window < 0 {
            break;
        }
    }
    // Without credit for padding the server's 16 KiB window would be spent after 77
    // frames; everything here is sent at once, so look for the stream's updates instead.
    let got = raw_exchange(cfg, service, frames).await;
    let updates: u32 = got
        .iter()
        .filter(|(h, _)| h.kind == crate::frame::kind::WINDOW_UPDATE && h.stream == 1)
        .map(|(_, p)| u32::from_be_bytes(p[..4].try_into().unwrap()))
        .sum();
    assert!(sent > 77, "the test sent {sent} frames");
    assert!(
        updates >= 8 * 1024,
        "stream WINDOW_UPDATEs credited {updates} bytes for padding and data"
    );
}

#[tokio::test]
async fn a_slow_reader_of_a_large_download_gets_all_of_it() {
    let mut send = connect(Config::default(), |_req: Request<RecvBody>| async move {
        let chunks = (0..64).map(|i| BodyFrame::data(Bytes::from(vec![i as u8; 32 * 1024])));
        Ok::<_, Infallible>(Response::new(boxed(Frames(chunks.collect()))))
    })
    .await;
    let (resp, _) = send.send_request(get("/big"), true).unwrap();
    let mut body = resp.await.expect("response").into_body();
    let mut total = 0;
    let read = async {
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("data");
            total += chunk.len();
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _ = body.flow_control().release_capacity(chunk.len());
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("the download finished");
    assert_eq!(total, 64 * 32 * 1024);
}

#[tokio::test]
async fn a_panicking_request_ends_its_stream_only() {
    let mut send = connect(Config::default(), |req: Request<RecvBody>| async move {
        if req.uri().path() == "/panic" {
            tokio::time::sleep(Duration::from_millis(20)).await;
            panic!("a bug in one request");
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
        Ok::<_, Infallible>(Response::new(full("fine")))
    })
    .await;
    let (slow, _) = send.send_request(get("/slow"), true).unwrap();
    let (bad, _) = send.send_request(get("/panic"), true).unwrap();
    let err = bad.await.expect_err("the panicking stream is reset");
    assert_eq!(err.reason(), Some(h2::Reason::INTERNAL_ERROR));
    let resp = slow.await.expect("the other stream is answered");
    let (body, _) = read_all(resp.into_body()).await;
    assert_eq!(body, b"fine");
}

#[tokio::test]
async fn graceful_shutdown_takes_two_steps() {
    // A GOAWAY naming no limit and a PING; once the client answers the PING, the final
    // GOAWAY with the last stream it began; then the connection ends.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client, server) = tokio::io::duplex(1 << 20);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let service =
        |_req: Request<RecvBody>| async move { Ok::<_, Infallible>(Response::new(full("ok"))) };
    let srv = serve_until_stopped(server, service, rx);
    let mut out = crate::frame::PREFACE.to_vec();
    crate::frame::write_settings(&mut out, &crate::frame::Settings::default());
    crate::frame::write_headers(&mut out, 1, GET_BLOCK, true, 16_384);
    client.write_all(&out).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    tx.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    // A request the client sent before it read the first GOAWAY is still served.
    let mut out = Vec::new();
    crate::frame::write_headers(&mut out, 3, GET_BLOCK, true, 16_384);
    crate::frame::write_ping(&mut out, true, *b"weir-drn");
    client.write_all(&out).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut got)).await;
    let mut goaways = Vec::new();
    let mut answered = Vec::new();
    for (head, payload) in frames_of(&Bytes::from(got)) {
        if head.kind == crate::frame::kind::GOAWAY {
            goaways.push(u32::from_be_bytes(payload[..4].try_into().unwrap()));
        }
        if head.kind == crate::frame::kind::HEADERS {
            answered.push(head.stream);
        }
    }
    assert_eq!(goaways, [crate::frame::MAX_WINDOW, 3]);
    assert_eq!(answered, [1, 3]);
    assert_eq!(srv.await.unwrap(), Ok(()));
}
