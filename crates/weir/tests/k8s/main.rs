//! Kubernetes-mode tests against a real kube-apiserver (started by `scripts/k8s-env`),
//! with `weir controller` running in-process and echo backends in network namespaces.
//!
//! A custom runner (no libtest): the API server and the backends are started once, the
//! tests run one after another against them, and everything is torn down at the end,
//! also when a test fails. `cargo test -p weir --test k8s -- NAME` runs the tests whose
//! name contains NAME.

#![allow(unreachable_pub)]

#[path = "../e2e/support.rs"]
#[allow(dead_code)]
mod support;

mod build;
mod cluster;
mod compat;
mod endpoints;
mod env;
mod gateway;
mod ha;
mod helm;
mod infrastructure;
mod ingress;
mod ingress_nginx;
mod ingress_nginx_backends;
mod ingress_nginx_settings;
mod listener_sets;
mod monitoring;
mod policies;
mod policies_v3;
mod rbac;
mod refs;
mod scale;
mod split;
mod validation;

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use weir::controller::{Controller, ControllerOptions};

pub const CONTROLLER: &str = "weir.dev/gateway-controller";
pub const GW_V1: (&str, &str) = ("gateway.networking.k8s.io/v1", "Gateway");
pub const ROUTE_V1: (&str, &str) = ("gateway.networking.k8s.io/v1", "HTTPRoute");
pub const CLASS_V1: (&str, &str) = ("gateway.networking.k8s.io/v1", "GatewayClass");

/// What every test gets.
pub struct Ctx {
    pub client: kube::Client,
    pub controller: Controller,
    /// Echo backends answering as `echo-a` / `echo-b`, outside the host's loopback.
    pub a: env::NetnsBackend,
    pub b: env::NetnsBackend,
    /// Where the controller serves Ingress plaintext traffic.
    pub ingress_http: SocketAddr,
    /// Where the controller serves Ingress TLS traffic (terminated, or passed through).
    pub ingress_https: SocketAddr,
    pub pki: support::Pki,
    /// The admin kubeconfig of the test API server.
    pub kubeconfig: std::path::PathBuf,
    /// Stops and restarts the API server alone.
    pub apiserver: env::ApiControl,
    next_ip: AtomicU8,
}

impl Ctx {
    /// A loopback address of its own for each Gateway, so that tests never share a socket.
    pub fn gateway_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, 1, self.next_ip.fetch_add(1, Ordering::Relaxed))
    }
}

type Test = fn(Arc<Ctx>) -> BoxFuture<'static, ()>;

macro_rules! tests {
    ($($m:ident :: $f:ident),* $(,)?) => {
        &[$((concat!(stringify!($m), "::", stringify!($f)), |c| Box::pin($m::$f(c)))),*]
    };
}

const TESTS: &[(&str, Test)] = tests![
    gateway::class_and_gateway_status_and_traffic,
    gateway::tls_listener_and_invalid_certificate,
    gateway::allowed_routes_differ_per_gateway,
    gateway::other_controllers_entries_are_left_intact,
    gateway::udp_listener_and_route_status,
    refs::cross_namespace_backend_needs_a_grant,
    refs::route_that_loses_its_backend,
    endpoints::scale_to_zero_and_back,
    endpoints::rolling_update_loses_no_request,
    ingress::ingress_traffic_and_status,
    ingress::ingress_nginx_canary_follows_its_main_ingress,
    ingress::ingress_nginx_body_size_and_redirect_first,
    ingress::migrate_reads_the_ingresses_of_a_cluster,
    ingress_nginx::ingress_nginx_limit_connections,
    ingress_nginx::ingress_nginx_ssl_passthrough,
    ingress_nginx::ingress_nginx_request_annotations,
    ingress_nginx::ingress_nginx_access_limits_and_errors,
    ingress_nginx::ingress_nginx_external_auth,
    ingress_nginx_settings::ingress_nginx_answer_settings,
    ingress_nginx_settings::ingress_nginx_limit_rps,
    ingress_nginx_backends::ingress_nginx_next_upstream,
    ingress_nginx_backends::ingress_nginx_websockets,
    ingress_nginx_backends::ingress_nginx_tls_backends,
    rbac::deploy_manifest_rbac_is_sufficient,
    helm::chart_lints_and_applies,
    monitoring::dashboard_and_rules_use_exported_metrics,
    listener_sets::listener_set_status_and_traffic,
    listener_sets::xlistener_set_status_and_traffic,
    policies::traffic_policy_status_and_rate_limit,
    policies_v3::authorization_cors_and_size_limits,
    split::two_proxies_fed_by_a_controller,
    infrastructure::invalid_parameters_ref_until_the_config_map_exists,
    infrastructure::gateway_service_carries_infrastructure_metadata,
    compat::version_0_data_plane_is_refused,
    compat::previous_release_binary_is_served,
    ha::lease_election_among_three_candidates,
    ha::leader_failover_keeps_serving,
    ha::api_server_outage,
    scale::attached_routes_follow_a_thousand_routes,
    validation::corpus_verdicts_match_the_api_server,
];

