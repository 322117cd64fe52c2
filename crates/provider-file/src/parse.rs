//! One file's bytes → its documents → objects.
//!
//! The file is split into documents here, at `---` / `...` marker lines, rather than by
//! the YAML library's multi-document reader, so that every document keeps its position in
//! the file (the library silently drops empty documents, which would shift the indexes
//! reported in errors and origins). Per the YAML spec a marker line at column 0 can never
//! be part of a scalar, so this split agrees with the parser.

use serde_json::Value;
use weir_api::{InvalidObject, Object, ObjectKey};

/// One object read from a document (a `v1 List` document yields several).
#[derive(Debug)]
pub(crate) struct ParsedDoc {
    /// 0-based index of the document in the file.
    pub(crate) index: usize,
    /// The object, or why it could not be read.
    pub(crate) result: Result<Object, DocError>,
}

/// A document that is valid YAML but not a valid object.
#[derive(Debug)]
pub(crate) struct DocError {
    /// The object's key when `apiVersion`, `kind` and `metadata.name` are readable.
    pub(crate) key: Option<ObjectKey>,
    /// What is wrong.
    pub(crate) error: InvalidObject,
}

/// Parses a whole file. `Err` is an encoding error that makes the whole file unusable.
/// A document that is not valid YAML (a syntax error, a duplicate key, too deep, or an
/// alias bomb past the parser's budget) is an error of that document alone, naming its
/// line: its siblings are still read.
pub(crate) fn parse_file(bytes: &[u8]) -> Result<Vec<ParsedDoc>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
    let mut docs = Vec::new();
    for (index, chunk) in split_documents(text).into_iter().enumerate() {
        let start = docs.len();
        // Nearly every document is valid: read it without tracking field paths, and only
        // when a typed read fails, read it again for the error's field path.
        if !read_document(index, &chunk, true, &mut docs) {
            docs.truncate(start);
            read_document(index, &chunk, false, &mut docs);
        }
    }
    Ok(docs)
}

/// Parses one document and appends its objects (or its error) to `out`. With `quick`,
/// returns `false` (and leaves `out` partly filled) when the typed read of an object
/// failed, as that error has no field path yet.
fn read_document(index: usize, chunk: &Chunk<'_>, quick: bool, out: &mut Vec<ParsedDoc>) -> bool {
    // The fast path reads the common subset of YAML; anything else, and every error, is
    // serde-saphyr's to read and report. A valid Secret or Ingress the scanner reads goes
    // straight to its typed object.
    let fast = if quick {
        match crate::yaml::scan_node(chunk.text) {
            Some(node) => match crate::typed::read(&node) {
                Some(object) => {
                    out.push(ParsedDoc {
                        index,
                        result: Ok(object),
                    });
                    return true;
                }
                None => Some(node.into_value()),
            },
            None => crate::yaml::event_value(chunk.text),
        }
    } else {
        crate::yaml::fast_value(chunk.text)
    };
    let value = match fast {
        Some(value) => Ok(value),
        None => crate::yaml::full_value(chunk.text),
    };
    match value {
        Ok(value) => push_objects(index, value, quick, out),
        Err(e) => {
            let render = serde_saphyr::render_options! {
                snippets: serde_saphyr::SnippetMode::Off,
                line_offset: chunk.first_line as u64,
            };
            out.push(ParsedDoc {
                index,
                result: Err(DocError {
                    key: None,
                    error: InvalidObject::Syntax(e.render_with_options(render).to_string()),
                }),
            });
            true
        }
    }
}

/// Appends the objects of one document; `false` when a quick typed read failed.
fn push_objects(index: usize, value: Value, quick: bool, out: &mut Vec<ParsedDoc>) -> bool {
    if value.is_null() {
        return true;
    }
    if is_list(&value) {
        if let Value::Object(mut map) = value
            && let Some(Value::Array(items)) = map.remove("items")
        {
            for item in items {
                if !item.is_null() {
                    let Some(result) = to_object(item, quick) else {
                        return false;
                    };
                    out.push(ParsedDoc { index, result });
                }
            }
        }
        return true;
    }
    let Some(result) = to_object(value, quick) else {
        return false;
    };
    out.push(ParsedDoc { index, result });
    true
}

