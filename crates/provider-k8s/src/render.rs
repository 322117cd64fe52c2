//! Turns a translator status into the `status` to write, given the status the API server
//! holds: carries `lastTransitionTime` over while a condition's status is unchanged, and
//! keeps the route parent entries of other controllers untouched.

use serde_json::{Map, Value, json};
use weir_api::{Condition, ConditionType, ObjectStatus, Reason};

/// Problems of a Gateway found outside the translator (e.g. resources its data planes
/// refused), by namespace and name; they turn the Gateway's `Programmed` condition False.
#[derive(Clone)]
pub struct GatewayProblems(pub std::sync::Arc<ProblemsOf>);

/// `(namespace, name) → problems` of a Gateway.
pub type ProblemsOf = dyn Fn(&str, &str) -> Vec<String> + Send + Sync;

impl std::fmt::Debug for GatewayProblems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GatewayProblems(..)")
    }
}

/// Addresses of a Gateway known outside the translator (split mode: its provisioned
/// Service), by namespace and name; they replace the listener bind addresses in status.
#[derive(Clone)]
pub struct GatewayAddresses(pub std::sync::Arc<AddressesOf>);

/// `(namespace, name) → addresses` of a Gateway, if known.
pub type AddressesOf = dyn Fn(&str, &str) -> Option<Vec<String>> + Send + Sync;

impl std::fmt::Debug for GatewayAddresses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GatewayAddresses(..)")
    }
}

/// How rendering is configured.
#[derive(Clone, Debug, Default)]
pub struct RenderOptions {
    /// Our controller name (route parent entries with it are ours).
    pub controller_name: String,
    /// Addresses reported where the data plane listens on an unspecified address
    /// (`0.0.0.0`/`::`): Gateway `status.addresses` and Ingress `status.loadBalancer`.
    /// Unspecified addresses are dropped when this is empty.
    pub advertise: Vec<String>,
    /// Extra problems per Gateway (split mode: data-plane refusals).
    pub gateway_problems: Option<GatewayProblems>,
    /// Addresses per Gateway that replace the bind addresses (split mode).
    pub gateway_addresses: Option<GatewayAddresses>,
}

/// A listener's conditions, keeping the `lastTransitionTime` of the stored listener
/// status with the same name.
fn listener_conditions(
    current: &Value,
    name: &str,
    desired: &[Condition],
    now: &str,
) -> Vec<Value> {
    let old = current
        .get("listeners")
        .and_then(Value::as_array)
        .and_then(|v| {
            v.iter()
                .find(|o| o.get("name").and_then(Value::as_str) == Some(name))
        })
        .and_then(|o| o.get("conditions"));
    conditions(desired, old, now)
}

