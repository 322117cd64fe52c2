//! HPACK tests: the examples of RFC 7541 Appendix C, every decoding error, Huffman round
//! trips, encoder → decoder round trips over random header lists, and the fuzz target's
//! checks over pseudo-random inputs.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};

use super::decoder::read_int;
use super::encoder::write_int;
use super::{DecodeError, Decoder, Encoder, Header, Name, Pseudo, huffman};

include!("fuzz_check.rs");

/// Bytes from a hex dump (spaces and line breaks ignored).
fn hex(s: &str) -> Bytes {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    assert!(digits.len().is_multiple_of(2));
    digits
        .chunks(2)
        .map(|d| u8::from_str_radix(std::str::from_utf8(d).unwrap(), 16).unwrap())
        .collect::<Vec<u8>>()
        .into()
}

/// Decodes a block into (name, value, sensitive) triples.
fn decode(
    decoder: &mut Decoder,
    block: &Bytes,
) -> Result<Vec<(String, String, bool)>, DecodeError> {
    let mut out = Vec::new();
    decoder.decode(block, usize::MAX, |h| {
        out.push((
            h.name.as_str().to_owned(),
            String::from_utf8(h.value.to_vec()).unwrap(),
            h.sensitive,
        ));
    })?;
    Ok(out)
}

fn fields(list: &[(&str, &str)]) -> Vec<(String, String, bool)> {
    list.iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned(), false))
        .collect()
}

/// The dynamic table, newest first, and its size.
fn table(decoder: &Decoder) -> (Vec<(String, String)>, usize) {
    let entries = (0..decoder.table_len())
        .map(|i| {
            let (n, v) = decoder.table_entry(i).unwrap();
            (
                n.as_str().to_owned(),
                String::from_utf8(v.to_vec()).unwrap(),
            )
        })
        .collect();
    (entries, decoder.table_size())
}

fn entries(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

// --- C.1: integers -------------------------------------------------------------------------

#[test]
fn c1_integers() {
    for (value, prefix, bytes) in [
        (10, 5, &[0x0a][..]),
        (1337, 5, &[0x1f, 0x9a, 0x0a][..]),
        (42, 8, &[0x2a][..]),
    ] {
        let mut out = Vec::new();
        write_int(&mut out, 0, prefix, value);
        assert_eq!(out, bytes, "{value} on {prefix} bits");
        let mut pos = 0;
        assert_eq!(read_int(bytes, &mut pos, prefix), Ok(value));
        assert_eq!(pos, bytes.len());
    }
    // The bits above the prefix are the caller's.
    let mut pos = 0;
    assert_eq!(read_int(&[0xea], &mut pos, 5), Ok(10));
}

#[test]
fn integers_round_trip_at_every_prefix() {
    for prefix in 1..=8 {
        for value in [
            0,
            1,
            30,
            31,
            32,
            126,
            127,
            128,
            255,
            256,
            16_383,
            16_384,
            1 << 21,
        ]
        .into_iter()
        .chain([u32::MAX as usize - 1, u32::MAX as usize])
        {
            let mut out = Vec::new();
            write_int(&mut out, 0, prefix, value);
            let mut pos = 0;
            assert_eq!(read_int(&out, &mut pos, prefix), Ok(value));
            assert_eq!(pos, out.len());
        }
    }
}

// --- C.2: single representations ----------------------------------------------------------

#[test]
fn c2_1_literal_with_indexing() {
    let mut d = Decoder::new(4096);
    let block = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
    assert_eq!(
        decode(&mut d, &block).unwrap(),
        fields(&[("custom-key", "custom-header")])
    );
    assert_eq!(table(&d), (entries(&[("custom-key", "custom-header")]), 55));
}

#[test]
fn c2_2_literal_without_indexing() {
    let mut d = Decoder::new(4096);
    let block = hex("040c 2f73 616d 706c 652f 7061 7468");
    assert_eq!(
        decode(&mut d, &block).unwrap(),
        fields(&[(":path", "/sample/path")])
    );
    assert_eq!(table(&d), (vec![], 0));
}

#[test]
fn c2_3_literal_never_indexed() {
    let mut d = Decoder::new(4096);
    let block = hex("1008 7061 7373 776f 7264 0673 6563 7265 74");
    assert_eq!(
        decode(&mut d, &block).unwrap(),
        vec![("password".to_owned(), "secret".to_owned(), true)]
    );
    assert_eq!(table(&d), (vec![], 0));
}

#[test]
fn c2_4_indexed() {
    let mut d = Decoder::new(4096);
    assert_eq!(
        decode(&mut d, &hex("82")).unwrap(),
        fields(&[(":method", "GET")])
    );
    assert_eq!(table(&d), (vec![], 0));
}

// --- C.3 / C.4: requests -------------------------------------------------------------------

fn requests(blocks: [&str; 3]) {
    let mut d = Decoder::new(4096);
    assert_eq!(
        decode(&mut d, &hex(blocks[0])).unwrap(),
        fields(&[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "www.example.com"),
        ])
    );
    assert_eq!(
        table(&d),
        (entries(&[(":authority", "www.example.com")]), 57)
    );

    assert_eq!(
        decode(&mut d, &hex(blocks[1])).unwrap(),
        fields(&[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "www.example.com"),
            ("cache-control", "no-cache"),
        ])
    );
    assert_eq!(
        table(&d),
        (
            entries(&[
                ("cache-control", "no-cache"),
                (":authority", "www.example.com")
            ]),
            110
        )
    );

    assert_eq!(
        decode(&mut d, &hex(blocks[2])).unwrap(),
        fields(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/index.html"),
            (":authority", "www.example.com"),
            ("custom-key", "custom-value"),
        ])
    );
    assert_eq!(
        table(&d),
        (
            entries(&[
                ("custom-key", "custom-value"),
                ("cache-control", "no-cache"),
                (":authority", "www.example.com"),
            ]),
            164
        )
    );
}

