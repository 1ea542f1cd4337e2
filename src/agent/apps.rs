//! The app tasks: started, stopped and changed by a reload and by the shards' assignment
//! (each task's loop is `app_loop.rs`).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{AppTask, ReloadError, SetTask, Shared};
use crate::config::{self, AppConfig, Config, RolloutEngine};
use crate::fleet::Listing;
use crate::fleet::{self, Changes, Role};
use crate::history::Trigger;
use crate::rollout::engine::{supervise, Engine};
use crate::shutdown::{self};
use crate::source::watch as repo_watch;
use crate::sync::Syncer;

pub(super) struct Agent {
    pub(super) config_path: PathBuf,
    /// The running configuration, published to the syncer and the status page.
    pub(super) config: tokio::sync::watch::Sender<Arc<Config>>,
    pub(super) shared: Arc<Shared>,
    pub(super) apps: BTreeMap<String, AppTask>,
    /// One watcher per local repository, fanning its commits out to its apps.
    pub(super) watchers: HashMap<PathBuf, RepoWatch>,
    /// With sharding: the live members, as last read.
    pub(super) members: Vec<String>,
    /// Each app set's last listing, its apps made from it.
    pub(super) listings: BTreeMap<String, Listing>,
    /// Each app set's loop.
    pub(super) sets: BTreeMap<String, SetTask>,
    /// Where the set loops hand their listings.
    pub(super) listed: mpsc::Sender<Listing>,
    /// Whether this host applies: it holds the Lease, or needs none (`leader_election`
    /// off). A standby runs no app, whatever a reload or a listing asks.
    pub(super) leader: tokio::sync::watch::Receiver<bool>,
}

/// How often a preview syncs on its own, at most: its set lists the refs on the agent's
/// interval (one request for all its previews) and wakes those whose ref moved.
const PREVIEW_INTERVAL: std::time::Duration = std::time::Duration::from_secs(3600);

/// The apps a repository's commits trigger.
type Subscribers = Arc<std::sync::Mutex<BTreeMap<String, mpsc::Sender<Trigger>>>>;

/// A watched local repository and the apps it triggers.
pub(super) struct RepoWatch {
    _watcher: notify::RecommendedWatcher,
    apps: Subscribers,
}

impl Agent {
    /// The running configuration.
    pub(super) fn config(&self) -> Arc<Config> {
        self.config.borrow().clone()
    }

