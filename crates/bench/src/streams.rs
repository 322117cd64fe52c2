//! The soak's two stream-shaped protocols, each a backend and a client loop: gRPC (unary
//! calls on a kept h2c connection: framed messages, `grpc-status` in the trailers) and
//! WebSocket (an HTTP/1.1 upgrade with a checked `Sec-WebSocket-Accept`, then masked text
//! frames echoed back on a kept connection, so every tunnel lives across many of the
//! soak's configuration changes).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Instant;

use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::soak::{IO_LIMIT, Loop};

/// The host names of the gRPC and WebSocket routes.
pub(crate) const GRPC_HOST: &str = "grpc.soak.test";
pub(crate) const WS_HOST: &str = "ws.soak.test";

/// One gRPC message frame: uncompressed flag, big-endian length, payload.
fn grpc_frame(payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + payload.len());
    b.put_u8(0);
    b.put_u32(payload.len() as u32);
    b.put_slice(payload);
    b.freeze()
}

/// An h2c gRPC backend: every call is answered with its own message and `grpc-status: 0`
/// in the trailers.
pub(crate) async fn grpc_echo(tcp: TcpListener) {
    let mut conns = JoinSet::new();
    loop {
        let Ok((stream, _)) = tcp.accept().await else {
            continue;
        };
        // The answer's DATA and trailers are separate writes: with Nagle on, the second
        // waited for the first's delayed ACK, and a 30 s debug run made 463 calls instead
        // of the h2c client's 1,334; with this, 1,283 against 1,305.
        let _ = stream.set_nodelay(true);
        let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
            let body = req.into_body().collect().await?.to_bytes();
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
                Ok(Frame::data(grpc_frame(body.get(5..).unwrap_or_default()))),
                Ok(Frame::trailers(trailers)),
            ];
            let resp = Response::builder()
                .header("content-type", "application/grpc")
                .body(StreamBody::new(futures_util::stream::iter(frames)))
                .expect("static response");
            Ok::<_, hyper::Error>(resp)
        });
        conns.spawn(async move {
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
        while conns.try_join_next().is_some() {}
    }
}

type GrpcBody =
    StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

/// Unary calls `/soak.Echo/Say` on one kept h2c connection (renewed every 500 calls and
/// after a failure): HTTP 200, `grpc-status: 0` in the trailers, the message echoed.
pub(crate) async fn grpc_client(addr: SocketAddr, (tally, start, deadline, pace): Loop) {
    let mut conn: Option<hyper::client::conn::http2::SendRequest<GrpcBody>> = None;
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        if n.is_multiple_of(500) {
            conn = None;
        }
        let message = format!("call {n}");
        let outcome = async {
            if conn.as_ref().is_none_or(|c| c.is_closed()) {
                let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
                // A call's HEADERS and DATA are separate writes; see `grpc_echo`.
                stream.set_nodelay(true).map_err(|e| e.to_string())?;
                let (tx, c) = hyper::client::conn::http2::handshake(
                    TokioExecutor::new(),
                    TokioIo::new(stream),
                )
                .await
                .map_err(|e| e.to_string())?;
                tokio::spawn(c);
                conn = Some(tx);
            }
            let tx = conn.as_mut().ok_or("no connection")?;
            let frames = vec![Ok(Frame::data(grpc_frame(message.as_bytes())))];
            let req = Request::post(format!("http://{GRPC_HOST}/soak.Echo/Say"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(StreamBody::new(futures_util::stream::iter(frames)))
                .map_err(|e| e.to_string())?;
            let resp = tx.send_request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let collected = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?;
            let grpc_status = collected
                .trailers()
                .and_then(|t| t.get("grpc-status"))
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = collected.to_bytes();
            if status != 200 {
                return Err(format!("status {status}"));
            }
            if grpc_status.as_deref() != Some("0") {
                return Err(format!("grpc-status {grpc_status:?}"));
            }
            if body.get(5..) != Some(message.as_bytes()) {
                return Err("message differs".to_owned());
            }
            Ok(())
        };
        let r = tokio::time::timeout(IO_LIMIT, outcome)
            .await
            .unwrap_or_else(|_| Err("timed out".into()));
        if r.is_err() {
            conn = None;
        }
        tally.record(start.elapsed(), r);
        tokio::time::sleep(pace).await;
    }
}

/// RFC 6455 §4.2.2: the accept value for a `Sec-WebSocket-Key`.
fn websocket_accept(key: &str) -> String {
    const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    let digest = aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{key}{GUID}").as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// Reads an HTTP/1.1 head (up to the blank line, at most 8 KiB).
async fn read_head(s: &mut (impl AsyncRead + Unpin)) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 || s.read(&mut byte).await? == 0 {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// A header's value in a head read by [`read_head`] (names compared case-insensitively).
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// One WebSocket frame (FIN set) with a payload under 126 bytes, masked when `mask` is
/// given (a client's frames must be).
fn ws_frame(opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let len = u8::try_from(payload.len())
        .ok()
        .filter(|l| *l < 126)
        .expect("short payload");
    let mut f = vec![0x80 | opcode, len | if mask.is_some() { 0x80 } else { 0 }];
    match mask {
        Some(m) => {
            f.extend_from_slice(&m);
            f.extend(payload.iter().enumerate().map(|(i, b)| b ^ m[i % 4]));
        }
        None => f.extend_from_slice(payload),
    }
    f
}

/// Reads one frame with a payload under 126 bytes: (opcode, unmasked payload).
async fn read_ws_frame(s: &mut (impl AsyncRead + Unpin)) -> std::io::Result<(u8, Vec<u8>)> {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).await?;
    let len = usize::from(h[1] & 0x7f);
    if len >= 126 || h[0] & 0x80 == 0 {
        return Err(std::io::ErrorKind::InvalidData.into());
    }
    let mut mask = [0u8; 4];
    if h[1] & 0x80 != 0 {
        s.read_exact(&mut mask).await?;
    }
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).await?;
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= mask[i % 4];
    }
    Ok((h[0] & 0x0f, payload))
}

