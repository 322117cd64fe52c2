use super::*;

fn head(bytes: &[u8]) -> Result<Option<Head>, Invalid> {
    parse_response(&mut BytesMut::from(bytes), false, &mut Vec::new())
}

fn complete(bytes: &[u8]) -> Head {
    head(bytes).unwrap().unwrap()
}

#[test]
fn a_head_is_split_off_and_its_values_share_the_buffer() {
    let mut buf = BytesMut::from(
        &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-One: a\r\nx-one: b\r\n\r\nhello"[..],
    );
    let h = parse_response(&mut buf, false, &mut Vec::new())
        .unwrap()
        .unwrap();
    assert_eq!(&buf[..], b"hello");
    assert_eq!(h.status, StatusCode::OK);
    assert_eq!(h.version, Version::HTTP_11);
    assert_eq!(h.reason, None);
    assert_eq!(h.framing, Framing::Length(5));
    assert!(h.keep_alive);
    let ones: Vec<_> = h.headers.get_all("x-one").iter().collect();
    assert_eq!(ones, ["a", "b"]);
}

#[test]
fn an_incomplete_head_asks_for_more_until_the_limit() {
    assert!(head(b"HTTP/1.1 200 OK\r\nContent-Le").unwrap().is_none());
    assert!(head(b"").unwrap().is_none());
    let mut big = b"HTTP/1.1 200 OK\r\nx-big: ".to_vec();
    big.resize(MAX_HEAD, b'a');
    assert_eq!(head(&big).unwrap_err(), Invalid::HeadTooLarge);
}

#[test]
fn more_fields_than_allowed_are_refused() {
    let mut h = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        h.extend_from_slice(format!("x-{i}: v\r\n").as_bytes());
    }
    h.extend_from_slice(b"\r\n");
    assert_eq!(head(&h).unwrap_err(), Invalid::HeadTooLarge);
}

