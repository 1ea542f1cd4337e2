//! An app removed from the configuration, with `prune = true`: every object its inventory
//! lists is pruned (as a sync prunes: only what still carries its label, never what is
//! marked `berth.dev/prune: "false"` or taken over), then its inventory is deleted, and a
//! record says so. The agent calls it for the apps its last configuration had
//! (`agent/removed.rs`), the apps that depended on an app before the app itself.

use std::time::Instant;

use super::context::{Ctx, Journal, Stop};
use super::error::SyncError;
use super::lock;
use super::pipeline::{finish, outcome_of};
use super::progress::Report;
use super::step::Step;
use super::steps::{inventory, prune};
use super::syncer::{SyncOptions, Syncer};
use crate::config::AppConfig;
use crate::history::{Outcome, SyncRecord, Trigger};
use crate::plan::Inventory;
use crate::shutdown::Signal;

impl Syncer {
    /// Prunes the objects of `app`, removed from the configuration, and deletes its
    /// inventory; recorded in the history like a sync.
    pub async fn remove(
        &self,
        app: &AppConfig,
        shutdown: &Signal,
        report: Report<'_>,
    ) -> SyncRecord {
        let clock = Instant::now();
        let ctx = Ctx::new(
            self,
            app,
            SyncOptions::new(Trigger::Removed),
            shutdown,
            report,
        );
        let mut journal = ctx.journal();
        let mut rec = self.new_record(&ctx);
        if self.fleet.find(app).is_none() {
            journal.fail(SyncError::ClusterGone {
                app: app.name.clone(),
                cluster: app.cluster.clone().unwrap_or_else(|| "default".to_string()),
            });
            rec.outcome = Outcome::Failed;
            return finish(&ctx, rec, journal, clock, None);
        }
        let lock = match lock::take(&ctx, &mut journal).await {
            Ok(mut lock) => {
                rec.id = lock.id().to_string();
                rec.started_at = lock.started_at();
                lock.enter(&ctx, Step::Prune);
                rec.outcome = match prune_all(&ctx, &mut journal).await {
                    Ok(pruned) => {
                        rec.note = Some(format!(
                            "removed from the configuration: {} pruned, its inventory deleted",
                            crate::plural(pruned, "object")
                        ));
                        Outcome::Succeeded
                    }
                    Err(stop) => outcome_of(stop),
                };
                lock.enter(&ctx, Step::History);
                Some(lock)
            }
            Err(stop) => {
                rec.outcome = outcome_of(stop);
                None
            }
        };
        finish(&ctx, rec, journal, clock, lock)
    }
}

/// Prunes every object of the app's inventory; deletes the inventory once none is left
/// to track (an object that could not be deleted stays listed). Returns how many were
/// listed.
async fn prune_all(ctx: &Ctx<'_>, journal: &mut Journal<'_>) -> Result<usize, Stop> {
    let (old, mut store) = inventory::load(ctx, journal).await?;
    let (kinds, _) = ctx.discover(None, journal).await?;
    let listed = old.objects.len();
    let mut next = Inventory::default();
    let pruned = prune::prune(ctx, &kinds, old.objects.clone(), &old, &mut next, journal).await;
    if pruned.is_err() || !next.objects.is_empty() || !journal.errors.is_empty() {
        store.store(ctx, &old, &next, journal).await;
        return Err(pruned.err().unwrap_or(Stop::Failed));
    }
    let agent = &ctx.syncer.agent;
    crate::cluster::inventory::delete(
        &ctx.cluster.client,
        &agent.inventory_namespace,
        &ctx.app.name,
    )
    .await
    .map_err(|e| journal.stop(e))?;
    let local = crate::cluster::inventory::local_path(&agent.state_dir, &ctx.app.name);
    let _ = std::fs::remove_file(local);
    super::steps::namespace::release(ctx, journal).await;
    Ok(listed)
}
