//! The daemon (`berth run`): one task per app, each syncing on its interval (with
//! jitter), on commits in a watched local repository and on webhooks; one sync at a time
//! per app. Around them: readiness, status and watchdog pings for systemd (a stuck app
//! loop stops the pings), SIGHUP reload (apps added, removed or changed without a
//! restart; an invalid file keeps the running configuration), the HTTP endpoint, leader
//! election, and for apps with `rollout.engine = "agent"` the engine's supervisor.
//! Shutdown is passed in and fanned out to every task.
//!
//! Here: starting the daemon and serving until shutdown; `apps.rs` holds the app tasks
//! (start, stop, reload), `app_loop.rs` each app's loop, `registry.rs` the running apps
//! (what webhooks, `STATUS=`, the watchdog and the page read), `removed.rs` the apps a
//! restart finds removed, `background.rs` the endpoint, the watchdog and the other tasks,
//! `status.rs` the `STATUS=` line.

mod app_loop;
mod apps;
mod background;
mod drift;
mod images;
mod registry;
mod removed;
mod sets;
mod status;
mod suspensions;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::config::{AppConfig, Config, Published};
use crate::fleet::Listing;
use crate::history::Trigger;
use crate::page::StatusPage;
use crate::service::control::Control;
use crate::service::http::Endpoint;
use crate::service::listener;
use crate::service::metrics::Metrics;
use crate::service::notify::Notifier;
use crate::service::shards::Shard;
use crate::shutdown::{stopped, Signal};
use crate::sync::Syncer;
use apps::Agent;
use background::{start_background, start_http};
use registry::{Heartbeat, Registry};

/// How long after a ref change or webhook the sync starts, so the rest of a push lands.
const DEBOUNCE: Duration = Duration::from_millis(50);
/// How often a suspended app looks again, and the least time between an idle app's beats.
const TICK: Duration = Duration::from_secs(1);

/// How often an idle app loop beats, given the watchdog's period: at half of it, and never
/// without a watchdog (nothing reads the beats then). A beat every second woke 10,000 idle
/// apps 10,000 times a second.
fn beat_every(watchdog: Option<Duration>) -> Option<Duration> {
    watchdog.map(|period| (period / 2).max(TICK))
}

/// What the process tells the agent.
pub struct Signals {
    /// Turns true on SIGTERM / SIGINT.
    pub shutdown: Signal,
    /// One message per SIGHUP.
    pub reload: mpsc::Receiver<()>,
}

