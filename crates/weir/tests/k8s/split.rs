//! Split mode with real processes: a `weir controller --xds-listen --no-embedded-proxy`
//! and one `weir proxy` per Gateway. Each proxy serves only its Gateway; both keep serving
//! while the controller is down; a restarted controller sends only the differences; a
//! restarted proxy is not ready until configured; a resource a proxy refuses is NACKed
//! and counted while the rest applies; a data plane cannot read another Gateway's
//! configuration (ServiceAccount tokens checked by TokenReview).

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::build::{self, until_http};
use crate::cluster::{self, has, wait_status};
use crate::{Ctx, GW_V1, support};

const NAME: &str = "weir.dev/split-check";

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn controller(kubeconfig: &Path, xds: SocketAddr, admin: SocketAddr) -> Proc {
    Proc(
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["controller", "--kubeconfig"])
            .arg(kubeconfig)
            .args([
                "--provision-image",
                "weir:test",
                "--provision-service-type",
                "ClusterIP",
            ])
            .arg(format!("--provision-controller-url=http://{xds}"))
            .args([
                "--controller-name",
                NAME,
                "--ingress-class",
                "none-here",
                "--no-embedded-proxy",
                "--no-access-log",
            ])
            .arg(format!("--xds-listen={xds}"))
            .arg(format!("--admin={admin}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting weir controller"),
    )
}

fn proxy(xds: SocketAddr, gateway: &str, admin: SocketAddr, token: &Path) -> Proc {
    Proc(
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["proxy", "--no-access-log", "--gateway", gateway])
            .arg("--token-file")
            .arg(token)
            .arg(format!("--controller=http://{xds}"))
            .arg(format!("--admin={admin}"))
            .args(["--node", gateway])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting weir proxy"),
    )
}

async fn status_of(admin: SocketAddr, path: &str) -> Option<support::Resp> {
    support::http1(admin, "localhost", path).await.ok()
}

