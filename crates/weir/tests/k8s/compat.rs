//! Data planes older than their controller keep working, against a real `weir controller`
//! process of this release: earlier releases' `weir proxy` binaries themselves (built from
//! their commits by `scripts/previous-release`: the last landed release, and the last one
//! of each earlier protocol version still served: 2 to 5), each configured, serving a
//! route, following a change made in the API, reported at its protocol version and getting
//! a JWT policy as what it can enforce; and an in-process client of the frozen version-0
//! messages (`weir_xds::v0`: no protocol version in its Subscribe), which this release
//! (push protocol version 6, serving four versions back) refuses.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use weir_xds::v0;

use crate::build::{self, until_http};
use crate::cluster;
use crate::{Ctx, support};

const NAME: &str = "weir.dev/compat-check";
const CLASS: &str = "weir-compat";

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A data plane of the frozen version-0 messages subscribes; returns how the controller
/// answered (this release no longer serves version 0, so: the refusal).
async fn v0_subscribe(xds: SocketAddr, gateway: String) -> Result<(), tonic::Status> {
    let (ns, name) = gateway.split_once('/').unwrap();
    let mut client =
        v0::config_discovery_client::ConfigDiscoveryClient::connect(format!("http://{xds}"))
            .await
            .expect("the controller's push server");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(v0::DataPlaneMessage {
        message: Some(v0::data_plane_message::Message::Subscribe(v0::Subscribe {
            gateway_namespace: ns.into(),
            gateway_name: name.into(),
            node: "v0".into(),
            held: vec![],
        })),
    })
    .await
    .unwrap();
    let outbound =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let mut updates = client.stream(outbound).await?.into_inner();
    updates.message().await?;
    Ok(())
}

/// The cluster side shared by both tests: a namespace with two Services, a Gateway of the
/// compat class on a loopback address of its own, route `r` to `svc-a`, and a `weir
/// controller` process serving the push protocol.
struct Setup {
    ns: &'static str,
    addr: SocketAddr,
    xds: SocketAddr,
    admin: SocketAddr,
    _controller: Proc,
}

fn route(ns: &str, svc: &str) -> serde_json::Value {
    build::route(
        ns,
        "r",
        json!([{"name": "gw"}]),
        &["compat.test"],
        json!([build::rule("/", svc, None)]),
    )
}

async fn setup(ctx: &Ctx, ns: &'static str) -> Setup {
    let c = &ctx.client;
    let ip = ctx.gateway_ip();
    let addr = SocketAddr::from((ip, support::free_port()));
    cluster::apply(
        c,
        &[
            build::namespace(ns, json!({})),
            build::gateway_class(CLASS, NAME),
        ],
    )
    .await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    cluster::apply(c, &build::service(ns, "svc-b", &ctx.b)).await;
    let mut gw = build::gateway(
        ns,
        "gw",
        ip,
        json!([{"name": "http", "port": addr.port(), "protocol": "HTTP"}]),
    );
    gw["spec"]["gatewayClassName"] = CLASS.into();
    cluster::apply(c, &[gw, route(ns, "svc-a")]).await;

    let xds = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let admin = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let controller = Proc(
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["controller", "--kubeconfig"])
            .arg(&ctx.kubeconfig)
            .args([
                "--controller-name",
                NAME,
                "--ingress-class",
                "none-here",
                "--no-embedded-proxy",
                "--no-access-log",
                "--xds-auth",
                "none",
            ])
            .arg(format!("--xds-listen={xds}"))
            .arg(format!("--admin={admin}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting weir controller"),
    );
    let ok = support::eventually(Duration::from_secs(60), || async {
        support::http1(admin, "localhost", "/ready")
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(ok, "the controller never became ready");
    Setup {
        ns,
        addr,
        xds,
        admin,
        _controller: controller,
    }
}

/// The controller's metrics show data plane `node` at protocol version `version` and
/// nothing refused by any data plane.
async fn assert_seen_at(admin: SocketAddr, node: &str, version: u32) {
    let page = support::http1(admin, "localhost", "/metrics")
        .await
        .unwrap()
        .body;
    let seen = page.lines().find_map(|l| {
        l.strip_prefix("weir_xds_data_plane_protocol_version{")
            .filter(|l| l.contains(&format!("node=\"{node}\"")))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_owned)
    });
    assert_eq!(
        seen.as_deref(),
        Some(version.to_string().as_str()),
        "the protocol version the controller sees for {node}"
    );
    assert_eq!(
        page.lines()
            .find_map(|l| l.strip_prefix("weir_xds_resources_refused_total "))
            .map(str::trim),
        Some("0"),
        "nothing refused"
    );
}

/// A data plane of protocol version 0 is no longer served (push protocol version 6
/// serves four versions back): the controller refuses it with `FAILED_PRECONDITION`
/// naming both versions, rather than sending it messages it would misread, and the
/// release binaries of every served version keep working
/// ([`previous_release_binary_is_served`]).
pub async fn version_0_data_plane_is_refused(ctx: Arc<Ctx>) {
    let s = setup(&ctx, "t-compat").await;
    let refused = v0_subscribe(s.xds, format!("{}/gw", s.ns))
        .await
        .expect_err("a version-0 data plane is refused");
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    let why = refused.message();
    assert!(
        why.contains("version 0")
            && why.contains(&format!("this controller {}", weir_xds::PROTOCOL_VERSION)),
        "{why}"
    );
}

/// A TrafficPolicy with a TCP health check and a circuit breaker on Service `svc-b`.
fn service_policy(ns: &str) -> serde_json::Value {
    json!({"apiVersion": "weir.dev/v1alpha1", "kind": "TrafficPolicy",
           "metadata": {"name": "svc", "namespace": ns},
           "spec": {
               "targetRefs": [{"group": "", "kind": "Service", "name": "svc-b"}],
               "healthCheck": {"type": "TCP", "interval": "1s"},
               "circuitBreaker": {"maxRequests": 1000}}})
}

/// A TrafficPolicy checking JWTs on route `r` (an inline Ed25519 key).
fn jwt_policy(ns: &str) -> serde_json::Value {
    json!({"apiVersion": "weir.dev/v1alpha1", "kind": "TrafficPolicy",
    "metadata": {"name": "jwt", "namespace": ns},
    "spec": {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                        "name": "r"}],
        "jwtAuth": {"providers": [{"name": "corp", "jwks": {"inline":
            r#"{"keys": [{"kty": "OKP", "kid": "ed-1", "crv": "Ed25519", "x": "3Rey2EKEXegqW8U5iIrHgFSiOZzPyfzC2jHOPdFmvc0"}]}"#
        }}]}}})
}