const C3: [&str; 3] = [
    "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
    "8286 84be 5808 6e6f 2d63 6163 6865",
    "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
];

const C4: [&str; 3] = [
    "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
    "8286 84be 5886 a8eb 1064 9cbf",
    "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
];

#[test]
fn c3_requests_without_huffman() {
    requests(C3);
}

#[test]
fn c4_requests_with_huffman() {
    requests(C4);
}

// --- C.5 / C.6: responses, table size 256 ----------------------------------------------------

const DATE_21: &str = "Mon, 21 Oct 2013 20:13:21 GMT";
const DATE_22: &str = "Mon, 21 Oct 2013 20:13:22 GMT";
const LOCATION: &str = "https://www.example.com";
const COOKIE: &str = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";

fn responses(blocks: [&str; 3]) {
    let mut d = Decoder::new(256);
    assert_eq!(
        decode(&mut d, &hex(blocks[0])).unwrap(),
        fields(&[
            (":status", "302"),
            ("cache-control", "private"),
            ("date", DATE_21),
            ("location", LOCATION),
        ])
    );
    assert_eq!(
        table(&d),
        (
            entries(&[
                ("location", LOCATION),
                ("date", DATE_21),
                ("cache-control", "private"),
                (":status", "302"),
            ]),
            222
        )
    );

    assert_eq!(
        decode(&mut d, &hex(blocks[1])).unwrap(),
        fields(&[
            (":status", "307"),
            ("cache-control", "private"),
            ("date", DATE_21),
            ("location", LOCATION),
        ])
    );
    assert_eq!(
        table(&d),
        (
            entries(&[
                (":status", "307"),
                ("location", LOCATION),
                ("date", DATE_21),
                ("cache-control", "private"),
            ]),
            222
        )
    );

    assert_eq!(
        decode(&mut d, &hex(blocks[2])).unwrap(),
        fields(&[
            (":status", "200"),
            ("cache-control", "private"),
            ("date", DATE_22),
            ("location", LOCATION),
            ("content-encoding", "gzip"),
            ("set-cookie", COOKIE),
        ])
    );
    assert_eq!(
        table(&d),
        (
            entries(&[
                ("set-cookie", COOKIE),
                ("content-encoding", "gzip"),
                ("date", DATE_22),
            ]),
            215
        )
    );
}

const C5: [&str; 3] = [
    "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
     2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
     6c65 2e63 6f6d",
    "4803 3330 37c1 c0bf",
    "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
     54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
     5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
     3d31",
];

const C6: [&str; 3] = [
    "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
     2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
    "4883 640e ffc1 c0bf",
    "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
     77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
     9587 3160 65c0 03ed 4ee5 b106 3d50 07",
];

#[test]
fn c5_responses_without_huffman() {
    responses(C5);
}

#[test]
fn c6_responses_with_huffman() {
    responses(C6);
}

// --- The encoder against the RFC's bytes ------------------------------------------------

fn value(s: &'static str) -> HeaderValue {
    HeaderValue::from_static(s)
}

