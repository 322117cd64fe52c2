//! Request-path normalization before routing (RFC 3986 §6.2.2).
//!
//! A route matches on the path weir sees, and the backend serves the path it resolves.
//! When the two differ, a rule like `PathPrefix /public` lets `/public/../private` (or its
//! encoded forms `%2e%2e`, `.%2E`) through to a backend that then serves `/private`. So
//! the path is normalized once, routed on, and the normalized path is what is forwarded:
//!
//! 1. percent-encoded unreserved characters (`ALPHA DIGIT - . _ ~`) are decoded, and the
//!    hex digits of every other escape are upper-cased (§6.2.2.1, §6.2.2.2);
//! 2. dot segments are removed, never climbing above the root (§6.2.2.3, §5.2.4);
//! 3. optionally, runs of slashes are merged (`//a///b` → `/a/b`).
//!
//! `%2F` (`/`) and `%5C` (`\`) stay encoded: decoding them would turn one segment into
//! two (`/public%2F..%2Fprivate` would become a dot segment after routing), and a backend
//! that distinguishes `a%2Fb` from `a/b` (object stores, some APIs) would get a different
//! resource. Envoy's default (`path_with_escaped_slashes_action: KEEP_UNCHANGED`) makes
//! the same choice. `%25` is never decoded either, so no escape is decoded twice.
//!
//! What cannot be normalized safely is rejected: an encoded NUL, a `%` without two hex
//! digits, and any byte a request target cannot carry (control characters, space, raw
//! non-ASCII). The query string is not touched.

use std::borrow::Cow;

use http::Uri;
use http::uri::PathAndQuery;

/// Why a request path cannot be normalized safely. Each is answered with 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPath {
    /// The path does not start with `/` (origin-form paths always do).
    #[error("path does not start with /")]
    NotAbsolute,
    /// A `%` not followed by two hex digits (`%zz`, a truncated `%4`).
    #[error("invalid percent-escape in path")]
    BadEscape,
    /// `%00`: C backends and file systems stop at a NUL, so the part after it would be
    /// routed but never served.
    #[error("encoded NUL in path")]
    EncodedNul,
    /// A byte no request target can carry: control characters, space, DEL, raw non-ASCII,
    /// and `?`/`#` (which would end the path).
    #[error("invalid character in path")]
    BadChar,
}

/// Normalizes an absolute path (no query): percent-encoded unreserved characters
/// decoded, other escapes with upper-case hex, dot segments removed, and with
/// `merge_slashes` runs of `/` merged into one.
///
/// Guarantees, for every input that is accepted:
/// - the output starts with `/` and has no `.` or `..` segment (no `/./`, `/../`, and
///   no trailing `/.` or `/..`);
/// - normalizing the output again returns it unchanged, borrowed (idempotence);
/// - the output is a valid `http` URI path, so `output?query` parses as a path and query
///   whenever `path?query` did;
/// - an input that is already normal is returned borrowed, without allocating.
///
/// `%2F` and `%5C` stay encoded (see the module documentation).
///
/// # Errors
/// [`InvalidPath`] for an input that does not start with `/`, has an invalid or NUL
/// escape, or a byte that a request target cannot carry.
pub fn normalize_path(path: &str, merge_slashes: bool) -> Result<Cow<'_, str>, InvalidPath> {
    if needs_rewrite(path, merge_slashes)? {
        Ok(Cow::Owned(rewrite(path, merge_slashes)))
    } else {
        Ok(Cow::Borrowed(path))
    }
}

/// Normalizes the path of a request target in place with [`normalize_path`]; the URI is
/// rebuilt (scheme, authority and query kept) only when the path changes. Targets
/// without a path to normalize are left alone: `*` (server-wide `OPTIONS`) and the
/// authority-form of `CONNECT`.
pub(crate) fn normalize_uri(uri: &mut Uri, merge_slashes: bool) -> Result<(), InvalidPath> {
    let path = uri.path();
    if !path.starts_with('/') {
        return Ok(());
    }
    let Cow::Owned(mut normalized) = normalize_path(path, merge_slashes)? else {
        return Ok(());
    };
    if let Some(query) = uri.query() {
        normalized.push('?');
        normalized.push_str(query);
    }
    let mut parts = std::mem::take(uri).into_parts();
    // Cannot fail: the normalized path holds only bytes `http` accepts in a path, and
    // the query was accepted before.
    parts.path_and_query =
        Some(PathAndQuery::try_from(normalized).map_err(|_| InvalidPath::BadChar)?);
    *uri = Uri::from_parts(parts).map_err(|_| InvalidPath::BadChar)?;
    Ok(())
}

