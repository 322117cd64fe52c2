//! Memory held by slow request heads stays bounded. A binary of its own: the test
//! measures the whole process's RSS.

mod support;

use support::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use weir_model::Protocol;

/// A field of /proc/self/status in KiB (VmRSS, VmHWM).
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

#[tokio::test]
async fn slow_unterminated_heads_hold_bounded_memory() {
    // 1,000 sockets (both ends live in this process) need more than a 1,024 soft limit.
    let (soft, hard) = nofile();
    if soft < 4096 && hard > soft {
        set_soft_nofile(hard.min(4096), hard);
    }
    let p = Proxy::start(vec![listener(Protocol::Http), ok_rule()]).await;
    let before = status_kib("VmRSS");
    // 500 clients each send a head that never ends, in 8 KiB pieces, up to 300 KiB
    // (under hyper's default 400 KiB buffer, so without a head limit every byte is kept).
    let mut conns = Vec::with_capacity(500);
    for _ in 0..500 {
        let mut s = TcpStream::connect(p.addr).await.expect("connect");
        s.write_all(b"GET / HTTP/1.1\r\nhost: a.test\r\nx-pad: ")
            .await
            .expect("write");
        conns.push(Some(s));
    }
    let chunk = vec![b'a'; 8 * 1024];
    for _round in 0..38 {
        for slot in conns.iter_mut() {
            let Some(s) = slot else { continue };
            // A closed connection (431) takes no more; a full socket buffer is skipped.
            match s.try_write(&chunk) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => *slot = None,
            }
        }
        // Lets the proxy read what was sent (its buffers are what is measured).
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // A well-behaved client is served meanwhile.
    let mut good = TcpStream::connect(p.addr).await.expect("connect");
    good.write_all(b"GET / HTTP/1.1\r\nhost: a.test\r\n\r\n")
        .await
        .expect("write");
    let r = read_raw_response(&mut good).await.map(|r| r.status);
    assert_eq!(r, Some(200));
    let peak = status_kib("VmHWM");
    let growth_mib = peak.saturating_sub(before) / 1024;
    eprintln!("500 slow heads: peak RSS {before} KiB -> {peak} KiB");
    assert!(
        growth_mib < 100,
        "500 slow heads grew the peak RSS by {growth_mib} MiB"
    );
    // Every one of them was refused (431) and closed, not held.
    for (i, slot) in conns.iter_mut().enumerate() {
        if let Some(s) = slot {
            assert!(closed_by_peer(s).await, "slow head {i} still open");
        }
    }
}
