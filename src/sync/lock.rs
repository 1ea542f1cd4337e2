//! One writer per app on a host, and a trace of every sync in flight.
//!
//! A sync holds an exclusive `flock` on `state_dir/locks/<app>.lock` from before its first
//! request to after its history record, so `berth sync` run while `berth run` syncs the
//! same app waits (and says so) instead of applying or pruning beside it. The kernel drops
//! the lock when its process dies, however it dies.
//!
//! While it holds the lock, the sync keeps its [`Marker`] in the file (which step it is
//! in, its commit once known); a sync that ends empties the file. A marker found by the
//! next holder is therefore a sync that was killed or crashed: it is recorded in the
//! history as interrupted, naming the step.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::context::{Ctx, Journal, Stop};
use super::error::SyncError;
use super::progress::{Level, Progress, Report};
use super::step::Step;
use super::steps::record;
use crate::history::{new_id, CommitInfo, Outcome, SyncRecord, Trigger};
use crate::shutdown::{self, Signal};
use crate::state::{flock, Lock};

/// How often a waiting sync tries the lock again.
const RETRY: Duration = Duration::from_millis(200);

/// What a sync in flight leaves in its lock file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    /// The process syncing.
    pub pid: u32,
    /// The history id its record will have.
    pub id: String,
    /// What started it.
    pub trigger: Trigger,
    /// When it started.
    pub started_at: Timestamp,
    /// The step it is in.
    pub step: Step,
    /// Its commit, once resolved.
    #[serde(default)]
    pub commit: Option<CommitInfo>,
}

/// The lock file of an app.
pub fn path(state_dir: &Path, app: &str) -> PathBuf {
    state_dir.join("locks").join(format!("{app}.lock"))
}

/// The marker of the sync in flight, if any (read without taking the lock).
pub fn in_flight(state_dir: &Path, app: &str) -> Option<Marker> {
    let text = std::fs::read_to_string(path(state_dir, app)).ok()?;
    serde_json::from_str(&text).ok()
}

/// The marker of the sync in flight when a process holds the app's lock now (a marker a
/// killed sync left behind is no sync in flight); for `berth status`.
pub fn syncing(state_dir: &Path, app: &str) -> Option<Marker> {
    let file = crate::state::open_state(&path(state_dir, app)).ok()?;
    if flock(&file, Lock::TryShared).ok()? {
        // Free: the shared lock taken is given back at once.
        let _ = flock(&file, Lock::Unlock);
        return None;
    }
    in_flight(state_dir, app)
}

/// A held lock (released when dropped).
pub(super) struct AppLock {
    file: File,
}

/// What the lock's previous holder left behind.
pub(super) enum Left {
    /// It ended cleanly.
    Nothing,
    /// It died mid-sync (its marker, when readable).
    Unfinished(Option<Marker>),
}

impl AppLock {
    /// Takes the app's lock, waiting while another process holds it (saying so once);
    /// `Ok(None)` when shutdown came first.
    ///
    /// # Errors
    /// The lock file cannot be created or read (`state_dir` missing, read-only, full).
    pub(super) async fn acquire(
        state_dir: &Path,
        app: &str,
        shutdown: &Signal,
        report: Report<'_>,
    ) -> std::io::Result<Option<(AppLock, Left)>> {
        let path = path(state_dir, app);
        if let Some(dir) = path.parent() {
            crate::state::private_dir(dir)?;
        }
        let file = crate::state::private_file()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        let mut said = false;
        let mut shutdown = shutdown.clone();
        while !flock(&file, Lock::TryExclusive)? {
            if !said {
                let holder = in_flight(state_dir, app)
                    .map(|m| format!("berth (pid {}, {})", m.pid, m.step))
                    .unwrap_or_else(|| "another berth process".into());
                report(Progress::Line {
                    level: Level::Info,
                    text: &format!(
                        "waiting: {holder} is syncing app {app}; this sync starts when it ends"
                    ),
                });
                said = true;
            }
            tokio::select! {
                () = tokio::time::sleep(RETRY) => {}
                () = shutdown::stopped(&mut shutdown) => return Ok(None),
            }
        }
        let mut text = String::new();
        (&file).read_to_string(&mut text)?;
        let left = if text.trim().is_empty() {
            Left::Nothing
        } else {
            Left::Unfinished(serde_json::from_str(&text).ok())
        };
        Ok(Some((AppLock { file }, left)))
    }