/// The status to write for an object whose stored status is `current`, or `None` when
/// this kind of status is not written to the API server (e.g. problems of a Secret).
pub(crate) fn render(
    opts: &RenderOptions,
    key: &weir_api::ObjectKey,
    current: &Value,
    desired: &ObjectStatus,
    now: &str,
) -> Option<Value> {
    Some(match desired {
        ObjectStatus::GatewayClass(s) => {
            // The CRD keys the list by name and wants it sorted.
            let mut features: Vec<&String> = s.supported_features.iter().collect();
            features.sort();
            features.dedup();
            json!({
                "conditions": conditions(&s.conditions, current.get("conditions"), now),
                "supportedFeatures": features.iter().map(|f| json!({"name": f})).collect::<Vec<_>>(),
            })
        }
        ObjectStatus::Gateway(s) => {
            let listeners: Vec<Value> = s
                .listeners
                .iter()
                .map(|l| {
                    json!({
                        "name": l.name,
                        "supportedKinds": l.supported_kinds,
                        "attachedRoutes": l.attached_routes,
                        "conditions": listener_conditions(current, &l.name, &l.conditions, now),
                    })
                })
                .collect();
            let mut addresses = Vec::new();
            let known = opts
                .gateway_addresses
                .as_ref()
                .and_then(|a| (a.0)(&key.namespace, &key.name));
            match known {
                Some(known) => {
                    for v in known {
                        let type_ = if v.parse::<std::net::IpAddr>().is_ok() {
                            "IPAddress"
                        } else {
                            "Hostname"
                        };
                        addresses.push(json!({"type": type_, "value": v}));
                    }
                }
                None => {
                    for a in &s.addresses {
                        for v in advertised(opts, &a.value) {
                            // An advertised name (e.g. the Service's DNS name) is a
                            // Hostname address, whatever the bound address was.
                            let type_ = if v == a.value || v.parse::<std::net::IpAddr>().is_ok() {
                                a.type_.as_str()
                            } else {
                                "Hostname"
                            };
                            let entry = json!({"type": type_, "value": v});
                            if !addresses.contains(&entry) {
                                addresses.push(entry);
                            }
                        }
                    }
                }
            }
            let mut out = Map::new();
            if !addresses.is_empty() {
                out.insert("addresses".into(), addresses.into());
            }
            let mut conds = s.conditions.clone();
            let problems = opts
                .gateway_problems
                .as_ref()
                .map(|p| (p.0)(&key.namespace, &key.name))
                .unwrap_or_default();
            if !problems.is_empty() {
                let mut message = problems.join("; ");
                message.truncate(32_000);
                let generation = conds.first().and_then(|c| c.observed_generation);
                conds.retain(|c| !c.is(ConditionType::Programmed));
                conds.push(Condition::new(
                    ConditionType::Programmed,
                    false,
                    Reason::Invalid,
                    message,
                    generation,
                ));
            }
            out.insert(
                "conditions".into(),
                conditions(&conds, current.get("conditions"), now).into(),
            );
            out.insert("listeners".into(), listeners.into());
            if let Some(n) = s.attached_listener_sets {
                out.insert("attachedListenerSets".into(), n.into());
            }
            Value::Object(out)
        }
        ObjectStatus::ListenerSet(s) => {
            let listeners: Vec<Value> = s
                .listeners
                .iter()
                .map(|l| {
                    let mut entry = json!({
                        "name": l.name,
                        "supportedKinds": l.supported_kinds,
                        "attachedRoutes": l.attached_routes,
                        "conditions": listener_conditions(current, &l.name, &l.conditions, now),
                    });
                    // XListenerSet (v1alpha1) requires the port in each entry; the v1
                    // ListenerSet status has no such field.
                    if key.kind == weir_api::Kind::XListenerSet {
                        entry["port"] = l.port.into();
                    }
                    entry
                })
                .collect();
            json!({
                "conditions": conditions(&s.conditions, current.get("conditions"), now),
                "listeners": listeners,
            })
        }
        ObjectStatus::Route(s) => {
            let ours = s.parents.iter().map(|p| {
                let r = serde_json::to_value(&p.parent_ref).unwrap_or(Value::Null);
                (r, &*p.controller_name, &p.conditions[..])
            });
            json!({ "parents": merge_entries(opts, current, "parents", "parentRef", ours, now) })
        }
        ObjectStatus::Policy(s) => {
            let ours = s.ancestors.iter().map(|a| {
                let r = serde_json::to_value(&a.ancestor_ref).unwrap_or(Value::Null);
                (r, a.controller_name.as_str(), &a.conditions[..])
            });
            let ancestors = merge_entries(opts, current, "ancestors", "ancestorRef", ours, now);
            json!({ "ancestors": ancestors })
        }
        ObjectStatus::Ingress { load_balancer, .. } => {
            let mut ingress = Vec::new();
            for a in &load_balancer.addresses {
                for v in advertised(opts, a) {
                    let entry = if v.parse::<std::net::IpAddr>().is_ok() {
                        json!({"ip": v})
                    } else {
                        json!({"hostname": v})
                    };
                    if !ingress.contains(&entry) {
                        ingress.push(entry);
                    }
                }
            }
            // Keep other fields of `status` (e.g. conditions some tools add) as they are.
            let mut out = current.as_object().cloned().unwrap_or_default();
            out.insert("loadBalancer".into(), json!({ "ingress": ingress }));
            Value::Object(out)
        }
        ObjectStatus::Problems(_) => return None,
    })
}

