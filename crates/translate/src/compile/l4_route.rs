//! TLSRoute, TCPRoute and UDPRoute → the target of their `L4Route` resources
//! (independent of the listeners they attach to).

use std::sync::Arc;

use weir_api::{L4RouteRule, ObjectKey, ParentReference, TcpRoute, TlsRoute, UdpRoute};
use weir_model::RouteRef;

use crate::compile::backend_ref::{RouteCtx, l4_backends};
use crate::compile::order::Age;
use crate::compile::route_kind::{
    CompiledRoute, L4Target, Referrer, RouteKind, RouteObject, route_hostnames,
};
use crate::store::Store;

impl RouteObject for TlsRoute {
    const KIND: RouteKind = RouteKind::Tls;

    fn generation(&self) -> Option<i64> {
        self.metadata.generation()
    }

    fn parent_refs(&self) -> &[ParentReference] {
        &self.spec.parent_refs
    }

    fn compile(&self, store: &Store, key: &ObjectKey, _age: &Age) -> CompiledRoute {
        let mut out = CompiledRoute::default();
        route_hostnames(&self.spec.hostnames, &mut out);
        compile_rules(store, key, Self::KIND, &self.spec.rules, out)
    }
}

/// TCPRoute and UDPRoute differ only in their kind: no hostnames, rules of weighted
/// backends.
macro_rules! hostless_l4_route {
    ($ty:ty, $kind:expr) => {
        impl RouteObject for $ty {
            const KIND: RouteKind = $kind;

            fn generation(&self) -> Option<i64> {
                self.metadata.generation()
            }

            fn parent_refs(&self) -> &[ParentReference] {
                &self.spec.parent_refs
            }

            fn compile(&self, store: &Store, key: &ObjectKey, _age: &Age) -> CompiledRoute {
                compile_rules(
                    store,
                    key,
                    Self::KIND,
                    &self.spec.rules,
                    CompiledRoute::default(),
                )
            }
        }
    };
}

hostless_l4_route!(TcpRoute, RouteKind::Tcp);
hostless_l4_route!(UdpRoute, RouteKind::Udp);

/// The backends of every rule, as one weighted set: L4 rules have no matches, so
/// several rules (v1alpha2 allows up to 16) can only share the connections.
fn compile_rules(
    store: &Store,
    key: &ObjectKey,
    kind: RouteKind,
    rules: &[L4RouteRule],
    mut out: CompiledRoute,
) -> CompiledRoute {
    let mut backends = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let mut ctx = RouteCtx {
            store,
            referrer: Referrer::Route(kind),
            ns: &key.namespace,
            out: &mut out,
        };
        l4_backends(
            &mut ctx,
            &rule.backend_refs,
            &format!("spec.rules[{i}]"),
            &mut backends,
        );
    }
    out.l4 = Some(Arc::new(L4Target {
        route: RouteRef {
            kind: kind.model(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            rule: 0,
        },
        backends,
    }));
    out
}
