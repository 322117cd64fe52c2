//! The manifests of the bench workload and the directory weir watches.
//!
//! Layout `ingress`: one file per domain, `d<i>.yaml`, holding the domain's TLS Secret and
//! its Ingress (host `d<i>.bench.test`, one Prefix path to the shared Backend), plus one
//! `backend.yaml` with the Backend that points at the echo server.
//!
//! Layout `gateway`: Gateway API objects. Gateway API caps a Gateway at 64 listeners, so
//! domain `i` belongs to Gateway `g<i/64>` (file `g<j>.yaml`), which has one HTTPS
//! listener `l<i>` per domain (hostname `d<i>.bench.test`, certificate from Secret
//! `d<i>-tls`) and binds its own address 127.1.x.y (`gateway_addr`), all on the same port.
//! Domain `i`'s file holds its Secret and an HTTPRoute attached to listener `l<i>`.
//!
//! Layout `listenerset`: one Gateway `sets` (file `sets.yaml`, address
//! `LISTENER_SET_ADDR`) that allows XListenerSets from its namespace; domain `i`'s file
//! holds its Secret, an XListenerSet `d<i>` adding one HTTPS listener (hostname
//! `d<i>.bench.test`, certificate from the Secret) on the Gateway's port, and an HTTPRoute
//! attached to that listener. Adding or removing a domain is one file, as in `ingress`.
//!
//! Layout `passthrough`: TLS passthrough in front of weir's own TLS termination. One
//! Gateway `pass` (file `pass.yaml`, address `PASSTHROUGH_ADDR`) with a TLS listener in
//! `Passthrough` mode, and a Backend `terminator` pointing at weir's Ingress HTTPS
//! listener; domain `i`'s file holds the `ingress` layout's Secret and Ingress plus a
//! TLSRoute for its host to `terminator`. A client's TLS session thus crosses the
//! passthrough listener untouched and is terminated by the Ingress listener with the
//! domain's certificate. Adding a domain makes its passthrough hostname and the service
//! behind it live in one change.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::certs::Leaf;

/// Namespace of every bench object.
const NAMESPACE: &str = "default";
/// Name of the shared Backend.
const BACKEND: &str = "bench";

/// The host name of domain `i`.
pub(crate) fn domain(i: usize) -> String {
    format!("d{i}.bench.test")
}

/// Gateway API's limit of listeners per Gateway.
pub(crate) const LISTENERS_PER_GATEWAY: usize = 64;

/// Domain `i`'s index back from its host name.
pub(crate) fn domain_index(host: &str) -> Option<usize> {
    host.strip_prefix('d')?
        .strip_suffix(".bench.test")?
        .parse()
        .ok()
}

/// The address of the Gateway that serves domain `i` (layout `gateway`).
pub(crate) fn gateway_addr(i: usize, port: u16) -> SocketAddr {
    let j = i / LISTENERS_PER_GATEWAY;
    SocketAddr::from((
        Ipv4Addr::new(127, 1, (j >> 8) as u8, (j & 0xff) as u8),
        port,
    ))
}

/// The address of the Gateway of layout `listenerset`.
pub(crate) const LISTENER_SET_ADDR: Ipv4Addr = Ipv4Addr::new(127, 2, 0, 1);

/// The address of the Gateway of layout `passthrough`.
pub(crate) const PASSTHROUGH_ADDR: Ipv4Addr = Ipv4Addr::new(127, 3, 0, 1);

/// Layout `passthrough`: the Gateway with its TLS passthrough listener on `port` and the
/// Backend `terminator` (weir's Ingress HTTPS listener at `terminator`).
pub(crate) fn passthrough_gateway_yaml(port: u16, terminator: SocketAddr) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: pass\n  namespace: {NAMESPACE}\nspec:\n  gatewayClassName: weir\n  addresses:\n  - type: IPAddress\n    value: \"{PASSTHROUGH_ADDR}\"\n  listeners:\n  - {{name: pass, port: {port}, protocol: TLS, tls: {{mode: Passthrough}}}}\n---\napiVersion: weir.dev/v1alpha1\nkind: Backend\nmetadata:\n  name: terminator\n  namespace: {NAMESPACE}\nspec:\n  endpoints:\n  - \"{terminator}\"\n"
    )
}

