//! The access log: one JSON record per request, with the policy decisions that let it
//! through or refused it, written by a thread of its own.
//!
//! The request path never waits for the log. A request that is logged fills one boxed
//! [`Record`] (the phases write their decisions into its [`Trail`]); phase 7 hands it to
//! a bounded queue with `try_send`, and the writer thread formats and writes it. When
//! the queue is full the record is dropped and counted
//! (`weir_access_log_dropped_total`): a slow disk costs records, never latency. With the
//! log off no record exists, and the phases record nothing (one `Option` check each).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::time::{Duration, Instant, SystemTime};

use http::HeaderValue;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use weir_model::{EndpointAddr, RouteRef};

/// Where the records go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccessLogOutput {
    /// Standard output, one record per line.
    Stdout,
    /// A file, renamed to `PATH.1` (and older files to `PATH.2` …) once writing the next
    /// record would take it past `max_bytes`, or when the next record comes `every` or
    /// later after the file was started; at most `keep` renamed files are kept (0: the
    /// file is truncated instead). `max_bytes` 0 never rotates by size, `every` `None`
    /// never by time.
    File {
        /// The file written.
        path: PathBuf,
        /// Size at which the file is rotated.
        max_bytes: u64,
        /// Age at which the file is rotated (by the first record written after it).
        every: Option<Duration>,
        /// Rotated files kept.
        keep: usize,
    },
}

/// The access log's settings (process flags: `--access-log`, `--access-log-fields`, …).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessLogSettings {
    /// Where records go.
    pub output: AccessLogOutput,
    /// Which fields a record carries.
    pub fields: AccessLogFields,
    /// Records waiting for the writer at most; more are dropped and counted.
    pub queue: usize,
}

impl Default for AccessLogSettings {
    fn default() -> Self {
        AccessLogSettings {
            output: AccessLogOutput::Stdout,
            fields: AccessLogFields::all(),
            queue: 8192,
        }
    }
}

/// One field of a record; the names are the JSON keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Field {
    Time,
    Method,
    Host,
    Path,
    Status,
    DurationMs,
    Route,
    Listener,
    Client,
    RequestId,
    Upstream,
    Attempts,
    Fault,
    Decision,
    Policy,
    Check,
    Reason,
    Checks,
    Identity,
    RateLimit,
    TraceId,
}

impl Field {
    const ALL: [Field; 21] = [
        Field::Time,
        Field::Method,
        Field::Host,
        Field::Path,
        Field::Status,
        Field::DurationMs,
        Field::Route,
        Field::Listener,
        Field::Client,
        Field::RequestId,
        Field::Upstream,
        Field::Attempts,
        Field::Fault,
        Field::Decision,
        Field::Policy,
        Field::Check,
        Field::Reason,
        Field::Checks,
        Field::Identity,
        Field::RateLimit,
        Field::TraceId,
    ];

    fn name(self) -> &'static str {
        match self {
            Field::Time => "time",
            Field::Method => "method",
            Field::Host => "host",
            Field::Path => "path",
            Field::Status => "status",
            Field::DurationMs => "duration_ms",
            Field::Route => "route",
            Field::Listener => "listener",
            Field::Client => "client",
            Field::RequestId => "request_id",
            Field::Upstream => "upstream",
            Field::Attempts => "attempts",
            Field::Fault => "fault",
            Field::Decision => "decision",
            Field::Policy => "policy",
            Field::Check => "check",
            Field::Reason => "reason",
            Field::Checks => "checks",
            Field::Identity => "identity",
            Field::RateLimit => "rate_limit",
            Field::TraceId => "trace_id",
        }
    }
}

/// A set of record fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessLogFields(u32);

impl AccessLogFields {
    /// Every field.
    pub fn all() -> AccessLogFields {
        AccessLogFields((1 << Field::ALL.len()) - 1)
    }

