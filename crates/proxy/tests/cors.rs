//! The HTTPRoute CORS filter in the data plane: preflights from allowed origins answered
//! here (the backend never sees them), refused for other origins, actual requests
//! forwarded with the CORS headers only for allowed origins, `*` lists and credentials.

mod support;

use std::sync::Arc;

use http::Method;
use support::*;
use weir_model::{
    Cors, CorsNames, CorsOrigin, Filter, PathMatch, Protocol, RequestMatch, RouteKind, RouteRef,
    RouteRule, Timeouts, UpstreamProtocol,
};

fn cors_rule(prefix: &str, cors: Cors) -> Arc<RouteRule> {
    Arc::new(RouteRule::new(
        RouteRef {
            kind: RouteKind::HttpRoute,
            namespace: "default".into(),
            name: "cors".into(),
            rule: 0,
        },
        RequestMatch {
            path: PathMatch::Prefix(prefix.into()),
            headers: vec![],
            query: vec![],
            method: None,
        },
        vec![Filter::Cors(Arc::new(cors))],
        forward(&[("c", 1)]),
        Timeouts::default(),
    ))
}

fn names(v: &[&str]) -> CorsNames {
    CorsNames::Listed(v.iter().map(|s| (*s).into()).collect())
}

/// `/listed`: the conformance suite's first route; `/any`: every list `*`, credentials
/// allowed; `/any-anon`: the same without credentials.
async fn proxy(backend: &Backend) -> Proxy {
    let listed = Cors {
        allow_origins: vec![
            CorsOrigin::Exact("https://www.foo.com".into()),
            CorsOrigin::Wildcard {
                prefix: "https://".into(),
                suffix: ".bar.com".into(),
            },
        ],
        allow_methods: names(&["GET", "OPTIONS"]),
        allow_headers: names(&["x-header-1", "x-header-2"]),
        expose_headers: names(&["x-header-3", "x-header-4"]),
        allow_credentials: true,
        max_age: 3600,
    };
    let any = |allow_credentials| Cors {
        allow_origins: vec![CorsOrigin::Any],
        allow_methods: CorsNames::Any,
        allow_headers: CorsNames::Any,
        expose_headers: CorsNames::Any,
        allow_credentials,
        max_age: 5,
    };
    Proxy::start(vec![
        listener(Protocol::Http),
        vhost(
            Some("c.test"),
            vec![
                cors_rule("/listed", listed),
                cors_rule("/any-anon", any(false)),
                cors_rule("/any", any(true)),
                rule("/", forward(&[("c", 1)])),
            ],
        ),
        cluster("c", &[backend.addr], UpstreamProtocol::Http1),
    ])
    .await
}

fn header<'a>(r: &'a Resp, name: &str) -> Option<&'a str> {
    r.headers.get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test]
async fn preflights_are_answered_here_for_allowed_origins_only() {
    let backend = Backend::start("b").await;
    let p = proxy(&backend).await;
    let mut c = Conn::h1(p.addr).await;
    for origin in [
        "https://www.foo.com",
        "https://www.bar.com",
        "https://xpto.www.bar.com",
    ] {
        let r = c
            .request(
                Method::OPTIONS,
                "c.test",
                "/listed",
                &[
                    ("origin", origin),
                    ("access-control-request-method", "GET"),
                    ("access-control-request-headers", "x-header-1"),
                ],
            )
            .await;
        assert_eq!(r.status, 204, "{origin}");
        assert_eq!(header(&r, "access-control-allow-origin"), Some(origin));
        assert_eq!(
            header(&r, "access-control-allow-methods"),
            Some("GET, OPTIONS")
        );
        assert_eq!(
            header(&r, "access-control-allow-headers"),
            Some("x-header-1, x-header-2")
        );
        assert_eq!(
            header(&r, "access-control-expose-headers"),
            Some("x-header-3, x-header-4")
        );
        assert_eq!(header(&r, "access-control-max-age"), Some("3600"));
        assert_eq!(header(&r, "access-control-allow-credentials"), Some("true"));
        assert_eq!(header(&r, "vary"), Some("origin"));
        assert_eq!(r.body, "");
    }
    // Another origin (a suffix without the dot, another scheme): refused, no CORS headers.
    for origin in [
        "https://foobar.com",
        "https://bar.com",
        "http://www.foo.com",
    ] {
        let r = c
            .request(
                Method::OPTIONS,
                "c.test",
                "/listed",
                &[("origin", origin), ("access-control-request-method", "GET")],
            )
            .await;
        assert_eq!(r.status, 403, "{origin}");
        assert_eq!(header(&r, "access-control-allow-origin"), None);
        assert_eq!(header(&r, "access-control-allow-methods"), None);
    }
    assert_eq!(backend.connections(), 0, "no preflight reached the backend");
}