    /// Writes the marker of the sync in flight.
    ///
    /// # Errors
    /// The file cannot be written (a full or read-only `state_dir`).
    pub(super) fn mark(&self, marker: &Marker) -> std::io::Result<()> {
        let text = serde_json::to_vec(marker).map_err(std::io::Error::other)?;
        self.file.set_len(0)?;
        self.file.write_all_at(&text, 0)
    }

    /// Empties the file: the sync ended.
    pub(super) fn finish(self) {
        if let Err(e) = self.file.set_len(0) {
            tracing::warn!(error = %e, "cannot clear the sync's lock file");
        }
    }
}

impl Left {
    /// The history record of a sync that died mid-way, for `app`.
    pub(super) fn record(&self, app: &str) -> Option<SyncRecord> {
        let Left::Unfinished(marker) = self else {
            return None;
        };
        let now = Timestamp::now();
        let (id, trigger, started_at, commit, note) = match marker {
            Some(m) => (
                m.id.clone(),
                m.trigger,
                m.started_at,
                m.commit.clone(),
                format!(
                    "berth (pid {}) stopped during {} (killed or crashed); the next sync took over",
                    m.pid, m.step
                ),
            ),
            None => (
                new_id(now),
                Trigger::Cli,
                now,
                None,
                "a berth process stopped mid-sync (killed or crashed); the next sync took over"
                    .into(),
            ),
        };
        Some(SyncRecord {
            duration_ms: now.duration_since(started_at).as_millis().max(0) as u64,
            finished_at: now,
            outcome: Outcome::Interrupted,
            note: Some(note),
            ..SyncRecord::new(id, app, trigger, started_at, commit)
        })
    }
}

/// The app's lock as a sync holds it, with the marker it keeps in the file.
pub(super) struct Locked {
    /// `None` for a command that plans and writes nothing (`berth plan`).
    lock: Option<AppLock>,
    marker: Marker,
}

impl Locked {
    /// No lock: the steps of a command that writes nothing mark nothing.
    pub fn none(trigger: Trigger) -> Self {
        let started_at = Timestamp::now();
        Locked {
            lock: None,
            marker: marker(new_id(started_at), trigger, started_at),
        }
    }

    /// The history id of the sync holding the lock.
    pub fn id(&self) -> &str {
        &self.marker.id
    }

    /// When the sync holding the lock started: when it took the lock.
    pub fn started_at(&self) -> Timestamp {
        self.marker.started_at
    }

    /// Enters `step`: said to the sync's progress, and noted in its lock file (see the
    /// module's documentation).
    pub fn enter(&mut self, ctx: &Ctx<'_>, step: Step) {
        (ctx.report)(Progress::Step(step));
        self.marker.step = step;
        let Some(lock) = &self.lock else { return };
        if let Err(e) = lock.mark(&self.marker) {
            tracing::warn!(error = %e, "cannot note the sync's step");
        }
    }

    /// Notes the sync's commit, said from the next step on.
    pub fn commit(&mut self, commit: &CommitInfo) {
        self.marker.commit = Some(commit.clone());
    }

    /// Empties the lock file and lets go of it: the sync ended.
    pub fn release(self) {
        if let Some(lock) = self.lock {
            lock.finish();
        }
    }
}

