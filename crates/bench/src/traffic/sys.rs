//! The machine side of the traffic bench: finding and installing the peer proxies and load
//! generators, CPU pinning, per-CPU busy time and the stats of whole process trees.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::procs::proc_stats;

/// A program the bench runs, and the Debian packages that provide it (first that exists).
pub(crate) struct Tool {
    pub(crate) program: &'static str,
    pub(crate) packages: &'static [&'static str],
}

/// Everything besides weir that the traffic bench runs.
pub(crate) const TOOLS: &[Tool] = &[
    Tool {
        program: "nginx",
        packages: &["nginx-light", "nginx"],
    },
    Tool {
        program: "haproxy",
        packages: &["haproxy"],
    },
    Tool {
        program: "wrk",
        packages: &["wrk"],
    },
    Tool {
        program: "h2load",
        packages: &["nghttp2-client"],
    },
    Tool {
        program: "taskset",
        packages: &["util-linux"],
    },
];

/// The absolute path of `program` on PATH (plus the sbin directories, where nginx and
/// haproxy live and which a non-root PATH may lack).
pub(crate) fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// Whether this process runs as root (real uid 0 in /proc/self/status).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// Makes sure every tool is on PATH: installs the missing ones with apt-get when running as
/// root and `install` is set, then fails naming whatever is still missing.
pub(crate) fn ensure_tools(install: bool) -> Result<()> {
    let missing: Vec<&Tool> = TOOLS
        .iter()
        .filter(|t| which(t.program).is_none())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.iter().map(|t| t.program).collect();
    if install && is_root() {
        eprintln!(
            "weir-bench: {} missing; installing with apt-get (pass --no-install to skip)",
            names.join(", ")
        );
        apt(&["update", "-qq"])?;
        for tool in &missing {
            let ok = tool
                .packages
                .iter()
                .any(|pkg| apt(&["install", "-y", "-qq", pkg]).is_ok());
            if !ok {
                eprintln!(
                    "weir-bench: apt-get could not install any of {:?}",
                    tool.packages
                );
            }
        }
    }
    let still: Vec<String> = TOOLS
        .iter()
        .filter(|t| which(t.program).is_none())
        .map(|t| format!("{} (Debian: {})", t.program, t.packages.join(" or ")))
        .collect();
    if !still.is_empty() {
        bail!(
            "missing tools: {}{}",
            still.join(", "),
            if install && is_root() {
                ""
            } else {
                "; install them (as root the bench does it itself unless --no-install)"
            }
        );
    }
    Ok(())
}

