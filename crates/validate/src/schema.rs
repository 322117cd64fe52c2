//! Structural OpenAPI v3 schemas of CRDs, compiled once, and the API server's treatment of
//! an object under one: unknown fields pruned, defaults applied, then every keyword and
//! CEL rule checked, with all errors collected.

use regex::Regex;
use serde_json::{Map, Value};

use crate::cel::{InvalidRule, Rule, with_self};
use crate::error::{ErrorType, FieldError, Path, quote};

/// Why a schema could not be compiled (a bug in the generated file, never user input).
#[derive(Debug, thiserror::Error)]
pub enum InvalidSchema {
    /// A `pattern` the `regex` crate does not accept.
    #[error("pattern {0:?}: {1}")]
    Pattern(String, regex::Error),
    /// A CEL rule that does not parse.
    #[error(transparent)]
    Rule(#[from] InvalidRule),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Type {
    fn name(self) -> &'static str {
        match self {
            Type::Object => "object",
            Type::Array => "array",
            Type::String => "string",
            Type::Integer => "integer",
            Type::Number => "number",
            Type::Boolean => "boolean",
        }
    }

    fn admits(self, v: &Value) -> bool {
        match self {
            Type::Object => v.is_object(),
            Type::Array => v.is_array(),
            Type::String => v.is_string(),
            Type::Integer => v.is_i64() || v.is_u64(),
            Type::Number => v.is_number(),
            Type::Boolean => v.is_boolean(),
        }
    }
}

/// The type name of a value, as the API server shows it in `Invalid value: "object"`.
fn value_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

enum ListType {
    Atomic,
    Set,
    Map(Vec<Box<str>>),
}

#[derive(Clone, Copy)]
enum Format {
    Ipv4,
    Ipv6,
}

/// One compiled schema node.
pub(crate) struct Schema {
    ty: Option<Type>,
    nullable: bool,
    int_or_string: bool,
    /// Keep fields the schema does not declare.
    preserve_unknown: bool,
    /// Declared properties, sorted by name.
    properties: Vec<(Box<str>, Schema)>,
    /// `true` for objects with declared properties: their keys are escaped for CEL.
    has_properties: bool,
    required: Vec<Box<str>>,
    items: Option<Box<Schema>>,
    additional: Option<Box<Schema>>,
    enumeration: Vec<Value>,
    min_items: Option<usize>,
    max_items: Option<usize>,
    min_length: Option<usize>,
    max_length: Option<usize>,
    min_properties: Option<usize>,
    max_properties: Option<usize>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    exclusive_minimum: bool,
    exclusive_maximum: bool,
    pattern: Option<Regex>,
    format: Option<Format>,
    list_type: ListType,
    default: Option<Value>,
    rules: Vec<Rule>,
    one_of: Vec<Schema>,
    any_of: Vec<Schema>,
    not: Option<Box<Schema>>,
}

fn usize_of(map: &Map<String, Value>, key: &str) -> Option<usize> {
    map.get(key).and_then(Value::as_u64).map(|n| n as usize)
}

