//! `berth rollback APP DEPLOYMENT [--to-revision N]`: a manual rollback, recorded in the
//! history like a sync (trigger `cli`). The app is then held at its current commit, so
//! berth does not undo the rollback; the next commit to git rolls forward again.

use std::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;

use super::context::{Ctx, Journal, Stop};
use super::error::SyncError;
use super::follow::{engine_name, follow_one, restore, Restored};
use super::pipeline::{finish, outcome_of};
use super::progress::Report;
use super::step::Step;
use super::steps::inventory::{self, InventoryStore};
use super::steps::render::render_with;
use super::syncer::Syncer;
use crate::cluster::ClusterError;
use crate::config::{AppConfig, SourceRef};
use crate::history::{Outcome, RolloutOutcome, RolloutRecord, SyncRecord};
use crate::manifest::{ObjectKey, LABEL_APP};
use crate::plan::{Held, Inventory, Target};
use crate::rollout::revisions::{self, ReplicaSetInfo, Revisions};
use crate::rollout::track;
use crate::source::git::{self, Checkout};

/// What to roll back.
pub struct RollbackRequest<'a> {
    /// `name` or `namespace/name` of a Deployment the app manages.
    pub deployment: &'a str,
    /// The revision to restore; the previous one when `None`.
    pub to_revision: Option<i64>,
    /// Follow the rollout to its end.
    pub wait: bool,
}

/// A rollback refused before anything was written (no such Deployment or revision):
/// nothing is recorded in the history.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RollbackRefused(String);

/// How a manual rollback ended early.
enum Ended {
    /// Failed part way: recorded.
    Failed,
    /// Refused before anything was written: not recorded.
    Refused(String),
}

impl From<Stop> for Ended {
    fn from(_: Stop) -> Self {
        Ended::Failed
    }
}

impl Syncer {
    /// Rolls a Deployment of `app` back and records it in the history.
    ///
    /// # Errors
    /// The app manages no such Deployment, or it has no such revision.
    pub async fn rollback(
        &self,
        app: &AppConfig,
        request: &RollbackRequest<'_>,
        report: Report<'_>,
    ) -> Result<SyncRecord, RollbackRefused> {
        let clock = std::time::Instant::now();
        let ctx = Ctx::for_command(self, app, report);
        let mut journal = ctx.journal();
        let mut rec = self.new_record(&ctx);
        let mut lock = match super::lock::take(&ctx, &mut journal).await {
            Ok(lock) => lock,
            Err(stop) => {
                rec.outcome = outcome_of(stop);
                return Ok(finish(&ctx, rec, journal, clock, None));
            }
        };
        rec.id = lock.id().to_string();
        rec.started_at = lock.started_at();
        let ended = roll_back(&ctx, request, &mut rec, &mut journal).await;
        rec.outcome = match ended {
            Ok(outcome) => outcome,
            Err(Ended::Refused(message)) => {
                lock.release();
                return Err(RollbackRefused(message));
            }
            Err(Ended::Failed) => Outcome::Failed,
        };
        lock.enter(&ctx, Step::History);
        Ok(finish(&ctx, rec, journal, clock, Some(lock)))
    }
}

