//! The last steps of a sync: prune what the commit no longer holds, and store the next
//! inventory.

use super::{Run, Stop};
use crate::cluster::discovery::ClusterKinds;
use crate::cluster::inventory;
use crate::cluster::prune;
use crate::cluster::ClusterError;
use crate::history::ObjectAction;
use crate::manifest::confine::is_berths_own;
use crate::plan::{self, Entry, Inventory};

impl Run<'_> {
    /// Prunes what the commit no longer holds (with `prune = true`). Entries whose deletion
    /// failed stay in the inventory with the old commit, so the next sync tries again; a
    /// shutdown before the prune leaves every candidate to the next sync.
    pub(super) async fn prune_step(
        &mut self,
        kinds: &ClusterKinds,
        candidates: Vec<Entry>,
        old: &Inventory,
        next: &mut Inventory,
    ) -> Result<(), Stop> {
        if !self.app.prune || candidates.is_empty() {
            return Ok(());
        }
        // berth's own state is never an app's to delete, even when an inventory written
        // before it was protected lists it: it leaves the inventory, untouched.
        let reserved = &self.syncer.agent.inventory_namespace;
        let (own, candidates): (Vec<Entry>, Vec<Entry>) = candidates
            .into_iter()
            .partition(|e| is_berths_own(&e.key, reserved));
        for e in &own {
            (self.report)(&format!(
                "warning: {} is berth's own state: not pruned, and no longer the app's",
                e.key
            ));
        }
        if let Err(stop) = self.interrupted() {
            next.objects.extend(candidates);
            next.commit = old.commit.clone();
            return Err(stop);
        }
        let kept_back = self.prune(kinds, &candidates).await;
        if !kept_back.is_empty() {
            next.objects.extend(kept_back);
            next.commit = old.commit.clone();
        }
        Ok(())
    }

    /// Prunes the candidates; returns the entries that must stay in the inventory
    /// (their deletion failed, or the live objects could not be listed).
    pub(super) async fn prune(&mut self, kinds: &ClusterKinds, candidates: &[Entry]) -> Vec<Entry> {
        let Some(results) = self.prune_decisions(kinds, candidates, false).await else {
            return candidates.to_vec();
        };
        let mut kept_back = Vec::new();
        for (entry, r) in candidates.iter().zip(results) {
            if let Some(e) = r.error {
                kept_back.push(entry.clone());
                self.fail(e);
            }
            let note = r
                .note
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            (self.report)(&format!("{} {}{note}", r.key.kubectl(), r.action.as_str()));
            self.rec.objects.push(ObjectAction {
                key: r.key,
                action: r.action,
                source: None,
                note: r.note,
            });
        }
        kept_back
    }

    /// What becomes of each candidate (with `dry_run`, nothing is deleted: `berth plan`
    /// asks the same questions); `None` when the live objects could not be listed (the
    /// error is recorded).
    pub(super) async fn prune_decisions(
        &mut self,
        kinds: &ClusterKinds,
        candidates: &[Entry],
        dry_run: bool,
    ) -> Option<Vec<prune::Pruned>> {
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
        let live =
            match inventory::live_objects(&self.syncer.client, resources, &self.app.name).await {
                Ok(live) => live,
                Err(e) => {
                    self.fail(e);
                    return None;
                }
            };
        self.rec.requests += candidates.len() as u64;
        let concurrency = self.syncer.agent.concurrency;
        let results = prune::prune(
            &self.client,
            kinds,
            &self.app.name,
            candidates,
            &live,
            concurrency,
            dry_run,
        )
        .await;
        Some(results)
    }

    /// Before the first write: the inventory gains an entry for every object this sync
    /// may create, so that a crash between the apply and the inventory's update never
    /// leaves an object berth made but does not know of (it would never be pruned). The
    /// inventory as it now stands is returned.
    pub(super) async fn write_ahead(
        &mut self,
        old: &Inventory,
        writes: &[super::Write],
    ) -> Result<Inventory, Stop> {
        let ahead = plan::write_ahead(old, writes.iter().map(|w| &w.target));
        if ahead != *old && !self.store_inventory(old, &ahead).await {
            return Err(Stop::Failed);
        }
        Ok(ahead)
    }

    /// Stores `next` unless it is `old`, then its local copy; false when that failed (the
    /// error is recorded). When another writer changed the ConfigMap since it was read,
    /// it is read again and the entries that writer added are kept: never overwritten.
    pub(super) async fn store_inventory(&mut self, old: &Inventory, next: &Inventory) -> bool {
        if old == next {
            return true;
        }
        let agent = &self.syncer.agent;
        let client = &self.syncer.client;
        let (ns, app) = (&agent.inventory_namespace, &self.app.name);
        let mut next = next.clone();
        for attempt in 1..=3 {
            self.rec.requests += 1;
            let version = self.inventory_version.as_ref();
            match inventory::store(client, ns, app, &agent.field_manager, &next, version).await {
                Ok(version) => {
                    self.inventory_version = Some(version);
                    if let Err(e) = inventory::store_local(&agent.state_dir, app, &next) {
                        tracing::warn!(app = %app, error = %e, "cannot write the inventory's local copy");
                    }
                    return true;
                }
                Err(ClusterError::InventoryChanged(what)) if attempt < 3 => {
                    tracing::warn!(app = %app, "{what}: changed by another writer; reading it again");
                    match inventory::load(client, ns, app).await {
                        Ok(theirs) => {
                            self.inventory_version = theirs.as_ref().map(|t| t.version.clone());
                            let added = theirs.into_iter().flat_map(|t| t.inventory.objects);
                            let held_before = old.by_key();
                            next.adopt(added.filter(|e| !held_before.contains_key(&e.key)));
                        }
                        Err(e) => {
                            self.fail(e);
                            return false;
                        }
                    }
                }
                Err(e) => {
                    self.fail(e);
                    return false;
                }
            }
        }
        false
    }
}
