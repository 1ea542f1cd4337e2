//! The roll-out step: the rollouts of the Deployments a sync wrote, followed concurrently
//! (berth's engine drives them with `engine = "agent"`), and the app's failure policy:
//! roll back to the previous revision's template, halt, or continue. A rollout shutdown
//! cut short leaves its Deployment's entry as it was, so the next sync follows it again.
//! What it shares with `berth rollback` (following one rollout, restoring a template) is
//! `sync/follow.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::join_all;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;

use crate::cluster::apply::observed;
use crate::config::OnFailure;
use crate::history::{FollowedRollout, RollbackRecord, RolloutOutcome, RolloutRecord};
use crate::manifest::ObjectKey;
use crate::plan::{Entry, Held, Inventory};
use crate::rollout::revisions::{self, Revisions};
use crate::rollout::track::Follow;
use crate::sync::canary;
use crate::sync::context::{Ctx, Journal, Stop};
use crate::sync::error::SyncError;
use crate::sync::follow::{
    engine_name, follow_and_drive, follow_of, follow_one, restore, Restored,
};
use crate::sync::write::Write;

/// What the rollouts of a sync came to.
#[derive(Default)]
struct Rollouts {
    /// Why the app must wait for a new commit, when it must.
    held: Option<String>,
    /// Deployments whose template was rolled back (their inventory entry must not match git).
    rolled_back: Vec<ObjectKey>,
    /// Deployments whose rollout shutdown cut short: the next sync follows them again.
    unfinished: Vec<ObjectKey>,
    /// Deployments a canary applied again at its end, and what they came to (`observed`).
    reapplied: Vec<(ObjectKey, String)>,
}

/// Follows the rollouts of the Deployments written and applies the failure policy to
/// `next`, the inventory this sync stores: a rolled-back or halted commit (`sha`) holds
/// the app, and its rolled-back entries never match git again (so a forced sync re-applies
/// them); a rollout cut short leaves its entry as `old` had it.
pub(in crate::sync) async fn roll_out(
    ctx: &Ctx<'_>,
    writes: &[&Write],
    old: &Inventory,
    next: &mut Inventory,
    sha: &str,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let mut rollouts = follow_all(ctx, writes, old, sha, journal).await;
    canaries(ctx, writes, old, sha, journal, &mut rollouts).await;
    for e in next.objects.iter_mut() {
        if rollouts.rolled_back.contains(&e.key) {
            e.digest = "rolled-back".into();
        }
        if let Some((_, observed)) = rollouts.reapplied.iter().find(|(k, _)| k == &e.key) {
            e.observed = observed.clone();
        }
    }
    if let Some(reason) = rollouts.held {
        next.held = Some(Held {
            commit: sha.to_string(),
            reason,
        });
        return Err(Stop::Failed);
    }
    if !rollouts.unfinished.is_empty() {
        // As if this sync had not written them: the next one (after a restart, say)
        // writes them again, finds their generation moved, follows them to the end and
        // applies the failure policy.
        *next = crate::plan::unfinished(next, old, &rollouts.unfinished);
        return Err(Stop::Interrupted);
    }
    Ok(())
}

/// A Deployment whose spec this sync changed: its generation moved since the last sync
/// recorded it. Labels, annotations or an unchanged re-apply start no rollout, so there is
/// nothing to follow (nor to roll back).
fn starts_rollout(w: &Write, old: &HashMap<&ObjectKey, &Entry>) -> bool {
    let Some(applied) = &w.applied else {
        return false;
    };
    let before = old
        .get(&w.target.manifest.key())
        .map(|e| e.observed.as_str());
    w.is_deployment() && before != Some(observed(&applied.metadata).as_str())
}

