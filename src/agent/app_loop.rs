//! One app's task: a loop that syncs on the app's interval, on a commit, on a webhook and
//! when a dependency is ready or the cluster is back, one sync at a time, and logs each
//! sync's progress at its level.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Heartbeat, Registry, Shared, DEBOUNCE, TICK};
use crate::cluster::resilient::Reach;
use crate::config::{AppConfig, SourceRef};
use crate::history::{Outcome, RolloutOutcome, SyncRecord, Trigger};
use crate::shutdown::{stopped, Signal};
use crate::source::git;
use crate::sync::{note_waiting, Level, Progress, Report, Step, SyncOptions, Syncer, Waiting};

/// Over how long the apps an outage failed sync again once the server answers.
const RECONNECT_SPREAD: Duration = Duration::from_secs(5);

/// One app's loop: it syncs on its interval, on a commit and on a webhook, one sync at
/// a time, until it is stopped.
pub(super) async fn app_loop(
    app: Arc<AppConfig>,
    shared: Arc<Shared>,
    interval: Duration,
    jitter: Duration,
    mut inbox: Inbox,
) {
    let log = ProgressLog::new(&app.name, &shared.registry);
    let report = |progress: Progress<'_>| log.say(progress);
    let mut options = SyncOptions::new(Trigger::Interval);
    let mut gate = Gate::start(&app, &shared);
    let mut failures = 0;
    loop {
        if !sit_out(&app, &shared, &mut options, &mut inbox).await {
            return;
        }
        inbox.heart.busy(true);
        let syncer = shared.syncer();
        let gated = dependencies(
            &app,
            &shared,
            &syncer,
            &mut gate,
            &mut options,
            interval,
            &mut inbox,
        );
        // Boxed: its wait's state lives only while it waits, not in every idle app's task.
        let Some(may_sync) = Box::pin(gated).await else {
            return;
        };
        if !may_sync {
            continue;
        }
        let reach = &syncer.cluster(&app).reach;
        let outages = reach.outages();
        // The record in a block of its own: not held while the app idles.
        let (outage, delay, stale) = {
            // Boxed too: its waits for the Lease and a place among the syncs.
            let once = sync_once(&app, &shared, &syncer, options, &mut inbox.stop, &report);
            let Some(record) = Box::pin(once).await else {
                return;
            };
            inbox.heart.busy(false);
            // Boxed as well: its requests' state lives only while they run.
            Box::pin(shared.drift.follow(&syncer, &app, &record)).await;
            let outage = failed_by_outage(&record, reach, outages);
            let delay = next_sync_in(&record, outage.is_some(), interval, jitter, &mut failures);
            synced(&shared, &app.name, &record, delay);
            let stale = drop_stale_commits(&app, &record, &mut inbox.triggers);
            // A canary a new commit superseded: its own starts at once.
            let stale = stale.or_else(|| superseded(&record).then_some(Trigger::Superseded));
            (outage, delay, stale)
        };
        match inbox.next_sync(stale, delay, outage, failures > 0).await {
            Some(next) => options = next,
            None => return,
        }
    }
}

/// The server whose outage failed `record`'s sync, when one did (`outages`: how many had
/// begun before it): the sync runs again as soon as the server answers — also when it
/// answers again by the sync's end (an overload: other apps' requests went through).
fn failed_by_outage<'r>(record: &SyncRecord, reach: &'r Reach, outages: u64) -> Option<&'r Reach> {
    let lost = reach.is_down() || reach.outages() != outages;
    (record.outcome == Outcome::Failed && lost).then_some(reach)
}

/// How long after `record`'s sync the app syncs again, unless something triggers it
/// first: its interval (and jitter); after a failed sync sooner, backing off — from
/// [`RETRY_FAILED`], doubling, capped at the interval — while it keeps failing
/// (`failures` in a row). A sync an `outage` failed waits for the server's answer instead.
fn next_sync_in(
    record: &SyncRecord,
    outage: bool,
    interval: Duration,
    jitter: Duration,
    failures: &mut u32,
) -> Duration {
    if record.outcome != Outcome::Failed || outage {
        *failures = 0;
        return interval + crate::retry::random_below(jitter);
    }
    let backoff = crate::retry::Backoff {
        base: RETRY_FAILED,
        max: interval.max(RETRY_FAILED),
    };
    *failures += 1;
    backoff.delay(*failures - 1)
}

/// The least time between two syncs drift triggers: something that takes a field back
/// as soon as berth applies it makes one sync every 5 s, not a loop.
const DRIFT_PAUSE: Duration = Duration::from_secs(5);

/// The first wait before a failed sync is tried again.
const RETRY_FAILED: Duration = Duration::from_secs(5);