    /// The role this host plays now: a shard among the live members, the leader, a
    /// standby, or alone.
    fn role(&self) -> Role<'_> {
        match &self.shared.shard {
            Some(shard) => Role::Shard {
                identity: &shard.identity,
                members: &self.members,
            },
            None if !*self.leader.borrow() => Role::Standby,
            None if self.config().agent.leader_election => Role::Leader,
            None => Role::Alone,
        }
    }

    /// Runs the apps this host should in its role, and only those (`fleet::desired`,
    /// `fleet::diff`): the one reconcile every trigger runs once it has changed its input
    /// (the configuration, the Lease's holder, the live members). The apps leaving stop
    /// all at once (their syncs in progress end first; with sharding their new owner waits
    /// for each app's Lease meanwhile); what was done.
    pub(super) async fn reconcile(&mut self) -> Changes {
        let config = self.config();
        let desired = fleet::desired(&config, self.role());
        let running: BTreeMap<String, &AppConfig> = (self.apps.iter())
            .map(|(n, t)| (n.clone(), &*t.app))
            .collect();
        let changes = fleet::diff(&running, &desired);
        let leaving: Vec<String> = (changes.stop.iter().cloned())
            .chain(changes.restart.iter().map(|a| a.name.clone()))
            .collect();
        self.stop_some(&leaving).await;
        for app in changes.start.iter().chain(&changes.restart) {
            self.start(app.clone());
        }
        if self.shared.shard.is_some() {
            let (count, of, live) = (desired.len(), config.apps.len(), self.members.len());
            self.shared.metrics.shard(count, live);
            if !changes.is_empty() {
                let hosts = crate::plural(live, "host");
                tracing::info!(
                    apps = count,
                    of,
                    members = live,
                    started = changes.start.len(),
                    handed_over = changes.stop.len(),
                    "shard: {count} of {of} apps on this host ({hosts} live)"
                );
            }
        }
        changes
    }

    pub(super) fn start(&mut self, app: Arc<AppConfig>) {
        let (trigger, triggers) = mpsc::channel(4);
        // A preview is woken by its set, which watches the repository.
        let watched = crate::source::local_repository(&app).filter(|_| app.preview.is_none());
        if let Some(path) = watched {
            self.subscribe(&app.name, path, trigger.clone());
        }
        let key = (crate::source::push_key(&app), app.preview.is_some());
        let heart = (self.shared.registry).enter(&app.name, trigger, webhook_secret(&app), key);
        let (stop, stopping) = shutdown::channel();
        let mut tasks = Vec::new();
        if app.rollout.engine == RolloutEngine::Agent {
            let syncer = self.shared.syncer();
            let engine = Engine {
                client: syncer.cluster(&app).client.clone(),
                field_manager: self.config().agent.field_manager.clone(),
            };
            tasks.push(tokio::spawn(supervise(
                engine,
                app.name.clone(),
                stopping.clone(),
            )));
        }
        let (mut interval, jitter) = (self.config().agent.interval, self.config().agent.jitter);
        if app.preview.is_some() {
            // Its set lists the refs on the interval and wakes the previews whose ref moved.
            interval = interval.max(PREVIEW_INTERVAL);
        }
        tasks.push(tokio::spawn(super::app_loop::app_loop(
            app.clone(),
            self.shared.clone(),
            interval,
            jitter,
            super::app_loop::Inbox {
                triggers,
                stop: stopping,
                heart,
                beat: super::beat_every(crate::service::notify::watchdog_period()),
                last_drift: None,
            },
        )));
        self.apps
            .insert(app.name.clone(), AppTask { app, stop, tasks });
    }

    /// A commit in the local repository at `path` triggers the app: one watcher per
    /// repository, whatever the number of its apps (inotify instances are few).
    pub(super) fn subscribe(&mut self, app: &str, path: PathBuf, trigger: mpsc::Sender<Trigger>) {
        if !self.watchers.contains_key(&path) {
            let (tx, mut rx) = mpsc::channel(1);
            let apps: Subscribers = Arc::default();
            let forward = apps.clone();
            tokio::spawn(async move {
                while rx.recv().await.is_some() {
                    let apps = forward.lock().map(|a| a.clone()).unwrap_or_default();
                    for trigger in apps.values() {
                        // A full channel already holds a trigger: that sync sees this commit.
                        let _ = trigger.try_send(Trigger::Notify);
                    }
                }
            });
            match repo_watch::watch_refs(&path, tx) {
                Ok(watcher) => {
                    self.watchers.insert(
                        path.clone(),
                        RepoWatch {
                            _watcher: watcher,
                            apps,
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(app, path = %path.display(), error = %e, "cannot watch the local repository; syncing on the interval only");
                    return;
                }
            }
        }
        if let Some(watch) = self.watchers.get(&path) {
            if let Ok(mut apps) = watch.apps.lock() {
                apps.insert(app.to_string(), trigger);
            }
        }
    }

    /// `name` no longer triggered by its repository's commits (a watcher left without
    /// subscribers ends).
    pub(super) fn unsubscribe(&mut self, name: &str) {
        self.watchers.retain(|_, watch| {
            let Ok(mut apps) = watch.apps.lock() else {
                return true;
            };
            apps.remove(name);
            !apps.is_empty()
        });
    }

    pub(super) async fn stop(&mut self, name: &str) {
        self.unsubscribe(name);
        if let Some(task) = self.apps.remove(name) {
            let _ = task.stop.send(true);
            for t in task.tasks {
                let _ = t.await;
            }
        }
        self.shared.registry.leave(name);
    }

    pub(super) async fn stop_all(&mut self) {
        let names: Vec<String> = self.apps.keys().cloned().collect();
        self.stop_some(&names).await;
    }

    /// Stops apps all at once, then waits for each.
    pub(super) async fn stop_some(&mut self, names: &[String]) {
        for name in names {
            if let Some(task) = self.apps.get(name) {
                let _ = task.stop.send(true); // all at once, then wait
            }
        }
        for name in names {
            self.stop(name).await;
        }
    }

    /// SIGHUP: a valid new configuration replaces the running one app by app; an invalid
    /// one is refused and the running one stays.
    pub(super) async fn reload(&mut self) {
        self.shared.notify("RELOADING=1");
        let answer = match config::load(&self.config_path) {
            Err(e) => Err(ReloadError::from(e)),
            Ok(mut new) => {
                let running = self.config();
                let later = running.agent.restart_only(&new.agent);
                new.agent = new.agent.keeping_running(&running.agent);
                let new = self.expanded(&new);
                let applied = self.apply(new).await;
                if applied.is_ok() {
                    // Its sets may have changed: each is listed again.
                    self.start_sets().await;
                }
                applied.map(|said| match later.as_slice() {
                    [] => said,
                    keys => {
                        let keys = keys.join(", ");
                        tracing::warn!("{keys}: changed, but only a restart takes them (systemctl restart berth); the running values stay until then");
                        format!("{said}; {keys} changed, but only a restart takes them (systemctl restart berth)")
                    }
                })
            }
        };
        if let Err(e) = &answer {
            tracing::error!("{e}");
        }
        super::answer_reload(&self.config().agent.state_dir, &answer);
        self.shared.notify("READY=1");
    }

    /// Runs `new` in place of the running configuration; what was done, or why it was
    /// refused.
    pub(super) async fn apply(&mut self, new: Config) -> Result<String, ReloadError> {
        let running = self.config();
        let settings = (&new.cluster, &new.agent, &new.notify);
        if settings == (&running.cluster, &running.agent, &running.notify) {
            self.publish(new);
            let changes = self.reconcile().await;
            let (added, removed, changed) = (
                changes.start.len(),
                changes.stop.len(),
                changes.restart.len(),
            );
            tracing::info!(added, removed, changed, "configuration reloaded");
            return Ok(format!(
                "configuration reloaded: {added} added, {removed} removed, {changed} changed"
            ));
        }
        self.reconnect(new).await?;
        self.reconcile().await;
        let said = "configuration reloaded: agent, cluster or notify settings changed, every app restarted";
        tracing::info!(apps = self.config().apps.len(), "{said}");
        Ok(said.to_string())
    }

    /// Publishes `new` to the syncer and the status page.
    fn publish(&self, mut new: Config) {
        new.share_apps(&self.config());
        self.config.send_replace(Arc::new(new));
    }

    /// The agent, cluster or notify settings changed: a new client and receivers for
    /// `new`, every app stopped (the caller starts them again).
    async fn reconnect(&mut self, new: Config) -> Result<(), ReloadError> {
        let connected = match Syncer::connect(&new, true).await {
            Ok(syncer) => syncer.notify(&new).map_err(anyhow::Error::from),
            Err(e) => Err(e.into()),
        };
        let syncer = connected.map_err(ReloadError::Unusable)?;
        let syncer = Arc::new(syncer.follow(self.config.subscribe()));
        self.shared
            .metrics
            .notifications(syncer.notifications.clone());
        if let Some(page) = &self.shared.page {
            page.set_syncer(syncer.clone());
        }
        if let Ok(mut s) = self.shared.syncer.write() {
            *s = syncer;
        }
        self.stop_all().await;
        self.shared.drift.forget();
        self.publish(new);
        Ok(())
    }
}

fn webhook_secret(app: &AppConfig) -> Option<Vec<u8>> {
    let read = match (&app.webhook_secret_file, &app.webhook_secret_env) {
        (Some(path), _) => {
            std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
        }
        (None, Some(var)) => {
            std::env::var(var).map_err(|_| format!("environment variable {var} is not set"))
        }
        (None, None) => return None,
    };
    match read {
        Ok(s) => Some(s.trim().as_bytes().to_vec()),
        Err(e) => {
            tracing::error!(app = %app.name, error = %e, "cannot read the webhook secret: the webhook is off");
            None
        }
    }
}
