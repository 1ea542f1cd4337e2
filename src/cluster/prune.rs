//! Prune: delete objects that the last inventory holds and this commit does not — only
//! those that still carry `berth.dev/app=<app>` and are not annotated
//! `berth.dev/prune: "false"`. An object someone else took over is left alone and reported.

use std::collections::HashMap;

use futures::{stream, StreamExt};
use kube::api::{Api, DeleteParams, DynamicObject, Preconditions};

use super::apply::api_message;
use super::discovery::ClusterKinds;
use super::inventory::ANNOTATION_PRUNE;
use super::Action;
use super::ClusterError;
use crate::manifest::{ObjectKey, LABEL_APP};
use crate::plan::{Entry, LiveObject};

/// What happened to one prune candidate.
#[derive(Debug)]
pub struct Pruned {
    /// The object.
    pub key: ObjectKey,
    /// Pruned, kept, or failed.
    pub action: Action,
    /// Why it was kept, or that it was gone already.
    pub note: Option<String>,
    /// The error, when it failed.
    pub error: Option<ClusterError>,
}

/// Deletes the candidates that are still ours, `concurrency` at a time; with `dry_run`,
/// the API server only checks each deletion (`berth plan`: the same decisions, nothing
/// deleted).
pub async fn prune(
    client: &kube::Client,
    kinds: &ClusterKinds,
    app: &str,
    candidates: &[Entry],
    live: &HashMap<ObjectKey, LiveObject>,
    concurrency: usize,
    dry_run: bool,
) -> Vec<Pruned> {
    let requests: Vec<_> = candidates
        .iter()
        .map(|e| prune_one(client, kinds, app, e, live.get(&e.key), dry_run))
        .collect();
    stream::iter(requests)
        .buffered(concurrency.max(1))
        .collect()
        .await
}

async fn prune_one(
    client: &kube::Client,
    kinds: &ClusterKinds,
    app: &str,
    entry: &Entry,
    live: Option<&LiveObject>,
    dry_run: bool,
) -> Pruned {
    let result = |action, note: Option<String>, error| Pruned {
        key: entry.key.clone(),
        action,
        note,
        error,
    };
    let Some(resolved) = kinds.resolve_kind(&entry.api_version, &entry.key.kind) else {
        let note = format!(
            "the cluster no longer serves {} {}",
            entry.api_version, entry.key.kind
        );
        return result(Action::Kept, Some(note), None);
    };
    let api = super::api_for(client, &resolved, entry.key.namespace.as_deref());
    let decided = match live {
        Some(l) if l.keep => {
            let note = format!("annotated {ANNOTATION_PRUNE}: \"false\"");
            Ok((Action::Kept, Some(note)))
        }
        Some(LiveObject {
            asked_by_another: Some(other),
            ..
        }) => {
            let note = format!("app {other} asked berth for it (create_namespace)");
            Ok((Action::Kept, Some(note)))
        }
        Some(l) => delete_listed(&api, &entry.key.name, l.uid.as_deref(), dry_run).await,
        // Not in the labelled list: deleted already, or someone else owns it now.
        None => look_up_unlisted(&api, &entry.key.name, app).await,
    };
    match decided {
        Ok((action, note)) => result(action, note, None),
        Err(e) => {
            let error = ClusterError::Object {
                verb: "failed to prune",
                key: Box::new(entry.key.clone()),
                origin: "inventory".into(),
                message: api_message(&e, false, ""),
            };
            result(Action::Failed, None, Some(error))
        }
    }
}

/// Deletes a labelled candidate, the object read (its `uid`) and no other made since under
/// its name (`dry_run`: only checked); one already gone counts as pruned.
async fn delete_listed(
    api: &Api<DynamicObject>,
    name: &str,
    uid: Option<&str>,
    dry_run: bool,
) -> Result<(Action, Option<String>), kube::Error> {
    let params = DeleteParams {
        dry_run,
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok((Action::Pruned, None)),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            Ok((Action::Pruned, Some("already gone".into())))
        }
        Err(kube::Error::Api(s)) if s.code == 409 && uid.is_some() => {
            let note = "replaced since it was read (another uid): not the app's object";
            Ok((Action::Kept, Some(note.into())))
        }
        Err(e) => Err(e),
    }
}

/// Looks up a candidate missing from the labelled list: gone (pruned), or taken over (kept).
async fn look_up_unlisted(
    api: &Api<DynamicObject>,
    name: &str,
    app: &str,
) -> Result<(Action, Option<String>), kube::Error> {
    let Some(meta) = api.get_metadata_opt(name).await? else {
        return Ok((Action::Pruned, Some("already gone".into())));
    };
    let owner = meta.metadata.labels.as_ref().and_then(|l| l.get(LABEL_APP));
    let note = match owner {
        Some(other) => format!("taken over by another owner ({LABEL_APP}={other}, not {app})"),
        None => format!("taken over by another owner (label {LABEL_APP} removed)"),
    };
    Ok((Action::Kept, Some(note)))
}
