//! [`Confine`]: the decorator that keeps an app inside its scope (`[app.scope]`) and away
//! from berth's own state, whatever its scope. It runs in the render, after namespaces are
//! set, so a refused object stops the sync before the dry run and nothing is written.
//!
//! berth's own state: the namespace that holds the inventories and Leases
//! (`agent.inventory_namespace`), every inventory ConfigMap (`berth-inventory-*`) and every
//! Lease in it. Taking the leader Lease or rewriting another app's inventory would let one
//! repository stop or steer every other app.

use globset::GlobSet;

use super::error::ManifestError;
use super::object::{Manifest, ObjectKey};
use super::scope::{Scope, ScopeLookup};
use super::visitor::Decorator;
use crate::config::{compile_globs, AgentConfig, AppConfig};

/// Where one app may write.
#[derive(Debug, Clone)]
pub struct Confinement {
    namespaces: Option<GlobSet>,
    /// The globs as written, for messages.
    shown: Vec<String>,
    cluster_kinds: Vec<String>,
    /// berth's namespace: its inventories and Leases.
    reserved: String,
}

impl Confinement {
    /// The app's `[app.scope]`, with the agent's namespace reserved.
    ///
    /// # Errors
    /// A namespace glob that does not compile.
    pub fn for_app(app: &AppConfig, agent: &AgentConfig) -> Result<Self, globset::Error> {
        let shown = app.scope_namespaces();
        Ok(Confinement {
            namespaces: compile_globs(&shown)?,
            shown,
            cluster_kinds: app.scope.cluster_kinds.clone(),
            reserved: agent.inventory_namespace.clone(),
        })
    }

    fn namespace_allowed(&self, ns: &str) -> bool {
        self.namespaces.as_ref().is_some_and(|g| g.is_match(ns))
    }

    fn kind_allowed(&self, kind: &str) -> bool {
        self.cluster_kinds.iter().any(|k| k == "*" || k == kind)
    }

    /// Why the object `key` (of a kind whose scope is `scope`) may not be written, if it
    /// may not.
    fn refusal(&self, key: &ObjectKey, scope: Option<Scope>) -> Option<String> {
        let (kind, name) = (key.kind.as_str(), key.name.as_str());
        if is_berths_own(key, &self.reserved) {
            return Some(format!(
                "is berth's own state (agent.inventory_namespace {:?} holds the inventories and Leases); no app may write it",
                self.reserved
            ));
        }
        match (key.namespace.as_deref(), scope) {
            (Some(ns), _) if !self.namespace_allowed(ns) => Some(format!(
                "is in namespace {ns:?}, outside the app's scope ([app.scope] namespaces = {:?})",
                self.shown
            )),
            (None, Some(Scope::Cluster)) => {
                let namespace = key.group.is_empty() && kind == "Namespace";
                let own_namespace = namespace && self.namespace_allowed(name);
                (!own_namespace && !self.kind_allowed(kind)).then(|| match namespace {
                    // The narrow fix: this namespace, not every one.
                    true => format!(
                        "is a namespace outside the app's scope (add {name:?} to [app.scope] namespaces to allow it)"
                    ),
                    false => format!(
                        "is cluster-scoped, outside the app's scope (add {kind:?} to [app.scope] cluster_kinds to allow it)"
                    ),
                })
            }
            _ => None,
        }
    }

    /// Why the app may not delete the object `key` (one its inventory lists), if it may
    /// not: outside its scope as it is now, or berth's own state. Every deletion of an
    /// app's objects asks this first (the prune step: a commit's prune, an app removed, a
    /// rename's leftovers).
    pub fn refuses_deleting(&self, key: &ObjectKey) -> Option<String> {
        let scope = if key.namespace.is_some() {
            Scope::Namespaced
        } else {
            Scope::Cluster
        };
        self.refusal(key, Some(scope))
    }
}

/// Whether `key` is berth's own state, with its inventories and Leases in `reserved`
/// (`agent.inventory_namespace`): that namespace, an inventory ConfigMap, a Lease.
pub fn is_berths_own(key: &ObjectKey, reserved: &str) -> bool {
    let (kind, name) = (key.kind.as_str(), key.name.as_str());
    match key.namespace.as_deref() {
        None => kind == "Namespace" && key.group.is_empty() && name == reserved,
        Some(ns) => {
            ns == reserved
                && ((kind == "ConfigMap"
                    && key.group.is_empty()
                    && name.starts_with("berth-inventory-"))
                    || (kind == "Lease" && key.group == "coordination.k8s.io"))
        }
    }
}

