//! Base64 (the standard alphabet, with padding) in constant time, for private keys.
//!
//! A table lookup indexed by a secret byte leaks which cache line it read, and a branch
//! on a secret byte leaks which way it went; the usual decoders do both. Here a symbol
//! and its value are mapped into each other by arithmetic on masks only, so the time
//! taken depends on the length of the input, never on its bytes. The padding at the end
//! is looked at directly: how much there is follows from the key's length, which is not
//! secret (the PEM text's length tells it anyway).

/// All ones when `a < b`, else zero (for `a`, `b` below 2^30).
#[inline(always)]
fn lt_mask(a: i32, b: i32) -> i32 {
    (a - b) >> 31
}

/// All ones when `lo <= c <= hi`, else zero.
#[inline(always)]
fn in_range(c: i32, lo: i32, hi: i32) -> i32 {
    !lt_mask(c, lo) & !lt_mask(hi, c)
}

/// The symbol for the 6-bit value `v`.
#[inline(always)]
fn symbol(v: u8) -> u8 {
    let v = i32::from(v);
    // 'A' + v, moved to 'a'.. from 26, to '0'.. from 52, to '+' at 62 and '/' at 63.
    let c = v
        + i32::from(b'A')
        + (!lt_mask(v, 26) & 6)
        + (!lt_mask(v, 52) & -75)
        + (!lt_mask(v, 62) & -15)
        + (!lt_mask(v, 63) & 3);
    c as u8
}

/// The 6-bit value of symbol `c`, or -1 when `c` is not one.
#[inline(always)]
fn value(c: u8) -> i32 {
    let c = i32::from(c);
    // Starts at -1; each matching range adds its value plus one.
    -1 + (in_range(c, i32::from(b'A'), i32::from(b'Z')) & (c - i32::from(b'A') + 1))
        + (in_range(c, i32::from(b'a'), i32::from(b'z')) & (c - i32::from(b'a') + 27))
        + (in_range(c, i32::from(b'0'), i32::from(b'9')) & (c - i32::from(b'0') + 53))
        + (in_range(c, i32::from(b'+'), i32::from(b'+')) & 63)
        + (in_range(c, i32::from(b'/'), i32::from(b'/')) & 64)
}

/// Appends the base64 text of `input` to `out`.
pub(crate) fn encode(input: &[u8], out: &mut Vec<u8>) {
    out.reserve(input.len().div_ceil(3) * 4);
    let mut chunks = input.chunks_exact(3);
    for c in &mut chunks {
        out.extend_from_slice(&[
            symbol(c[0] >> 2),
            symbol(((c[0] & 0x03) << 4) | (c[1] >> 4)),
            symbol(((c[1] & 0x0f) << 2) | (c[2] >> 6)),
            symbol(c[2] & 0x3f),
        ]);
    }
    match *chunks.remainder() {
        [a] => out.extend_from_slice(&[symbol(a >> 2), symbol((a & 0x03) << 4), b'=', b'=']),
        [a, b] => out.extend_from_slice(&[
            symbol(a >> 2),
            symbol(((a & 0x03) << 4) | (b >> 4)),
            symbol((b & 0x0f) << 2),
            b'=',
        ]),
        _ => {}
    }
}

