//! Every IR resource the translator builds from the golden inputs survives the wire:
//! encoded, decoded and rebuilt, it has the same key and the same content hash.

use weir_model::{Protocol, Resource, ResourceKey};
use weir_xds::convert::{
    key_from_wire, key_to_wire, resource_from_wire, resource_to_wire, version_of,
};

use weir_model::{CorsNames, CorsOrigin};

mod common;

fn golden_resources() -> Vec<Resource> {
    common::golden_inputs()
        .into_iter()
        .flat_map(|(_, r)| r)
        .collect()
}

#[test]
fn every_golden_resource_round_trips() {
    let resources = golden_resources();
    let kinds = |f: fn(&Resource) -> bool| resources.iter().filter(|r| f(r)).count();
    assert!(kinds(|r| matches!(r, Resource::VirtualHost(_))) > 10);
    assert!(kinds(|r| matches!(r, Resource::Certificate(_))) > 0);
    assert!(kinds(|r| matches!(r, Resource::Sni(_))) > 0);
    assert!(kinds(|r| matches!(r, Resource::Cluster(_))) > 0);
    assert!(kinds(|r| matches!(r, Resource::L4Route(_))) > 3);
    assert!(kinds(|r| matches!(r, Resource::Policy(p) if p.rate_limit.is_some())) >= 2);
    assert!(kinds(|r| matches!(r, Resource::Policy(p) if p.retry.is_some())) >= 1);
    // Retry settings of version 3 (a body replay limit, non-idempotent methods).
    assert!(
        kinds(|r| matches!(r, Resource::Policy(p)
        if p.retry.as_ref().is_some_and(|r| r.non_idempotent && r.replay_body == 1024)))
            >= 1
    );
    assert!(kinds(|r| matches!(r, Resource::Policy(p) if p.global_rate_limit.is_some())) >= 1);
    assert!(
        kinds(|r| matches!(r, Resource::Policy(p)
        if p.api_key_auth.as_ref().is_some_and(|(_, a)| a.keys.len() == 3)))
            >= 1
    );
    // JWT keys of every kind (RSA, EC P-256 and P-384, Ed25519).
    assert!(
        kinds(|r| matches!(r, Resource::Policy(p)
        if p.jwt_auth.as_ref().is_some_and(|(_, j)| j.providers.iter().map(|p| p.keys.len()).sum::<usize>() == 4)))
            >= 1
    );
    // Policies of a Service and a Backend: HTTP and gRPC health checks, circuit breaking.
    let backend_policy = |f: fn(&weir_model::Policy) -> bool| {
        resources
            .iter()
            .filter(|r| {
                matches!(r, Resource::Policy(p)
                if matches!(p.target, weir_model::PolicyTarget::Backend { .. }) && f(p))
            })
            .count()
    };
    assert!(
        backend_policy(|p| p
            .circuit_breaker
            .is_some_and(|c| c.endpoint.max_connections.is_some()))
            >= 1
    );
    assert!(
        backend_policy(|p| p.health_check.as_ref().is_some_and(
            |h| matches!(h.probe, weir_model::HealthProbe::Http { ref host, .. } if host.is_some())
        )) >= 1
    );
    assert!(
        backend_policy(|p| p
            .health_check
            .as_ref()
            .is_some_and(|h| matches!(h.probe, weir_model::HealthProbe::Grpc { .. })))
            >= 1
    );
    // GRPCRoute rules (their RouteRef kind has a wire value of its own).
    assert!(
        kinds(|r| matches!(r, Resource::VirtualHost(v)
        if v.rules.iter().any(|x| x.route.kind == weir_model::RouteKind::GrpcRoute)))
            > 0
    );
    // UDPRoute L4 routes (their RouteRef kind has a wire value of its own).
    assert!(
        kinds(|r| matches!(r, Resource::L4Route(l)
        if l.route.kind == weir_model::RouteKind::UdpRoute))
            > 0
    );
    // TLSRoutes on Terminate listeners, and CORS filters of every origin and list shape.
    assert!(
        kinds(|r| matches!(r, Resource::L4Route(l) if l.mode == weir_model::L4Mode::Terminate))
            >= 3
    );
    let cors = |f: fn(&weir_model::Cors) -> bool| {
        resources
            .iter()
            .filter(|r| {
                matches!(r, Resource::VirtualHost(v) if v.rules.iter().any(|x| x.filters.iter()
                    .any(|f2| matches!(f2, weir_model::Filter::Cors(c) if f(c)))))
            })
            .count()
    };
    assert!(cors(|c| c.allow_origins.contains(&CorsOrigin::Any)) > 0);
    assert!(cors(|c| c.allow_methods == CorsNames::Any && c.allow_headers == CorsNames::Any) > 0);
    assert!(cors(|c| c.allow_credentials && !c.expose_headers.is_empty()) > 0);
    for protocol in [
        Protocol::TlsPassthrough,
        Protocol::TlsTerminate,
        Protocol::Tcp,
        Protocol::Udp,
        Protocol::Https,
    ] {
        assert!(
            resources
                .iter()
                .any(|r| matches!(r, Resource::Listener(l) if l.protocol == protocol)),
            "{protocol:?}"
        );
    }
    for r in &resources {
        let w = resource_to_wire(r);
        assert_eq!(w.version, version_of(r));
        let back = resource_from_wire(&w).unwrap_or_else(|e| panic!("{:?}: {e}", r.key()));
        assert_eq!(back.key(), r.key());
        assert_eq!(version_of(&back), version_of(r), "{:?}", r.key());
        if let (Resource::Certificate(a), Resource::Certificate(b)) = (r, &back) {
            assert_eq!(a.key_pem(), b.key_pem());
            assert_eq!(a.chain_pem(), b.chain_pem());
            // A canonical chain arrives packed, as the translator packs it.
            assert_eq!(a.as_packed().is_some(), b.as_packed().is_some());
        }
        let k: ResourceKey = key_from_wire(&key_to_wire(&r.key())).unwrap();
        assert_eq!(k, r.key());
    }
}

