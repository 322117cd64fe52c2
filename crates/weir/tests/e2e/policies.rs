//! TrafficPolicy from files: a Gateway-wide rate limit answers 429, editing the policy
//! file changes it live, an edit the schema refuses keeps the last good policy, and
//! removing the file lifts the limit; API keys from a Secret file; JWTs against a JWK Set
//! Secret file.

use std::time::Duration;

use crate::support::*;

pub(crate) fn manifests(port: u16, backend_yaml: &str) -> String {
    [
        http_gateway(port),
        http_route("app", "app.test", "a"),
        backend_yaml.to_string(),
    ]
    .join("---\n")
}

fn limit(burst: u32) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: limit}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
  rateLimit:
    local: {{requests: 1, unit: Hour, burst: {burst}, key: {{type: Header, header: x-client}}}}
"
    )
}

async fn call(addr: std::net::SocketAddr, client: &str) -> Resp {
    let req = get("app.test", "/")
        .header("x-client", client)
        .body(http_body_util::Empty::new())
        .unwrap();
    send_http1(addr, req).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_rate_limit_from_a_file_changes_live() {
    let port = free_port();
    let a = echo("a").await;
    let gw = Gateway::start(&[
        ("app.yaml", manifests(port, &backend("default", "a", &[a]))),
        ("policy.yaml", limit(2)),
    ])
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, "probe").await.status == 429
        })
        .await,
        "the policy applies"
    );
    for _ in 0..2 {
        assert_eq!(call(addr, "x").await.status, 200);
    }
    let r = call(addr, "x").await;
    assert_eq!(r.status, 429);
    assert!(r.headers.contains_key("retry-after"));

    // A larger burst: the client's bucket is kept and now has room.
    gw.write("policy.yaml", &limit(5));
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, "x").await.status == 200
        })
        .await,
        "the edited limit applies"
    );

    // An edit with a value outside the schema is refused when the file is read (as the
    // API server would refuse it): the last good policy stays in effect.
    gw.write(
        "policy.yaml",
        &limit(5).replace("unit: Hour", "unit: Fortnight"),
    );
    // Files are read in the order they change: once a route written after the refused
    // edit serves, the edit has been read.
    gw.write("marker.yaml", &http_route("marker", "marker.test", "a"));
    assert!(
        eventually(Duration::from_secs(5), || async {
            http1(addr, "marker.test", "/").await.unwrap().status != 404
        })
        .await,
        "the marker route applies"
    );
    for _ in 0..5 {
        assert_eq!(call(addr, "z").await.status, 200);
    }
    assert_eq!(call(addr, "z").await.status, 429);

    // Removing the policy lifts the limit. Client "z" has an empty bucket, so its first
    // 200 proves the removal applied ("x" still has room under the edited burst, so a 200
    // for "x" could come before the removal does).
    gw.remove("policy.yaml");
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, "z").await.status == 200
        })
        .await,
        "removing the policy lifts the limit"
    );
    for _ in 0..10 {
        assert_eq!(call(addr, "z").await.status, 200);
    }
}

fn keys_secret(entries: &str) -> String {
    format!(
        "apiVersion: v1
kind: Secret
metadata: {{name: keys}}
type: Opaque
stringData: {{{entries}}}
"
    )
}

async fn with_key(addr: std::net::SocketAddr, key: Option<&str>) -> Resp {
    let mut req = get("app.test", "/");
    if let Some(k) = key {
        req = req.header("x-key", k);
    }
    send_http1(addr, req.body(http_body_util::Empty::new()).unwrap())
        .await
        .unwrap()
}

/// API keys from a Secret file: a missing or wrong key is refused (401), a good one
/// reaches the backend without the key header; rotating the Secret's keys applies live;
/// with the Secret gone every request is refused (the check fails closed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_from_a_secret_file_apply_live() {
    let port = free_port();
    let a = echo("a").await;
    let policy = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: keys}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: app}]
  apiKeyAuth: {secretRefs: [{name: keys}], header: x-key}