fn main() -> ExitCode {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let selected: Vec<&(&str, Test)> = TESTS
        .iter()
        .filter(|(n, _)| filter.is_empty() || filter.iter().any(|f| n.contains(f.as_str())))
        .collect();
    if std::env::args().any(|a| a == "--list") {
        for (n, _) in &selected {
            println!("{n}: test");
        }
        return ExitCode::SUCCESS;
    }
    if selected.is_empty() {
        println!("no k8s test matches {filter:?}");
        return ExitCode::SUCCESS;
    }
    if std::env::var_os("RUST_LOG").is_some() {
        weir::logging::init(false);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let apiserver = env::ApiServer::start();
    let failed = rt.block_on(async {
        let ctx = Arc::new(setup(&apiserver).await);
        let mut failed = Vec::new();
        for (name, test) in selected {
            println!("test {name} ...");
            let t = Instant::now();
            let r = tokio::time::timeout(Duration::from_secs(180), tokio::spawn(test(ctx.clone())))
                .await;
            match r {
                Ok(Ok(())) => println!("test {name} ... ok ({} ms)", t.elapsed().as_millis()),
                Ok(Err(e)) => {
                    println!("test {name} ... FAILED: {e}");
                    failed.push(name);
                }
                Err(_) => {
                    println!("test {name} ... FAILED: timed out");
                    failed.push(name);
                }
            }
        }
        let ctx = Arc::into_inner(ctx).expect("tests hold no context after they end");
        ctx.controller.stop().await;
        failed
    });
    let mut failed: Vec<String> = failed.into_iter().map(|n| n.to_string()).collect();
    if let Err(e) = apiserver.stop() {
        println!("scripts/k8s-env stop ... FAILED: {e}");
        failed.push("k8s-env stop".into());
    }
    if failed.is_empty() {
        println!("k8s tests: all passed");
        ExitCode::SUCCESS
    } else {
        println!("k8s tests failed: {failed:?}");
        ExitCode::FAILURE
    }
}

async fn setup(apiserver: &env::ApiServer) -> Ctx {
    let a = env::NetnsBackend::start(1, "echo-a");
    let b = env::NetnsBackend::start(2, "echo-b");
    let kubeconfig = apiserver.kubeconfig();
    let client = weir_provider_k8s::client(Some(&kubeconfig)).await.unwrap();
    cluster::apply(
        &client,
        &[
            build::gateway_class("weir", CONTROLLER),
            serde_json::json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
            "metadata": {"name": "weir"}, "spec": {"controller": "weir.dev/ingress-controller"}}),
        ],
    )
    .await;
    let ingress_http = SocketAddr::from(([127, 0, 2, 1], support::free_port()));
    let ingress_https = SocketAddr::from(([127, 0, 2, 1], support::free_port()));
    let controller = Controller::start(ControllerOptions {
        kubeconfig: Some(kubeconfig.clone()),
        controller_name: CONTROLLER.into(),
        admin: "127.0.0.1:0".parse().unwrap(),
        ingress_http: Some(ingress_http),
        ingress_https: Some(ingress_https),
        ingress_class: "weir".into(),
        more_ingress_classes: Vec::new(),
        advertise: vec!["192.0.2.10".into()],
        gateway_address_pool: None,
        access_log: None,
        traces: None,
        xds_listen: None,
        embedded_proxy: true,
        xds_auth: false,
        provision: None,
        leader_election: None,
        redis: None,
    })
    .await
    .expect("starting the controller");
    Ctx {
        client,
        controller,
        a,
        b,
        ingress_http,
        ingress_https,
        pki: support::Pki::new(),
        kubeconfig,
        apiserver: apiserver.control(),
        next_ip: AtomicU8::new(1),
    }
}
