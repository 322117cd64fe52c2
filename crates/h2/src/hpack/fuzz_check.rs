// The checks of the `hpack_decode` fuzz target, `include!`d both by
// fuzz/fuzz_targets/hpack_decode.rs and by the unit tests (which run them over pseudo-random
// inputs), so the two cannot drift apart. Only the public API is used; the includer brings
// `Bytes`, `DecodeError`, `Decoder`, `Encoder`, `Header`, `HeaderName`, `HeaderValue`, `Name`,
// `Pseudo` and `StatusCode` into scope.

/// Both checks on one input.
fn check_hpack(data: &[u8]) {
    check_decode(data);
    check_round_trip(data);
}

/// Decodes client bytes: the first byte picks the advertised table size (bit 2: 4096, else
/// 256) and the header list limit (bits 5–7: none, or 32 << (n - 1)); the rest is a sequence
/// of blocks, each a length byte and that many bytes (the last may be shorter). Two decoders
/// run side by side, one with the limit and one without: the limit may only cut a block's
/// fields short (a prefix, within the limit) and never changes the dynamic table, the other
/// errors, nor the next blocks. Names are lower-case tokens or known pseudo-headers.
fn check_decode(data: &[u8]) {
    let Some((&control, mut rest)) = data.split_first() else {
        return;
    };
    let table_size = if control & 4 != 0 { 4096 } else { 256 };
    let max_list = match control >> 5 {
        0 => usize::MAX,
        n => 16 << n,
    };
    let mut limited = Decoder::new(table_size);
    let mut free = Decoder::new(table_size);
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        let block = Bytes::copy_from_slice(&tail[..len]);
        rest = &tail[len..];

        let mut all: Vec<Header> = Vec::new();
        let whole = free.decode(&block, usize::MAX, |h| all.push(h));
        let mut kept: Vec<Header> = Vec::new();
        let cut = limited.decode(&block, max_list, |h| kept.push(h));
        assert_eq!(limited.table_size(), free.table_size());
        assert_eq!(limited.table_len(), free.table_len());
        assert_eq!(limited.max_table_size(), free.max_table_size());
        assert!(free.table_size() <= free.max_table_size());
        assert!(free.max_table_size() <= table_size);
        assert!(kept.len() <= all.len() && kept[..] == all[..kept.len()]);
        let kept_size: usize = kept.iter().map(Header::size).sum();
        assert!(kept_size <= max_list);
        for h in &all {
            match &h.name {
                Name::Pseudo(p) => assert!(p.as_str().starts_with(':')),
                Name::Field(n) => {
                    let s = n.as_str();
                    assert!(!s.is_empty());
                    assert!(s.bytes().all(|b| {
                        b.is_ascii_lowercase()
                            || b.is_ascii_digit()
                            || b"!#$%&'*+-.^_`|~".contains(&b)
                    }));
                }
            }
        }
        match whole {
            Ok(()) => {
                let total: usize = all.iter().map(Header::size).sum();
                if total <= max_list {
                    assert_eq!(cut, Ok(()));
                    assert_eq!(kept.len(), all.len());
                } else {
                    assert_eq!(cut, Err(DecodeError::ListTooLarge));
                    // The first field past the limit, and every one after it, is left out.
                    assert!(kept_size + all[kept.len()].size() > max_list);
                }
            }
            Err(e) => {
                assert_ne!(e, DecodeError::ListTooLarge);
                assert!(e.is_connection_error());
                assert_eq!(cut, Err(e));
                // A connection error ends the connection: no more blocks.
                return;
            }
        }
    }
}

/// The characters of a field name (lower-case tokens), to make names out of any bytes.
const NAME_CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~";

/// Names that are in the static table, or that a response commonly repeats.
const COMMON_NAMES: [&str; 12] = [
    "content-type",
    "content-length",
    "date",
    "server",
    "cache-control",
    "set-cookie",
    "accept-encoding",
    "vary",
    "etag",
    "x-request-id",
    "grpc-status",
    "location",
];

