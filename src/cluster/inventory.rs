//! The inventory: which objects an app applied (group, kind, namespace, name), with the
//! digest of what was applied and the version then observed, and the commit. Kept in the
//! cluster as the ConfigMap `berth-inventory-<app>`, so another host or a reinstall sees it.
//! Its data types are the plan's ([`crate::plan::Inventory`]); here it is read, written and
//! held against the live objects.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

use super::ClusterError;
use crate::plan::Inventory;

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
    /// The version read, the precondition of the next write.
    pub version: Version,
}

/// What a write needs to know of the inventory it replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The head ConfigMap's resourceVersion: the next write is refused when it changed.
    pub resource_version: String,
    /// The inventory was split over parts, which a smaller one leaves behind to delete.
    pub parted: bool,
}

/// The most inventory text one ConfigMap holds. A ConfigMap (like every object) must stay
/// under etcd's 1.5 MiB request limit, and the API server refuses data over 1 MiB; an
/// entry is ~150 bytes, so one ConfigMap holds about 5000 objects and a larger inventory
/// is split over parts.
const PART_BYTES: usize = 768 * 1024;
/// The head's key listing its parts, one name a line, when the inventory is split.
const PARTS_KEY: &str = "parts";
/// The head's key holding the SHA-256 of the whole text, checked when the parts are joined.
const DIGEST_KEY: &str = "digest";
/// Label of a part: the app whose inventory it holds a piece of.
const LABEL_PART: &str = "berth.dev/inventory-part";

/// Reads an app's inventory; `None` when it has none yet.
///
/// # Errors
/// The request failed or the ConfigMap does not hold a readable inventory (also: a part
/// is missing or does not match the head's digest).
pub async fn load(
    client: &kube::Client,
    namespace: &str,
    app: &str,
) -> Result<Option<Stored>, ClusterError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let read = |name: String| {
        let api = api.clone();
        async move {
            api.get_opt(&name)
                .await
                .map_err(|source| ClusterError::Request {
                    what: format!("reading inventory {namespace}/{name}"),
                    cause: source,
                })
        }
    };
    let Some(cm) = read(name(app)).await? else {
        return Ok(None);
    };
    let unreadable = |why: String| ClusterError::Inventory {
        name: format!("{namespace}/{}", name(app)),
        message: format!(
            "{why}; delete it to start afresh (berth then prunes nothing until it is rebuilt)"
        ),
    };
    let data = cm.data.unwrap_or_default();
    let parts: Vec<&str> = data
        .get(PARTS_KEY)
        .map_or_else(Vec::new, |p| p.lines().collect());
    let text = if parts.is_empty() {
        data.get(DATA_KEY).cloned().unwrap_or_else(|| "{}".into())
    } else {
        let mut text = String::new();
        for part in &parts {
            let piece = read((*part).to_owned())
                .await?
                .and_then(|p| p.data)
                .and_then(|mut d| d.remove(DATA_KEY))
                .ok_or_else(|| unreadable(format!("its part {part} is missing")))?;
            text.push_str(&piece);
        }
        if data.get(DIGEST_KEY) != Some(&crate::digest::sha256_hex(text.as_bytes())) {
            return Err(unreadable(format!(
                "its parts ({}) do not add up to what it was written with",
                parts.join(", ")
            )));
        }
        text
    };
    let inventory =
        serde_json::from_str(&text).map_err(|e| unreadable(format!("unreadable ({e})")))?;
    Ok(Some(Stored {
        inventory,
        version: Version {
            resource_version: cm.metadata.resource_version.unwrap_or_default(),
            parted: !parts.is_empty(),
        },
    }))
}

/// Writes an app's inventory (server-side apply), creating its namespace when missing
/// (checked only for a first write);
/// returns the new version. With `previous`, the write is refused (409) when the
/// ConfigMap changed since: another writer's inventory is never overwritten.
///
/// An inventory over `PART_BYTES` (768 KiB) is split: the parts are written first (named by the
/// digest of the whole, so a part is never changed in place), then the head that lists
/// them — the one write that makes the new inventory current — then the parts no head
/// lists any more are deleted.
///
/// # Errors
/// A request failed; [`ClusterError::InventoryChanged`] for a changed ConfigMap.
pub async fn store(
    client: &kube::Client,
    namespace: &str,
    app: &str,
    field_manager: &str,
    inventory: &Inventory,
    previous: Option<&Version>,
) -> Result<Version, ClusterError> {
    if previous.is_none() {
        // An inventory read before lives in a namespace that exists (were it deleted
        // since, the write's 404 sends the caller back to read it again, without a
        // version).
        ensure_namespace(client, namespace).await?;
    }
    let text = serde_json::to_string(inventory).map_err(|e| ClusterError::Inventory {
        name: name(app),
        message: e.to_string(),
    })?;
    let api = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let apply = PatchParams::apply(field_manager).force();
    let pieces = split(&text, PART_BYTES);
    let parted = pieces.len() > 1;
    let mut data = serde_json::Map::new();
    let mut parts = Vec::new();
    if parted {
        let digest = crate::digest::sha256_hex(text.as_bytes());
        parts = write_parts(&api, &apply, app, &digest, &pieces).await?;
        data.insert(PARTS_KEY.into(), parts.join("\n").into());
        data.insert(DIGEST_KEY.into(), digest.into());
    } else {
        data.insert(DATA_KEY.into(), text.into());
    }
    let mut cm = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name(app),
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "berth", "berth.dev/inventory": app},
        },
        "data": data,
    });
    if let Some(v) = previous {
        cm["metadata"]["resourceVersion"] = v.resource_version.clone().into();
    }
    let what = format!("writing inventory {namespace}/{}", name(app));
    let written = api
        .patch(&name(app), &apply, &Patch::Apply(&cm))
        .await
        .map_err(|source| match source {
            kube::Error::Api(s) if s.code == 409 || (s.code == 404 && previous.is_some()) => {
                ClusterError::InventoryChanged(what.clone())
            }
            source => ClusterError::Request {
                what: what.clone(),
                cause: source,
            },
        })?;
    if parted || previous.is_some_and(|v| v.parted) {
        delete_stale_parts(&api, app, &parts).await?;
    }
    Ok(Version {
        resource_version: written.metadata.resource_version.unwrap_or_default(),
        parted,
    })
}

