//! The external load generators: wrk (HTTP/1.1 keep-alive, plaintext or TLS) and h2load
//! (HTTP/2 over TLS): their command lines, wrk's Lua scripts, and parsers for their
//! output.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::stats::Summary;

/// Why a load generator's output could not be read.
#[derive(Debug, Error, PartialEq)]
pub(crate) enum ParseError {
    /// A line the result needs is missing.
    #[error("no `{0}` line in the output")]
    Missing(&'static str),
    /// A number or duration did not parse.
    #[error("cannot read {what} from `{text}`")]
    Bad {
        /// What was being read.
        what: &'static str,
        /// The text that was not understood.
        text: String,
    },
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Latency {
    pub(crate) p50_ms: f64,
    pub(crate) p90_ms: f64,
    pub(crate) p99_ms: f64,
    /// Only from sources that keep every sample (h2load's log, the bench's own clients).
    pub(crate) p999_ms: Option<f64>,
    pub(crate) max_ms: Option<f64>,
}

impl Latency {
    /// Percentiles of individual samples in microseconds (None when there are none).
    pub(crate) fn of_micros(us: &[u64]) -> Option<Latency> {
        if us.is_empty() {
            return None;
        }
        let ms: Vec<f64> = us.iter().map(|&u| u as f64 / 1000.0).collect();
        let s = Summary::of(&ms, 0);
        let mut sorted = ms;
        sorted.sort_by(f64::total_cmp);
        let idx = ((0.999 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
        Some(Latency {
            p50_ms: s.p50_ms,
            p90_ms: s.p90_ms,
            p99_ms: s.p99_ms,
            p999_ms: Some(sorted[idx]),
            max_ms: Some(s.max_ms),
        })
    }
}

/// What one load run measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoadResult {
    /// Requests (or connections, for handshake runs) completed, errors included.
    pub(crate) requests: u64,
    /// Wall time of the measurement.
    pub(crate) seconds: f64,
    /// requests / seconds.
    pub(crate) rps: f64,
    /// Socket errors, failed requests and responses that were not 2xx.
    pub(crate) errors: u64,
    pub(crate) latency: Option<Latency>,
}

/// A duration as wrk prints it (`639.12us`, `1.20ms`, `2.00s`, `1.50m`, `1.00h`), in ms.
pub(crate) fn parse_wrk_duration_ms(text: &str) -> Result<f64, ParseError> {
    let bad = || ParseError::Bad {
        what: "a duration",
        text: text.to_owned(),
    };
    let at = text
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or_else(bad)?;
    let (num, unit) = text.split_at(at);
    let v: f64 = num.parse().map_err(|_| bad())?;
    let factor = match unit {
        "us" => 0.001,
        "ms" => 1.0,
        "s" => 1000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        _ => return Err(bad()),
    };
    Ok(v * factor)
}

fn number<T: std::str::FromStr>(what: &'static str, text: &str) -> Result<T, ParseError> {
    text.trim()
        .trim_end_matches(',')
        .parse()
        .map_err(|_| ParseError::Bad {
            what,
            text: text.to_owned(),
        })
}

/// Parses wrk's report (run with `--latency`).
pub(crate) fn parse_wrk(out: &str) -> Result<LoadResult, ParseError> {
    let mut requests = None;
    let mut seconds = None;
    let mut rps = None;
    let mut errors = 0u64;
    let mut pct = [None; 3];
    for line in out.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() >= 4 && words[1] == "requests" && words[2] == "in" {
            requests = Some(number::<u64>("requests", words[0])?);
            seconds = Some(parse_wrk_duration_ms(words[3].trim_end_matches(','))? / 1000.0);
        } else if let Some(v) = line.strip_prefix("Requests/sec:") {
            rps = Some(number::<f64>("requests/sec", v)?);
        } else if let Some(rest) = line.strip_prefix("Socket errors:") {
            // "connect 0, read 0, write 0, timeout 0"
            for part in rest.split(',') {
                if let Some(n) = part.split_whitespace().nth(1) {
                    errors += number::<u64>("socket errors", n)?;
                }
            }
        } else if let Some(v) = line.strip_prefix("Non-2xx or 3xx responses:") {
            errors += number::<u64>("non-2xx responses", v)?;
        } else if words.len() == 2 && words[0].ends_with('%') {
            let slot = match words[0] {
                "50%" => 0,
                "90%" => 1,
                "99%" => 2,
                _ => continue,
            };
            pct[slot] = Some(parse_wrk_duration_ms(words[1])?);
        }
    }
    let requests = requests.ok_or(ParseError::Missing("N requests in T"))?;
    let seconds = seconds.unwrap_or(0.0);
    let rps = rps.ok_or(ParseError::Missing("Requests/sec"))?;
    let latency = match pct {
        [Some(p50_ms), Some(p90_ms), Some(p99_ms)] => Some(Latency {
            p50_ms,
            p90_ms,
            p99_ms,
            p999_ms: None,
            max_ms: None,
        }),
        _ => None,
    };
    Ok(LoadResult {
        requests,
        seconds,
        rps,
        errors,
        latency,
    })
}

/// Parses h2load's report. Latency comes from its per-request log (see
/// [`parse_h2load_log`]), not from this summary, which has no percentiles.
pub(crate) fn parse_h2load(out: &str) -> Result<LoadResult, ParseError> {
    let mut seconds = None;
    let mut done = None;
    let mut errors = 0u64;
    for line in out.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("finished in ") {
            // "10.00s, 12345.67 req/s, 1.23MB/s"
            let first = rest.split(',').next().unwrap_or_default().trim();
            seconds = Some(parse_wrk_duration_ms(first)? / 1000.0);
        } else if let Some(rest) = line.strip_prefix("requests:") {
            // "N total, N started, N done, N succeeded, N failed, N errored, N timeout"
            for part in rest.split(',') {
                let mut it = part.split_whitespace();
                let (Some(n), Some(what)) = (it.next(), it.next()) else {
                    continue;
                };
                match what {
                    "done" => done = Some(number::<u64>("done requests", n)?),
                    "failed" => errors += number::<u64>("failed requests", n)?,
                    _ => {}
                }
            }
        } else if let Some(rest) = line.strip_prefix("status codes:") {
            // "N 2xx, N 3xx, N 4xx, N 5xx"
            for part in rest.split(',') {
                let mut it = part.split_whitespace();
                let (Some(n), Some(class)) = (it.next(), it.next()) else {
                    continue;
                };
                if class != "2xx" {
                    errors += number::<u64>("status counts", n)?;
                }
            }
        }
    }
    let seconds = seconds.ok_or(ParseError::Missing("finished in"))?;
    let requests = done.ok_or(ParseError::Missing("requests:"))?;
    Ok(LoadResult {
        requests,
        seconds,
        rps: if seconds > 0.0 {
            requests as f64 / seconds
        } else {
            0.0
        },
        errors,
        latency: None,
    })
}

/// Per-request durations (µs) from h2load's `--log-file`: tab-separated start time (µs
/// since the epoch), status and duration (µs). Malformed lines are skipped.
pub(crate) fn parse_h2load_log(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.split('\t').nth(2)?.trim().parse().ok())
        .collect()
}

