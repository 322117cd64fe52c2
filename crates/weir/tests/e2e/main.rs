//! End-to-end tests: `weir run` in-process on 127.0.0.1 with real sockets, real echo
//! backends and real clients. One test binary, several modules, to keep link time down.

mod support;

mod access_log;
mod admin;
mod allocator;
mod authorization;
mod balancing;
mod client_certs;
mod ext_auth;
mod global_ratelimit;
mod grpc;
mod http1_server;
mod ingress;
mod ingress_nginx;
mod ingress_nginx_answers;
mod ingress_nginx_send;
mod l4;
mod listener_policies;
mod listener_sets;
mod migrate;
mod observability_policy;
mod outlier;
mod policies;
mod policy_cors;
mod proxy_protocol;
mod reload;
mod remote_jwks;
mod request_limits;
mod routing;
mod smuggling;
mod startup;
mod status_page;
mod tls;
mod traces;
mod udp;
