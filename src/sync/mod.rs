//! One sync of one app, as a list of steps, each a function in a file named for it that
//! takes the read-only `Ctx` (`context.rs`) and its inputs and returns its output; the
//! orchestrator ([`Syncer::sync`], `steps` below) alone folds what they return into the
//! record:
//!
//! ```text
//! lock.rs      take the app's lock (one writer per app; a killed sync recorded)
//! fetch.rs     fetch(ctx)                          → Checkout
//! verify.rs    verify(ctx, checkout)               → Option<Signature>
//! skip.rs      untouched(ctx, checkout)            → Option<(Skip, Inputs)>
//! inventory.rs load(ctx)                           → (Inventory, InventoryStore)
//! rewind.rs    rewritten(ctx, checkout, previous)  → Option<note>; guard_rewind
//! render.rs    render(ctx, checkout)               → Rendered; refuse_empty
//! hooks.rs     split(ctx, manifests, kinds, upgrade) → (objects, hooks)
//! plan.rs      plan(ctx, manifests, kinds, inv)    → Plan
//! skip.rs      held_or_unchanged(ctx, …, plan)     → Option<Skip>
//! validate.rs  validate(ctx, &mut writes)          → Validated; hooks::validate
//! hooks.rs     run(ctx, hooks, Pre, None)
//! inventory.rs InventoryStore::write_ahead(…)      → Inventory
//! waves.rs     apply_waves(ctx, …, &mut next), per wave:
//!   apply.rs     apply(ctx, &mut writes, &validated, deferred, wave)
//!   roll_out.rs  roll_out(ctx, wave's writes, old, &mut next, sha)
//!   health.rs    wait_healthy(ctx, wave's writes, old, &mut next)
//!   hooks.rs     run(ctx, hooks, Sync, Some(wave))
//! prune.rs     prune(ctx, kinds, candidates, old, &mut next)
//! hooks.rs     run(ctx, hooks, Post, None) (Fail when the sync failed after the dry run)
//! inventory.rs InventoryStore::store(ctx, old, next)
//! record.rs    append(syncer, &mut record)
//! notify.rs    notify(syncer, &record)
//! ```
//!
//! Steps say their errors, object actions and requests in the `Journal`
//! (appended to, read only by the orchestrator); a failed step stops what follows — a
//! broken commit writes nothing and prunes nothing. [`Step`] names where a sync is (the
//! lock file's marker). `preview.rs` is `berth plan` (the same steps up to the dry run);
//! `manual.rs` is `berth rollback`; `depends.rs` is the gate a caller asks before a sync
//! (`depends_on`).

mod affected;
mod apply;
mod context;
mod depends;
mod error;
mod fetch;
mod health;
mod hooks;
mod inputs;
mod inventory;
mod lock;
mod manual;
mod namespace;
mod notify;
mod offline;
mod plan;
mod preview;
mod prune;
mod record;
mod remove;
mod render;
mod rewind;
mod roll_out;
mod skip;
pub mod status;
mod step;
mod validate;
mod verify;
mod waves;
mod write;

pub use depends::{note_waiting, waiting_note, Waiting};
pub use error::SyncError;
pub use lock::{in_flight, syncing, Marker};
pub use manual::{RollbackRefused, RollbackRequest};
pub use offline::preview_offline;
pub use preview::{PlannedHook, PlannedObject, Preview};
pub use step::Step;

use std::sync::Arc;
use std::time::Instant;

use crate::cluster::discovery::{ClusterKinds, SharedKinds};
use crate::cluster::ClusterError;
use crate::config::{AgentConfig, AppConfig};
use crate::history::{new_id, HistoryLog, Outcome, SyncRecord, Trigger};
use crate::notifications::{Notifications, NotifyError};
use crate::plan::phases::HookPhase;
use crate::plan::{Inventory, Plan};
use crate::shutdown::Signal;
use crate::source::git::Checkout;
use crate::source::shared::Sources;
use context::{Ctx, Journal, Stop};
use hooks::HookObject;
use inputs::{Inputs, Remembered};
use inventory::InventoryStore;
use lock::Locked;
use skip::Skip;
use waves::Waves;
use write::{split_writes, Write};

