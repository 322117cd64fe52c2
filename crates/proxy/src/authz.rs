//! Authorization rules (TrafficPolicy `authorization`): the first rule whose every
//! condition holds decides whether the request goes on, else the default. Runs in phase 2
//! after authentication, so the headers are those authentication left (a token or key it
//! removed is no longer there) and the claims are those of the JWT it verified; before the
//! rate limits, so a refused request spends no budget.

use std::net::IpAddr;

use http::{HeaderMap, Method};
use serde_json::{Map, Value};
use weir_model::{Authorization, AuthzAction, AuthzHeader, AuthzRule, ClaimMatch};

/// What the rules read of a request besides its headers and claims.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Head<'a> {
    /// The request's method.
    pub(crate) method: &'a Method,
    /// Its normalized path, without the query.
    pub(crate) path: &'a str,
    /// The client's address (as `ipRules` sees it).
    pub(crate) client: IpAddr,
}

/// What `a` decides for a request (`claims`: of the JWT verified for it, if any).
pub(crate) fn decide(
    a: &Authorization,
    head: Head<'_>,
    headers: &HeaderMap,
    claims: Option<&Map<String, Value>>,
) -> AuthzAction {
    a.rules
        .iter()
        .find(|r| matches(r, head, headers, claims))
        .map_or(a.default, |r| r.action)
}

/// Whether every condition of `r` holds; cheap ones first.
fn matches(
    r: &AuthzRule,
    head: Head<'_>,
    headers: &HeaderMap,
    claims: Option<&Map<String, Value>>,
) -> bool {
    (r.methods.is_empty() || r.methods.iter().any(|m| **m == *head.method.as_str()))
        && (r.clients.is_empty() || r.clients.iter().any(|n| n.contains(head.client)))
        && (r.paths.is_empty() || r.paths.iter().any(|p| p.matches(head.path)))
        && r.headers.iter().all(|h| header_holds(h, headers))
        && (r.claims.is_empty()
            || claims.is_some_and(|c| r.claims.iter().all(|m| claim_holds(m, c))))
}

/// Present, or any of the header's values (as UTF-8; other values never match) matches.
fn header_holds(h: &AuthzHeader, headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(&*h.name).iter();
    match &h.value {
        None => values.next().is_some(),
        Some(m) => values.any(|v| std::str::from_utf8(v.as_bytes()).is_ok_and(|s| m.matches(s))),
    }
}

fn claim_holds(m: &ClaimMatch, claims: &Map<String, Value>) -> bool {
    crate::jwt::claim_at(claims, &m.claim).is_some_and(|v| crate::jwt::claim_accepts(v, &m.values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use weir_model::{IpNet, PathMatch, StringMatch};

    fn rule(action: AuthzAction) -> AuthzRule {
        AuthzRule {
            action,
            methods: Vec::new(),
            paths: Vec::new(),
            headers: Vec::new(),
            clients: Vec::new(),
            claims: Vec::new(),
        }
    }

    fn head<'a>(method: &'a Method, path: &'a str, client: &str) -> Head<'a> {
        Head {
            method,
            path,
            client: client.parse().unwrap(),
        }
    }

    /// The first matching rule decides; each kind of condition narrows a rule; no match
    /// is the default.
    #[test]
    fn the_first_matching_rule_decides() {
        let a = Authorization {
            rules: vec![
                AuthzRule {
                    clients: vec![IpNet::parse("10.9.0.0/16").unwrap()],
                    ..rule(AuthzAction::Deny)
                },
                AuthzRule {
                    methods: vec!["GET".into(), "HEAD".into()],
                    paths: vec![PathMatch::Prefix("/public".into())],
                    ..rule(AuthzAction::Allow)
                },
                AuthzRule {
                    headers: vec![
                        AuthzHeader {
                            name: "x-team".into(),
                            value: Some(StringMatch::Exact("ops".into())),
                        },
                        AuthzHeader {
                            name: "x-ticket".into(),
                            value: None,
                        },
                    ],
                    ..rule(AuthzAction::Allow)
                },
                AuthzRule {
                    claims: vec![ClaimMatch {
                        claim: "roles".into(),
                        values: vec![Arc::from("admin")],
                    }],
                    ..rule(AuthzAction::Allow)
                },
            ],
            default: AuthzAction::Deny,
        };
        let get = Method::GET;
        let post = Method::POST;
        let none = HeaderMap::new();
        let d = |h: Head<'_>, headers: &HeaderMap, claims: Option<&Map<String, Value>>| {
            decide(&a, h, headers, claims)
        };
        assert_eq!(
            d(head(&get, "/public/x", "10.1.0.1"), &none, None),
            AuthzAction::Allow
        );
        // Denied first by address, whatever else holds.
        assert_eq!(
            d(head(&get, "/public/x", "10.9.0.1"), &none, None),
            AuthzAction::Deny
        );
        assert_eq!(
            d(head(&post, "/public/x", "10.1.0.1"), &none, None),
            AuthzAction::Deny
        );
        assert_eq!(
            d(head(&get, "/publicity", "10.1.0.1"), &none, None),
            AuthzAction::Deny
        );
        // Every header condition must hold.
        let mut h = HeaderMap::new();
        h.insert("x-team", "ops".parse().unwrap());
        assert_eq!(
            d(head(&post, "/x", "10.1.0.1"), &h, None),
            AuthzAction::Deny
        );
        h.insert("x-ticket", "".parse().unwrap());
        assert_eq!(
            d(head(&post, "/x", "10.1.0.1"), &h, None),
            AuthzAction::Allow
        );
        // Claims: none without a verified token; an array claim holding the value.
        assert_eq!(
            d(head(&post, "/x", "10.1.0.1"), &none, None),
            AuthzAction::Deny
        );
        let claims = |v: Value| v.as_object().cloned().unwrap();
        let admin = claims(serde_json::json!({"roles": ["user", "admin"]}));
        let user = claims(serde_json::json!({"roles": "user"}));
        assert_eq!(
            d(head(&post, "/x", "10.1.0.1"), &none, Some(&admin)),
            AuthzAction::Allow
        );
        assert_eq!(
            d(head(&post, "/x", "10.1.0.1"), &none, Some(&user)),
            AuthzAction::Deny
        );
    }

    /// A rule without conditions matches everything; no rules: the default.
    #[test]
    fn empty_rules_and_defaults() {
        let get = Method::GET;
        let none = HeaderMap::new();
        let h = head(&get, "/", "192.0.2.1");
        let allow_all = Authorization {
            rules: Vec::new(),
            default: AuthzAction::Allow,
        };
        assert_eq!(decide(&allow_all, h, &none, None), AuthzAction::Allow);
        let catch_all = Authorization {
            rules: vec![rule(AuthzAction::Deny)],
            default: AuthzAction::Allow,
        };
        assert_eq!(decide(&catch_all, h, &none, None), AuthzAction::Deny);
    }
}
