//! `[[app]] create_namespace = true`: the app's namespace created when it is missing, as
//! Argo CD's `CreateNamespace=true` and `helm --create-namespace` do — once the dry run of
//! what can be checked without it passed, before anything is written in it; the objects in
//! it are dry-run then, and a refusal deletes it again ([`undo`]). It is labelled as berth's
//! (`app.kubernetes.io/managed-by: berth`) and once per app that asks for it
//! (`namespace.berth.dev/APP: "true"`), each app's label written under a field manager of
//! its own, so that apps sharing the namespace never undo each other; the last of them
//! removed with `prune = true` deletes it. A namespace berth did not create is neither
//! labelled nor ever deleted; one the commit holds is the commit's.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};

use crate::cluster::{Action, ClusterError};
use crate::history::ObjectAction;
use crate::manifest::ObjectKey;
use crate::sync::context::{Ctx, Journal, Stop};
use crate::sync::write::Write;

/// The label every namespace berth created carries.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "berth");
/// The prefix of the label each app that asked for the namespace sets (`…/APP`).
const ASKED_BY: &str = crate::manifest::LABEL_NAMESPACE_FOR;

/// What `create_namespace` asks of a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::sync) enum Wanted {
    /// The namespace is missing: created (objects in it are dry-run once it is).
    Create,
    /// Another app had berth create it: this app's label is added.
    Label,
}

/// What the sync must do for the app's namespace; `None` when the app does not ask, the
/// commit holds the Namespace, or nothing is to be done.
pub(in crate::sync) async fn wanted(
    ctx: &Ctx<'_>,
    writes: &[Write],
    journal: &mut Journal<'_>,
) -> Result<Option<Wanted>, Stop> {
    let name = ctx.app.namespace.as_str();
    let in_commit = writes.iter().any(|w| {
        let m = &w.target.manifest;
        m.group().is_empty() && m.kind() == "Namespace" && m.name() == name
    });
    if !ctx.app.create_namespace || in_commit {
        return Ok(None);
    }
    journal.requests += 1;
    let api: Api<Namespace> = Api::all(ctx.writer.clone());
    let live = api.get_opt(name).await.map_err(|cause| {
        journal.stop(ClusterError::Request {
            what: format!("reading namespace {name} (create_namespace)"),
            cause,
        })
    })?;
    let labels = live.as_ref().and_then(|ns| ns.metadata.labels.as_ref());
    let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
    Ok(match live {
        None => Some(Wanted::Create),
        Some(_) if label(&asked_by(&ctx.app.name)).is_some() => None,
        Some(_) if label(MANAGED_BY.0) == Some(MANAGED_BY.1) => Some(Wanted::Label),
        Some(_) => None,
    })
}

/// Creates the app's namespace, or adds the app's label to it, as [`wanted`] said; the
/// namespace created, with its uid.
pub(in crate::sync) async fn ensure(
    ctx: &Ctx<'_>,
    wanted: Option<Wanted>,
    journal: &mut Journal<'_>,
) -> Result<Option<Created>, Stop> {
    let Some(wanted) = wanted else {
        return Ok(None);
    };
    let name = ctx.app.namespace.as_str();
    let object = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": { MANAGED_BY.0: MANAGED_BY.1, asked_by(&ctx.app.name): "true" },
        },
    });
    journal.requests += 1;
    let api: Api<Namespace> = Api::all(ctx.writer.clone());
    let params = PatchParams::apply(&manager(ctx)).force();
    let live = api
        .patch(name, &params, &Patch::Apply(object))
        .await
        .map_err(|cause| {
            journal.stop(ClusterError::Request {
                what: format!("creating namespace {name} (create_namespace)"),
                cause,
            })
        })?;
    let (action, note) = match wanted {
        Wanted::Create => (Action::Created, "create_namespace"),
        Wanted::Label => (
            Action::Configured,
            "create_namespace: shared with another app",
        ),
    };
    let key = key(name);
    ctx.say(&format!("{} {} ({note})", key.kubectl(), action.as_str()));
    journal.objects.push(ObjectAction {
        key,
        action,
        source: None,
        note: Some(note.to_string()),
    });
    Ok((wanted == Wanted::Create).then(|| Created {
        name: name.to_string(),
        uid: live.metadata.uid,
    }))
}

/// A namespace this sync created.
pub(in crate::sync) struct Created {
    pub name: String,
    pub uid: Option<String>,
}

