//! The `weir` command: wires the crates together; the work happens in the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

mod allocator;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "A gateway for Kubernetes (Gateway API, Ingress) and a standalone reverse proxy"
)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "WEIR_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Serve Kubernetes-style YAML manifests from a file or directory, hot reloaded.
    Run(RunArgs),
    /// Watch a Kubernetes API server (Gateway API, Ingress), serve its Gateways and Ingresses, write status.
    Controller(Box<ControllerArgs>),
    /// A data plane for one Gateway, configured by a controller's push protocol (split mode).
    Proxy(ProxyArgs),
    /// Validate a config path: print every problem with file, object and field; exit 1 if any.
    Check(CheckArgs),
    /// Rewrite Ingresses (with their ingress-nginx annotations) into a Gateway, HTTPRoutes
    /// and TrafficPolicies that weir serves the same way; report what is not carried over.
    Migrate(MigrateArgs),
    /// Run a small HTTP/1.1 + h2c echo backend that answers with a JSON description of each request.
    Echo(EchoArgs),
    /// Print the CustomResourceDefinitions of weir's own kinds (TrafficPolicy, Backend,
    /// DirectResponse), generated from the types weir reads them with
    /// (deploy/crds/weir.dev.yaml is this output).
    Crds,
}

/// Where global rate limits keep their counts.
#[derive(clap::Args)]
struct RedisArgs {
    /// Redis for global rate limits: `redis://[user:password@]host:port[/db]`,
    /// `rediss://…` for TLS; repeat (or separate by commas) for the seed nodes of a Redis
    /// Cluster. Without it a global limit follows its fail mode.
    #[arg(long = "redis", env = "WEIR_REDIS", value_delimiter = ',')]
    redis: Vec<String>,
    /// The Redis nodes form a Redis Cluster (implied by several nodes).
    #[arg(long, env = "WEIR_REDIS_CLUSTER")]
    redis_cluster: bool,
    /// CA certificates (PEM file) that sign the Redis servers' TLS certificates, instead
    /// of the system's roots.
    #[arg(long, env = "WEIR_REDIS_CA")]
    redis_ca: Option<PathBuf>,
    /// Limit of each Redis connect and sync; past it the global limits' fail mode
    /// applies until a sync succeeds.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    redis_timeout: std::time::Duration,
    /// How often local counts are added to Redis and global counts read back.
    #[arg(long, default_value = "20ms", value_parser = parse_duration)]
    redis_sync_interval: std::time::Duration,
}

impl RedisArgs {
    fn settings(&self) -> anyhow::Result<Option<weir_proxy::RedisSettings>> {
        if self.redis.is_empty() {
            return Ok(None);
        }
        let ca_pem = match &self.redis_ca {
            Some(p) => Some(
                std::fs::read(p).map_err(|e| anyhow::anyhow!("--redis-ca {}: {e}", p.display()))?,
            ),
            None => None,
        };
        let mut s = weir_proxy::RedisSettings::new(self.redis.clone());
        s.cluster = self.redis_cluster;
        s.ca_pem = ca_pem;
        s.timeout = self.redis_timeout.max(std::time::Duration::from_millis(1));
        s.sync_interval = self
            .redis_sync_interval
            .max(std::time::Duration::from_millis(1));
        Ok(Some(s))
    }
}

/// The access log: one JSON record per request.
#[derive(clap::Args)]
struct AccessLogArgs {
    /// Do not write access-log records.
    #[arg(long)]
    no_access_log: bool,
    /// Where access-log records go: `-` for standard output, else a file, rotated by
    /// size and/or age (`--access-log-max-size`, `--access-log-rotate-every`,
    /// `--access-log-keep`).
    #[arg(long = "access-log", env = "WEIR_ACCESS_LOG", default_value = "-")]
    path: String,
    /// Size at which the access-log file is rotated (bytes, or with a `K`, `M` or `G`
    /// suffix, powers of 1024); 0 never rotates.
    #[arg(long = "access-log-max-size", default_value = "100M", value_parser = parse_size)]
    max_size: u64,
    /// Age at which the access-log file is rotated (e.g. `1h`, `1d`): the first record
    /// written that long or longer after the file was started goes to a new file, named
    /// as by size. Without it the age does not matter.
    #[arg(long = "access-log-rotate-every", value_parser = parse_nonzero_duration)]
    rotate_every: Option<std::time::Duration>,
    /// Rotated access-log files kept (`PATH.1` is the newest).
    #[arg(long = "access-log-keep", default_value_t = 5)]
    keep: usize,
    /// The fields of a record, comma-separated, or `all`: time, method, host, path,
    /// status, duration_ms, route, listener, client, request_id, upstream, attempts,
    /// fault, decision, policy, check, reason, checks, identity, rate_limit, trace_id.
    #[arg(long = "access-log-fields", default_value = "all", value_parser = weir_proxy::AccessLogFields::parse)]
    fields: weir_proxy::AccessLogFields,
    /// Records waiting for the writer at most; past it records are dropped and counted
    /// (`weir_access_log_dropped_total`), never waited for.
    #[arg(long = "access-log-queue", default_value_t = 8192)]
    queue: usize,
}

