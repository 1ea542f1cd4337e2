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
