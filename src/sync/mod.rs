//! One sync of one app, end to end, as named steps:
//! inventory → fetch → discover → render → plan → validate (dry run) → apply (staged) →
//! prune → inventory → record. Each step is its own function; a failed step records its
//! errors and stops the sync before anything later runs — a broken commit writes nothing
//! and prunes nothing.
//!
//! [`apply`] holds the validate-and-apply steps, [`rollouts`] following changed
//! Deployments and the failure policy.

mod apply;
mod manual;
mod preview;
mod rollouts;

pub use manual::{RollbackRefused, RollbackRequest};
pub use preview::{PlannedObject, Preview};

use std::time::Instant;

use kube::api::DynamicObject;

use crate::cluster::apply::{observed, ApplySettings, Target};
use crate::cluster::discovery::ClusterKinds;
use crate::cluster::inventory::{self, Entry, Held, Inventory};
use crate::cluster::{prune, ClusterError};
use crate::config::{AgentConfig, AppConfig};
use crate::history::{new_id, HistoryLog, ObjectAction, Outcome, RecordError, SyncRecord, Trigger};
use crate::manifest::{Builder, Limits, Manifest, ObjectKey};
use crate::plan::{self, Change, Plan};
use crate::shutdown::{self, Signal};
use crate::source::git::{self, Checkout};

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
}

/// What a sync knows before its first write.
struct Prepared {
    inventory: Inventory,
    checkout: Checkout,
    kinds: ClusterKinds,
    plan: Plan,
}

struct Run<'a> {
    syncer: &'a Syncer,
    app: &'a AppConfig,
    options: SyncOptions,
    shutdown: &'a Signal,
    report: Report<'a>,
    rec: SyncRecord,
}

impl Syncer {
    /// Connects to the cluster named in `config`.
    ///
    /// # Errors
    /// No client could be made.
    pub async fn connect(
        config: &crate::config::Config,
        engine_supervised: bool,
    ) -> Result<Self, ClusterError> {
        Ok(Syncer {
            client: crate::cluster::client::connect(&config.cluster).await?,
            agent: config.agent.clone(),
            history: HistoryLog::new(&config.agent.state_dir),
            engine_supervised,
        })
    }
}

impl Write {
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
}

impl SyncOptions {
    /// A normal sync started by `trigger`.
    pub fn new(trigger: Trigger) -> Self {
        SyncOptions {
            trigger,
            force: false,
            wait: true,
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
        run.rec.outcome = match run.steps().await {
            Ok(outcome) => outcome,
            Err(Stop::Failed) => Outcome::Failed,
            Err(Stop::Interrupted) => Outcome::Interrupted,
        };
        run.rec.finished_at = jiff::Timestamp::now();
        run.rec.duration_ms = clock.elapsed().as_millis() as u64;
        if run.rec.outcome != Outcome::Held {
            self.record(&run.rec);
        }
        run.rec
    }

    fn record(&self, rec: &SyncRecord) {
        let commit = rec.commit.as_ref().map(|c| c.short()).unwrap_or("-");
        tracing::info!(
            app = %rec.app,
            commit,
            outcome = rec.outcome.as_str(),
            duration_ms = rec.duration_ms,
            changes = rec.changes(),
            errors = rec.errors.len(),
            trigger = rec.trigger.as_str(),
            "sync {}",
            rec.outcome.as_str()
        );
        let appended = self.history.append(rec).and_then(|()| {
            self.history.retain(
                &rec.app,
                self.agent.history_keep,
                self.agent.history_max_age,
            )
        });
        if let Err(e) = appended {
            tracing::error!(app = %rec.app, error = %e, "cannot write the sync history");
        }
    }
}

impl<'a> Run<'a> {
    fn new(
        syncer: &'a Syncer,
        app: &'a AppConfig,
        options: SyncOptions,
        shutdown: &'a Signal,
        report: Report<'a>,
    ) -> Self {
        let started = jiff::Timestamp::now();
        let trigger = options.trigger;
        Run {
            syncer,
            app,
            options,
            shutdown,
            report,
            rec: SyncRecord {
                id: new_id(started),
                app: app.name.clone(),
                trigger,
                started_at: started,
                finished_at: started,
                duration_ms: 0,
                commit: None,
                previous_commit: None,
                history_rewritten: None,
                outcome: Outcome::Failed,
                unchanged: 0,
                objects: Vec::new(),
                errors: Vec::new(),
                rollouts: Vec::new(),
                note: None,
                fetch_ms: None,
                requests: 0,
            },
        }
    }

