//! The sync history log: one [`SyncRecord`] per sync attempt, one JSON object a line, in
//! `state_dir/history/<app>.jsonl`.
//!
//! Each record is appended with a single `write` and an `fsync`, so a crash leaves at most
//! a torn last line; readers skip it, and the next append starts on a fresh line.
//! Retention (by count and by age) rewrites the file to a temporary name and renames it.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::manifest::ObjectKey;

/// What started a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// The interval timer.
    Interval,
    /// A change in a watched local repository.
    Notify,
    /// A webhook call.
    Webhook,
    /// `berth sync` or another command.
    Cli,
}

impl Trigger {
    /// The word shown in output.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Interval => "interval",
            Trigger::Notify => "notify",
            Trigger::Webhook => "webhook",
            Trigger::Cli => "cli",
        }
    }
}

/// How a sync ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Everything applied (and rolled out).
    Succeeded,
    /// Something failed; see the errors.
    Failed,
    /// The commit and the objects were unchanged and nothing had drifted: nothing written.
    NoChange,
    /// Shutdown stopped it part way.
    Interrupted,
    /// `berth rollback` restored an earlier revision of a Deployment.
    RolledBack,
    /// The commit's rollout failed before and berth waits for a new one (never written
    /// to the history: it would repeat every interval).
    Held,
}

impl Outcome {
    /// The word shown in tables and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::NoChange => "no-change",
            Outcome::Interrupted => "interrupted",
            Outcome::RolledBack => "rolled-back",
            Outcome::Held => "held",
        }
    }
}

/// The commit a sync worked on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitInfo {
    /// Full SHA.
    pub sha: String,
    /// `Name <email>`.
    pub author: String,
    /// Commit time.
    pub time: Timestamp,
    /// First line of the message.
    pub subject: String,
}

impl CommitInfo {
    /// The first 7 characters of the SHA.
    pub fn short(&self) -> &str {
        &self.sha[..self.sha.len().min(7)]
    }
}

/// What a sync did to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// It did not exist and was created.
    Created,
    /// It existed and changed.
    Configured,
    /// It existed and did not change.
    Unchanged,
    /// It was deleted because git no longer holds it.
    Pruned,
    /// Git no longer holds it but it was kept (taken over, or `berth.dev/prune: "false"`).
    Kept,
    /// Applying or pruning it failed.
    Failed,
}

impl Action {
    /// The word shown in output.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Configured => "configured",
            Action::Unchanged => "unchanged",
            Action::Pruned => "pruned",
            Action::Kept => "kept",
            Action::Failed => "failed",
        }
    }

    /// True for actions that wrote to the cluster.
    pub fn is_change(self) -> bool {
        matches!(self, Action::Created | Action::Configured | Action::Pruned)
    }
}

/// One object's line in a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectAction {
    /// The object.
    #[serde(flatten)]
    pub key: ObjectKey,
    /// What happened.
    pub action: Action,
    /// The file it came from (`path:line (document n)`), when it came from git.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Why, when not obvious (drift found, taken over by another owner, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One error of a sync.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordError {
    /// The message, naming file, document and object where known.
    pub message: String,
    /// The origin, when the error belongs to one file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// One sync attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncRecord {
    /// Short, time-ordered id.
    pub id: String,
    /// The app.
    pub app: String,
    /// What started it.
    pub trigger: Trigger,
    /// When it started.
    pub started_at: Timestamp,
    /// When it ended.
    pub finished_at: Timestamp,
    /// How long it took.
    pub duration_ms: u64,
    /// The commit, once resolved.
    pub commit: Option<CommitInfo>,
    /// The commit of the last successful sync.
    pub previous_commit: Option<String>,
    /// Set when the previous commit is not an ancestor of this one (a force-push).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_rewritten: Option<String>,
    /// How it ended.
    pub outcome: Outcome,
    /// Objects that needed no change (listed only in this count, to keep records small).
    #[serde(default)]
    pub unchanged: usize,
    /// Per-object actions, unchanged objects left out.
    #[serde(default)]
    pub objects: Vec<ObjectAction>,
    /// Errors, each naming its origin.
    #[serde(default)]
    pub errors: Vec<RecordError>,
    /// Rollouts of changed Deployments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rollouts: Vec<RolloutRecord>,
    /// A remark for people (a manual rollback, a held app).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// How long the git fetch and checkout took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_ms: Option<u64>,
    /// Write requests sent (dry runs, applies, prunes, inventory).
    #[serde(default)]
    pub requests: u64,
}

