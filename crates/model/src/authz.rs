//! Authorization rules (TrafficPolicy `authorization`): an ordered list of allow/deny
//! rules over what a request carries — method, path, headers, the client's address and
//! the claims of the JWT the request authenticated with. The first rule whose every
//! condition holds decides; no rule holding leaves it to the default.
//!
//! Only the data lives here (the model has no HTTP types); the data plane evaluates it
//! (`proxy/src/authz.rs`).

use std::sync::Arc;

use serde::Serialize;

use crate::policy::IpNet;
use crate::route::{PathMatch, StringMatch};

/// What a rule (or the default) does with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum AuthzAction {
    /// The request goes on to the next checks.
    Allow,
    /// The request is refused (403).
    Deny,
}

/// Rules tried in order; the first that matches decides, else `default`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Authorization {
    /// The rules, in the order they are tried.
    pub rules: Vec<AuthzRule>,
    /// What happens to a request no rule matches.
    pub default: AuthzAction,
}

/// One rule: it matches when every condition it sets holds. Within a list of
/// alternatives (`methods`, `paths`, `clients`) one must hold; every `headers` and
/// `claims` entry must hold. A rule without conditions matches every request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct AuthzRule {
    /// What the rule does when it matches.
    pub action: AuthzAction,
    /// Upper-case methods, one of which the request's must be (empty: any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<Arc<str>>,
    /// Paths, one of which the request's (normalized, without the query) must match
    /// (empty: any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathMatch>,
    /// Headers that must all be present (with a matching value when one is given).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<AuthzHeader>,
    /// Networks, one of which the client's address must be in (empty: any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clients: Vec<IpNet>,
    /// Claims of the request's verified JWT that must all hold. A request that was not
    /// authenticated by a JWT check has no claims: such a condition never holds for it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ClaimMatch>,
}

/// A header condition: present, or present with a value that matches.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct AuthzHeader {
    /// Lower-case name.
    pub name: Arc<str>,
    /// The value (any of the request's values for the name may match); `None`: present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<StringMatch>,
}

/// A claim condition on the request's verified JWT (a top-level claim).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ClaimMatch {
    /// The claim's name.
    pub claim: Arc<str>,
    /// Accepted values: the claim (a string, one of its space-separated words, or an
    /// item of an array of strings) must be one of them; empty: the claim must be
    /// present.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<Arc<str>>,
}

impl Authorization {
    /// Whether any rule reads the request's JWT claims.
    pub fn reads_claims(&self) -> bool {
        self.rules.iter().any(|r| !r.claims.is_empty())
    }
}
