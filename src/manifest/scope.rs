//! Whether a kind is namespaced: a [`ScopeLookup`] passed into the pipeline keeps it pure.
//! [`BuiltinScopes`] knows the core kinds without a cluster; the cluster's discovery
//! supplies its own lookup at sync time; [`WithCrds`] adds the kinds that the
//! CustomResourceDefinitions of the same commit define and nobody serves yet. A commit's
//! CRD never changes how a kind the server (or Kubernetes itself) serves is classified:
//! [`CrdGuard`] refuses one that tries.

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

/// The API groups Kubernetes serves itself: no CustomResourceDefinition may define a kind
/// in one (the API server would not serve it, but berth must not believe it either).
const NATIVE_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "extensions",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// Whether Kubernetes serves `group` itself.
pub fn is_native_group(group: &str) -> bool {
    NATIVE_GROUPS.contains(&group)
}

/// What a CustomResourceDefinition says it defines: its group, kind and scope.
fn defined(m: &Manifest) -> Option<(&str, &str, Scope)> {
    if m.kind() != "CustomResourceDefinition" {
        return None;
    }
    let spec = m.object.get("spec")?;
    let group = spec.get("group")?.as_str()?;
    let kind = spec.get("names")?.get("kind")?.as_str()?;
    let scope = match spec.get("scope").and_then(Value::as_str) {
        Some("Cluster") => Scope::Cluster,
        _ => Scope::Namespaced,
    };
    Some((group, kind, scope))
}

/// Refuses a CustomResourceDefinition that would define a kind in a group Kubernetes
/// serves itself, or give a kind the server already serves another scope: the scope
/// decides what an app may write, so it comes from the server alone.
pub struct CrdGuard<'a> {
    /// The server's (or the built-in) kinds.
    pub served: &'a dyn ScopeLookup,
}

impl super::visitor::Decorator for CrdGuard<'_> {
    fn decorate(&self, m: &mut Manifest) -> Result<(), super::error::ManifestError> {
        let Some((group, kind, scope)) = defined(m) else {
            return Ok(());
        };
        let rule = if is_native_group(group) {
            format!("{group:?} is a group Kubernetes serves itself, and a CustomResourceDefinition may not define a kind in it")
        } else {
            match self.served.scope(group, kind) {
                Some(served) if served != scope => format!(
                    "the cluster serves {kind} as {}; a CustomResourceDefinition in a commit never changes a served kind's scope",
                    served.describe()
                ),
                _ => return Ok(()),
            }
        };
        Err(super::error::ManifestError::Invalid {
            origin: m.origin.clone(),
            message: format!(
                "CustomResourceDefinition {} defines {kind} ({}) in {group:?}: refused, {rule}",
                m.name(),
                scope.describe()
            ),
        })
    }
}

impl Scope {
    /// `namespaced` or `cluster-scoped`.
    pub fn describe(self) -> &'static str {
        match self {
            Scope::Namespaced => "namespaced",
            Scope::Cluster => "cluster-scoped",
        }
    }
}

/// A lookup that also knows the custom resources defined by CRDs among the manifests,
/// for kinds the fallback does not know (and in no group Kubernetes serves itself): what
/// the server says always wins.
pub struct WithCrds<'a> {
    crds: HashMap<(String, String), Scope>,
    fallback: &'a dyn ScopeLookup,
}

impl<'a> WithCrds<'a> {
    /// Reads `spec.group`, `spec.names.kind` and `spec.scope` of every CRD in `manifests`
    /// (the objects the app keeps: an ignored or filtered CRD defines nothing).
    pub fn new(manifests: &[Manifest], fallback: &'a dyn ScopeLookup) -> Self {
        let crds = manifests
            .iter()
            .filter_map(defined)
            .filter(|(group, _, _)| !is_native_group(group))
            .map(|(group, kind, scope)| ((group.to_string(), kind.to_string()), scope))
            .collect();
        WithCrds { crds, fallback }
    }
}

impl ScopeLookup for WithCrds<'_> {
    fn scope(&self, group: &str, kind: &str) -> Option<Scope> {
        self.fallback.scope(group, kind).or_else(|| {
            self.crds
                .get(&(group.to_string(), kind.to_string()))
                .copied()
        })
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

    fn crd(group: &str, kind: &str, scope: &str) -> Manifest {
        Manifest {
            decrypted: Vec::new(),
            object: serde_json::json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{}s.{group}", kind.to_lowercase())},
                "spec": {"group": group, "scope": scope, "names": {"kind": kind}},
            })
            .as_object()
            .cloned()
            .unwrap(),
            origin: Origin::file("crd.yaml"),
        }
    }

    #[test]
    fn a_commits_crd_never_changes_a_served_or_native_kinds_scope() {
        use crate::manifest::visitor::Decorator;
        let spoof = crd(
            "rbac.authorization.k8s.io",
            "ClusterRoleBinding",
            "Namespaced",
        );
        let lookup = WithCrds::new(std::slice::from_ref(&spoof), &BuiltinScopes);
        assert_eq!(
            lookup.scope("rbac.authorization.k8s.io", "ClusterRoleBinding"),
            Some(Scope::Cluster)
        );
        // A kind of a native group nobody serves is not defined by a CRD either.
        let invented = crd("apps", "Gadget", "Namespaced");
        let lookup = WithCrds::new(std::slice::from_ref(&invented), &BuiltinScopes);
        assert_eq!(lookup.scope("apps", "Gadget"), None);
        let guard = CrdGuard {
            served: &BuiltinScopes,
        };
        let e = guard.decorate(&mut spoof.clone()).unwrap_err().to_string();
        assert_eq!(e, "crd.yaml: CustomResourceDefinition clusterrolebindings.rbac.authorization.k8s.io defines ClusterRoleBinding (namespaced) in \"rbac.authorization.k8s.io\": refused, \"rbac.authorization.k8s.io\" is a group Kubernetes serves itself, and a CustomResourceDefinition may not define a kind in it");
        // A served custom kind keeps its scope; the same scope again is the app's CRD.
        let served = WithCrds::new(&[crd("example.com", "Widget", "Cluster")], &BuiltinScopes);
        let guard = CrdGuard { served: &served };
        let e = guard
            .decorate(&mut crd("example.com", "Widget", "Namespaced"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the cluster serves Widget as cluster-scoped"),
            "{e}"
        );
        guard
            .decorate(&mut crd("example.com", "Widget", "Cluster"))
            .unwrap();
        // Gateway API's CRDs live under k8s.io without being native.
        guard
            .decorate(&mut crd(
                "gateway.networking.k8s.io",
                "Gateway",
                "Namespaced",
            ))
            .unwrap();
    }
}
