//! The upstream's bytes, parsed: a response head ([`parse_response`]) and a chunked body
//! ([`Chunked`]). Both read untrusted bytes (an upstream may be hostile or confused), so
//! both are strict where leniency lets two parties disagree about where a message ends:
//! a response whose framing is ambiguous is refused, or at least never lets its
//! connection carry another exchange. Pure functions over byte slices, so the fuzz target
//! `h1_response` can check them (`crate::parse_upstream_response`).
//!
//! What is refused, and why (RFC 9112):
//! - header fields folded over several lines (obs-fold, §5.2): a proxy must not forward
//!   them, and readers disagree about them;
//! - `Content-Length` that is not a decimal number, or several different ones (§6.3 5);
//! - a chunk size that is not hexadecimal, too long for 64 bits, empty, or a chunk line
//!   or chunk end without CRLF (a bare LF ends a line for some readers and not others);
//! - heads and trailers over their size limits, more than [`MAX_HEADERS`] fields.
//!
//! What is accepted but closes the connection after the exchange: both
//! `Transfer-Encoding` and `Content-Length` (Transfer-Encoding wins, §6.3 3), a
//! `Transfer-Encoding` that does not end in `chunked` (the body ends when the connection
//! closes), any body delimited by the close, and an HTTP/1.0 answer without
//! `Connection: keep-alive`.

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Version};

/// The most header fields a response head (or a chunked body's trailer section) may have:
/// hyper's default, which weir's HTTP/1.1 client had before.
pub(crate) const MAX_HEADERS: usize = 100;
/// The largest response head, status line included.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// The most bytes of chunk extensions one body may carry (they are read and dropped).
const MAX_CHUNK_EXTENSIONS: u64 = 16 * 1024;
/// The largest trailer section of a chunked body.
const MAX_TRAILERS: usize = 16 * 1024;

/// Why the upstream's bytes are not a response weir relays.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Invalid {
    /// The status line or a header field does not parse (obs-fold included).
    #[error("malformed response head: {0}")]
    Head(&'static str),
    /// The head is larger than [`MAX_HEAD`] or has more than [`MAX_HEADERS`] fields.
    #[error("response head too large")]
    HeadTooLarge,
    /// `Content-Length` is malformed or given with different values.
    #[error("invalid content-length")]
    ContentLength,
    /// The chunked body's framing is malformed.
    #[error("invalid chunked body: {0}")]
    Chunk(&'static str),
}

/// How a response's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body: a response to HEAD, 1xx, 204, 304.
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the upstream closes the connection.
    UntilClose,
}

/// A parsed response head.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) status: StatusCode,
    pub(crate) version: Version,
    /// The reason phrase, when it is not the status's canonical one.
    pub(crate) reason: Option<Bytes>,
    pub(crate) headers: HeaderMap,
    pub(crate) framing: Framing,
    /// Whether the connection may carry another exchange after this one.
    pub(crate) keep_alive: bool,
}

/// Where a header field's name and value lie in a head: (offset, length) of each.
pub(crate) type FieldSpan = ((usize, usize), (usize, usize));

/// Parses the response head at the start of `buf`, for a request whose method was HEAD
/// when `head_request`, and splits it off `buf`. `Ok(None)`: incomplete (read more into
/// `buf`; past [`MAX_HEAD`] bytes it is an error). The header values share the head's
/// memory (one frozen buffer, as hyper does); names are parsed once. `spans` is scratch
/// space (kept by the connection: no per-response table is zeroed or allocated).
pub(crate) fn parse_response(
    buf: &mut BytesMut,
    head_request: bool,
    spans: &mut Vec<FieldSpan>,
) -> Result<Option<Head>, Invalid> {
    let line = match scan_response(buf, spans)? {
        Some(line) => line,
        None if buf.len() >= MAX_HEAD => return Err(Invalid::HeadTooLarge),
        None => return Ok(None),
    };
    let len = line.len;
    if len > MAX_HEAD {
        return Err(Invalid::HeadTooLarge);
    }
    let status = StatusCode::from_u16(line.code).map_err(|_| Invalid::Head("status code"))?;
    let version = if line.minor == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let reason = line.reason.filter(|&(at, n)| {
        n > 0 && status.canonical_reason().map(str::as_bytes) != Some(&buf[at..at + n])
    });
    let head = buf.split_to(len).freeze();
    let slice = |(at, len): (usize, usize)| head.slice(at..at + len);
    let mut headers = HeaderMap::with_capacity(spans.len());
    // The framing's fields are read as they are added (no lookups after).
    let mut fields = FramingFields::default();
    for &(name, value) in spans.iter() {
        let name =
            field_name(&head[name.0..name.0 + name.1]).map_err(|_| Invalid::Head("field name"))?;
        let value = HeaderValue::from_maybe_shared(slice(value))
            .map_err(|_| Invalid::Head("field value"))?;
        fields.note(&name, value.as_bytes());
        headers.append(name, value);
    }
    let (framing, mut keep_alive) = framing(status, version, head_request, &fields)?;
    keep_alive &= !fields.close && (version == Version::HTTP_11 || fields.keep_alive);
    Ok(Some(Head {
        status,
        version,
        reason: reason.map(slice),
        headers,
        framing,
        keep_alive,
    }))
}

