//! What a Deployment's rollout will look like before it happens, for `berth plan`: the
//! revision it becomes and the rolling steps, from the server's dry-run view of the
//! Deployment and its live ReplicaSets.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use super::hash::template_hash;
use super::revisions::Revisions;
use super::steps::{self, DeploymentView, IntOrPercent, ReplicaSetView, RolloutStep, Strategy};
use crate::manifest::ObjectKey;

/// The predicted rollout of one Deployment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeploymentPlan {
    /// The Deployment.
    pub deployment: ObjectKey,
    /// Its revision now (none when it is new).
    pub revision_from: Option<i64>,
    /// The revision the rollout makes.
    pub revision_to: i64,
    /// An existing ReplicaSet that already runs the new template (a return to it).
    pub reuses: Option<String>,
    /// Template hash now and after.
    pub hash_from: String,
    /// The new template's hash.
    pub hash_to: String,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `RollingUpdate` or `Recreate`.
    pub strategy: String,
    /// Resolved maxSurge.
    pub max_surge: i32,
    /// Resolved maxUnavailable.
    pub max_unavailable: i32,
    /// ReplicaSet sizes after each scaling step, assuming pods become ready.
    pub steps: Vec<RolloutStep>,
    /// A canary's steps (its Deployment held while they run); `steps` are their sizes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub canary: Vec<PlannedStep>,
}

/// One canary step as it will run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedStep {
    /// Its weight (%).
    pub weight: u8,
    /// Pods of the new version.
    pub new: i32,
    /// Pods of the old version.
    pub old: i32,
    /// Its pause (`30s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause: Option<String>,
    /// The checks it runs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub analysis: Vec<String>,
}

impl PlannedStep {
    /// What holds the step: "pause 30s, analysis errors, latency" ("-": nothing).
    pub fn hold(&self) -> String {
        let pause = self.pause.as_ref().map(|p| format!("pause {p}"));
        let checks =
            (!self.analysis.is_empty()).then(|| format!("analysis {}", self.analysis.join(", ")));
        let said: Vec<String> = pause.into_iter().chain(checks).collect();
        match said.is_empty() {
            true => "-".into(),
            false => said.join(", "),
        }
    }
}

/// The view the step math needs of a Deployment (apps/v1 defaults filled in).
pub fn view(d: &Deployment) -> DeploymentView {
    let spec = d.spec.as_ref();
    let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
    let strategy = spec.and_then(|s| s.strategy.as_ref());
    let percent = |v: Option<&IntOrString>| match v {
        Some(IntOrString::Int(n)) => IntOrPercent::Int(*n),
        Some(IntOrString::String(s)) => IntOrPercent::parse(&serde_json::Value::String(s.clone()))
            .unwrap_or(IntOrPercent::Percent(25)),
        None => IntOrPercent::Percent(25),
    };
    match strategy.and_then(|s| s.type_.as_deref()) {
        Some("Recreate") => DeploymentView {
            replicas,
            strategy: Strategy::Recreate,
        },
        _ => {
            let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
            DeploymentView::rolling(
                replicas,
                percent(rolling.and_then(|r| r.max_surge.as_ref())),
                percent(rolling.and_then(|r| r.max_unavailable.as_ref())),
            )
        }
    }
}

/// Predicts the rollout of `planned` (the dry-run result) over the `live` ReplicaSets;
/// `None` when the template does not change.
pub fn predict(key: ObjectKey, planned: &Deployment, live: &Revisions) -> Option<DeploymentPlan> {
    let template = planned
        .spec
        .as_ref()
        .map(|s| serde_json::to_value(&s.template).unwrap_or_default())
        .unwrap_or_default();
    let hash_to = template_hash(&template, None);
    let current = live.new.as_ref();
    if current.is_some_and(|rs| rs.hash == hash_to) {
        return None;
    }
    let all: Vec<_> = live.new.iter().chain(&live.old).collect();
    let reused = all.iter().find(|rs| rs.hash == hash_to).copied();
    let max_revision = all.iter().map(|rs| rs.revision).max().unwrap_or(0);
    let as_view = |rs: &super::revisions::ReplicaSetInfo| ReplicaSetView {
        name: rs.name.clone(),
        replicas: rs.replicas,
        available: rs.available,
        created: (rs.created.map_or(0, |t| t.as_second()), rs.name.clone()),
        max_replicas: None,
    };
    let olds: Vec<ReplicaSetView> = all
        .iter()
        .filter(|rs| Some(rs.hash.as_str()) != reused.map(|r| r.hash.as_str()))
        .map(|rs| as_view(rs))
        .collect();
    let d = view(planned);
    let new_name = format!("{}-{hash_to}", key.name);
    Some(DeploymentPlan {
        revision_from: current.map(|rs| rs.revision).filter(|r| *r > 0),
        revision_to: max_revision + 1,
        reuses: reused.map(|rs| rs.name.clone()),
        hash_from: current.map(|rs| rs.hash.clone()).unwrap_or_default(),
        hash_to,
        replicas: d.replicas,
        strategy: match d.strategy {
            Strategy::Recreate => "Recreate".into(),
            Strategy::RollingUpdate { .. } => "RollingUpdate".into(),
        },
        max_surge: steps::max_surge(&d),
        max_unavailable: steps::max_unavailable(&d),
        steps: steps::predict(&d, reused.map(as_view), olds, &new_name),
        canary: Vec::new(),
        deployment: key,
    })
}