    /// Everything before the first write: inventory, fetch, discovery, render, plan.
    async fn prepare(&mut self) -> Result<Prepared, Stop> {
        let inventory = self.load_inventory().await?;
        let checkout = self.fetch(inventory.commit.clone()).await?;
        let kinds = self.discover().await?;
        let manifests = self.render(&checkout, &kinds)?;
        self.guard_empty(&manifests, &inventory)?;
        let plan = self.plan(manifests, &kinds, &inventory).await?;
        Ok(Prepared {
            inventory,
            checkout,
            kinds,
            plan,
        })
    }

    /// One sync, as Flux's reconcile reads: prepare → skip when held or unchanged →
    /// validate and apply → roll out → prune → record (the inventory here, the history
    /// record in [`Syncer::sync`]). Each step records its errors and stops what follows:
    /// a broken commit writes nothing and prunes nothing.
    async fn steps(&mut self) -> Result<Outcome, Stop> {
        let prepared = self.prepare().await?;
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
        if let Err(stop) = self.validate_and_apply(&mut writes, deferred).await {
            let partial = plan::next_inventory(&inventory, None, written(&writes));
            self.store_inventory(&inventory, &partial).await;
            return Err(stop);
        }
        let mut next = plan::next_inventory(&inventory, Some(&same), written(&writes));
        next.commit = Some(checkout.commit.sha.clone());
        let rolled_out = self
            .roll_out(&writes, &mut next, &checkout.commit.sha)
            .await;
        let pruned = match rolled_out {
            Ok(()) => self.prune_step(&kinds, prune, &inventory, &mut next).await,
            Err(stop) => Err(stop),
        };
        self.store_inventory(&inventory, &next).await;
        pruned?;
        if self.rec.errors.is_empty() {
            Ok(Outcome::Succeeded)
        } else {
            Err(Stop::Failed)
        }
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
        if plan.is_no_op() && inventory.commit.as_deref() == Some(sha) && inventory.held.is_none() {
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
        next: &mut Inventory,
        sha: &str,
    ) -> Result<(), Stop> {
        let rollouts = self.rollouts(writes).await;
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
        if rollouts.interrupted {
            return Err(Stop::Interrupted);
        }
        Ok(())
    }

    /// Prunes what the commit no longer holds (with `prune = true`). Entries whose deletion
    /// failed stay in the inventory with the old commit, so the next sync tries again; a
    /// shutdown before the prune leaves every candidate to the next sync.
    async fn prune_step(
        &mut self,
        kinds: &ClusterKinds,
        candidates: Vec<Entry>,
        old: &Inventory,
        next: &mut Inventory,
    ) -> Result<(), Stop> {
        if !self.app.prune || candidates.is_empty() {
            return Ok(());
        }
        if let Err(stop) = self.interrupted() {
            next.objects.extend(candidates);
            next.commit = old.commit.clone();
            return Err(stop);
        }
        let kept_back = self.prune(kinds, &candidates).await;
        if !kept_back.is_empty() {
            next.objects.extend(kept_back);
            next.commit = old.commit.clone();
        }
        Ok(())
    }

    fn fail(&mut self, message: String, source: Option<String>) {
        (self.report)(&format!("error: {message}"));
        self.rec.errors.push(RecordError { message, source });
    }

    fn fail_cluster(&mut self, e: ClusterError) {
        let source = match &e {
            ClusterError::UnknownKind { origin, .. } => Some(origin.to_string()),
            ClusterError::Object { origin, .. } => Some(origin.clone()),
            _ => None,
        };
        self.fail(e.to_string(), source);
    }

    fn interrupted(&self) -> Result<(), Stop> {
        if shutdown::is_stopped(self.shutdown) {
            Err(Stop::Interrupted)
        } else {
            Ok(())
        }
    }

    async fn load_inventory(&mut self) -> Result<Inventory, Stop> {
        let ns = &self.syncer.agent.inventory_namespace;
        match inventory::load(&self.syncer.client, ns, &self.app.name).await {
            Ok(inv) => {
                let inv = inv.unwrap_or_default();
                self.rec.previous_commit = inv.commit.clone();
                Ok(inv)
            }
            Err(e) => {
                self.fail_cluster(e);
                Err(Stop::Failed)
            }
        }
    }

    async fn fetch(&mut self, previous: Option<String>) -> Result<Checkout, Stop> {
        let app = self.app.clone();
        let state_dir = self.syncer.agent.state_dir.clone();
        (self.report)(&format!(
            "fetching {}",
            git::redact_url(&git::remote_url(&app.repo))
        ));
        let clock = Instant::now();
        let fetched = tokio::task::spawn_blocking(move || {
            git::fetch_and_checkout(&app, &state_dir, previous.as_deref())
        })
        .await;
        self.rec.fetch_ms = Some(clock.elapsed().as_millis() as u64);
        match fetched {
            Ok(Ok(checkout)) => {
                let c = &checkout.commit;
                (self.report)(&format!(
                    "commit {} {:?} by {}",
                    c.short(),
                    c.subject,
                    c.author
                ));
                if let Some(note) = &checkout.history_rewritten {
                    (self.report)(&format!("warning: {note}"));
                }
                self.rec.commit = Some(c.clone());
                self.rec.history_rewritten = checkout.history_rewritten.clone();
                Ok(checkout)
            }
            Ok(Err(e)) => {
                self.fail(
                    format!("{e}; the cluster keeps its last applied state"),
                    None,
                );
                Err(Stop::Failed)
            }
            Err(e) => {
                self.fail(format!("the fetch task failed: {e}"), None);
                Err(Stop::Failed)
            }
        }
    }

    async fn discover(&mut self) -> Result<ClusterKinds, Stop> {
        ClusterKinds::discover(&self.syncer.client)
            .await
            .map_err(|e| {
                self.fail_cluster(e);
                Stop::Failed
            })
    }

    fn render(&mut self, checkout: &Checkout, kinds: &ClusterKinds) -> Result<Vec<Manifest>, Stop> {
        let limits = Limits {
            max_file_size: self.syncer.agent.max_file_size,
            max_app_size: self.syncer.agent.max_app_size,
        };
        let builder = match Builder::for_app(self.app, &checkout.dir, limits, kinds) {
            Ok(b) => b,
            Err(e) => {
                self.fail(format!("invalid glob in app {}: {e}", self.app.name), None);
                return Err(Stop::Failed);
            }
        };
        match builder.render() {
            Ok(manifests) => {
                (self.report)(&format!(
                    "rendered {}",
                    crate::plural(manifests.len(), "object")
                ));
                Ok(manifests)
            }
            Err(errors) => {
                for e in errors.into_vec() {
                    self.fail(e.to_string(), None);
                }
                (self.report)("render failed: nothing was written");
                Err(Stop::Failed)
            }
        }
    }

    fn guard_empty(&mut self, manifests: &[Manifest], inventory: &Inventory) -> Result<(), Stop> {
        if manifests.is_empty()
            && !inventory.objects.is_empty()
            && self.app.prune
            && !self.app.allow_empty
        {
            self.fail(
                format!(
                    "the commit holds no objects: refusing to prune all {} of app {} (set allow_empty = true if that is what you want)",
                    crate::plural(inventory.objects.len(), "object"),
                    self.app.name
                ),
                None,
            );
            return Err(Stop::Failed);
        }
        Ok(())
    }

    async fn plan(
        &mut self,
        manifests: Vec<Manifest>,
        kinds: &ClusterKinds,
        inventory: &Inventory,
    ) -> Result<Plan, Stop> {
        let resources = manifests
            .iter()
            .filter_map(|m| Some((kinds.resolve(m)?, m.namespace().map(str::to_string))))
            .chain(inventory.objects.iter().filter_map(|e| {
                Some((
                    kinds.resolve_kind(&e.api_version, &e.key.kind)?,
                    e.key.namespace.clone(),
                ))
            }));
        let live = match inventory::live_objects(
            &self.syncer.client,
            resources.collect::<Vec<_>>(),
            &self.app.name,
        )
        .await
        {
            Ok(live) => live,
            Err(e) => {
                self.fail_cluster(e);
                return Err(Stop::Failed);
            }
        };
        match plan::plan(manifests, |m| kinds.resolve(m), inventory, &live) {
            Ok(plan) => Ok(plan),
            Err(errors) => {
                errors.into_iter().for_each(|e| self.fail_cluster(e));
                Err(Stop::Failed)
            }
        }
    }

    fn settings(&self) -> ApplySettings {
        ApplySettings {
            field_manager: self.syncer.agent.field_manager.clone(),
            force: self.app.force_conflicts,
            concurrency: self.syncer.agent.concurrency,
        }
    }

    /// Prunes the candidates; returns the entries that must stay in the inventory
    /// (their deletion failed, or the live objects could not be listed).
    async fn prune(&mut self, kinds: &ClusterKinds, candidates: &[Entry]) -> Vec<Entry> {
        let resources: Vec<_> = candidates
            .iter()
            .filter_map(|e| {
                Some((
                    kinds.resolve_kind(&e.api_version, &e.key.kind)?,
                    e.key.namespace.clone(),
                ))
            })
            .collect();
        let live =
            match inventory::live_objects(&self.syncer.client, resources, &self.app.name).await {
                Ok(live) => live,
                Err(e) => {
                    self.fail_cluster(e);
                    return candidates.to_vec();
                }
            };
        let client = &self.syncer.client;
        let concurrency = self.syncer.agent.concurrency;
        self.rec.requests += candidates.len() as u64;
        let results = prune::prune(
            client,
            kinds,
            &self.app.name,
            candidates,
            &live,
            concurrency,
        )
        .await;
        let mut kept_back = Vec::new();
        for (entry, r) in candidates.iter().zip(results) {
            if let Some(e) = r.error {
                kept_back.push(entry.clone());
                self.fail_cluster(e);
            }
            let note = r
                .note
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            (self.report)(&format!("{} {}{note}", r.key.kubectl(), r.action.as_str()));
            self.rec.objects.push(ObjectAction {
                key: r.key,
                action: r.action,
                source: None,
                note: r.note,
            });
        }
        kept_back
    }

    async fn store_inventory(&mut self, old: &Inventory, next: &Inventory) {
        if old == next {
            return;
        }
        self.rec.requests += 1;
        let agent = &self.syncer.agent;
        if let Err(e) = inventory::store(
            &self.syncer.client,
            &agent.inventory_namespace,
            &self.app.name,
            &agent.field_manager,
            next,
        )
        .await
        {
            self.fail_cluster(e);
        }
    }
}

/// Splits planned objects into the unchanged ones (by key) and those to write.
fn split_writes(planned: Vec<crate::plan::Planned>) -> (Vec<ObjectKey>, Vec<Write>) {
    let (same, changed) = plan::split(planned);
    let writes = changed
        .into_iter()
        .map(|p| Write {
            target: p.target,
            change: p.change,
            digest: p.digest,
            dry_run: None,
            applied: None,
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
