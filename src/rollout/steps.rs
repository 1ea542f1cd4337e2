//! The Deployment controller's rolling-step math, pure (reference §5–§6): maxSurge /
//! maxUnavailable resolution with its rounding rules, one `rolloutRolling` or
//! `rolloutRecreate` pass, proportional scaling, and a predictor that plays passes until
//! the rollout completes, assuming pods become available between passes.
//!
//! ReplicaSets are plain values here; `berth plan` predicts with them and berth's own
//! rollout engine acts on them.
//!
//! One algorithm, the controller's, in three rooms: the passes here,
//! `steps/proportional.rs` (scaling while a rollout runs), `steps/predict.rs` (the passes
//! played to the end); its tests replay the reference's traces pass by pass.

use std::cmp::Ordering;

/// An int-or-percent value (`maxSurge`, `maxUnavailable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrPercent {
    /// An absolute count.
    Int(i32),
    /// A percentage of `spec.replicas`.
    Percent(i32),
}

/// Why a value is no [`IntOrPercent`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IntOrPercentError {
    /// A number that is no 32-bit whole number.
    #[error("{0} is not a whole number")]
    NotWhole(serde_json::Number),
    /// A string that is no percentage.
    #[error("{0:?} is neither a number nor a percentage like \"25%\"")]
    NotPercent(String),
    /// Neither a number nor a string.
    #[error("{0} is neither a number nor a percentage")]
    Neither(serde_json::Value),
}

impl IntOrPercent {
    /// Reads `3` or `"25%"`.
    ///
    /// # Errors
    /// Anything else, with the reason.
    pub fn parse(v: &serde_json::Value) -> Result<Self, IntOrPercentError> {
        match v {
            serde_json::Value::Number(n) => n
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .map(IntOrPercent::Int)
                .ok_or_else(|| IntOrPercentError::NotWhole(n.clone())),
            serde_json::Value::String(s) => s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .map(IntOrPercent::Percent)
                .ok_or_else(|| IntOrPercentError::NotPercent(s.clone())),
            other => Err(IntOrPercentError::Neither(other.clone())),
        }
    }

    /// Scaled against `total`, rounding up or down.
    fn scaled(self, total: i32, round_up: bool) -> i32 {
        match self {
            IntOrPercent::Int(n) => n,
            IntOrPercent::Percent(p) => {
                let v = f64::from(p) * f64::from(total) / 100.0;
                (if round_up { v.ceil() } else { v.floor() }) as i32
            }
        }
    }
}

/// How a Deployment replaces pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Surge and retire a few at a time.
    RollingUpdate {
        /// Pods over `replicas` allowed.
        max_surge: IntOrPercent,
        /// Pods under `replicas` allowed.
        max_unavailable: IntOrPercent,
    },
    /// All old pods go, then all new ones come.
    Recreate,
}

/// What the math needs of a Deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentView {
    /// `spec.replicas`.
    pub replicas: i32,
    /// `spec.strategy`.
    pub strategy: Strategy,
}

impl DeploymentView {
    /// The apps/v1 defaults: RollingUpdate with 25% / 25%.
    pub fn rolling(replicas: i32, max_surge: IntOrPercent, max_unavailable: IntOrPercent) -> Self {
        DeploymentView {
            replicas,
            strategy: Strategy::RollingUpdate {
                max_surge,
                max_unavailable,
            },
        }
    }
}

/// `ResolveFenceposts`: surge rounded up, unavailable rounded down; both zero → unavailable 1.
pub fn resolve_fenceposts(
    surge: IntOrPercent,
    unavailable: IntOrPercent,
    desired: i32,
) -> (i32, i32) {
    let s = surge.scaled(desired, true);
    let u = unavailable.scaled(desired, false);
    if s == 0 && u == 0 {
        (0, 1)
    } else {
        (s, u)
    }
}

/// `MaxSurge(d)`.
pub fn max_surge(d: &DeploymentView) -> i32 {
    match d.strategy {
        Strategy::RollingUpdate {
            max_surge,
            max_unavailable,
        } => resolve_fenceposts(max_surge, max_unavailable, d.replicas).0,
        Strategy::Recreate => 0,
    }
}

/// `MaxUnavailable(d)`: capped at `replicas`; 0 for Recreate or zero replicas.
pub fn max_unavailable(d: &DeploymentView) -> i32 {
    match d.strategy {
        Strategy::RollingUpdate {
            max_surge,
            max_unavailable,
        } if d.replicas > 0 => resolve_fenceposts(max_surge, max_unavailable, d.replicas)
            .1
            .min(d.replicas),
        _ => 0,
    }
}

/// What the math needs of a ReplicaSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSetView {
    /// Its name.
    pub name: String,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// Creation order: smaller is older (creation time, then name).
    pub created: (i64, String),
    /// The `max-replicas` annotation.
    pub max_replicas: Option<i32>,
}

impl ReplicaSetView {
    /// A ReplicaSet with `replicas` pods, all available.
    pub fn steady(name: &str, replicas: i32, created: i64) -> Self {
        ReplicaSetView {
            name: name.into(),
            replicas,
            available: replicas,
            created: (created, name.into()),
            max_replicas: None,
        }
    }
}

/// One scaling action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scale {
    /// The ReplicaSet.
    pub name: String,
    /// Size before.
    pub from: i32,
    /// Size after.
    pub to: i32,
}

/// What one controller pass does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    /// The new ReplicaSet was created with this size.
    pub create: Option<i32>,
    /// Scaling actions, in order.
    pub scales: Vec<Scale>,
    /// Recreate only: old pods must be gone before the new ReplicaSet may grow.
    pub waiting_for_old_pods: bool,
}