/// Encodes header lists made from the bytes (names made valid, values made valid field
/// values, sensitive or not, `:status` of any code, dynamic table size changes between
/// blocks) and decodes them: the decoder gives back exactly the fields, sensitivity
/// included, and both tables end each block at the same size.
fn check_round_trip(data: &[u8]) {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    let mut block = Vec::new();
    let mut expected: Vec<Header> = Vec::new();
    encoder.begin(&mut block);
    let mut rest = data;
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        match op & 7 {
            0 | 1 => {
                let got = finish_block(&mut decoder, &mut block, &mut expected);
                assert_eq!(encoder.table_size(), decoder.table_size(), "{got:?}");
                assert_eq!(encoder.table_len(), decoder.table_len());
                if op & 7 == 1 {
                    // A new SETTINGS_HEADER_TABLE_SIZE (up to 8160), sometimes twice.
                    encoder.set_max_table_size(usize::from(op >> 3) * 255);
                    if op & 0x80 != 0 {
                        let size = take(&mut rest, 1).first().copied().unwrap_or(0);
                        encoder.set_max_table_size(usize::from(size) * 20);
                    }
                }
                encoder.begin(&mut block);
            }
            2 => {
                let b = take(&mut rest, 2);
                let n = b.iter().fold(0u16, |n, &b| n << 8 | u16::from(b));
                let status = StatusCode::from_u16(100 + n % 900).unwrap();
                encoder.status(status, &mut block);
                expected.push(Header {
                    name: Name::Pseudo(Pseudo::Status),
                    value: Bytes::copy_from_slice(status.as_str().as_bytes()),
                    sensitive: false,
                });
            }
            _ => {
                let name = if op & 8 != 0 {
                    let i = take(&mut rest, 1).first().copied().unwrap_or(0);
                    HeaderName::from_static(COMMON_NAMES[usize::from(i) % COMMON_NAMES.len()])
                } else {
                    let len = 1 + usize::from(op >> 4);
                    let mut bytes = take(&mut rest, len).to_vec();
                    if bytes.is_empty() {
                        bytes.push(b'x');
                    }
                    for b in &mut bytes {
                        *b = NAME_CHARS[usize::from(*b) % NAME_CHARS.len()];
                    }
                    HeaderName::from_bytes(&bytes).unwrap()
                };
                let len = take(&mut rest, 1).first().copied().unwrap_or(0);
                let mut value = take(&mut rest, usize::from(len)).to_vec();
                for b in &mut value {
                    if !(*b == b'\t' || (0x20..0x7f).contains(b) || *b >= 0x80) {
                        *b = b'a' + *b % 26;
                    }
                }
                let mut value = HeaderValue::from_bytes(&value).unwrap();
                let sensitive = op & 0x40 != 0;
                value.set_sensitive(sensitive);
                encoder.field(&name, &value, &mut block);
                expected.push(Header {
                    name: Name::Field(name),
                    value: Bytes::copy_from_slice(value.as_bytes()),
                    sensitive,
                });
            }
        }
    }
    finish_block(&mut decoder, &mut block, &mut expected);
    assert_eq!(encoder.table_size(), decoder.table_size());
}

/// The next `n` bytes of `rest` (fewer at its end).
fn take<'a>(rest: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, tail) = rest.split_at(n.min(rest.len()));
    *rest = tail;
    head
}

/// Decodes the block written so far, checks it against the fields given to the encoder, and
/// clears both; returns the fields decoded.
fn finish_block(
    decoder: &mut Decoder,
    block: &mut Vec<u8>,
    expected: &mut Vec<Header>,
) -> Vec<Header> {
    let bytes = Bytes::from(std::mem::take(block));
    let mut got = Vec::new();
    let result = decoder.decode(&bytes, usize::MAX, |h| got.push(h));
    assert_eq!(result, Ok(()), "block {bytes:02x?}");
    assert_eq!(&got, expected, "block {bytes:02x?}");
    expected.clear();
    got
}
