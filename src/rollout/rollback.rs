//! Rollback: restore an earlier revision's pod template, taken from its ReplicaSet (as
//! `kubectl rollout undo` does), by server-side applying the Deployment as berth applies
//! it with that template — the same field manager, so git's next commit rolls forward
//! without a conflict.

use serde_json::Value;

use super::hash::without_hash_label;
use super::revisions::ReplicaSetInfo;
use crate::manifest::Manifest;

/// The Deployment manifest with `target`'s template (its pod-template-hash label removed).
pub fn manifest(deployment: &Manifest, target: &ReplicaSetInfo) -> Manifest {
    let mut m = deployment.clone();
    let template = without_hash_label(&target.template);
    if let Some(spec) = m.object.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("template".into(), template);
    }
    m
}

/// "rolled back Deployment shop/web from revision 3 to 2 (commit abc1234)".
pub fn message(deployment: &str, from: Option<i64>, to: i64, commit: Option<&str>) -> String {
    let from = from
        .map(|r| format!(" from revision {r}"))
        .unwrap_or_default();
    let commit = commit
        .map(|c| format!(" (commit {})", crate::source::short(c)))
        .unwrap_or_default();
    format!("rolled back Deployment {deployment}{from} to {to}{commit}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Origin;

    #[test]
    fn the_template_is_replaced_and_the_rest_kept() {
        let d = Manifest {
            decrypted: Vec::new(),
            object: serde_json::from_value(serde_json::json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "w", "image": "bad"}]}}}
            }))
            .unwrap(),
            origin: Origin::file("web.yaml"),
        };
        let target = ReplicaSetInfo {
            name: "web-abc".into(),
            revision: 2,
            hash: String::new(),
            images: vec!["good".into()],
            replicas: 0,
            current: 0,
            ready: 0,
            available: 0,
            created: None,
            template: serde_json::json!({"metadata": {"labels": {"app": "web", "pod-template-hash": "abc"}},
                "spec": {"containers": [{"name": "w", "image": "good"}]}}),
        };
        let m = manifest(&d, &target);
        assert_eq!(m.object["spec"]["replicas"], 3);
        assert_eq!(
            m.object["spec"]["template"]["spec"]["containers"][0]["image"],
            "good"
        );
        assert!(m.object["spec"]["template"]["metadata"]["labels"]
            .get("pod-template-hash")
            .is_none());
        assert_eq!(
            message("shop/web", Some(3), 2, Some("abc1234def")),
            "rolled back Deployment shop/web from revision 3 to 2 (commit abc1234)"
        );
    }
}