#[test]
fn encoder_writes_c6_responses() {
    // Table size 256, as in C.6: the first block starts with the size update (3f e1 01).
    let mut e = Encoder::new();
    e.set_max_table_size(256);
    let mut out = Vec::new();
    e.begin(&mut out);
    assert_eq!(out, [0x3f, 0xe1, 0x01]);
    out.clear();
    e.status(StatusCode::FOUND, &mut out);
    e.field(&http::header::CACHE_CONTROL, &value("private"), &mut out);
    e.field(&http::header::DATE, &value(DATE_21), &mut out);
    e.field(&http::header::LOCATION, &value(LOCATION), &mut out);
    assert_eq!(out, hex(C6[0]));
    assert_eq!(e.table_size(), 222);

    out.clear();
    e.begin(&mut out);
    e.status(StatusCode::TEMPORARY_REDIRECT, &mut out);
    e.field(&http::header::CACHE_CONTROL, &value("private"), &mut out);
    e.field(&http::header::DATE, &value(DATE_21), &mut out);
    e.field(&http::header::LOCATION, &value(LOCATION), &mut out);
    // The RFC Huffman-codes "307" (3 bytes either way); the encoder keeps a string plain
    // unless coding makes it shorter.
    assert_eq!(out, hex("4803 3330 37c1 c0bf"));

    out.clear();
    e.begin(&mut out);
    e.status(StatusCode::OK, &mut out);
    e.field(&http::header::CACHE_CONTROL, &value("private"), &mut out);
    e.field(&http::header::DATE, &value(DATE_22), &mut out);
    e.field(&http::header::LOCATION, &value(LOCATION), &mut out);
    e.field(&http::header::CONTENT_ENCODING, &value("gzip"), &mut out);
    e.field(&http::header::SET_COOKIE, &value(COOKIE), &mut out);
    assert_eq!(out, hex(C6[2]));
    assert_eq!(e.table_size(), 215);
    e.check_invariants();
}

#[test]
fn encoder_writes_c4_literals() {
    let mut e = Encoder::new();
    let mut out = Vec::new();
    e.field(&http::header::CACHE_CONTROL, &value("no-cache"), &mut out);
    assert_eq!(out, hex("5886 a8eb 1064 9cbf"));
    out.clear();
    let custom = HeaderName::from_static("custom-key");
    e.field(&custom, &value("custom-value"), &mut out);
    assert_eq!(
        out,
        hex("4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf")
    );
    // Both are now one byte: custom-key is index 62, cache-control 63.
    out.clear();
    e.field(&custom, &value("custom-value"), &mut out);
    e.field(&http::header::CACHE_CONTROL, &value("no-cache"), &mut out);
    assert_eq!(out, [0xbe, 0xbf]);
    // A new value of a dynamic name refers to the name (index 62).
    out.clear();
    e.field(&custom, &value("other"), &mut out);
    assert_eq!(out[0], 0x40 | 62);
}

#[test]
fn encoder_static_matches_and_representations() {
    let mut e = Encoder::new();
    let mut out = Vec::new();
    // Full static matches: one byte.
    e.field(
        &http::header::ACCEPT_ENCODING,
        &value("gzip, deflate"),
        &mut out,
    );
    e.field(&http::header::AGE, &value(""), &mut out);
    for (code, byte) in [
        (200, 0x88),
        (204, 0x89),
        (206, 0x8a),
        (304, 0x8b),
        (400, 0x8c),
        (404, 0x8d),
        (500, 0x8e),
    ] {
        e.status(StatusCode::from_u16(code).unwrap(), &mut out);
        assert_eq!(out.last(), Some(&byte));
    }
    assert_eq!(out, [0x90, 0x95, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e]);
    assert_eq!(e.table_len(), 0);

    // Another status: literal with indexing, name index 8; then indexed.
    out.clear();
    e.status(StatusCode::CREATED, &mut out);
    assert_eq!(out[0], 0x48);
    out.clear();
    e.status(StatusCode::CREATED, &mut out);
    assert_eq!(out, [0xbe]);

    // A sensitive value: never indexed, and not added even when repeated.
    let mut secret = value("secret-token");
    secret.set_sensitive(true);
    out.clear();
    e.field(&http::header::AUTHORIZATION, &secret, &mut out);
    assert_eq!(out[0], 0x10 | 0x0f);
    assert_eq!(out[1], 23 - 15);
    let len = out.len();
    e.field(&http::header::AUTHORIZATION, &secret, &mut out);
    assert_eq!(out.len(), 2 * len);
    assert_eq!(e.table_len(), 1);

    // Larger than half the table: without indexing.
    let big = HeaderValue::from_bytes(&[b'z'; 3000]).unwrap();
    out.clear();
    e.field(&http::header::SERVER, &big, &mut out);
    assert_eq!(out[0], 0x0f);
    assert_eq!(e.table_len(), 1);
    e.check_invariants();

    let mut d = Decoder::new(4096);
    let mut got = Vec::new();
    d.decode(&Bytes::from(out), usize::MAX, |h| got.push(h))
        .unwrap();
    assert_eq!(got[0].value.len(), 3000);
}