/// How a rollout ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutOutcome {
    /// Every replica updated and available.
    Complete,
    /// The Deployment reported ProgressDeadlineExceeded.
    Failed,
    /// The app's `rollout.timeout` passed first.
    TimedOut,
    /// Shutdown came first.
    Interrupted,
}

impl RolloutOutcome {
    /// The word shown in output.
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutOutcome::Complete => "complete",
            RolloutOutcome::Failed => "failed",
            RolloutOutcome::TimedOut => "timed-out",
            RolloutOutcome::Interrupted => "interrupted",
        }
    }
}

/// One point of a rollout's timeline: the sizes after a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineStep {
    /// When it was seen.
    pub at: Timestamp,
    /// New ReplicaSet: spec.replicas.
    pub new_replicas: i32,
    /// New ReplicaSet: ready pods.
    pub new_ready: i32,
    /// New ReplicaSet: available pods.
    pub new_available: i32,
    /// Old ReplicaSets: spec.replicas, summed.
    pub old_replicas: i32,
    /// Old ReplicaSets: available pods, summed.
    #[serde(default)]
    pub old_available: i32,
}

/// A rollout followed to its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FollowedRollout {
    /// How it ended.
    pub outcome: RolloutOutcome,
    /// The last status message (kubectl style).
    pub message: String,
    /// Revision it reached (of the new ReplicaSet).
    pub revision: Option<i64>,
    /// The new ReplicaSet.
    pub replica_set: Option<String>,
    /// When following started.
    pub started_at: Timestamp,
    /// When it ended.
    pub finished_at: Timestamp,
    /// The steps seen.
    pub steps: Vec<TimelineStep>,
}

/// A Deployment's rollout in a sync (or a manual rollback).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutRecord {
    /// The Deployment.
    pub deployment: ObjectKey,
    /// `cluster` or `agent`.
    pub engine: String,
    /// Revision before (none for a new Deployment).
    pub revision_from: Option<i64>,
    /// Its ReplicaSet.
    pub replica_set_from: Option<String>,
    /// Its template hash.
    pub hash_from: Option<String>,
    /// Its images.
    #[serde(default)]
    pub images_from: Vec<String>,
    /// The template hash rolled out.
    pub hash_to: String,
    /// Its images.
    #[serde(default)]
    pub images_to: Vec<String>,
    /// The rollout.
    pub rollout: FollowedRollout,
    /// The rollback that followed a failure, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<RollbackRecord>,
}

/// A rollback to an earlier revision's template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RollbackRecord {
    /// The revision whose template was restored.
    pub to_revision: i64,
    /// The commit that first rolled that revision out, when the history knows it.
    pub commit: Option<String>,
    /// "rolled back Deployment X from revision 3 to 2 (commit abc1234)".
    pub message: String,
    /// Its rollout.
    pub rollout: FollowedRollout,
}

/// The commit whose sync first rolled out the pod template with hash `hash` of a
/// Deployment, newest record first. Revision numbers cannot say it: a rollback moves an
/// old template to a new revision number. Manual rollbacks are left out, as their commit
/// is the one the app was held at, not the one the template came from.
pub fn commit_of_template(
    records: &[SyncRecord],
    deployment: &ObjectKey,
    hash: &str,
) -> Option<String> {
    records
        .iter()
        .rev()
        .filter(|r| r.outcome != Outcome::RolledBack)
        .find_map(|r| {
            r.rollouts
                .iter()
                .any(|ro| &ro.deployment == deployment && ro.hash_to == hash)
                .then(|| r.commit.as_ref().map(|c| c.sha.clone()))
                .flatten()
        })
}

impl SyncRecord {
    /// The commit's short SHA, or `-` before one was resolved.
    pub fn short_commit(&self) -> &str {
        self.commit.as_ref().map_or("-", CommitInfo::short)
    }

    /// Objects created, configured or pruned.
    pub fn changes(&self) -> usize {
        self.objects.iter().filter(|o| o.action.is_change()).count()
    }
}

