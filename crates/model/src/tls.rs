use std::sync::Arc;

use serde::Serialize;

use crate::hash::{ContentHash, content_hash, eq_by_content_hash};
use crate::host::HostMatch;
use crate::listener::ListenerKey;

/// A certificate chain and its private key, addressed by the hash of their PEM text.
///
/// Domains that use the same certificate share one `Certificate` (and the data plane
/// parses it once). The translator has checked that both PEM blocks are present and
/// well-formed before building one. Held either as the PEM text or packed (the chain
/// and the key as DER, see [`PackedTls`]); the hash is the PEM text's either way, so
/// that both forms of one pair are one certificate wherever they were built.
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

    /// The pair packed ([`PackedTls::from_pem`]), with the hash [`Certificate::new`]
    /// gives the same text; `None` when the text is not canonical PEM.
    pub fn pack(chain_pem: &[u8], key_pem: &[u8]) -> Option<Self> {
        let tls = PackedTls::from_pem(chain_pem, key_pem)?;
        Some(Certificate {
            hash: Self::pem_hash(chain_pem, key_pem),
            body: CertBody::Packed(tls),
        })
    }

    /// Packed when the text is canonical PEM, else as text ([`Certificate::new`]).
    pub fn from_pem(chain_pem: &[u8], key_pem: &[u8]) -> Self {
        Self::pack(chain_pem, key_pem)
            .unwrap_or_else(|| Self::new(Arc::from(chain_pem), Arc::from(key_pem)))
    }

    fn pem_hash(chain_pem: &[u8], key_pem: &[u8]) -> ContentHash {
        content_hash(&(chain_pem, key_pem))
    }

    /// The content hash: the certificate's identity.
    pub fn hash(&self) -> ContentHash {
        self.hash
    }

    /// The content hash, borrowed (what tables of certificates are keyed by).
    pub fn hash_ref(&self) -> &ContentHash {
        &self.hash
    }

    /// The packed form, if the certificate is held packed (its chain and key are DER).
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

    /// The private key's PEM text (PKCS#8, SEC1 or PKCS#1; written again, in constant
    /// time, for a packed certificate).
    pub fn key_pem(&self) -> std::borrow::Cow<'_, [u8]> {
        match &self.body {
            CertBody::Pem { key, .. } => std::borrow::Cow::Borrowed(key),
            CertBody::Packed(p) => std::borrow::Cow::Owned(p.key_pem()),
        }
    }
}

/// Which certificate a listener presents for a host pattern (the SNI table entry).
/// [`HostMatch::ANY`] is the listener's default certificate.
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

/// A TLS Secret's `tls.crt` and `tls.key` in one shared buffer, both as DER: the chain's
/// certificates and the private key. Packed only from PEM text that is exactly what
/// [`PackedTls::chain_pem`] and [`PackedTls::key_pem`] write back (64-character lines,
/// `\n` endings, nothing around the blocks), so a packed pair and its text are
/// one-to-one. The key is decoded and written back in constant time (`ct_base64`).
///
/// Why: as two PEM strings, a domain's certificate and key took two heap blocks of 640
/// and 320 bytes for 755 bytes of text. Packed with the key as text, one block of 640;
/// with the key as DER too (an ECDSA P-256 PKCS#8 key is 241 bytes of PEM, 138 of DER),
/// one of 512: at 1,000,000 TLS domains, ~120 MiB less again.
///
/// Layout: the number of certificates (1 byte), the key's kind ([`KeyKind`], 1 byte),
/// the certificates' lengths (2 bytes each, little-endian), the certificates, the key.
#[derive(Clone, PartialEq, Eq)]
pub struct PackedTls(Arc<[u8]>);

/// Which PEM label a packed private key had (what its DER is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// `PRIVATE KEY`: PKCS#8.
    Pkcs8,
    /// `EC PRIVATE KEY`: SEC1.
    Sec1,
    /// `RSA PRIVATE KEY`: PKCS#1.
    Pkcs1,
}

