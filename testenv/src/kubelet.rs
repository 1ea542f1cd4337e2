//! The kubelet stand-in: there is no container runtime here, so it watches pods and
//! patches their status the way a kubelet would (as the kwok project does), which is all
//! the real Deployment, ReplicaSet and endpoints controllers look at.
//!
//! It also registers one Node, `testenv-node`, Ready, and binds every pod to it (there is
//! no scheduler), so that DaemonSets have somewhere to run and Services get endpoints —
//! and, as a kubelet does, confirms the graceful deletion of the pods bound to it;
//! pods of a Job, and bare pods that do not restart (`restartPolicy: Never` or
//! `OnFailure`: a hook's), run to completion (`Succeeded`) instead of staying Running.
//!
//! Pod annotations (from the pod template) steer it:
//! - `testenv.berth.dev/ready: "false"` — Running, never Ready, container waiting in
//!   `CrashLoopBackOff`;
//! - `testenv.berth.dev/ready-after: "5s"` — Running, and Ready once that long has passed
//!   since the pod was created;
//! - `testenv.berth.dev/exit: "1"` — a pod that runs to completion exits with that code:
//!   `Failed` (its Job fails once out of retries).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::{json, Value};

/// Pod annotation: `"false"` keeps the pod unready.
pub const ANNOTATION_READY: &str = "testenv.berth.dev/ready";
/// Pod annotation: a duration after which the pod becomes ready.
pub const ANNOTATION_READY_AFTER: &str = "testenv.berth.dev/ready-after";
/// Pod annotation: images (comma-separated) that never become ready — a broken build, as
/// a pod whose container runs one of them is never Ready.
pub const ANNOTATION_BROKEN_IMAGES: &str = "testenv.berth.dev/broken-images";
/// Pod annotation: the exit code of a pod that runs to completion (non-zero: `Failed`).
pub const ANNOTATION_EXIT: &str = "testenv.berth.dev/exit";

/// What the stand-in makes of a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Running and Ready now.
    Ready,
    /// Running, never Ready.
    Never,
    /// Running; Ready once this long has passed since creation.
    After(Duration),
}

/// Reads a pod's annotations.
pub fn readiness(pod: &Pod) -> Readiness {
    let annotations = pod.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    if get(ANNOTATION_READY) == Some("false") {
        return Readiness::Never;
    }
    let broken = get(ANNOTATION_BROKEN_IMAGES).unwrap_or_default();
    let images = pod.spec.iter().flat_map(|s| &s.containers);
    if images
        .filter_map(|c| c.image.as_deref())
        .any(|image| broken.split(',').any(|b| b.trim() == image))
    {
        return Readiness::Never;
    }
    match get(ANNOTATION_READY_AFTER).and_then(|d| humantime::parse_duration(d).ok()) {
        Some(d) => Readiness::After(d),
        None => Readiness::Ready,
    }
}

/// Runs until `shutdown` completes.
///
/// # Errors
/// The watch failed for good.
pub async fn run(
    client: kube::Client,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), kube::Error> {
    register_node(&client).await?;
    // Heartbeats, as a kubelet sends them: without them the node lifecycle controller
    // marks the node unreachable after 40 s and DaemonSets stop scheduling on it.
    let heartbeat = {
        let client = client.clone();
        async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                if let Err(e) = register_node(&client).await {
                    tracing::debug!(error = %e, "node heartbeat failed");
                }
            }
        }
    };
    let pods: Api<Pod> = Api::all(client.clone());
    let standin = Arc::new(StandIn {
        client,
        next_ip: AtomicU32::new(0),
        timers: Mutex::new(HashSet::new()),
    });
    let events = watcher(pods, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    // A lost API server (restarted in the fault tests) is waited out: the watcher's
    // backoff re-lists once it is back.
    let work = events.for_each(|pod| {
        let standin = standin.clone();
        async move {
            match pod {
                Ok(pod) => standin.handle(pod).await,
                Err(e) => tracing::debug!(error = %e, "pod watch failed; retrying"),
            }
        }
    });
    tokio::select! {
        () = work => Ok(()),
        () = heartbeat => Ok(()),
        _ = shutdown => Ok(()),
    }
}