/// A manual rollback: the revision restored, the app held at its commit so that berth does
/// not undo it, the rollout followed.
async fn roll_back(
    ctx: &Ctx<'_>,
    request: &RollbackRequest<'_>,
    rec: &mut SyncRecord,
    journal: &mut Journal<'_>,
) -> Result<Outcome, Ended> {
    let (inventory, mut store) = inventory::load(ctx, journal).await?;
    let managed: Vec<ObjectKey> = inventory.objects.iter().map(|e| e.key.clone()).collect();
    let key = find_deployment(ctx, &managed, request.deployment)?;
    let checkout = synced_tree(ctx, &inventory).await;
    rec.commit = checkout.as_ref().map(|c| c.commit.clone());
    let revisions = live_revisions(ctx, &key, journal).await?;
    let target = pick_revision(&key, &revisions, request.to_revision)?;
    if target.hash == revisions.hash {
        let note = format!(
            "skipped: the current template already matches revision {}",
            target.revision
        );
        ctx.say(&note);
        rec.note = Some(note);
        return Ok(Outcome::NoChange);
    }
    let deployment = deployment_at(ctx, checkout, &key, journal).await?;
    let current = revisions.new.as_ref().map(|rs| rs.revision);
    let Restored {
        applied, message, ..
    } = restore(ctx, &deployment, current, target)
        .await
        .map_err(|e| journal.stop(e))?;
    ctx.say(&message);
    rec.note = Some(hold_note(&message, inventory.commit.as_deref()));
    hold(ctx, &mut store, inventory, &key, &message, journal).await?;
    let rollout = if request.wait {
        follow_one(ctx, &applied, &deployment.manifest)
            .await
            .map_err(|e| journal.stop(e))?
    } else {
        track::not_followed(target.revision)
    };
    let outcome = rollout.outcome;
    journal
        .rollouts
        .push(rollback_record(ctx, key, &revisions, target, rollout));
    match outcome {
        RolloutOutcome::Complete | RolloutOutcome::Interrupted => Ok(Outcome::RolledBack),
        _ => Err(journal.stop(SyncError::RollbackIncomplete).into()),
    }
}

/// The tree of the commit the app was last synced to, from berth's cache (its history
/// fetched when the cache is shallow); of a registry source's revision, from its cache or
/// the registry (its digest checked).
async fn synced_tree(ctx: &Ctx<'_>, inventory: &Inventory) -> Option<Checkout> {
    let sha = inventory.commit.as_deref()?;
    if !matches!(ctx.app.source(), SourceRef::Git(_)) {
        let at = ctx.app.at_revision(sha).ok()?;
        let checkout = ctx.syncer.sources.fetch(&at, Instant::now()).await.ok()?;
        return Some(checkout).filter(|c| c.commit.sha == sha);
    }
    let tree = || {
        git::tree_at(
            &ctx.syncer.agent.state_dir,
            &ctx.app.repo,
            sha,
            git::TreeLimits::of(&ctx.syncer.agent),
        )
    };
    match tree() {
        Some(checkout) => Some(checkout),
        None if ctx.syncer.sources.deepen(ctx.app).await => tree(),
        None => None,
    }
}

/// The Deployment's revisions as they stand.
async fn live_revisions(
    ctx: &Ctx<'_>,
    key: &ObjectKey,
    journal: &mut Journal<'_>,
) -> Result<Revisions, Stop> {
    let ns = key.namespace_or_default();
    let api: Api<Deployment> = Api::namespaced(ctx.cluster.client.clone(), ns);
    let request = |what: &str| {
        let what = format!("{what} {}", key.qualified_name());
        move |cause| ClusterError::Request { what, cause }
    };
    let live = api
        .get(&key.name)
        .await
        .map_err(request("cannot read Deployment"))
        .map_err(|e| journal.stop(e))?;
    revisions::list(&ctx.cluster.client, &live)
        .await
        .map_err(request("cannot list the ReplicaSets of"))
        .map_err(|e| journal.stop(e))
}

/// The Deployment as the app's last synced commit renders it.
async fn deployment_at(
    ctx: &Ctx<'_>,
    checkout: Option<Checkout>,
    key: &ObjectKey,
    journal: &mut Journal<'_>,
) -> Result<Target, Ended> {
    let (kinds, _) = ctx.discover(None, journal).await?;
    let app = &ctx.app.name;
    let Some(checkout) = checkout else {
        return Err(Ended::Refused(format!(
            "the commit app {app} was last synced to is not in berth's repository cache: run `berth sync {app}` first"
        )));
    };
    let manifests = render_with(ctx, &checkout, &kinds, journal).await?;
    let Some(manifest) = manifests.into_iter().find(|m| m.key() == *key) else {
        return Err(Ended::Refused(format!(
            "Deployment {} is not in the local checkout of app {app}: run `berth sync {app}` first",
            key.qualified_name(),
        )));
    };
    let resolved = kinds.require(&manifest).map_err(|e| journal.stop(e))?;
    Ok(Target { manifest, resolved })
}

