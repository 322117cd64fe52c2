//! The JSON API over real snapshots: counts, pages, filters, escaping, no key material.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use weir_model::{
    Action, Certificate, Cluster, ClusterKey, Delta, DeltaBatch, Endpoint, EndpointAddr, HostMatch,
    Listener, ListenerKey, PathMatch, Protocol, RequestMatch, Resource, RouteKind, RouteRef,
    RouteRule, SniCert, Timeouts, UpstreamProtocol, VirtualHost,
};

use super::*;
use crate::endpoints::Outcome;

fn lk(port: u16) -> ListenerKey {
    ListenerKey::new(([127, 0, 0, 1], port).into())
}

fn rule(route: &str) -> Arc<RouteRule> {
    Arc::new(RouteRule::new(
        RouteRef {
            kind: RouteKind::HttpRoute,
            namespace: "ns".into(),
            name: route.into(),
            rule: 0,
        },
        RequestMatch {
            path: PathMatch::Prefix("/".into()),
            headers: vec![],
            query: vec![],
            method: None,
        },
        vec![],
        Action::Fail {
            status: 503,
            reason: "test".into(),
        },
        Timeouts::default(),
    ))
}

fn vhost(port: u16, host: &str, routes: &[&str]) -> Delta {
    Delta::Upsert(Resource::VirtualHost(Arc::new(VirtualHost::new(
        lk(port),
        HostMatch::parse(Some(host)).unwrap(),
        routes.iter().map(|r| rule(r)).collect(),
    ))))
}

fn listener(port: u16, protocol: Protocol) -> Delta {
    Delta::Upsert(Resource::Listener(Arc::new(Listener::new(
        lk(port),
        protocol,
        "ns/gw".into(),
        format!("l{port}").into(),
    ))))
}

fn cluster(name: &str, n: u8) -> Delta {
    let endpoints = (1..=n)
        .map(|i| Endpoint {
            addr: EndpointAddr::Socket(([10, 0, 0, i], 80).into()),
            weight: 1,
        })
        .collect();
    Delta::Upsert(Resource::Cluster(Arc::new(Cluster::new(
        ClusterKey(name.into()),
        endpoints,
        UpstreamProtocol::Http1,
    ))))
}

/// A self-signed certificate for `names` valid from `from` to `until` (Unix seconds).
fn certificate(names: &[&str], from: i64, until: i64) -> Arc<Certificate> {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + Duration::from_secs(from as u64);
    params.not_after = epoch + Duration::from_secs(until as u64);
    let cert = params.self_signed(&key).unwrap();
    Arc::new(Certificate::new(
        cert.pem().into_bytes().into(),
        key.serialize_pem().into_bytes().into(),
    ))
}

fn apply(deltas: Vec<Delta>) -> Snapshot {
    let (s, rejected) = Snapshot::empty().apply(&DeltaBatch { deltas });
    assert!(rejected.is_empty(), "{rejected:?}");
    s
}

const DAY: i64 = 86_400;

fn now() -> (SystemTime, i64) {
    let t = SystemTime::now();
    (t, t.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64)
}

fn ctx<'a>(board: &'a StatusBoard, now: SystemTime) -> Context<'a> {
    Context {
        board,
        ready: true,
        unhealthy: 1,
        ejected: 0,
        now,
    }
}

