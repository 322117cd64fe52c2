use super::*;
use crate::parse::split_documents;

/// Checks one file's documents; returns (fast, scanned, total): the documents either
/// reader answered, those the scanner answered, and all.
fn check_file(text: &str) -> (usize, usize, usize) {
    let chunks = split_documents(text);
    let (mut fast, mut scanned) = (0, 0);
    for chunk in &chunks {
        match check_fast_path(chunk.text) {
            Ok(true) => fast += 1,
            Ok(false) => {}
            Err(e) => panic!("{e}"),
        }
        scanned += usize::from(scan::scan_value(chunk.text).is_some());
    }
    (fast, scanned, chunks.len())
}

/// Whether the scanner answered `text`; panics when serde-saphyr disagrees.
fn scanned(text: &str) -> bool {
    check_reader("scanner", scan::scan_value(text), text).unwrap_or_else(|e| panic!("{e}"))
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
    let (mut fast, mut scanned, mut total) = (0, 0, 0);
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let (f, s, t) = check_file(&text);
        fast += f;
        scanned += s;
        total += t;
    }
    assert!(fast * 10 >= total * 8, "fast path read {fast} of {total}");
    assert!(
        scanned * 10 >= total * 6,
        "scanner read {scanned} of {total}"
    );
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

/// The block-style YAML manifests are written in: the scanner reads it, and serde-saphyr
/// gives the identical value.
#[test]
fn scanner_reads_manifest_yaml() {
    let read = [
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  namespace: default\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n    -----BEGIN CERTIFICATE-----\n    MIIB\n    -----END CERTIFICATE-----\n",
        "spec:\n  tls:\n  - hosts: [\"d0.bench.test\"]\n    secretName: d0-tls\n  rules:\n  - host: \"d0.bench.test\"\n    http:\n      paths:\n      - path: \"/\"\n        pathType: Prefix\n        backend:\n          resource: {apiGroup: weir.dev, kind: Backend, name: bench}\n",
        "---\na: 1\n",
        "--- # start\na: 1\n...\n",
        "# — ü\na: é ✓ 𝄞\n\"ü\": '→'\nb: [ß, {ö: \"\u{a0}\"}]\nc: |\n  ½\n",
        "---\n",
        "---\n...\n",
        "# c\n\n---\n# d\na: 1 # e\n# f\n",
        "a: 1\nb: -2\nc: 0\nd: 123456789012345678\n",
        "a: yes\nb: No\nc: ON\nd: off\ne: y\nf: N\ng: True\nh: FALSE\n",
        "a: ~\nb: null\nc: Null\nd: NULL\ne:\nf: ''\ng: \"\"\n",
        "a: '1'\nb: \"2\"\nc: 'yes'\nd: \"null\"\ne: '~'\n",
        "a: |\n  line 1\n  line 2\nb: >\n  folded\n  text\n\n  para\nc: |-\n  x\nd: >-\n  y\n  z\n",
        "a: |\n  x\n\n\n  y\n\n\nb: |-\n  x\n\n\nc: >\n  p\n\n\n  q\n",
        "a: |\n  # not a comment\n    more indented\n  x  \n# a comment\nb: 1\n",
        "- |\n  x\n- >-\n  y\n- a: |\n    z\n",
        "a:\n- |\n x\n",
        "a: |\n\n \n  x\nb: >-\n\n  y\n  z\n",
        "a: |\nb: >-\n\nc: |\n   \n \nd: |",
        "a: | # comment\n  x\n",
        "a: [1, 'x', {c: d}]\nb: []\nc: {}\nd: [ a , b ]\ne: [a,]\nf: {a: 1,}\n",
        "a: [[1, [2]], {b: [c]}]\n",
        "a: {\"k\": 'v', 'l': \"w\"}\n",
        "a: [a b, c  d ]\n",
        "a: 5s\nb: 1Gi\nc: 10.0.0.1/8\nd: 3q2+7w==\ne: /api/v1\nf: a:b\ng: a#b\nh: -z\ni: b - c\nj: x, y\nk: a [b] {c}\n",
        "a: hello world\nb: \"esc\\n\\t\\u00e9\\x41\\U0001F600\\\\\\\"\\/\\0\\a\\b\\e\\f\\r\\v\\ \\N\\_\\L\\P\"\nc: 'it''s'\nd: '\"'\ne: \"'\"\n",
        "- a\n- - b\n  - c\n- {x: 1}\n- []\n- {}\n-\n- # c\n  k: v\n-\n  - n\n",
        "- a: 1\n  b: 2\n- c: 3\n-   d: 4\n    e: 5\n",
        "a:\n  b:\n    c:\n      d: [e, {f: g}]\n",
        "key with spaces: value\n\"quoted key\": 1\n'single': 2\nk  : spaced\n",
        "a:\n- b\n- c\nd:\n  - e\nf:\n",
        "a:\n  - b: 1\n    c:\n    - d\n  - e\n",
        "a: b #c: d\nc: #comment\n  d: e\n",
        "metadata:\n  annotations:\n    weir.io/x: \"1\"\n    example.com/y: 'on'\n    a.b/c-d_e: \"\"\n",
        "a: infinite\nb: nano\nc: information\n",
        "-z: x\n--z: y\n---z: z\n",
        "a: 1",
        "a:\n",
        "- ",
        "a: \"x\"   # c\nb: [x]  # c\nc: 'y' \n",
    ];
    for text in read {
        assert!(scanned(text), "not read: {text:?}");
    }
}

