//! Statuses weir reports, shaped like the Kubernetes status subresources so that the
//! Kubernetes provider can write them as they are.

use std::borrow::Cow;

use serde::Serialize;

use crate::gateway::ParentReference;

/// An enum whose variants are written in statuses by their own names.
macro_rules! named {
    ($(#[$m:meta])* pub enum $name:ident { $($(#[$vm:meta])* $v:ident,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vm])* $v,)* }

        impl $name {
            /// The name as written in a status (the variant's name).
            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => stringify!($v),)* }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

named! {
    /// A condition type weir reports (Gateway API's names).
    pub enum ConditionType {
        /// The object (a listener; a route for one parent) is accepted.
        Accepted,
        /// The object's configuration is in the data plane.
        Programmed,
        /// Every reference (certificates, backends) resolved.
        ResolvedRefs,
        /// A listener conflicts with another on its port.
        Conflicted,
        /// XListenerSets are attached to a Gateway (one that allows them).
        AttachedListenerSets,
        /// A Gateway serves clients without a valid certificate on a listener that
        /// validates them (`spec.tls.frontend` mode `AllowInsecureFallback`).
        InsecureFrontendValidationMode,
    }
}

named! {
    /// A condition reason weir reports: the one list of what weir can say about an
    /// object (Gateway API's reasons, plus weir's `Invalid` for a refused resource).
    pub enum Reason {
        /// Accepted.
        Accepted,
        /// Programmed.
        Programmed,
        /// All references resolved.
        ResolvedRefs,
        /// A listener has no conflicts.
        NoConflicts,
        /// Not programmed: invalid, or refused by a data plane.
        Invalid,
        /// A field has a value weir does not support.
        UnsupportedValue,
        /// A listener's protocol is not supported.
        UnsupportedProtocol,
        /// A Gateway address type or value is not supported.
        UnsupportedAddress,
        /// The requested addresses cannot be served.
        AddressNotUsable,
        /// A Gateway's `infrastructure.parametersRef` names an object that does not exist
        /// or a kind weir does not take.
        InvalidParameters,
        /// A listener's port is used by another Gateway.
        PortUnavailable,
        /// Another listener serves the same hostname on the port.
        HostnameConflict,
        /// Another listener uses the port with another protocol.
        ProtocolConflict,
        /// A listener's `allowedRoutes.kinds` names a kind weir does not serve there.
        InvalidRouteKinds,
        /// A listener's certificate reference is unusable.
        InvalidCertificateRef,
        /// A cross-namespace reference without a ReferenceGrant.
        RefNotPermitted,
        /// A CA certificate reference names a kind weir does not read CAs from.
        InvalidCACertificateKind,
        /// Client certificate validation falls back to insecure (`AllowInsecureFallback`).
        ConfigurationChanged,
        /// A backend reference of an unsupported kind.
        InvalidKind,
        /// A referenced backend does not exist.
        BackendNotFound,
        /// An XListenerSet's parent Gateway is missing or not accepted.
        ParentNotAccepted,
        /// An XListenerSet from a namespace its Gateway does not allow.
        NotAllowed,
        /// An XListenerSet without a valid listener.
        ListenersNotValid,
        /// A Gateway's `allowedListeners` allows no namespace.
        ListenerSetsNotAllowed,
        /// XListenerSets are attached to the Gateway.
        ListenerSetsAttached,
        /// No XListenerSet is attached to the Gateway.
        NoListenerSetsAttached,
        /// No listener matches a route's parentRef (sectionName, port).
        NoMatchingParent,
        /// No matching listener allows the route (namespace or kind).
        NotAllowedByListeners,
        /// No allowed listener's hostname intersects the route's hostnames.
        NoMatchingListenerHostname,
        /// A policy's target does not exist (GEP-713).
        TargetNotFound,
        /// Every field a policy sets is set by an older policy on the same target
        /// (GEP-713).
        Conflicted,
        /// A BackendTLSPolicy or client certificate validation has no usable CA
        /// certificate.
        NoValidCACertificate,
        /// A CA certificate reference names nothing usable.
        InvalidCACertificateRef,
        /// A Gateway's backend client certificate reference names nothing usable.
        InvalidClientCertificateRef,
    }
}

/// A status condition (`metav1.Condition`) of weir's.
///
/// Type, status and reason are always one of weir's names, and most messages are fixed
/// text: none of them is a heap allocation of its own (a condition was four).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// A [`ConditionType`] name, e.g. `Accepted`, `ResolvedRefs`, `Programmed`.
    #[serde(rename = "type")]
    pub type_: &'static str,
    /// `True` or `False`.
    pub status: &'static str,
    /// A [`Reason`] name, e.g. `NotAllowedByListeners`.
    pub reason: &'static str,
    /// Human-readable detail (names the offending field when there is one).
    pub message: Cow<'static, str>,
    /// The object's `metadata.generation` this condition was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Condition {
    /// Builds a condition; `ok` maps to `True`/`False`.
    pub fn new(
        type_: ConditionType,
        ok: bool,
        reason: Reason,
        message: impl Into<Cow<'static, str>>,
        generation: Option<i64>,
    ) -> Self {
        Condition {
            type_: type_.as_str(),
            status: if ok { "True" } else { "False" },
            reason: reason.as_str(),
            message: message.into(),
            observed_generation: generation,
        }
    }

    /// Whether the status is `True`.
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }

    /// Whether this is a condition of type `t`.
    pub fn is(&self, t: ConditionType) -> bool {
        self.type_ == t.as_str()
    }
}