#[test]
fn encoder_size_updates() {
    let mut e = Encoder::new();
    let mut out = Vec::new();
    // No change, no update.
    e.set_max_table_size(4096);
    e.set_max_table_size(65_536);
    e.begin(&mut out);
    assert!(out.is_empty());

    e.field(&http::header::SERVER, &value("weir"), &mut out);
    assert_eq!(e.table_len(), 1);
    // Down to 0 and back up before the next block: both are signalled, the table is emptied.
    e.set_max_table_size(0);
    e.set_max_table_size(8192);
    out.clear();
    e.begin(&mut out);
    assert_eq!(out, [0x20, 0x3f, 0xe1, 0x1f]);
    assert_eq!(e.table_len(), 0);
    assert_eq!(e.max_table_size(), 4096);
    // Nothing pending any more.
    out.clear();
    e.begin(&mut out);
    assert!(out.is_empty());
    // One change.
    e.set_max_table_size(100);
    e.begin(&mut out);
    assert_eq!(out, [0x3f, 100 - 31]);
    assert_eq!(e.max_table_size(), 100);
}

// --- Huffman -------------------------------------------------------------------------------

fn huffman_round_trip(s: &[u8]) {
    let mut coded = Vec::new();
    huffman::encode(s, &mut coded);
    assert_eq!(coded.len(), huffman::encoded_len(s));
    let mut back = Vec::new();
    huffman::decode(&coded, &mut back).unwrap();
    assert_eq!(back, s);
}

#[test]
fn huffman_rfc_strings() {
    for (text, coded) in [
        ("www.example.com", "f1e3 c2e5 f23a 6ba0 ab90 f4ff"),
        ("no-cache", "a8eb 1064 9cbf"),
        ("custom-key", "25a8 49e9 5ba9 7d7f"),
        ("custom-value", "25a8 49e9 5bb8 e8b4 bf"),
        ("302", "6402"),
        ("private", "aec3 771a 4b"),
        ("gzip", "9bd9 ab"),
    ] {
        let mut out = Vec::new();
        huffman::encode(text.as_bytes(), &mut out);
        assert_eq!(out, hex(coded), "{text}");
        let mut back = Vec::new();
        huffman::decode(&out, &mut back).unwrap();
        assert_eq!(back, text.as_bytes());
    }
}

#[test]
fn huffman_code_is_complete_and_prefix_free() {
    // Kraft's sum of a complete code is exactly 1 (in units of 2^-30).
    let sum: u64 = (0..257).map(|s| 1u64 << (30 - huffman::code(s).0)).sum();
    assert_eq!(sum, 1 << 30);
    assert_eq!(huffman::code(256), (30, 0x3fff_ffff));
}

#[test]
fn huffman_every_byte() {
    for b in 0..=255u8 {
        huffman_round_trip(&[b]);
        huffman_round_trip(&[b, b, b]);
    }
    let all: Vec<u8> = (0..=255).collect();
    huffman_round_trip(&all);
    let reversed: Vec<u8> = (0..=255).rev().collect();
    huffman_round_trip(&reversed);
    huffman_round_trip(b"");
}

#[test]
fn huffman_random_strings() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..5000 {
        let len = rng.below(64);
        let s: Vec<u8> = (0..len)
            .map(|_| {
                if rng.below(4) == 0 {
                    rng.next() as u8
                } else {
                    b' ' + rng.below(95) as u8
                }
            })
            .collect();
        huffman_round_trip(&s);
    }
}

#[test]
fn huffman_rejects_bad_padding_and_eos() {
    let mut out = Vec::new();
    // 'a' is 00011: padded with 111 it is fine, with 000 or 101 it is not.
    assert_eq!(huffman::decode(&[0x1f], &mut out), Ok(()));
    assert_eq!(out, b"a");
    assert!(huffman::decode(&[0x18], &mut out).is_err());
    assert!(huffman::decode(&[0x1d], &mut out).is_err());
    // Eight 1 bits of padding (a whole byte of padding) is too long.
    assert!(huffman::decode(&[0xff], &mut out).is_err());
    assert!(huffman::decode(&[0x1f, 0xff], &mut out).is_err());
    // EOS (thirty 1 bits) inside the string.
    assert!(huffman::decode(&[0xff, 0xff, 0xff, 0xff], &mut out).is_err());
    assert!(huffman::decode(&[0xff, 0xff, 0xff, 0xfc], &mut out).is_err());
    // A code cut short is not padding: 11111110 starts 10-bit codes only.
    assert!(huffman::decode(&[0xfe], &mut out).is_err());
    // The output is untouched by a failure.
    assert_eq!(out, b"a");
}

// --- Decoding errors -------------------------------------------------------------------------

fn error_of(decoder: &mut Decoder, block: &[u8]) -> DecodeError {
    decoder
        .decode(&Bytes::copy_from_slice(block), usize::MAX, |_| {})
        .unwrap_err()
}

