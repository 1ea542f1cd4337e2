//! Drift repaired without waiting for the interval: after each sync the kinds of the app's
//! objects (its inventory's local copy) are watched on its cluster — one metadata-only
//! watch per kind and cluster, on berth's label (`cluster::drift`) — and an object someone
//! else changed or deleted makes its app sync at once (`Trigger::Drift`): git wins, as a
//! sync decides. A deletion while the app syncs is its own prune, and is left alone. An
//! idle app sends no request between intervals: the watches are shared, and each renews
//! itself about every five minutes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::Shared;
use crate::cluster::drift::{DriftWatch, Drifted};
use crate::cluster::Action;
use crate::config::AppConfig;
use crate::history::{SyncRecord, Trigger};
use crate::shutdown::{stopped, Signal};
use crate::sync::Syncer;

/// How many drifts may wait to be handed to their apps.
const QUEUE: usize = 256;

/// The drift watches of every cluster the host's apps sync to.
pub(super) struct Drift {
    watches: Mutex<BTreeMap<String, Arc<DriftWatch>>>,
    /// The apps whose kinds are watched, each with its cluster's name.
    followed: Mutex<BTreeMap<String, String>>,
    drifted: mpsc::Sender<Drifted>,
}

impl Drift {
    /// No watch yet; the receiver is [`repair`]'s.
    pub(super) fn new() -> (Drift, mpsc::Receiver<Drifted>) {
        let (drifted, receiver) = mpsc::channel(QUEUE);
        let drift = Drift {
            watches: Mutex::new(BTreeMap::new()),
            followed: Mutex::new(BTreeMap::new()),
            drifted,
        };
        (drift, receiver)
    }

    /// Watches the kinds of `app`'s objects on its cluster (those not watched yet,
    /// resolved through the cluster's shared discovery) after `record`'s sync: read from
    /// its inventory the first time, then again only when a sync created an object.
    pub(super) async fn follow(&self, syncer: &Syncer, app: &AppConfig, record: &SyncRecord) {
        let cluster = syncer.cluster(app);
        let created = (record.objects.iter()).any(|o| o.action == Action::Created);
        if !created && self.followed(&app.name, &cluster.name) {
            return;
        }
        let Some(inventory) =
            crate::cluster::inventory::load_local(&syncer.agent.state_dir, &app.name)
        else {
            return;
        };
        let watch = {
            let Ok(mut watches) = self.watches.lock() else {
                return;
            };
            let made = || {
                let manager = &syncer.agent.field_manager;
                DriftWatch::new(cluster.client.clone(), manager, self.drifted.clone())
            };
            (watches.entry(cluster.name.clone()))
                .or_insert_with(|| Arc::new(made()))
                .clone()
        };
        // Each kind not watched yet, with the namespaces of the app's objects of it.
        let mut kinds: BTreeMap<(&str, &str), BTreeSet<String>> = BTreeMap::new();
        for entry in &inventory.objects {
            let (version, kind, ns) = (&entry.api_version, &entry.key.kind, &entry.key.namespace);
            if !watch.watches(version, kind, ns.as_deref()) {
                let namespaces = kinds.entry((version, kind)).or_default();
                namespaces.extend(ns.clone());
            }
        }
        if !kinds.is_empty() {
            let Ok((known, _)) = cluster.kinds.get(None).await else {
                return;
            };
            for ((version, kind), namespaces) in kinds {
                if let Some(resolved) = known.resolve_kind(version, kind) {
                    watch.watch(&resolved, &namespaces).await;
                }
            }
        }
        if let Ok(mut followed) = self.followed.lock() {
            followed.insert(app.name.clone(), cluster.name.clone());
        }
    }

    /// Whether `app`'s kinds on `cluster` are watched already.
    fn followed(&self, app: &str, cluster: &str) -> bool {
        let followed = self.followed.lock();
        followed.is_ok_and(|f| f.get(app).is_some_and(|c| c == cluster))
    }

    /// Ends every watch (the clusters were connected again: the next syncs watch anew).
    pub(super) fn forget(&self) {
        if let Ok(mut watches) = self.watches.lock() {
            watches.clear();
        }
        if let Ok(mut followed) = self.followed.lock() {
            followed.clear();
        }
    }
}

/// Hands each drift to its app's loop, if it runs here (a deletion while it syncs is its
/// own prune), until shutdown.
pub(super) async fn repair(
    shared: Arc<Shared>,
    mut drifted: mpsc::Receiver<Drifted>,
    mut shutdown: Signal,
) {
    loop {
        let drift = tokio::select! {
            () = stopped(&mut shutdown) => return,
            Some(drift) = drifted.recv() => drift,
        };
        if drift.deleted && shared.registry.is_busy(&drift.app) {
            continue;
        }
        // A full channel already holds a trigger: that sync repairs this too.
        if shared.registry.wake(&drift.app, Trigger::Drift) {
            let (app, object) = (&drift.app, &drift.object);
            let what = if drift.deleted { "deleted" } else { "changed" };
            tracing::info!(app = %app, object = %object, "{object} {what} outside git (drift): syncing");
        }
    }
}
