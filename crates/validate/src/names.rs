//! The name and value formats of Kubernetes' `apimachinery` validation (DNS labels and
//! subdomains, qualified names, IANA service names), with its messages.

use std::net::IpAddr;

fn label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_lowercase() | b[0].is_ascii_digit()
        && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// RFC 1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63): the problems, if any.
pub(crate) fn dns1123_label(s: &str) -> Option<String> {
    if s.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    (!label_chars(s)).then(|| {
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character".into()
    })
}

/// RFC 1123 subdomain (dot-separated labels, at most 253).
pub(crate) fn dns1123_subdomain(s: &str) -> Option<String> {
    if s.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    (!s.split('.').all(label_chars)).then(|| {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into()
    })
}

/// RFC 1035 label (`[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63): Service names.
pub(crate) fn dns1035_label(s: &str) -> Option<String> {
    if s.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    let ok = label_chars(s) && s.as_bytes()[0].is_ascii_lowercase();
    (!ok).then(|| {
        "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character".into()
    })
}

/// A wildcard DNS-1123 subdomain (`*.` followed by a subdomain).
pub(crate) fn wildcard_subdomain(s: &str) -> Option<String> {
    match s.strip_prefix("*.") {
        Some(rest) => dns1123_subdomain(rest).map(|_| {
            "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character".into()
        }),
        None => Some("a wildcard DNS-1123 subdomain must start with '*.'".into()),
    }
}

/// The name part of a qualified name: `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, ≤ 63.
fn qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A qualified name (`[prefix/]name`, prefix a DNS subdomain): label and annotation keys.
pub(crate) fn qualified_name(s: &str) -> Option<String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Some("prefix part must be non-empty".into());
        }
        if let Some(e) = dns1123_subdomain(p) {
            return Some(format!("prefix part {e}"));
        }
    }
    (!qualified_name_part(name)).then(|| {
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (at most 63 characters)".into()
    })
}

/// A label value: empty, or a qualified name part.
pub(crate) fn label_value(s: &str) -> Option<String> {
    (!s.is_empty() && !qualified_name_part(s)).then(|| {
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (at most 63 characters)".into()
    })
}

/// An IANA service name (a named port): ≤ 15 lowercase letters, digits and '-', with a
/// letter, no '-' at either end or twice in a row.
pub(crate) fn iana_svc_name(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 15
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && b.iter().any(u8::is_ascii_lowercase)
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && !s.contains("--");
    (!ok).then(|| "must be a valid IANA service name: at most 15 lowercase letters, digits and '-', with at least one letter and no '-' at either end or next to another".into())
}

/// A key of a Secret's or ConfigMap's `data`.
pub(crate) fn config_map_key(s: &str) -> Option<String> {
    if s.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    let ok = !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && s != "."
        && s != ".."
        && !s.starts_with("..");
    (!ok).then(|| {
        "a valid config key must consist of alphanumeric characters, '-', '_' or '.'".into()
    })
}

/// Whether `s` is an IP address (IPv4 without leading zeros, or IPv6).
pub(crate) fn is_ip(s: &str) -> bool {
    s.parse::<IpAddr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(dns1123_label("a-1"), None);
        for bad in ["", "A", "-a", "a-", "a.b", &"a".repeat(64)] {
            assert!(dns1123_label(bad).is_some(), "{bad}");
        }
        assert_eq!(dns1123_subdomain("a.b-c.d"), None);
        for bad in ["", "a..b", "A.b", ".a", "a_b"] {
            assert!(dns1123_subdomain(bad).is_some(), "{bad}");
        }
        assert!(dns1035_label("1a").is_some() && dns1035_label("a1").is_none());
        assert!(wildcard_subdomain("*.a.b").is_none() && wildcard_subdomain("a.*.b").is_some());
        assert!(qualified_name("example.com/Name_1").is_none());
        for bad in ["/a", "a/", "EX.com/a", "a/b/c", "-a", ""] {
            assert!(qualified_name(bad).is_some(), "{bad}");
        }
        assert!(label_value("").is_none() && label_value("a b").is_some());
        assert!(iana_svc_name("http-2").is_none());
        for bad in ["80", "a--b", "-a", "Http", "abcdefghijklmnop"] {
            assert!(iana_svc_name(bad).is_some(), "{bad}");
        }
        assert!(config_map_key("tls.crt").is_none() && config_map_key("a/b").is_some());
        assert!(config_map_key("..a").is_some());
        assert!(is_ip("::1") && !is_ip("1.2.3.04"));
    }
}
