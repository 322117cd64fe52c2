//! A check of PEM framing and base64 that decodes nothing.
//!
//! The translator only needs to know whether rustls-pki-types' PEM reader would accept a
//! chain or a key (the data plane reads the DER at the first handshake). That reader
//! decodes every section's base64 into a fresh buffer with a constant-time decoder, which
//! was ~30,000 instructions per TLS Secret at startup. [`accepts_chain`] and
//! [`accepts_key`] replay its line framing and its base64 acceptance rules (the same
//! alphabet, whitespace and padding rules) with a table and no output. They answer `true`
//! only when the reader would succeed; on `false` the caller asks the reader itself, so
//! every error message stays the reader's own.

/// How one byte reads in a PEM body (the reader's classes).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Value,
    Pad,
    Space,
    Invalid,
}

const fn class_table() -> [Class; 256] {
    let mut t = [Class::Invalid; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = if c.is_ascii_alphanumeric() || c == b'+' || c == b'/' {
            Class::Value
        } else if c == b'=' {
            Class::Pad
        } else if (c >= b'\t' && c <= b'\r') || c == b' ' {
            Class::Space
        } else {
            Class::Invalid
        };
        b += 1;
    }
    t
}

static CLASS: [Class; 256] = class_table();

/// The section labels the reader knows (it skips any other section undecoded).
const KNOWN: [&[u8]; 8] = [
    b"CERTIFICATE",
    b"PUBLIC KEY",
    b"RSA PRIVATE KEY",
    b"PRIVATE KEY",
    b"EC PRIVATE KEY",
    b"X509 CRL",
    b"CERTIFICATE REQUEST",
    b"ECHCONFIG",
];

/// The reader's limit on the base64 of one section.
const MAX_SECTION: usize = 256 * 1024 * 1024;

/// The base64 acceptance state of the reader's decoder, fed without output: groups of
/// eight symbols, where a pad may only end the last group.
/// The reader collects body lines and decodes them at the end marker of a known section
/// (an unknown section's are dropped undecoded), so a problem only counts there: it is
/// remembered (`bad`) rather than reported at once.
#[derive(Default)]
struct Base64 {
    used: u32,
    pad_mask: u32,
    bad: bool,
    /// Bytes collected (whitespace included), for the reader's size limit.
    len: usize,
}

impl Base64 {
    /// Feeds one body line; `false` when the reader would stop at once (the size limit).
    fn feed(&mut self, line: &[u8]) -> bool {
        self.len += line.len();
        if self.len > MAX_SECTION {
            return false;
        }
        if self.bad {
            return true;
        }
        // The usual line, symbols only with no pad pending: only the count in the group
        // of eight moves (a full group starts a new one at the next symbol).
        if self.pad_mask == 0 && line.iter().all(|&b| CLASS[usize::from(b)] == Class::Value) {
            if !line.is_empty() {
                self.used = ((self.used as usize + line.len() - 1) % 8 + 1) as u32;
            }
            return true;
        }
        for &b in line {
            let pad = match CLASS[usize::from(b)] {
                Class::Value => 0,
                Class::Pad => 1,
                Class::Space => continue,
                Class::Invalid => {
                    self.bad = true;
                    return true;
                }
            };
            if self.used == 8 {
                if self.pad_mask != 0 {
                    self.bad = true;
                    return true;
                }
                self.used = 0;
                self.pad_mask = 0;
            }
            self.pad_mask |= pad << self.used;
            self.used += 1;
        }
        true
    }

    /// Whether what was collected decodes (no bad symbol, the final group's padding).
    fn decodes(&self) -> bool {
        if self.bad {
            return false;
        }
        let (mut used, mut pad_mask) = (self.used, self.pad_mask);
        if used > 4 {
            if pad_mask & 0b1111 != 0 {
                return false;
            }
            pad_mask >>= 4;
            used -= 4;
        }
        matches!(
            (used, pad_mask),
            (0, 0) | (4, 0) | (4, 0b1000) | (3, 0) | (4, 0b1100) | (2, 0)
        )
    }
}

