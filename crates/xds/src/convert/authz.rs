//! Authorization rules (`Policy.authorization`, field 14, push protocol version 3) ⇄ wire.

use std::sync::Arc;

use weir_model::{
    Authorization, AuthzAction, AuthzHeader, AuthzRule, ClaimMatch, IpNet, PathMatch, Pattern,
    RateLimitKey, StringMatch,
};

use super::{InvalidResource, invalid, missing};
use crate::proto as wire;

pub(super) fn to_wire(policy: &Arc<str>, a: &Authorization) -> wire::Authorization {
    wire::Authorization {
        policy: policy.to_string(),
        rules: a.rules.iter().map(rule_to_wire).collect(),
        default_deny: a.default == AuthzAction::Deny,
    }
}

fn rule_to_wire(r: &AuthzRule) -> wire::AuthzRule {
    use wire::authz_path::Path;
    use wire::value_match::Value;
    wire::AuthzRule {
        deny: r.action == AuthzAction::Deny,
        methods: r.methods.iter().map(ToString::to_string).collect(),
        paths: r
            .paths
            .iter()
            .map(|p| wire::AuthzPath {
                path: Some(match p {
                    PathMatch::Exact(s) => Path::Exact(s.to_string()),
                    PathMatch::Prefix(s) => Path::Prefix(s.to_string()),
                    PathMatch::Regex(p) => Path::Regex(p.source().to_string()),
                }),
            })
            .collect(),
        headers: r
            .headers
            .iter()
            .map(|h| wire::ValueMatch {
                name: h.name.to_string(),
                value: h.value.as_ref().map(|v| match v {
                    StringMatch::Exact(s) => Value::Exact(s.to_string()),
                    StringMatch::Regex(p) => Value::Regex(p.source().to_string()),
                }),
            })
            .collect(),
        clients: r.clients.iter().map(ToString::to_string).collect(),
        claims: r
            .claims
            .iter()
            .map(|c| wire::ClaimMatch {
                claim: c.claim.to_string(),
                values: c.values.iter().map(ToString::to_string).collect(),
            })
            .collect(),
    }
}

pub(super) fn from_wire(
    a: &wire::Authorization,
) -> Result<(Arc<str>, Arc<Authorization>), InvalidResource> {
    let rules = a
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| rule_from_wire(r, &format!("authorization.rules[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let default = if a.default_deny {
        AuthzAction::Deny
    } else {
        AuthzAction::Allow
    };
    Ok((
        a.policy.as_str().into(),
        Arc::new(Authorization { rules, default }),
    ))
}

fn rule_from_wire(r: &wire::AuthzRule, f: &str) -> Result<AuthzRule, InvalidResource> {
    use wire::authz_path::Path;
    use wire::value_match::Value;
    let regex = |field: String, s: &str| Pattern::new(s).map_err(|e| invalid(field, e));
    let mut paths = Vec::with_capacity(r.paths.len());
    for (i, p) in r.paths.iter().enumerate() {
        let field = format!("{f}.paths[{i}]");
        paths.push(match p.path.as_ref().ok_or_else(|| missing(&field))? {
            Path::Exact(s) => PathMatch::Exact(s.as_str().into()),
            Path::Prefix(s) => PathMatch::Prefix(s.as_str().into()),
            Path::Regex(s) => PathMatch::Regex(regex(format!("{field}.regex"), s)?),
        });
    }
    let mut headers = Vec::with_capacity(r.headers.len());
    for (i, h) in r.headers.iter().enumerate() {
        let field = format!("{f}.headers[{i}]");
        if !RateLimitKey::is_header_name(&h.name) {
            return Err(invalid(format!("{field}.name"), "not a header name"));
        }
        headers.push(AuthzHeader {
            name: h.name.to_ascii_lowercase().into(),
            value: match &h.value {
                None => None,
                Some(Value::Exact(s)) => Some(StringMatch::Exact(s.as_str().into())),
                Some(Value::Regex(s)) => {
                    Some(StringMatch::Regex(regex(format!("{field}.regex"), s)?))
                }
            },
        });
    }
    let clients = r
        .clients
        .iter()
        .map(|c| IpNet::parse(c).map_err(|e| invalid(format!("{f}.clients"), e)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(AuthzRule {
        action: if r.deny {
            AuthzAction::Deny
        } else {
            AuthzAction::Allow
        },
        methods: r.methods.iter().map(|m| Arc::from(m.as_str())).collect(),
        paths,
        headers,
        clients,
        claims: r
            .claims
            .iter()
            .map(|c| ClaimMatch {
                claim: c.claim.as_str().into(),
                values: c.values.iter().map(|v| Arc::from(v.as_str())).collect(),
            })
            .collect(),
    })
}