    /// The names a field list may hold, in record order.
    pub fn names() -> impl Iterator<Item = &'static str> {
        Field::ALL.iter().map(|f| f.name())
    }

    /// Reads a comma-separated list of field names (`all` for every field); an unknown
    /// name is an error naming it and the known ones.
    pub fn parse(list: &str) -> Result<AccessLogFields, String> {
        let mut bits = 0u32;
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == "all" {
                bits |= AccessLogFields::all().0;
                continue;
            }
            let Some(f) = Field::ALL.iter().find(|f| f.name() == name) else {
                let known: Vec<&str> = AccessLogFields::names().collect();
                return Err(format!(
                    "unknown access-log field {name:?} (known: all, {})",
                    known.join(", ")
                ));
            };
            bits |= 1 << *f as u8;
        }
        if bits == 0 {
            return Err("no access-log field named".into());
        }
        Ok(AccessLogFields(bits))
    }

    fn has(self, f: Field) -> bool {
        self.0 & (1 << f as u8) != 0
    }
}

/// A policy check of request phase 2 (or the CORS step of phase 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    IpRules,
    RequestLimits,
    BasicAuth,
    ExtAuth,
    ApiKey,
    Jwt,
    Authorization,
    RateLimit,
    GlobalRateLimit,
    Cors,
}

impl Check {
    fn name(self) -> &'static str {
        match self {
            Check::IpRules => "ip_rules",
            Check::RequestLimits => "request_limits",
            Check::BasicAuth => "basic_auth",
            Check::ExtAuth => "ext_auth",
            Check::ApiKey => "api_key",
            Check::Jwt => "jwt",
            Check::Authorization => "authorization",
            Check::RateLimit => "rate_limit",
            Check::GlobalRateLimit => "global_rate_limit",
            Check::Cors => "cors",
        }
    }
}

/// Who the request was authenticated as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IdentityKind {
    /// A Basic user.
    Basic,
    /// An API key's client name.
    ApiKey,
    /// A JWT's `sub` claim.
    Jwt,
}

/// The rate limit that counted the request.
#[derive(Debug)]
pub(crate) struct RateLimitNote {
    pub(crate) policy: Arc<str>,
    /// The key it counted by, as text (a client address, a header's value, or empty for
    /// the whole target).
    pub(crate) key: Box<str>,
    /// Requests left in the key's budget after this one (local limits; `None` for a
    /// global limit, whose budget is known only at its next sync).
    pub(crate) remaining: Option<u32>,
}

/// What the policies decided about one request: written by phase 2 only when the
/// request is logged.
#[derive(Debug, Default)]
pub(crate) struct Trail {
    /// Checks passed, in order, with the policy object (`namespace/name`) that set them.
    pub(crate) passed: Vec<(Check, Option<Arc<str>>)>,
    /// The check that refused the request: its policy (none for a route's own CORS
    /// filter) and why.
    pub(crate) denied: Option<(Check, Option<Arc<str>>, String)>,
    pub(crate) identity: Option<(IdentityKind, Box<str>)>,
    pub(crate) rate_limit: Option<RateLimitNote>,
}

impl Trail {
    pub(crate) fn pass(&mut self, check: Check, policy: &Arc<str>) {
        self.passed.push((check, Some(Arc::clone(policy))));
    }

    pub(crate) fn deny(&mut self, check: Check, policy: Option<&Arc<str>>, why: impl ToString) {
        self.denied = Some((check, policy.cloned(), why.to_string()));
    }
}

