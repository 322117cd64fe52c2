//! h2spec, the HTTP/2 conformance tester, against a plaintext listener (h2c with prior
//! knowledge) and a TLS listener (ALPN `h2`), each routing to a backend: weir's own
//! HTTP/2 server (`weir_h2`) on both.
//!
//! The binary is `$WEIR_H2SPEC`, else `h2spec` on `PATH`, else the one `scripts/h2spec`
//! installs (`${WEIR_H2SPEC_CACHE:-$HOME/.cache/weir/h2spec}/h2spec`). Without one the
//! test prints why and passes, unless `WEIR_REQUIRE_H2SPEC` is set (as in CI), when it
//! fails.

mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use support::*;
use weir_model::{Protocol, Resource, UpstreamProtocol};

/// Longest h2spec run allowed (each run takes a few seconds; cases time out after 3 s).
const RUN_LIMIT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2spec_passes_over_h2c_and_tls() {
    let Some(bin) = h2spec_binary() else {
        assert!(
            std::env::var_os("WEIR_REQUIRE_H2SPEC").is_none(),
            "WEIR_REQUIRE_H2SPEC is set but no h2spec binary was found \
             (set WEIR_H2SPEC, or run scripts/h2spec to install it)"
        );
        println!(
            "SKIPPED h2spec_passes_over_h2c_and_tls: no h2spec binary \
             (run scripts/h2spec to install it, or set WEIR_H2SPEC)"
        );
        return;
    };
    let b = Backend::start("b").await;
    let routes = |protocol| {
        vec![
            listener(protocol),
            vhost(None, vec![rule("/", forward(&[("b", 1)]))]),
            cluster("b", &[b.addr], UpstreamProtocol::Http1),
        ]
    };
    let h2c = Proxy::start(routes(Protocol::Http)).await;
    let ca = Ca::new();
    let (cert, _) = ca.leaf(&["127.0.0.1", "a.test"]);
    let mut tls_resources = routes(Protocol::Https);
    tls_resources.push(Resource::Certificate(cert.clone()));
    tls_resources.push(sni(None, &cert));
    let tls = Proxy::start(tls_resources).await;

    for (name, port, tls) in [
        ("h2c", h2c.addr.port(), false),
        ("TLS", tls.addr.port(), true),
    ] {
        let bin = bin.clone();
        let (output, summary) = tokio::task::spawn_blocking(move || run(&bin, port, tls))
            .await
            .expect("h2spec runner");
        println!("h2spec over {name}: {summary:?}");
        let Some(summary) = summary else {
            panic!("h2spec over {name} printed no summary:\n{output}");
        };
        assert!(
            summary.failed == 0 && summary.passed >= 140,
            "h2spec over {name}: {summary:?}\n{}",
            output
                .split_once("Failures:")
                .map_or(output.as_str(), |(_, failures)| failures)
        );
    }
}

/// h2spec's closing line: `145 tests, 145 passed, 0 skipped, 0 failed`.
#[derive(Debug, PartialEq, Eq)]
struct Summary {
    tests: u32,
    passed: u32,
    skipped: u32,
    failed: u32,
}

fn parse_summary(output: &str) -> Option<Summary> {
    output.lines().rev().find_map(|line| {
        let mut numbers = line.split(", ").map(|part| {
            let (n, word) = part.trim().split_once(' ')?;
            Some((n.parse::<u32>().ok()?, word))
        });
        let mut next = |want: &str| match numbers.next()?? {
            (n, word) if word == want => Some(n),
            _ => None,
        };
        let summary = Summary {
            tests: next("tests")?,
            passed: next("passed")?,
            skipped: next("skipped")?,
            failed: next("failed")?,
        };
        Some(summary)
    })
}

/// Runs h2spec against 127.0.0.1:`port`; returns its output and summary. Killed after
/// [`RUN_LIMIT`].
fn run(bin: &Path, port: u16, tls: bool) -> (String, Option<Summary>) {
    let mut cmd = Command::new(bin);
    // Requests go to a path the backend answers after 100 ms. Cases such as 5.1.8 and
    // 5.1.9 send a GET's HEADERS without END_STREAM, then RST_STREAM, then another
    // frame on the stream, and expect STREAM_CLOSED for it. A GET of unknown length goes
    // upstream without a body, so a backend that answered at once could let weir send the
    // whole response first, and with it RST_STREAM(NO_ERROR) for the body it will not
    // read; after its own reset weir ignores the stream's later frames, as RFC 9113
    // §5.1 asks, and h2spec waited for an error that never came (one failure of 5.1.9
    // over TLS in a full `cargo test`, its three frames in separate TLS records).
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-o", "3"]);
    cmd.args(["-P", "/after-100ms"]);
    if tls {
        cmd.args(["-t", "-k"]);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start h2spec");
    // Read both pipes while waiting, so that a full pipe cannot stall h2spec.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let step = Duration::from_millis(100);
    let mut exited = false;
    for _ in 0..RUN_LIMIT.as_millis() / step.as_millis() {
        if child.try_wait().expect("wait for h2spec").is_some() {
            exited = true;
            break;
        }
        std::thread::sleep(step);
    }
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
    }
    let output = format!(
        "{}{}",
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default()
    );
    assert!(
        exited,
        "h2spec did not finish within {RUN_LIMIT:?}:\n{output}"
    );
    let summary = parse_summary(&output);
    (output, summary)
}

fn h2spec_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("WEIR_H2SPEC") {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("h2spec"))
            .find(|p| p.is_file())
    });
    let cache = || {
        std::env::var_os("WEIR_H2SPEC_CACHE")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/weir/h2spec")))
            .map(|dir| dir.join("h2spec"))
            .filter(|p| p.is_file())
    };
    on_path.or_else(cache)
}

#[test]
fn summary_line_is_parsed() {
    let out =
        "Failures:\n...\nFinished in 0.3 seconds\n145 tests, 144 passed, 0 skipped, 1 failed\n";
    assert_eq!(
        parse_summary(out),
        Some(Summary {
            tests: 145,
            passed: 144,
            skipped: 0,
            failed: 1
        })
    );
    assert_eq!(parse_summary("Error: connection refused\n"), None);
}
