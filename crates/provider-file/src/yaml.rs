//! A YAML document → `serde_json::Value` fast path: two readers of the common subset of
//! YAML, each giving up (`None`) on anything it is not sure of, before serde-saphyr.
//!
//! 1. [`scan`]: weir's own one-pass scanner for the block-style, line-oriented YAML that
//!    Kubernetes manifests are written in (about 10× cheaper than the parser's events).
//! 2. The event path below: the `Value` built straight from the granit parser's event
//!    stream. serde-saphyr (the full reader) costs about twice its parser's events when it
//!    builds a `Value`: its event layer, serde's visitor plumbing, budget accounting and
//!    snippet bookkeeping. Nearly every Kubernetes manifest uses a small part of YAML —
//!    block and flow collections, plain and quoted strings, small integers, booleans,
//!    nulls — so this path reads exactly that part, with the same granit parser and parser
//!    options the full reader uses, and gives up on anything else: anchors, aliases, tags,
//!    merge keys, a duplicate key, a non-string key, a scalar it cannot resolve with
//!    certainty to what serde-saphyr would give (floats, hex or octal ints, `.inf`,
//!    anything number-shaped), deep nesting, a parse error.
//!
//! When both give up, the caller reads the document with serde-saphyr, so values, refusals
//! and error texts stay serde-saphyr's. The differential tests (`yaml/tests.rs`) and the
//! `yaml_value` fuzz target check each reader on its own: whenever it answers,
//! serde-saphyr gives the identical `Value`.

mod node;
mod scan;

use std::borrow::Cow;

pub(crate) use node::Node;

use serde_json::{Map, Number, Value};
use serde_saphyr::granit_parser::{self as granit, Event, Parser, ScalarStyle, StrInput};

/// Past this nesting depth the full reader decides (its budget refuses depth > 64).
const MAX_DEPTH: usize = 48;
/// Past this many parser events the full reader decides (its budget: 1,000,000 events,
/// 250,000 nodes).
const MAX_EVENTS: usize = 100_000;
/// Larger documents go to the full reader (its byte budgets are 64 MiB and up).
const MAX_BYTES: usize = 8 << 20;

/// The parser options serde-saphyr's default `Options` give granit (its `Budget`'s
/// `parser_options`, with comments emitted), so that both paths accept the same input.
fn parser_options() -> granit::Options {
    let mut o = granit::Options::default();
    o.emit_comments = true;
    o.max_buffered_comment_events = 32;
    o.simple_key_max_lookahead = 1024;
    o.flow_nesting_limit = 255;
    o.block_nesting_limit = o.block_nesting_limit.max(65);
    o
}

enum Frame {
    Seq(Vec<Value>),
    /// A mapping and the key read whose value is pending.
    Map(Map<String, Value>, Option<String>),
}

/// The `Value` of one YAML document, or `None` when the full reader must decide.
pub(crate) fn fast_value(text: &str) -> Option<Value> {
    scan::scan_value(text).or_else(|| event_value(text))
}

/// The scanner's tree of one YAML document (see [`fast_value`]), or `None` when the other
/// readers must decide: [`Node::into_value`] is the `Value` `fast_value` gives.
pub(crate) fn scan_node(text: &str) -> Option<Node<'_>> {
    scan::scan_node(text)
}

/// The `Value` of one YAML document built from granit's events, or `None` when the full
/// reader must decide.
pub(crate) fn event_value(text: &str) -> Option<Value> {
    if text.len() > MAX_BYTES {
        return None;
    }
    let parser = Parser::with_options(StrInput::new(text), parser_options());
    let mut stack: Vec<Frame> = Vec::new();
    let mut root: Option<Value> = None;
    let mut documents = 0;
    for (events, item) in parser.enumerate() {
        if events > MAX_EVENTS {
            return None;
        }
        let (event, _span) = item.ok()?;
        let value = match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => continue,
            Event::Comment(..) => continue,
            Event::DocumentStart(..) => {
                documents += 1;
                if documents > 1 {
                    return None;
                }
                continue;
            }
            Event::Scalar(text, style, anchor, tag) => {
                if anchor != 0 || tag.is_some() {
                    return None;
                }
                if style == ScalarStyle::Plain {
                    resolve_plain(&text)?
                } else {
                    Value::String(text.into_owned())
                }
            }
            Event::SequenceStart(_, anchor, ref tag) | Event::MappingStart(_, anchor, ref tag) => {
                if anchor != 0 || tag.is_some() || stack.len() >= MAX_DEPTH {
                    return None;
                }
                // A collection is never a key here (serde_json keys are strings).
                if let Some(Frame::Map(_, None)) = stack.last() {
                    return None;
                }
                stack.push(if matches!(event, Event::SequenceStart(..)) {
                    Frame::Seq(Vec::new())
                } else {
                    Frame::Map(Map::new(), None)
                });
                continue;
            }
            Event::SequenceEnd => match stack.pop()? {
                Frame::Seq(items) => Value::Array(items),
                Frame::Map(..) => return None,
            },
            Event::MappingEnd => match stack.pop()? {
                Frame::Map(map, None) => Value::Object(map),
                _ => return None,
            },
            // Aliases, anchor metadata and anything newer: the full reader decides.
            _ => return None,
        };
        match stack.last_mut() {
            None => {
                if root.replace(value).is_some() {
                    return None;
                }
            }
            Some(Frame::Seq(items)) => items.push(value),
            Some(Frame::Map(map, pending)) => match pending.take() {
                Some(key) => {
                    map.insert(key, value);
                }
                None => {
                    // Only string keys; a duplicate is the full reader's error to give.
                    let Value::String(key) = value else {
                        return None;
                    };
                    if map.contains_key(&key) {
                        return None;
                    }
                    *pending = Some(key);
                }
            },
        }
    }
    if documents != 1 || !stack.is_empty() {
        return None;
    }
    root
}

