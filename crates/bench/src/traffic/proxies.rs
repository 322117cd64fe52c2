//! The proxies under test, configured alike: N domains `d<i>.bench.test`, each routed by
//! Host (plaintext) or SNI + Host (TLS, its own certificate) to one HTTP/1.1 backend over
//! kept connections; unknown hosts get 404 and unknown SNI names no certificate; no access
//! logs. Each runs from its own directory on free loopback ports, pinned to one CPU.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls_pki_types::CertificateDer;
use serde::Serialize;
use tokio::time::Instant;

use crate::certs::Leaf;
use crate::client::{Seen, Tls, admin_get};
use crate::manifests::{ConfigDir, backend_yaml, domain, domain_yaml};
use crate::procs::{ChildGuard, free_port, log_tail};
use crate::traffic::sys::{kill_descendants, thread_names};

/// A proxy under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ProxyKind {
    /// weir itself (`weir run`).
    Weir,
    /// A second weir binary (`--weir-baseline`), e.g. the build before a change, measured
    /// in the same run; never counted as a peer.
    WeirBaseline,
    /// nginx, one worker process.
    Nginx,
    /// HAProxy, one thread.
    Haproxy,
    /// weir with a retry on every route (ingress-nginx `proxy-next-upstream`: attempts
    /// kept for a retry, none made): the cost of being retryable. Not a peer.
    #[serde(rename = "weir-retry")]
    WeirRetry,
    /// weir with a local rate limit per client IP on every route (`limit-rps`, far above
    /// the load: every request is checked, none refused). Not a peer.
    #[serde(rename = "weir-limit")]
    WeirLimit,
}

impl ProxyKind {
    /// The name in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ProxyKind::Weir => "weir",
            ProxyKind::WeirBaseline => "weir-baseline",
            ProxyKind::Nginx => "nginx",
            ProxyKind::Haproxy => "haproxy",
            ProxyKind::WeirRetry => "weir-retry",
            ProxyKind::WeirLimit => "weir-limit",
        }
    }

    /// The ingress-nginx annotations of every domain's Ingress (weir kinds only).
    fn annotations(self) -> &'static [(&'static str, &'static str)] {
        match self {
            ProxyKind::WeirRetry => &[(
                "nginx.ingress.kubernetes.io/proxy-next-upstream",
                "error timeout http_503",
            )],
            ProxyKind::WeirLimit => &[("nginx.ingress.kubernetes.io/limit-rps", "100000000")],
            _ => &[],
        }
    }

    /// nginx and HAProxy: the proxies weir is compared with.
    pub(crate) fn is_peer(self) -> bool {
        matches!(self, ProxyKind::Nginx | ProxyKind::Haproxy)
    }
}

/// What every proxy is configured with.
#[derive(Clone, Debug)]
pub(crate) struct Site {
    /// Domains d0..d<domains-1>.
    pub(crate) domains: usize,
    pub(crate) backend: SocketAddr,
    /// Plaintext listener.
    pub(crate) http: SocketAddr,
    /// TLS listener.
    pub(crate) https: SocketAddr,
    /// The certificate cache's leaf directory: `d<i>.pem` holds certificate then key.
    pub(crate) leaves_dir: PathBuf,
}

impl Site {
    fn leaf(&self, i: usize) -> PathBuf {
        self.leaves_dir.join(format!("d{i}.pem"))
    }
}

/// nginx.conf: one worker, upstream keep-alive, one server block per domain (plaintext and
/// TLS + HTTP/2 on the same block), a default server that answers 404 and rejects unknown
/// SNI names, no TLS session cache or tickets (every new connection is a full handshake).
/// The forwarded request carries the fields weir adds by default (as ingress-nginx does),
/// so that each proxy does the same work and the backend reads the same request: the
/// client's `Host`, `X-Request-ID`, `X-Forwarded-For`, `-Proto` and `-Host`.
pub(crate) fn nginx_conf(dir: &Path, site: &Site) -> String {
    let d = dir.display();
    let mut s = String::with_capacity(256 * site.domains + 2048);
    let _ = write!(
        s,
        "daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 16384;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections 8192;
}}
http {{
    access_log off;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    server_names_hash_max_size 65536;
    server_names_hash_bucket_size 128;
    keepalive_requests 10000000;
    keepalive_timeout 120s;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache off;
    ssl_session_tickets off;
    proxy_http_version 1.1;
    proxy_set_header Connection \"\";
    proxy_set_header Host $host;
    proxy_set_header X-Request-ID $request_id;
    proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    proxy_set_header X-Forwarded-Proto $scheme;
    proxy_set_header X-Forwarded-Host $host;
    upstream bench {{
        server {backend};
        keepalive 1024;
        keepalive_requests 10000000;
        keepalive_timeout 120s;
    }}
    server {{
        listen {http} default_server;
        listen {https} ssl http2 default_server;
        ssl_reject_handshake on;
        return 404;
    }}
",
        backend = site.backend,
        http = site.http,
        https = site.https,
    );
    for i in 0..site.domains {
        let leaf = site.leaf(i);
        let _ = write!(
            s,
            "    server {{
        listen {http};
        listen {https} ssl http2;
        server_name {host};
        ssl_certificate {leaf};
        ssl_certificate_key {leaf};
        location / {{ proxy_pass http://bench; }}
    }}
",
            http = site.http,
            https = site.https,
            host = domain(i),
            leaf = leaf.display(),
        );
    }
    s.push_str("}\n");
    s
}