/// Domain `i`'s file in layout `passthrough`: the `ingress` layout's file (Secret and
/// Ingress routing `path`) and a TLSRoute for the domain on Gateway `pass`.
pub(crate) fn passthrough_domain_yaml(i: usize, leaf: &Leaf, path: &str) -> String {
    let mut s = domain_yaml(i, leaf, path, &[]);
    let _ = write!(
        s,
        "---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TLSRoute\nmetadata:\n  name: d{i}\n  namespace: {NAMESPACE}\nspec:\n  parentRefs:\n  - {{name: pass, sectionName: pass}}\n  hostnames: [\"{}\"]\n  rules:\n  - backendRefs:\n    - {{group: weir.dev, kind: Backend, name: terminator}}\n",
        domain(i)
    );
    s
}

/// The Gateway of layout `listenerset`: a plaintext listener of its own on `http_port`
/// and room for XListenerSets from its namespace.
pub(crate) fn listener_set_gateway_yaml(http_port: u16) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: sets\n  namespace: {NAMESPACE}\nspec:\n  gatewayClassName: weir\n  addresses:\n  - type: IPAddress\n    value: \"{LISTENER_SET_ADDR}\"\n  allowedListeners:\n    namespaces: {{from: Same}}\n  listeners:\n  - {{name: http, port: {http_port}, protocol: HTTP}}\n"
    )
}

/// Domain `i`'s file in layout `listenerset`: its Secret, an XListenerSet with its HTTPS
/// listener on `port`, and an HTTPRoute on that listener routing `path` (PathPrefix).
pub(crate) fn listener_set_domain_yaml(i: usize, leaf: &Leaf, path: &str, port: u16) -> String {
    let mut s = secret_yaml(i, leaf);
    let _ = write!(
        s,
        "---\napiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XListenerSet\nmetadata:\n  name: d{i}\n  namespace: {NAMESPACE}\nspec:\n  parentRef: {{name: sets}}\n  listeners:\n  - name: https\n    hostname: \"{host}\"\n    port: {port}\n    protocol: HTTPS\n    tls:\n      certificateRefs:\n      - name: d{i}-tls\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: d{i}\n  namespace: {NAMESPACE}\nspec:\n  parentRefs:\n  - {{group: gateway.networking.x-k8s.io, kind: XListenerSet, name: d{i}, sectionName: https}}\n  rules:\n  - matches:\n    - path: {{type: PathPrefix, value: \"{path}\"}}\n    backendRefs:\n    - {{group: weir.dev, kind: Backend, name: {BACKEND}}}\n",
        host = domain(i)
    );
    s
}

/// Gateway `g<j>` with listeners for the domains of its range below `upto`.
pub(crate) fn gateway_yaml(j: usize, upto: usize, port: u16) -> String {
    let first = j * LISTENERS_PER_GATEWAY;
    let ip = gateway_addr(first, port).ip();
    let mut s = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: g{j}\n  namespace: {NAMESPACE}\nspec:\n  gatewayClassName: weir\n  addresses:\n  - type: IPAddress\n    value: \"{ip}\"\n  listeners:\n"
    );
    for i in first..upto.min(first + LISTENERS_PER_GATEWAY) {
        let _ = write!(
            s,
            "  - name: l{i}\n    hostname: \"{}\"\n    port: {port}\n    protocol: HTTPS\n    tls:\n      certificateRefs:\n      - name: d{i}-tls\n",
            domain(i)
        );
    }
    s
}

