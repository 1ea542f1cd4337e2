//! A followed rollout as the sync record keeps it: how it ended and its timeline of
//! ReplicaSet sizes. [`rollout::track`](crate::rollout::track) fills these in.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

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
    /// A new commit changed the app during its canary: the next sync runs the new one.
    Superseded,
}

impl RolloutOutcome {
    /// The word shown in output.
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutOutcome::Complete => "complete",
            RolloutOutcome::Failed => "failed",
            RolloutOutcome::TimedOut => "timed-out",
            RolloutOutcome::Interrupted => "interrupted",
            RolloutOutcome::Superseded => "superseded",
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
    /// The Deployment's spec.replicas (absent in records older than it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<i32>,
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

/// A canary's step as it ran: its weight, the pods of each version once it stood, and the
/// checks it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanaryStepRecord {
    /// Its place among the steps (from 0).
    pub step: usize,
    /// Its weight (%).
    pub weight: u8,
    /// Ready pods of the new version, counted once the step stood.
    pub new: i32,
    /// Ready pods of the old version.
    pub old: i32,
    /// When it stood.
    pub at: Timestamp,
    /// When its pause and checks were over (none: the rollout ended during them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_at: Option<Timestamp>,
    /// Its checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckRecord>,
}

/// One check a step ran, with every measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRecord {
    /// The `[[analysis]]` name.
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// Its measurements, in order.
    pub measurements: Vec<Measurement>,
}

/// What one measurement read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    /// A number (a query's result, a JSON number).
    Number(f64),
    /// A text (a JSON string or other value, as JSON writes it).
    Text(String),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Number(n) => write!(f, "{n}"),
            Value::Text(t) => write!(f, "{t:?}"),
        }
    }
}

/// One measurement: when, what it read, and whether it passed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// When it was taken.
    pub at: Timestamp,
    /// What it read (none when it could not be measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Whether it met the condition.
    pub passed: bool,
    /// Why it failed: the bound broken, or what kept it from being measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}
