//! Fuzzes the YAML fast path of `weir_provider_file` (the `Value` built straight from the
//! granit parser's events) against serde-saphyr, the full reader it falls back to: on any
//! document the fast path reads, serde-saphyr must give the identical `serde_json::Value`
//! (so the fast path never accepts what serde-saphyr refuses, and never resolves a scalar
//! differently). Documents the fast path leaves to serde-saphyr are not compared.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = weir_provider_file::check_yaml_fast_path(text) {
        panic!("{e}");
    }
});