impl AccessLogArgs {
    fn settings(&self) -> anyhow::Result<Option<weir_proxy::AccessLogSettings>> {
        if self.no_access_log {
            return Ok(None);
        }
        let output = if self.path == "-" {
            weir_proxy::AccessLogOutput::Stdout
        } else {
            weir_proxy::AccessLogOutput::File {
                path: PathBuf::from(&self.path),
                max_bytes: self.max_size,
                every: self.rotate_every,
                keep: self.keep,
            }
        };
        Ok(Some(weir_proxy::AccessLogSettings {
            output,
            fields: self.fields,
            queue: self.queue.max(1),
        }))
    }
}

/// OpenTelemetry traces.
#[derive(clap::Args)]
struct TraceArgs {
    /// Export a span per request (and one per upstream attempt) to this OTLP collector,
    /// e.g. `http://127.0.0.1:4317`, or `https://…` for TLS. Without it requests are not
    /// traced.
    #[arg(long = "otlp-endpoint", env = "WEIR_OTLP_ENDPOINT")]
    endpoint: Option<String>,
    /// `grpc` (OTLP/gRPC, port 4317 by convention) or `http` (OTLP/HTTP with protobuf
    /// bodies, `POST {endpoint}/v1/traces`, port 4318 by convention).
    #[arg(
        long = "otlp-protocol",
        env = "WEIR_OTLP_PROTOCOL",
        default_value = "grpc"
    )]
    protocol: OtlpProtocolArg,
    /// CA certificates (PEM) trusted for an `https://` collector besides the system's
    /// roots.
    #[arg(long = "otlp-ca-file", env = "WEIR_OTLP_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// `service.name` of the spans.
    #[arg(
        long = "trace-service-name",
        env = "WEIR_TRACE_SERVICE_NAME",
        default_value = "weir"
    )]
    service_name: String,
    /// Share of new traces sampled, 0 to 1.
    #[arg(long = "trace-sampling-ratio", default_value_t = 1.0, value_parser = parse_ratio)]
    sampling_ratio: f64,
    /// Decide by the ratio alone, even for a request whose `traceparent` says whether
    /// its caller sampled it (by default the caller's decision is followed).
    #[arg(long = "trace-ignore-parent")]
    ignore_parent: bool,
    /// Limit of one export call to the collector.
    #[arg(long = "otlp-timeout", default_value = "5s", value_parser = parse_duration)]
    timeout: std::time::Duration,
}

/// The values of `--otlp-protocol`.
#[derive(Clone, Copy, ValueEnum)]
enum OtlpProtocolArg {
    Grpc,
    Http,
}

impl TraceArgs {
    fn settings(&self) -> anyhow::Result<Option<weir_proxy::TraceSettings>> {
        let Some(endpoint) = self.endpoint.as_ref() else {
            return Ok(None);
        };
        let mut s = weir_proxy::TraceSettings::new(endpoint.clone());
        s.protocol = match self.protocol {
            OtlpProtocolArg::Grpc => weir_proxy::OtlpProtocol::Grpc,
            OtlpProtocolArg::Http => weir_proxy::OtlpProtocol::Http,
        };
        if let Some(path) = &self.ca_file {
            let pem = std::fs::read(path)
                .map_err(|e| anyhow::anyhow!("--otlp-ca-file {}: {e}", path.display()))?;
            s.ca_pem = Some(pem);
        }
        s.service_name = self.service_name.clone();
        s.sampling_ratio = self.sampling_ratio;
        s.parent_based = !self.ignore_parent;
        s.timeout = self.timeout.max(std::time::Duration::from_millis(1));
        Ok(Some(s))
    }
}

