//! The manifests of the bench workload and the directory weir watches.
//!
//! Layout `ingress`: one file per domain, `d<i>.yaml`, holding the domain's TLS Secret and
//! its Ingress (host `d<i>.bench.test`, one Prefix path to the shared Backend), plus one
//! `backend.yaml` with the Backend that points at the echo server.

use std::fmt::Write as _;
use std::net::SocketAddr;
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

/// The shared Backend manifest, pointing at `echo`.
pub(crate) fn backend_yaml(echo: SocketAddr) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Backend\nmetadata:\n  name: {BACKEND}\n  namespace: {NAMESPACE}\nspec:\n  endpoints:\n  - \"{echo}\"\n"
    )
}

/// Domain `i`'s file: its `kubernetes.io/tls` Secret and an Ingress routing `path`
/// (Prefix) on its host to the shared Backend, with TLS from that Secret.
pub(crate) fn domain_yaml(i: usize, leaf: &Leaf, path: &str) -> String {
    let host = domain(i);
    let mut s = String::with_capacity(leaf.cert_pem.len() + leaf.key_pem.len() + 800);
    let _ = write!(
        s,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: d{i}-tls\n  namespace: {NAMESPACE}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n"
    );
    indent(&mut s, &leaf.cert_pem);
    s.push_str("  tls.key: |\n");
    indent(&mut s, &leaf.key_pem);
    let _ = write!(
        s,
        "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: d{i}\n  namespace: {NAMESPACE}\nspec:\n  tls:\n  - hosts: [\"{host}\"]\n    secretName: d{i}-tls\n  rules:\n  - host: \"{host}\"\n    http:\n      paths:\n      - path: \"{path}\"\n        pathType: Prefix\n        backend:\n          resource: {{apiGroup: weir.dev, kind: Backend, name: {BACKEND}}}\n"
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

    /// Deletes domain `i`'s file (the timed step of a removal).
    pub(crate) fn remove(&self, i: usize) -> Result<()> {
        std::fs::remove_file(self.file(i))
            .with_context(|| format!("removing {}", self.file(i).display()))
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
        let y = domain_yaml(7, &leaf, "/v2-3");
        assert!(y.contains("name: d7-tls"));
        assert!(y.contains("    AAAA\n"));
        assert!(y.contains("    -----END PRIVATE KEY-----\n---\n"));
        assert!(y.contains("host: \"d7.bench.test\""));
        assert!(y.contains("path: \"/v2-3\""));
        assert!(y.contains("secretName: d7-tls"));
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
