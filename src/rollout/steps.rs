//! The Deployment controller's rolling-step math, pure (reference §5–§6): maxSurge /
//! maxUnavailable resolution with its rounding rules, one `rolloutRolling` or
//! `rolloutRecreate` pass, proportional scaling, and a predictor that plays passes until
//! the rollout completes, assuming pods become available between passes.
//!
//! ReplicaSets are plain values here; `berth plan` predicts with them and berth's own
//! rollout engine acts on them.
//!
//! Longer than most files (about 520 lines of code, 180 of tests) on purpose: it is one
//! algorithm, the controller's, kept in one place so it reads beside reference §5–§6 and
//! its tests replay the reference's traces pass by pass.

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

/// Proportional scaling (`sync` → `scale`) when `spec.replicas` changes mid-rollout.
/// `status_replicas` stands in for a missing `max-replicas` annotation. Returns the new
/// size of every ReplicaSet that changes.
pub fn proportional_scale(
    d: &DeploymentView,
    new: Option<&ReplicaSetView>,
    olds: &[ReplicaSetView],
    new_saturated: bool,
    status_replicas: i32,
) -> Vec<Scale> {
    let scale = |rs: &ReplicaSetView, to: i32| Scale {
        name: rs.name.clone(),
        from: rs.replicas,
        to,
    };
    // FindActiveOrLatest
    let mut newest_first: Vec<&ReplicaSetView> = olds.iter().collect();
    newest_first.sort_by(|a, b| by_creation(b, a));
    let active: Vec<&ReplicaSetView> = newest_first
        .iter()
        .copied()
        .chain(new)
        .filter(|rs| rs.replicas > 0)
        .collect();
    let single = match active.len() {
        0 => new.or(newest_first.first().copied()),
        1 => Some(active[0]),
        _ => None,
    };
    if let Some(rs) = single {
        return if rs.replicas == d.replicas {
            Vec::new()
        } else {
            vec![scale(rs, d.replicas)]
        };
    }
    if new_saturated {
        return olds
            .iter()
            .filter(|rs| rs.replicas > 0)
            .map(|rs| scale(rs, 0))
            .collect();
    }
    if d.strategy == Strategy::Recreate {
        return Vec::new();
    }
    let total: i32 = active.iter().map(|rs| rs.replicas).sum();
    let allowed = if d.replicas > 0 {
        d.replicas + max_surge(d)
    } else {
        0
    };
    let to_add = allowed - total;
    let mut order = active.clone();
    order.sort_by(|a, b| {
        b.replicas.cmp(&a.replicas).then_with(|| {
            if to_add > 0 {
                by_creation(b, a) // newer first on ties
            } else {
                by_creation(a, b) // older first on ties
            }
        })
    });
    let mut sizes: Vec<i32> = order.iter().map(|rs| rs.replicas).collect();
    let mut added = 0;
    if to_add != 0 {
        for (i, rs) in order.iter().enumerate() {
            let p = proportion(d, rs, to_add, added, status_replicas);
            sizes[i] += p;
            added += p;
        }
        sizes[0] = (sizes[0] + to_add - added).max(0);
    }
    order
        .iter()
        .zip(sizes)
        .filter(|(rs, size)| rs.replicas != *size)
        .map(|(rs, size)| scale(rs, size))
        .collect()
}