/// Where a wrk run sends its requests: to 127.0.0.1 whatever the URL's host, so that the
/// URL can carry the domain for SNI and Host.
const WRK_RESOLVE: &str = "wrk.resolve = function(host, service)\n  wrk.addrs = wrk.lookup(\"127.0.0.1\", service)\nend\n";

/// A wrk script sending `GET path` with Host `host` on every request.
pub(crate) fn wrk_script_fixed(host: &str, path: &str) -> String {
    format!("{WRK_RESOLVE}wrk.headers[\"Host\"] = \"{host}\"\nwrk.path = \"{path}\"\n")
}

/// A wrk script cycling Host over d0..d<n-1>.bench.test (requests prepared once in
/// `init`, so each request costs one table lookup).
pub(crate) fn wrk_script_rotating(domains: usize, path: &str) -> String {
    let mut s = String::from(WRK_RESOLVE);
    let _ = write!(
        s,
        "local n = {domains}\nlocal reqs = {{}}\nlocal i = 0\n\
         init = function(args)\n  for k = 0, n - 1 do\n    reqs[k + 1] = wrk.format(\"GET\", \"{path}\", {{ Host = \"d\" .. k .. \".bench.test\" }})\n  end\nend\n\
         request = function()\n  i = i % n + 1\n  return reqs[i]\nend\n"
    );
    s
}

