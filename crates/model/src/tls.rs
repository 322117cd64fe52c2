use std::sync::Arc;

use serde::Serialize;

use crate::hash::{ContentHash, content_hash, eq_by_content_hash};
use crate::host::HostMatch;
use crate::listener::ListenerKey;

/// A certificate chain and its private key, addressed by the hash of their PEM text.
///
/// Domains that use the same certificate share one `Certificate` (and the data plane
/// parses it once). The translator has checked that both PEM blocks are present and
/// well-formed before building one. Held either as the PEM text or packed (the chain as
/// DER, see [`PackedTls`]); the hash is the PEM text's either way.
#[derive(Clone, Debug, Serialize)]
pub struct Certificate {
    #[serde(skip)]
    body: CertBody,
    hash: ContentHash,
}
eq_by_content_hash!(Certificate);

#[derive(Clone, Debug)]
enum CertBody {
    Pem { chain: Arc<[u8]>, key: Arc<[u8]> },
    Packed(PackedTls),
}

impl Certificate {
    /// Wraps PEM bytes and hashes them.
    pub fn new(chain_pem: Arc<[u8]>, key_pem: Arc<[u8]>) -> Self {
        let hash = Self::pem_hash(&chain_pem, &key_pem);
        Certificate {
            body: CertBody::Pem {
                chain: chain_pem,
                key: key_pem,
            },
            hash,
        }
    }

    /// A packed pair (sharing its buffer); the same hash as [`Certificate::new`] of its
    /// text.
    pub fn packed(tls: PackedTls) -> Self {
        Certificate {
            hash: tls.hash(),
            body: CertBody::Packed(tls),
        }
    }

    fn pem_hash(chain_pem: &[u8], key_pem: &[u8]) -> ContentHash {
        content_hash(&(chain_pem, key_pem))
    }

    /// The content hash: the certificate's identity.
    pub fn hash(&self) -> ContentHash {
        self.hash
    }

    /// The packed form, if the certificate is held packed (its chain is DER already).
    pub fn as_packed(&self) -> Option<&PackedTls> {
        match &self.body {
            CertBody::Packed(p) => Some(p),
            CertBody::Pem { .. } => None,
        }
    }

    /// The chain's PEM text, leaf first (written again for a packed certificate).
    pub fn chain_pem(&self) -> std::borrow::Cow<'_, [u8]> {
        match &self.body {
            CertBody::Pem { chain, .. } => std::borrow::Cow::Borrowed(chain),
            CertBody::Packed(p) => std::borrow::Cow::Owned(p.chain_pem()),
        }
    }

    /// The private key's PEM text (PKCS#8, SEC1 or PKCS#1).
    pub fn key_pem(&self) -> &[u8] {
        match &self.body {
            CertBody::Pem { key, .. } => key,
            CertBody::Packed(p) => p.key_pem(),
        }
    }
}

/// Which certificate a listener presents for a host pattern (the SNI table entry).
/// [`HostMatch::Any`] is the listener's default certificate.
#[derive(Clone, Debug, Serialize)]
pub struct SniCert {
    /// The TLS listener.
    pub listener: ListenerKey,
    /// SNI pattern.
    pub host: HostMatch,
    /// Hash of a [`Certificate`] delivered in the same or an earlier batch.
    pub cert: ContentHash,
    hash: ContentHash,
}
eq_by_content_hash!(SniCert);

impl SniCert {
    /// Builds an SNI entry and computes its content hash.
    pub fn new(listener: ListenerKey, host: HostMatch, cert: ContentHash) -> Self {
        let hash = content_hash(&(&listener, &host, &cert));
        SniCert {
            listener,
            host,
            cert,
            hash,
        }
    }

    /// The content hash computed at construction.
    pub fn hash(&self) -> ContentHash {
        self.hash
    }
}

