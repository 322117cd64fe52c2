//! Native evaluation of the Gateway API's uniqueness rules.
//!
//! Several CRD rules say "the elements of this list are unique by some key" in the form
//! `self.all(x, [guard(x) ⇒] self.exists_one(y, same(x, y)))`. Interpreted, that is n²
//! evaluations of `same`: a Gateway of 64 listeners costs 2 × 4,096 of them, about 26 ms
//! with the CEL interpreter, on every change of that Gateway. For exactly these rule texts
//! (matched verbatim), a hash set of keys gives the same verdict in O(n): for every rule
//! here, `same(x, y)` holds exactly when x and y both pass the guard and have equal keys,
//! so "exactly one y" means "no other guarded element with x's key".
//!
//! A native check answers `None` when an element is not what the rule expects (not an
//! object, a field the rule reads unguarded missing, a field of another type): the CEL
//! program then runs and gives the API server's answer (usually an evaluation error).
//! `tests::native_rules_agree_with_cel` runs both on thousands of random lists.

use std::collections::HashSet;

use serde_json::{Map, Value};

/// A native check of one rule over the list it guards.
pub(crate) type Native = fn(&Value) -> Option<bool>;

/// The native check of `rule`, if it is one of the uniqueness rules.
pub(crate) fn native(rule: &str) -> Option<Native> {
    let rule = rule.trim();
    RULES
        .iter()
        .find(|(text, _)| *text == rule)
        .map(|(_, f)| *f)
}

const RULES: &[(&str, Native)] = &[
    (
        "self.all(l1, self.exists_one(l2, l1.name == l2.name))",
        |v| unique(v, |_| Some(true), |e| Some(vec![string(e, "name")?])),
    ),
    (
        "self.all(t1, self.exists_one(t2, t1.port == t2.port))",
        |v| unique(v, |_| Some(true), |e| Some(vec![int(e, "port")?])),
    ),
    (
        "self.all(l1, !has(l1.name) || self.exists_one(l2, has(l2.name) && l1.name == l2.name))",
        |v| {
            unique(
                v,
                |e| Some(e.contains_key("name")),
                |e| Some(vec![string(e, "name")?]),
            )
        },
    ),
    (
        "self.all(l1, self.exists_one(l2, l1.port == l2.port && l1.protocol == l2.protocol && (has(l1.hostname) && has(l2.hostname) ? l1.hostname == l2.hostname : !has(l1.hostname) && !has(l2.hostname))))",
        |v| unique(v, |_| Some(true), listener_key),
    ),
    (
        "self.all(l1, !has(l1.port) || self.exists_one(l2, has(l2.port) && l1.port == l2.port && l1.protocol == l2.protocol && (has(l1.hostname) && has(l2.hostname) ? l1.hostname == l2.hostname : !has(l1.hostname) && !has(l2.hostname))))",
        |v| unique(v, |e| Some(e.contains_key("port")), listener_key),
    ),
    (
        "self.all(a1, a1.type == 'IPAddress' && has(a1.value) ? self.exists_one(a2, a2.type == a1.type && has(a2.value) && a2.value == a1.value) : true )",
        |v| unique(v, |e| address_guard(e, "IPAddress"), address_key),
    ),
    (
        "self.all(a1, a1.type == 'Hostname'  && has(a1.value) ? self.exists_one(a2, a2.type == a1.type && has(a2.value) && a2.value == a1.value) : true )",
        |v| unique(v, |e| address_guard(e, "Hostname"), address_key),
    ),
    (
        "self.all(p1, self.exists_one(p2, p1.group == p2.group && p1.kind == p2.kind && p1.name == p2.name && (((!has(p1.__namespace__) || p1.__namespace__ == '') && (!has(p2.__namespace__) || p2.__namespace__ == '')) || (has(p1.__namespace__) && has(p2.__namespace__) && p1.__namespace__ == p2.__namespace__ )) && (((!has(p1.sectionName) || p1.sectionName == '') && (!has(p2.sectionName) || p2.sectionName == '')) || ( has(p1.sectionName) && has(p2.sectionName) && p1.sectionName == p2.sectionName)) && (((!has(p1.port) || p1.port == 0) && (!has(p2.port) || p2.port == 0)) || (has(p1.port) && has(p2.port) && p1.port == p2.port))))",
        |v| unique(v, |_| Some(true), parent_ref_key),
    ),
];