/// The first answer of an admin endpoint whose process may still be starting.
async fn answer_of(admin: SocketAddr, path: &str) -> support::Resp {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(r) = status_of(admin, path).await {
            return r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{admin} never answered {path}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn until_ready(admin: SocketAddr) {
    let ok = support::eventually(Duration::from_secs(30), || async {
        status_of(admin, "/ready")
            .await
            .is_some_and(|r| r.status == 200)
    })
    .await;
    assert!(ok, "{admin} never became ready");
}

/// A counter from a Prometheus text page.
async fn metric(admin: SocketAddr, name: &str) -> u64 {
    let page = status_of(admin, "/metrics").await.expect("metrics").body;
    page.lines()
        .find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(0.0) as u64
}

pub async fn two_proxies_fed_by_a_controller(ctx: Arc<Ctx>) {
    let c = &ctx.client;
    let ns = "t10";
    let (ip1, ip2) = (ctx.gateway_ip(), ctx.gateway_ip());
    let (p1, p2) = (support::free_port(), support::free_port());
    let (a1, a2) = (SocketAddr::from((ip1, p1)), SocketAddr::from((ip2, p2)));
    cluster::apply(
        c,
        &[
            build::namespace(ns, json!({})),
            build::gateway_class("weir-split", NAME),
        ],
    )
    .await;
    cluster::apply(c, &build::service(ns, "svc-a", &ctx.a)).await;
    cluster::apply(c, &build::service(ns, "svc-b", &ctx.b)).await;
    let gw = |name: &str, ip, port: u16| {
        let mut g = build::gateway(
            ns,
            name,
            ip,
            json!([{"name": "http", "port": port, "protocol": "HTTP"}]),
        );
        g["spec"]["gatewayClassName"] = "weir-split".into();
        g
    };
    let mut objects = vec![gw("gw1", ip1, p1), gw("gw2", ip2, p2)];
    for i in 0..10 {
        objects.push(build::route(
            ns,
            &format!("one-{i}"),
            json!([{"name": "gw1"}]),
            &[&format!("h{i}.one.test")],
            json!([build::rule("/", "svc-a", None)]),
        ));
        objects.push(build::route(
            ns,
            &format!("two-{i}"),
            json!([{"name": "gw2"}]),
            &[&format!("h{i}.two.test")],
            json!([build::rule("/", "svc-b", None)]),
        ));
    }
    cluster::apply(c, &objects).await;

    // Data planes authenticate with a token of ServiceAccount weir-<gateway>.
    cluster::apply(
        c,
        &[
            cluster::service_account(ns, "weir-gw1"),
            cluster::service_account(ns, "weir-gw2"),
        ],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (t1, t2) = (dir.path().join("gw1"), dir.path().join("gw2"));
    std::fs::write(&t1, cluster::token(c, ns, "weir-gw1").await).unwrap();
    std::fs::write(&t2, cluster::token(c, ns, "weir-gw2").await).unwrap();
    let xds = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let cadmin = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let mut ctl = Some(controller(&ctx.kubeconfig, xds, cadmin));
    until_ready(cadmin).await;
    let (pa1, pa2) = (
        SocketAddr::from(([127, 0, 0, 1], support::free_port())),
        SocketAddr::from(([127, 0, 0, 1], support::free_port())),
    );
    let _proxy1 = proxy(xds, "t10/gw1", pa1, &t1);
    let mut proxy2 = Some(proxy(xds, "t10/gw2", pa2, &t2));
    until_ready(pa1).await;
    until_ready(pa2).await;
    // gw1's token does not open gw2's configuration.
    let pa3 = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let intruder = proxy(xds, "t10/gw2", pa3, &t1);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let r = answer_of(pa3, "/ready").await;
    assert_ne!(
        r.status, 200,
        "a data plane read another Gateway's configuration"
    );
    let config = status_of(pa3, "/config").await.unwrap().json();
    assert!(
        config["listeners"].as_object().is_none_or(|l| l.is_empty()),
        "{config}"
    );
    drop(intruder);
    wait_status(c, GW_V1, ns, "gw1", "gw1 programmed", |s| {
        has(&s["conditions"], "Programmed", "True", "Programmed")
            && s["listeners"][0]["attachedRoutes"] == 10
    })
    .await;

    // Each proxy serves its own Gateway only.
    until_http(a1, "h3.one.test", "/", Ok("echo-a")).await;
    until_http(a2, "h3.two.test", "/", Ok("echo-b")).await;
    until_http(a1, "h3.two.test", "/", Err(404)).await;
    for (admin, mine, theirs) in [(pa1, a1, a2), (pa2, a2, a1)] {
        let config = status_of(admin, "/config").await.unwrap().json();
        let listeners: Vec<String> = config["listeners"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            listeners,
            vec![mine.to_string()],
            "proxy at {admin} holds {listeners:?}, not {theirs}"
        );
    }
    let full = metric(cadmin, "weir_xds_resources_sent_total").await;
    assert!(full >= 2 * 12, "both complete sets were sent: {full}");
    println!("SPLIT complete sets: {full} resources");

    // The controller goes away: both proxies keep serving.
    drop(ctl.take());
    tokio::time::sleep(Duration::from_millis(300)).await;
    until_http(a1, "h1.one.test", "/", Ok("echo-a")).await;
    until_http(a2, "h1.two.test", "/", Ok("echo-b")).await;
    // A proxy restarted meanwhile is not ready (and serves nothing) until configured.
    drop(proxy2.take());
    let _proxy2 = proxy(xds, "t10/gw2", pa2, &t2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = answer_of(pa2, "/ready").await;
    assert_ne!(r.status, 200, "ready without a configuration");
    assert!(
        support::http1(a2, "h1.two.test", "/").await.is_err(),
        "serving without a configuration"
    );

    // A change while the controller is down, then a new controller: gw1's proxy resumes
    // by version and receives only what differs.
    cluster::apply(
        c,
        &[build::route(
            ns,
            "one-0",
            json!([{"name": "gw1"}]),
            &["h0.one.test"],
            json!([build::rule("/", "svc-b", None)]),
        )],
    )
    .await;
    ctl = Some(controller(&ctx.kubeconfig, xds, cadmin));
    until_ready(cadmin).await;
    until_http(a1, "h0.one.test", "/", Ok("echo-b")).await;
    until_ready(pa2).await;
    until_http(a2, "h1.two.test", "/", Ok("echo-b")).await;
    let ok = support::eventually(Duration::from_secs(10), || async {
        metric(cadmin, "weir_xds_connected_data_planes").await == 2
    })
    .await;
    assert!(ok, "both proxies reconnected");
    let page = status_of(cadmin, "/metrics").await.unwrap().body;
    for gw in ["t10/gw1", "t10/gw2"] {
        let line = format!("weir_xds_data_plane_connected{{gateway=\"{gw}\",node=\"{gw}\"}} 1");
        assert!(page.contains(&line), "per-data-plane series {line}");
    }
    let resent = metric(cadmin, "weir_xds_resources_sent_total").await;
    println!("SPLIT after the controller restart: {resent} resources sent");
    // gw1: its one changed virtual host and the svc-b cluster it now uses (svc-a is still
    // used by the others); gw2: its complete set (12), since that proxy restarted empty.
    assert!(
        resent <= 2 + 12 + 1,
        "after the restart only differences were sent to gw1: {resent} resources in all"
    );

    // A resource the proxy refuses: a listener on a port it cannot bind.
    let blocker_port = support::free_port();
    let _blocker = std::net::TcpListener::bind((ip1, blocker_port)).unwrap();
    let mut g = gw("gw1", ip1, p1);
    g["spec"]["listeners"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "taken", "port": blocker_port, "protocol": "HTTP"}));
    cluster::apply(c, &[g]).await;
    let ok = support::eventually(Duration::from_secs(20), || async {
        metric(cadmin, "weir_xds_resources_refused_total").await >= 1
    })
    .await;
    assert!(ok, "the refused listener is counted on the controller");
    println!(
        "SPLIT refused: {}",
        metric(cadmin, "weir_xds_resources_refused_total").await
    );
    // ... and shows in the Gateway's status.
    let s = wait_status(
        c,
        GW_V1,
        ns,
        "gw1",
        "Programmed=False for the refused listener",
        |s| {
            crate::cluster::condition(&s["conditions"], "Programmed").is_some_and(|p| {
                p["status"] == "False"
                    && p["reason"] == "Invalid"
                    && p["message"].as_str().is_some_and(|m| m.contains("refused"))
            })
        },
    )
    .await;
    println!(
        "SPLIT gw1 Programmed: {}",
        crate::cluster::condition(&s["conditions"], "Programmed").unwrap()["message"]
    );
    // The rest still applies and serves.
    cluster::apply(
        c,
        &[build::route(
            ns,
            "one-1",
            json!([{"name": "gw1"}]),
            &["h1.one.test"],
            json!([build::rule("/", "svc-b", None)]),
        )],
    )
    .await;
    until_http(a1, "h1.one.test", "/", Ok("echo-b")).await;

    // Provisioning: per accepted Gateway a ServiceAccount, Deployment and Service in its
    // namespace, owned by it; removed with the Gateway.
    let gw1 = get(c, "gateway.networking.k8s.io/v1", "Gateway", ns, "gw1")
        .await
        .expect("gw1");
    for (av, kind) in [
        ("v1", "ServiceAccount"),
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
    ] {
        let ok = support::eventually(Duration::from_secs(20), || async {
            get(c, av, kind, ns, "weir-gw1").await.is_some()
        })
        .await;
        assert!(ok, "{kind} weir-gw1 provisioned");
        let o = get(c, av, kind, ns, "weir-gw1").await.unwrap();
        assert_eq!(
            o["metadata"]["ownerReferences"][0]["uid"], gw1["metadata"]["uid"],
            "{kind}"
        );
    }
    // The Gateway's status reports its provisioned Service's address.
    let svc = get(c, "v1", "Service", ns, "weir-gw1").await.unwrap();
    let cluster_ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    wait_status(c, GW_V1, ns, "gw1", "the Service's address", |s| {
        s["addresses"] == json!([{"type": "IPAddress", "value": cluster_ip}])
    })
    .await;
    // Parameters from a ConfigMap named by the Gateway's infrastructure.parametersRef.
    cluster::apply(
        c,
        &[json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "weir-params", "namespace": ns},
                 "data": {"replicas": "3", "image": "weir:from-params", "serviceType": "LoadBalancer"}})],
    )
    .await;
    let mut g = gw("gw1", ip1, p1);
    g["spec"]["listeners"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "taken", "port": blocker_port, "protocol": "HTTP"}));
    g["spec"]["infrastructure"] = json!({
        "parametersRef": {"group": "", "kind": "ConfigMap", "name": "weir-params"},
        "labels": {"team": "payments", "app.kubernetes.io/name": "not-weirs"},
        "annotations": {"example.com/lb": "internal", "example.com/keep": "yes"},
    });
    cluster::apply(c, &[g.clone()]).await;
    let ok = support::eventually(Duration::from_secs(20), || async {
        get(c, "apps/v1", "Deployment", ns, "weir-gw1")
            .await
            .is_some_and(|d| {
                d["spec"]["replicas"] == 3
                    && d["spec"]["template"]["spec"]["containers"][0]["image"] == "weir:from-params"
            })
    })
    .await;
    assert!(ok, "the Deployment follows the parameters ConfigMap");
    let ok = support::eventually(Duration::from_secs(20), || async {
        get(c, "v1", "Service", ns, "weir-gw1")
            .await
            .is_some_and(|s| s["spec"]["type"] == "LoadBalancer")
    })
    .await;
    assert!(ok, "the Service type follows the parameters ConfigMap");
    // The infrastructure labels and annotations are on every provisioned object and the
    // Pods' template; weir's own labels (selectors) win over the user's.
    let infra = |labels: &Value, annotations: &Value, team: &str, lb: Option<&str>| {
        labels["team"] == team
            && labels["app.kubernetes.io/name"] == "weir-proxy"
            && labels["gateway.networking.k8s.io/gateway-name"] == "gw1"
            && annotations["example.com/keep"] == "yes"
            && annotations.get("example.com/lb").and_then(Value::as_str) == lb
    };
    let all_carry = |team: &'static str, lb: Option<&'static str>| async move {
        let mut ok = true;
        for (av, kind) in [
            ("v1", "ServiceAccount"),
            ("apps/v1", "Deployment"),
            ("v1", "Service"),
        ] {
            let Some(o) = get(c, av, kind, ns, "weir-gw1").await else {
                return false;
            };
            ok &= infra(
                &o["metadata"]["labels"],
                &o["metadata"]["annotations"],
                team,
                lb,
            );
            if kind == "Deployment" {
                let t = &o["spec"]["template"]["metadata"];
                ok &= infra(&t["labels"], &t["annotations"], team, lb);
            }
        }
        ok
    };
    let ok = support::eventually(Duration::from_secs(20), || {
        all_carry("payments", Some("internal"))
    })
    .await;
    assert!(
        ok,
        "the infrastructure metadata on every provisioned object"
    );
    // Changed on the Gateway: a label's value changes, an annotation removed goes.
    g["spec"]["infrastructure"]["labels"]["team"] = json!("billing");
    g["spec"]["infrastructure"]["annotations"] = json!({"example.com/keep": "yes"});
    cluster::apply(c, &[g]).await;
    let ok = support::eventually(Duration::from_secs(20), || all_carry("billing", None)).await;
    assert!(
        ok,
        "the provisioned objects follow the Gateway's infrastructure metadata"
    );
    // A load balancer assigns its address later (here the test plays the load-balancer
    // controller; `serviceType: LoadBalancer` comes from the parameters): the Gateway's
    // status follows without any change to the Gateway.
    cluster::patch_status(
        c,
        "v1",
        "Service",
        ns,
        "weir-gw1",
        json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}, {"hostname": "lb.example.test"}]}}),
    )
    .await;
    wait_status(c, GW_V1, ns, "gw1", "the load balancer's addresses", |s| {
        s["addresses"]
            == json!([{"type": "IPAddress", "value": "203.0.113.7"},
                      {"type": "Hostname", "value": "lb.example.test"}])
    })
    .await;
    let dep = get(c, "apps/v1", "Deployment", ns, "weir-gw1")
        .await
        .unwrap();
    let args = dep["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    assert!(
        args.as_array()
            .unwrap()
            .contains(&json!("--gateway=t10/gw1")),
        "{args}"
    );
    let svc = get(c, "v1", "Service", ns, "weir-gw1").await.unwrap();
    let ports: Vec<i64> = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["port"].as_i64().unwrap())
        .collect();
    let mut want = vec![i64::from(p1), i64::from(blocker_port)];
    want.sort();
    assert_eq!(
        ports, want,
        "the Service exposes the Gateway's listener ports"
    );
    // An XListenerSet naming the Gateway adds its listeners' ports to the provisioned
    // Service; deleting the set takes them away again.
    let set_port = support::free_port();
    cluster::apply(
        c,
        &[
            json!({"apiVersion": "gateway.networking.x-k8s.io/v1alpha1", "kind": "XListenerSet",
                 "metadata": {"name": "extra", "namespace": ns},
                 "spec": {"parentRef": {"name": "gw1"},
                          "listeners": [{"name": "extra", "port": set_port, "protocol": "HTTP"}]}}),
        ],
    )
    .await;
    let service_ports = || async {
        let svc = get(c, "v1", "Service", ns, "weir-gw1").await.unwrap();
        let mut v: Vec<i64> = svc["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["port"].as_i64().unwrap())
            .collect();
        v.sort();
        v
    };
    let mut with_set = want.clone();
    with_set.push(i64::from(set_port));
    with_set.sort();
    let ok = support::eventually(Duration::from_secs(20), || async {
        service_ports().await == with_set
    })
    .await;
    assert!(
        ok,
        "the Service exposes the XListenerSet's port: {:?}",
        service_ports().await
    );
    cluster::delete(
        c,
        "gateway.networking.x-k8s.io/v1alpha1",
        "XListenerSet",
        ns,
        "extra",
    )
    .await;
    let ok = support::eventually(Duration::from_secs(20), || async {
        service_ports().await == want
    })
    .await;
    assert!(
        ok,
        "the set's port is gone with the set: {:?}",
        service_ports().await
    );
    cluster::delete(c, "gateway.networking.k8s.io/v1", "Gateway", ns, "gw2").await;
    for (av, kind) in [
        ("v1", "ServiceAccount"),
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
    ] {
        let ok = support::eventually(Duration::from_secs(20), || async {
            get(c, av, kind, ns, "weir-gw2").await.is_none()
        })
        .await;
        assert!(ok, "{kind} weir-gw2 removed with its Gateway");
    }
    drop(ctl);
}

/// The whole object, `None` when absent.
async fn get(
    c: &kube::Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Option<serde_json::Value> {
    let ar = cluster::resource(api_version, kind);
    let api: kube::Api<kube::core::DynamicObject> = kube::Api::namespaced_with(c.clone(), ns, &ar);
    api.get(name)
        .await
        .ok()
        .map(|o| serde_json::to_value(o).unwrap())
}
