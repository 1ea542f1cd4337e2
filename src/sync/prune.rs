//! The last steps of a sync: prune what the commit no longer holds, and store the next
//! inventory.

use super::{Run, Stop};
use crate::cluster::discovery::ClusterKinds;
use crate::cluster::inventory;
use crate::cluster::prune;
use crate::history::ObjectAction;
use crate::plan::{Entry, Inventory};

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
        let resources: Vec<_> = candidates
            .iter()
            .filter_map(|e| {
                Some((
                    kinds.resolve_kind(&e.api_version, &e.key.kind)?,
                    e.key.namespace.clone(),
                ))
            })
            .collect();
        let live =
            match inventory::live_objects(&self.syncer.client, resources, &self.app.name).await {
                Ok(live) => live,
                Err(e) => {
                    self.fail(e);
                    return candidates.to_vec();
                }
            };
        let client = &self.syncer.client;
        let concurrency = self.syncer.agent.concurrency;
        self.rec.requests += candidates.len() as u64;
        let results = prune::prune(
            client,
            kinds,
            &self.app.name,
            candidates,
            &live,
            concurrency,
        )
        .await;
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

    pub(super) async fn store_inventory(&mut self, old: &Inventory, next: &Inventory) {
        if old == next {
            return;
        }
        self.rec.requests += 1;
        let agent = &self.syncer.agent;
        if let Err(e) = inventory::store(
            &self.syncer.client,
            &agent.inventory_namespace,
            &self.app.name,
            &agent.field_manager,
            next,
        )
        .await
        {
            self.fail(e);
        }
    }
}