/// One part of an element's key.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Part<'a> {
    Absent,
    Str(&'a str),
    Int(i64),
}

/// Whether the guarded elements of list `v` have distinct keys; `None` when an element
/// does not fit the rule (then CEL decides).
fn unique<'a>(
    v: &'a Value,
    guard: impl Fn(&'a Map<String, Value>) -> Option<bool>,
    key: impl Fn(&'a Map<String, Value>) -> Option<Vec<Part<'a>>>,
) -> Option<bool> {
    let items = v.as_array()?;
    let mut seen = HashSet::with_capacity(items.len());
    let mut distinct = true;
    for item in items {
        let e = item.as_object()?;
        if guard(e)? {
            // Every key is computed (and checked) even after a duplicate: an element the
            // rule cannot evaluate makes CEL's answer an error, whatever else holds.
            distinct &= seen.insert(key(e)?);
        }
    }
    Some(distinct)
}

fn string<'a>(e: &'a Map<String, Value>, field: &str) -> Option<Part<'a>> {
    e.get(field)?.as_str().map(Part::Str)
}

fn int<'a>(e: &'a Map<String, Value>, field: &str) -> Option<Part<'a>> {
    e.get(field)?.as_i64().map(Part::Int)
}

/// A field that may be absent: `Absent`, or its value (string or integer).
fn optional<'a>(e: &'a Map<String, Value>, field: &str) -> Option<Part<'a>> {
    match e.get(field) {
        None => Some(Part::Absent),
        Some(Value::String(s)) => Some(Part::Str(s)),
        Some(v) => v.as_i64().map(Part::Int),
    }
}

/// (port, protocol, hostname or absent).
fn listener_key(e: &Map<String, Value>) -> Option<Vec<Part<'_>>> {
    Some(vec![
        int(e, "port")?,
        string(e, "protocol")?,
        match e.get("hostname") {
            None => Part::Absent,
            Some(h) => Part::Str(h.as_str()?),
        },
    ])
}

/// `a.type == T && has(a.value)`.
fn address_guard(e: &Map<String, Value>, ty: &str) -> Option<bool> {
    Some(e.get("type")?.as_str()? == ty && e.contains_key("value"))
}

/// (type, value) of an address the guard admitted.
fn address_key(e: &Map<String, Value>) -> Option<Vec<Part<'_>>> {
    Some(vec![string(e, "type")?, string(e, "value")?])
}

