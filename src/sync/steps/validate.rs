//! The validate step: the server's dry run of every object that can be checked before the
//! first write (git wins by default: a write whose fields another manager took is dry-run
//! again with force, and what it takes back noted), and with `engine = "agent"` the
//! refusal of Deployments whose ReplicaSets another controller made.

use std::collections::HashSet;

use crate::cluster::apply::stage;
use crate::config::RolloutEngine;
use crate::rollout::engine::Engine;
use crate::sync::context::{Ctx, Journal, Stop};
use crate::sync::dry_run::dry_run;
use crate::sync::error::SyncError;
use crate::sync::write::{Validated, Write};

/// Dry-runs every object that can be checked before the first write. Objects in a
/// namespace, or of a kind, that this commit creates (or `created`, the app's namespace
/// that `create_namespace` creates) can only be checked once stage 0 (Namespaces, CRDs)
/// is applied: they come back as `late`. The writes keep the server's answers (or its
/// refusals).
pub(in crate::sync) async fn validate(
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
    crate::sync::canary::prepare(ctx, writes, journal).await?;
    Ok(Validated { first, late })
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
        client: ctx.cluster.client.clone(),
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