impl Pass {
    /// True when the pass changed nothing.
    pub fn is_empty(&self) -> bool {
        self.create.is_none() && self.scales.is_empty()
    }
}

fn by_creation(a: &ReplicaSetView, b: &ReplicaSetView) -> Ordering {
    a.created.cmp(&b.created)
}

/// `NewRSNewReplicas`: the size the new ReplicaSet may grow to now.
pub fn new_rs_new_replicas(d: &DeploymentView, all: &[&ReplicaSetView], new_replicas: i32) -> i32 {
    match d.strategy {
        Strategy::Recreate => d.replicas,
        Strategy::RollingUpdate { .. } => {
            let max_total = d.replicas + max_surge(d);
            let current: i32 = all.iter().map(|rs| rs.replicas).sum();
            if current >= max_total {
                new_replicas
            } else {
                new_replicas + (max_total - current).min(d.replicas - new_replicas)
            }
        }
    }
}

/// One `rolloutRolling` pass. `new` is `None` when the new ReplicaSet does not exist yet:
/// it is created in this pass (named `new_name`).
pub fn rolling_pass(
    d: &DeploymentView,
    new: Option<&ReplicaSetView>,
    olds: &[ReplicaSetView],
    new_name: &str,
) -> Pass {
    let mut pass = Pass::default();
    let mut new = match new {
        Some(rs) => rs.clone(),
        None => {
            let empty = ReplicaSetView::steady(new_name, 0, i64::MAX);
            let all: Vec<&ReplicaSetView> = olds.iter().chain([&empty]).collect();
            let size = new_rs_new_replicas(d, &all, 0);
            pass.create = Some(size);
            ReplicaSetView {
                replicas: size,
                available: 0,
                ..empty
            }
        }
    };
    // reconcileNewReplicaSet
    if new.replicas != d.replicas {
        let all: Vec<&ReplicaSetView> = olds.iter().chain([&new]).collect();
        let target = if new.replicas > d.replicas {
            d.replicas
        } else {
            new_rs_new_replicas(d, &all, new.replicas)
        };
        if target != new.replicas {
            pass.scales.push(Scale {
                name: new.name.clone(),
                from: new.replicas,
                to: target,
            });
            return pass;
        }
    }
    new.available = new.available.min(new.replicas);
    pass.scales.extend(reconcile_old(d, &new, olds));
    pass
}

/// `reconcileOldReplicaSets`: unhealthy old pods first, then healthy ones down to
/// `replicas - maxUnavailable` available.
fn reconcile_old(d: &DeploymentView, new: &ReplicaSetView, olds: &[ReplicaSetView]) -> Vec<Scale> {
    let mut active: Vec<ReplicaSetView> =
        olds.iter().filter(|rs| rs.replicas > 0).cloned().collect();
    if active.is_empty() {
        return Vec::new();
    }
    active.sort_by(by_creation);
    let all_pods: i32 = olds.iter().map(|rs| rs.replicas).sum::<i32>() + new.replicas;
    let min_available = d.replicas - max_unavailable(d);
    let new_unavailable = new.replicas - new.available;
    let max_scaled_down = all_pods - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Vec::new();
    }
    let mut scales = Vec::new();
    // cleanupUnhealthyReplicas
    let mut cleaned = 0;
    for rs in active.iter_mut() {
        if cleaned >= max_scaled_down {
            break;
        }
        if rs.replicas == 0 || rs.replicas == rs.available {
            continue;
        }
        let down = (max_scaled_down - cleaned).min(rs.replicas - rs.available);
        if down < 0 {
            // More available than wanted (pods not deleted yet): Go refuses to "scale down"
            // upwards ("invalid request to scale down"), and reconcileOldReplicaSets
            // swallows that error: nothing more moves in this pass.
            return scales;
        }
        scales.push(Scale {
            name: rs.name.clone(),
            from: rs.replicas,
            to: rs.replicas - down,
        });
        rs.replicas -= down;
        cleaned += down;
    }
    // scaleDownOldReplicaSetsForRollingUpdate: status availability only
    let available: i32 = active.iter().map(|rs| rs.available).sum::<i32>() + new.available;
    if available <= min_available {
        return scales;
    }
    let budget = available - min_available;
    let mut done = 0;
    for rs in active.iter_mut() {
        if done >= budget {
            break;
        }
        if rs.replicas == 0 {
            continue;
        }
        let down = rs.replicas.min(budget - done);
        scales.push(Scale {
            name: rs.name.clone(),
            from: rs.replicas,
            to: rs.replicas - down,
        });
        rs.replicas -= down;
        done += down;
    }
    scales
}

/// One `rolloutRecreate` pass: old ReplicaSets to zero, wait until their pods are gone
/// (`old_pods_running`), then the new one at full size.
pub fn recreate_pass(
    d: &DeploymentView,
    new: Option<&ReplicaSetView>,
    olds: &[ReplicaSetView],
    old_pods_running: bool,
) -> Pass {
    let mut pass = Pass::default();
    for rs in olds.iter().filter(|rs| rs.replicas > 0) {
        pass.scales.push(Scale {
            name: rs.name.clone(),
            from: rs.replicas,
            to: 0,
        });
    }
    if !pass.scales.is_empty() {
        return pass;
    }
    if old_pods_running {
        pass.waiting_for_old_pods = true;
        return pass;
    }
    match new {
        None => pass.create = Some(d.replicas),
        Some(rs) if rs.replicas != d.replicas => pass.scales.push(Scale {
            name: rs.name.clone(),
            from: rs.replicas,
            to: d.replicas,
        }),
        Some(_) => {}
    }
    pass
}

pub use predict::{predict, RolloutStep};
pub use proportional::proportional_scale;

mod predict;
mod proportional;

#[cfg(test)]
mod tests;