/// A WebSocket backend: answers the upgrade (checking it is one), then echoes every text
/// frame until the client closes.
pub(crate) async fn websocket_echo(tcp: TcpListener) {
    let mut conns = JoinSet::new();
    loop {
        let Ok((mut stream, _)) = tcp.accept().await else {
            continue;
        };
        conns.spawn(async move {
            let Ok(head) = read_head(&mut stream).await else {
                return;
            };
            let upgrade = header(&head, "upgrade").is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
            let Some(key) = header(&head, "sec-websocket-key").filter(|_| upgrade) else {
                let _ = stream
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
                return;
            };
            let answer = format!(
                "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: {}\r\n\r\n",
                websocket_accept(key)
            );
            if stream.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
            while let Ok((opcode, payload)) = read_ws_frame(&mut stream).await {
                match opcode {
                    0x1 => {
                        if stream.write_all(&ws_frame(0x1, &payload, None)).await.is_err() {
                            return;
                        }
                    }
                    0x8 => {
                        let _ = stream.write_all(&ws_frame(0x8, &payload, None)).await;
                        return;
                    }
                    _ => return,
                }
            }
        });
        while conns.try_join_next().is_some() {}
    }
}

/// Opens a WebSocket through weir: the handshake, with the backend's accept value checked.
async fn ws_connect(addr: SocketAddr, n: u64) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let key = base64::engine::general_purpose::STANDARD.encode(n.to_be_bytes().repeat(2));
    let req = format!(
        "GET /chat HTTP/1.1\r\nhost: {WS_HOST}\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: {key}\r\nsec-websocket-version: 13\r\n\r\n"
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let head = read_head(&mut s)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    if !head.starts_with("HTTP/1.1 101") {
        return Err(format!(
            "handshake answered {}",
            head.lines().next().unwrap_or_default()
        ));
    }
    if header(&head, "sec-websocket-accept") != Some(websocket_accept(&key).as_str()) {
        return Err("wrong Sec-WebSocket-Accept".into());
    }
    Ok(s)
}

/// Text messages on one kept WebSocket, each echoed; the socket is closed (close frame,
/// answered) and a new one opened every 100 messages and after a failure.
pub(crate) async fn websocket_client(addr: SocketAddr, (tally, start, deadline, pace): Loop) {
    let mut conn: Option<TcpStream> = None;
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        if n.is_multiple_of(100)
            && let Some(mut s) = conn.take()
        {
            let closed = async {
                s.write_all(&ws_frame(0x8, &[0x03, 0xe8], Some([1, 2, 3, 4])))
                    .await?;
                read_ws_frame(&mut s).await
            };
            let r = match tokio::time::timeout(IO_LIMIT, closed).await {
                Ok(Ok((0x8, _))) => Ok(()),
                Ok(Ok((op, _))) => Err(format!("close answered with opcode {op}")),
                Ok(Err(e)) => Err(format!("close: {e}")),
                Err(_) => Err("close timed out".into()),
            };
            if r.is_err() {
                tally.record(start.elapsed(), r);
            }
        }
        let message = format!("message {n}");
        let outcome = async {
            if conn.is_none() {
                conn = Some(ws_connect(addr, n).await?);
            }
            let s = conn.as_mut().ok_or("no connection")?;
            let mask = (n as u32).to_be_bytes();
            s.write_all(&ws_frame(0x1, message.as_bytes(), Some(mask)))
                .await
                .map_err(|e| e.to_string())?;
            match read_ws_frame(s).await.map_err(|e| e.to_string())? {
                (0x1, p) if p == message.as_bytes() => Ok(()),
                (op, _) => Err(format!("echo differs (opcode {op})")),
            }
        };
        let r = tokio::time::timeout(IO_LIMIT, outcome)
            .await
            .unwrap_or_else(|_| Err("timed out".into()));
        if r.is_err() {
            conn = None;
        }
        tally.record(start.elapsed(), r);
        tokio::time::sleep(pace).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_value_of_the_rfc_example() {
        // RFC 6455 §1.3.
        assert_eq!(
            websocket_accept("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[tokio::test]
    async fn frames_round_trip_masked_and_unmasked() {
        for mask in [None, Some([9, 8, 7, 6])] {
            let f = ws_frame(0x1, b"hello", mask);
            let (op, p) = read_ws_frame(&mut f.as_slice()).await.unwrap();
            assert_eq!((op, p.as_slice()), (0x1, &b"hello"[..]));
        }
    }
}
