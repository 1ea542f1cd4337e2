//! Proportional scaling (the controller's `scale`): when `spec.replicas` changes while a
//! rollout runs, each ReplicaSet grows or shrinks by its share.

use super::{by_creation, max_surge, DeploymentView, ReplicaSetView, Scale, Strategy};

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
    share_out(d, &active, status_replicas)
}

/// `rs` resized to `to`.
fn scale(rs: &ReplicaSetView, to: i32) -> Scale {
    Scale {
        name: rs.name.clone(),
        from: rs.replicas,
        to,
    }
}

/// The replicas added or removed shared out among the `active` ReplicaSets by their size,
/// the largest taking what rounding left over.
fn share_out(d: &DeploymentView, active: &[&ReplicaSetView], status_replicas: i32) -> Vec<Scale> {
    let total: i32 = active.iter().map(|rs| rs.replicas).sum();
    let allowed = if d.replicas > 0 {
        d.replicas + max_surge(d)
    } else {
        0
    };
    let to_add = allowed - total;
    let mut order = active.to_vec();
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
