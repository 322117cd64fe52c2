//! Statuses of kinds that are computed from the object alone.

use weir_api::{Condition, ConditionType, GatewayClassStatus, Object, ObjectStatus, Reason};

use crate::TranslatorOptions;
use crate::compile::backend;
use crate::compile::fields::direct_response_of;
use crate::compile::tls;
use crate::store::Store;

/// Gateway API features weir implements, reported in GatewayClass `status.supportedFeatures`:
/// exactly those whose upstream conformance tests weir passes (CONFORMANCE.md), sorted by
/// name as the API expects.
pub(crate) const SUPPORTED_FEATURES: &[&str] = &[
    "BackendTLSPolicy",
    "BackendTLSPolicySANValidation",
    "GRPCRoute",
    "GRPCRouteNamedRouteRule",
    "Gateway",
    "GatewayAddressEmpty",
    "GatewayBackendClientCertificate",
    "GatewayFrontendClientCertificateValidation",
    "GatewayFrontendClientCertificateValidationInsecureFallback",
    "GatewayHTTPListenerIsolation",
    "GatewayHTTPSListenerDetectMisdirectedRequests",
    "GatewayPort8080",
    "GatewayStaticAddresses",
    "HTTPRoute",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteBackendRequestHeaderModification",
    "HTTPRouteBackendTimeout",
    "HTTPRouteCORS",
    "HTTPRouteDestinationPortMatching",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteParentRefPort",
    "HTTPRoutePathRedirect",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestMultipleMirrors",
    "HTTPRouteRequestPercentageMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    "HTTPRouteRetry",
    "HTTPRouteSchemeRedirect",
    "ListenerSet",
    "ReferenceGrant",
    "TCPRoute",
    "TLSRoute",
    "TLSRouteModeMixed",
    "TLSRouteModeTerminate",
    "UDPRoute",
];

/// Claimed only by a controller whose provisioned objects carry a Gateway's
/// `infrastructure` labels and annotations (`TranslatorOptions::provisions_infrastructure`).
pub(crate) const INFRASTRUCTURE_FEATURE: &str = "GatewayInfrastructure";

/// The features a GatewayClass of ours lists (sorted).
fn supported_features(opts: &TranslatorOptions) -> Vec<String> {
    let mut f: Vec<String> = SUPPORTED_FEATURES.iter().map(|s| s.to_string()).collect();
    if opts.provisions_infrastructure {
        f.push(INFRASTRUCTURE_FEATURE.into());
        f.sort();
    }
    f
}

/// The status of an object whose status depends on nothing else; `None` when it has none.
pub(crate) fn standalone_status(
    store: &Store,
    opts: &TranslatorOptions,
    obj: &Object,
) -> Option<ObjectStatus> {
    let controller = &*opts.controller_name;
    let problems = match obj {
        Object::GatewayClass(c) => {
            if c.spec.controller_name != controller {
                return None;
            }
            return Some(ObjectStatus::GatewayClass(GatewayClassStatus {
                conditions: vec![Condition::new(
                    ConditionType::Accepted,
                    true,
                    Reason::Accepted,
                    "GatewayClass accepted",
                    c.metadata.generation(),
                )],
                supported_features: supported_features(opts),
            }));
        }
        Object::Secret(s) => {
            if !tls::looks_like_tls(s) {
                return None;
            }
            match store.certificate(&s.metadata.namespace, &s.metadata.name) {
                Some(Err(m)) => vec![m.clone()],
                _ => Vec::new(),
            }
        }
        Object::Backend(b) => backend::backend_endpoints(b).2,
        Object::EndpointSlice(s) => backend::slice_problems(s),
        Object::DirectResponse(d) => direct_response_of(d).err().unwrap_or_default(),
        _ => return None,
    };
    (!problems.is_empty()).then_some(ObjectStatus::Problems(problems))
}

#[cfg(test)]
mod tests {
    #[test]
    fn supported_features_are_sorted_and_unique() {
        let f = super::SUPPORTED_FEATURES;
        assert!(f.windows(2).all(|w| w[0] < w[1]), "{f:?}");
        let mut opts = crate::TranslatorOptions::default();
        assert!(!super::supported_features(&opts).contains(&"GatewayInfrastructure".into()));
        opts.provisions_infrastructure = true;
        let f = super::supported_features(&opts);
        assert!(f.windows(2).all(|w| w[0] < w[1]), "{f:?}");
        assert!(f.contains(&"GatewayInfrastructure".into()));
    }
}
