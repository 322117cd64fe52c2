//! The test cluster: `scripts/k8s-env` (etcd + kube-apiserver + Gateway API CRDs) started
//! for this test run, and echo backends in network namespaces (the API server refuses
//! loopback endpoint addresses, so backends get real addresses on veth pairs).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The API server of this run; stopped on drop.
pub struct ApiServer {
    dir: PathBuf,
    script: PathBuf,
}

impl ApiServer {
    pub fn start() -> ApiServer {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/k8s-env");
        let dir = std::env::temp_dir().join(format!("weir-k8s-test-{}", std::process::id()));
        // The experimental channel: a superset of the standard CRDs (ListenerSet included
        // since v1.5), plus, from v1.4.0, XListenerSet (scripts/k8s-env adds its CRD).
        let out = Command::new(&script)
            .env("WEIR_GATEWAY_API_CHANNEL", "experimental")
            .args(["start", "--dir"])
            .arg(&dir)
            .stdout(Stdio::null())
            .status()
            .expect("running scripts/k8s-env");
        assert!(
            out.success(),
            "scripts/k8s-env start failed (run `scripts/k8s-env install` first; it is cached after that)"
        );
        ApiServer { dir, script }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
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

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An echo backend (`weir echo`) inside its own network namespace, reachable from the
/// host at `addr` over a veth pair. Removed on drop.
pub struct NetnsBackend {
    pub addr: Ipv4Addr,
    pub port: u16,
    ns: String,
    child: Child,
}

impl NetnsBackend {
    /// Backend number `n` (1..=250) answers as `name` on 10.231.`n`.2:8080 (the second
    /// octet is `WEIR_K8S_TEST_SUBNET` when set, so that two test runs can share a host).
    pub fn start(n: u8, name: &str) -> NetnsBackend {
        let octet: u8 = std::env::var("WEIR_K8S_TEST_SUBNET")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(231);
        let ns = format!("weirt{}-{n}", std::process::id());
        let (host_if, ns_if) = (
            format!("wth{n}x{}", std::process::id() % 10000),
            format!("wtn{n}x{}", std::process::id() % 10000),
        );
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        ip(&["netns", "add", &ns]);
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ]);
        ip(&["link", "set", &ns_if, "netns", &ns]);
        ip(&[
            "addr",
            "add",
            &format!("10.{octet}.{n}.1/24"),
            "dev",
            &host_if,
        ]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&[
            "netns",
            "exec",
            &ns,
            "ip",
            "addr",
            "add",
            &format!("10.{octet}.{n}.2/24"),
            "dev",
            &ns_if,
        ]);
        ip(&["netns", "exec", &ns, "ip", "link", "set", &ns_if, "up"]);
        ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
        let addr = Ipv4Addr::new(10, octet, n, 2);
        let port = 8080;
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                env!("CARGO_BIN_EXE_weir"),
                "echo",
                "--listen",
            ])
            .arg(format!("{addr}:{port}"))
            .args(["--name", name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting weir echo in a network namespace");
        // Bounded wait until it accepts connections from the host side.
        for _ in 0..200 {
            if std::net::TcpStream::connect_timeout(
                &std::net::SocketAddr::from((addr, port)),
                std::time::Duration::from_millis(100),
            )
            .is_ok()
            {
                return NetnsBackend {
                    addr,
                    port,
                    ns,
                    child,
                };
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("echo backend {name} in {ns} did not start");
    }
}

impl Drop for NetnsBackend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Deleting the namespace removes the veth pair too.
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}
