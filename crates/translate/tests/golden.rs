//! Golden tests: `testdata/<case>.in.yaml` → `testdata/<case>.out.yaml`.
//! Regenerate with `WEIR_BLESS=1 cargo test -p weir-translate --test golden`.

mod common;

use std::path::Path;

use common::{Accumulator, load, options, snapshot, upserts};
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
            Ok(_) => failures.push(format!(
                "{name}: output differs from {}",
                out_path.display()
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