/// The label of an open section.
enum Label<'a> {
    Known(&'static [u8]),
    Unknown(&'a [u8]),
}

impl Label<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Label::Known(l) => l,
            Label::Unknown(l) => l,
        }
    }
}

/// Walks the sections of `pem` as the reader does and calls `on` with the label of each
/// known section whose body decodes; `on` returns `true` to stop. Returns `false` at the
/// first input the reader would report as an error.
fn walk(pem: &[u8], mut on: impl FnMut(&'static [u8]) -> bool) -> bool {
    let mut rest = pem;
    let mut section: Option<Label<'_>> = None;
    let mut body = Base64::default();
    loop {
        let line = match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            Some(i) => {
                let line = &rest[..i];
                rest = &rest[i + 1..];
                line
            }
            None if !rest.is_empty() => std::mem::take(&mut rest),
            // End of input: an open section lacks its end marker.
            None => return section.is_none(),
        };
        if line.starts_with(b"-----BEGIN ") {
            let (mut trailer, mut pos) = (0, line.len());
            for (i, &b) in line.iter().enumerate().rev() {
                match b {
                    b'-' => {
                        trailer += 1;
                        pos = i;
                    }
                    b'\n' | b'\r' | b' ' => {}
                    _ => break,
                }
            }
            if trailer != 5 {
                return false;
            }
            let ty = &line[11..pos];
            // The reader keeps what it collected so far (it only clears between
            // sections), so the body state carries on too.
            section = Some(match KNOWN.iter().find(|k| **k == ty) {
                Some(k) => Label::Known(k),
                None => Label::Unknown(ty),
            });
            continue;
        }
        if let Some(label) = &section {
            let is_end = line
                .strip_prefix(b"-----END ")
                .and_then(|r| r.strip_prefix(label.bytes()))
                .is_some_and(|r| r.starts_with(b"-----"));
            if is_end {
                match label {
                    Label::Unknown(_) => {}
                    Label::Known(k) => {
                        if !body.decodes() {
                            return false;
                        }
                        if on(k) {
                            return true;
                        }
                    }
                }
                section = None;
                body = Base64::default();
                continue;
            }
            if !body.feed(line) {
                return false;
            }
        }
    }
}

/// Whether rustls-pki-types reads `pem` as a chain with no error and at least one
/// `CERTIFICATE` (what `CertificateDer::pem_slice_iter` yields).
pub(crate) fn accepts_chain(pem: &[u8]) -> bool {
    let mut certs = 0usize;
    walk(pem, |label| {
        certs += usize::from(label == b"CERTIFICATE");
        false
    }) && certs > 0
}

