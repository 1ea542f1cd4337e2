//! Driving one held Deployment's canary: its new ReplicaSet made (as the controller makes
//! it), then each step's pods — new ones up and ready first, then old ones down, the total
//! back at `replicas` — held through the step's pause and checks; at 100 % the Deployment
//! applied as git has it. A failed check (or new pods never ready) brings the old version
//! back to full size and the new one to 0, and the roll-out step's rollback follows.

use std::collections::BTreeMap;
use std::time::Instant;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;

use super::checks;
use crate::cluster::apply::apply_all;
use crate::config::RolloutEngine;
use crate::history::{CanaryStepRecord, FollowedRollout, RolloutOutcome, TimelineStep};
use crate::rollout::canary::{step_shown, Split};
use crate::rollout::engine::ENGINE_ANNOTATION;
use crate::rollout::revisions::{self, REVISION};
use crate::shutdown;
use crate::sync::context::Ctx;
use crate::sync::error::SyncError;
use crate::sync::follow::follow_one;
use crate::sync::write::Write;

/// What a canary came to.
pub(in crate::sync) struct Driven {
    /// The rollout as a rolling one is recorded: its outcome, message and timeline.
    pub followed: FollowedRollout,
    /// Its steps as they ran.
    pub steps: Vec<CanaryStepRecord>,
    /// The Deployment as applied at the end, as git has it (the canary reached 100 %).
    pub applied: Option<DynamicObject>,
}

/// One Deployment's ReplicaSets as a canary moves them.
struct Sets<'a> {
    ctx: &'a Ctx<'a>,
    api: Api<ReplicaSet>,
    /// The new version's.
    new: String,
    /// The old version's (the largest old one: what runs now).
    old: Option<String>,
    timeline: Vec<TimelineStep>,
    replicas: i32,
}

/// Drives write `w`'s canary (its Deployment applied held) to its end.
///
/// # Errors
/// The Deployment or its ReplicaSets cannot be read or written.
pub(in crate::sync) async fn drive(ctx: &Ctx<'_>, w: &Write) -> Result<Driven, SyncError> {
    let Some(canary) = &w.canary else {
        unreachable!("drive is given canaries only");
    };
    let m = &w.target.manifest;
    let prefix = m.key().kubectl();
    let say = |line: &str| ctx.say(&format!("{prefix}: {line}"));
    let started = Timestamp::now();
    let ns = m.namespace_or_default();
    let deployments: Api<Deployment> = Api::namespaced(ctx.cluster.client.clone(), ns);
    let d = deployments
        .get(m.name())
        .await
        .map_err(request("reading the Deployment"))?;
    let mut sets = Sets::of(ctx, &d).await?;
    let version = sets.new.rsplit('-').next().unwrap_or_default().to_string();
    let weights: Vec<u8> = canary.steps.iter().map(|s| s.weight).collect();
    let shown = sets.get(&sets.new).await?.spec.and_then(|s| s.replicas);
    let from = step_shown(&weights, sets.replicas, shown.unwrap_or(0)).unwrap_or(0);
    if from > 0 {
        say(&format!(
            "carrying on the canary at step {} of {}",
            from + 1,
            weights.len()
        ));
    }
    let client = crate::notifications::deliver::client().map_err(|e| SyncError::Canary {
        origin: m.origin.clone(),
        key: m.key().qualified_name(),
        message: format!("no HTTP client for its checks: {e}"),
    })?;
    let config = ctx.syncer.config();
    let mut steps = Vec::new();
    for (i, step) in canary.steps.iter().enumerate().skip(from) {
        let split = Split::at(sets.replicas, step.weight);
        say(&format!(
            "step {} of {}: {} % ({} new, {} old)",
            i + 1,
            weights.len(),
            step.weight,
            split.new,
            split.old
        ));
        let stood = match sets.stand(split).await? {
            Ok(stood) => stood,
            Err(why) => {
                let why = format!("step {} ({} %): {why}", i + 1, step.weight);
                return sets.abort(started, steps, why, &say).await;
            }
        };
        let mut record = CanaryStepRecord {
            step: i,
            weight: step.weight,
            new: stood.new,
            old: stood.old,
            at: Timestamp::now(),
            done_at: None,
            checks: Vec::new(),
        };
        if let Some(pause) = step.pause {
            say(&format!("paused for {}", humantime::format_duration(pause)));
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = shutdown::asked(ctx.shutdown.clone()) => {}
            }
        }
        if !step.analysis.is_empty() && !shutdown::is_stopped(ctx.shutdown) {
            record.checks = checks::run(
                &config.analyses,
                &step.analysis,
                &version,
                &client,
                ctx.shutdown,
                &say,
            )
            .await;
        }
        if shutdown::is_stopped(ctx.shutdown) {
            steps.push(record);
            let message = format!(
                "cut short at step {} ({} %): the next sync carries it on",
                i + 1,
                step.weight
            );
            return Ok(sets.ended(RolloutOutcome::Interrupted, message, started, steps));
        }
        let failed = (record.checks.iter()).find(|c| !c.passed).map(|c| {
            let last = c.measurements.iter().rev().find(|m| !m.passed);
            let why = last.and_then(|m| m.why.clone()).unwrap_or_default();
            format!(
                "analysis {} failed at step {} ({} %): {why}",
                c.name,
                i + 1,
                step.weight
            )
        });
        record.done_at = Some(Timestamp::now());
        steps.push(record);
        if let Some(why) = failed {
            return sets.abort(started, steps, why, &say).await;
        }
    }
    // At 100 %: the Deployment as git has it; its controller finds the new ReplicaSet full.
    let applied = apply_all(&ctx.writer, &ctx.settings(), &[&w.target], false)
        .await
        .pop()
        .ok_or_else(|| SyncError::RollbackNotApplied(m.key()))?
        .map_err(SyncError::RollbackFailed)?;
    let mut followed = follow_one(ctx, &applied, m).await?;
    followed.started_at = started;
    let mut timeline = std::mem::take(&mut sets.timeline);
    timeline.append(&mut followed.steps);
    followed.steps = timeline;
    Ok(Driven {
        followed,
        steps,
        applied: Some(applied),
    })
}