/// A number from 0 to 1.
fn parse_ratio(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("{v:?}: expected a ratio from 0 to 1")),
    }
}

/// `100M`, `512K`, `1G` (powers of 1024), or a number of bytes.
fn parse_size(v: &str) -> Result<u64, String> {
    let t = v.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{v:?}: expected a size such as 100M, 512K or 1048576"))
}

#[derive(clap::Args)]
struct IngressArgs {
    /// Address that serves plaintext traffic for Ingress objects.
    #[arg(long, default_value = "0.0.0.0:80", env = "WEIR_INGRESS_HTTP")]
    ingress_http: SocketAddr,
    /// Address that serves TLS traffic for Ingress objects.
    #[arg(long, default_value = "0.0.0.0:443", env = "WEIR_INGRESS_HTTPS")]
    ingress_https: SocketAddr,
    /// Ingress class served (Ingresses without a class are served too in standalone mode).
    /// Give it more than once to serve several, e.g. `--ingress-class weir
    /// --ingress-class nginx` to take over ingress-nginx's Ingresses in place; the first
    /// is the one whose IngressClass can make class-less Ingresses ours.
    #[arg(long, default_value = "weir", action = clap::ArgAction::Append)]
    ingress_class: Vec<String>,
}

impl IngressArgs {
    /// The plaintext and TLS addresses, refused when they overlap: one socket cannot
    /// serve both, and serving the Ingresses' TLS side as plaintext would fail every
    /// handshake without a word.
    fn addresses(&self) -> anyhow::Result<(SocketAddr, SocketAddr)> {
        let (http, https) = (self.ingress_http, self.ingress_https);
        let same_ip =
            http.ip() == https.ip() || http.ip().is_unspecified() || https.ip().is_unspecified();
        if same_ip && http.port() == https.port() {
            anyhow::bail!(
                "--ingress-http ({http}) and --ingress-https ({https}) must not share a port"
            );
        }
        Ok((http, https))
    }

    /// The first class and the others.
    fn classes(&self) -> (String, Vec<String>) {
        let mut all = self.ingress_class.clone();
        if all.is_empty() {
            all.push("weir".into());
        }
        let first = all.remove(0);
        let mut more: Vec<String> = Vec::new();
        for c in all {
            if c != first && !more.contains(&c) {
                more.push(c);
            }
        }
        (first, more)
    }
}

#[derive(clap::Args)]
struct RunArgs {
    /// A YAML file or a directory of YAML files (recursive, multi-document).
    #[arg(short, long, env = "WEIR_CONFIG")]
    config: PathBuf,
    /// Admin server address (/ready, /metrics, /config).
    #[arg(long, default_value = "127.0.0.1:9901", env = "WEIR_ADMIN")]
    admin: SocketAddr,
    #[command(flatten)]
    ingress: IngressArgs,
    #[command(flatten)]
    access_log: AccessLogArgs,
    #[command(flatten)]
    traces: TraceArgs,
    /// Do not watch the config path for changes.
    #[arg(long)]
    no_watch: bool,
    #[command(flatten)]
    redis: RedisArgs,
}

