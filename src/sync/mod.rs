//! One sync of one app, as named steps (see [`Syncer::sync`] and `docs/architecture.md`):
//! lock the app (`lock.rs`: one writer per app, a killed sync recorded) → prepare
//! (`prepare.rs`: inventory, fetch, discover, render, plan) → skip when held or unchanged
//! → validate and apply (`apply.rs`: dry run, write ahead, staged server-side apply) →
//! roll out (`rollouts.rs`: follow, failure policy, rollback) → prune and store the
//! inventory (`prune.rs`) → record the history. A failed step records its errors and
//! stops what follows — a broken commit writes nothing and prunes nothing.
//!
//! `preview.rs` is `berth plan` (a sync that stops after the dry run); `manual.rs` is
//! `berth rollback`.

mod apply;
mod error;
mod health;
mod inputs;
mod lock;
mod manual;
mod prepare;
mod preview;
mod prune;

mod rollouts;

pub use error::SyncError;
pub use lock::{in_flight, syncing, Marker};
pub use manual::{RollbackRefused, RollbackRequest};
pub use preview::{PlannedObject, Preview};

use std::sync::Arc;
use std::time::Instant;

use kube::api::DynamicObject;

use crate::cluster::apply::{observed, ApplySettings};
use crate::cluster::discovery::{ClusterKinds, SharedKinds};
use crate::cluster::ClusterError;
use crate::config::{AgentConfig, AppConfig};
use crate::history::{new_id, HistoryLog, Outcome, RecordError, SyncRecord, Trigger};
use crate::manifest::ObjectKey;
use crate::notifications::{Notifications, NotifyError};
use crate::plan::Target;
use crate::plan::{self, Change, Plan};
use crate::plan::{Entry, Held, Inventory};
use crate::shutdown::{self, Signal};
use crate::source::git::{self, Checkout};
use crate::source::shared::Sources;
use inputs::{Inputs, Remembered};

/// Where progress lines go: the terminal for `berth sync`, the log for the daemon.
pub type Report<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// What every sync of an agent shares.
pub struct Syncer {
    /// The cluster.
    pub client: kube::Client,
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
}

/// Why the steps stopped early; the errors are already in the record.
enum Stop {
    Failed,
    Interrupted,
}

/// An object to write and what became of it.
struct Write {
    target: Target,
    change: Change,
    digest: String,
    /// The server's answer to the dry run: the object as it would be.
    dry_run: Option<DynamicObject>,
    applied: Option<DynamicObject>,
    /// The fields git sets that another manager had taken, and this write takes back
    /// (`.spec.replicas from "kubectl-patch"`).
    took_back: Option<String>,
    /// The live object's version when the plan read it.
    live: Option<String>,
    /// Why the dry run refused it, when it did.
    refused: Option<String>,
}

/// What a sync knows before its first write.
struct Prepared {
    inventory: Inventory,
    checkout: Checkout,
    kinds: Arc<ClusterKinds>,
    plan: Plan,
}

struct Run<'a> {
    syncer: &'a Syncer,
    app: &'a AppConfig,
    /// What writes the app's objects (dry run, apply, prune, restore): berth's client, or
    /// one impersonating the app's account. berth's own state and reads use berth's.
    client: kube::Client,
    options: SyncOptions,
    shutdown: &'a Signal,
    report: Report<'a>,
    rec: SyncRecord,
    /// The app's lock, held from before the first request to after the record.
    lock: Option<lock::AppLock>,
    /// The inventory ConfigMap's version as last read or written.
    inventory_version: Option<crate::cluster::inventory::Version>,
    /// When the run began (discovery older than this may miss a new kind).
    begun: Instant,
    /// What this sync's render read (set once rendered).
    inputs: Option<Inputs>,
    /// Keep the server's whole answers to the dry run and the apply (`berth plan`).
    bodies: bool,
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
        let client = crate::cluster::client::connect(&config.cluster).await?;
        // Before anything is written there: the state holds Secret manifests.
        if let Err(e) = crate::state::secure_state_dir(&config.agent.state_dir) {
            tracing::warn!(state_dir = %config.agent.state_dir.display(), error = %e, "cannot make the state folder private (0700)");
        }
        Ok(Syncer {
            kinds: SharedKinds::new(client.clone()),
            slots: Arc::new(tokio::sync::Semaphore::new(
                config.agent.max_concurrent_syncs,
            )),
            sources: Sources::new(config.agent.state_dir.clone()),
            host: crate::service::lease::identity(),
            inputs: Remembered::new(&config.agent, &config.cluster),
            notifications: Arc::new(Notifications::none()),
            client,
            agent: config.agent.clone(),
            history: HistoryLog::new(&config.agent.state_dir),
            engine_supervised,
        })
    }
}