/// Earlier releases' `weir proxy` binaries themselves (built from their commits by
/// `scripts/previous-release build`, which `make test` runs: the last landed release and the
/// last one of each earlier protocol version still served) against this release's controller, one after
/// the other on the same Gateway: each is configured, serves the route, follows a change,
/// and gets a JWT policy as what it can enforce — the check itself (401 without a token)
/// when it knows JWTs, deny-all (403) when it does not, never nothing.
pub async fn previous_release_binary_is_served(ctx: Arc<Ctx>) {
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/previous-release"
    ))
    .arg("path")
    .output()
    .expect("running scripts/previous-release");
    assert!(
        out.status.success(),
        "the previous releases' binaries: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let releases: Vec<(u32, String)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (v, path) = l.split_once(' ').expect("VERSION PATH");
            (v.parse().expect("a protocol version"), path.to_owned())
        })
        .collect();
    assert!(!releases.is_empty());

    let s = setup(&ctx, "t-compat-bin").await;
    for (version, binary) in releases {
        let node = format!("release-v{version}");
        cluster::apply(&ctx.client, &[route(s.ns, "svc-a")]).await;
        let proxy_admin = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
        // Its log: an older client drops a resource it cannot decode with a warning and
        // without telling the controller, so the log is where a refusal shows.
        let log_path = std::env::temp_dir().join(format!(
            "weir-k8s-compat-{}-v{version}.log",
            std::process::id()
        ));
        let log = std::fs::File::create(&log_path).unwrap();
        let proxy = Proc(
            Command::new(&binary)
                .args(["proxy", "--no-access-log", "--node", &node])
                .arg(format!("--gateway={}/gw", s.ns))
                .arg(format!("--controller=http://{}", s.xds))
                .arg(format!("--admin={proxy_admin}"))
                .env("RUST_LOG", "info")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("starting an earlier release's weir proxy"),
        );
        until_http(s.addr, "compat.test", "/", Ok("echo-a")).await;
        cluster::apply(&ctx.client, &[route(s.ns, "svc-b")]).await;
        until_http(s.addr, "compat.test", "/", Ok("echo-b")).await;
        assert_seen_at(s.admin, &node, version).await;

        // A policy on the Service (version 2) is not sent to older data planes, which
        // could not decode its target: nothing refused, traffic as before.
        cluster::apply(&ctx.client, &[service_policy(s.ns)]).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        until_http(s.addr, "compat.test", "/", Ok("echo-b")).await;
        assert_seen_at(s.admin, &node, version).await;
        cluster::delete(
            &ctx.client,
            "weir.dev/v1alpha1",
            "TrafficPolicy",
            s.ns,
            "svc",
        )
        .await;

        // A check the data plane cannot make closes the route rather than opening it.
        cluster::apply(&ctx.client, &[jwt_policy(s.ns)]).await;
        // Every served release knows JWTs (version 1 and later).
        until_http(s.addr, "compat.test", "/", Err(401)).await;
        cluster::delete(
            &ctx.client,
            "weir.dev/v1alpha1",
            "TrafficPolicy",
            s.ns,
            "jwt",
        )
        .await;
        until_http(s.addr, "compat.test", "/", Ok("echo-b")).await;
        assert_seen_at(s.admin, &node, version).await;
        drop(proxy);
        let log = std::fs::read_to_string(&log_path).unwrap();
        let refusals: Vec<&str> = log.lines().filter(|l| l.contains("refus")).collect();
        assert!(
            refusals.is_empty(),
            "the version-{version} data plane refused: {refusals:#?}"
        );
        assert!(log.contains("subscribed"), "its log is read: {log}");
        let _ = std::fs::remove_file(&log_path);
    }
}
