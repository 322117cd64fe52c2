//! Turning translator statuses into problem lines for logs and `weir check`.

use weir_api::{Condition, ObjectStatus};

/// Conditions that mean something is wrong: any `False` condition except `Conflicted`
/// and the informational `AttachedListenerSets`, and `Conflicted=True`.
fn bad(c: &Condition) -> bool {
    match c.type_.as_str() {
        "Conflicted" => c.is_true(),
        "AttachedListenerSets" => false,
        _ => !c.is_true(),
    }
}

fn line(scope: &str, c: &Condition) -> String {
    let msg = if c.message.is_empty() {
        String::new()
    } else {
        format!(": {}", c.message)
    };
    format!("{scope}{}={} ({}){msg}", c.type_, c.status, c.reason)
}

fn with_listeners<'a>(
    conditions: &[Condition],
    listeners: impl Iterator<Item = (&'a String, &'a Vec<Condition>)>,
) -> Vec<String> {
    let mut out: Vec<String> = conditions
        .iter()
        .filter(|c| bad(c))
        .map(|c| line("", c))
        .collect();
    for (name, conds) in listeners {
        let scope = format!("listener {name}: ");
        out.extend(conds.iter().filter(|c| bad(c)).map(|c| line(&scope, c)));
    }
    out
}

/// Every problem a status reports, one line each; empty when the object is fine.
pub fn problems(status: &ObjectStatus) -> Vec<String> {
    match status {
        ObjectStatus::GatewayClass(s) => s
            .conditions
            .iter()
            .filter(|c| bad(c))
            .map(|c| line("", c))
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
                out.extend(refused.split("; ").map(str::to_string));
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
                scope.push_str(": ");
                p.conditions
                    .iter()
                    .filter(|c| bad(c))
                    .map(move |c| line(&scope, c))
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
                scope.push_str(": ");
                a.conditions
                    .iter()
                    .filter(|c| bad(c))
                    .map(move |c| line(&scope, c))
            })
            .collect(),
        ObjectStatus::Ingress { problems, .. } => problems.clone(),
        ObjectStatus::Problems(p) => p.clone(),
    }
}
