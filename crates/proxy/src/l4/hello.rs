//! Reads the server name (SNI) from a TLS ClientHello without terminating TLS.
//!
//! The bytes are untrusted: every length is checked against what is buffered, nothing is
//! allocated in proportion to a claimed length, and the handshake message may span
//! several records (reassembled up to [`MAX_HELLO`] bytes). A fuzz target
//! (`fuzz/fuzz_targets/client_hello.rs`) checks that no input panics.

/// The most bytes (records included) read while looking for a complete ClientHello. A
/// ClientHello with post-quantum key shares is ~2 KiB; the record layer allows 16 KiB.
pub const MAX_HELLO: usize = 16 * 1024 + 5;

const RECORD_HEADER: usize = 5;
const HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const SERVER_NAME: u16 = 0;
const HOST_NAME: u8 = 0;

/// What the buffered bytes of a connection say so far.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientHello {
    /// A prefix of a ClientHello: read more (up to [`MAX_HELLO`]).
    Incomplete,
    /// A complete ClientHello and its `host_name` server name, if it sends one
    /// (lower-cased, without a trailing dot).
    Complete(Option<String>),
}

/// Why the bytes are not a ClientHello weir can route.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidClientHello {
    /// The first record is not a TLS handshake record.
    #[error("not a TLS handshake record")]
    NotTls,
    /// The first handshake message is not a ClientHello.
    #[error("not a ClientHello")]
    NotClientHello,
    /// A length field points past its container, or a field is malformed.
    #[error("malformed ClientHello: {0}")]
    Malformed(&'static str),
    /// The ClientHello does not fit in [`MAX_HELLO`] bytes.
    #[error("ClientHello larger than {MAX_HELLO} bytes")]
    TooLarge,
    /// The server name is not a valid DNS name.
    #[error("invalid server name")]
    InvalidName,
}