#[test]
fn a_custom_reason_phrase_is_kept() {
    let h = complete(b"HTTP/1.1 200 Fine Thanks\r\ncontent-length: 0\r\n\r\n");
    assert_eq!(h.reason.as_deref(), Some(&b"Fine Thanks"[..]));
    let h = complete(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
    assert_eq!(h.reason, None);
}

#[test]
fn a_reason_phrase_that_is_not_utf8_is_dropped_and_empty_values_are_kept() {
    // Found by the h1_response fuzz target: httparse reads such a phrase as a static "",
    // which is no part of the buffer.
    let h = complete(b"HTTP/1.1 100 \xff\xffinue\r\n\r\n");
    assert_eq!((h.status, h.reason), (StatusCode::CONTINUE, None));
    let h = complete(b"HTTP/1.1 200 \xffOK\r\nx-empty:\r\nx-b: \r\ncontent-length: 0\r\n\r\n");
    assert_eq!(h.headers["x-empty"], "");
    assert_eq!(h.headers["x-b"], "");
    assert_eq!(h.reason, None);
}

#[test]
fn framing_follows_rfc_9112() {
    let f = |bytes: &[u8], head_request: bool| {
        let h = parse_response(&mut BytesMut::from(bytes), head_request, &mut Vec::new())
            .unwrap()
            .unwrap();
        (h.framing, h.keep_alive)
    };
    // No body: HEAD, 1xx, 204, 304 (whatever they announce).
    assert_eq!(
        f(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n", true),
        (Framing::Empty, true)
    );
    assert_eq!(
        f(
            b"HTTP/1.1 204 No Content\r\ncontent-length: 9\r\n\r\n",
            false
        ),
        (Framing::Empty, true)
    );
    assert_eq!(
        f(
            b"HTTP/1.1 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\n",
            false
        ),
        (Framing::Empty, true)
    );
    assert_eq!(
        f(
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n",
            false
        ),
        (Framing::Empty, true)
    );
    // Chunked, length, until close.
    assert_eq!(
        f(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            false
        ),
        (Framing::Chunked, true)
    );
    assert_eq!(
        f(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
            false
        ),
        (Framing::Chunked, true)
    );
    assert_eq!(
        f(b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n", false),
        (Framing::Length(12), true)
    );
    assert_eq!(
        f(b"HTTP/1.1 200 OK\r\n\r\n", false),
        (Framing::UntilClose, false)
    );
    // A coding after chunked, or chunked on HTTP/1.0: the body ends with the connection.
    assert_eq!(
        f(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n",
            false
        ),
        (Framing::UntilClose, false)
    );
    assert_eq!(
        f(
            b"HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            false
        ),
        (Framing::UntilClose, false)
    );
    // Of several Transfer-Encoding fields, the last one's last coding decides.
    assert_eq!(
        f(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntransfer-encoding: gzip\r\n\r\n",
            false
        ),
        (Framing::UntilClose, false)
    );
    assert_eq!(
        f(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n",
            false
        ),
        (Framing::Chunked, true)
    );
    // Transfer-Encoding wins over Content-Length, and the connection is not reused.
    assert_eq!(
        f(
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n",
            false
        ),
        (Framing::Chunked, false)
    );
    // Persistence: HTTP/1.1 unless close, HTTP/1.0 only with keep-alive.
    assert_eq!(
        f(
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: Close\r\n\r\n",
            false
        ),
        (Framing::Length(0), false)
    );
    assert_eq!(
        f(
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: x, close\r\n\r\n",
            false
        ),
        (Framing::Length(0), false)
    );
    assert_eq!(
        f(b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n", false),
        (Framing::Length(0), false)
    );
    assert_eq!(
        f(
            b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\nconnection: keep-alive\r\n\r\n",
            false
        ),
        (Framing::Length(0), true)
    );
}

#[test]
fn content_length_must_be_one_decimal_number() {
    for bad in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\ncontent-length: 3, 4\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: +3\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 0x3\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: \r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n",
    ] {
        assert_eq!(
            head(bad).unwrap_err(),
            Invalid::ContentLength,
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    // A response without a body is not refused for its Content-Length.
    let h = parse_response(
        &mut BytesMut::from(&b"HTTP/1.1 204 No Content\r\ncontent-length: 3, 4\r\n\r\n"[..]),
        false,
        &mut Vec::new(),
    )
    .unwrap()
    .unwrap();
    assert_eq!(h.framing, Framing::Empty);
    // The same value repeated is one length.
    let h = complete(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 3, 3\r\n\r\n");
    assert_eq!(h.framing, Framing::Length(3));
}

#[test]
fn folded_fields_bare_lf_and_bad_status_lines_are_refused() {
    for bad in [
        &b"HTTP/1.1 200 OK\r\nx-a: one\r\n two\r\ncontent-length: 0\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nx-a: one\r\n\ttwo\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 0\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/2.0 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx a: b\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx-a: b\x00c\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx-a : b\r\n\r\n",
    ] {
        assert!(
            matches!(head(bad), Err(Invalid::Head(_))),
            "{:?} for {}",
            head(bad),
            String::from_utf8_lossy(bad)
        );
    }
}

/// Decodes `input` fed in pieces of `step` bytes; the data, the trailers, or the error.
fn decode_in_steps(
    input: &[u8],
    step: usize,
) -> Result<(Vec<u8>, Option<HeaderMap>, usize), Invalid> {
    let mut c = Chunked::new();
    let mut buf = BytesMut::new();
    let mut data = Vec::new();
    let mut fed = 0;
    loop {
        match c.decode(&mut buf, 7)? {
            Decoded::Data(d) => data.extend_from_slice(&d),
            Decoded::End(t) => return Ok((data, t, buf.len() + input.len() - fed)),
            Decoded::More if fed == input.len() => return Err(Invalid::Chunk("incomplete")),
            Decoded::More => {
                let n = step.min(input.len() - fed);
                buf.extend_from_slice(&input[fed..fed + n]);
                fed += n;
            }
        }
    }
}

#[test]
fn chunked_bodies_decode_the_same_however_they_arrive() {
    let body = b"5\r\nhello\r\n1;ext=\"v\" \r\n,\r\nA \r\n0123456789\r\n0\r\n\r\nNEXT";
    for step in [1, 2, 3, 5, 8, 100] {
        let (data, trailers, rest) = decode_in_steps(body, step).unwrap();
        assert_eq!(data, b"hello,0123456789", "step {step}");
        assert_eq!(trailers, None);
        assert_eq!(rest, 4, "what follows the body stays unread");
    }
}

#[test]
fn trailers_are_parsed() {
    let body = b"3\r\nabc\r\n0\r\nx-checksum: 42\r\nx-other: y\r\n\r\n";
    for step in [1, 4, 100] {
        let (data, trailers, rest) = decode_in_steps(body, step).unwrap();
        assert_eq!(data, b"abc");
        let t = trailers.unwrap();
        assert_eq!(t["x-checksum"], "42");
        assert_eq!(t["x-other"], "y");
        assert_eq!(rest, 0);
    }
}

#[test]
fn malformed_chunks_are_refused() {
    for bad in [
        &b"g\r\nx\r\n0\r\n\r\n"[..],
        b"\r\n",
        b"-1\r\nx\r\n0\r\n\r\n",
        b"+1\r\nx\r\n0\r\n\r\n",
        b"0x1\r\nx\r\n0\r\n\r\n",
        b"1 1\r\nx\r\n0\r\n\r\n",
        b"11111111111111111\r\n",
        b"1\nx\r\n0\r\n\r\n",
        b"1\r\nx\n0\r\n\r\n",
        b"1\r\nxy\r\n0\r\n\r\n",
        b"1;a\nx\r\n0\r\n\r\n",
        b"0\r\nx-a: b\n\r\n",
        b"0\r\nx-a: b\r\n c\r\n\r\n",
        b"0\r\nx\r\n",
    ] {
        for step in [1, 100] {
            assert!(
                matches!(decode_in_steps(bad, step), Err(Invalid::Chunk(_))),
                "{:?} for {} (step {step})",
                decode_in_steps(bad, step),
                String::from_utf8_lossy(bad)
            );
        }
    }
    // The largest size that fits in 64 bits is a size; more digits are not.
    let mut c = Chunked::new();
    let mut buf = BytesMut::from(&b"ffffffffffffffff\r\nab"[..]);
    assert_eq!(
        c.decode(&mut buf, 100).unwrap(),
        Decoded::Data(Bytes::from_static(b"ab"))
    );
}

#[test]
fn chunk_extensions_are_bounded() {
    let mut body = b"1;".to_vec();
    body.resize(body.len() + MAX_CHUNK_EXTENSIONS as usize + 1, b'a');
    body.extend_from_slice(b"\r\nx\r\n0\r\n\r\n");
    assert!(matches!(
        decode_in_steps(&body, 4096),
        Err(Invalid::Chunk(_))
    ));
}

/// The one-pass scan agrees with httparse plus the bare-LF rule (weir's scan before it)
/// on a set of heads, every prefix of each, and every head one byte away from them (a
/// byte replaced by, or inserted as, one of the bytes the rules turn on, or deleted).
#[test]
fn the_head_scan_agrees_with_httparse_and_the_bare_lf_rule() {
    let heads: &[&[u8]] = &[
        b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 0\r\ndate: Fri, 04 Dec 2026 23:50:35 GMT\r\n\r\n",
        b"HTTP/1.0 404 Not Found\r\nconnection: keep-alive\r\ncontent-length: 9\r\n\r\nnot found",
        b"HTTP/1.1 204\r\n\r\n",
        b"HTTP/1.1 200 \r\nx:\r\ny: \t \r\nz:a b \t\r\n\r\n",
        b"\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 200 \xc3\xa9t\xe9\r\nx-obs: caf\xe9 \x80\xff\r\n\r\n",
        b"HTTP/1.1 301 Moved\r\nlocation: /a?b=c&d=%20\r\nset-cookie: a=b; Path=/\r\nset-cookie: c=d\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\nx: y\n\n",
        b"HTTP/1.1 200 OK\r\n folded\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nname : value\r\n\r\n",
        b"HTTP/2.0 200 OK\r\n\r\n",
        b"HTTP/1.1 99 Low\r\n\r\n",
        b"HTTP/1.1  200 OK\r\n\r\n",
    ];
    let interesting = [
        b'\r', b'\n', b' ', b'\t', b':', 0, 0x01, 0x7f, 0x80, 0xff, b'a', b'0', b'H', b'"',
    ];
    let mut checked = 0;
    for head in heads {
        for end in 0..=head.len() {
            check_head_scan(&head[..end]);
            checked += 1;
        }
        checked += crate::h1::one_byte_away(head, &interesting, check_head_scan);
    }
    // Many fields: the limit is the same.
    for n in [MAX_HEADERS - 1, MAX_HEADERS, MAX_HEADERS + 1] {
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..n {
            head.extend_from_slice(format!("f{i}: v\r\n").as_bytes());
        }
        head.extend_from_slice(b"\r\n");
        check_head_scan(&head);
        checked += 1;
    }
    assert!(checked > 10_000, "{checked}");
}

/// The eight-bytes-at-a-time run of value bytes ends where the byte-by-byte one does:
/// every byte at every place of runs of 0–24 bytes (behind a tab, a space or obs-text).
#[test]
fn a_text_run_ends_at_the_first_byte_outside_it() {
    let scalar = |bytes: &[u8]| {
        bytes
            .iter()
            .position(|&b| !(b == b'\t' || (0x20..0x7f).contains(&b) || b >= 0x80))
            .unwrap_or(bytes.len())
    };
    for fill in [b'a', b'\t', b' ', 0x80, 0xff] {
        for len in 0..=24 {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut bytes = vec![fill; len];
                    bytes[at] = b;
                    assert_eq!(text_run(&bytes), scalar(&bytes), "{bytes:?}");
                }
            }
        }
    }
}

/// The names read as bytes first are exactly the ones `HeaderName::from_bytes` gives,
/// and any other name is left to it.
#[test]
fn common_field_names_read_as_from_bytes_reads_them() {
    for name in [
        "host",
        "content-length",
        "content-type",
        "date",
        "server",
        "connection",
        "user-agent",
        "accept",
        "transfer-encoding",
    ] {
        let upper: String = name
            .split('-')
            .map(|w| w[..1].to_ascii_uppercase() + &w[1..])
            .collect::<Vec<_>>()
            .join("-");
        for n in [name.to_string(), upper, name.to_ascii_uppercase()] {
            assert_eq!(
                field_name(n.as_bytes()).unwrap(),
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                "{n}"
            );
        }
    }
    for bad in [&b""[..], b"bad name", b"x\0", b"host:", b"\xc3\xa9"] {
        assert!(field_name(bad).is_err(), "{bad:?}");
        assert!(HeaderName::from_bytes(bad).is_err(), "{bad:?}");
    }
    assert_eq!(field_name(b"X-Custom").unwrap().as_str(), "x-custom");
}