#[derive(clap::Args)]
struct ControllerArgs {
    /// Kubeconfig file (default: in-cluster service account, then $KUBECONFIG or ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The GatewayClass `controllerName` this controller owns.
    #[arg(
        long,
        default_value = "weir.dev/gateway-controller",
        env = "WEIR_CONTROLLER_NAME"
    )]
    controller_name: String,
    /// Admin server address (/ready, /metrics, /config).
    #[arg(long, default_value = "127.0.0.1:9901", env = "WEIR_ADMIN")]
    admin: SocketAddr,
    #[command(flatten)]
    ingress: IngressArgs,
    /// Address reported in Gateway and Ingress status where listeners bind 0.0.0.0 (repeatable; e.g. the Pod IP).
    #[arg(
        long = "advertise-address",
        env = "WEIR_ADVERTISE_ADDRESS",
        value_delimiter = ','
    )]
    advertise: Vec<String>,
    /// Give each Gateway that names no IP address its own address from this IPv4 range
    /// (CIDR, e.g. 127.10.0.0/16), reported in its status, instead of binding 0.0.0.0.
    #[arg(long, env = "WEIR_GATEWAY_ADDRESS_POOL")]
    gateway_address_pool: Option<weir_translate::AddressPool>,
    #[command(flatten)]
    access_log: AccessLogArgs,
    #[command(flatten)]
    traces: TraceArgs,
    /// Serve the configuration push protocol (gRPC) here, for `weir proxy` data planes.
    #[arg(long, env = "WEIR_XDS_LISTEN")]
    xds_listen: Option<SocketAddr>,
    /// Do not serve Gateways and Ingresses from this process (split mode: `weir proxy`
    /// data planes serve them).
    #[arg(long, requires = "xds_listen")]
    no_embedded_proxy: bool,
    /// Who may subscribe to a Gateway's configuration: `service-account` (a token of
    /// ServiceAccount `weir-<gateway>` in the Gateway's namespace, checked by TokenReview)
    /// or `none` (anyone who can reach the port).
    #[arg(long, value_enum, default_value_t = XdsAuth::ServiceAccount)]
    xds_auth: XdsAuth,
    /// Split mode: create a Deployment (running `weir proxy` with this image), a Service
    /// and a ServiceAccount per accepted Gateway, in its namespace, owned by it.
    #[arg(long, requires = "xds_listen")]
    provision_image: Option<String>,
    /// The push endpoint as provisioned data planes reach it.
    #[arg(long, default_value = "http://weir.weir-system:18000")]
    provision_controller_url: String,
    /// Replicas of each provisioned data plane.
    #[arg(long, default_value_t = 1)]
    provision_replicas: i32,
    #[command(flatten)]
    redis: RedisArgs,
    /// Type of each provisioned Service.
    #[arg(long, default_value = "LoadBalancer")]
    provision_service_type: String,
    /// Embedded data plane: publish a Service per accepted Gateway (`weir-<gateway>`, in
    /// its namespace, owned by it) exposing its listener ports and selecting the Pods
    /// with these labels (this controller's own; KEY=VALUE, comma-separated). It carries
    /// the Gateway's `infrastructure` labels and annotations.
    #[arg(
        long,
        env = "WEIR_GATEWAY_SERVICE_SELECTOR",
        value_delimiter = ',',
        value_parser = parse_label,
        conflicts_with = "provision_image"
    )]
    gateway_service_selector: Vec<(String, String)>,
    /// Type of each Service of `--gateway-service-selector`.
    #[arg(
        long,
        default_value = "LoadBalancer",
        env = "WEIR_GATEWAY_SERVICE_TYPE"
    )]
    gateway_service_type: String,
    #[command(flatten)]
    leader: LeaderArgs,
}

/// Leader election among controller replicas (Kubernetes' defaults for the timings).
#[derive(clap::Args)]
struct LeaderArgs {
    /// Elect a leader among replicas on a coordination.k8s.io/v1 Lease: only the leader
    /// writes status and provisions; every replica watches, translates and serves data
    /// planes. Off: this replica always acts as the leader (run only one).
    #[arg(long, env = "WEIR_LEADER_ELECT")]
    leader_elect: bool,
    /// The Lease's name.
    #[arg(long, default_value = "weir-controller")]
    leader_elect_lease_name: String,
    /// The Lease's namespace [default: $POD_NAMESPACE, else the service account's
    /// namespace in a Pod, else `default`].
    #[arg(long)]
    leader_elect_namespace: Option<String>,
    /// This replica's identity in the Lease [default: $POD_NAME, else host name and pid].
    #[arg(long)]
    leader_elect_identity: Option<String>,
    /// How long a Lease that is not renewed keeps other replicas from taking it (whole
    /// seconds; e.g. `15s`).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    leader_elect_lease_duration: std::time::Duration,
    /// The leader stops acting as leader when it has not renewed for this long.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    leader_elect_renew_deadline: std::time::Duration,
    /// How often the leader renews and a follower tries to acquire (e.g. `2s`, `500ms`).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    leader_elect_retry_period: std::time::Duration,
}

impl LeaderArgs {
    fn options(self) -> Option<weir_provider_k8s::LeaseOptions> {
        if !self.leader_elect {
            return None;
        }
        let namespace = self.leader_elect_namespace.unwrap_or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|n| !n.is_empty())
                .or_else(|| {
                    std::fs::read_to_string(
                        "/var/run/secrets/kubernetes.io/serviceaccount/namespace",
                    )
                    .ok()
                    .map(|n| n.trim().to_string())
                    .filter(|n| !n.is_empty())
                })
                .unwrap_or_else(|| "default".into())
        });
        let mut o = weir_provider_k8s::LeaseOptions::new(
            namespace,
            self.leader_elect_lease_name,
            self.leader_elect_identity
                .unwrap_or_else(weir_provider_k8s::default_identity),
        );
        o.lease_duration = self.leader_elect_lease_duration;
        o.renew_deadline = self.leader_elect_renew_deadline;
        o.retry_period = self.leader_elect_retry_period;
        Some(o)
    }
}

