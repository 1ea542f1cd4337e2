//! What the cluster says of one app now: why it is held, its Deployments (revision,
//! READY, UP-TO-DATE, phase) and every other object with a notion of readiness (its
//! health, as a sync waits for it). `berth status` and the status page read it.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use serde::Serialize;

use crate::cluster::discovery::SharedKinds;
use crate::cluster::health::{live_health, said};
use crate::cluster::{api_for, inventory, ClusterError};
use crate::health::waits_for;
use crate::manifest::ObjectKey;
use crate::plan::{Entry, Resolved};
use crate::rollout::phase::phase;
use crate::rollout::revisions::revision_of;

/// One app as the cluster has it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LiveApp {
    /// Why the app is held, when it is.
    pub held: Option<String>,
    /// The app's Deployments.
    pub deployments: Vec<DeploymentStatus>,
    /// Every other object with a notion of readiness.
    pub objects: Vec<ObjectStatus>,
    /// Every object the app manages (its inventory), readiness or not.
    pub keys: Vec<ObjectKey>,
}

/// A managed Deployment now.
#[derive(Debug, Clone, Serialize)]
pub struct DeploymentStatus {
    /// `namespace/name`.
    pub name: String,
    /// Its revision.
    pub revision: Option<i64>,
    /// Ready pods.
    pub ready: i32,
    /// spec.replicas.
    pub replicas: i32,
    /// Pods of the current template.
    pub updated: i32,
    /// `complete`, `progressing`, `failed`, or `missing`.
    pub phase: String,
}

/// A managed object with a notion of readiness, now.
#[derive(Debug, Clone, Serialize)]
pub struct ObjectStatus {
    /// `Kind namespace/name` as the inventory names it.
    pub object: String,
    /// `ready`, `waiting: …`, `failed: …` or `missing`.
    pub health: String,
}

impl LiveApp {
    /// Objects with a notion of readiness (Deployments included), and how many are ready.
    pub fn ready(&self) -> (usize, usize) {
        let ready = self
            .deployments
            .iter()
            .filter(|d| d.phase == "complete")
            .count()
            + self.objects.iter().filter(|o| o.health == "ready").count();
        (ready, self.deployments.len() + self.objects.len())
    }

    /// Objects that failed (a Deployment's rollout, or an object's health).
    pub fn failed(&self) -> usize {
        self.deployments
            .iter()
            .filter(|d| d.phase == "failed" || d.phase == "missing")
            .count()
            + self
                .objects
                .iter()
                .filter(|o| o.health.starts_with("failed") || o.health == "missing")
                .count()
    }
}

/// Reads `app`'s inventory and its objects' health; `kinds` is discovered on the first
/// object that needs it (and shared with the next app).
///
/// # Errors
/// The cluster did not answer a read.
pub async fn live_app(
    client: &kube::Client,
    kinds: &SharedKinds,
    inventory_namespace: &str,
    app: &str,
) -> Result<LiveApp, ClusterError> {
    let inv = inventory::load(client, inventory_namespace, app)
        .await?
        .map(|s| s.inventory)
        .unwrap_or_default();
    let mut live = LiveApp {
        held: inv.held.as_ref().map(|h| h.reason.clone()),
        keys: inv.objects.iter().map(|e| e.key.clone()).collect(),
        ..LiveApp::default()
    };
    for e in inv
        .objects
        .iter()
        .filter(|e| waits_for(&e.key.group, &e.key.kind))
    {
        let (known, _) = kinds.get(None).await?;
        if let Some(resolved) = known.resolve_kind(&e.api_version, &e.key.kind) {
            live.objects
                .push(object_status(client, &resolved, e).await?);
        }
    }
    for key in inv
        .objects
        .iter()
        .map(|e| &e.key)
        .filter(|k| k.group == "apps" && k.kind == "Deployment")
    {
        live.deployments.push(deployment_status(client, key).await?);
    }
    Ok(live)
}

fn read_error(key: &ObjectKey, cause: kube::Error) -> ClusterError {
    ClusterError::Request {
        what: format!("reading {key}"),
        cause,
    }
}

/// Where one managed object stands (a Service only as ready as the pods it routes to).
async fn object_status(
    client: &kube::Client,
    resolved: &Resolved,
    entry: &Entry,
) -> Result<ObjectStatus, ClusterError> {
    let key = &entry.key;
    let api = api_for(client, resolved, key.namespace.as_deref());
    let health = match api
        .get_opt(&key.name)
        .await
        .map_err(|e| read_error(key, e))?
    {
        None => "missing".to_string(),
        Some(obj) => {
            let json = serde_json::to_value(&obj).unwrap_or_default();
            let ns = key.namespace_or_default();
            said(&live_health(client, &key.group, &key.kind, ns, &json, true).await)
        }
    };
    Ok(ObjectStatus {
        object: key.to_string(),
        health,
    })
}

/// A managed Deployment's revision, replicas and phase.
async fn deployment_status(
    client: &kube::Client,
    key: &ObjectKey,
) -> Result<DeploymentStatus, ClusterError> {
    let ns = key.namespace_or_default();
    let name = format!("{ns}/{}", key.name);
    let Some(d) = Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(&key.name)
        .await
        .map_err(|e| read_error(key, e))?
    else {
        return Ok(DeploymentStatus {
            name,
            revision: None,
            ready: 0,
            replicas: 0,
            updated: 0,
            phase: "missing".into(),
        });
    };
    let generation = d.metadata.generation.unwrap_or(0);
    let (p, _) = phase(&d, generation);
    let status = d.status.as_ref();
    Ok(DeploymentStatus {
        name,
        revision: revision_of(&d.metadata),
        ready: status.and_then(|s| s.ready_replicas).unwrap_or(0),
        replicas: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        updated: status.and_then(|s| s.updated_replicas).unwrap_or(0),
        phase: p.as_str().to_string(),
    })
}
