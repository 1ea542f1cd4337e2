//! Following Deployments' rollouts (berth's engine driving them with `engine =
//! "agent"`) and restoring an earlier revision's template, as `kubectl rollout undo`
//! does: what the roll-out step and `berth rollback` share.

use std::sync::Arc;

use kube::api::DynamicObject;

use super::context::Ctx;
use super::error::SyncError;
use crate::cluster::apply::apply_all;
use crate::config::RolloutEngine;
use crate::history::{commit_of_template, FollowedRollout};
use crate::manifest::Manifest;
use crate::plan::Target;
use crate::rollout::engine::{follow_driving, Engine, EngineError};
use crate::rollout::revisions::{self, ReplicaSetInfo};
use crate::rollout::rollback;
use crate::rollout::track::Follow;

/// The rollout of Deployment `m`, as berth wrote it (`applied`: the API server's answer).
pub(super) fn follow_of(m: &Manifest, applied: Option<&DynamicObject>) -> Follow {
    let selector = m
        .object
        .get("spec")
        .and_then(|s| s.get("selector"))
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .map(|s| revisions::match_labels(&s))
        .unwrap_or_default();
    Follow {
        selector,
        namespace: m.namespace_or_default().to_string(),
        name: m.name().to_string(),
        generation: applied.and_then(|o| o.metadata.generation).unwrap_or(0),
    }
}

/// What restoring an earlier revision's template did.
pub(super) struct Restored {
    /// The Deployment as applied.
    pub applied: DynamicObject,
    /// The commit whose sync first rolled that template out, when the history knows it.
    pub commit: Option<String>,
    /// "rolled back Deployment shop/web from revision 3 to 2 (commit abc1234)".
    pub message: String,
}

/// Applies the template of revision `to` to `target`'s Deployment, as `kubectl rollout
/// undo` does: the one rollback, of the failure policy and of `berth rollback`.
pub(super) async fn restore(
    ctx: &Ctx<'_>,
    target: &Target,
    from: Option<i64>,
    to: &ReplicaSetInfo,
) -> Result<Restored, SyncError> {
    let key = target.manifest.key();
    let restore = Target {
        manifest: rollback::manifest(&target.manifest, to),
        resolved: target.resolved.clone(),
    };
    let applied = apply_all(&ctx.writer, &ctx.settings(), &[&restore], false)
        .await
        .pop()
        .ok_or_else(|| SyncError::RollbackNotApplied(key.clone()))?
        .map_err(SyncError::RollbackFailed)?;
    let records = ctx.syncer.history.read(&ctx.app.name).unwrap_or_default();
    let commit = commit_of_template(&records, &key, &to.hash);
    let message = rollback::message(&key.qualified_name(), from, to.revision, commit.as_deref());
    Ok(Restored {
        applied,
        commit,
        message,
    })
}

/// Follows the rollout of one Deployment just written.
pub(super) async fn follow_one(
    ctx: &Ctx<'_>,
    applied: &DynamicObject,
    manifest: &Manifest,
) -> Result<FollowedRollout, SyncError> {
    let follow = follow_of(manifest, Some(applied));
    let mut followed = follow_and_drive(ctx, &[follow])
        .await
        .map_err(|e| SyncError::Follow(Arc::new(e)))?;
    Ok(followed.remove(0))
}

/// `cluster` or `agent`: who drives the app's rollouts.
pub(super) fn engine_name(ctx: &Ctx<'_>) -> &'static str {
    match ctx.app.rollout.engine {
        RolloutEngine::Cluster => "cluster",
        RolloutEngine::Agent => "agent",
    }
}

/// Follows rollouts; with `engine = "agent"` (and no supervisor elsewhere) berth's engine
/// drives them meanwhile.
pub(super) async fn follow_and_drive(
    ctx: &Ctx<'_>,
    follows: &[Follow],
) -> Result<Vec<FollowedRollout>, EngineError> {
    let report = |f: &Follow, line: &str| {
        ctx.say(&format!(
            "deployment.apps/{} -n {}: {line}",
            f.name, f.namespace
        ))
    };
    let driving = ctx.app.rollout.engine == RolloutEngine::Agent && !ctx.syncer.engine_supervised;
    let engine = driving.then(|| Engine {
        client: ctx.cluster.client.clone(),
        field_manager: ctx.syncer.agent.field_manager.clone(),
    });
    follow_driving(
        &ctx.cluster.client,
        follows,
        ctx.app.rollout.timeout,
        ctx.shutdown,
        engine.as_ref(),
        &report,
    )
    .await
}
