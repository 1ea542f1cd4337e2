//! Drift, noticed as it happens: one metadata-only watch per kind and cluster, on berth's
//! app label (never a cache of whole objects, nor of objects berth does not manage). An
//! object drifted when someone else took fields berth's apply owned — a hand edit, a
//! `kubectl scale`, another applier forcing its value: the fields berth's field manager
//! holds changed while none of its own entries was written (its managedFields say so) —
//! or when it was deleted. Each drift names the app whose label the object carries; what
//! to do with it (a sync: git wins) is the caller's.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::manifest::LABEL_APP;
use crate::plan::Resolved;

/// An app's object that drifted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drifted {
    /// The app (the object's `berth.dev/app` label).
    pub app: String,
    /// `Kind namespace/name`, for the log.
    pub object: String,
    /// Whether it was deleted (rather than edited).
    pub deleted: bool,
}

/// The watches of one cluster: one per kind asked for — across the cluster, or in each
/// app's namespace where berth may watch no further —, each ended when this is dropped.
pub struct DriftWatch {
    client: kube::Client,
    field_manager: String,
    drifted: mpsc::Sender<Drifted>,
    /// Each watch by its key ([`key`]).
    watching: Mutex<HashMap<String, JoinHandle<()>>>,
    /// Whether berth may list and watch, by key: asked once.
    allowed: tokio::sync::Mutex<HashMap<String, bool>>,
}

/// A watch's key: the kind, and the namespace when it is watched in one only.
fn key(api_version: &str, kind: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("{api_version}/{kind} in {ns}"),
        None => format!("{api_version}/{kind}"),
    }
}