/// What a controller sends a data plane of an earlier push protocol version
/// (`for_version`) is accepted by that release's hash check, every golden resource and
/// every version served; and a data plane that predates version 3 gets retries without
/// its settings.
#[test]
fn every_golden_resource_reaches_earlier_versions_with_their_hashes() {
    use weir_xds::convert::{for_version, resource_from_wire_as, sent_to_version};
    for version in 0..weir_xds::PROTOCOL_VERSION {
        for r in golden_resources() {
            if !sent_to_version(&r.key(), version) || weir_xds::convert::withheld(&r, version) {
                continue;
            }
            let sent = for_version(&r, version);
            let w = resource_to_wire(&sent);
            let back = resource_from_wire_as(&w, version)
                .unwrap_or_else(|e| panic!("version {version}, {:?}: {e}", r.key()));
            if version < 3
                && let Resource::Policy(p) = &back
                && let Some(retry) = &p.retry
            {
                assert!(
                    !retry.non_idempotent
                        && retry.replay_body == weir_model::Retry::DEFAULT_REPLAY_BODY
                );
            }
        }
    }
}

#[test]
fn a_tampered_resource_is_refused_with_its_field() {
    let r = golden_resources()
        .into_iter()
        .find(|r| matches!(r, Resource::VirtualHost(v) if !v.rules.is_empty()))
        .unwrap();
    let mut w = resource_to_wire(&r);
    // Same version, different content: the rebuilt hash gives it away.
    if let Some(weir_xds::proto::resource::Resource::VirtualHost(v)) = &mut w.resource {
        v.rules[0].route.as_mut().unwrap().name.push('x');
    }
    let e = resource_from_wire(&w).unwrap_err();
    assert_eq!(e.field, "version");
    // The refusal can still name the resource to the controller.
    assert_eq!(
        weir_xds::convert::key_of_refused(&w),
        Some(weir_xds::convert::key_to_wire(&r.key()))
    );
    // An invalid regex names its field.
    let mut w = resource_to_wire(&r);
    if let Some(weir_xds::proto::resource::Resource::VirtualHost(v)) = &mut w.resource {
        v.rules[0].r#match.as_mut().unwrap().path =
            Some(weir_xds::proto::request_match::Path::Regex("(".into()));
    }
    let e = resource_from_wire(&w).unwrap_err();
    assert_eq!(e.field, "rules[0].match.path.regex");
    // One that does not rebuild at all cannot be named.
    assert_eq!(weir_xds::convert::key_of_refused(&w), None);
}