/// `KEY=VALUE` (a label of a Service selector).
fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

/// `15s`, `500ms`, `2m`, or a number of seconds.
fn parse_duration(v: &str) -> Result<std::time::Duration, String> {
    let (num, unit) = match v.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => v.split_at(i),
        None => (v, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{v:?}: expected a duration such as 15s or 500ms"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        _ => return Err(format!("{v:?}: unknown unit {unit:?} (ms, s, m, h, d)")),
    };
    std::time::Duration::try_from_secs_f64(secs).map_err(|e| format!("{v:?}: {e}"))
}

/// A duration longer than zero.
fn parse_nonzero_duration(v: &str) -> Result<std::time::Duration, String> {
    let d = parse_duration(v)?;
    if d.is_zero() {
        return Err(format!("{v:?}: must be longer than 0"));
    }
    Ok(d)
}

#[derive(Clone, Copy, ValueEnum)]
enum XdsAuth {
    ServiceAccount,
    None,
}

#[derive(clap::Args)]
struct ProxyArgs {
    /// The controller's push endpoint; several (comma-separated or repeated): one per
    /// controller replica, tried in turn whenever the stream is lost.
    #[arg(long, env = "WEIR_CONTROLLER", value_delimiter = ',', required = true)]
    controller: Vec<String>,
    /// The Gateway to serve, NAMESPACE/NAME.
    #[arg(long, env = "WEIR_GATEWAY")]
    gateway: String,
    /// Admin server address (/ready, /metrics, /config).
    #[arg(long, default_value = "127.0.0.1:9902", env = "WEIR_ADMIN")]
    admin: SocketAddr,
    /// Name in the controller's logs [default: the host name].
    #[arg(long, env = "WEIR_NODE")]
    node: Option<String>,
    /// File holding a bearer token to present to the controller.
    #[arg(long, env = "WEIR_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    #[command(flatten)]
    access_log: AccessLogArgs,
    #[command(flatten)]
    traces: TraceArgs,
    #[command(flatten)]
    redis: RedisArgs,
}

#[derive(clap::Args)]
struct CheckArgs {
    /// A YAML file or a directory of YAML files.
    #[arg(short, long)]
    config: PathBuf,
    /// `text` (one line per problem) or `json` (one document: objects read, problems with
    /// file, document, object and message).
    #[arg(long, value_parser = ["text", "json"], default_value = "text")]
    output: String,
    #[command(flatten)]
    ingress: IngressArgs,
}

#[derive(clap::Args)]
struct MigrateArgs {
    /// A YAML file or a directory of YAML files holding the Ingresses (and, where
    /// available, the Services, Secrets and Backends they use).
    #[arg(
        short,
        long,
        required_unless_present = "from_cluster",
        conflicts_with = "from_cluster"
    )]
    config: Option<PathBuf>,
    /// Read the Ingresses from a cluster instead (every namespace; with the Services and
    /// weir Backends of their namespaces and the Secrets they name).
    #[arg(long)]
    from_cluster: bool,
    /// Kubeconfig of that cluster (default: `KUBECONFIG`, `~/.kube/config`, or in-cluster).
    #[arg(long, requires = "from_cluster")]
    kubeconfig: Option<PathBuf>,
    /// Write the manifests here instead of stdout.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Write the report here instead of stderr.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Name of the Gateway written.
    #[arg(long, default_value = "weir")]
    gateway_name: String,
    /// Namespace of the Gateway written.
    #[arg(long, default_value = "default")]
    gateway_namespace: String,
    /// `gatewayClassName` of the Gateway written.
    #[arg(long, default_value = "weir")]
    gateway_class: String,
    /// Port of the Gateway's plaintext listener.
    #[arg(long, default_value_t = 80)]
    http_port: u16,
    /// Port of the Gateway's TLS listeners.
    #[arg(long, default_value_t = 443)]
    https_port: u16,
    /// An IP address for the Gateway's `spec.addresses` (e.g. where `weir run` binds it).
    #[arg(long)]
    address: Option<String>,
    /// Ingress classes to migrate (Ingresses without a class are migrated too).
    #[arg(long, value_delimiter = ',', default_value = "weir,nginx")]
    ingress_class: Vec<String>,
}

