//! weir's Kubernetes provider: watches the API server for the objects weir reads
//! (Gateway API, Ingress, Services, EndpointSlices, TLS Secrets, Namespaces) and turns
//! them into [`weir_api::Object`]s for the same incremental translator the file mode
//! uses; and writes the translator's statuses back.
//!
//! - [`KubeProvider`] runs one watcher per kind. [`KubeProvider::initial`] returns only
//!   once every watcher has listed everything, so translation never starts from a
//!   partial view; [`KubeProvider::next`] then returns changes as they come, coalescing
//!   whatever queued up behind the first one. Status-only updates (ours or another
//!   controller's) are not changes.
//! - [`StatusWriter`] writes a status only when it differs from the stored one, with the
//!   object's resourceVersion as a precondition (a conflict re-reads and merges again),
//!   at most one write per object in flight (newer statuses replace queued ones), and
//!   keeps route `parents` entries of other controllers exactly as they are. With
//!   leader election it writes only while this replica leads.
//! - [`Leadership`] elects one leader among replicas on a `coordination.k8s.io/v1` Lease.
//!
//! This crate knows nothing of the file provider, the translator or the data plane.

#![warn(missing_docs)]

mod kinds;
mod lease;
mod provision;
mod render;
mod status;
mod watch;

pub use crate::kinds::api_resource;
pub use crate::lease::{InvalidLeaseOptions, Leadership, LeaseOptions, default_identity};
pub use crate::provision::{
    GATEWAY_NAME_LABEL, GatewayServiceOptions, Provision, ProvisionOptions, Provisioner, manifests,
    provisioned_name,
};
pub use crate::render::{
    AddressesOf, GatewayAddresses, GatewayProblems, ProblemsOf, RenderOptions,
};
pub use crate::status::{StatusWriter, WriteResult, WriterStats};
pub use crate::watch::{KubeProvider, LiveCache, Update};

/// Builds a client from `kubeconfig` if given, else from the environment (in-cluster
/// service account, then `$KUBECONFIG` / `~/.kube/config`).
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, ClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| ClientError::Kubeconfig(path.display().to_string(), e.to_string()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| ClientError::Kubeconfig(path.display().to_string(), e.to_string()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| ClientError::Infer(e.to_string()))?,
    };
    kube::Client::try_from(config).map_err(|e| ClientError::Client(e.to_string()))
}

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file could not be read or used.
    #[error("kubeconfig {0}: {1}")]
    Kubeconfig(String, String),
    /// Neither an in-cluster config nor a kubeconfig was found.
    #[error("no Kubernetes configuration found (in-cluster or $KUBECONFIG): {0}")]
    Infer(String),
    /// The configuration could not be turned into a client (e.g. bad TLS data).
    #[error("building the Kubernetes client: {0}")]
    Client(String),
}

/// The ServiceAccount a bearer token belongs to, as the API server's TokenReview says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccountIdentity {
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount's name.
    pub name: String,
}

/// Asks the API server (TokenReview) who `token` belongs to. `Err` says why the token is
/// not a valid ServiceAccount token.
pub async fn review_token(
    client: &kube::Client,
    token: &str,
) -> Result<ServiceAccountIdentity, String> {
    let body = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token}
    });
    let req = http::Request::post("/apis/authentication.k8s.io/v1/tokenreviews")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let resp: serde_json::Value = client
        .request(req)
        .await
        .map_err(|e| format!("TokenReview failed: {e}"))?;
    let status = &resp["status"];
    if status["authenticated"] != true {
        return Err(format!(
            "token not authenticated: {}",
            status["error"].as_str().unwrap_or("no reason given")
        ));
    }
    let user = status["user"]["username"].as_str().unwrap_or("");
    let mut parts = user
        .strip_prefix("system:serviceaccount:")
        .unwrap_or("")
        .splitn(2, ':');
    match (parts.next(), parts.next()) {
        (Some(ns), Some(name)) if !ns.is_empty() && !name.is_empty() => {
            Ok(ServiceAccountIdentity {
                namespace: ns.into(),
                name: name.into(),
            })
        }
        _ => Err(format!("{user:?} is not a ServiceAccount")),
    }
}