/// The record's note of a manual rollback.
fn hold_note(message: &str, commit: Option<&str>) -> String {
    let short = commit.map(crate::source::short).unwrap_or("-");
    format!(
        "{message} by berth rollback; berth holds commit {short} so it does not undo this, but the next commit to git rolls forward again: to keep this revision, revert the change in git"
    )
}

/// Holds the app at its commit, its rolled-back Deployment's entry never matching git
/// again.
async fn hold(
    ctx: &Ctx<'_>,
    store: &mut InventoryStore,
    mut inventory: Inventory,
    key: &ObjectKey,
    message: &str,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let before = inventory.clone();
    inventory.held = Some(Held {
        commit: inventory.commit.clone().unwrap_or_default(),
        reason: format!("{message} by berth rollback"),
    });
    for e in inventory.objects.iter_mut().filter(|e| e.key == *key) {
        e.digest = "rolled-back".into();
    }
    if store.store(ctx, &before, &inventory, journal).await {
        Ok(())
    } else {
        Err(Stop::Failed)
    }
}

/// The record of the rollback's rollout.
fn rollback_record(
    ctx: &Ctx<'_>,
    deployment: ObjectKey,
    revisions: &Revisions,
    target: &ReplicaSetInfo,
    rollout: crate::history::FollowedRollout,
) -> RolloutRecord {
    let current = revisions.new.as_ref();
    RolloutRecord {
        deployment,
        engine: engine_name(ctx).into(),
        revision_from: current.map(|rs| rs.revision),
        replica_set_from: current.map(|rs| rs.name.clone()),
        hash_from: Some(revisions.hash.clone()),
        images_from: current.map(|rs| rs.images.clone()).unwrap_or_default(),
        hash_to: target.hash.clone(),
        images_to: target.images.clone(),
        rollout,
        rollback: None,
        canary: Vec::new(),
    }
}

/// The managed Deployment named `name` or `namespace/name`.
fn find_deployment(ctx: &Ctx<'_>, managed: &[ObjectKey], name: &str) -> Result<ObjectKey, Ended> {
    let (ns, name) = match name.split_once('/') {
        Some((ns, n)) => (Some(ns), n),
        None => (None, name),
    };
    let found: Vec<&ObjectKey> = managed
        .iter()
        .filter(|k| k.group == "apps" && k.kind == "Deployment" && k.name == name)
        .filter(|k| ns.is_none() || k.namespace.as_deref() == ns)
        .collect();
    match found.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(Ended::Refused(format!(
            "app {} manages no Deployment {name:?} ({LABEL_APP}={}); `berth status {}` lists them",
            ctx.app.name, ctx.app.name, ctx.app.name
        ))),
        _ => Err(Ended::Refused(format!(
            "several Deployments are named {name:?}: give it as NAMESPACE/NAME"
        ))),
    }
}

fn pick_revision<'r>(
    key: &ObjectKey,
    revisions: &'r Revisions,
    to: Option<i64>,
) -> Result<&'r revisions::ReplicaSetInfo, Ended> {
    let known: Vec<String> = revisions
        .new
        .iter()
        .chain(&revisions.old)
        .map(|rs| rs.revision.to_string())
        .collect();
    let picked = match to {
        Some(n) => revisions.revision(n),
        None => revisions.previous(),
    };
    picked.ok_or_else(|| {
        let what = to.map_or("an earlier revision".to_string(), |n| {
            format!("revision {n}")
        });
        Ended::Refused(format!(
            "Deployment {} has no {what} (revisions: {})",
            key.qualified_name(),
            known.join(", ")
        ))
    })
}
