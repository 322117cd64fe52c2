//! Fuzzes `weir_proxy::normalize_path`, the request-path normalization that runs before
//! routing. The first byte picks `merge_slashes`; the rest is the path, tried as given
//! and with a leading `/` (most random inputs do not start with one and would stop at
//! the first check). Properties of every accepted path:
//! - normalizing never panics;
//! - the output starts with `/` and has no `.` or `..` segment (`/./`, `/../`, or at the
//!   end), and no `//` when merging;
//! - it is its own normal form: normalizing it again returns it borrowed, unchanged;
//! - it is a valid URI path (`output?q` parses with `output` as the path).

#![no_main]

use std::borrow::Cow;

use http::uri::PathAndQuery;
use libfuzzer_sys::fuzz_target;
use weir_proxy::normalize_path;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let merge = flags & 1 == 1;
    let Ok(path) = std::str::from_utf8(rest) else {
        return;
    };
    check(path, merge);
    check(&format!("/{path}"), merge);
});

fn check(input: &str, merge: bool) {
    let Ok(out) = normalize_path(input, merge) else {
        return;
    };
    assert!(out.starts_with('/'), "{input:?} -> {out:?}");
    assert!(
        !out.contains("/../") && !out.contains("/./"),
        "{input:?} -> {out:?}"
    );
    assert!(
        !out.ends_with("/..") && !out.ends_with("/."),
        "{input:?} -> {out:?}"
    );
    assert!(!merge || !out.contains("//"), "{input:?} -> {out:?}");
    match normalize_path(&out, merge) {
        Ok(Cow::Borrowed(again)) => assert_eq!(again, out, "{input:?}"),
        other => panic!("{input:?} -> {out:?} -> {other:?}: not idempotent"),
    }
    if let Cow::Borrowed(same) = &out {
        assert_eq!(*same, input, "borrowed output differs from the input");
    }
    let with_query = format!("{out}?q");
    let parsed = PathAndQuery::try_from(with_query.as_str());
    assert!(
        parsed.is_ok_and(|pq| pq.path() == &*out),
        "{out:?} is not a URI path"
    );
}
