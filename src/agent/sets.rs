//! App sets under `berth run`: one loop per set lists it on the agent's interval, on a
//! commit in its local repository and on a webhook of any app of its repository; the agent makes its apps from each listing and runs
//! them as a reload runs a changed configuration — a folder added becomes an app, one
//! removed takes its app away through `removed.rs`, as an app removed from the
//! configuration is — without a reload.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use super::app_loop::log_progress;
use super::apps::Agent;
use super::{SetTask, Shared, DEBOUNCE};
use crate::config::{AppSetConfig, Config};
use crate::history::{Outcome, Trigger};
use crate::service::http::Hook;
use crate::shutdown::{self, stopped, Signal};
use crate::source::git;
use crate::source::shared::INTERVAL_SHARE;
use crate::sync::sets::{self, Listing};
use crate::sync::Progress;

/// Each set of `config` as it listed last (its loop lists it again at once).
pub(super) fn remembered(config: &Config) -> std::collections::BTreeMap<String, Listing> {
    let state_dir = &config.agent.state_dir;
    (config.app_sets.iter())
        .map(|s| (s.name.clone(), Listing::remembered(state_dir, &s.name)))
        .collect()
}

impl Agent {
    /// The subscriber name of a set's loop among a repository's watchers.
    fn watcher_key(set: &str) -> String {
        format!("app set {set}")
    }

    /// Starts a loop per set of the running configuration (the running ones stop first).
    pub(super) async fn start_sets(&mut self) {
        self.stop_sets().await;
        let config = self.config();
        for set in config.app_sets.clone() {
            let (trigger, triggers) = mpsc::channel(1);
            let key = Self::watcher_key(&set.name);
            if let Some(sample) = set.sample(&config.cluster).ok().flatten() {
                // A webhook of any app of the repository lists the set too (the set
                // has no webhook of its own: `secret` None).
                if let Some(endpoint) = &self.shared.endpoint {
                    if let Ok(mut hooks) = endpoint.hooks.write() {
                        let repo = git::remote_url(&sample.repo);
                        let (secret, trigger) = (None, trigger.clone());
                        hooks.insert(
                            key.clone(),
                            Hook {
                                secret,
                                repo,
                                trigger,
                            },
                        );
                    }
                }
                if let Some(path) = git::local_path(&sample.repo) {
                    self.subscribe(&key, path, trigger);
                }
            }
            let (stop, stopping) = shutdown::channel();
            let task = tokio::spawn(set_loop(
                set.clone(),
                config.clone(),
                self.shared.clone(),
                self.listed.clone(),
                triggers,
                stopping,
            ));
            self.sets.insert(set.name, SetTask { stop, task });
        }
    }

    /// Stops every set loop.
    pub(super) async fn stop_sets(&mut self) {
        let running = std::mem::take(&mut self.sets);
        for (name, task) in running {
            let key = Self::watcher_key(&name);
            self.unsubscribe(&key);
            if let Some(endpoint) = &self.shared.endpoint {
                if let Ok(mut hooks) = endpoint.hooks.write() {
                    hooks.remove(&key);
                }
            }
            let _ = task.stop.send(true);
            let _ = task.task.await;
        }
    }