#[test]
fn decode_errors() {
    let new = || Decoder::new(4096);
    for block in [
        &[0x40][..],                   // a new name expected
        &[0x41][..],                   // a value expected
        &[0x41, 0x05, b'a'][..],       // a value shorter than its length
        &[0x40, 0x03, b'a', b'b'][..], // a name shorter than its length
        &[0xff][..],                   // an integer that does not end
        &[0xff, 0x80][..],
        &[0x3f][..],                   // a size update that does not end
        &[0x41, 0xff, 0xff, 0x01][..], // a length past the end
    ] {
        assert_eq!(
            error_of(&mut new(), block),
            DecodeError::Truncated,
            "{block:02x?}"
        );
    }
    for block in [
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0x0f][..], // 2^32 + 126
        &[0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00][..], // 6 continuation bytes
        &[0x7f, 0xff, 0xff, 0xff, 0xff, 0x7f][..],
    ] {
        assert_eq!(
            error_of(&mut new(), block),
            DecodeError::IntegerOverflow,
            "{block:02x?}"
        );
    }
    // The largest 32-bit index is read, and is out of range.
    assert_eq!(
        error_of(&mut new(), &[0xff, 0x80, 0xff, 0xff, 0xff, 0x0f]),
        DecodeError::BadIndex
    );
    for block in [
        &[0x80][..],             // index 0
        &[0xbe][..],             // 62: the dynamic table is empty
        &[0x7e, 0x01, b'x'][..], // a name at 62
        &[0x0f, 0x2f, 0x01, b'x'][..],
    ] {
        assert_eq!(
            error_of(&mut new(), block),
            DecodeError::BadIndex,
            "{block:02x?}"
        );
    }
    for block in [
        &[0x41, 0x81, 0xff][..], // padding of 8 bits
        &[0x41, 0x81, 0x18][..], // padding of 0 bits
        &[0x40, 0x81, 0x18, 0x00][..],
        &[0x41, 0x84, 0xff, 0xff, 0xff, 0xff][..], // EOS
    ] {
        assert_eq!(
            error_of(&mut new(), block),
            DecodeError::BadHuffman,
            "{block:02x?}"
        );
    }
    // 4097 > 4096.
    assert_eq!(
        error_of(&mut new(), &[0x3f, 0xe2, 0x1f]),
        DecodeError::TableSizeUpdateTooLarge
    );
    assert_eq!(
        error_of(&mut Decoder::new(0), &[0x21]),
        DecodeError::TableSizeUpdateTooLarge
    );
    assert_eq!(
        error_of(&mut new(), &[0x82, 0x20]),
        DecodeError::TableSizeUpdateNotFirst
    );
    assert_eq!(
        error_of(&mut new(), &[0x20, 0x82, 0x3f, 0xe1, 0x1f]),
        DecodeError::TableSizeUpdateNotFirst
    );
    for name in [
        &b"Custom"[..],
        b"",
        b"a b",
        b"a:b",
        b"x\x00",
        b"\xc3\xa9",
        b"(x)",
        b":foo",
        b":",
        b":Path",
        b":path ",
    ] {
        for kind in [0x00, 0x10, 0x40] {
            let mut block = vec![kind, name.len() as u8];
            block.extend_from_slice(name);
            block.extend_from_slice(&[0x01, b'v']);
            assert_eq!(
                error_of(&mut new(), &block),
                DecodeError::InvalidName,
                "{name:?}"
            );
        }
        // Huffman-coded too.
        let mut block = vec![0x40];
        super::encoder::write_string(&mut block, name);
        block.push(0x00);
        assert_eq!(
            error_of(&mut new(), &block),
            DecodeError::InvalidName,
            "{name:?}"
        );
    }
    assert!(DecodeError::InvalidName.is_connection_error());
    assert!(!DecodeError::ListTooLarge.is_connection_error());
    assert_eq!(
        DecodeError::ListTooLarge.to_string(),
        "header list larger than SETTINGS_MAX_HEADER_LIST_SIZE"
    );
}

#[test]
fn valid_names_and_pseudo_headers() {
    let mut d = Decoder::new(4096);
    let mut block = Vec::new();
    for name in [
        &b"x-custom_1.2"[..],
        b"!#$%&'*+-.^_`|~09az",
        b":authority",
        b":method",
        b":path",
        b":scheme",
        b":status",
        b":protocol",
        b"content-type",
    ] {
        block.push(0x00);
        super::encoder::write_string(&mut block, name);
        block.extend_from_slice(&[0x01, b'v']);
    }
    let mut got = Vec::new();
    d.decode(&Bytes::from(block), usize::MAX, |h| got.push(h.name))
        .unwrap();
    assert_eq!(got[2], Name::Pseudo(Pseudo::Authority));
    assert_eq!(got[7], Name::Pseudo(Pseudo::Protocol));
    assert_eq!(got[8], Name::Field(http::header::CONTENT_TYPE));
    assert_eq!(got[1].as_str(), "!#$%&'*+-.^_`|~09az");
}