/// A response's status line, as [`scan_response`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatusLine {
    /// The head's length: status line, fields and the empty line.
    pub(crate) len: usize,
    /// The minor version: `HTTP/1.0` or `HTTP/1.1`.
    pub(crate) minor: u8,
    /// The three digits of the status code.
    pub(crate) code: u16,
    /// Where the reason phrase lies: (offset, length); `None` without one (the status line
    /// ended after the code). Empty when it has bytes above 0x7f (obs-text).
    pub(crate) reason: Option<(usize, usize)>,
}

/// Whether a byte may be part of a token (a field name): RFC 9110 §5.6.2.
const TOKEN: [bool; 256] = byte_set(
    b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    false,
);
/// Whether a byte may be part of a field value or a reason phrase: HTAB, SP, VCHAR and
/// obs-text (RFC 9110 §5.5, RFC 9112 §4).
const TEXT: [bool; 256] = {
    let mut set = byte_set(b"\t", true);
    set[0x7f] = false;
    set
};

/// The byte set of `bytes`; with `printable`, every byte from SP up too.
const fn byte_set(bytes: &[u8], printable: bool) -> [bool; 256] {
    let mut set = [false; 256];
    let mut i = 0;
    while i < bytes.len() {
        set[bytes[i] as usize] = true;
        i += 1;
    }
    if printable {
        let mut b = 0x20;
        while b < 256 {
            set[b] = true;
            b += 1;
        }
    }
    set
}

/// One step of the scan: the byte at `at`, or the end of the bytes so far (`None`: read
/// more).
macro_rules! byte {
    ($buf:expr, $at:expr) => {
        match $buf.get($at) {
            Some(&b) => b,
            None => return Ok(None),
        }
    };
}

/// Where a head starts after the empty lines (CRLF) before it, which are skipped.
fn skip_empty_lines(buf: &[u8]) -> Result<Option<usize>, Invalid> {
    let mut at = 0;
    loop {
        match byte!(buf, at) {
            b'\r' => {
                if byte!(buf, at + 1) != b'\n' {
                    return Err(Invalid::Head("line ending"));
                }
                at += 2;
            }
            b'\n' => return Err(Invalid::Head("bare LF")),
            _ => return Ok(Some(at)),
        }
    }
}

/// The minor version of the eight bytes `HTTP/1.0` or `HTTP/1.1` that start `rest`;
/// `None` while fewer than eight bytes are there and they begin one of them.
fn version(rest: &[u8]) -> Result<Option<u8>, Invalid> {
    if rest.len() < 8 {
        return if b"HTTP/1."[..rest.len().min(7)] == rest[..rest.len().min(7)] {
            Ok(None)
        } else {
            Err(Invalid::Head("version"))
        };
    }
    match &rest[..8] {
        b"HTTP/1.0" => Ok(Some(0)),
        b"HTTP/1.1" => Ok(Some(1)),
        _ => Err(Invalid::Head("version")),
    }
}

