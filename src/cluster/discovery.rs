//! Which resource serves each kind, and its scope: the cluster's discovery, read once and
//! kept until a kind is missing (a CRD may have been installed since).

use kube::api::{ApiResource, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Scope as ApiScope};

use super::ClusterError;
use crate::manifest::{BuiltinScopes, Manifest, Scope, ScopeLookup};
use crate::plan::{Resolved, UnknownKind};

/// The cluster's kinds.
pub struct ClusterKinds {
    discovery: kube::Discovery,
}

impl ClusterKinds {
    /// Runs discovery.
    ///
    /// # Errors
    /// The apiserver could not be asked.
    pub async fn discover(client: &kube::Client) -> Result<Self, ClusterError> {
        let discovery = kube::Discovery::new(client.clone())
            .run()
            .await
            .map_err(|source| ClusterError::Request {
                what: "discovery of the cluster's API resources".into(),
                source,
            })?;
        Ok(ClusterKinds { discovery })
    }

    /// The resource that serves a manifest's apiVersion and kind.
    pub fn resolve(&self, m: &Manifest) -> Option<Resolved> {
        self.resolve_kind(m.api_version(), m.kind())
    }

    /// The resource that serves an apiVersion and kind.
    pub fn resolve_kind(&self, api_version: &str, kind: &str) -> Option<Resolved> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        self.discovery
            .resolve_gvk(&gvk)
            .map(
                |(resource, caps): (ApiResource, ApiCapabilities)| Resolved {
                    resource,
                    namespaced: caps.scope == ApiScope::Namespaced,
                },
            )
    }

    /// Like [`resolve`](Self::resolve), with an error naming the manifest's origin.
    ///
    /// # Errors
    /// [`ClusterError::UnknownKind`].
    pub fn require(&self, m: &Manifest) -> Result<Resolved, ClusterError> {
        self.resolve(m)
            .ok_or_else(|| ClusterError::UnknownKind(UnknownKind::of(m)))
    }
}

impl ScopeLookup for ClusterKinds {
    fn scope(&self, group: &str, kind: &str) -> Option<Scope> {
        self.discovery
            .groups()
            .filter(|g| g.name() == group)
            .flat_map(|g| g.recommended_resources())
            .find(|(ar, _)| ar.kind == kind)
            .map(|(_, caps)| match caps.scope {
                ApiScope::Namespaced => Scope::Namespaced,
                ApiScope::Cluster => Scope::Cluster,
            })
            .or_else(|| BuiltinScopes.scope(group, kind))
    }
}