/// Takes the app's lock (waiting for another process's sync of it), records a sync that
/// died holding it, and leaves this sync's marker: the sync starts now, so the records of
/// one app never overlap.
pub(super) async fn take(ctx: &Ctx<'_>, journal: &mut Journal<'_>) -> Result<Locked, Stop> {
    let state_dir = &ctx.syncer.agent.state_dir;
    let app = &ctx.app.name;
    let state = |what, cause| SyncError::State {
        what,
        path: path(state_dir, app),
        cause,
    };
    let (lock, left) = match AppLock::acquire(state_dir, app, ctx.shutdown, ctx.report).await {
        Ok(Some(acquired)) => acquired,
        Ok(None) => return Err(Stop::Interrupted),
        Err(e) => return Err(journal.stop(state("cannot lock the app with", e))),
    };
    let history = &ctx.syncer.history;
    let unrecorded = |r: &SyncRecord| {
        // Killed after its record was written, before it let go of the lock.
        !history
            .read(&r.app)
            .is_ok_and(|all| all.iter().any(|done| done.id == r.id))
    };
    if let Some(mut died) = left.record(app).filter(unrecorded) {
        ctx.say(&format!(
            "note: {}",
            died.note.as_deref().unwrap_or_default()
        ));
        record::append(ctx.syncer, &mut died);
    }
    let started_at = Timestamp::now();
    let marker = marker(new_id(started_at), ctx.options.trigger, started_at);
    if let Err(e) = lock.mark(&marker) {
        lock.finish();
        return Err(journal.stop(state("cannot write", e)));
    }
    Ok(Locked {
        lock: Some(lock),
        marker,
    })
}

/// The marker of a sync of this process that starts now.
fn marker(id: String, trigger: Trigger, started_at: Timestamp) -> Marker {
    Marker {
        pid: std::process::id(),
        id,
        trigger,
        started_at,
        step: Step::Prepare,
        commit: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_marker_left_behind_is_an_interrupted_sync() {
        let dir = tempfile::tempdir().unwrap();
        let quiet = |_: Progress<'_>| {};
        let (lock, left) = AppLock::acquire(dir.path(), "shop", crate::shutdown::never(), &quiet)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(left, Left::Nothing));
        let marker = Marker {
            pid: 4242,
            id: "abc".into(),
            trigger: Trigger::Webhook,
            started_at: Timestamp::now(),
            step: Step::Apply,
            commit: None,
        };
        lock.mark(&marker).unwrap();
        assert_eq!(in_flight(dir.path(), "shop"), Some(marker.clone()));
        assert_eq!(syncing(dir.path(), "shop"), Some(marker));
        drop(lock); // as a SIGKILL would: the kernel drops the lock, the marker stays
        assert_eq!(syncing(dir.path(), "shop"), None, "no sync in flight");
        let (lock, left) = AppLock::acquire(dir.path(), "shop", crate::shutdown::never(), &quiet)
            .await
            .unwrap()
            .unwrap();
        let rec = left.record("shop").expect("an interrupted record");
        assert_eq!(rec.id, "abc");
        assert_eq!(rec.outcome, Outcome::Interrupted);
        assert_eq!(rec.trigger, Trigger::Webhook);
        assert!(rec.note.unwrap().contains("pid 4242) stopped during apply"));
        lock.finish();
        let (_lock, left) = AppLock::acquire(dir.path(), "shop", crate::shutdown::never(), &quiet)
            .await
            .unwrap()
            .unwrap();
        assert!(
            left.record("shop").is_none(),
            "a finished sync leaves nothing"
        );
    }

    #[tokio::test]
    async fn a_second_writer_waits_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let quiet = |_: Progress<'_>| {};
        let (first, _) = AppLock::acquire(dir.path(), "shop", crate::shutdown::never(), &quiet)
            .await
            .unwrap()
            .unwrap();
        let said = std::sync::Mutex::new(Vec::<String>::new());
        let say = |p: Progress<'_>| {
            if let Progress::Line { text, .. } = p {
                said.lock().unwrap().push(text.to_string());
            }
        };
        let (stop, signal) = crate::shutdown::channel();
        let second = AppLock::acquire(dir.path(), "shop", &signal, &say);
        let release = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            stop.send(true).unwrap();
        };
        let (waited, ()) = tokio::join!(second, release);
        assert!(waited.unwrap().is_none(), "still waiting when stopped");
        assert!(said.lock().unwrap()[0].contains("is syncing app shop"));
        first.finish();
    }
}
