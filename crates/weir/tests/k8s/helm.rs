//! The Helm chart `deploy/helm/weir`: `helm lint` passes (embedded and split data planes,
//! ServiceMonitor on), its `helm template` output — Gateway API and weir CRDs included —
//! is accepted by the API server (`kubectl apply --dry-run=server`), then applied for real
//! and read back; the ClusterRole is the one of `deploy/weir.yaml` (whose sufficiency
//! `rbac::deploy_manifest_rbac_is_sufficient` shows). Helm is built from the Go module
//! proxy by `scripts/helm`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::Value;

use crate::Ctx;
use crate::cluster;

const NS: &str = "weir-helm-test";
/// Not `weir`: its cluster-scoped names (ClusterRole `weir-controller`) would be those of
/// `deploy/weir.yaml`, which the rbac test applies.
const RELEASE: &str = "test";
/// The chart's name for the namespaced objects of release [`RELEASE`].
const FULL: &str = "test-weir";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `cmd`, asserting success; returns stdout.
fn run(cmd: &mut Command, stdin: Option<&str>) -> String {
    use std::io::Write;
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut input = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn script(name: &str, args: &[&str]) -> String {
    run(
        Command::new(root().join("scripts").join(name)).args(args),
        None,
    )
}

fn docs(yaml: &str) -> Vec<Value> {
    yaml.split("\n---")
        .filter_map(|d| serde_saphyr::from_str::<Option<Value>>(d).expect("YAML"))
        .filter(|v| v.is_object())
        .collect()
}

pub async fn chart_lints_and_applies(ctx: Arc<Ctx>) {
    let helm = script("helm", &[]).trim().to_string();
    script("helm", &["crds"]);
    let kubectl = script("k8s-env", &["paths"])
        .lines()
        .find_map(|l| l.strip_prefix("KUBECTL=").map(str::to_owned))
        .expect("scripts/k8s-env paths names kubectl");
    let chart = root().join("deploy/helm/weir");
    for extra in [
        &[][..],
        &[
            "--set",
            "split.enabled=true",
            "--set",
            "serviceMonitor.enabled=true",
        ][..],
        &["--set", "gatewayServices.enabled=true"][..],
    ] {
        run(
            Command::new(&helm)
                .arg("lint")
                .arg(&chart)
                .arg("--strict")
                .args(extra),
            None,
        );
    }
    let template = |extra: &[&str]| {
        run(
            Command::new(&helm)
                .args(["template", RELEASE, "--namespace", NS])
                .arg(&chart)
                .args([
                    "--set",
                    "gatewayClass.name=weir-helm-test",
                    "--set",
                    "ingressClass.name=weir-helm-test",
                ])
                .args(extra),
            None,
        )
    };
    let kubeconfig = ctx.kubeconfig.to_str().unwrap().to_string();
    let kubectl = |args: &[&str], stdin: &str| {
        run(
            Command::new(&kubectl)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(args),
            Some(stdin),
        )
    };
    let namespace = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n");
    kubectl(&["apply", "-f", "-"], &namespace);

    // Everything, CRDs included, embedded and split: accepted by the API server.
    let full = template(&["--include-crds"]);
    let kinds: Vec<String> = docs(&full)
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    for k in [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "GatewayClass",
        "IngressClass",
    ] {
        assert!(
            kinds.iter().any(|x| x == k),
            "the chart renders a {k}: {kinds:?}"
        );
    }
    let crds: Vec<Value> = docs(&full)
        .into_iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .collect();
    let names: Vec<&str> = crds
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str())
        .collect();
    for n in [
        "gateways.gateway.networking.k8s.io",
        "httproutes.gateway.networking.k8s.io",
        "trafficpolicies.weir.dev",
        "backends.weir.dev",
    ] {
        assert!(names.contains(&n), "CRD {n} in the chart: {names:?}");
    }
    assert!(
        crds.iter()
            .filter(|c| c["spec"]["group"] == "gateway.networking.k8s.io")
            .all(
                |c| c["metadata"]["annotations"]["gateway.networking.k8s.io/bundle-version"]
                    == "v1.6.3"
            ),
        "the Gateway API CRDs are v1.6.3's"
    );
    kubectl(&["apply", "--dry-run=server", "-f", "-"], &full);
    let split = template(&["--include-crds", "--set", "split.enabled=true"]);
    assert!(split.contains("--provision-image=weir:dev") && split.contains("--no-embedded-proxy"));
    kubectl(&["apply", "--dry-run=server", "-f", "-"], &split);
    // Embedded with a Service per Gateway: the selector is the chart Pods' labels.
    let services = template(&["--set", "gatewayServices.enabled=true"]);
    let selector = format!(
        "--gateway-service-selector=app.kubernetes.io/name=weir,app.kubernetes.io/instance={RELEASE}"
    );
    assert!(
        services.contains(&selector) && services.contains("--gateway-service-type=LoadBalancer"),
        "{services}"
    );
    let deployment = docs(&services)
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap();
    for label in [
        "app.kubernetes.io/name: weir",
        &format!("app.kubernetes.io/instance: {RELEASE}"),
    ] {
        let (k, v) = label.split_once(": ").unwrap();
        assert_eq!(deployment["spec"]["template"]["metadata"]["labels"][k], v);
    }
    kubectl(&["apply", "--dry-run=server", "-f", "-"], &services);

    // For real (without the Gateway API CRDs: the test API server runs the experimental
    // channel of the same version, which the standard CRDs would narrow for other tests).
    let objects = template(&[]);
    kubectl(&["apply", "-f", "-"], &objects);
    let deployment = cluster::get(&ctx.client, "apps/v1", "Deployment", NS, FULL).await;
    assert!(deployment.is_object(), "the Deployment is stored");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--leader-elect"), "{args:?}");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/ready");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    let pdb: Value = serde_json::from_str(&kubectl(
        &["get", "poddisruptionbudget", FULL, "-n", NS, "-o", "json"],
        "",
    ))
    .unwrap();
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    let class = cluster::get(
        &ctx.client,
        "gateway.networking.k8s.io/v1",
        "GatewayClass",
        "",
        "weir-helm-test",
    )
    .await;
    assert_eq!(
        class["spec"]["controllerName"],
        "weir.dev/gateway-controller"
    );

    // The ClusterRole grants what deploy/weir.yaml's does.
    let plain = std::fs::read_to_string(root().join("deploy/weir.yaml")).unwrap();
    let rules_of = |objs: Vec<Value>| {
        objs.into_iter()
            .find(|d| d["kind"] == "ClusterRole")
            .map(|d| d["rules"].clone())
            .unwrap()
    };
    assert_eq!(rules_of(docs(&objects)), rules_of(docs(&plain)));

    kubectl(&["delete", "--wait=false", "-f", "-"], &objects);
}