/// The one Node of the stand-in.
pub const NODE: &str = "testenv-node";

/// Creates the Node (when missing) and marks it Ready.
async fn register_node(client: &kube::Client) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    if nodes.get_opt(NODE).await?.is_none() {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": NODE,
            "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux"}}}))
        .expect("a Node");
        nodes.create(&Default::default(), &node).await?;
    }
    let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "testenv stand-in", "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "capacity": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
    }});
    nodes
        .patch_status(NODE, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// True for a pod a Job made, or a bare pod that does not restart: it runs to completion.
fn runs_to_completion(pod: &Pod) -> bool {
    let controller = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    match controller {
        Some(owner) => owner.kind == "Job",
        None => pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            .is_some_and(|p| p == "Never" || p == "OnFailure"),
    }
}

/// The exit code a pod that runs to completion ends with.
fn exit_code(pod: &Pod) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_EXIT))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

struct StandIn {
    client: kube::Client,
    next_ip: AtomicU32,
    timers: Mutex<HashSet<String>>,
}

impl StandIn {
    async fn handle(self: &Arc<Self>, pod: Pod) {
        if pod.metadata.deletion_timestamp.is_some() {
            // A bound pod is deleted gracefully: the kubelet confirms once its containers
            // have stopped. Ours stop at once.
            self.finish_deletion(&pod).await;
            return;
        }
        if pod.spec.as_ref().is_none_or(|s| s.node_name.is_none()) {
            // There is no scheduler: bind the pod to the one node, as the scheduler would;
            // the watch then brings it back bound. (Endpoints need a pod's node.)
            self.bind(&pod).await;
            return;
        }
        let ready = match readiness(&pod) {
            Readiness::Ready => true,
            Readiness::Never => false,
            Readiness::After(delay) => {
                let age = Timestamp::now().duration_since(created(&pod));
                let wait = delay.saturating_sub(age.try_into().unwrap_or_default());
                if !wait.is_zero() {
                    self.schedule(&pod, wait);
                }
                wait.is_zero()
            }
        };
        if is_marked(&pod, ready) {
            return;
        }
        self.patch(&pod, ready).await;
    }

    /// Re-reads the pod after `wait` and handles it again (once per pod).
    fn schedule(self: &Arc<Self>, pod: &Pod, wait: Duration) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !self
            .timers
            .lock()
            .map(|mut t| t.insert(uid))
            .unwrap_or(false)
        {
            return;
        }
        let (ns, name) = (
            namespace(pod),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        let standin = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let api: Api<Pod> = Api::namespaced(standin.client.clone(), &ns);
            if let Ok(Some(pod)) = api.get_opt(&name).await {
                standin.handle(pod).await;
            }
        });
    }

    async fn finish_deletion(&self, pod: &Pod) {
        if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(NODE) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace(pod));
        let name = pod.metadata.name.clone().unwrap_or_default();
        if let Err(e) = api
            .delete(&name, &DeleteParams::default().grace_period(0))
            .await
        {
            tracing::debug!(pod = %name, error = %e, "final delete failed (gone already?)");
        }
    }

    async fn bind(&self, pod: &Pod) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace(pod));
        let name = pod.metadata.name.clone().unwrap_or_default();
        let binding = json!({"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name}, "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}});
        if let Err(e) = api
            .create_subresource::<Value, Value>("binding", &name, &Default::default(), &binding)
            .await
        {
            tracing::debug!(pod = %name, error = %e, "binding failed (pod gone, or bound meanwhile?)");
        }
    }

    async fn patch(&self, pod: &Pod, ready: bool) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace(pod));
        let name = pod.metadata.name.clone().unwrap_or_default();
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_else(|| {
                let n = self.next_ip.fetch_add(1, Ordering::Relaxed);
                format!("10.244.{}.{}", (n / 250) % 250, n % 250 + 1)
            });
        let status = status_json(pod, ready, &ip);
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            tracing::debug!(pod = %name, error = %e, "status patch failed (pod gone?)");
        }
    }
}

