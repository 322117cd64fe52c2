//! Request smuggling defences on both sides of the proxy, over real sockets: ambiguous
//! client requests (both framings, two lengths, folded fields, bad chunk sizes, bare LF)
//! are refused or re-framed so that the backend sees exactly the requests weir answered;
//! ambiguous backend answers (both framings, two lengths, folded fields, bad chunks) are
//! refused or read strictly, never reused, and what a backend appends after its answer
//! never reaches a client.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::*;

/// A backend that records every byte it reads per connection, and answers each request
/// head it sees (by path) with `answer(path)`.
pub(crate) struct Recorder {
    pub(crate) addr: SocketAddr,
    /// Bytes read, per connection.
    read: Arc<Mutex<Vec<Vec<u8>>>>,
}

pub(crate) async fn recorder(answer: fn(&str) -> Vec<u8>) -> Recorder {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let read = Arc::new(Mutex::new(Vec::new()));
    let r = Arc::clone(&read);
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let r = Arc::clone(&r);
            let index = {
                let mut all = r.lock().unwrap();
                all.push(Vec::new());
                all.len() - 1
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut pending = Vec::new();
                loop {
                    let n = match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    r.lock().unwrap()[index].extend_from_slice(&buf[..n]);
                    pending.extend_from_slice(&buf[..n]);
                    // Answer each complete head (these tests' requests have no body the
                    // backend needs to wait for, or a short one that comes with it).
                    while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&pending[..end]).into_owned();
                        pending.drain(..end + 4);
                        let path = head.split(' ').nth(1).unwrap_or("").to_string();
                        if s.write_all(&answer(&path)).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    Recorder { addr, read }
}

pub(crate) fn ok(_: &str) -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec()
}

/// Sends `bytes` on a new connection and reads until it closes (10 s at most).
pub(crate) async fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(bytes).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) async fn gateway(backend_addr: SocketAddr) -> (Gateway, SocketAddr) {
    let port = free_port();
    let gw = Gateway::start(&[(
        "app.yaml",
        format!(
            "{}---\n{}---\n{}",
            http_gateway(port),
            http_route("app", "app.test", "b"),
            backend("default", "b", &[backend_addr])
        ),
    )])
    .await;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        eventually(Duration::from_secs(5), || async {
            exchange(
                addr,
                b"GET /ready HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n",
            )
            .await
            .starts_with("HTTP/1.1 200")
        })
        .await,
        "the route serves"
    );
    (gw, addr)
}

pub(crate) fn all_read(r: &Recorder) -> String {
    let all = r.read.lock().unwrap();
    all.iter()
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join("\n--- next connection ---\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_client_requests_never_reach_the_backend_ambiguously() {
    let rec = recorder(ok).await;
    let (_gw, addr) = gateway(rec.addr).await;
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: app.test\r\n\r\n";
    // Both framings: Transfer-Encoding wins (RFC 9112 §6.3), the body is the empty
    // chunked one, and the connection closes after the answer, so what follows is never
    // read as a request.
    let attack = format!(
        "POST /a HTTP/1.1\r\nHost: app.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"
    );
    let answer = exchange(addr, attack.as_bytes()).await;
    assert!(
        answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.1 400"),
        "{answer}"
    );
    assert_eq!(
        answer.matches("HTTP/1.1 ").count(),
        1,
        "one answer: {answer}"
    );
    // Refused outright (400), nothing forwarded: two lengths, a folded field.
    for attack in [
        format!(
            "POST /b HTTP/1.1\r\nHost: app.test\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\nabcd{smuggled}"
        ),
        format!("GET /c HTTP/1.1\r\nHost: app.test\r\nX-A: one\r\n two\r\n\r\n{smuggled}"),
    ] {
        let answer = exchange(addr, attack.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{attack:?} → {answer}");
        assert!(!answer.contains("HTTP/1.1 200"), "{attack:?} → {answer}");
    }
    // A chunked body that turns invalid: the head may have been forwarded already, but
    // the backend's connection is closed there, and what follows never reaches it.
    let attack = format!(
        "POST /d HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n{smuggled}"
    );
    let answer = exchange(addr, attack.as_bytes()).await;
    assert!(
        !answer.contains("HTTP/1.1 200 OK\r\ncontent-length: 2"),
        "{answer}"
    );
    // A bare LF ends lines for weir: the backend gets the request re-framed with CRLF.
    let answer = exchange(
        addr,
        b"GET /e HTTP/1.1\nHost: app.test\nConnection: close\n\n",
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.1 400"),
        "{answer}"
    );
    let read = all_read(&rec);
    assert!(!read.contains("/smuggled"), "the backend read:\n{read}");
    for path in ["/b ", "/c "] {
        assert!(!read.contains(path), "{path} forwarded:\n{read}");
    }
    assert!(!read.contains("zz"), "the bad chunk was forwarded:\n{read}");
    // The request with both framings went on with one: chunked, no length.
    if let Some(a) = read.find("POST /a ") {
        let head = &read[a..a + read[a..].find("\r\n\r\n").unwrap_or(0)];
        assert!(
            !head.to_ascii_lowercase().contains("content-length"),
            "{head}"
        );
    }
    for line in read.split("\r\n") {
        assert!(
            !line.contains('\n') || line.contains("--- next connection ---"),
            "bare LF forwarded:\n{read}"
        );
    }
}

/// What a hostile backend answers, by path.
fn hostile(path: &str) -> Vec<u8> {
    let injected = "HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\ninjected";
    match path {
        // Both framings: read as chunked ("hello"); what follows is the backend's.
        "/both" => format!(
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n{injected}"
        )
        .into_bytes(),
        "/lengths" => format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 9\r\n\r\nok{injected}").into_bytes(),
        "/folded" => format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: one\r\n two\r\n\r\nok{injected}").into_bytes(),
        "/bare-lf" => format!("HTTP/1.1 200 OK\nContent-Length: 2\n\nok{injected}").into_bytes(),
        "/chunk" => format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\nzz\r\n{injected}").into_bytes(),
        // An honest answer with extra bytes after it: never read as another answer.
        "/extra" => format!("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok{injected}").into_bytes(),
        _ => ok(path),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_backend_answers_are_refused_or_read_strictly_and_never_reused() {
    let rec = recorder(hostile).await;
    let (_gw, addr) = gateway(rec.addr).await;
    let get =
        |path: &str| format!("GET {path} HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n");
    let both = exchange(addr, get("/both").as_bytes()).await;
    assert!(both.starts_with("HTTP/1.1 200"), "{both}");
    assert!(both.contains("hello"), "{both}");
    assert!(
        !both.to_ascii_lowercase().contains("content-length: 3"),
        "{both}"
    );
    for path in ["/lengths", "/folded", "/bare-lf"] {
        let answer = exchange(addr, get(path).as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 502"), "{path} → {answer}");
    }
    let chunk = exchange(addr, get("/chunk").as_bytes()).await;
    assert!(!chunk.contains("injected"), "{chunk}");
    let extra = exchange(addr, get("/extra").as_bytes()).await;
    assert!(extra.starts_with("HTTP/1.1 200"), "{extra}");
    // Whatever came after an answer never reaches a client, on this request or the next
    // ones (each of which would take a reused connection if one were kept).
    for _ in 0..5 {
        let next = exchange(addr, get("/next").as_bytes()).await;
        assert!(next.starts_with("HTTP/1.1 200"), "{next}");
        assert!(!next.contains("injected"), "{next}");
    }
    assert!(!extra.contains("injected"), "{extra}");
}
