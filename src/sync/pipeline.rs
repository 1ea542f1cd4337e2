//! The orchestrator of one sync ([`Syncer::sync`]): it takes the app's lock, runs the
//! steps in their order (`steps/`, the waves in `waves.rs`), folds what each returns
//! into the record, and lets the lock go. Steps never call steps: what they need of one
//! another passes through here.

use std::sync::Arc;
use std::time::Instant;

use super::context::{Ctx, Journal, Stop};
use super::inputs::Inputs;
use super::lock::{self, Locked};
use super::progress::Report;
use super::step::Step;
use super::steps::apply;
use super::steps::hooks::{self, HookObject};
use super::steps::inventory::{self, InventoryStore};
use super::steps::skip::{self, Skip};
use super::steps::{
    fetch, namespace, notify, plan, prune, record, render, rewind, validate, verify,
};
use super::syncer::{SyncOptions, Syncer};
use super::waves::{self, Waves};
use super::write::{new_namespaces, split_writes};
use crate::cluster::discovery::ClusterKinds;
use crate::config::AppConfig;
use crate::history::{new_id, Outcome, SyncRecord};
use crate::plan::phases::HookPhase;
use crate::plan::{Inventory, Plan};
use crate::shutdown::Signal;
use crate::source::git::Checkout;

/// What a sync knows before its first write.
pub(super) struct Prepared {
    pub(super) checkout: Checkout,
    pub(super) inventory: Inventory,
    pub(super) store: InventoryStore,
    pub(super) kinds: Arc<ClusterKinds>,
    pub(super) plan: Plan,
    /// The commit's hooks.
    pub(super) hooks: Vec<HookObject>,
    /// What the render read.
    pub(super) inputs: Option<Inputs>,
}

/// How the steps ended well, and what the render read.
type Ended = (Outcome, Option<Inputs>);

impl Syncer {
    /// Syncs one app and records the attempt in the history log (and the log).
    pub async fn sync(
        &self,
        app: &AppConfig,
        options: SyncOptions,
        shutdown: &Signal,
        report: Report<'_>,
    ) -> SyncRecord {
        let clock = Instant::now();
        let ctx = Ctx::new(self, app, options, shutdown, report);
        let mut journal = ctx.journal();
        let mut rec = self.new_record(&ctx);
        let (ended, lock) = match lock::take(&ctx, &mut journal).await {
            Ok(mut lock) => {
                rec.id = lock.id().to_string();
                rec.started_at = lock.started_at();
                let ended = steps(&ctx, &mut lock, &mut rec, &mut journal).await;
                lock.enter(&ctx, Step::History);
                (ended, Some(lock))
            }
            Err(stop) => (Err(stop), None),
        };
        let inputs = match ended {
            Ok((outcome, inputs)) => {
                rec.outcome = outcome;
                inputs
            }
            // A sync that failed once shutdown came (a request cut short, a step that
            // saw it) was interrupted: the next start syncs it again.
            Err(_) if crate::shutdown::is_stopped(shutdown) => {
                rec.outcome = Outcome::Interrupted;
                None
            }
            Err(stop) => {
                rec.outcome = outcome_of(stop);
                None
            }
        };
        let rec = finish(&ctx, rec, journal, clock, lock);
        match inputs {
            Some(i) if matches!(rec.outcome, Outcome::Succeeded | Outcome::NoChange) => {
                let objects = rec.managed();
                self.inputs.keep(&app.name, Inputs { objects, ..i });
            }
            _ => self.inputs.forget(&app.name),
        }
        rec
    }

    /// The record of a sync of `ctx`'s app starting now.
    pub(super) fn new_record(&self, ctx: &Ctx<'_>) -> SyncRecord {
        let started = jiff::Timestamp::now();
        let name = &ctx.app.name;
        SyncRecord {
            host: Some(self.host.clone()),
            cluster: Some(ctx.cluster.name.clone()),
            waited_ms: ctx.options.waited.map(|w| w.as_millis() as u64),
            ..SyncRecord::new(new_id(started), name, ctx.options.trigger, started, None)
        }
    }
}