#[tokio::test]
async fn actual_requests_get_the_headers_for_allowed_origins() {
    let backend = Backend::start("b").await;
    let p = proxy(&backend).await;
    let mut c = Conn::h1(p.addr).await;
    let r = c
        .request(
            Method::GET,
            "c.test",
            "/listed",
            &[("origin", "https://www.bar.com")],
        )
        .await;
    assert_eq!((r.status, r.backend()), (200, "b"));
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        Some("https://www.bar.com")
    );
    assert_eq!(header(&r, "access-control-allow-credentials"), Some("true"));
    assert_eq!(
        header(&r, "access-control-expose-headers"),
        Some("x-header-3, x-header-4")
    );
    // Preflight-only headers are not on actual responses.
    assert_eq!(header(&r, "access-control-allow-methods"), None);
    assert_eq!(header(&r, "access-control-max-age"), None);
    // An OPTIONS without Access-Control-Request-Method is an actual request: forwarded.
    let r = c
        .request(
            Method::OPTIONS,
            "c.test",
            "/listed",
            &[("origin", "https://www.foo.com")],
        )
        .await;
    assert_eq!((r.status, r.backend()), (200, "b"));
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        Some("https://www.foo.com")
    );
    // Another origin, or none: forwarded untouched.
    for h in [&[("origin", "https://foobar.com")][..], &[]] {
        let r = c.request(Method::GET, "c.test", "/listed", h).await;
        assert_eq!((r.status, r.backend()), (200, "b"));
        assert_eq!(header(&r, "access-control-allow-origin"), None);
        assert_eq!(header(&r, "access-control-allow-credentials"), None);
    }
    // A rule without the filter adds nothing.
    let r = c
        .request(
            Method::GET,
            "c.test",
            "/other",
            &[("origin", "https://www.foo.com")],
        )
        .await;
    assert_eq!(header(&r, "access-control-allow-origin"), None);
}

#[tokio::test]
async fn star_lists_answer_what_was_asked_and_credentials_only_when_allowed() {
    let backend = Backend::start("b").await;
    let p = proxy(&backend).await;
    let mut c = Conn::h1(p.addr).await;
    let preflight = [
        ("origin", "https://other.foo.com:12345"),
        ("access-control-request-method", "PUT"),
        ("access-control-request-headers", "x-header-1, x-header-2"),
    ];
    for (path, credentials) in [("/any", Some("true")), ("/any-anon", None)] {
        let r = c.request(Method::OPTIONS, "c.test", path, &preflight).await;
        assert_eq!(r.status, 204, "{path}");
        // The origin is echoed, never `*` (valid with credentials too).
        assert_eq!(
            header(&r, "access-control-allow-origin"),
            Some("https://other.foo.com:12345")
        );
        assert_eq!(header(&r, "access-control-allow-methods"), Some("PUT"));
        assert_eq!(
            header(&r, "access-control-allow-headers"),
            Some("x-header-1, x-header-2")
        );
        assert_eq!(header(&r, "access-control-max-age"), Some("5"));
        assert_eq!(
            header(&r, "access-control-allow-credentials"),
            credentials,
            "{path}"
        );
        // A preflight has no headers of its own to list with credentials.
        let star = credentials.is_none().then_some("*");
        assert_eq!(header(&r, "access-control-expose-headers"), star);
        let r = c
            .request(Method::GET, "c.test", path, &[preflight[0]])
            .await;
        assert_eq!((r.status, r.backend()), (200, "b"));
        assert_eq!(
            header(&r, "access-control-allow-credentials"),
            credentials,
            "{path}"
        );
        // `*` exposes every header; with credentials browsers would read it as a name,
        // so the response's own header names are listed.
        let exposed = header(&r, "access-control-expose-headers").unwrap();
        if credentials.is_some() {
            assert!(exposed.split(", ").any(|n| n == "x-backend"), "{exposed}");
        } else {
            assert_eq!(exposed, "*");
        }
    }
}