#[test]
fn listener_settings_round_trip_and_a_zero_head_limit_is_refused() {
    use std::sync::Arc;
    use std::time::Duration;
    use weir_model::{Listener, ListenerKey, ListenerSettings, Protocol};
    let mut settings = ListenerSettings::default();
    settings.timeouts.idle = Duration::from_millis(1500);
    settings.timeouts.body_idle = Duration::ZERO; // disabled
    settings.limits.max_connections_per_client = 7;
    settings.paths.merge_slashes = false;
    let key = ListenerKey::new("127.0.0.1:8080".parse().unwrap());
    let custom = Resource::Listener(Arc::new(Listener::with_settings(
        key,
        Protocol::Http,
        "ns/gw".into(),
        "http".into(),
        settings.clone(),
    )));
    let plain = Resource::Listener(Arc::new(Listener::new(
        key,
        Protocol::Http,
        "ns/gw".into(),
        "http".into(),
    )));
    assert_ne!(version_of(&custom), version_of(&plain));
    for r in [&custom, &plain] {
        let back = resource_from_wire(&resource_to_wire(r)).unwrap();
        assert_eq!(version_of(&back), version_of(r));
        if let (Resource::Listener(a), Resource::Listener(b)) = (r, &back) {
            assert_eq!(a.settings, b.settings);
        }
    }
    // Default settings are not sent at all (what a data plane predating them expects).
    match resource_to_wire(&plain).resource {
        Some(weir_xds::proto::resource::Resource::Listener(l)) => assert!(l.settings.is_none()),
        other => panic!("{other:?}"),
    }
    let mut w = resource_to_wire(&custom);
    if let Some(weir_xds::proto::resource::Resource::Listener(l)) = &mut w.resource {
        l.settings.as_mut().unwrap().max_headers = 0;
    }
    let e = resource_from_wire(&w).unwrap_err();
    assert_eq!(e.field, "settings.max_headers");
}

#[test]
fn a_health_check_with_a_zero_threshold_is_refused_with_its_field() {
    let r = golden_resources()
        .into_iter()
        .find(|r| matches!(r, Resource::Policy(p) if p.health_check.is_some()))
        .unwrap();
    let mut w = resource_to_wire(&r);
    if let Some(weir_xds::proto::resource::Resource::Policy(p)) = &mut w.resource {
        p.health_check.as_mut().unwrap().unhealthy_threshold = 0;
    }
    let e = resource_from_wire(&w).unwrap_err();
    assert_eq!(e.field, "policy.health_check.threshold", "{e}");
}

/// Every load-balancing algorithm survives the wire with its hash; a data plane of version
/// 2 is sent the policy without it, with the hash of the policy that never had one; a bad
/// cookie name on the wire is refused with its field.
#[test]
fn load_balancers_round_trip_and_stay_away_from_version_2() {
    use std::sync::Arc;
    use std::time::Duration;
    use weir_model::{
        BackendKind, GeneratedCookie, HashOn, LoadBalancer, Policy, PolicyTarget, SameSite,
        Timeouts,
    };
    let base = Policy::new(
        PolicyTarget::Backend {
            kind: BackendKind::Service,
            namespace: "ns".into(),
            name: "svc".into(),
        },
        Timeouts::default(),
        None,
        None,
    )
    .with_circuit_breaker(Some(Default::default()));
    let all = [
        LoadBalancer::RoundRobin,
        LoadBalancer::LeastRequest,
        LoadBalancer::LatencyAware,
        LoadBalancer::ConsistentHash(HashOn::Header("x-user".into())),
        LoadBalancer::ConsistentHash(HashOn::SourceIp),
        LoadBalancer::ConsistentHash(HashOn::Cookie {
            name: "sid".into(),
            generate: None,
        }),
        LoadBalancer::ConsistentHash(HashOn::Cookie {
            name: "sid".into(),
            generate: Some(GeneratedCookie {
                ttl: Some(Duration::from_secs(3600)),
                path: "/app".into(),
                same_site: None,
                secure: false,
            }),
        }),
        LoadBalancer::ConsistentHash(HashOn::Cookie {
            name: "sid".into(),
            generate: Some(GeneratedCookie {
                ttl: None,
                path: "/".into(),
                same_site: Some(SameSite::Lax),
                secure: true,
            }),
        }),
        LoadBalancer::ConsistentHash(HashOn::Cookie {
            name: "sid".into(),
            generate: Some(GeneratedCookie {
                ttl: None,
                path: "/".into(),
                same_site: Some(SameSite::None {
                    unless_incompatible: true,
                }),
                secure: false,
            }),
        }),
    ];
    for lb in all {
        let r = Resource::Policy(Arc::new(base.clone().with_load_balancer(Some(lb.clone()))));
        let back = resource_from_wire(&resource_to_wire(&r)).unwrap();
        assert_eq!(version_of(&back), version_of(&r), "{lb:?}");
        let Resource::Policy(p) = &back else {
            panic!("{back:?}")
        };
        assert_eq!(p.load_balancer.as_ref(), Some(&lb));
        let old = weir_xds::convert::for_version(&r, 2);
        let Resource::Policy(p) = &*old else {
            panic!("{old:?}")
        };
        assert_eq!(p.load_balancer, None);
        assert_eq!(p.hash(), base.hash(), "{lb:?}");
    }
    let r = Resource::Policy(Arc::new(base.with_load_balancer(Some(
        LoadBalancer::ConsistentHash(HashOn::Cookie {
            name: "sid".into(),
            generate: None,
        }),
    ))));
    let mut w = resource_to_wire(&r);
    if let Some(weir_xds::proto::resource::Resource::Policy(p)) = &mut w.resource
        && let Some(weir_xds::proto::load_balancer::Algorithm::ConsistentHash(h)) =
            p.load_balancer.as_mut().and_then(|l| l.algorithm.as_mut())
        && let Some(weir_xds::proto::consistent_hash::On::Cookie(c)) = h.on.as_mut()
    {
        c.name = "a b".into();
    }
    let e = resource_from_wire(&w).unwrap_err();
    assert_eq!(
        e.field, "policy.load_balancer.consistent_hash.cookie.name",
        "{e}"
    );
}