/// Whether rustls-pki-types finds a private key in `pem` (`PrivateKeyDer::from_pem_slice`:
/// the first PKCS#1, SEC1 or PKCS#8 section, with no error before it).
pub(crate) fn accepts_key(pem: &[u8]) -> bool {
    let mut found = false;
    walk(pem, |label| {
        found = matches!(
            label,
            b"RSA PRIVATE KEY" | b"EC PRIVATE KEY" | b"PRIVATE KEY"
        );
        found
    }) && found
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    /// What the reader says: a chain with no error and a certificate.
    fn reader_chain(pem: &[u8]) -> bool {
        let mut count = 0;
        for c in CertificateDer::pem_slice_iter(pem) {
            if c.is_err() {
                return false;
            }
            count += 1;
        }
        count > 0
    }

    fn reader_key(pem: &[u8]) -> bool {
        PrivateKeyDer::from_pem_slice(pem).is_ok()
    }

    fn agree(pem: &[u8]) {
        assert_eq!(
            accepts_chain(pem),
            reader_chain(pem),
            "chain {:?}",
            String::from_utf8_lossy(pem)
        );
        assert_eq!(
            accepts_key(pem),
            reader_key(pem),
            "key {:?}",
            String::from_utf8_lossy(pem)
        );
    }

    const CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBTzCB9qADAgECAhQR/Lk0u3cXvaa4GUAEW2jYdvZr+zAKBggqhkjOPQQDAjAY
MRYwFAYDVQQDDA13ZWlyIGJlbmNoIENBMCAXDTc1MDEwMTAwMDAwMFoYDzQwOTYw
sMbq
-----END CERTIFICATE-----
";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg/XeA+195stR985xR
9h6VWFOTxCA/GpQyW1HCaI2pOwjioWxgn7QGhE1piRwZIkBBq0GdyCzm
-----END PRIVATE KEY-----
";

    #[test]
    fn accepts_what_the_reader_accepts() {
        for pem in [
            CERT,
            KEY,
            &format!("{CERT}{KEY}"),
            &format!("{KEY}{CERT}"),
            "",
            "x",
        ] {
            agree(pem.as_bytes());
        }
        assert!(accepts_chain(CERT.as_bytes()));
        assert!(accepts_key(KEY.as_bytes()));
        assert!(!accepts_chain(KEY.as_bytes()));
        assert!(!accepts_key(CERT.as_bytes()));
    }

    /// Every body of up to 11 symbols from a small alphabet (value, pad, space, invalid)
    /// in a certificate and a key section: the padding and grouping rules.
    #[test]
    fn base64_rules_match_the_reader() {
        let alphabet = [b'A', b'=', b' ', b'!'];
        let mut body = Vec::new();
        for len in 0..=9u32 {
            for mut n in 0..4usize.pow(len) {
                body.clear();
                for _ in 0..len {
                    body.push(alphabet[n % 4]);
                    n /= 4;
                }
                for label in ["CERTIFICATE", "PRIVATE KEY"] {
                    let mut pem = format!("-----BEGIN {label}-----\n").into_bytes();
                    pem.extend_from_slice(&body);
                    pem.extend_from_slice(format!("\n-----END {label}-----\n").as_bytes());
                    agree(&pem);
                }
            }
        }
    }

    /// Random documents made of PEM lines, broken markers, bodies and line ends, and
    /// random byte edits of valid ones.
    #[test]
    fn random_documents_match_the_reader() {
        let pieces: &[&str] = &[
            "-----BEGIN CERTIFICATE-----",
            "-----END CERTIFICATE-----",
            "-----BEGIN PRIVATE KEY-----",
            "-----END PRIVATE KEY-----",
            "-----BEGIN EC PRIVATE KEY-----",
            "-----END EC PRIVATE KEY-----",
            "-----BEGIN RSA PRIVATE KEY-----",
            "-----BEGIN X509 CRL-----",
            "-----END X509 CRL-----",
            "-----BEGIN FOO-----",
            "-----END FOO-----",
            "-----BEGIN CERTIFICATE----",
            "-----BEGIN CERTIFICATE----- ",
            "-----BEGIN CERTIFICATE-- - --",
            "-----END CERTIFICATE-----trailing",
            "-----END CERTIFICATE----",
            "-----BEGIN -----",
            "-----END -----",
            "AAEC",
            "AAE=",
            "AA==",
            "AAECAwQF",
            "AAECAwQ=",
            "MIIBTzCB9qADAgECAhQR/Lk0u3cXvaa4GUAEW2jYdvZr+zAKBggqhkjOPQQDAjAY",
            "sMbq",
            "A",
            "=",
            "!!",
            " \t",
            "",
            "\u{e9}t\u{e9}",
        ];
        let ends: &[&str] = &["\n", "\r", "\r\n", "\n\n", ""];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        for _ in 0..200_000 {
            let mut doc = String::new();
            for _ in 0..next(9) {
                doc.push_str(pieces[next(pieces.len())]);
                doc.push_str(ends[next(ends.len())]);
            }
            agree(doc.as_bytes());
        }
        let valid = format!("{CERT}{KEY}").into_bytes();
        let bytes = b"-=ABz09+/ \t\r\n!\x00E";
        for _ in 0..100_000 {
            let mut doc = valid.clone();
            for _ in 0..=next(3) {
                let at = next(doc.len());
                match next(3) {
                    0 => doc[at] = bytes[next(bytes.len())],
                    1 => {
                        doc.remove(at);
                    }
                    _ => doc.insert(at, bytes[next(bytes.len())]),
                }
            }
            agree(&doc);
        }
    }
}
