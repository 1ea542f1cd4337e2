//! The daemon (`berth run`): one task per app, each syncing on its interval (with
//! jitter), on commits in a watched local repository and on webhooks; one sync at a time
//! per app. Around them: readiness, status and watchdog pings for systemd (a stuck app
//! loop stops the pings), SIGHUP reload (apps added, removed or changed without a
//! restart; an invalid file keeps the running configuration), the HTTP endpoint, leader
//! election, and for apps with `rollout.engine = "agent"` the engine's supervisor.
//! Shutdown is passed in and fanned out to every task.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::config::{self, AppConfig, Config, RolloutEngine};
use crate::history::{Outcome, SyncRecord, Trigger};
use crate::rollout::engine::{supervise, Engine};
use crate::service::http::{self, Endpoint, Hook};
use crate::service::lease::{self, Elector};
use crate::service::metrics::Metrics;
use crate::service::notify::{watchdog_period, Notifier};
use crate::shutdown::{self, stopped, Signal};
use crate::source::{git, watch as repo_watch};
use crate::sync::{SyncOptions, Syncer};

/// How long after a ref change or webhook the sync starts, so the rest of a push lands.
const DEBOUNCE: Duration = Duration::from_millis(50);
/// How often idle app loops prove they are alive, and the status line is refreshed.
const TICK: Duration = Duration::from_secs(1);

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
    #[error("cannot listen on {address} (agent.listen): {source}")]
    Listen {
        /// The address.
        address: std::net::SocketAddr,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
}

/// An app loop's sign of life, for the watchdog.
#[derive(Default)]
pub struct Heartbeat {
    last_ms: AtomicI64,
    busy_since_ms: AtomicI64,
}

fn now_ms() -> i64 {
    Timestamp::now().as_millisecond()
}

impl Heartbeat {
    fn beat(&self) {
        self.last_ms.store(now_ms(), Ordering::Relaxed);
    }

    fn busy(&self, busy: bool) {
        self.busy_since_ms
            .store(if busy { now_ms() } else { 0 }, Ordering::Relaxed);
        self.beat();
    }

    /// Alive: idle and beating, or in a sync that is younger than `sync_timeout`.
    fn alive(&self, sync_timeout: Duration, period: Duration) -> bool {
        let now = now_ms();
        match self.busy_since_ms.load(Ordering::Relaxed) {
            0 => {
                now - self.last_ms.load(Ordering::Relaxed)
                    < period.as_millis() as i64 + TICK.as_millis() as i64
            }
            since => now - since < sync_timeout.as_millis() as i64,
        }
    }
}

struct AppTask {
    app: AppConfig,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    _watcher: Option<notify::RecommendedWatcher>,
}

/// What app loops and the service tasks share.
struct Shared {
    syncer: RwLock<Arc<Syncer>>,
    notifier: Notifier,
    metrics: Arc<Metrics>,
    hearts: Mutex<BTreeMap<String, Arc<Heartbeat>>>,
    status: Mutex<BTreeMap<String, (String, Timestamp)>>,
    endpoint: Option<Arc<Endpoint>>,
}

