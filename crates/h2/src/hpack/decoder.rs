//! The decoder of header blocks (RFC 7541 §3, §6).

use bytes::Bytes;
use http::HeaderName;

use super::table::{DynamicTable, STATIC, STATIC_LEN};
use super::{DecodeError, Header, Name, Pseudo, entry_size, huffman};

/// The largest Huffman buffer kept from one block to the next.
const SCRATCH_KEEP: usize = 16 << 10;

/// The decoding state of one connection: the dynamic table the peer's encoder fills.
pub struct Decoder {
    table: DynamicTable,
    /// The SETTINGS_HEADER_TABLE_SIZE we advertise: the bound of size updates.
    limit: usize,
    /// Where Huffman strings are decoded before they are copied out (names are checked there
    /// and may not need a copy at all).
    scratch: Vec<u8>,
}

impl Decoder {
    /// `max_table_size`: what we advertise as SETTINGS_HEADER_TABLE_SIZE (4096 by default).
    /// The dynamic table starts at that size.
    pub fn new(max_table_size: usize) -> Decoder {
        Decoder {
            table: DynamicTable::new(max_table_size),
            limit: max_table_size,
            scratch: Vec::new(),
        }
    }

    /// The current size of the dynamic table (RFC 7541 §4.1).
    pub fn table_size(&self) -> usize {
        self.table.size()
    }

    /// The current maximum size of the dynamic table (the last size update, or the
    /// advertised size).
    pub fn max_table_size(&self) -> usize {
        self.table.max_size()
    }

    /// The number of entries of the dynamic table.
    pub fn table_len(&self) -> usize {
        self.table.len()
    }

    /// The dynamic table's entry `i`, newest first (HPACK index `62 + i`).
    pub fn table_entry(&self, i: usize) -> Option<(&Name, &Bytes)> {
        self.table.get(i).map(|e| (&e.name, &e.value))
    }

    /// Decodes one complete header block (HEADERS + CONTINUATION payloads joined).
    ///
    /// Calls `f` per field in order. `max_list_size`: SETTINGS_MAX_HEADER_LIST_SIZE (the sum
    /// over fields of name length + value length + 32). Past it, `f` is no longer called but
    /// the rest of the block is still decoded into the dynamic table, then
    /// [`DecodeError::ListTooLarge`] is returned: the stream is refused, the connection's
    /// compression state stays in step. Any other error is a connection error; fields before
    /// it have been passed to `f`.
    pub fn decode(
        &mut self,
        block: &Bytes,
        max_list_size: usize,
        mut f: impl FnMut(Header),
    ) -> Result<(), DecodeError> {
        let src: &[u8] = block;
        let mut pos = 0;
        let mut list_size = 0usize;
        let mut fields_seen = false;
        while let Some(&first) = src.get(pos) {
            let (header, size) = if first & 0x80 != 0 {
                // Indexed field (§6.1).
                let index = read_int(src, &mut pos, 7)?;
                self.indexed(index)?
            } else if first & 0x40 != 0 {
                // Literal with incremental indexing (§6.2.1).
                let index = read_int(src, &mut pos, 6)?;
                let name = self.name(block, &mut pos, index)?;
                let (value, copied) = self.value(block, &mut pos)?;
                // A plain value is a slice of the block; the table keeps a copy so that it
                // does not hold whole blocks alive for the life of the connection.
                let stored = if copied {
                    value.clone()
                } else {
                    Bytes::copy_from_slice(&value)
                };
                let size = entry_size(name.as_str().len(), value.len());
                self.table.insert(name.clone(), stored, size);
                let header = Header {
                    name,
                    value,
                    sensitive: false,
                };
                (header, size)
            } else if first & 0x20 != 0 {
                // Dynamic table size update (§6.3): only before the first field.
                if fields_seen {
                    return Err(DecodeError::TableSizeUpdateNotFirst);
                }
                let size = read_int(src, &mut pos, 5)?;
                if size > self.limit {
                    return Err(DecodeError::TableSizeUpdateTooLarge);
                }
                self.table.set_max_size(size);
                continue;
            } else {
                // Literal without indexing (§6.2.2) or never indexed (§6.2.3).
                let index = read_int(src, &mut pos, 4)?;
                let name = self.name(block, &mut pos, index)?;
                let (value, _) = self.value(block, &mut pos)?;
                let size = entry_size(name.as_str().len(), value.len());
                let header = Header {
                    name,
                    value,
                    sensitive: first & 0x10 != 0,
                };
                (header, size)
            };
            fields_seen = true;
            if list_size <= max_list_size {
                list_size = list_size.saturating_add(size);
                if list_size <= max_list_size {
                    f(header);
                }
            }
        }
        if self.scratch.capacity() > SCRATCH_KEEP {
            // One huge Huffman string does not keep its buffer for the connection's life.
            self.scratch = Vec::new();
        }
        if list_size > max_list_size {
            return Err(DecodeError::ListTooLarge);
        }
        Ok(())
    }

