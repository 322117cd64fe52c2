//! The bench PKI: one local CA and one ECDSA P-256 certificate per domain, cached on disk.
//!
//! Leaves are keyed by domain index only (`leaves/d<i>.pem`), so a run with more domains
//! reuses every certificate a smaller run made. The cache is tied to the CA it holds: when
//! the CA has to be made anew, the leaves signed by the old one are deleted.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result, anyhow, bail};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::manifests::domain;

const KEY_MARKER: &str = "-----BEGIN PRIVATE KEY-----";

/// A domain's certificate and private key, both PEM.
#[derive(Clone, Debug)]
pub(crate) struct Leaf {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
}

/// How many leaves came from the cache and how many were made by this run.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CacheUse {
    pub(crate) cached: usize,
    pub(crate) generated: usize,
}

/// The bench CA and its leaf cache.
pub(crate) struct Pki {
    issuer: Issuer<'static, KeyPair>,
    ca_der: CertificateDer<'static>,
    leaves: PathBuf,
}

/// The CA's parameters; rebuilt identically when the CA is loaded from disk, because an
/// issuer is its distinguished name, key identifier method, key usages and key.
fn ca_params() -> Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "weir bench CA");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

impl Pki {
    /// Opens the cache in `dir`, creating the CA when it is missing or unreadable.
    pub(crate) fn open(dir: &Path) -> Result<Pki> {
        let leaves = dir.join("leaves");
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let (crt_path, key_path) = (dir.join("ca.crt"), dir.join("ca.key"));
        if let Some((ca_der, key)) = load_ca(&crt_path, &key_path) {
            std::fs::create_dir_all(&leaves)?;
            let issuer = Issuer::new(ca_params()?, key);
            return Ok(Pki {
                issuer,
                ca_der,
                leaves,
            });
        }
        // A new CA invalidates every cached leaf.
        if leaves.exists() {
            std::fs::remove_dir_all(&leaves)
                .with_context(|| format!("clearing stale leaves in {}", leaves.display()))?;
        }
        std::fs::create_dir_all(&leaves)?;
        let key = KeyPair::generate()?;
        let cert = ca_params()?.self_signed(&key)?;
        write_atomic(&key_path, &key.serialize_pem())?;
        write_atomic(&crt_path, &cert.pem())?;
        let ca_der = cert.der().clone();
        let issuer = Issuer::new(ca_params()?, key);
        Ok(Pki {
            issuer,
            ca_der,
            leaves,
        })
    }

