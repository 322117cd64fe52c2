//! Backend references of routes (backendRefs, mirror backends): defaults, ReferenceGrant
//! checks and resolution to clusters. Shared by route kinds that forward to Services and
//! weir Backends.

use std::sync::Arc;

use weir_api::{
    GrpcBackendRef, HttpBackendRef, HttpRequestMirrorFilter, Kind, L4BackendRef, Reason,
};
use weir_model::{Action, Filter, L4Backend, WeightedBackend};

use crate::compile::backend::{self, RefError, Resolved, WantProtocol};
use crate::compile::route_kind::{CompiledRoute, Referrer, RouteKind};
use crate::store::{Dep, Store};

/// What compiling one route's references needs, and where results go.
pub(crate) struct RouteCtx<'a> {
    pub(crate) store: &'a Store,
    /// The route, as ReferenceGrants name it.
    pub(crate) referrer: Referrer,
    /// The route's namespace.
    pub(crate) ns: &'a Arc<str>,
    pub(crate) out: &'a mut CompiledRoute,
}

/// The fields of a weighted backend reference of a route rule (HTTPRoute's and
/// GRPCRoute's have the same ones; their filters are compiled by the route kind).
pub(crate) struct RefFields<'a> {
    pub(crate) group: &'a Option<String>,
    pub(crate) kind: &'a Option<String>,
    pub(crate) namespace: &'a Option<String>,
    pub(crate) name: &'a str,
    pub(crate) port: Option<i32>,
    pub(crate) weight: Option<i32>,
}

/// A backend reference [`forward`] accepts.
pub(crate) trait WeightedRef {
    fn fields(&self) -> RefFields<'_>;
}

impl WeightedRef for HttpBackendRef {
    fn fields(&self) -> RefFields<'_> {
        RefFields {
            group: &self.group,
            kind: &self.kind,
            namespace: &self.namespace,
            name: &self.name,
            port: self.port,
            weight: self.weight,
        }
    }
}

impl WeightedRef for GrpcBackendRef {
    fn fields(&self) -> RefFields<'_> {
        RefFields {
            group: &self.group,
            kind: &self.kind,
            namespace: &self.namespace,
            name: &self.name,
            port: self.port,
            weight: self.weight,
        }
    }
}

/// A RequestMirror filter. An unresolvable backend is reported in ResolvedRefs and the
/// filter dropped (the rule still serves); a bad share rejects the rule.
pub(crate) fn mirror(
    ctx: &mut RouteCtx<'_>,
    m: &HttpRequestMirrorFilter,
    field: &str,
) -> Result<Option<Filter>, String> {
    let per_million = match (m.percent, &m.fraction) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "{field}: percent and fraction are mutually exclusive"
            ));
        }
        (Some(p), None) if (0..=100).contains(&p) => p as u32 * 10_000,
        (Some(p), None) => return Err(format!("{field}.percent: {p} is not between 0 and 100")),
        (None, Some(f)) => {
            let d = f.denominator.unwrap_or(100);
            if d <= 0 || f.numerator < 0 || f.numerator > d {
                return Err(format!(
                    "{field}.fraction: {}/{d} is not a fraction between 0 and 1",
                    f.numerator
                ));
            }
            (i64::from(f.numerator) * 1_000_000 / i64::from(d)) as u32
        }
        (None, None) => 1_000_000,
    };
    let b = &m.backend_ref;
    let route_ns = ctx.ns.clone();
    let (group, kind, ns) = ref_defaults(&b.group, &b.kind, &b.namespace, &route_ns);
    let fb = format!("{field}.backendRef");
    match resolve_ref(ctx, group, kind, ns, &b.name, b.port, &fb) {
        Ok((key, src)) => {
            if !ctx.out.clusters.iter().any(|(k, _)| *k == key) {
                ctx.out.clusters.push((key.clone(), src));
            }
            Ok(Some(Filter::Mirror {
                cluster: key,
                per_million,
            }))
        }
        Err(e) => {
            ctx.out.ref_errors.push(e);
            Ok(None)
        }
    }
}