/// Domain `i`'s file in layout `gateway`: its Secret and an HTTPRoute on listener `l<i>`
/// routing `path` (PathPrefix) to the shared Backend.
pub(crate) fn route_domain_yaml(i: usize, leaf: &Leaf, path: &str) -> String {
    let mut s = secret_yaml(i, leaf);
    let _ = write!(
        s,
        "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: d{i}\n  namespace: {NAMESPACE}\nspec:\n  parentRefs:\n  - name: g{}\n    sectionName: l{i}\n  hostnames: [\"{}\"]\n  rules:\n  - matches:\n    - path: {{type: PathPrefix, value: \"{path}\"}}\n    backendRefs:\n    - {{group: weir.dev, kind: Backend, name: {BACKEND}}}\n",
        i / LISTENERS_PER_GATEWAY,
        domain(i)
    );
    s
}

/// Domain `i`'s `kubernetes.io/tls` Secret `d<i>-tls`.
pub(crate) fn secret_yaml(i: usize, leaf: &Leaf) -> String {
    let mut s = String::with_capacity(leaf.cert_pem.len() + leaf.key_pem.len() + 800);
    let _ = write!(
        s,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: d{i}-tls\n  namespace: {NAMESPACE}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n"
    );
    indent(&mut s, &leaf.cert_pem);
    s.push_str("  tls.key: |\n");
    indent(&mut s, &leaf.key_pem);
    s
}

/// The shared Backend manifest, pointing at `echo`.
pub(crate) fn backend_yaml(echo: SocketAddr) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Backend\nmetadata:\n  name: {BACKEND}\n  namespace: {NAMESPACE}\nspec:\n  endpoints:\n  - \"{echo}\"\n"
    )
}

/// Domain `i`'s file: its `kubernetes.io/tls` Secret and an Ingress (with `annotations`)
/// routing `path` (Prefix) on its host to the shared Backend, with TLS from that Secret.
pub(crate) fn domain_yaml(
    i: usize,
    leaf: &Leaf,
    path: &str,
    annotations: &[(&str, &str)],
) -> String {
    let host = domain(i);
    let mut s = secret_yaml(i, leaf);
    let annotations: String = if annotations.is_empty() {
        String::new()
    } else {
        let mut a = String::from("\n  annotations:");
        for (k, v) in annotations {
            let _ = write!(a, "\n    {k}: \"{v}\"");
        }
        a
    };
    let _ = write!(
        s,
        "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: d{i}\n  namespace: {NAMESPACE}{annotations}\nspec:\n  tls:\n  - hosts: [\"{host}\"]\n    secretName: d{i}-tls\n  rules:\n  - host: \"{host}\"\n    http:\n      paths:\n      - path: \"{path}\"\n        pathType: Prefix\n        backend:\n          resource: {{apiGroup: weir.dev, kind: Backend, name: {BACKEND}}}\n"
    );
    s
}

fn indent(out: &mut String, pem: &str) {
    for line in pem.lines() {
        out.push_str("    ");
        out.push_str(line);
        out.push('\n');
    }
}

/// The directory of manifests weir serves.
pub(crate) struct ConfigDir {
    dir: PathBuf,
}

