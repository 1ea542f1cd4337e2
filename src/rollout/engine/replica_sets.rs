//! The ReplicaSet writes of a pass: create the hash-named new one (or reuse one after a
//! collision), scale by the rolling and proportional rules, carry the revision over, and
//! clean up old revisions beyond the history limit.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::api::{DeleteParams, Patch, PostParams};
use serde_json::json;

use super::{
    annotation, replicas, request, revision, rs_name, rs_view, Engine, EngineError, World, DESIRED,
    ENGINE_ANNOTATION, HISTORY, MAX, SKIPPED,
};
use crate::rollout::hash::template_hash;
use crate::rollout::revisions::{controlled_by, replica_set_template, REVISION};
use crate::rollout::steps::{self, DeploymentView, Pass, ReplicaSetView};

/// The new ReplicaSet `rs_name` of `size` for the Deployment's template: its hash in the
/// labels and selector, the next revision, the desired and max sizes, berth's engine named.
fn new_replica_set(
    w: &World,
    v: &DeploymentView,
    rs_name: &str,
    size: i32,
) -> Result<ReplicaSet, EngineError> {
    let d = &w.d;
    let hash = rs_name.rsplit('-').next().unwrap_or_default().to_string();
    let max_old = w.olds.iter().map(revision).max().unwrap_or(0);
    let mut annotations: BTreeMap<String, String> = d
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !SKIPPED.contains(&k.as_str()))
        .collect();
    annotations.insert(REVISION.into(), (max_old + 1).to_string());
    annotations.insert(DESIRED.into(), v.replicas.to_string());
    annotations.insert(MAX.into(), (v.replicas + steps::max_surge(v)).to_string());
    annotations.insert(ENGINE_ANNOTATION.into(), "agent".into());
    crate::rollout::revisions::replica_set_of(d, &w.template, rs_name, &hash, annotations, size)
        .map_err(|e| request("building the new ReplicaSet")(kube::Error::SerdeError(e)))
}