impl KeyKind {
    const ALL: [KeyKind; 3] = [KeyKind::Pkcs8, KeyKind::Sec1, KeyKind::Pkcs1];

    fn label(self) -> &'static [u8] {
        match self {
            KeyKind::Pkcs8 => b"PRIVATE KEY",
            KeyKind::Sec1 => b"EC PRIVATE KEY",
            KeyKind::Pkcs1 => b"RSA PRIVATE KEY",
        }
    }
}

const PEM_LINE: usize = 64;

/// Appends `der` as a PEM block labelled `label` (64-character lines), encoding in
/// constant time when `secret`.
fn write_pem(label: &[u8], der: &[u8], secret: bool, out: &mut Vec<u8>) {
    use base64::Engine as _;
    out.extend_from_slice(b"-----BEGIN ");
    out.extend_from_slice(label);
    out.extend_from_slice(b"-----\n");
    let mut text = Vec::new();
    if secret {
        crate::ct_base64::encode(der, &mut text);
    } else {
        text = base64::engine::general_purpose::STANDARD
            .encode(der)
            .into_bytes();
    }
    for line in text.chunks(PEM_LINE) {
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.extend_from_slice(b"-----END ");
    out.extend_from_slice(label);
    out.extend_from_slice(b"-----\n");
}

/// Reads the first PEM block of `text` if it is labelled `label` and laid out as
/// [`write_pem`] writes it: appends its base64 text (lines joined) to `b64`, returns the
/// rest of `text`.
fn read_pem<'a>(text: &'a [u8], label: &[u8], b64: &mut Vec<u8>) -> Option<&'a [u8]> {
    let rest = text
        .strip_prefix(&b"-----BEGIN "[..])?
        .strip_prefix(label)?
        .strip_prefix(&b"-----\n"[..])?;
    // Line by line up to the END line: every line but the last full, each ending in
    // `\n` (checked on the lengths only; the base64 decoding checks the characters).
    // Searching the END line at every byte was a `memcmp` per byte of every certificate
    // read at startup.
    let mut rest = rest;
    let mut short = false;
    loop {
        if let Some(after) = rest.strip_prefix(&b"-----END "[..]) {
            return after.strip_prefix(label)?.strip_prefix(&b"-----\n"[..]);
        }
        if short {
            return None;
        }
        let len = memchr::memchr(b'\n', &rest[..rest.len().min(PEM_LINE + 1)])?;
        if len == 0 || len > PEM_LINE {
            return None;
        }
        short = len < PEM_LINE;
        b64.extend_from_slice(&rest[..len]);
        rest = &rest[len + 1..];
    }
}

/// The buffers [`PackedTls::from_pem`] decodes into, one set per thread, kept from one
/// call to the next. With buffers of its own each call allocated six blocks besides the
/// packed one, and a page-fault profile of a 100,000-domain first load put 7.9 % of its
/// sampled faults in them (the readers, preempted for longer than the allocator's purge
/// delay, find freed pages given back). Fewer faults measured with these buffers: about
/// 1 % (BENCHMARKS.md, "Session 44").
#[derive(Default)]
struct Scratch {
    b64: Vec<u8>,
    ders: Vec<u8>,
    lens: Vec<u16>,
    key: Vec<u8>,
    buf: Vec<u8>,
}

/// Room the scratch buffers keep after a call (a chain of a few certificates).
const SCRATCH_KEPT: usize = 64 * 1024;

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