    /// The CA certificate, the only root the bench clients trust.
    pub(crate) fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca_der
    }

    fn leaf_path(&self, i: usize) -> PathBuf {
        self.leaves.join(format!("d{i}.pem"))
    }

    /// The leaves of domains `indices`, read from the cache or generated (and cached) on
    /// `threads` threads. Returned in the order of `indices`.
    pub(crate) fn leaves(
        &self,
        indices: &[usize],
        threads: usize,
    ) -> Result<(Vec<Leaf>, CacheUse)> {
        let next = AtomicUsize::new(0);
        let out: Mutex<Vec<Option<Leaf>>> = Mutex::new(vec![None; indices.len()]);
        let used = Mutex::new(CacheUse::default());
        let threads = threads.clamp(1, 64);
        std::thread::scope(|s| -> Result<()> {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| -> Result<()> {
                        let mut local = Vec::new();
                        let mut counts = CacheUse::default();
                        loop {
                            let slot = next.fetch_add(1, Ordering::Relaxed);
                            let Some(&i) = indices.get(slot) else { break };
                            let leaf = match self.read_leaf(i) {
                                Some(leaf) => {
                                    counts.cached += 1;
                                    leaf
                                }
                                None => {
                                    counts.generated += 1;
                                    self.make_leaf(i)?
                                }
                            };
                            local.push((slot, leaf));
                        }
                        let mut out = out.lock().map_err(|_| anyhow!("poisoned"))?;
                        for (slot, leaf) in local {
                            out[slot] = Some(leaf);
                        }
                        let mut used = used.lock().map_err(|_| anyhow!("poisoned"))?;
                        used.cached += counts.cached;
                        used.generated += counts.generated;
                        Ok(())
                    })
                })
                .collect();
            for w in workers {
                w.join()
                    .map_err(|_| anyhow!("a certificate worker panicked"))??;
            }
            Ok(())
        })?;
        let out = out.into_inner().map_err(|_| anyhow!("poisoned"))?;
        let leaves = out
            .into_iter()
            .map(|l| l.ok_or_else(|| anyhow!("a certificate was not produced")))
            .collect::<Result<Vec<_>>>()?;
        let used = used.into_inner().map_err(|_| anyhow!("poisoned"))?;
        Ok((leaves, used))
    }

    fn read_leaf(&self, i: usize) -> Option<Leaf> {
        let text = read_once(&self.leaf_path(i))?;
        let at = text.find(KEY_MARKER)?;
        let (cert_pem, key_pem) = text.split_at(at);
        // A cheap sanity check: both parts parse as PEM of the right kind.
        CertificateDer::from_pem_slice(cert_pem.as_bytes()).ok()?;
        KeyPair::from_pem(key_pem).ok()?;
        Some(Leaf {
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
        })
    }

    fn make_leaf(&self, i: usize) -> Result<Leaf> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![domain(i)])?;
        params
            .distinguished_name
            .push(DnType::CommonName, domain(i));
        let cert = params.signed_by(&key, &self.issuer)?;
        let leaf = Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        if !leaf.key_pem.starts_with(KEY_MARKER) {
            bail!("unexpected private key PEM label for d{i}");
        }
        write_atomic(
            &self.leaf_path(i),
            &format!("{}{}", leaf.cert_pem, leaf.key_pem),
        )?;
        Ok(leaf)
    }
}

fn load_ca(crt: &Path, key: &Path) -> Option<(CertificateDer<'static>, KeyPair)> {
    let crt = std::fs::read(crt).ok()?;
    let key = std::fs::read_to_string(key).ok()?;
    let der = CertificateDer::from_pem_slice(&crt).ok()?;
    let key = KeyPair::from_pem(&key).ok()?;
    Some((der, key))
}

/// Reads a cached leaf and lets the kernel drop it from the page cache: a run reads each
/// leaf once, and at 1,000,000 domains the cache is 1,000,000 pages (4 GB, a page per
/// file) that would otherwise stay cached during weir's startup, beside the manifests
/// weir reads and the memory it allocates (the bench's cost, not weir's).
fn read_once(path: &Path) -> Option<String> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    // Advice only: a kernel that ignores it changes nothing but memory use.
    let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
    Some(text)
}

/// Writes `body` to a temporary sibling and renames it into place, so that an interrupted
/// run never leaves a half-written file in the cache.
fn write_atomic(path: &Path, body: &str) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, body).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_are_cached_and_reused_with_their_ca() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::open(dir.path()).unwrap();
        let (first, used) = pki.leaves(&[0, 1, 2], 2).unwrap();
        assert_eq!((used.cached, used.generated), (0, 3));
        assert!(first[1].cert_pem.contains("BEGIN CERTIFICATE"));

        let again = Pki::open(dir.path()).unwrap();
        assert_eq!(again.ca_der(), pki.ca_der());
        let (second, used) = again.leaves(&[2, 3], 2).unwrap();
        assert_eq!((used.cached, used.generated), (1, 1));
        assert_eq!(second[0].cert_pem, first[2].cert_pem);
    }

    #[test]
    fn a_new_ca_drops_old_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::open(dir.path()).unwrap();
        pki.leaves(&[0], 1).unwrap();
        std::fs::remove_file(dir.path().join("ca.key")).unwrap();
        let fresh = Pki::open(dir.path()).unwrap();
        assert_ne!(fresh.ca_der(), pki.ca_der());
        let (_, used) = fresh.leaves(&[0], 1).unwrap();
        assert_eq!(used.generated, 1);
    }
}