/// Appends the bytes `input` (base64 text, a multiple of 4 symbols, padded) encodes to
/// `out`. `Err` for any other symbol, a misplaced `=` or unused bits that are not zero
/// (so that only the text [`encode`] writes decodes: one text per key); `out` then
/// holds whatever was decoded, and the caller discards it.
pub(crate) fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), ()> {
    if !input.len().is_multiple_of(4) {
        return Err(());
    }
    let pad = input
        .iter()
        .rev()
        .take(2)
        .take_while(|&&c| c == b'=')
        .count();
    let body = &input[..input.len() - pad];
    out.reserve(body.len() * 3 / 4);
    // Any invalid symbol or nonzero unused bit sets bits here; checked once, at the end.
    let mut bad: i32 = 0;
    let mut chunks = body.chunks_exact(4);
    for c in &mut chunks {
        let (a, b, x, y) = (value(c[0]), value(c[1]), value(c[2]), value(c[3]));
        bad |= a | b | x | y;
        out.extend_from_slice(&[
            ((a << 2) | (b >> 4)) as u8,
            ((b << 4) | (x >> 2)) as u8,
            ((x << 6) | y) as u8,
        ]);
    }
    match *chunks.remainder() {
        [a, b] => {
            let (a, b) = (value(a), value(b));
            bad |= a | b | ((b & 0x0f) * 0x0100_0000);
            out.push(((a << 2) | (b >> 4)) as u8);
        }
        [a, b, x] => {
            let (a, b, x) = (value(a), value(b), value(x));
            bad |= a | b | x | ((x & 0x03) * 0x0100_0000);
            out.extend_from_slice(&[((a << 2) | (b >> 4)) as u8, ((b << 4) | (x >> 2)) as u8]);
        }
        [] => {}
        _ => return Err(()),
    }
    // A value is -1 (all bits) when invalid, so the sign bit; unused bits set bit 24+.
    if bad & !0x3f == 0 { Ok(()) } else { Err(()) }
}

/// Whether `a` and `b` hold the same bytes, in time that depends on their length only.
pub(crate) fn equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    const STD: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

    /// A small deterministic generator (xorshift), so that the test reads the same
    /// inputs every run.
    fn bytes(seed: &mut u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                *seed as u8
            })
            .collect()
    }

    #[test]
    fn every_symbol_and_value_maps_as_the_alphabet_says() {
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for (v, &c) in alphabet.iter().enumerate() {
            assert_eq!(symbol(v as u8), c, "value {v}");
            assert_eq!(value(c), v as i32, "symbol {}", c as char);
        }
        for c in 0..=255u8 {
            if !alphabet.contains(&c) {
                assert_eq!(value(c), -1, "byte {c}");
            }
        }
    }

    #[test]
    fn encodes_and_decodes_as_the_base64_crate_does() {
        let mut seed = 0x9e37_79b9_7f4a_7c15;
        for len in (0..70).chain([138, 1218, 1190]) {
            for _ in 0..20 {
                let raw = bytes(&mut seed, len);
                let mut text = Vec::new();
                encode(&raw, &mut text);
                assert_eq!(text, STD.encode(&raw).into_bytes(), "{raw:?}");
                let mut back = Vec::new();
                decode(&text, &mut back).unwrap();
                assert_eq!(back, raw);
            }
        }
    }

    #[test]
    fn refuses_what_it_would_not_write() {
        let mut out = Vec::new();
        for bad in [
            &b"QUJD!"[..],   // not a multiple of 4
            b"QU!D",         // not a symbol
            b"QU\nD",        // a line break
            b"Q===",         // too much padding
            b"QQ=A",         // padding inside
            b"=QUJ",         // padding first
            b"QR==",         // unused bits set (QQ== is canonical)
            b"QUK=",         // unused bits set (QUI= is canonical)
            b"QUJD\0\0\0\0", // NUL bytes
        ] {
            assert!(
                decode(bad, &mut out).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // What the crate accepts with its default (strict) settings, this accepts.
        let mut seed = 7;
        for _ in 0..2000 {
            let text = bytes(&mut seed, 8)
                .into_iter()
                .map(|b| b"AQ/+=z9a"[usize::from(b % 8)])
                .collect::<Vec<u8>>();
            let mut mine = Vec::new();
            let ours = decode(&text, &mut mine).map(|()| mine);
            assert_eq!(
                ours.ok(),
                STD.decode(&text).ok(),
                "{:?}",
                String::from_utf8_lossy(&text)
            );
        }
    }

    #[test]
    fn equal_compares_bytes() {
        assert!(equal(b"abc", b"abc"));
        assert!(!equal(b"abc", b"abd"));
        assert!(!equal(b"abc", b"ab"));
        assert!(equal(b"", b""));
    }
}