/// What the scanner leaves to the other readers: YAML it does not read, and errors.
#[test]
fn scanner_gives_up_outside_its_subset() {
    let left = [
        "",
        "# only a comment\n",
        "a: &x 1\nb: *x\n",
        "a: !!str 1\n",
        "%YAML 1.2\n---\na: 1\n",
        "? a\n: b\n",
        "a: 1.5\n",
        "a: 0x1F\n",
        "a: 1:30\n",
        "<<: {a: 1}\n",
        "\"<<\": {a: 1}\n",
        "a: {\"<<\": 1}\n",
        "1: x\n",
        "true: x\n",
        "a: 1\na: 2\n",
        "a: 1\n'a': 2\n",
        "a: {b: 1, b: 2}\n",
        "a: b: c\n",
        "a: - b\n",
        "a: -\n",
        "a:\n- b\n  c: d\n",
        "a: 1\n---\nb: 2\n",
        "a: 1\n...\nb: 2\n",
        "a: 1\r\nb: 2\r\n",
        "a:\tb\n",
        "a: \u{85}\n",
        "a: b\u{2028}c\n",
        "a: b\u{feff}\n",
        "a: \u{7f}\n",
        "a: \u{9f}\n",
        "a: \"multi\n  line\"\n",
        "a: plain\n  continued\n",
        "- plain\n  continued\n",
        "a:\n  plain\n  continued\n",
        "a: [1,\n  2]\n",
        "a: |+\n  x\n\n",
        "a: |2\n   x\n",
        "a: >\n  x\n    y\n",
        "a: >\n  x \n  y\n",
        "a: |\n  x",
        "a: |\n  x\n    \n",
        "a: |\n  x\n   \n  y\n",
        "a: |\n   \n  x\n",
        "- a: |\n  x\n",
        "a: [b: c]\n",
        "a: {b}\n",
        "a: {b: }\n",
        "a: [a:b]\n",
        "a: [http://x]\n",
        "a: {\"b\":c}\n",
        "a: [b]c\n",
        "a: \"b\"c\n",
        "a: \"b\"#c\n",
        "a: '\\q'\nb: \"\\q\"\n",
        "a: \"\\ud800\"\n",
        "[a, b]\n",
        "{a: b}\n",
        "scalar\n",
        "  a: 1\n",
        "a: 1\n b: 2\n",
        "a:\n  b: 1\n c: 2\n",
        "- a\n - b\n",
        "a: b\n- c\n",
        "--- a\n",
        "---\n---\n",
        "a: ?x\n",
        "a: :x\n",
        "a: @x\n",
    ];
    for text in left {
        assert!(!scanned(text), "read: {text:?}");
    }
    let long_key = format!("{}: 1\n", "k".repeat(MAX_BYTES.min(600)));
    assert!(!scanned(&long_key));
    let deep = format!(
        "a:{}\n",
        (1..60)
            .map(|i| format!("\n{}b:", " ".repeat(i)))
            .collect::<String>()
    );
    assert!(!scanned(&deep));
    let many = format!("a: [{}]\n", vec!["1"; 150_000].join(", "));
    assert!(!scanned(&many));
}

/// granit refuses a document with a long enough run of comments in some positions; the
/// scanner leaves long runs to the other readers.
#[test]
fn comment_runs_agree() {
    for n in [1, 15, 16, 17, 31, 32, 33, 40] {
        let c = "# c\n".repeat(n);
        for text in [
            format!("{c}a: 1\n"),
            format!("a: 1\n{c}b: 2\n"),
            format!("a:\n{c}  b: 2\n"),
            format!("a: # t\n{c}  - x # t\n{c}  - y\n{c}"),
            format!("- x\n{c}- y\n"),
            format!("a: |\n  x\n{c}b: 1\n"),
        ] {
            // A trailing comment starts a run too.
            let run = n + usize::from(text.starts_with("a: #"));
            assert_eq!(scanned(&text), run <= 16, "{n}: {text:?}");
        }
        // Trailing comments on content lines: runs of one.
        let keys: String = (0..n).map(|i| format!("k{i}: v # c\n# d\n")).collect();
        let items = "- x # c\n  # d\n".repeat(n);
        let nested = format!("a: # c\n{}", "  - [x] # c\n".repeat(n));
        for text in [keys, items, nested] {
            assert!(scanned(&text), "{n}: {text:?}");
        }
    }
}

