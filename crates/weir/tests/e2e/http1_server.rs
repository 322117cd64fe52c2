//! weir's own HTTP/1.1 server and the hand-over to hyper's (ARCHITECTURE.md, "HTTP/1.1
//! downstream"): requests without a body are served by weir's server; the first request
//! it does not serve (here a body) moves the connection, with the bytes already read, to
//! hyper's server, which serves the rest. Over a real socket, pipelined, so the bytes
//! handed over include the body and the next request.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::smuggling::{all_read, exchange, gateway, ok, recorder};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_moves_to_hypers_server_at_a_request_with_a_body() {
    let rec = recorder(ok).await;
    let (_gw, addr) = gateway(rec.addr).await;
    let requests = concat!(
        "GET /one HTTP/1.1\r\nHost: app.test\r\n\r\n",
        "HEAD /head HTTP/1.1\r\nHost: app.test\r\n\r\n",
        "POST /two HTTP/1.1\r\nHost: app.test\r\nContent-Length: 5\r\n\r\nhello",
        "GET /three HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n",
    );
    let answer = exchange(addr, requests.as_bytes()).await;
    assert_eq!(
        answer.matches("HTTP/1.1 200 OK\r\n").count(),
        4,
        "four answers on one connection: {answer}"
    );
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
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("closed")
        .unwrap();
    assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    assert!(!all_read(&rec).contains("/cut"));
}
