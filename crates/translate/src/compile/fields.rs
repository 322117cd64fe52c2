//! Field-level parsing shared by routes and Ingresses: matches, filters and
//! DirectResponse objects. Every error names its field.

use std::sync::Arc;

use weir_api::{HttpHeaderFilter, HttpPathMatch, HttpPathModifier, HttpRouteMatch};
use weir_model::{
    DirectResponse, HeaderMatch, HeaderModifier, HostMatch, PathMatch, PathRewrite, Pattern,
    QueryMatch, RequestMatch, StringMatch,
};

/// Whether `s` is a non-empty HTTP token (header name, method).
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Header names and values.
type HeaderList = Vec<(Arc<str>, Arc<str>)>;

/// Converts a DirectResponse object; the error lists its problems.
pub(crate) fn direct_response_of(
    d: &weir_api::DirectResponse,
) -> Result<DirectResponse, Vec<String>> {
    let mut problems = Vec::new();
    let status = d.spec.status.unwrap_or(200);
    if !(100..=599).contains(&status) {
        problems.push(format!("spec.status: {status} is not between 100 and 599"));
    }
    let mut headers = Vec::new();
    for (i, h) in d.spec.headers.iter().enumerate() {
        if is_token(&h.name) {
            headers.push((
                Arc::from(h.name.to_ascii_lowercase()),
                Arc::from(h.value.as_str()),
            ));
        } else {
            problems.push(format!(
                "spec.headers[{i}].name: {:?} is not a valid header name",
                h.name
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(DirectResponse {
        status: status as u16,
        headers,
        body: d.spec.body.as_deref().unwrap_or("").into(),
    })
}

pub(crate) fn compile_match(m: &HttpRouteMatch, field: &str) -> Result<RequestMatch, String> {
    let path = match &m.path {
        None => PathMatch::Prefix("/".into()),
        Some(p) => path_match(p, &format!("{field}.path"))?,
    };
    let mut headers: Vec<HeaderMatch> = Vec::new();
    for (i, h) in m.headers.iter().enumerate() {
        let fh = format!("{field}.headers[{i}]");
        if !is_token(&h.name) {
            return Err(format!(
                "{fh}.name: {:?} is not a valid header name",
                h.name
            ));
        }
        let name: Arc<str> = h.name.to_ascii_lowercase().into();
        let value = string_match(h.type_.as_deref(), &h.value, &fh)?;
        if !headers.iter().any(|x| x.name == name) {
            headers.push(HeaderMatch { name, value });
        }
    }
    let mut query: Vec<QueryMatch> = Vec::new();
    for (i, q) in m.query_params.iter().enumerate() {
        let fq = format!("{field}.queryParams[{i}]");
        if q.name.is_empty() {
            return Err(format!("{fq}.name: must not be empty"));
        }
        let value = string_match(q.type_.as_deref(), &q.value, &fq)?;
        if !query.iter().any(|x| *x.name == *q.name) {
            query.push(QueryMatch {
                name: q.name.as_str().into(),
                value,
            });
        }
    }
    let method = match &m.method {
        None => None,
        Some(x) if is_token(x) => Some(Arc::from(x.to_ascii_uppercase())),
        Some(x) => return Err(format!("{field}.method: {x:?} is not a valid HTTP method")),
    };
    Ok(RequestMatch {
        path,
        headers,
        query,
        method,
    })
}

/// A Gateway API path match (`field` names it in errors).
pub(crate) fn path_match(p: &HttpPathMatch, field: &str) -> Result<PathMatch, String> {
    let value = p.value.as_deref().unwrap_or("/");
    let t = p.type_.as_deref().unwrap_or("PathPrefix");
    Ok(match t {
        "Exact" | "PathPrefix" if !value.starts_with('/') => {
            return Err(format!("{field}.value: must start with \"/\""));
        }
        "Exact" => PathMatch::Exact(value.into()),
        "PathPrefix" => PathMatch::Prefix(normalize_prefix(value)),
        "RegularExpression" => PathMatch::Regex(
            Pattern::new(value).map_err(|e| format!("{field}.value: {}", regex_error(e)))?,
        ),
        other => return Err(format!("{field}.type: unsupported {other:?}")),
    })
}

pub(crate) fn regex_error(e: regex::Error) -> String {
    let text = e.to_string();
    let last = text.lines().last().unwrap_or("").trim();
    format!(
        "invalid regular expression: {}",
        last.strip_prefix("error: ").unwrap_or(last)
    )
}

pub(crate) fn string_match(
    t: Option<&str>,
    value: &str,
    field: &str,
) -> Result<StringMatch, String> {
    match t.unwrap_or("Exact") {
        "Exact" => Ok(StringMatch::Exact(value.into())),
        "RegularExpression" => Pattern::new(value)
            .map(StringMatch::Regex)
            .map_err(|e| format!("{field}.value: {}", regex_error(e))),
        other => Err(format!("{field}.type: unsupported {other:?}")),
    }
}

/// A path prefix without its trailing `/` (except the root).
pub(crate) fn normalize_prefix(p: &str) -> Arc<str> {
    let t = p.trim_end_matches('/');
    if t.is_empty() { "/".into() } else { t.into() }
}

pub(crate) fn exact_host(h: &str, field: &str) -> Result<Arc<str>, String> {
    match HostMatch::parse(Some(h)).as_ref().map(HostMatch::as_exact) {
        Ok(Some(e)) => Ok(e.clone()),
        _ => Err(format!("{field}: {h:?} is not a valid hostname")),
    }
}

pub(crate) fn path_modifier(
    p: &HttpPathModifier,
    all_prefix: bool,
    field: &str,
) -> Result<PathRewrite, String> {
    match p.type_.as_str() {
        "ReplaceFullPath" => {
            let v = p
                .replace_full_path
                .as_deref()
                .ok_or_else(|| format!("{field}.replaceFullPath: required for ReplaceFullPath"))?;
            if !v.starts_with('/') {
                return Err(format!("{field}.replaceFullPath: must start with \"/\""));
            }
            Ok(PathRewrite::Full(v.into()))
        }
        "ReplacePrefixMatch" => {
            let v = p.replace_prefix_match.as_deref().ok_or_else(|| {
                format!("{field}.replacePrefixMatch: required for ReplacePrefixMatch")
            })?;
            if !v.starts_with('/') {
                return Err(format!("{field}.replacePrefixMatch: must start with \"/\""));
            }
            if !all_prefix {
                return Err(format!(
                    "{field}: ReplacePrefixMatch needs every match of the rule to be a PathPrefix match"
                ));
            }
            Ok(PathRewrite::PrefixMatch(v.into()))
        }
        other => Err(format!("{field}.type: unsupported {other:?}")),
    }
}

pub(crate) fn header_modifier(h: &HttpHeaderFilter, field: &str) -> Result<HeaderModifier, String> {
    let pairs = |list: &[weir_api::HttpHeader], f: &str| -> Result<HeaderList, String> {
        list.iter()
            .enumerate()
            .map(|(i, x)| {
                if is_token(&x.name) {
                    Ok((
                        Arc::from(x.name.to_ascii_lowercase()),
                        Arc::from(x.value.as_str()),
                    ))
                } else {
                    Err(format!(
                        "{field}.{f}[{i}].name: {:?} is not a valid header name",
                        x.name
                    ))
                }
            })
            .collect()
    };
    let set = pairs(&h.set, "set")?;
    let add = pairs(&h.add, "add")?;
    let mut remove = Vec::new();
    for (i, r) in h.remove.iter().enumerate() {
        if !is_token(r) {
            return Err(format!(
                "{field}.remove[{i}]: {r:?} is not a valid header name"
            ));
        }
        remove.push(Arc::from(r.to_ascii_lowercase()));
    }
    Ok(HeaderModifier { set, add, remove })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(v: serde_json::Value) -> HttpRouteMatch {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn matches() {
        let r = compile_match(
            &m(serde_json::json!({
                "path": {"value": "/a/"}, "method": "get",
                "headers": [{"name": "X-A", "value": "1"}, {"name": "x-a", "value": "2"}]
            })),
            "f",
        )
        .unwrap();
        assert_eq!(r.path, PathMatch::Prefix("/a".into()));
        assert_eq!(r.method.as_deref(), Some("GET"));
        assert_eq!(r.headers.len(), 1);
        assert_eq!(&*r.headers[0].name, "x-a");
        assert_eq!(r.headers[0].value, StringMatch::Exact("1".into()));
        let e = compile_match(
            &m(serde_json::json!({"path": {"type": "Exact", "value": "x"}})),
            "f",
        )
        .unwrap_err();
        assert_eq!(e, "f.path.value: must start with \"/\"");
        let e = compile_match(&m(serde_json::json!({"headers": [{"name": "x", "type": "RegularExpression", "value": "("}]})), "f")
            .unwrap_err();
        assert!(
            e.starts_with("f.headers[0].value: invalid regular expression"),
            "{e}"
        );
    }

    #[test]
    fn prefixes() {
        assert_eq!(&*normalize_prefix("/"), "/");
        assert_eq!(&*normalize_prefix("///"), "/");
        assert_eq!(&*normalize_prefix("/a/b/"), "/a/b");
    }
}