impl Shared {
    fn syncer(&self) -> Arc<Syncer> {
        self.syncer
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// `STATUS=guestbook: synced abc1234 (3 changed) 12s ago; …`
    fn publish_status(&self) {
        let Ok(status) = self.status.lock() else {
            return;
        };
        let now = Timestamp::now();
        let line: Vec<String> = status
            .values()
            .map(|(text, at)| format!("{text} {}s ago", now.duration_since(*at).as_secs()))
            .collect();
        if !line.is_empty() {
            self.notifier.send(&format!("STATUS={}", line.join("; ")));
        }
    }
}

/// The one-line summary of a sync, for `STATUS=`.
pub fn status_line(r: &SyncRecord) -> String {
    let commit = r.short_commit().to_string();
    match r.outcome {
        Outcome::Succeeded => format!("{}: synced {commit} ({} changed)", r.app, r.changes()),
        Outcome::NoChange => format!("{}: synced {commit} (no change)", r.app),
        Outcome::Held => format!("{}: held at {commit}", r.app),
        Outcome::RolledBack => format!("{}: rolled back, held at {commit}", r.app),
        Outcome::Failed | Outcome::Interrupted => {
            format!("{}: {} at {commit}", r.app, r.outcome.as_str())
        }
    }
}

/// The pid file `berth reload` signals.
pub fn pid_file(config: &Config) -> PathBuf {
    config.agent.state_dir.join("berth.pid")
}

/// Runs the agent until shutdown.
///
/// # Errors
/// The HTTP endpoint cannot listen.
pub async fn run(
    config_path: PathBuf,
    config: Config,
    syncer: Arc<Syncer>,
    mut signals: Signals,
) -> Result<(), AgentError> {
    let metrics = Arc::new(Metrics::default());
    let shared = Arc::new(Shared {
        endpoint: start_http(&config, &metrics, &syncer, &signals.shutdown).await?,
        syncer: RwLock::new(syncer.clone()),
        notifier: Notifier::from_env(),
        metrics,
        hearts: Mutex::new(BTreeMap::new()),
        status: Mutex::new(BTreeMap::new()),
    });
    let _ = std::fs::create_dir_all(&config.agent.state_dir);
    let _ = std::fs::write(pid_file(&config), std::process::id().to_string());
    let (leader_tx, mut leader) = watch::channel(!config.agent.leader_election);
    let mut background = vec![tokio::spawn(watchdog(
        shared.clone(),
        config.agent.sync_timeout,
        signals.shutdown.clone(),
    ))];
    if config.agent.leader_election {
        let elector = Elector {
            api: kube::Api::namespaced(syncer.client.clone(), &config.agent.inventory_namespace),
            name: config.agent.lease_name.clone(),
            identity: lease::identity(),
            duration: config.agent.lease_duration,
        };
        tracing::info!(lease = %elector.name, identity = %elector.identity, "leader election on: waiting for the lease");
        background.push(tokio::spawn(
            elector.run(leader_tx, signals.shutdown.clone()),
        ));
    }
    let mut agent = Agent {
        config_path,
        config,
        shared: shared.clone(),
        apps: BTreeMap::new(),
    };
    shared.notifier.send("READY=1");
    tracing::info!(apps = agent.config.apps.len(), "berth is running");
    let mut shutdown = signals.shutdown.clone();
    loop {
        if *leader.borrow_and_update() && agent.apps.is_empty() {
            agent.start_all();
        }
        tokio::select! {
            () = stopped(&mut shutdown) => break,
            Some(()) = signals.reload.recv() => agent.reload().await,
            Ok(()) = leader.changed() => {
                if !*leader.borrow() {
                    tracing::warn!("lost the lease: another host applies now");
                    agent.stop_all().await;
                } else {
                    tracing::info!("holding the lease: this host applies");
                }
            }
        }
    }
    shared.notifier.send("STOPPING=1");
    tracing::info!("shutting down: the syncs in progress finish first");
    agent.stop_all().await;
    for task in background {
        let _ = task.await;
    }
    let _ = std::fs::remove_file(pid_file(&agent.config));
    Ok(())
}

async fn start_http(
    config: &Config,
    metrics: &Arc<Metrics>,
    syncer: &Syncer,
    shutdown: &Signal,
) -> Result<Option<Arc<Endpoint>>, AgentError> {
    let Some(address) = config.agent.listen else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| AgentError::Listen { address, source })?;
    let endpoint = Arc::new(Endpoint {
        metrics: metrics.clone(),
        hooks: RwLock::new(HashMap::new()),
        client: syncer.client.clone(),
    });
    tracing::info!(%address, "serving /healthz, /readyz, /metrics and /hooks/<app>");
    tokio::spawn(http::serve(listener, endpoint.clone(), shutdown.clone()));
    Ok(Some(endpoint))
}

