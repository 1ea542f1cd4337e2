//! The validate step: the server's dry run of every object that can be checked before the
//! first write (git wins by default: a write whose fields another manager took is dry-run
//! again with force, and what it takes back noted), and with `engine = "agent"` the
//! refusal of Deployments whose ReplicaSets another controller made.

use std::collections::HashSet;

use super::context::{Ctx, Journal, Stop};
use super::write::Write;
use super::SyncError;
use crate::cluster::apply::{apply_all, conflicts, stage, ApplySettings};
use crate::cluster::ClusterError;
use crate::config::RolloutEngine;
use crate::plan::Target;
use crate::rollout::engine::Engine;

/// What the validate step passed, by index into the writes.
pub(super) struct Validated {
    /// Stage 0: Namespaces and CRDs.
    pub first: Vec<usize>,
    /// Objects that can only be dry-run once stage 0 is applied.
    pub late: Vec<usize>,
}

/// Dry-runs every object that can be checked before the first write. Objects in a
/// namespace, or of a kind, that this commit creates (or `created`, the app's namespace
/// that `create_namespace` creates) can only be checked once stage 0 (Namespaces, CRDs)
/// is applied: they come back as `late`. The writes keep the server's answers (or its
/// refusals).
pub(super) async fn validate(
    ctx: &Ctx<'_>,
    writes: &mut [Write],
    created: Option<&str>,
    journal: &mut Journal<'_>,
) -> Result<Validated, Stop> {
    let first: Vec<usize> = (0..writes.len())
        .filter(|&i| stage(&writes[i].target) == 0)
        .collect();
    dry_run(ctx, writes, &first, journal).await?;
    let new_namespaces: HashSet<String> = first
        .iter()
        .filter(|&&i| writes[i].is_new_namespace())
        .map(|&i| writes[i].target.manifest.name().to_string())
        .chain(created.map(String::from))
        .collect();
    let (now, late): (Vec<usize>, Vec<usize>) = (0..writes.len())
        .filter(|i| !first.contains(i))
        .partition(|&i| {
            writes[i]
                .target
                .manifest
                .namespace()
                .is_none_or(|ns| !new_namespaces.contains(ns))
        });
    dry_run(ctx, writes, &now, journal).await?;
    check_engine_ownership(ctx, writes, journal).await?;
    Ok(Validated { first, late })
}

/// Dry-runs the writes at `indices`. Git wins by default: a write whose fields another
/// manager took is dry-run again with force, and what it takes back is noted.
pub(super) async fn dry_run(
    ctx: &Ctx<'_>,
    writes: &mut [Write],
    indices: &[usize],
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let take_back = ctx.settings();
    let settings = ApplySettings {
        force: false,
        ..take_back.clone()
    };
    let mut failed = false;
    let mut conflicted = Vec::new();
    for (i, result) in send(ctx, &settings, writes, indices, journal).await {
        match result {
            Ok(obj) => writes[i].dry_run = Some(obj),
            Err(e) => match taken_fields(&e).filter(|_| take_back.force) {
                Some(note) => {
                    writes[i].took_back = Some(note);
                    conflicted.push(i);
                }
                None => failed |= refuse(&mut writes[i], e, journal),
            },
        }
    }
    for (i, result) in send(ctx, &take_back, writes, &conflicted, journal).await {
        match result {
            Ok(obj) => writes[i].dry_run = Some(obj),
            Err(e) => failed |= refuse(&mut writes[i], e, journal),
        }
    }
    if failed {
        ctx.say(&dry_run_failed(writes));
        return Err(Stop::Failed);
    }
    Ok(())
}

/// The dry runs of the writes at `indices`, each with its index.
async fn send(
    ctx: &Ctx<'_>,
    settings: &ApplySettings,
    writes: &[Write],
    indices: &[usize],
    journal: &mut Journal<'_>,
) -> Vec<(usize, Result<kube::api::DynamicObject, ClusterError>)> {
    if indices.is_empty() {
        return Vec::new();
    }
    let targets: Vec<&Target> = indices.iter().map(|&i| &writes[i].target).collect();
    journal.requests += targets.len() as u64;
    let results = apply_all(&ctx.writer, settings, &targets, true).await;
    indices.iter().copied().zip(results).collect()
}

/// Records the dry run's refusal of `w` (and says it); always true: a refusal fails the
/// dry run.
fn refuse(w: &mut Write, e: ClusterError, journal: &mut Journal<'_>) -> bool {
    let e = match e {
        ClusterError::Object {
            verb,
            key,
            origin,
            message,
        } if is_missing_namespace(&message) => ClusterError::Object {
            verb,
            key,
            origin,
            message: format!("{message}: add the Namespace to the commit, or set create_namespace = true on the app (for its own namespace)"),
        },
        e => e,
    };
    w.refused = Some(e.to_string());
    journal.fail(e);
    true
}

/// The API server's answer for an object in a namespace that does not exist:
/// `namespaces "data" not found`.
fn is_missing_namespace(message: &str) -> bool {
    message.starts_with("namespaces \"") && message.ends_with("\" not found")
}

/// With `engine = "agent"`: refuses, before anything is written, Deployments whose
/// ReplicaSets another controller made.
async fn check_engine_ownership(
    ctx: &Ctx<'_>,
    writes: &[Write],
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    if ctx.app.rollout.engine != RolloutEngine::Agent {
        return Ok(());
    }
    let engine = Engine {
        client: ctx.syncer.client.clone(),
        field_manager: ctx.syncer.agent.field_manager.clone(),
    };
    let mut refused = false;
    for w in writes.iter().filter(|w| w.is_deployment()) {
        let m = &w.target.manifest;
        if let Err(cause) = engine
            .check_ownership(m.namespace_or_default(), m.name())
            .await
        {
            journal.fail(SyncError::EngineRefused {
                origin: m.origin.clone(),
                cause,
            });
            refused = true;
        }
    }
    if refused {
        Err(Stop::Failed)
    } else {
        Ok(())
    }
}

/// `.spec.replicas from "kubectl-patch"` when `e` is a conflict over fields another
/// field manager owns.
fn taken_fields(e: &ClusterError) -> Option<String> {
    let ClusterError::Object { message, .. } = e else {
        return None;
    };
    let found = conflicts(message);
    let named: Vec<String> = found
        .iter()
        .filter(|(_, fields)| !fields.is_empty())
        .map(|(manager, fields)| format!("{} from {manager:?}", fields.join(", ")))
        .collect();
    (!named.is_empty()).then(|| named.join("; "))
}

/// What a failed dry run says was written: nothing, or — when objects in a namespace the
/// commit creates could only be validated once it existed — exactly those first writes.
fn dry_run_failed(writes: &[Write]) -> String {
    let written: Vec<String> = writes
        .iter()
        .filter(|w| w.applied.is_some())
        .map(|w| w.target.manifest.key().to_string())
        .collect();
    if written.is_empty() {
        return "dry run failed: nothing was written".into();
    }
    format!(
        "dry run failed: nothing was written but {} (applied first: the objects in a namespace the commit creates can be validated only once it exists); the inventory holds {}",
        written.join(", "),
        if written.len() == 1 { "it" } else { "them" }
    )
}