/// haproxy.cfg: one thread, no logging, no TLS session cache or tickets, SNI from a
/// crt-list (strict: unknown names get no certificate), Host checked against a map (404
/// when unknown), `http-reuse always` to the backend, and the fields weir adds by default
/// (`X-Request-ID`, `X-Forwarded-For`, `-Proto`, `-Host`; see [`nginx_conf`]).
pub(crate) fn haproxy_cfg(dir: &Path, site: &Site) -> String {
    let d = dir.display();
    format!(
        "global
    nbthread 1
    maxconn 8000
    tune.ssl.cachesize 0
    ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets
defaults
    mode http
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    timeout http-keep-alive 120s
    option http-keep-alive
    http-reuse always
frontend bench
    bind {http}
    bind {https} ssl crt-list {d}/crt-list.txt strict-sni alpn h2,http/1.1
    http-request return status 404 unless {{ req.hdr(host),field(1,:),lower,map({d}/hosts.map) -m found }}
    option forwardfor
    unique-id-format %{{+X}}o%ci%cp%Ts%rt
    http-request set-header X-Request-ID %[unique-id]
    http-request set-header X-Forwarded-Proto https if {{ ssl_fc }}
    http-request set-header X-Forwarded-Proto http unless {{ ssl_fc }}
    http-request set-header X-Forwarded-Host %[req.hdr(host)]
    default_backend bench
backend bench
    server backend {backend}
",
        http = site.http,
        https = site.https,
        backend = site.backend,
    )
}

/// HAProxy's crt-list: one `<pem> <sni>` line per domain.
pub(crate) fn haproxy_crt_list(site: &Site) -> String {
    let mut s = String::with_capacity(96 * site.domains);
    for i in 0..site.domains {
        let _ = writeln!(s, "{} {}", site.leaf(i).display(), domain(i));
    }
    s
}

/// HAProxy's Host map: `<host> 1` per domain.
pub(crate) fn haproxy_hosts_map(site: &Site) -> String {
    let mut s = String::with_capacity(24 * site.domains);
    for i in 0..site.domains {
        let _ = writeln!(s, "{} 1", domain(i));
    }
    s
}

/// The programs the proxies run from.
#[derive(Clone, Debug)]
pub(crate) struct Binaries {
    pub(crate) weir: PathBuf,
    /// The `--weir-baseline` binary, if any.
    pub(crate) weir_baseline: Option<PathBuf>,
    pub(crate) nginx: PathBuf,
    pub(crate) haproxy: PathBuf,
    pub(crate) taskset: PathBuf,
}

/// A started proxy; killed (with its children) when dropped.
pub(crate) struct Running {
    pub(crate) kind: ProxyKind,
    guard: ChildGuard,
    pub(crate) log: PathBuf,
    admin: Option<SocketAddr>,
}