impl Write {
    fn new(target: Target, change: Change, digest: String) -> Self {
        Write {
            target,
            change,
            digest,
            dry_run: None,
            applied: None,
            took_back: None,
            live: None,
            refused: None,
        }
    }

    /// A drifted object whose dry run changes no field of its spec (the generation stays
    /// the live one): only fields git does not set moved (an HPA's replicas), and nothing
    /// is written, so nobody's fields are fought over.
    fn drift_elsewhere(&self) -> bool {
        let Some(obj) = &self.dry_run else {
            return false;
        };
        matches!(self.change, Change::Drifted(_))
            && self.took_back.is_none()
            && self.live.as_deref().is_some_and(|l| l.starts_with('g'))
            && self.live.as_deref() == Some(crate::cluster::apply::observed(&obj.metadata).as_str())
    }

    /// From the dry run: whether the object exists, and at which resourceVersion.
    fn existing(&self) -> Option<Option<&str>> {
        let obj = self.dry_run.as_ref()?;
        Some(
            obj.metadata
                .resource_version
                .as_deref()
                .filter(|rv| !rv.is_empty()),
        )
    }

    /// From the dry run: a Deployment's revision before this sync.
    fn existing_revision(&self) -> Option<i64> {
        crate::rollout::revisions::revision_of(&self.dry_run.as_ref()?.metadata)
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
}

impl SyncOptions {
    /// A normal sync started by `trigger`.
    pub fn new(trigger: Trigger) -> Self {
        SyncOptions {
            trigger,
            force: false,
            wait: true,
            accept_rewind: false,
            requested: Instant::now(),
        }
    }
}

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
        let mut run = Run::new(self, app, options, shutdown, report);
        let ended = match run.lock().await {
            Ok(()) => run.steps().await,
            Err(stop) => Err(stop),
        };
        run.rec.outcome = match ended {
            Ok(outcome) => outcome,
            Err(Stop::Failed) => Outcome::Failed,
            Err(Stop::Interrupted) => Outcome::Interrupted,
        };
        let inputs = run.inputs.take();
        let record = run.end(clock);
        match inputs {
            Some(i) if matches!(record.outcome, Outcome::Succeeded | Outcome::NoChange) => {
                let objects = record.managed();
                self.inputs.keep(&app.name, Inputs { objects, ..i });
            }
            _ => self.inputs.forget(&app.name),
        }
        record
    }

    /// Appends the record to the history and logs it. A record that cannot be written
    /// turns the outcome into `failed` (with the reason among its errors): a sync is never
    /// reported as succeeded when nobody can read what it did.
    fn record(&self, rec: &mut SyncRecord) {
        let appended = self.history.append(rec).and_then(|()| {
            self.history.retain(
                &rec.app,
                self.agent.history_keep,
                self.agent.history_max_age,
            )
        });
        if let Err(e) = appended {
            rec.outcome = Outcome::Failed;
            let e = SyncError::Unrecorded(e);
            rec.errors.push(RecordError {
                message: e.to_string(),
                source: None,
            });
            tracing::error!(app = %rec.app, error = %e, "cannot write the sync history");
        }
        let commit = rec.commit.as_ref().map(|c| c.short()).unwrap_or("-");
        // The level says how it went, so that `journalctl -p err` and level-based alerts
        // see failures (a macro: tracing's levels are fixed per call site).
        macro_rules! logged {
            ($level:expr) => {
                tracing::event!(
                    $level,
                    app = %rec.app,
                    commit,
                    outcome = rec.outcome.as_str(),
                    duration_ms = rec.duration_ms,
                    changes = rec.changes(),
                    errors = rec.errors.len(),
                    trigger = rec.trigger.as_str(),
                    "sync {}",
                    rec.outcome.as_str()
                )
            };
        }
        match rec.outcome {
            Outcome::Failed => logged!(tracing::Level::ERROR),
            Outcome::Interrupted | Outcome::Held => logged!(tracing::Level::WARN),
            _ => logged!(tracing::Level::INFO),
        }
    }
}

