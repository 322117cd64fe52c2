//! The cluster side of the Kubernetes bench: the API server from `scripts/k8s-env`, an echo
//! backend in a network namespace (the API server refuses loopback endpoints), and the
//! objects the bench creates.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use serde_json::{Value, json};
use weir_provider_k8s::api_resource;

use crate::certs::Leaf;
use crate::manifests::domain;
use crate::procs::ChildGuard;

pub(crate) const NS: &str = "bench";

/// `scripts/k8s-env start`, stopped on drop.
pub(crate) struct ApiServer {
    script: PathBuf,
    dir: PathBuf,
}

impl ApiServer {
    pub(crate) fn start(workspace: &Path, dir: PathBuf) -> Result<ApiServer> {
        let script = workspace.join("scripts/k8s-env");
        let ok = Command::new(&script)
            .args(["start", "--dir"])
            .arg(&dir)
            .stdout(Stdio::null())
            .status()
            .with_context(|| format!("running {}", script.display()))?
            .success();
        if !ok {
            bail!("scripts/k8s-env start failed (run `scripts/k8s-env install` once first)");
        }
        Ok(ApiServer { script, dir })
    }

    pub(crate) fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// The CPU time so far of kube-apiserver and etcd together (0 for one whose pid file
    /// cannot be read): what the cluster spends serving weir's lists is the rest of the
    /// time to `/ready` beside weir's own.
    pub(crate) fn cpu_seconds(&self) -> f64 {
        ["kube-apiserver.pid", "etcd.pid"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(self.dir.join(f)).ok())
            .filter_map(|pid| pid.trim().parse::<u32>().ok())
            .filter_map(|pid| crate::procs::proc_stats(pid).ok())
            .map(|s| s.cpu_seconds)
            .sum()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = Command::new(&self.script)
            .args(["stop", "--dir"])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `weir echo` inside a network namespace joined to the host by a veth pair; the
/// namespace (and with it the pair) is deleted on drop.
pub(crate) struct Backend {
    pub(crate) addr: SocketAddr,
    netns: String,
    _echo: ChildGuard,
}

impl Backend {
    pub(crate) fn start(weir: &Path, log: &Path) -> Result<Backend> {
        let id = std::process::id() % 100_000;
        let netns = format!("weirbench{id}");
        let (host, peer) = (format!("wbh{id}"), format!("wbp{id}"));
        let ip = Ipv4Addr::new(10, 232, 0, 2);
        let _ = Command::new("ip").args(["netns", "del", &netns]).output();
        let steps: [&[&str]; 8] = [
            &["netns", "add", &netns],
            &["link", "add", &host, "type", "veth", "peer", "name", &peer],
            &["link", "set", &peer, "netns", &netns],
            &["addr", "add", "10.232.0.1/24", "dev", &host],
            &["link", "set", &host, "up"],
            &["-n", &netns, "addr", "add", "10.232.0.2/24", "dev", &peer],
            &["-n", &netns, "link", "set", &peer, "up"],
            &["-n", &netns, "link", "set", "lo", "up"],
        ];
        for args in steps {
            let out = Command::new("ip")
                .args(args)
                .output()
                .context("running ip (iproute2)")?;
            if !out.status.success() {
                let _ = Command::new("ip").args(["netns", "del", &netns]).output();
                bail!(
                    "ip {}: {} (network namespaces need root)",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        let addr = SocketAddr::from((ip, 8080));
        let args: Vec<String> = ["netns", "exec", &netns]
            .iter()
            .map(|s| s.to_string())
            .chain([
                weir.display().to_string(),
                "echo".into(),
                "--listen".into(),
                addr.to_string(),
            ])
            .collect();
        let echo = ChildGuard::spawn("echo", Path::new("ip"), &args, log)?;
        for _ in 0..400 {
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return Ok(Backend {
                    addr,
                    netns,
                    _echo: echo,
                });
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        bail!("the echo backend in {netns} did not start")
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
    }
}

/// The objects of one bench run.
pub(crate) struct Objects {
    client: kube::Client,
    routes: Api<DynamicObject>,
    gateways: Api<DynamicObject>,
    ingresses: Api<DynamicObject>,
    secrets: Api<DynamicObject>,
}

/// Domain `i`'s TLS Secret (layout `ingress`).
fn secret_name(i: usize) -> String {
    format!("d{i}-tls")
}

/// Domain `i`'s Ingress (layout `ingress`).
fn ingress_name(i: usize) -> String {
    format!("d{i}")
}

/// The rules of domain `i`'s Ingress: `path` (Prefix) to the echo Service.
fn ingress_rules(i: usize, path: &str) -> Value {
    json!([{"host": domain(i), "http": {"paths": [{"path": path, "pathType": "Prefix",
        "backend": {"service": {"name": "echo", "port": {"number": 80}}}}]}}])
}

impl Objects {
    pub(crate) fn new(client: kube::Client) -> Objects {
        let gw = "gateway.networking.k8s.io";
        Objects {
            routes: Api::namespaced_with(
                client.clone(),
                NS,
                &api_resource(gw, "v1", "HTTPRoute", "httproutes"),
            ),
            gateways: Api::namespaced_with(
                client.clone(),
                NS,
                &api_resource(gw, "v1", "Gateway", "gateways"),
            ),
            ingresses: Api::namespaced_with(
                client.clone(),
                NS,
                &api_resource("networking.k8s.io", "v1", "Ingress", "ingresses"),
            ),
            secrets: Api::namespaced_with(
                client.clone(),
                NS,
                &api_resource("", "v1", "Secret", "secrets"),
            ),
            client,
        }
    }

    /// Namespace, GatewayClass, IngressClass, Service + EndpointSlice of the backend, and
    /// a Gateway with one HTTP listener at `listen`.
    pub(crate) async fn base(&self, backend: SocketAddr, listen: SocketAddr) -> Result<()> {
        let gw = "gateway.networking.k8s.io";
        let objects = [
            (
                api_resource("", "v1", "Namespace", "namespaces"),
                false,
                json!({"metadata": {"name": NS}}),
            ),
            (
                api_resource(gw, "v1", "GatewayClass", "gatewayclasses"),
                false,
                json!({"metadata": {"name": "weir"}, "spec": {"controllerName": "weir.dev/gateway-controller"}}),
            ),
            (
                api_resource("networking.k8s.io", "v1", "IngressClass", "ingressclasses"),
                false,
                json!({"metadata": {"name": "weir"}, "spec": {"controller": "weir.dev/ingress-controller"}}),
            ),
            (
                api_resource("", "v1", "Service", "services"),
                true,
                json!({"metadata": {"name": "echo"}, "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80, "targetPort": backend.port()}]}}),
            ),
            (
                api_resource("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
                true,
                json!({"metadata": {"name": "echo-1", "labels": {"kubernetes.io/service-name": "echo"}},
                       "addressType": "IPv4",
                       "endpoints": [{"addresses": [backend.ip().to_string()], "conditions": {"ready": true}}],
                       "ports": [{"name": "http", "port": backend.port(), "protocol": "TCP"}]}),
            ),
            (
                api_resource(gw, "v1", "Gateway", "gateways"),
                true,
                json!({"metadata": {"name": "gw"},
                       "spec": {"gatewayClassName": "weir",
                                "addresses": [{"type": "IPAddress", "value": listen.ip().to_string()}],
                                "listeners": [{"name": "http", "port": listen.port(), "protocol": "HTTP"}]}}),
            ),
        ];
        for (ar, namespaced, mut body) in objects {
            body["apiVersion"] = ar.api_version.clone().into();
            body["kind"] = ar.kind.clone().into();
            let name = body["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let api: Api<DynamicObject> = if namespaced {
                Api::namespaced_with(self.client.clone(), NS, &ar)
            } else {
                Api::all_with(self.client.clone(), &ar)
            };
            api.patch(
                &name,
                &PatchParams::apply("weir-bench").force(),
                &Patch::Apply(&body),
            )
            .await
            .with_context(|| format!("applying {} {name}", ar.kind))?;
        }
        Ok(())
    }

    /// Creates route `name` for `host`, `/` to the echo Service.
    pub(crate) async fn create_route(&self, name: &str, host: &str) -> Result<()> {
        let body: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"parentRefs": [{"name": "gw"}], "hostnames": [host],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                                "backendRefs": [{"name": "echo", "port": 80}]}]}
        }))?;
        self.routes
            .create(&PostParams::default(), &body)
            .await
            .with_context(|| format!("creating HTTPRoute {name}"))?;
        Ok(())
    }

    /// Moves route `name`'s one rule to `path`.
    pub(crate) async fn move_route(&self, name: &str, path: &str) -> Result<()> {
        let patch = json!({"spec": {"rules": [{"matches": [{"path": {"type": "PathPrefix", "value": path}}],
                                               "backendRefs": [{"name": "echo", "port": 80}]}]}});
        self.routes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patching HTTPRoute {name}"))?;
        Ok(())
    }

    /// Creates domain `i`'s TLS Secret from `leaf` (layout `ingress`).
    pub(crate) async fn create_secret(&self, i: usize, leaf: &Leaf) -> Result<()> {
        let body: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret_name(i), "namespace": NS},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem}
        }))?;
        self.secrets
            .create(&PostParams::default(), &body)
            .await
            .with_context(|| format!("creating Secret {}", secret_name(i)))?;
        Ok(())
    }

    /// Creates domain `i`'s Ingress: its host over TLS with its Secret, `/` to the echo
    /// Service (layout `ingress`).
    pub(crate) async fn create_ingress(&self, i: usize) -> Result<()> {
        let body: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": ingress_name(i), "namespace": NS},
            "spec": {"ingressClassName": "weir",
                     "tls": [{"hosts": [domain(i)], "secretName": secret_name(i)}],
                     "rules": ingress_rules(i, "/")}
        }))?;
        self.ingresses
            .create(&PostParams::default(), &body)
            .await
            .with_context(|| format!("creating Ingress {}", ingress_name(i)))?;
        Ok(())
    }

    /// Moves domain `i`'s Ingress path to `path`.
    pub(crate) async fn move_ingress(&self, i: usize, path: &str) -> Result<()> {
        let patch = json!({"spec": {"rules": ingress_rules(i, path)}});
        self.ingresses
            .patch(
                &ingress_name(i),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .with_context(|| format!("patching Ingress {}", ingress_name(i)))?;
        Ok(())
    }

    /// Deletes domain `i`'s Ingress.
    pub(crate) async fn delete_ingress(&self, i: usize) -> Result<()> {
        self.ingresses
            .delete(&ingress_name(i), &DeleteParams::default())
            .await
            .with_context(|| format!("deleting Ingress {}", ingress_name(i)))?;
        Ok(())
    }

    /// Deletes domain `i`'s Secret.
    pub(crate) async fn delete_secret(&self, i: usize) -> Result<()> {
        self.secrets
            .delete(&secret_name(i), &DeleteParams::default())
            .await
            .with_context(|| format!("deleting Secret {}", secret_name(i)))?;
        Ok(())
    }

    pub(crate) async fn delete_route(&self, name: &str) -> Result<()> {
        self.routes
            .delete(name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting HTTPRoute {name}"))?;
        Ok(())
    }

    /// `status.listeners[0].attachedRoutes` of the Gateway (None before it has a status).
    pub(crate) async fn attached_routes(&self) -> Result<Option<i64>> {
        let gw = self.gateways.get("gw").await?;
        Ok(gw
            .data
            .pointer("/status/listeners/0/attachedRoutes")
            .and_then(Value::as_i64))
    }
}
