//! Gateway API duration strings (`10s`, `500ms`, `1h30m`).

use std::time::Duration;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InvalidDuration {
    /// Not of the form `<digits><unit>` repeated 1 to 4 times.
    #[error(
        "{0:?} is not a duration (use 1 to 4 of <1-5 digits><h|m|s|ms>, e.g. \"1h30m\", \"500ms\")"
    )]
    Syntax(String),
}

/// Parses a Gateway API duration. `Ok(None)` for a zero duration (which disables the
/// timeout).
pub(crate) fn parse(s: &str) -> Result<Option<Duration>, InvalidDuration> {
    let bad = || InvalidDuration::Syntax(s.to_string());
    let mut rest = s.as_bytes();
    let mut total = Duration::ZERO;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || digits > 5 {
            return Err(bad());
        }
        let mut n: u64 = 0;
        for b in &rest[..digits] {
            n = n * 10 + u64::from(b - b'0');
        }
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with(b"ms") {
            (Duration::from_millis(n), 2)
        } else if rest.starts_with(b"h") {
            (Duration::from_secs(n * 3600), 1)
        } else if rest.starts_with(b"m") {
            (Duration::from_secs(n * 60), 1)
        } else if rest.starts_with(b"s") {
            (Duration::from_secs(n), 1)
        } else {
            return Err(bad());
        };
        rest = &rest[len..];
        total += unit;
        parts += 1;
    }
    if parts == 0 || parts > 4 {
        return Err(bad());
    }
    Ok((!total.is_zero()).then_some(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(parse("10s"), Ok(Some(Duration::from_secs(10))));
        assert_eq!(parse("500ms"), Ok(Some(Duration::from_millis(500))));
        assert_eq!(parse("1h30m"), Ok(Some(Duration::from_secs(5400))));
        assert_eq!(parse("0s"), Ok(None));
        assert!(parse("").is_err());
        assert!(parse("10").is_err());
        assert!(parse("1.5s").is_err());
        assert!(parse("1s1s1s1s1s").is_err());
        assert!(parse("123456s").is_err());
    }
}
