//! PROXY protocol (HAProxy's, versions 1 and 2) on listeners that set it: a load balancer
//! in front of weir sends, before anything else on the connection, a header naming the
//! client it accepted the connection from, and weir takes that address as the client's
//! (for `ipRules`, client-IP rate limits, `X-Forwarded-For` and logs).
//!
//! [`parse`] is a pure function over the bytes read so far (untrusted: fuzz target
//! `proxy_protocol`); [`read`] feeds it from the socket without ever consuming a byte past
//! the header — it peeks, and consumes only bytes the header is known to contain — so the
//! connection's own first bytes stay in the socket for the listener's usual handling
//! (HTTP, TLS, a ClientHello to route).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The version 2 signature.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// The version 1 prefix.
const V1_PREFIX: &[u8; 6] = b"PROXY ";
/// The longest version 1 line, CRLF included (the specification's bound).
pub const MAX_V1: usize = 107;
/// The longest version 2 header weir reads (its 16 fixed bytes and addresses and TLVs).
/// The format allows 64 KiB; load balancers send a few hundred bytes at most, and a
/// larger one is refused rather than buffered.
pub const MAX_V2: usize = 16 + 2048;

/// What the bytes read so far hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A header may still complete: read more.
    NeedMore,
    /// A complete header of `len` bytes. `source` is the client it names; `None` for a
    /// header that names none (version 1 `UNKNOWN`, version 2 `LOCAL` — a health check
    /// of the balancer itself — or an address family other than IPv4/IPv6): the
    /// connection's peer is then the client.
    Header {
        /// The header's length (bytes to consume).
        len: usize,
        /// The client's address and port.
        source: Option<SocketAddr>,
    },
    /// Not a PROXY protocol header (or a malformed one): close the connection.
    Invalid(&'static str),
}

/// Parses the first bytes of a connection. Looks at no more than [`MAX_V1`] or
/// [`MAX_V2`] bytes, and never answers [`Parsed::NeedMore`] for bytes that cannot start a
/// header.
pub fn parse(buf: &[u8]) -> Parsed {
    let v2_prefix = buf.len().min(V2_SIGNATURE.len());
    let v1_prefix = buf.len().min(V1_PREFIX.len());
    if buf[..v2_prefix] == V2_SIGNATURE[..v2_prefix] && !buf.is_empty() {
        if buf.len() < V2_SIGNATURE.len() {
            return Parsed::NeedMore;
        }
        return parse_v2(buf);
    }
    if buf.is_empty() || buf[..v1_prefix] == V1_PREFIX[..v1_prefix] {
        if buf.len() < V1_PREFIX.len() {
            return Parsed::NeedMore;
        }
        return parse_v1(buf);
    }
    Parsed::Invalid("not a PROXY protocol header")
}

fn parse_v1(buf: &[u8]) -> Parsed {
    let window = &buf[..buf.len().min(MAX_V1)];
    let Some(lf) = window.iter().position(|b| *b == b'\n') else {
        return if buf.len() >= MAX_V1 {
            Parsed::Invalid("version 1 header longer than 107 bytes")
        } else {
            Parsed::NeedMore
        };
    };
    if lf == 0 || window[lf - 1] != b'\r' {
        return Parsed::Invalid("version 1 header not ended by CRLF");
    }
    let Ok(line) = std::str::from_utf8(&window[V1_PREFIX.len()..lf - 1]) else {
        return Parsed::Invalid("version 1 header is not text");
    };
    let len = lf + 1;
    let mut fields = line.split(' ');
    let source = match fields.next() {
        // The rest of an UNKNOWN line is ignored (the specification says so).
        Some("UNKNOWN") => return Parsed::Header { len, source: None },
        Some("TCP4") => fields
            .next()
            .and_then(|a| a.parse::<Ipv4Addr>().ok().map(IpAddr::V4)),
        Some("TCP6") => fields
            .next()
            .and_then(|a| a.parse::<Ipv6Addr>().ok().map(IpAddr::V6)),
        _ => return Parsed::Invalid("version 1 protocol is not TCP4, TCP6 or UNKNOWN"),
    };
    let Some(source) = source else {
        return Parsed::Invalid("version 1 source address");
    };
    let destination_ok = match source {
        IpAddr::V4(_) => fields.next().is_some_and(|a| a.parse::<Ipv4Addr>().is_ok()),
        IpAddr::V6(_) => fields.next().is_some_and(|a| a.parse::<Ipv6Addr>().is_ok()),
    };
    if !destination_ok {
        return Parsed::Invalid("version 1 destination address");
    }
    let (Some(sport), Some(_dport), None) = (
        fields.next().and_then(port),
        fields.next().and_then(port),
        fields.next(),
    ) else {
        return Parsed::Invalid("version 1 ports");
    };
    Parsed::Header {
        len,
        source: Some(SocketAddr::new(source, sport)),
    }
}