#[test]
fn size_updates_and_eviction() {
    let mut d = Decoder::new(4096);
    // Several updates in a row at the start are fine.
    decode(&mut d, &hex("20 3fe11f 82")).unwrap();
    assert_eq!(d.max_table_size(), 4096);
    decode(&mut d, &hex(C3[0])).unwrap();
    decode(&mut d, &hex(C3[1])).unwrap();
    assert_eq!(d.table_size(), 110);
    // Down to 60: the oldest entry (:authority, 57) goes, then everything.
    decode(&mut d, &hex("3f1d")).unwrap();
    assert_eq!(table(&d), (entries(&[("cache-control", "no-cache")]), 53));
    decode(&mut d, &hex("20")).unwrap();
    assert_eq!(table(&d), (vec![], 0));
    // With a maximum of 0 nothing is added; an entry larger than the table empties it.
    decode(&mut d, &hex("4102 6869")).unwrap();
    assert_eq!(d.table_len(), 0);
    decode(&mut d, &hex("3f1d 4102 6869")).unwrap();
    assert_eq!(table(&d), (entries(&[(":authority", "hi")]), 44));
    let mut block = hex("4160").to_vec();
    block.extend_from_slice(&[b'a'; 0x60]);
    decode(&mut d, &Bytes::from(block)).unwrap();
    assert_eq!(table(&d), (vec![], 0));
}

#[test]
fn literal_name_of_an_entry_it_evicts() {
    // RFC 7541 §4.4: the name is taken before the entry it comes from is evicted.
    let mut d = Decoder::new(60);
    decode(&mut d, &hex("400a 6375 7374 6f6d 2d6b 6579 0178")).unwrap(); // custom-key: x (43)
    let block = hex("7e 0f 7979 7979 7979 7979 7979 7979 7979 79"); // name 62, 15 bytes of y
    assert_eq!(
        decode(&mut d, &block).unwrap(),
        fields(&[("custom-key", "yyyyyyyyyyyyyyy")])
    );
    assert_eq!(
        table(&d),
        (entries(&[("custom-key", "yyyyyyyyyyyyyyy")]), 57)
    );
}

#[test]
fn plain_values_are_slices_of_the_block() {
    let mut d = Decoder::new(4096);
    decode(&mut d, &hex(C3[0])).unwrap();
    decode(&mut d, &hex(C3[1])).unwrap();
    let block = hex(C3[2]);
    let range = block.as_ptr_range();
    let mut values = Vec::new();
    d.decode(&block, usize::MAX, |h| values.push(h.value))
        .unwrap();
    // custom-value, a plain literal, points into the block...
    assert!(range.contains(&values[4].as_ptr()));
    // ...but the table keeps its own copy.
    let (_, stored) = d.table_entry(0).unwrap();
    assert_eq!(stored, "custom-value");
    assert!(!range.contains(&stored.as_ptr()));
}

#[test]
fn list_too_large_keeps_the_table_in_step() {
    let mut d = Decoder::new(4096);
    // C.3.3 after C.3.1/2: 5 fields of 42 + 44 + 48 + 57 + 54 bytes.
    decode(&mut d, &hex(C3[0])).unwrap();
    decode(&mut d, &hex(C3[1])).unwrap();
    let mut got = Vec::new();
    let result = d.decode(&hex(C3[2]), 150, |h| got.push(h.name.as_str().to_owned()));
    assert_eq!(result, Err(DecodeError::ListTooLarge));
    assert_eq!(got, [":method", ":scheme", ":path"]);
    // custom-key was still added.
    assert_eq!(d.table_len(), 3);
    assert_eq!(d.table_size(), 164);
    // The next block uses it.
    assert_eq!(
        decode(&mut d, &hex("82 87 85 c0 be")).unwrap(),
        fields(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/index.html"),
            (":authority", "www.example.com"),
            ("custom-key", "custom-value"),
        ])
    );
    // A limit the block fits exactly.
    let block = hex("82 87 85 c0 be");
    assert_eq!(d.decode(&block, 42 + 44 + 48 + 57 + 54, |_| {}), Ok(()));
    assert_eq!(
        d.decode(&block, 42 + 44 + 48 + 57 + 53, |_| {}),
        Err(DecodeError::ListTooLarge)
    );
    // A connection error after the limit wins over it.
    assert_eq!(
        d.decode(&hex("82 80"), 10, |_| {}),
        Err(DecodeError::BadIndex)
    );
}

// --- Encoder → decoder -----------------------------------------------------------------------

/// xorshift64*: deterministic test randomness without dependencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const NAMES: [&str; 16] = [
    "content-type",
    "content-length",
    "date",
    "server",
    "cache-control",
    "set-cookie",
    "vary",
    "etag",
    "x-request-id",
    "x-a",
    "x-b",
    "x-trace",
    "grpc-status",
    "grpc-message",
    "strict-transport-security",
    "access-control-allow-origin",
];

