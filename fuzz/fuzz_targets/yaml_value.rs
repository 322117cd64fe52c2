//! Fuzzes the YAML fast path of `weir_provider_file` against serde-saphyr, the full reader
//! it falls back to. Each of its two readers — weir's own scanner of block-style YAML and
//! the `Value` built from the granit parser's events — is checked on its own: on any
//! document it reads, serde-saphyr must give the identical `serde_json::Value` (so it
//! never accepts what serde-saphyr refuses, and never resolves a scalar differently).
//! Documents both leave to serde-saphyr are not compared. A Secret or Ingress the scanner
//! reads straight into its typed object must be the object the usual path (`Value`,
//! validation, typed read) gives, and valid.

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
