//! The app's objects as they are live: which of those it wants carry its label (to settle
//! the plan, and what prune may delete), and which another app already owns.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kube::api::{Api, ListParams};
use kube::core::PartialObjectMeta;

use super::ANNOTATION_PRUNE;
use crate::cluster::apply::observed;
use crate::cluster::ClusterError;
use crate::manifest::{ObjectKey, ANNOTATION_SHARED, LABEL_APP, LABEL_NAMESPACE_FOR};
use crate::plan::{Claim, LiveObject, OtherOwner, Resolved};

/// A resource and namespace with at most this many of the app's objects is read object
/// by object; with more, one list. A list filters every object of its kind in the
/// namespace, so with many apps sharing a namespace, lists cost the API server the square
/// of the apps (500 apps of 4 objects in one namespace: each list reads 500 objects).
const GET_AT_MOST: usize = 16;

/// Every object among `wanted` (resource, namespace, name) that carries
/// `berth.dev/app=<app>`, as berth sees it to settle the plan.
///
/// # Errors
/// A request failed.
pub async fn live_objects(
    client: &kube::Client,
    wanted: impl IntoIterator<Item = (Resolved, Option<String>, String)>,
    app: &str,
) -> Result<HashMap<ObjectKey, LiveObject>, ClusterError> {
    let found = labelled(client, wanted, Owned::By(app)).await?;
    Ok(found
        .into_iter()
        .map(|(key, item)| (key, live_object(&item, app)))
        .collect())
}

/// Every object among `wanted` that another berth app owns (its `berth.dev/app` label
/// names an app but `app`): that app, and whether the object is marked shared.
///
/// # Errors
/// A request failed.
pub async fn owned_elsewhere(
    client: &kube::Client,
    wanted: impl IntoIterator<Item = (Resolved, Option<String>, String)>,
    app: &str,
) -> Result<HashMap<ObjectKey, OtherOwner>, ClusterError> {
    let found = labelled(client, wanted, Owned::ByAnotherThan(app)).await?;
    Ok(found
        .into_iter()
        .map(|(key, item)| {
            let meta = &item.metadata;
            let owner = OtherOwner {
                app: meta
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_APP))
                    .cloned()
                    .unwrap_or_default(),
                shared: meta
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANNOTATION_SHARED))
                    .is_some_and(|v| v == "true"),
                claim: Claim::Label,
            };
            (key, owner)
        })
        .collect())
}

/// Whose objects [`labelled`] keeps.
#[derive(Clone, Copy)]
enum Owned<'a> {
    /// This app's.
    By(&'a str),
    /// Another berth app's.
    ByAnotherThan(&'a str),
}

impl Owned<'_> {
    /// The label selector of a list request.
    fn selector(self) -> String {
        match self {
            Owned::By(app) => format!("{LABEL_APP}={app}"),
            Owned::ByAnotherThan(app) => format!("{LABEL_APP},{LABEL_APP}!={app}"),
        }
    }

    /// Whether an object labelled `owner` (or not labelled) is kept.
    fn keeps(self, owner: Option<&String>) -> bool {
        match self {
            Owned::By(app) => owner.is_some_and(|v| v == app),
            Owned::ByAnotherThan(app) => owner.is_some_and(|v| v != app),
        }
    }
}

/// Every object among `wanted` whose owner `owned` keeps, with its metadata. Per resource
/// and namespace: a few objects are read by name (metadata only), more with one list
/// request filtered by the label — per namespace, so that an identity with namespaced
/// Roles only (least privilege) can run berth.
async fn labelled(
    client: &kube::Client,
    wanted: impl IntoIterator<Item = (Resolved, Option<String>, String)>,
    owned: Owned<'_>,
) -> Result<Vec<(ObjectKey, PartialObjectMeta<kube::api::DynamicObject>)>, ClusterError> {
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
    let label = owned.selector();
    let mut found = Vec::new();
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
            cause: source,
        };
        let items = if names.len() <= GET_AT_MOST {
            let mut items = Vec::new();
            for name in &names {
                let item = api.get_metadata_opt(name).await.map_err(failed)?;
                items.extend(item.filter(|i| {
                    owned.keeps(i.metadata.labels.as_ref().and_then(|l| l.get(LABEL_APP)))
                }));
            }
            items
        } else {
            let selector = ListParams::default().labels(&label);
            let listed = api.list_metadata(&selector).await.map_err(failed)?.items;
            listed
                .into_iter()
                .filter(|i| i.metadata.name.as_ref().is_some_and(|n| names.contains(n)))
                .collect()
        };
        found.extend(items.into_iter().map(|item| (key_of(&r, &item), item)));
    }
    Ok(found)
}

fn key_of(r: &Resolved, item: &PartialObjectMeta<kube::api::DynamicObject>) -> ObjectKey {
    ObjectKey {
        group: r.resource.group.clone(),
        kind: r.resource.kind.clone(),
        namespace: item.metadata.namespace.clone().filter(|_| r.namespaced),
        name: item.metadata.name.clone().unwrap_or_default(),
    }
}

fn live_object(item: &PartialObjectMeta<kube::api::DynamicObject>, app: &str) -> LiveObject {
    LiveObject {
        uid: item.metadata.uid.clone(),
        asked_by_another: asked_by_another(item.metadata.labels.as_ref(), app),
        observed: observed(&item.metadata),
        keep: item
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_PRUNE))
            .is_some_and(|v| v == "false"),
    }
}

/// Another app than `app` whose `create_namespace` label (`namespace.berth.dev/APP`) the
/// object carries.
fn asked_by_another(labels: Option<&BTreeMap<String, String>>, app: &str) -> Option<String> {
    labels?
        .keys()
        .filter_map(|k| k.strip_prefix(LABEL_NAMESPACE_FOR))
        .find(|asker| *asker != app)
        .map(str::to_string)
}

/// The live namespaces among `names` that `app` may not take: one berth created for
/// another app (`create_namespace`), and — for an app set's app (`generated`) — any that
/// exists and is not labelled as the app's own. A namespace another app's label names is
/// [`owned_elsewhere`]'s.
///
/// # Errors
/// A request failed.
pub async fn namespaces_of_others(
    client: &kube::Client,
    names: Vec<String>,
    app: &str,
    generated: bool,
) -> Result<HashMap<ObjectKey, OtherOwner>, ClusterError> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let mut found = HashMap::new();
    for name in names {
        let meta = api
            .get_metadata_opt(&name)
            .await
            .map_err(|cause| ClusterError::Request {
                what: format!("reading namespace {name}"),
                cause,
            })?;
        let Some(meta) = meta else { continue };
        let labels = meta.metadata.labels.as_ref();
        let owner = labels.and_then(|l| l.get(LABEL_APP));
        if owner.is_some() {
            continue;
        }
        let asked_by_me =
            labels.is_some_and(|l| l.contains_key(&format!("{LABEL_NAMESPACE_FOR}{app}")));
        let (who, claim) = match asked_by_another(labels, app) {
            Some(other) if !asked_by_me => (other, Claim::CreateNamespace),
            _ if generated && !asked_by_me => (String::new(), Claim::NotBerths),
            _ => continue,
        };
        let key = ObjectKey {
            group: String::new(),
            kind: "Namespace".into(),
            namespace: None,
            name,
        };
        let shared = false;
        found.insert(
            key,
            OtherOwner {
                app: who,
                shared,
                claim,
            },
        );
    }
    Ok(found)
}