impl ConfigDir {
    /// A manifest directory at `dir` (which must exist).
    pub(crate) fn new(dir: &Path) -> ConfigDir {
        ConfigDir {
            dir: dir.to_path_buf(),
        }
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    fn file(&self, i: usize) -> PathBuf {
        self.dir.join(format!("d{i}.yaml"))
    }

    fn staged(&self, i: usize) -> PathBuf {
        // Not ending in .yaml, so the watcher's loader ignores it until the rename.
        self.dir.join(format!(".d{i}.yaml.tmp"))
    }

    /// Writes a file directly (before weir starts).
    pub(crate) fn write_plain(&self, name: &str, body: &str) -> Result<()> {
        let path = self.dir.join(name);
        std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))
    }

    /// Writes domain `i`'s next content under its temporary name.
    pub(crate) fn stage(&self, i: usize, body: &str) -> Result<()> {
        let path = self.staged(i);
        std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))
    }

    /// Renames the staged content of domain `i` into place (the timed step).
    pub(crate) fn commit(&self, i: usize) -> Result<()> {
        std::fs::rename(self.staged(i), self.file(i))
            .with_context(|| format!("renaming into {}", self.file(i).display()))
    }

    /// Looks up domain `i`'s file (a `stat`), before a timed step replaces or deletes it.
    /// The directory block that holds its name and the block of its inode are then in
    /// memory, as the staging write brings in those a new name needs. At 1,000,000 files
    /// the machine's reclaim has evicted them by the time of the changes (weir reads no
    /// file after startup): an `unlink` took 0.49 ms, 0.20 ms after this lookup (the
    /// bitmaps it frees into are still read from the disk), against 6 µs in a warm
    /// directory (BENCHMARKS.md, "Session 35"). None of it is weir's.
    pub(crate) fn look_up(&self, i: usize) {
        let _ = std::fs::metadata(self.file(i));
    }

    /// Deletes domain `i`'s file (the timed step of a removal).
    pub(crate) fn remove(&self, i: usize) -> Result<()> {
        std::fs::remove_file(self.file(i))
            .with_context(|| format!("removing {}", self.file(i).display()))
    }

    /// Writes Gateway `j`'s file atomically (temporary name, then rename).
    pub(crate) fn write_gateway(&self, j: usize, body: &str) -> Result<()> {
        let tmp = self.dir.join(format!(".g{j}.yaml.tmp"));
        let path = self.dir.join(format!("g{j}.yaml"));
        std::fs::write(&tmp, body).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("renaming into {}", path.display()))
    }

    /// Writes domain `i`'s file directly (initial population, before weir starts).
    pub(crate) fn write_domain(&self, i: usize, body: &str) -> Result<()> {
        std::fs::write(self.file(i), body)
            .with_context(|| format!("writing {}", self.file(i).display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_file_holds_secret_and_ingress() {
        let leaf = Leaf {
            cert_pem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into(),
            key_pem: "-----BEGIN PRIVATE KEY-----\nBBBB\n-----END PRIVATE KEY-----\n".into(),
        };
        let y = domain_yaml(7, &leaf, "/v2-3", &[]);
        assert!(y.contains("name: d7-tls"));
        assert!(y.contains("    AAAA\n"));
        assert!(y.contains("    -----END PRIVATE KEY-----\n---\n"));
        assert!(y.contains("host: \"d7.bench.test\""));
        assert!(y.contains("path: \"/v2-3\""));
        assert!(y.contains("secretName: d7-tls"));
        let a = domain_yaml(7, &leaf, "/", &[("example.com/a", "1 2")]);
        assert!(
            a.contains("  namespace: default\n  annotations:\n    example.com/a: \"1 2\"\nspec:"),
            "{a}"
        );
    }

    #[test]
    fn gateway_layout_files() {
        let g = gateway_yaml(1, 66, 8443);
        assert!(g.contains("name: g1\n"));
        assert!(g.contains("value: \"127.1.0.1\""));
        assert!(g.contains("- name: l64\n") && g.contains("- name: l65\n"));
        assert!(!g.contains("l66") && !g.contains("l63"));
        assert_eq!(gateway_addr(64 * 300, 1).to_string(), "127.1.1.44:1");
        assert_eq!(domain_index("d123.bench.test"), Some(123));
        let leaf = Leaf {
            cert_pem: "C\n".into(),
            key_pem: "K\n".into(),
        };
        let r = route_domain_yaml(65, &leaf, "/");
        assert!(r.contains("- name: g1\n    sectionName: l65\n"));
        assert!(r.contains("name: d65-tls"));
    }

    #[test]
    fn staged_files_are_renamed_into_place() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = ConfigDir::new(dir.path());
        cfg.stage(3, "x").unwrap();
        assert!(dir.path().join(".d3.yaml.tmp").exists());
        assert!(!dir.path().join("d3.yaml").exists());
        cfg.commit(3).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("d3.yaml")).unwrap(),
            "x"
        );
        cfg.remove(3).unwrap();
        assert!(!dir.path().join("d3.yaml").exists());
    }
}