/// A new record id: the start time in milliseconds, then three characters that tell
/// apart records started in the same millisecond (by this process, or another one), all
/// base 36, so ids sort by time.
pub fn new_id(at: Timestamp) -> String {
    static SEQUENCE: AtomicU32 = AtomicU32::new(0);
    const SUFFIX_SPACE: u64 = 36 * 36 * 36;
    let sequence = u64::from(SEQUENCE.fetch_add(1, Ordering::Relaxed));
    let salt = u64::from(std::process::id()).wrapping_mul(7919);
    let suffix = salt.wrapping_add(sequence) % SUFFIX_SPACE + SUFFIX_SPACE;
    let mut id = base36(at.as_millisecond().max(0) as u64);
    id.push_str(&base36(suffix)[1..]);
    id
}

fn base36(mut n: u64) -> String {
    let mut digits = Vec::new();
    while n > 0 {
        digits.push(b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize]);
        n /= 36;
    }
    digits.reverse();
    String::from_utf8(digits).unwrap_or_default()
}

/// History errors.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The file could not be read or written.
    #[error("history file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A record could not be encoded.
    #[error("cannot encode a history record: {0}")]
    Encode(#[from] serde_json::Error),
}

/// The history folder of an agent.
#[derive(Debug, Clone)]
pub struct HistoryLog {
    dir: PathBuf,
}

impl HistoryLog {
    /// The log in `state_dir/history`.
    pub fn new(state_dir: &Path) -> Self {
        HistoryLog {
            dir: state_dir.join("history"),
        }
    }

    fn file(&self, app: &str) -> PathBuf {
        self.dir.join(format!("{app}.jsonl"))
    }

    /// Appends one record with a single write and an fsync.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn append(&self, record: &SyncRecord) -> Result<(), HistoryError> {
        let path = self.file(&record.app);
        let io = |source| HistoryError::Io {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(&self.dir).map_err(io)?;
        let mut line = serde_json::to_vec(record)?;
        line.push(b'\n');
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&path)
            .map_err(io)?;
        if !ends_with_newline(&mut file).map_err(io)? {
            line.insert(0, b'\n'); // after a torn line, start afresh
        }
        file.write_all(&line).map_err(io)?;
        file.sync_data().map_err(io)
    }

    /// The records of one app, oldest first; a torn or unreadable line is skipped.
    ///
    /// # Errors
    /// The file exists but cannot be read.
    pub fn read(&self, app: &str) -> Result<Vec<SyncRecord>, HistoryError> {
        let path = self.file(app);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(HistoryError::Io { path, source }),
        };
        Ok(parse_lines(&text))
    }

    /// The records of every app, oldest first.
    ///
    /// # Errors
    /// The folder or a file cannot be read.
    pub fn read_all(&self) -> Result<Vec<SyncRecord>, HistoryError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(HistoryError::Io {
                    path: self.dir.clone(),
                    source,
                })
            }
        };
        let mut all = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(app) = name.strip_suffix(".jsonl") {
                all.extend(self.read(app)?);
            }
        }
        all.sort_by_key(|r| r.started_at);
        Ok(all)
    }

    /// The last record of an app whose outcome is one of `outcomes`.
    ///
    /// # Errors
    /// The file cannot be read.
    pub fn last(
        &self,
        app: &str,
        outcomes: &[Outcome],
    ) -> Result<Option<SyncRecord>, HistoryError> {
        Ok(self
            .read(app)?
            .into_iter()
            .rev()
            .find(|r| outcomes.contains(&r.outcome)))
    }

    /// Keeps the newest `keep` records of an app that are younger than `max_age`.
    ///
    /// # Errors
    /// The file cannot be rewritten.
    pub fn retain(&self, app: &str, keep: usize, max_age: Duration) -> Result<(), HistoryError> {
        let records = self.read(app)?;
        let cutoff = Timestamp::now()
            .checked_sub(
                jiff::SignedDuration::try_from(max_age).unwrap_or(jiff::SignedDuration::MAX),
            )
            .unwrap_or(Timestamp::MIN);
        let fresh: Vec<&SyncRecord> = records.iter().filter(|r| r.started_at >= cutoff).collect();
        let kept = &fresh[fresh.len().saturating_sub(keep)..];
        if kept.len() == records.len() {
            return Ok(());
        }
        let path = self.file(app);
        let tmp = path.with_extension("jsonl.tmp");
        let io = |source| HistoryError::Io {
            path: path.clone(),
            source,
        };
        let mut text = Vec::new();
        for r in kept {
            text.extend(serde_json::to_vec(r)?);
            text.push(b'\n');
        }
        let mut file = File::create(&tmp).map_err(io)?;
        file.write_all(&text).map_err(io)?;
        file.sync_data().map_err(io)?;
        fs::rename(&tmp, &path).map_err(io)
    }
}

