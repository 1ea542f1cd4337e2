//! Which resource serves each kind, and its scope: the cluster's discovery, read once per
//! agent ([`SharedKinds`]) and read again when a sync meets a kind it does not know (a CRD
//! may have been installed since), after a CRD is applied, or when older than
//! [`MAX_AGE`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{ApiResource, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Scope as ApiScope};

use super::ClusterError;
use crate::manifest::{BuiltinScopes, Manifest, Scope, ScopeLookup};
use crate::plan::{Resolved, UnknownKind};

/// Discovery is read again when older than this.
pub const MAX_AGE: Duration = Duration::from_secs(300);

/// The cluster's kinds as last discovered, shared by every sync of an agent: one
/// discovery (about 40 requests on a bare cluster) instead of one per sync.
pub struct SharedKinds {
    client: kube::Client,
    last: tokio::sync::Mutex<Option<(Arc<ClusterKinds>, Instant)>>,
}

impl SharedKinds {
    /// Nothing discovered yet.
    pub fn new(client: kube::Client) -> Self {
        SharedKinds {
            client,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The kinds, discovered at `newer_than` or later when given (a sync that met an
    /// unknown kind, or applied a CRD, passes when it started or now). Syncs asking at once
    /// share one discovery.
    ///
    /// # Errors
    /// The apiserver could not be asked.
    pub async fn get(
        &self,
        newer_than: Option<Instant>,
    ) -> Result<(Arc<ClusterKinds>, Instant), ClusterError> {
        let mut last = self.last.lock().await;
        if let Some((kinds, at)) = last.as_ref() {
            let fresh = newer_than.map_or(at.elapsed() < MAX_AGE, |t| *at >= t);
            if fresh {
                return Ok((kinds.clone(), *at));
            }
        }
        let at = Instant::now();
        let kinds = Arc::new(ClusterKinds::discover(&self.client).await?);
        *last = Some((kinds.clone(), at));
        Ok((kinds, at))
    }
}

/// The cluster's kinds.
pub struct ClusterKinds {
    discovery: kube::Discovery,
    /// The API server's version (`v1.20.2`), when it said.
    version: Option<String>,
    /// [`api_versions`](Self::api_versions), made once per discovery.
    api_versions: std::sync::OnceLock<Arc<[String]>>,
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
                cause: source,
            })?;
        let version = client.apiserver_version().await.ok().map(|v| v.git_version);
        Ok(ClusterKinds {
            discovery,
            version,
            api_versions: std::sync::OnceLock::new(),
        })
    }

    /// The API server's version (`v1.20.2`), when it said.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// Every `group/version` the cluster serves, and every `group/version/Kind`: a chart's
    /// `.Capabilities.APIVersions` (made once per discovery, shared by every app's render).
    pub fn api_versions(&self) -> Arc<[String]> {
        self.api_versions
            .get_or_init(|| {
                let mut all = std::collections::BTreeSet::new();
                for group in self.discovery.groups() {
                    for version in group.versions() {
                        for (resource, _) in group.versioned_resources(version) {
                            all.insert(format!("{}/{}", resource.api_version, resource.kind));
                            all.insert(resource.api_version);
                        }
                    }
                }
                all.into_iter().collect()
            })
            .clone()
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
            .ok_or_else(|| ClusterError::UnknownKind(Box::new(self.explain(UnknownKind::of(m)))))
    }

    /// `e`, saying why the cluster does not serve its kind: for a group Kubernetes serves
    /// itself, the server's version and the versions of that kind it does serve; for any
    /// other group (a CRD's, Gateway API's `gateway.networking.k8s.io` among them), that
    /// its CRD may be missing.
    pub fn explain(&self, mut e: UnknownKind) -> UnknownKind {
        let group = e.api_version.rsplit_once('/').map_or("", |(g, _)| g);
        if !crate::manifest::scope::is_native_group(group) {
            return e;
        }
        let served: Vec<String> = self
            .discovery
            .groups()
            .filter(|g| g.name() == group)
            .flat_map(|g| {
                g.versions()
                    .flat_map(|v| g.versioned_resources(v))
                    .filter(|(r, _)| r.kind == e.kind)
                    .map(|(r, _)| r.api_version)
                    .collect::<Vec<_>>()
            })
            .collect();
        let server = match &self.version {
            Some(v) => format!("this cluster (Kubernetes {v})"),
            None => "this cluster".to_string(),
        };
        e.why = if served.is_empty() {
            format!("{server} serves no {} in any version", e.kind)
        } else {
            format!(
                "{server} serves {} only in {}: write that apiVersion (and the fields it has)",
                e.kind,
                served.join(", ")
            )
        };
        e
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