/// Parses the start of a TLS connection (`buf`: every byte received so far).
pub fn parse_client_hello(buf: &[u8]) -> Result<ClientHello, InvalidClientHello> {
    // Reassemble the handshake message from the records buffered so far, without copying
    // when it fits in the first record (the usual case).
    let mut at = 0;
    let mut first: Option<&[u8]> = None;
    let mut joined: Vec<u8> = Vec::new();
    loop {
        let Some(header) = buf.get(at..at + RECORD_HEADER) else {
            return incomplete(buf);
        };
        if header[0] != HANDSHAKE || header[1] != 3 {
            return Err(InvalidClientHello::NotTls);
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > 16 * 1024 {
            return Err(InvalidClientHello::Malformed("record length"));
        }
        // Past the bound whether or not these bytes have arrived: the answer must not
        // depend on how much of the connection was read.
        if at + RECORD_HEADER + len > MAX_HELLO {
            return Err(InvalidClientHello::TooLarge);
        }
        let Some(fragment) = buf.get(at + RECORD_HEADER..at + RECORD_HEADER + len) else {
            return incomplete(buf);
        };
        at += RECORD_HEADER + len;
        let message: &[u8] = match first {
            None => {
                first = Some(fragment);
                fragment
            }
            Some(f) => {
                if joined.is_empty() {
                    joined.extend_from_slice(f);
                }
                joined.extend_from_slice(fragment);
                &joined
            }
        };
        if message[0] != CLIENT_HELLO {
            return Err(InvalidClientHello::NotClientHello);
        }
        let Some(len) = message.get(1..4) else {
            continue;
        };
        let len = (usize::from(len[0]) << 16) | (usize::from(len[1]) << 8) | usize::from(len[2]);
        if len + 4 > MAX_HELLO {
            return Err(InvalidClientHello::TooLarge);
        }
        if let Some(body) = message.get(4..4 + len) {
            return client_hello_sni(body).map(ClientHello::Complete);
        }
    }
}

fn incomplete(buf: &[u8]) -> Result<ClientHello, InvalidClientHello> {
    if buf.len() >= MAX_HELLO {
        Err(InvalidClientHello::TooLarge)
    } else {
        Ok(ClientHello::Incomplete)
    }
}

/// A cursor over a length-checked byte slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], InvalidClientHello> {
        if self.0.len() < n {
            return Err(InvalidClientHello::Malformed(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, InvalidClientHello> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, InvalidClientHello> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a 1-byte length prefix.
    fn vec8(&mut self, what: &'static str) -> Result<&'a [u8], InvalidClientHello> {
        let n = usize::from(self.u8(what)?);
        self.take(n, what)
    }

    /// A vector with a 2-byte length prefix.
    fn vec16(&mut self, what: &'static str) -> Result<&'a [u8], InvalidClientHello> {
        let n = usize::from(self.u16(what)?);
        self.take(n, what)
    }
}

/// The `host_name` of the `server_name` extension of a ClientHello body (RFC 8446 §4.1.2,
/// RFC 6066 §3).
fn client_hello_sni(body: &[u8]) -> Result<Option<String>, InvalidClientHello> {
    let mut r = Reader(body);
    r.take(2 + 32, "version and random")?;
    r.vec8("session id")?;
    r.vec16("cipher suites")?;
    r.vec8("compression methods")?;
    if r.0.is_empty() {
        // A ClientHello without extensions (SSLv3-era clients) has no SNI.
        return Ok(None);
    }
    let mut exts = Reader(r.vec16("extensions")?);
    while !exts.0.is_empty() {
        let ty = exts.u16("extension type")?;
        let data = exts.vec16("extension data")?;
        if ty != SERVER_NAME {
            continue;
        }
        let mut list = Reader(Reader(data).vec16("server name list")?);
        while !list.0.is_empty() {
            let name_type = list.u8("server name type")?;
            let name = list.vec16("server name")?;
            if name_type == HOST_NAME {
                return host_name(name).map(Some);
            }
        }
        return Ok(None);
    }
    Ok(None)
}

/// A DNS name as sent in SNI: ASCII letters, digits, `-`, `_` and dots, at most 253
/// characters (a trailing dot is dropped), lower-cased.
fn host_name(name: &[u8]) -> Result<String, InvalidClientHello> {
    let name = name.strip_suffix(b".").unwrap_or(name);
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if !valid {
        return Err(InvalidClientHello::InvalidName);
    }
    Ok(name
        .iter()
        .map(|b| b.to_ascii_lowercase() as char)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello handshake message (without record header) with these extensions.
    fn hello_message(extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(32);
        body.extend_from_slice(&[1; 32]);
        body.extend_from_slice(&[0, 4, 0x13, 0x01, 0x13, 0x02]);
        body.extend_from_slice(&[1, 0]);
        let mut exts = Vec::new();
        for (ty, data) in extensions {
            exts.extend_from_slice(&ty.to_be_bytes());
            exts.extend_from_slice(&(data.len() as u16).to_be_bytes());
            exts.extend_from_slice(data);
        }
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut msg = vec![CLIENT_HELLO];
        msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend_from_slice(&body);
        msg
    }

    fn sni_ext(name: &[u8]) -> (u16, Vec<u8>) {
        let mut entry = vec![HOST_NAME];
        entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
        entry.extend_from_slice(name);
        let mut data = (entry.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&entry);
        (SERVER_NAME, data)
    }

    /// `msg` in records of at most `max` bytes each.
    fn records(msg: &[u8], max: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in msg.chunks(max) {
            out.extend_from_slice(&[HANDSHAKE, 3, 1]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    #[test]
    fn reads_the_server_name() {
        let msg = hello_message(&[(10, vec![0, 2, 0, 29]), sni_ext(b"Api.Example.COM.")]);
        let buf = records(&msg, 16 * 1024);
        assert_eq!(
            parse_client_hello(&buf),
            Ok(ClientHello::Complete(Some("api.example.com".into())))
        );
    }

    #[test]
    fn every_prefix_is_incomplete() {
        let buf = records(&hello_message(&[sni_ext(b"a.example")]), 16 * 1024);
        for n in 0..buf.len() {
            assert_eq!(
                parse_client_hello(&buf[..n]),
                Ok(ClientHello::Incomplete),
                "{n}"
            );
        }
    }

    #[test]
    fn reassembles_a_hello_split_over_records() {
        let msg = hello_message(&[(43, vec![2, 3, 4]), sni_ext(b"split.example")]);
        for max in [1, 3, 17, 64] {
            let buf = records(&msg, max);
            assert_eq!(
                parse_client_hello(&buf),
                Ok(ClientHello::Complete(Some("split.example".into()))),
                "{max}"
            );
        }
    }

    #[test]
    fn no_sni_is_complete_without_a_name() {
        let buf = records(&hello_message(&[(10, vec![0, 2, 0, 29])]), 16 * 1024);
        assert_eq!(parse_client_hello(&buf), Ok(ClientHello::Complete(None)));
    }

    #[test]
    fn rejects_what_is_not_a_client_hello() {
        assert_eq!(
            parse_client_hello(b"GET / HTTP/1.1\r\n"),
            Err(InvalidClientHello::NotTls)
        );
        let mut msg = hello_message(&[]);
        msg[0] = 2; // ServerHello
        assert_eq!(
            parse_client_hello(&records(&msg, 100)),
            Err(InvalidClientHello::NotClientHello)
        );
        let buf = records(&hello_message(&[sni_ext(b"bad name")]), 16 * 1024);
        assert_eq!(
            parse_client_hello(&buf),
            Err(InvalidClientHello::InvalidName)
        );
        let buf = records(&hello_message(&[sni_ext(b"")]), 16 * 1024);
        assert_eq!(
            parse_client_hello(&buf),
            Err(InvalidClientHello::InvalidName)
        );
    }

    #[test]
    fn lengths_past_their_container_are_malformed() {
        let mut msg = hello_message(&[sni_ext(b"x.example")]);
        // The server name list claims more bytes than its extension holds.
        let n = msg.len();
        msg[n - 14] = 0xff;
        assert!(matches!(
            parse_client_hello(&records(&msg, 16 * 1024)),
            Err(InvalidClientHello::Malformed(_))
        ));
    }

    #[test]
    fn a_hello_larger_than_the_bound_is_refused() {
        let msg = hello_message(&[(21, vec![0; 20_000]), sni_ext(b"big.example")]);
        assert_eq!(
            parse_client_hello(&records(&msg, 16 * 1024)),
            Err(InvalidClientHello::TooLarge)
        );
        // An endless stream of tiny records stops at the bound too.
        let msg = hello_message(&[(21, vec![0; 30_000])]);
        let buf = records(&msg[..MAX_HELLO], 1);
        assert_eq!(
            parse_client_hello(&buf[..MAX_HELLO]),
            Err(InvalidClientHello::TooLarge)
        );
    }

    /// The fuzz target's properties (`fuzz/fuzz_targets/client_hello.rs`) on stable:
    /// mutated ClientHellos never panic, names are valid, and every prefix of a
    /// complete input is incomplete or gives the same answer.
    #[test]
    fn mutated_hellos_keep_the_fuzz_properties() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let seeds = [
            records(&hello_message(&[sni_ext(b"a.example")]), 16 * 1024),
            records(
                &hello_message(&[(10, vec![0, 2, 0, 29]), sni_ext(b"B.x")]),
                5,
            ),
            records(&hello_message(&[]), 16 * 1024),
        ];
        for i in 0..20_000 {
            let mut buf = seeds[i % seeds.len()].clone();
            for _ in 0..(next() % 4) {
                let at = (next() as usize) % buf.len();
                match next() % 3 {
                    0 => buf[at] = next() as u8,
                    1 => buf.truncate(at.max(1)),
                    _ => buf.insert(at, next() as u8),
                }
            }
            let Ok(result) = parse_client_hello(&buf) else {
                continue;
            };
            if let ClientHello::Complete(Some(name)) = &result {
                assert!(!name.is_empty() && name.len() <= 253);
                assert!(name.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || matches!(b, b'-' | b'.' | b'_')));
            }
            if matches!(result, ClientHello::Complete(_)) {
                for n in 0..buf.len() {
                    match parse_client_hello(&buf[..n]) {
                        Ok(ClientHello::Incomplete) => {}
                        Ok(r) => assert_eq!(r, result),
                        Err(e) => panic!("prefix {n} of {buf:?}: {e}"),
                    }
                }
            }
        }
    }
}
