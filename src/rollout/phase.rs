//! A Deployment's status conditions → the rollout's phase, and the progress message
//! `kubectl rollout status` would print. Never judged from a status older than the
//! generation berth wrote (kube-rs' `is_deployment_completed` misses this).

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition};

/// Where a rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The controller has not seen this generation yet, or pods are still moving.
    Progressing,
    /// Every replica is updated and available, no old ones left.
    Complete,
    /// Progressing=False with reason ProgressDeadlineExceeded.
    Failed,
}

impl Phase {
    /// The word shown in output.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Progressing => "progressing",
            Phase::Complete => "complete",
            Phase::Failed => "failed",
        }
    }
}

/// The phase, and a kubectl-style message, of a Deployment whose spec berth wrote at
/// `generation` (the status must have observed at least that).
pub fn phase(d: &Deployment, generation: i64) -> (Phase, String) {
    let name = d.metadata.name.as_deref().unwrap_or("");
    let Some(status) = &d.status else {
        return (
            Phase::Progressing,
            "Waiting for deployment spec update to be observed...".into(),
        );
    };
    if status.observed_generation.unwrap_or(0) < generation.max(d.metadata.generation.unwrap_or(0))
    {
        return (
            Phase::Progressing,
            "Waiting for deployment spec update to be observed...".into(),
        );
    }
    let progressing = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Progressing");
    if progressing.is_some_and(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded")) {
        return (
            Phase::Failed,
            format!("deployment {name:?} exceeded its progress deadline"),
        );
    }
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let updated = status.updated_replicas.unwrap_or(0);
    let replicas = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    let waiting = |what: String| {
        (
            Phase::Progressing,
            format!("Waiting for deployment {name:?} rollout to finish: {what}..."),
        )
    };
    if let Some(what) = replicas_pending(want, updated, replicas, available) {
        return waiting(what);
    }
    if updated == want
        && available == want
        && replicas == want
        && new_replica_set_reported(d, progressing)
    {
        return (
            Phase::Complete,
            format!("deployment {name:?} successfully rolled out"),
        );
    }
    waiting("waiting for the Progressing condition to report NewReplicaSetAvailable".into())
}

/// The replicas the rollout still waits for, as kubectl says it; None when it waits for none.
fn replicas_pending(want: i32, updated: i32, replicas: i32, available: i32) -> Option<String> {
    if updated < want {
        return Some(format!(
            "{updated} out of {want} new replicas have been updated"
        ));
    }
    if replicas > updated {
        return Some(format!(
            "{} old replicas are pending termination",
            replicas - updated
        ));
    }
    if available < updated {
        return Some(format!(
            "{available} of {updated} updated replicas are available"
        ));
    }
    None
}

/// Whether Progressing reports NewReplicaSetAvailable, or there is no deadline to report it by.
fn new_replica_set_reported(d: &Deployment, progressing: Option<&DeploymentCondition>) -> bool {
    let new_rs_available = progressing.is_some_and(|c| {
        c.status == "True" && c.reason.as_deref() == Some("NewReplicaSetAvailable")
    });
    // Without a progress deadline there is no Progressing condition to wait for.
    let deadline = d
        .spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .is_some();
    new_rs_available || !deadline
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(generation: i64, status: serde_json::Value) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "generation": generation},
            "spec": {"replicas": 3, "progressDeadlineSeconds": 600, "selector": {}, "template": {}},
            "status": status,
        }))
        .unwrap()
    }

    fn progressing(reason: &str, status: &str) -> serde_json::Value {
        serde_json::json!([{"type": "Progressing", "status": status, "reason": reason}])
    }

    #[test]
    fn an_old_status_never_counts_as_complete() {
        let done = serde_json::json!({"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3,
            "availableReplicas": 3, "conditions": progressing("NewReplicaSetAvailable", "True")});
        assert_eq!(phase(&deployment(1, done.clone()), 1).0, Phase::Complete);
        let (p, m) = phase(&deployment(2, done), 2);
        assert_eq!(p, Phase::Progressing);
        assert!(m.contains("spec update to be observed"), "{m}");
    }

    #[test]
    fn kubectl_style_messages_while_progressing() {
        let s = |u, r, a| {
            serde_json::json!({"observedGeneration": 2, "replicas": r, "updatedReplicas": u,
            "availableReplicas": a, "conditions": progressing("ReplicaSetUpdated", "True")})
        };
        assert!(phase(&deployment(2, s(1, 4, 3)), 2)
            .1
            .contains("1 out of 3 new replicas have been updated"));
        assert!(phase(&deployment(2, s(3, 4, 3)), 2)
            .1
            .contains("1 old replicas are pending termination"));
        assert!(phase(&deployment(2, s(3, 3, 2)), 2)
            .1
            .contains("2 of 3 updated replicas are available"));
        assert_eq!(
            phase(&deployment(2, s(3, 3, 3)), 2).0,
            Phase::Progressing,
            "until NewReplicaSetAvailable"
        );
    }

    #[test]
    fn deadline_exceeded_is_failed() {
        let s = serde_json::json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 2,
            "availableReplicas": 3, "conditions": progressing("ProgressDeadlineExceeded", "False")});
        let (p, m) = phase(&deployment(2, s), 2);
        assert_eq!(p, Phase::Failed);
        assert_eq!(m, "deployment \"web\" exceeded its progress deadline");
    }
}