/// Validates `path` and says whether [`rewrite`] would change it. One pass, no
/// allocation: the common case (an already normal path) stops here.
fn needs_rewrite(path: &str, merge_slashes: bool) -> Result<bool, InvalidPath> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return Err(InvalidPath::NotAbsolute);
    }
    let mut rewrite = false;
    let mut segment_start = 1;
    let mut i = 1;
    while i < bytes.len() {
        match bytes[i] {
            b'/' => {
                rewrite |= segment_changes(&bytes[segment_start..i], false, merge_slashes);
                segment_start = i + 1;
            }
            b'%' => {
                let (value, hex) = escape_at(bytes, i)?;
                if value == 0 {
                    return Err(InvalidPath::EncodedNul);
                }
                rewrite |= is_unreserved(value) || hex.iter().any(u8::is_ascii_lowercase);
                i += 2;
            }
            b if is_path_byte(b) => {}
            _ => return Err(InvalidPath::BadChar),
        }
        i += 1;
    }
    rewrite |= segment_changes(&bytes[segment_start..], true, merge_slashes);
    Ok(rewrite)
}

/// Whether a raw segment (escapes already known not to change it) is removed by the
/// rewrite: a dot segment, or with merging an empty segment before the last one.
fn segment_changes(segment: &[u8], last: bool, merge_slashes: bool) -> bool {
    matches!(segment, b"." | b"..") || (merge_slashes && segment.is_empty() && !last)
}

/// The value of the escape `%XY` starting at `bytes[i]`, and its two hex digits.
fn escape_at(bytes: &[u8], i: usize) -> Result<(u8, [u8; 2]), InvalidPath> {
    let (Some(&hi), Some(&lo)) = (bytes.get(i + 1), bytes.get(i + 2)) else {
        return Err(InvalidPath::BadEscape);
    };
    match (hex_value(hi), hex_value(lo)) {
        (Some(h), Some(l)) => Ok((h << 4 | l, [hi, lo])),
        _ => Err(InvalidPath::BadEscape),
    }
}

/// Builds the normalized path of a path that [`needs_rewrite`] accepted: segment by
/// segment, each one decoded into the output and then kept, dropped (`.`, and with
/// merging an empty segment) or dropped with its predecessor (`..`).
fn rewrite(path: &str, merge_slashes: bool) -> String {
    let mut out = String::with_capacity(path.len());
    let mut segments = path.strip_prefix('/').unwrap_or(path).split('/').peekable();
    // Whether the path ends in a removed dot segment: `/a/.` and `/a/b/..` name the
    // directory `/a/`, so the result keeps a trailing slash.
    let mut trailing_slash = false;
    while let Some(raw) = segments.next() {
        let last = segments.peek().is_none();
        let start = out.len();
        out.push('/');
        push_decoded(&mut out, raw);
        match &out[start + 1..] {
            "." => {
                out.truncate(start);
                trailing_slash = last;
            }
            ".." => {
                out.truncate(start);
                // Above the root there is nothing to remove: `/..` is `/`.
                let parent = out.rfind('/').unwrap_or(0);
                out.truncate(parent);
                trailing_slash = last;
            }
            "" if merge_slashes && !last => out.truncate(start),
            _ => {}
        }
    }
    if trailing_slash || out.is_empty() {
        out.push('/');
    }
    out
}