impl Engine {
    /// Creates the new ReplicaSet (`getNewReplicaSet`, create branch). False after a hash
    /// collision, which bumps `status.collisionCount`.
    pub(super) async fn create(
        &self,
        w: &mut World,
        v: &DeploymentView,
        size: i32,
    ) -> Result<bool, EngineError> {
        let ns = w.d.metadata.namespace.clone().unwrap_or_default();
        let rs_name = self.new_name(w);
        let rs = new_replica_set(w, v, &rs_name, size)?;
        let params = PostParams {
            field_manager: Some(self.field_manager.clone()),
            ..Default::default()
        };
        match self.replica_sets(&ns).create(&params, &rs).await {
            Ok(created) => {
                w.new = Some(created);
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => self.collided(w, &ns, &rs_name).await,
            Err(e) => Err(request(format!("creating ReplicaSet {rs_name}"))(e)),
        }
    }

    /// The new ReplicaSet's name was taken: by the one wanted (a stale read: it is ours
    /// already, true), or by another template (a hash collision: `status.collisionCount`
    /// bumped, false).
    async fn collided(&self, w: &mut World, ns: &str, rs_name: &str) -> Result<bool, EngineError> {
        let d = &w.d;
        let existing = self
            .replica_sets(ns)
            .get(rs_name)
            .await
            .map_err(request(format!("reading ReplicaSet {rs_name}")))?;
        let ours = d
            .metadata
            .uid
            .as_deref()
            .is_some_and(|uid| controlled_by(&existing.metadata, uid));
        if ours
            && template_hash(&replica_set_template(&existing), None)
                == template_hash(&w.template, None)
        {
            w.new = Some(existing);
            return Ok(true);
        }
        let count = d
            .status
            .as_ref()
            .and_then(|s| s.collision_count)
            .unwrap_or(0)
            + 1;
        self.deployments(ns)
            .patch_status(
                d.metadata.name.as_deref().unwrap_or(""),
                &self.params(),
                &Patch::Merge(json!({"status": {"collisionCount": count}})),
            )
            .await
            .map_err(request("recording a hash collision"))?;
        Ok(false)
    }

    /// `scaleReplicaSet`: size and the desired/max annotations.
    pub(super) async fn scale(
        &self,
        rs: &mut ReplicaSet,
        to: i32,
        v: &DeploymentView,
    ) -> Result<(), EngineError> {
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        let patch = json!({
            "metadata": {"annotations": {DESIRED: v.replicas.to_string(), MAX: (v.replicas + steps::max_surge(v)).to_string()}},
            "spec": {"replicas": to},
        });
        *rs = self
            .replica_sets(&ns)
            .patch(&rs_name(rs), &self.params(), &Patch::Merge(&patch))
            .await
            .map_err(request(format!("scaling ReplicaSet {}", rs_name(rs))))?;
        Ok(())
    }

    /// Keeps the new ReplicaSet's revision above every old one (a reused template gets
    /// max + 1 and remembers its old number). True when it wrote: the pass ends there.
    pub(super) async fn sync_revision(&self, w: &mut World) -> Result<bool, EngineError> {
        let Some(new) = &w.new else { return Ok(false) };
        let max_old = w.olds.iter().map(revision).max().unwrap_or(0);
        let current = revision(new);
        let min_ready =
            w.d.spec
                .as_ref()
                .and_then(|s| s.min_ready_seconds)
                .unwrap_or(0);
        let min_ready_differs = new
            .spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
            != min_ready;
        if current > max_old && !min_ready_differs {
            return Ok(false);
        }
        let mut annotations = serde_json::Map::new();
        if current <= max_old {
            annotations.insert(REVISION.into(), json!((max_old + 1).to_string()));
            if current > 0 {
                let history = annotation(new, HISTORY)
                    .map(|h| format!("{h},{current}"))
                    .unwrap_or_else(|| current.to_string());
                annotations.insert(HISTORY.into(), json!(history));
            }
        }
        let patch = json!({"metadata": {"annotations": annotations}, "spec": {"minReadySeconds": min_ready}});
        let ns = new.metadata.namespace.clone().unwrap_or_default();
        let updated = self
            .replica_sets(&ns)
            .patch(&rs_name(new), &self.params(), &Patch::Merge(&patch))
            .await
            .map_err(request(format!("updating ReplicaSet {}", rs_name(new))))?;
        w.new = Some(updated);
        Ok(true)
    }

    /// Proportional scaling (paused Deployments and scaling events).
    pub(super) async fn scale_proportionally(
        &self,
        w: &mut World,
        v: &DeploymentView,
    ) -> Result<(), EngineError> {
        let saturated = w.new.as_ref().is_some_and(|rs| {
            replicas(rs) == v.replicas
                && annotation(rs, DESIRED).and_then(|a| a.parse().ok()) == Some(v.replicas)
                && rs
                    .status
                    .as_ref()
                    .and_then(|s| s.available_replicas)
                    .unwrap_or(0)
                    == v.replicas
        });
        let olds: Vec<ReplicaSetView> = w.olds.iter().map(rs_view).collect();
        let status_replicas = w.d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let scales = steps::proportional_scale(
            v,
            w.new.as_ref().map(rs_view).as_ref(),
            &olds,
            saturated,
            status_replicas,
        );
        let pass = Pass {
            create: None,
            scales,
            waiting_for_old_pods: false,
        };
        self.execute(w, v, &pass).await?;
        // Annotations follow the new size even where the size stays.
        let want = v.replicas.to_string();
        for rs in w.new.iter_mut().chain(w.olds.iter_mut()) {
            if replicas(rs) > 0 && annotation(rs, DESIRED) != Some(want.as_str()) {
                let to = replicas(rs);
                self.scale(rs, to, v).await?;
            }
        }
        Ok(())
    }

    /// `cleanupDeployment`: old ReplicaSets beyond revisionHistoryLimit, oldest revision
    /// first, only those already scaled to zero.
    pub(super) async fn cleanup(&self, w: &World) -> Result<(), EngineError> {
        let Some(limit) =
            w.d.spec
                .as_ref()
                .and_then(|s| s.revision_history_limit)
                .or(Some(10))
                .filter(|l| *l != i32::MAX)
        else {
            return Ok(());
        };
        let mut cleanable: Vec<&ReplicaSet> = w
            .olds
            .iter()
            .filter(|rs| rs.metadata.deletion_timestamp.is_none())
            .collect();
        let diff = cleanable.len() as i64 - i64::from(limit);
        if diff <= 0 {
            return Ok(());
        }
        cleanable.sort_by_key(|rs| {
            (
                revision(rs),
                rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
                rs_name(rs),
            )
        });
        for rs in cleanable.into_iter().take(diff as usize) {
            let status = rs.status.clone().unwrap_or_default();
            if status.replicas != 0
                || replicas(rs) != 0
                || rs.metadata.generation > status.observed_generation
            {
                continue;
            }
            let ns = rs.metadata.namespace.clone().unwrap_or_default();
            match self
                .replica_sets(&ns)
                .delete(&rs_name(rs), &DeleteParams::background())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    return Err(request(format!("deleting old ReplicaSet {}", rs_name(rs)))(
                        e,
                    ))
                }
            }
        }
        Ok(())
    }
}
