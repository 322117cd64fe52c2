//! ingress-nginx canary Ingresses (`nginx.ingress.kubernetes.io/canary: "true"`): for
//! each host and path of the canary that a main Ingress serves, rules that send some
//! requests to the canary's backend instead — by header, by cookie, by weight, in that
//! order — and leave the rest to the main Ingress's own rule.
//!
//! The rules are the canary Ingress's own (its `RouteRef`, so a change of it
//! re-translates only it), ordered before the main one's rule of the same match
//! (`RuleOrder::canary`), and carry the main Ingress's annotations (filters, policy, TLS
//! hosts) as ingress-nginx applies the main's configuration to canary traffic. The main
//! Ingress is found through the Store's index of Ingresses by (namespace, host), and the
//! canary depends on that (`Dep::IngressHost`): an Ingress added, changed or removed on
//! one of its hosts re-translates it, nothing else does.

use weir_api::{Ingress, Kind, ObjectKey};
use weir_model::{
    Action, HeaderMatch, HostMatch, RequestMatch, RouteKind, RouteRef, RouteRule, StringMatch,
    Timeouts,
};

use crate::TranslatorOptions;
use crate::compile::ingress::{CompiledIngress, Reach, action, is_ours, path_match, tls};
use crate::compile::ingress_nginx::{self, Canary, is_canary};
use crate::compile::order::{Age, RuleOrder, RuleOrigin};
use crate::store::{Dep, Store};

/// Compiles canary Ingress `key` into `out`.
pub(crate) fn compile(
    store: &Store,
    opts: &TranslatorOptions,
    key: &ObjectKey,
    age: &Age,
    ing: &Ingress,
    canary: &Canary,
    out: &mut CompiledIngress,
) {
    let ns = &key.namespace;
    let origin = RuleOrigin {
        age,
        kind: RouteKind::Ingress,
        namespace: &key.namespace,
        name: &key.name,
    };
    let mut flat: u32 = 0;
    let mut main_seen: Option<ObjectKey> = None;
    // A class-less main Ingress is ours while our IngressClass is the default one.
    out.deps
        .push(store.dep_on_ref(Kind::IngressClass, "", &opts.ingress_class));
    for (i, rule) in ing.spec.rules.iter().enumerate() {
        let host_name = rule.host.clone().unwrap_or_else(|| "".into());
        out.deps
            .push(Dep::IngressHost(Box::new((ns.clone(), host_name.clone()))));
        let Some(http) = &rule.http else { continue };
        let host = match HostMatch::parse_shared(rule.host.as_ref()) {
            Ok(h) => h,
            Err(e) => {
                out.problems
                    .push(format!("spec.rules[{i}].host: {e}; rule ignored"));
                continue;
            }
        };
        for (j, p) in http.paths.iter().enumerate() {
            let field = format!("spec.rules[{i}].http.paths[{j}]");
            let Some((main_key, main, main_path)) = find_main(store, opts, key, &host_name, p)
            else {
                out.problems.push(format!(
                    "{field}: no Ingress of namespace {ns} other than a canary serves host {host_name:?} path {:?} ({}); not served",
                    p.path.as_deref().unwrap_or("/"),
                    p.path_type
                ));
                continue;
            };
            out.deps.push(Dep::Object(main_key.clone()));
            let mut ann = ingress_nginx::compile(store, main);
            let mut reach = Reach::of(&mut ann);
            reach.default_backend =
                crate::compile::ingress::default_backend(store, ns, &mut ann, out);
            out.deps.extend(ann.deps);
            let path = match path_match(p, ann.regex_paths, &field) {
                Ok(m) => m,
                Err(e) => {
                    out.problems.push(e);
                    continue;
                }
            };
            if main_seen.is_none() {
                // The first main Ingress lends its policy, TLS hosts and redirects.
                out.policy = ann.policy.clone();
                out.ssl_redirect = ann.ssl_redirect;
                tls(store, ns, main, out);
                main_seen = Some(main_key.clone());
            } else if main_seen.as_ref() != Some(&main_key) {
                out.problems.push(format!(
                    "{field}: the main Ingress is {main_key}, not {}: the latter's policy applies",
                    main_seen
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default()
                ));
            }
            let main_action = action(
                store,
                ns,
                &main_path.backend,
                &format!("{field} (main Ingress {main_key})"),
                out,
                &reach,
            );
            let canary_action = action(
                store,
                ns,
                &p.backend,
                &format!("{field}.backend"),
                out,
                &reach,
            );
            let mut push = |headers: Vec<HeaderMatch>, action: Action| {
                let m = RequestMatch {
                    path: path.clone(),
                    headers,
                    query: vec![],
                    method: None,
                };
                let order =
                    std::sync::Arc::new(RuleOrder::new(&origin, &m, false, flat, 0).canary());
                let r = RouteRef {
                    kind: RouteKind::Ingress,
                    namespace: key.namespace.clone(),
                    name: key.name.clone(),
                    rule: flat,
                };
                flat += 1;
                out.rules.push((
                    host.clone(),
                    order,
                    std::sync::Arc::new(RouteRule::new(
                        r,
                        m,
                        ann.filters.clone(),
                        action,
                        Timeouts::default(),
                    )),
                ));
            };
            let exact = |v: &str| StringMatch::Exact(v.into());
            if let Some((name, value)) = &canary.header {
                let header = |value: StringMatch| HeaderMatch {
                    name: name.clone(),
                    value,
                };
                match value {
                    Some(v) => push(vec![header(v.clone())], canary_action.clone()),
                    None => {
                        push(vec![header(exact("always"))], canary_action.clone());
                        push(vec![header(exact("never"))], main_action.clone());
                    }
                }
            }
            if let Some(name) = &canary.cookie {
                for (value, to) in [("always", &canary_action), ("never", &main_action)] {
                    match cookie_is(name, value) {
                        Some(m) => push(vec![m], to.clone()),
                        None => out.problems.push(format!(
                            "metadata.annotations[{}canary-by-cookie]: {name:?} cannot be matched; ignored",
                            ingress_nginx::PREFIX
                        )),
                    }
                }
            }
            if let Some((weight, total)) = canary.weight {
                match (&main_action, &canary_action) {
                    (Action::Forward(m), Action::Forward(c)) => {
                        let mut backends = Vec::new();
                        for (b, w) in [(m, total - weight), (c, weight)] {
                            if w > 0 {
                                backends.extend(b.iter().cloned().map(|mut b| {
                                    b.weight = w;
                                    b
                                }));
                            }
                        }
                        push(Vec::new(), Action::Forward(backends));
                    }
                    // A backend that does not resolve answers as its rule would.
                    (Action::Forward(_), failed) | (failed, _) => {
                        push(Vec::new(), failed.clone());
                    }
                }
            }
        }
    }
}

