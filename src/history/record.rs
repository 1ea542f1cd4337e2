//! The schema of one history record: what a sync (or a manual rollback) did, as people
//! read it in `berth history show` and as the JSON Lines log stores it.

use std::sync::atomic::{AtomicU32, Ordering};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::{Action, CommitInfo, FollowedRollout};
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
    /// An app it depends on (`depends_on`) synced.
    Dependency,
    /// The app was removed from the configuration (its objects pruned).
    Removed,
    /// The API server answered again after an outage that failed the app's last sync.
    Reconnected,
    /// The last sync failed: tried again, backing off.
    Retry,
    /// One of the app's objects was changed or deleted by someone else.
    Drift,
    /// berth pushed an image update to the branch the app follows.
    Image,
    /// Its app set saw the ref it follows (a pull request's) move.
    Ref,
    /// A new commit superseded the canary its last sync ran.
    Superseded,
}

impl Trigger {
    /// The word shown in output.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Interval => "interval",
            Trigger::Notify => "notify",
            Trigger::Webhook => "webhook",
            Trigger::Cli => "cli",
            Trigger::Dependency => "dependency",
            Trigger::Removed => "removed",
            Trigger::Reconnected => "reconnected",
            Trigger::Retry => "retry",
            Trigger::Drift => "drift",
            Trigger::Image => "image",
            Trigger::Ref => "ref",
            Trigger::Superseded => "superseded",
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
    /// A Deployment's rollout failed and was rolled back (its errors say why), or `berth
    /// rollback` restored an earlier revision of a Deployment.
    RolledBack,
    /// The commit's rollout failed before (or an app it depends on is not ready) and
    /// berth waits for a new one: recorded once per commit and reason, not at every
    /// interval that finds it still held.
    Held,
}

impl Outcome {
    /// Every outcome, in the order `berth history --outcome` lists them.
    pub const ALL: [Outcome; 6] = [
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::NoChange,
        Outcome::Interrupted,
        Outcome::RolledBack,
        Outcome::Held,
    ];

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
    /// The berth host that ran it (`hostname/pid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The cluster the app is synced to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The commit, once resolved.
    pub commit: Option<CommitInfo>,
    /// The commit of the last successful sync.
    pub previous_commit: Option<String>,
    /// Set when the previous commit is not an ancestor of this one (a force-push).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_rewritten: Option<String>,
    /// Who signed the commit, when `[app.verify]` checked it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<crate::source::verify::Signature>,
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
    /// The hooks run, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookRecord>,
    /// The waves, in order, when the app's objects are in more than one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waves: Vec<WaveRecord>,
    /// How long the git fetch and checkout took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_ms: Option<u64>,
    /// How long the sync waited before it started for the apps it depends on
    /// (`depends_on`) to be ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<u64>,
    /// Write requests sent (dry runs, applies, prunes, inventory).
    #[serde(default)]
    pub requests: u64,
    /// The objects waited for (every kind with a notion of readiness but Deployments,
    /// whose rollouts are above): how each ended and how long it took.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health: Vec<ObjectHealth>,
}

/// How an object waited for ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectHealth {
    /// The object.
    #[serde(flatten)]
    pub key: ObjectKey,
    /// `ready`, `failed`, `timed-out` or `interrupted`.
    pub outcome: String,
    /// The last thing its status said.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// How long after the apply it became ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_ms: Option<u64>,
}

/// A hook's run in a sync.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookRecord {
    /// `pre`, `sync`, `post` or `fail`.
    pub phase: String,
    /// Its object, with the name the server gave it.
    #[serde(flatten)]
    pub key: ObjectKey,
    /// `succeeded`, `failed`, `timed-out` or `interrupted`.
    pub outcome: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// From its creation to its end.
    pub ms: u64,
}

/// A wave of an app whose objects are in more than one: how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaveRecord {
    /// The wave.
    pub wave: i32,
    /// Objects it wrote.
    pub objects: usize,
    /// `healthy`, `failed`, `interrupted` or `not-reached`.
    pub outcome: String,
    /// From its first write to healthy (or its end).
    pub ms: u64,
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
    /// A canary's steps, as they ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canary: Vec<super::CanaryStepRecord>,
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
/// old template to a new revision number. Manual rollbacks (`berth rollback`: rolled
/// back, with no rollout of their own rolled back) are left out, as their commit is the
/// one the app was held at, not the one the template came from.
pub fn commit_of_template(
    records: &[SyncRecord],
    deployment: &ObjectKey,
    hash: &str,
) -> Option<String> {
    records
        .iter()
        .rev()
        .filter(|r| {
            r.outcome != Outcome::RolledBack || r.rollouts.iter().any(|ro| ro.rollback.is_some())
        })
        .find_map(|r| {
            r.rollouts
                .iter()
                .any(|ro| &ro.deployment == deployment && ro.hash_to == hash)
                .then(|| r.commit.as_ref().map(|c| c.sha.clone()))
                .flatten()
        })
}

impl SyncRecord {
    /// A record of an attempt that has just started: failed until it says otherwise.
    pub fn new(
        id: String,
        app: &str,
        trigger: Trigger,
        started_at: Timestamp,
        commit: Option<CommitInfo>,
    ) -> Self {
        SyncRecord {
            id,
            app: app.to_string(),
            trigger,
            started_at,
            finished_at: started_at,
            duration_ms: 0,
            host: None,
            cluster: None,
            commit,
            previous_commit: None,
            history_rewritten: None,
            signature: None,
            outcome: Outcome::Failed,
            unchanged: 0,
            objects: Vec::new(),
            errors: Vec::new(),
            rollouts: Vec::new(),
            note: None,
            hooks: Vec::new(),
            waves: Vec::new(),
            fetch_ms: None,
            waited_ms: None,
            requests: 0,
            health: Vec::new(),
        }
    }

    /// The commit's short SHA, or `-` before one was resolved.
    pub fn short_commit(&self) -> &str {
        self.commit.as_ref().map_or("-", CommitInfo::short)
    }

    /// Objects created, configured or pruned.
    pub fn changes(&self) -> usize {
        self.objects.iter().filter(|o| o.action.is_change()).count()
    }

    /// The objects the app manages after this sync: those it left unchanged, created or
    /// configured (meaningful for a succeeded or no-change sync).
    pub fn managed(&self) -> usize {
        let applied = self
            .objects
            .iter()
            .filter(|o| matches!(o.action, Action::Created | Action::Configured))
            .count();
        self.unchanged + applied
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