impl DriftWatch {
    /// No kind watched yet; each drift is sent to `drifted` (dropped when it is full: a
    /// drift waiting there already makes the app sync).
    pub fn new(client: kube::Client, field_manager: &str, drifted: mpsc::Sender<Drifted>) -> Self {
        DriftWatch {
            client,
            field_manager: field_manager.to_string(),
            drifted,
            watching: Mutex::new(HashMap::new()),
            allowed: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Whether the kind's objects in `namespace` (`None`: cluster-scoped) are watched.
    pub fn watches(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> bool {
        let Ok(watching) = self.watching.lock() else {
            return false;
        };
        watching.contains_key(&key(api_version, kind, None))
            || namespace.is_some_and(|ns| watching.contains_key(&key(api_version, kind, Some(ns))))
    }

    /// Watches the kind of `resolved` across the cluster when berth may list and watch it
    /// there, else in each of `namespaces` where it may; not at all where it may not (the
    /// interval finds drift there). Each place is asked once (a SelfSubjectAccessReview).
    pub async fn watch(&self, resolved: &Resolved, namespaces: &BTreeSet<String>) {
        let resource = &resolved.resource;
        let all = key(&resource.api_version, &resource.kind, None);
        if self.may(resource, None, &all).await {
            self.start(
                all,
                &resource.kind,
                Api::all_with(self.client.clone(), resource),
            );
            return;
        }
        if !resolved.namespaced {
            return;
        }
        for ns in namespaces {
            let one = key(&resource.api_version, &resource.kind, Some(ns));
            if self.may(resource, Some(ns), &one).await {
                let api = Api::namespaced_with(self.client.clone(), ns, resource);
                self.start(one, &resource.kind, api);
            }
        }
    }

    /// Starts the watch `key` of `kind` on `api`, unless it runs.
    fn start(&self, key: String, kind: &str, api: Api<PartialObjectMeta<DynamicObject>>) {
        let Ok(mut watching) = self.watching.lock() else {
            return;
        };
        if watching.contains_key(&key) {
            return;
        }
        let manager = self.field_manager.clone();
        let follow = follow(api, kind.to_string(), manager, self.drifted.clone());
        watching.insert(key, tokio::spawn(follow));
    }

    /// Whether berth may list and watch the resource in `namespace` (`None`: across the
    /// cluster), asked once per `key`; said once when it may not.
    async fn may(&self, resource: &ApiResource, namespace: Option<&str>, key: &str) -> bool {
        let mut allowed = self.allowed.lock().await;
        if let Some(may) = allowed.get(key) {
            return *may;
        }
        let mut may = true;
        for verb in ["list", "watch"] {
            may &= access(&self.client, resource, namespace, verb).await;
        }
        if !may && namespace.is_some() {
            tracing::info!(watch = %key, "berth may not list and watch these objects: drift on them is found at the interval only (grant list and watch to repair it in seconds)");
        }
        allowed.insert(key.to_string(), may);
        may
    }
}

/// Whether berth's identity may `verb` the resource in `namespace` (all when `None`), by
/// a SelfSubjectAccessReview; no when it cannot be asked.
async fn access(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    verb: &str,
) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(resource.group.clone()),
                resource: Some(resource.plural.clone()),
                namespace: namespace.map(str::to_string),
                verb: Some(verb.to_string()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = api.create(&Default::default(), &review).await;
    answer.is_ok_and(|r| r.status.is_some_and(|s| s.allowed))
}

impl Drop for DriftWatch {
    fn drop(&mut self) {
        if let Ok(watching) = self.watching.lock() {
            for task in watching.values() {
                task.abort();
            }
        }
    }
}

/// The most objects one watch follows: anyone who may label objects could otherwise grow
/// berth's memory without bound (about 60 bytes an object: 12 MB at most a kind).
const MAX_FOLLOWED: usize = 200_000;

/// Follows one kind's objects that carry berth's label, sending each drift.
async fn follow(
    api: Api<PartialObjectMeta<DynamicObject>>,
    kind: String,
    manager: String,
    drifted: mpsc::Sender<Drifted>,
) {
    let config = watcher::Config::default().labels(LABEL_APP);
    let events = watcher::watcher(api, config).default_backoff();
    futures::pin_mut!(events);
    // By a digest of each object's uid: 16 bytes, not a 36-character string twice.
    let mut held: HashMap<Digest, Held> = HashMap::new();
    let mut seen: HashSet<Digest> = HashSet::new();
    let mut full = false;
    while let Some(event) = events.next().await {
        let (meta, deleted) = match event {
            Ok(Event::Apply(m) | Event::InitApply(m)) => (m.metadata, false),
            Ok(Event::Delete(m)) => (m.metadata, true),
            Ok(Event::Init) => {
                seen.clear();
                continue;
            }
            Ok(Event::InitDone) => {
                // Objects gone while the watch was down are not told: the interval finds them.
                held.retain(|uid, _| seen.contains(uid));
                continue;
            }
            Err(e) => {
                tracing::debug!(kind = %kind, error = %e, "the drift watch restarts");
                continue;
            }
        };
        let (Some(uid), Some(app)) = (meta.uid.as_deref().map(digest), app_of(&meta)) else {
            continue;
        };
        if !deleted && !held.contains_key(&uid) && held.len() >= MAX_FOLLOWED {
            if !full {
                tracing::warn!(kind = %kind, bound = MAX_FOLLOWED, "more objects carry berth's label than a drift watch follows: drift on the rest is found at the interval only");
                full = true;
            }
            continue;
        }
        seen.insert(uid);
        let now = Held::of(&meta, &manager);
        let before = match deleted {
            true => held.remove(&uid),
            false => held.insert(uid, now.clone()),
        };
        if deleted || before.is_some_and(|before| before.taken(&now)) {
            let object = format!(
                "{kind} {}/{}",
                meta.namespace.as_deref().unwrap_or("-"),
                meta.name.as_deref().unwrap_or_default()
            );
            let _ = drifted.try_send(Drifted {
                app,
                object,
                deleted,
            });
        }
    }
}

fn app_of(meta: &ObjectMeta) -> Option<String> {
    meta.labels.as_ref()?.get(LABEL_APP).cloned()
}

/// What berth's field manager holds of one object, by its managedFields: digests only,
/// so a watch holds a few dozen bytes an object however large its fields.
#[derive(Debug, Clone, PartialEq, Default)]
struct Held {
    /// The digest of when each of berth's entries (apply, update) was last written; none
    /// when berth holds no entry.
    written: Option<Digest>,
    /// The digest of the fields berth's apply owns.
    fields: Option<Digest>,
}

/// The first 16 bytes of a SHA-256.
type Digest = [u8; 16];

fn digest(text: &str) -> Digest {
    use sha2::Digest as _;
    let full = sha2::Sha256::digest(text.as_bytes());
    let mut short = [0; 16];
    short.copy_from_slice(&full[..16]);
    short
}

impl Held {
    fn of(meta: &ObjectMeta, manager: &str) -> Held {
        let mut held = Held::default();
        let mut written = Vec::new();
        for entry in meta.managed_fields.iter().flatten() {
            if entry.manager.as_deref() != Some(manager) {
                continue;
            }
            let operation = entry.operation.as_deref().unwrap_or_default();
            if operation == "Apply" {
                held.fields = entry.fields_v1.as_ref().map(|f| digest(&f.0.to_string()));
            }
            let time = entry.time.as_ref().map(|t| t.0.to_string());
            written.push(format!("{operation} {}", time.unwrap_or_default()));
        }
        written.sort();
        held.written = (!written.is_empty()).then(|| digest(&written.join("\n")));
        held
    }

    /// Whether someone else took fields from berth between `self` and `now`: the fields
    /// berth's apply owns changed and none of berth's entries was written, or every field
    /// it held is gone.
    fn taken(&self, now: &Held) -> bool {
        if now.written.is_none() {
            return self.written.is_some();
        }
        self.fields != now.fields && self.written == now.written
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};

    fn entry(
        manager: &str,
        operation: &str,
        second: i64,
        fields: serde_json::Value,
    ) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            time: Some(Time(jiff::Timestamp::from_second(second).unwrap())),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        }
    }

    fn meta(entries: Vec<ManagedFieldsEntry>) -> ObjectMeta {
        ObjectMeta {
            managed_fields: Some(entries),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn fields_taken_by_a_hand_edit_are_drift_and_berths_own_writes_are_not() {
        let both = serde_json::json!({"f:data": {"f:a": {}, "f:b": {}}});
        let one = serde_json::json!({"f:data": {"f:b": {}}});
        let synced = Held::of(
            &meta(vec![entry("berth", "Apply", 100, both.clone())]),
            "berth",
        );
        // Someone edits a: the field moves to their entry; berth's entry is not written.
        let edited = Held::of(
            &meta(vec![
                entry("berth", "Apply", 100, one.clone()),
                entry(
                    "kubectl-edit",
                    "Update",
                    200,
                    serde_json::json!({"f:data": {"f:a": {}}}),
                ),
            ]),
            "berth",
        );
        assert!(synced.taken(&edited));
        // berth applies again and takes it back: its entry is written, no drift.
        let repaired = Held::of(
            &meta(vec![entry("berth", "Apply", 300, both.clone())]),
            "berth",
        );
        assert!(!edited.taken(&repaired));
        // A controller writes status or its own annotation: berth's fields unchanged.
        let controller = Held::of(
            &meta(vec![
                entry("berth", "Apply", 300, both.clone()),
                entry(
                    "kube-controller-manager",
                    "Update",
                    400,
                    serde_json::json!({"f:status": {}}),
                ),
            ]),
            "berth",
        );
        assert!(!repaired.taken(&controller));
        // berth's own update (a rollback) moves fields between its entries: not drift.
        let rolled_back = Held::of(
            &meta(vec![
                entry("berth", "Apply", 300, one),
                entry(
                    "berth",
                    "Update",
                    500,
                    serde_json::json!({"f:data": {"f:a": {}}}),
                ),
            ]),
            "berth",
        );
        assert!(!controller.taken(&rolled_back));
        // Every field taken: berth's entries gone.
        let all_taken = Held::of(&meta(vec![entry("other", "Apply", 600, both)]), "berth");
        assert!(repaired.taken(&all_taken));
    }
}
