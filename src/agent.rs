//! The daemon (`berth run`): one task per app, each syncing on its interval (with jitter)
//! and on commits in a watched local repository; one sync at a time per app; for apps
//! with `rollout.engine = "agent"`, a supervisor that drives their Deployments; shutdown
//! is passed in and fanned out to every task.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::config::{AppConfig, Config, RolloutEngine};
use crate::history::Trigger;
use crate::rollout::engine::{supervise, Engine};
use crate::source::{git, watch as repo_watch};
use crate::sync::Syncer;

/// How long after a ref change the sync starts, so the rest of a push lands first.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// Runs every app until `shutdown` turns true; the sync in progress finishes (or records
/// itself interrupted) before this returns.
pub async fn run(config: &Config, syncer: Arc<Syncer>, shutdown: watch::Receiver<bool>) {
    let mut tasks = JoinSet::new();
    let mut watchers = Vec::new();
    for app in &config.apps {
        let (tx, rx) = mpsc::channel(1);
        if let Some(path) = git::local_path(&app.repo) {
            match repo_watch::watch_refs(&path, tx) {
                Ok(w) => watchers.push(w),
                Err(e) => {
                    tracing::warn!(app = %app.name, path = %path.display(), error = %e, "cannot watch the local repository; syncing on the interval only")
                }
            }
        }
        if app.rollout.engine == RolloutEngine::Agent {
            let engine = Engine {
                client: syncer.client.clone(),
                field_manager: config.agent.field_manager.clone(),
            };
            tasks.spawn(supervise(engine, app.name.clone(), shutdown.clone()));
        }
        let (app, syncer, shutdown) = (app.clone(), syncer.clone(), shutdown.clone());
        let interval = config.agent.interval;
        let jitter = config.agent.jitter;
        tasks.spawn(async move { app_loop(app, syncer, interval, jitter, rx, shutdown).await });
    }
    tracing::info!(apps = config.apps.len(), "berth is running");
    while tasks.join_next().await.is_some() {}
    drop(watchers);
}

async fn app_loop(
    app: AppConfig,
    syncer: Arc<Syncer>,
    interval: Duration,
    jitter: Duration,
    mut commits: mpsc::Receiver<()>,
    mut shutdown: watch::Receiver<bool>,
) {
    let log = |line: &str| tracing::info!(app = %app.name, "{line}");
    let mut trigger = Trigger::Interval;
    loop {
        syncer.sync(&app, trigger, false, &shutdown, &log).await;
        let wait = interval + random_below(jitter);
        tokio::select! {
            _ = tokio::time::sleep(wait) => trigger = Trigger::Interval,
            Some(()) = commits.recv() => {
                tokio::time::sleep(DEBOUNCE).await;
                while commits.try_recv().is_ok() {}
                trigger = Trigger::Notify;
            }
            () = stopped(&mut shutdown) => break,
        }
        if stopping(&shutdown) {
            break;
        }
    }
}

fn stopping(shutdown: &watch::Receiver<bool>) -> bool {
    *shutdown.borrow()
}

/// Resolves once shutdown is asked for (or its sender is gone).
pub async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await.map(|_| ());
}

/// A random duration in `[0, max)`.
fn random_below(max: Duration) -> Duration {
    let nanos = max.as_nanos() as u64;
    if nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(RandomState::new().hash_one(std::time::Instant::now()) % nanos)
}