/// Scans the response head at the start of `buf` in one pass, as RFC 9112 reads it and
/// as strictly as weir relays it: the status line (`HTTP/1.0` or `HTTP/1.1`, a space,
/// three digits, then a space and a reason phrase or the line's end) and the header
/// fields up to the empty line, their spans in `spans` (cleared first; the name, and the
/// value without its surrounding spaces and tabs). Every line ends in CRLF (a bare LF is
/// refused: readers disagree about it); a name is a token followed at once by `:` (a
/// space before the colon, or a line that starts with one — obs-fold — is refused);
/// values and the reason phrase hold HTAB, SP, visible bytes and obs-text. Empty lines
/// (CRLF) before the status line are skipped. More than [`MAX_HEADERS`] fields are
/// refused. `Ok(None)`: the bytes so far are a valid beginning; read more.
///
/// This is what httparse (weir's parser before session 40) accepted, plus the bare-LF
/// rule weir applied after it, with one pass instead of two (the fuzz target
/// `h1_response` and the tests compare both on every input).
pub(crate) fn scan_response(
    buf: &[u8],
    spans: &mut Vec<FieldSpan>,
) -> Result<Option<StatusLine>, Invalid> {
    spans.clear();
    let Some(mut at) = skip_empty_lines(buf)? else {
        return Ok(None);
    };
    let Some(minor) = version(&buf[at..])? else {
        return Ok(None);
    };
    at += 8;
    if byte!(buf, at) != b' ' {
        return Err(Invalid::Head("version"));
    }
    at += 1;
    let mut code = 0u16;
    for _ in 0..3 {
        let b = byte!(buf, at);
        if !b.is_ascii_digit() {
            return Err(Invalid::Head("status code"));
        }
        code = code * 10 + u16::from(b - b'0');
        at += 1;
    }
    let reason = match byte!(buf, at) {
        b' ' => {
            at += 1;
            let start = at;
            let mut obs_text = false;
            loop {
                let b = byte!(buf, at);
                if b == b'\r' {
                    break;
                }
                if b == b'\n' {
                    return Err(Invalid::Head("bare LF"));
                }
                if !TEXT[usize::from(b)] {
                    return Err(Invalid::Head("status code"));
                }
                obs_text |= b >= 0x80;
                at += 1;
            }
            if byte!(buf, at + 1) != b'\n' {
                return Err(Invalid::Head("status code"));
            }
            let reason = if obs_text {
                (start, 0)
            } else {
                (start, at - start)
            };
            at += 2;
            Some(reason)
        }
        b'\r' => {
            if byte!(buf, at + 1) != b'\n' {
                return Err(Invalid::Head("status code"));
            }
            at += 2;
            None
        }
        b'\n' => return Err(Invalid::Head("bare LF")),
        _ => return Err(Invalid::Head("status code")),
    };
    // The header fields, up to the empty line.
    let fields = |name, value| {
        spans.push((name, value));
        Ok(())
    };
    Ok(
        scan_fields(buf, at, MAX_HEADERS, fields)?.map(|len| StatusLine {
            len,
            minor,
            code,
            reason,
        }),
    )
}

/// Scans the header fields from `at` up to the empty line (see [`scan_response`]),
/// handing each field's name and value spans to `field` as it is found (an error it
/// returns ends the scan), and returns the head's length (through the empty line). More
/// than `max` fields are refused ([`Invalid::HeadTooLarge`]).
pub(crate) fn scan_fields(
    buf: &[u8],
    mut at: usize,
    max: usize,
    mut field: impl FnMut((usize, usize), (usize, usize)) -> Result<(), Invalid>,
) -> Result<Option<usize>, Invalid> {
    let mut count = 0;
    loop {
        match byte!(buf, at) {
            b'\r' => {
                if byte!(buf, at + 1) != b'\n' {
                    return Err(Invalid::Head("line ending"));
                }
                return Ok(Some(at + 2));
            }
            b'\n' => return Err(Invalid::Head("bare LF")),
            _ => {}
        }
        let name_start = at;
        let Some(n) = buf[at..].iter().position(|&b| !TOKEN[usize::from(b)]) else {
            return Ok(None);
        };
        at += n;
        if n == 0 || buf[at] != b':' {
            return Err(Invalid::Head("field name"));
        }
        let name = (name_start, n);
        at += 1;
        while matches!(byte!(buf, at), b' ' | b'\t') {
            at += 1;
        }
        let value_start = at;
        at += text_run(&buf[at..]);
        match byte!(buf, at) {
            b'\r' => {
                if byte!(buf, at + 1) != b'\n' {
                    return Err(Invalid::Head("field value"));
                }
            }
            b'\n' => return Err(Invalid::Head("bare LF")),
            _ => return Err(Invalid::Head("field value")),
        }
        let mut value_end = at;
        while value_end > value_start && matches!(buf[value_end - 1], b' ' | b'\t') {
            value_end -= 1;
        }
        if count == max {
            return Err(Invalid::HeadTooLarge);
        }
        count += 1;
        field(name, (value_start, value_end - value_start))?;
        at += 2;
    }
}

