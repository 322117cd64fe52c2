//! Child processes (weir, the echo backend) and what /proc says about them.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use serde::Serialize;

/// A child process that is killed when the guard is dropped, whatever the reason (error,
/// panic, Ctrl-C unwinding the runtime).
pub(crate) struct ChildGuard {
    name: &'static str,
    child: Option<Child>,
}

impl ChildGuard {
    /// Spawns `program args…` with stdout and stderr appended to `log`.
    pub(crate) fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<ChildGuard> {
        let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        Ok(ChildGuard {
            name,
            child: Some(child),
        })
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The exit status if the process has already exited.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Asks the process to stop (SIGTERM through `kill`, so no unsafe code is needed),
    /// waits up to `grace`, then kills it. Returns its exit status.
    pub(crate) fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!(
            "weir-bench: {} did not stop within {grace:?}; killing it",
            self.name
        );
        let _ = child.kill();
        child.wait().ok()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A loopback port that was free a moment ago, for a listener a process binds later.
///
/// Never the same port twice in this process: two ports asked for in a row (a proxy's
/// plaintext and TLS listeners) used to be the same one now and then, since the kernel
/// may hand a port that was let go straight back — and a proxy told to serve plaintext and
/// TLS on one port serves neither as asked. Taken below the kernel's ephemeral range
/// (32768 and up by default), so that the load generator's own connections, bound to
/// port 0 meanwhile, cannot take it either; each process starts at its own offset.
pub(crate) fn free_port() -> Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        (std::process::id() % 400) * 30,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = (FIRST + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no free port in {FIRST}..{}", FIRST + SPAN)
}

/// Resident memory and CPU time of a process.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct ProcStats {
    /// VmRSS from /proc/PID/status, in KiB.
    pub(crate) rss_kib: u64,
    /// VmHWM from /proc/PID/status (the peak of VmRSS so far), in KiB.
    pub(crate) peak_rss_kib: u64,
    /// utime + stime from /proc/PID/stat, in seconds.
    pub(crate) cpu_seconds: f64,
    /// stime alone: the part spent in the kernel on the process's behalf (system calls,
    /// page faults, and on loopback the receiving side's TCP processing too).
    pub(crate) system_seconds: f64,
}

/// Reads the stats of process `pid`.
pub(crate) fn proc_stats(pid: u32) -> Result<ProcStats> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = parse_cpu_ticks(&stat)?;
    Ok(ProcStats {
        rss_kib: parse_status_kib(&status, "VmRSS:")?,
        peak_rss_kib: parse_status_kib(&status, "VmHWM:")?,
        cpu_seconds: ticks.total() as f64 / clk_tck(),
        system_seconds: ticks.system as f64 / clk_tck(),
    })
}

/// The value in KiB of the `field` line (`VmRSS:`, `VmHWM:`) of /proc/PID/status.
fn parse_status_kib(status: &str, field: &str) -> Result<u64> {
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .ok_or_else(|| anyhow!("no {field} line"))?;
    let kib = line
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow!("empty {field} line"))?;
    Ok(kib.parse()?)
}

/// utime and stime, in clock ticks.
#[derive(Clone, Copy, Debug, PartialEq)]
struct CpuTicks {
    user: u64,
    system: u64,
}

impl CpuTicks {
    fn total(self) -> u64 {
        self.user + self.system
    }
}

/// utime and stime in clock ticks. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
fn parse_cpu_ticks(stat: &str) -> Result<CpuTicks> {
    let rest = stat
        .rfind(')')
        .map(|at| &stat[at + 1..])
        .ok_or_else(|| anyhow!("malformed stat"))?;
    // After ")": field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| -> Result<u64> {
        Ok(fields
            .get(i)
            .ok_or_else(|| anyhow!("short stat"))?
            .parse()?)
    };
    Ok(CpuTicks {
        user: get(11)?,
        system: get(12)?,
    })
}

/// Clock ticks per second, asked of `getconf` once (100 if that fails: the usual value).
fn clk_tck() -> f64 {
    static TCK: OnceLock<f64> = OnceLock::new();
    *TCK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|t| *t > 0.0)
            .unwrap_or(100.0)
    })
}

/// The last `lines` lines of a log file, for error messages.
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let status = "Name:\tweir\nVmPeak:\t  9000 kB\nVmHWM:\t   23456 kB\nVmRSS:\t   12345 kB\n";
        assert_eq!(parse_status_kib(status, "VmRSS:").unwrap(), 12345);
        assert_eq!(parse_status_kib(status, "VmHWM:").unwrap(), 23456);
        assert!(parse_status_kib(status, "VmSwap:").is_err());
        let stat = "42 (we ir) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
        let ticks = parse_cpu_ticks(stat).unwrap();
        assert_eq!((ticks.user, ticks.system, ticks.total()), (250, 50, 300));
        assert!(parse_cpu_ticks("garbage").is_err());
    }

    #[test]
    fn reads_own_stats() {
        let s = proc_stats(std::process::id()).unwrap();
        assert!(s.rss_kib > 0);
        assert!(s.peak_rss_kib >= s.rss_kib);
    }
}
