//! One pass of the engine: the Deployment controller's `syncDeployment` (reference
//! §2–§7), and the status and conditions it writes.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet};
use kube::api::Patch;
use serde_json::json;

use super::status::{self, condition, set_condition, FOUND_NEW_RS, NEW_RS_CREATED};
use super::{
    annotation, complete, replicas, request, revision, rs_name, rs_view, Engine, EngineError,
    World, DESIRED,
};
use crate::rollout::hash::template_hash;
use crate::rollout::predict::view;
use crate::rollout::revisions::{revision_of, REVISION};
use crate::rollout::steps::{self, DeploymentView, Pass, ReplicaSetView, Strategy};

impl Engine {
    /// One `syncDeployment` pass over Deployment `ns/name`. Returns when it must run again
    /// even if nothing changes (the progress deadline).
    ///
    /// # Errors
    /// [`EngineError::Foreign`] (nothing written), or a failed request.
    pub async fn pass(&self, ns: &str, name: &str) -> Result<Option<Timestamp>, EngineError> {
        let Some(d) = self.get(ns, name).await? else {
            return Ok(None);
        };
        let mut w = self.read(d).await?;
        let now = Timestamp::now();
        if w.d.metadata.deletion_timestamp.is_some() {
            let new_status = self.status_only(&w, now);
            return self.write_status(&w, new_status).await;
        }
        let v = view(&w.d);
        let paused = w.d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        let was_complete = complete(&w.d);
        if paused || scaling(&w, &v) {
            return self.resize(&mut w, &v, paused, now).await;
        }
        // sync_revision is a no-op without a new ReplicaSet.
        if self.sync_revision(&mut w).await? {
            return Ok(Some(now));
        }
        let pass = self.plan(&w, &v);
        let executed = self.execute(&mut w, &v, &pass).await?;
        let progressing = executed.or_else(|| found_new(&w));
        if pass.is_empty() && was_complete {
            self.cleanup(&w).await?;
        }
        let d = with_progressing(&w, progressing, now);
        let all: Vec<&ReplicaSet> = w.olds.iter().chain(&w.new).collect();
        let mut new_status = status::rollout_status(&d, &all, w.new.as_ref(), now);
        let mut cs = new_status.conditions.take().unwrap_or_default();
        status::pause_conditions(&d, &mut cs, now);
        new_status.conditions = Some(cs);
        self.write_status(&w, new_status).await
    }

    /// A paused Deployment, or one whose size changed mid-rollout: its ReplicaSets scaled
    /// proportionally (a paused one's old ones cleaned up), its status written.
    async fn resize(
        &self,
        w: &mut World,
        v: &DeploymentView,
        paused: bool,
        now: Timestamp,
    ) -> Result<Option<Timestamp>, EngineError> {
        if self.sync_revision(w).await? {
            return Ok(Some(now));
        }
        self.scale_proportionally(w, v).await?;
        if paused {
            self.cleanup(w).await?;
        }
        let new_status = self.status_only(w, now);
        self.write_status(w, new_status).await
    }

    /// The pass of the Deployment's strategy.
    fn plan(&self, w: &World, v: &DeploymentView) -> Pass {
        let olds: Vec<ReplicaSetView> = w.olds.iter().map(rs_view).collect();
        let new = w.new.as_ref().map(rs_view);
        match v.strategy {
            Strategy::RollingUpdate { .. } => {
                steps::rolling_pass(v, new.as_ref(), &olds, &self.new_name(w))
            }
            Strategy::Recreate => {
                let running = w
                    .olds
                    .iter()
                    .map(|rs| rs.status.as_ref().map_or(0, |s| s.replicas))
                    .sum::<i32>()
                    > 0;
                steps::recreate_pass(v, new.as_ref(), &olds, running)
            }
        }
    }

    pub(super) fn new_name(&self, w: &World) -> String {
        let collisions = w.d.status.as_ref().and_then(|s| s.collision_count);
        format!(
            "{}-{}",
            w.d.metadata.name.as_deref().unwrap_or(""),
            template_hash(&w.template, collisions)
        )
    }