/// A global rate limit (push protocol version 3) round-trips, and a data plane of version
/// 2 is sent the policy without it — the local limit beside it kept — with the hash that
/// release computes for what it receives (a rate limit guards no access: no deny-all).
#[test]
fn a_global_rate_limit_is_left_out_for_version_2() {
    use std::sync::Arc;
    use std::time::Duration;
    use weir_model::{
        FailMode, GlobalRateLimit, LocalRateLimit, Policy, PolicyTarget, RateLimitKey, Timeouts,
    };
    let local = LocalRateLimit {
        requests: 5,
        per: Duration::from_secs(1),
        burst: 5,
        key: RateLimitKey::ClientIp,
    };
    let base = Policy::new(
        PolicyTarget::Gateway("ns/gw".into()),
        Timeouts::default(),
        None,
        Some(("ns/local".into(), local)),
    );
    let with_global = base.clone().with_global_rate_limit(Some((
        "ns/global".into(),
        GlobalRateLimit {
            requests: 100,
            window: Duration::from_secs(60),
            key: RateLimitKey::Header("x-tenant".into()),
            fail_mode: FailMode::Closed,
        },
    )));
    let r = Resource::Policy(Arc::new(with_global.clone()));
    let back = resource_from_wire(&resource_to_wire(&r)).unwrap();
    let Resource::Policy(p) = &back else {
        panic!("{back:?}")
    };
    assert_eq!(p.global_rate_limit, with_global.global_rate_limit);
    assert_eq!(version_of(&back), version_of(&r));

    let old = weir_xds::convert::for_version(&r, 2);
    let Resource::Policy(p) = old.as_ref() else {
        panic!("{old:?}")
    };
    assert!(p.global_rate_limit.is_none());
    assert!(p.ip_rules.is_none(), "no deny-all stand-in");
    assert!(p.rate_limit.is_some());
    assert_eq!(p.hash(), base.hash());
    let unchanged = weir_xds::convert::for_version(&r, 3);
    assert!(matches!(unchanged, std::borrow::Cow::Borrowed(_)));
}

