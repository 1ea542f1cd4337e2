//! What every sync of an agent shares ([`Syncer`]: the clusters' handles, the
//! agent's settings, the repositories' fetches, the history, the apps) and how one sync
//! runs ([`SyncOptions`]). The orchestrator that runs a sync is `pipeline.rs`.

use std::sync::Arc;
use std::time::Instant;

use super::inputs::Remembered;
use crate::cluster::{Cluster, ClusterError, Fleet};
use crate::config::{AgentConfig, AppConfig, Config, Published};
use crate::history::{HistoryLog, Trigger};
use crate::notifications::deliver::HttpClient;
use crate::notifications::{Notifications, NotifyError};
use crate::source::shared::Sources;

/// What every sync of an agent shares.
pub struct Syncer {
    /// The clusters: each one's client, whether it answers, its kinds.
    pub fleet: Fleet,
    /// Agent settings.
    pub agent: AgentConfig,
    /// The history log.
    pub history: HistoryLog,
    /// Apps with `rollout.engine = "agent"` have their Deployments driven by a
    /// supervisor elsewhere (the daemon): syncs then only follow them.
    pub engine_supervised: bool,
    /// `agent.max_concurrent_syncs` places; the daemon's app loops take one per sync, in
    /// the order they asked (tokio's semaphore is fair), so one slow app holds one place
    /// and never starves the others.
    pub slots: Arc<tokio::sync::Semaphore>,
    /// The repositories' fetches, shared by their apps.
    pub sources: Sources,
    /// This host (`hostname/pid`), recorded in every sync's record.
    pub host: String,
    /// Where each sync's outcome is told (`[[notify]]`); none until the command starts
    /// them ([`Notifications::start`]).
    pub notifications: Arc<Notifications>,
    /// What each app's last good sync read, to skip commits that change none of it.
    pub(super) inputs: Remembered,
    /// The client of canaries' Prometheus and HTTP checks, made at the first canary.
    checks_client: std::sync::OnceLock<HttpClient>,
    /// The configuration: whom an app depends on and who depends on it.
    config: Published,
}

impl Syncer {
    /// Starts the `[[notify]]` receivers of `config`: each sync's outcome is told to them.
    ///
    /// # Errors
    /// A receiver's address or secrets cannot be read.
    pub fn notify(mut self, config: &crate::config::Config) -> Result<Self, NotifyError> {
        self.notifications = Arc::new(Notifications::start(
            &config.notify,
            &config.agent.state_dir,
        )?);
        Ok(self)
    }

    /// Connects to the clusters named in `config`.
    ///
    /// # Errors
    /// No client could be made.
    pub async fn connect(
        config: &crate::config::Config,
        engine_supervised: bool,
    ) -> Result<Self, ClusterError> {
        let fleet = Fleet::connect(&config.cluster).await?;
        // Before anything is written there: the state holds Secret manifests.
        if let Err(e) = crate::state::secure_state_dir(&config.agent.state_dir) {
            tracing::warn!(state_dir = %config.agent.state_dir.display(), error = %e, "cannot make the state folder private (0700)");
        }
        Ok(Syncer {
            fleet,
            slots: Arc::new(tokio::sync::Semaphore::new(
                config.agent.max_concurrent_syncs,
            )),
            sources: Sources::of(&config.agent),
            host: crate::service::lease::identity(),
            inputs: Remembered::new(&config.agent, &config.cluster),
            checks_client: std::sync::OnceLock::new(),
            notifications: Arc::new(Notifications::none()),
            agent: config.agent.clone(),
            history: HistoryLog::new(&config.agent.state_dir),
            engine_supervised,
            config: tokio::sync::watch::channel(Arc::new(config.clone())).1,
        })
    }

    /// Follows the configuration the agent publishes (a reload's apps and their
    /// `depends_on`) instead of the one it connected with.
    #[must_use]
    pub fn follow(mut self, config: Published) -> Self {
        self.config = config;
        self
    }

    /// The client of canaries' Prometheus and HTTP checks (the system's trusted roots),
    /// shared by every canary of the agent.
    ///
    /// # Errors
    /// The system's trusted certificates cannot be read.
    pub(super) fn checks_client(&self) -> std::io::Result<HttpClient> {
        if let Some(client) = self.checks_client.get() {
            return Ok(client.clone());
        }
        let made = crate::notifications::deliver::client()?;
        Ok(self.checks_client.get_or_init(|| made).clone())
    }

    /// The apps that depend on `app` directly.
    pub fn dependents(&self, app: &str) -> Vec<String> {
        crate::config::order::dependents(&self.config().apps, app)
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    /// The configuration as last published.
    pub(super) fn config(&self) -> Arc<Config> {
        self.config.borrow().clone()
    }

    /// The cluster `app` is synced to.
    pub fn cluster(&self, app: &AppConfig) -> &Arc<Cluster> {
        self.fleet.of(app)
    }

    /// The cluster of the app of that name in the configuration as last published.
    pub fn cluster_of(&self, app: &str) -> Option<Arc<Cluster>> {
        self.config()
            .app(app)
            .and_then(|a| self.fleet.find(a))
            .cloned()
    }
}

/// How one sync runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncOptions {
    /// What started it.
    pub trigger: Trigger,
    /// Apply a commit whose rollout failed before (the app is held).
    pub force: bool,
    /// Follow the rollouts of the Deployments it writes (off: apply and prune only, as
    /// `kubectl apply` does).
    pub wait: bool,
    /// Apply a commit that does not descend from the last applied one (`berth sync
    /// --accept-rewind`), once.
    pub accept_rewind: bool,
    /// When the sync was asked for: a fetch of the repository started since is shared.
    pub requested: Instant,
    /// How long it waited for the apps it depends on (recorded).
    pub waited: Option<std::time::Duration>,
}

impl SyncOptions {
    /// The oldest fetch the sync takes: one started since it was asked for, or for an
    /// interval's sync a little before (apps whose intervals fall close share a fetch).
    pub fn fetch_since(&self) -> Instant {
        match self.trigger {
            Trigger::Interval => self.requested - crate::source::shared::INTERVAL_SHARE,
            _ => self.requested,
        }
    }

    /// A normal sync started by `trigger`.
    pub fn new(trigger: Trigger) -> Self {
        SyncOptions {
            trigger,
            force: false,
            wait: true,
            accept_rewind: false,
            requested: Instant::now(),
            waited: None,
        }
    }
}