fn apt(args: &[&str]) -> Result<()> {
    let status = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .status()
        .context("running apt-get")?;
    if !status.success() {
        bail!("apt-get {} failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Pins every thread of process `pid` to `cpu` (with `taskset -a -p`).
pub(crate) fn pin_process(pid: u32, cpu: usize) -> Result<()> {
    let out = Command::new("taskset")
        .args(["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("running taskset")?;
    if !out.status.success() {
        bail!(
            "taskset -a -p -c {cpu} {pid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Busy and total jiffies of each CPU, from /proc/stat.
#[derive(Clone, Debug, Default)]
pub(crate) struct CpuTimes {
    /// (busy, total) per CPU index.
    per_cpu: Vec<(u64, u64)>,
}

impl CpuTimes {
    /// Reads /proc/stat now (empty when it cannot be read).
    pub(crate) fn now() -> CpuTimes {
        std::fs::read_to_string("/proc/stat")
            .map(|s| CpuTimes::parse(&s))
            .unwrap_or_default()
    }

    /// Parses the `cpuN` lines; idle and iowait count as not busy.
    pub(crate) fn parse(text: &str) -> CpuTimes {
        let mut per_cpu = Vec::new();
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            let Some(name) = fields.next() else { continue };
            let Some(index) = name.strip_prefix("cpu") else {
                continue;
            };
            let Ok(index) = index.parse::<usize>() else {
                continue;
            };
            let values: Vec<u64> = fields.filter_map(|f| f.parse().ok()).collect();
            let total: u64 = values.iter().take(8).sum();
            let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
            if per_cpu.len() <= index {
                per_cpu.resize(index + 1, (0, 0));
            }
            per_cpu[index] = (total.saturating_sub(idle), total);
        }
        CpuTimes { per_cpu }
    }

    /// Percent busy of CPU `cpu` between `earlier` and `self` (None if unknown).
    pub(crate) fn busy_percent_since(&self, earlier: &CpuTimes, cpu: usize) -> Option<f64> {
        let (b1, t1) = *self.per_cpu.get(cpu)?;
        let (b0, t0) = *earlier.per_cpu.get(cpu)?;
        let total = t1.checked_sub(t0)?;
        (total > 0).then(|| b1.saturating_sub(b0) as f64 * 100.0 / total as f64)
    }
}

/// The pids of `root` and all its descendants (from the ppid field of /proc/*/stat).
pub(crate) fn process_tree(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            if let Some(ppid) = parse_ppid(&stat) {
                parents.push((pid, ppid));
            }
        }
    }
    let mut tree = vec![root];
    let mut at = 0;
    while at < tree.len() {
        let parent = tree[at];
        tree.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        at += 1;
    }
    tree
}

fn parse_ppid(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Memory and CPU time summed over a process tree.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct TreeStats {
    /// Sum of VmRSS: pages shared between the processes (nginx's master and worker)
    /// count once per process.
    pub(crate) rss_kib: u64,
    /// Sum of Pss (/proc/PID/smaps_rollup): shared pages split between their users, so
    /// the tree's real footprint.
    pub(crate) pss_kib: u64,
    pub(crate) cpu_seconds: f64,
    /// The part of `cpu_seconds` spent in the kernel.
    pub(crate) system_seconds: f64,
    /// Context switches of every thread of the tree so far: voluntary (a thread
    /// blocked, e.g. waiting in epoll for the next request) and involuntary (a thread
    /// was preempted, e.g. by the backend sharing its core).
    pub(crate) voluntary_switches: u64,
    pub(crate) involuntary_switches: u64,
}

/// The stats of `root` and its descendants.
pub(crate) fn tree_stats(root: u32) -> TreeStats {
    let mut sum = TreeStats::default();
    for pid in process_tree(root) {
        if let Ok(s) = proc_stats(pid) {
            sum.rss_kib += s.rss_kib;
            sum.cpu_seconds += s.cpu_seconds;
            sum.system_seconds += s.system_seconds;
        }
        let (v, i) = thread_switches(pid);
        sum.voluntary_switches += v;
        sum.involuntary_switches += i;
        sum.pss_kib += std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
            .ok()
            .and_then(|t| parse_pss(&t))
            .unwrap_or(0);
    }
    sum
}

/// The voluntary and involuntary context switches of every thread of process `pid`
/// (/proc/PID/task/TID/status; a thread that ended no longer counts).
fn thread_switches(pid: u32) -> (u64, u64) {
    let mut sum = (0, 0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return sum;
    };
    for t in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(t.path().join("status")) {
            let (v, i) = parse_switches(&text);
            sum.0 += v;
            sum.1 += i;
        }
    }
    sum
}

/// The `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` lines of a status file.
fn parse_switches(status: &str) -> (u64, u64) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (
        field("voluntary_ctxt_switches:"),
        field("nonvoluntary_ctxt_switches:"),
    )
}

/// The `Pss:` line of smaps_rollup, in KiB.
fn parse_pss(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with("Pss:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The threads of a process tree: (total threads, names of the threads per process).
pub(crate) fn thread_names(root: u32) -> Vec<Vec<String>> {
    process_tree(root)
        .into_iter()
        .map(|pid| {
            let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
                .map(|d| {
                    d.flatten()
                        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                        .map(|n| n.trim().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names
        })
        .collect()
}

/// Kills (SIGKILL) every descendant of `root`, deepest first; `root` itself is left to
/// its guard.
pub(crate) fn kill_descendants(root: u32) {
    let tree = process_tree(root);
    for pid in tree.iter().skip(1).rev() {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs `program args…` to completion with stdout and stderr in files `<log>.out` and
/// `<log>.err`, killing it after `limit`. Returns (success, stdout, stderr).
pub(crate) fn run_bounded(
    program: &Path,
    args: &[String],
    log: &Path,
    limit: Duration,
) -> Result<(bool, String, String)> {
    let out_path = log.with_extension("out");
    let err_path = log.with_extension("err");
    let out = std::fs::File::create(&out_path)
        .with_context(|| format!("creating {}", out_path.display()))?;
    let err = std::fs::File::create(&err_path)
        .with_context(|| format!("creating {}", err_path.display()))?;
    let mut child: Child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    match status {
        Some(s) => Ok((s.success(), stdout, stderr)),
        None => bail!(
            "{} {} did not finish within {limit:?}",
            program.display(),
            args.join(" ")
        ),
    }
}

/// Versions of the programs under test, for the report.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Versions {
    pub(crate) nginx: Option<String>,
    pub(crate) haproxy: Option<String>,
    pub(crate) wrk: Option<String>,
    pub(crate) h2load: Option<String>,
}

impl Versions {
    /// Asks each program for its version (first line that names it).
    pub(crate) fn probe() -> Versions {
        let ask = |prog: &str, args: &[&str], needle: &str| -> Option<String> {
            let path = which(prog)?;
            let out = Command::new(path).args(args).output().ok()?;
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            text.lines()
                .find(|l| l.to_lowercase().contains(needle))
                .map(|l| l.trim().to_owned())
        };
        Versions {
            nginx: ask("nginx", &["-v"], "nginx version"),
            haproxy: ask("haproxy", &["-v"], "haproxy version"),
            wrk: ask("wrk", &["--version"], "wrk"),
            h2load: ask("h2load", &["--version"], "h2load"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_cpu_busy_percent() {
        let a = CpuTimes::parse(
            "cpu  10 0 10 100 0 0 0 0 0 0\ncpu0 5 0 5 50 0 0 0 0 0 0\ncpu1 5 0 5 50 0 0 0 0 0 0\nintr 1\n",
        );
        let b = CpuTimes::parse(
            "cpu  10 0 10 100 0 0 0 0 0 0\ncpu0 95 0 5 50 0 0 0 0 0 0\ncpu1 5 0 5 140 10 0 0 0 0 0\n",
        );
        assert_eq!(b.busy_percent_since(&a, 0), Some(100.0));
        assert_eq!(b.busy_percent_since(&a, 1), Some(0.0));
        assert_eq!(b.busy_percent_since(&a, 2), None);
    }

    #[test]
    fn ppid_after_the_command_name() {
        assert_eq!(parse_ppid("42 (a (b) c) S 7 42 42 0"), Some(7));
        assert_eq!(parse_ppid("garbage"), None);
    }

    #[test]
    fn own_process_tree_holds_itself() {
        let me = std::process::id();
        assert_eq!(process_tree(me)[0], me);
        let st = tree_stats(me);
        assert!(st.rss_kib > 0);
        assert!(st.pss_kib > 0 && st.pss_kib <= st.rss_kib);
        let rollup = "55d0-7ffd ---p 00000000 00:00 0 [rollup]\nRss:    4096 kB\nPss:    1234 kB\nPss_Anon: 1000 kB\n";
        assert_eq!(parse_pss(rollup), Some(1234));
    }
}

#[cfg(test)]
mod switch_tests {
    use super::*;

    #[test]
    fn reads_both_switch_counts() {
        let status = "Name:\tweir-worker-0\nvoluntary_ctxt_switches:\t1234\nnonvoluntary_ctxt_switches:\t56\n";
        assert_eq!(parse_switches(status), (1234, 56));
        assert_eq!(parse_switches("Name:\tx\n"), (0, 0));
    }

    #[test]
    fn counts_this_process() {
        let (v, i) = thread_switches(std::process::id());
        // The test thread has run and slept (thread start-up blocks on a lock at least
        // once); a process with no task directory reads as none.
        assert!(v + i > 0);
        assert_eq!(thread_switches(u32::MAX), (0, 0));
    }
}
