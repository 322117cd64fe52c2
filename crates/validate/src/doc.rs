//! [`Doc`]: what the core-kind validators read of a document, so that a reader with its
//! own document tree (the file provider's YAML scanner) can ask for the verdict of the
//! very same rules without building a `serde_json::Value` first.

use serde_json::Value;

/// A JSON-shaped document as the core-kind validators read it. Implemented by
/// `serde_json::Value`; another tree must answer every method as the `Value` it would
/// convert to does.
pub trait Doc: Sized {
    /// The value of `key` when this is a mapping holding it.
    fn get(&self, key: &str) -> Option<&Self>;
    /// The text when this is a string.
    fn as_str(&self) -> Option<&str>;
    /// The number when this is an integer that fits an `i64`.
    fn as_i64(&self) -> Option<i64>;
    /// The items when this is a sequence.
    fn as_array(&self) -> Option<&[Self]>;
    /// The entries when this is a mapping, in any order.
    fn entries(&self) -> Option<impl Iterator<Item = (&str, &Self)>>;
    /// Whether this is a string.
    fn is_string(&self) -> bool {
        self.as_str().is_some()
    }
    /// The value as JSON text (quoted in error messages).
    fn to_json(&self) -> String;
}

impl Doc for Value {
    fn get(&self, key: &str) -> Option<&Self> {
        Value::get(self, key)
    }

    fn as_str(&self) -> Option<&str> {
        Value::as_str(self)
    }

    fn as_i64(&self) -> Option<i64> {
        Value::as_i64(self)
    }

    fn as_array(&self) -> Option<&[Self]> {
        Value::as_array(self).map(Vec::as_slice)
    }

    fn entries(&self) -> Option<impl Iterator<Item = (&str, &Self)>> {
        Value::as_object(self).map(|m| m.iter().map(|(k, v)| (k.as_str(), v)))
    }

    fn to_json(&self) -> String {
        self.to_string()
    }
}
