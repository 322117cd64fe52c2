//! Fuzzes `weir_provider_file::read_manifest`, the reader of the YAML manifests `weir run`
//! serves (a file is untrusted input as far as the rest of the file is concerned: one bad
//! document must be refused alone). Properties of every input:
//! - reading never panics, and ends (the YAML budget bounds alias expansion and nesting);
//! - a file that is UTF-8 is never refused as a whole;
//! - document indexes never decrease and stay below the number of lines + 1 (a document
//!   starts at a line);
//! - every object read has a non-empty name.

#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_provider_file::read_manifest;

fuzz_target!(|data: &[u8]| {
    let docs = match read_manifest(data) {
        Ok(docs) => docs,
        Err(e) => {
            assert!(
                std::str::from_utf8(data).is_err(),
                "UTF-8 file refused: {e}"
            );
            return;
        }
    };
    let lines = data.iter().filter(|&&b| b == b'\n').count() + 1;
    let mut last = 0;
    for (index, result) in &docs {
        assert!(*index >= last, "indexes decrease: {docs:?}");
        assert!(*index < lines + 1, "index {index} for {lines} lines");
        last = *index;
        if let Ok(object) = result {
            assert!(!object.key().name.is_empty(), "{object:?}");
        }
    }
});
