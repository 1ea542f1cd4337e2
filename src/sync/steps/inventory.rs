//! The inventory steps: the app's last inventory (the cluster's ConfigMap, or berth's
//! local copy when it was deleted or damaged by hand), the write ahead before the first
//! apply, and the next inventory stored after the sync.

use crate::cluster::inventory::{self, Version};
use crate::cluster::ClusterError;
use crate::plan::{self, Inventory};
use crate::sync::context::{Ctx, Journal, Stop};
use crate::sync::error::SyncError;
use crate::sync::write::Write;

/// [`InventoryStore::keep_ready`] for a commit the sync skipped without reading the
/// inventory (it changes none of the app's files): read only when others depend on the app.
pub(in crate::sync) async fn keep_ready(
    ctx: &Ctx<'_>,
    sha: &str,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    if ctx.depended_on() {
        let (inventory, mut store) = load(ctx, journal).await?;
        store.keep_ready(ctx, &inventory, sha, journal).await;
    }
    Ok(())
}

/// Where the app's inventory is stored: the ConfigMap's version as last read or written,
/// the precondition of the next store.
pub(in crate::sync) struct InventoryStore {
    version: Option<Version>,
}

/// The app's inventory: the cluster's ConfigMap, or berth's local copy when the ConfigMap
/// was deleted or made unreadable by hand (entries the ConfigMap lost at the same commit
/// are taken from the copy, so they are still pruned when git drops them).
pub(in crate::sync) async fn load(
    ctx: &Ctx<'_>,
    journal: &mut Journal<'_>,
) -> Result<(Inventory, InventoryStore), Stop> {
    let agent = &ctx.syncer.agent;
    let ns = &agent.inventory_namespace;
    let app = &ctx.app.name;
    let local = inventory::load_local(&agent.state_dir, app);
    let name = format!("{ns}/{}", inventory::name(app));
    let mut store = InventoryStore { version: None };
    let (inv, warning) = match inventory::load(&ctx.cluster.client, ns, app).await {
        Ok(Some(stored)) => {
            store.version = Some(stored.version);
            let mut inv = stored.inventory;
            let adopted = local
                .filter(|l| l.commit == inv.commit)
                .map_or(0, |l| inv.adopt(l.objects));
            let warning = (adopted > 0).then(|| format!(
                "inventory {name} lacks {} that berth's local copy holds (edited by hand?): keeping track of them",
                crate::plural(adopted, "object")
            ));
            (inv, warning)
        }
        Ok(None) => match local {
            Some(l) if !l.objects.is_empty() => {
                let warning = format!(
                    "inventory {name} is missing (deleted by hand?): carrying on from berth's local copy ({})",
                    crate::plural(l.objects.len(), "object")
                );
                (l, Some(warning))
            }
            _ => (Inventory::default(), None),
        },
        Err(e @ ClusterError::Inventory { .. }) => match local {
            Some(l) => (l, Some(format!("{e}: carrying on from berth's local copy"))),
            None => return Err(journal.stop(e)),
        },
        Err(e) => return Err(journal.stop(e)),
    };
    if let Some(w) = warning {
        tracing::warn!(app = %app, "{w}");
        ctx.warn(&w);
    }
    let ours = ctx.origin();
    if let Some(theirs) = inv.origin.as_ref().filter(|o| !o.same_app(&ours)) {
        return Err(journal.stop(SyncError::ForeignInventory {
            app: app.clone(),
            inventory: name,
            theirs: theirs.clone(),
            ours,
        }));
    }
    Ok((inv, store))
}

impl InventoryStore {
    /// Before the first write: the inventory gains an entry for every object this sync
    /// may create, so that a crash between the apply and the inventory's update never
    /// leaves an object berth made but does not know of (it would never be pruned). The
    /// inventory as it now stands is returned.
    pub async fn write_ahead(
        &mut self,
        ctx: &Ctx<'_>,
        old: &Inventory,
        writes: &[Write],
        journal: &mut Journal<'_>,
    ) -> Result<Inventory, Stop> {
        let recorded = old.by_key();
        let targets = writes.iter().map(|w| {
            let entry = recorded.get(&w.target.manifest.key());
            (
                &w.target,
                w.may_change_spec(entry.map(|e| e.observed.as_str())),
            )
        });
        let ahead = plan::write_ahead(old, targets);
        if ahead != *old && !self.store(ctx, old, &ahead, journal).await {
            return Err(Stop::Failed);
        }
        Ok(ahead)
    }

    /// Stores `next` unless it is `old`, then its local copy; false when that failed (the
    /// error is recorded). When another writer changed the ConfigMap since it was read,
    /// it is read again and the entries that writer added are kept: never overwritten.
    /// A commit that changes nothing of an app that others depend on: the app is ready at
    /// it as it was at the last (its dependents wait for their dependency's current
    /// commit). Not when the last sync that wrote failed or the app is held. (An inventory
    /// written before berth kept `ready` becomes ready so.)
    pub async fn keep_ready(
        &mut self,
        ctx: &Ctx<'_>,
        inventory: &Inventory,
        sha: &str,
        journal: &mut Journal<'_>,
    ) {
        let there = inventory.ready.as_deref() == Some(sha);
        if there || inventory.failed || inventory.held.is_some() || !ctx.depended_on() {
            return;
        }
        let next = Inventory {
            ready: Some(sha.to_string()),
            ..inventory.clone()
        };
        self.store(ctx, inventory, &next, journal).await;
    }

    pub async fn store(
        &mut self,
        ctx: &Ctx<'_>,
        old: &Inventory,
        next: &Inventory,
        journal: &mut Journal<'_>,
    ) -> bool {
        if old == next {
            return true;
        }
        let agent = &ctx.syncer.agent;
        let client = &ctx.cluster.client;
        let (ns, app) = (&agent.inventory_namespace, &ctx.app.name);
        let mut next = next.clone();
        next.origin = Some(ctx.origin());
        for attempt in 1..=3 {
            journal.requests += 1;
            let version = self.version.as_ref();
            match inventory::store(client, ns, app, &agent.field_manager, &next, version).await {
                Ok(version) => {
                    self.version = Some(version);
                    if let Err(e) = inventory::store_local(&agent.state_dir, app, &next) {
                        tracing::warn!(app = %app, error = %e, "cannot write the inventory's local copy");
                    }
                    return true;
                }
                Err(ClusterError::InventoryChanged(what)) if attempt < 3 => {
                    tracing::warn!(app = %app, "{what}: changed by another writer; reading it again");
                    match inventory::load(client, ns, app).await {
                        Ok(theirs) => {
                            self.version = theirs.as_ref().map(|t| t.version.clone());
                            let added = theirs.into_iter().flat_map(|t| t.inventory.objects);
                            let held_before = old.by_key();
                            next.adopt(added.filter(|e| !held_before.contains_key(&e.key)));
                        }
                        Err(e) => {
                            journal.fail(e);
                            return false;
                        }
                    }
                }
                Err(e) => {
                    journal.fail(e);
                    return false;
                }
            }
        }
        false
    }
}