const VALUES: [&str; 10] = [
    "",
    "text/html; charset=utf-8",
    "application/json",
    "0",
    "1234",
    "weir",
    "Mon, 21 Oct 2013 20:13:21 GMT",
    "no-cache",
    "gzip",
    "*",
];

#[test]
fn encoder_decoder_round_trips() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for connection in 0..200 {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        for _ in 0..40 {
            if rng.below(8) == 0 {
                e.set_max_table_size(rng.below(5000));
                if rng.below(2) == 0 {
                    e.set_max_table_size(rng.below(5000));
                }
            }
            let mut block = Vec::new();
            e.begin(&mut block);
            let mut expected = Vec::new();
            if rng.below(4) != 0 {
                let status = StatusCode::from_u16(100 + rng.below(500) as u16).unwrap();
                e.status(status, &mut block);
                expected.push(Header {
                    name: Name::Pseudo(Pseudo::Status),
                    value: Bytes::copy_from_slice(status.as_str().as_bytes()),
                    sensitive: false,
                });
            }
            for _ in 0..rng.below(12) {
                let name = if rng.below(4) == 0 {
                    let len = 1 + rng.below(20);
                    let bytes: Vec<u8> = (0..len)
                        .map(|_| NAME_CHARS[rng.below(NAME_CHARS.len())])
                        .collect();
                    HeaderName::from_bytes(&bytes).unwrap()
                } else {
                    HeaderName::from_static(NAMES[rng.below(NAMES.len())])
                };
                let mut value = match rng.below(3) {
                    0 => {
                        let max = if rng.below(10) == 0 { 3000 } else { 40 };
                        let len = rng.below(max);
                        let bytes: Vec<u8> = (0..len)
                            .map(|_| match rng.below(8) {
                                0 => 0x80 | rng.next() as u8,
                                1 => b'\t',
                                _ => b' ' + rng.below(95) as u8,
                            })
                            .collect();
                        HeaderValue::from_bytes(&bytes).unwrap()
                    }
                    _ => HeaderValue::from_static(VALUES[rng.below(VALUES.len())]),
                };
                let sensitive = rng.below(10) == 0;
                value.set_sensitive(sensitive);
                e.field(&name, &value, &mut block);
                expected.push(Header {
                    name: Name::Field(name),
                    value: Bytes::copy_from_slice(value.as_bytes()),
                    sensitive,
                });
            }
            let block = Bytes::from(block);
            let mut got = Vec::new();
            d.decode(&block, usize::MAX, |h| got.push(h))
                .unwrap_or_else(|err| panic!("connection {connection}: {err} in {block:02x?}"));
            assert_eq!(got, expected, "connection {connection}");
            assert_eq!(e.table_size(), d.table_size());
            assert_eq!(e.table_len(), d.table_len());
            assert_eq!(e.max_table_size(), d.max_table_size());
            e.check_invariants();
        }
    }
}

#[test]
fn repeated_responses_become_indices() {
    let mut e = Encoder::new();
    let date = value("Mon, 21 Oct 2013 20:13:21 GMT");
    let fields = [
        (http::header::CONTENT_TYPE, value("application/json")),
        (http::header::CONTENT_LENGTH, value("1234")),
        (http::header::DATE, date),
        (http::header::SERVER, value("weir")),
    ];
    let mut out = Vec::new();
    for (n, v) in &fields {
        e.field(n, v, &mut out);
    }
    e.status(StatusCode::OK, &mut out);
    let first = out.len();
    out.clear();
    for (n, v) in &fields {
        e.field(n, v, &mut out);
    }
    e.status(StatusCode::OK, &mut out);
    assert_eq!(out.len(), 5, "first block {first} bytes, second {out:02x?}");
}

#[test]
fn encoder_table_churn() {
    // Many distinct entries through a small table: eviction keeps the hash tables right.
    let mut e = Encoder::new();
    let mut d = Decoder::new(4096);
    e.set_max_table_size(300);
    let mut rng = Rng(42);
    for round in 0..3000 {
        let mut block = Vec::new();
        e.begin(&mut block);
        let name = HeaderName::from_static(NAMES[rng.below(4)]);
        let v = HeaderValue::from_str(&format!("{}", rng.below(12))).unwrap();
        e.field(&name, &v, &mut block);
        let mut got = Vec::new();
        d.decode(&Bytes::from(block), usize::MAX, |h| got.push(h))
            .unwrap();
        assert_eq!(got[0].value, v.as_bytes(), "round {round}");
        if round % 97 == 0 {
            e.check_invariants();
            e.set_max_table_size(rng.below(400));
        }
    }
    e.check_invariants();
}

// --- The fuzz target's checks --------------------------------------------------------------

