//! A Deployment's ReplicaSets (controller ownerReference to its UID) by revision, and
//! which one is new: the one whose template hash equals the hash of the Deployment's
//! current, server-defaulted template (the oldest such, as Kubernetes picks). Used by
//! tracking, rollback, `status` and `plan`.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::manifest::object::namespace_or_default;

use super::hash::{template_hash, POD_TEMPLATE_HASH};

/// The revision annotation, on ReplicaSets and Deployments.
pub const REVISION: &str = "deployment.kubernetes.io/revision";

/// What berth knows of one ReplicaSet.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaSetInfo {
    /// Its name.
    pub name: String,
    /// `deployment.kubernetes.io/revision` (0 when missing or unreadable).
    pub revision: i64,
    /// berth's hash of its template (without the pod-template-hash label).
    pub hash: String,
    /// The container images of its template.
    pub images: Vec<String>,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.replicas`.
    pub current: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// Creation time.
    pub created: Option<Timestamp>,
    /// Its pod template as the API returns it.
    pub template: Value,
}

/// A Deployment's ReplicaSets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Revisions {
    /// berth's hash of the Deployment's current template.
    pub hash: String,
    /// The ReplicaSet running the current template, once it exists.
    pub new: Option<ReplicaSetInfo>,
    /// The others, highest revision first.
    pub old: Vec<ReplicaSetInfo>,
}

impl Revisions {
    /// The ReplicaSet of a revision.
    pub fn revision(&self, n: i64) -> Option<&ReplicaSetInfo> {
        self.new.iter().chain(&self.old).find(|rs| rs.revision == n)
    }

    /// The highest revision of the old ReplicaSets (what `kubectl rollout undo` restores).
    pub fn previous(&self) -> Option<&ReplicaSetInfo> {
        self.old.first()
    }
}

/// The pod template of a Deployment or ReplicaSet as JSON.
fn template_json<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

/// The revision a Deployment or ReplicaSet is annotated with, when it is.
pub fn revision_of(meta: &ObjectMeta) -> Option<i64> {
    meta.annotations.as_ref()?.get(REVISION)?.parse().ok()
}

/// A Deployment's ReplicaSets as its controller sees them: only those it controls (by
/// owner uid), split into the new one — whose template hashes as the Deployment's does —
/// and the old ones, oldest first (ties by name). The one selection both readers
/// ([`select`]) and berth's own engine use.
pub struct Owned {
    /// The Deployment's pod template as JSON.
    pub template: Value,
    /// Its hash.
    pub hash: String,
    /// The ReplicaSet whose template matches.
    pub new: Option<ReplicaSet>,
    /// The others, oldest first.
    pub old: Vec<ReplicaSet>,
}

/// The owner reference that controls the object: the one with `controller: true` (the
/// API server allows at most one), as the controllers that adopt objects see it.
pub fn controller(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// Whether the object's controller is the object with `owner_uid`: a ReplicaSet of a
/// Deployment, a pod of a ReplicaSet or a Job. An owner reference without
/// `controller: true` does not count, as it does not for Kubernetes' controllers.
pub fn controlled_by(meta: &ObjectMeta, owner_uid: &str) -> bool {
    controller(meta).is_some_and(|o| o.uid == owner_uid)
}

/// Splits `replica_sets` as [`Owned`] says (pure).
pub fn owned(deployment: &Deployment, replica_sets: Vec<ReplicaSet>) -> Owned {
    let uid = deployment.metadata.uid.as_deref();
    let template = deployment
        .spec
        .as_ref()
        .map(|s| template_json(&s.template))
        .unwrap_or(Value::Null);
    let hash = template_hash(&template, None);
    let mut old: Vec<ReplicaSet> = replica_sets
        .into_iter()
        .filter(|rs| uid.is_some_and(|uid| controlled_by(&rs.metadata, uid)))
        .collect();
    old.sort_by_key(|rs| {
        (
            rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
            rs.metadata.name.clone(),
        )
    });
    let new = old
        .iter()
        .position(|rs| template_hash(&replica_set_template(rs), None) == hash)
        .map(|i| old.remove(i));
    Owned {
        template,
        hash,
        new,
        old,
    }
}

/// A ReplicaSet's pod template as JSON (`null` when it has none).
pub fn replica_set_template(rs: &ReplicaSet) -> Value {
    rs.spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .map(template_json)
        .unwrap_or(Value::Null)
}

/// Splits a Deployment's ReplicaSets into new and old, old newest revision first (pure).
pub fn select(deployment: &Deployment, replica_sets: Vec<ReplicaSet>) -> Revisions {
    let Owned { hash, new, old, .. } = owned(deployment, replica_sets);
    let mut old: Vec<ReplicaSetInfo> = old.iter().map(info).collect();
    old.sort_by_key(|rs| std::cmp::Reverse(rs.revision));
    Revisions {
        hash,
        new: new.as_ref().map(info),
        old,
    }
}

/// The ReplicaSet `name` of Deployment `d` for pod `template` (JSON, without the hash
/// label) of hash `hash`, at `size`, with `annotations`: the hash in its labels and
/// selector, the Deployment its controller — what Kubernetes' controller makes, and adopts
/// as its new ReplicaSet when the template is the Deployment's.
///
/// # Errors
/// The parts make no ReplicaSet (a Deployment without a name, say).
pub fn replica_set_of(
    d: &Deployment,
    template: &Value,
    name: &str,
    hash: &str,
    annotations: std::collections::BTreeMap<String, String>,
    size: i32,
) -> Result<ReplicaSet, serde_json::Error> {
    let mut template = template.clone();
    template["metadata"]["labels"][POD_TEMPLATE_HASH] = Value::from(hash);
    let spec = d.spec.as_ref();
    let mut selector = serde_json::to_value(spec.map(|s| s.selector.clone()))?;
    selector["matchLabels"][POD_TEMPLATE_HASH] = Value::from(hash);
    let ns = d.metadata.namespace.clone().unwrap_or_default();
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name, "namespace": ns, "labels": template["metadata"]["labels"], "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": d.metadata.name,
                "uid": d.metadata.uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {"replicas": size, "minReadySeconds": spec.and_then(|s| s.min_ready_seconds).unwrap_or(0),
            "selector": selector, "template": template},
    }))
}

/// Reads one ReplicaSet.
pub fn info(rs: &ReplicaSet) -> ReplicaSetInfo {
    let template = replica_set_template(rs);
    let status = rs.status.as_ref();
    ReplicaSetInfo {
        name: rs.metadata.name.clone().unwrap_or_default(),
        revision: revision_of(&rs.metadata).unwrap_or(0),
        hash: template_hash(&template, None),
        images: images(&template),
        replicas: rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        current: status.map_or(0, |s| s.replicas),
        ready: status.and_then(|s| s.ready_replicas).unwrap_or(0),
        available: status.and_then(|s| s.available_replicas).unwrap_or(0),
        created: rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
        template,
    }
}

/// The container images of a pod template.
pub fn images(template: &Value) -> Vec<String> {
    template
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("image").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// Lists a Deployment's ReplicaSets from the cluster.
///
/// # Errors
/// The list request failed.
pub async fn list(
    client: &kube::Client,
    deployment: &Deployment,
) -> Result<Revisions, kube::Error> {
    let ns = namespace_or_default(deployment.metadata.namespace.as_deref());
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let replica_sets = api
        .list(&ListParams::default().labels(&selector(deployment)))
        .await?;
    Ok(select(deployment, replica_sets.items))
}

/// The Deployment's `matchLabels` as a label selector (what its ReplicaSets carry).
pub fn selector(deployment: &Deployment) -> String {
    deployment
        .spec
        .as_ref()
        .map(|s| match_labels(&s.selector))
        .unwrap_or_default()
}

/// A selector's `matchLabels` as a label selector, without the pod-template-hash: every
/// ReplicaSet of the Deployment carries them (its `matchExpressions` only narrow further).
pub fn match_labels(selector: &LabelSelector) -> String {
    selector
        .match_labels
        .iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != POD_TEMPLATE_HASH)
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(image: &str) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "d-1"},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": image}]}}}
        }))
        .unwrap()
    }

    fn rs(name: &str, image: &str, revision: &str, owner: &str, created: &str) -> ReplicaSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "creationTimestamp": created,
                "annotations": {REVISION: revision},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": owner, "controller": true}]},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": name}},
                    "spec": {"containers": [{"name": "web", "image": image}]}}},
            "status": {"replicas": 2, "readyReplicas": 1, "availableReplicas": 1}
        }))
        .unwrap()
    }

    #[test]
    fn the_new_replica_set_is_the_one_running_the_current_template() {
        let d = deployment("web:2");
        let got = select(
            &d,
            vec![
                rs("web-a", "web:1", "1", "d-1", "2026-01-01T00:00:00Z"),
                rs("web-b", "web:2", "2", "d-1", "2026-01-02T00:00:00Z"),
                rs("web-c", "web:3", "3", "d-1", "2026-01-03T00:00:00Z"),
                rs(
                    "stranger",
                    "web:2",
                    "9",
                    "other-uid",
                    "2026-01-01T00:00:00Z",
                ),
            ],
        );
        assert_eq!(got.new.as_ref().unwrap().name, "web-b");
        assert_eq!(got.new.as_ref().unwrap().images, ["web:2"]);
        let old: Vec<(&str, i64)> = got
            .old
            .iter()
            .map(|r| (r.name.as_str(), r.revision))
            .collect();
        assert_eq!(
            old,
            [("web-c", 3), ("web-a", 1)],
            "the stranger is not ours"
        );
        assert_eq!(got.previous().unwrap().name, "web-c");
        assert_eq!(got.revision(1).unwrap().name, "web-a");
        assert_eq!(selector(&d), "app=web");
    }

    #[test]
    fn duplicates_resolve_to_the_oldest_and_no_match_means_not_created_yet() {
        let d = deployment("web:2");
        let got = select(
            &d,
            vec![
                rs("late", "web:2", "5", "d-1", "2026-01-05T00:00:00Z"),
                rs("early", "web:2", "4", "d-1", "2026-01-04T00:00:00Z"),
            ],
        );
        assert_eq!(got.new.unwrap().name, "early");
        let none = select(
            &deployment("web:9"),
            vec![rs("web-a", "web:1", "1", "d-1", "2026-01-01T00:00:00Z")],
        );
        assert!(none.new.is_none());
        assert_eq!(none.old.len(), 1);
    }

    #[test]
    fn only_the_controller_reference_counts() {
        let meta = |refs: Value| -> ObjectMeta {
            serde_json::from_value(serde_json::json!({"name": "x", "ownerReferences": refs}))
                .unwrap()
        };
        let owner = |uid: &str, controller: Option<bool>| {
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": uid, "controller": controller})
        };
        let controlled = meta(serde_json::json!([owner("d-1", Some(true))]));
        assert!(controlled_by(&controlled, "d-1"));
        assert!(!controlled_by(&controlled, "d-2"));
        for not in [Some(false), None] {
            let referenced = meta(serde_json::json!([owner("d-1", not)]));
            assert!(!controlled_by(&referenced, "d-1"), "controller: {not:?}");
        }
        let both = meta(serde_json::json!([
            owner("d-0", None),
            owner("d-1", Some(true))
        ]));
        assert_eq!(controller(&both).map(|o| o.uid.as_str()), Some("d-1"));
        assert!(controller(&meta(serde_json::json!([]))).is_none());
    }
}
