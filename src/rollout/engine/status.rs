//! Deployment status and conditions as the Deployment controller computes them
//! (reference §7), pure: `calculateStatus`, `SetDeploymentCondition`, the pause
//! conditions and `syncRolloutStatus`. berth's own rollout engine writes what these
//! return.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::rollout::steps;

/// Progressing reasons.
pub const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
/// Progressing: an existing ReplicaSet runs the template.
pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
/// Progressing: pods moved.
pub const RS_UPDATED: &str = "ReplicaSetUpdated";
/// Progressing: done.
pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
/// Progressing=False: the deadline passed.
pub const DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
/// Progressing=Unknown while paused.
pub const PAUSED: &str = "DeploymentPaused";
/// Progressing=Unknown after a resume.
pub const RESUMED: &str = "DeploymentResumed";

/// `spec.progressDeadlineSeconds`, unless unset or MaxInt32 (the controller's "none").
pub fn progress_deadline(d: &Deployment) -> Option<i32> {
    d.spec
        .as_ref()?
        .progress_deadline_seconds
        .filter(|s| *s != i32::MAX)
}

/// A condition.
pub fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// `SetDeploymentCondition`: same status and reason is a no-op (timestamps kept); a new
/// reason with the same status keeps lastTransitionTime.
pub fn set_condition(conditions: &mut Vec<DeploymentCondition>, mut c: DeploymentCondition) {
    if let Some(old) = conditions.iter().find(|o| o.type_ == c.type_) {
        if old.status == c.status && old.reason == c.reason {
            return;
        }
        if old.status == c.status {
            c.last_transition_time = old.last_transition_time.clone();
        }
    }
    conditions.retain(|o| o.type_ != c.type_);
    conditions.push(c);
}

fn find<'a>(conditions: &'a [DeploymentCondition], type_: &str) -> Option<&'a DeploymentCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// `calculateStatus`: counts from the ReplicaSets, the Available condition.
pub fn calculate_status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    now: Timestamp,
) -> DeploymentStatus {
    let status_of = |rs: &ReplicaSet| rs.status.clone().unwrap_or_default();
    let spec_sum: i32 = all
        .iter()
        .map(|rs| rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0))
        .sum();
    let available: i32 = all
        .iter()
        .map(|rs| status_of(rs).available_replicas.unwrap_or(0))
        .sum();
    let old = d.status.clone().unwrap_or_default();
    let mut conditions = old.conditions.clone().unwrap_or_default();
    let view = crate::rollout::predict::view(d);
    let min_available = view.replicas - steps::max_unavailable(&view);
    let available_condition = if available >= min_available {
        condition(
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
            now,
        )
    } else {
        condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
            now,
        )
    };
    set_condition(&mut conditions, available_condition);
    DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(all.iter().map(|rs| status_of(rs).replicas).sum()),
        updated_replicas: Some(new.map_or(0, |rs| status_of(rs).replicas)),
        ready_replicas: Some(
            all.iter()
                .map(|rs| status_of(rs).ready_replicas.unwrap_or(0))
                .sum(),
        ),
        available_replicas: Some(available),
        unavailable_replicas: Some((spec_sum - available).max(0)),
        collision_count: old.collision_count,
        conditions: Some(conditions),
        ..DeploymentStatus::default()
    }
}

/// `checkPausedConditions`, applied to the conditions about to be written.
pub fn pause_conditions(d: &Deployment, conditions: &mut Vec<DeploymentCondition>, now: Timestamp) {
    if progress_deadline(d).is_none() {
        return;
    }
    let paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
    let reason = find(conditions, "Progressing")
        .and_then(|c| c.reason.clone())
        .unwrap_or_default();
    if reason == DEADLINE_EXCEEDED {
        return;
    }
    if paused && reason != PAUSED {
        set_condition(
            conditions,
            condition(
                "Progressing",
                "Unknown",
                PAUSED,
                "Deployment is paused".into(),
                now,
            ),
        );
    } else if !paused && reason == PAUSED {
        set_condition(
            conditions,
            condition(
                "Progressing",
                "Unknown",
                RESUMED,
                "Deployment is resumed".into(),
                now,
            ),
        );
    }
}