/// A list of per-parent entries (route `parents`, policy `ancestors`): other controllers'
/// entries first, as they were, then ours, each keeping the `lastTransitionTime`s of our
/// stored entry for the same reference.
fn merge_entries<'a>(
    opts: &RenderOptions,
    current: &Value,
    list: &str,
    ref_field: &str,
    ours: impl Iterator<Item = (Value, &'a str, &'a [Condition])>,
    now: &str,
) -> Vec<Value> {
    let existing: Vec<Value> = current
        .get(list)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let is_ours =
        |p: &Value| p.get("controllerName").and_then(Value::as_str) == Some(&opts.controller_name);
    let mut entries: Vec<Value> = existing.iter().filter(|p| !is_ours(p)).cloned().collect();
    for (reference, controller, conds) in ours {
        let old = existing
            .iter()
            .filter(|e| is_ours(e))
            .find(|e| {
                e.get(ref_field)
                    .is_some_and(|r| same_parent_ref(r, &reference))
            })
            .and_then(|e| e.get("conditions"));
        let mut entry = Map::new();
        entry.insert(ref_field.into(), reference);
        entry.insert("controllerName".into(), controller.into());
        entry.insert("conditions".into(), conditions(conds, old, now).into());
        entries.push(Value::Object(entry));
    }
    entries
}

fn advertised<'a>(opts: &'a RenderOptions, addr: &'a str) -> Vec<&'a str> {
    match addr.parse::<std::net::IpAddr>() {
        Ok(ip) if ip.is_unspecified() => opts.advertise.iter().map(String::as_str).collect(),
        _ => vec![addr],
    }
}

/// Parent references compare with the API server's defaults applied (group and kind).
fn same_parent_ref(a: &Value, b: &Value) -> bool {
    let norm = |v: &Value| {
        let s = |f: &str| v.get(f).and_then(Value::as_str).map(str::to_owned);
        let p = |f: &str| v.get(f).and_then(Value::as_i64);
        (
            s("group").unwrap_or_else(|| "gateway.networking.k8s.io".into()),
            s("kind").unwrap_or_else(|| "Gateway".into()),
            s("namespace"),
            s("name"),
            s("sectionName"),
            p("port"),
        )
    };
    norm(a) == norm(b)
}

/// Conditions with `lastTransitionTime`: kept from the stored condition of the same type
/// while its status is unchanged, `now` otherwise.
fn conditions(desired: &[Condition], current: Option<&Value>, now: &str) -> Vec<Value> {
    desired
        .iter()
        .map(|c| {
            let ltt = current
                .and_then(Value::as_array)
                .and_then(|v| {
                    v.iter()
                        .find(|o| o.get("type").and_then(Value::as_str) == Some(c.type_))
                })
                .filter(|o| o.get("status").and_then(Value::as_str) == Some(c.status))
                .and_then(|o| o.get("lastTransitionTime").and_then(Value::as_str))
                .unwrap_or(now);
            let mut v = json!({
                "type": c.type_,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": ltt,
            });
            if let Some(g) = c.observed_generation {
                v["observedGeneration"] = g.into();
            }
            v
        })
        .collect()
}