/// Errors that stop the agent from starting.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The HTTP endpoint's address could not be bound.
    // The OS's error is the source, printed after this message by `{e:#}`, the only way
    // this error is shown (through the command line's anyhow chain).
    #[error("cannot listen on {address} (agent.listen)")]
    Listen {
        /// The address.
        address: std::net::SocketAddr,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The control lane's thread (the endpoint's and the watchdog's) cannot be started.
    #[error("cannot start the control thread")]
    Control(#[source] std::io::Error),
    /// The status page's credentials cannot be used.
    #[error(transparent)]
    StatusPage(#[from] crate::page::AuthError),
}

/// Why a reload was refused (the running configuration stays).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file does not load or validate.
    #[error("configuration reload refused; the running configuration stays: {0}")]
    Invalid(#[from] crate::config::ConfigError),
    /// Its cluster or notify settings do not work.
    #[error("configuration reload refused: the new cluster or notify settings do not work; the running configuration stays: {0:#}")]
    Unusable(anyhow::Error),
}

struct AppTask {
    /// The app's configuration, shared with its loop.
    app: Arc<AppConfig>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// A running app set's loop (`sets.rs`).
struct SetTask {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// What app loops and the service tasks share.
struct Shared {
    syncer: RwLock<Arc<Syncer>>,
    metrics: Arc<Metrics>,
    /// The running apps and set loops.
    registry: Arc<Registry>,
    /// With `[agent] status_page`: the page (given the new syncer on a reload; where each
    /// app is, the registry tells it).
    page: Option<Arc<StatusPage>>,
    /// With `[agent] sharding`: this host's identity, for the membership and the apps'
    /// Leases.
    shard: Option<Shard>,
    /// The watches that notice drift on the apps' objects.
    drift: drift::Drift,
}

impl Shared {
    /// What the tasks share, at start.
    fn new(
        config: &Config,
        syncer: &Arc<Syncer>,
        endpoint: Option<Arc<Endpoint>>,
        page: Option<Arc<StatusPage>>,
        metrics: Arc<Metrics>,
        drift: drift::Drift,
    ) -> Self {
        let registry = Arc::new(Registry::new(Notifier::from_env(), page.clone()));
        if let Some(endpoint) = endpoint {
            let _ = endpoint.webhooks.set(registry.clone());
        }
        Shared {
            drift,
            page,
            syncer: RwLock::new(syncer.clone()),
            metrics,
            registry,
            shard: config.agent.sharding.then(|| Shard {
                identity: syncer.host.clone(),
                namespace: config.agent.inventory_namespace.clone(),
                duration: config.agent.lease_duration,
            }),
        }
    }

    fn syncer(&self) -> Arc<Syncer> {
        self.syncer
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Wakes the running apps that depend on `app`, whose sync just ended (a full channel
    /// already holds a trigger: that sync sees this one's result).
    fn wake_dependents(&self, app: &str) {
        for dependent in self.syncer().dependents(app) {
            self.registry.wake(&dependent, Trigger::Dependency);
        }
    }

    /// Tells systemd `message` (`READY=1`, `WATCHDOG=1`, …).
    fn notify(&self, message: &str) {
        self.registry.notifier.send(message);
    }
}

/// The pid file `berth reload` signals.
pub fn pid_file(config: &Config) -> PathBuf {
    config.agent.state_dir.join("berth.pid")
}

/// Where the agent answers the last `berth reload`: one JSON object (`pid`, `at`,
/// `taken`, `message`).
pub fn reload_answer(state_dir: &std::path::Path) -> PathBuf {
    state_dir.join("reload.json")
}

/// The answer to a reload, for `berth reload` to print (and exit 1 on a refusal).
#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct ReloadAnswer {
    /// The agent's pid.
    pub pid: u32,
    /// When it answered.
    pub at: Timestamp,
    /// Whether the new configuration runs.
    pub taken: bool,
    /// What was done, or why not.
    pub message: String,
}

fn answer_reload(state_dir: &std::path::Path, answer: &Result<String, ReloadError>) {
    let (taken, message) = match answer {
        Ok(m) => (true, m.clone()),
        Err(e) => (false, e.to_string()),
    };
    let answer = ReloadAnswer {
        pid: std::process::id(),
        at: Timestamp::now(),
        taken,
        message,
    };
    let written = serde_json::to_vec(&answer)
        .map_err(std::io::Error::other)
        .and_then(|text| crate::state::write_private(&reload_answer(state_dir), &text));
    if let Err(e) = written {
        tracing::warn!(error = %e, "cannot write the reload's answer for berth reload");
    }
}

/// Runs the agent until shutdown.
///
/// # Errors
/// The HTTP endpoint cannot listen.
pub async fn run(
    config_path: PathBuf,
    config: Config,
    syncer: Syncer,
    mut signals: Signals,
) -> Result<(), AgentError> {
    // Each app set's apps as it listed them last: its loop lists it again at once.
    let config = crate::fleet::expand_remembered(&config);
    let (publish, published) = watch::channel(Arc::new(config.clone()));
    let syncer = Arc::new(syncer.follow(published.clone()));
    // Before anything opens files: the syncs and the endpoint share the limit.
    let open_files = listener::raise_open_files();
    let metrics = Arc::new(Metrics::default());
    metrics.notifications(syncer.notifications.clone());
    let control = Control::start(&signals.shutdown).map_err(AgentError::Control)?;
    let (endpoint, page) = start_serving(
        &control,
        &config,
        &syncer,
        open_files,
        &metrics,
        published,
        &signals.shutdown,
    )
    .await?;
    let (drift, drifted) = drift::Drift::new();
    let shared = Arc::new(Shared::new(
        &config, &syncer, endpoint, page, metrics, drift,
    ));
    write_pid_file(&config);
    let (leader_tx, leader) =
        watch::channel(!config.agent.leader_election && !config.agent.sharding);
    let (members_tx, members) = watch::channel(Vec::new());
    let mut background = start_background(
        &control,
        &config,
        &shared,
        &syncer,
        leader_tx,
        members_tx,
        &signals.shutdown,
    );
    let watch = suspensions::watch(
        shared.clone(),
        publish.subscribe(),
        signals.shutdown.clone(),
    );
    background.push(tokio::spawn(watch));
    let repair = drift::repair(shared.clone(), drifted, signals.shutdown.clone());
    background.push(tokio::spawn(repair));
    background.push(images::start(&shared, &publish, &signals.shutdown));
    let (listed_tx, listed) = mpsc::channel(1);
    let mut agent = Agent {
        config_path,
        config: publish,
        shared: shared.clone(),
        apps: BTreeMap::new(),
        watchers: HashMap::new(),
        members: Vec::new(),
        listings: sets::remembered(&config),
        sets: BTreeMap::new(),
        listed: listed_tx,
        leader: leader.clone(),
    };
    agent.start_sets().await;
    shared.notify("READY=1");
    tracing::info!(apps = agent.config().apps.len(), "berth is running");
    if let Some(warning) = crate::manifest::tool::landlock::warning() {
        tracing::warn!("{warning}");
    }
    agent.serve(&mut signals, leader, members, listed).await;
    agent.shut_down(background).await;
    Ok(())
}

/// Starts the HTTP endpoint and, with `[agent] status_page`, the status page and its tasks.
async fn start_serving(
    control: &Control,
    config: &Config,
    syncer: &Arc<Syncer>,
    open_files: u64,
    metrics: &Arc<Metrics>,
    published: Published,
    shutdown: &Signal,
) -> Result<(Option<Arc<Endpoint>>, Option<Arc<StatusPage>>), AgentError> {
    // Made before the endpoint serves, so its first request finds it.
    let page = if config.agent.status_page && config.agent.listen.is_some() {
        Some(Arc::new(StatusPage::new(config, syncer.clone())?))
    } else {
        None
    };
    let endpoint = start_http(
        control,
        config,
        open_files,
        metrics,
        syncer,
        page.clone(),
        shutdown,
    )?;
    if let Some(page) = &page {
        tokio::spawn(page.clone().refresh(shutdown.clone()));
        tokio::spawn(page.clone().follow(published, shutdown.clone()));
    }
    Ok((endpoint, page))
}

/// Writes the pid file `berth reload` signals (best effort: the agent runs without it).
fn write_pid_file(config: &Config) {
    let _ = crate::state::private_dir(&config.agent.state_dir);
    let _ =
        crate::state::write_private(&pid_file(config), std::process::id().to_string().as_bytes());
}

impl Agent {
    /// Stops the apps, then waits for the background tasks, and removes the pid file.
    async fn shut_down(&mut self, background: Vec<JoinHandle<()>>) {
        self.shared.notify("STOPPING=1");
        tracing::info!("shutting down: syncs in progress stop at their next step and requests in flight are cut short (each such sync recorded interrupted); a rollout being followed is left to its controller, and the next start follows it to its end");
        self.shared.syncer().fleet.stop();
        self.stop_sets().await;
        self.stop_all().await;
        for task in background {
            let _ = task.await;
        }
        let _ = std::fs::remove_file(pid_file(&self.config()));
    }

    /// Runs the apps this host should, until shutdown: a reload, a set's listing, a change
    /// of the live hosts or of the Lease's holder each changes one input of the one
    /// reconcile (`Agent::reconcile`) and runs it. The host that applies (it leads, or
    /// shares the apps) also removes the apps taken out of the configuration.
    async fn serve(
        &mut self,
        signals: &mut Signals,
        mut leader: watch::Receiver<bool>,
        mut members: watch::Receiver<Vec<String>>,
        mut listed: mpsc::Receiver<Listing>,
    ) {
        let mut shutdown = signals.shutdown.clone();
        let applies = |leader: &watch::Receiver<bool>, sharded: bool| *leader.borrow() || sharded;
        let sharded = self.shared.shard.is_some();
        self.reconcile().await;
        if *leader.borrow_and_update() {
            self.prune_removed(&signals.shutdown).await;
        }
        loop {
            tokio::select! {
                () = stopped(&mut shutdown) => return,
                Some(()) = signals.reload.recv() => {
                    self.reload().await;
                    if applies(&leader, sharded) {
                        self.prune_removed(&signals.shutdown).await;
                    }
                }
                Some(listing) = listed.recv() => {
                    let prune = applies(&leader, sharded);
                    self.take_listing(listing, prune, &signals.shutdown).await;
                }
                Ok(()) = members.changed() => {
                    self.members = members.borrow_and_update().clone();
                    self.reconcile().await;
                    self.prune_removed(&signals.shutdown).await;
                }
                Ok(()) = leader.changed() => {
                    let leads = *leader.borrow_and_update();
                    match leads {
                        true => tracing::info!("holding the lease: this host applies"),
                        false => tracing::warn!("lost the lease: another host applies now"),
                    }
                    self.reconcile().await;
                    if leads {
                        self.prune_removed(&signals.shutdown).await;
                    }
                }
            }
        }
    }
}
