//! One app's task: a loop that syncs on the app's interval, on a commit, on a webhook and
//! when a dependency is ready or the cluster is back, one sync at a time, and logs each
//! sync's progress at its level.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{status_line, Heartbeat, Shared, DEBOUNCE, TICK};
use crate::cluster::resilient::Reach;
use crate::config::AppConfig;
use crate::history::{Outcome, SyncRecord, Trigger};
use crate::page::StatusPage;
use crate::service::shards::Fence;
use crate::shutdown::{stopped, Signal};
use crate::source::git;
use crate::sync::{note_waiting, Level, Progress, Report, Step, SyncOptions, Syncer, Waiting};

/// One app's loop: it syncs on its interval, on a commit and on a webhook, one sync at
/// a time, until it is stopped.
pub(super) async fn app_loop(
    app: AppConfig,
    shared: Arc<Shared>,
    interval: Duration,
    jitter: Duration,
    mut triggers: mpsc::Receiver<Trigger>,
    mut stop: Signal,
    heart: Arc<Heartbeat>,
) {
    let log = ProgressLog {
        app: &app.name,
        page: shared.page.as_deref(),
        step: std::sync::Mutex::new(None),
    };
    let report = |progress: Progress<'_>| log.say(progress);
    let mut options = SyncOptions::new(Trigger::Interval);
    let mut gate = Gate::default();
    if !app.depends_on.is_empty() {
        // A wait noted before a restart is over.
        note_waiting(&shared.syncer().agent.state_dir, &app.name, None);
    }
    loop {
        heart.busy(true);
        let syncer = shared.syncer();
        if !app.depends_on.is_empty() {
            if let Some(waiting) = syncer.waiting_on(&app, &options).await {
                heart.busy(false);
                gate.wait(&app, &shared, &syncer, options, waiting);
                // Woken by a dependency's sync here; asked again soon, for one elsewhere.
                let wake = tokio::time::Instant::now() + interval.min(DEPENDENCY_POLL);
                match next_trigger(wake, &mut triggers, &mut stop, &heart, None).await {
                    // The trigger that started the wait stays, and its fetch.
                    Some(Trigger::Dependency | Trigger::Interval) => {}
                    Some(_) => options.requested = std::time::Instant::now(),
                    None => return,
                }
                continue;
            }
            options.waited = gate.release(&app, &syncer);
        }
        let Some(record) = sync_once(&app, &shared, &syncer, options, &mut stop, &report).await
        else {
            return;
        };
        heart.busy(false);
        let delay = interval + crate::retry::random_below(jitter);
        synced(&shared, &app.name, &record, delay);
        let wake = tokio::time::Instant::now() + delay;
        // A sync an outage failed runs again as soon as the server answers.
        let outage =
            (record.outcome == Outcome::Failed && syncer.reach.is_down()).then_some(&*syncer.reach);
        let next = match drop_stale_commits(&app, &record, &mut triggers) {
            Some(wanted) => Some(wanted),
            None => next_trigger(wake, &mut triggers, &mut stop, &heart, outage).await,
        };
        match next {
            Some(next) => options = SyncOptions::new(next),
            None => return,
        }
    }
}

/// A sync's progress in the agent: each line logged at its level, and shown on the status
/// page with the step the sync is in.
struct ProgressLog<'a> {
    app: &'a str,
    page: Option<&'a StatusPage>,
    /// The step the sync is in.
    step: std::sync::Mutex<Option<Step>>,
}

impl ProgressLog<'_> {
    fn say(&self, progress: Progress<'_>) {
        log_progress(self.app, progress);
        let step = || self.step.lock().unwrap_or_else(|e| e.into_inner());
        match progress {
            Progress::Step(entered) => *step() = Some(entered),
            Progress::Line { text, .. } => {
                if let Some(page) = self.page {
                    let now = *step();
                    page.board.progress(self.app, now.map(Step::as_str), text);
                }
            }
        }
    }
}

/// One sync of the app: with sharding under its Lease (a hand-over waits), in one of the
/// `agent.max_concurrent_syncs` places; `None` when shutdown came first.
async fn sync_once(
    app: &AppConfig,
    shared: &Shared,
    syncer: &Syncer,
    options: SyncOptions,
    stop: &mut Signal,
    report: Report<'_>,
) -> Option<SyncRecord> {
    // With sharding, only the holder of the app's Lease writes (a hand-over waits).
    let fence = match &shared.shard {
        Some(s) => {
            let api = kube::Api::namespaced(syncer.client.clone(), &s.namespace);
            Some(Fence::take(api, &app.name, &s.identity, s.duration, stop).await?)
        }
        None => None,
    };
    if let Some(page) = &shared.page {
        page.board.syncing(&app.name);
    }
    // Queued behind agent.max_concurrent_syncs other syncs (a busy heart may wait).
    let slot = tokio::select! {
        slot = syncer.slots.clone().acquire_owned() => slot.ok(),
        () = stopped(stop) => None,
    };
    let record = match slot {
        Some(_slot) => Some(syncer.sync(app, options, stop, report).await),
        None => None,
    };
    if let Some(fence) = fence {
        fence.release().await;
    }
    record
}

