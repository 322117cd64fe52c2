//! A Gateway's `weir.dev/…` annotations → the [`ListenerSettings`] of its listeners.
//!
//! Gateway API has no fields for connection limits and timeouts; until weir's listener
//! policy exists they are annotations on the Gateway (its XListenerSets' listeners share
//! the Gateway's sockets and so its settings). A value that does not parse keeps that
//! setting's default and is reported with the annotation's name.

use std::collections::BTreeMap;
use std::time::Duration;

use weir_model::{IpNet, ListenerSettings, ProxyProtocol};

use crate::compile::duration;

/// The annotations weir reads on a Gateway, with what each sets.
pub(crate) const ANNOTATIONS: [&str; 13] = [
    "weir.dev/handshake-timeout",
    "weir.dev/request-header-timeout",
    "weir.dev/idle-timeout",
    "weir.dev/body-idle-timeout",
    "weir.dev/upstream-response-timeout",
    "weir.dev/max-connections",
    "weir.dev/max-connections-per-client",
    "weir.dev/max-header-bytes",
    "weir.dev/max-headers",
    "weir.dev/merge-slashes",
    "weir.dev/trusted-proxies",
    "weir.dev/proxy-protocol",
    "weir.dev/proxy-protocol-sources",
];

/// Largest accepted `max-header-bytes` (1 MiB) and `max-headers`: beyond them one slow
/// client could pin a large buffer per connection. The smallest head limit is 8 KiB
/// (hyper's smallest HTTP/1.1 read buffer). A zero timeout or connection limit disables
/// it.
const MAX_HEADER_BYTES: u32 = 1024 * 1024;
const MAX_HEADERS: u32 = 1000;

/// The settings these annotations ask for, and one problem per annotation that was
/// refused (`metadata.annotations[NAME]: why`).
pub(crate) fn listener_settings(
    annotations: &BTreeMap<String, String>,
) -> (ListenerSettings, Vec<String>) {
    let mut s = ListenerSettings::default();
    let mut problems = Vec::new();
    for name in ANNOTATIONS {
        let Some(value) = annotations.get(name) else {
            continue;
        };
        let t = &mut s.timeouts;
        let l = &mut s.limits;
        let result = match name {
            "weir.dev/handshake-timeout" => timeout(value).map(|d| t.handshake = d),
            "weir.dev/request-header-timeout" => timeout(value).map(|d| t.request_header = d),
            "weir.dev/idle-timeout" => timeout(value).map(|d| t.idle = d),
            "weir.dev/body-idle-timeout" => timeout(value).map(|d| t.body_idle = d),
            "weir.dev/upstream-response-timeout" => timeout(value).map(|d| t.upstream_response = d),
            "weir.dev/max-connections" => count(value, 0, u32::MAX).map(|n| l.max_connections = n),
            "weir.dev/max-connections-per-client" => {
                count(value, 0, u32::MAX).map(|n| l.max_connections_per_client = n)
            }
            "weir.dev/max-header-bytes" => {
                count(value, 8192, MAX_HEADER_BYTES).map(|n| l.max_header_bytes = n)
            }
            "weir.dev/max-headers" => count(value, 1, MAX_HEADERS).map(|n| l.max_headers = n),
            "weir.dev/trusted-proxies" => networks(value).map(|nets| s.trusted_proxies = nets),
            "weir.dev/proxy-protocol" => match value.as_str() {
                "true" => {
                    s.proxy_protocol.get_or_insert_with(ProxyProtocol::default);
                    Ok(())
                }
                "false" => Ok(()),
                _ => Err(format!("{value:?} is not \"true\" or \"false\"")),
            },
            // Read after `proxy-protocol` (the order of ANNOTATIONS): it narrows it.
            "weir.dev/proxy-protocol-sources" => match &mut s.proxy_protocol {
                Some(p) => networks(value).map(|nets| p.sources = nets),
                None => Err("set without \"weir.dev/proxy-protocol\": \"true\"".to_owned()),
            },
            "weir.dev/merge-slashes" => match value.as_str() {
                "true" | "false" => {
                    s.paths.merge_slashes = value == "true";
                    Ok(())
                }
                _ => Err(format!("{value:?} is not \"true\" or \"false\"")),
            },
            _ => Ok(()),
        };
        if let Err(why) = result {
            problems.push(format!(
                "metadata.annotations[{name}]: {why}; the default applies"
            ));
        }
    }
    (s, problems)
}