impl PackedTls {
    /// Packs a PEM chain and key; `None` when either is not canonical PEM (text around
    /// the blocks, other line lengths, `\r`, bad or non-canonical base64), the key is
    /// not one `PRIVATE KEY`, `EC PRIVATE KEY` or `RSA PRIVATE KEY` block, a certificate
    /// is 64 KiB or more, or there are more than 255 certificates: such a pair stays
    /// text.
    pub fn from_pem(chain: &[u8], key: &[u8]) -> Option<PackedTls> {
        SCRATCH.with_borrow_mut(|s| {
            let packed = Self::pack_in(chain, key, s);
            // The key's text and DER do not outlive the call in the scratch buffers: all
            // of their room is zeroed, not only what they hold now (a failed read or
            // decode leaves bytes past the length).
            for v in [&mut s.b64, &mut s.key, &mut s.buf] {
                let room = v.capacity();
                v.clear();
                v.resize(room, 0);
            }
            // A long chain's room is not kept for the thread's life.
            if s.buf.capacity() > SCRATCH_KEPT {
                *s = Scratch::default();
            }
            packed
        })
    }

    fn pack_in(chain: &[u8], key: &[u8], s: &mut Scratch) -> Option<PackedTls> {
        use base64::Engine as _;
        s.ders.clear();
        s.lens.clear();
        let mut rest = chain;
        while !rest.is_empty() {
            s.b64.clear();
            rest = read_pem(rest, b"CERTIFICATE", &mut s.b64)?;
            let start = s.ders.len();
            base64::engine::general_purpose::STANDARD
                .decode_vec(&s.b64, &mut s.ders)
                .ok()?;
            s.lens.push(u16::try_from(s.ders.len() - start).ok()?);
        }
        if s.lens.is_empty() || s.lens.len() > usize::from(u8::MAX) {
            return None;
        }
        let kind = Self::key_from_pem(key, &mut s.b64, &mut s.key)?;
        s.buf.clear();
        s.buf.push(s.lens.len() as u8);
        s.buf.push(kind as u8);
        for l in &s.lens {
            s.buf.extend_from_slice(&l.to_le_bytes());
        }
        s.buf.extend_from_slice(&s.ders);
        s.buf.extend_from_slice(&s.key);
        let packed = PackedTls(Arc::from(&s.buf[..]));
        // One-to-one with the text: `read_pem` took only the layout `write_pem` writes
        // (full lines but the last, nothing around the blocks) and the decoder only
        // canonical base64 (canonical padding, no stray trailing bits), so the text is the
        // one writing the DER gives; writing it again to compare was 3 % of a large
        // first load's reading. The `pem` fuzz target checks the round trip.
        debug_assert!(packed.chain_pem() == chain);
        Some(packed)
    }

    /// The key's kind, when `key` is one canonical PEM private key block and nothing
    /// else, with its DER in `der` (its base64 text in `b64`), decoded in constant time.
    /// As for the chain, `read_pem` takes only the layout `write_pem` writes and the
    /// decoder only canonical base64, so the key reads back as the same text; writing it
    /// again to compare (in constant time) was 3 % of a large first load's instructions.
    /// The `pem` fuzz target checks the round trip.
    fn key_from_pem(key: &[u8], b64: &mut Vec<u8>, der: &mut Vec<u8>) -> Option<KeyKind> {
        let kind = KeyKind::ALL.into_iter().find(|k| {
            b64.clear();
            read_pem(key, k.label(), b64).is_some_and(<[u8]>::is_empty)
        })?;
        der.clear();
        crate::ct_base64::decode(b64, der).ok()?;
        debug_assert!({
            let mut again = Vec::with_capacity(key.len());
            write_pem(kind.label(), der, true, &mut again);
            crate::ct_base64::equal(&again, key)
        });
        Some(kind)
    }

    fn count(&self) -> usize {
        usize::from(self.0[0])
    }

    /// Where the certificates start.
    fn ders_at(&self) -> usize {
        2 + 2 * self.count()
    }