/// `ClusterError::Request` for `what`.
fn request(what: String) -> impl FnOnce(kube::Error) -> ClusterError {
    move |cause| ClusterError::Request { what, cause }
}

/// Creates `namespace` when it does not exist.
async fn ensure_namespace(client: &kube::Client, namespace: &str) -> Result<(), ClusterError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let found = namespaces
        .get_opt(namespace)
        .await
        .map_err(request(format!("reading namespace {namespace}")))?;
    if found.is_some() {
        return Ok(());
    }
    let ns: Namespace = serde_json::from_value(
        serde_json::json!({"metadata": {"name": namespace}}),
    )
    .map_err(|e| ClusterError::Inventory {
        name: namespace.into(),
        message: e.to_string(),
    })?;
    match namespaces.create(&PostParams::default(), &ns).await {
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        other => other
            .map(drop)
            .map_err(request(format!("creating namespace {namespace}"))),
    }
}

/// Writes the parts of a split inventory, each named by the digest of the whole; returns
/// their names.
async fn write_parts(
    api: &Api<ConfigMap>,
    apply: &PatchParams,
    app: &str,
    digest: &str,
    pieces: &[&str],
) -> Result<Vec<String>, ClusterError> {
    let namespace = api.namespace().unwrap_or_default();
    let mut parts = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        let part = format!("{}-{}-{i}", name(app), &digest[..10]);
        let cm = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": part,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "berth", LABEL_PART: app},
            },
            "data": {DATA_KEY: piece},
        });
        api.patch(&part, apply, &Patch::Apply(&cm))
            .await
            .map_err(request(format!(
                "writing inventory part {namespace}/{part}"
            )))?;
        parts.push(part);
    }
    Ok(parts)
}

/// Deletes `app`'s inventory, head and parts (an app removed from the configuration whose
/// objects were pruned).
///
/// # Errors
/// A request failed (a ConfigMap already gone is no error).
pub async fn delete(client: &kube::Client, namespace: &str, app: &str) -> Result<(), ClusterError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match api.delete(&name(app), &Default::default()).await {
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        other => {
            other.map_err(request(format!(
                "deleting inventory {namespace}/{}",
                name(app)
            )))?;
        }
    }
    delete_stale_parts(&api, app, &[]).await
}

/// Deletes the parts of `app`'s inventory that the head no longer lists (`current`).
async fn delete_stale_parts(
    api: &Api<ConfigMap>,
    app: &str,
    current: &[String],
) -> Result<(), ClusterError> {
    let namespace = api.namespace().unwrap_or_default();
    let labelled = ListParams::default().labels(&format!("{LABEL_PART}={app}"));
    let stale = api
        .list_metadata(&labelled)
        .await
        .map_err(request(format!("listing inventory parts in {namespace}")))?;
    for part in stale.items.into_iter().filter_map(|p| p.metadata.name) {
        if current.contains(&part) {
            continue;
        }
        match api.delete(&part, &Default::default()).await {
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            other => {
                other.map_err(request(format!(
                    "deleting inventory part {namespace}/{part}"
                )))?;
            }
        }
    }
    Ok(())
}

/// `text` cut into pieces of at most `max` bytes, at character boundaries.
fn split(text: &str, max: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while rest.len() > max {
        let mut at = max;
        while !rest.is_char_boundary(at) {
            at -= 1;
        }
        let (piece, tail) = rest.split_at(at);
        pieces.push(piece);
        rest = tail;
    }
    pieces.push(rest);
    pieces
}

/// The local copy of an app's inventory (`state_dir/inventory/<app>.json`), written after
/// each successful write to the cluster: the fallback when the ConfigMap is deleted or
/// made unreadable by hand.
pub fn local_path(state_dir: &Path, app: &str) -> PathBuf {
    state_dir.join("inventory").join(format!("{app}.json"))
}

/// The largest local copy read: an inventory split over ConfigMaps of 768 KiB each, of
/// an app at its object cap, fits many times over.
const MAX_LOCAL: u64 = 64 << 20;

/// Reads the local copy; `None` when there is none, it cannot be read, or it is larger
/// than any inventory berth writes (`state_dir` is read as hostile).
pub fn load_local(state_dir: &Path, app: &str) -> Option<Inventory> {
    let file = std::fs::File::open(local_path(state_dir, app));
    let text = crate::manifest::read::read_capped(file, MAX_LOCAL).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Replaces the local copy (atomically, private: [`crate::state::write_private`]).
///
/// # Errors
/// The file cannot be written.
pub fn store_local(state_dir: &Path, app: &str, inventory: &Inventory) -> std::io::Result<()> {
    let path = local_path(state_dir, app);
    crate::state::private_dir(path.parent().unwrap_or(state_dir))?;
    crate::state::write_private(
        &path,
        &serde_json::to_vec(inventory).map_err(std::io::Error::other)?,
    )
}

pub use live::{live_objects, namespaces_of_others, owned_elsewhere};

mod live;

#[cfg(test)]
mod tests;