/// `apiVersion: v1, kind: List` (what `kubectl get -o yaml` writes) holds objects in `items`.
fn is_list(value: &Value) -> bool {
    value.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && value.get("kind").and_then(Value::as_str) == Some("List")
        && value.get("items").is_some_and(Value::is_array)
}

/// Validates the document as the API server would on create (which also prunes unknown
/// fields and fills in defaults, as the API server stores them), then reads it.
///
/// With `quick`, a document that validates but fails the typed read gives `None` (read it
/// again without `quick` for the error's field path).
pub(crate) fn to_object(mut value: Value, quick: bool) -> Option<Result<Object, DocError>> {
    if let Err(errors) = weir_validate::validate(&mut value) {
        let key = probe(&value)
            .and_then(|p| Object::from_value(p).ok())
            .map(|o| o.key());
        let object = match &key {
            Some(k) => k.to_string(),
            None => format!(
                "{} {}",
                value["kind"].as_str().unwrap_or("?"),
                value["metadata"]["name"].as_str().unwrap_or("?")
            ),
        };
        return Some(Err(DocError {
            key,
            error: InvalidObject::Rejected {
                object,
                errors: errors.iter().map(ToString::to_string).collect(),
            },
        }));
    }
    if quick {
        return match Object::from_value_quick(value) {
            Ok(object) => Some(Ok(object)),
            // Not an object, or a kind weir does not read: nothing names it.
            Err(Some(error)) => Some(Err(DocError { key: None, error })),
            Err(None) => None,
        };
    }
    let probe = probe(&value);
    Some(Object::from_value(value).map_err(|error| {
        DocError {
            key: probe
                .and_then(|p| Object::from_value(p).ok())
                .map(|o| o.key()),
            error,
        }
    }))
}

/// The identifying fields of an object (`apiVersion`, `kind`, `metadata.name` and
/// `.namespace`) as a minimal object, so that a document with a bad field elsewhere can
/// still be matched to its previous version.
fn probe(value: &Value) -> Option<Value> {
    let map = value.as_object()?;
    let api_version = map.get("apiVersion")?.as_str()?;
    let kind = map.get("kind")?.as_str()?;
    let meta = map.get("metadata")?;
    let name = meta.get("name")?.as_str()?;
    let mut probe_meta = serde_json::Map::new();
    probe_meta.insert("name".into(), name.into());
    if let Some(ns) = meta.get("namespace").and_then(Value::as_str) {
        probe_meta.insert("namespace".into(), ns.into());
    }
    let mut probe = serde_json::Map::new();
    probe.insert("apiVersion".into(), api_version.into());
    probe.insert("kind".into(), kind.into());
    probe.insert("metadata".into(), Value::Object(probe_meta));
    Some(Value::Object(probe))
}

/// The text of one document and the 0-based line it starts on.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Chunk<'a> {
    pub(crate) text: &'a str,
    pub(crate) first_line: usize,
}

