//! The `weir` binary's allocator set-up (`src/allocator.rs`), seen from outside: it runs
//! before `main`, and the user's environment wins.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::support::free_port;

/// `weir echo` on a free port, serving (so its set-up ran), with `env` added.
fn echo(env: &[(&str, &str)]) -> Child {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["echo", "--listen", &format!("127.0.0.1:{port}")])
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "weir echo did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// The process's `THP_enabled` flag (Linux's /proc/PID/status).
fn thp_enabled(child: &Child) -> String {
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(|v| v.trim().to_owned())
        .expect("THP_enabled in /proc/PID/status")
}

#[test]
fn transparent_huge_pages_are_off_unless_the_user_allows_them() {
    let mut weir = echo(&[]);
    let off = thp_enabled(&weir);
    weir.kill().unwrap();
    weir.wait().unwrap();
    assert_eq!(
        off, "0",
        "weir turns transparent huge pages off before main"
    );

    let mut weir = echo(&[("MIMALLOC_ALLOW_THP", "1")]);
    let on = thp_enabled(&weir);
    weir.kill().unwrap();
    weir.wait().unwrap();
    assert_eq!(on, "1", "MIMALLOC_ALLOW_THP set by the user wins");
}
