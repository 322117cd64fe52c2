//! Golden tests: `testdata/<case>.in.yaml` → `testdata/<case>.out.yaml`.
//! Regenerate with `WEIR_BLESS=1 cargo test -p weir-translate --test golden`; a mismatch
//! prints a unified diff (expected → got).

mod common;

use std::path::Path;

use common::{Accumulator, load, options, snapshot, upserts};
use weir_api::{Kind, Object};
use weir_translate::Translator;

#[test]
fn golden() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let bless = std::env::var_os("WEIR_BLESS").is_some_and(|v| v == "1");
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".in.yaml"))
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "no golden cases in {}", dir.display());
    let mut failures = Vec::new();
    for input in cases {
        let name = input
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches(".in.yaml")
            .to_string();
        let objects = load(&std::fs::read_to_string(&input).unwrap());
        let opts = options(!name.starts_with("k8s-"));

        // All at once.
        let mut t = Translator::new(opts.clone());
        let out = t.apply(upserts(&objects));
        let mut acc = Accumulator::default();
        acc.apply(&out);
        let resources = t.resources();
        let statuses = t.statuses();
        assert_eq!(
            acc.resources.values().cloned().collect::<Vec<_>>(),
            resources,
            "{name}: batch != resources()"
        );

        // One object at a time (then reversed), must end in the same state.
        for order in [objects.clone(), objects.iter().rev().cloned().collect()] {
            let mut t1 = Translator::new(opts.clone());
            let mut acc1 = Accumulator::default();
            for o in &order {
                acc1.apply(&t1.apply(upserts(std::slice::from_ref(o))));
            }
            assert_eq!(
                acc1.resources.values().cloned().collect::<Vec<_>>(),
                t1.resources(),
                "{name}: one by one"
            );
            if order.first().map(|o| o.key()) == objects.first().map(|o| o.key()) {
                assert_eq!(
                    t1.resources(),
                    resources,
                    "{name}: one by one differs from all at once"
                );
                assert_eq!(
                    t1.statuses(),
                    statuses,
                    "{name}: one by one statuses differ"
                );
            }
        }

        let got = serde_saphyr::to_string(&snapshot(&resources, &statuses)).unwrap();
        let out_path = dir.join(format!("{name}.out.yaml"));
        if bless {
            std::fs::write(&out_path, &got).unwrap();
            continue;
        }
        match std::fs::read_to_string(&out_path) {
            Ok(want) if want == got => {}
            Ok(want) => failures.push(format!(
                "{name}: output differs from {}\n{}",
                out_path.display(),
                unified_diff(&want, &got, &format!("{name}.out.yaml"))
            )),
            Err(_) => failures.push(format!("{name}: missing {}", out_path.display())),
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n(run WEIR_BLESS=1 cargo test -p weir-translate --test golden to accept)",
        failures.join("\n")
    );
}

/// A unified diff of two texts by lines, with three lines of context (`-` expected,
/// `+` got). Longest common subsequence by dynamic programming: golden files are a few
/// hundred lines.
fn unified_diff(want: &str, got: &str, name: &str) -> String {
    const CONTEXT: usize = 3;
    let a: Vec<&str> = want.lines().collect();
    let b: Vec<&str> = got.lines().collect();
    // lcs[i][j]: length of the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    // The edit script: (tag, line in a, line in b).
    let mut ops: Vec<(char, usize, usize)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', i, j));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', i, j));
            i += 1;
        } else {
            ops.push(('+', i, j));
            j += 1;
        }
    }
    let mut out = format!("--- {name} (expected)\n+++ {name} (got)\n");
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != ' ').collect();
    let mut k = 0;
    while k < changed.len() {
        // One hunk: changes closer than two contexts apart are merged.
        let start = changed[k].saturating_sub(CONTEXT);
        let mut end = changed[k];
        while k + 1 < changed.len() && changed[k + 1] <= end + 2 * CONTEXT + 1 {
            k += 1;
            end = changed[k];
        }
        k += 1;
        let end = (end + CONTEXT + 1).min(ops.len());
        let hunk = &ops[start..end];
        let (a_len, b_len) = hunk.iter().fold((0, 0), |(x, y), op| match op.0 {
            ' ' => (x + 1, y + 1),
            '-' => (x + 1, y),
            _ => (x, y + 1),
        });
        let (_, a0, b0) = hunk[0];
        out += &format!("@@ -{},{a_len} +{},{b_len} @@\n", a0 + 1, b0 + 1);
        for &(tag, ai, bj) in hunk {
            let line = if tag == '+' { b[bj] } else { a[ai] };
            out += &format!("{tag}{line}\n");
        }
    }
    out
}