    /// The field at HPACK index `index`, and its size.
    #[inline(always)]
    fn indexed(&self, index: usize) -> Result<(Header, usize), DecodeError> {
        let (name, value, size) = if index == 0 {
            return Err(DecodeError::BadIndex);
        } else if index <= STATIC_LEN {
            let entry = &STATIC[index - 1];
            (entry.name.clone(), entry.value.clone(), entry.size)
        } else {
            let entry = self
                .table
                .get(index - STATIC_LEN - 1)
                .ok_or(DecodeError::BadIndex)?;
            (entry.name.clone(), entry.value.clone(), entry.size)
        };
        let header = Header {
            name,
            value,
            sensitive: false,
        };
        Ok((header, size))
    }

    /// The name of a literal: the entry at `index`, or a string that follows when it is 0.
    #[inline]
    fn name(&mut self, block: &Bytes, pos: &mut usize, index: usize) -> Result<Name, DecodeError> {
        if index == 0 {
            let src: &[u8] = block;
            let (start, len, huffman) = read_string_head(src, pos)?;
            let raw = &src[start..start + len];
            if huffman {
                self.scratch.clear();
                huffman::decode(raw, &mut self.scratch).map_err(|_| DecodeError::BadHuffman)?;
                parse_name(&self.scratch)
            } else {
                parse_name(raw)
            }
        } else if index <= STATIC_LEN {
            Ok(STATIC[index - 1].name.clone())
        } else {
            self.table
                .get(index - STATIC_LEN - 1)
                .map(|entry| entry.name.clone())
                .ok_or(DecodeError::BadIndex)
        }
    }

    /// The value of a literal, and whether it was copied out of the block (Huffman-decoded)
    /// rather than sliced.
    #[inline]
    fn value(&mut self, block: &Bytes, pos: &mut usize) -> Result<(Bytes, bool), DecodeError> {
        let (start, len, huffman) = read_string_head(block, pos)?;
        if huffman {
            self.scratch.clear();
            huffman::decode(&block[start..start + len], &mut self.scratch)
                .map_err(|_| DecodeError::BadHuffman)?;
            Ok((Bytes::copy_from_slice(&self.scratch), true))
        } else {
            Ok((block.slice(start..start + len), false))
        }
    }
}

impl Default for Decoder {
    /// A decoder for the default SETTINGS_HEADER_TABLE_SIZE (4096).
    fn default() -> Decoder {
        Decoder::new(super::DEFAULT_TABLE_SIZE)
    }
}

/// Reads an integer with an `prefix`-bit prefix (§5.1) at `*pos`, which starts at the byte
/// holding the prefix. Values above `u32::MAX`, or more than 5 continuation bytes, are
/// rejected.
#[inline]
pub(super) fn read_int(src: &[u8], pos: &mut usize, prefix: u32) -> Result<usize, DecodeError> {
    let max_prefix = ((1u32 << prefix) - 1) as u8;
    let first = *src.get(*pos).ok_or(DecodeError::Truncated)?;
    *pos += 1;
    let mut value = u64::from(first & max_prefix);
    if value < u64::from(max_prefix) {
        return Ok(value as usize);
    }
    let mut shift = 0;
    loop {
        let b = *src.get(*pos).ok_or(DecodeError::Truncated)?;
        *pos += 1;
        value += u64::from(b & 0x7f) << shift;
        if value > u64::from(u32::MAX) {
            return Err(DecodeError::IntegerOverflow);
        }
        if b & 0x80 == 0 {
            // At most 32 bits: fits `usize` on every target HTTP/2 runs on.
            return Ok(value as usize);
        }
        shift += 7;
        if shift > 28 {
            return Err(DecodeError::IntegerOverflow);
        }
    }
}

/// Reads a string's head (§5.2): where its octets start, how many, whether Huffman-coded.
#[inline]
fn read_string_head(src: &[u8], pos: &mut usize) -> Result<(usize, usize, bool), DecodeError> {
    let huffman = src.get(*pos).ok_or(DecodeError::Truncated)? & 0x80 != 0;
    let len = read_int(src, pos, 7)?;
    let start = *pos;
    if src.len() - start < len {
        return Err(DecodeError::Truncated);
    }
    *pos = start + len;
    Ok((start, len, huffman))
}

/// Token characters (RFC 9110 §5.6.2) without upper-case letters: what a field name may
/// hold in HTTP/2 (RFC 9113 §8.2.1).
static NAME_CHARS: [bool; 256] = {
    let mut ok = [false; 256];
    let extra = b"!#$%&'*+-.^_`|~";
    let mut i = 0;
    while i < extra.len() {
        ok[extra[i] as usize] = true;
        i += 1;
    }
    let mut c = b'0';
    while c <= b'9' {
        ok[c as usize] = true;
        c += 1;
    }
    let mut c = b'a';
    while c <= b'z' {
        ok[c as usize] = true;
        c += 1;
    }
    ok
};

/// A literal name: a known pseudo-header, or a lower-case token.
fn parse_name(bytes: &[u8]) -> Result<Name, DecodeError> {
    if bytes.first() == Some(&b':') {
        return Pseudo::from_bytes(bytes)
            .map(Name::Pseudo)
            .ok_or(DecodeError::InvalidName);
    }
    if bytes.is_empty() || !bytes.iter().all(|&b| NAME_CHARS[usize::from(b)]) {
        return Err(DecodeError::InvalidName);
    }
    // Standard names come back without allocation; longer than `http` allows is invalid.
    HeaderName::from_bytes(bytes)
        .map(Name::Field)
        .map_err(|_| DecodeError::InvalidName)
}