/// Follows every Deployment whose spec this sync changed (sharing watches), applies the
/// failure policy and records each rollout worth recording.
async fn follow_all(
    ctx: &Ctx<'_>,
    writes: &[&Write],
    old: &Inventory,
    sha: &str,
    journal: &mut Journal<'_>,
) -> Rollouts {
    let before = old.by_key();
    let deployments: Vec<&Write> = writes
        .iter()
        .copied()
        .filter(|w| w.canary.is_none() && starts_rollout(w, &before))
        .collect();
    if !ctx.options.wait {
        if !deployments.is_empty() {
            ctx.say(&format!(
                "not following the rollout of {} (--no-wait)",
                crate::plural(deployments.len(), "Deployment")
            ));
        }
        return Rollouts::default();
    }
    let follows: Vec<Follow> = deployments
        .iter()
        .map(|w| follow_of(&w.target.manifest, w.applied.as_ref()))
        .collect();
    let records = match follow_and_drive(ctx, &follows).await {
        Ok(followed) => {
            let recorded = deployments.iter().zip(followed).map(|(w, f)| {
                let resumed = before
                    .get(&w.target.manifest.key())
                    .is_some_and(|e| e.digest == crate::plan::UNFINISHED);
                record_rollout(ctx, w, f, resumed)
            });
            join_all(recorded).await
        }
        Err(e) => {
            let e = Arc::new(e);
            let record = |w: &&Write| refused(ctx, w.target.manifest.key(), e.to_string());
            let error = || Some(SyncError::Follow(e.clone()));
            deployments.iter().map(|w| (record(w), error())).collect()
        }
    };
    let mut result = Rollouts::default();
    for (record, error) in records {
        if let Some(e) = error {
            journal.fail(e);
        }
        result.judge(ctx, record, sha, journal);
    }
    result
}

/// Drives the canaries of the Deployments written held, one after another, and applies the
/// failure policy to each as to a rolling rollout.
async fn canaries(
    ctx: &Ctx<'_>,
    writes: &[&Write],
    old: &Inventory,
    sha: &str,
    journal: &mut Journal<'_>,
    rollouts: &mut Rollouts,
) {
    let before = old.by_key();
    let held: Vec<&&Write> = (writes.iter())
        .filter(|w| w.canary.is_some() && w.applied.is_some())
        .collect();
    if held.is_empty() {
        // A canary cut short that git no longer runs (its Deployment gone, or rolling).
        crate::rollout::gate::clear(&ctx.syncer.agent.state_dir, &ctx.app.name);
    }
    for w in held {
        if !ctx.options.wait {
            let key = w.target.manifest.key().kubectl();
            ctx.say(&format!(
                "{key}: not driving its canary (--no-wait): the next sync carries it on"
            ));
            continue;
        }
        let driven = match canary::drive(ctx, w, sha).await {
            Ok(driven) => driven,
            Err(e) => {
                let record = refused(ctx, w.target.manifest.key(), e.to_string());
                journal.fail(e);
                rollouts.judge(ctx, record, sha, journal);
                continue;
            }
        };
        if let Some(applied) = &driven.applied {
            let key = w.target.manifest.key();
            rollouts.reapplied.push((key, observed(&applied.metadata)));
        }
        let resumed = (before.get(&w.target.manifest.key()))
            .is_some_and(|e| e.digest == crate::plan::UNFINISHED);
        let (mut record, error) = record_rollout(ctx, w, driven.followed, resumed).await;
        record.canary = driven.steps;
        if let Some(e) = error {
            journal.fail(e);
        }
        rollouts.judge(ctx, record, sha, journal);
    }
}

impl Rollouts {
    /// Applies the failure policy to one followed rollout, and records it when it did
    /// something (a new revision, more than one step, a failure).
    fn judge(
        &mut self,
        ctx: &Ctx<'_>,
        record: RolloutRecord,
        sha: &str,
        journal: &mut Journal<'_>,
    ) {
        if matches!(
            record.rollout.outcome,
            RolloutOutcome::Interrupted | RolloutOutcome::Superseded
        ) {
            self.unfinished.push(record.deployment.clone());
        }
        let failed = failed(&record);
        if failed {
            let key = record.deployment.clone();
            let rollback = record.rollback.as_ref().map(|rb| rb.message.clone());
            if rollback.is_some() {
                self.rolled_back.push(key.clone());
            }
            journal.fail(SyncError::Rollout {
                key,
                outcome: record.rollout.outcome.as_str(),
                message: record.rollout.message.clone(),
                rollback,
            });
            let short = crate::source::short(sha);
            match ctx.app.rollout.on_failure {
                OnFailure::Rollback => {
                    self.held = Some(format!("rollout failed at {short} and was rolled back"))
                }
                OnFailure::Halt => {
                    self.held = Some(format!("rollout failed at {short}; the app is halted"))
                }
                OnFailure::Continue => {}
            }
        }
        if record.revision_from != record.rollout.revision
            || record.rollout.steps.len() > 1
            || failed
        {
            journal.rollouts.push(record);
        }
    }
}

