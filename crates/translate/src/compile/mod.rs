//! Pure per-object compilation: one object (plus what it references in the [`Store`])
//! → validated state, IR rules and statuses. Nothing here keeps state between calls;
//! the incremental bookkeeping lives in `crate::incremental` and `crate::translator`.
//!
//! [`Store`]: crate::store::Store

pub(crate) mod authz;
pub(crate) mod backend;
pub(crate) mod backend_client;
pub(crate) mod backend_policy;
pub(crate) mod backend_ref;
pub(crate) mod backend_tls;
pub(crate) mod cors;
pub(crate) mod duration;
pub(crate) mod ext_auth;
pub(crate) mod fields;
pub(crate) mod frontend;
pub(crate) mod gateway;
pub(crate) mod gateway_status;
pub(crate) mod grpc_route;
pub(crate) mod http_route;
pub(crate) mod ingress;
pub(crate) mod ingress_canary;
pub(crate) mod ingress_nginx;
pub(crate) mod ingress_nginx_reading;
pub(crate) mod ingress_nginx_tls;
pub(crate) mod jwt;
pub(crate) mod l4_route;
pub(crate) mod listener;
pub(crate) mod order;
pub(crate) mod outlier;
pub(crate) mod pem;
pub(crate) mod policy;
pub(crate) mod route_kind;
pub(crate) mod rules;
pub(crate) mod settings;
pub(crate) mod status;
pub(crate) mod tls;
