//! The names of a sync's steps, as the lock file's marker, `berth status`, the history
//! record of a killed sync and the fault suite say them.

use serde::{Deserialize, Serialize};

/// The step a sync is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Step {
    /// The lock is held; nothing else has happened yet.
    #[serde(rename = "prepare")]
    Prepare,
    /// Fetching the commit and verifying its signature.
    #[serde(rename = "fetch")]
    Fetch,
    /// Rendering the commit through the manifest pipeline.
    #[serde(rename = "render")]
    Render,
    /// Planning what to write, keep and prune.
    #[serde(rename = "plan")]
    Plan,
    /// The server-side dry run of the whole commit.
    #[serde(rename = "dry run")]
    DryRun,
    /// Running hooks (`pre`, `sync`, `post`, `fail`).
    #[serde(rename = "hooks")]
    Hooks,
    /// The staged server-side apply (of a wave).
    #[serde(rename = "apply")]
    Apply,
    /// Following the Deployments' rollouts (and the failure policy).
    #[serde(rename = "roll out")]
    RollOut,
    /// Waiting for every other kind's health.
    #[serde(rename = "health")]
    Health,
    /// Deleting what git no longer holds.
    #[serde(rename = "prune")]
    Prune,
    /// Storing the next inventory.
    #[serde(rename = "inventory")]
    Inventory,
    /// Writing the history record.
    #[serde(rename = "history")]
    History,
}

impl Step {
    /// Every step, in the order a sync takes them.
    pub const ALL: [Step; 12] = [
        Step::Prepare,
        Step::Fetch,
        Step::Render,
        Step::Plan,
        Step::DryRun,
        Step::Hooks,
        Step::Apply,
        Step::RollOut,
        Step::Health,
        Step::Prune,
        Step::Inventory,
        Step::History,
    ];

    /// The words shown in `berth status` and in the record of a killed sync.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Prepare => "prepare",
            Step::Fetch => "fetch",
            Step::Render => "render",
            Step::Plan => "plan",
            Step::DryRun => "dry run",
            Step::Hooks => "hooks",
            Step::Apply => "apply",
            Step::RollOut => "roll out",
            Step::Health => "health",
            Step::Prune => "prune",
            Step::Inventory => "inventory",
            Step::History => "history",
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_says_each_step_as_status_shows_it() {
        for step in Step::ALL {
            let json = serde_json::to_string(&step).unwrap();
            assert_eq!(json, format!("\"{}\"", step.as_str()));
            assert_eq!(serde_json::from_str::<Step>(&json).unwrap(), step);
        }
    }
}
