//! The hooks step: objects created on each sync that changes something, in their phase
//! (`pre` before any object of the app is written, `sync` with their wave, `post` after
//! the last wave and the prune, `fail` when the sync fails after its dry run), waited on
//! (a Job to completion, a Pod to `Succeeded`, anything else healthy) and deleted by their
//! policy. They are never inventory objects: each run is found again by its label
//! `berth.dev/hook-id`, which is how "delete before the next run" finds the last one, even
//! one named by `generateName`.

use std::time::{Duration, Instant};

use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams, PropagationPolicy};
use kube::runtime::wait::{await_condition, conditions::is_deleted};
use serde_json::Value;

use crate::cluster::api_for;
use crate::cluster::discovery::ClusterKinds;
use crate::cluster::ClusterError;
use crate::history::HookRecord;
use crate::manifest::{Manifest, ObjectKey, LABEL_APP};
use crate::plan::phases::{self, display_name, Hook, HookPhase, Place};
use crate::plan::Resolved;
use crate::sync::context::{Ctx, Journal, Stop};
use crate::sync::error::SyncError;
use wait::wait;

/// The label that finds a hook's objects of earlier runs.
pub(in crate::sync) const LABEL_HOOK_ID: &str = "berth.dev/hook-id";

/// One hook of the commit.
pub(in crate::sync) struct HookObject {
    pub manifest: Manifest,
    pub hook: Hook,
    pub resolved: Resolved,
}

impl HookObject {
    /// Its object, named `migrate-*` when by `generateName`.
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            name: display_name(&self.manifest),
            ..self.manifest.key()
        }
    }

    /// When its object is deleted, in words.
    pub fn deleted(&self) -> String {
        let d = &self.hook.delete;
        let when: Vec<&str> = [
            (d.before, "before its next run"),
            (d.succeeded, "once it succeeded"),
            (d.failed, "once it failed"),
        ]
        .into_iter()
        .filter_map(|(on, words)| on.then_some(words))
        .collect();
        if when.is_empty() {
            "never deleted".into()
        } else {
            format!("deleted {}", when.join(", "))
        }
    }

    /// Whether it runs in `phase` (and, for `sync`, with `wave`).
    pub fn runs_in(&self, phase: HookPhase, wave: Option<i32>) -> bool {
        self.hook.phases.contains(&phase) && wave.is_none_or(|w| w == self.hook.wave)
    }
}

/// Splits the rendered objects into the app's and its hooks; objects this sync does not
/// run (Argo CD's `Skip`, a Helm hook of another event) are dropped, each said. `upgrade`:
/// the app synced before.
pub(in crate::sync) fn split(
    ctx: &Ctx<'_>,
    manifests: Vec<Manifest>,
    kinds: &ClusterKinds,
    upgrade: bool,
    journal: &mut Journal<'_>,
) -> Result<(Vec<Manifest>, Vec<HookObject>), Stop> {
    let (mut objects, mut hooks) = (Vec::new(), Vec::new());
    let mut failed = false;
    for mut m in manifests {
        match phases::place(&m, upgrade) {
            Ok(Place::Wave(_)) => objects.push(m),
            Ok(Place::Skip(why)) => ctx.say(&format!(
                "{} {}: not applied ({why})",
                m.kind(),
                display_name(&m)
            )),
            Ok(Place::Hook(hook)) => match kinds.require(&m) {
                Ok(resolved) => {
                    m.set_meta_entry("labels", LABEL_HOOK_ID, &hook_id(ctx, &m));
                    hooks.push(HookObject {
                        manifest: m,
                        hook,
                        resolved,
                    });
                }
                Err(e) => {
                    journal.fail(e);
                    failed = true;
                }
            },
            Err(e) => {
                journal.fail(SyncError::Phase(e));
                failed = true;
            }
        }
    }
    if failed {
        return Err(Stop::Failed);
    }
    hooks.sort_by_key(|h| h.hook.wave);
    Ok((objects, hooks))
}

/// The hook's identity across runs: the app and the object's kind, namespace and name (or
/// generateName), hashed to fit a label.
fn hook_id(ctx: &Ctx<'_>, m: &Manifest) -> String {
    let id = format!(
        "{}\n{}\n{}\n{}",
        ctx.app.name,
        m.kind(),
        m.namespace_or_default(),
        display_name(m)
    );
    crate::digest::sha256_hex(id.as_bytes())[..16].to_string()
}

