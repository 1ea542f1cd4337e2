//! One sync of one app, end to end, as named steps:
//! inventory → fetch → discover → render → plan → validate (dry run) → apply (staged) →
//! prune → inventory → record. Each step is its own function; a failed step records its
//! errors and stops the sync before anything later runs — a broken commit writes nothing
//! and prunes nothing.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::DynamicObject;
use kube::runtime::wait::{await_condition, conditions};
use tokio::sync::watch;

use crate::cluster::apply::{apply_all, observed, stage, ApplySettings, Target};
use crate::cluster::discovery::ClusterKinds;
use crate::cluster::inventory::{self, Entry, Inventory};
use crate::cluster::{prune, ClusterError};
use crate::config::{AgentConfig, AppConfig};
use crate::history::{
    new_id, Action, HistoryLog, ObjectAction, Outcome, RecordError, SyncRecord, Trigger,
};
use crate::manifest::{Builder, Limits, Manifest, ObjectKey};
use crate::plan::{self, Change, Plan};
use crate::source::git::{self, Checkout};

/// Where progress lines go: the terminal for `berth sync`, the log for the daemon.
pub type Report<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// How long to wait for a CRD of the commit to be Established.
const CRD_TIMEOUT: Duration = Duration::from_secs(60);

/// What every sync of an agent shares.
pub struct Syncer {
    /// The cluster.
    pub client: kube::Client,
    /// Agent settings.
    pub agent: AgentConfig,
    /// The history log.
    pub history: HistoryLog,
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
    /// From the dry run: the live resourceVersion, or `None` when it does not exist yet.
    existing: Option<Option<String>>,
    applied: Option<DynamicObject>,
}

struct Run<'a> {
    syncer: &'a Syncer,
    app: &'a AppConfig,
    shutdown: &'a watch::Receiver<bool>,
    report: Report<'a>,
    rec: SyncRecord,
}