/// `syncRolloutStatus`: the status after a rolling or recreate pass.
pub fn rollout_status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    now: Timestamp,
) -> DeploymentStatus {
    let mut s = calculate_status(d, all, new, now);
    let mut conditions = s.conditions.take().unwrap_or_default();
    let Some(deadline) = progress_deadline(d) else {
        conditions.retain(|c| c.type_ != "Progressing");
        s.conditions = Some(conditions);
        return s;
    };
    let old = d.status.clone().unwrap_or_default();
    let current = find(&conditions, "Progressing").cloned();
    let already_complete = s.replicas == s.updated_replicas
        && current.as_ref().and_then(|c| c.reason.as_deref()) == Some(NEW_RS_AVAILABLE);
    let subject = progress_subject(d, new);
    if !already_complete {
        if complete(d, &s) {
            set_condition(
                &mut conditions,
                condition(
                    "Progressing",
                    "True",
                    NEW_RS_AVAILABLE,
                    format!("{subject} has successfully progressed."),
                    now,
                ),
            );
        } else if progressing(&s, &old) {
            mark_progressing(&mut conditions, current.as_ref(), &subject, now);
        } else if timed_out(current.as_ref(), deadline, now) {
            set_condition(
                &mut conditions,
                condition(
                    "Progressing",
                    "False",
                    DEADLINE_EXCEEDED,
                    format!("{subject} has timed out progressing."),
                    now,
                ),
            );
        }
    }
    s.conditions = Some(conditions);
    s
}

/// What the Progressing messages name: the new ReplicaSet, else the Deployment.
fn progress_subject(d: &Deployment, new: Option<&ReplicaSet>) -> String {
    match new.and_then(|rs| rs.metadata.name.clone()) {
        Some(n) => format!("ReplicaSet {n:?}"),
        None => format!(
            "Deployment {:?}",
            d.metadata.name.clone().unwrap_or_default()
        ),
    }
}

/// `DeploymentComplete`: every wanted replica updated and available, for the generation
/// observed.
fn complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let want = crate::rollout::predict::view(d).replicas;
    s.updated_replicas == Some(want)
        && s.replicas == Some(want)
        && s.available_replicas == Some(want)
        && s.observed_generation >= d.metadata.generation
}

/// `DeploymentProgressing`: pods moved since the status `old` (more updated, fewer old,
/// more ready or available).
fn progressing(s: &DeploymentStatus, old: &DeploymentStatus) -> bool {
    let grew = |new: Option<i32>, old: Option<i32>| new.unwrap_or(0) > old.unwrap_or(0);
    grew(s.updated_replicas, old.updated_replicas)
        || old.replicas.unwrap_or(0) - old.updated_replicas.unwrap_or(0)
            > s.replicas.unwrap_or(0) - s.updated_replicas.unwrap_or(0)
        || grew(s.ready_replicas, old.ready_replicas)
        || grew(s.available_replicas, old.available_replicas)
}

/// Sets Progressing=True `ReplicaSetUpdated`, its lastTransitionTime kept from a `current`
/// one that was True.
fn mark_progressing(
    conditions: &mut Vec<DeploymentCondition>,
    current: Option<&DeploymentCondition>,
    subject: &str,
    now: Timestamp,
) {
    // Removed and added again so that lastUpdateTime moves even with the same reason.
    let mut c = condition(
        "Progressing",
        "True",
        RS_UPDATED,
        format!("{subject} is progressing."),
        now,
    );
    if let Some(prev) = current.filter(|p| p.status == "True") {
        c.last_transition_time = prev.last_transition_time.clone();
    }
    conditions.retain(|c| c.type_ != "Progressing");
    conditions.push(c);
}

/// `DeploymentTimedOut`.
fn timed_out(progressing: Option<&DeploymentCondition>, deadline: i32, now: Timestamp) -> bool {
    let Some(c) = progressing else { return false };
    match c.reason.as_deref() {
        Some(NEW_RS_AVAILABLE) => false,
        Some(DEADLINE_EXCEEDED) => true,
        _ => c
            .last_update_time
            .as_ref()
            .is_some_and(|t| t.0 + SignedDuration::from_secs(i64::from(deadline)) < now),
    }
}