/// Refuses objects outside the app's [`Confinement`]. Kinds whose scope is unknown are
/// left to the plan, which refuses them.
pub struct Confine<'a> {
    /// Where the app may write.
    pub confinement: &'a Confinement,
    /// Who knows each kind's scope.
    pub scopes: &'a dyn ScopeLookup,
}

impl Decorator for Confine<'_> {
    fn decorate(&self, m: &mut Manifest) -> Result<(), ManifestError> {
        let scope = self.scopes.scope(m.group(), m.kind());
        match self.confinement.refusal(&m.key(), scope) {
            Some(why) => Err(ManifestError::Refused {
                origin: m.origin.clone(),
                object: m.key().to_string(),
                why,
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::object::Origin;
    use crate::manifest::BuiltinScopes;

    fn manifest(text: &str) -> Manifest {
        let value: serde_json::Value = serde_yaml::from_str(text).unwrap();
        Manifest {
            decrypted: Vec::new(),
            object: value.as_object().unwrap().clone(),
            origin: Origin {
                line: 1,
                ..Origin::file("app.yaml")
            },
        }
    }

    /// Why the object of `text` is refused for an app of `app_extra`, if it is.
    fn refusal(app_extra: &str, text: &str) -> Option<String> {
        let app: AppConfig = toml::from_str(&format!(
            "name = \"guestbook\"\nrepo = \"/r\"\nnamespace = \"guestbook\"\n{app_extra}"
        ))
        .unwrap();
        let confinement = Confinement::for_app(&app, &AgentConfig::default()).unwrap();
        Confine {
            confinement: &confinement,
            scopes: &BuiltinScopes,
        }
        .decorate(&mut manifest(text))
        .err()
        .map(|e| e.to_string())
    }

    const CM_IN: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: NS}\n";

    #[test]
    fn the_default_scope_is_the_apps_own_namespace() {
        assert_eq!(refusal("", &CM_IN.replace("NS", "guestbook")), None);
        assert_eq!(
            refusal("", &CM_IN.replace("NS", "kube-system")),
            Some("app.yaml:1: ConfigMap kube-system/c is in namespace \"kube-system\", outside the app's scope ([app.scope] namespaces = [\"guestbook\"]); refused".into())
        );
        let ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: guestbook}\n";
        assert_eq!(refusal("", ns), None, "its own Namespace");
        assert_eq!(
            refusal("", &ns.replace("guestbook", "shop")),
            Some("app.yaml:1: Namespace shop is a namespace outside the app's scope (add \"shop\" to [app.scope] namespaces to allow it); refused".into()),
            "the narrow fix, not cluster_kinds = [\"Namespace\"]"
        );
        let crb = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: admin}\n";
        assert_eq!(
            refusal("", crb),
            Some("app.yaml:1: ClusterRoleBinding admin is cluster-scoped, outside the app's scope (add \"ClusterRoleBinding\" to [app.scope] cluster_kinds to allow it); refused".into())
        );
        let scope =
            "[scope]\nnamespaces = [\"team-*\"]\ncluster_kinds = [\"ClusterRoleBinding\"]\n";
        assert_eq!(refusal(scope, crb), None);
        assert_eq!(refusal(scope, &CM_IN.replace("NS", "team-a")), None);
        assert!(refusal(scope, &CM_IN.replace("NS", "guestbook")).is_some());
    }

    #[test]
    fn berths_own_state_is_refused_whatever_the_scope() {
        let open = "[scope]\nnamespaces = [\"*\"]\ncluster_kinds = [\"*\"]\n";
        let lease = "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: berth, namespace: berth-system}\nspec: {holderIdentity: attacker}\n";
        let inventory = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: berth-inventory-other, namespace: berth-system}\n";
        let namespace = "apiVersion: v1\nkind: Namespace\nmetadata: {name: berth-system}\n";
        for text in [lease, inventory, namespace] {
            let e = refusal(open, text).unwrap();
            assert!(e.contains("is berth's own state"), "{e}");
        }
        assert_eq!(refusal(open, &CM_IN.replace("NS", "berth-system")), None);
    }
}
