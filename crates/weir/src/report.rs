//! Turning translator statuses into problem lines for logs and `weir check`.

use weir_api::{Condition, ObjectStatus};
use weir_proxy::status::Problem;

/// Conditions that mean something is wrong: any `False` condition except `Conflicted`
/// and the informational `AttachedListenerSets`, and `Conflicted=True`.
fn bad(c: &Condition) -> bool {
    match c.type_ {
        "Conflicted" => c.is_true(),
        "AttachedListenerSets" => false,
        _ => !c.is_true(),
    }
}

fn found(scope: &str, c: &Condition) -> Problem {
    Problem {
        scope: scope.trim_end_matches(": ").to_string(),
        condition: format!("{}={}", c.type_, c.status),
        reason: c.reason.to_owned(),
        message: c.message.to_string(),
    }
}

fn message(m: &str) -> Problem {
    Problem {
        message: m.to_string(),
        ..Problem::default()
    }
}

/// A problem as one line: `listener https: Accepted=False (Reason): message`, or the bare
/// message.
pub fn line(p: &Problem) -> String {
    if p.condition.is_empty() {
        return p.message.clone();
    }
    let scope = if p.scope.is_empty() {
        String::new()
    } else {
        format!("{}: ", p.scope)
    };
    let msg = if p.message.is_empty() {
        String::new()
    } else {
        format!(": {}", p.message)
    };
    format!("{scope}{} ({}){msg}", p.condition, p.reason)
}

fn with_listeners<'a>(
    conditions: &[Condition],
    listeners: impl Iterator<Item = (&'a String, &'a Vec<Condition>)>,
) -> Vec<Problem> {
    let mut out: Vec<Problem> = conditions
        .iter()
        .filter(|c| bad(c))
        .map(|c| found("", c))
        .collect();
    for (name, conds) in listeners {
        let scope = format!("listener {name}");
        out.extend(conds.iter().filter(|c| bad(c)).map(|c| found(&scope, c)));
    }
    out
}

/// Every problem a status reports, one line each; empty when the object is fine.
pub fn problems(status: &ObjectStatus) -> Vec<String> {
    findings(status).iter().map(line).collect()
}

/// Every problem a status reports, with its condition where it has one; empty when the
/// object is fine.
pub fn findings(status: &ObjectStatus) -> Vec<Problem> {
    match status {
        ObjectStatus::GatewayClass(s) => s
            .conditions
            .iter()
            .filter(|c| bad(c))
            .map(|c| found("", c))
            .collect(),
        ObjectStatus::Gateway(s) => {
            let listeners = s.listeners.iter().map(|l| (&l.name, &l.conditions));
            let mut out = with_listeners(&s.conditions, listeners);
            // Refused annotations leave the Gateway accepted, named in that condition's
            // message after the first "; " (see weir-translate's gateway status).
            if let Some(c) = s
                .conditions
                .iter()
                .find(|c| c.type_ == "Accepted" && c.is_true())
                && let Some((_, refused)) = c.message.split_once("; ")
            {
                out.extend(refused.split("; ").map(message));
            }
            out
        }
        ObjectStatus::ListenerSet(s) => {
            let listeners = s.listeners.iter().map(|l| (&l.name, &l.conditions));
            with_listeners(&s.conditions, listeners)
        }
        ObjectStatus::Route(s) => s
            .parents
            .iter()
            .flat_map(|p| {
                let mut scope = format!("parent {}", p.parent_ref.name);
                if let Some(sec) = &p.parent_ref.section_name {
                    scope.push('/');
                    scope.push_str(sec);
                }
                p.conditions
                    .iter()
                    .filter(|c| bad(c))
                    .map(move |c| found(&scope, c))
            })
            .collect(),
        ObjectStatus::Policy(s) => s
            .ancestors
            .iter()
            .flat_map(|a| {
                let r = &a.ancestor_ref;
                let mut scope = format!(
                    "target {} {}",
                    r.kind.as_deref().unwrap_or("Gateway"),
                    r.name
                );
                if let Some(sec) = &r.section_name {
                    scope.push('/');
                    scope.push_str(sec);
                }
                a.conditions
                    .iter()
                    .filter(|c| bad(c))
                    .map(move |c| found(&scope, c))
            })
            .collect(),
        ObjectStatus::Ingress { problems, .. } => problems.iter().map(|p| message(p)).collect(),
        ObjectStatus::Problems(p) => p.iter().map(|p| message(p)).collect(),
    }
}
