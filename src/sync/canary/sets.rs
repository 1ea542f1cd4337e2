//! A canary's two ReplicaSets: the new version's made as Kubernetes' controller makes it
//! (so that it adopts it once the Deployment is applied as git has it), each scaled and
//! waited on with a watch; where the pods stand recorded as a rolling rollout's timeline.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;

use crate::config::RolloutEngine;
use crate::history::TimelineStep;
use crate::rollout::canary::Split;
use crate::rollout::engine::ENGINE_ANNOTATION;
use crate::rollout::revisions::{self, Owned, REVISION};
use crate::shutdown;
use crate::sync::context::Ctx;
use crate::sync::error::SyncError;

/// Why a step's pods did not stand.
#[derive(Debug, thiserror::Error)]
pub(super) enum NotStood {
    /// Not ready within the rollout's timeout.
    #[error("ReplicaSet {name} has not {size} ready pods after {}", humantime::format_duration(*after))]
    Slow {
        /// The ReplicaSet.
        name: String,
        /// The pods it should have.
        size: i32,
        /// The rollout's timeout.
        after: Duration,
    },
    /// The watch failed.
    #[error("watching ReplicaSet {name}: {error}")]
    Watch {
        /// The ReplicaSet.
        name: String,
        /// What failed.
        error: String,
    },
}

/// The ready pods of each version once a step stood.
pub(super) struct Stood {
    pub new: i32,
    pub old: i32,
}

/// One Deployment's ReplicaSets as a canary moves them.
pub(super) struct Sets<'a> {
    ctx: &'a Ctx<'a>,
    api: Api<ReplicaSet>,
    /// The new version's.
    pub new: String,
    /// The old version's (the largest old one: what runs now).
    old: Option<String>,
    /// Other old ones with pods (a canary git moved on from): brought to 0 at the first
    /// step.
    others: Vec<String>,
    /// Where the pods stood at each step.
    pub timeline: Vec<TimelineStep>,
    /// The Deployment's replicas.
    pub replicas: i32,
    /// The new version's ReplicaSet has pods already: it ran before.
    pub running: bool,
}