/// A decimal port: digits only, no leading zero (but `0` itself).
fn port(s: &str) -> Option<u16> {
    let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let canonical = s == "0" || !s.starts_with('0');
    if digits && canonical {
        s.parse().ok()
    } else {
        None
    }
}

fn parse_v2(buf: &[u8]) -> Parsed {
    if buf.len() < 16 {
        return Parsed::NeedMore;
    }
    let (version, command) = (buf[12] >> 4, buf[12] & 0x0f);
    if version != 2 {
        return Parsed::Invalid("version 2 signature with another version");
    }
    let (family, transport) = (buf[13] >> 4, buf[13] & 0x0f);
    let body = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let len = 16 + body;
    if len > MAX_V2 {
        return Parsed::Invalid("version 2 header longer than weir reads");
    }
    if command > 1 {
        return Parsed::Invalid("version 2 command is not LOCAL or PROXY");
    }
    if family > 3 || transport > 2 {
        return Parsed::Invalid("version 2 address family or transport");
    }
    if buf.len() < len {
        return Parsed::NeedMore;
    }
    // LOCAL: the balancer's own connection (a health check); its addresses, if any, are
    // not a client's.
    if command == 0 {
        return Parsed::Header { len, source: None };
    }
    let addresses = &buf[16..len];
    let source = match family {
        // AF_INET: source, destination (4 bytes each), source port, destination port.
        1 => {
            let Some(a) = addresses.get(..12) else {
                return Parsed::Invalid("version 2 IPv4 addresses truncated");
            };
            let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            Some(SocketAddr::new(ip.into(), u16::from_be_bytes([a[8], a[9]])))
        }
        // AF_INET6: 16 bytes each, then the ports.
        2 => {
            let Some(a) = addresses.get(..36) else {
                return Parsed::Invalid("version 2 IPv6 addresses truncated");
            };
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&a[..16]);
            let ip = Ipv6Addr::from(ip);
            Some(SocketAddr::new(
                ip.into(),
                u16::from_be_bytes([a[32], a[33]]),
            ))
        }
        // AF_UNSPEC or AF_UNIX: no address weir can use.
        _ => None,
    };
    // What follows the addresses (TLVs: ALPN, authority, CRC, vendor data) is skipped.
    Parsed::Header { len, source }
}

/// Why [`read`] gave up on a connection.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The bytes are not a PROXY protocol header.
    #[error("{0}")]
    Invalid(&'static str),
    /// The header did not complete in time.
    #[error("no complete PROXY protocol header in time")]
    TimedOut,
    /// The client closed (or the socket failed) before the header was complete.
    #[error("closed before a complete PROXY protocol header: {0}")]
    Closed(String),
}

