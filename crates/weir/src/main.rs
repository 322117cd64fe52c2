//! The `weir` command: wires the crates together; the work happens in the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

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
    Controller(ControllerArgs),
    /// Validate a config path: print every problem with file, object and field; exit 1 if any.
    Check(CheckArgs),
    /// Run a small HTTP/1.1 + h2c echo backend that answers with a JSON description of each request.
    Echo(EchoArgs),
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
    #[arg(long, default_value = "weir")]
    ingress_class: String,
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
    /// Do not write one access-log line per request.
    #[arg(long)]
    no_access_log: bool,
    /// Do not watch the config path for changes.
    #[arg(long)]
    no_watch: bool,
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
    /// Do not write one access-log line per request.
    #[arg(long)]
    no_access_log: bool,
}

#[derive(clap::Args)]
struct CheckArgs {
    /// A YAML file or a directory of YAML files.
    #[arg(short, long)]
    config: PathBuf,
    #[command(flatten)]
    ingress: IngressArgs,
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
                let opts = weir::standalone::RunOptions {
                    config: a.config,
                    admin: a.admin,
                    ingress_http: Some(a.ingress.ingress_http),
                    ingress_https: Some(a.ingress.ingress_https),
                    ingress_class: a.ingress.ingress_class,
                    access_log: !a.no_access_log,
                    watch: !a.no_watch,
                };
                weir::standalone::run_until_signal(opts).await.map(|()| ExitCode::SUCCESS)
            }
            Command::Controller(a) => {
                let opts = weir::controller::ControllerOptions {
                    kubeconfig: a.kubeconfig,
                    controller_name: a.controller_name,
                    admin: a.admin,
                    ingress_http: Some(a.ingress.ingress_http),
                    ingress_https: Some(a.ingress.ingress_https),
                    ingress_class: a.ingress.ingress_class,
                    advertise: a.advertise,
                    gateway_address_pool: a.gateway_address_pool,
                    access_log: !a.no_access_log,
                };
                weir::controller::run_until_signal(opts).await.map(|()| ExitCode::SUCCESS)
            }
            Command::Check(a) => {
                let opts = weir::check::CheckOptions {
                    config: a.config,
                    ingress_http: Some(a.ingress.ingress_http),
                    ingress_https: Some(a.ingress.ingress_https),
                    ingress_class: a.ingress.ingress_class,
                };
                let problems = weir::check::check(&opts, &mut std::io::stdout())?;
                Ok(if problems == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
            }
            Command::Echo(a) => {
                let listener = tokio::net::TcpListener::bind(a.listen).await?;
                tracing::info!(addr = %listener.local_addr()?, name = %a.name, "echo backend listening");
                weir::echo::serve(listener, a.name.into()).await?;
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