impl Running {
    /// Writes `kind`'s configuration for `site` into `dir` and starts it pinned to `cpu`.
    /// `leaves` are the domains' certificates (weir reads them from its manifests).
    pub(crate) fn start(
        kind: ProxyKind,
        site: &Site,
        dir: &Path,
        bins: &Binaries,
        leaves: &[Leaf],
        cpu: usize,
    ) -> Result<Running> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let log = dir.join(format!("{}.log", kind.name()));
        let mut admin = None;
        let (program, args): (&Path, Vec<String>) = match kind {
            ProxyKind::Weir
            | ProxyKind::WeirBaseline
            | ProxyKind::WeirRetry
            | ProxyKind::WeirLimit => {
                let program = match (kind, &bins.weir_baseline) {
                    (ProxyKind::WeirBaseline, Some(b)) => b,
                    (ProxyKind::WeirBaseline, None) => {
                        anyhow::bail!("weir-baseline needs --weir-baseline PATH")
                    }
                    _ => &bins.weir,
                };
                let cfg = dir.join("manifests");
                std::fs::create_dir_all(&cfg)?;
                let cfg_dir = ConfigDir::new(&cfg);
                cfg_dir.write_plain("backend.yaml", &backend_yaml(site.backend))?;
                for (i, leaf) in leaves.iter().enumerate().take(site.domains) {
                    cfg_dir.write_domain(i, &domain_yaml(i, leaf, "/", kind.annotations()))?;
                }
                let a: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
                admin = Some(a);
                (
                    program,
                    vec![
                        "run".into(),
                        "-c".into(),
                        cfg.display().to_string(),
                        "--admin".into(),
                        a.to_string(),
                        "--ingress-http".into(),
                        site.http.to_string(),
                        "--ingress-https".into(),
                        site.https.to_string(),
                        "--no-access-log".into(),
                    ],
                )
            }
            ProxyKind::Nginx => {
                for sub in ["body", "proxy", "fastcgi", "uwsgi", "scgi"] {
                    std::fs::create_dir_all(dir.join("tmp").join(sub))?;
                }
                let conf = dir.join("nginx.conf");
                std::fs::write(&conf, nginx_conf(dir, site))?;
                (
                    &bins.nginx,
                    vec![
                        "-p".into(),
                        dir.display().to_string(),
                        "-e".into(),
                        dir.join("error.log").display().to_string(),
                        "-c".into(),
                        conf.display().to_string(),
                    ],
                )
            }
            ProxyKind::Haproxy => {
                std::fs::write(dir.join("crt-list.txt"), haproxy_crt_list(site))?;
                std::fs::write(dir.join("hosts.map"), haproxy_hosts_map(site))?;
                let cfg = dir.join("haproxy.cfg");
                std::fs::write(&cfg, haproxy_cfg(dir, site))?;
                (
                    &bins.haproxy,
                    vec!["-db".into(), "-f".into(), cfg.display().to_string()],
                )
            }
        };
        let mut full = vec![
            "-c".to_owned(),
            cpu.to_string(),
            program.display().to_string(),
        ];
        full.extend(args);
        let guard = ChildGuard::spawn(kind.name(), &bins.taskset, &full, &log)?;
        Ok(Running {
            kind,
            guard,
            log,
            admin,
        })
    }

    /// The proxy's process id (its tree holds nginx's worker).
    pub(crate) fn pid(&self) -> u32 {
        self.guard.pid()
    }

    /// Waits until the last domain answers 200 over plaintext and over TLS (SNI and
    /// certificate checked against `ca`). Returns the time it took.
    pub(crate) async fn wait_ready(
        &mut self,
        site: &Site,
        ca: &CertificateDer<'static>,
        limit: Duration,
    ) -> Result<Duration> {
        let start = Instant::now();
        let host = domain(site.domains.saturating_sub(1));
        let tls = Tls::new(site.https, ca)?;
        let mut last = String::from("nothing yet");
        while start.elapsed() < limit {
            if let Some(status) = self.guard.exited() {
                bail!(
                    "{} exited during startup ({status}); log:\n{}",
                    self.kind.name(),
                    log_tail(&self.log, 30)
                );
            }
            let admin_ready = match self.admin {
                Some(a) => matches!(admin_get(a, "/ready").await, Ok((200, _))),
                None => true,
            };
            if admin_ready {
                match http_status(site.http, &host, "/").await {
                    Ok(200) => match tls.connect(&host).await {
                        Ok(mut conn) => match conn.get("/").await {
                            Seen::Status(200) => return Ok(start.elapsed()),
                            seen => last = format!("https: {seen}"),
                        },
                        Err(seen) => last = format!("https: {seen}"),
                    },
                    Ok(s) => last = format!("http: status {s}"),
                    Err(e) => last = format!("http: {e}"),
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!(
            "{} did not serve {host} within {limit:?} (last: {last}); log:\n{}",
            self.kind.name(),
            log_tail(&self.log, 30)
        )
    }

    /// How the proxy runs: its processes and their threads by name (`comm`).
    pub(crate) fn describe_threads(&self) -> String {
        let procs = thread_names(self.pid());
        let total: usize = procs.iter().map(Vec::len).sum();
        let mut counts: Vec<(String, usize)> = Vec::new();
        for name in procs.iter().flatten() {
            match counts.iter_mut().find(|(n, _)| n == name) {
                Some((_, c)) => *c += 1,
                None => counts.push((name.clone(), 1)),
            }
        }
        let names: Vec<String> = counts.iter().map(|(n, c)| format!("{n} ×{c}")).collect();
        format!(
            "{} process(es), {total} thread(s): {}",
            procs.len(),
            names.join(", ")
        )
    }

    /// Whether the proxy has exited (and how).
    pub(crate) fn exited(&mut self) -> Option<String> {
        self.guard.exited().map(|s| s.to_string())
    }

    /// Stops the proxy: its children first, then SIGTERM and a grace period.
    pub(crate) fn stop(mut self) -> Option<String> {
        kill_descendants(self.pid());
        self.guard
            .stop(Duration::from_secs(5))
            .map(|s| s.to_string())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // The guard kills the root; children (nginx's worker) would outlive it.
        if self.guard.pid() != 0 {
            kill_descendants(self.guard.pid());
        }
    }
}

/// GET `path` with Host `host` on a new plaintext connection: the status.
pub(crate) async fn http_status(addr: SocketAddr, host: &str, path: &str) -> Result<u16> {
    let fut = async {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(conn);
        let req = Request::get(path)
            .header("host", host)
            .body(Empty::<Bytes>::new())?;
        let resp = tx.send_request(req).await?;
        let status = resp.status().as_u16();
        resp.into_body().collect().await?;
        Ok::<u16, anyhow::Error>(status)
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .context("request timed out")?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(domains: usize) -> Site {
        Site {
            domains,
            backend: "127.0.0.1:9000".parse().unwrap(),
            http: "127.0.0.1:9001".parse().unwrap(),
            https: "127.0.0.1:9002".parse().unwrap(),
            leaves_dir: PathBuf::from("/cache/leaves"),
        }
    }

    #[test]
    fn nginx_has_one_server_per_domain_and_a_rejecting_default() {
        let conf = nginx_conf(Path::new("/run/x"), &site(3));
        assert!(conf.contains("worker_processes 1;"));
        assert!(conf.contains("access_log off;"));
        assert!(conf.contains("ssl_session_cache off;"));
        assert!(conf.contains("server 127.0.0.1:9000;\n        keepalive 1024;"));
        assert!(conf.contains("proxy_http_version 1.1;"));
        // The fields weir forwards by default, and the client's Host (not the upstream's
        // name, nginx's default).
        for field in [
            "Host $host",
            "X-Request-ID $request_id",
            "X-Forwarded-For $proxy_add_x_forwarded_for",
            "X-Forwarded-Proto $scheme",
            "X-Forwarded-Host $host",
        ] {
            assert!(
                conf.contains(&format!("proxy_set_header {field};")),
                "{field}"
            );
        }
        assert!(conf.contains("listen 127.0.0.1:9002 ssl http2 default_server;"));
        assert!(conf.contains("ssl_reject_handshake on;"));
        assert_eq!(conf.matches("server_name ").count(), 3);
        assert!(conf.contains("server_name d2.bench.test;"));
        assert!(conf.contains("ssl_certificate /cache/leaves/d2.pem;"));
        assert!(conf.contains("ssl_certificate_key /cache/leaves/d2.pem;"));
        assert_eq!(conf.matches("proxy_pass http://bench;").count(), 3);
        assert!(conf.contains("pid /run/x/nginx.pid;"));
        // Braces balance: every block is closed.
        assert_eq!(conf.matches('{').count(), conf.matches('}').count());
    }

    #[test]
    fn haproxy_config_crt_list_and_map() {
        let s = site(2);
        let cfg = haproxy_cfg(Path::new("/run/h"), &s);
        assert!(cfg.contains("nbthread 1"));
        assert!(cfg.contains("http-reuse always"));
        assert!(cfg.contains("tune.ssl.cachesize 0"));
        assert!(cfg.contains(
            "bind 127.0.0.1:9002 ssl crt-list /run/h/crt-list.txt strict-sni alpn h2,http/1.1"
        ));
        assert!(cfg.contains("map(/run/h/hosts.map) -m found"));
        assert!(cfg.contains("server backend 127.0.0.1:9000"));
        assert!(cfg.contains("option forwardfor"));
        for field in ["X-Request-ID", "X-Forwarded-Proto", "X-Forwarded-Host"] {
            assert!(
                cfg.contains(&format!("http-request set-header {field} ")),
                "{field}"
            );
        }
        assert!(!cfg.contains("\n    log "));
        assert_eq!(
            haproxy_crt_list(&s),
            "/cache/leaves/d0.pem d0.bench.test\n/cache/leaves/d1.pem d1.bench.test\n"
        );
        assert_eq!(haproxy_hosts_map(&s), "d0.bench.test 1\nd1.bench.test 1\n");
    }
}