";
    let gw = Gateway::start(&[
        ("app.yaml", manifests(port, &backend("default", "a", &[a]))),
        ("secret.yaml", keys_secret("alice: alice-key-1234")),
        ("policy.yaml", policy.to_string()),
    ])
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        eventually(Duration::from_secs(5), || async {
            with_key(addr, None).await.status == 401
        })
        .await,
        "the policy applies"
    );
    assert_eq!(with_key(addr, Some("wrong-key-0000")).await.status, 401);
    let r = with_key(addr, Some("alice-key-1234")).await;
    assert_eq!(r.status, 200);
    assert!(
        r.json()["headers"].get("x-key").is_none(),
        "the key is not forwarded: {}",
        r.body
    );

    // Rotation: a new key replaces the old one.
    gw.write("secret.yaml", &keys_secret("alice: alice-key-5678"));
    assert!(
        eventually(Duration::from_secs(5), || async {
            with_key(addr, Some("alice-key-5678")).await.status == 200
        })
        .await,
        "the new key applies"
    );
    assert_eq!(with_key(addr, Some("alice-key-1234")).await.status, 401);

    // Without its Secret the policy refuses everything.
    gw.remove("secret.yaml");
    assert!(
        eventually(Duration::from_secs(5), || async {
            with_key(addr, Some("alice-key-5678")).await.status == 401
        })
        .await,
        "no Secret, no access"
    );

    // Without the policy the route is open again.
    gw.remove("policy.yaml");
    assert!(
        eventually(Duration::from_secs(5), || async {
            with_key(addr, None).await.status == 200
        })
        .await
    );
}

/// An ES256 signing key and its JWK (`kid`).
pub(crate) struct EcKey {
    signing: jsonwebtoken::EncodingKey,
    pub(crate) jwk: String,
    kid: &'static str,
}

pub(crate) fn ec_key(kid: &'static str) -> EcKey {
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING as ALG, EcdsaKeyPair, KeyPair};
    use base64::Engine;
    let rng = aws_lc_rs::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ALG, &rng).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(&ALG, pkcs8.as_ref()).unwrap();
    let point = pair.public_key().as_ref();
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    EcKey {
        signing: jsonwebtoken::EncodingKey::from_ec_der(pkcs8.as_ref()),
        jwk: format!(
            r#"{{"kty": "EC", "crv": "P-256", "kid": "{kid}", "alg": "ES256", "x": "{}", "y": "{}"}}"#,
            b64(&point[1..33]),
            b64(&point[33..65])
        ),
        kid,
    }
}

impl EcKey {
    pub(crate) fn token(&self, claims: serde_json::Value) -> String {
        let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        h.kid = Some(self.kid.to_owned());
        jsonwebtoken::encode(&h, &claims, &self.signing).unwrap()
    }
}

fn jwks_secret(keys: &[&EcKey]) -> String {
    let keys: Vec<&str> = keys.iter().map(|k| k.jwk.as_str()).collect();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: jwks}}\ntype: Opaque\nstringData:\n  jwks: '{{\"keys\": [{}]}}'\n",
        keys.join(", ")
    )
}

pub(crate) fn claims(sub: &str, exp_from_now: i64) -> serde_json::Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    serde_json::json!({
        "iss": "https://corp.test", "aud": "app", "sub": sub, "scope": "read",
        "exp": now + exp_from_now,
    })
}

pub(crate) async fn with_token(addr: std::net::SocketAddr, token: Option<&str>) -> Resp {
    with_token_to(addr, "app.test", token).await
}

/// `GET /` on `host` with a spoofed `x-user` and the token, if any, as a Bearer.
pub(crate) async fn with_token_to(
    addr: std::net::SocketAddr,
    host: &str,
    token: Option<&str>,
) -> Resp {
    let mut req = get(host, "/").header("x-user", "spoofed");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    send_http1(addr, req.body(http_body_util::Empty::new()).unwrap())
        .await
        .unwrap()
}

/// JWTs verified against a JWK Set kept in a Secret file: no token gets 401 with a Bearer
/// challenge, an expired or wrongly signed one 401 `invalid_token`; a good one reaches the
/// backend with its `sub` as `x-user` (the client's own `x-user` dropped) and without the
/// token; rotating the Secret's keys applies live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwts_verified_against_a_jwks_secret_apply_live() {
    let port = free_port();
    let a = echo("a").await;
    let (k1, k2) = (ec_key("k1"), ec_key("k2"));
    let policy = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: jwt}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: app}]
  jwtAuth:
    providers:
    - name: corp
      issuer: https://corp.test
      audiences: [app]
      jwks: {secretRef: {name: jwks}}
      requiredClaims: [{name: scope, values: [read]}]
      claimsToHeaders: [{claim: sub, header: x-user}]
