//! weir's own scanner for the block-style YAML that Kubernetes manifests are written in:
//! one pass over the bytes, building the document's tree (`Node`) as it goes.
//!
//! granit's event stream costs about 170 instructions per byte of a manifest (tokens and
//! events are queued, moved and copied). Nearly every manifest uses a small, line-oriented
//! part of YAML, so this scanner reads exactly that part and gives up (`None`) on anything
//! else; the caller then tries the event path, which falls back to serde-saphyr. What it
//! reads:
//!
//! - text without tabs, carriage returns or other control characters (non-ASCII
//!   characters only where they are content: not NEL, LS, PS or the byte order mark);
//! - an optional `---` line first and an optional `...` line last; comment and blank lines;
//! - block mappings of plain or quoted single-line keys (string-valued, unique, not `<<`,
//!   at most [`MAX_KEY_BYTES`]), block sequences (`- `), also compact (`- a: 1`, `- - a`)
//!   and at the key's indentation under a key;
//! - plain scalars on one line (resolved by `resolve_plain`, the event path's resolution),
//!   single- and double-quoted scalars on one line (double-quoted with the escapes YAML
//!   defines), `|` / `|-` and `>` / `>-` block scalars whose content starts on the next
//!   line, without more-indented lines or trailing spaces when folded;
//! - flow sequences and mappings on one line, of plain scalars without `:`, quoted scalars
//!   and flow collections (mapping entries written `key: value`).
//!
//! It gives up on: anchors, aliases, tags, directives, `?` keys, multi-line plain or quoted
//! scalars and flow collections, `|+` / `>+` and indentation indicators, a scalar whose
//! resolution the event path would not answer for (floats, other number forms), duplicate
//! or non-string keys, a root that is not a block mapping or sequence, nesting deeper than
//! `MAX_DEPTH`, more than [`MAX_NODES`] nodes, long runs of comments, and anything it
//! does not recognise (which includes every syntax error).

use std::borrow::Cow;

use serde_json::Value;

use super::node::{Node, distinct_keys};
use super::{MAX_BYTES, MAX_DEPTH, resolve_scalar};

/// Past this many nodes the other paths decide (serde-saphyr's budget: 250,000).
const MAX_NODES: usize = 100_000;
/// Longer keys go to the other paths (granit looks 1,024 characters ahead for a key's `:`).
const MAX_KEY_BYTES: usize = 512;
/// Longer runs of comments go to the other paths (granit buffers at most 32 comment
/// events in some positions and refuses a document past that).
const MAX_COMMENT_RUN: usize = 16;

/// The `Value` of one document (as `parse::split_documents` cuts them), or `None` when
/// the scanner is not sure: then the event path (and serde-saphyr) must decide.
pub(super) fn scan_value(text: &str) -> Option<Value> {
    scan_node(text).map(Node::into_value)
}

/// The tree of one document (see [`scan_value`]).
pub(super) fn scan_node(text: &str) -> Option<Node<'_>> {
    let src = text.as_bytes();
    // Branch-free passes (they vectorise) instead of checks in every loop below.
    let control = src.iter().fold(false, |acc, &b| {
        acc | (b < b' ' && b != b'\n') | (b == 0x7f)
    });
    if src.len() > MAX_BYTES || control {
        return None;
    }
    let non_ascii = src.iter().fold(false, |acc, &b| acc | (b >= 0x80));
    if non_ascii && !text.chars().all(ordinary) {
        return None;
    }
    let mut scanner = Scanner {
        text,
        src,
        pos: 0,
        line: 0,
        nodes: 0,
        comments: 0,
        too_many_comments: false,
    };
    let value = scanner.document()?;
    (!scanner.too_many_comments).then_some(value)
}

struct Scanner<'a> {
    text: &'a str,
    src: &'a [u8],
    /// The next byte to read.
    pos: usize,
    /// Where the current line starts.
    line: usize,
    nodes: usize,
    /// Comments since the last content line.
    comments: usize,
    too_many_comments: bool,
}

/// Whether a character above ASCII is one every reader takes as plain content: YAML's
/// printable characters except the byte order mark, and except NEL, LS and PS (line
/// breaks in YAML 1.1).
fn ordinary(c: char) -> bool {
    c.is_ascii()
        || matches!(c as u32, 0xa0..=0x2027 | 0x202a..=0xd7ff | 0xe000..=0xfefe | 0xff00..=0xfffd | 0x1_0000..)
}

/// A space, a line break or the end of the text (read as 0: the text holds no NUL).
fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | 0)
}

fn is_flow_indicator(b: u8) -> bool {
    matches!(b, b',' | b'[' | b']' | b'{' | b'}')
}

