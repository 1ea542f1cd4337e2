//! The health of every kind that has a notion of readiness, from its status alone (pure),
//! after kstatus (fluxcd/cli-utils) and the controllers' own rules: StatefulSet,
//! DaemonSet, Job, PersistentVolumeClaim, Service of type LoadBalancer, and any object
//! whose status follows the kstatus conventions (observedGeneration; `Ready`,
//! `Reconciling`, `Stalled` conditions) — custom resources included. Deployments are
//! followed step by step by [`rollout::track`](crate::rollout::track).

use serde_json::Value;

/// Where an object stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Ready (or complete, or bound): nothing to wait for.
    Current,
    /// Not yet; the message says what is missing.
    InProgress(String),
    /// It will not get there without a change (a failed Job, a stalled resource).
    Failed(String),
}

/// Whether berth waits for objects of this kind (Deployments are followed by the tracker;
/// kinds without a status are current as soon as they are applied).
pub fn waits_for(group: &str, kind: &str) -> bool {
    !matches!(
        (group, kind),
        ("apps", "Deployment")
            | (
                "",
                "ConfigMap" | "Secret" | "ServiceAccount" | "Namespace" | "Endpoints"
            )
            | ("rbac.authorization.k8s.io", _)
            | ("apiextensions.k8s.io", _)
    )
}

/// The health of `object` (a kind's JSON as the server returns it).
pub fn health(group: &str, kind: &str, object: &Value) -> Health {
    let status = &object["status"];
    if let (Some(generation), observed) = (
        object["metadata"]["generation"].as_i64(),
        status["observedGeneration"].as_i64(),
    ) {
        // Only kinds whose controllers report it: an absent observedGeneration on a
        // kind that never sets one (a PVC, a plain CR) is no reason to wait.
        if observed.is_some_and(|o| o < generation)
            || (observed.is_none() && reports_generation(group, kind))
        {
            return Health::InProgress("the controller has not seen this generation yet".into());
        }
    }
    match (group, kind) {
        ("apps", "StatefulSet") => stateful_set(object),
        ("apps", "DaemonSet") => daemon_set(status),
        ("apps", "ReplicaSet") | ("", "ReplicationController") => replica_set(object),
        ("batch", "Job") => job(status),
        ("", "PersistentVolumeClaim") => match status["phase"].as_str() {
            Some("Bound") => Health::Current,
            Some("Lost") => Health::Failed("the claim lost its volume".into()),
            phase => Health::InProgress(format!("phase {}", phase.unwrap_or("Pending"))),
        },
        ("", "Service") => service(object),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => established(status),
        _ => conditions(status),
    }
}

/// A Service with a selector: kube-proxy routes it to the ready pods it selects, so its
/// health is also its Endpoints' (see [`routes`]).
pub fn selects_pods(group: &str, kind: &str, service: &Value) -> bool {
    (group, kind) == ("", "Service")
        && service["spec"]["selector"]
            .as_object()
            .is_some_and(|s| !s.is_empty())
}

/// Whether a Service's Endpoints (their JSON) list a ready address: traffic has somewhere
/// to go.
pub fn routes(endpoints: &Value) -> bool {
    endpoints["subsets"].as_array().is_some_and(|subsets| {
        subsets
            .iter()
            .any(|s| s["addresses"].as_array().is_some_and(|a| !a.is_empty()))
    })
}

/// What a Service that selects pods is short of when its Endpoints route nowhere.
pub const NO_ENDPOINTS: &str = "no ready endpoints";

fn reports_generation(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("apps", "StatefulSet" | "DaemonSet" | "ReplicaSet") | ("", "ReplicationController")
    )
}