impl Schema {
    /// Compiles a schema (regular expressions and CEL programs included).
    pub(crate) fn compile(v: &Value) -> Result<Schema, InvalidSchema> {
        let empty = Map::new();
        let m = v.as_object().unwrap_or(&empty);
        let ty = match m.get("type").and_then(Value::as_str) {
            Some("object") => Some(Type::Object),
            Some("array") => Some(Type::Array),
            Some("string") => Some(Type::String),
            Some("integer") => Some(Type::Integer),
            Some("number") => Some(Type::Number),
            Some("boolean") => Some(Type::Boolean),
            _ => None,
        };
        let flag = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
        let mut properties: Vec<(Box<str>, Schema)> = Vec::new();
        if let Some(Value::Object(props)) = m.get("properties") {
            for (name, s) in props {
                properties.push((name.as_str().into(), Schema::compile(s)?));
            }
            properties.sort_by(|a, b| a.0.cmp(&b.0));
        }
        let list = |k: &str| -> Result<Vec<Schema>, InvalidSchema> {
            m.get(k)
                .and_then(Value::as_array)
                .map(|l| l.iter().map(Schema::compile).collect())
                .unwrap_or(Ok(Vec::new()))
        };
        let sub = |k: &str| -> Result<Option<Box<Schema>>, InvalidSchema> {
            match m.get(k) {
                Some(s @ Value::Object(_)) => Ok(Some(Box::new(Schema::compile(s)?))),
                _ => Ok(None),
            }
        };
        let pattern = match m.get("pattern").and_then(Value::as_str) {
            Some(p) => Some(Regex::new(p).map_err(|e| InvalidSchema::Pattern(p.to_owned(), e))?),
            None => None,
        };
        let list_type = match m.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListType::Set,
            Some("map") => ListType::Map(
                m.get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|keys| {
                        keys.iter()
                            .filter_map(Value::as_str)
                            .map(Into::into)
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            _ => ListType::Atomic,
        };
        let mut rules = Vec::new();
        for r in m
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let text = |k: &str| r.get(k).and_then(Value::as_str);
            if let Some(rule) = Rule::compile(
                text("rule").unwrap_or("true"),
                text("message"),
                text("fieldPath"),
            )? {
                rules.push(rule);
            }
        }
        Ok(Schema {
            ty,
            nullable: flag("nullable"),
            int_or_string: flag("x-kubernetes-int-or-string"),
            preserve_unknown: flag("x-kubernetes-preserve-unknown-fields"),
            has_properties: !properties.is_empty(),
            properties,
            required: m
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).map(Into::into).collect())
                .unwrap_or_default(),
            items: sub("items")?,
            additional: sub("additionalProperties")?,
            enumeration: m
                .get("enum")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            min_items: usize_of(m, "minItems"),
            max_items: usize_of(m, "maxItems"),
            min_length: usize_of(m, "minLength"),
            max_length: usize_of(m, "maxLength"),
            min_properties: usize_of(m, "minProperties"),
            max_properties: usize_of(m, "maxProperties"),
            minimum: m.get("minimum").and_then(Value::as_f64),
            maximum: m.get("maximum").and_then(Value::as_f64),
            exclusive_minimum: flag("exclusiveMinimum"),
            exclusive_maximum: flag("exclusiveMaximum"),
            pattern,
            format: match m.get("format").and_then(Value::as_str) {
                Some("ipv4") => Some(Format::Ipv4),
                Some("ipv6") => Some(Format::Ipv6),
                _ => None,
            },
            list_type,
            default: m.get("default").cloned(),
            rules,
            one_of: list("oneOf")?,
            any_of: list("anyOf")?,
            not: sub("not")?,
        })
    }

    fn property(&self, name: &str) -> Option<&Schema> {
        self.properties
            .binary_search_by(|(n, _)| (**n).cmp(name))
            .ok()
            .map(|i| &self.properties[i].1)
    }

    /// Prunes unknown fields, applies defaults, and checks `value` and everything under
    /// it, children first (a rule sees its children's defaults), appending every problem.
    pub(crate) fn apply(&self, value: &mut Value, path: &mut Path, errs: &mut Vec<FieldError>) {
        match value {
            Value::Object(map) => {
                if self.has_properties || self.additional.is_none() && !self.preserve_unknown {
                    self.prune_and_default(map);
                }
                for (name, child) in map.iter_mut() {
                    let schema = match (self.property(name), &self.additional) {
                        (Some(s), _) => s,
                        (None, Some(a)) => a,
                        (None, None) => continue,
                    };
                    let at = if self.has_properties {
                        path.field(name)
                    } else {
                        path.key(name)
                    };
                    schema.apply(child, path, errs);
                    path.restore(at);
                }
            }
            Value::Array(items) => {
                if let Some(schema) = &self.items {
                    for (i, item) in items.iter_mut().enumerate() {
                        let at = path.index(i);
                        schema.apply(item, path, errs);
                        path.restore(at);
                    }
                }
            }
            _ => {}
        }
        self.check_node(value, path, errs);
    }

    /// Drops undeclared fields (unless kept) and `null`s of non-nullable fields, then sets
    /// the default of every absent property that has one.
    fn prune_and_default(&self, map: &mut Map<String, Value>) {
        map.retain(|name, v| match self.property(name) {
            Some(s) => !v.is_null() || s.nullable,
            None => self.additional.is_some() || self.preserve_unknown,
        });
        for (name, s) in &self.properties {
            if let Some(d) = &s.default
                && !map.contains_key(&**name)
            {
                map.insert(name.to_string(), d.clone());
            }
        }
    }

    /// This node's own keywords and rules (not its children's).
    fn check_node(&self, value: &Value, path: &Path, errs: &mut Vec<FieldError>) {
        let field = path.as_str();
        if value.is_null() {
            if !self.nullable && self.ty.is_some() {
                errs.push(FieldError::invalid(
                    field,
                    "null",
                    format!("must be of type {}", self.ty.map_or("", Type::name)),
                ));
            }
            return;
        }
        if let Some(ty) = self.ty
            && !ty.admits(value)
            && !(self.int_or_string && (value.is_string() || Type::Integer.admits(value)))
        {
            errs.push(FieldError {
                field: field.to_owned(),
                kind: ErrorType::Invalid(quote(value_type(value))),
                detail: format!("must be of type {}", ty.name()),
            });
            return;
        }
        self.check_keywords(value, field, errs);
        if self.rules.is_empty() {
            return;
        }
        // Rules with a native check first; the value is converted for CEL only when a
        // rule needs it.
        let mut verdicts: Vec<Option<Result<bool, String>>> = self
            .rules
            .iter()
            .map(|r| r.native.and_then(|f| f(value)).map(Ok))
            .collect();
        if verdicts.iter().any(Option::is_none) {
            with_self(value, self.has_properties, |ctx| {
                for (rule, verdict) in self.rules.iter().zip(&mut verdicts) {
                    if verdict.is_none() {
                        *verdict = Some(rule.check(ctx));
                    }
                }
            });
        }
        {
            for (rule, verdict) in self.rules.iter().zip(verdicts) {
                match verdict.unwrap_or(Ok(true)) {
                    Ok(true) => {}
                    Ok(false) => errs.push(FieldError {
                        field: rule
                            .field_path
                            .as_deref()
                            .map_or_else(|| field.to_owned(), |p| path.join(p)),
                        kind: ErrorType::Invalid(quote(value_type(value))),
                        detail: rule.message(),
                    }),
                    Err(e) => errs.push(FieldError::invalid(
                        field,
                        value_type(value),
                        format!("rule {:?} could not be evaluated: {e}", &*rule.source),
                    )),
                }
            }
        }
    }

    fn check_keywords(&self, value: &Value, field: &str, errs: &mut Vec<FieldError>) {
        if !self.enumeration.is_empty() && !self.enumeration.contains(value) {
            let supported: Vec<String> = self.enumeration.iter().map(Value::to_string).collect();
            errs.push(FieldError {
                field: field.to_owned(),
                kind: ErrorType::Unsupported(value.to_string()),
                detail: format!("supported values: {}", supported.join(", ")),
            });
        }
        match value {
            Value::String(s) => self.check_string(s, field, errs),
            Value::Number(n) => {
                let x = n.as_f64().unwrap_or(f64::NAN);
                let shown = n.to_string();
                if let Some(min) = self.minimum
                    && (x < min || self.exclusive_minimum && x == min)
                {
                    let rel = if self.exclusive_minimum {
                        "greater than"
                    } else {
                        "greater than or equal to"
                    };
                    errs.push(FieldError {
                        field: field.to_owned(),
                        kind: ErrorType::Invalid(shown.clone()),
                        detail: format!("should be {rel} {min}"),
                    });
                }
                if let Some(max) = self.maximum
                    && (x > max || self.exclusive_maximum && x == max)
                {
                    let rel = if self.exclusive_maximum {
                        "less than"
                    } else {
                        "less than or equal to"
                    };
                    errs.push(FieldError {
                        field: field.to_owned(),
                        kind: ErrorType::Invalid(shown),
                        detail: format!("should be {rel} {max}"),
                    });
                }
            }
            Value::Array(items) => self.check_array(items, field, errs),
            Value::Object(map) => {
                for name in &self.required {
                    if !map.contains_key(&**name) {
                        let at = if field.is_empty() {
                            name.to_string()
                        } else {
                            format!("{field}.{name}")
                        };
                        errs.push(FieldError::required(&at, ""));
                    }
                }
                if let Some(max) = self.max_properties
                    && map.len() > max
                {
                    errs.push(FieldError {
                        field: field.to_owned(),
                        kind: ErrorType::TooMany(map.len()),
                        detail: format!("must have at most {max} items"),
                    });
                }
                if let Some(min) = self.min_properties
                    && map.len() < min
                {
                    errs.push(FieldError::invalid(
                        field,
                        "object",
                        format!("should have at least {min} properties"),
                    ));
                }
            }
            _ => {}
        }
        let mut scratch = Vec::new();
        if !self.one_of.is_empty() {
            let n = self
                .one_of
                .iter()
                .filter(|s| s.conforms(value, &mut scratch))
                .count();
            if n != 1 {
                errs.push(FieldError::invalid(
                    field,
                    value_type(value),
                    "must validate one and only one schema (oneOf)",
                ));
            }
        }
        if !self.any_of.is_empty() && !self.any_of.iter().any(|s| s.conforms(value, &mut scratch)) {
            errs.push(FieldError::invalid(
                field,
                value_type(value),
                "must validate at least one schema (anyOf)",
            ));
        }
        if let Some(not) = &self.not
            && not.conforms(value, &mut scratch)
        {
            errs.push(FieldError::invalid(
                field,
                value_type(value),
                "must not validate the schema (not)",
            ));
        }
    }

    fn check_string(&self, s: &str, field: &str, errs: &mut Vec<FieldError>) {
        // Lengths count characters, not bytes; counting is needed only near a bound.
        let chars = || s.chars().count();
        if let Some(max) = self.max_length
            && s.len() > max
            && chars() > max
        {
            errs.push(FieldError {
                field: field.to_owned(),
                kind: ErrorType::TooLong,
                detail: format!("may not be more than {max} bytes"),
            });
        }
        if let Some(min) = self.min_length
            && (s.len() < min || chars() < min)
        {
            errs.push(FieldError::invalid(
                field,
                s,
                format!("should be at least {min} chars long"),
            ));
        }
        if let Some(re) = &self.pattern
            && !re.is_match(s)
        {
            errs.push(FieldError::invalid(
                field,
                s,
                format!("should match '{}'", re.as_str()),
            ));
        }
        let format_ok = match self.format {
            Some(Format::Ipv4) => s.parse::<std::net::Ipv4Addr>().is_ok(),
            Some(Format::Ipv6) => s.parse::<std::net::Ipv6Addr>().is_ok(),
            None => true,
        };
        if !format_ok {
            errs.push(FieldError::invalid(field, s, "must be a valid IP address"));
        }
    }

    fn check_array(&self, items: &[Value], field: &str, errs: &mut Vec<FieldError>) {
        if let Some(max) = self.max_items
            && items.len() > max
        {
            errs.push(FieldError {
                field: field.to_owned(),
                kind: ErrorType::TooMany(items.len()),
                detail: format!("must have at most {max} items"),
            });
        }
        if let Some(min) = self.min_items
            && items.len() < min
        {
            errs.push(FieldError::invalid(
                field,
                &items.len().to_string(),
                format!("should have at least {min} items"),
            ));
        }
        // Lists are short (CRDs bound them), so pairwise comparison is cheapest.
        let key = |v: &'_ Value, keys: &[Box<str>]| -> Vec<Value> {
            keys.iter()
                .map(|k| v.get(&**k).cloned().unwrap_or(Value::Null))
                .collect()
        };
        for (j, item) in items.iter().enumerate() {
            let duplicate = match &self.list_type {
                ListType::Atomic => None,
                ListType::Set => items[..j].contains(item).then(|| item.to_string()),
                ListType::Map(keys) => {
                    let k = key(item, keys);
                    items[..j]
                        .iter()
                        .any(|other| key(other, keys) == k)
                        .then(|| {
                            let shown: Map<String, Value> = keys
                                .iter()
                                .zip(k)
                                .map(|(name, v)| (name.to_string(), v))
                                .collect();
                            Value::Object(shown).to_string()
                        })
                }
            };
            if let Some(shown) = duplicate {
                errs.push(FieldError {
                    field: format!("{field}[{j}]"),
                    kind: ErrorType::Duplicate(shown),
                    detail: String::new(),
                });
            }
        }
    }

    /// Whether `value` satisfies this (value-validation) schema, without changing it: for
    /// `oneOf`, `anyOf` and `not`.
    fn conforms(&self, value: &Value, scratch: &mut Vec<FieldError>) -> bool {
        scratch.clear();
        let path = Path::default();
        self.check_node(value, &path, scratch);
        if !scratch.is_empty() {
            return false;
        }
        match value {
            Value::Object(map) => map.iter().all(|(name, child)| {
                self.property(name)
                    .is_none_or(|s| s.conforms(child, scratch))
            }),
            Value::Array(items) => match &self.items {
                Some(s) => items.iter().all(|i| s.conforms(i, scratch)),
                None => true,
            },
            _ => true,
        }
    }
}
