//! berth's own rollout engine (`rollout.engine = "agent"`), for control planes that run
//! no Deployment controller: one [`Engine::pass`] is the controller's `syncDeployment`
//! (reference §2–§7) — create or reuse the hash-named, revision-annotated new
//! ReplicaSet, scale by the rolling or recreate rules or proportionally, clean up old
//! revisions, write the status and conditions — and [`Engine::drive`] runs passes on every
//! change it watches. All state lives in the cluster, so a restarted berth carries on.
//!
//! Here: the engine, its errors and how it reads a Deployment's world; `pass.rs` is one
//! `syncDeployment`; `replica_sets.rs` the ReplicaSet writes it makes; [`status`] the status and
//! conditions it writes (pure); `driver.rs` runs
//! passes on every change, for one rollout or for every Deployment of an app.

mod driver;
mod pass;
mod replica_sets;
pub mod status;

pub use driver::{follow_driving, supervise};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{Api, ListParams, PatchParams};
use serde_json::Value;

use crate::rollout::predict::view;
use crate::rollout::revisions::{self, revision_of, selector, Owned, REVISION};
use crate::rollout::steps::ReplicaSetView;

/// Marks the ReplicaSets the engine created; any other owned ReplicaSet means another
/// controller is at work.
pub const ENGINE_ANNOTATION: &str = "berth.dev/engine";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX: &str = "deployment.kubernetes.io/max-replicas";
const HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// Deployment annotations never copied to a ReplicaSet.
const SKIPPED: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    HISTORY,
    DESIRED,
    MAX,
    "deprecated.deployment.rollback.to",
];

/// Errors of the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Someone else reconciles the Deployment: the engine changes nothing.
    #[error("Deployment {deployment} is reconciled by another controller (ReplicaSet {replica_set} was not created by berth's engine): set rollout.engine = \"cluster\" for this app, or stop the other controller")]
    Foreign {
        /// `namespace/name`.
        deployment: String,
        /// The ReplicaSet berth did not create.
        replica_set: String,
    },
    /// A request failed.
    #[error("{what}: {cause}")]
    Request {
        /// What was being done.
        what: String,
        /// The API error (part of the message).
        cause: kube::Error,
    },
}

fn request(what: impl Into<String>) -> impl FnOnce(kube::Error) -> EngineError {
    let what = what.into();
    move |cause| EngineError::Request { what, cause }
}

/// The engine for one cluster.
#[derive(Clone)]
pub struct Engine {
    /// The cluster.
    pub client: kube::Client,
    /// Field manager of its writes.
    pub field_manager: String,
}

/// What one pass read.
struct World {
    d: Deployment,
    template: Value,
    new: Option<ReplicaSet>,
    olds: Vec<ReplicaSet>,
}

fn replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

fn rs_name(rs: &ReplicaSet) -> String {
    rs.metadata.name.clone().unwrap_or_default()
}

fn annotation<'a>(rs: &'a ReplicaSet, key: &str) -> Option<&'a str> {
    rs.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn revision(rs: &ReplicaSet) -> i64 {
    revision_of(&rs.metadata).unwrap_or(0)
}

/// The step math's view of a ReplicaSet.
fn rs_view(rs: &ReplicaSet) -> ReplicaSetView {
    let created = rs
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second());
    ReplicaSetView {
        name: rs_name(rs),
        replicas: replicas(rs),
        available: rs
            .status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0),
        created: (created, rs_name(rs)),
        max_replicas: annotation(rs, MAX).and_then(|m| m.parse().ok()),
    }
}

/// `DeploymentComplete` on the cached status.
fn complete(d: &Deployment) -> bool {
    let want = view(d).replicas;
    d.status.as_ref().is_some_and(|s| {
        s.updated_replicas == Some(want)
            && s.replicas == Some(want)
            && s.available_replicas == Some(want)
            && s.observed_generation >= d.metadata.generation
    })
}

impl Engine {
    fn deployments(&self, ns: &str) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), ns)
    }

    async fn get(&self, ns: &str, name: &str) -> Result<Option<Deployment>, EngineError> {
        self.deployments(ns)
            .get_opt(name)
            .await
            .map_err(request(format!("reading Deployment {ns}/{name}")))
    }

    fn replica_sets(&self, ns: &str) -> Api<ReplicaSet> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Refuses when the Deployment has ReplicaSets the engine did not create.
    ///
    /// # Errors
    /// [`EngineError::Foreign`], or a failed request.
    pub async fn check_ownership(&self, ns: &str, name: &str) -> Result<(), EngineError> {
        match self.get(ns, name).await? {
            Some(d) => self.read(d).await.map(|_| ()),
            None => Ok(()),
        }
    }

    async fn read(&self, d: Deployment) -> Result<World, EngineError> {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let dname = d.metadata.name.clone().unwrap_or_default();
        let list = self
            .replica_sets(&ns)
            .list(&ListParams::default().labels(&selector(&d)))
            .await
            .map_err(request(format!("listing the ReplicaSets of {ns}/{dname}")))?;
        let Owned {
            template, new, old, ..
        } = revisions::owned(&d, list.items);
        if let Some(foreign) = new
            .iter()
            .chain(&old)
            .find(|rs| annotation(rs, ENGINE_ANNOTATION).is_none())
        {
            return Err(EngineError::Foreign {
                deployment: format!("{ns}/{dname}"),
                replica_set: rs_name(foreign),
            });
        }
        Ok(World {
            d,
            template,
            new,
            olds: old,
        })
    }

    fn params(&self) -> PatchParams {
        PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        }
    }
}