/// A ReplicaSet or ReplicationController: ready once as many pods are ready as it wants.
fn replica_set(object: &Value) -> Health {
    let replicas = object["spec"]["replicas"].as_i64().unwrap_or(1);
    let ready = int(&object["status"]["readyReplicas"]);
    if ready < replicas {
        return Health::InProgress(format!("{ready} of {replicas} replicas ready"));
    }
    Health::Current
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

fn stateful_set(object: &Value) -> Health {
    let (spec, status) = (&object["spec"], &object["status"]);
    let replicas = spec["replicas"].as_i64().unwrap_or(1);
    let ready = int(&status["readyReplicas"]);
    let partition = spec["updateStrategy"]["rollingUpdate"]["partition"]
        .as_i64()
        .unwrap_or(0);
    let rolling = spec["updateStrategy"]["type"].as_str() != Some("OnDelete");
    if rolling && partition > 0 {
        let updated = int(&status["updatedReplicas"]);
        if updated < replicas - partition {
            return Health::InProgress(format!(
                "{updated} of {} updated replicas (partition {partition})",
                replicas - partition
            ));
        }
    } else if rolling && status["updateRevision"] != status["currentRevision"] {
        return Health::InProgress(format!(
            "{} of {replicas} replicas updated",
            int(&status["updatedReplicas"])
        ));
    }
    if ready < replicas {
        return Health::InProgress(format!("{ready} of {replicas} replicas ready"));
    }
    Health::Current
}

fn daemon_set(status: &Value) -> Health {
    let desired = int(&status["desiredNumberScheduled"]);
    let updated = int(&status["updatedNumberScheduled"]);
    let available = int(&status["numberAvailable"]);
    if updated < desired {
        return Health::InProgress(format!("{updated} of {desired} pods updated"));
    }
    if available < desired {
        return Health::InProgress(format!("{available} of {desired} pods available"));
    }
    Health::Current
}

fn job(status: &Value) -> Health {
    for c in status["conditions"].as_array().into_iter().flatten() {
        let is_true = c["status"].as_str() == Some("True");
        match c["type"].as_str() {
            Some("Complete") if is_true => return Health::Current,
            Some("Failed") if is_true => {
                return Health::Failed(format!(
                    "{}: {}",
                    c["reason"].as_str().unwrap_or("Failed"),
                    c["message"].as_str().unwrap_or("the Job failed")
                ))
            }
            _ => {}
        }
    }
    Health::InProgress(format!(
        "{} succeeded, {} active",
        int(&status["succeeded"]),
        int(&status["active"])
    ))
}

fn service(object: &Value) -> Health {
    if object["spec"]["type"].as_str() != Some("LoadBalancer") {
        return Health::Current;
    }
    match object["status"]["loadBalancer"]["ingress"].as_array() {
        Some(ingress) if !ingress.is_empty() => Health::Current,
        _ => Health::InProgress(
            "no load-balancer address yet (a cluster without a load-balancer controller never gives one: type ClusterIP or NodePort there)".into(),
        ),
    }
}

/// kstatus conventions: `Stalled=True` fails, `Reconciling=True` or `Ready=False` waits,
/// `Ready=True` or no conditions at all is current.
/// A CustomResourceDefinition serves its kind once `Established`; names another CRD took
/// (`NamesAccepted` false) never will be.
fn established(status: &Value) -> Health {
    let conditions = status["conditions"].as_array().into_iter().flatten();
    let mut established = false;
    for c in conditions {
        match (c["type"].as_str(), c["status"].as_str()) {
            (Some("Established"), Some("True")) => established = true,
            (Some("NamesAccepted"), Some("False")) => {
                let message = c["message"].as_str().unwrap_or("");
                return Health::Failed(format!("NamesAccepted=False: {message}"));
            }
            _ => {}
        }
    }
    if established {
        Health::Current
    } else {
        Health::InProgress("not Established yet".into())
    }
}

fn conditions(status: &Value) -> Health {
    let all = status["conditions"].as_array();
    let find = |t: &str| {
        all.into_iter()
            .flatten()
            .find(|c| c["type"].as_str() == Some(t))
    };
    let said = |c: &Value| {
        format!(
            "{} ({})",
            c["reason"].as_str().unwrap_or(""),
            c["message"].as_str().unwrap_or("")
        )
    };
    if let Some(c) = find("Stalled").filter(|c| c["status"] == "True") {
        return Health::Failed(format!("Stalled: {}", said(c)));
    }
    if let Some(c) = find("Reconciling").filter(|c| c["status"] == "True") {
        return Health::InProgress(format!("Reconciling: {}", said(c)));
    }
    match find("Ready") {
        Some(c) if c["status"] != "True" => Health::InProgress(format!("Ready=False: {}", said(c))),
        _ => Health::Current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Argo CD's sync-waves example gates a wave on a ReplicaSet: ready means its pods
    /// are, not that the controller saw it.
    #[test]
    fn a_replica_set_is_ready_once_its_pods_are() {
        let rs = |ready: i64| {
            json!({"metadata": {"generation": 1}, "spec": {"replicas": 2},
                   "status": {"observedGeneration": 1, "replicas": 2, "readyReplicas": ready}})
        };
        for (group, kind) in [("apps", "ReplicaSet"), ("", "ReplicationController")] {
            assert_eq!(
                health(group, kind, &rs(0)),
                Health::InProgress("0 of 2 replicas ready".into())
            );
            assert_eq!(health(group, kind, &rs(2)), Health::Current);
            let unseen = json!({"metadata": {"generation": 2}, "spec": {"replicas": 0}});
            assert!(matches!(
                health(group, kind, &unseen),
                Health::InProgress(_)
            ));
        }
    }

    #[test]
    fn a_crd_is_ready_once_established() {
        let crd = |conditions: Value| json!({"status": {"conditions": conditions}});
        let health = |o: &Value| health("apiextensions.k8s.io", "CustomResourceDefinition", o);
        assert_eq!(
            health(&crd(json!([]))),
            Health::InProgress("not Established yet".into())
        );
        let ok = json!([{"type": "NamesAccepted", "status": "True"}, {"type": "Established", "status": "True"}]);
        assert_eq!(health(&crd(ok)), Health::Current);
        let taken = json!([{"type": "NamesAccepted", "status": "False", "message": "\"widgets\" is already in use"}]);
        assert!(matches!(health(&crd(taken)), Health::Failed(m) if m.contains("already in use")));
    }

    #[test]
    fn stateful_sets_wait_for_the_update_and_readiness() {
        let sts = |status: Value| json!({"metadata": {"generation": 2}, "spec": {"replicas": 3}, "status": status});
        let waiting = |m: &str| Health::InProgress(m.into());
        for (status, want) in [
            (
                json!({"observedGeneration": 1}),
                waiting("the controller has not seen this generation yet"),
            ),
            (
                json!({"observedGeneration": 2, "readyReplicas": 2, "currentRevision": "a", "updateRevision": "a"}),
                waiting("2 of 3 replicas ready"),
            ),
            (
                json!({"observedGeneration": 2, "readyReplicas": 3, "updatedReplicas": 1, "currentRevision": "a", "updateRevision": "b"}),
                waiting("1 of 3 replicas updated"),
            ),
            (
                json!({"observedGeneration": 2, "readyReplicas": 3, "currentRevision": "b", "updateRevision": "b"}),
                Health::Current,
            ),
        ] {
            assert_eq!(
                health("apps", "StatefulSet", &sts(status.clone())),
                want,
                "{status}"
            );
        }
        let partitioned = json!({"metadata": {"generation": 1},
            "spec": {"replicas": 3, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}},
            "status": {"observedGeneration": 1, "readyReplicas": 3, "updatedReplicas": 1,
                       "currentRevision": "a", "updateRevision": "b"}});
        assert_eq!(health("apps", "StatefulSet", &partitioned), Health::Current);
    }

    #[test]
    fn daemon_sets_jobs_claims_and_services() {
        let ds = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
            "desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberAvailable": 1}});
        assert_eq!(
            health("apps", "DaemonSet", &ds),
            Health::InProgress("1 of 2 pods available".into())
        );
        let job = |c: Value| json!({"status": {"conditions": [c]}});
        assert_eq!(
            health(
                "batch",
                "Job",
                &job(json!({"type": "Complete", "status": "True"}))
            ),
            Health::Current
        );
        assert_eq!(
            health(
                "batch",
                "Job",
                &job(json!({"type": "Failed", "status": "True",
                "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}))
            ),
            Health::Failed(
                "BackoffLimitExceeded: Job has reached the specified backoff limit".into()
            )
        );
        assert_eq!(
            health(
                "",
                "PersistentVolumeClaim",
                &json!({"status": {"phase": "Pending"}})
            ),
            Health::InProgress("phase Pending".into())
        );
        assert_eq!(
            health("", "Service", &json!({"spec": {"type": "ClusterIP"}})),
            Health::Current
        );
        assert!(matches!(
            health(
                "",
                "Service",
                &json!({"spec": {"type": "LoadBalancer"}, "status": {}})
            ),
            Health::InProgress(_)
        ));
    }

    #[test]
    fn custom_resources_follow_kstatus_conditions() {
        let cr = |conditions: Value| json!({"metadata": {"generation": 1}, "status": {"conditions": conditions}});
        assert_eq!(
            health(
                "example.com",
                "Widget",
                &cr(json!([{"type": "Ready", "status": "False",
                "reason": "Waiting", "message": "no backend"}]))
            ),
            Health::InProgress("Ready=False: Waiting (no backend)".into())
        );
        assert!(matches!(
            health(
                "example.com",
                "Widget",
                &cr(json!([{"type": "Stalled", "status": "True"}]))
            ),
            Health::Failed(_)
        ));
        assert_eq!(
            health(
                "example.com",
                "Widget",
                &cr(json!([{"type": "Ready", "status": "True"}]))
            ),
            Health::Current
        );
        assert_eq!(
            health("example.com", "Widget", &json!({"spec": {}})),
            Health::Current
        );
        assert!(waits_for("example.com", "Widget") && !waits_for("apps", "Deployment"));
    }

    #[test]
    fn a_service_that_selects_pods_is_as_ready_as_its_endpoints() {
        let service = json!({"spec": {"selector": {"app": "web"}}});
        assert!(selects_pods("", "Service", &service));
        assert!(!selects_pods("", "Service", &json!({"spec": {}})));
        assert!(!routes(
            &json!({"subsets": [{"notReadyAddresses": [{"ip": "10.0.0.1"}]}]})
        ));
        assert!(!routes(&json!({})));
        assert!(routes(
            &json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}]}]})
        ));
    }
}
