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
            let mut provider = weir_provider_file::FileProvider::new(input);
            let update = provider.load_all();
            let mut t = Translator::new(TranslatorOptions {
                standalone: true,
                ingress_http: Some("127.0.0.1:8080".parse().unwrap()),
                ingress_https: Some("127.0.0.1:8443".parse().unwrap()),
                ..TranslatorOptions::default()
            });
            t.apply(update.upserts.into_iter().map(ObjectChange::Upsert));
            (name, t.resources())
        })
        .collect()
}