/// Pings the watchdog while every app loop is alive, and refreshes `STATUS=`.
async fn watchdog(shared: Arc<Shared>, sync_timeout: Duration, mut shutdown: Signal) {
    let period = watchdog_period();
    let every = period.map_or(TICK * 10, |p| (p / 2).min(TICK * 10));
    let mut warned = false;
    loop {
        tokio::select! {
            () = stopped(&mut shutdown) => return,
            () = tokio::time::sleep(every) => {}
        }
        shared.publish_status();
        let Some(period) = period else { continue };
        let stuck: Vec<String> = shared
            .hearts
            .lock()
            .map(|h| {
                h.iter()
                    .filter(|(_, hb)| !hb.alive(sync_timeout, period))
                    .map(|(a, _)| a.clone())
                    .collect()
            })
            .unwrap_or_default();
        if stuck.is_empty() {
            shared.notifier.send("WATCHDOG=1");
            warned = false;
        } else if !warned {
            tracing::error!(apps = %stuck.join(","), "app loop stuck (a sync running longer than agent.sync_timeout): no more watchdog pings, systemd will restart berth");
            warned = true;
        }
    }
}

struct Agent {
    config_path: PathBuf,
    config: Config,
    shared: Arc<Shared>,
    apps: BTreeMap<String, AppTask>,
}

impl Agent {
    fn start_all(&mut self) {
        for app in self.config.apps.clone() {
            self.start(app);
        }
    }

    fn start(&mut self, app: AppConfig) {
        let (trigger, triggers) = mpsc::channel(4);
        let watcher = git::local_path(&app.repo).and_then(|path| {
            let (tx, mut rx) = mpsc::channel(1);
            let forward = trigger.clone();
            tokio::spawn(async move {
                while rx.recv().await.is_some() {
                    let _ = forward.try_send(Trigger::Notify);
                }
            });
            repo_watch::watch_refs(&path, tx)
                .inspect_err(|e| tracing::warn!(app = %app.name, path = %path.display(), error = %e, "cannot watch the local repository; syncing on the interval only"))
                .ok()
        });
        if let Some(endpoint) = &self.shared.endpoint {
            let secret = webhook_secret(&app);
            if let Ok(mut hooks) = endpoint.hooks.write() {
                hooks.insert(app.name.clone(), Hook { secret, trigger });
            }
        }
        let heart = Arc::new(Heartbeat::default());
        heart.beat();
        if let Ok(mut hearts) = self.shared.hearts.lock() {
            hearts.insert(app.name.clone(), heart.clone());
        }
        let (stop, stopping) = shutdown::channel();
        let mut tasks = Vec::new();
        if app.rollout.engine == RolloutEngine::Agent {
            let syncer = self.shared.syncer();
            let engine = Engine {
                client: syncer.client.clone(),
                field_manager: self.config.agent.field_manager.clone(),
            };
            tasks.push(tokio::spawn(supervise(
                engine,
                app.name.clone(),
                stopping.clone(),
            )));
        }
        let (interval, jitter) = (self.config.agent.interval, self.config.agent.jitter);
        tasks.push(tokio::spawn(app_loop(
            app.clone(),
            self.shared.clone(),
            interval,
            jitter,
            triggers,
            stopping,
            heart,
        )));
        self.apps.insert(
            app.name.clone(),
            AppTask {
                app,
                stop,
                tasks,
                _watcher: watcher,
            },
        );
    }

    async fn stop(&mut self, name: &str) {
        if let Some(task) = self.apps.remove(name) {
            let _ = task.stop.send(true);
            for t in task.tasks {
                let _ = t.await;
            }
        }
        if let Ok(mut hearts) = self.shared.hearts.lock() {
            hearts.remove(name);
        }
        if let Some(endpoint) = &self.shared.endpoint {
            if let Ok(mut hooks) = endpoint.hooks.write() {
                hooks.remove(name);
            }
        }
        if let Ok(mut status) = self.shared.status.lock() {
            status.remove(name);
        }
    }