/// Splits a YAML stream into documents. A `---` line starts a document (unless only
/// comments, blank lines and directives precede it since the last document); a `...` line
/// ends one. Text holding no document at all (only comments or blank lines) is dropped.
pub(crate) fn split_documents(text: &str) -> Vec<Chunk<'_>> {
    let bytes = text.as_bytes();
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut start_line = 0;
    // Whether the current chunk is a document: it has a start marker or content.
    let mut is_doc = false;
    let mut offset = 0;
    // Line ends found with `memchr`: `split_inclusive('\n')` searched them a character at
    // a time, 6 % of a large first load's instructions (certificates are many lines).
    let unterminated = (!bytes.is_empty() && !bytes.ends_with(b"\n")).then_some(bytes.len());
    let ends = memchr::memchr_iter(b'\n', bytes)
        .map(|i| i + 1)
        .chain(unterminated);
    for (line_no, end) in ends.enumerate() {
        let line_start = offset;
        offset = end;
        // Inside a document only a marker line matters, and one starts with `-` or `.`.
        if is_doc && !matches!(bytes[line_start], b'-' | b'.') {
            continue;
        }
        let bare = text[line_start..end].trim_end_matches(['\n', '\r']);
        if marker(bare, "---") {
            if is_doc {
                chunks.push(Chunk {
                    text: &text[start..line_start],
                    first_line: start_line,
                });
                start = line_start;
                start_line = line_no;
            }
            is_doc = true;
        } else if marker(bare, "...") {
            if is_doc {
                chunks.push(Chunk {
                    text: &text[start..end],
                    first_line: start_line,
                });
            }
            start = end;
            start_line = line_no + 1;
            is_doc = false;
        } else if !is_doc {
            let trimmed = bare.trim_start();
            let ignorable = trimmed.is_empty() || trimmed.starts_with('#') || bare.starts_with('%');
            is_doc = !ignorable;
        }
    }
    if is_doc {
        chunks.push(Chunk {
            text: &text[start..],
            first_line: start_line,
        });
    }
    chunks
}