/// The outcome of steps that stopped early.
pub(super) fn outcome_of(stop: Stop) -> Outcome {
    match stop {
        Stop::Failed => Outcome::Failed,
        Stop::Interrupted => Outcome::Interrupted,
    }
}

/// One sync, as Flux's reconcile reads: fetch → verify → (skip an untouched commit) →
/// inventory → render → hooks apart → plan → (skip when held or unchanged) → validate →
/// pre hooks → write ahead → waves (apply → roll out → health → sync hooks, each) → prune
/// → post hooks → inventory (→ fail hooks). Each step says its errors in the
/// journal and stops what follows: a broken commit writes nothing and prunes nothing.
/// The history record and the notification follow in [`finish`].
async fn steps(
    ctx: &Ctx<'_>,
    lock: &mut Locked,
    rec: &mut SyncRecord,
    journal: &mut Journal<'_>,
) -> Result<Ended, Stop> {
    let checkout = fetch_verified(ctx, lock, rec, journal).await?;
    if let Some(skip) = skip::folder_gone(ctx, &checkout) {
        return Ok(skipped(rec, skip, None));
    }
    if let Some((skip, inputs)) = skip::untouched(ctx, &checkout) {
        inventory::keep_ready(ctx, &checkout.commit.sha, journal).await?;
        return Ok(skipped(rec, skip, Some(inputs)));
    }
    let mut prepared = prepare(ctx, checkout, lock, rec, journal).await?;
    let Prepared {
        checkout,
        inventory,
        store,
        plan,
        ..
    } = &mut prepared;
    if let Some(skip) = skip::held_or_unchanged(ctx, checkout, inventory, plan) {
        if skip.outcome == Outcome::NoChange {
            let sha = &checkout.commit.sha;
            store.keep_ready(ctx, inventory, sha, journal).await;
        }
        return Ok(skipped(rec, skip, prepared.inputs));
    }
    ctx.interrupted()?;
    let inputs = prepared.inputs.take();
    write(ctx, lock, rec, prepared, journal).await?;
    Ok((Outcome::Succeeded, inputs))
}

/// The steps that write, once the plan says something changed: validate → pre hooks →
/// write ahead → waves → prune → post hooks → inventory (→ fail hooks on a failure).
async fn write(
    ctx: &Ctx<'_>,
    lock: &mut Locked,
    rec: &mut SyncRecord,
    prepared: Prepared,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let Prepared {
        checkout,
        inventory,
        mut store,
        kinds,
        plan,
        hooks,
        ..
    } = prepared;
    let (same, mut writes) = split_writes(plan.planned);
    rec.unchanged = same.len();
    lock.enter(ctx, Step::DryRun);
    let wanted = namespace::wanted(ctx, &writes, journal).await?;
    let created = (wanted == Some(namespace::Wanted::Create)).then_some(ctx.app.namespace.as_str());
    let mut validated = validate::validate(ctx, &mut writes, created, journal).await?;
    let mut new = new_namespaces(&writes);
    new.extend(created);
    hooks::validate(ctx, &hooks, &new, journal).await?;
    let mut ahead = store.write_ahead(ctx, &inventory, &writes, journal).await?;
    lock.enter(ctx, Step::Apply);
    let created = namespace::ensure(ctx, wanted, journal).await?;
    apply::namespaces_first(ctx, &mut writes, &mut validated, created, journal).await?;
    lock.enter(ctx, Step::Hooks);
    let sha = &checkout.commit.sha;
    if let Err(stop) = pre_hooks(ctx, &hooks, sha, &mut store, &mut ahead, journal).await {
        return Err(failed(ctx, &hooks, stop, journal).await);
    }
    let waves = Waves {
        validated,
        deferred: plan.deferred,
        hooks: &hooks,
        old: &inventory,
        ahead: &ahead,
        same: &same,
        sha,
    };
    let mut next = Inventory::default();
    let mut ended = waves::apply_waves(ctx, lock, &mut writes, waves, &mut next, journal).await;
    if ended.is_ok() {
        lock.enter(ctx, Step::Prune);
        ended = prune::prune(ctx, &kinds, plan.prune, &inventory, &mut next, journal).await;
    }
    if ended.is_ok() {
        lock.enter(ctx, Step::Hooks);
        ended = hooks::run(ctx, &hooks, HookPhase::Post, None, journal).await;
    }
    lock.enter(ctx, Step::Inventory);
    let well = ended.is_ok() && journal.errors.is_empty();
    next.ready = well.then(|| sha.clone());
    next.failed = !well;
    store.store(ctx, &ahead, &next, journal).await;
    match ended {
        Ok(()) if well => Ok(()),
        Ok(()) => Err(failed(ctx, &hooks, Stop::Failed, journal).await),
        Err(stop) => Err(failed(ctx, &hooks, stop, journal).await),
    }
}