/// One request's record: filled by the phases (boxed: a request that is neither logged
/// nor traced carries one null pointer), finished and queued by phase 7 (to the access
/// log's writer, and as spans to the trace exporter).
#[derive(Debug)]
pub(crate) struct Record {
    pub(crate) method: http::Method,
    pub(crate) path: String,
    pub(crate) host: Option<HeaderValue>,
    pub(crate) request_id: Option<HeaderValue>,
    pub(crate) route: Option<RouteRef>,
    pub(crate) upstream: Option<EndpointAddr>,
    /// Attempts made (more than 1 with retries).
    pub(crate) attempts: u32,
    pub(crate) trail: Trail,
    /// The request's HTTP version.
    pub(crate) version: http::Version,
    /// The request's spans, when it is traced.
    pub(crate) span: Option<crate::trace::SpanIds>,
    /// Phase 0's trace decision, revised by the route's trace policy (traces on).
    pub(crate) begun: Option<crate::trace::Begun>,
    /// The route's access-log policy, when one applies: phase 7 leaves out the record it
    /// disables, the writer formats the fields it names.
    pub(crate) access: Option<weir_model::AccessLogPolicy>,
    /// The client's `tracestate`, when the request is traced.
    pub(crate) tracestate: Option<HeaderValue>,
    /// When phase 3 chose the endpoint (when the request is traced: its client span).
    pub(crate) forwarded_at: Option<SystemTime>,
    /// The client spans of the attempts, when the request is traced and retried.
    pub(crate) attempt_spans: Option<crate::trace::AttemptSpans>,
    /// Set by phase 7.
    pub(crate) done: Option<Done>,
}

/// What phase 7 adds to a record.
#[derive(Debug)]
pub(crate) struct Done {
    pub(crate) time: SystemTime,
    pub(crate) status: u16,
    pub(crate) duration: Duration,
    pub(crate) fault: Option<&'static str>,
    pub(crate) listener: Arc<str>,
    pub(crate) client: SocketAddr,
    /// The request's trace, when it is traced (hex).
    pub(crate) trace_id: Option<[u8; 32]>,
}

impl Record {
    pub(crate) fn new(method: http::Method) -> Record {
        Record {
            method,
            path: String::new(),
            host: None,
            request_id: None,
            route: None,
            upstream: None,
            attempts: 1,
            trail: Trail::default(),
            version: http::Version::HTTP_11,
            span: None,
            begun: None,
            access: None,
            tracestate: None,
            forwarded_at: None,
            attempt_spans: None,
            done: None,
        }
    }
}

/// Access-log counters.
#[derive(Clone, Debug, Default)]
pub(crate) struct AccessLogMetrics {
    written: Counter,
    dropped: Counter,
    errors: Counter,
    rotations: Counter,
}

impl AccessLogMetrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "weir_access_log_records",
            "Access-log records written",
            self.written.clone(),
        );
        registry.register(
            "weir_access_log_dropped",
            "Access-log records dropped because the writer's queue was full",
            self.dropped.clone(),
        );
        registry.register(
            "weir_access_log_write_errors",
            "Access-log records that could not be written (I/O errors)",
            self.errors.clone(),
        );
        registry.register(
            "weir_access_log_rotations",
            "Access-log files rotated",
            self.rotations.clone(),
        );
    }
}

/// The request side of the access log: a bounded queue to the writer thread.
pub(crate) struct AccessLogger {
    tx: SyncSender<Box<Record>>,
    dropped: Counter,
}

impl AccessLogger {
    /// Opens the output and starts the writer thread, which ends once every sender is
    /// gone and the queue is written.
    pub(crate) fn start(
        settings: &AccessLogSettings,
        metrics: AccessLogMetrics,
    ) -> std::io::Result<AccessLogger> {
        let sink = match &settings.output {
            AccessLogOutput::Stdout => Sink::Stdout(std::io::BufWriter::new(std::io::stdout())),
            AccessLogOutput::File {
                path,
                max_bytes,
                every,
                keep,
            } => Sink::File(Rotating::open(
                path.clone(),
                *max_bytes,
                *every,
                *keep,
                Instant::now(),
            )?),
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(settings.queue.max(1));
        let dropped = metrics.dropped.clone();
        let fields = settings.fields;
        std::thread::Builder::new()
            .name("weir-access-log".into())
            .spawn(move || write_loop(rx, sink, fields, &metrics))?;
        Ok(AccessLogger { tx, dropped })
    }

    /// Queues a finished record; never waits (a full queue drops it, counted). A record
    /// its access-log policy leaves out (disabled, or `errorsOnly` and a status under 400)
    /// is dropped here, uncounted.
    pub(crate) fn submit(&self, record: Box<Record>) {
        if let (Some(a), Some(done)) = (&record.access, &record.done)
            && (a.disabled || (a.errors_only && done.status < 400))
        {
            return;
        }
        match self.tx.try_send(record) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.inc();
            }
        }
    }
}

