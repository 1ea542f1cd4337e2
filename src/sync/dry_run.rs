//! The server's dry run of writes (git wins by default: a write whose fields another
//! manager took is dry-run again with force, and what it takes back is noted): the
//! validate step runs it on every object it can check before the first write, the apply
//! step on the objects that could be checked only once their Namespace or CRD existed.

use super::context::{Ctx, Journal, Stop};
use super::progress::Level;
use super::write::Write;
use crate::cluster::apply::{apply_all, conflicts, ApplySettings};
use crate::cluster::ClusterError;
use crate::manifest::Manifest;
use crate::plan::Target;

/// Dry-runs the writes at `indices`. Git wins by default: a write whose fields another
/// manager took is dry-run again with force, and what it takes back is noted. A refusal
/// says what was written before it.
pub(super) async fn dry_run(
    ctx: &Ctx<'_>,
    writes: &mut [Write],
    indices: &[usize],
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let checked = check(ctx, writes, indices, journal).await;
    if checked.is_err() {
        ctx.tell(Level::Error, &dry_run_failed(writes));
    }
    checked
}

/// [`dry_run`], leaving the caller to say what a refusal leaves written.
pub(super) async fn check(
    ctx: &Ctx<'_>,
    writes: &mut [Write],
    indices: &[usize],
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let take_back = ctx.settings();
    let settings = ApplySettings {
        force: false,
        ..take_back.clone()
    };
    let mut failed = false;
    let mut conflicted = Vec::new();
    for (i, result) in send(ctx, &settings, writes, indices, journal).await {
        match result {
            Ok(obj) => writes[i].dry_run = Some(obj),
            Err(e) => match taken_fields(&e).filter(|_| take_back.force) {
                Some(note) => {
                    writes[i].took_back = Some(note);
                    conflicted.push(i);
                }
                None => failed |= refuse(&mut writes[i], e, journal),
            },
        }
    }
    for (i, result) in send(ctx, &take_back, writes, &conflicted, journal).await {
        match result {
            Ok(obj) => writes[i].dry_run = Some(obj),
            Err(e) => failed |= refuse(&mut writes[i], e, journal),
        }
    }
    if failed {
        return Err(Stop::Failed);
    }
    Ok(())
}

/// The dry runs of the writes at `indices`, each with its index.
async fn send(
    ctx: &Ctx<'_>,
    settings: &ApplySettings,
    writes: &[Write],
    indices: &[usize],
    journal: &mut Journal<'_>,
) -> Vec<(usize, Result<kube::api::DynamicObject, ClusterError>)> {
    if indices.is_empty() {
        return Vec::new();
    }
    let targets: Vec<&Target> = indices.iter().map(|&i| &writes[i].target).collect();
    journal.requests += targets.len() as u64;
    let mut results = apply_all(&ctx.writer, settings, &targets, true).await;
    let undeclared = |r: &Result<_, ClusterError>| matches!(r, Err(ClusterError::Object { message, .. }) if message.contains(UNDECLARED));
    if results.iter().any(undeclared) {
        let kinds = ctx.cluster.kinds.get(None).await.ok();
        let version = kinds.as_ref().and_then(|(k, _)| k.version());
        for (&i, result) in indices.iter().zip(&mut results) {
            if let Err(ClusterError::Object { message, .. }) = result {
                *message = with_schema_hint(&writes[i].target.manifest, message, version);
            }
        }
    }
    indices.iter().copied().zip(results).collect()
}

/// How the API server refuses a field its schema does not have.
const UNDECLARED: &str = ": field not declared in schema";

/// The server's `PATH: field not declared in schema` with what it means: a field newer than
/// the cluster (the type berth reads the kind into has it), or one no Kubernetes berth knows
/// has (misspelt).
fn with_schema_hint(m: &Manifest, message: &str, version: Option<&str>) -> String {
    let Some(at) = message.find(UNDECLARED) else {
        return message.to_string();
    };
    let path = message[..at].rsplit(' ').next().unwrap_or_default();
    let known = crate::manifest::typed::KUBERNETES;
    let cluster = version.map_or("the cluster".into(), |v| {
        format!("the cluster (Kubernetes {v})")
    });
    match crate::manifest::typed::has_field(m, path) {
        Some(true) => format!(
            "{message}: {cluster} is older than this field, which Kubernetes {known}'s {} has: remove it, or upgrade the cluster",
            m.kind()
        ),
        Some(false) => format!(
            "{message}: Kubernetes {known}'s {} has no such field either: is it misspelt?",
            m.kind()
        ),
        None => message.to_string(),
    }
}

/// Records the dry run's refusal of `w` (and says it); always true: a refusal fails the
/// dry run.
fn refuse(w: &mut Write, e: ClusterError, journal: &mut Journal<'_>) -> bool {
    let e = match e {
        ClusterError::Object {
            verb,
            key,
            origin,
            message,
        } if is_missing_namespace(&message) => ClusterError::Object {
            verb,
            key,
            origin,
            message: format!("{message}: add the Namespace to the commit, or set create_namespace = true on the app (for its own namespace)"),
        },
        e => e,
    };
    w.refused = Some(e.to_string());
    journal.fail(e);
    true
}

/// The API server's answer for an object in a namespace that does not exist:
/// `namespaces "data" not found`.
fn is_missing_namespace(message: &str) -> bool {
    message.starts_with("namespaces \"") && message.ends_with("\" not found")
}

/// `.spec.replicas from "kubectl-patch"` when `e` is a conflict over fields another
/// field manager owns.
fn taken_fields(e: &ClusterError) -> Option<String> {
    let ClusterError::Object { message, .. } = e else {
        return None;
    };
    let found = conflicts(message);
    let named: Vec<String> = found
        .iter()
        .filter(|(_, fields)| !fields.is_empty())
        .map(|(manager, fields)| format!("{} from {manager:?}", fields.join(", ")))
        .collect();
    (!named.is_empty()).then(|| named.join("; "))
}

/// What a failed dry run says was written: nothing, or — when objects of a kind a CRD of
/// the commit defines could only be validated once it was applied — exactly those first
/// writes.
fn dry_run_failed(writes: &[Write]) -> String {
    let written: Vec<String> = writes
        .iter()
        .filter(|w| w.applied.is_some())
        .map(|w| w.target.manifest.key().to_string())
        .collect();
    if written.is_empty() {
        return "dry run failed: nothing was written".into();
    }
    format!(
        "dry run failed: nothing was written but {} (applied first: the objects of a kind the commit's CRDs define can be validated only once those exist); the inventory holds {}",
        written.join(", "),
        if written.len() == 1 { "it" } else { "them" }
    )
}