/// When the deadline of a progressing rollout passes (to check it again then).
pub fn deadline_at(d: &Deployment, status: &DeploymentStatus) -> Option<Timestamp> {
    let deadline = progress_deadline(d)?;
    let c = find(status.conditions.as_deref()?, "Progressing")?;
    if matches!(
        c.reason.as_deref(),
        Some(NEW_RS_AVAILABLE | DEADLINE_EXCEEDED | PAUSED)
    ) {
        return None;
    }
    Some(c.last_update_time.as_ref()?.0 + SignedDuration::from_secs(i64::from(deadline) + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(status: serde_json::Value) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "generation": 2},
            "spec": {"replicas": 4, "progressDeadlineSeconds": 60, "selector": {}, "template": {},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}},
            "status": status,
        }))
        .unwrap()
    }

    fn rs(name: &str, spec: i32, replicas: i32, available: i32) -> ReplicaSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"replicas": spec, "selector": {}},
            "status": {"replicas": replicas, "readyReplicas": available, "availableReplicas": available},
        }))
        .unwrap()
    }

    fn reason(s: &DeploymentStatus, t: &str) -> Option<String> {
        find(s.conditions.as_deref().unwrap_or(&[]), t).and_then(|c| c.reason.clone())
    }

    #[test]
    fn counts_and_availability() {
        let d = deployment(serde_json::json!({}));
        let (a, b) = (rs("a", 3, 3, 3), rs("b", 2, 2, 0));
        let s = calculate_status(&d, &[&a, &b], Some(&b), Timestamp::now());
        assert_eq!(
            (
                s.replicas,
                s.updated_replicas,
                s.available_replicas,
                s.unavailable_replicas
            ),
            (Some(5), Some(2), Some(3), Some(2))
        );
        assert_eq!(
            reason(&s, "Available").as_deref(),
            Some("MinimumReplicasAvailable"),
            "3 ≥ 4 - 1"
        );
        let s = calculate_status(&d, &[&b], Some(&b), Timestamp::now());
        assert_eq!(
            reason(&s, "Available").as_deref(),
            Some("MinimumReplicasUnavailable")
        );
    }

    #[test]
    fn progressing_complete_and_timed_out() {
        let now = Timestamp::now();
        let old = serde_json::json!({"replicas": 4, "updatedReplicas": 1, "readyReplicas": 3, "availableReplicas": 3,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated",
                "lastUpdateTime": "2020-01-01T00:00:00Z", "lastTransitionTime": "2020-01-01T00:00:00Z"}]});
        let d = deployment(old.clone());
        let (a, b) = (rs("a", 2, 2, 2), rs("b", 2, 2, 2));
        let s = rollout_status(&d, &[&a, &b], Some(&b), now);
        let c = find(s.conditions.as_deref().unwrap(), "Progressing").unwrap();
        assert_eq!(c.reason.as_deref(), Some(RS_UPDATED));
        assert_eq!(
            c.message.as_deref(),
            Some("ReplicaSet \"b\" is progressing.")
        );
        assert_eq!(
            c.last_transition_time.as_ref().unwrap().0.to_string(),
            "2020-01-01T00:00:00Z",
            "kept while True"
        );
        // Nothing moved since 2020 and the deadline is 60 s: timed out.
        let (a, b) = (rs("a", 3, 3, 3), rs("b", 1, 1, 0));
        let s = rollout_status(&d, &[&a, &b], Some(&b), now);
        assert_eq!(
            reason(&s, "Progressing").as_deref(),
            Some(DEADLINE_EXCEEDED)
        );
        // All four updated and available: complete.
        let b = rs("b", 4, 4, 4);
        let s = rollout_status(&d, &[&b], Some(&b), now);
        assert_eq!(reason(&s, "Progressing").as_deref(), Some(NEW_RS_AVAILABLE));
    }

    #[test]
    fn set_condition_keeps_timestamps_when_nothing_changes() {
        let t0 = Timestamp::from_second(1_000_000).unwrap();
        let mut cs = vec![condition(
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "x".into(),
            t0,
        )];
        set_condition(
            &mut cs,
            condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "y".into(),
                Timestamp::now(),
            ),
        );
        assert_eq!(cs[0].last_update_time.as_ref().unwrap().0, t0);
        set_condition(
            &mut cs,
            condition("Available", "True", "Other", "z".into(), Timestamp::now()),
        );
        assert_eq!(
            cs[0].last_transition_time.as_ref().unwrap().0,
            t0,
            "same status: transition kept"
        );
        assert_ne!(cs[0].last_update_time.as_ref().unwrap().0, t0);
    }

    #[test]
    fn pause_and_resume() {
        let mut d = deployment(serde_json::json!({}));
        d.spec.as_mut().unwrap().paused = Some(true);
        let mut cs = Vec::new();
        pause_conditions(&d, &mut cs, Timestamp::now());
        assert_eq!(cs[0].reason.as_deref(), Some(PAUSED));
        d.spec.as_mut().unwrap().paused = Some(false);
        pause_conditions(&d, &mut cs, Timestamp::now());
        assert_eq!(
            (cs[0].status.as_str(), cs[0].reason.as_deref()),
            ("Unknown", Some(RESUMED))
        );
    }
}