";
    let gw = Gateway::start(&[
        ("app.yaml", manifests(port, &backend("default", "a", &[a]))),
        ("secret.yaml", jwks_secret(&[&k1])),
        ("policy.yaml", policy.to_string()),
    ])
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        eventually(Duration::from_secs(5), || async {
            with_token(addr, None).await.status == 401
        })
        .await,
        "the policy applies"
    );
    let r = with_token(addr, None).await;
    assert_eq!(r.headers["www-authenticate"], "Bearer");
    // One token, sent again after the rotation below: it was verified (and remembered)
    // under the old keys, and must be refused once its key is gone.
    let alice = k1.token(claims("alice", 600));
    let r = with_token(addr, Some(&alice)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = with_token(addr, Some(&alice)).await;
    assert_eq!(r.status, 200, "sent again: {}", r.body);
    assert_eq!(r.json()["headers"]["x-user"], "alice", "{}", r.body);
    let seen = &r.json()["headers"];
    assert_eq!(seen["x-user"], "alice", "{}", r.body);
    assert!(seen.get("authorization").is_none(), "{}", r.body);
    for bad in [
        k1.token(claims("alice", -3600)),
        k2.token(claims("alice", 600)),
        format!("{}x", k1.token(claims("alice", 600))),
    ] {
        let r = with_token(addr, Some(&bad)).await;
        assert_eq!(r.status, 401);
        assert_eq!(
            r.headers["www-authenticate"],
            "Bearer error=\"invalid_token\""
        );
    }

    // Rotation: k2 joins, then k1 leaves.
    gw.write("secret.yaml", &jwks_secret(&[&k1, &k2]));
    assert!(
        eventually(Duration::from_secs(5), || async {
            with_token(addr, Some(&k2.token(claims("bob", 600))))
                .await
                .status
                == 200
        })
        .await,
        "the new key applies"
    );
    gw.write("secret.yaml", &jwks_secret(&[&k2]));
    assert!(
        eventually(Duration::from_secs(5), || async {
            with_token(addr, Some(&alice)).await.status == 401
        })
        .await,
        "the old key is gone, and with it what the cache knew of its token"
    );
    assert_eq!(
        with_token(addr, Some(&k2.token(claims("bob", 600))))
            .await
            .status,
        200
    );
}

async fn with_basic(addr: std::net::SocketAddr, creds: Option<&str>) -> Resp {
    use base64::Engine;
    let mut req = get("app.test", "/");
    if let Some(c) = creds {
        let token = base64::engine::general_purpose::STANDARD.encode(c);
        req = req.header("authorization", format!("Basic {token}"));
    }
    send_http1(addr, req.body(http_body_util::Empty::new()).unwrap())
        .await
        .unwrap()
}

/// Basic auth from an htpasswd Secret file (hashes made by openssl and Python's bcrypt):
/// a missing or wrong password gets 401 with a Basic challenge; apr1 and bcrypt users
/// pass (bcrypt checked off the worker threads, then cached); several clients at once
/// with a bcrypt user all pass; a user removed from the Secret is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_from_an_htpasswd_secret() {
    let port = free_port();
    let a = echo("a").await;
    let secret = |lines: &str| {
        format!(
            "apiVersion: v1
kind: Secret
metadata: {{name: htpasswd}}
type: Opaque
stringData:
  auth: |
{lines}"
        )
    };
    let ann = "    ann:$apr1$xyzabc$cTvtri5GYS9vQXkM4wcQi.\n";
    let bob = "    bob:$2b$05$cpMOa7iYBoWsHDKngyut7O7aOVPvgAOOZBOppjm/auBtNnWEWXjjS\n";
    let policy = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: basic}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  basicAuth: {secretRef: {name: htpasswd}, realm: Shop}