/// Blocks an encoder writes, to mutate into inputs that go deep into the decoder.
fn sample_blocks(rng: &mut Rng) -> Vec<u8> {
    let mut data = Vec::new();
    let mut e = Encoder::new();
    for _ in 0..1 + rng.below(3) {
        let mut block = Vec::new();
        e.begin(&mut block);
        for _ in 0..rng.below(6) {
            let name = HeaderName::from_static(NAMES[rng.below(NAMES.len())]);
            let v = HeaderValue::from_static(VALUES[rng.below(VALUES.len())]);
            e.field(&name, &v, &mut block);
        }
        block.truncate(255);
        data.push(block.len() as u8);
        data.extend_from_slice(&block);
    }
    data
}

#[test]
fn fuzz_checks_on_rfc_examples() {
    for (control, blocks) in [
        (0x04, C3),
        (0x04, C4),
        (0x00, C5),
        (0x00, C6),
        (0x64, C4),
        (0x20, C6),
    ] {
        let mut data = vec![control];
        for b in blocks {
            let b = hex(b);
            data.push(b.len() as u8);
            data.extend_from_slice(&b);
        }
        check_hpack(&data);
    }
}

#[test]
fn fuzz_checks_on_the_seed_corpus() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/hpack_decode");
    let Ok(files) = std::fs::read_dir(dir) else {
        return;
    };
    for file in files {
        check_hpack(&std::fs::read(file.unwrap().path()).unwrap());
    }
}

#[test]
fn fuzz_checks_on_random_inputs() {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    for _ in 0..20_000 {
        let mut data = vec![rng.next() as u8];
        match rng.below(3) {
            0 => {
                let len = rng.below(120);
                data.extend((0..len).map(|_| rng.next() as u8));
            }
            _ => {
                data.extend(sample_blocks(&mut rng));
                // A few mutations: overwritten, inserted or removed bytes.
                for _ in 0..rng.below(4) {
                    if data.len() < 2 {
                        break;
                    }
                    let at = 1 + rng.below(data.len() - 1);
                    match rng.below(3) {
                        0 => data[at] = rng.next() as u8,
                        1 => data.insert(at, rng.next() as u8),
                        _ => {
                            data.remove(at);
                        }
                    }
                }
            }
        }
        check_hpack(&data);
    }
}

// --- Timing (release: cargo test --release -p weir-h2 hpack_timing -- --ignored --nocapture) --

#[test]
#[ignore]
fn hpack_timing() {
    use std::time::Instant;

    // A browser's second request on a connection: 8 fields, all indexed (3 static, 5 dynamic).
    let mut d = Decoder::new(4096);
    let mut e = Encoder::new();
    let mut first = Vec::new();
    for (n, v) in [
        (
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/128.0",
        ),
        ("accept", "text/html,application/xhtml+xml"),
        ("accept-language", "en-US,en;q=0.5"),
        ("accept-encoding", "gzip, deflate, br"),
        ("cookie", "session=0123456789abcdef"),
    ] {
        e.field(
            &HeaderName::from_static(n),
            &HeaderValue::from_static(v),
            &mut first,
        );
    }
    d.decode(&Bytes::from(first), usize::MAX, |_| {}).unwrap();
    let indexed = hex("82 87 84 be bf c0 c1 c2");
    let c43 = hex(C4[2]);
    let mut d43 = Decoder::new(4096);
    decode(&mut d43, &hex(C4[0])).unwrap();
    decode(&mut d43, &hex(C4[1])).unwrap();

    let rounds = 2_000_000;
    for (label, decoder, block) in [
        ("8 indexed fields", &mut d, &indexed),
        ("C.4.3 (Huffman literal added each time)", &mut d43, &c43),
    ] {
        let mut count = 0usize;
        let start = Instant::now();
        for _ in 0..rounds {
            decoder
                .decode(std::hint::black_box(block), 16 << 10, |h| {
                    count += h.value.len();
                })
                .unwrap();
        }
        let ns = start.elapsed().as_nanos() as f64 / f64::from(rounds);
        println!("decode {label}: {ns:.1} ns/block ({count})");
    }

    // A response repeated on a connection: :status 200 and 4 fields, all indexed after the
    // first.
    let mut e = Encoder::new();
    let fields = [
        (http::header::CONTENT_TYPE, value("application/json")),
        (http::header::CONTENT_LENGTH, value("1234")),
        (http::header::DATE, value("Mon, 21 Oct 2013 20:13:21 GMT")),
        (http::header::SERVER, value("weir")),
    ];
    let mut out = Vec::with_capacity(256);
    let start = Instant::now();
    for _ in 0..rounds {
        out.clear();
        e.begin(&mut out);
        e.status(StatusCode::OK, &mut out);
        for (n, v) in &fields {
            e.field(n, v, &mut out);
        }
        std::hint::black_box(&out);
    }
    let ns = start.elapsed().as_nanos() as f64 / f64::from(rounds);
    println!("encode response of 5 indexed fields: {ns:.1} ns/block");
}
