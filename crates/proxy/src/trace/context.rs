//! W3C Trace Context (`traceparent`): the parser of what a client sends (untrusted
//! bytes; fuzz target `traceparent`) and the header weir sends on.

/// A `traceparent` as read: the trace, the caller's span and its flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace (never all zeros).
    pub trace_id: [u8; 16],
    /// The caller's span (never all zeros).
    pub parent_id: [u8; 8],
    /// Trace flags; bit 0 is "sampled".
    pub flags: u8,
}

impl TraceParent {
    /// Whether the caller recorded its span (flag bit 0).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

/// Length of a version-00 `traceparent`.
pub const TRACEPARENT_LEN: usize = 55;

/// Reads a `traceparent` value (W3C Trace Context, level 1): `00-` 32 lowercase hex
/// digits of trace id `-` 16 of parent id `-` 2 of flags. A later version (`01`…`fe`)
/// is read by the same prefix and may carry more after a `-`; version `ff`, uppercase
/// digits, all-zero ids, or anything else malformed is `None` (the request then starts
/// a trace of its own, as the specification asks).
pub fn parse_traceparent(value: &[u8]) -> Option<TraceParent> {
    if value.len() < TRACEPARENT_LEN {
        return None;
    }
    let version = hex_byte(&value[0..2])?;
    if version == 0xff || (version == 0 && value.len() != TRACEPARENT_LEN) {
        return None;
    }
    if value.len() > TRACEPARENT_LEN && value[TRACEPARENT_LEN] != b'-' {
        return None;
    }
    if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let mut trace_id = [0u8; 16];
    for (i, b) in trace_id.iter_mut().enumerate() {
        *b = hex_byte(&value[3 + 2 * i..5 + 2 * i])?;
    }
    let mut parent_id = [0u8; 8];
    for (i, b) in parent_id.iter_mut().enumerate() {
        *b = hex_byte(&value[36 + 2 * i..38 + 2 * i])?;
    }
    let flags = hex_byte(&value[53..55])?;
    if trace_id == [0; 16] || parent_id == [0; 8] {
        return None;
    }
    Some(TraceParent {
        trace_id,
        parent_id,
        flags,
    })
}

/// Two lowercase hex digits.
fn hex_byte(two: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(two[0])? << 4 | digit(two[1])?)
}

/// Writes `bytes` as lowercase hex into `out` (twice as long).
pub(crate) fn hex_into(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(b >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
    }
}

/// A version-00 `traceparent` for a span of a trace.
pub(crate) fn format_traceparent(
    trace_id: &[u8; 16],
    span_id: &[u8; 8],
    sampled: bool,
) -> [u8; TRACEPARENT_LEN] {
    let mut out = [b'-'; TRACEPARENT_LEN];
    out[0] = b'0';
    out[1] = b'0';
    hex_into(trace_id, &mut out[3..35]);
    hex_into(span_id, &mut out[36..52]);
    out[53] = b'0';
    out[54] = if sampled { b'1' } else { b'0' };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn reads_a_version_00_header() {
        let p = parse_traceparent(GOOD).unwrap();
        assert_eq!(p.trace_id[0], 0x4b);
        assert_eq!(p.trace_id[15], 0x36);
        assert_eq!(
            p.parent_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert!(p.sampled());
        let again = format_traceparent(&p.trace_id, &p.parent_id, true);
        assert_eq!(&again[..], GOOD);
        let unsampled = format_traceparent(&p.trace_id, &p.parent_id, false);
        assert!(!parse_traceparent(&unsampled).unwrap().sampled());
    }

    #[test]
    fn refuses_what_is_malformed() {
        let bad: &[&[u8]] = &[
            b"",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ];
        for b in bad {
            assert_eq!(parse_traceparent(b), None, "{}", String::from_utf8_lossy(b));
        }
        // A later version may carry more after a dash.
        let later = b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        assert!(parse_traceparent(later).is_some());
    }

    /// The fuzz target's properties on stable: mutations of a valid header (bytes
    /// replaced, cut, extended) never panic, and an accepted one is written back as read.
    #[test]
    fn mutated_headers_never_panic_and_round_trip() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let alphabet = b"0123456789abcdefABF-xff\x00";
        for _ in 0..20_000 {
            let mut v = GOOD.to_vec();
            for _ in 0..(next() % 4) {
                let i = (next() % v.len() as u64) as usize;
                v[i] = alphabet[(next() % alphabet.len() as u64) as usize];
            }
            match next() % 3 {
                0 => v.truncate((next() % 60) as usize),
                1 => v.extend_from_slice(b"-more"),
                _ => {}
            }
            if let Some(p) = parse_traceparent(&v) {
                assert_ne!(p.trace_id, [0; 16]);
                assert_ne!(p.parent_id, [0; 8]);
                let back = format_traceparent(&p.trace_id, &p.parent_id, p.sampled());
                assert_eq!(&back[2..53], &v[2..53]);
            }
        }
    }
}
