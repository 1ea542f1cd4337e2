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
use crate::config::{AppConfig, AppSetConfig, Config};
use crate::fleet::{self, Listed, Listing, Transition};
use crate::history::Trigger;
use crate::shutdown::{self, stopped, Signal};
use crate::source::shared::INTERVAL_SHARE;

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
                // has no webhook of its own).
                let repo = crate::source::push_key(&sample);
                self.shared
                    .registry
                    .enter_set(&set.name, trigger.clone(), repo);
                if let Some(path) = crate::source::local_repository(&sample) {
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
            self.shared.registry.leave_set(&name);
            let _ = task.stop.send(true);
            let _ = task.task.await;
        }
    }

    /// A set listed: what it changed acted on (renamed folders' objects handed over, the
    /// apps it no longer makes removed: `fleet::execute`, where `prune` — this host
    /// leads, or shares the apps), then its apps made from the listing replace its
    /// running ones; its problem said, on every listing.
    pub(super) async fn take_listing(&mut self, listing: Listing, prune: bool, shutdown: &Signal) {
        let set = listing.set.clone();
        let before = self.listings.insert(set.clone(), listing.clone());
        let moved = fleet::moved_refs(before.as_ref().map(|b| &b.listed), &listing.listed);
        let running = self.config();
        let expanded = self.expanded(&running);
        let listing = self.listings.get(&set).cloned().unwrap_or(listing);
        self.say_listing(&listing, &expanded);
        if let (Some(before), true) = (&before, prune) {
            self.say_previews(
                &set,
                (&running, &before.listed),
                (&expanded, &listing.listed),
            );
        }
        let acted = match (prune, before) {
            (true, Some(before)) => {
                self.act(&running, &before, &listing, &expanded, shutdown)
                    .await
            }
            (true, None) => true,
            (false, _) => false,
        };
        if expanded.apps != running.apps {
            for unknown in fleet::unknown_dependencies(&expanded) {
                tracing::warn!("{unknown}");
            }
            match self.apply(expanded).await {
                Ok(said) => tracing::info!(set = %set, "app set {set} listed: {said}"),
                Err(e) => tracing::error!(set = %set, "app set {set}: {e}"),
            }
        }
        // The previews whose ref moved sync now (a new one syncs as it starts).
        let previews = (self.config().apps.iter())
            .filter(|a| a.set.as_deref() == Some(set.as_str()))
            .filter(|a| a.preview.as_ref().is_some_and(|r| moved.contains(r)))
            .map(|a| a.name.clone())
            .collect::<Vec<_>>();
        for app in previews {
            self.shared.registry.wake(&app, Trigger::Ref);
        }
        if acted {
            fleet::remember(&running.agent.state_dir, &listing);
        }
        if prune {
            self.prune_removed(shutdown).await;
        }
    }

    /// The listing's problem kept for `berth status` and the page, logged, and told to the
    /// receivers once; the apps it makes that are refused, logged.
    fn say_listing(&self, listing: &Listing, expanded: &Config) {
        let set = &listing.set;
        let syncer = self.shared.syncer();
        fleet::note_problem(&syncer.agent.state_dir, listing);
        let problem = listing.problem.as_ref().map(ToString::to_string);
        if let Some(problem) = &problem {
            tracing::warn!(set = %set, "app set {set}: {problem}");
        }
        (syncer.notifications).observe_set(set, problem.as_deref(), &syncer.host);
        for refused in expanded.refused.iter().filter(|r| &r.set == set) {
            tracing::warn!(set = %set, app = %refused.app, "{refused}");
        }
    }

    /// Tells the receivers of each preview of `set` made or removed since the last listing
    /// (none at the first: the previews that ran before a restart are not new).
    fn say_previews(
        &self,
        set: &str,
        (was, listed): (&Config, &Listed),
        (now, listing): (&Config, &Listed),
    ) {
        let previews = |config: &Config| -> Vec<(String, String)> {
            (config.apps.iter())
                .filter(|a| a.set.as_deref() == Some(set))
                .filter_map(|a| Some((a.name.clone(), a.preview.clone()?)))
                .collect()
        };
        let (before, after) = (previews(was), previews(now));
        let syncer = self.shared.syncer();
        let sha = |refs: &Listed, name: &str| {
            let found = refs.refs.iter().find(|r| r.name == name);
            found.map(|r| r.sha.clone()).unwrap_or_default()
        };
        for (app, git_ref) in after.iter().filter(|p| !before.contains(p)) {
            let at = (git_ref.as_str(), sha(listing, git_ref));
            (syncer.notifications).observe_preview(app, (at.0, &at.1), true, &syncer.host);
        }
        for (app, git_ref) in before.iter().filter(|p| !after.contains(p)) {
            let at = (git_ref.as_str(), sha(listed, git_ref));
            (syncer.notifications).observe_preview(app, (at.0, &at.1), false, &syncer.host);
        }
    }

    /// Acts on what `listing` changed since `before` — this host's share of it, its apps
    /// stopped first — before the apps `expanded` makes start; whether every act went
    /// through (the listing may then be kept). With sharding and the live hosts not known
    /// yet, nothing is done.
    async fn act(
        &mut self,
        running: &Config,
        before: &Listing,
        listing: &Listing,
        expanded: &Config,
        shutdown: &Signal,
    ) -> bool {
        let Some(set) = running.app_sets.iter().find(|s| s.name == listing.set) else {
            return true;
        };
        let mut had: Vec<Arc<AppConfig>> = (running.apps.iter())
            .filter(|a| a.set.as_deref() == Some(set.name.as_str()))
            .cloned()
            .collect();
        for app in fleet::remembered_apps(running, set) {
            if !had.iter().any(|a| a.name == app.name) {
                had.push(app);
            }
        }
        let transition = Transition::between(running, set, &before.listed, &had, listing, expanded);
        let shard = self.shared.shard.clone();
        if transition.is_empty() || (shard.is_some() && self.members.is_empty()) {
            return transition.is_empty();
        }
        let host = (shard.as_ref()).map(|s| (s.identity.as_str(), self.members.as_slice()));
        let mine = transition.share(host, expanded);
        let leaving: Vec<String> = mine.leaving().map(String::from).collect();
        self.stop_some(&leaving).await;
        let syncer = self.shared.syncer();
        let executed =
            fleet::execute(&syncer, &mine, shard.as_ref(), shutdown, &log_progress).await;
        for record in &executed.records {
            self.shared.metrics.observe(record);
        }
        executed.ok()
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
        let expanded = fleet::expand(file, &mut listings, &kept);
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
            listing = fleet::list(&syncer.sources, &config, &set, since_then, None) => listing,
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