/// Whether the rollout failed or timed out.
fn failed(record: &RolloutRecord) -> bool {
    matches!(
        record.rollout.outcome,
        RolloutOutcome::Failed | RolloutOutcome::TimedOut
    )
}

/// The record of one followed rollout; on failure with `on_failure = "rollback"`, rolls
/// it back and follows that too. Returns the record and an error that is not the
/// rollout's own. A `resumed` rollout is one a shutdown cut short, which this sync
/// followed again.
async fn record_rollout(
    ctx: &Ctx<'_>,
    w: &Write,
    followed: FollowedRollout,
    resumed: bool,
) -> (RolloutRecord, Option<SyncError>) {
    let m = &w.target.manifest;
    let ns = m.namespace_or_default();
    let revisions = current_revisions(&ctx.cluster.client, ns, m.name()).await;
    let live = w.existing_revision().and_then(|r| revisions.revision(r));
    // A rollout this sync resumed (a restart cut the last one short: its template was
    // live already) comes from the revision before it, as `kubectl rollout undo` sees it.
    let from = match live {
        Some(rs) if resumed && rs.hash == revisions.hash => revisions.previous(),
        live => live,
    };
    let mut record = RolloutRecord {
        deployment: m.key(),
        engine: engine_name(ctx).into(),
        revision_from: from.map(|rs| rs.revision),
        replica_set_from: from.map(|rs| rs.name.clone()),
        hash_from: from.map(|rs| rs.hash.clone()),
        images_from: from.map(|rs| rs.images.clone()).unwrap_or_default(),
        hash_to: revisions.hash.clone(),
        images_to: revisions
            .new
            .as_ref()
            .map(|rs| rs.images.clone())
            .unwrap_or_default(),
        rollout: followed,
        rollback: None,
        canary: Vec::new(),
    };
    if !failed(&record) || ctx.app.rollout.on_failure != OnFailure::Rollback {
        return (record, None);
    }
    match roll_back(ctx, w, &revisions, &record).await {
        Ok(rb) => {
            record.rollback = rb;
            (record, None)
        }
        Err(e) => (record, Some(e)),
    }
}

/// Restores the template of the revision that ran before this sync (for a rollout this
/// sync resumed, the revision before it: see [`record_rollout`]).
async fn roll_back(
    ctx: &Ctx<'_>,
    w: &Write,
    revisions: &Revisions,
    failed: &RolloutRecord,
) -> Result<Option<RollbackRecord>, SyncError> {
    let prefix = w.target.manifest.key().kubectl();
    let report = |line: &str| ctx.say(&format!("{prefix}: {line}"));
    let Some(target) = failed
        .revision_from
        .and_then(|r| revisions.revision(r))
        .filter(|rs| rs.hash != revisions.hash)
    else {
        report("no earlier revision to roll back to: left as it is");
        return Ok(None);
    };
    let Restored {
        applied,
        commit,
        message,
    } = restore(ctx, &w.target, failed.rollout.revision, target).await?;
    report(&message);
    let rollout = follow_one(ctx, &applied, &w.target.manifest).await?;
    Ok(Some(RollbackRecord {
        to_revision: target.revision,
        commit,
        message,
        rollout,
    }))
}

/// The record of a rollout that could not be followed.
fn refused(ctx: &Ctx<'_>, key: ObjectKey, message: String) -> RolloutRecord {
    let now = jiff::Timestamp::now();
    RolloutRecord {
        deployment: key,
        engine: engine_name(ctx).into(),
        revision_from: None,
        replica_set_from: None,
        hash_from: None,
        images_from: Vec::new(),
        hash_to: String::new(),
        images_to: Vec::new(),
        rollout: FollowedRollout {
            outcome: RolloutOutcome::Failed,
            message,
            revision: None,
            replica_set: None,
            started_at: now,
            finished_at: now,
            steps: Vec::new(),
        },
        rollback: None,
        canary: Vec::new(),
    }
}

/// The revisions of Deployment `namespace/name` as they stand.
async fn current_revisions(client: &kube::Client, ns: &str, name: &str) -> Revisions {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    match api.get(name).await {
        Ok(d) => revisions::list(client, &d).await.unwrap_or_default(),
        Err(_) => Revisions::default(),
    }
}