impl<'a> Run<'a> {
    /// A run for a one-shot command (`berth plan`, `berth rollback`): started from the
    /// command line, never interrupted.
    fn for_command(syncer: &'a Syncer, app: &'a AppConfig, report: Report<'a>) -> Self {
        Run::new(
            syncer,
            app,
            SyncOptions::new(Trigger::Cli),
            shutdown::never(),
            report,
        )
    }

    fn new(
        syncer: &'a Syncer,
        app: &'a AppConfig,
        options: SyncOptions,
        shutdown: &'a Signal,
        report: Report<'a>,
    ) -> Self {
        let started = jiff::Timestamp::now();
        let trigger = options.trigger;
        let client = match crate::cluster::client::Identity::of(app) {
            Some(identity) => crate::cluster::client::impersonating(&syncer.client, &identity),
            None => syncer.client.clone(),
        };
        Run {
            syncer,
            app,
            client,
            options,
            shutdown,
            report,
            rec: SyncRecord {
                host: Some(syncer.host.clone()),
                ..SyncRecord::new(new_id(started), &app.name, trigger, started, None)
            },
            lock: None,
            inventory_version: None,
            begun: Instant::now(),
            inputs: None,
            bodies: false,
        }
    }

    /// One sync, as Flux's reconcile reads: prepare → skip when held or unchanged →
    /// validate and apply → roll out (and wait for every other kind's health) → prune →
    /// record (the inventory here, the history
    /// record in [`Syncer::sync`]). Each step records its errors and stops what follows:
    /// a broken commit writes nothing and prunes nothing.
    async fn steps(&mut self) -> Result<Outcome, Stop> {
        self.mark("fetch");
        let checkout = self.fetch().await?;
        if let Some(outcome) = self.untouched(&checkout) {
            return Ok(outcome);
        }
        let prepared = self.prepare(checkout).await?;
        if let Some(outcome) = self.skip(&prepared) {
            return Ok(outcome);
        }
        self.interrupted()?;
        let Prepared {
            inventory,
            checkout,
            kinds,
            plan,
        } = prepared;
        let Plan {
            planned,
            deferred,
            prune,
        } = plan;
        let (same, mut writes) = split_writes(planned);
        self.rec.unchanged = same.len();
        self.mark("dry run");
        let validated = self.validate(&mut writes).await?;
        let ahead = self.write_ahead(&inventory, &writes).await?;
        if let Err(stop) = self.apply_validated(&mut writes, validated, deferred).await {
            let partial = plan::next_inventory(&ahead, None, written(&writes));
            self.store_inventory(&ahead, &partial).await;
            return Err(stop);
        }
        let mut next = plan::next_inventory(&inventory, Some(&same), written(&writes));
        next.commit = Some(checkout.commit.sha.clone());
        self.mark("roll out");
        let rolled_out = self
            .roll_out(&writes, &inventory, &mut next, &checkout.commit.sha)
            .await;
        let healthy = match rolled_out {
            Ok(()) => {
                self.mark("health");
                self.wait_healthy(&writes, &inventory, &mut next).await
            }
            Err(stop) => Err(stop),
        };
        let pruned = match healthy {
            Ok(()) => {
                self.mark("prune");
                self.prune_step(&kinds, prune, &inventory, &mut next).await
            }
            Err(stop) => {
                // Not pruned now (a failed, held or interrupted rollout): still the app's,
                // so that a later sync prunes them.
                next.objects.extend(prune);
                Err(stop)
            }
        };
        self.mark("inventory");
        self.store_inventory(&ahead, &next).await;
        pruned?;
        if self.rec.errors.is_empty() {
            Ok(Outcome::Succeeded)
        } else {
            Err(Stop::Failed)
        }
    }

    /// A commit that changes none of the paths the app's last good sync read is not
    /// synced again (no request to the cluster) when a push triggered the sync, or when
    /// `berth sync` finds a new commit (not `--force`); the interval's syncs, and `berth
    /// sync` of the commit already synced, still compare with the cluster, which finds
    /// drift. An app whose kustomizations reach remote bases reads more than its commit:
    /// never skipped.
    fn untouched(&mut self, checkout: &Checkout) -> Option<Outcome> {
        if self.app.allow_remote_bases {
            return None;
        }
        let sha = &checkout.commit.sha;
        let last = match self.options.trigger {
            Trigger::Notify | Trigger::Webhook => self.syncer.inputs.get(self.app)?,
            Trigger::Cli if !self.options.force => {
                Some(self.syncer.inputs.get(self.app)?).filter(|last| last.commit != *sha)?
            }
            _ => return None,
        };
        let digest = git::paths_digest(&checkout.source, sha, &last.paths)?;
        if digest != last.digest {
            return None;
        }
        let shown: Vec<&str> = last
            .paths
            .iter()
            .map(|p| if p.is_empty() { "." } else { p.as_str() })
            .collect();
        let note = format!(
            "no change: commit {} changes nothing under {}",
            checkout.commit.short(),
            shown.join(", ")
        );
        (self.report)(&note);
        self.rec.note = Some(note);
        self.rec.unchanged = last.objects;
        self.inputs = Some(Inputs {
            commit: sha.clone(),
            ..last
        });
        Some(Outcome::NoChange)
    }

