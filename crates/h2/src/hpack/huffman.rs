//! The Huffman code of HPACK strings (RFC 7541 §5.2 and Appendix B).
//!
//! Encoding packs each byte's code into a 64-bit accumulator and writes whole bytes. Decoding
//! runs a finite automaton over 4-bit nibbles: its states are the 256 inner nodes of the code
//! tree (state 0 is the root), and one step of the table, computed at compile time from the
//! 257 codes, says which state a nibble leads to, whether it completed a symbol (at most one:
//! the shortest code has 5 bits) and whether it ran into EOS, which may not occur in a string.

/// The code of every symbol (0–255 and EOS = 256) as (bit length, code in the low bits);
/// RFC 7541 Appendix B.
const CODES: [(u8, u32); 257] = [
    (13, 0x1ff8),     // 0x00
    (23, 0x7fffd8),   // 0x01
    (28, 0xfffffe2),  // 0x02
    (28, 0xfffffe3),  // 0x03
    (28, 0xfffffe4),  // 0x04
    (28, 0xfffffe5),  // 0x05
    (28, 0xfffffe6),  // 0x06
    (28, 0xfffffe7),  // 0x07
    (28, 0xfffffe8),  // 0x08
    (24, 0xffffea),   // 0x09
    (30, 0x3ffffffc), // 0x0a
    (28, 0xfffffe9),  // 0x0b
    (28, 0xfffffea),  // 0x0c
    (30, 0x3ffffffd), // 0x0d
    (28, 0xfffffeb),  // 0x0e
    (28, 0xfffffec),  // 0x0f
    (28, 0xfffffed),  // 0x10
    (28, 0xfffffee),  // 0x11
    (28, 0xfffffef),  // 0x12
    (28, 0xffffff0),  // 0x13
    (28, 0xffffff1),  // 0x14
    (28, 0xffffff2),  // 0x15
    (30, 0x3ffffffe), // 0x16
    (28, 0xffffff3),  // 0x17
    (28, 0xffffff4),  // 0x18
    (28, 0xffffff5),  // 0x19
    (28, 0xffffff6),  // 0x1a
    (28, 0xffffff7),  // 0x1b
    (28, 0xffffff8),  // 0x1c
    (28, 0xffffff9),  // 0x1d
    (28, 0xffffffa),  // 0x1e
    (28, 0xffffffb),  // 0x1f
    (6, 0x14),        // 0x20
    (10, 0x3f8),      // '!'
    (10, 0x3f9),      // '"'
    (12, 0xffa),      // '#'
    (13, 0x1ff9),     // '$'
    (6, 0x15),        // '%'
    (8, 0xf8),        // '&'
    (11, 0x7fa),      // "'"
    (10, 0x3fa),      // '('
    (10, 0x3fb),      // ')'
    (8, 0xf9),        // '*'
    (11, 0x7fb),      // '+'
    (8, 0xfa),        // ','
    (6, 0x16),        // '-'
    (6, 0x17),        // '.'
    (6, 0x18),        // '/'
    (5, 0x0),         // '0'
    (5, 0x1),         // '1'
    (5, 0x2),         // '2'
    (6, 0x19),        // '3'
    (6, 0x1a),        // '4'
    (6, 0x1b),        // '5'
    (6, 0x1c),        // '6'
    (6, 0x1d),        // '7'
    (6, 0x1e),        // '8'
    (6, 0x1f),        // '9'
    (7, 0x5c),        // ':'
    (8, 0xfb),        // ';'
    (15, 0x7ffc),     // '<'
    (6, 0x20),        // '='
    (12, 0xffb),      // '>'
    (10, 0x3fc),      // '?'
    (13, 0x1ffa),     // '@'
    (6, 0x21),        // 'A'
    (7, 0x5d),        // 'B'
    (7, 0x5e),        // 'C'
    (7, 0x5f),        // 'D'
    (7, 0x60),        // 'E'
    (7, 0x61),        // 'F'
    (7, 0x62),        // 'G'
    (7, 0x63),        // 'H'
    (7, 0x64),        // 'I'
    (7, 0x65),        // 'J'
    (7, 0x66),        // 'K'
    (7, 0x67),        // 'L'
    (7, 0x68),        // 'M'
    (7, 0x69),        // 'N'
    (7, 0x6a),        // 'O'
    (7, 0x6b),        // 'P'
    (7, 0x6c),        // 'Q'
    (7, 0x6d),        // 'R'
    (7, 0x6e),        // 'S'
    (7, 0x6f),        // 'T'
    (7, 0x70),        // 'U'
    (7, 0x71),        // 'V'
    (7, 0x72),        // 'W'
    (8, 0xfc),        // 'X'
    (7, 0x73),        // 'Y'
    (8, 0xfd),        // 'Z'
    (13, 0x1ffb),     // '['
    (19, 0x7fff0),    // '\\'
    (13, 0x1ffc),     // ']'
    (14, 0x3ffc),     // '^'
    (6, 0x22),        // '_'
    (15, 0x7ffd),     // '`'
    (5, 0x3),         // 'a'
    (6, 0x23),        // 'b'
    (5, 0x4),         // 'c'
    (6, 0x24),        // 'd'
    (5, 0x5),         // 'e'
    (6, 0x25),        // 'f'
    (6, 0x26),        // 'g'
    (6, 0x27),        // 'h'
    (5, 0x6),         // 'i'
    (7, 0x74),        // 'j'
    (7, 0x75),        // 'k'
    (6, 0x28),        // 'l'
    (6, 0x29),        // 'm'
    (6, 0x2a),        // 'n'
    (5, 0x7),         // 'o'
    (6, 0x2b),        // 'p'
    (7, 0x76),        // 'q'
    (6, 0x2c),        // 'r'
    (5, 0x8),         // 's'
    (5, 0x9),         // 't'
    (6, 0x2d),        // 'u'
    (7, 0x77),        // 'v'
    (7, 0x78),        // 'w'
    (7, 0x79),        // 'x'
    (7, 0x7a),        // 'y'
    (7, 0x7b),        // 'z'
    (15, 0x7ffe),     // '{'
    (11, 0x7fc),      // '|'
    (14, 0x3ffd),     // '}'
    (13, 0x1ffd),     // '~'
    (28, 0xffffffc),  // 0x7f
    (20, 0xfffe6),    // 0x80
    (22, 0x3fffd2),   // 0x81
    (20, 0xfffe7),    // 0x82
    (20, 0xfffe8),    // 0x83
    (22, 0x3fffd3),   // 0x84
    (22, 0x3fffd4),   // 0x85
    (22, 0x3fffd5),   // 0x86
    (23, 0x7fffd9),   // 0x87
    (22, 0x3fffd6),   // 0x88
    (23, 0x7fffda),   // 0x89
    (23, 0x7fffdb),   // 0x8a
    (23, 0x7fffdc),   // 0x8b
    (23, 0x7fffdd),   // 0x8c
    (23, 0x7fffde),   // 0x8d
    (24, 0xffffeb),   // 0x8e
    (23, 0x7fffdf),   // 0x8f
    (24, 0xffffec),   // 0x90
    (24, 0xffffed),   // 0x91
    (22, 0x3fffd7),   // 0x92
    (23, 0x7fffe0),   // 0x93
    (24, 0xffffee),   // 0x94
    (23, 0x7fffe1),   // 0x95
    (23, 0x7fffe2),   // 0x96
    (23, 0x7fffe3),   // 0x97
    (23, 0x7fffe4),   // 0x98
    (21, 0x1fffdc),   // 0x99
    (22, 0x3fffd8),   // 0x9a
    (23, 0x7fffe5),   // 0x9b
    (22, 0x3fffd9),   // 0x9c
    (23, 0x7fffe6),   // 0x9d
    (23, 0x7fffe7),   // 0x9e
    (24, 0xffffef),   // 0x9f
    (22, 0x3fffda),   // 0xa0
    (21, 0x1fffdd),   // 0xa1
    (20, 0xfffe9),    // 0xa2
    (22, 0x3fffdb),   // 0xa3
    (22, 0x3fffdc),   // 0xa4
    (23, 0x7fffe8),   // 0xa5
    (23, 0x7fffe9),   // 0xa6
    (21, 0x1fffde),   // 0xa7
    (23, 0x7fffea),   // 0xa8
    (22, 0x3fffdd),   // 0xa9
    (22, 0x3fffde),   // 0xaa
    (24, 0xfffff0),   // 0xab
    (21, 0x1fffdf),   // 0xac
    (22, 0x3fffdf),   // 0xad
    (23, 0x7fffeb),   // 0xae
    (23, 0x7fffec),   // 0xaf
    (21, 0x1fffe0),   // 0xb0
    (21, 0x1fffe1),   // 0xb1
    (22, 0x3fffe0),   // 0xb2
    (21, 0x1fffe2),   // 0xb3
    (23, 0x7fffed),   // 0xb4
    (22, 0x3fffe1),   // 0xb5
    (23, 0x7fffee),   // 0xb6
    (23, 0x7fffef),   // 0xb7
    (20, 0xfffea),    // 0xb8
    (22, 0x3fffe2),   // 0xb9
    (22, 0x3fffe3),   // 0xba
    (22, 0x3fffe4),   // 0xbb
    (23, 0x7ffff0),   // 0xbc
    (22, 0x3fffe5),   // 0xbd
    (22, 0x3fffe6),   // 0xbe
    (23, 0x7ffff1),   // 0xbf
    (26, 0x3ffffe0),  // 0xc0
    (26, 0x3ffffe1),  // 0xc1
    (20, 0xfffeb),    // 0xc2
    (19, 0x7fff1),    // 0xc3
    (22, 0x3fffe7),   // 0xc4
    (23, 0x7ffff2),   // 0xc5
    (22, 0x3fffe8),   // 0xc6
    (25, 0x1ffffec),  // 0xc7
    (26, 0x3ffffe2),  // 0xc8
    (26, 0x3ffffe3),  // 0xc9
    (26, 0x3ffffe4),  // 0xca
    (27, 0x7ffffde),  // 0xcb
    (27, 0x7ffffdf),  // 0xcc
    (26, 0x3ffffe5),  // 0xcd
    (24, 0xfffff1),   // 0xce
    (25, 0x1ffffed),  // 0xcf
    (19, 0x7fff2),    // 0xd0
    (21, 0x1fffe3),   // 0xd1
    (26, 0x3ffffe6),  // 0xd2
    (27, 0x7ffffe0),  // 0xd3
    (27, 0x7ffffe1),  // 0xd4
    (26, 0x3ffffe7),  // 0xd5
    (27, 0x7ffffe2),  // 0xd6
    (24, 0xfffff2),   // 0xd7
    (21, 0x1fffe4),   // 0xd8
    (21, 0x1fffe5),   // 0xd9
    (26, 0x3ffffe8),  // 0xda
    (26, 0x3ffffe9),  // 0xdb
    (28, 0xffffffd),  // 0xdc
    (27, 0x7ffffe3),  // 0xdd
    (27, 0x7ffffe4),  // 0xde
    (27, 0x7ffffe5),  // 0xdf
    (20, 0xfffec),    // 0xe0
    (24, 0xfffff3),   // 0xe1
    (20, 0xfffed),    // 0xe2
    (21, 0x1fffe6),   // 0xe3
    (22, 0x3fffe9),   // 0xe4
    (21, 0x1fffe7),   // 0xe5
    (21, 0x1fffe8),   // 0xe6
    (23, 0x7ffff3),   // 0xe7
    (22, 0x3fffea),   // 0xe8
    (22, 0x3fffeb),   // 0xe9
    (25, 0x1ffffee),  // 0xea
    (25, 0x1ffffef),  // 0xeb
    (24, 0xfffff4),   // 0xec
    (24, 0xfffff5),   // 0xed
    (26, 0x3ffffea),  // 0xee
    (23, 0x7ffff4),   // 0xef
    (26, 0x3ffffeb),  // 0xf0
    (27, 0x7ffffe6),  // 0xf1
    (26, 0x3ffffec),  // 0xf2
    (26, 0x3ffffed),  // 0xf3
    (27, 0x7ffffe7),  // 0xf4
    (27, 0x7ffffe8),  // 0xf5
    (27, 0x7ffffe9),  // 0xf6
    (27, 0x7ffffea),  // 0xf7
    (27, 0x7ffffeb),  // 0xf8
    (28, 0xffffffe),  // 0xf9
    (27, 0x7ffffec),  // 0xfa
    (27, 0x7ffffed),  // 0xfb
    (27, 0x7ffffee),  // 0xfc
    (27, 0x7ffffef),  // 0xfd
    (27, 0x7fffff0),  // 0xfe
    (26, 0x3ffffee),  // 0xff
    (30, 0x3fffffff), // EOS
];