/// RFC 3339 UTC time with second precision, as `metav1.Time` serializes.
pub(crate) fn rfc3339(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_api::{ParentReference, RouteParentStatus, RouteStatus};

    fn opts() -> RenderOptions {
        RenderOptions {
            controller_name: "weir.dev/gateway-controller".into(),
            advertise: vec!["10.0.0.5".into()],
            gateway_problems: None,
            gateway_addresses: None,
        }
    }

    fn key() -> weir_api::ObjectKey {
        weir_api::ObjectKey::new(weir_api::Kind::Gateway, "ns", "gw")
    }

    fn route(cond_ok: bool) -> ObjectStatus {
        ObjectStatus::Route(RouteStatus {
            parents: vec![RouteParentStatus {
                parent_ref: ParentReference {
                    name: "gw".into(),
                    ..Default::default()
                },
                controller_name: "weir.dev/gateway-controller".into(),
                conditions: vec![Condition::new(
                    ConditionType::Accepted,
                    cond_ok,
                    Reason::Accepted,
                    "ok",
                    Some(2),
                )],
            }],
        })
    }

    #[test]
    fn other_controllers_entries_are_kept_verbatim() {
        let other = json!({"parentRef": {"name": "gw"}, "controllerName": "example.com/other",
                           "conditions": [{"type": "Accepted", "status": "Bogus"}]});
        let current = json!({"parents": [other.clone(),
            {"parentRef": {"name": "old", "group": "gateway.networking.k8s.io", "kind": "Gateway"},
             "controllerName": "weir.dev/gateway-controller", "conditions": []}]});
        let out = render(
            &opts(),
            &key(),
            &current,
            &route(true),
            "2026-01-01T00:00:00Z",
        )
        .unwrap();
        let parents = out["parents"].as_array().unwrap();
        assert_eq!(parents.len(), 2);
        assert_eq!(parents[0], other);
        assert_eq!(parents[1]["parentRef"]["name"], "gw");
        assert_eq!(parents[1]["conditions"][0]["observedGeneration"], 2);
    }

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let t0 = "2026-01-01T00:00:00Z";
        let first = render(&opts(), &key(), &Value::Null, &route(true), t0).unwrap();
        let same = render(
            &opts(),
            &key(),
            &first,
            &route(true),
            "2026-01-02T00:00:00Z",
        )
        .unwrap();
        assert_eq!(same, first, "nothing changed, so nothing to write");
        let flipped = render(
            &opts(),
            &key(),
            &first,
            &route(false),
            "2026-01-03T00:00:00Z",
        )
        .unwrap();
        assert_eq!(
            flipped["parents"][0]["conditions"][0]["lastTransitionTime"],
            "2026-01-03T00:00:00Z"
        );
    }

    #[test]
    fn defaulted_parent_refs_match() {
        assert!(same_parent_ref(
            &json!({"name": "gw", "group": "gateway.networking.k8s.io", "kind": "Gateway"}),
            &json!({"name": "gw"})
        ));
        assert!(!same_parent_ref(
            &json!({"name": "gw", "sectionName": "a"}),
            &json!({"name": "gw"})
        ));
    }

    #[test]
    fn unspecified_addresses_are_advertised() {
        let s = ObjectStatus::Ingress {
            load_balancer: weir_api::IngressStatus {
                addresses: vec!["0.0.0.0".into(), "192.0.2.1".into()],
            },
            problems: vec![],
        };
        let out = render(&opts(), &key(), &Value::Null, &s, "t").unwrap();
        assert_eq!(
            out["loadBalancer"]["ingress"],
            json!([{"ip": "10.0.0.5"}, {"ip": "192.0.2.1"}])
        );
    }

    #[test]
    fn an_advertised_name_is_a_hostname_address() {
        let mut o = opts();
        o.advertise = vec![
            "weir.weir-system.svc.cluster.local".into(),
            "10.0.0.5".into(),
        ];
        let s = ObjectStatus::Gateway(weir_api::GatewayStatus {
            addresses: vec![weir_api::GatewayStatusAddress {
                type_: "IPAddress".into(),
                value: "0.0.0.0".into(),
            }],
            conditions: vec![],
            listeners: vec![],
            attached_listener_sets: None,
        });
        let out = render(&o, &key(), &Value::Null, &s, "t").unwrap();
        assert_eq!(
            out["addresses"],
            json!([{"type": "Hostname", "value": "weir.weir-system.svc.cluster.local"},
                   {"type": "IPAddress", "value": "10.0.0.5"}])
        );
    }

    #[test]
    fn supported_features_are_sorted_objects() {
        let s = ObjectStatus::GatewayClass(weir_api::GatewayClassStatus {
            conditions: vec![],
            supported_features: vec!["HTTPRoute".into(), "Gateway".into(), "HTTPRoute".into()],
        });
        let out = render(&opts(), &key(), &Value::Null, &s, "t").unwrap();
        assert_eq!(
            out["supportedFeatures"],
            json!([{"name": "Gateway"}, {"name": "HTTPRoute"}])
        );
    }

    #[test]
    fn formats_rfc3339() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_000_000);
        assert_eq!(rfc3339(t), "2026-11-18T11:06:40Z");
    }
}
