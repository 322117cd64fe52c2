//! [`Node`]: the scanner's document tree. It borrows what it can from the document text
//! (keys, plain scalars, quoted scalars without escapes) and keeps mappings as vectors,
//! so that a document read straight into a typed object (`crate::typed`) never builds a
//! `serde_json::Value`; every other document is converted to the `Value` the scanner
//! used to build ([`Node::into_value`]).

use std::borrow::Cow;

use serde_json::{Number, Value};

/// One node of a document, as [`into_value`](Node::into_value) turns it into a `Value`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Node<'a> {
    Null,
    Bool(bool),
    Int(Number),
    Str(Cow<'a, str>),
    Seq(Vec<Node<'a>>),
    /// Entries in document order; the keys are distinct (the scanner gives up on a
    /// duplicate).
    Map(Vec<(Cow<'a, str>, Node<'a>)>),
}

impl Node<'_> {
    /// The `Value` this node stands for.
    pub(crate) fn into_value(self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(b),
            Node::Int(n) => Value::Number(n),
            Node::Str(s) => Value::String(s.into_owned()),
            Node::Seq(items) => Value::Array(items.into_iter().map(Node::into_value).collect()),
            Node::Map(entries) => Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.into_owned(), v.into_value()))
                    .collect(),
            ),
        }
    }

    /// The value of `key` when this is a mapping holding it.
    pub(crate) fn get(&self, key: &str) -> Option<&Self> {
        match self {
            Node::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// Whether the keys of a mapping are distinct.
pub(super) fn distinct_keys(entries: &[(Cow<'_, str>, Node<'_>)]) -> bool {
    if entries.len() <= 8 {
        return entries
            .iter()
            .enumerate()
            .all(|(i, (k, _))| entries[..i].iter().all(|(other, _)| other != k));
    }
    let mut keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_ref()).collect();
    keys.sort_unstable();
    keys.windows(2).all(|w| w[0] != w[1])
}

impl weir_validate::Doc for Node<'_> {
    fn get(&self, key: &str) -> Option<&Self> {
        Node::get(self, key)
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    fn as_i64(&self) -> Option<i64> {
        match self {
            Node::Int(n) => n.as_i64(),
            _ => None,
        }
    }

    fn as_array(&self) -> Option<&[Self]> {
        match self {
            Node::Seq(items) => Some(items),
            _ => None,
        }
    }

    fn entries(&self) -> Option<impl Iterator<Item = (&str, &Self)>> {
        match self {
            Node::Map(entries) => Some(entries.iter().map(|(k, v)| (k.as_ref(), v))),
            _ => None,
        }
    }

    fn to_json(&self) -> String {
        self.clone().into_value().to_string()
    }
}