";
    let gw = Gateway::start(&[
        ("app.yaml", manifests(port, &backend("default", "a", &[a]))),
        ("secret.yaml", secret(&format!("{ann}{bob}"))),
        ("policy.yaml", policy.to_string()),
    ])
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        eventually(Duration::from_secs(5), || async {
            with_basic(addr, None).await.status == 401
        })
        .await,
        "the policy applies"
    );
    let r = with_basic(addr, Some("ann:wrong")).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.headers.get("www-authenticate").unwrap(),
        "Basic realm=\"Shop\", charset=\"UTF-8\""
    );
    assert_eq!(with_basic(addr, Some("ann:secret")).await.status, 200);
    assert_eq!(with_basic(addr, Some("bob:open-sesame")).await.status, 200);
    assert_eq!(with_basic(addr, Some("bob:open-sesame?")).await.status, 401);
    // Concurrent first checks of one bcrypt user, and cached ones.
    let mut tasks = Vec::new();
    for i in 0..16 {
        tasks.push(tokio::spawn(async move {
            let pw = if i % 2 == 0 {
                "bob:open-sesame"
            } else {
                "ann:secret"
            };
            with_basic(addr, Some(pw)).await.status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }

    // bob removed from the file: refused, ann still in.
    gw.write("secret.yaml", &secret(ann));
    assert!(
        eventually(Duration::from_secs(5), || async {
            with_basic(addr, Some("bob:open-sesame")).await.status == 401
        })
        .await,
        "a removed user is refused"
    );
    assert_eq!(with_basic(addr, Some("ann:secret")).await.status, 200);
}

/// Client address rules: the test client (127.0.0.1) denied gets 403 before any other
/// check; an edit that allows it lets it through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_address_rules_apply_live() {
    let port = free_port();
    let a = echo("a").await;
    let rules = |allow: &str, deny: &str| {
        format!(
            "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {{name: ips}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
  ipRules: {{allow: [{allow}], deny: [{deny}]}}
"
        )
    };
    let gw = Gateway::start(&[
        ("app.yaml", manifests(port, &backend("default", "a", &[a]))),
        ("policy.yaml", rules("10.0.0.0/8", "")),
    ])
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, "x").await.status == 403
        })
        .await,
        "127.0.0.1 is not in the allowed networks"
    );
    gw.write(
        "policy.yaml",
        &rules("10.0.0.0/8, 127.0.0.0/8", "127.0.0.2"),
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, "x").await.status == 200
        })
        .await,
        "127.0.0.1 allowed after the edit"
    );
    gw.write("policy.yaml", &rules("127.0.0.0/8", "127.0.0.1"));
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, "x").await.status == 403
        })
        .await,
        "deny wins over allow"
    );
}

/// `weir.dev/trusted-proxies` on a Gateway: from a trusted peer (the test client,
/// 127.0.0.1) the client is the rightmost untrusted `X-Forwarded-For` address, which
/// `ipRules` then judge; without the annotation the header is not believed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_address_through_trusted_proxies() {
    let port = free_port();
    let a = echo("a").await;
    let with_trusted = |trusted: bool| {
        let annotations = if trusted {
            "annotations: {weir.dev/trusted-proxies: \"127.0.0.0/8, 10.0.0.0/8\"}"
        } else {
            "annotations: {}"
        };
        manifests(port, &backend("default", "a", &[a])).replacen(
            "metadata: {name: gw}",
            &format!("metadata:\n  name: gw\n  {annotations}"),
            1,
        )
    };
    let policy = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: ips}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  ipRules: {deny: [203.0.113.0/24]}
";
    let gw = Gateway::start(&[
        ("app.yaml", with_trusted(true)),
        ("policy.yaml", policy.to_string()),
    ])
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let from = |xff: &'static str| async move {
        let req = get("app.test", "/")
            .header("x-forwarded-for", xff)
            .body(http_body_util::Empty::new())
            .unwrap();
        send_http1(addr, req).await.unwrap().status
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            from("203.0.113.5").await == 403
        })
        .await,
        "the forwarded client is denied"
    );
    assert_eq!(from("198.51.100.1").await, 200);
    assert_eq!(
        from("203.0.113.5, 10.2.3.4").await,
        403,
        "trusted hop skipped"
    );
    assert_eq!(
        from("203.0.113.5, 198.51.100.1").await,
        200,
        "rightmost untrusted"
    );

    // Without trusted proxies the header is not believed: the peer (127.0.0.1) is the
    // client.
    gw.write("app.yaml", &with_trusted(false));
    assert!(
        eventually(Duration::from_secs(5), || async {
            from("203.0.113.5").await == 200
        })
        .await,
        "X-Forwarded-For ignored"
    );
}

