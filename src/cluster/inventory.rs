//! The inventory: which objects an app applied (group, kind, namespace, name), with the
//! digest of what was applied and the version then observed, and the commit. Kept in the
//! cluster as the ConfigMap `berth-inventory-<app>`, so another host or a reinstall sees it.
//! Its data types are the plan's ([`crate::plan::Inventory`]); here it is read, written and
//! held against the live objects.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;

use super::apply::observed;
use super::ClusterError;
use crate::manifest::{ObjectKey, LABEL_APP};
use crate::plan::{Inventory, LiveObject, Resolved};

/// Annotation: `"false"` keeps an object when git no longer holds it.
pub const ANNOTATION_PRUNE: &str = "berth.dev/prune";
const DATA_KEY: &str = "inventory.json";

/// The name of an app's inventory ConfigMap.
pub fn name(app: &str) -> String {
    format!("berth-inventory-{app}")
}

/// An inventory as the cluster holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The inventory.
    pub inventory: Inventory,
    /// The ConfigMap's resourceVersion, the precondition of the next write.
    pub version: String,
}

/// Reads an app's inventory; `None` when it has none yet.
///
/// # Errors
/// The request failed or the ConfigMap does not hold a readable inventory.
pub async fn load(
    client: &kube::Client,
    namespace: &str,
    app: &str,
) -> Result<Option<Stored>, ClusterError> {
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
    let inventory = serde_json::from_str(text).map_err(|e| ClusterError::Inventory {
        name: format!("{namespace}/{}", name(app)),
        message: format!("unreadable ({e}); delete it to start afresh (berth then prunes nothing until it is rebuilt)"),
    })?;
    Ok(Some(Stored {
        inventory,
        version: cm.metadata.resource_version.unwrap_or_default(),
    }))
}

/// Writes an app's inventory (server-side apply), creating its namespace when missing;
/// returns the new resourceVersion. With `version`, the write is refused (409) when the
/// ConfigMap changed since: another writer's inventory is never overwritten.
///
/// # Errors
/// A request failed; [`ClusterError::InventoryChanged`] for a changed ConfigMap.
pub async fn store(
    client: &kube::Client,
    namespace: &str,
    app: &str,
    field_manager: &str,
    inventory: &Inventory,
    version: Option<&str>,
) -> Result<String, ClusterError> {
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
    let mut cm = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name(app),
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "berth", "berth.dev/inventory": app},
        },
        "data": {DATA_KEY: data},
    });
    if let Some(v) = version {
        cm["metadata"]["resourceVersion"] = v.into();
    }
    let what = format!("writing inventory {namespace}/{}", name(app));
    let written = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .patch(
            &name(app),
            &PatchParams::apply(field_manager).force(),
            &Patch::Apply(&cm),
        )
        .await
        .map_err(|source| match source {
            kube::Error::Api(s) if s.code == 409 || (s.code == 404 && version.is_some()) => {
                ClusterError::InventoryChanged(what.clone())
            }
            source => ClusterError::Request {
                what: what.clone(),
                source,
            },
        })?;
    Ok(written.metadata.resource_version.unwrap_or_default())
}

/// The local copy of an app's inventory (`state_dir/inventory/<app>.json`), written after
/// each successful write to the cluster: the fallback when the ConfigMap is deleted or
/// made unreadable by hand.
pub fn local_path(state_dir: &Path, app: &str) -> PathBuf {
    state_dir.join("inventory").join(format!("{app}.json"))
}

/// Reads the local copy; `None` when there is none or it cannot be read.
pub fn load_local(state_dir: &Path, app: &str) -> Option<Inventory> {
    let text = std::fs::read(local_path(state_dir, app)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Replaces the local copy (a temporary file renamed over it).
///
/// # Errors
/// The file cannot be written.
pub fn store_local(state_dir: &Path, app: &str, inventory: &Inventory) -> std::io::Result<()> {
    let path = local_path(state_dir, app);
    let dir = path.parent().unwrap_or(state_dir);
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{app}.json.tmp"));
    std::fs::write(
        &tmp,
        serde_json::to_vec(inventory).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(&tmp, &path)
}

/// A resource and namespace with at most this many of the app's objects is read object
/// by object; with more, one list. A list filters every object of its kind in the
/// namespace, so with many apps sharing a namespace, lists cost the API server the square
/// of the apps (500 apps of 4 objects in one namespace: each list reads 500 objects).
const GET_AT_MOST: usize = 16;

/// Every object among `wanted` (resource, namespace, name) that carries
/// `berth.dev/app=<app>`. Per resource and namespace: a few objects are read by name
/// (metadata only), more with one list request filtered by the label — per namespace, so
/// that an identity with namespaced Roles only (least privilege) can run berth.
///
/// # Errors
/// A request failed.
pub async fn live_objects(
    client: &kube::Client,
    wanted: impl IntoIterator<Item = (Resolved, Option<String>, String)>,
    app: &str,
) -> Result<HashMap<ObjectKey, LiveObject>, ClusterError> {
    type Group = (Resolved, BTreeSet<String>);
    let mut groups: BTreeMap<(String, String, Option<String>), Group> = BTreeMap::new();
    for (r, ns, name) in wanted {
        let ns = ns.filter(|_| r.namespaced);
        let key = (r.resource.group.clone(), r.resource.kind.clone(), ns);
        groups
            .entry(key)
            .or_insert_with(|| (r, BTreeSet::new()))
            .1
            .insert(name);
    }
    let label = format!("{LABEL_APP}={app}");
    let mut live = HashMap::new();
    for ((_, _, ns), (r, names)) in groups {
        let api: Api<kube::api::DynamicObject> = match &ns {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &r.resource),
            None => Api::all_with(client.clone(), &r.resource),
        };
        let failed = |source| ClusterError::Request {
            what: format!(
                "reading {} labelled {label}{}",
                r.resource.plural,
                ns.as_deref()
                    .map(|n| format!(" in {n}"))
                    .unwrap_or_default()
            ),
            source,
        };
        let items = if names.len() <= GET_AT_MOST {
            let mut items = Vec::new();
            for name in &names {
                let item = api.get_metadata_opt(name).await.map_err(failed)?;
                items.extend(item.filter(|i| {
                    i.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(LABEL_APP))
                        .is_some_and(|v| v == app)
                }));
            }
            items
        } else {
            let selector = ListParams::default().labels(&label);
            api.list_metadata(&selector).await.map_err(failed)?.items
        };
        for item in items {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Entry;

    #[test]
    fn the_local_copy_round_trips_and_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load_local(dir.path(), "shop"), None);
        let mut inv = Inventory {
            commit: Some("c1".into()),
            ..Inventory::default()
        };
        inv.objects.push(Entry {
            key: ObjectKey {
                group: String::new(),
                kind: "ConfigMap".into(),
                namespace: Some("shop".into()),
                name: "a".into(),
            },
            api_version: "v1".into(),
            digest: "d".into(),
            observed: "1".into(),
        });
        store_local(dir.path(), "shop", &inv).unwrap();
        assert_eq!(load_local(dir.path(), "shop"), Some(inv.clone()));
        inv.objects.clear();
        store_local(dir.path(), "shop", &inv).unwrap();
        assert_eq!(load_local(dir.path(), "shop"), Some(inv));
        std::fs::write(local_path(dir.path(), "shop"), "{torn").unwrap();
        assert_eq!(load_local(dir.path(), "shop"), None, "unreadable: no copy");
    }
}