#[derive(clap::Args)]
struct EchoArgs {
    /// Address to listen on.
    #[arg(
        short,
        long,
        default_value = "127.0.0.1:3000",
        env = "WEIR_ECHO_LISTEN"
    )]
    listen: SocketAddr,
    /// Identity reported in every response (`name` field, `x-echo-name` header).
    #[arg(short, long, default_value = "echo", env = "WEIR_ECHO_NAME")]
    name: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    weir::logging::init(matches!(cli.log_format, LogFormat::Json));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weir: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Run(a) => {
                // Freed pages are kept while the first configuration loads (released
                // by `on_loaded`).
                allocator::hold_freed();
                let opts = weir::standalone::RunOptions {
                    config: a.config,
                    admin: a.admin,
                    ingress_http: Some(a.ingress.addresses()?.0),
                    ingress_https: Some(a.ingress.addresses()?.1),
                    ingress_class: a.ingress.classes().0,
                    more_ingress_classes: a.ingress.classes().1,
                    access_log: a.access_log.settings()?,
                    traces: a.traces.settings()?,
                    watch: !a.no_watch,
                    redis: a.redis.settings()?,
                    on_loaded: Some(|| {
                        allocator::release_freed();
                        allocator::collapse_heap_after_load();
                    }),
                };
                weir::standalone::run_until_signal(opts).await.map(|()| ExitCode::SUCCESS)
            }
            Command::Controller(a) => {
                let a = *a;
                let opts = weir::controller::ControllerOptions {
                    kubeconfig: a.kubeconfig,
                    controller_name: a.controller_name,
                    admin: a.admin,
                    ingress_http: Some(a.ingress.addresses()?.0),
                    ingress_https: Some(a.ingress.addresses()?.1),
                    ingress_class: a.ingress.classes().0,
                    more_ingress_classes: a.ingress.classes().1,
                    advertise: a.advertise,
                    gateway_address_pool: a.gateway_address_pool,
                    access_log: a.access_log.settings()?,
                    traces: a.traces.settings()?,
                    xds_listen: a.xds_listen,
                    embedded_proxy: !a.no_embedded_proxy,
                    xds_auth: matches!(a.xds_auth, XdsAuth::ServiceAccount),
                    provision: match a.provision_image {
                        Some(image) => Some(weir_provider_k8s::Provision::DataPlanes(
                            weir_provider_k8s::ProvisionOptions {
                                image,
                                controller_url: a.provision_controller_url,
                                replicas: a.provision_replicas,
                                service_type: a.provision_service_type,
                            },
                        )),
                        None if !a.gateway_service_selector.is_empty() => {
                            Some(weir_provider_k8s::Provision::Services(
                                weir_provider_k8s::GatewayServiceOptions {
                                    selector: a.gateway_service_selector.into_iter().collect(),
                                    service_type: a.gateway_service_type,
                                },
                            ))
                        }
                        None => None,
                    },
                    leader_election: a.leader.options(),
                    redis: a.redis.settings()?,
                };
                weir::controller::run_until_signal(opts).await.map(|()| ExitCode::SUCCESS)
            }
            Command::Proxy(a) => {
                let token = match &a.token_file {
                    Some(p) => Some(std::fs::read_to_string(p)?.trim().to_string()),
                    None => None,
                };
                let opts = weir::proxy::ProxyOptions {
                    controllers: a.controller,
                    gateway: a.gateway,
                    admin: a.admin,
                    node: a.node.unwrap_or_else(|| {
                        std::fs::read_to_string("/proc/sys/kernel/hostname")
                            .map(|h| h.trim().to_string())
                            .unwrap_or_else(|_| "weir-proxy".into())
                    }),
                    token,
                    access_log: a.access_log.settings()?,
                    traces: a.traces.settings()?,
                    redis: a.redis.settings()?,
                };
                weir::proxy::run_until_signal(opts).await.map(|()| ExitCode::SUCCESS)
            }
            Command::Check(a) => {
                let opts = weir::check::CheckOptions {
                    config: a.config,
                    ingress_http: Some(a.ingress.addresses()?.0),
                    ingress_https: Some(a.ingress.addresses()?.1),
                    ingress_class: a.ingress.classes().0,
                    more_ingress_classes: a.ingress.classes().1,
                    json: a.output == "json",
                };
                let problems = weir::check::check(&opts, &mut std::io::stdout())?;
                Ok(if problems == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
            }
            Command::Migrate(a) => {
                let opts = weir::migrate::MigrateOptions {
                    config: a.config.clone().unwrap_or_default(),
                    gateway_name: a.gateway_name,
                    gateway_namespace: a.gateway_namespace,
                    gateway_class: a.gateway_class,
                    http_port: a.http_port,
                    https_port: a.https_port,
                    address: a.address,
                    ingress_classes: a.ingress_class,
                };
                let m = if a.from_cluster {
                    let client = weir_provider_k8s::client(a.kubeconfig.as_deref()).await?;
                    weir::migrate::migrate_cluster(&opts, client).await?
                } else {
                    weir::migrate::migrate(&opts)
                };
                let yaml = m.yaml()?;
                match &a.output {
                    Some(p) => std::fs::write(p, yaml)
                        .map_err(|e| anyhow::anyhow!("--output {}: {e}", p.display()))?,
                    None => print!("{yaml}"),
                }
                match &a.report {
                    Some(p) => std::fs::write(p, m.report())
                        .map_err(|e| anyhow::anyhow!("--report {}: {e}", p.display()))?,
                    None => eprint!("{}", m.report()),
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Echo(a) => {
                let listener = tokio::net::TcpListener::bind(a.listen).await?;
                tracing::info!(addr = %listener.local_addr()?, name = %a.name, "echo backend listening");
                weir::echo::serve(listener, a.name.into()).await?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Crds => {
                print!("{}", weir_api::crd::weir_dev_crds_yaml());
                Ok(ExitCode::SUCCESS)
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weir: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn sizes_take_a_suffix_or_mean_bytes() {
        use super::parse_size;
        assert_eq!(parse_size("100M"), Ok(100 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("7"), Ok(7));
        assert!(parse_size("1T").is_err());
        assert!(parse_size("M").is_err());
    }

    #[test]
    fn durations_take_a_unit_or_mean_seconds() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("3h"), Ok(Duration::from_secs(3 * 3600)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86400)));
        assert!(parse_duration("3y").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    /// The Ingress plaintext and TLS addresses must not share a port (one socket cannot
    /// serve both as asked); distinct ports, or one port on two distinct addresses, pass.
    #[test]
    fn ingress_addresses_must_not_share_a_port() {
        use clap::Parser;
        let check = |http: &str, https: &str| {
            let args = [
                "weir",
                "run",
                "-c",
                "x",
                "--ingress-http",
                http,
                "--ingress-https",
                https,
            ];
            match super::Cli::try_parse_from(args).unwrap().command {
                super::Command::Run(a) => a.ingress.addresses().map_err(|e| e.to_string()),
                _ => unreachable!(),
            }
        };
        assert!(check("127.0.0.1:8080", "127.0.0.1:8443").is_ok());
        assert!(check("127.0.0.1:8080", "127.0.0.2:8080").is_ok());
        for (http, https) in [
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("0.0.0.0:8080", "127.0.0.1:8080"),
            ("127.0.0.1:0", "127.0.0.1:0"),
        ] {
            let e = check(http, https).expect_err(http);
            assert!(e.contains("must not share a port"), "{e}");
        }
    }

    /// `--ingress-class` defaults to `weir`, and given more than once serves each class
    /// (the first is the one whose IngressClass may be the default).
    #[test]
    fn ingress_class_may_be_repeated() {
        use clap::Parser;
        let classes = |args: &[&str]| {
            let cli =
                super::Cli::try_parse_from(["weir", "check", "-c", "x.yaml"].iter().chain(args))
                    .unwrap();
            match cli.command {
                super::Command::Check(a) => a.ingress.classes(),
                _ => unreachable!(),
            }
        };
        assert_eq!(classes(&[]), ("weir".to_owned(), vec![]));
        assert_eq!(
            classes(&[
                "--ingress-class",
                "weir",
                "--ingress-class",
                "nginx",
                "--ingress-class",
                "weir",
                "--ingress-class",
                "nginx"
            ]),
            ("weir".to_owned(), vec!["nginx".to_owned()])
        );
        assert_eq!(
            classes(&["--ingress-class", "nginx"]),
            ("nginx".to_owned(), vec![])
        );
    }
}