enum Sink {
    Stdout(std::io::BufWriter<std::io::Stdout>),
    File(Rotating),
}

impl Sink {
    fn write_record(&mut self, line: &[u8], metrics: &AccessLogMetrics) -> std::io::Result<()> {
        match self {
            Sink::Stdout(out) => out.write_all(line),
            Sink::File(f) => f.write_record_at(line, Instant::now(), metrics),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Stdout(out) => out.flush(),
            Sink::File(f) => f.file.flush(),
        }
    }
}

/// A file rotated by size and by age. The writer passes the time of each record in
/// ([`Rotating::write_record_at`]), so tests drive the clock.
struct Rotating {
    path: PathBuf,
    max_bytes: u64,
    every: Option<Duration>,
    keep: usize,
    file: std::io::BufWriter<std::fs::File>,
    size: u64,
    /// When the current file was started (opened, for a file that existed).
    started: Instant,
}

impl Rotating {
    fn open(
        path: PathBuf,
        max_bytes: u64,
        every: Option<Duration>,
        keep: usize,
        now: Instant,
    ) -> std::io::Result<Rotating> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let size = file.metadata()?.len();
        Ok(Rotating {
            path,
            max_bytes,
            every,
            keep,
            file: std::io::BufWriter::new(file),
            size,
            started: now,
        })
    }

    /// Writes `line` at `now`, rotating first when the file is full or old enough (an
    /// empty file is not rotated: its age restarts instead).
    fn write_record_at(
        &mut self,
        line: &[u8],
        now: Instant,
        metrics: &AccessLogMetrics,
    ) -> std::io::Result<()> {
        let len = line.len() as u64;
        let full = self.max_bytes > 0 && self.size + len > self.max_bytes;
        let old = self
            .every
            .is_some_and(|every| now.saturating_duration_since(self.started) >= every);
        if self.size == 0 && old {
            self.started = now;
        } else if self.size > 0 && (full || old) {
            self.rotate()?;
            self.started = now;
            metrics.rotations.inc();
        }
        self.file.write_all(line)?;
        self.size += len;
        Ok(())
    }

    /// `PATH.{keep-1}` → `PATH.{keep}`, …, `PATH` → `PATH.1`, then a new `PATH`.
    fn rotate(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        if self.keep == 0 {
            std::fs::remove_file(&self.path).or_else(ignore_missing)?;
        } else {
            for i in (1..self.keep).rev() {
                std::fs::rename(numbered(&self.path, i), numbered(&self.path, i + 1))
                    .or_else(ignore_missing)?;
            }
            std::fs::rename(&self.path, numbered(&self.path, 1)).or_else(ignore_missing)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.file = std::io::BufWriter::new(file);
        self.size = 0;
        Ok(())
    }
}

fn ignore_missing(e: std::io::Error) -> std::io::Result<()> {
    if e.kind() == std::io::ErrorKind::NotFound {
        Ok(())
    } else {
        Err(e)
    }
}

/// `PATH.n`.
fn numbered(path: &Path, n: usize) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

