//! Statuses weir reports, shaped like the Kubernetes status subresources so that the
//! Kubernetes provider can write them as they are.

use serde::Serialize;

use crate::gateway::ParentReference;

/// A status condition (`metav1.Condition`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// e.g. `Accepted`, `ResolvedRefs`, `Programmed`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason, e.g. `NotAllowedByListeners`.
    pub reason: String,
    /// Human-readable detail (names the offending field when there is one).
    pub message: String,
    /// The object's `metadata.generation` this condition was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Condition {
    /// Builds a condition; `ok` maps to `True`/`False`.
    pub fn new(
        type_: &str,
        ok: bool,
        reason: &str,
        message: impl Into<String>,
        generation: Option<i64>,
    ) -> Self {
        Condition {
            type_: type_.into(),
            status: if ok { "True" } else { "False" }.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: generation,
        }
    }

    /// Whether the status is `True`.
    pub fn is_true(&self) -> bool {
        self.status == "True"
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

/// XListenerSet status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerSetStatus {
    /// `Accepted`, `Programmed`.
    pub conditions: Vec<Condition>,
    /// Per listener.
    pub listeners: Vec<ListenerEntryStatus>,
}

/// One XListenerSet listener's status (a Gateway listener's, plus its port).
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
    /// weir's controller name.
    pub controller_name: String,
    /// `Accepted`, `ResolvedRefs`.
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
    /// For an XListenerSet.
    ListenerSet(ListenerSetStatus),
    /// For an HTTPRoute.
    Route(RouteStatus),
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