/// Deletes the namespaces this sync created to dry-run the objects in them (the API
/// server dry-runs nothing in a namespace that does not exist), once that dry run refused
/// the commit: each with its uid as a precondition, and taken out of the record, so that
/// a refused commit leaves nothing written. Returns what a refusal then says.
pub(in crate::sync) async fn undo(
    ctx: &Ctx<'_>,
    created: &[Created],
    journal: &mut Journal<'_>,
) -> String {
    let api: Api<Namespace> = Api::all(ctx.writer.clone());
    let (mut deleted, mut left) = (Vec::new(), Vec::new());
    for ns in created {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: ns.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        journal.requests += 1;
        match api.delete(&ns.name, &params).await {
            Ok(_) => deleted.push(ns.name.as_str()),
            Err(e) => left.push(format!("{} ({e})", ns.name)),
        }
    }
    let gone = |o: &ObjectAction| {
        o.action == Action::Created
            && o.key.group.is_empty()
            && o.key.kind == "Namespace"
            && deleted.contains(&o.key.name.as_str())
    };
    journal.objects.retain(|o| !gone(o));
    let mut said = String::from("dry run failed: nothing was written");
    if !deleted.is_empty() {
        said += &format!(
            " (namespace {}, created to dry-run the objects in it, deleted again)",
            deleted.join(", ")
        );
    }
    if !left.is_empty() {
        said += &format!(
            "; namespace {} was created to dry-run the objects in it and could not be deleted: delete it by hand if it is not wanted",
            left.join(", ")
        );
    }
    said
}

impl Wanted {
    /// The plan's action and note for the app's namespace.
    pub(in crate::sync) fn planned(self) -> (&'static str, &'static str) {
        match self {
            Wanted::Create => ("create", "create_namespace"),
            Wanted::Label => ("configure", "create_namespace: shared with another app"),
        }
    }
}

/// For an app removed with `prune = true`: its label comes off the namespace, and the
/// namespace is deleted when no other app's label is left (unless one was added since it
/// was read: the deletion's precondition).
pub(in crate::sync) async fn release(ctx: &Ctx<'_>, journal: &mut Journal<'_>) {
    if !ctx.app.create_namespace {
        return;
    }
    let name = ctx.app.namespace.as_str();
    let api: Api<Namespace> = Api::all(ctx.writer.clone());
    let Some(left) = unlabel(ctx, &api, journal).await else {
        return;
    };
    let others = left
        .metadata
        .labels
        .iter()
        .flatten()
        .any(|(k, _)| k.starts_with(ASKED_BY));
    let key = key(name);
    if others {
        ctx.say(&format!(
            "{} kept (create_namespace: another app asked for it too)",
            key.kubectl()
        ));
        return;
    }
    journal.requests += 1;
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: left.metadata.resource_version.clone(),
            uid: None,
        }),
        ..DeleteParams::background()
    };
    if let Err(e) = api.delete(name, &params).await {
        return failed(journal, "deleting", name, e);
    }
    ctx.say(&format!(
        "{} pruned (create_namespace: the last app that asked for it)",
        key.kubectl()
    ));
    journal.objects.push(ObjectAction {
        key,
        action: Action::Pruned,
        source: None,
        note: Some("create_namespace: the last app that asked for it".into()),
    });
}

/// Takes the app's label off its namespace: the namespace as left, or `None` when it is
/// missing, does not carry the label, or a request failed (in the journal).
async fn unlabel(
    ctx: &Ctx<'_>,
    api: &Api<Namespace>,
    journal: &mut Journal<'_>,
) -> Option<Namespace> {
    let name = ctx.app.namespace.as_str();
    journal.requests += 1;
    let live = match api.get_opt(name).await {
        Ok(Some(ns)) => ns,
        Ok(None) => return None,
        Err(e) => {
            failed(journal, "reading", name, e);
            return None;
        }
    };
    let ours = asked_by(&ctx.app.name);
    live.metadata.labels.as_ref()?.get(&ours)?;
    // Applying nothing under the app's own manager takes back what it set: its label.
    let bare =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    journal.requests += 1;
    let params = PatchParams::apply(&manager(ctx)).force();
    match api.patch(name, &params, &Patch::Apply(bare)).await {
        Ok(ns) => Some(ns),
        Err(e) => {
            failed(journal, "unlabelling", name, e);
            None
        }
    }
}

/// Records that `what` (`reading`, `unlabelling`, `deleting`) the namespace `name` failed.
fn failed(journal: &mut Journal<'_>, what: &str, name: &str, cause: kube::Error) {
    journal.fail(ClusterError::Request {
        what: format!("{what} namespace {name} (create_namespace)"),
        cause,
    });
}

/// The label of the app that asked for the namespace.
fn asked_by(app: &str) -> String {
    format!("{ASKED_BY}{app}")
}

/// The field manager of the app's label: its own, so apps sharing the namespace never
/// take each other's label away.
fn manager(ctx: &Ctx<'_>) -> String {
    format!(
        "{}-namespace-{}",
        ctx.syncer.agent.field_manager, ctx.app.name
    )
}

/// The key of the Namespace `name`.
pub(in crate::sync) fn key(name: &str) -> ObjectKey {
    ObjectKey {
        group: String::new(),
        kind: "Namespace".into(),
        namespace: None,
        name: name.to_string(),
    }
}