/// Authorization rules (push protocol version 3, an access guard) round-trip, and a data
/// plane of version 2 is sent a deny-all stand-in with the hash that release computes.
#[test]
fn authorization_rules_round_trip_and_close_older_data_planes() {
    use std::sync::Arc;
    use weir_model::{
        Authorization, AuthzAction, AuthzHeader, AuthzRule, ClaimMatch, IpNet, IpRules, PathMatch,
        Pattern, Policy, PolicyTarget, StringMatch, Timeouts,
    };
    let rules = Authorization {
        rules: vec![AuthzRule {
            action: AuthzAction::Allow,
            methods: vec!["GET".into()],
            paths: vec![
                PathMatch::Prefix("/api".into()),
                PathMatch::Regex(Pattern::new("/v[0-9]+").unwrap()),
            ],
            headers: vec![
                AuthzHeader {
                    name: "x-team".into(),
                    value: Some(StringMatch::Exact("ops".into())),
                },
                AuthzHeader {
                    name: "x-ticket".into(),
                    value: None,
                },
            ],
            clients: vec![IpNet::parse("10.0.0.0/8").unwrap()],
            claims: vec![ClaimMatch {
                claim: "roles".into(),
                values: vec![Arc::from("admin")],
            }],
        }],
        default: AuthzAction::Deny,
    };
    let base = Policy::new(
        PolicyTarget::Gateway("ns/gw".into()),
        Timeouts::default(),
        None,
        None,
    );
    let p = base
        .clone()
        .with_authorization(Some(("ns/authz".into(), Arc::new(rules))));
    let r = Resource::Policy(Arc::new(p.clone()));
    let back = resource_from_wire(&resource_to_wire(&r)).unwrap();
    let Resource::Policy(b) = &back else {
        panic!("{back:?}")
    };
    assert_eq!(b.authorization, p.authorization);
    assert_eq!(version_of(&back), version_of(&r));
    let old = weir_xds::convert::for_version(&r, 2);
    let Resource::Policy(o) = old.as_ref() else {
        panic!("{old:?}")
    };
    assert!(o.authorization.is_none());
    let (name, deny) = o.ip_rules.as_ref().expect("a deny-all stand-in");
    assert_eq!((&**name, deny.as_ref()), ("ns/authz", &IpRules::deny_all()));
    weir_xds::convert::resource_from_wire_as(&resource_to_wire(&old), 2).unwrap();
}

/// A PROXY protocol listener's settings round-trip (hash included), and the listener is
/// withheld from data planes of version 2 (`convert::withheld`), not from version 3.
#[test]
fn proxy_protocol_settings_round_trip() {
    use std::sync::Arc;
    use weir_model::{IpNet, Listener, ListenerKey, ListenerSettings, Protocol, ProxyProtocol};
    let settings = ListenerSettings {
        proxy_protocol: Some(ProxyProtocol {
            sources: vec![IpNet::parse("10.0.0.0/8").unwrap()],
        }),
        ..ListenerSettings::default()
    };
    let l = Resource::Listener(Arc::new(Listener::with_settings(
        ListenerKey::new(([0, 0, 0, 0], 443).into()),
        Protocol::Https,
        "ns/gw".into(),
        "https".into(),
        settings,
    )));
    let back = resource_from_wire(&resource_to_wire(&l)).unwrap();
    let Resource::Listener(b) = &back else {
        panic!("{back:?}")
    };
    assert_eq!(
        b.settings.proxy_protocol.as_ref().map(|p| p.sources.len()),
        Some(1)
    );
    assert_eq!(version_of(&back), version_of(&l));
    assert!(weir_xds::convert::withheld(&l, 2));
    assert!(!weir_xds::convert::withheld(&l, 3));
}

/// A listener validating client certificates round-trips (CA bytes, mode, hash), and is
/// withheld from data planes of version 3 (`convert::withheld`), not from version 4.
#[test]
fn client_validation_settings_round_trip() {
    use std::sync::Arc;
    use weir_model::{
        ClientValidation, ClientValidationMode, Listener, ListenerKey, ListenerSettings, Protocol,
    };
    for mode in [
        ClientValidationMode::AllowValidOnly,
        ClientValidationMode::AllowInsecureFallback,
    ] {
        let settings = ListenerSettings {
            client_validation: Some(ClientValidation {
                ca_pem: Arc::from(
                    &b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"[..],
                ),
                mode,
            }),
            ..ListenerSettings::default()
        };
        let l = Resource::Listener(Arc::new(Listener::with_settings(
            ListenerKey::new(([0, 0, 0, 0], 443).into()),
            Protocol::Https,
            "ns/gw".into(),
            "https".into(),
            settings.clone(),
        )));
        let back = resource_from_wire(&resource_to_wire(&l)).unwrap();
        let Resource::Listener(b) = &back else {
            panic!("{back:?}")
        };
        assert_eq!(b.settings, settings);
        assert_eq!(version_of(&back), version_of(&l));
        assert!(weir_xds::convert::withheld(&l, 3));
        assert!(!weir_xds::convert::withheld(&l, 4));
    }
    // Without validation nothing changes: the hash is the one of a listener built
    // before the field existed, and no version is refused it.
    let plain = Resource::Listener(Arc::new(Listener::new(
        ListenerKey::new(([0, 0, 0, 0], 443).into()),
        Protocol::Https,
        "ns/gw".into(),
        "https".into(),
    )));
    assert!(!weir_xds::convert::withheld(&plain, 0));
}