    pub(super) fn status_only(&self, w: &World, now: Timestamp) -> DeploymentStatus {
        let all: Vec<&ReplicaSet> = w.olds.iter().chain(&w.new).collect();
        let mut new_status = status::calculate_status(&w.d, &all, w.new.as_ref(), now);
        let mut cs = new_status.conditions.take().unwrap_or_default();
        status::pause_conditions(&w.d, &mut cs, now);
        new_status.conditions = Some(cs);
        new_status
    }

    /// Creates the new ReplicaSet and scales, as the pass says. Returns the Progressing
    /// reason to set when the new ReplicaSet was created.
    pub(super) async fn execute(
        &self,
        w: &mut World,
        v: &DeploymentView,
        pass: &Pass,
    ) -> Result<Option<&'static str>, EngineError> {
        let mut reason = None;
        if let Some(size) = pass.create {
            if !self.create(w, v, size).await? {
                return Ok(None); // a hash collision: the next pass uses a new name
            }
            reason = Some(NEW_RS_CREATED);
        }
        for s in &pass.scales {
            let target = w
                .new
                .iter_mut()
                .chain(w.olds.iter_mut())
                .find(|rs| rs_name(rs) == s.name);
            if let Some(rs) = target {
                self.scale(rs, s.to, v).await?;
            }
        }
        Ok(reason)
    }

    /// Writes the status (and the Deployment's revision annotation) when it changed;
    /// returns when to look again for the progress deadline.
    pub(super) async fn write_status(
        &self,
        w: &World,
        new_status: DeploymentStatus,
    ) -> Result<Option<Timestamp>, EngineError> {
        let revision = w
            .new
            .as_ref()
            .map(revision)
            .filter(|r| *r > 0)
            .map(|r| r.to_string());
        let current_revision = revision_of(&w.d.metadata).map(|r| r.to_string());
        let next = status::deadline_at(&w.d, &new_status);
        if w.d.status.as_ref() == Some(&new_status)
            && (revision.is_none() || revision == current_revision)
        {
            return Ok(next);
        }
        let mut patch = json!({"status": new_status});
        if let Some(r) = revision {
            patch["metadata"] = json!({"annotations": {REVISION: r}});
        }
        let ns = w.d.metadata.namespace.clone().unwrap_or_default();
        let dname = w.d.metadata.name.clone().unwrap_or_default();
        self.deployments(&ns)
            .patch_status(&dname, &self.params(), &Patch::Merge(&patch))
            .await
            .map_err(request(format!("writing the status of {ns}/{dname}")))?;
        Ok(next)
    }
}

/// Whether a ReplicaSet with pods was sized for another `spec.replicas` (the Deployment
/// was scaled mid-rollout).
fn scaling(w: &World, v: &DeploymentView) -> bool {
    w.new.iter().chain(&w.olds).any(|rs| {
        replicas(rs) > 0
            && annotation(rs, DESIRED)
                .and_then(|a| a.parse::<i32>().ok())
                .is_some_and(|n| n != v.replicas)
    })
}

/// `FoundNewReplicaSet` when a pass that created nothing has a new ReplicaSet, a progress
/// deadline and no Progressing condition yet.
fn found_new(w: &World) -> Option<&'static str> {
    let has =
        w.d.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Progressing"));
    (w.new.is_some() && status::progress_deadline(&w.d).is_some() && !has).then_some(FOUND_NEW_RS)
}

/// The Deployment with its Progressing condition set for `reason` (a new ReplicaSet
/// created or found), when it has a progress deadline.
fn with_progressing(w: &World, reason: Option<&'static str>, now: Timestamp) -> Deployment {
    let mut d = w.d.clone();
    let (Some(reason), Some(new), Some(_)) = (reason, &w.new, status::progress_deadline(&w.d))
    else {
        return d;
    };
    let verb = if reason == NEW_RS_CREATED {
        "Created new"
    } else {
        "Found new"
    };
    let new_status = d.status.get_or_insert_with(DeploymentStatus::default);
    let mut cs = new_status.conditions.take().unwrap_or_default();
    let message = format!("{verb} replica set {:?}", rs_name(new));
    set_condition(
        &mut cs,
        condition("Progressing", "True", reason, message, now),
    );
    new_status.conditions = Some(cs);
    d
}