/// The length of the run of [`TEXT`] bytes at the start of `bytes`. Eight bytes at a
/// time while none is a control byte (below 0x20) or DEL (the usual value has neither
/// but its line end): a word's lowest byte flagged by the two tests below is the first
/// such byte (a borrow only moves up, from a byte that is flagged itself); a tab there is
/// part of the run.
fn text_run(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    let mut i = 0;
    while let Some(word) = bytes.get(i..i + 8) {
        let mut w = [0; 8];
        w.copy_from_slice(word);
        let w = u64::from_le_bytes(w);
        let below_space = w.wrapping_sub(ONES * 0x20) & !w;
        let del = w ^ (ONES * 0x7f);
        let del = del.wrapping_sub(ONES) & !del;
        let flagged = (below_space | del) & HIGH;
        if flagged == 0 {
            i += 8;
            continue;
        }
        let first = i + (flagged.trailing_zeros() / 8) as usize;
        if bytes[first] != b'\t' {
            return first;
        }
        i = first + 1;
    }
    i + bytes[i..]
        .iter()
        .position(|&b| !TEXT[usize::from(b)])
        .unwrap_or(bytes.len() - i)
}

/// A request line, as [`scan_request`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestLine {
    /// Where the method lies: (offset, length).
    pub(crate) method: (usize, usize),
    /// Where the request target lies: (offset, length).
    pub(crate) target: (usize, usize),
    /// The minor version: `HTTP/1.0` or `HTTP/1.1`.
    pub(crate) minor: u8,
    /// The head's length: request line, fields and the empty line.
    pub(crate) len: usize,
}

/// Whether a byte may be part of a request target as httparse reads it: visible ASCII
/// and bytes above 0x7f (the target must be UTF-8).
const TARGET: [bool; 256] = {
    let mut set = byte_set(b"", true);
    set[b' ' as usize] = false;
    set[0x7f] = false;
    set
};

/// Scans the request head at the start of `buf` in one pass, its fields handed to `field`
/// as [`scan_fields`] does, with the rules of [`scan_response`] (CRLF line ends, no
/// obs-fold, at most `max` fields): empty
/// lines (CRLF) first are skipped; then a method (a token), one space, a target of
/// visible bytes (UTF-8), one space, `HTTP/1.0` or `HTTP/1.1` and CRLF. `Ok(None)`: the
/// bytes so far are a valid beginning. Where it refuses what httparse (weir's parser
/// before session 40) accepted, it is sooner (a version other than 1.1, more than `max`
/// fields) or a bare LF (hyper's server reads such a request instead).
pub(crate) fn scan_request(
    buf: &[u8],
    max: usize,
    field: impl FnMut((usize, usize), (usize, usize)) -> Result<(), Invalid>,
) -> Result<Option<RequestLine>, Invalid> {
    let Some(mut at) = skip_empty_lines(buf)? else {
        return Ok(None);
    };
    let method_start = at;
    while TOKEN[usize::from(byte!(buf, at))] {
        at += 1;
    }
    if at == method_start || buf[at] != b' ' {
        return Err(Invalid::Head("method"));
    }
    let method = (method_start, at - method_start);
    at += 1;
    let target_start = at;
    let mut high = false;
    loop {
        let b = byte!(buf, at);
        if !TARGET[usize::from(b)] {
            break;
        }
        high |= b >= 0x80;
        at += 1;
    }
    if at == target_start || buf[at] != b' ' {
        return Err(Invalid::Head("target"));
    }
    if high && std::str::from_utf8(&buf[target_start..at]).is_err() {
        return Err(Invalid::Head("target"));
    }
    let target = (target_start, at - target_start);
    at += 1;
    let Some(minor) = version(&buf[at..])? else {
        return Ok(None);
    };
    at += 8;
    match byte!(buf, at) {
        b'\r' if byte!(buf, at + 1) == b'\n' => at += 2,
        b'\n' => return Err(Invalid::Head("bare LF")),
        _ => return Err(Invalid::Head("line ending")),
    }
    Ok(scan_fields(buf, at, max, field)?.map(|len| RequestLine {
        method,
        target,
        minor,
        len,
    }))
}

/// What a response head's fields say about its framing and its connection, gathered
/// field by field as the head is parsed.
#[derive(Debug, Default)]
struct FramingFields {
    /// The `Content-Length` fields' number (see [`FramingFields::length`]).
    length: Option<u64>,
    /// A `Content-Length` field was malformed, or two disagreed.
    length_invalid: bool,
    /// A `Transfer-Encoding` field was seen.
    transfer_encoding: bool,
    /// The last `Transfer-Encoding` field's last coding is `chunked`.
    ends_in_chunked: bool,
    /// A `Connection` field lists `close`.
    close: bool,
    /// A `Connection` field lists `keep-alive`.
    keep_alive: bool,
}