fn write_loop(
    rx: Receiver<Box<Record>>,
    mut sink: Sink,
    fields: AccessLogFields,
    metrics: &AccessLogMetrics,
) {
    let mut buf = Vec::with_capacity(1024);
    let mut failing = false;
    loop {
        // Write what is queued, and flush only when the queue is empty: one write
        // system call for a burst of records.
        let record = match rx.try_recv() {
            Ok(r) => r,
            Err(TryRecvError::Empty) => {
                if let Err(e) = sink.flush() {
                    report(&mut failing, &e);
                }
                match rx.recv() {
                    Ok(r) => r,
                    Err(_) => break,
                }
            }
            Err(TryRecvError::Disconnected) => break,
        };
        buf.clear();
        let fields = match record.access.and_then(|a| a.fields) {
            Some(bits) => AccessLogFields(bits),
            None => fields,
        };
        format(&record, fields, &mut buf);
        buf.push(b'\n');
        match sink.write_record(&buf, metrics) {
            Ok(()) => {
                metrics.written.inc();
                failing = false;
            }
            Err(e) => {
                metrics.errors.inc();
                report(&mut failing, &e);
            }
        }
    }
    let _ = sink.flush();
}

/// Logs the first error of a run of failures (a full disk would log every record).
fn report(failing: &mut bool, e: &std::io::Error) {
    if !*failing {
        tracing::warn!(error = %e, "cannot write the access log");
        *failing = true;
    }
}

/// A JSON object written field by field.
struct Obj<'a> {
    buf: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Obj<'a> {
    fn new(buf: &'a mut Vec<u8>) -> Obj<'a> {
        buf.push(b'{');
        Obj { buf, first: true }
    }

    fn key(&mut self, k: &str) -> &mut Vec<u8> {
        if !self.first {
            self.buf.push(b',');
        }
        self.first = false;
        json_str(self.buf, k);
        self.buf.push(b':');
        self.buf
    }

    fn str(&mut self, k: &str, v: &str) {
        let b = self.key(k);
        json_str(b, v);
    }

    fn opt_str(&mut self, k: &str, v: Option<&str>) {
        match v {
            Some(v) => self.str(k, v),
            None => self.key(k).extend_from_slice(b"null"),
        }
    }

    fn num(&mut self, k: &str, v: impl std::fmt::Display) {
        let b = self.key(k);
        let _ = write!(b, "{v}");
    }

    fn end(self) {
        self.buf.push(b'}');
    }
}

fn json_str(buf: &mut Vec<u8>, s: &str) {
    // Writing a `str` to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *buf, s);
}

fn header_text(v: Option<&HeaderValue>) -> Option<std::borrow::Cow<'_, str>> {
    v.map(|v| String::from_utf8_lossy(v.as_bytes()))
}