/// A comma-separated list of CIDRs or addresses.
fn networks(value: &str) -> Result<Vec<IpNet>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(IpNet::parse)
        .collect()
}

/// A Gateway API duration; `0s` disables the timeout (as for route timeouts).
fn timeout(value: &str) -> Result<Duration, String> {
    duration::parse(value)
        .map(Option::unwrap_or_default)
        .map_err(|e| e.to_string())
}

fn count(value: &str, min: u32, max: u32) -> Result<u32, String> {
    match value.parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{value:?} is not a whole number from {min} to {max}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn none_is_the_defaults() {
        let (s, problems) = listener_settings(&annotations(&[("other", "x")]));
        assert!(s.is_default() && problems.is_empty());
    }

    #[test]
    fn every_annotation_sets_its_field() {
        let (s, problems) = listener_settings(&annotations(&[
            ("weir.dev/handshake-timeout", "2s"),
            ("weir.dev/request-header-timeout", "3s"),
            ("weir.dev/idle-timeout", "1m30s"),
            ("weir.dev/body-idle-timeout", "500ms"),
            ("weir.dev/upstream-response-timeout", "2m"),
            ("weir.dev/max-connections", "10"),
            ("weir.dev/max-connections-per-client", "2"),
            ("weir.dev/max-header-bytes", "8192"),
            ("weir.dev/max-headers", "50"),
            ("weir.dev/merge-slashes", "false"),
        ]));
        assert!(problems.is_empty(), "{problems:?}");
        let t = &s.timeouts;
        assert_eq!(t.handshake, Duration::from_secs(2));
        assert_eq!(t.request_header, Duration::from_secs(3));
        assert_eq!(t.idle, Duration::from_secs(90));
        assert_eq!(t.body_idle, Duration::from_millis(500));
        assert_eq!(t.upstream_response, Duration::from_secs(120));
        let l = &s.limits;
        assert_eq!(
            (
                l.max_connections,
                l.max_connections_per_client,
                l.max_header_bytes,
                l.max_headers
            ),
            (10, 2, 8192, 50)
        );
        assert!(!s.paths.merge_slashes);
        // Zero disables a timeout or a connection limit.
        let (s, problems) = listener_settings(&annotations(&[
            ("weir.dev/idle-timeout", "0s"),
            ("weir.dev/max-connections-per-client", "0"),
        ]));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(s.timeouts.idle, Duration::ZERO);
        assert_eq!(s.limits.max_connections_per_client, 0);
    }

    #[test]
    fn proxy_protocol_and_its_sources() {
        let (s, problems) = listener_settings(&annotations(&[
            ("weir.dev/proxy-protocol", "true"),
            ("weir.dev/proxy-protocol-sources", "10.0.0.0/8, 192.0.2.7"),
        ]));
        assert!(problems.is_empty(), "{problems:?}");
        let p = s.proxy_protocol.expect("set");
        assert_eq!(p.sources.len(), 2);
        let (s, problems) = listener_settings(&annotations(&[
            ("weir.dev/proxy-protocol", "false"),
            ("weir.dev/proxy-protocol-sources", "10.0.0.0/8"),
        ]));
        assert!(s.is_default());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("proxy-protocol-sources"));
        let (s, problems) = listener_settings(&annotations(&[("weir.dev/proxy-protocol", "yes")]));
        assert!(s.is_default() && problems.len() == 1);
    }

    #[test]
    fn bad_values_keep_the_default_and_are_named() {
        let (s, problems) = listener_settings(&annotations(&[
            ("weir.dev/idle-timeout", "0.5s"),
            ("weir.dev/max-headers", "100000"),
            ("weir.dev/max-connections", "-1"),
            ("weir.dev/merge-slashes", "yes"),
            ("weir.dev/body-idle-timeout", "5 seconds"),
        ]));
        assert!(s.is_default());
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(problems[0].starts_with("metadata.annotations[weir.dev/idle-timeout]"));
    }
}