fn metric(metrics: &str, sample: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// A TCP health check on a Backend, from a file: of a Backend's two endpoints, the one
/// whose port is closed is taken out by its probes (no client request goes there, so
/// passive outlier detection never sees it fail), and gets traffic once it listens.
/// Removing the policy stops the probers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_on_a_backend_takes_a_dead_endpoint_out_and_back() {
    let port = free_port();
    let a = echo("a").await;
    let dead_port = free_port();
    let dead = std::net::SocketAddr::from(([127, 0, 0, 1], dead_port));
    let policy = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: health}
spec:
  targetRefs: [{group: weir.dev, kind: Backend, name: a}]
  healthCheck: {type: TCP, interval: 100ms, timeout: 100ms, unhealthyThreshold: 1}
"
    .to_string();
    let gw = Gateway::start(&[
        (
            "app.yaml",
            manifests(port, &backend("default", "a", &[a, dead])),
        ),
        ("policy.yaml", policy),
    ])
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let unhealthy = |n: f64| {
        let gw = &gw;
        move || async move {
            let m = gw.admin_get("/metrics").await.body;
            metric(&m, "weir_upstream_unhealthy_endpoints") == Some(n)
        }
    };
    assert!(
        eventually(Duration::from_secs(5), unhealthy(1.0)).await,
        "the closed port is taken out"
    );
    let m = gw.admin_get("/metrics").await.body;
    assert_eq!(metric(&m, "weir_upstream_health_probers"), Some(2.0), "{m}");
    for _ in 0..50 {
        let r = call(addr, "c").await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.echo_name(), Some("a"));
    }
    let m = gw.admin_get("/metrics").await.body;
    assert_eq!(metric(&m, "weir_upstream_ejections_total"), Some(0.0));
    let config = gw.admin_get("/config").await.body;
    assert!(config.contains("health_check"), "{config}");

    // The endpoint comes up: probes bring it back and it gets traffic.
    let l = tokio::net::TcpListener::bind(dead).await.unwrap();
    tokio::spawn(weir::echo::serve(l, "b".into()));
    assert!(
        eventually(Duration::from_secs(5), unhealthy(0.0)).await,
        "the endpoint is back"
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            call(addr, "c").await.echo_name() == Some("b")
        })
        .await,
        "the recovered endpoint gets traffic"
    );

    // Removing the policy stops the probers.
    gw.remove("policy.yaml");
    assert!(
        eventually(Duration::from_secs(5), || async {
            let m = gw.admin_get("/metrics").await.body;
            metric(&m, "weir_upstream_health_probers") == Some(0.0)
        })
        .await,
        "probers stop with their policy"
    );
}

/// A circuit breaker on a Backend, from a file: with one request in flight (the echo
/// backend's `/delay/1000`), the next is answered 503 at once naming the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_circuit_breaker_on_a_backend_refuses_the_excess_at_once() {
    let port = free_port();
    let a = echo("a").await;
    let policy = "apiVersion: weir.dev/v1alpha1
kind: TrafficPolicy
metadata: {name: breaker}
spec:
  targetRefs: [{group: weir.dev, kind: Backend, name: a}]
  circuitBreaker: {maxRequests: 1}
"
    .to_string();
    let gw = Gateway::start(&[
        ("app.yaml", manifests(port, &backend("default", "a", &[a]))),
        ("policy.yaml", policy),
    ])
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    // The policy is applied once a request beside a held one is refused.
    assert!(
        eventually(Duration::from_secs(5), || async {
            let held = tokio::spawn(http1(addr, "app.test", "/delay/500"));
            tokio::time::sleep(Duration::from_millis(100)).await;
            let r = http1(addr, "app.test", "/").await.unwrap();
            let refused = r.status == 503;
            let held = held.await.unwrap().unwrap();
            // (Had the held request been delayed past the probe, it would be the one
            // refused: only a refused probe says which was in flight.)
            if refused {
                assert_eq!(held.status, 200);
                assert_eq!(r.headers["weir-circuit-open"], "cluster_max_requests");
            }
            refused
        })
        .await,
        "the breaker applies"
    );
    let m = gw.admin_get("/metrics").await.body;
    assert!(
        metric(
            &m,
            "weir_upstream_circuit_open_total{reason=\"cluster_max_requests\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{m}"
    );
    // Without a request in flight, requests go through.
    assert_eq!(http1(addr, "app.test", "/").await.unwrap().status, 200);
}