/// Where progress lines go: the terminal for `berth sync`, the log for the daemon.
pub type Report<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// What every sync of an agent shares.
pub struct Syncer {
    /// The cluster.
    pub client: kube::Client,
    /// Whether the cluster answers (said once when it stops and once when it is back),
    /// and the stop that cuts the client's requests short.
    pub reach: Arc<crate::cluster::resilient::Reach>,
    /// Agent settings.
    pub agent: AgentConfig,
    /// The history log.
    pub history: HistoryLog,
    /// Apps with `rollout.engine = "agent"` have their Deployments driven by a
    /// supervisor elsewhere (the daemon): syncs then only follow them.
    pub engine_supervised: bool,
    /// The cluster's kinds, discovered once for every app.
    pub kinds: SharedKinds,
    /// `agent.max_concurrent_syncs` places; the daemon's app loops take one per sync, in
    /// the order they asked (tokio's semaphore is fair), so one slow app holds one place
    /// and never starves the others.
    pub slots: Arc<tokio::sync::Semaphore>,
    /// The repositories' fetches, shared by their apps.
    pub sources: Sources,
    /// This host (`hostname/pid`), recorded in every sync's record.
    pub host: String,
    /// Where each sync's outcome is told (`[[notify]]`); none until the command starts
    /// them ([`Notifications::start`]).
    pub notifications: Arc<Notifications>,
    /// What each app's last good sync read, to skip commits that change none of it.
    inputs: Remembered,
    /// The configuration's apps: whom an app depends on and who depends on it.
    apps: std::sync::RwLock<Arc<[AppConfig]>>,
}

impl Syncer {
    /// Starts the `[[notify]]` receivers of `config`: each sync's outcome is told to them.
    ///
    /// # Errors
    /// A receiver's address or secrets cannot be read.
    pub fn notify(mut self, config: &crate::config::Config) -> Result<Self, NotifyError> {
        self.notifications = Arc::new(Notifications::start(
            &config.notify,
            &config.agent.state_dir,
        )?);
        Ok(self)
    }

    /// Connects to the cluster named in `config`.
    ///
    /// # Errors
    /// No client could be made.
    pub async fn connect(
        config: &crate::config::Config,
        engine_supervised: bool,
    ) -> Result<Self, ClusterError> {
        let (client, reach) = crate::cluster::client::connect_reaching(&config.cluster).await?;
        // Before anything is written there: the state holds Secret manifests.
        if let Err(e) = crate::state::secure_state_dir(&config.agent.state_dir) {
            tracing::warn!(state_dir = %config.agent.state_dir.display(), error = %e, "cannot make the state folder private (0700)");
        }
        Ok(Syncer {
            kinds: SharedKinds::new(client.clone()),
            slots: Arc::new(tokio::sync::Semaphore::new(
                config.agent.max_concurrent_syncs,
            )),
            sources: Sources::new(
                config.agent.state_dir.clone(),
                crate::source::git::TreeLimits::of(&config.agent),
            ),
            host: crate::service::lease::identity(),
            inputs: Remembered::new(&config.agent, &config.cluster),
            notifications: Arc::new(Notifications::none()),
            client,
            reach,
            agent: config.agent.clone(),
            history: HistoryLog::new(&config.agent.state_dir),
            engine_supervised,
            apps: std::sync::RwLock::new(config.apps.clone().into()),
        })
    }

    /// A reloaded configuration's apps (their `depends_on`).
    pub fn set_apps(&self, apps: &[AppConfig]) {
        if let Ok(mut a) = self.apps.write() {
            *a = apps.into();
        }
    }

    /// The apps that depend on `app` directly.
    pub fn dependents(&self, app: &str) -> Vec<String> {
        let apps = self.apps();
        crate::config::order::dependents(&apps, app)
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    /// The configuration's apps.
    fn apps(&self) -> Arc<[AppConfig]> {
        self.apps
            .read()
            .map(|a| a.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }
}

/// How one sync runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncOptions {
    /// What started it.
    pub trigger: Trigger,
    /// Apply a commit whose rollout failed before (the app is held).
    pub force: bool,
    /// Follow the rollouts of the Deployments it writes (off: apply and prune only, as
    /// `kubectl apply` does).
    pub wait: bool,
    /// Apply a commit that does not descend from the last applied one (`berth sync
    /// --accept-rewind`), once.
    pub accept_rewind: bool,
    /// When the sync was asked for: a fetch of the repository started since is shared.
    pub requested: Instant,
    /// How long it waited for the apps it depends on (recorded).
    pub waited: Option<std::time::Duration>,
}

impl SyncOptions {
    /// The oldest fetch the sync takes: one started since it was asked for, or for an
    /// interval's sync a little before (apps whose intervals fall close share a fetch).
    pub fn fetch_since(&self) -> Instant {
        match self.trigger {
            Trigger::Interval => self.requested - crate::source::shared::INTERVAL_SHARE,
            _ => self.requested,
        }
    }