/// wrk's arguments: one thread, `conns` connections, `duration`, percentiles, `script`.
pub(crate) fn wrk_args(url: &str, conns: usize, duration: Duration, script: &Path) -> Vec<String> {
    vec![
        "-t1".into(),
        format!("-c{}", conns.max(1)),
        format!("-d{}s", duration.as_secs().max(1)),
        "--latency".into(),
        "--timeout".into(),
        "5s".into(),
        "-s".into(),
        script.display().to_string(),
        url.to_owned(),
    ]
}

/// h2load's arguments: one thread, `clients` connections with `streams` concurrent
/// streams each, for `duration`, to `connect` with `host` as SNI and :authority, logging
/// every request to `log`.
pub(crate) fn h2load_args(
    connect: SocketAddr,
    host: &str,
    path: &str,
    clients: usize,
    streams: usize,
    duration: Duration,
    log: &Path,
) -> Vec<String> {
    vec![
        "-t1".into(),
        format!("-c{clients}"),
        format!("-m{streams}"),
        "-D".into(),
        duration.as_secs().max(1).to_string(),
        format!("--connect-to={connect}"),
        format!("--log-file={}", log.display()),
        format!("https://{host}{path}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// wrk 4.1.0 (Debian) through weir, captured on the bench machine.
    const WRK: &str = "Running 1s test @ http://d0.bench.test:37801/
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.70ms    2.65ms  24.27ms   88.08%
    Req/Sec    29.29k     7.87k   42.51k    60.00%
  Latency Distribution
     50%    1.62ms
     75%    2.67ms
     90%    5.89ms
     99%   14.57ms
  29193 requests in 1.01s, 3.20MB read
Requests/sec:  29025.72
Transfer/sec:      3.18MB
";

    /// wrk with an unknown Host: every response a 404 (captured).
    const WRK_404: &str = "Running 1s test @ http://127.0.0.1:56523/
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     0.96ms    1.67ms  12.08ms   84.63%
    Req/Sec    52.49k     3.87k   58.62k    70.00%
  Latency Distribution
     50%   36.00us
     75%    1.43ms
     90%    3.41ms
     99%    7.39ms
  52509 requests in 1.01s, 6.61MB read
  Non-2xx or 3xx responses: 52509
Requests/sec:  52230.77
Transfer/sec:      6.58MB
";

    /// wrk against a port nobody listens on (captured).
    const WRK_REFUSED: &str = "Running 1s test @ http://d0.bench.test:1/
  1 threads and 2 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     0.00us    0.00us   0.00us    -nan%
    Req/Sec     0.00      0.00     0.00      -nan%
  Latency Distribution
     50%    0.00us
     75%    0.00us
     90%    0.00us
     99%    0.00us
  0 requests in 1.10s, 0.00B read
  Socket errors: connect 0, read 0, write 58790, timeout 0
Requests/sec:      0.00
Transfer/sec:       0.00B
";

    /// h2load (nghttp2 1.52.0) through weir, captured on the bench machine.
    const H2LOAD: &str = "starting benchmark...
spawning thread #0: 16 total client(s). Timing-based test with 0s of warm-up time and 1s of main duration for measurements.
Warm-up started for thread #0.
progress: 6% of clients started
progress: 100% of clients started
Warm-up phase is over for thread #0.
Main benchmark duration is started for thread #0.
TLS Protocol: TLSv1.3
Cipher: TLS_AES_128_GCM_SHA256
Server Temp Key: X25519 253 bits
Application protocol: h2
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 1.00s, 32664.00 req/s, 512.22KB/s
requests: 32664 total, 33176 started, 32664 done, 32664 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 32664 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 512.22KB (524512) total, 224.27KB (229656) headers (space savings 92.52%), 0B (0) data
                     min         max         mean         sd        +/- sd
time for request:      365us    126.76ms     15.10ms     15.69ms    87.40%
time for connect:     3.82ms      8.70ms      6.30ms      1.55ms    62.50%
time to 1st byte:    60.97ms     82.65ms     74.00ms      8.22ms    62.50%
req/s           :    1636.75     2656.58     2034.20      242.56    81.25%
";

    #[test]
    fn wrk_durations() {
        assert_eq!(parse_wrk_duration_ms("639.12us").unwrap(), 0.63912);
        assert_eq!(parse_wrk_duration_ms("1.20ms").unwrap(), 1.2);
        assert_eq!(parse_wrk_duration_ms("2.00s").unwrap(), 2000.0);
        assert_eq!(parse_wrk_duration_ms("1.50m").unwrap(), 90_000.0);
        assert!(parse_wrk_duration_ms("12").is_err());
        assert!(parse_wrk_duration_ms("3.0xs").is_err());
    }

    #[test]
    fn wrk_report() {
        let r = parse_wrk(WRK).unwrap();
        assert_eq!(r.requests, 29_193);
        assert_eq!(r.seconds, 1.01);
        assert_eq!(r.rps, 29025.72);
        assert_eq!(r.errors, 0);
        let l = r.latency.unwrap();
        assert_eq!((l.p50_ms, l.p90_ms, l.p99_ms), (1.62, 5.89, 14.57));
        assert_eq!(l.p999_ms, None);
    }

    #[test]
    fn wrk_counts_non_2xx_and_socket_errors() {
        let r = parse_wrk(WRK_404).unwrap();
        assert_eq!((r.requests, r.errors), (52_509, 52_509));
        assert!((r.latency.unwrap().p50_ms - 0.036).abs() < 1e-12);
        let r = parse_wrk(WRK_REFUSED).unwrap();
        assert_eq!((r.requests, r.errors, r.rps), (0, 58_790, 0.0));
    }

    #[test]
    fn wrk_without_results_is_an_error() {
        assert_eq!(
            parse_wrk("unable to connect to d0.bench.test:1 Connection refused\n"),
            Err(ParseError::Missing("N requests in T"))
        );
    }

    #[test]
    fn h2load_report_and_log() {
        let r = parse_h2load(H2LOAD).unwrap();
        assert_eq!(r.requests, 32_664);
        assert_eq!(r.seconds, 1.0);
        assert_eq!(r.errors, 0);
        assert_eq!(r.rps, 32_664.0);
        let failing = H2LOAD
            .replace("0 failed", "7 failed")
            .replace("0 4xx", "3 4xx");
        assert_eq!(parse_h2load(&failing).unwrap().errors, 10);
        // Captured from `h2load --log-file` (its summary said min 25us, max 194us).
        let log = "1795328609180896\t200\t194\n1795328609181146\t200\t44\n1795328609181290\t200\t25\nbroken\n";
        assert_eq!(parse_h2load_log(log), vec![194, 44, 25]);
        assert!(parse_h2load("h2load: connect failed\n").is_err());
    }

    #[test]
    fn percentiles_of_samples() {
        let us: Vec<u64> = (1..=1000).collect();
        let l = Latency::of_micros(&us).unwrap();
        assert_eq!((l.p50_ms, l.p90_ms, l.p99_ms), (0.5, 0.9, 0.99));
        assert_eq!((l.p999_ms, l.max_ms), (Some(0.999), Some(1.0)));
        assert_eq!(Latency::of_micros(&[]), None);
    }

    #[test]
    fn scripts_and_arguments() {
        let s = wrk_script_fixed("d0.bench.test", "/bytes/4096");
        assert!(s.contains("wrk.lookup(\"127.0.0.1\", service)"));
        assert!(s.contains("wrk.headers[\"Host\"] = \"d0.bench.test\""));
        assert!(s.contains("wrk.path = \"/bytes/4096\""));
        let r = wrk_script_rotating(20_000, "/");
        assert!(r.contains("local n = 20000"));
        assert!(r.contains("\"d\" .. k .. \".bench.test\""));
        let a = wrk_args(
            "http://d0.bench.test:80/",
            64,
            Duration::from_secs(10),
            Path::new("/s.lua"),
        );
        assert_eq!(a[..4], ["-t1", "-c64", "-d10s", "--latency"]);
        assert_eq!(a.last().unwrap(), "http://d0.bench.test:80/");
        let h = h2load_args(
            "127.0.0.1:8443".parse().unwrap(),
            "d0.bench.test",
            "/",
            16,
            32,
            Duration::from_secs(3),
            Path::new("/l.tsv"),
        );
        assert!(h.contains(&"--connect-to=127.0.0.1:8443".to_owned()));
        assert!(h.contains(&"-m32".to_owned()));
        assert_eq!(h.last().unwrap(), "https://d0.bench.test/");
    }
}