/// Writes `r` as one JSON object with the chosen `fields`.
fn format(r: &Record, fields: AccessLogFields, buf: &mut Vec<u8>) {
    let mut o = Obj::new(buf);
    let done = r.done.as_ref();
    let t = &r.trail;
    for f in Field::ALL {
        if !fields.has(f) {
            continue;
        }
        let k = f.name();
        match f {
            Field::Time => {
                if let Some(d) = done {
                    let b = o.key(k);
                    b.push(b'"');
                    rfc3339(d.time, b);
                    b.push(b'"');
                }
            }
            Field::Method => o.str(k, r.method.as_str()),
            Field::Host => o.opt_str(k, header_text(r.host.as_ref()).as_deref()),
            Field::Path => o.str(k, &r.path),
            Field::Status => {
                if let Some(d) = done {
                    o.num(k, d.status);
                }
            }
            Field::DurationMs => {
                if let Some(d) = done {
                    o.num(k, format_args!("{:.3}", d.duration.as_secs_f64() * 1000.0));
                }
            }
            Field::Route => match &r.route {
                Some(rr) => {
                    let text = format!(
                        "{}/{}/{}#{}",
                        rr.kind.object_kind(),
                        rr.namespace,
                        rr.name,
                        rr.rule
                    );
                    o.str(k, &text);
                }
                None => o.opt_str(k, None),
            },
            Field::Listener => {
                if let Some(d) = done {
                    o.str(k, &d.listener);
                }
            }
            Field::Client => {
                if let Some(d) = done {
                    o.str(k, &d.client.to_string());
                }
            }
            Field::RequestId => o.opt_str(k, header_text(r.request_id.as_ref()).as_deref()),
            Field::Upstream => {
                let up = r.upstream.as_ref().map(ToString::to_string);
                o.opt_str(k, up.as_deref());
            }
            Field::Attempts => o.num(k, r.attempts),
            Field::Fault => o.opt_str(k, done.and_then(|d| d.fault)),
            Field::Decision => {
                let decision = if t.denied.is_some() {
                    "deny"
                } else if t.passed.is_empty() {
                    "none"
                } else {
                    "allow"
                };
                o.str(k, decision);
            }
            Field::Policy => {
                // The policy that decided: the one that refused, else the last passed.
                let p = match &t.denied {
                    Some((_, p, _)) => p.as_deref(),
                    None => t.passed.last().and_then(|(_, p)| p.as_deref()),
                };
                o.opt_str(k, p);
            }
            Field::Check => {
                let c = match &t.denied {
                    Some((c, _, _)) => Some(c.name()),
                    None => t.passed.last().map(|(c, _)| c.name()),
                };
                o.opt_str(k, c);
            }
            Field::Reason => o.opt_str(k, t.denied.as_ref().map(|(_, _, why)| why.as_str())),
            Field::Checks => {
                let b = o.key(k);
                b.push(b'[');
                let all = t
                    .passed
                    .iter()
                    .map(|(c, p)| (c, p, "allow"))
                    .chain(t.denied.iter().map(|(c, p, _)| (c, p, "deny")));
                for (i, (c, p, result)) in all.enumerate() {
                    if i > 0 {
                        b.push(b',');
                    }
                    let mut item = Obj::new(b);
                    item.str("check", c.name());
                    item.opt_str("policy", p.as_deref());
                    item.str("result", result);
                    item.end();
                }
                b.push(b']');
            }
            Field::Identity => match &t.identity {
                Some((kind, name)) => {
                    let b = o.key(k);
                    let mut item = Obj::new(b);
                    let kind = match kind {
                        IdentityKind::Basic => "basic",
                        IdentityKind::ApiKey => "api_key",
                        IdentityKind::Jwt => "jwt",
                    };
                    item.str("kind", kind);
                    item.str("name", name);
                    item.end();
                }
                None => o.opt_str(k, None),
            },
            Field::RateLimit => match &t.rate_limit {
                Some(rl) => {
                    let b = o.key(k);
                    let mut item = Obj::new(b);
                    item.str("policy", &rl.policy);
                    item.str("key", &rl.key);
                    match rl.remaining {
                        Some(n) => item.num("remaining", n),
                        None => item.opt_str("remaining", None),
                    }
                    item.end();
                }
                None => o.opt_str(k, None),
            },
            Field::TraceId => {
                let id = done.and_then(|d| d.trace_id.as_ref());
                o.opt_str(k, id.and_then(|id| std::str::from_utf8(id).ok()));
            }
        }
    }
    o.end();
}

/// `2026-11-24T20:30:00.123Z`.
fn rfc3339(t: SystemTime, b: &mut Vec<u8>) {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let _ = write!(
        b,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        since.subsec_millis()
    );
}