impl Syncer {
    /// Syncs one app and records the attempt in the history log (and the log).
    pub async fn sync(
        &self,
        app: &AppConfig,
        trigger: Trigger,
        shutdown: &watch::Receiver<bool>,
        report: Report<'_>,
    ) -> SyncRecord {
        let clock = Instant::now();
        let started = jiff::Timestamp::now();
        let mut run = Run {
            syncer: self,
            app,
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
            },
        };
        run.rec.outcome = match run.steps().await {
            Ok(outcome) => outcome,
            Err(Stop::Failed) => Outcome::Failed,
            Err(Stop::Interrupted) => Outcome::Interrupted,
        };
        run.rec.finished_at = jiff::Timestamp::now();
        run.rec.duration_ms = clock.elapsed().as_millis() as u64;
        self.record(&run.rec);
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

impl Run<'_> {
    async fn steps(&mut self) -> Result<Outcome, Stop> {
        let inventory = self.load_inventory().await?;
        let checkout = self.fetch(inventory.commit.clone()).await?;
        let kinds = self.discover().await?;
        let manifests = self.render(&checkout, &kinds)?;
        self.guard_empty(&manifests, &inventory)?;
        let plan = self.plan(manifests, &kinds, &inventory).await?;
        let sha = checkout.commit.sha.clone();
        if plan.is_no_op() && inventory.commit.as_deref() == Some(sha.as_str()) {
            self.rec.unchanged = plan.planned.len();
            (self.report)(&format!(
                "no change: {} objects match {}",
                plan.planned.len(),
                checkout.commit.short()
            ));
            return Ok(Outcome::NoChange);
        }
        self.interrupted()?;
        let Plan {
            planned,
            deferred,
            prune,
        } = plan;
        let mut old = Vec::new();
        let mut writes = Vec::new();
        for p in planned {
            match p.change {
                Change::Same => old.push(p.target.manifest.key()),
                change => writes.push(Write {
                    target: p.target,
                    change,
                    digest: p.digest,
                    existing: None,
                    applied: None,
                }),
            }
        }
        self.rec.unchanged = old.len();
        if let Err(stop) = self.validate_and_apply(&mut writes, deferred).await {
            let partial = next_inventory(&inventory, None, &writes);
            self.store_inventory(&inventory, &partial).await;
            return Err(stop);
        }
        let mut next = next_inventory(&inventory, Some(&old), &writes);
        next.commit = Some(sha);
        if self.app.prune && !prune.is_empty() {
            let kept_back = self.prune(&kinds, &prune).await;
            if !kept_back.is_empty() {
                next.objects.extend(kept_back);
                next.commit = inventory.commit.clone();
            }
        }
        self.store_inventory(&inventory, &next).await;
        if self.rec.errors.is_empty() {
            Ok(Outcome::Succeeded)
        } else {
            Err(Stop::Failed)
        }
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
        if *self.shutdown.borrow() {
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
        let fetched = tokio::task::spawn_blocking(move || {
            git::fetch_and_checkout(&app, &state_dir, previous.as_deref())
        })
        .await;
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
                (self.report)(&format!("rendered {} objects", manifests.len()));
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
                    "the commit holds no objects: refusing to prune all {} objects of app {} (set allow_empty = true if that is what you want)",
                    inventory.objects.len(),
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
        let resources = manifests.iter().filter_map(|m| kinds.resolve(m)).chain(
            inventory
                .objects
                .iter()
                .filter_map(|e| kinds.resolve_kind(&e.api_version, &e.key.kind)),
        );
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

    /// Dry-runs every object that can be checked before the first write, then applies
    /// stage by stage. Objects in a namespace this commit creates, and objects of kinds a
    /// CRD of this commit defines, can only be checked once stage 0 is applied: they are
    /// dry-run right after it, before any other write.
    async fn validate_and_apply(
        &mut self,
        writes: &mut Vec<Write>,
        deferred: Vec<Manifest>,
    ) -> Result<(), Stop> {
        let first: Vec<usize> = (0..writes.len())
            .filter(|&i| stage(&writes[i].target) == 0)
            .collect();
        self.dry_run(writes, &first).await?;
        let new_namespaces: HashSet<String> = first
            .iter()
            .filter(|&&i| {
                writes[i].target.manifest.kind() == "Namespace" && writes[i].existing == Some(None)
            })
            .map(|&i| writes[i].target.manifest.name().to_string())
            .collect();
        let (now, late): (Vec<usize>, Vec<usize>) = (0..writes.len())
            .filter(|i| !first.contains(i))
            .partition(|&i| {
                writes[i]
                    .target
                    .manifest
                    .namespace()
                    .is_none_or(|ns| !new_namespaces.contains(ns))
            });
        self.dry_run(writes, &now).await?;
        let count = writes.len() + deferred.len();
        (self.report)(&format!("dry run passed; applying {count} objects"));
        self.apply(writes, &first).await?;
        self.wait_for_crds(writes, &first).await?;
        let mut late = late;
        if !deferred.is_empty() {
            late.extend(self.resolve_deferred(writes, deferred).await?);
        }
        self.dry_run(writes, &late).await?;
        for s in 1..=2 {
            self.interrupted()?;
            let indices: Vec<usize> = (0..writes.len())
                .filter(|&i| !first.contains(&i) && stage(&writes[i].target) == s)
                .collect();
            self.apply(writes, &indices).await?;
        }
        Ok(())
    }

    async fn dry_run(&mut self, writes: &mut [Write], indices: &[usize]) -> Result<(), Stop> {
        let targets: Vec<&Target> = indices.iter().map(|&i| &writes[i].target).collect();
        let results = apply_all(&self.syncer.client, &self.settings(), &targets, true).await;
        let mut failed = false;
        for (&i, result) in indices.iter().zip(results) {
            match result {
                Ok(obj) => {
                    writes[i].existing =
                        Some(obj.metadata.resource_version.filter(|rv| !rv.is_empty()))
                }
                Err(e) => {
                    failed = true;
                    self.fail_cluster(e);
                }
            }
        }
        if failed {
            (self.report)("dry run failed: nothing was written");
            return Err(Stop::Failed);
        }
        Ok(())
    }

    async fn apply(&mut self, writes: &mut [Write], indices: &[usize]) -> Result<(), Stop> {
        let targets: Vec<&Target> = indices.iter().map(|&i| &writes[i].target).collect();
        let results = apply_all(&self.syncer.client, &self.settings(), &targets, false).await;
        let mut failed = false;
        for (&i, result) in indices.iter().zip(results) {
            let w = &mut writes[i];
            let key = w.target.manifest.key();
            let source = Some(w.target.manifest.origin.to_string());
            let (action, note) = match result {
                Ok(obj) => {
                    let action = match &w.existing {
                        Some(None) | None => Action::Created,
                        Some(Some(rv)) if obj.metadata.resource_version.as_ref() == Some(rv) => {
                            Action::Unchanged
                        }
                        Some(Some(_)) => Action::Configured,
                    };
                    w.applied = Some(obj);
                    let note = match &w.change {
                        Change::Drifted(why) => Some(format!("drift: {why}")),
                        _ => None,
                    };
                    (action, note)
                }
                Err(e) => {
                    failed = true;
                    self.fail_cluster(e);
                    (Action::Failed, None)
                }
            };
            if action == Action::Unchanged {
                self.rec.unchanged += 1;
                continue;
            }
            (self.report)(&format!(
                "{} {}{}",
                describe(&key),
                action.as_str(),
                note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
            ));
            self.rec.objects.push(ObjectAction {
                key,
                action,
                source,
                note,
            });
        }
        if failed {
            return Err(Stop::Failed);
        }
        Ok(())
    }

    async fn wait_for_crds(&mut self, writes: &[Write], indices: &[usize]) -> Result<(), Stop> {
        let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(self.syncer.client.clone());
        for &i in indices {
            let m = &writes[i].target.manifest;
            if m.kind() != "CustomResourceDefinition" {
                continue;
            }
            let established =
                await_condition(crds.clone(), m.name(), conditions::is_crd_established());
            if !matches!(
                tokio::time::timeout(CRD_TIMEOUT, established).await,
                Ok(Ok(Some(_)))
            ) {
                self.fail(
                    format!(
                        "{}: CustomResourceDefinition {} did not become Established within {}s",
                        m.origin,
                        m.name(),
                        CRD_TIMEOUT.as_secs()
                    ),
                    Some(m.origin.to_string()),
                );
                return Err(Stop::Failed);
            }
        }
        Ok(())
    }

    /// Resolves the objects whose CRD was just applied; returns their indices in `writes`.
    async fn resolve_deferred(
        &mut self,
        writes: &mut Vec<Write>,
        deferred: Vec<Manifest>,
    ) -> Result<Vec<usize>, Stop> {
        let kinds = self.discover().await?;
        let mut added = Vec::new();
        for m in deferred {
            match kinds.require(&m) {
                Ok(resolved) => {
                    added.push(writes.len());
                    writes.push(Write {
                        digest: inventory::digest(&m),
                        target: Target {
                            manifest: m,
                            resolved,
                        },
                        change: Change::New,
                        existing: None,
                        applied: None,
                    });
                }
                Err(e) => self.fail_cluster(e),
            }
        }
        if !self.rec.errors.is_empty() {
            return Err(Stop::Failed);
        }
        Ok(added)
    }

    /// Prunes the candidates; returns the entries that must stay in the inventory
    /// (their deletion failed, or the live objects could not be listed).
    async fn prune(&mut self, kinds: &ClusterKinds, candidates: &[Entry]) -> Vec<Entry> {
        if self.interrupted().is_err() {
            return candidates.to_vec();
        }
        let resources: Vec<_> = candidates
            .iter()
            .filter_map(|e| kinds.resolve_kind(&e.api_version, &e.key.kind))
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
            (self.report)(&format!("{} {}{note}", describe(&r.key), r.action.as_str()));
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

/// The inventory after the writes: with `same` (a complete apply), the unchanged entries
/// and everything written; without (a failed apply), the old entries updated with what was
/// written, so that nothing applied is ever forgotten.
fn next_inventory(old: &Inventory, same: Option<&[ObjectKey]>, writes: &[Write]) -> Inventory {
    let written: HashSet<ObjectKey> = writes
        .iter()
        .filter(|w| w.applied.is_some())
        .map(|w| w.target.manifest.key())
        .collect();
    let keep = |e: &&Entry| !written.contains(&e.key) && same.is_none_or(|s| s.contains(&e.key));
    let mut objects: Vec<Entry> = old.objects.iter().filter(keep).cloned().collect();
    for w in writes {
        if let Some(obj) = &w.applied {
            objects.push(Entry {
                key: w.target.manifest.key(),
                api_version: w.target.manifest.api_version().to_string(),
                digest: w.digest.clone(),
                observed: observed(&obj.metadata),
            });
        }
    }
    Inventory {
        commit: old.commit.clone(),
        objects,
    }
}

/// `deployment.apps/web`, kubectl's way of naming an object; the namespace follows.
pub fn describe(key: &ObjectKey) -> String {
    let kind = key.kind.to_lowercase();
    let what = if key.group.is_empty() {
        kind
    } else {
        format!("{kind}.{}", key.group)
    };
    match &key.namespace {
        Some(ns) => format!("{what}/{} -n {ns}", key.name),
        None => format!("{what}/{}", key.name),
    }
}
