//! CEL rules (`x-kubernetes-validations`) as the API server evaluates them: the standard
//! library with the strings extension, plus Kubernetes' `isIP` and `duration`.
//!
//! A rule is compiled once, with its schema. Evaluating it turns the JSON value it guards
//! into a CEL value (property names that are CEL keywords, or hold `.`, `-`, `/` or `__`,
//! are escaped the Kubernetes way: `namespace` → `__namespace__`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::extractors::This;
use cel::objects::{Key, Map};
use cel::{Context, Env, Program, Value as CelValue};
use regex::Regex;
use serde_json::Value;

/// The environment rules compile against and run in.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    cel::extensions::strings(&mut env).expect("the strings extension registers once");
    Arc::new(env)
});

thread_local! {
    /// The functions rules call beyond the environment's, declared once per thread; each
    /// node's rules run in a child scope holding only `self`.
    static ROOT: Context<'static, 'static> = {
        let mut ctx = Context::with_env(Arc::clone(&ENV));
        ctx.add_function("isIP", is_ip)
            .expect("isIP is not a standard function");
        ctx.add_function("duration", duration)
            .expect("duration is not declared without chrono");
        ctx.add_function("matches", matches)
            .expect("matches is not declared without the regex feature");
        ctx
    };
}

/// Runs `f` in a context where `self` is `value` (converted once, for all the rules `f`
/// evaluates) and Kubernetes' functions are declared. `properties`: `value` is an object
/// with declared properties, whose names are escaped.
pub(crate) fn with_self<T>(
    value: &Value,
    properties: bool,
    f: impl FnOnce(&Context<'_, '_>) -> T,
) -> T {
    ROOT.with(|root| {
        let mut ctx = root.new_inner_scope();
        ctx.add_variable_from_value("self", to_cel(value, properties));
        f(&ctx)
    })
}

/// A compiled `x-kubernetes-validations` entry.
pub(crate) struct Rule {
    program: Program,
    /// The rule's text: the message when none is given.
    pub(crate) source: Box<str>,
    /// `message`, when given.
    pub(crate) message: Option<Box<str>>,
    /// `fieldPath`, relative to the value the rule guards (e.g. `.port`).
    pub(crate) field_path: Option<Box<str>>,
    /// The same check in Rust, for the uniqueness rules that CEL evaluates in n² steps.
    pub(crate) native: Option<crate::unique::Native>,
}

/// Why a rule could not be compiled.
#[derive(Debug, thiserror::Error)]
#[error("rule {rule:?}: {message}")]
pub struct InvalidRule {
    /// The rule.
    pub rule: String,
    /// The parser's complaint.
    pub message: String,
}

impl Rule {
    /// Compiles `rule`. `None` for a transition rule (one that reads `oldSelf`): standalone
    /// mode has no previous version to compare with, and the API server also skips such
    /// rules on create.
    pub(crate) fn compile(
        rule: &str,
        message: Option<&str>,
        field_path: Option<&str>,
    ) -> Result<Option<Rule>, InvalidRule> {
        let program = ENV.compile(rule).map_err(|e| InvalidRule {
            rule: rule.to_owned(),
            message: e.to_string(),
        })?;
        if program.references().has_variable("oldSelf") {
            return Ok(None);
        }
        Ok(Some(Rule {
            native: crate::unique::native(rule),
            program,
            source: rule.into(),
            message: message.map(Into::into),
            field_path: field_path.map(Into::into),
        }))
    }