/// A small xorshift generator: `next(n)` is in `0..n` (the typed read's tests use it too).
pub(crate) fn rng(mut state: u64) -> impl FnMut(usize) -> usize {
    move |n| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    }
}

/// Random documents assembled from the pieces of block YAML, mostly nonsense: whenever
/// the scanner answers, serde-saphyr gives the identical value.
#[test]
fn random_pieces_agree() {
    let pieces = [
        "a: ", "b: ", "a:", "\"q\": ", "'s': ", "- ", "-", "x", "y z", "1", "-1", "yes", "~", "|",
        "|-", ">", ">-", "[a, b]", "{x: 1}", "[]", "{}", "'it''s'", "\"e\\n\"", "#c", " #c",
        "k: v", "---", "...", "", " ", "[", "]", "{", "}", ",", ":", "? ", "&a ", "*a",
    ];
    let mut next = rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..10_000 {
        let mut text = String::new();
        for _ in 0..1 + next(7) {
            text.push_str(&" ".repeat(next(5)));
            for _ in 0..1 + next(3) {
                text.push_str(pieces[next(pieces.len())]);
            }
            text.push('\n');
        }
        scanned(&text);
    }
}

/// Appends a random block node (at indentation `indent`, starting mid-line when `inline`)
/// to `out`.
fn gen_node(
    out: &mut String,
    next: &mut impl FnMut(usize) -> usize,
    indent: usize,
    inline: bool,
    depth: usize,
) {
    const SCALARS: &[&str] = &[
        "x",
        "a b",
        "1",
        "0",
        "-3",
        "yes",
        "No",
        "~",
        "null",
        "''",
        "\"\"",
        "'q''s'",
        "\"d\\t\\\"\"",
        "1.5",
        "0x1",
        "a:b",
        "a #c",
        "[a, 'b', {c: d}]",
        "{k: v, l: [1]}",
        "[]",
        "{}",
        "http://x",
        "10.0.0.1/8",
        "-",
        "v #c",
    ];
    let pad = |n: usize| " ".repeat(n);
    let kind = match depth {
        0 => next(2),
        1..=3 => next(4),
        _ => 2,
    };
    match kind {
        0 => {
            let step = 1 + next(3);
            for i in 0..1 + next(3) {
                if i > 0 || !inline {
                    out.push_str(&pad(indent));
                }
                out.push_str(["a", "b", "'c'", "\"d e\"", "f.g/h", "a"][next(6)]);
                out.push(':');
                match next(4) {
                    0 => {
                        out.push('\n');
                        let inner = indent + step * next(2);
                        gen_node(out, next, inner, false, depth + 1);
                    }
                    1 => {
                        out.push_str(" |\n");
                        for _ in 0..1 + next(3) {
                            out.push_str(&pad(indent + step));
                            out.push_str(["text", "", "  more", "# x"][next(4)]);
                            out.push('\n');
                        }
                    }
                    _ => {
                        out.push(' ');
                        out.push_str(SCALARS[next(SCALARS.len())]);
                        out.push('\n');
                    }
                }
            }
        }
        1 => {
            for i in 0..1 + next(3) {
                if i > 0 || !inline {
                    out.push_str(&pad(indent));
                }
                out.push('-');
                let gap = 1 + next(2);
                out.push_str(&pad(gap));
                if next(3) == 0 {
                    out.push('\n');
                    let inner = indent + 1 + next(3);
                    gen_node(out, next, inner, false, depth + 1);
                } else {
                    gen_node(out, next, indent + 1 + gap, true, depth + 1);
                }
            }
        }
        _ => {
            if !inline {
                out.push_str(&pad(indent));
            }
            out.push_str(SCALARS[next(SCALARS.len())]);
            out.push('\n');
        }
    }
}

/// Random block documents, mostly valid, some with one byte changed: whenever the
/// scanner answers, serde-saphyr gives the identical value, and it answers for many.
#[test]
fn random_block_documents_agree() {
    let mut next = rng(0x2545_f491_4f6c_dd1d);
    let (mut read, mut total) = (0, 0);
    for _ in 0..10_000 {
        let mut text = String::new();
        gen_node(&mut text, &mut next, 0, false, 0);
        if next(3) == 0 && !text.is_empty() {
            let at = next(text.len());
            let mutated: String = [" ", "\n", "-", ":", "", "#", "'"][next(7)].into();
            text.replace_range(at..at + 1, &mutated);
        }
        total += 1;
        read += usize::from(scanned(&text));
    }
    assert!(read * 4 > total, "{read} of {total}");
}