    /// A commit held after a failed rollout is not applied again unless forced; a commit
    /// already applied, with nothing changed or drifted, sends no write at all.
    fn skip(&mut self, prepared: &Prepared) -> Option<Outcome> {
        let Prepared {
            inventory,
            checkout,
            plan,
            ..
        } = prepared;
        let sha = checkout.commit.sha.as_str();
        if let Some(held) = inventory.held_at(sha).filter(|_| !self.options.force) {
            let note = format!(
                "held: {}; waiting for a new commit (berth sync --force retries this one)",
                held.reason
            );
            (self.report)(&note);
            self.rec.note = Some(note);
            return Some(Outcome::Held);
        }
        // A commit that changes none of the app's objects writes nothing, not even the
        // inventory's commit (which stays the last commit that changed something).
        if plan.is_no_op() && inventory.held.is_none() {
            self.rec.unchanged = plan.planned.len();
            (self.report)(&format!(
                "no change: {} match {}",
                crate::plural(plan.planned.len(), "object"),
                checkout.commit.short()
            ));
            return Some(Outcome::NoChange);
        }
        None
    }

    /// Follows the rollouts of the Deployments written and applies the failure policy: a
    /// rolled-back or halted commit holds the app, and its rolled-back entries never match
    /// git again (so a forced sync re-applies them).
    async fn roll_out(
        &mut self,
        writes: &[Write],
        old: &Inventory,
        next: &mut Inventory,
        sha: &str,
    ) -> Result<(), Stop> {
        let rollouts = self.rollouts(writes, old).await;
        for e in next
            .objects
            .iter_mut()
            .filter(|e| rollouts.rolled_back.contains(&e.key))
        {
            e.digest = "rolled-back".into();
        }
        if let Some(reason) = rollouts.held {
            next.held = Some(Held {
                commit: sha.to_string(),
                reason,
            });
            return Err(Stop::Failed);
        }
        if !rollouts.unfinished.is_empty() {
            // As if this sync had not written them: the next one (after a restart, say)
            // writes them again, finds their generation moved, follows them to the end and
            // applies the failure policy.
            *next = plan::unfinished(next, old, &rollouts.unfinished);
            return Err(Stop::Interrupted);
        }
        Ok(())
    }

    /// Records an error of this sync (and says it).
    fn fail(&mut self, e: impl Into<SyncError>) {
        let e = e.into();
        let message = e.to_string();
        (self.report)(&format!("error: {message}"));
        self.rec.errors.push(RecordError {
            message,
            source: e.origin(),
        });
    }

    fn interrupted(&self) -> Result<(), Stop> {
        if shutdown::is_stopped(self.shutdown) {
            Err(Stop::Interrupted)
        } else {
            Ok(())
        }
    }

    fn settings(&self) -> ApplySettings {
        ApplySettings {
            field_manager: self.syncer.agent.field_manager.clone(),
            force: self.app.force_conflicts,
            concurrency: self.syncer.agent.concurrency,
            bodies: self.bodies,
        }
    }
}

/// Splits planned objects into the unchanged ones (by key) and those to write.
fn split_writes(planned: Vec<crate::plan::Planned>) -> (Vec<ObjectKey>, Vec<Write>) {
    let (same, changed) = plan::split(planned);
    let writes = changed
        .into_iter()
        .map(|p| Write {
            live: p.live,
            ..Write::new(p.target, p.change, p.digest)
        })
        .collect();
    (same, writes)
}

/// The inventory entries of what was applied.
fn written(writes: &[Write]) -> Vec<Entry> {
    writes
        .iter()
        .filter_map(|w| {
            let obj = w.applied.as_ref()?;
            Some(Entry {
                key: w.target.manifest.key(),
                api_version: w.target.manifest.api_version().to_string(),
                digest: w.digest.clone(),
                observed: observed(&obj.metadata),
            })
        })
        .collect()
}