impl FramingFields {
    fn note(&mut self, name: &HeaderName, value: &[u8]) {
        if *name == header::CONTENT_LENGTH {
            match content_length_value(value) {
                Some(n) if self.length.is_none_or(|f| f == n) => self.length = Some(n),
                _ => self.length_invalid = true,
            }
        } else if *name == header::TRANSFER_ENCODING {
            self.transfer_encoding = true;
            self.ends_in_chunked = ends_in_chunked_value(value);
        } else if *name == header::CONNECTION {
            for token in value.split(|b| *b == b',') {
                let token = token.trim_ascii();
                self.close |= token.eq_ignore_ascii_case(b"close");
                self.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }

    /// The `Content-Length`, as [`content_length`] reads it from the fields.
    fn length(&self) -> Result<Option<u64>, Invalid> {
        if self.length_invalid {
            return Err(Invalid::ContentLength);
        }
        Ok(self.length)
    }
}

/// Whether a line of `head` ends in a bare LF (one not preceded by CR).
fn has_bare_lf(head: &[u8]) -> bool {
    memchr::memchr_iter(b'\n', head).any(|i| i == 0 || head[i - 1] != b'\r')
}

/// The head scan before [`scan_response`]: httparse, then the bare-LF rule. Kept to
/// check that the two agree on every input (the tests and the fuzz target `h1_response`
/// through [`check_head_scan`]).
fn reference_scan(buf: &[u8]) -> Result<Option<(StatusLine, Vec<FieldSpan>)>, Invalid> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut fields);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Invalid::HeadTooLarge),
        Err(_) => return Err(Invalid::Head("httparse")),
    };
    if has_bare_lf(&buf[..len]) {
        return Err(Invalid::Head("bare LF"));
    }
    let base = buf.as_ptr() as usize;
    let span = |part: &[u8]| match part.len() {
        0 => None,
        n => Some(((part.as_ptr() as usize) - base, n)),
    };
    let spans = resp
        .headers
        .iter()
        .map(|f| {
            let name = span(f.name.as_bytes()).unwrap_or((0, 0));
            (name, span(f.value).unwrap_or((0, 0)))
        })
        .collect();
    let line = StatusLine {
        len,
        minor: resp.version.unwrap_or(9),
        code: resp.code.unwrap_or(0),
        reason: resp.reason.and_then(|r| span(r.as_bytes())),
    };
    Ok(Some((line, spans)))
}

/// Panics unless [`scan_response`] and the httparse-based scan before it agree on
/// `bytes`: the same head (length, version, code, reason, every field's name and value)
/// or both a refusal, or both asking for more. One allowance: the new scan refuses a
/// bare LF as soon as it reaches it, where the old one asked for more until the head
/// was complete.
#[doc(hidden)]
pub fn check_head_scan(bytes: &[u8]) {
    let mut spans = Vec::new();
    let new = scan_response(bytes, &mut spans);
    let old = reference_scan(bytes);
    let text = String::from_utf8_lossy(bytes);
    match (&new, &old) {
        (Ok(Some(line)), Ok(Some((old_line, old_spans)))) => {
            assert_eq!(line.len, old_line.len, "length of {text:?}");
            assert_eq!(line.minor, old_line.minor, "version of {text:?}");
            assert_eq!(line.code, old_line.code, "code of {text:?}");
            // httparse gives a reason with obs-text as "" (not a slice of the head), and
            // no reason at all as "": compare the bytes.
            let reason =
                |r: Option<(usize, usize)>| r.map_or(&b""[..], |(at, n)| &bytes[at..at + n]);
            assert_eq!(
                reason(line.reason),
                reason(old_line.reason),
                "reason of {text:?}"
            );
            assert_eq!(spans.len(), old_spans.len(), "fields of {text:?}");
            let part = |(at, n): (usize, usize)| &bytes[at..at + n];
            for (&(name, value), &(old_name, old_value)) in spans.iter().zip(old_spans) {
                assert_eq!(name, old_name, "a field name of {text:?}");
                // (An empty value may be a static "" in httparse: bytes are compared.)
                assert_eq!(part(value), part(old_value), "a field value of {text:?}");
            }
        }
        (Ok(None), Ok(None)) | (Err(_), Err(_)) => {}
        (Err(Invalid::Head("bare LF")), Ok(None)) => {}
        _ => panic!("scan {new:?} where httparse gave {old:?} for {text:?}"),
    }
}