/// The oldest Ingress of ours other than a canary (and `key`) with a path of the same
/// path type and value for `host` in `key`'s namespace, and that path.
fn find_main<'a>(
    store: &'a Store,
    opts: &TranslatorOptions,
    key: &ObjectKey,
    host: &str,
    p: &weir_api::HttpIngressPath,
) -> Option<(ObjectKey, &'a Ingress, &'a weir_api::HttpIngressPath)> {
    let mut mains: Vec<(ObjectKey, &Ingress)> = store
        .ingresses_with_host(&key.namespace, host)
        .into_iter()
        .filter(|(k, i)| k != key && !is_canary(i) && is_ours(store, opts, i))
        .collect();
    mains.sort_by_cached_key(|(k, _)| (store.age(k), k.clone()));
    let value = p.path.as_deref().unwrap_or("/");
    mains.into_iter().find_map(|(k, i)| {
        let path = i
            .spec
            .rules
            .iter()
            .filter(|r| r.host.as_deref().unwrap_or("") == host)
            .filter_map(|r| r.http.as_ref())
            .flat_map(|h| &h.paths)
            .find(|mp| mp.path.as_deref().unwrap_or("/") == value && mp.path_type == p.path_type)?;
        Some((k, i, path))
    })
}

/// The expression a `Cookie` header matches (whole) when it holds cookie `name` with
/// `value`.
pub(crate) fn cookie_regex(name: &str, value: &str) -> String {
    format!(
        "(?:.*;[ \\t]*)?{}={}(?:;.*)?",
        regex::escape(name),
        regex::escape(value)
    )
}

/// A `Cookie` header holding cookie `name` with `value` (`None`: no expression could be
/// built, which a checked cookie name does not cause).
fn cookie_is(name: &str, value: &str) -> Option<HeaderMatch> {
    let re = cookie_regex(name, value);
    Some(HeaderMatch {
        name: "cookie".into(),
        value: StringMatch::Regex(weir_model::Pattern::new(&re).ok()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_match_finds_the_cookie_among_others() {
        let m = cookie_is("canary", "always").unwrap();
        for (header, hit) in [
            ("canary=always", true),
            ("a=1; canary=always", true),
            ("a=1;canary=always; b=2", true),
            ("canary=never", false),
            ("xcanary=always", false),
            ("canary=alwaysx", false),
        ] {
            assert_eq!(m.value.matches(header), hit, "{header}");
        }
    }
}
