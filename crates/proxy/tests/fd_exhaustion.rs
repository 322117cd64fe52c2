//! Running out of file descriptors: the accept loop backs off and recovers, logging once
//! per episode. A binary of its own: the test lowers the process's descriptor limit and
//! installs the global tracing subscriber.

mod support;

use std::sync::{Arc, Mutex};

use support::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber, span};
use weir_model::Protocol;

/// The warnings logged by any thread, as (level, message).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<(Level, String)>>>);

impl Captured {
    fn count(&self, level: Level, text: &str) -> usize {
        let events = self.0.lock().unwrap_or_else(|p| p.into_inner());
        events
            .iter()
            .filter(|(l, m)| *l == level && m.contains(text))
            .count()
    }
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Captured {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        // WARN and ERROR (tracing orders more verbose levels higher).
        *m.level() <= Level::WARN
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, e: &Event<'_>) {
        let mut m = Message(String::new());
        e.record(&mut m);
        let mut events = self.0.lock().unwrap_or_else(|p| p.into_inner());
        events.push((*e.metadata().level(), m.0));
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

#[tokio::test]
async fn out_of_file_descriptors_backs_off_and_recovers() {
    let captured = Captured::default();
    tracing::subscriber::set_global_default(captured.clone()).expect("the only subscriber");
    let p = Proxy::start(vec![listener(Protocol::Http), ok_rule()]).await;

    // Leave a few descriptors free, then take them all.
    let (soft, hard) = nofile();
    let open = std::fs::read_dir("/proc/self/fd").expect("fds").count() as u64;
    set_soft_nofile(open + 32, hard);
    let mut filler = Vec::new();
    for _ in 0..10_000 {
        match std::fs::File::open("/dev/null") {
            Ok(f) => filler.push(f),
            Err(_) => break,
        }
    }
    assert!(!filler.is_empty(), "no descriptor was free");
    // A client connects with the last free descriptor (its socket takes it before the
    // connection exists), so the proxy cannot accept the connection.
    drop(filler.pop());
    let mut client = TcpStream::connect(p.addr).await.expect("connect");
    let errors = "weir_downstream_accept_errors_total";
    let mut failing = false;
    for _ in 0..500 {
        if p.metric(errors) >= 4 {
            failing = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Free the descriptors before asserting anything (the harness needs some).
    drop(filler);
    assert!(failing, "accept never failed: {}", p.metrics());

    // Accepting resumes; the waiting client is served.
    client
        .write_all(b"GET / HTTP/1.1\r\nhost: a.test\r\n\r\n")
        .await
        .expect("write");
    let r = read_raw_response(&mut client).await.map(|r| r.status);
    assert_eq!(r, Some(200));
    set_soft_nofile(soft, hard);
    // One warning when the episode began and one when it ended, not one per failure.
    assert_eq!(captured.count(Level::WARN, "accept failing"), 1);
    assert_eq!(captured.count(Level::WARN, "accepting again"), 1);
}