/// Whether a plain scalar may start with `b` followed by `next` (in flow context `next`
/// must not be a flow indicator either). `?` and `:`, which YAML allows before a
/// non-space, are left to the other paths.
fn plain_start(b: u8, next: u8, flow: bool) -> bool {
    match b {
        b'-' => !(is_blank(next) || flow && is_flow_indicator(next)),
        b'?' | b':' | b',' | b'[' | b']' | b'{' | b'}' | b'#' | b'&' | b'*' | b'!' | b'|'
        | b'>' | b'\'' | b'"' | b'%' | b'@' | b'`' => false,
        _ => !is_blank(b),
    }
}

/// A scalar read from one line, or a key (the text before `: `).
enum Plain<'a> {
    Scalar(&'a str),
    Key(&'a str),
}

impl<'a> Scanner<'a> {
    fn at(&self, i: usize) -> u8 {
        self.src.get(i).copied().unwrap_or(0)
    }

    fn count(&mut self) -> Option<()> {
        self.nodes += 1;
        (self.nodes <= MAX_NODES).then_some(())
    }

    fn comment(&mut self) {
        self.comments += 1;
        if self.comments > MAX_COMMENT_RUN {
            self.too_many_comments = true;
        }
    }

    /// Moves past the rest of a line that holds nothing more than a comment, if that.
    fn skip_comment_line(&mut self) {
        if self.at(self.pos) == b'#' {
            self.comment();
        }
        self.skip_line();
    }

    /// Moves past the end of the current line.
    fn skip_line(&mut self) {
        self.pos = match self.src[self.pos..].iter().position(|&b| b == b'\n') {
            Some(i) => self.pos + i + 1,
            None => self.src.len(),
        };
    }

    fn skip_spaces(&mut self) {
        while self.at(self.pos) == b' ' {
            self.pos += 1;
        }
    }

    /// Skips blank and comment lines from a line start; returns the indentation of the
    /// next content line (`pos` stays at its start), or `None` at the end of the text.
    fn content_line(&mut self) -> Option<usize> {
        loop {
            let line = self.pos;
            let mut i = line;
            while self.at(i) == b' ' {
                i += 1;
            }
            match self.at(i) {
                0 => {
                    self.pos = self.src.len();
                    return None;
                }
                b'\n' => self.pos = i + 1,
                b'#' => {
                    self.comment();
                    self.skip_line();
                }
                _ => {
                    self.line = line;
                    self.comments = 0;
                    return Some(i - line);
                }
            }
        }
    }

    /// After a node on a line: only spaces and a comment may follow.
    fn end_line(&mut self) -> Option<()> {
        self.skip_spaces();
        match self.at(self.pos) {
            0 => Some(()),
            b'\n' => {
                self.pos += 1;
                Some(())
            }
            b'#' if self.src[self.pos - 1] == b' ' => {
                self.comment();
                self.skip_line();
                Some(())
            }
            _ => None,
        }
    }

    /// Whether the line at `pos` (indentation 0) is a `---` or `...` marker.
    fn at_marker(&self) -> bool {
        let rest = &self.src[self.pos..];
        (rest.starts_with(b"---") || rest.starts_with(b"...")) && is_blank(self.at(self.pos + 3))
    }

    fn document(&mut self) -> Option<Node<'a>> {
        let mut indent = self.content_line()?;
        let mut explicit = false;
        if indent == 0
            && self.src[self.pos..].starts_with(b"---")
            && is_blank(self.at(3 + self.pos))
        {
            self.pos += 3;
            self.end_line()?;
            explicit = true;
            match self.content_line() {
                Some(i) => indent = i,
                None => return Some(Node::Null),
            }
        }
        if indent != 0 {
            return None;
        }
        let root = if self.at_marker() {
            // Only `...` can end the document here; `---` would start another.
            (explicit && self.at(self.pos) == b'.').then_some(Node::Null)?
        } else if matches!(self.at(self.pos), b'[' | b'{') {
            return None;
        } else {
            let root = self.node(0, 0, true)?;
            if !matches!(root, Node::Map(_) | Node::Seq(_)) {
                return None;
            }
            match self.content_line() {
                None => return Some(root),
                Some(0) if self.at(self.pos) == b'.' && self.at_marker() => root,
                Some(_) => return None,
            }
        };
        // A `...` line ends the text.
        self.pos += 3;
        self.end_line()?;
        self.content_line().is_none().then_some(root)
    }

    /// The node at `pos`, of column `col`. With `block`, it may be a block sequence or
    /// mapping (it is the first thing on its line or follows `- `); otherwise it is the
    /// value of a key on the key's line.
    fn node(&mut self, col: usize, depth: usize, block: bool) -> Option<Node<'a>> {
        self.count()?;
        let (b, next) = (self.at(self.pos), self.at(self.pos + 1));
        match b {
            b'-' if block && is_blank(next) => self.block_seq(col, depth + 1),
            b'[' | b'{' => {
                let value = self.flow(depth + 1)?;
                self.end_line()?;
                Some(value)
            }
            b'"' | b'\'' => {
                let start = self.pos;
                let s = self.quoted()?;
                self.skip_spaces();
                if self.at(self.pos) == b':' && is_blank(self.at(self.pos + 1)) {
                    if !block || self.pos - start > MAX_KEY_BYTES || s == "<<" {
                        return None;
                    }
                    self.pos += 1;
                    return self.block_map(col, s, depth + 1);
                }
                self.end_line()?;
                Some(Node::Str(s))
            }
            _ if plain_start(b, next, false) => match self.plain_block()? {
                Plain::Scalar(s) => resolve_scalar(s),
                Plain::Key(k) if block => {
                    let key = plain_key(k)?;
                    self.block_map(col, key, depth + 1)
                }
                Plain::Key(_) => None,
            },
            _ => None,
        }
    }

    /// A plain scalar in block context, on one line from `pos`. For a scalar `pos` moves
    /// to the next line; for a key, past its `:`.
    fn plain_block(&mut self) -> Option<Plain<'a>> {
        let start = self.pos;
        let mut i = start;
        loop {
            match self.at(i) {
                0 | b'\n' => break,
                b':' if is_blank(self.at(i + 1)) => {
                    if i - start > MAX_KEY_BYTES {
                        return None;
                    }
                    self.pos = i + 1;
                    return Some(Plain::Key(self.text[start..i].trim_end_matches(' ')));
                }
                b'#' if self.src[i - 1] == b' ' => {
                    self.comment();
                    break;
                }
                _ => i += 1,
            }
        }
        self.pos = i;
        self.skip_line();
        Some(Plain::Scalar(self.text[start..i].trim_end_matches(' ')))
    }

    /// A key of a block mapping at `pos`, which must be one; `pos` moves past its `:`.
    fn block_key(&mut self) -> Option<Cow<'a, str>> {
        let (b, next) = (self.at(self.pos), self.at(self.pos + 1));
        if b == b'"' || b == b'\'' {
            let start = self.pos;
            let key = self.quoted()?;
            self.skip_spaces();
            if self.at(self.pos) != b':'
                || !is_blank(self.at(self.pos + 1))
                || self.pos - start > MAX_KEY_BYTES
                || key == "<<"
            {
                return None;
            }
            self.pos += 1;
            return Some(key);
        }
        if !plain_start(b, next, false) {
            return None;
        }
        match self.plain_block()? {
            Plain::Key(k) => plain_key(k),
            Plain::Scalar(_) => None,
        }
    }

    /// A block mapping at column `col` whose first key has been read (`pos` is past its
    /// `:`).
    fn block_map(&mut self, col: usize, first: Cow<'a, str>, depth: usize) -> Option<Node<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let mut map = Vec::new();
        let mut key = first;
        loop {
            self.count()?;
            let value = self.map_value(col, depth)?;
            map.push((key, value));
            match self.content_line() {
                Some(i) if i == col && !(i == 0 && self.at_marker()) => {}
                Some(i) if i > col => return None,
                _ => return distinct_keys(&map).then_some(Node::Map(map)),
            }
            self.pos += col;
            key = self.block_key()?;
        }
    }

    /// The value of a key of a block mapping at column `col`; `pos` is past the `:`.
    fn map_value(&mut self, col: usize, depth: usize) -> Option<Node<'a>> {
        self.skip_spaces();
        match self.at(self.pos) {
            0 | b'\n' | b'#' => {
                self.skip_comment_line();
                match self.content_line() {
                    Some(i) if i > col => {
                        self.pos += i;
                        self.node(i, depth, true)
                    }
                    // A sequence may sit at its key's indentation.
                    Some(i)
                        if i == col
                            && self.at(self.pos + i) == b'-'
                            && is_blank(self.at(self.pos + i + 1)) =>
                    {
                        self.pos += i;
                        self.count()?;
                        self.block_seq(col, depth + 1)
                    }
                    _ => {
                        self.count()?;
                        Some(Node::Null)
                    }
                }
            }
            b'|' | b'>' => self.block_scalar(col),
            _ => self.node(self.pos - self.line, depth, false),
        }
    }

    /// A block sequence at column `col`; `pos` is at its first `-`.
    fn block_seq(&mut self, col: usize, depth: usize) -> Option<Node<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let mut items = Vec::new();
        loop {
            self.pos += 1;
            self.skip_spaces();
            let item = match self.at(self.pos) {
                0 | b'\n' | b'#' => {
                    self.skip_comment_line();
                    match self.content_line() {
                        Some(i) if i > col => {
                            self.pos += i;
                            self.node(i, depth, true)?
                        }
                        _ => {
                            self.count()?;
                            Node::Null
                        }
                    }
                }
                b'|' | b'>' => self.block_scalar(col)?,
                _ => self.node(self.pos - self.line, depth, true)?,
            };
            items.push(item);
            match self.content_line() {
                Some(i)
                    if i == col
                        && self.at(self.pos + i) == b'-'
                        && is_blank(self.at(self.pos + i + 1)) =>
                {
                    self.pos += i;
                }
                Some(i) if i > col => return None,
                _ => return Some(Node::Seq(items)),
            }
        }
    }

    /// A `|` or `>` block scalar (with `-` chomping or none) inside a collection at column
    /// `parent`; `pos` is at the indicator.
    fn block_scalar(&mut self, parent: usize) -> Option<Node<'a>> {
        self.count()?;
        let folded = self.at(self.pos) == b'>';
        self.pos += 1;
        let strip = self.at(self.pos) == b'-';
        if strip {
            self.pos += 1;
        }
        // `+` chomping and indentation indicators are left to the other paths.
        if !is_blank(self.at(self.pos)) {
            return None;
        }
        self.end_line()?;
        // The indentation is the first non-blank line's; a blank line before it may not
        // have more spaces (YAML's rule).
        let (mut probe, mut widest_blank) = (self.pos, 0);
        let indent = loop {
            let mut n = 0;
            while self.at(probe + n) == b' ' {
                n += 1;
            }
            match self.at(probe + n) {
                b'\n' => {
                    widest_blank = widest_blank.max(n);
                    probe += n + 1;
                }
                0 if n == 0 => break 0,
                0 => return None,
                _ => break n,
            }
        };
        if indent <= parent {
            // No content line: the scalar is empty (its blank lines are chomped).
            self.pos = probe;
            return Some(Node::Str(Cow::Borrowed("")));
        }
        if widest_blank > indent {
            return None;
        }
        let mut out = String::new();
        // Blank lines since the last content line.
        let mut breaks = 0;
        let mut first = true;
        while self.pos < self.src.len() {
            let line = self.pos;
            let mut n = 0;
            while self.at(line + n) == b' ' {
                n += 1;
            }
            match self.at(line + n) {
                b'\n' if n <= indent => {
                    breaks += 1;
                    self.pos = line + n + 1;
                    continue;
                }
                // Spaces past the indentation on a blank line, or at the end of the text.
                b'\n' | 0 => return None,
                _ if n < indent => break,
                _ => {}
            }
            if folded && n > indent {
                return None;
            }
            let end = line + memchr::memchr(b'\n', &self.src[line..])?;
            if folded && self.src[end - 1] == b' ' {
                return None;
            }
            // Between two lines: a folded line break is a space, a literal one a newline;
            // every blank line is a newline (folded: the break before it is dropped).
            if !first && folded && breaks == 0 {
                out.push(' ');
            } else {
                let newlines = if first || folded { breaks } else { breaks + 1 };
                out.extend(std::iter::repeat_n('\n', newlines));
            }
            out.push_str(&self.text[line + indent..end]);
            first = false;
            breaks = 0;
            self.pos = end + 1;
        }
        if !strip {
            out.push('\n');
        }
        Some(Node::Str(Cow::Owned(out)))
    }

    /// A quoted scalar on one line at `pos`; `pos` moves past its closing quote. Borrowed
    /// from the text unless it holds an escape (or `''`).
    fn quoted(&mut self) -> Option<Cow<'a, str>> {
        let quote = self.src[self.pos];
        // Only built once an escape is met.
        let mut out: Option<String> = None;
        let mut i = self.pos + 1;
        let mut run = i;
        loop {
            match self.at(i) {
                0 | b'\n' => return None,
                b'\'' if quote == b'\'' => {
                    if self.at(i + 1) != b'\'' {
                        break;
                    }
                    let out = out.get_or_insert_default();
                    out.push_str(&self.text[run..i]);
                    out.push('\'');
                    i += 2;
                    run = i;
                }
                b'"' if quote == b'"' => break,
                b'\\' if quote == b'"' => {
                    let out = out.get_or_insert_default();
                    out.push_str(&self.text[run..i]);
                    i = self.escape(i + 1, out)?;
                    run = i;
                }
                _ => i += 1,
            }
        }
        // `i` is at the closing quote.
        self.pos = i + 1;
        Some(match out {
            Some(mut out) => {
                out.push_str(&self.text[run..i]);
                Cow::Owned(out)
            }
            None => Cow::Borrowed(&self.text[run..i]),
        })
    }

    /// The escape whose letter is at `i` in a double-quoted scalar: pushes its character
    /// and returns the position after it.
    fn escape(&self, i: usize, out: &mut String) -> Option<usize> {
        let c = match self.at(i) {
            b'0' => '\0',
            b'a' => '\x07',
            b'b' => '\x08',
            b't' => '\t',
            b'n' => '\n',
            b'v' => '\x0b',
            b'f' => '\x0c',
            b'r' => '\r',
            b'e' => '\x1b',
            b' ' => ' ',
            b'"' => '"',
            b'/' => '/',
            b'\\' => '\\',
            b'N' => '\u{85}',
            b'_' => '\u{a0}',
            b'L' => '\u{2028}',
            b'P' => '\u{2029}',
            b'x' | b'u' | b'U' => {
                let digits = match self.at(i) {
                    b'x' => 2,
                    b'u' => 4,
                    _ => 8,
                };
                let hex = self.text.get(i + 1..i + 1 + digits)?;
                if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                let c = char::from_u32(u32::from_str_radix(hex, 16).ok()?)?;
                out.push(c);
                return Some(i + 1 + digits);
            }
            _ => return None,
        };
        out.push(c);
        Some(i + 1)
    }

    /// A flow sequence or mapping on one line at `pos`; `pos` moves past its end.
    fn flow(&mut self, depth: usize) -> Option<Node<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let close = if self.at(self.pos) == b'[' {
            b']'
        } else {
            b'}'
        };
        self.pos += 1;
        let mut items = Vec::new();
        let mut map = Vec::new();
        loop {
            self.skip_spaces();
            if self.at(self.pos) == close {
                self.pos += 1;
                break;
            }
            if close == b'}' {
                let key = self.flow_key()?;
                self.skip_spaces();
                let value = self.flow_node(depth)?;
                map.push((key, value));
            } else {
                items.push(self.flow_node(depth)?);
            }
            self.skip_spaces();
            match self.at(self.pos) {
                b',' => self.pos += 1,
                b if b == close => {
                    self.pos += 1;
                    break;
                }
                _ => return None,
            }
        }
        if close == b'}' {
            distinct_keys(&map).then_some(Node::Map(map))
        } else {
            Some(Node::Seq(items))
        }
    }

    /// A node inside a flow collection.
    fn flow_node(&mut self, depth: usize) -> Option<Node<'a>> {
        self.count()?;
        match self.at(self.pos) {
            b'[' | b'{' => self.flow(depth + 1),
            b'"' | b'\'' => self.quoted().map(Node::Str),
            b if plain_start(b, self.at(self.pos + 1), true) => resolve_scalar(self.plain_flow()),
            _ => None,
        }
    }

    /// A plain scalar in flow context at `pos`; `pos` moves to the byte that ends it.
    fn plain_flow(&mut self) -> &'a str {
        let start = self.pos;
        let mut i = start;
        while !matches!(
            self.at(i),
            0 | b'\n' | b',' | b'[' | b']' | b'{' | b'}' | b':' | b'#'
        ) {
            i += 1;
        }
        self.pos = i;
        self.text[start..i].trim_end_matches(' ')
    }

    /// A key of a flow mapping at `pos`, with its `: `; `pos` moves past them.
    fn flow_key(&mut self) -> Option<Cow<'a, str>> {
        self.count()?;
        let start = self.pos;
        let (b, next) = (self.at(self.pos), self.at(self.pos + 1));
        let key = if b == b'"' || b == b'\'' {
            let key = self.quoted()?;
            self.skip_spaces();
            (key != "<<").then_some(key)?
        } else if plain_start(b, next, true) {
            plain_key(self.plain_flow())?
        } else {
            return None;
        };
        if self.at(self.pos) != b':' || self.at(self.pos + 1) != b' ' {
            return None;
        }
        if self.pos - start > MAX_KEY_BYTES {
            return None;
        }
        self.pos += 2;
        Some(key)
    }
}

/// A plain key as the other paths read it: a string (never `<<`, a merge key).
fn plain_key(text: &str) -> Option<Cow<'_, str>> {
    match resolve_scalar(text)? {
        Node::Str(s) if s != "<<" => Some(s),
        _ => None,
    }
}
