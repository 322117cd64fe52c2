//! `weir migrate --from-cluster`: the Ingresses of a live cluster, with the Services and
//! weir `Backend`s of their namespaces and the Secrets they name (TLS and `auth-secret`),
//! read through the API server as the controller reads them, then migrated exactly as
//! the same objects in files are.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::Value;
use weir_api::{Ingress, Object};
use weir_provider_k8s::api_resource;
use weir_translate::INGRESS_NGINX_PREFIX;

use super::{MigrateOptions, Migration, Note, Severity, migrate_objects};

/// Reads the cluster behind `client` and migrates its Ingresses. An object that cannot be
/// read is a note of the report; a kind the cluster does not serve (no weir CRDs) is
/// skipped.
pub async fn migrate_cluster(
    opts: &MigrateOptions,
    client: kube::Client,
) -> anyhow::Result<Migration> {
    let mut out = Migration::default();
    let mut objects = Vec::new();
    let ingresses = list(
        &client,
        &api_resource("networking.k8s.io", "v1", "Ingress", "ingresses"),
        &mut objects,
        &mut out,
    )
    .await?;
    let namespaces: BTreeSet<String> = ingresses
        .iter()
        .map(|i| i.metadata.namespace.to_string())
        .collect();
    for ns in &namespaces {
        list_in(
            &client,
            ns,
            &api_resource("", "v1", "Service", "services"),
            &mut objects,
            &mut out,
        )
        .await?;
        // Without weir's CRDs there are no Backends to read.
        let backends = api_resource("weir.dev", "v1alpha1", "Backend", "backends");
        if let Err(e) = list_in(&client, ns, &backends, &mut objects, &mut out).await {
            tracing::debug!(error = %e, "weir.dev Backends not read");
        }
    }
    // Only the Secrets the Ingresses name: a migration has no business reading others.
    let secrets = api_resource("", "v1", "Secret", "secrets");
    for (ns, name) in named_secrets(&ingresses) {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &secrets);
        if let Some(s) = api.get_opt(&name).await? {
            push(&secrets, s, &mut objects, &mut out);
        }
    }
    migrate_objects(opts, &objects, &mut out);
    Ok(out)
}

/// The Secrets `ingresses` name: their TLS Secrets and `auth-secret`s (`name` or
/// `namespace/name`).
fn named_secrets(ingresses: &[Ingress]) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for ing in ingresses {
        let ns: &str = &ing.metadata.namespace;
        for t in &ing.spec.tls {
            if let Some(s) = t.secret_name.as_deref().filter(|s| !s.is_empty()) {
                out.insert((ns.to_owned(), s.to_owned()));
            }
        }
        let key = format!("{INGRESS_NGINX_PREFIX}auth-secret");
        if let Some(s) = ing.metadata.annotations.get(&key) {
            let (sns, name) = s.trim().split_once('/').unwrap_or((ns, s.trim()));
            out.insert((sns.to_owned(), name.to_owned()));
        }
    }
    out
}

/// Lists `resource` in every namespace into `objects`; the Ingresses among them.
async fn list(
    client: &kube::Client,
    resource: &ApiResource,
    objects: &mut Vec<Arc<Object>>,
    out: &mut Migration,
) -> anyhow::Result<Vec<Ingress>> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let mut ingresses = Vec::new();
    for o in api.list(&ListParams::default()).await?.items {
        if let Some(Object::Ingress(i)) = push(resource, o, objects, out).as_deref() {
            ingresses.push(i.clone());
        }
    }
    Ok(ingresses)
}

/// Lists `resource` in namespace `ns` into `objects`.
async fn list_in(
    client: &kube::Client,
    ns: &str,
    resource: &ApiResource,
    objects: &mut Vec<Arc<Object>>,
    out: &mut Migration,
) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, resource);
    for o in api.list(&ListParams::default()).await?.items {
        push(resource, o, objects, out);
    }
    Ok(())
}

/// Reads one API object as the controller does (without its status and server fields).
fn push(
    resource: &ApiResource,
    obj: DynamicObject,
    objects: &mut Vec<Arc<Object>>,
    out: &mut Migration,
) -> Option<Arc<Object>> {
    let name = format!(
        "{} {}/{}",
        resource.kind,
        obj.metadata.namespace.as_deref().unwrap_or(""),
        obj.metadata.name.as_deref().unwrap_or("")
    );
    let mut value = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.insert("apiVersion".into(), resource.api_version.clone().into());
        map.insert("kind".into(), resource.kind.clone().into());
        map.remove("status");
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            meta.remove("managedFields");
        }
    }
    match Object::from_value(value) {
        Ok(o) => {
            let o = Arc::new(o);
            objects.push(o.clone());
            Some(o)
        }
        Err(e) => {
            out.notes.push(Note {
                object: name,
                severity: Severity::NotCarried,
                message: format!("cannot be read: {e}"),
            });
            None
        }
    }
}