/// The action of a rule that forwards to `refs` (each with its `filters`): weighted
/// backends, an unusable reference keeping its share of traffic (answered 500).
pub(crate) fn forward<R: WeightedRef>(
    ctx: &mut RouteCtx<'_>,
    refs: &[R],
    mut filters: Vec<Vec<Filter>>,
    field: &str,
) -> Action {
    if refs.is_empty() {
        return Action::Fail {
            status: 500,
            reason: "no backends".into(),
        };
    }
    let mut backends = Vec::new();
    let mut valid = 0;
    for (k, b) in refs.iter().enumerate() {
        let b = b.fields();
        let fb = format!("{field}.backendRefs[{k}]");
        let weight = b.weight.unwrap_or(1).max(0) as u32;
        let route_ns = ctx.ns.clone();
        let (group, kind, ns) = ref_defaults(b.group, b.kind, b.namespace, &route_ns);
        let resolved = resolve_ref(ctx, group, kind, ns, b.name, b.port, &fb);
        match resolved {
            Ok((key, src)) => {
                valid += 1;
                backends.push(WeightedBackend {
                    cluster: key.clone(),
                    weight,
                    filters: std::mem::take(&mut filters[k]),
                });
                if !ctx.out.clusters.iter().any(|(k, _)| *k == key) {
                    ctx.out.clusters.push((key, src));
                }
            }
            Err(e) => {
                ctx.out.ref_errors.push(e);
                let what = if group.is_empty() {
                    format!("{kind}/{ns}/{}", b.name)
                } else {
                    format!("{group}/{kind}/{ns}/{}", b.name)
                };
                backends.push(WeightedBackend {
                    cluster: backend::invalid_cluster_key(&what),
                    weight,
                    filters: Vec::new(),
                });
            }
        }
    }
    if valid == 0 {
        return Action::Fail {
            status: 500,
            reason: "no valid backends".into(),
        };
    }
    Action::Forward(backends)
}

/// A backend reference's group, kind and namespace with the API's defaults: a core
/// Service in the route's namespace.
fn ref_defaults<'a>(
    group: &'a Option<String>,
    kind: &'a Option<String>,
    namespace: &'a Option<String>,
    route_ns: &'a str,
) -> (&'a str, &'a str, &'a str) {
    (
        group.as_deref().unwrap_or(""),
        kind.as_deref().unwrap_or("Service"),
        namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(route_ns),
    )
}

fn resolve_ref(
    ctx: &mut RouteCtx<'_>,
    group: &str,
    kind: &str,
    ns: &str,
    name: &str,
    port: Option<i32>,
    field: &str,
) -> Result<Resolved, RefError> {
    let k = match (group, kind) {
        ("" | "core", "Service") => Kind::Service,
        ("weir.dev", "Backend") => Kind::Backend,
        _ => {
            return Err(RefError::new(
                Reason::InvalidKind,
                format!(
                    "{field}: unsupported backend kind {group:?}/{kind:?} (use Service or weir.dev/Backend)"
                ),
            ));
        }
    };
    ctx.out.deps.push(ctx.store.dep_on_ref(k, ns, name));
    if ns != &**ctx.ns {
        ctx.out.deps.push(Dep::grants_in(ns));
        let g = if k == Kind::Service { "" } else { "weir.dev" };
        if !ctx
            .store
            .grant_allows(ctx.referrer, ctx.ns, ns, g, k.name(), name)
        {
            return Err(RefError::new(
                Reason::RefNotPermitted,
                format!(
                    "{field}: {} {ns}/{name} is in another namespace and no ReferenceGrant allows it",
                    k.name()
                ),
            ));
        }
    }
    let want = match ctx.referrer {
        Referrer::Route(RouteKind::Grpc) => WantProtocol::Http2,
        Referrer::Route(RouteKind::Udp) => WantProtocol::Udp,
        _ => WantProtocol::Declared,
    };
    if k == Kind::Service {
        backend::resolve_service(ctx.store, ns, name, port, want, &field)
    } else {
        backend::resolve_backend(ctx.store, ns, name, want, &field)
    }
}

/// The weighted backends of an L4 route's `refs`: an unusable reference keeps its share
/// of connections, which are closed (its cluster is never defined).
pub(crate) fn l4_backends(
    ctx: &mut RouteCtx<'_>,
    refs: &[L4BackendRef],
    field: &str,
    out: &mut Vec<L4Backend>,
) {
    for (k, b) in refs.iter().enumerate() {
        let fb = format!("{field}.backendRefs[{k}]");
        let weight = b.weight.unwrap_or(1).max(0) as u32;
        let route_ns = ctx.ns.clone();
        let (group, kind, ns) = ref_defaults(&b.group, &b.kind, &b.namespace, &route_ns);
        let cluster = match resolve_ref(ctx, group, kind, ns, &b.name, b.port, &fb) {
            Ok((key, src)) => {
                if !ctx.out.clusters.iter().any(|(k, _)| *k == key) {
                    ctx.out.clusters.push((key.clone(), src));
                }
                key
            }
            Err(e) => {
                ctx.out.ref_errors.push(e);
                let what = if group.is_empty() {
                    format!("{kind}/{ns}/{}", b.name)
                } else {
                    format!("{group}/{kind}/{ns}/{}", b.name)
                };
                backend::invalid_cluster_key(&what)
            }
        };
        out.push(L4Backend { cluster, weight });
    }
}