    fn len_at(&self, i: usize) -> usize {
        let at = 2 + 2 * i;
        usize::from(u16::from_le_bytes([self.0[at], self.0[at + 1]]))
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

    /// The private key: its kind and DER.
    pub fn key_der(&self) -> (KeyKind, &[u8]) {
        let kind = KeyKind::ALL[usize::from(self.0[1])];
        let end = self.ders_at() + (0..self.count()).map(|i| self.len_at(i)).sum::<usize>();
        (kind, &self.0[end..])
    }

    /// The key's PEM text (written again, in constant time; exactly the text it was
    /// packed from).
    pub fn key_pem(&self) -> Vec<u8> {
        let (kind, der) = self.key_der();
        let mut out = Vec::with_capacity(der.len() * 4 / 3 + 64);
        write_pem(kind.label(), der, true, &mut out);
        out
    }

    /// The chain's PEM text (written again; exactly the text it was packed from).
    pub fn chain_pem(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for der in self.chain_der() {
            write_pem(b"CERTIFICATE", der, false, &mut out);
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
            .field("key", &self.key_der().0)
            .field("bytes", &self.0.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    /// PEM text of `der` labelled `label`, as OpenSSL writes it.
    fn pem_of(label: &str, der: &[u8]) -> String {
        let text = base64::engine::general_purpose::STANDARD.encode(der);
        let mut out = format!("-----BEGIN {label}-----\n");
        for line in text.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(line).unwrap());
            out.push('\n');
        }
        out + &format!("-----END {label}-----\n")
    }

    fn pem(der: &[u8]) -> String {
        pem_of("CERTIFICATE", der)
    }

    /// A key's bytes (not a real key: packing reads only the PEM framing and base64).
    fn key_der(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn a_packed_pair_reads_back_as_its_text_and_hashes_as_it() {
        let leaf: Vec<u8> = (0..=255u8).cycle().take(339).collect();
        let ca: Vec<u8> = (0..48u8).collect();
        let chain = pem(&leaf) + &pem(&ca);
        for (kind, label, len) in [
            (KeyKind::Pkcs8, "PRIVATE KEY", 138),
            (KeyKind::Sec1, "EC PRIVATE KEY", 121),
            (KeyKind::Pkcs1, "RSA PRIVATE KEY", 1191),
            (KeyKind::Pkcs8, "PRIVATE KEY", 48),
        ] {
            let der = key_der(len);
            let key = pem_of(label, &der);
            let p = PackedTls::from_pem(chain.as_bytes(), key.as_bytes()).expect("canonical");
            assert_eq!(p.chain_der().collect::<Vec<_>>(), [&leaf[..], &ca[..]]);
            assert_eq!(p.key_der(), (kind, &der[..]));
            assert_eq!(p.key_pem(), key.as_bytes());
            assert_eq!(p.chain_pem(), chain.as_bytes());
            // Two bytes of header, two per certificate, then the DER.
            assert_eq!(p.len(), 2 + 4 + leaf.len() + ca.len() + der.len());
            let text = Certificate::new(Arc::from(chain.as_bytes()), Arc::from(key.as_bytes()));
            let packed = Certificate::pack(chain.as_bytes(), key.as_bytes()).unwrap();
            assert_eq!(packed.hash(), text.hash());
            assert_eq!(packed, text);
            assert_eq!(&*packed.chain_pem(), chain.as_bytes());
            assert_eq!(&*packed.key_pem(), key.as_bytes());
            assert!(packed.as_packed().is_some() && text.as_packed().is_none());
            let from = Certificate::from_pem(chain.as_bytes(), key.as_bytes());
            assert!(from.as_packed().is_some());
            assert_eq!(from.hash(), text.hash());
        }
    }

    #[test]
    fn the_scratch_buffers_keep_no_key_and_no_long_chain() {
        let key_bytes = key_der(138);
        let key = pem_of("PRIVATE KEY", &key_bytes);
        // Every byte of the room, past the length too.
        let zeroed = || {
            SCRATCH.with_borrow(|s| {
                [&s.b64, &s.key, &s.buf]
                    .iter()
                    .all(|v| v.len() == v.capacity() && v.iter().all(|b| *b == 0))
            })
        };
        let p = PackedTls::from_pem(pem(&[1, 2, 3]).as_bytes(), key.as_bytes()).unwrap();
        assert_eq!(p.key_der().1, &key_bytes[..]);
        assert!(zeroed());
        // A key whose base64 is read but does not decode (a bad character on its last
        // line): its text was in the scratch buffers.
        let mut lines: Vec<String> = key.lines().map(str::to_owned).collect();
        lines[3].replace_range(0..1, "!");
        let bad = lines.join("\n") + "\n";
        assert!(PackedTls::from_pem(pem(&[1]).as_bytes(), bad.as_bytes()).is_none());
        assert!(zeroed());
        // A key block with text after it: read, then refused for the text.
        let trailing = format!("{key}# note\n");
        assert!(PackedTls::from_pem(pem(&[1]).as_bytes(), trailing.as_bytes()).is_none());
        assert!(zeroed());
        // A chain of 100 KiB: packed, then its room is let go.
        let long: Vec<u8> = (0..=255u8).cycle().take(60_000).collect();
        let chain = pem(&long) + &pem(&long);
        let p = PackedTls::from_pem(chain.as_bytes(), key.as_bytes()).unwrap();
        assert_eq!(p.chain_der().count(), 2);
        SCRATCH.with_borrow(|s| assert!(s.buf.capacity() <= SCRATCH_KEPT));
        let p = PackedTls::from_pem(pem(&[9]).as_bytes(), key.as_bytes()).unwrap();
        assert_eq!(p.chain_der().collect::<Vec<_>>(), [&[9u8][..]]);
        assert_eq!(p.key_der().1, &key_bytes[..]);
    }

    #[test]
    fn only_canonical_pem_is_packed() {
        let der: Vec<u8> = (0..200u8).collect();
        let key = pem_of("PRIVATE KEY", &key_der(138));
        let good = pem(&der);
        assert!(PackedTls::from_pem(good.as_bytes(), key.as_bytes()).is_some());
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
                PackedTls::from_pem(text.as_bytes(), key.as_bytes()).is_none(),
                "packed: {text:?}"
            );
        }
        // Non-canonical padding bits decode, but would not read back the same.
        let mut odd = pem(&[0xff]);
        odd = odd.replace("/w==", "/x==");
        assert!(PackedTls::from_pem(odd.as_bytes(), key.as_bytes()).is_none());
        // Padding left out or cut short (the packed text is not written again to compare:
        // the decoder must refuse these itself).
        for cut in ["/w", "/w="] {
            let text = pem(&[0xff]).replace("/w==", cut);
            assert!(PackedTls::from_pem(text.as_bytes(), key.as_bytes()).is_none());
        }
        // Every length of a last line, with and without padding: what is packed writes
        // back as the text it came from.
        for len in 1..=200 {
            let der: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let text = pem(&der);
            let p = PackedTls::from_pem(text.as_bytes(), key.as_bytes()).expect("canonical");
            assert_eq!(p.chain_pem(), text.as_bytes());
        }
        // The same rules for the key, and the key must be alone and of a known kind.
        let bad_keys = [
            key.replace('\n', "\r\n"),
            key.trim_end().to_owned(),
            format!("{key}\n"),
            format!(
                "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n{key}"
            ),
            key.clone() + &key,
            key.replacen('\n', "", 2),
            key.replacen("AwoR", "Aw!R", 1),
            key.replace("PRIVATE KEY", "ENCRYPTED PRIVATE KEY"),
            key.replace("PRIVATE KEY", "DSA PRIVATE KEY"),
            pem_of("PRIVATE KEY", &[0xff]).replace("/w==", "/x=="),
            String::new(),
            "nope".into(),
        ];
        assert!(
            key.contains("AwoR"),
            "the key text has what a case above replaces"
        );
        for k in &bad_keys {
            assert!(
                PackedTls::from_pem(good.as_bytes(), k.as_bytes()).is_none(),
                "packed with key {k:?}"
            );
            let c = Certificate::from_pem(good.as_bytes(), k.as_bytes());
            assert!(c.as_packed().is_none());
            assert_eq!(&*c.key_pem(), k.as_bytes());
        }
    }
}