/// The pods of each version once a step stood.
struct Stood {
    new: i32,
    old: i32,
}

impl<'a> Sets<'a> {
    /// Deployment `d`'s ReplicaSets: its template's (made at 0 when missing) and the old
    /// one running.
    async fn of(ctx: &'a Ctx<'a>, d: &Deployment) -> Result<Sets<'a>, SyncError> {
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
            .max_by_key(|rs| size(rs))
            .and_then(|rs| rs.metadata.name.clone());
        let new = match owned.new {
            Some(rs) => rs.metadata.name.unwrap_or_default(),
            None => {
                let max = owned
                    .old
                    .iter()
                    .filter_map(|rs| revisions::revision_of(&rs.metadata));
                let mut annotations = BTreeMap::new();
                annotations.insert(
                    REVISION.to_string(),
                    (max.max().unwrap_or(0) + 1).to_string(),
                );
                if ctx.app.rollout.engine == RolloutEngine::Agent {
                    annotations.insert(ENGINE_ANNOTATION.to_string(), "agent".to_string());
                }
                let name = format!(
                    "{}-{}",
                    d.metadata.name.as_deref().unwrap_or_default(),
                    owned.hash
                );
                let rs = revisions::replica_set_of(
                    d,
                    &owned.template,
                    &name,
                    &owned.hash,
                    annotations,
                    0,
                )
                .map_err(|e| request("making the new ReplicaSet")(kube::Error::SerdeError(e)))?;
                let params = PostParams {
                    field_manager: Some(ctx.syncer.agent.field_manager.clone()),
                    ..PostParams::default()
                };
                api.create(&params, &rs)
                    .await
                    .map_err(request("creating the new ReplicaSet"))?;
                name
            }
        };
        Ok(Sets {
            ctx,
            api,
            new,
            old,
            timeline: Vec::new(),
            replicas: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        })
    }

    async fn get(&self, name: &str) -> Result<ReplicaSet, SyncError> {
        self.api
            .get(name)
            .await
            .map_err(request("reading a ReplicaSet"))
    }

    /// Scales ReplicaSet `name` to `size`.
    async fn scale(&self, name: &str, size: i32) -> Result<(), SyncError> {
        let patch = serde_json::json!({"spec": {"replicas": size}});
        let params = PatchParams {
            field_manager: Some(self.ctx.syncer.agent.field_manager.clone()),
            ..PatchParams::default()
        };
        self.api
            .patch(name, &params, &Patch::Merge(patch))
            .await
            .map_err(request("scaling a ReplicaSet"))?;
        Ok(())
    }

    /// Waits until ReplicaSet `name` has `ready` ready pods and no more than `size` pods
    /// in all (within what is left of the rollout's timeout). `Err(why)` when it does not.
    async fn settle(
        &self,
        name: &str,
        size: i32,
        deadline: Instant,
    ) -> Result<Result<(), String>, SyncError> {
        let settled = move |rs: Option<&ReplicaSet>| {
            let status = rs.and_then(|rs| rs.status.as_ref());
            let ready = status.and_then(|s| s.ready_replicas).unwrap_or(0);
            ready >= size && status.is_some_and(|s| s.replicas <= size)
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = await_condition(self.api.clone(), name, settled);
        tokio::select! {
            done = tokio::time::timeout(left, wait) => match done {
                Ok(Ok(_)) => Ok(Ok(())),
                Ok(Err(e)) => Ok(Err(format!("watching ReplicaSet {name}: {e}"))),
                Err(_) => Ok(Err(format!(
                    "ReplicaSet {name} has not {size} ready pods after {}",
                    humantime::format_duration(self.ctx.app.rollout.timeout)
                ))),
            },
            () = shutdown::asked(self.ctx.shutdown.clone()) => Ok(Ok(())),
        }
    }

    /// Brings the pods to `split`: the new ones up and ready, then the old ones down.
    async fn stand(&mut self, split: Split) -> Result<Result<Stood, String>, SyncError> {
        let deadline = Instant::now() + self.ctx.app.rollout.timeout;
        self.scale(&self.new, split.new).await?;
        if let Err(why) = self.settle(&self.new, split.new, deadline).await? {
            return Ok(Err(why));
        }
        if let Some(old) = &self.old {
            self.scale(old, split.old).await?;
            if let Err(why) = self.settle(old, split.old, deadline).await? {
                return Ok(Err(why));
            }
        }
        let (new, old) = (self.get(&self.new).await?, self.old_set().await?);
        let ready = |rs: Option<&ReplicaSet>| {
            rs.and_then(|rs| rs.status.as_ref())
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0)
        };
        let available = |rs: Option<&ReplicaSet>| {
            rs.and_then(|rs| rs.status.as_ref())
                .and_then(|s| s.available_replicas)
                .unwrap_or(0)
        };
        let spec =
            |rs: Option<&ReplicaSet>| rs.and_then(|rs| rs.spec.as_ref()?.replicas).unwrap_or(0);
        self.timeline.push(TimelineStep {
            at: Timestamp::now(),
            new_replicas: spec(Some(&new)),
            new_ready: ready(Some(&new)),
            new_available: available(Some(&new)),
            old_replicas: spec(old.as_ref()),
            old_available: available(old.as_ref()),
            desired: Some(self.replicas),
        });
        Ok(Ok(Stood {
            new: ready(Some(&new)),
            old: ready(old.as_ref()),
        }))
    }

    async fn old_set(&self) -> Result<Option<ReplicaSet>, SyncError> {
        match &self.old {
            Some(name) => self.get(name).await.map(Some),
            None => Ok(None),
        }
    }

    /// The old version back at full size and the new one at 0; the rollout failed for
    /// `why` (the roll-out step's rollback restores the old template).
    async fn abort(
        &mut self,
        started: Timestamp,
        steps: Vec<CanaryStepRecord>,
        why: String,
        say: &(dyn Fn(&str) + Sync),
    ) -> Result<Driven, SyncError> {
        say(&format!(
            "{why}: aborting, the old version back at {}",
            self.replicas
        ));
        let deadline = Instant::now() + self.ctx.app.rollout.timeout;
        if let Some(old) = self.old.clone() {
            self.scale(&old, self.replicas).await?;
            if let Err(e) = self.settle(&old, self.replicas, deadline).await? {
                say(&e);
            }
        }
        self.scale(&self.new, 0).await?;
        if let Err(e) = self.settle(&self.new, 0, deadline).await? {
            say(&e);
        }
        Ok(self.ended(RolloutOutcome::Failed, why, started, steps))
    }

    /// The canary's record when it ends short of 100 %.
    fn ended(
        &mut self,
        outcome: RolloutOutcome,
        message: String,
        started: Timestamp,
        steps: Vec<CanaryStepRecord>,
    ) -> Driven {
        Driven {
            followed: FollowedRollout {
                outcome,
                message,
                revision: None,
                replica_set: Some(self.new.clone()),
                started_at: started,
                finished_at: Timestamp::now(),
                steps: std::mem::take(&mut self.timeline),
            },
            steps,
            applied: None,
        }
    }
}

/// A failed request, saying what it was for.
fn request(what: &str) -> impl FnOnce(kube::Error) -> SyncError + '_ {
    move |cause| {
        let what = what.to_string();
        SyncError::Cluster(crate::cluster::ClusterError::Request { what, cause })
    }
}