impl<'a> Sets<'a> {
    /// Deployment `d`'s ReplicaSets: its template's (made at 0 when missing) and the old
    /// one running.
    pub async fn of(ctx: &'a Ctx<'a>, d: &Deployment) -> Result<Sets<'a>, SyncError> {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let api: Api<ReplicaSet> = Api::namespaced(ctx.writer.clone(), &ns);
        let listed = api
            .list(&ListParams::default().labels(&revisions::selector(d)))
            .await
            .map_err(request("listing the Deployment's ReplicaSets"))?;
        let owned = revisions::owned(d, listed.items);
        let size = |rs: &ReplicaSet| rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let old = (owned.old.iter())
            .filter(|rs| size(rs) > 0)
            .max_by_key(|rs| size(rs));
        let running = owned.new.as_ref().is_some_and(|rs| size(rs) > 0);
        let name = |rs: &ReplicaSet| rs.metadata.name.clone();
        let others = (owned.old.iter())
            .filter(|rs| size(rs) > 0 && old.is_some_and(|o| o.metadata.name != rs.metadata.name))
            .filter_map(name)
            .collect();
        let old = old.and_then(name);
        let new = match &owned.new {
            Some(rs) => rs.metadata.name.clone().unwrap_or_default(),
            None => create(ctx, &api, d, &owned).await?,
        };
        Ok(Sets {
            ctx,
            api,
            new,
            old,
            others,
            timeline: Vec::new(),
            replicas: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            running,
        })
    }

    /// The old version (its ReplicaSet's hash), when one runs.
    pub fn old_version(&self) -> Option<String> {
        let old = self.old.as_deref()?;
        Some(old.rsplit('-').next().unwrap_or_default().to_string())
    }

    /// The new version's pods (its ReplicaSet's `spec.replicas`).
    pub async fn new_size(&self) -> Result<i32, SyncError> {
        let rs = self.get(&self.new).await?;
        Ok(rs.spec.and_then(|s| s.replicas).unwrap_or(0))
    }

    async fn get(&self, name: &str) -> Result<ReplicaSet, SyncError> {
        let got = self.api.get(name).await;
        got.map_err(request("reading a ReplicaSet"))
    }

    /// Scales ReplicaSet `name` to `size`.
    async fn scale(&self, name: &str, size: i32) -> Result<(), SyncError> {
        let patch = serde_json::json!({"spec": {"replicas": size}});
        let params = PatchParams {
            field_manager: Some(self.ctx.syncer.agent.field_manager.clone()),
            ..PatchParams::default()
        };
        let patched = self.api.patch(name, &params, &Patch::Merge(patch)).await;
        patched.map_err(request("scaling a ReplicaSet"))?;
        Ok(())
    }

    /// Scales ReplicaSet `name` to `size` and waits until it has `size` ready pods and no
    /// more (by `deadline`); a shutdown ends the wait.
    async fn settle(
        &self,
        name: &str,
        size: i32,
        deadline: Instant,
    ) -> Result<Result<(), NotStood>, SyncError> {
        self.scale(name, size).await?;
        let settled = move |rs: Option<&ReplicaSet>| {
            let status = rs.and_then(|rs| rs.status.as_ref());
            let ready = status.and_then(|s| s.ready_replicas).unwrap_or(0);
            ready >= size && status.is_some_and(|s| s.replicas <= size)
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = await_condition(self.api.clone(), name, settled);
        let name = name.to_string();
        Ok(tokio::select! {
            done = tokio::time::timeout(left, wait) => match done {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(NotStood::Watch { name, error: e.to_string() }),
                Err(_) => Err(NotStood::Slow { name, size, after: self.ctx.app.rollout.timeout }),
            },
            () = shutdown::asked(self.ctx.shutdown.clone()) => Ok(()),
        })
    }

    /// Brings the pods to `split`: the new ones up and ready, then the old ones down;
    /// records where they stand.
    pub async fn stand(&mut self, split: Split) -> Result<Result<Stood, NotStood>, SyncError> {
        let deadline = Instant::now() + self.ctx.app.rollout.timeout;
        if let Err(e) = self.settle(&self.new, split.new, deadline).await? {
            return Ok(Err(e));
        }
        let others = std::mem::take(&mut self.others).into_iter().map(|o| (o, 0));
        for (old, size) in self
            .old
            .clone()
            .map(|o| (o, split.old))
            .into_iter()
            .chain(others)
        {
            if let Err(e) = self.settle(&old, size, deadline).await? {
                return Ok(Err(e));
            }
        }
        let new = Some(self.get(&self.new).await?);
        let old = match &self.old {
            Some(name) => Some(self.get(name).await?),
            None => None,
        };
        let status = |rs: &Option<ReplicaSet>| rs.as_ref().and_then(|rs| rs.status.clone());
        let ready = |rs| status(rs).and_then(|s| s.ready_replicas).unwrap_or(0);
        let available = |rs| status(rs).and_then(|s| s.available_replicas).unwrap_or(0);
        let spec = |rs: &Option<ReplicaSet>| {
            (rs.as_ref())
                .and_then(|rs| rs.spec.as_ref()?.replicas)
                .unwrap_or(0)
        };
        self.timeline.push(TimelineStep {
            at: Timestamp::now(),
            new_replicas: spec(&new),
            new_ready: ready(&new),
            new_available: available(&new),
            old_replicas: spec(&old),
            old_available: available(&old),
            desired: Some(self.replicas),
        });
        Ok(Ok(Stood {
            new: ready(&new),
            old: ready(&old),
        }))
    }

    /// The old version back at full size (first, so that the pods never drop below it),
    /// then the new one at 0 (and any abandoned canary's still running). What kept either from settling is said, not fatal: the
    /// rollback that follows restores the old template either way.
    pub async fn abort(&mut self, say: &(dyn Fn(&str) + Sync)) -> Result<(), SyncError> {
        let deadline = Instant::now() + self.ctx.app.rollout.timeout;
        if let Some(old) = self.old.clone() {
            if let Err(e) = self.settle(&old, self.replicas, deadline).await? {
                say(&e.to_string());
            }
        }
        // An abandoned canary's pods too, when the first step did not stand.
        let others = std::mem::take(&mut self.others);
        for rs in std::iter::once(self.new.clone()).chain(others) {
            if let Err(e) = self.settle(&rs, 0, deadline).await? {
                say(&e.to_string());
            }
        }
        Ok(())
    }
}

/// Creates the new version's ReplicaSet at 0: named and labelled by its template's hash,
/// the next revision, the Deployment its controller (and berth's engine named when it
/// drives the app's Deployments). Its name.
async fn create(
    ctx: &Ctx<'_>,
    api: &Api<ReplicaSet>,
    d: &Deployment,
    owned: &Owned,
) -> Result<String, SyncError> {
    let revisions = owned
        .old
        .iter()
        .filter_map(|rs| revisions::revision_of(&rs.metadata));
    let mut annotations = BTreeMap::new();
    let next = revisions.max().unwrap_or(0) + 1;
    annotations.insert(REVISION.to_string(), next.to_string());
    if ctx.app.rollout.engine == RolloutEngine::Agent {
        annotations.insert(ENGINE_ANNOTATION.to_string(), "agent".to_string());
    }
    let deployment = d.metadata.name.as_deref().unwrap_or_default();
    let name = format!("{deployment}-{}", owned.hash);
    let rs = revisions::replica_set_of(d, &owned.template, &name, &owned.hash, annotations, 0)
        .map_err(|e| request("making the new ReplicaSet")(kube::Error::SerdeError(e)))?;
    let params = PostParams {
        field_manager: Some(ctx.syncer.agent.field_manager.clone()),
        ..PostParams::default()
    };
    let created = api.create(&params, &rs).await;
    created.map_err(request("creating the new ReplicaSet"))?;
    Ok(name)
}

/// A failed request, saying what it was for.
pub(super) fn request(what: &str) -> impl FnOnce(kube::Error) -> SyncError + '_ {
    move |cause| {
        let what = what.to_string();
        SyncError::Cluster(crate::cluster::ClusterError::Request { what, cause })
    }
}
