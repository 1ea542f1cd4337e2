//! The apply step: what the validate step passed, applied stage by stage (Namespaces and
//! CRDs first, then the CRDs waited Established and the objects of their kinds resolved
//! and dry-run, then everything else), each write's action recorded.

use std::time::{Duration, Instant};

use crate::cluster::apply::{apply_all, stage};
use crate::cluster::Action;
use crate::history::ObjectAction;
use crate::manifest::Manifest;
use crate::plan::phases::wave_of;
use crate::plan::{Change, Target};
use crate::sync::context::{Ctx, Journal, Stop};
use crate::sync::dry_run::{check, dry_run};
use crate::sync::error::SyncError;
use crate::sync::progress::Level;
use crate::sync::ready::wait_ready;
use crate::sync::steps::namespace;
use crate::sync::write::{Validated, Write};

/// How long to wait for a CRD of the commit to be Established.
const CRD_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the kinds of Established CRDs may take to show in discovery.
const DISCOVERY_LAG: Duration = Duration::from_secs(10);

/// Applies what the validate step passed of `wave` (every write when
/// the app has one wave: `None`), stage by stage; the late objects (and those of the kinds
/// of CRDs the commit defines, `deferred`, all of this wave) are dry-run right after stage
/// 0, before anything else is written.
pub(in crate::sync) async fn apply(
    ctx: &Ctx<'_>,
    writes: &mut Vec<Write>,
    validated: &Validated,
    deferred: Vec<Manifest>,
    wave: Option<i32>,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let in_wave = |w: &Write| wave.is_none_or(|n| wave_of(&w.target.manifest) == n);
    let mine = |indices: &[usize], writes: &[Write]| -> Vec<usize> {
        indices
            .iter()
            .copied()
            .filter(|&i| in_wave(&writes[i]))
            .collect()
    };
    let first = mine(&validated.first, writes);
    let mut late = Vec::new();
    let count = writes
        .iter()
        .filter(|w| in_wave(w) && w.applied.is_none())
        .count()
        + deferred.len();
    let applying = format!("applying {}", crate::plural(count, "object"));
    // Objects of a kind the commit's CRDs define are dry-run once those are established.
    let pending = deferred.len();
    ctx.say(&match wave {
        None if pending == 0 => format!("dry run passed; {applying}"),
        None => format!(
            "dry run passed; {applying} ({pending} dry-run first, once the CRDs they need are established)"
        ),
        Some(n) => format!("wave {n}: {applying}"),
    });
    apply_some(ctx, writes, &first, journal).await?;
    wait_for_crds(ctx, writes, &first, journal).await?;
    if !deferred.is_empty() {
        late.extend(resolve_deferred(ctx, writes, deferred, journal).await?);
    }
    dry_run(ctx, writes, &late, journal).await?;
    for s in 1..=2 {
        ctx.interrupted()?;
        let indices: Vec<usize> = (0..writes.len())
            .filter(|&i| {
                !validated.first.contains(&i)
                    && stage(&writes[i].target) == s
                    && in_wave(&writes[i])
            })
            .collect();
        apply_some(ctx, writes, &indices, journal).await?;
    }
    Ok(())
}

/// Creates the Namespaces the commit creates before anything else is written: its `pre`
/// hooks, and objects of a wave before the Namespace's own, may be in them (as kapp and
/// Argo CD's namespace-first ordering do). They leave `validated.first`: their wave does
/// not apply them again. Then the objects in them, and in `created` (the app's namespace
/// `create_namespace` made), every wave's, are dry-run: refused, those namespaces are
/// deleted again and nothing of the commit stays written.
pub(in crate::sync) async fn namespaces_first(
    ctx: &Ctx<'_>,
    writes: &mut [Write],
    validated: &mut Validated,
    created: Option<namespace::Created>,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let mut created: Vec<namespace::Created> = created.into_iter().collect();
    let (new, rest): (Vec<usize>, Vec<usize>) = validated
        .first
        .iter()
        .partition(|&&i| writes[i].is_new_namespace());
    validated.first = rest;
    let applied = apply_some(ctx, writes, &new, journal).await;
    created.extend(new.iter().filter_map(|&i| {
        let live = writes[i].applied.as_ref()?;
        Some(namespace::Created {
            name: writes[i].target.manifest.name().to_string(),
            uid: live.metadata.uid.clone(),
        })
    }));
    applied?;
    let late = std::mem::take(&mut validated.late);
    let checked = check(ctx, writes, &late, journal).await;
    if checked.is_err() {
        let said = namespace::undo(ctx, &created, journal).await;
        ctx.tell(Level::Error, &said);
    }
    checked
}