/// GatewayClass status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassStatus {
    /// `Accepted`.
    pub conditions: Vec<Condition>,
    /// Features weir supports (names of Gateway API features).
    pub supported_features: Vec<String>,
}

/// Gateway status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayStatus {
    /// Addresses the Gateway is reachable at.
    pub addresses: Vec<GatewayStatusAddress>,
    /// `Accepted`, `Programmed`.
    pub conditions: Vec<Condition>,
    /// Per listener.
    pub listeners: Vec<ListenerStatus>,
    /// How many ListenerSets and XListenerSets are attached (`status.attachedListenerSets`
    /// of Gateway API v1.5+); `None` when the Gateway allows no sets
    /// (`spec.allowedListeners` unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attached_listener_sets: Option<u32>,
}

/// An address in Gateway status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayStatusAddress {
    /// `IPAddress` or `Hostname`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Address.
    pub value: String,
}

/// Listener status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    /// Listener name.
    pub name: String,
    /// Route kinds accepted by this listener.
    pub supported_kinds: Vec<StatusRouteKind>,
    /// Routes attached.
    pub attached_routes: i32,
    /// `Accepted`, `ResolvedRefs`, `Conflicted`, `Programmed`.
    pub conditions: Vec<Condition>,
}

/// A route kind in listener status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRouteKind {
    /// Group.
    pub group: String,
    /// Kind.
    pub kind: String,
}

/// ListenerSet and XListenerSet status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerSetStatus {
    /// `Accepted`, `Programmed`.
    pub conditions: Vec<Condition>,
    /// Per listener.
    pub listeners: Vec<ListenerEntryStatus>,
}

/// One listener set listener's status (a Gateway listener's, plus its port, which only
/// XListenerSet's status has).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerEntryStatus {
    /// Listener name.
    pub name: String,
    /// Listener port.
    pub port: i32,
    /// Route kinds accepted by this listener.
    pub supported_kinds: Vec<StatusRouteKind>,
    /// Routes attached.
    pub attached_routes: i32,
    /// `Accepted`, `ResolvedRefs`, `Conflicted`, `Programmed`.
    pub conditions: Vec<Condition>,
}

/// HTTPRoute (and other route) status: one entry per parentRef weir owns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteStatus {
    /// Entries written by weir. Entries of other controllers are not represented here
    /// and must be preserved by whoever writes this status.
    pub parents: Vec<RouteParentStatus>,
}

/// A route's status for one parent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentStatus {
    /// The parentRef as written in the route.
    pub parent_ref: ParentReference,
    /// weir's controller name (one buffer shared by every route's status).
    pub controller_name: std::sync::Arc<str>,
    /// `Accepted`, `ResolvedRefs`.
    pub conditions: Vec<Condition>,
}

/// A policy's status (Gateway API `PolicyStatus`): one entry per target weir serves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// Entries written by weir (entries of other controllers are kept by the writer).
    #[schemars(length(max = 16))]
    pub ancestors: Vec<PolicyAncestorStatus>,
}

/// A policy's status for one ancestor (Gateway API `PolicyAncestorStatus`). weir names
/// the target itself as the ancestor (with the `sectionName` of the targetRef).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["ancestorRef", "controllerName"]))]
pub struct PolicyAncestorStatus {
    /// The ancestor.
    #[schemars(schema_with = "crate::crd::opaque_object")]
    pub ancestor_ref: ParentReference,
    /// weir's controller name.
    pub controller_name: String,
    /// `Accepted`.
    #[schemars(schema_with = "crate::crd::opaque_conditions")]
    pub conditions: Vec<Condition>,
}

/// Ingress status (`status.loadBalancer.ingress`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressStatus {
    /// Load balancer addresses (IP or hostname).
    pub addresses: Vec<String>,
}

/// What the translator reports for one object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "status")]
pub enum ObjectStatus {
    /// For a GatewayClass.
    GatewayClass(GatewayClassStatus),
    /// For a Gateway.
    Gateway(GatewayStatus),
    /// For a ListenerSet or an XListenerSet.
    ListenerSet(ListenerSetStatus),
    /// For an HTTPRoute.
    Route(RouteStatus),
    /// For a policy (TrafficPolicy).
    Policy(PolicyStatus),
    /// For an Ingress: its addresses and, since Ingress has no conditions, any problems.
    Ingress {
        /// Load balancer status.
        load_balancer: IngressStatus,
        /// Problems with the Ingress (each names its field); empty when all is well.
        problems: Vec<String>,
    },
    /// For kinds without a Kubernetes status (Secret, Service, Backend, …): problems
    /// that made weir reject or ignore part of the object; empty when all is well.
    Problems(Vec<String>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_written_as_the_variants() {
        let c = Condition::new(
            ConditionType::ResolvedRefs,
            false,
            Reason::RefNotPermitted,
            "m",
            None,
        );
        assert_eq!((c.type_, c.reason), ("ResolvedRefs", "RefNotPermitted"));
        assert!(c.is(ConditionType::ResolvedRefs) && !c.is(ConditionType::Accepted));
        assert_eq!(
            Reason::NoMatchingListenerHostname.to_string(),
            "NoMatchingListenerHostname"
        );
    }
}