/// The body framing of a response, and whether it leaves the connection usable.
fn framing(
    status: StatusCode,
    version: Version,
    head_request: bool,
    fields: &FramingFields,
) -> Result<(Framing, bool), Invalid> {
    if head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok((Framing::Empty, true));
    }
    let length = fields.length()?;
    if fields.transfer_encoding {
        // Transfer-Encoding overrides Content-Length, and the two together suggest a
        // confused or hostile upstream: its connection is not reused.
        let chunked = version == Version::HTTP_11 && fields.ends_in_chunked;
        return Ok(match (chunked, length) {
            (true, None) => (Framing::Chunked, true),
            (true, Some(_)) => (Framing::Chunked, false),
            (false, _) => (Framing::UntilClose, false),
        });
    }
    Ok(match length {
        Some(n) => (Framing::Length(n), true),
        None => (Framing::UntilClose, false),
    })
}

/// Whether the last transfer coding of the `Transfer-Encoding` fields is `chunked`.
pub(crate) fn ends_in_chunked(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .next_back()
        .is_some_and(|v| ends_in_chunked_value(v.as_bytes()))
}

/// The `Content-Length` of `headers`: `None` without one; an error unless every field
/// and every comma-separated element is the same decimal number.
pub(crate) fn content_length(headers: &HeaderMap) -> Result<Option<u64>, Invalid> {
    let mut found = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        let n = content_length_value(value.as_bytes()).ok_or(Invalid::ContentLength)?;
        if found.is_some_and(|f| f != n) {
            return Err(Invalid::ContentLength);
        }
        found = Some(n);
    }
    Ok(found)
}

/// One `Content-Length` field value: a decimal number, or a list of the same one.
pub(crate) fn content_length_value(value: &[u8]) -> Option<u64> {
    let mut found = None;
    for element in value.split(|b| *b == b',') {
        let n = decimal(element.trim_ascii())?;
        if found.is_some_and(|f| f != n) {
            return None;
        }
        found = Some(n);
    }
    found
}

/// Whether the last transfer coding of one `Transfer-Encoding` field value is `chunked`.
pub(crate) fn ends_in_chunked_value(value: &[u8]) -> bool {
    value
        .rsplit(|b| *b == b',')
        .next()
        .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}

/// A decimal number of at most 19 digits (no sign, no spaces, not empty).
pub(crate) fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
}

/// Where a [`Chunked`] decoder is in its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a chunk-size line's hex digits.
    Size,
    /// After the digits: whitespace, then an extension or CR.
    AfterSize,
    /// In a chunk extension, until CR.
    Extension,
    /// After the size line's CR: LF.
    SizeLf,
    /// Inside a chunk's data.
    Data,
    /// After a chunk's data: CR.
    DataCr,
    /// After a chunk's data: LF.
    DataLf,
    /// After the last chunk: the trailer section, up to its empty line.
    Trailers,
    /// The body ended.
    Done,
}

/// What one step of a [`Chunked`] decoder produced.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// Data of the body.
    Data(Bytes),
    /// The body ended; its trailer fields, if it had any.
    End(Option<HeaderMap>),
    /// The buffer holds no complete step: read more into it.
    More,
}

/// An incremental decoder of a chunked body over the connection's read buffer.
#[derive(Debug)]
pub(crate) struct Chunked {
    state: State,
    /// The current chunk's data still to come (in `Size`: the size read so far).
    left: u64,
    /// Hex digits of the current size.
    digits: u8,
    /// Extension bytes seen in this body.
    extensions: u64,
}

impl Default for Chunked {
    fn default() -> Self {
        Chunked::new()
    }
}

impl Chunked {
    pub(crate) fn new() -> Chunked {
        Chunked {
            state: State::Size,
            left: 0,
            digits: 0,
            extensions: 0,
        }
    }