/// An Ingress's TLS cluster (`backend-protocol: HTTPS`) and error-page filter
/// (`custom-http-errors`) are version-4 constructs: they round-trip, a cluster without
/// TLS keeps its hash, and a version-3 data plane gets the cluster without endpoints
/// (never plaintext) and the rule without the filter.
#[test]
fn ingress_upstream_tls_and_error_pages_stay_away_from_version_3() {
    use std::sync::Arc;
    use weir_model::{
        Action, Cluster, ClusterKey, Endpoint, EndpointAddr, Filter, HostMatch, InterceptErrors,
        ListenerKey, PathMatch, RequestMatch, RouteKind, RouteRef, RouteRule, Timeouts,
        TrustAnchors, UpstreamProtocol, UpstreamTls, VirtualHost, WeightedBackend,
    };
    let key = ClusterKey("service/shop/api:443/tls-0123".into());
    let endpoints = vec![Endpoint {
        addr: EndpointAddr::Socket("10.0.0.5:8443".parse().unwrap()),
        weight: 1,
    }];
    let plain = Cluster::new(key.clone(), endpoints.clone(), UpstreamProtocol::Http1);
    let tls = Arc::new(UpstreamTls {
        sni: "api.shop.svc".into(),
        hide_sni: true,
        client_certificate: Some(Arc::new(weir_model::Certificate::new(
            Arc::from(&b"chain"[..]),
            Arc::from(&b"key"[..]),
        ))),
        trust: TrustAnchors::Unverified,
        subject_names: Vec::new(),
        policy: "shop/web (Ingress annotations)".into(),
    });
    let with_tls = plain.clone().with_tls(Some(tls.clone()));
    assert_ne!(with_tls.hash(), plain.hash());
    assert_eq!(plain.clone().with_tls(None).hash(), plain.hash());
    let r = Resource::Cluster(Arc::new(with_tls));
    let back = resource_from_wire(&resource_to_wire(&r)).unwrap();
    let Resource::Cluster(c) = &back else {
        panic!("{back:?}")
    };
    assert_eq!(c.tls.as_deref(), Some(&*tls));
    assert_eq!(version_of(&back), version_of(&r));
    let old = weir_xds::convert::for_version(&r, 3);
    let Resource::Cluster(c) = old.as_ref() else {
        panic!("{old:?}")
    };
    assert!(c.tls.is_none() && c.endpoints.is_empty(), "{c:?}");

    let errors = Filter::InterceptErrors(Arc::new(InterceptErrors {
        codes: vec![404, 503],
        no_endpoints: true,
        cluster: ClusterKey("service/shop/errors:80".into()),
    }));
    let rule = |filters: Vec<Filter>| {
        Arc::new(RouteRule::new(
            RouteRef {
                kind: RouteKind::Ingress,
                namespace: "shop".into(),
                name: "web".into(),
                rule: 0,
            },
            RequestMatch {
                path: PathMatch::Prefix("/".into()),
                headers: vec![],
                query: vec![],
                method: None,
            },
            filters,
            Action::Forward(vec![WeightedBackend {
                filters: Vec::new(),
                cluster: key.clone(),
                weight: 1,
            }]),
            Timeouts::default(),
        ))
    };
    let listener = ListenerKey::new("127.0.0.1:8080".parse().unwrap());
    let host = HostMatch::exact("shop.test".into());
    let vh = |filters| VirtualHost::new(listener, host.clone(), vec![rule(filters)]);
    let r = Resource::VirtualHost(Arc::new(vh(vec![errors.clone()])));
    let back = resource_from_wire(&resource_to_wire(&r)).unwrap();
    let Resource::VirtualHost(v) = &back else {
        panic!("{back:?}")
    };
    assert_eq!(v.rules[0].filters, vec![errors]);
    assert_eq!(version_of(&back), version_of(&r));
    let old = weir_xds::convert::for_version(&r, 3);
    let Resource::VirtualHost(v) = old.as_ref() else {
        panic!("{old:?}")
    };
    assert!(v.rules[0].filters.is_empty());
    assert_eq!(v.hash(), vh(Vec::new()).hash());
}