    async fn stop_all(&mut self) {
        let names: Vec<String> = self.apps.keys().cloned().collect();
        for name in &names {
            if let Some(task) = self.apps.get(name) {
                let _ = task.stop.send(true); // all at once, then wait
            }
        }
        for name in names {
            self.stop(&name).await;
        }
    }

    /// SIGHUP: a valid new configuration replaces the running one app by app; an invalid
    /// one is refused and the running one stays.
    async fn reload(&mut self) {
        self.shared.notifier.send("RELOADING=1");
        match config::load(&self.config_path) {
            Err(e) => {
                tracing::error!(error = %e, "configuration reload refused; the running configuration stays")
            }
            Ok(new) => self.apply(new).await,
        }
        self.shared.notifier.send("READY=1");
    }

    async fn apply(&mut self, new: Config) {
        let leading = !self.apps.is_empty() || self.config.apps.is_empty();
        if new.cluster != self.config.cluster || new.agent != self.config.agent {
            match Syncer::connect(&new, true).await {
                Ok(syncer) => {
                    if let Ok(mut s) = self.shared.syncer.write() {
                        *s = Arc::new(syncer);
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "configuration reload refused: the new cluster settings do not work; the running configuration stays");
                    return;
                }
            }
            self.stop_all().await;
            self.config = new;
            if leading {
                self.start_all();
            }
            tracing::info!(
                apps = self.config.apps.len(),
                "configuration reloaded: agent or cluster settings changed, every app restarted"
            );
            return;
        }
        let wanted: BTreeMap<String, AppConfig> = new
            .apps
            .iter()
            .map(|a| (a.name.clone(), a.clone()))
            .collect();
        let (mut added, mut removed, mut changed) = (0, 0, 0);
        let running: Vec<String> = self.apps.keys().cloned().collect();
        for name in running {
            match wanted.get(&name) {
                None => {
                    self.stop(&name).await;
                    removed += 1;
                }
                Some(app) if self.apps.get(&name).is_some_and(|t| &t.app != app) => {
                    self.stop(&name).await;
                    self.start(app.clone());
                    changed += 1;
                }
                Some(_) => {}
            }
        }
        self.config = new;
        if leading {
            let new_apps: Vec<AppConfig> = wanted
                .into_values()
                .filter(|a| !self.apps.contains_key(&a.name))
                .collect();
            for app in new_apps {
                self.start(app);
                added += 1;
            }
        }
        tracing::info!(added, removed, changed, "configuration reloaded");
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

async fn app_loop(
    app: AppConfig,
    shared: Arc<Shared>,
    interval: Duration,
    jitter: Duration,
    mut triggers: mpsc::Receiver<Trigger>,
    mut stop: Signal,
    heart: Arc<Heartbeat>,
) {
    let log = |line: &str| tracing::info!(app = %app.name, "{line}");
    let mut trigger = Trigger::Interval;
    loop {
        heart.busy(true);
        let record = shared
            .syncer()
            .sync(&app, SyncOptions::new(trigger), &stop, &log)
            .await;
        heart.busy(false);
        shared.metrics.observe(&record);
        if let Ok(mut status) = shared.status.lock() {
            status.insert(app.name.clone(), (status_line(&record), record.finished_at));
        }
        shared.publish_status();
        let wake = tokio::time::Instant::now() + interval + random_below(jitter);
        trigger = loop {
            tokio::select! {
                () = tokio::time::sleep_until(wake) => break Trigger::Interval,
                Some(t) = triggers.recv() => {
                    tokio::time::sleep(DEBOUNCE).await;
                    while triggers.try_recv().is_ok() {}
                    break t;
                }
                () = stopped(&mut stop) => return,
                () = tokio::time::sleep(TICK) => heart.beat(),
            }
        };
        if *stop.borrow() {
            return;
        }
    }
}

/// A random duration in `[0, max)`.
fn random_below(max: Duration) -> Duration {
    let nanos = max.as_nanos() as u64;
    if nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(RandomState::new().hash_one(std::time::Instant::now()) % nanos)
}