#[test]
fn unified_diff_shows_changed_lines_with_context() {
    let want = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
    let got = "a\nb\nc\nd\nE\nf\ng\nh\ni\nj\nk\n";
    assert_eq!(
        unified_diff(want, got, "x"),
        "--- x (expected)\n+++ x (got)\n@@ -2,9 +2,10 @@\n b\n c\n d\n-e\n+E\n f\n g\n h\n i\n j\n+k\n"
    );
    assert_eq!(
        unified_diff(want, want, "x"),
        "--- x (expected)\n+++ x (got)\n"
    );
}

/// Every object of every golden input, read from its JSON text by the Kubernetes
/// provider's fast path (`Object::from_json_quick`), is the object `Object::from_value`
/// reads, or is left to that path (`None`); and the fast path reads most of them.
#[test]
fn json_text_reads_as_the_value_does() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let (mut quick, mut left) = (0, 0);
    let mut kinds = std::collections::BTreeSet::new();
    // Beside the golden inputs: namespaces the reader sets (a namespaced kind without
    // one, a cluster-scoped kind with one), and documents it must leave to the Value
    // path (a `null`, a duplicate key, a field of the wrong type, no name).
    let extra = Path::new("(extra)").to_path_buf();
    let extra_text = r#"
apiVersion: v1
kind: Secret
metadata: {name: s}
type: Opaque
data: {a: YQ==}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: c, namespace: ignored}
spec: {controllerName: weir.dev/gateway-controller}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: i, namespace: ns, labels: null}
spec: {rules: [{host: a.example}]}
"#;
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    inputs.push(extra.clone());
    for path in inputs {
        if path != extra && !path.to_string_lossy().ends_with(".in.yaml") {
            continue;
        }
        let text = if path == extra {
            extra_text.to_string()
        } else {
            std::fs::read_to_string(&path).unwrap()
        };
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            let want = Object::from_value(doc.clone()).unwrap();
            // As a list item: no apiVersion or kind, a status the object does not read.
            let mut item = doc.clone();
            let map = item.as_object_mut().unwrap();
            map.remove("apiVersion");
            map.remove("kind");
            map.insert("status".into(), serde_json::json!({"conditions": []}));
            for json in [doc.to_string(), item.to_string()] {
                match Object::from_json_quick(want.kind(), &json) {
                    Some(got) => {
                        assert_eq!(got, want, "{}: {json}", path.display());
                        quick += 1;
                        kinds.insert(want.kind());
                    }
                    None => left += 1,
                }
            }
        }
    }
    for (kind, json) in [
        (
            Kind::Ingress,
            r#"{"metadata":{"name":"i","labels":null},"spec":{}}"#,
        ),
        (
            Kind::Secret,
            r#"{"metadata":{"name":"s"},"type":"Opaque","type":"kubernetes.io/tls"}"#,
        ),
        (Kind::Secret, r#"{"metadata":{"name":"s"},"data":{"a":1}}"#),
        (Kind::Secret, r#"{"metadata":{"namespace":"ns"}}"#),
    ] {
        assert_eq!(Object::from_json_quick(kind, json), None, "{json}");
    }
    assert!(
        quick > 4 * left,
        "fast path read {quick}, left {left} to the Value path"
    );
    assert!(kinds.len() >= 15, "kinds read: {kinds:?}");
}