/// The proleptic Gregorian date of a day number counted from 1970-01-01 (Howard
/// Hinnant's days-to-civil algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_model::RouteKind;

    fn record() -> Record {
        let mut r = Record::new(http::Method::GET);
        r.path = "/a\"b".into();
        r.host = Some(HeaderValue::from_static("example.com"));
        r.route = Some(RouteRef {
            kind: RouteKind::HttpRoute,
            namespace: "ns".into(),
            name: "web".into(),
            rule: 2,
        });
        r.done = Some(Done {
            time: SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_016_200_123),
            status: 403,
            duration: Duration::from_micros(1500),
            fault: Some("client"),
            listener: "ns/gw/http".into(),
            client: "127.0.0.1:4000".parse().unwrap(),
            trace_id: None,
        });
        r
    }

    fn json(r: &Record, fields: AccessLogFields) -> serde_json::Value {
        let mut buf = Vec::new();
        format(r, fields, &mut buf);
        serde_json::from_slice(&buf)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&buf)))
    }

    #[test]
    fn a_denied_request_names_its_policy_and_check() {
        let mut r = record();
        let p: Arc<str> = "ns/keys".into();
        r.trail.pass(Check::IpRules, &"ns/ips".into());
        r.trail.deny(
            Check::ApiKey,
            Some(&p),
            "not authenticated (policy ns/keys)",
        );
        let v = json(&r, AccessLogFields::all());
        assert_eq!(v["decision"], "deny");
        assert_eq!(v["policy"], "ns/keys");
        assert_eq!(v["check"], "api_key");
        assert_eq!(v["reason"], "not authenticated (policy ns/keys)");
        assert_eq!(v["checks"][0]["check"], "ip_rules");
        assert_eq!(v["checks"][0]["result"], "allow");
        assert_eq!(v["checks"][1]["result"], "deny");
        assert_eq!(v["route"], "HTTPRoute/ns/web#2");
        assert_eq!(v["path"], "/a\"b");
        assert_eq!(v["status"], 403);
        assert_eq!(v["duration_ms"], 1.5);
        assert_eq!(v["time"], "2025-11-24T20:30:00.123Z");
        assert_eq!(v["upstream"], serde_json::Value::Null);
    }

    #[test]
    fn an_allowed_request_carries_identity_and_budget() {
        let mut r = record();
        let p: Arc<str> = "ns/p".into();
        r.trail.pass(Check::Jwt, &p);
        r.trail.identity = Some((IdentityKind::Jwt, "alice".into()));
        r.trail.pass(Check::RateLimit, &p);
        r.trail.rate_limit = Some(RateLimitNote {
            policy: p.clone(),
            key: "127.0.0.1".into(),
            remaining: Some(4),
        });
        let v = json(&r, AccessLogFields::all());
        assert_eq!(v["decision"], "allow");
        assert_eq!(v["identity"]["kind"], "jwt");
        assert_eq!(v["identity"]["name"], "alice");
        assert_eq!(v["rate_limit"]["remaining"], 4);
        assert_eq!(v["rate_limit"]["key"], "127.0.0.1");
        assert_eq!(v["policy"], "ns/p");
    }

    #[test]
    fn fields_are_chosen_by_name() {
        let f = AccessLogFields::parse("status, path,decision").unwrap();
        let v = json(&record(), f);
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 3, "{v}");
        assert_eq!(v["decision"], "none");
        assert!(
            AccessLogFields::parse("status,nope")
                .unwrap_err()
                .contains("nope")
        );
        assert!(AccessLogFields::parse("").is_err());
        assert_eq!(
            AccessLogFields::parse("all").unwrap(),
            AccessLogFields::all()
        );
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_416), (2025, 11, 24));
    }

    /// A file rotates by size, keeps `keep` old files, and every record is written once.
    #[test]
    fn files_rotate_by_size_and_keep_n() {
        let dir = std::env::temp_dir().join(format!("weir-access-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("access.log");
        let metrics = AccessLogMetrics::default();
        let now = Instant::now();
        let mut f = Rotating::open(path.clone(), 100, None, 2, now).unwrap();
        for i in 0..10 {
            let line = format!("{{\"n\":{i:02}, \"pad\":\"012345678901234567890\"}}\n");
            assert_eq!(line.len(), 40);
            // Hours apart: without `every`, time rotates nothing.
            let at = now + Duration::from_secs(3600 * i);
            f.write_record_at(line.as_bytes(), at, &metrics).unwrap();
        }
        f.file.flush().unwrap();
        // Two records per file: 10 records made 4 rotations; PATH, PATH.1 and PATH.2 kept.
        assert_eq!(metrics.rotations.get(), 4);
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(&path).lines().count(), 2);
        assert!(read(&path).contains("\"n\":09"));
        assert!(read(&numbered(&path, 1)).contains("\"n\":07"));
        assert!(read(&numbered(&path, 2)).contains("\"n\":05"));
        assert!(!numbered(&path, 3).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file rotates by age, on the first record at or past `every` after it was
    /// started, with the size rule's naming and `keep`; whichever limit comes first
    /// rotates, and an empty file is never rotated. The clock is the test's.
    #[test]
    fn files_rotate_by_age_and_by_size_alike() {
        let dir = std::env::temp_dir().join(format!("weir-access-log-age-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("access.log");
        let metrics = AccessLogMetrics::default();
        let t0 = Instant::now();
        let hour = Duration::from_secs(3600);
        let mut f = Rotating::open(path.clone(), 1000, Some(hour), 2, t0).unwrap();
        let write = |f: &mut Rotating, n: &str, at: Instant| {
            f.write_record_at(format!("{n}\n").as_bytes(), at, &metrics)
                .unwrap();
        };
        write(&mut f, "a", t0);
        write(&mut f, "b", t0 + hour - Duration::from_millis(1));
        // An hour after the file was started: the record goes to a new file.
        write(&mut f, "c", t0 + hour);
        write(&mut f, "d", t0 + hour + Duration::from_secs(1));
        // Idle for three hours: one rotation, on the next record.
        write(&mut f, "e", t0 + 4 * hour);
        // The new file's hour counts from its first record (t0 + 4h).
        write(&mut f, "f", t0 + 5 * hour - Duration::from_secs(1));
        f.file.flush().unwrap();
        assert_eq!(metrics.rotations.get(), 2);
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(&path), "e\nf\n");
        assert_eq!(read(&numbered(&path, 1)), "c\nd\n");
        assert_eq!(read(&numbered(&path, 2)), "a\nb\n");
        // Size still rotates within the hour; `keep` 2 drops the oldest (a, b).
        let big = "x".repeat(996);
        write(&mut f, &big, t0 + 5 * hour);
        f.file.flush().unwrap();
        assert_eq!(metrics.rotations.get(), 3);
        assert_eq!(read(&numbered(&path, 1)), "e\nf\n");
        assert_eq!(read(&numbered(&path, 2)), "c\nd\n");
        assert!(!numbered(&path, 3).exists());
        // A file left empty past its age is not rotated.
        let empty = dir.join("empty.log");
        let mut g = Rotating::open(empty.clone(), 0, Some(hour), 2, t0).unwrap();
        write(&mut g, "late", t0 + 3 * hour);
        write(&mut g, "later", t0 + 3 * hour + Duration::from_secs(59));
        g.file.flush().unwrap();
        assert_eq!(read(&empty), "late\nlater\n");
        assert!(!numbered(&empty, 1).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A full queue drops records (counted) instead of waiting.
    #[test]
    fn a_full_queue_drops_and_counts() {
        let (tx, _rx) = std::sync::mpsc::sync_channel(1);
        let dropped = Counter::default();
        let logger = AccessLogger {
            tx,
            dropped: dropped.clone(),
        };
        for _ in 0..3 {
            logger.submit(Box::new(record()));
        }
        assert_eq!(dropped.get(), 2);
    }

    /// A policy's field list (a bit mask over the model's names) means the same fields
    /// here: both lists name the fields alike, in the same order.
    #[test]
    fn the_model_names_the_fields_alike() {
        assert!(AccessLogFields::names().eq(weir_model::ACCESS_LOG_FIELDS.iter().copied()));
        let bits = weir_model::access_log_field_bits(["status", "route"]).unwrap();
        assert_eq!(
            AccessLogFields(bits),
            AccessLogFields::parse("route,status").unwrap()
        );
    }
}