/// A TLS Secret's `tls.crt` and `tls.key` in one shared buffer: the chain's certificates
/// as DER, then the key's PEM text unchanged (a private key is only ever decoded by the
/// data plane's constant-time PEM reader). Packed only from a chain whose PEM text is
/// exactly what [`PackedTls::chain_pem`] writes back (64-character lines, `\n` endings),
/// so a packed pair and its text are one-to-one.
///
/// Why: as two PEM strings, a domain's certificate and key took two heap blocks of 640
/// and 320 bytes for 755 bytes of text; packed, one block of 640 (at 1,000,000 TLS
/// domains, ~300 MiB).
///
/// Layout: the content hash of the PEM pair (8 bytes, little-endian; what
/// [`Certificate::new`] computes from the same text), the number of certificates (1
/// byte), their lengths (4 bytes each, little-endian), the certificates, the key.
#[derive(Clone, PartialEq, Eq)]
pub struct PackedTls(Arc<[u8]>);

const PEM_BEGIN: &[u8] = b"-----BEGIN CERTIFICATE-----\n";
const PEM_END: &[u8] = b"-----END CERTIFICATE-----\n";
const PEM_LINE: usize = 64;

impl PackedTls {
    /// Packs a PEM chain and key; `None` when the chain is not canonical PEM
    /// `CERTIFICATE` blocks (anything else around them, other line lengths, `\r`, bad
    /// base64) or holds more than 255 certificates: such a pair stays text.
    pub fn from_pem(chain: &[u8], key: &[u8]) -> Option<PackedTls> {
        use base64::Engine as _;
        let mut ders: Vec<u8> = Vec::with_capacity(chain.len() * 3 / 4);
        let mut lens: Vec<u32> = Vec::new();
        let mut b64: Vec<u8> = Vec::with_capacity(chain.len());
        let mut rest = chain;
        while !rest.is_empty() {
            rest = rest.strip_prefix(PEM_BEGIN)?;
            let end = rest.windows(PEM_END.len()).position(|w| w == PEM_END)?;
            b64.clear();
            b64.extend(rest[..end].iter().filter(|&&b| b != b'\n'));
            rest = &rest[end + PEM_END.len()..];
            let start = ders.len();
            base64::engine::general_purpose::STANDARD
                .decode_vec(&b64, &mut ders)
                .ok()?;
            lens.push(u32::try_from(ders.len() - start).ok()?);
        }
        if lens.is_empty() || lens.len() > usize::from(u8::MAX) {
            return None;
        }
        let hash = Certificate::pem_hash(chain, key);
        let mut buf = Vec::with_capacity(9 + 4 * lens.len() + ders.len() + key.len());
        buf.extend_from_slice(&hash.0.to_le_bytes());
        buf.push(lens.len() as u8);
        for l in &lens {
            buf.extend_from_slice(&l.to_le_bytes());
        }
        buf.extend_from_slice(&ders);
        buf.extend_from_slice(key);
        let packed = PackedTls(Arc::from(buf));
        // One-to-one with the text, or not packed at all.
        (packed.chain_pem() == chain).then_some(packed)
    }

    fn count(&self) -> usize {
        usize::from(self.0[8])
    }

    /// Where the certificates start.
    fn ders_at(&self) -> usize {
        9 + 4 * self.count()
    }

