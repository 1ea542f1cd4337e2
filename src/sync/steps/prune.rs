//! The prune step: what the commit no longer holds is deleted (with `prune = true`), each
//! decision made by the same code `berth plan` asks ([`decide`]: the deletion dry-run), so
//! plan and sync agree object for object.

use crate::cluster::discovery::ClusterKinds;
use crate::cluster::inventory;
use crate::cluster::prune::{self, Pruned};
use crate::cluster::Action;
use crate::history::ObjectAction;
use crate::manifest::confine::Confinement;
use crate::plan::{Entry, Inventory};
use crate::sync::context::{Ctx, Journal, Stop};

/// Prunes `candidates`. Entries whose deletion failed stay in `next` with the old commit,
/// so the next sync tries again; a shutdown before the prune leaves every candidate to the
/// next sync.
pub(in crate::sync) async fn prune(
    ctx: &Ctx<'_>,
    kinds: &ClusterKinds,
    candidates: Vec<Entry>,
    old: &Inventory,
    next: &mut Inventory,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    if !ctx.app.prune || candidates.is_empty() {
        return Ok(());
    }
    let candidates = within_scope(ctx, candidates, journal);
    if let Err(stop) = ctx.interrupted() {
        next.objects.extend(candidates);
        next.commit = old.commit.clone();
        return Err(stop);
    }
    let kept_back = delete(ctx, kinds, &candidates, journal).await;
    if !kept_back.is_empty() {
        next.objects.extend(kept_back);
        next.commit = old.commit.clone();
    }
    Ok(())
}

/// The candidates the app may delete as its scope is now. Those outside it, or berth's own
/// state (an inventory written before either was checked may list them, or one handed
/// over from another folder's app), are kept and said, and leave the inventory: never
/// deleted on this app's word. A scope that cannot be read keeps every candidate.
fn within_scope(ctx: &Ctx<'_>, candidates: Vec<Entry>, journal: &mut Journal<'_>) -> Vec<Entry> {
    let confinement = match Confinement::for_app(ctx.app, &ctx.syncer.agent) {
        Ok(c) => c,
        Err(e) => {
            ctx.warn(&format!(
                "[app.scope] does not compile ({e}): nothing is pruned"
            ));
            return Vec::new();
        }
    };
    let mut within = Vec::with_capacity(candidates.len());
    for entry in candidates {
        let Some(why) = confinement.refuses_deleting(&entry.key) else {
            within.push(entry);
            continue;
        };
        let note = format!("not pruned: it {why}");
        ctx.say(&format!("{} kept ({note})", entry.key.kubectl()));
        journal.objects.push(ObjectAction {
            key: entry.key,
            action: Action::Kept,
            source: None,
            note: Some(note),
        });
    }
    within
}

/// Deletes the candidates; returns the entries that must stay in the inventory (their
/// deletion failed, or the live objects could not be listed).
async fn delete(
    ctx: &Ctx<'_>,
    kinds: &ClusterKinds,
    candidates: &[Entry],
    journal: &mut Journal<'_>,
) -> Vec<Entry> {
    let Some(results) = decide(ctx, kinds, candidates, false, journal).await else {
        return candidates.to_vec();
    };
    let mut kept_back = Vec::new();
    for (entry, r) in candidates.iter().zip(results) {
        if let Some(e) = r.error {
            kept_back.push(entry.clone());
            journal.fail(e);
        }
        let note = r
            .note
            .as_ref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        ctx.say(&format!("{} {}{note}", r.key.kubectl(), r.action.as_str()));
        journal.objects.push(ObjectAction {
            key: r.key,
            action: r.action,
            source: None,
            note: r.note,
        });
    }
    kept_back
}

/// What becomes of each candidate (with `dry_run`, nothing is deleted: `berth plan` asks
/// the same questions); `None` when the live objects could not be listed (the error is
/// recorded).
pub(in crate::sync) async fn decide(
    ctx: &Ctx<'_>,
    kinds: &ClusterKinds,
    candidates: &[Entry],
    dry_run: bool,
    journal: &mut Journal<'_>,
) -> Option<Vec<Pruned>> {
    let resources: Vec<_> = candidates
        .iter()
        .filter_map(|e| {
            Some((
                kinds.resolve_kind(&e.api_version, &e.key.kind)?,
                e.key.namespace.clone(),
                e.key.name.clone(),
            ))
        })
        .collect();
    let live = match inventory::live_objects(&ctx.cluster.client, resources, &ctx.app.name).await {
        Ok(live) => live,
        Err(e) => {
            journal.fail(e);
            return None;
        }
    };
    journal.requests += candidates.len() as u64;
    let results = prune::prune(
        &ctx.writer,
        kinds,
        &ctx.app.name,
        candidates,
        &live,
        ctx.syncer.agent.concurrency,
        dry_run,
    )
    .await;
    Some(results)
}
