//! weir's own HTTP/1.1 server and the hand-over to hyper's (ARCHITECTURE.md, "HTTP/1.1
//! downstream"): requests without a body or with a `Content-Length` or chunked body are
//! served by weir's server; the first request it does not serve (here one with `Expect:
//! 100-continue`) moves the connection, with the bytes already read, to hyper's server,
//! which serves the rest. Over real sockets, pipelined, so the bytes handed over include
//! the body and the next request; bodies sent in pieces, cut off by the client, and with
//! invalid chunk framing.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::smuggling::{all_read, exchange, gateway, ok, recorder};
use crate::support::echo;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_moves_to_hypers_server_at_a_request_it_does_not_serve() {
    let rec = recorder(ok).await;
    let (_gw, addr) = gateway(rec.addr).await;
    let requests = concat!(
        "GET /one HTTP/1.1\r\nHost: app.test\r\n\r\n",
        "HEAD /head HTTP/1.1\r\nHost: app.test\r\n\r\n",
        "POST /two HTTP/1.1\r\nHost: app.test\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello",
        "GET /three HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n",
    );
    let answer = exchange(addr, requests.as_bytes()).await;
    assert_eq!(
        answer.matches("HTTP/1.1 200 OK\r\n").count(),
        4,
        "four answers on one connection: {answer}"
    );
    let answer = answer.replace("HTTP/1.1 100 Continue\r\n\r\n", "");
    // HEAD: the length, no body; the last answer says the connection closes, and it did
    // (`exchange` read to the end).
    let parts: Vec<&str> = answer.split("HTTP/1.1 200 OK\r\n").skip(1).collect();
    assert!(parts[1].contains("content-length: 2\r\n"), "{answer}");
    assert!(parts[1].ends_with("\r\n\r\n"), "HEAD has no body: {answer}");
    assert!(parts[3].contains("connection: close\r\n"), "{answer}");
    assert!(parts[3].ends_with("\r\n\r\nok"), "{answer}");
    for p in &parts {
        assert!(p.contains("date: "), "{answer}");
    }
    // The backend got the four requests in order, the body with the third.
    let seen = all_read(&rec);
    let at = |s: &str| {
        seen.find(s)
            .unwrap_or_else(|| panic!("{s} not forwarded: {seen}"))
    };
    assert!(at("GET /one ") < at("HEAD /head "), "{seen}");
    assert!(at("HEAD /head ") < at("POST /two "), "{seen}");
    assert!(at("POST /two ") < at("hello"), "{seen}");
    assert!(at("hello") < at("GET /three "), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_close_and_a_half_finished_head_end_the_connection() {
    let rec = recorder(ok).await;
    let (_gw, addr) = gateway(rec.addr).await;
    // `Connection: close` on a request weir's server serves: answered, said, closed; what
    // follows on the connection is never read as a request.
    let answer = exchange(
        addr,
        b"GET /a HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\nGET /never HTTP/1.1\r\nHost: app.test\r\n\r\n",
    )
    .await;
    assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "{answer}");
    assert!(answer.contains("connection: close\r\n"), "{answer}");
    assert!(!all_read(&rec).contains("/never"));
    // A head cut off by the client's close: nothing is answered or forwarded.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /cut HTTP/1.1\r\nHost: app.te")
        .await
        .unwrap();
    s.shutdown().await.unwrap();
    let out = read_all(&mut s).await;
    assert!(out.is_empty(), "{out}");
    assert!(!all_read(&rec).contains("/cut"));
}

/// What the connection sends until it closes (10 s at most, else the test fails).
async fn read_all(s: &mut tokio::net::TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("the connection closes")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// The JSON bodies of the answers in `answer` (the echo backend's).
fn echoed(answer: &str) -> Vec<serde_json::Value> {
    answer
        .split("HTTP/1.1 ")
        .skip(1)
        .filter_map(|a| a.split_once("\r\n\r\n"))
        .map(|(_, body)| serde_json::from_str(body).expect(body))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_of_a_given_length_are_relayed_whole_in_any_pieces() {
    let backend = echo("a").await;
    let (_gw, addr) = gateway(backend).await;
    // A large body and a request after it, pipelined: both answered on the connection,
    // the backend counted every byte.
    let big = 300_000;
    let mut requests =
        format!("POST /big HTTP/1.1\r\nHost: app.test\r\nContent-Length: {big}\r\n\r\n")
            .into_bytes();
    requests.extend(std::iter::repeat_n(b'x', big));
    requests
        .extend_from_slice(b"GET /after HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n");
    let answer = exchange(addr, &requests).await;
    let bodies = echoed(&answer);
    assert_eq!(bodies.len(), 2, "{answer}");
    assert_eq!(bodies[0]["body_bytes"], big, "{answer}");
    assert_eq!(bodies[1]["path"], "/after", "{answer}");

    // The head, then the body in pieces with pauses (the request waits for each).
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"PUT /slow HTTP/1.1\r\nHost: app.test\r\nContent-Length: 10\r\nConnection: close\r\n\r\nhel")
        .await
        .unwrap();
    for piece in [&b"lo, "[..], b"wor", b"ld"] {
        tokio::time::sleep(Duration::from_millis(50)).await;
        s.write_all(piece).await.unwrap();
    }
    let answer = read_all(&mut s).await;
    let bodies = echoed(&answer);
    assert_eq!(bodies.len(), 1, "{answer}");
    assert_eq!(bodies[0]["body_bytes"], 10, "{answer}");
    assert_eq!(bodies[0]["method"], "PUT", "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_bodies_are_relayed_whole_and_invalid_framing_refused() {
    let backend = echo("a").await;
    let (_gw, addr) = gateway(backend).await;
    // Chunks in pieces (a size line split, an extension, a trailer), then a request
    // after it on the same connection.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let pieces: [&[u8]; 5] = [
        b"POST /chunks HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r",
        b"\nhello\r\n1",
        b"0;ext=1\r\n0123456789abcdef\r\n",
        b"0\r\nx-trailer: t\r\n\r\n",
        b"GET /after HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n",
    ];
    for piece in pieces {
        s.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let answer = read_all(&mut s).await;
    let bodies = echoed(&answer);
    assert_eq!(bodies.len(), 2, "{answer}");
    assert_eq!(bodies[0]["body_bytes"], 21, "{answer}");
    assert_eq!(bodies[1]["path"], "/after", "{answer}");

    // A chunk size that is not hexadecimal: refused as the client's fault, the
    // connection closed, and what follows never read as a request.
    let answer = exchange(
        addr,
        b"POST /bad HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nGET /never HTTP/1.1\r\nHost: app.test\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_cut_off_by_the_client_is_the_clients_fault() {
    let backend = echo("a").await;
    let (_gw, addr) = gateway(backend).await;
    // 10 of 1,000 bytes, then the client's end: answered 400 (the client's fault, not
    // the backend's 502), and the connection closed.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"POST /cut HTTP/1.1\r\nHost: app.test\r\nContent-Length: 1000\r\n\r\n0123456789")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.shutdown().await.unwrap();
    let answer = read_all(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
}
