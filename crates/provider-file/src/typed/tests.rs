use super::*;

use crate::yaml::tests::rng;

/// Fills each `{slot}` of `template`'s lines with the first value of its pool (a valid
/// one), except for up to two random slot occurrences, which get a random value of their
/// pool or lose their line.
fn fill(
    template: &str,
    pools: &[(&str, &[&str])],
    next: &mut impl FnMut(usize) -> usize,
) -> String {
    let occurrences = template.matches('{').count();
    let mutated: Vec<usize> = (0..next(3)).map(|_| next(occurrences)).collect();
    let mut out = String::new();
    let mut n = 0;
    for line in template.lines() {
        let mut line = line.to_owned();
        let mut drop = false;
        for (slot, pool) in pools {
            let slot = format!("{{{slot}}}");
            while let Some(at) = line.find(&slot) {
                let value = if mutated.contains(&n) {
                    drop |= next(8) == 0;
                    pool[next(pool.len())]
                } else {
                    pool[0]
                };
                line.replace_range(at..at + slot.len(), value);
                n += 1;
            }
        }
        if !drop {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

const NAMES: &[&str] = &[
    "d1",
    "d1",
    "a.b",
    "D1",
    "-x",
    "''",
    "null",
    "1",
    "[a]",
    "{a: b}",
    "~",
    "x_y",
    "\"quoted\"",
];
const NAMESPACES: &[&str] = &["default", "my-ns", "a.b", "''", "null", "5", "Foo"];
const MAPS: &[&str] = &[
    "{}",
    "{a: b}",
    "{a: b}",
    "{a: 1}",
    "{\"a/b/c\": x}",
    "null",
    "{a: null}",
    "[x]",
    "{app: \"bad value!\"}",
    "{kubernetes.io/service-account.name: sa}",
    "{kubernetes.io/ingress.class: weir}",
];
const GENERATIONS: &[&str] = &["1", "-1", "x", "null", "99999999999999999"];

fn check_all(texts: impl Iterator<Item = String>) -> (usize, usize) {
    let (mut read, mut total) = (0, 0);
    for text in texts {
        total += 1;
        match check(&text) {
            Ok(true) => read += 1,
            Ok(false) => {}
            Err(e) => panic!("{e}"),
        }
    }
    (read, total)
}

#[test]
fn reads_the_bench_layout() {
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: d1-tls\n  namespace: default\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n    -----BEGIN CERTIFICATE-----\n    MIIB\n    -----END CERTIFICATE-----\n  tls.key: |\n    -----BEGIN PRIVATE KEY-----\n    MIGH\n    -----END PRIVATE KEY-----\n";
    let ingress = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: d1\n  namespace: default\nspec:\n  tls:\n  - hosts: [\"d1.bench.test\"]\n    secretName: d1-tls\n  rules:\n  - host: \"d1.bench.test\"\n    http:\n      paths:\n      - path: \"/\"\n        pathType: Prefix\n        backend:\n          resource: {apiGroup: weir.dev, kind: Backend, name: bench}\n";
    for text in [secret, ingress] {
        assert_eq!(check(text), Ok(true), "{text}");
    }
    // The TLS host and the rule's host are one buffer.
    let node = crate::yaml::scan_node(ingress).unwrap();
    let Some(Object::Ingress(i)) = read(&node) else {
        panic!("not read");
    };
    let rule_host = i.spec.rules[0].host.as_ref().unwrap();
    assert!(Arc::ptr_eq(&i.spec.tls[0].hosts[0], rule_host));
    // Invalid or unusual ones are left to the usual path.
    for text in [
        &secret.replace("tls.key", "other"),
        &secret.replace("name: d1-tls", "name: D1"),
        &ingress.replace("pathType: Prefix", "pathType: Other"),
        &ingress.replace("kind: Ingress", "kind: IngressClass"),
        &ingress.replace("networking.k8s.io/v1", "networking.k8s.io/v1beta1"),
    ] {
        assert_eq!(check(text), Ok(false), "{text}");
    }
}

/// Random Secrets, valid and not, of every field shape: when the typed read answers, the
/// usual path reads the same object.
#[test]
fn random_secrets_agree() {
    let template = "apiVersion: {api}\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {map}\n  annotations: {map}\n  generation: {gen}\n  uid: {name}\ntype: {type}\nstringData:\n  {key}: {val}\n  tls.key: |\n    x\ndata:\n  {key}: {data}\n{extra}\n";
    let pools: &[(&str, &[&str])] = &[
        ("api", &["v1", "v1", "v1", "v2", "apps/v1"]),
        ("name", NAMES),
        ("ns", NAMESPACES),
        ("map", MAPS),
        ("gen", GENERATIONS),
        (
            "type",
            &[
                "kubernetes.io/tls",
                "kubernetes.io/tls",
                "Opaque",
                "''",
                "null",
                "kubernetes.io/basic-auth",
                "1",
                "kubernetes.io/service-account-token",
                "kubernetes.io/dockerconfigjson",
            ],
        ),
        (
            "key",
            &["tls.crt", "tls.crt", "\"a b\"", "..", "x", "username"],
        ),
        (
            "val",
            &["abc", "null", "1", "[a]", "|\n    block", "\"\"", "{a: b}"],
        ),
        (
            "data",
            &["YWJj", "YWJ", "null", "1", "\"YQ==\"", "\"!!!!\"", "e30="],
        ),
        (
            "extra",
            &[
                "",
                "",
                "immutable: true",
                "status: {}",
                "foo: null",
                "metadata: {}",
            ],
        ),
    ];
    let mut next = rng(0x5ec2e7);
    let (read, total) = check_all((0..10_000).map(|_| fill(template, pools, &mut next)));
    assert!(read * 4 >= total, "typed read {read} of {total}");
}

/// Random Ingresses, valid and not, of every field shape: when the typed read answers,
/// the usual path reads the same object.
#[test]
fn random_ingresses_agree() {
    let template = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations: {map}\nspec:\n  ingressClassName: {class}\n  defaultBackend: {backend}\n  tls:\n  - hosts: {hosts}\n    secretName: {secret}\n  rules:\n  - host: {host}\n    http:\n      paths:\n      - path: {path}\n        pathType: {ptype}\n        backend: {backend}\n  - host: {host}\n{extra}\n";
    let backends: &[&str] = &[
        "{service: {name: s, port: {number: 80}}}",
        "{service: {name: s, port: {name: http}}}",
        "{resource: {apiGroup: weir.dev, kind: Backend, name: b}}",
        "{resource: {apiGroup: weir.dev, kind: Backend, name: b}}",
        "{service: {name: s, port: {number: 70000}}}",
        "{service: {name: s, port: {number: 99999999999}}}",
        "{service: {name: s, port: {number: 0, name: http}}}",
        "{service: {name: s, port: {number: 80, name: http}}}",
        "{service: {name: S_1, port: {number: 80}}}",
        "{resource: {kind: Backend}}",
        "{}",
        "null",
        "{service: {name: s}}",
        "{service: {name: s, port: {number: \"80\"}}}",
        "{service: {name: s, port: {number: -1}}}",
        "{service: {name: s, port: {}}, resource: {kind: a, name: b}}",
        "{service: {name: s, port: {number: null, name: http}}}",
        "[a]",
    ];
    let pools: &[(&str, &[&str])] = &[
        ("name", NAMES),
        ("ns", NAMESPACES),
        ("map", MAPS),
        ("class", &["weir", "weir", "null", "Bad_Class", "1", "''"]),
        ("backend", backends),
        (
            "hosts",
            &[
                "[\"a.b\"]",
                "[\"a.b\"]",
                "[]",
                "[\"*.a.b\"]",
                "[\"1.2.3.4\"]",
                "[null]",
                "[1]",
                "a",
                "null",
                "[\"A.b\"]",
            ],
        ),
        ("secret", &["s", "s", "null", "1"]),
        (
            "host",
            &[
                "a.b",
                "a.b",
                "\"*.a.b\"",
                "1.2.3.4",
                "''",
                "null",
                "\"a..b\"",
                "5",
                "\"*\"",
            ],
        ),
        (
            "path",
            &[
                "/", "/", "/a//b", "a", "''", "null", "/x/..", "\"/%2f\"", "1",
            ],
        ),
        (
            "ptype",
            &[
                "Prefix",
                "Prefix",
                "Exact",
                "ImplementationSpecific",
                "Other",
                "null",
                "''",
            ],
        ),
        ("extra", &["", "", "status: {}", "foo: null", "spec: {}"]),
    ];
    let mut next = rng(0x1a9e55);
    let (read, total) = check_all((0..10_000).map(|_| fill(template, pools, &mut next)));
    assert!(read * 4 >= total, "typed read {read} of {total}");
}