    /// Whether the body ended.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes from the front of `buf`, consuming what it used: data (at most `max`
    /// bytes, sharing `buf`'s memory), the end, or `More` when `buf` holds no complete
    /// step (everything it holds is consumed then, except a partial trailer section).
    pub(crate) fn decode(&mut self, buf: &mut BytesMut, max: usize) -> Result<Decoded, Invalid> {
        loop {
            if self.state == State::Data {
                if buf.is_empty() {
                    return Ok(Decoded::More);
                }
                let n = buf
                    .len()
                    .min(max.max(1))
                    .min(usize::try_from(self.left).unwrap_or(usize::MAX));
                self.left -= n as u64;
                if self.left == 0 {
                    self.state = State::DataCr;
                }
                return Ok(Decoded::Data(buf.split_to(n).freeze()));
            }
            if self.state == State::Trailers {
                return self.trailers(buf);
            }
            if self.state == State::Done {
                return Ok(Decoded::End(None));
            }
            let Some(&b) = buf.first() else {
                return Ok(Decoded::More);
            };
            self.step(b)?;
            let _ = buf.split_to(1);
        }
    }

    /// One byte of the framing (every state but `Data`, `Trailers` and `Done`).
    fn step(&mut self, b: u8) -> Result<(), Invalid> {
        match self.state {
            State::Size => match hex(b) {
                Some(d) => {
                    if self.digits == 16 {
                        return Err(Invalid::Chunk("chunk size too large"));
                    }
                    self.left = self.left << 4 | u64::from(d);
                    self.digits += 1;
                }
                None if self.digits == 0 => return Err(Invalid::Chunk("chunk size")),
                None => {
                    self.state = State::AfterSize;
                    return self.step(b);
                }
            },
            State::AfterSize => match b {
                b' ' | b'\t' => {}
                b';' => self.state = State::Extension,
                b'\r' => self.state = State::SizeLf,
                _ => return Err(Invalid::Chunk("chunk size")),
            },
            State::Extension => match b {
                b'\r' => self.state = State::SizeLf,
                b'\n' => return Err(Invalid::Chunk("bare LF in chunk extension")),
                _ => {
                    self.extensions += 1;
                    if self.extensions > MAX_CHUNK_EXTENSIONS {
                        return Err(Invalid::Chunk("chunk extensions too large"));
                    }
                }
            },
            State::SizeLf => {
                if b != b'\n' {
                    return Err(Invalid::Chunk("chunk size line without LF"));
                }
                self.digits = 0;
                self.state = if self.left == 0 {
                    State::Trailers
                } else {
                    State::Data
                };
            }
            State::DataCr => {
                if b != b'\r' {
                    return Err(Invalid::Chunk("chunk data without CRLF"));
                }
                self.state = State::DataLf;
            }
            State::DataLf => {
                if b != b'\n' {
                    return Err(Invalid::Chunk("chunk data without CRLF"));
                }
                self.state = State::Size;
            }
            State::Data | State::Trailers | State::Done => unreachable!("handled by decode"),
        }
        Ok(())
    }

    /// The trailer section: complete when it ends with an empty line.
    fn trailers(&mut self, buf: &mut BytesMut) -> Result<Decoded, Invalid> {
        // Most bodies have none: the last chunk's line is followed by CRLF.
        match buf.first() {
            None => return Ok(Decoded::More),
            Some(b'\r') => match buf.get(1) {
                None => return Ok(Decoded::More),
                Some(b'\n') => {
                    let _ = buf.split_to(2);
                    self.state = State::Done;
                    return Ok(Decoded::End(None));
                }
                Some(_) => return Err(Invalid::Chunk("trailer section")),
            },
            Some(_) => {}
        }
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let len = match httparse::parse_headers(buf, &mut fields) {
            Ok(httparse::Status::Complete((len, _))) => len,
            Ok(httparse::Status::Partial) if buf.len() >= MAX_TRAILERS => {
                return Err(Invalid::Chunk("trailer section too large"));
            }
            Ok(httparse::Status::Partial) => return Ok(Decoded::More),
            Err(_) => return Err(Invalid::Chunk("trailer section")),
        };
        if len > MAX_TRAILERS || has_bare_lf(&buf[..len]) {
            return Err(Invalid::Chunk("trailer section"));
        }
        let mut trailers = HeaderMap::new();
        for f in fields.iter().take_while(|f| !f.name.is_empty()) {
            let name = HeaderName::from_bytes(f.name.as_bytes())
                .map_err(|_| Invalid::Chunk("trailer name"))?;
            let value =
                HeaderValue::from_bytes(f.value).map_err(|_| Invalid::Chunk("trailer value"))?;
            trailers.append(name, value);
        }
        let _ = buf.split_to(len);
        self.state = State::Done;
        Ok(Decoded::End(Some(trailers)))
    }
}

