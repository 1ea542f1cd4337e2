//! Whether a kind is namespaced: a [`ScopeLookup`] passed into the pipeline keeps it pure.
//! [`BuiltinScopes`] knows the core kinds without a cluster; [`WithCrds`] adds the
//! CustomResourceDefinitions found in the same commit; the cluster's discovery supplies
//! its own lookup at sync time.

use std::collections::HashMap;

use serde_json::Value;

use super::object::Manifest;

/// Where objects of a kind live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// In a namespace.
    Namespaced,
    /// Cluster-wide.
    Cluster,
}

/// Answers the scope of `(group, kind)`, or `None` when it does not know the kind.
pub trait ScopeLookup {
    /// The scope of a kind in a group ("" is the core group).
    fn scope(&self, group: &str, kind: &str) -> Option<Scope>;
}

/// The built-in kinds of Kubernetes, enough to render without a cluster.
pub struct BuiltinScopes;

const CLUSTER_KINDS: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "ComponentStatus"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("networking.k8s.io", "IngressClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("policy", "PodSecurityPolicy"),
];

const NAMESPACED_KINDS: &[(&str, &str)] = &[
    ("", "Pod"),
    ("", "Service"),
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "ServiceAccount"),
    ("", "PersistentVolumeClaim"),
    ("", "Endpoints"),
    ("", "Event"),
    ("", "LimitRange"),
    ("", "ResourceQuota"),
    ("", "ReplicationController"),
    ("", "PodTemplate"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("apps", "ReplicaSet"),
    ("apps", "ControllerRevision"),
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("policy", "PodDisruptionBudget"),
    ("coordination.k8s.io", "Lease"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("events.k8s.io", "Event"),
];

impl ScopeLookup for BuiltinScopes {
    fn scope(&self, group: &str, kind: &str) -> Option<Scope> {
        let known = |table: &[(&str, &str)]| table.iter().any(|&(g, k)| g == group && k == kind);
        if known(CLUSTER_KINDS) {
            Some(Scope::Cluster)
        } else if known(NAMESPACED_KINDS) {
            Some(Scope::Namespaced)
        } else {
            None
        }
    }
}

/// A lookup that also knows the custom resources defined by CRDs among the manifests.
pub struct WithCrds<'a> {
    crds: HashMap<(String, String), Scope>,
    fallback: &'a dyn ScopeLookup,
}

impl<'a> WithCrds<'a> {
    /// Reads `spec.group`, `spec.names.kind` and `spec.scope` of every CRD in `manifests`.
    pub fn new(manifests: &[Manifest], fallback: &'a dyn ScopeLookup) -> Self {
        let crds = manifests
            .iter()
            .filter(|m| m.kind() == "CustomResourceDefinition")
            .filter_map(|m| {
                let spec = m.object.get("spec")?;
                let group = spec.get("group")?.as_str()?;
                let kind = spec.get("names")?.get("kind")?.as_str()?;
                let scope = match spec.get("scope").and_then(Value::as_str) {
                    Some("Cluster") => Scope::Cluster,
                    _ => Scope::Namespaced,
                };
                Some(((group.to_string(), kind.to_string()), scope))
            })
            .collect();
        WithCrds { crds, fallback }
    }
}

impl ScopeLookup for WithCrds<'_> {
    fn scope(&self, group: &str, kind: &str) -> Option<Scope> {
        self.crds
            .get(&(group.to_string(), kind.to_string()))
            .copied()
            .or_else(|| self.fallback.scope(group, kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::object::Origin;

    #[test]
    fn builtin_and_crd_scopes() {
        assert_eq!(BuiltinScopes.scope("", "Namespace"), Some(Scope::Cluster));
        assert_eq!(
            BuiltinScopes.scope("apps", "Deployment"),
            Some(Scope::Namespaced)
        );
        assert_eq!(BuiltinScopes.scope("example.com", "Widget"), None);
        let crd: Manifest = Manifest {
            decrypted: Vec::new(),
            object: serde_json::from_str(
                r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
                    "metadata":{"name":"widgets.example.com"},
                    "spec":{"group":"example.com","scope":"Cluster","names":{"kind":"Widget"}}}"#,
            )
            .unwrap(),
            origin: Origin::file("crd.yaml"),
        };
        let lookup = WithCrds::new(&[crd], &BuiltinScopes);
        assert_eq!(lookup.scope("example.com", "Widget"), Some(Scope::Cluster));
        assert_eq!(lookup.scope("", "Service"), Some(Scope::Namespaced));
    }
}