#[test]
fn the_summary_counts_and_stays_small() {
    let (t, now) = now();
    let soon = certificate(&["soon.example"], now - DAY, now + 5 * DAY);
    let gone = certificate(&["gone.example"], now - 9 * DAY, now - DAY);
    let mut deltas = vec![
        listener(8443, Protocol::Https),
        listener(8080, Protocol::Http),
    ];
    for c in [&soon, &gone] {
        deltas.push(Delta::Upsert(Resource::Certificate(c.clone())));
    }
    deltas.push(Delta::Upsert(Resource::Sni(Arc::new(SniCert::new(
        lk(8443),
        HostMatch::parse(Some("soon.example")).unwrap(),
        soon.hash(),
    )))));
    for i in 0..2000 {
        deltas.push(vhost(8080, &format!("h{i}.example"), &["r"]));
    }
    deltas.push(cluster("c", 2));
    let snap = apply(deltas);
    let board = StatusBoard::default();
    board.set_mode("weir run");
    board.rejections().push(Rejection::now(
        Stage::Validation,
        "HTTPRoute ns/x".into(),
        Some("routes.yaml#2".into()),
        vec![Problem {
            message: "spec.hostnames[0]: <img src=x onerror=alert(1)> & more".into(),
            ..Problem::default()
        }],
    ));
    board
        .histogram("end_to_end")
        .observe(Duration::from_micros(700));
    let v = summary(&snap, &ctx(&board, t));
    let c = &v["counts"];
    assert_eq!(c["listeners"], 2);
    assert_eq!(c["virtual_hosts"], 2000);
    assert_eq!(c["certificates"], 2);
    assert_eq!(c["certificates_expiring"], 1);
    assert_eq!(c["certificates_expired"], 1);
    assert_eq!(c["rejected_objects"], 1);
    assert_eq!(c["unhealthy_endpoints"], 1);
    assert_eq!(v["mode"], "weir run");
    assert_eq!(v["listeners"][0]["address"], "127.0.0.1:8080");
    assert_eq!(v["listeners"][0]["virtual_hosts"], 2000);
    assert_eq!(v["listeners"][1]["sni_entries"], 1);
    assert_eq!(v["propagation"][0]["phase"], "end_to_end");
    assert_eq!(v["propagation"][0]["count"], 1);
    assert_eq!(v["rejections"][0]["origin"], "routes.yaml#2");
    // 2,000 hosts, yet no host is in the summary.
    let body = to_body(&v);
    let text = String::from_utf8(body.clone()).unwrap();
    assert!(!text.contains("h1.example"), "{text}");
    assert!(body.len() < 8 * 1024, "{} bytes", body.len());
    // Markup characters are escaped, and the JSON still reads back the same.
    assert!(
        !text.contains('<') && !text.contains('>') && !text.contains('&'),
        "{text}"
    );
    assert!(text.contains("\\u003cimg src=x onerror=alert(1)\\u003e \\u0026 more"));
    let back: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(back, v);
}