/// Whether `line` is the document marker `m`, alone or followed by whitespace.
fn marker(line: &str, m: &str) -> bool {
    line.strip_prefix(m)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_api::Kind;

    fn texts(s: &str) -> Vec<(&str, usize)> {
        split_documents(s)
            .into_iter()
            .map(|c| (c.text, c.first_line))
            .collect()
    }

    #[test]
    fn splits_at_markers_and_keeps_line_offsets() {
        assert_eq!(
            texts("a: 1\n---\nb: 2\n"),
            vec![("a: 1\n", 0), ("---\nb: 2\n", 1)]
        );
        // Comments before the first marker belong to the first document.
        assert_eq!(texts("# c\n---\na: 1\n"), vec![("# c\n---\na: 1\n", 0)]);
        // An empty document between two markers keeps its index.
        assert_eq!(
            texts("---\n---\na: 1\n"),
            vec![("---\n", 0), ("---\na: 1\n", 1)]
        );
        // `...` ends a document; the next needs no marker.
        assert_eq!(
            texts("a: 1\n...\nb: 2\n"),
            vec![("a: 1\n...\n", 0), ("b: 2\n", 2)]
        );
        assert_eq!(
            texts("a: 1\n...\n---\nb: 2\n"),
            vec![("a: 1\n...\n", 0), ("---\nb: 2\n", 2)]
        );
        // Content on the marker line, CRLF, and lookalikes that are not markers.
        assert_eq!(texts("--- {a: 1}\r\n---\r\nb: '---x'\r\n----\r\n").len(), 2);
        assert_eq!(texts(""), vec![]);
        assert_eq!(texts("# only a comment\n\n"), vec![]);
    }

    #[test]
    fn block_scalar_content_is_not_split() {
        let docs = parse_file(b"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData:\n  k: |\n    ---x\n    ...y\n").unwrap();
        assert_eq!(docs.len(), 1);
        let Ok(Object::Secret(s)) = &docs[0].result else {
            panic!("{docs:?}")
        };
        assert_eq!(&*s.string_data["k"], "---x\n...y\n");
    }

    #[test]
    fn syntax_error_names_the_line_and_spares_the_other_documents() {
        let docs = parse_file(
            b"a: 1\n---\nb: [1\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: ns1}\n",
        )
        .unwrap();
        let Err(e) = &docs[1].result else {
            panic!("{docs:?}")
        };
        assert_eq!(docs[1].index, 1);
        let e = e.error.to_string();
        assert!(e.contains("invalid YAML") && e.contains("line 3"), "{e}");
        assert!(
            matches!(&docs[2].result, Ok(Object::Namespace(_))),
            "{docs:?}"
        );
    }

    /// Hostile documents are rejected alone: an alias bomb (past the parser's node
    /// budget), duplicate keys, deep nesting; the valid documents around them are read.
    #[test]
    fn hostile_documents_are_rejected_alone() {
        let ns = |n: &str| format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {n}}}\n");
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
        for (i, c) in "bcdefghij".chars().enumerate() {
            let prev = (b'a' + i as u8) as char;
            bomb.push_str(&format!("{c}: &{c} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        let dup = "apiVersion: v1\nkind: Namespace\nmetadata: {name: d}\nmetadata: {name: e}\n";
        let deep = format!("a: {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
        let file = [ns("first"), bomb, dup.to_owned(), deep, ns("last")].join("---\n");
        let docs = parse_file(file.as_bytes()).unwrap();
        let ok: Vec<String> = docs
            .iter()
            .filter_map(|d| d.result.as_ref().ok().map(|o| o.key().name.to_string()))
            .collect();
        assert_eq!(ok, ["first", "last"]);
        let bad: Vec<usize> = docs
            .iter()
            .filter(|d| d.result.is_err())
            .map(|d| d.index)
            .collect();
        assert_eq!(bad, [1, 2, 3], "{docs:?}");
    }

    #[test]
    fn list_items_and_empty_documents() {
        let yaml = b"---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Namespace, metadata: {name: a}}\n- {apiVersion: v1, kind: Namespace, metadata: {name: b}}\n";
        let docs = parse_file(yaml).unwrap();
        let keys: Vec<_> = docs
            .iter()
            .map(|d| (d.index, d.result.as_ref().unwrap().key()))
            .collect();
        assert_eq!(
            keys,
            vec![
                (1, ObjectKey::new(Kind::Namespace, "", "a")),
                (1, ObjectKey::new(Kind::Namespace, "", "b"))
            ]
        );
    }

    #[test]
    fn bad_object_still_has_its_key() {
        let yaml = b"apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: ns}\nspec: {rules: [{matches: [{path: {type: [1]}}]}]}\n";
        let docs = parse_file(yaml).unwrap();
        let Err(e) = &docs[0].result else {
            panic!("{docs:?}")
        };
        assert_eq!(e.key, Some(ObjectKey::new(Kind::HttpRoute, "ns", "r")));
        assert!(
            e.error
                .to_string()
                .contains("spec.rules[0].matches[0].path.type"),
            "{}",
            e.error
        );
        let docs = parse_file(b"apiVersion: v1\nkind: Namespace\nmetadata: {name: 5}\n").unwrap();
        assert!(matches!(&docs[0].result, Err(DocError { key: None, .. })));
    }

    /// A field error in one item of a `List` is found by the quick read and reported with
    /// its field path and key by the second, precise read; the other items are read once.
    #[test]
    fn list_item_with_a_field_error_keeps_its_path() {
        let yaml = b"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Namespace, metadata: {name: a}}\n- {apiVersion: gateway.networking.k8s.io/v1, kind: HTTPRoute, metadata: {name: r, namespace: ns}, spec: {rules: [{matches: [{path: {type: [1]}}]}]}}\n";
        let docs = parse_file(yaml).unwrap();
        assert_eq!(docs.len(), 2, "{docs:?}");
        assert!(matches!(&docs[0].result, Ok(Object::Namespace(_))));
        let Err(e) = &docs[1].result else {
            panic!("{docs:?}")
        };
        assert_eq!(e.key, Some(ObjectKey::new(Kind::HttpRoute, "ns", "r")));
        assert!(
            e.error
                .to_string()
                .contains("spec.rules[0].matches[0].path.type")
        );
    }

    #[test]
    fn not_utf8() {
        assert!(parse_file(b"a: \xff\n").unwrap_err().contains("UTF-8"));
    }
}