    fn len_at(&self, i: usize) -> usize {
        let at = 9 + 4 * i;
        u32::from_le_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]]) as usize
    }

    /// The content hash of the PEM pair (see [`Certificate::hash`]).
    pub fn hash(&self) -> ContentHash {
        let mut h = [0u8; 8];
        h.copy_from_slice(&self.0[..8]);
        ContentHash(u64::from_le_bytes(h))
    }

    /// The chain's certificates (DER), leaf first.
    pub fn chain_der(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut at = self.ders_at();
        (0..self.count()).map(move |i| {
            let len = self.len_at(i);
            let der = &self.0[at..at + len];
            at += len;
            der
        })
    }

    /// The key's PEM text.
    pub fn key_pem(&self) -> &[u8] {
        let end = self.ders_at() + (0..self.count()).map(|i| self.len_at(i)).sum::<usize>();
        &self.0[end..]
    }

    /// The chain's PEM text (written again; exactly the text it was packed from).
    pub fn chain_pem(&self) -> Vec<u8> {
        use base64::Engine as _;
        let mut out = Vec::new();
        for der in self.chain_der() {
            out.extend_from_slice(PEM_BEGIN);
            let text = base64::engine::general_purpose::STANDARD.encode(der);
            for line in text.as_bytes().chunks(PEM_LINE) {
                out.extend_from_slice(line);
                out.push(b'\n');
            }
            out.extend_from_slice(PEM_END);
        }
        out
    }

    /// The bytes of the buffer (for memory accounting).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never: a packed pair holds at least its header and one certificate.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl std::fmt::Debug for PackedTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedTls")
            .field("certificates", &self.count())
            .field("bytes", &self.0.len())
            .field("hash", &self.hash())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    /// PEM text of `der` as OpenSSL writes it.
    fn pem(der: &[u8]) -> String {
        let text = base64::engine::general_purpose::STANDARD.encode(der);
        let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
        for line in text.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(line).unwrap());
            out.push('\n');
        }
        out + "-----END CERTIFICATE-----\n"
    }

    const KEY: &[u8] =
        b"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n";

    #[test]
    fn a_packed_chain_reads_back_as_its_text_and_hashes_as_it() {
        let leaf: Vec<u8> = (0..=255u8).cycle().take(339).collect();
        let ca: Vec<u8> = (0..48u8).collect();
        let chain = pem(&leaf) + &pem(&ca);
        let p = PackedTls::from_pem(chain.as_bytes(), KEY).expect("canonical");
        assert_eq!(p.chain_der().collect::<Vec<_>>(), [&leaf[..], &ca[..]]);
        assert_eq!(p.key_pem(), KEY);
        assert_eq!(p.chain_pem(), chain.as_bytes());
        let text = Certificate::new(Arc::from(chain.as_bytes()), Arc::from(KEY));
        let packed = Certificate::packed(p.clone());
        assert_eq!(packed.hash(), text.hash());
        assert_eq!(packed, text);
        assert_eq!(&*packed.chain_pem(), chain.as_bytes());
        assert_eq!(packed.key_pem(), KEY);
        assert!(packed.as_packed().is_some() && text.as_packed().is_none());
        // Smaller than the text: one certificate's DER is three quarters of its base64.
        assert!(p.len() < chain.len() + KEY.len() - 150, "{}", p.len());
    }

    #[test]
    fn only_canonical_pem_is_packed() {
        let der: Vec<u8> = (0..200u8).collect();
        let good = pem(&der);
        assert!(PackedTls::from_pem(good.as_bytes(), KEY).is_some());
        let not = [
            good.replace('\n', "\r\n"),   // CRLF
            good.trim_end().to_owned(),   // no final newline
            format!("{good}\n"),          // a blank line after
            format!("# comment\n{good}"), // text before
            good.replacen('\n', "", 2),   // a long line
            good.replace(
                "-----BEGIN CERTIFICATE-----\n",
                "-----BEGIN CERTIFICATE-----\n\n",
            ),
            good.replacen('A', "!", 1),                // not base64
            String::new(),                             // no block
            good.replace("CERTIFICATE", "PUBLIC KEY"), // another label
        ];
        for text in &not {
            assert!(
                PackedTls::from_pem(text.as_bytes(), KEY).is_none(),
                "packed: {text:?}"
            );
        }
        // Non-canonical padding bits decode, but would not read back the same.
        let mut odd = pem(&[0xff]);
        odd = odd.replace("/w==", "/x==");
        assert!(PackedTls::from_pem(odd.as_bytes(), KEY).is_none());
    }
}