#[test]
fn routes_are_paged_by_host_and_filtered() {
    let mut deltas = vec![listener(8080, Protocol::Http)];
    for i in 0..120 {
        deltas.push(vhost(8080, &format!("h{i:03}.example"), &["a", "b", "a"]));
    }
    deltas.push(vhost(8080, "special.example", &["shop"]));
    let snap = apply(deltas);
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for round in 0.. {
        assert!(round < 10, "bounded");
        let mut q = Query::parse(Some("limit=50"));
        q.after = after.clone();
        let v = routes(&snap, &q);
        assert_eq!(v["matched"], 121);
        for item in v["items"].as_array().unwrap() {
            seen.push(item["host"].as_str().unwrap().to_string());
        }
        match v["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 121);
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted, "pages in host order, none twice");
    assert_eq!(seen[0], "h000.example");

    let v = routes(&snap, &Query::parse(Some("q=H01")));
    assert_eq!(v["matched"], 10, "h010..h019");
    let v = routes(&snap, &Query::parse(Some("q=shop")));
    assert_eq!(v["matched"], 1, "by route name");
    let item = &v["items"][0];
    assert_eq!(item["host"], "special.example");
    assert_eq!(item["routes"][0], "HTTPRoute ns/shop");
    assert_eq!(item["listener"], "127.0.0.1:8080");
    let v = routes(&snap, &Query::parse(Some("q=h007&limit=5")));
    let item = &v["items"][0];
    assert_eq!(item["rules"], 3);
    assert_eq!(item["routes"], json!(["HTTPRoute ns/a", "HTTPRoute ns/b"]));
}

#[test]
fn backends_show_their_endpoints_and_filter_the_unhealthy() {
    let mut deltas = vec![];
    for i in 0..30 {
        deltas.push(cluster(&format!("svc/ns/app{i:02}:80"), 3));
    }
    let snap = apply(deltas);
    // Five gateway failures in a row eject endpoint 2 of app07.
    let c = snap.cluster(&ClusterKey("svc/ns/app07:80".into())).unwrap();
    for _ in 0..5 {
        c.states()[1].start().finish(Outcome::GatewayFailure);
    }
    let v = backends(&snap, &Query::parse(Some("unhealthy=1")));
    assert_eq!(v["matched"], 1);
    let b = &v["items"][0];
    assert_eq!(b["name"], "svc/ns/app07:80");
    assert_eq!(b["endpoints_total"], 3);
    assert_eq!(b["endpoints_out"], 1);
    assert_eq!(b["endpoints"][1]["address"], "10.0.0.2:80");
    assert_eq!(b["endpoints"][1]["health"], "ejected");
    assert_eq!(b["endpoints"][1]["failures"], 5);
    assert_eq!(b["endpoints"][0]["health"], "unchecked");
    let v = backends(&snap, &Query::parse(Some("limit=10")));
    assert_eq!(v["matched"], 30);
    assert_eq!(v["items"].as_array().unwrap().len(), 10);
    assert_eq!(v["next"], "svc/ns/app09:80");
    let v = backends(&snap, &Query::parse(Some("q=10.0.0.3")));
    assert_eq!(v["matched"], 30, "by endpoint address");
}

#[test]
fn certificates_come_soonest_expiry_first_without_keys() {
    let (t, now) = now();
    let certs: Vec<Arc<Certificate>> = (0..7)
        .map(|i| {
            certificate(
                &[&format!("c{i}.example")],
                now - DAY,
                now + (10 - i) * 10 * DAY,
            )
        })
        .collect();
    let mut deltas = vec![listener(8443, Protocol::Https)];
    for (i, c) in certs.iter().enumerate() {
        deltas.push(Delta::Upsert(Resource::Certificate(c.clone())));
        deltas.push(Delta::Upsert(Resource::Sni(Arc::new(SniCert::new(
            lk(8443),
            HostMatch::parse(Some(&format!("c{i}.example"))).unwrap(),
            c.hash(),
        )))));
    }
    let snap = apply(deltas);
    let first = certificates(&snap, &Query::parse(Some("limit=4")), t);
    assert_eq!(first["matched"], 7);
    let names: Vec<&str> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["names"][0].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["c6.example", "c5.example", "c4.example", "c3.example"]
    );
    let c6 = &first["items"][0];
    assert_eq!(c6["state"], "valid");
    assert_eq!(c6["days_left"], 40);
    assert_eq!(c6["hosts"][0], "c6.example 127.0.0.1:8443");
    assert_eq!(c6["not_after"], cert_info::rfc3339(now + 40 * DAY), "{c6}");
    let cursor = first["next"].as_str().unwrap();
    let rest = certificates(
        &snap,
        &Query::parse(Some(&format!("limit=4&after={cursor}"))),
        t,
    );
    let names: Vec<&str> = rest["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["names"][0].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c2.example", "c1.example", "c0.example"]);
    assert!(rest["next"].is_null());
    let one = certificates(&snap, &Query::parse(Some("q=c3.ex")), t);
    assert_eq!(one["matched"], 1);
    for v in [first, rest, one] {
        let text = v.to_string();
        assert!(
            !text.contains("PRIVATE") && !text.contains("BEGIN"),
            "{text}"
        );
    }
}

#[test]
fn rejections_are_listed_newest_first() {
    let board = StatusBoard::default();
    for i in 0..5 {
        board.rejections().push(Rejection::now(
            Stage::Translation,
            format!("HTTPRoute ns/r{i}"),
            None,
            vec![Problem {
                scope: "parent gw".into(),
                condition: "Accepted=False".into(),
                reason: "NotAllowedByListeners".into(),
                message: format!("number {i}"),
            }],
        ));
    }
    let v = rejections(&board, &Query::parse(Some("limit=2")));
    assert_eq!(v["matched"], 5);
    assert_eq!(v["total"], 5);
    assert_eq!(v["items"][0]["object"], "HTTPRoute ns/r4");
    assert_eq!(v["items"][0]["stage"], "translation");
    assert_eq!(
        v["items"][0]["problems"][0]["reason"],
        "NotAllowedByListeners"
    );
    assert_eq!(v["items"].as_array().unwrap().len(), 2);
    let v = rejections(&board, &Query::parse(Some("q=number+3")));
    assert_eq!(v["matched"], 1);
}

#[test]
fn the_page_is_self_contained() {
    // No external asset: nothing is fetched but the API, relative to the page.
    for needle in [
        "http://",
        "https://",
        "src=",
        "<link",
        "@import",
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
    ] {
        assert!(!PAGE.contains(needle), "the page contains {needle}");
    }
    assert_eq!(PAGE.matches("<script>").count(), 1);
    assert!(
        PAGE.contains("\"api/v1/status\""),
        "fetched relative to the page"
    );
}
