//! One canary (or blue-green rollout) as it runs, and what it comes to: the state its
//! steps (`drive.rs`), holds (`hold.rs`) and switches (`blue_green.rs`) share.

use std::sync::Mutex;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DynamicObject};

use super::sets::Sets;
use crate::history::{CanaryStepRecord, FollowedRollout};
use crate::notifications::deliver::HttpClient;
use crate::rollout::gate::{Asked, Standing};
use crate::sync::context::Ctx;

/// What a canary came to.
pub(in crate::sync) struct Driven {
    /// The rollout as a rolling one is recorded: its outcome, message and timeline.
    pub followed: FollowedRollout,
    /// Its steps as they ran.
    pub steps: Vec<CanaryStepRecord>,
    /// The Deployment as applied at the end, as git has it (the canary reached 100 %).
    pub applied: Option<DynamicObject>,
}

/// One canary as it runs.
pub(super) struct Run<'a> {
    pub ctx: &'a Ctx<'a>,
    pub sets: Sets<'a>,
    /// The new version (its template's hash), `{version}` in the checks.
    pub version: String,
    /// The commit the sync runs.
    pub sha: &'a str,
    /// Prometheus' and HTTP checks' client.
    pub client: HttpClient,
    /// Job checks' Jobs, in the Deployment's namespace, made as the app writes.
    pub jobs: Api<Job>,
    /// "deployment.apps/web -n shop".
    pub prefix: String,
    /// When it began.
    pub started: Timestamp,
    /// Its steps as they ran.
    pub steps: Vec<CanaryStepRecord>,
    /// Where it stands, kept for `berth status` at each change.
    pub standing: Mutex<Option<Standing>>,
    /// Blue-green, once switched: the active Service, switched back on an abort.
    pub switch: Option<Switch>,
}

/// The app's Services a blue-green rollout switches.
pub(super) struct Switch {
    pub api: Api<Service>,
    pub field_manager: String,
    /// The active Service.
    pub active: String,
    /// The version it served before (its hash), restored on an abort.
    pub old: Option<String>,
}

/// Why a step's hold ends the canary.
pub(super) enum Cut {
    /// `berth abort` asked.
    Aborted(Asked),
    /// A new commit changes the app (its short id).
    Superseded(String),
}