/// What serde-saphyr resolves an untagged plain scalar to when the target is untyped, for
/// the spellings whose resolution is certain; `None` for the rest (floats, other integer
/// forms, `.inf`, number-shaped text).
fn resolve_plain(s: &str) -> Option<Value> {
    resolve_scalar(s).map(Node::into_value)
}

/// serde-saphyr's YAML 1.1 booleans (matched case-insensitively).
const BOOLS: [(&str, bool); 8] = [
    ("true", true),
    ("false", false),
    ("yes", true),
    ("no", false),
    ("on", true),
    ("off", false),
    ("y", true),
    ("n", false),
];

/// [`resolve_plain`] as a [`Node`], borrowing a string's text.
fn resolve_scalar(s: &str) -> Option<Node<'_>> {
    // serde-saphyr's null spellings, then its YAML 1.1 booleans (case-insensitive).
    if matches!(s, "" | "~" | "null" | "Null" | "NULL") {
        return Some(Node::Null);
    }
    // Every boolean spelling is 1 to 5 bytes long: most scalars skip the eight
    // comparisons.
    for (word, b) in if s.len() > 5 { &[][..] } else { &BOOLS[..] } {
        if s.eq_ignore_ascii_case(word) {
            return Some(Node::Bool(*b));
        }
    }
    let bytes = s.as_bytes();
    let first = bytes[0];
    if first.is_ascii_alphabetic() {
        // Rust's float parser reads these words (the full reader then refuses them).
        if ["inf", "infinity", "nan"]
            .iter()
            .any(|w| s.eq_ignore_ascii_case(w))
        {
            return None;
        }
        return Some(Node::Str(Cow::Borrowed(s)));
    }
    if first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'.') {
        if let Some(n) = small_int(s) {
            return Some(Node::Int(n));
        }
        // Text that no number syntax reads: it holds a byte that no integer (decimal,
        // `0x`, `0o`, `0b`, underscores, sexagesimal) or float (exponent, `inf`, `nan`)
        // spelling has.
        let numeric = |b: u8| {
            b.is_ascii_digit()
                || b"+-._:,abcdefinotxyABCDEFINOTXY".contains(&b)
                || b.is_ascii_whitespace()
        };
        if bytes.iter().any(|&b| !numeric(b)) {
            return Some(Node::Str(Cow::Borrowed(s)));
        }
        return None;
    }
    // Every other first character (`/`, `*`, quotes cannot start a plain scalar, ...):
    // no number, boolean or null spelling starts with it. `<<` is a merge key.
    if s == "<<" || first == b'<' {
        return None;
    }
    Some(Node::Str(Cow::Borrowed(s)))
}

/// `0`, or a decimal integer without leading zeros, sign `-` only, of at most 18 digits
/// (so it fits both `i64` and `u64`).
fn small_int(s: &str) -> Option<Number> {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    if digits.is_empty()
        || digits.len() > 18
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.starts_with('0') && (digits.len() > 1 || negative))
    {
        return None;
    }
    let v: u64 = digits.parse().ok()?;
    Some(if negative {
        Number::from(-i64::try_from(v).ok()?)
    } else {
        Number::from(v)
    })
}

/// The full reader's `Value` of one document (serde-saphyr, as `parse` calls it).
pub(crate) fn full_value(text: &str) -> Result<Value, serde_saphyr::Error> {
    let options = serde_saphyr::options! { with_snippet: false };
    serde_saphyr::from_str_with_options::<Value>(text, options)
}

/// Checks that each reader of the fast path agrees with the full reader on `text` (one
/// document): when the scanner or the event path answers, the full reader gives the
/// identical value. `Ok(true)` when either answered. For the tests and the `yaml_value`
/// fuzz target.
///
/// Also checks the typed read of Secrets and Ingresses from the scanner's tree against the
/// usual path (`crate::typed::check`).
pub(crate) fn check_fast_path(text: &str) -> Result<bool, String> {
    let answered = check_reader("scanner", scan::scan_value(text), text)?
        | check_reader("event path", event_value(text), text)?;
    crate::typed::check(text)?;
    Ok(answered)
}

/// Whether `fast` (one reader's answer) is there, or how it differs from the full reader.
fn check_reader(reader: &str, fast: Option<Value>, text: &str) -> Result<bool, String> {
    let Some(fast) = fast else {
        return Ok(false);
    };
    match full_value(text) {
        Ok(full) if full == fast => Ok(true),
        Ok(full) => Err(format!(
            "{reader} {fast:?} but serde-saphyr {full:?} for {text:?}"
        )),
        Err(e) => Err(format!(
            "{reader} {fast:?} but serde-saphyr refuses ({e}) {text:?}"
        )),
    }
}

#[cfg(test)]
pub(crate) mod tests;
