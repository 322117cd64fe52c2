//! A YAML document → `serde_json::Value` fast path, built straight from the parser's
//! event stream.
//!
//! serde-saphyr (the full reader) costs about twice its parser's events when it builds a
//! `Value`: its event layer, serde's visitor plumbing, budget accounting and snippet
//! bookkeeping. Nearly every Kubernetes manifest uses a small part of YAML — block and
//! flow collections, plain and quoted strings, small integers, booleans, nulls — so this
//! module reads exactly that part, with the same granit parser and parser options the
//! full reader uses, and gives up (`None`) on anything else: anchors, aliases, tags, merge
//! keys, a duplicate key, a non-string key, a scalar it cannot resolve with certainty to
//! what serde-saphyr would give (floats, hex or octal ints, `.inf`, anything
//! number-shaped), deep nesting, a parse error. The caller then reads the document with
//! serde-saphyr, so values, refusals and error texts stay serde-saphyr's.
//!
//! The differential tests below and the `yaml_value` fuzz target check that whenever
//! this path answers, serde-saphyr gives the identical `Value`.

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
    // serde-saphyr's null spellings, then its YAML 1.1 booleans (case-insensitive).
    if matches!(s, "" | "~" | "null" | "Null" | "NULL") {
        return Some(Value::Null);
    }
    for (word, b) in [
        ("true", true),
        ("false", false),
        ("yes", true),
        ("no", false),
        ("on", true),
        ("off", false),
        ("y", true),
        ("n", false),
    ] {
        if s.eq_ignore_ascii_case(word) {
            return Some(Value::Bool(b));
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
        return Some(Value::String(s.to_owned()));
    }
    if first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'.') {
        if let Some(n) = small_int(s) {
            return Some(Value::Number(n));
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
            return Some(Value::String(s.to_owned()));
        }
        return None;
    }
    // Every other first character (`/`, `*`, quotes cannot start a plain scalar, ...):
    // no number, boolean or null spelling starts with it. `<<` is a merge key.
    if s == "<<" || first == b'<' {
        return None;
    }
    Some(Value::String(s.to_owned()))
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

