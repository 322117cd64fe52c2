//! TrafficPolicy `authorization` → [`Authorization`]: each rule's conditions checked and
//! normalized (methods upper-case, header names lower-case, path prefixes without their
//! trailing `/`, CIDRs parsed), every error naming its field.

use std::sync::Arc;

use weir_api::{
    AuthorizationAction, AuthorizationHeaderMatchType, AuthorizationRuleSpec, AuthorizationSpec,
};
use weir_model::{
    Authorization, AuthzAction, AuthzHeader, AuthzRule, ClaimMatch, IpNet, Pattern, StringMatch,
};

use crate::compile::fields::{is_token, path_match, regex_error};

/// The most rules of one policy: each request may be compared with every one.
pub(crate) const MAX_RULES: usize = 64;
/// The most entries of one condition list (methods, paths, headers, claims).
const MAX_CONDITIONS: usize = 16;
/// The most networks of one rule's `clients`.
const MAX_CLIENTS: usize = 256;
/// The most accepted values of one claim condition.
const MAX_CLAIM_VALUES: usize = 64;

/// Validates `spec.authorization` (`field`).
pub(crate) fn authorization(a: &AuthorizationSpec, field: &str) -> Result<Authorization, String> {
    let default = action(a.default, &format!("{field}.default"))?;
    if a.rules.len() > MAX_RULES {
        return Err(format!("{field}.rules: at most {MAX_RULES} rules"));
    }
    let rules = a
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| rule(r, &format!("{field}.rules[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Authorization { rules, default })
}

fn action(a: Option<AuthorizationAction>, field: &str) -> Result<AuthzAction, String> {
    match a {
        Some(AuthorizationAction::Allow) => Ok(AuthzAction::Allow),
        Some(AuthorizationAction::Deny) => Ok(AuthzAction::Deny),
        None => Err(format!("{field}: required (Allow or Deny)")),
    }
}

fn bounded<T>(list: &[T], max: usize, field: &str) -> Result<(), String> {
    if list.len() > max {
        return Err(format!("{field}: at most {max} entries"));
    }
    Ok(())
}

fn rule(r: &AuthorizationRuleSpec, field: &str) -> Result<AuthzRule, String> {
    let action = action(r.action, &format!("{field}.action"))?;
    bounded(&r.methods, MAX_CONDITIONS, &format!("{field}.methods"))?;
    bounded(&r.paths, MAX_CONDITIONS, &format!("{field}.paths"))?;
    bounded(&r.headers, MAX_CONDITIONS, &format!("{field}.headers"))?;
    bounded(&r.clients, MAX_CLIENTS, &format!("{field}.clients"))?;
    bounded(&r.claims, MAX_CONDITIONS, &format!("{field}.claims"))?;
    let methods = r
        .methods
        .iter()
        .enumerate()
        .map(|(i, m)| {
            if is_token(m) {
                Ok(Arc::from(m.to_ascii_uppercase()))
            } else {
                Err(format!("{field}.methods[{i}]: {m:?} is not an HTTP method"))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let paths = r
        .paths
        .iter()
        .enumerate()
        .map(|(i, p)| path_match(p, &format!("{field}.paths[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let headers = r
        .headers
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let f = format!("{field}.headers[{i}]");
            if !is_token(&h.name) {
                return Err(format!("{f}.name: {:?} is not a header name", h.name));
            }
            let value = match (
                h.type_.unwrap_or(AuthorizationHeaderMatchType::Exact),
                &h.value,
            ) {
                (AuthorizationHeaderMatchType::Present, None) => None,
                (AuthorizationHeaderMatchType::Present, Some(_)) => {
                    return Err(format!("{f}.value: not allowed with type Present"));
                }
                (_, None) => return Err(format!("{f}.value: required")),
                (AuthorizationHeaderMatchType::Exact, Some(v)) => {
                    Some(StringMatch::Exact(v.as_str().into()))
                }
                (AuthorizationHeaderMatchType::RegularExpression, Some(v)) => {
                    Some(StringMatch::Regex(
                        Pattern::new(v).map_err(|e| format!("{f}.value: {}", regex_error(e)))?,
                    ))
                }
            };
            Ok(AuthzHeader {
                name: h.name.to_ascii_lowercase().into(),
                value,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let clients = r
        .clients
        .iter()
        .enumerate()
        .map(|(i, c)| IpNet::parse(c.trim()).map_err(|e| format!("{field}.clients[{i}]: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let claims = r
        .claims
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let f = format!("{field}.claims[{i}]");
            if c.name.is_empty() {
                return Err(format!("{f}.name: required"));
            }
            bounded(&c.values, MAX_CLAIM_VALUES, &format!("{f}.values"))?;
            Ok(ClaimMatch {
                claim: c.name.as_str().into(),
                values: c.values.iter().map(|v| Arc::from(v.as_str())).collect(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(AuthzRule {
        action,
        methods,
        paths,
        headers,
        clients,
        claims,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> AuthorizationSpec {
        serde_saphyr::from_str(yaml).expect("spec")
    }

    #[test]
    fn rules_are_normalized() {
        let a = authorization(
            &spec(
                r#"
default: Deny
rules:
- action: Allow
  methods: [get, POST]
  paths: [{type: PathPrefix, value: /api/}, {type: RegularExpression, value: "/v[0-9]+"}]
  headers: [{name: X-Team, value: blue}, {name: X-Trace, type: Present}]
  clients: [10.0.0.0/8]
  claims: [{name: scope, values: [read]}]
"#,
            ),
            "spec.authorization",
        )
        .unwrap();
        assert_eq!(a.default, AuthzAction::Deny);
        let r = &a.rules[0];
        assert_eq!(r.methods, vec![Arc::from("GET"), Arc::from("POST")]);
        assert_eq!(r.paths[0], weir_model::PathMatch::Prefix("/api".into()));
        assert_eq!(&*r.headers[0].name, "x-team");
        assert!(r.headers[1].value.is_none());
        assert!(a.reads_claims());
    }

    #[test]
    fn errors_name_their_field() {
        let err = |yaml: &str| authorization(&spec(yaml), "spec.authorization").unwrap_err();
        assert_eq!(
            err("rules: []"),
            "spec.authorization.default: required (Allow or Deny)"
        );
        assert_eq!(
            err("default: Allow\nrules: [{}]"),
            "spec.authorization.rules[0].action: required (Allow or Deny)"
        );
        assert!(
            err("default: Allow\nrules: [{action: Deny, clients: [10.0.0.1/8]}]")
                .starts_with("spec.authorization.rules[0].clients[0]: ")
        );
        assert!(
            err("default: Allow\nrules: [{action: Deny, paths: [{type: Exact, value: x}]}]")
                .starts_with("spec.authorization.rules[0].paths[0].value")
        );
        assert_eq!(
            err(
                "default: Allow\nrules: [{action: Deny, headers: [{name: x, type: Present, value: y}]}]"
            ),
            "spec.authorization.rules[0].headers[0].value: not allowed with type Present"
        );
        assert_eq!(
            err("default: Allow\nrules: [{action: Deny, headers: [{name: x}]}]"),
            "spec.authorization.rules[0].headers[0].value: required"
        );
        assert!(serde_saphyr::from_str::<AuthorizationSpec>("default: Maybe").is_err());
    }
}
