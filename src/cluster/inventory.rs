//! The inventory: which objects an app applied (group, kind, namespace, name), with the
//! digest of what was applied and the version then observed, and the commit. Kept in the
//! cluster as the ConfigMap `berth-inventory-<app>`, so another host or a reinstall sees it.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::apply::observed;
use super::discovery::Resolved;
use super::ClusterError;
use crate::manifest::{Manifest, ObjectKey, LABEL_APP};

/// Annotation: `"false"` keeps an object when git no longer holds it.
pub const ANNOTATION_PRUNE: &str = "berth.dev/prune";
const DATA_KEY: &str = "inventory.json";

/// One applied object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The object.
    #[serde(flatten)]
    pub key: ObjectKey,
    /// Its apiVersion, to find its resource when pruning.
    pub api_version: String,
    /// SHA-256 of the applied manifest.
    pub digest: String,
    /// Generation or resourceVersion seen right after applying it.
    pub observed: String,
}

/// The objects of an app, as of its last (partly) successful sync.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    /// The commit last applied in full.
    pub commit: Option<String>,
    /// The objects.
    pub objects: Vec<Entry>,
    /// Set when a commit's rollout failed (rolled back or halted): berth leaves the app
    /// alone until another commit arrives or a sync is forced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<Held>,
}

/// Why an app is held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// The commit not to apply again.
    pub commit: String,
    /// What happened to it.
    pub reason: String,
}

impl Inventory {
    /// Why commit `sha` is held, when it is: a held app skips only the commit it was held
    /// at; a new commit is applied. `berth sync` and `berth plan` both ask this.
    pub fn held_at(&self, sha: &str) -> Option<&Held> {
        self.held.as_ref().filter(|h| h.commit == sha)
    }

    /// The entries by object.
    pub fn by_key(&self) -> HashMap<&ObjectKey, &Entry> {
        self.objects.iter().map(|e| (&e.key, e)).collect()
    }
}

/// The name of an app's inventory ConfigMap.
pub fn name(app: &str) -> String {
    format!("berth-inventory-{app}")
}

/// SHA-256 of a manifest as it is applied.
pub fn digest(m: &Manifest) -> String {
    let bytes = serde_json::to_vec(&m.object).unwrap_or_default();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Reads an app's inventory; `None` when it has none yet.
///
/// # Errors
/// The request failed or the ConfigMap does not hold a readable inventory.
pub async fn load(
    client: &kube::Client,
    namespace: &str,
    app: &str,
) -> Result<Option<Inventory>, ClusterError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = api
        .get_opt(&name(app))
        .await
        .map_err(|source| ClusterError::Request {
            what: format!("reading inventory {namespace}/{}", name(app)),
            source,
        })?;
    let Some(cm) = cm else { return Ok(None) };
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(DATA_KEY))
        .map(String::as_str)
        .unwrap_or("{}");
    serde_json::from_str(text).map(Some).map_err(|e| ClusterError::Inventory {
        name: format!("{namespace}/{}", name(app)),
        message: format!("unreadable ({e}); delete it to start afresh (berth then prunes nothing until it is rebuilt)"),
    })
}

/// Writes an app's inventory (server-side apply), creating its namespace when missing.
///
/// # Errors
/// A request failed.
pub async fn store(
    client: &kube::Client,
    namespace: &str,
    app: &str,
    field_manager: &str,
    inventory: &Inventory,
) -> Result<(), ClusterError> {
    let request = |what: String| move |source| ClusterError::Request { what, source };
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces
        .get_opt(namespace)
        .await
        .map_err(request(format!("reading namespace {namespace}")))?
        .is_none()
    {
        let ns: Namespace = serde_json::from_value(
            serde_json::json!({"metadata": {"name": namespace}}),
        )
        .map_err(|e| ClusterError::Inventory {
            name: namespace.into(),
            message: e.to_string(),
        })?;
        match namespaces.create(&PostParams::default(), &ns).await {
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            other => {
                other.map_err(request(format!("creating namespace {namespace}")))?;
            }
        }
    }
    let data = serde_json::to_string(inventory).map_err(|e| ClusterError::Inventory {
        name: name(app),
        message: e.to_string(),
    })?;
    let cm = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name(app),
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "berth", "berth.dev/inventory": app},
        },
        "data": {DATA_KEY: data},
    });
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .patch(
            &name(app),
            &PatchParams::apply(field_manager).force(),
            &Patch::Apply(&cm),
        )
        .await
        .map_err(request(format!(
            "writing inventory {namespace}/{}",
            name(app)
        )))?;
    Ok(())
}

/// What berth sees of a live object it owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveObject {
    /// See [`observed`].
    pub observed: String,
    /// `berth.dev/prune: "false"` is set.
    pub keep: bool,
}

/// Every object of the given resources that carries `berth.dev/app=<app>`: one list
/// request (metadata only) per resource and namespace — per namespace, so that an
/// identity with namespaced Roles only (least privilege) can run berth.
///
/// # Errors
/// A list request failed.
pub async fn live_objects(
    client: &kube::Client,
    resources: impl IntoIterator<Item = (Resolved, Option<String>)>,
    app: &str,
) -> Result<HashMap<ObjectKey, LiveObject>, ClusterError> {
    let mut unique: BTreeMap<(String, String, Option<String>), Resolved> = BTreeMap::new();
    for (r, ns) in resources {
        let ns = ns.filter(|_| r.namespaced);
        unique
            .entry((r.resource.group.clone(), r.resource.kind.clone(), ns))
            .or_insert(r);
    }
    let selector = ListParams::default().labels(&format!("{LABEL_APP}={app}"));
    let mut live = HashMap::new();
    for ((_, _, ns), r) in unique {
        let api: Api<kube::api::DynamicObject> = match &ns {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &r.resource),
            None => Api::all_with(client.clone(), &r.resource),
        };
        let list = api
            .list_metadata(&selector)
            .await
            .map_err(|source| ClusterError::Request {
                what: format!(
                    "listing {} labelled {LABEL_APP}={app}{}",
                    r.resource.plural,
                    ns.map(|n| format!(" in {n}")).unwrap_or_default()
                ),
                source,
            })?;
        for item in list.items {
            live.insert(key_of(&r, &item), live_object(&item));
        }
    }
    Ok(live)
}

fn key_of(r: &Resolved, item: &PartialObjectMeta<kube::api::DynamicObject>) -> ObjectKey {
    ObjectKey {
        group: r.resource.group.clone(),
        kind: r.resource.kind.clone(),
        namespace: item.metadata.namespace.clone().filter(|_| r.namespaced),
        name: item.metadata.name.clone().unwrap_or_default(),
    }
}

fn live_object(item: &PartialObjectMeta<kube::api::DynamicObject>) -> LiveObject {
    LiveObject {
        observed: observed(&item.metadata),
        keep: item
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_PRUNE))
            .is_some_and(|v| v == "false"),
    }
}