fn ends_with_newline(file: &mut File) -> std::io::Result<bool> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(true);
    }
    file.seek(SeekFrom::Start(len - 1))?;
    let mut last = [0u8];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

fn parse_lines(text: &str) -> Vec<SyncRecord> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| match serde_json::from_str(l) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(error = %e, "skipping an unreadable history line (torn by a crash?)");
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(app: &str, id: &str, outcome: Outcome, at: Timestamp) -> SyncRecord {
        SyncRecord {
            id: id.into(),
            app: app.into(),
            trigger: Trigger::Cli,
            started_at: at,
            finished_at: at,
            duration_ms: 5,
            commit: None,
            previous_commit: None,
            history_rewritten: None,
            outcome,
            unchanged: 0,
            objects: vec![ObjectAction {
                key: ObjectKey {
                    group: "apps".into(),
                    kind: "Deployment".into(),
                    namespace: Some("shop".into()),
                    name: "web".into(),
                },
                action: Action::Configured,
                source: Some("web.yaml:1 (document 1)".into()),
                note: None,
            }],
            errors: vec![],
            rollouts: vec![],
            note: None,
            fetch_ms: None,
            requests: 0,
        }
    }

    #[test]
    fn append_and_read_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let log = HistoryLog::new(d.path());
        let now = Timestamp::now();
        log.append(&record("shop", "a", Outcome::Succeeded, now))
            .unwrap();
        log.append(&record("shop", "b", Outcome::Failed, now))
            .unwrap();
        let got = log.read("shop").unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].outcome, Outcome::Failed);
        assert_eq!(got[0].changes(), 1);
        let last_ok = log.last("shop", &[Outcome::Succeeded]).unwrap().unwrap();
        assert_eq!(last_ok.id, "a");
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_later_appends_stay_readable() {
        let d = tempfile::tempdir().unwrap();
        let log = HistoryLog::new(d.path());
        let now = Timestamp::now();
        log.append(&record("shop", "a", Outcome::Succeeded, now))
            .unwrap();
        let path = d.path().join("history/shop.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"id\":\"torn\",\"app\":\"sh").unwrap();
        assert_eq!(log.read("shop").unwrap().len(), 1);
        log.append(&record("shop", "c", Outcome::Succeeded, now))
            .unwrap();
        let ids: Vec<String> = log
            .read("shop")
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, ["a", "c"]);
    }

    #[test]
    fn retention_by_count_and_age() {
        let d = tempfile::tempdir().unwrap();
        let log = HistoryLog::new(d.path());
        let now = Timestamp::now();
        let old = now
            .checked_sub(jiff::SignedDuration::from_hours(48))
            .unwrap();
        log.append(&record("shop", "old", Outcome::Succeeded, old))
            .unwrap();
        for id in ["a", "b", "c"] {
            log.append(&record("shop", id, Outcome::Succeeded, now))
                .unwrap();
        }
        log.retain("shop", 10, Duration::from_secs(24 * 3600))
            .unwrap();
        assert_eq!(log.read("shop").unwrap().len(), 3);
        log.retain("shop", 2, Duration::from_secs(24 * 3600))
            .unwrap();
        let ids: Vec<String> = log
            .read("shop")
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, ["b", "c"]);
    }

    #[test]
    fn ids_sort_by_time() {
        let a = new_id(Timestamp::from_millisecond(1_700_000_000_000).unwrap());
        let b = new_id(Timestamp::from_millisecond(1_700_000_000_001).unwrap());
        assert!(a < b && a.len() == b.len(), "{a} {b}");
    }

    #[test]
    fn ids_of_the_same_millisecond_differ() {
        let at = Timestamp::from_millisecond(1_700_000_000_000).unwrap();
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| new_id(at)).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| id.len() == 11), "{ids:?}");
    }
}
