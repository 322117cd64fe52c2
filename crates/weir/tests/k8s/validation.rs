//! Validation parity: every object of the corpus in `tests/validation/*.yaml` is submitted
//! to the API server (server-side dry run, so nothing is stored) and read by weir's file
//! provider, which validates it the way standalone mode does. The verdicts (accepted or
//! refused) must agree for every object, and must be the one the object's
//! `metadata.annotations.expect` states, so that the corpus keeps hitting the rules it was
//! written for.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use weir_provider_file::FileProvider;

use crate::{Ctx, cluster};

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/validation");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// weir's verdict per document of `file`: `Err(message)` when the reader refuses it.
fn weir_verdicts(file: &Path, count: usize) -> Vec<Result<(), String>> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(file, dir.path().join("corpus.yaml")).unwrap();
    let mut provider = FileProvider::new(dir.path());
    let update = provider.load_all();
    let mut verdicts = vec![Ok(()); count];
    for e in update.errors {
        let d = e.document.expect("problems of single documents only");
        verdicts[d] = Err(e.message);
    }
    verdicts
}

pub async fn corpus_verdicts_match_the_api_server(c: Arc<Ctx>) {
    cluster::apply(
        &c.client,
        &[serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "validation"}})],
    )
    .await;
    let mut disagreements = Vec::new();
    let mut wrong_expectations = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for file in corpus() {
        let text = std::fs::read_to_string(&file).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
        let weir = weir_verdicts(&file, docs.len());
        for (i, (doc, weir)) in docs.iter().zip(weir).enumerate() {
            let at = format!(
                "{}#{i} {} {}",
                file.file_name().unwrap().to_string_lossy(),
                doc["kind"].as_str().unwrap_or("?"),
                doc["metadata"]["name"].as_str().unwrap_or("?")
            );
            let api = cluster::dry_run_create(&c.client, doc).await;
            let expect = doc["metadata"]["annotations"]["expect"].as_str();
            let api_accepts = api.is_ok();
            if api_accepts {
                accepted += 1;
            } else {
                refused += 1;
            }
            if expect != Some(if api_accepts { "accept" } else { "reject" }) {
                wrong_expectations.push(format!("{at}: expected {expect:?}, API server: {api:?}"));
            }
            if api_accepts != weir.is_ok() {
                disagreements.push(format!(
                    "{at}:\n    API server: {api:?}\n    weir:       {weir:?}"
                ));
            }
        }
    }
    println!("validation corpus: {accepted} accepted, {refused} refused by the API server");
    assert!(
        disagreements.is_empty() && wrong_expectations.is_empty(),
        "{} disagreement(s) between the API server and weir:\n{}\n{} corpus expectation(s) the API server contradicts:\n{}",
        disagreements.len(),
        disagreements.join("\n"),
        wrong_expectations.len(),
        wrong_expectations.join("\n")
    );
    assert!(
        refused >= 40 && accepted >= 10,
        "the corpus lost its coverage"
    );
}
