//! The predictor: rolling passes played until the rollout completes, assuming pods become
//! available between passes (`berth plan`'s rollout steps).

use super::{recreate_pass, rolling_pass, DeploymentView, ReplicaSetView, Strategy};

/// The sizes after one scaling action: the new ReplicaSet and the old ones together.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RolloutStep {
    /// New ReplicaSet size.
    pub new: i32,
    /// Sum of the old ReplicaSets' sizes.
    pub old: i32,
}

/// Plays rolling passes until the rollout completes (or stops moving), assuming every
/// pod is available before the next pass and deleted pods are gone at once. Returns
/// the sizes after each scaling action.
pub fn predict(
    d: &DeploymentView,
    new: Option<ReplicaSetView>,
    mut olds: Vec<ReplicaSetView>,
    new_name: &str,
) -> Vec<RolloutStep> {
    let mut new = new;
    let mut steps = Vec::new();
    for _ in 0..10_000 {
        let pass = match d.strategy {
            Strategy::RollingUpdate { .. } => rolling_pass(d, new.as_ref(), &olds, new_name),
            Strategy::Recreate => recreate_pass(d, new.as_ref(), &olds, false),
        };
        if pass.is_empty() {
            break;
        }
        if let Some(size) = pass.create {
            new = Some(ReplicaSetView {
                available: 0,
                ..ReplicaSetView::steady(new_name, size, i64::MAX)
            });
            steps.push(step(new.as_ref(), &olds));
        }
        for s in pass.scales {
            match new.as_mut().filter(|n| n.name == s.name) {
                Some(n) => n.replicas = s.to,
                None => olds
                    .iter_mut()
                    .filter(|o| o.name == s.name)
                    .for_each(|o| o.replicas = s.to),
            }
            steps.push(step(new.as_ref(), &olds));
        }
        for rs in olds.iter_mut().chain(new.as_mut()) {
            rs.available = rs.replicas;
        }
    }
    steps
}

fn step(new: Option<&ReplicaSetView>, olds: &[ReplicaSetView]) -> RolloutStep {
    RolloutStep {
        new: new.map_or(0, |n| n.replicas),
        old: olds.iter().map(|o| o.replicas).sum(),
    }
}