fn namespace(pod: &Pod) -> String {
    pod.metadata
        .namespace
        .as_deref()
        .unwrap_or("default")
        .to_string()
}

fn created(pod: &Pod) -> Timestamp {
    pod.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or_else(Timestamp::now)
}

/// True when the pod already shows what we would write.
fn is_marked(pod: &Pod, ready: bool) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    if ready && runs_to_completion(pod) {
        return matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"));
    }
    let ready_now = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    status.phase.as_deref() == Some("Running") && ready_now == ready
}

fn status_json(pod: &Pod, ready: bool, ip: &str) -> Value {
    let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    if ready && runs_to_completion(pod) {
        return completed_json(pod, &now);
    }
    let flag = if ready { "True" } else { "False" };
    let condition = |type_: &str, status: &str| json!({"type": type_, "status": status, "lastProbeTime": null, "lastTransitionTime": now});
    let containers: Vec<Value> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            let state = if ready || !matches!(readiness(pod), Readiness::Never) {
                json!({"running": {"startedAt": now}})
            } else {
                json!({"waiting": {"reason": "CrashLoopBackOff",
                    "message": "back-off restarting failed container (testenv stand-in)"}})
            };
            json!({"name": c.name, "image": c.image.clone().unwrap_or_default(),
                "imageID": "", "ready": ready, "started": ready,
                "restartCount": 0, "state": state})
        })
        .collect();
    json!({"status": {
        "phase": "Running",
        "hostIP": "127.0.0.1",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now,
        "conditions": [
            condition("PodScheduled", "True"),
            condition("Initialized", "True"),
            condition("ContainersReady", flag),
            condition("Ready", flag),
        ],
        "containerStatuses": containers,
    }})
}

/// A pod that ran to completion: `Succeeded` when it exited 0, else `Failed`.
fn completed_json(pod: &Pod, now: &str) -> Value {
    let code = exit_code(pod);
    let (phase, reason) = if code == 0 {
        ("Succeeded", "Completed")
    } else {
        ("Failed", "Error")
    };
    let containers: Vec<Value> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            json!({"name": c.name, "image": c.image.clone().unwrap_or_default(),
                "imageID": "", "ready": false, "started": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": code, "reason": reason,
                    "startedAt": now, "finishedAt": now}}})
        })
        .collect();
    let condition = |type_: &str, status: &str| {
        json!({"type": type_, "status": status,
        "reason": "PodCompleted", "lastProbeTime": null, "lastTransitionTime": now})
    };
    json!({"status": {
        "phase": phase,
        "hostIP": "127.0.0.1",
        "startTime": now,
        "conditions": [
            condition("PodScheduled", "True"),
            condition("Initialized", "True"),
            condition("ContainersReady", "False"),
            condition("Ready", "False"),
        ],
        "containerStatuses": containers,
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(annotations: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p
    }

    #[test]
    fn annotations_steer_readiness() {
        assert_eq!(readiness(&pod(&[])), Readiness::Ready);
        assert_eq!(
            readiness(&pod(&[(ANNOTATION_READY, "false")])),
            Readiness::Never
        );
        assert_eq!(
            readiness(&pod(&[(ANNOTATION_READY_AFTER, "5s")])),
            Readiness::After(Duration::from_secs(5))
        );
        let mut broken = pod(&[(ANNOTATION_BROKEN_IMAGES, "shop:2, shop:3")]);
        let container = |image: &str| k8s_openapi::api::core::v1::Container {
            image: Some(image.into()),
            ..Default::default()
        };
        broken.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            containers: vec![container("shop:3")],
            ..Default::default()
        });
        assert_eq!(readiness(&broken), Readiness::Never);
        broken.spec.as_mut().unwrap().containers = vec![container("shop:1")];
        assert_eq!(readiness(&broken), Readiness::Ready);
    }
}
