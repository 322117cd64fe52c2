//! Per-Gateway, per-route and per-rule settings of the access log and of traces (a
//! `TrafficPolicy`'s `accessLog` and `tracing`; push protocol version 5). They narrow or
//! widen what the process flags set for the requests they cover; without them, the flags
//! alone decide.

use serde::Serialize;

/// The access-log field names, in record order. A field set is a bit mask over this
/// list ([`AccessLogPolicy::fields`]); the data plane's writer names its fields alike.
pub const ACCESS_LOG_FIELDS: [&str; 21] = [
    "time",
    "method",
    "host",
    "path",
    "status",
    "duration_ms",
    "route",
    "listener",
    "client",
    "request_id",
    "upstream",
    "attempts",
    "fault",
    "decision",
    "policy",
    "check",
    "reason",
    "checks",
    "identity",
    "rate_limit",
    "trace_id",
];

/// A name that is not one of [`ACCESS_LOG_FIELDS`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidAccessLogField(pub String);

impl std::error::Error for InvalidAccessLogField {}

impl std::fmt::Display for InvalidAccessLogField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown access-log field {:?} (known: all, {})",
            self.0,
            ACCESS_LOG_FIELDS.join(", ")
        )
    }
}

/// The bit mask of a list of field names; `all` stands for every field.
pub fn access_log_field_bits<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<u32, InvalidAccessLogField> {
    let mut bits = 0u32;
    for name in names {
        if name == "all" {
            bits |= (1 << ACCESS_LOG_FIELDS.len()) - 1;
            continue;
        }
        let i = ACCESS_LOG_FIELDS
            .iter()
            .position(|f| *f == name)
            .ok_or_else(|| InvalidAccessLogField(name.to_owned()))?;
        bits |= 1 << i;
    }
    Ok(bits)
}

/// The names of the fields of a bit mask, in record order.
pub fn access_log_field_names(bits: u32) -> impl Iterator<Item = &'static str> {
    ACCESS_LOG_FIELDS
        .iter()
        .enumerate()
        .filter(move |(i, _)| bits & (1 << i) != 0)
        .map(|(_, n)| *n)
}

/// What the access log does with the requests a policy covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct AccessLogPolicy {
    /// No record for these requests.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    /// The fields of their records (a bit mask over [`ACCESS_LOG_FIELDS`], never 0);
    /// `None`: the process's `--access-log-fields`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_fields"
    )]
    pub fields: Option<u32>,
    /// Only the requests answered with a status of 400 or more are logged.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub errors_only: bool,
}

fn serialize_fields<S: serde::Serializer>(bits: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
    let names: Vec<&str> = bits
        .map(access_log_field_names)
        .into_iter()
        .flatten()
        .collect();
    s.collect_seq(names)
}

/// Parts per million, the unit of [`TracingPolicy::sampling`].
pub const SAMPLING_SCALE: u32 = 1_000_000;

/// Whether and how much the requests a policy covers are traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct TracingPolicy {
    /// No spans for these requests, whatever the caller's `traceparent` says (the
    /// upstream still receives one, flagged unsampled).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    /// The share of the traces weir starts for these requests that are sampled, in parts
    /// per million (0 to [`SAMPLING_SCALE`]); `None`: the process's
    /// `--trace-sampling-ratio`. A caller's decision is still followed when the data plane
    /// is parent-based.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_and_bits_round_trip() {
        let bits = access_log_field_bits(["status", "time", "trace_id"]).unwrap();
        assert_eq!(
            access_log_field_names(bits).collect::<Vec<_>>(),
            ["time", "status", "trace_id"]
        );
        assert_eq!(
            access_log_field_names(access_log_field_bits(["all"]).unwrap()).count(),
            ACCESS_LOG_FIELDS.len()
        );
        assert_eq!(
            access_log_field_bits(["status", "nope"]),
            Err(InvalidAccessLogField("nope".into()))
        );
    }
}