/// The commit's pre hooks, once: not again for a commit whose pre hooks completed in an
/// earlier sync (one resumed after a restart, or repeated), said; once they complete, the
/// write-ahead inventory `ahead` records the commit.
async fn pre_hooks(
    ctx: &Ctx<'_>,
    hooks: &[hooks::HookObject],
    sha: &str,
    store: &mut InventoryStore,
    ahead: &mut Inventory,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    if !hooks.iter().any(|h| h.runs_in(HookPhase::Pre, None)) {
        return Ok(());
    }
    if ahead.pre_hooks_ran.as_deref() == Some(sha) {
        let short = crate::source::short(sha);
        ctx.say(&format!(
            "pre hooks: not run again (they completed for commit {short} in an earlier sync)"
        ));
        return Ok(());
    }
    hooks::run(ctx, hooks, HookPhase::Pre, None, journal).await?;
    let ran = Inventory {
        pre_hooks_ran: Some(sha.to_string()),
        ..ahead.clone()
    };
    if !store.store(ctx, ahead, &ran, journal).await {
        return Err(Stop::Failed);
    }
    *ahead = ran;
    Ok(())
}

/// A sync that failed after its dry run passed: its `fail` hooks run (not after shutdown
/// came); the sync stays failed whatever they do.
async fn failed(
    ctx: &Ctx<'_>,
    hooks: &[HookObject],
    stop: Stop,
    journal: &mut Journal<'_>,
) -> Stop {
    if stop == Stop::Failed {
        let _ = hooks::run(ctx, hooks, HookPhase::Fail, None, journal).await;
    }
    stop
}

/// The fetch and verify steps: the app's commit, its signature checked when the app asks.
pub(super) async fn fetch_verified(
    ctx: &Ctx<'_>,
    lock: &mut Locked,
    rec: &mut SyncRecord,
    journal: &mut Journal<'_>,
) -> Result<Checkout, Stop> {
    lock.enter(ctx, Step::Fetch);
    let clock = Instant::now();
    let fetched = fetch::fetch(ctx, journal).await;
    rec.fetch_ms = Some(clock.elapsed().as_millis() as u64);
    let checkout = fetched?;
    rec.commit = Some(checkout.commit.clone());
    lock.commit(&checkout.commit);
    rec.signature = verify::verify(ctx, &checkout, journal).await?;
    Ok(checkout)
}

