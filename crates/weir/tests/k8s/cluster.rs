//! Creating, changing and reading objects on the test API server.

use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::Value;

pub fn resource(api_version: &str, kind: &str) -> ApiResource {
    let plural = match kind {
        "GatewayClass" => "gatewayclasses",
        "Gateway" => "gateways",
        "HTTPRoute" => "httproutes",
        "ReferenceGrant" => "referencegrants",
        "Ingress" => "ingresses",
        "IngressClass" => "ingressclasses",
        "Secret" => "secrets",
        "Service" => "services",
        "EndpointSlice" => "endpointslices",
        "Namespace" => "namespaces",
        "ServiceAccount" => "serviceaccounts",
        "Deployment" => "deployments",
        "ConfigMap" => "configmaps",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        "Lease" => "leases",
        "XListenerSet" => "xlistenersets",
        "ListenerSet" => "listenersets",
        "TrafficPolicy" => "trafficpolicies",
        "DirectResponse" => "directresponses",
        "Backend" => "backends",
        "UDPRoute" => "udproutes",
        "GRPCRoute" => "grpcroutes",
        "TLSRoute" => "tlsroutes",
        "TCPRoute" => "tcproutes",
        "BackendTLSPolicy" => "backendtlspolicies",
        other => panic!("no plural known for {other}"),
    };
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn cluster_scoped(kind: &str) -> bool {
    matches!(
        kind,
        "GatewayClass" | "IngressClass" | "Namespace" | "ClusterRole" | "ClusterRoleBinding"
    )
}

fn api_for(client: &kube::Client, api_version: &str, kind: &str, ns: &str) -> Api<DynamicObject> {
    let ar = resource(api_version, kind);
    if cluster_scoped(kind) {
        Api::all_with(client.clone(), &ar)
    } else {
        Api::namespaced_with(client.clone(), ns, &ar)
    }
}

fn parts(obj: &Value) -> (String, String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    (
        s(&obj["apiVersion"]),
        s(&obj["kind"]),
        s(&obj["metadata"]["namespace"]),
        s(&obj["metadata"]["name"]),
    )
}

/// Server-side applies each object (creates or updates it).
pub async fn apply(client: &kube::Client, objects: &[Value]) {
    for obj in objects {
        try_apply(client, obj)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Server-side applies one object; the API server's refusal as an error.
pub async fn try_apply(client: &kube::Client, obj: &Value) -> Result<(), String> {
    let (av, kind, ns, name) = parts(obj);
    api_for(client, &av, &kind, &ns)
        .patch(
            &name,
            &PatchParams::apply("weir-tests").force(),
            &Patch::Apply(obj),
        )
        .await
        .map(drop)
        .map_err(|e| format!("applying {kind} {ns}/{name}: {e}"))
}

/// Submits an object for creation with a server-side dry run (`dryRun=All`): the API
/// server decodes, defaults and validates it (schemas, CEL rules, built-in validation)
/// without storing it. `Err` holds its refusal.
pub async fn dry_run_create(client: &kube::Client, obj: &Value) -> Result<(), String> {
    let (av, kind, ns, _) = parts(obj);
    let params = PostParams {
        dry_run: true,
        field_manager: Some("weir-tests".into()),
    };
    let url = api_for(client, &av, &kind, &ns).resource_url().to_owned();
    // The object as written, not through `DynamicObject`: a field of the wrong type or a
    // Secret's non-base64 data must reach the API server as it is in the file.
    let req = kube::core::Request::new(url)
        .create(&params, serde_json::to_vec(obj).unwrap())
        .unwrap();
    match client.request::<Value>(req).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err(format!("{} ({})", s.message, s.code)),
        Err(e) => panic!("dry run of {kind} {ns}: {e}"),
    }
}

/// Creates an object (fails if it exists).
pub async fn create(client: &kube::Client, obj: &Value) {
    let (av, kind, ns, name) = parts(obj);
    let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    api_for(client, &av, &kind, &ns)
        .create(&PostParams::default(), &o)
        .await
        .unwrap_or_else(|e| panic!("creating {kind} {ns}/{name}: {e}"));
}

pub async fn delete(client: &kube::Client, api_version: &str, kind: &str, ns: &str, name: &str) {
    match api_for(client, api_version, kind, ns)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("deleting {kind} {ns}/{name}: {e}"),
    }
}

/// The object as stored (`Null` when it does not exist).
pub async fn get(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Value {
    match api_for(client, api_version, kind, ns).get(name).await {
        Ok(o) => serde_json::to_value(o).unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

/// Whether the API server serves this kind (its CRD is installed): a list in namespace
/// `default` succeeds.
pub async fn served(client: &kube::Client, api_version: &str, kind: &str) -> bool {
    api_for(client, api_version, kind, "default")
        .list(&Default::default())
        .await
        .is_ok()
}

/// The object's `status` (`Null` when it has none or does not exist).
pub async fn status(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Value {
    match api_for(client, api_version, kind, ns).get(name).await {
        Ok(o) => o.data.get("status").cloned().unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

/// Replaces the object's status as another controller would (a merge patch of the status
/// subresource).
pub async fn patch_status(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
    status: Value,
) {
    api_for(client, api_version, kind, ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": status })),
        )
        .await
        .unwrap_or_else(|e| panic!("patching status of {kind} {ns}/{name}: {e}"));
}

/// Polls the object's status until `ok` holds (bounded); panics with the last status.
pub async fn wait_status(
    client: &kube::Client,
    (api_version, kind): (&str, &str),
    ns: &str,
    name: &str,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = status(client, api_version, kind, ns, name).await;
        if ok(&s) {
            return s;
        }
        if Instant::now() > deadline {
            panic!(
                "{kind} {ns}/{name}: timed out waiting for {what}; status: {}",
                serde_json::to_string_pretty(&s).unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The condition of `type_` in a list of conditions.
pub fn condition<'a>(conditions: &'a Value, type_: &str) -> Option<&'a Value> {
    conditions.as_array()?.iter().find(|c| c["type"] == type_)
}

/// Whether condition `type_` has this status and reason.
pub fn has(conditions: &Value, type_: &str, status: &str, reason: &str) -> bool {
    condition(conditions, type_).is_some_and(|c| c["status"] == status && c["reason"] == reason)
}

/// Our parent entry of a route status for the Gateway `gw`.
pub fn our_parent<'a>(status: &'a Value, gw: &str) -> Option<&'a Value> {
    status["parents"]
        .as_array()?
        .iter()
        .find(|p| p["controllerName"] == crate::CONTROLLER && p["parentRef"]["name"] == gw)
}

/// A token of ServiceAccount `ns/name` (TokenRequest), valid for an hour.
pub async fn token(client: &kube::Client, ns: &str, name: &str) -> String {
    let req = http::Request::post(format!("/api/v1/namespaces/{ns}/serviceaccounts/{name}/token"))
        .header("content-type", "application/json")
        .body(
            serde_json::to_vec(&serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}))
                .unwrap(),
        )
        .unwrap();
    let resp: Value = client
        .request(req)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {ns}/{name}: {e}"));
    resp["status"]["token"]
        .as_str()
        .expect("a token")
        .to_string()
}

pub fn service_account(ns: &str, name: &str) -> Value {
    serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}})
}