    /// A normal sync started by `trigger`.
    pub fn new(trigger: Trigger) -> Self {
        SyncOptions {
            trigger,
            force: false,
            wait: true,
            accept_rewind: false,
            requested: Instant::now(),
            waited: None,
        }
    }
}

/// What a sync knows before its first write.
struct Prepared {
    checkout: Checkout,
    inventory: Inventory,
    store: InventoryStore,
    kinds: Arc<ClusterKinds>,
    plan: Plan,
    /// The commit's hooks.
    hooks: Vec<HookObject>,
    /// What the render read.
    inputs: Option<Inputs>,
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
                lock.enter(Step::History);
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
    fn new_record(&self, ctx: &Ctx<'_>) -> SyncRecord {
        let started = jiff::Timestamp::now();
        let name = &ctx.app.name;
        SyncRecord {
            host: Some(self.host.clone()),
            waited_ms: ctx.options.waited.map(|w| w.as_millis() as u64),
            ..SyncRecord::new(new_id(started), name, ctx.options.trigger, started, None)
        }
    }
}

/// The outcome of steps that stopped early.
fn outcome_of(stop: Stop) -> Outcome {
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
    lock.enter(Step::DryRun);
    let wanted = namespace::wanted(ctx, &writes, journal).await?;
    let created = (wanted == Some(namespace::Wanted::Create)).then_some(ctx.app.namespace.as_str());
    let mut validated = validate::validate(ctx, &mut writes, created, journal).await?;
    let mut new = new_namespaces(&writes);
    new.extend(created);
    hooks::validate(ctx, &hooks, &new, journal).await?;
    let ahead = store.write_ahead(ctx, &inventory, &writes, journal).await?;
    lock.enter(Step::Apply);
    namespace::ensure(ctx, wanted, journal).await?;
    apply::namespaces_first(ctx, &mut writes, &mut validated, journal).await?;
    lock.enter(Step::Hooks);
    if let Err(stop) = hooks::run(ctx, &hooks, HookPhase::Pre, None, journal).await {
        return Err(failed(ctx, &hooks, stop, journal).await);
    }
    let sha = &checkout.commit.sha;
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
        lock.enter(Step::Prune);
        ended = prune::prune(ctx, &kinds, plan.prune, &inventory, &mut next, journal).await;
    }
    if ended.is_ok() {
        lock.enter(Step::Hooks);
        ended = hooks::run(ctx, &hooks, HookPhase::Post, None, journal).await;
    }
    lock.enter(Step::Inventory);
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

/// The Namespaces the commit creates (objects in them cannot be dry-run before).
fn new_namespaces(writes: &[Write]) -> Vec<&str> {
    writes
        .iter()
        .filter(|w| w.is_new_namespace())
        .map(|w| w.target.manifest.name())
        .collect()
}

/// The fetch and verify steps: the app's commit, its signature checked when the app asks.
async fn fetch_verified(
    ctx: &Ctx<'_>,
    lock: &mut Locked,
    rec: &mut SyncRecord,
    journal: &mut Journal<'_>,
) -> Result<Checkout, Stop> {
    lock.enter(Step::Fetch);
    let clock = Instant::now();
    let fetched = fetch::fetch(ctx, journal).await;
    rec.fetch_ms = Some(clock.elapsed().as_millis() as u64);
    let checkout = fetched?;
    rec.commit = Some(checkout.commit.clone());
    lock.commit(&checkout.commit);
    rec.signature = verify::verify(ctx, &checkout, journal)?;
    Ok(checkout)
}

/// Everything else before the first write: the last inventory, the rewind guard, the
/// render, the refusal to prune everything, and the plan.
async fn prepare(
    ctx: &Ctx<'_>,
    checkout: Checkout,
    lock: &mut Locked,
    rec: &mut SyncRecord,
    journal: &mut Journal<'_>,
) -> Result<Prepared, Stop> {
    let (inventory, store) = inventory::load(ctx, journal).await?;
    rec.previous_commit = inventory.commit.clone();
    let previous = inventory.commit.as_deref();
    rec.history_rewritten = rewind::rewritten(ctx, &checkout, previous).await;
    if let Some(note) = &rec.history_rewritten {
        rewind::guard_rewind(ctx, note, journal)?;
    }
    lock.enter(Step::Render);
    let rendered = render::render(ctx, &checkout, journal).await?;
    let kinds = rendered.kinds;
    let upgrade = inventory.commit.is_some();
    let (manifests, hooks) = hooks::split(ctx, rendered.manifests, &kinds, upgrade, journal)?;
    render::refuse_empty(ctx, &manifests, &inventory, journal)?;
    lock.enter(Step::Plan);
    let plan = plan::plan(ctx, manifests, &kinds, &inventory, journal).await?;
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
fn finish(
    ctx: &Ctx<'_>,
    mut rec: SyncRecord,
    journal: Journal<'_>,
    clock: Instant,
    lock: Option<Locked>,
) -> SyncRecord {
    journal.fold_into(&mut rec);
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