/// The symbol number of EOS (end of string), whose code is thirty 1 bits.
const EOS: usize = 256;

/// A child in [`TREE`]: an inner node's number, or a symbol with this bit set.
const LEAF: u16 = 0x8000;

/// The code tree: `TREE[node][bit]`, built from [`CODES`]. A complete prefix code with 257
/// leaves has 256 inner nodes; the root is node 0, which is no one's child, so 0 marks an
/// unset child while building.
const TREE: [[u16; 2]; 256] = build_tree();

const fn build_tree() -> [[u16; 2]; 256] {
    let mut tree = [[0u16; 2]; 256];
    let mut nodes = 1u16;
    let mut sym = 0;
    while sym < CODES.len() {
        let (len, code) = CODES[sym];
        let mut node = 0usize;
        let mut shift = len - 1;
        while shift > 0 {
            let bit = ((code >> shift) & 1) as usize;
            if tree[node][bit] == 0 {
                tree[node][bit] = nodes;
                nodes += 1;
            }
            assert!(
                tree[node][bit] & LEAF == 0,
                "a code is the prefix of another"
            );
            node = tree[node][bit] as usize;
            shift -= 1;
        }
        let bit = (code & 1) as usize;
        assert!(tree[node][bit] == 0, "a code is the prefix of another");
        tree[node][bit] = LEAF | sym as u16;
        sym += 1;
    }
    assert!(nodes == 256, "the code is not complete");
    tree
}

