//! Batched writes over real loopback sockets, on a runtime set up as a worker's (a
//! current-thread runtime with the batch installed and its flusher running).

use std::io::Read;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// Runs `f` on a current-thread runtime whose thread batches its writes (skipped, with a
/// message, where io_uring is unavailable: there every write is plain).
fn on_worker<F: std::future::Future<Output = ()>>(f: F) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        if !install() {
            eprintln!("skipped: io_uring is unavailable here (or WEIR_IO_URING=0)");
            return;
        }
        tokio::spawn(run_flusher());
        tokio::time::timeout(Duration::from_secs(30), f)
            .await
            .expect("the test finished in time");
    });
}

/// `n` connected pairs: the batched side (accepted) and the peer (a std socket).
async fn pairs(n: usize) -> Vec<(Batched, std::net::TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let peer = std::net::TcpStream::connect(addr).unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let (s, _) = listener.accept().await.unwrap();
        out.push((Batched::new(s), peer));
    }
    out
}

fn read_exact(peer: &mut std::net::TcpStream, n: usize) -> Vec<u8> {
    let mut got = vec![0u8; n];
    peer.read_exact(&mut got).unwrap();
    got
}

#[test]
fn a_turns_writes_to_many_connections_go_in_one_submission() {
    on_worker(async {
        let mut pairs = pairs(8).await;
        let before = counts().unwrap();
        for (i, (s, _)) in pairs.iter_mut().enumerate() {
            s.write_all(format!("message {i}\n").as_bytes())
                .await
                .unwrap();
            s.write_all(b"and more\n").await.unwrap();
            s.flush().await.unwrap();
        }
        // Written, not yet sent: the flusher runs after this task yields.
        assert_eq!(counts().unwrap(), before);
        tokio::task::yield_now().await;
        let after = counts().unwrap();
        assert_eq!((after.0 - before.0, after.1 - before.1), (1, 8));
        for (i, (_, peer)) in pairs.iter_mut().enumerate() {
            let want = format!("message {i}\nand more\n");
            assert_eq!(read_exact(peer, want.len()), want.as_bytes());
        }
    });
}

#[test]
fn a_large_write_goes_after_the_queued_bytes() {
    on_worker(async {
        let (mut s, mut peer) = pairs(1).await.pop().unwrap();
        let big: Vec<u8> = (0..MOST * 3).map(|i| (i % 251) as u8).collect();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            peer.read_to_end(&mut got).unwrap();
            got
        });
        s.write_all(b"head").await.unwrap();
        s.write_all(&big).await.unwrap();
        s.write_all(b"tail").await.unwrap();
        s.shutdown().await.unwrap();
        drop(s);
        let got = tokio::task::spawn_blocking(move || reader.join().unwrap())
            .await
            .unwrap();
        let mut want = b"head".to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(b"tail");
        assert_eq!(got.len(), want.len());
        assert!(got == want, "bytes out of order");
    });
}

#[test]
fn a_full_socket_leaves_bytes_over_that_later_calls_send_in_order() {
    on_worker(async {
        // Small buffers on both ends (the accepted socket takes the listener's).
        let listener = tokio::net::TcpSocket::new_v4().unwrap();
        listener.set_send_buffer_size(8192).unwrap();
        listener.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = listener.listen(16).unwrap();
        let addr = listener.local_addr().unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut peer = socket.connect(addr).await.unwrap();
        let (s, _) = listener.accept().await.unwrap();
        let mut s = Batched::new(s);
        // 2 MiB in writes of 1,000 bytes, while the peer reads slowly: the batch meets
        // a full socket (a send that takes part of the bytes, or none).
        const WRITES: usize = 2048;
        let writer = tokio::spawn(async move {
            for i in 0..WRITES {
                let msg = vec![(i % 256) as u8; 1000];
                s.write_all(&msg).await.unwrap();
                if i % 7 == 0 {
                    s.flush().await.unwrap();
                }
            }
            s.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        let mut chunk = [0u8; 3000];
        loop {
            let n = peer.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&chunk[..n]);
            if got.len() % 5 == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        writer.await.unwrap();
        assert!(short_sends() > 0, "no send met a full socket");
        assert_eq!(got.len(), WRITES * 1000);
        for (i, msg) in got.chunks(1000).enumerate() {
            assert!(
                msg.iter().all(|&b| b == (i % 256) as u8),
                "write {i} out of order"
            );
        }
    });
}

#[test]
fn a_send_that_fails_fails_a_later_call() {
    on_worker(async {
        let (mut s, peer) = pairs(1).await.pop().unwrap();
        // The peer resets the connection.
        let peer = socket_with_linger_zero(peer);
        drop(peer);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut failed = None;
        for _ in 0..1000 {
            let r = async {
                s.write_all(b"still there?").await?;
                s.flush().await
            }
            .await;
            if let Err(e) = r {
                failed = Some(e);
                break;
            }
            tokio::task::yield_now().await;
        }
        let e = failed.expect("a write to a reset connection fails");
        assert!(short_sends() > 0, "the failure was not a batched send's");
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ),
            "{e:?}"
        );
    });
}

fn socket_with_linger_zero(s: std::net::TcpStream) -> std::net::TcpStream {
    let s = TcpStream::from_std({
        s.set_nonblocking(true).unwrap();
        s
    })
    .unwrap();
    #[allow(deprecated)]
    s.set_linger(Some(Duration::ZERO)).unwrap();
    let s = s.into_std().unwrap();
    s.set_nonblocking(false).unwrap();
    s
}

#[test]
fn dropping_a_stream_sends_what_was_written() {
    on_worker(async {
        let (mut s, mut peer) = pairs(1).await.pop().unwrap();
        s.write_all(b"last words").await.unwrap();
        drop(s);
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"last words");
        // Nothing was left for the flusher.
        tokio::task::yield_now().await;
    });
}

#[test]
fn reads_answer_while_bytes_are_queued() {
    on_worker(async {
        let (mut s, mut peer) = pairs(1).await.pop().unwrap();
        std::io::Write::write_all(&mut peer, b"ping").unwrap();
        s.write_all(b"pong").await.unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        s.flush().await.unwrap();
        tokio::task::yield_now().await;
        assert_eq!(read_exact(&mut peer, 4), b"pong");
    });
}

#[test]
fn off_the_workers_writes_are_plain() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (mut s, mut peer) = pairs(1).await.pop().unwrap();
        s.write_all(b"plain").await.unwrap();
        // Sent already: no flusher runs on this thread.
        assert!(counts().is_none());
        assert_eq!(read_exact(&mut peer, 5), b"plain");
    });
}

#[test]
fn a_connection_gives_back_a_grown_buffer_once_sent() {
    on_worker(async {
        let (mut s, mut peer) = pairs(1).await.pop().unwrap();
        let body = vec![7u8; 10 * 1024];
        s.write_all(&body).await.unwrap();
        let capacity = |s: &Batched| s.slot.as_ref().unwrap().lock().buf.capacity();
        assert!(capacity(&s) >= body.len(), "the write was not queued");
        tokio::task::yield_now().await;
        assert_eq!(read_exact(&mut peer, body.len()), body);
        assert_eq!(capacity(&s), 0);
        s.write_all(b"small").await.unwrap();
        tokio::task::yield_now().await;
        assert_eq!(read_exact(&mut peer, 5), b"small");
        assert!(capacity(&s) > 0, "a small buffer is kept");
    });
}
