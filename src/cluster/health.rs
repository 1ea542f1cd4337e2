//! The health of a live object as the cluster shows it: its status read through
//! [`crate::health`] (pure), and for a Service that selects pods, whether its Endpoints
//! route anywhere — shared by the sync's wait and `berth status`.

use k8s_openapi::api::core::v1::Endpoints;
use kube::api::Api;
use serde_json::Value;

use crate::health::{health, routes, selects_pods, Health, NO_ENDPOINTS};

/// Where a live object (`object`, its JSON) stands; with `endpoints`, a ready Service that
/// selects pods is ready only once its Endpoints list a ready address.
pub async fn live_health(
    client: &kube::Client,
    group: &str,
    kind: &str,
    namespace: &str,
    object: &Value,
    endpoints: bool,
) -> Health {
    match health(group, kind, object) {
        Health::Current if endpoints && selects_pods(group, kind, object) => {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            if has_ready_endpoints(client, namespace, name).await {
                Health::Current
            } else {
                Health::InProgress(NO_ENDPOINTS.into())
            }
        }
        h => h,
    }
}

/// Whether Service `namespace/name` has ready endpoints, as kube-proxy would route it (a
/// read that fails counts as none).
pub async fn has_ready_endpoints(client: &kube::Client, namespace: &str, name: &str) -> bool {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), namespace);
    api.get_opt(name)
        .await
        .ok()
        .flatten()
        .is_some_and(|e| route(&e))
}

/// Whether Service `namespace/name`'s Endpoints route to a ready address by `until`, as
/// a watch of them tells (a watch that fails counts as none).
pub async fn routed_by(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    until: tokio::time::Instant,
) -> bool {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), namespace);
    let routed = |e: Option<&Endpoints>| e.is_some_and(route);
    let watched = kube::runtime::wait::await_condition(api, name, routed);
    matches!(
        tokio::time::timeout_at(until, watched).await,
        Ok(Ok(Some(_)))
    )
}

fn route(endpoints: &Endpoints) -> bool {
    serde_json::to_value(endpoints).is_ok_and(|e| routes(&e))
}

/// The line `berth status` and a sync's progress show for `health`.
pub fn said(health: &Health) -> String {
    match health {
        Health::Current => "ready".into(),
        Health::InProgress(m) => format!("waiting: {m}"),
        Health::Failed(m) => format!("failed: {m}"),
    }
}