/// One entry of [`STEPS`]: the next state in bits 0–7, the completed symbol in bits 8–15.
const EMITS: u32 = 1 << 16;
/// The nibble walked into EOS: the string is malformed.
const FAILS: u32 = 1 << 17;

/// `STEPS[state << 4 | nibble]`: the automaton's transition on four bits, high bit first.
static STEPS: [u32; 256 * 16] = build_steps();

const fn build_steps() -> [u32; 256 * 16] {
    let mut steps = [0u32; 256 * 16];
    let mut state = 0;
    while state < 256 {
        let mut nibble = 0;
        while nibble < 16 {
            let mut node = state;
            let mut entry = 0u32;
            let mut bit = 4;
            while bit > 0 {
                bit -= 1;
                let child = TREE[node][(nibble >> bit) & 1];
                if child & LEAF == 0 {
                    node = child as usize;
                } else if (child & !LEAF) as usize == EOS {
                    entry |= FAILS;
                    break;
                } else {
                    // Codes have at least 5 bits: one nibble completes at most one symbol.
                    assert!(entry & EMITS == 0);
                    entry |= EMITS | ((child & 0xff) as u32) << 8;
                    node = 0;
                }
            }
            steps[state << 4 | nibble] = entry | node as u32;
            nibble += 1;
        }
        state += 1;
    }
    steps
}