    /// Evaluates the rule in `ctx` (from [`with_self`]): `Ok(true)` when it holds, the
    /// interpreter's error when it cannot be evaluated (which the API server reports as a
    /// failure too).
    pub(crate) fn check(&self, ctx: &Context<'_, '_>) -> Result<bool, String> {
        match self.program.execute(ctx) {
            Ok(CelValue::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("rule did not evaluate to a bool: {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The message the API server shows when the rule fails.
    pub(crate) fn message(&self) -> String {
        match &self.message {
            Some(m) => m.to_string(),
            None => format!("failed rule: {}", self.source),
        }
    }
}

/// Kubernetes' `isIP(string)`: an IPv4 or IPv6 address without a zone.
fn is_ip(s: Arc<String>) -> bool {
    s.parse::<std::net::IpAddr>().is_ok()
}

thread_local! {
    /// Compiled patterns of `matches()`, by pattern: rules use a handful of constant ones.
    static REGEXES: RefCell<HashMap<String, Regex>> = RefCell::new(HashMap::new());
}

/// Patterns kept at most; past it the cache starts over (only a rule building patterns
/// from data could get there).
const MAX_REGEXES: usize = 256;

/// CEL's `string.matches(pattern)` (RE2 syntax, unanchored), each pattern compiled once
/// per thread.
fn matches(This(s): This<Arc<String>>, pattern: Arc<String>) -> Result<bool, cel::ExecutionError> {
    REGEXES.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some(re) = cache.get(pattern.as_str()) {
            return Ok(re.is_match(&s));
        }
        let re =
            Regex::new(&pattern).map_err(|e| cel::ExecutionError::function_error("matches", e))?;
        let hit = re.is_match(&s);
        if cache.len() >= MAX_REGEXES {
            cache.clear();
        }
        cache.insert(pattern.to_string(), re);
        Ok(hit)
    })
}

/// Kubernetes' `duration(string)` (Go duration syntax: `1h30m`, `500ms`, `-1.5s`), as
/// nanoseconds: rules only compare durations with each other, which integers do exactly.
fn duration(s: Arc<String>) -> Result<i64, cel::ExecutionError> {
    parse_go_duration(&s).ok_or_else(|| {
        cel::ExecutionError::function_error("duration", format!("invalid duration {s:?}"))
    })
}

/// Parses Go's `time.ParseDuration` syntax into nanoseconds.
pub(crate) fn parse_go_duration(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..num_end];
        if number.is_empty() || number == "." {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total += value * scale;
    }
    if total > i64::MAX as f64 {
        return None;
    }
    let ns = total.round() as i64;
    Some(if neg { -ns } else { ns })
}

/// Kubernetes' escaping of a property name for CEL: names that are CEL keywords get
/// `__…__`; `__`, `.`, `-` and `/` are spelled out.
pub(crate) fn escape_property(name: &str) -> String {
    const RESERVED: [&str; 20] = [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
    ];
    if RESERVED.contains(&name) || name == "while" {
        return format!("__{name}__");
    }
    if !name.contains(['.', '-', '/']) && !name.contains("__") {
        return name.to_owned();
    }
    name.replace("__", "__underscores__")
        .replace('.', "__dot__")
        .replace('-', "__dash__")
        .replace('/', "__slash__")
}

/// A JSON value as CEL sees it. `properties`: the value is an object with declared
/// properties (its keys are escaped), not a map with free-form keys.
fn to_cel(value: &Value, properties: bool) -> CelValue {
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => CelValue::Int(i),
            (None, Some(u)) => CelValue::UInt(u),
            _ => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Array(items) => {
            CelValue::List(Arc::new(items.iter().map(|v| to_cel(v, true)).collect()))
        }
        Value::Object(map) => {
            let mut out = HashMap::with_capacity(map.len());
            for (k, v) in map {
                let key = if properties {
                    escape_property(k)
                } else {
                    k.clone()
                };
                out.insert(Key::String(Arc::new(key)), to_cel(v, true));
            }
            CelValue::Map(Map { map: Arc::new(out) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(rule: &str, value: Value) -> Result<bool, String> {
        let rule = Rule::compile(rule, None, None)
            .unwrap()
            .expect("not a transition rule");
        with_self(&value, true, |ctx| rule.check(ctx))
    }

    #[test]
    fn kubernetes_functions() {
        assert_eq!(
            eval("self.all(h, !isIP(h))", json!(["a.test", "b.test"])),
            Ok(true)
        );
        assert_eq!(
            eval("self.all(h, !isIP(h))", json!(["a.test", "10.0.0.1"])),
            Ok(false)
        );
        assert_eq!(eval("isIP(self)", json!("fe80::1")), Ok(true));
        assert_eq!(eval("isIP(self)", json!("010.0.0.1")), Ok(false));
        assert_eq!(eval("isIP(self)", json!("fe80::1%eth0")), Ok(false));
        let timeouts = "!(has(self.request) && has(self.backendRequest) && duration(self.request) != duration('0s') && duration(self.backendRequest) > duration(self.request))";
        assert_eq!(
            eval(
                timeouts,
                json!({"request": "1s", "backendRequest": "1500ms"})
            ),
            Ok(false)
        );
        assert_eq!(
            eval(
                timeouts,
                json!({"request": "1m", "backendRequest": "59.5s"})
            ),
            Ok(true)
        );
        assert_eq!(
            eval(timeouts, json!({"request": "0s", "backendRequest": "1h"})),
            Ok(true)
        );
        assert!(eval("duration(self) > duration('1s')", json!("5 parsecs")).is_err());
    }

    #[test]
    fn standard_macros_and_string_functions() {
        let rules = [
            (
                "self.filter(f, f.type == 'CORS').size() <= 1",
                json!([{"type": "CORS"}, {"type": "CORS"}]),
                false,
            ),
            (
                "self.exists(f, f == 'a') && self.exists_one(f, f == 'b')",
                json!(["a", "b"]),
                true,
            ),
            (
                "self.all(k, k.split('/')[0].size() < 5)",
                json!({"abc/d": "x", "abcdef": "y"}),
                false,
            ),
            (
                "self.startsWith('*.') && self.substring(2).matches('^[a-z.]+$')",
                json!("*.a.test"),
                true,
            ),
            (
                "self.endsWith('.cluster.local') || self.contains('//')",
                json!("/a//b"),
                true,
            ),
            (
                "size(self.group) == 0 && !has(self.port)",
                json!({"group": "", "kind": "Service"}),
                true,
            ),
            ("'*' in self && self.size() > 1", json!(["*", "x"]), true),
            (
                "self.value.matches(r\"\"\"^(\\*\\.)?[a-z0-9]+$\"\"\")",
                json!({"value": "*.ab"}),
                true,
            ),
        ];
        for (rule, value, want) in rules {
            assert_eq!(eval(rule, value), Ok(want), "{rule}");
        }
    }

    #[test]
    fn multi_line_rules_and_escaped_properties() {
        let rule = "self.all(p1, self.exists_one(p2,\n  (has(p1.__namespace__) && has(p2.__namespace__)\n   ? p1.__namespace__ == p2.__namespace__ : true) && p1.name == p2.name))";
        assert_eq!(
            eval(
                rule,
                json!([{"name": "a", "namespace": "x"}, {"name": "a", "namespace": "y"}])
            ),
            Ok(true)
        );
        assert_eq!(
            eval(
                rule,
                json!([{"name": "a", "namespace": "x"}, {"name": "a", "namespace": "x"}])
            ),
            Ok(false)
        );
        assert_eq!(
            escape_property("a.b-c/d__e"),
            "a__dot__b__dash__c__slash__d__underscores__e"
        );
        assert_eq!(escape_property("while"), "__while__");
    }

    #[test]
    fn missing_fields_are_errors_and_transition_rules_are_skipped() {
        assert!(eval("self.mode == 'Terminate'", json!({})).is_err());
        assert!(
            Rule::compile("self == oldSelf", None, None)
                .unwrap()
                .is_none()
        );
        assert!(Rule::compile("self.all(", None, None).is_err());
        // An invalid pattern is an evaluation error, every time (it is not cached).
        for _ in 0..2 {
            assert!(eval("self.matches('[')", json!("a")).is_err());
        }
        assert_eq!(
            eval("self.matches('^a+$') && !self.matches('b')", json!("aa")),
            Ok(true)
        );
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("1h30m"), Some(5_400_000_000_000));
        assert_eq!(parse_go_duration("-1.5s"), Some(-1_500_000_000));
        assert_eq!(parse_go_duration("250us"), Some(250_000));
        assert_eq!(parse_go_duration("0"), Some(0));
        for bad in ["", "5", "1d", "s", "1..5s"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }
}