/// What wakes an app's loop: its triggers (a commit, a webhook, a dependency's sync) and
/// shutdown; idle, it beats the app's heart.
pub(super) struct Inbox {
    pub triggers: mpsc::Receiver<Trigger>,
    pub stop: Signal,
    pub heart: Arc<Heartbeat>,
    /// How often the heart beats while idle ([`super::beat_every`]).
    pub beat: Option<Duration>,
    /// When the last sync drift triggered was due.
    pub last_drift: Option<tokio::time::Instant>,
}

impl Inbox {
    /// How the app syncs next: for the commit that came during its sync (`stale`), else
    /// for its next trigger, `delay` from now at the latest (a retry when the interval
    /// comes while it is `failing`); `None` on shutdown.
    async fn next_sync(
        &mut self,
        stale: Option<Trigger>,
        delay: Duration,
        outage: Option<&Reach>,
        failing: bool,
    ) -> Option<SyncOptions> {
        let next = match stale {
            Some(wanted) => wanted,
            None => {
                self.next(tokio::time::Instant::now() + delay, outage)
                    .await?
            }
        };
        let retry = next == Trigger::Interval && failing;
        Some(SyncOptions::new(if retry { Trigger::Retry } else { next }))
    }

    /// Waits for the app's next trigger: `wake` (its interval), a commit, a webhook, a
    /// dependency's sync, or the end of the `outage` that failed its last sync; `None` on
    /// shutdown. Idle, the heart beats.
    async fn next(
        &mut self,
        wake: tokio::time::Instant,
        outage: Option<&Reach>,
    ) -> Option<Trigger> {
        let back = async {
            match outage {
                Some(reach) => {
                    reach.back().await;
                    // The apps one outage failed come back spread out, not all at once.
                    tokio::time::sleep(crate::retry::random_below(RECONNECT_SPREAD)).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::pin!(back);
        let next = loop {
            tokio::select! {
                () = tokio::time::sleep_until(wake) => break Trigger::Interval,
                () = &mut back => break Trigger::Reconnected,
                Some(t) = self.triggers.recv() => {
                    tokio::time::sleep(DEBOUNCE).await;
                    while self.triggers.try_recv().is_ok() {}
                    break t;
                }
                () = stopped(&mut self.stop) => return None,
                () = sleep_for(self.beat) => self.heart.beat(),
            }
        };
        if next == Trigger::Drift && !self.pace().await {
            return None;
        }
        (!*self.stop.borrow()).then_some(next)
    }

    /// Waits, before a sync drift triggers, until [`DRIFT_PAUSE`] has passed since the
    /// last one; `false` on shutdown.
    async fn pace(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        let at = (self.last_drift).map_or(now, |last| (last + DRIFT_PAUSE).max(now));
        self.last_drift = Some(at);
        tokio::select! {
            () = tokio::time::sleep_until(at) => true,
            () = stopped(&mut self.stop) => false,
        }
    }
}

/// Sleeps for `time`; never ends when there is none.
async fn sleep_for(time: Option<Duration>) {
    match time {
        Some(time) => tokio::time::sleep(time).await,
        None => std::future::pending().await,
    }
}

/// Waits on the apps `app` depends on while one is not ready at its commit: `Some(true)`
/// when the app may sync, `Some(false)` when a trigger came and the loop looks again,
/// `None` on shutdown.
async fn dependencies(
    app: &AppConfig,
    shared: &Shared,
    syncer: &Syncer,
    gate: &mut Gate,
    options: &mut SyncOptions,
    interval: Duration,
    inbox: &mut Inbox,
) -> Option<bool> {
    if app.depends_on.is_empty() {
        return Some(true);
    }
    // Boxed, as a sync is: it looks at the dependencies' inventories, seldom.
    let Some(waiting) = Box::pin(syncer.waiting_on(app, options)).await else {
        options.waited = gate.release(app, syncer);
        return Some(true);
    };
    inbox.heart.busy(false);
    gate.wait(app, shared, syncer, *options, waiting);
    // Woken by a dependency's sync here; asked again soon, for one elsewhere.
    let wake = tokio::time::Instant::now() + interval.min(DEPENDENCY_POLL);
    match inbox.next(wake, None).await? {
        // The trigger that started the wait stays, and its fetch.
        Trigger::Dependency | Trigger::Interval => {}
        _ => options.requested = std::time::Instant::now(),
    }
    Some(false)
}

/// While the app is suspended: said once (the log, `STATUS=`, the status page), its
/// triggers dropped, until it is resumed (looked at every [`TICK`]), and then synced at
/// once; `false` on shutdown.
async fn sit_out(
    app: &AppConfig,
    shared: &Shared,
    options: &mut SyncOptions,
    inbox: &mut Inbox,
) -> bool {
    let suspended = || crate::suspend::suspended(&shared.syncer().agent.state_dir, app);
    let Some(why) = suspended() else {
        return true;
    };
    let name = &app.name;
    tracing::info!(app = %name, "suspended ({why}): not synced until `berth resume {name}`");
    shared.registry.suspended(name, &why);
    while suspended().is_some() {
        tokio::select! {
            () = stopped(&mut inbox.stop) => return false,
            () = tokio::time::sleep(TICK) => inbox.heart.beat(),
            Some(_) = inbox.triggers.recv() => {}
        }
    }
    tracing::info!(app = %name, "resumed: syncing");
    *options = SyncOptions::new(Trigger::Cli);
    true
}

/// A sync's progress in the agent: each line logged at its level, and shown on the status
/// page with the step the sync is in.
struct ProgressLog<'a> {
    app: &'a str,
    registry: &'a Registry,
    /// The step the sync is in.
    step: std::sync::Mutex<Option<Step>>,
}

impl<'a> ProgressLog<'a> {
    fn new(app: &'a str, registry: &'a Registry) -> Self {
        ProgressLog {
            app,
            registry,
            step: std::sync::Mutex::new(None),
        }
    }

    fn say(&self, progress: Progress<'_>) {
        log_progress(self.app, progress);
        let step = || self.step.lock().unwrap_or_else(|e| e.into_inner());
        match progress {
            Progress::Step(entered) => *step() = Some(entered),
            Progress::Line { text, .. } => {
                let now = *step();
                self.registry
                    .progress(self.app, now.map(Step::as_str), text);
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
    // With sharding, only the holder of the app's Lease writes (a hand-over waits); the
    // Leases live in the first cluster listed.
    let fence = match &shared.shard {
        Some(s) => {
            let client = syncer.fleet.first().client.clone();
            Some(Box::pin(s.fence(client, &app.name, stop)).await?)
        }
        None => None,
    };
    shared.registry.syncing(&app.name);
    // Queued behind agent.max_concurrent_syncs other syncs (a busy heart may wait).
    let slot = tokio::select! {
        slot = syncer.slots.clone().acquire_owned() => slot.ok(),
        () = stopped(stop) => None,
    };
    // Boxed, as the Lease's take and release: a sync's state lives only while it runs,
    // not in every app's task (nor in those queued for a place).
    let record = match slot {
        Some(_slot) => Some(Box::pin(syncer.sync(app, options, stop, report)).await),
        None => None,
    };
    if let Some(fence) = fence {
        Box::pin(fence.release()).await;
    }
    record
}

/// What a sync's end tells the rest of the agent: the metrics, the status line, the apps
/// that depend on it, and the status page (the next sync due `delay` from now).
fn synced(shared: &Shared, app: &str, record: &SyncRecord, delay: Duration) {
    shared.metrics.observe(record);
    let next = jiff::Timestamp::now() + jiff::SignedDuration::try_from(delay).unwrap_or_default();
    shared.registry.synced(app, record, next);
    shared.wake_dependents(app);
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
    let tip = matches!(app.source(), SourceRef::Git(_)).then(|| git::local_tip(app));
    if triggers.is_empty() || tip.flatten().as_deref() != Some(synced) {
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

/// Whether a new commit superseded a canary of `record`'s sync.
fn superseded(record: &SyncRecord) -> bool {
    (record.rollouts.iter()).any(|r| r.rollout.outcome == RolloutOutcome::Superseded)
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
    /// No wait yet: one noted before a restart is over.
    fn start(app: &AppConfig, shared: &Shared) -> Gate {
        if !app.depends_on.is_empty() {
            note_waiting(&shared.syncer().agent.state_dir, &app.name, None);
        }
        Gate::default()
    }

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
        shared.registry.waiting(&app.name, &waiting.to_string());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future an async fn returns, without calling it.
    fn future_size<A, B, C, D, E, F: std::future::Future>(_: fn(A, B, C, D, E) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every app's task holds its loop's future for as long as it runs: a sync's state
    /// (boxed while it runs), its wait for dependencies and its last record must not be
    /// part of it. It was 19 KiB, 190 MiB for 10,000 apps; then 2112 bytes.
    #[test]
    fn an_idle_apps_task_is_small() {
        let size = future_size(app_loop);
        assert!(size < 1536, "app_loop's future is {size} bytes");
    }

    /// Without a watchdog an idle app never wakes to beat; with one it beats often enough
    /// never to be taken for stuck (a beat older than the period and a tick), and no more
    /// often than once a second.
    #[test]
    fn an_idle_app_beats_only_for_the_watchdog() {
        assert_eq!(super::super::beat_every(None), None);
        for secs in [1, 2, 60, 600] {
            let period = Duration::from_secs(secs);
            let beat = super::super::beat_every(Some(period)).unwrap();
            assert!(beat < period + TICK && beat >= TICK, "{secs}s: {beat:?}");
        }
        assert_eq!(
            super::super::beat_every(Some(Duration::from_secs(60))),
            Some(Duration::from_secs(30))
        );
    }
}