/// (group, kind, name, namespace, sectionName, port), an empty namespace or section and
/// port 0 being the same as none.
fn parent_ref_key(e: &Map<String, Value>) -> Option<Vec<Part<'_>>> {
    fn empty_is_absent(p: Part<'_>) -> Part<'_> {
        match p {
            Part::Str("") | Part::Int(0) => Part::Absent,
            p => p,
        }
    }
    let typed = |field: &str, int: bool| -> Option<Part<'_>> {
        let p = optional(e, field)?;
        match (&p, int) {
            (Part::Absent, _) | (Part::Int(_), true) | (Part::Str(_), false) => {
                Some(empty_is_absent(p))
            }
            _ => None,
        }
    };
    Some(vec![
        string(e, "group")?,
        string(e, "kind")?,
        string(e, "name")?,
        typed("namespace", false)?,
        typed("sectionName", false)?,
        typed("port", true)?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::{Rule, with_self};
    use serde_json::json;

    /// A small deterministic generator (no dependency for one test).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    /// A random element: each field absent or one of a few values (sometimes of the wrong
    /// type), so that duplicates, guards and unevaluable elements all occur.
    fn element(r: &mut Lcg) -> Value {
        let mut m = Map::new();
        let mut field = |name: &str, values: &[Value]| {
            let i = r.next(values.len() as u64 + 1) as usize;
            if i < values.len() {
                m.insert(name.to_owned(), values[i].clone());
            }
        };
        let s = |v: &[&str]| v.iter().map(|x| json!(x)).collect::<Vec<_>>();
        field("name", &[s(&["a", "b"]), vec![json!(1)]].concat());
        field("port", &[json!(80), json!(443), json!(0), json!("80")]);
        field("protocol", &s(&["HTTP", "HTTPS"]));
        field("hostname", &s(&["x.test", "", "y.test"]));
        field("type", &s(&["IPAddress", "Hostname", "IPAddress"]));
        field("value", &s(&["10.0.0.1", "a.test"]));
        field("group", &s(&["gateway.networking.k8s.io", ""]));
        field("kind", &s(&["Gateway", "Gateway"]));
        field("namespace", &s(&["", "ns"]));
        field("sectionName", &s(&["", "http"]));
        if r.next(8) == 0 {
            return json!("not an object");
        }
        Value::Object(m)
    }

    #[test]
    fn native_rules_agree_with_cel() {
        let mut r = Lcg(7);
        for (text, f) in RULES {
            let rule = Rule::compile(text, None, None)
                .expect("compiles")
                .expect("not a transition rule");
            let (mut native_answers, mut agreed, mut refused) = (0, 0, 0);
            for _ in 0..3000 {
                let n = r.next(6) as usize;
                // Some elements repeat an earlier one, so that duplicates are common.
                let mut items: Vec<Value> = Vec::with_capacity(n);
                for _ in 0..n {
                    let e = if !items.is_empty() && r.next(3) == 0 {
                        items[r.next(items.len() as u64) as usize].clone()
                    } else {
                        element(&mut r)
                    };
                    items.push(e);
                }
                let list = Value::Array(items);
                let Some(fast) = f(&list) else {
                    continue;
                };
                native_answers += 1;
                let slow = with_self(&list, true, |ctx| rule.check(ctx));
                assert_eq!(Ok(fast), slow, "{text}\n{list}");
                agreed += 1;
                refused += usize::from(!fast);
            }
            // Many lists are answered natively, with both verdicts.
            assert!(
                native_answers > 300,
                "{text}: {native_answers} native answers"
            );
            assert!(
                refused > 0 && refused < native_answers,
                "{text}: {refused} of {native_answers} refused"
            );
            assert_eq!(agreed, native_answers);
        }
    }

    #[test]
    fn every_native_rule_is_a_rule_of_the_schemas() {
        fn rules(v: &Value, out: &mut HashSet<String>) {
            match v {
                Value::Object(m) => {
                    for r in m
                        .get("x-kubernetes-validations")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(t) = r.get("rule").and_then(Value::as_str) {
                            out.insert(t.trim().to_owned());
                        }
                    }
                    m.values().for_each(|v| rules(v, out));
                }
                Value::Array(a) => a.iter().for_each(|v| rules(v, out)),
                _ => {}
            }
        }
        let mut all = HashSet::new();
        rules(
            &serde_json::from_str(crate::GATEWAY_API).expect("schemas"),
            &mut all,
        );
        for (text, _) in RULES {
            assert!(all.contains(*text), "not in the schemas: {text}");
        }
        // And every uniqueness rule of the schemas has its native check.
        for t in &all {
            if t.starts_with("self.all(") && t.contains("self.exists_one(") {
                assert!(native(t).is_some(), "no native check: {t}");
            }
        }
    }

    #[test]
    fn known_rules_are_found_verbatim() {
        assert!(native("self.all(l1, self.exists_one(l2, l1.name == l2.name))").is_some());
        assert!(native("  self.all(l1, self.exists_one(l2, l1.name == l2.name))\n").is_some());
        assert!(native("self.all(l1, self.exists_one(l2, l1.name != l2.name))").is_none());
        let listeners = native("self.all(l1, self.exists_one(l2, l1.name == l2.name))").unwrap();
        assert_eq!(
            listeners(&json!([{"name": "a"}, {"name": "b"}])),
            Some(true)
        );
        assert_eq!(
            listeners(&json!([{"name": "a"}, {"name": "a"}])),
            Some(false)
        );
        assert_eq!(listeners(&json!([{"name": "a"}, {}])), None);
    }
}