/// `GetProportion`.
fn proportion(
    d: &DeploymentView,
    rs: &ReplicaSetView,
    to_add: i32,
    added: i32,
    status_replicas: i32,
) -> i32 {
    if rs.replicas == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = if d.replicas == 0 {
        -rs.replicas
    } else {
        let target = f64::from(d.replicas + max_surge(d));
        let annotated = f64::from(rs.max_replicas.unwrap_or(status_replicas).max(1));
        (f64::from(rs.replicas) * target / annotated).round() as i32 - rs.replicas
    };
    let room = to_add - added;
    if to_add > 0 {
        fraction.min(room)
    } else {
        fraction.max(room)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use IntOrPercent::{Int, Percent};

    fn rs(name: &str, replicas: i32, available: i32, created: i64) -> ReplicaSetView {
        ReplicaSetView {
            available,
            ..ReplicaSetView::steady(name, replicas, created)
        }
    }

    fn sc(name: &str, from: i32, to: i32) -> Scale {
        Scale {
            name: name.into(),
            from,
            to,
        }
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        assert_eq!(resolve_fenceposts(Percent(39), Percent(39), 10), (4, 3));
        assert_eq!(resolve_fenceposts(Percent(25), Percent(25), 4), (1, 1));
        assert_eq!(resolve_fenceposts(Percent(25), Percent(25), 1), (1, 0));
        assert_eq!(resolve_fenceposts(Percent(0), Percent(0), 0), (0, 1));
        assert_eq!(resolve_fenceposts(Int(0), Int(0), 5), (0, 1));
        let zero = DeploymentView::rolling(0, Percent(0), Percent(0));
        assert_eq!(max_unavailable(&zero), 0, "replicas 0: MaxUnavailable is 0");
        let capped = DeploymentView::rolling(2, Int(1), Int(5));
        assert_eq!(max_unavailable(&capped), 2, "capped at replicas");
        assert_eq!(
            IntOrPercent::parse(&serde_json::json!("25%")),
            Ok(Percent(25))
        );
        assert_eq!(IntOrPercent::parse(&serde_json::json!(3)), Ok(Int(3)));
        assert!(IntOrPercent::parse(&serde_json::json!("25")).is_err());
    }

    /// Reference §5.7, trace 1, pass by pass.
    #[test]
    fn worked_example_trace_1_pass_by_pass() {
        let d = DeploymentView::rolling(4, Percent(25), Percent(25));
        let p = rolling_pass(&d, None, &[rs("A", 4, 4, 1)], "B");
        assert_eq!((p.create, p.scales), (Some(1), vec![sc("A", 4, 3)]));
        let p = rolling_pass(&d, Some(&rs("B", 1, 1, 2)), &[rs("A", 3, 3, 1)], "B");
        assert_eq!(p.scales, vec![sc("B", 1, 2)]);
        let p = rolling_pass(&d, Some(&rs("B", 2, 2, 2)), &[rs("A", 3, 3, 1)], "B");
        assert_eq!(p.scales, vec![sc("A", 3, 1)]);
        let p = rolling_pass(&d, Some(&rs("B", 2, 2, 2)), &[rs("A", 1, 1, 1)], "B");
        assert_eq!(p.scales, vec![sc("B", 2, 4)]);
        let p = rolling_pass(&d, Some(&rs("B", 4, 4, 2)), &[rs("A", 1, 1, 1)], "B");
        assert_eq!(p.scales, vec![sc("A", 1, 0)]);
        let p = rolling_pass(&d, Some(&rs("B", 4, 4, 2)), &[rs("A", 0, 0, 1)], "B");
        assert!(p.is_empty());
    }

    #[test]
    fn predict_reproduces_trace_1() {
        let d = DeploymentView::rolling(4, Percent(25), Percent(25));
        let steps = predict(&d, None, vec![rs("A", 4, 4, 1)], "B");
        let pairs: Vec<(i32, i32)> = steps.iter().map(|s| (s.new, s.old)).collect();
        assert_eq!(pairs, [(1, 4), (1, 3), (2, 3), (2, 1), (4, 1), (4, 0)]);
    }

    /// Reference §5.7, trace 2: new pods take longer than a pass to become available.
    #[test]
    fn worked_example_trace_2_rows() {
        let d = DeploymentView::rolling(4, Percent(25), Percent(25));
        let rows = [
            ((3, 3), (1, 0), sc("B", 1, 2)),
            ((3, 3), (2, 1), sc("A", 3, 2)),
            ((2, 2), (2, 1), sc("B", 2, 3)),
            ((2, 2), (3, 2), sc("A", 2, 1)),
            ((1, 1), (3, 2), sc("B", 3, 4)),
            ((1, 1), (4, 3), sc("A", 1, 0)),
        ];
        for ((a, aa), (b, ba), want) in rows {
            let p = rolling_pass(&d, Some(&rs("B", b, ba, 2)), &[rs("A", a, aa, 1)], "B");
            assert_eq!(p.scales, vec![want], "A {a}/{aa} B {b}/{ba}");
        }
        let p = rolling_pass(&d, Some(&rs("B", 4, 3, 2)), &[rs("A", 0, 0, 1)], "B");
        assert!(p.is_empty(), "wait for the last pod");
    }

    /// Reference §5.7, trace 3: the new pods never become ready; the rollout holds.
    #[test]
    fn worked_example_trace_3_holds() {
        let d = DeploymentView::rolling(4, Percent(25), Percent(25));
        let p = rolling_pass(&d, None, &[rs("A", 4, 4, 1)], "B");
        assert_eq!((p.create, p.scales), (Some(1), vec![sc("A", 4, 3)]));
        let p = rolling_pass(&d, Some(&rs("B", 1, 0, 2)), &[rs("A", 3, 3, 1)], "B");
        assert_eq!(p.scales, vec![sc("B", 1, 2)]);
        let p = rolling_pass(&d, Some(&rs("B", 2, 0, 2)), &[rs("A", 3, 3, 1)], "B");
        assert!(p.is_empty(), "maxScaledDown = 5 - 3 - 2 = 0: nothing moves");
    }

    #[test]
    fn unhealthy_old_pods_go_first() {
        let d = DeploymentView::rolling(4, Percent(25), Percent(25));
        // Old A has 2 unavailable pods: maxScaledDown = 5 - 3 - 0 = 2 goes to them, and
        // then available 2 + 1 = 3 is not above minAvailable 3: no healthy pod is touched.
        let p = rolling_pass(&d, Some(&rs("B", 1, 1, 2)), &[rs("A", 4, 2, 1)], "B");
        assert_eq!(p.scales, vec![sc("A", 4, 2)]);
    }

    #[test]
    fn an_old_replica_set_with_more_available_than_wanted_is_left_alone() {
        // Found by the fidelity test: A was scaled to 3 but its 4th pod is not gone yet.
        let d = DeploymentView::rolling(4, Int(1), Int(0));
        let p = rolling_pass(&d, Some(&rs("B", 2, 2, 2)), &[rs("A", 3, 4, 1)], "B");
        assert!(p.is_empty(), "{p:?}");
    }

    #[test]
    fn surge_one_unavailable_zero_goes_one_pod_at_a_time() {
        let d = DeploymentView::rolling(3, Int(1), Int(0));
        let steps = predict(&d, None, vec![rs("A", 3, 3, 1)], "B");
        let pairs: Vec<(i32, i32)> = steps.iter().map(|s| (s.new, s.old)).collect();
        assert_eq!(pairs, [(1, 3), (1, 2), (2, 2), (2, 1), (3, 1), (3, 0)]);
    }

    #[test]
    fn recreate_scales_old_to_zero_then_waits_then_creates_full() {
        let d = DeploymentView {
            replicas: 3,
            strategy: Strategy::Recreate,
        };
        let p = recreate_pass(&d, None, &[rs("A", 3, 3, 1)], true);
        assert_eq!(p.scales, vec![sc("A", 3, 0)]);
        let p = recreate_pass(&d, None, &[rs("A", 0, 0, 1)], true);
        assert!(p.waiting_for_old_pods && p.is_empty());
        let p = recreate_pass(&d, None, &[rs("A", 0, 0, 1)], false);
        assert_eq!(p.create, Some(3));
        let steps = predict(&d, None, vec![rs("A", 3, 3, 1)], "B");
        assert_eq!(
            steps.iter().map(|s| (s.new, s.old)).collect::<Vec<_>>(),
            [(0, 0), (3, 0)]
        );
    }

    /// Reference §5.6: A=3 (older), B=2, both annotated max-replicas=5.
    #[test]
    fn proportional_scaling_examples() {
        let a = ReplicaSetView {
            max_replicas: Some(5),
            ..rs("A", 3, 3, 1)
        };
        let b = ReplicaSetView {
            max_replicas: Some(5),
            ..rs("B", 2, 0, 2)
        };
        let go = |replicas| {
            let d = DeploymentView::rolling(replicas, Percent(25), Percent(25));
            let mut scales = proportional_scale(&d, Some(&b), std::slice::from_ref(&a), false, 5);
            scales.sort_by(|x, y| x.name.cmp(&y.name));
            scales
                .into_iter()
                .map(|s| (s.name, s.to))
                .collect::<Vec<_>>()
        };
        assert_eq!(go(8), [("A".into(), 6), ("B".into(), 4)]);
        assert_eq!(go(5), [("A".into(), 4), ("B".into(), 3)]);
        assert_eq!(go(2), [("A".into(), 2), ("B".into(), 1)]);
        assert_eq!(go(0), [("A".into(), 0), ("B".into(), 0)]);
    }

    #[test]
    fn proportional_scaling_single_active_and_saturated() {
        let d = DeploymentView::rolling(5, Percent(25), Percent(25));
        let only = rs("B", 3, 3, 2);
        assert_eq!(
            proportional_scale(&d, Some(&only), &[rs("A", 0, 0, 1)], false, 3),
            vec![sc("B", 3, 5)]
        );
        let saturated = rs("B", 5, 5, 2);
        assert_eq!(
            proportional_scale(&d, Some(&saturated), &[rs("A", 2, 2, 1)], true, 7),
            vec![sc("A", 2, 0)]
        );
    }
}
