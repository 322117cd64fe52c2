//! The IR the translator builds from every golden input of `crates/translate/testdata`.

use std::path::Path;

use weir_model::Resource;
use weir_translate::{ObjectChange, Translator, TranslatorOptions};

/// Per golden input (its file name), every IR resource translated from it.
pub(crate) fn golden_inputs() -> Vec<(String, Vec<Resource>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../translate/testdata");
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".in.yaml"))
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 10, "golden inputs found: {}", inputs.len());
    inputs
        .into_iter()
        .map(|input| {
            let name = input.file_name().unwrap().to_string_lossy().into_owned();
            let objects = read(&input);
            let mut t = Translator::new(TranslatorOptions {
                standalone: true,
                ingress_http: Some("127.0.0.1:8080".parse().unwrap()),
                ingress_https: Some("127.0.0.1:8443".parse().unwrap()),
                ..TranslatorOptions::default()
            });
            t.apply(objects.into_iter().map(ObjectChange::upsert));
            (name, t.resources())
        })
        .collect()
}

/// The objects of a golden input, read as the translator's golden test reads them: without
/// the API-server validation of `weir run` (some inputs hold objects an API server would
/// refuse, to show what the translator does with them).
pub(crate) fn read(path: &Path) -> Vec<std::sync::Arc<weir_api::Object>> {
    let text = std::fs::read_to_string(path).unwrap();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("valid YAML");
    docs.into_iter()
        .filter(|d| !d.is_null())
        .map(|d| std::sync::Arc::new(weir_api::Object::from_value(d).expect("an object")))
        .collect()
}