/// The dry run of every hook, with the rest of the commit: created for nothing. A fixed
/// name taken by an earlier run's object passes when the hook deletes it first (`before`).
pub(in crate::sync) async fn validate(
    ctx: &Ctx<'_>,
    hooks: &[HookObject],
    new_namespaces: &[&str],
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let mut failed = false;
    for h in hooks {
        journal.requests += 1;
        let api = api_for(&ctx.writer, &h.resolved, h.manifest.namespace());
        let params = PostParams {
            dry_run: true,
            field_manager: Some(ctx.syncer.agent.field_manager.clone()),
        };
        let refused = match object_of(&h.manifest) {
            Ok(object) => match api.create(&params, &object).await {
                Ok(_) => None,
                Err(kube::Error::Api(e)) if e.reason == "AlreadyExists" && h.hook.delete.before => {
                    None
                }
                Err(kube::Error::Api(e))
                    if e.code == 404
                        && h.manifest
                            .namespace()
                            .is_some_and(|ns| new_namespaces.contains(&ns)) =>
                {
                    None
                }
                Err(e) => Some(crate::cluster::said(&e)),
            },
            Err(why) => Some(why.to_string()),
        };
        if let Some(why) = refused {
            journal.fail(ClusterError::Object {
                verb: "dry run refused",
                key: Box::new(named(&h.manifest)),
                origin: h.manifest.origin.to_string(),
                message: format!(
                    "{} hook: {why}",
                    h.hook
                        .phases
                        .iter()
                        .map(|p| p.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            });
            failed = true;
        }
    }
    if failed {
        Err(Stop::Failed)
    } else {
        Ok(())
    }
}

/// Runs the hooks of `phase` (of `wave`, for `sync`) in order, each to its end; the first
/// that fails stops the rest.
pub(in crate::sync) async fn run(
    ctx: &Ctx<'_>,
    hooks: &[HookObject],
    phase: HookPhase,
    wave: Option<i32>,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    for h in hooks.iter().filter(|h| h.runs_in(phase, wave)) {
        ctx.interrupted()?;
        run_one(ctx, h, phase, journal).await?;
    }
    Ok(())
}

/// One hook: the last run's object deleted (`before`), this run's created, waited on, and
/// deleted by its policy; recorded.
async fn run_one(
    ctx: &Ctx<'_>,
    h: &HookObject,
    phase: HookPhase,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let api = api_for(&ctx.writer, &h.resolved, h.manifest.namespace());
    let clock = Instant::now();
    let failed = |journal: &mut Journal<'_>, key: ObjectKey, what: String| {
        journal.stop(SyncError::Hook {
            phase: phase.as_str(),
            key,
            what,
        })
    };
    let key = match create(ctx, h, &api, journal).await {
        Ok(key) => key,
        Err(what) => return Err(failed(journal, named(&h.manifest), what.to_string())),
    };
    ctx.say(&format!(
        "{} created ({} hook)",
        key.kubectl(),
        phase.as_str()
    ));
    let ended = wait(ctx, &api, &key.name, h.manifest.group(), h.manifest.kind()).await;
    let delete = match ended.outcome {
        "succeeded" => h.hook.delete.succeeded,
        "interrupted" => false,
        _ => h.hook.delete.failed,
    };
    if delete {
        journal.requests += 1;
        if let Err(e) = api.delete(&key.name, &background()).await {
            tracing::warn!(app = %ctx.app.name, hook = %key, error = %e, "cannot delete the hook's object");
        }
    }
    let said = match ended.message.as_str() {
        "" => ended.outcome.to_string(),
        message => format!("{}: {message}", ended.outcome),
    };
    ctx.say(&format!(
        "{}: {} hook {said}",
        key.kubectl(),
        phase.as_str()
    ));
    journal.hooks.push(HookRecord {
        phase: phase.as_str().to_string(),
        key: key.clone(),
        outcome: ended.outcome.to_string(),
        message: ended.message,
        ms: clock.elapsed().as_millis() as u64,
    });
    match ended.outcome {
        "succeeded" => Ok(()),
        "interrupted" => Err(Stop::Interrupted),
        _ => Err(failed(journal, key, said)),
    }
}

/// Why a hook's run could not be started.
#[derive(Debug, thiserror::Error)]
enum HookError {
    #[error("is not an object berth can send: {0}")]
    NotAnObject(serde_json::Error),
    #[error("could not delete its earlier runs: {0}")]
    EarlierRuns(kube::Error),
    #[error("could not be created: {}", crate::cluster::said(.0))]
    Create(kube::Error),
}

/// Creates this run's object of the hook, its last run's deleted first (`before`); its
/// key, with the name the server gave it, or why it could not be created.
async fn create(
    ctx: &Ctx<'_>,
    h: &HookObject,
    api: &kube::Api<DynamicObject>,
    journal: &mut Journal<'_>,
) -> Result<ObjectKey, HookError> {
    // Before this run: every earlier run (its name may be fixed), or — where the policy
    // keeps runs — all but the newest `KEEP_RUNS - 1`, so kept runs stay bounded.
    let keep = if h.hook.delete.before {
        0
    } else {
        KEEP_RUNS - 1
    };
    delete_earlier(ctx, h, api, journal, keep)
        .await
        .map_err(HookError::EarlierRuns)?;
    journal.requests += 1;
    let params = PostParams {
        dry_run: false,
        field_manager: Some(ctx.syncer.agent.field_manager.clone()),
    };
    let created = api
        .create(&params, &object_of(&h.manifest)?)
        .await
        .map_err(HookError::Create)?;
    Ok(ObjectKey {
        name: created.metadata.name.unwrap_or_default(),
        ..h.manifest.key()
    })
}

/// A hook's key as messages show it: with `generateName` (and no name), `migrate-*`.
fn named(m: &Manifest) -> ObjectKey {
    let mut key = m.key();
    if key.name.is_empty() {
        let prefix = m
            .object
            .get("metadata")
            .and_then(|meta| meta.get("generateName"));
        if let Some(prefix) = prefix.and_then(Value::as_str) {
            key.name = format!("{prefix}*");
        }
    }
    key
}

/// The object a hook creates: its manifest, as the API takes it.
fn object_of(m: &Manifest) -> Result<DynamicObject, HookError> {
    serde_json::from_value(Value::Object(m.object.clone())).map_err(HookError::NotAnObject)
}

/// Deletes with the dependents in the background (a Job's pods).
fn background() -> DeleteParams {
    DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    }
}