/// Reads the connection's PROXY protocol header by `deadline` (if any): the
/// client it names, if any. Consumes exactly the header's bytes: it peeks at what has
/// arrived, and consumes bytes only when the header is complete (its length) or when
/// they are all part of an incomplete header — so each pass either ends or consumes
/// bytes, and never spins on the same ones.
pub(crate) async fn read(
    stream: &mut TcpStream,
    deadline: Option<tokio::time::Instant>,
) -> Result<Option<SocketAddr>, ReadError> {
    let reading = async {
        let mut header: Vec<u8> = Vec::with_capacity(256);
        let mut peeked = [0u8; 512];
        loop {
            let room = (MAX_V2 - header.len()).min(peeked.len());
            let n = stream
                .peek(&mut peeked[..room])
                .await
                .map_err(|e| ReadError::Closed(e.to_string()))?;
            if n == 0 {
                return Err(ReadError::Closed("end of stream".into()));
            }
            let before = header.len();
            header.extend_from_slice(&peeked[..n]);
            let consume = match parse(&header) {
                Parsed::Invalid(why) => return Err(ReadError::Invalid(why)),
                Parsed::NeedMore => n,
                Parsed::Header { len, .. } => len - before,
            };
            stream
                .read_exact(&mut peeked[..consume])
                .await
                .map_err(|e| ReadError::Closed(e.to_string()))?;
            if let Parsed::Header { source, .. } = parse(&header[..before + consume]) {
                return Ok(source);
            }
        }
    };
    match deadline {
        None => reading.await,
        Some(at) => tokio::time::timeout_at(at, reading)
            .await
            .map_err(|_| ReadError::TimedOut)?,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    fn v2(command: u8, family: u8, body: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.push(0x20 | command);
        h.push(family);
        h.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
        h.extend_from_slice(body);
        h
    }

    #[test]
    fn version_1_headers() {
        let line = b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\nGET / HTTP/1.1\r\n";
        assert_eq!(
            parse(line),
            Parsed::Header {
                len: 45,
                source: addr("192.0.2.7:56324")
            }
        );
        let line = b"PROXY TCP6 2001:db8::7 2001:db8::1 65535 80\r\n";
        assert_eq!(
            parse(line),
            Parsed::Header {
                len: line.len(),
                source: addr("[2001:db8::7]:65535")
            }
        );
        let line = b"PROXY UNKNOWN whatever follows\r\nX";
        assert_eq!(
            parse(line),
            Parsed::Header {
                len: line.len() - 1,
                source: None
            }
        );
        // Every prefix of a header needs more.
        let full = b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\n";
        for end in 0..full.len() {
            assert_eq!(parse(&full[..end]), Parsed::NeedMore, "{end}");
        }
        for bad in [
            &b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\n"[..],
            b"PROXY TCP4 2001:db8::7 198.51.100.1 1 2\r\n",
            b"PROXY TCP6 192.0.2.7 2001:db8::1 1 2\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 056324 443\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 65536 443\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 +1 443\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 1 2 3\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 1\r\n",
            b"PROXY UDP4 192.0.2.7 198.51.100.1 1 2\r\n",
            b"PROXY TCP4  192.0.2.7 198.51.100.1 1 2\r\n",
            b"GET / HTTP/1.1\r\n",
            b"\x16\x03\x01",
        ] {
            assert!(
                matches!(parse(bad), Parsed::Invalid(_)),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // No CRLF within 107 bytes: refused, not buffered.
        let mut long = b"PROXY UNKNOWN ".to_vec();
        long.resize(MAX_V1, b'x');
        assert!(matches!(parse(&long), Parsed::Invalid(_)));
        long.truncate(MAX_V1 - 1);
        assert_eq!(parse(&long), Parsed::NeedMore);
    }

    #[test]
    fn version_2_headers() {
        // TCP over IPv4, with a TLV (type 0x01 ALPN, "h2") after the addresses: skipped.
        let mut body = vec![192, 0, 2, 7, 198, 51, 100, 1, 0xdc, 0x04, 0x01, 0xbb];
        body.extend_from_slice(&[0x01, 0x00, 0x02, b'h', b'2']);
        let mut h = v2(1, 0x11, &body);
        let len = h.len();
        h.extend_from_slice(b"GET /");
        assert_eq!(
            parse(&h),
            Parsed::Header {
                len,
                source: addr("192.0.2.7:56324")
            }
        );
        for end in 0..len {
            assert_eq!(parse(&h[..end]), Parsed::NeedMore, "{end}");
        }
        // TCP over IPv6.
        let mut body = Vec::new();
        body.extend_from_slice(&"2001:db8::7".parse::<Ipv6Addr>().unwrap().octets());
        body.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        body.extend_from_slice(&[0x00, 0x50, 0x01, 0xbb]);
        let h = v2(1, 0x21, &body);
        assert_eq!(
            parse(&h),
            Parsed::Header {
                len: h.len(),
                source: addr("[2001:db8::7]:80")
            }
        );
        // LOCAL (a health check of the balancer): no client, whatever the addresses say.
        let h = v2(0, 0x11, &[10, 0, 0, 1, 10, 0, 0, 2, 0, 1, 0, 2]);
        assert_eq!(
            parse(&h),
            Parsed::Header {
                len: h.len(),
                source: None
            }
        );
        let h = v2(0, 0x00, &[]);
        assert_eq!(
            parse(&h),
            Parsed::Header {
                len: 16,
                source: None
            }
        );
        // UNSPEC and UNIX families: no client address.
        let h = v2(1, 0x31, &[0u8; 216]);
        assert_eq!(
            parse(&h),
            Parsed::Header {
                len: h.len(),
                source: None
            }
        );
        // Refused: truncated addresses, another version or command, a family out of
        // range, a header longer than weir reads.
        assert!(matches!(
            parse(&v2(1, 0x11, &[1, 2, 3])),
            Parsed::Invalid(_)
        ));
        assert!(matches!(
            parse(&v2(1, 0x21, &[0u8; 20])),
            Parsed::Invalid(_)
        ));
        let mut h = v2(1, 0x11, &[0u8; 12]);
        h[12] = 0x11;
        assert!(matches!(parse(&h), Parsed::Invalid(_)));
        assert!(matches!(
            parse(&v2(2, 0x11, &[0u8; 12])),
            Parsed::Invalid(_)
        ));
        assert!(matches!(
            parse(&v2(1, 0x41, &[0u8; 12])),
            Parsed::Invalid(_)
        ));
        let mut big = v2(1, 0x11, &[0u8; 12]);
        big[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
        assert!(matches!(parse(&big[..16]), Parsed::Invalid(_)));
    }

    /// The reader consumes the header only, whether it arrives whole, with the
    /// connection's first bytes, or a byte at a time.
    #[tokio::test]
    async fn the_reader_consumes_exactly_the_header() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let header = b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\n".to_vec();
        // With a NOOP TLV after the addresses.
        let v2h = v2(
            1,
            0x11,
            &[
                192, 0, 2, 8, 198, 51, 100, 1, 0, 80, 1, 187, 0x04, 0x00, 0x01, 0x00,
            ],
        );
        for (bytes, expected) in [(header, "192.0.2.7:56324"), (v2h, "192.0.2.8:80")] {
            for chunked in [false, true] {
                let send = bytes.clone();
                let client = tokio::spawn(async move {
                    let mut c = TcpStream::connect(at).await.unwrap();
                    if chunked {
                        for b in &send {
                            c.write_all(&[*b]).await.unwrap();
                            c.flush().await.unwrap();
                            tokio::task::yield_now().await;
                        }
                        c.write_all(b"rest").await.unwrap();
                    } else {
                        let mut all = send.clone();
                        all.extend_from_slice(b"rest");
                        c.write_all(&all).await.unwrap();
                    }
                    c
                });
                let (mut s, _) = listener.accept().await.unwrap();
                let source = read(&mut s, None).await.unwrap();
                assert_eq!(source, addr(expected));
                let mut rest = [0u8; 4];
                s.read_exact(&mut rest).await.unwrap();
                assert_eq!(&rest, b"rest");
                drop(client.await.unwrap());
            }
        }
        // Not a header: refused.
        let client = tokio::spawn(async move {
            let mut c = TcpStream::connect(at).await.unwrap();
            c.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
            c
        });
        let (mut s, _) = listener.accept().await.unwrap();
        assert!(matches!(
            read(&mut s, None).await,
            Err(ReadError::Invalid(_))
        ));
        drop(client.await.unwrap());
    }
}