/// Appends `segment` with escapes of unreserved characters decoded and the hex digits of
/// the others upper-cased. Bytes that are not valid escapes are copied unchanged (the
/// caller validated the path; this never panics on any input).
fn push_decoded(out: &mut String, segment: &str) {
    let bytes = segment.as_bytes();
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Ok((value, hex)) = escape_at(bytes, i)
        {
            out.push_str(&segment[copied..i]);
            if is_unreserved(value) {
                out.push(char::from(value));
            } else {
                out.push('%');
                out.push(char::from(hex[0].to_ascii_uppercase()));
                out.push(char::from(hex[1].to_ascii_uppercase()));
            }
            i += 3;
            copied = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&segment[copied..]);
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// RFC 3986 §2.3: `ALPHA / DIGIT / "-" / "." / "_" / "~"`.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Bytes that may appear unescaped in a path: the ones the `http` crate accepts (RFC
/// 3986 `pchar` and `/`, plus `"`, `{`, `}` that real clients send unescaped), without
/// `%`, which is checked as an escape.
fn is_path_byte(b: u8) -> bool {
    matches!(b,
        b'!' | b'$' | b'&'..=b';' | b'=' | b'@'..=b'_' | b'a'..=b'z' | b'|' | b'~'
        | b'"' | b'{' | b'}')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(path: &str) -> Result<String, InvalidPath> {
        normalize_path(path, true).map(Cow::into_owned)
    }

    #[test]
    fn dot_segments_in_every_spelling_are_removed() {
        for (input, want) in [
            ("/public/../private", "/private"),
            ("/public/%2e%2e/private", "/private"),
            ("/public/%2E%2E/private", "/private"),
            ("/public/.%2e/private", "/private"),
            ("/public/%2e./private", "/private"),
            ("/public/./../private", "/private"),
            ("/public/%2e/x", "/public/x"),
            ("/a/b/c/./../../g", "/a/g"),
            ("/../../x", "/x"),
            ("/..", "/"),
            ("/.", "/"),
            ("/a/..", "/"),
            ("/a/.", "/a/"),
            ("/a/b/..", "/a/"),
            ("/a/...", "/a/..."),
            ("/a/..b/.c", "/a/..b/.c"),
            ("/%2e%2e%2e", "/..."),
        ] {
            assert_eq!(norm(input).as_deref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn escapes_are_decoded_only_for_unreserved_characters() {
        for (input, want) in [
            ("/%7Euser/%41%62%2d%5f", "/~user/Ab-_"),
            ("/a%2fb/c%5cd", "/a%2Fb/c%5Cd"),
            ("/a%2Fb", "/a%2Fb"),
            ("/%2e%2e%2F..%2fx", "/..%2F..%2Fx"),
            ("/%25%32%65", "/%252e"),
            ("/caf%c3%a9", "/caf%C3%A9"),
            ("/sp%20ace", "/sp%20ace"),
        ] {
            assert_eq!(norm(input).as_deref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn slashes_are_merged_only_when_asked() {
        assert_eq!(norm("//a///b//").as_deref(), Ok("/a/b/"));
        assert_eq!(norm("//").as_deref(), Ok("/"));
        assert_eq!(norm("/a//../b").as_deref(), Ok("/b"));
        let keep = |p| normalize_path(p, false).map(Cow::into_owned);
        assert_eq!(keep("//a///b//").as_deref(), Ok("//a///b//"));
        assert_eq!(keep("/a//../b").as_deref(), Ok("/a/b"));
        assert_eq!(keep("/a//.").as_deref(), Ok("/a//"));
        assert_eq!(keep("//..").as_deref(), Ok("/"));
    }

    #[test]
    fn normal_paths_are_borrowed() {
        for p in [
            "/",
            "/a/b",
            "/a/b/",
            "/a%2Fb",
            "/%C3%A9",
            "/a..b",
            "/{\"json\"}",
        ] {
            assert!(
                matches!(normalize_path(p, true), Ok(Cow::Borrowed(_))),
                "{p}"
            );
        }
        assert!(matches!(normalize_path("//a", false), Ok(Cow::Borrowed(_))));
        assert!(matches!(normalize_path("//a", true), Ok(Cow::Owned(_))));
    }

    #[test]
    fn unsafe_paths_are_rejected() {
        for (input, err) in [
            ("/a%00b", InvalidPath::EncodedNul),
            ("/a%zz", InvalidPath::BadEscape),
            ("/a%4", InvalidPath::BadEscape),
            ("/a%", InvalidPath::BadEscape),
            ("/a%g1", InvalidPath::BadEscape),
            ("/a\u{1}b", InvalidPath::BadChar),
            ("/a b", InvalidPath::BadChar),
            ("/a\u{7f}", InvalidPath::BadChar),
            ("/caf\u{e9}", InvalidPath::BadChar),
            ("/a?b", InvalidPath::BadChar),
            ("/a#b", InvalidPath::BadChar),
            ("a/b", InvalidPath::NotAbsolute),
            ("", InvalidPath::NotAbsolute),
            ("*", InvalidPath::NotAbsolute),
        ] {
            assert_eq!(norm(input), Err(err), "{input:?}");
        }
    }

    #[test]
    fn uri_keeps_query_scheme_and_authority() {
        let mut uri: Uri = "http://a.test/p/%2e%2e/q/%7e?x=/../%2e&y".parse().unwrap();
        normalize_uri(&mut uri, true).unwrap();
        assert_eq!(uri.to_string(), "http://a.test/q/~?x=/../%2e&y");
        for target in ["*", "a.test:443", "/already/normal?q=/../"] {
            let mut uri: Uri = target.parse().unwrap();
            normalize_uri(&mut uri, true).unwrap();
            assert_eq!(uri.to_string(), target);
        }
        let mut uri: Uri = "/a/%00".parse().unwrap();
        assert_eq!(normalize_uri(&mut uri, true), Err(InvalidPath::EncodedNul));
    }

    /// The byte set accepted unescaped is exactly what `http` accepts in a path, so a
    /// normalized path always fits back into the request's URI.
    #[test]
    fn path_bytes_match_the_http_crate() {
        for b in (0u8..=255).filter(|b| *b != b'%') {
            let path = format!("/x{}", char::from(b));
            let by_http = b.is_ascii()
                && PathAndQuery::try_from(path.as_str()).is_ok_and(|pq| pq.path() == path);
            assert_eq!(by_http, is_path_byte(b), "byte {b:#04x}");
        }
    }

    /// Pieces that exercise every branch: separators, dot segments in several spellings,
    /// escapes that are decoded, kept, upper-cased or invalid.
    const TOKENS: [&str; 13] = [
        "/", ".", "..", "%2e", "%2E", "%2f", "a", "%41", "%7e", "%", "%0", "~", "%c3",
    ];

    /// The properties the fuzz target checks (`fuzz/fuzz_targets/path_normalize.rs`), for
    /// every path of up to four tokens.
    #[test]
    fn properties_hold_for_all_short_token_paths() {
        fn walk(prefix: &mut String, depth: usize, checked: &mut usize) {
            for merge in [true, false] {
                check_properties(prefix, merge);
            }
            *checked += 1;
            if depth == 0 {
                return;
            }
            for t in TOKENS {
                let len = prefix.len();
                prefix.push_str(t);
                walk(prefix, depth - 1, checked);
                prefix.truncate(len);
            }
        }
        let mut checked = 0;
        walk(&mut String::from("/"), 4, &mut checked);
        assert_eq!(checked, (0..=4).map(|d| TOKENS.len().pow(d)).sum::<usize>());
    }

    /// The same properties over random byte strings (a fixed-seed generator, so a failure
    /// reproduces), most of them starting with `/` so that they reach the rewrite.
    #[test]
    fn properties_hold_for_random_inputs() {
        const ALPHABET: &[u8] = b"/./../%2e%2E%2f%5C%00%zz%4aAz09-_~!$&'()*+,;=:@{}\"\x01 ?#";
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..50_000 {
            let len = (next() % 24) as usize;
            let mut input = String::with_capacity(len + 1);
            if next() % 8 != 0 {
                input.push('/');
            }
            for _ in 0..len {
                input.push(char::from(
                    ALPHABET[(next() % ALPHABET.len() as u64) as usize],
                ));
            }
            let merge = next() % 2 == 0;
            check_properties(&input, merge);
        }
    }

    /// The fuzz properties, for one input: accepted inputs normalize to a path that starts
    /// with `/`, has no dot segment (nor `//` when merging), is its own normal form, fits
    /// in a URI, and is borrowed exactly when the rewrite would not change it.
    fn check_properties(input: &str, merge: bool) {
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
        if let Cow::Borrowed(_) = out {
            assert_eq!(
                rewrite(input, merge),
                input,
                "borrowed, but the rewrite differs"
            );
        }
        let with_query = format!("{out}?q");
        assert!(
            PathAndQuery::try_from(with_query.as_str()).is_ok_and(|pq| pq.path() == &*out),
            "{out:?}"
        );
    }
}