    /// A set listed: its apps made from the listing replace its running ones (apps added
    /// started, removed ones stopped, then removed as `removed.rs` removes apps); its
    /// problem said, on every listing.
    pub(super) async fn take_listing(&mut self, listing: Listing, prune: bool, shutdown: &Signal) {
        let set = listing.set.clone();
        let before = self.listings.insert(set.clone(), listing.clone());
        let running = self.config();
        let expanded = self.expanded(&running);
        let listed = self.listings.get(&set).is_some_and(|l| l.problem.is_none());
        if let (true, true, Some(before)) = (prune, listed, before) {
            self.hand_over(&before, &listing, &expanded, shutdown).await;
        }
        let expanded_listing = self.listings.get(&set).unwrap_or(&listing);
        sets::note_problem(&running.agent.state_dir, expanded_listing);
        let problem = expanded_listing.problem.as_ref().map(ToString::to_string);
        if let Some(problem) = &problem {
            tracing::warn!(set = %set, "app set {set}: {problem}");
        }
        let syncer = self.shared.syncer();
        (syncer.notifications).observe_set(&set, problem.as_deref(), &syncer.host);
        for refused in expanded.refused.iter().filter(|r| r.set == set) {
            tracing::warn!(set = %set, app = %refused.app, "{refused}");
        }
        if expanded.apps == running.apps {
            return;
        }
        for unknown in sets::unknown_dependencies(&expanded) {
            tracing::warn!("{unknown}");
        }
        match self.apply(expanded).await {
            Ok(said) => tracing::info!(set = %set, "app set {set} listed: {said}"),
            Err(e) => tracing::error!(set = %set, "app set {set}: {e}"),
        }
        if prune {
            self.prune_removed(shutdown).await;
        }
    }

    /// Hands the objects of each folder `listing` finds renamed since `before` (its files
    /// unchanged) from the old folder's apps, stopped first, to the new one's that will
    /// run (`expanded`), before they start; the apps handed over are not removed
    /// (`removed.rs`).
    async fn hand_over(
        &mut self,
        before: &Listing,
        listing: &Listing,
        expanded: &Config,
        shutdown: &Signal,
    ) {
        let running = self.config();
        let Some(set) = running.app_sets.iter().find(|s| s.name == listing.set) else {
            return;
        };
        let syncer = self.shared.syncer();
        for (from, to) in sets::renamed(&running, set, &before.listed, &listing.listed) {
            if running.app(&to.name).is_some() || expanded.app(&to.name).is_none() {
                continue;
            }
            self.stop(&from.name).await;
            let log = |progress: Progress<'_>| log_progress(&from.name, progress);
            let record = syncer.hand_over(&from, &to, shutdown, &log).await;
            self.shared.metrics.observe(&record);
            if let (Outcome::Succeeded, Some(note)) = (&record.outcome, &record.note) {
                tracing::info!(app = %from.name, "{note}");
                self.handed_over.insert(from.name);
            }
        }
    }

    /// `file` with each set's apps made from its last listing; a set whose apps cannot be
    /// made keeps its running ones (its listing's problem says why).
    pub(super) fn expanded(&mut self, file: &Config) -> Config {
        let running = self.config();
        let kept = |set: &str| {
            let of = running
                .apps
                .iter()
                .filter(|a| a.set.as_deref() == Some(set));
            of.cloned().collect()
        };
        let mut listings: Vec<Listing> = self.listings.values().cloned().collect();
        let expanded = sets::expand(file, &mut listings, &kept);
        self.listings = listings.into_iter().map(|l| (l.set.clone(), l)).collect();
        expanded
    }
}

/// One set's loop: lists it at once, then on the agent's interval and on a commit in its
/// local repository, and hands each listing to the agent.
async fn set_loop(
    set: AppSetConfig,
    config: Arc<Config>,
    shared: Arc<Shared>,
    listed: mpsc::Sender<Listing>,
    mut triggers: mpsc::Receiver<Trigger>,
    mut stop: Signal,
) {
    let mut since = Instant::now().checked_sub(INTERVAL_SHARE);
    loop {
        let syncer = shared.syncer();
        let since_then = since.unwrap_or_else(Instant::now);
        let listing = tokio::select! {
            () = stopped(&mut stop) => return,
            listing = sets::list(&syncer.sources, &config, &set, since_then, None) => listing,
        };
        if listed.send(listing).await.is_err() {
            return;
        }
        let wake = config.agent.interval + crate::retry::random_below(config.agent.jitter);
        since = tokio::select! {
            () = stopped(&mut stop) => return,
            () = tokio::time::sleep(wake) => Instant::now().checked_sub(INTERVAL_SHARE),
            Some(_) = triggers.recv() => {
                tokio::time::sleep(DEBOUNCE).await;
                Some(Instant::now())
            }
        };
    }
}
