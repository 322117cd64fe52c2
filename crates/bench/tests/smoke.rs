//! End to end: the propagation bench against the debug weir binary, small enough for CI.
//! Checks the shape of the report and that nothing failed; never timings.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

fn workspace() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// Waits for `child` at most `limit`, killing it past that.
fn wait_bounded(mut child: Child, limit: Duration, what: &str) -> ExitStatus {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("waiting for a child") {
            return status;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("{what} did not finish within {limit:?}");
}

/// `target/debug/weir`, built with `cargo build -p weir` when missing.
fn debug_weir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace().join("target"), PathBuf::from);
    let weir = target.join("debug/weir");
    if !weir.is_file() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let child = Command::new(cargo)
            .args(["build", "-p", "weir"])
            .current_dir(workspace())
            .spawn()
            .expect("running cargo build -p weir");
        let status = wait_bounded(child, Duration::from_secs(1800), "cargo build -p weir");
        assert!(status.success(), "cargo build -p weir failed: {status}");
    }
    assert!(weir.is_file(), "{} missing after building", weir.display());
    weir
}

#[test]
fn propagation_bench_runs_end_to_end() {
    let weir = debug_weir();
    let out = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let stdout = out.path().join("bench.stdout");
    let stderr = out.path().join("bench.stderr");
    let child = Command::new(env!("CARGO_BIN_EXE_weir-bench"))
        .args([
            "propagation",
            "--domains",
            "20",
            "--changes",
            "3",
            "--timeout-ms",
            "30000",
            "--side-concurrency",
            "2",
        ])
        .arg("--weir")
        .arg(&weir)
        .arg("--out")
        .arg(out.path())
        .arg("--cache")
        .arg(cache.path())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("starting weir-bench");
    let status = wait_bounded(child, Duration::from_secs(600), "weir-bench propagation");
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let weir_log = read(&out.path().join("propagation-20.weir.log"));
    assert!(
        status.success(),
        "weir-bench failed: {status}\nstderr:\n{}\nweir log:\n{weir_log}",
        read(&stderr)
    );
    let table = read(&stdout);
    assert!(
        table.contains("| add | 3 |"),
        "no markdown table on stdout:\n{table}"
    );

    let json = std::fs::read_to_string(out.path().join("propagation-20.json"))
        .expect("JSON report written");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    for op in ["add", "modify", "remove"] {
        let results = report["ops"][op]["results"]
            .as_array()
            .unwrap_or_else(|| panic!("no results for {op}"));
        assert_eq!(results.len(), 3, "{op}: {results:?}");
        assert_eq!(
            report["ops"][op]["summary"]["failures"], 0,
            "{op} changes not seen: {results:?}"
        );
    }
    assert_eq!(report["params"]["domains"], 20);
    assert_eq!(report["startup"]["domains_not_serving"], 0);
    let side = &report["side"];
    assert!(
        side["requests"].as_u64().unwrap() > 0,
        "side client sent nothing: {side}"
    );
    assert_eq!(side["errors"], 0, "side errors: {side}");
    assert_eq!(side["non_200"], 0, "side non-200 responses: {side}");
    // The cache holds the CA and one leaf per domain (20 initial + 3 added).
    let leaves = std::fs::read_dir(cache.path().join("leaves"))
        .unwrap()
        .count();
    assert_eq!(leaves, 23);
}