/// The runs of one hook kept by its delete policy, this run's included: older ones are
/// deleted (a hook with `generateName` would otherwise add objects at every sync).
const KEEP_RUNS: usize = 3;

/// Deletes the hook's objects of earlier runs — those that carry both the app's label and
/// the hook's — but the newest `keep`; with none kept, waits until they are gone (a fixed
/// name is free again).
async fn delete_earlier(
    ctx: &Ctx<'_>,
    h: &HookObject,
    api: &kube::Api<DynamicObject>,
    journal: &mut Journal<'_>,
    keep: usize,
) -> Result<(), kube::Error> {
    let id = h
        .manifest
        .metadata()
        .and_then(|m| m.get("labels"))
        .and_then(|l| l.get(LABEL_HOOK_ID))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let earlier = api
        .list_metadata(&ListParams::default().labels(&format!(
            "{LABEL_APP}={},{LABEL_HOOK_ID}={id}",
            ctx.app.name
        )))
        .await?;
    let deadline = tokio::time::Instant::now() + ctx.app.rollout.timeout;
    let mut runs = earlier.items;
    // Newest first: the ones kept.
    runs.sort_by(|a, b| {
        let at = |o: &kube::core::PartialObjectMeta<DynamicObject>| {
            (
                o.metadata.creation_timestamp.clone(),
                o.metadata.name.clone(),
            )
        };
        at(b).cmp(&at(a))
    });
    for old in runs.into_iter().skip(keep) {
        let name = old.metadata.name.unwrap_or_default();
        journal.requests += 1;
        match api.delete(&name, &background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(e) => return Err(e),
        }
        if keep == 0 {
            // Gone before the new run is made under its name: as a watch tells (watched
            // again, a moment later, when the watch fails; the deadline ends the wait).
            let uid = old.metadata.uid.unwrap_or_default();
            loop {
                let gone = await_condition(api.clone(), &name, is_deleted(&uid));
                match tokio::time::timeout_at(deadline, gone).await {
                    Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(500)).await,
                    Ok(Ok(_)) | Err(_) => break,
                }
            }
        }
    }
    Ok(())
}

mod wait;