/// What weir's HTTP/1.1 client reads from an upstream's bytes, fed in pieces of `step`
/// bytes (the fuzz target `h1_response` checks that the pieces do not matter).
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// The bytes end before the response head (or a chunked body) does.
    Incomplete,
    /// Refused: the reason.
    Invalid(String),
    /// A response: its final status (1xx heads skipped), framing, persistence, the body
    /// (chunked bodies decoded; others as delimited), its trailer fields, and the bytes
    /// left after it.
    Response {
        /// The final status.
        status: u16,
        /// The body's framing ([`Framing`]'s name).
        framing: String,
        /// Whether the connection could carry another exchange.
        keep_alive: bool,
        /// The body.
        body: Vec<u8>,
        /// The trailer fields of a chunked body.
        trailers: Vec<(String, Vec<u8>)>,
        /// Bytes after the response.
        rest: usize,
    },
}

/// Reads a response from `bytes` as the client does, `step` bytes at a time (at least 1),
/// for a request whose method was HEAD when `head_request`.
pub fn read(bytes: &[u8], head_request: bool, step: usize) -> Read {
    let step = step.max(1);
    let mut buf = BytesMut::new();
    let mut spans = Vec::new();
    let mut fed = 0;
    let mut feed = |buf: &mut BytesMut| {
        let n = step.min(bytes.len() - fed);
        buf.extend_from_slice(&bytes[fed..fed + n]);
        fed += n;
        n > 0
    };
    let head = loop {
        match parse_response(&mut buf, head_request, &mut spans) {
            Err(e) => return Read::Invalid(e.to_string()),
            Ok(Some(h))
                if h.status.is_informational() && h.status != StatusCode::SWITCHING_PROTOCOLS => {}
            Ok(Some(h)) => break h,
            Ok(None) if !feed(&mut buf) => return Read::Incomplete,
            Ok(None) => {}
        }
    };
    let mut body = Vec::new();
    let mut trailers = Vec::new();
    match head.framing {
        Framing::Empty => {}
        Framing::Length(n) => {
            while (buf.len() as u64) < n && feed(&mut buf) {}
            if (buf.len() as u64) < n {
                return Read::Incomplete;
            }
            body = buf.split_to(n as usize).to_vec();
        }
        Framing::UntilClose => {
            while feed(&mut buf) {}
            body = buf.split().to_vec();
        }
        Framing::Chunked => {
            let mut chunked = Chunked::new();
            loop {
                match chunked.decode(&mut buf, step) {
                    Err(e) => return Read::Invalid(e.to_string()),
                    Ok(Decoded::Data(d)) => body.extend_from_slice(&d),
                    Ok(Decoded::End(t)) => {
                        for (name, value) in t.iter().flatten() {
                            trailers.push((name.to_string(), value.as_bytes().to_vec()));
                        }
                        break;
                    }
                    Ok(Decoded::More) if !feed(&mut buf) => return Read::Incomplete,
                    Ok(Decoded::More) => {}
                }
            }
            debug_assert!(chunked.is_done());
        }
    }
    Read::Response {
        status: head.status.as_u16(),
        framing: format!("{:?}", head.framing),
        keep_alive: head.keep_alive,
        body,
        trailers,
        rest: buf.len() + bytes.len() - fed,
    }
}

/// The value of a hexadecimal digit.
fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// A field name as [`HeaderName::from_bytes`] reads it, the names nearly every message
/// carries compared as bytes first: `from_bytes` lowercases into a buffer and matches
/// its table of standard names, about 120 instructions a field, a tenth of a proxied
/// plaintext request's head work (callgrind, BENCHMARKS.md "Session 42").
pub(crate) fn field_name(name: &[u8]) -> Result<HeaderName, http::header::InvalidHeaderName> {
    Ok(match name {
        b"host" | b"Host" => header::HOST,
        b"content-length" | b"Content-Length" => header::CONTENT_LENGTH,
        b"content-type" | b"Content-Type" => header::CONTENT_TYPE,
        b"date" | b"Date" => header::DATE,
        b"server" | b"Server" => header::SERVER,
        b"connection" | b"Connection" => header::CONNECTION,
        b"user-agent" | b"User-Agent" => header::USER_AGENT,
        b"accept" | b"Accept" => header::ACCEPT,
        b"transfer-encoding" | b"Transfer-Encoding" => header::TRANSFER_ENCODING,
        _ => return HeaderName::from_bytes(name),
    })
}

#[cfg(test)]
mod tests;