/// Everything else before the first write: the last inventory, the rewind guard, the
/// render, the refusal to prune everything, and the plan.
pub(super) async fn prepare(
    ctx: &Ctx<'_>,
    checkout: Checkout,
    lock: &mut Locked,
    rec: &mut SyncRecord,
    journal: &mut Journal<'_>,
) -> Result<Prepared, Stop> {
    let (inventory, store) = inventory::load(ctx, journal).await?;
    rec.previous_commit = inventory.commit.clone();
    // Like with like: a commit of another repository (a written app moved) is no rewind.
    let same_repo = (inventory.origin.as_ref()).is_none_or(|o| o.repo == ctx.app.origin());
    let previous = inventory.commit.as_deref().filter(|_| same_repo);
    let state_dir = &ctx.syncer.agent.state_dir;
    rewind::settle(state_dir, &ctx.app.name, inventory.commit.as_deref());
    rec.history_rewritten = rewind::rewritten(ctx, &checkout, previous).await;
    if let Some(note) = &rec.history_rewritten {
        rewind::guard_rewind(ctx, note, &checkout.commit.sha, journal)?;
    }
    lock.enter(ctx, Step::Render);
    let errors = journal.errors.len();
    let rendered = render::render(ctx, &checkout, journal).await?;
    // A plan (`ctx.partial`) goes on to plan what rendered; a sync stops below.
    let broken = journal.errors.len() > errors && !ctx.partial;
    let kinds = rendered.kinds;
    let upgrade = inventory.commit.is_some();
    let (manifests, hooks) = hooks::split(ctx, rendered.manifests, &kinds, upgrade, journal)?;
    if !broken {
        render::refuse_empty(ctx, &manifests, &inventory, journal)?;
    }
    lock.enter(ctx, Step::Plan);
    let plan = plan::plan(ctx, manifests, &kinds, &inventory, journal).await;
    if broken {
        // What rendered is checked as a sync would (its kinds, its owners, the server's
        // dry run), so that one pass says every error; nothing is written.
        if let Ok(plan) = plan {
            let (_, mut writes) = split_writes(plan.planned);
            // The namespace create_namespace would make is not made for a broken commit:
            // its objects are left out of the dry run rather than refused for its absence.
            let wanted = namespace::wanted(ctx, &writes, journal).await?;
            let created = matches!(wanted, Some(namespace::Wanted::Create));
            let created = created.then_some(ctx.app.namespace.as_str());
            // A refusal says that nothing was written.
            validate::validate(ctx, &mut writes, created, journal).await?;
        }
        return Err(render::refused(ctx));
    }
    let plan = plan?;
    Ok(Prepared {
        checkout,
        inventory,
        store,
        kinds,
        plan,
        hooks,
        inputs: rendered.inputs,
    })
}

/// A sync that writes nothing, as its record says it.
fn skipped(rec: &mut SyncRecord, skip: Skip, inputs: Option<Inputs>) -> Ended {
    rec.note = skip.note;
    rec.unchanged = skip.unchanged;
    (skip.outcome, inputs)
}

/// The record and notify steps: the journal folded into the record, which is appended
/// to the history and told to the receivers; then the app's lock is let go. A held sync
/// is recorded too, once for its commit and reason: its notification names its record,
/// which `berth history show` must open.
pub(super) fn finish(
    ctx: &Ctx<'_>,
    mut rec: SyncRecord,
    journal: Journal<'_>,
    clock: Instant,
    lock: Option<Locked>,
) -> SyncRecord {
    journal.fold_into(&mut rec);
    if rec.outcome == Outcome::Failed && rec.rollouts.iter().any(|r| r.rollback.is_some()) {
        // Its rollout failed and was rolled back, as `berth rollback` would have.
        rec.outcome = Outcome::RolledBack;
    }
    rec.finished_at = jiff::Timestamp::now();
    rec.duration_ms = clock.elapsed().as_millis() as u64;
    match record::held_before(ctx.syncer, &rec) {
        // Held again for the same reason: the record that says so stays the newest (a
        // record at every interval would push the failure that held it out of the
        // history).
        Some(id) => rec.id = id,
        None => {
            record::append(ctx.syncer, &mut rec);
            notify::notify(ctx.syncer, &rec);
        }
    }
    if let Some(lock) = lock {
        lock.release();
    }
    rec
}
