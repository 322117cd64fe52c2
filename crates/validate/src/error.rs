//! Field errors worded like the API server's (`field.Error`): a path, a type and a detail.

use std::fmt;

/// What kind of problem a [`FieldError`] is, with the API server's wording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorType {
    /// `Required value`.
    Required,
    /// `Invalid value: <value>`.
    Invalid(String),
    /// `Unsupported value: <value>`.
    Unsupported(String),
    /// `Duplicate value: <value>`.
    Duplicate(String),
    /// `Too many: <n>`.
    TooMany(usize),
    /// `Too long`.
    TooLong,
    /// `Forbidden`.
    Forbidden,
}

/// One problem of an object, at a field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field, as the API server spells it: `spec.rules[0].matches[0].path.value`.
    pub field: String,
    /// The kind of problem.
    pub kind: ErrorType,
    /// What the value should be.
    pub detail: String,
}

impl FieldError {
    /// An `Invalid value` error quoting `value`.
    pub fn invalid(field: &str, value: &str, detail: impl Into<String>) -> Self {
        FieldError {
            field: field.to_owned(),
            kind: ErrorType::Invalid(quote(value)),
            detail: detail.into(),
        }
    }

    /// A `Required value` error.
    pub fn required(field: &str, detail: impl Into<String>) -> Self {
        FieldError {
            field: field.to_owned(),
            kind: ErrorType::Required,
            detail: detail.into(),
        }
    }

    /// A `Forbidden` error.
    pub fn forbidden(field: &str, detail: impl Into<String>) -> Self {
        FieldError {
            field: field.to_owned(),
            kind: ErrorType::Forbidden,
            detail: detail.into(),
        }
    }
}

/// A string value as the API server quotes it.
pub(crate) fn quote(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = if self.field.is_empty() {
            "<root>"
        } else {
            &self.field
        };
        match &self.kind {
            ErrorType::Required => write!(f, "{field}: Required value")?,
            ErrorType::Invalid(v) => write!(f, "{field}: Invalid value: {v}")?,
            ErrorType::Unsupported(v) => write!(f, "{field}: Unsupported value: {v}")?,
            ErrorType::Duplicate(v) => write!(f, "{field}: Duplicate value: {v}")?,
            ErrorType::TooMany(n) => write!(f, "{field}: Too many: {n}")?,
            ErrorType::TooLong => write!(f, "{field}: Too long")?,
            ErrorType::Forbidden => write!(f, "{field}: Forbidden")?,
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// A field path built while walking an object: segments are pushed and popped in place.
#[derive(Default)]
pub(crate) struct Path(String);

impl Path {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// Appends `.name` (or `name` at the root); returns the length to restore.
    pub(crate) fn field(&mut self, name: &str) -> usize {
        let len = self.0.len();
        if !self.0.is_empty() {
            self.0.push('.');
        }
        self.0.push_str(name);
        len
    }

    /// Appends `[i]`; returns the length to restore.
    pub(crate) fn index(&mut self, i: usize) -> usize {
        use std::fmt::Write;
        let len = self.0.len();
        let _ = write!(self.0, "[{i}]");
        len
    }

    /// Appends `[key]`; returns the length to restore.
    pub(crate) fn key(&mut self, key: &str) -> usize {
        let len = self.0.len();
        self.0.push('[');
        self.0.push_str(key);
        self.0.push(']');
        len
    }

    pub(crate) fn restore(&mut self, len: usize) {
        self.0.truncate(len);
    }

    /// The path with `suffix` (a CEL `fieldPath` such as `.port`) appended.
    pub(crate) fn join(&self, suffix: &str) -> String {
        let suffix = suffix.strip_prefix('.').unwrap_or(suffix);
        if self.0.is_empty() {
            suffix.to_owned()
        } else if suffix.starts_with('[') {
            format!("{}{suffix}", self.0)
        } else {
            format!("{}.{suffix}", self.0)
        }
    }
}
