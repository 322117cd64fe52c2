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
    let mut fields =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut resp,
        buf,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err(Invalid::HeadTooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Invalid::HeadTooLarge),
        Err(e) => return Err(Invalid::Head(error_text(e))),
    };
    if len > MAX_HEAD {
        return Err(Invalid::HeadTooLarge);
    }
    if has_bare_lf(&buf[..len]) {
        return Err(Invalid::Head("bare LF"));
    }
    let (Some(code), Some(minor)) = (resp.code, resp.version) else {
        return Err(Invalid::Head("status line"));
    };
    let status = StatusCode::from_u16(code).map_err(|_| Invalid::Head("status code"))?;
    let version = if minor == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    // Where each part lies in `buf`, to slice them from the frozen head. An empty part
    // may be a static empty slice rather than one of `buf` (httparse gives `""` for a
    // reason phrase that is not UTF-8): it is (0, 0).
    let base = buf.as_ptr() as usize;
    let span = |part: &[u8]| match part.len() {
        0 => (0, 0),
        n => ((part.as_ptr() as usize).wrapping_sub(base).min(len - n), n),
    };
    let reason = resp
        .reason
        .filter(|r| !r.is_empty() && status.canonical_reason() != Some(*r))
        .map(|r| span(r.as_bytes()));
    spans.clear();
    spans.extend(
        resp.headers
            .iter()
            .map(|f| (span(f.name.as_bytes()), span(f.value))),
    );
    let head = buf.split_to(len).freeze();
    let slice = |(at, len): (usize, usize)| head.slice(at..at + len);
    let mut headers = HeaderMap::with_capacity(spans.len());
    // The framing's fields are read as they are added (no lookups after).
    let mut fields = FramingFields::default();
    for &(name, value) in spans.iter() {
        let name = HeaderName::from_bytes(&head[name.0..name.0 + name.1])
            .map_err(|_| Invalid::Head("field name"))?;
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

/// Whether a line of `head` ends in a bare LF (one not preceded by CR).
fn has_bare_lf(head: &[u8]) -> bool {
    memchr::memchr_iter(b'\n', head).any(|i| i == 0 || head[i - 1] != b'\r')
}

/// The text of an httparse error (the ones a response can raise).
fn error_text(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "field name",
        httparse::Error::HeaderValue => "field value",
        httparse::Error::NewLine => "line ending",
        httparse::Error::Status => "status code",
        httparse::Error::Token => "token",
        httparse::Error::TooManyHeaders => "too many fields",
        httparse::Error::Version => "version",
    }
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

#[cfg(test)]
mod tests;