/// What a sync's end tells the rest of the agent: the metrics, the status line, the apps
/// that depend on it, and the status page (the next sync due `delay` from now).
fn synced(shared: &Shared, app: &str, record: &SyncRecord, delay: Duration) {
    shared.metrics.observe(record);
    shared.set_status(app, status_line(record));
    shared.wake_dependents(app);
    if let Some(page) = &shared.page {
        let next =
            jiff::Timestamp::now() + jiff::SignedDuration::try_from(delay).unwrap_or_default();
        page.board.synced(app, record, next);
    }
}

/// Drops the commit triggers queued while the sync ran when the local repository's ref
/// still names the commit the sync took: a commit's ref, reflog and `HEAD` writes come as
/// several events, and those after the debounce would start a sync of the same commit (a
/// second record — `held` after a failed rollout — over the informative one). A webhook
/// or manual trigger among them is returned, to run at once; a ref that moved keeps them
/// all.
fn drop_stale_commits(
    app: &AppConfig,
    record: &SyncRecord,
    triggers: &mut mpsc::Receiver<Trigger>,
) -> Option<Trigger> {
    let synced = record.commit.as_ref()?.sha.as_str();
    if triggers.is_empty() || git::local_tip(app).as_deref() != Some(synced) {
        return None;
    }
    let mut wanted = None;
    while let Ok(t) = triggers.try_recv() {
        if t != Trigger::Notify {
            wanted = Some(t);
        }
    }
    wanted
}

/// How often an app that waits on its dependencies asks again, besides being woken when
/// a dependency's sync on this host ends (a dependency on another host wakes nobody here).
const DEPENDENCY_POLL: Duration = Duration::from_secs(5);

/// An app's wait on its dependencies: since when, and the failure it gave up on (recorded
/// once, not at every look).
#[derive(Default)]
struct Gate {
    since: Option<tokio::time::Instant>,
    gave_up: Option<Waiting>,
}

impl Gate {
    /// The app waits: `berth status` and `STATUS=` say on what; a failed dependency is
    /// recorded once (held: nothing applied).
    fn wait(
        &mut self,
        app: &AppConfig,
        shared: &Shared,
        syncer: &Syncer,
        options: SyncOptions,
        waiting: Waiting,
    ) {
        self.since.get_or_insert_with(tokio::time::Instant::now);
        note_waiting(&syncer.agent.state_dir, &app.name, Some(&waiting));
        shared.set_status(&app.name, format!("{}: {waiting}", app.name));
        if let Some(page) = &shared.page {
            page.board.waiting(&app.name, &waiting.to_string());
        }
        if waiting.failed && self.gave_up.as_ref() != Some(&waiting) {
            tracing::warn!(app = %app.name, "{waiting}: held until it is ready");
            let record = syncer.held_by(app, options, &waiting);
            shared.metrics.observe(&record);
            self.gave_up = Some(waiting);
        } else if self.gave_up.is_none() {
            tracing::info!(app = %app.name, "{waiting}");
        }
    }

    /// Every dependency is ready: how long the app waited, if it did.
    fn release(&mut self, app: &AppConfig, syncer: &Syncer) -> Option<Duration> {
        self.gave_up = None;
        let since = self.since.take()?;
        note_waiting(&syncer.agent.state_dir, &app.name, None);
        Some(since.elapsed())
    }
}

/// Waits for the app's next trigger: `wake` (its interval), a commit, a webhook, a
/// dependency's sync, or the end of the `outage` that failed its last sync; `None` on
/// shutdown. Idle, the heart beats.
async fn next_trigger(
    wake: tokio::time::Instant,
    triggers: &mut mpsc::Receiver<Trigger>,
    stop: &mut Signal,
    heart: &Heartbeat,
    outage: Option<&Reach>,
) -> Option<Trigger> {
    let back = async {
        match outage {
            Some(reach) => reach.back().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(back);
    let next = loop {
        tokio::select! {
            () = tokio::time::sleep_until(wake) => break Trigger::Interval,
            () = &mut back => break Trigger::Reconnected,
            Some(t) = triggers.recv() => {
                tokio::time::sleep(DEBOUNCE).await;
                while triggers.try_recv().is_ok() {}
                break t;
            }
            () = stopped(stop) => return None,
            () = tokio::time::sleep(TICK) => heart.beat(),
        }
    };
    (!*stop.borrow()).then_some(next)
}

/// A sync's progress line in the agent's log, at its level (journald's priority
/// follows); the step it enters at DEBUG.
pub(super) fn log_progress(app: &str, progress: Progress<'_>) {
    match progress {
        Progress::Step(step) => tracing::debug!(app, %step, "step"),
        Progress::Line { level, text } => match level {
            Level::Error => tracing::error!(app, "{text}"),
            Level::Warn => tracing::warn!(app, "{text}"),
            Level::Info => tracing::info!(app, "{text}"),
        },
    }
}