/// What the writes at `indices` apply, once what their canaries claim is applied (see
/// [`Canary::claim`](crate::sync::write::Canary::claim)).
async fn claimed<'w>(
    ctx: &Ctx<'_>,
    writes: &'w [Write],
    indices: &[usize],
    journal: &mut Journal<'_>,
) -> Result<Vec<&'w Target>, Stop> {
    let claims: Vec<&Target> = (indices.iter())
        .filter_map(|&i| writes[i].canary.as_ref()?.claim.as_ref())
        .collect();
    journal.requests += claims.len() as u64;
    for result in apply_all(&ctx.writer, &ctx.settings(), &claims, false).await {
        if let Err(e) = result {
            journal.fail(e);
            return Err(Stop::Failed);
        }
    }
    Ok(indices.iter().map(|&i| writes[i].to_apply()).collect())
}

/// Applies the writes at `indices` and records what became of each.
async fn apply_some(
    ctx: &Ctx<'_>,
    writes: &mut [Write],
    indices: &[usize],
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let (elsewhere, indices): (Vec<usize>, Vec<usize>) =
        indices.iter().partition(|&&i| writes[i].drift_elsewhere());
    for i in elsewhere {
        // What is live is what berth would write: recorded, not written.
        writes[i].applied = writes[i].dry_run.clone();
        journal.unchanged += 1;
    }
    let targets = claimed(ctx, writes, &indices, journal).await?;
    journal.requests += targets.len() as u64;
    let results = apply_all(&ctx.writer, &ctx.settings(), &targets, false).await;
    let mut failed = false;
    for (&i, result) in indices.iter().zip(results) {
        let w = &mut writes[i];
        let (action, note) = match result {
            Ok(obj) => {
                let action = match w.existing() {
                    Some(None) | None => Action::Created,
                    Some(Some(rv)) if obj.metadata.resource_version.as_deref() == Some(rv) => {
                        Action::Unchanged
                    }
                    Some(Some(_)) => Action::Configured,
                };
                w.applied = Some(obj);
                (action, note_of(w))
            }
            Err(e) => {
                failed = true;
                journal.fail(e);
                (Action::Failed, None)
            }
        };
        if action == Action::Unchanged {
            journal.unchanged += 1;
            continue;
        }
        let key = w.target.manifest.key();
        ctx.say(&format!(
            "{} {}{}",
            key.kubectl(),
            action.as_str(),
            note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
        ));
        journal.objects.push(ObjectAction {
            key,
            action,
            source: Some(w.target.manifest.origin.to_string()),
            note,
        });
    }
    if failed {
        return Err(Stop::Failed);
    }
    Ok(())
}

/// Why an applied object was written, when not obvious: the drift found, the fields
/// taken back.
fn note_of(w: &Write) -> Option<String> {
    let drift = match &w.change {
        Change::Drifted(why) => Some(format!("drift: {why}")),
        _ => None,
    };
    let took_back = w.took_back.as_ref().map(|t| format!("took back {t}"));
    match (drift, took_back) {
        (Some(d), Some(t)) => Some(format!("{d}; {t}")),
        (d, t) => d.or(t),
    }
}

/// Waits for every CRD among the writes at `indices` to be Established.
async fn wait_for_crds(
    ctx: &Ctx<'_>,
    writes: &[Write],
    indices: &[usize],
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let crds: Vec<&Write> = indices
        .iter()
        .map(|&i| &writes[i])
        .filter(|w| w.target.manifest.kind() == "CustomResourceDefinition")
        .collect();
    let ended = wait_ready(ctx, &crds, CRD_TIMEOUT).await;
    for (w, h) in crds.iter().zip(ended) {
        match h.outcome.as_str() {
            "ready" => {}
            "interrupted" => return Err(Stop::Interrupted),
            _ => {
                let m = &w.target.manifest;
                return Err(journal.stop(SyncError::CrdNotEstablished {
                    origin: m.origin.clone(),
                    name: m.name().to_string(),
                    timeout: CRD_TIMEOUT,
                }));
            }
        }
    }
    Ok(())
}

/// Resolves the objects whose CRD was just applied; returns their indices in `writes`.
async fn resolve_deferred(
    ctx: &Ctx<'_>,
    writes: &mut Vec<Write>,
    deferred: Vec<Manifest>,
    journal: &mut Journal<'_>,
) -> Result<Vec<usize>, Stop> {
    // The CRDs were just applied: only a discovery from now on knows their kinds, and
    // the API server's discovery may lag their Established condition a little.
    let deadline = Instant::now() + DISCOVERY_LAG;
    let (mut kinds, _) = ctx.discover(Some(Instant::now()), journal).await?;
    while deferred.iter().any(|m| kinds.resolve(m).is_none()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        kinds = ctx.discover(Some(Instant::now()), journal).await?.0;
    }
    let mut added = Vec::new();
    let mut unknown = false;
    for m in deferred {
        match kinds.require(&m) {
            Ok(resolved) => {
                added.push(writes.len());
                let digest = crate::plan::digest(&m);
                let target = Target {
                    manifest: m,
                    resolved,
                };
                writes.push(Write::new(target, Change::New, digest));
            }
            Err(e) => {
                journal.fail(e);
                unknown = true;
            }
        }
    }
    if unknown {
        return Err(Stop::Failed);
    }
    Ok(added)
}