/// The states a string may end in: the root (the last code ended on the byte boundary) and
/// the nodes reached by 1 to 7 one bits, the allowed padding (a prefix of EOS).
static ENDS: [bool; 256] = build_ends();

const fn build_ends() -> [bool; 256] {
    let mut ends = [false; 256];
    let mut node = 0;
    let mut depth = 0;
    while depth <= 7 {
        ends[node] = true;
        node = TREE[node][1] as usize;
        depth += 1;
    }
    ends
}

/// The bit lengths alone, for [`encoded_len`].
static LENGTHS: [u8; 256] = {
    let mut lengths = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        lengths[i] = CODES[i].0;
        i += 1;
    }
    lengths
};

/// The length in bytes of `src` Huffman-coded (padding included).
pub(super) fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src
        .iter()
        .map(|&b| usize::from(LENGTHS[usize::from(b)]))
        .sum();
    bits.div_ceil(8)
}

/// Appends `src` Huffman-coded to `out`, padded with 1 bits to a whole byte.
pub(super) fn encode(src: &[u8], out: &mut Vec<u8>) {
    out.reserve(encoded_len(src));
    // The low `pending` bits of `acc` are not yet written; fewer than 32 between bytes, plus
    // at most 30 of a code, fit in 64 bits.
    let mut acc = 0u64;
    let mut pending = 0u32;
    for &b in src {
        let (len, code) = CODES[usize::from(b)];
        acc = (acc << len) | u64::from(code);
        pending += u32::from(len);
        if pending >= 32 {
            pending -= 32;
            // Truncation keeps the 32 oldest pending bits.
            out.extend_from_slice(&((acc >> pending) as u32).to_be_bytes());
        }
    }
    while pending >= 8 {
        pending -= 8;
        out.push((acc >> pending) as u8);
    }
    if pending > 0 {
        let shift = 8 - pending;
        out.push(((acc << shift) as u8) | ((1u8 << shift) - 1));
    }
}

/// Why a Huffman-coded string is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BadHuffman;

/// Decodes `src`, appending to `out`. Rejects EOS inside the string, and padding that is
/// longer than 7 bits or not all 1 bits (RFC 7541 §5.2).
pub(super) fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), BadHuffman> {
    // At most 8 / 5 symbols per byte; the buffer is written at `n` unconditionally and `n`
    // advances only when a nibble completes a symbol.
    let start = out.len();
    out.resize(start + src.len() * 8 / 5 + 1, 0);
    let buf = &mut out[start..];
    let mut n = 0;
    let mut state = 0usize;
    for &b in src {
        for nibble in [b >> 4, b & 0x0f] {
            let step = STEPS[state << 4 | usize::from(nibble)];
            if step & FAILS != 0 {
                out.truncate(start);
                return Err(BadHuffman);
            }
            buf[n] = (step >> 8) as u8;
            n += ((step & EMITS) >> 16) as usize;
            state = (step & 0xff) as usize;
        }
    }
    if ENDS[state] {
        out.truncate(start + n);
        Ok(())
    } else {
        out.truncate(start);
        Err(BadHuffman)
    }
}

#[cfg(test)]
pub(super) fn code(sym: usize) -> (u8, u32) {
    CODES[sym]
}