/// Checks that the fast path agrees with the full reader on `text` (one document): when
/// the fast path answers, the full reader gives the identical value. For the tests and the
/// `yaml_value` fuzz target.
pub(crate) fn check_fast_path(text: &str) -> Result<bool, String> {
    let Some(fast) = fast_value(text) else {
        return Ok(false);
    };
    match full_value(text) {
        Ok(full) if full == fast => Ok(true),
        Ok(full) => Err(format!(
            "fast path {fast:?} but serde-saphyr {full:?} for {text:?}"
        )),
        Err(e) => Err(format!(
            "fast path {fast:?} but serde-saphyr refuses ({e}) {text:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::split_documents;

    /// Checks one file's documents; returns (fast, total).
    fn check_file(text: &str) -> (usize, usize) {
        let chunks = split_documents(text);
        let mut fast = 0;
        for chunk in &chunks {
            match check_fast_path(chunk.text) {
                Ok(true) => fast += 1,
                Ok(false) => {}
                Err(e) => panic!("{e}"),
            }
        }
        (fast, chunks.len())
    }

    fn yaml_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                yaml_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                out.push(path);
            }
        }
    }

    /// Every manifest in the repository (examples, deploy, the translator's golden inputs,
    /// the tests' manifests): where the fast path answers, serde-saphyr agrees, and the fast
    /// path answers for most documents.
    #[test]
    fn repository_manifests_agree() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = Vec::new();
        for dir in ["examples", "deploy", "crates"] {
            yaml_files(&root.join(dir), &mut files);
        }
        assert!(files.len() > 100, "{}", files.len());
        let (mut fast, mut total) = (0, 0);
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            let (f, t) = check_file(&text);
            fast += f;
            total += t;
        }
        assert!(fast * 10 >= total * 8, "fast path read {fast} of {total}");
    }

    /// Tricky YAML: where the fast path answers, serde-saphyr agrees; some must fall back.
    #[test]
    fn tricky_documents_agree() {
        let fast_ok = [
            "a: 1\nb: -2\nc: 0\nd: 123456789012345678\n",
            "a: yes\nb: No\nc: ON\nd: off\ne: y\nf: N\ng: True\nh: FALSE\n",
            "a: ~\nb: null\nc: Null\nd: NULL\ne:\nf: ''\ng: \"\"\n",
            "a: '1'\nb: \"2\"\nc: 'yes'\nd: \"null\"\ne: '~'\n",
            "a: |\n  line 1\n  line 2\nb: >\n  folded\n  text\n\n  para\nc: |-\n  x\nd: >+\n  y\n\n",
            "# comment\na: 1 # trailing\n# another\nb: [1, 'x', {c: d}]\n",
            "---\na: b\n...\n",
            "---\n",
            "",
            "# only a comment\n",
            "a: 1\r\nb:\r\n  - x\r\n  - y\r\n",
            "a: 5s\nb: 1Gi\nc: 10.0.0.1/8\nd: 3q2+7w==\ne: /api/v1\n",
            "a: hello world\nb: \"esc\\n\\t\\u00e9\"\nc: 'it''s'\n",
            "- a\n- - b\n  - c\n- {x: 1}\n- []\n- {}\n",
            "scalar at the top",
            "42",
            "a:\n  b:\n    c:\n      d: [e, {f: g}]\n",
            "key with spaces: value\n\"quoted key\": 1\n'single': 2\n",
            "b: -z\nc: +z\nd: .z\n",
            "a: infinite\nb: nano\nc: information\n",
            "? a\n: b\n",
            "a: {b, c: d}\n",
            "a: [b, c,]\n",
            "a: \"multi\n  line\"\nb: plain\n  continued\n",
            "metadata:\n  annotations:\n    weir.io/x: \"1\"\n    example.com/y: 'on'\n",
            "%YAML 1.2\n---\na: 1\n",
        ];
        for text in fast_ok {
            assert!(
                check_fast_path(text).unwrap() || text.is_empty() || text.starts_with('#'),
                "not fast: {text:?}"
            );
        }
        let fallback = [
            "a: &x 1\nb: *x\n",
            "base: &b {x: 1}\nderived:\n  <<: *b\n  y: 2\n",
            "a: !!str 1\n",
            "a: !custom x\n",
            "a: 1.5\nb: 1e3\nc: .inf\nd: -.inf\ne: .nan\nf: .5\n",
            "a: 0x1F\n",
            "a: 0o17\n",
            "a: 017\n",
            "a: 1_000\n",
            "a: +1\n",
            "a: -0\n",
            "a: 1234567890123456789\n",
            "a: 99999999999999999999999\n",
            "a: inf\n",
            "a: NaN\n",
            "a: 1:30\n",
            "a: 1\na: 2\n",
            "a: 1\n'a': 2\n",
            "1: x\n",
            "true: x\n",
            "~: x\n",
            "[a]: x\n",
            "{a: b}: x\n",
            "a: [1\n",
            "a: b: c\n",
            "a:\n- b\n  c: d\n",
            "a: 1\n---\nb: 2\n",
            "a: 2024-01-01\n",
            "a: 0.0.0.0:80\n",
            "a: -\n",
        ];
        for text in fallback {
            check_fast_path(text).unwrap();
        }
        for text in [&fallback[..2], &fallback[4..]].concat() {
            assert!(!check_fast_path(text).unwrap(), "fast: {text:?}");
        }
        let deep = format!("a: {}{}\n", "[".repeat(100), "]".repeat(100));
        assert!(!check_fast_path(&deep).unwrap());
    }

    /// Random plain and quoted scalars, as values and as keys, against serde-saphyr.
    #[test]
    fn random_scalars_agree() {
        let alphabet: &[u8] = b"0123456789+-._:,xobeEinfatyINFATYsSgG/= ~";
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut fast, mut total) = (0, 0);
        for _ in 0..20_000 {
            let len = 1 + (next() % 6) as usize;
            let s: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize] as char)
                .collect();
            for text in [
                format!("k: {s}\n"),
                format!("{s}: v\n"),
                format!("- {s}\n"),
                format!("k: [{s}]\n"),
                format!("k: '{s}'\n"),
            ] {
                total += 1;
                if check_fast_path(&text).unwrap_or_else(|e| panic!("{e}")) {
                    fast += 1;
                }
            }
        }
        assert!(fast > total / 10, "{fast} of {total}");
    }
}
