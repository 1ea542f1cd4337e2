//! berth's own rollout engine (`rollout.engine = "agent"`), for control planes that run
//! no Deployment controller: one [`Engine::pass`] is the controller's `syncDeployment`
//! (reference §2–§7) — create or reuse the hash-named, revision-annotated new
//! ReplicaSet, scale by the rolling or recreate rules or proportionally, clean up old
//! revisions, write the status and conditions — and [`Engine::drive`] runs passes on every
//! change it watches. All state lives in the cluster, so a restarted berth carries on.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::{json, Value};

use super::conditions::{self, condition, set_condition, FOUND_NEW_RS, NEW_RS_CREATED};
use super::hash::{template_hash, POD_TEMPLATE_HASH};
use super::predict::view;
use super::revisions::{self, replica_set_template, revision_of, selector, Owned, REVISION};
use super::steps::{self, DeploymentView, Pass, ReplicaSetView, Strategy};
use crate::shutdown::{stopped, Signal};

/// Marks the ReplicaSets the engine created; any other owned ReplicaSet means another
/// controller is at work.
pub const ENGINE_ANNOTATION: &str = "berth.dev/engine";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX: &str = "deployment.kubernetes.io/max-replicas";
const HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// Deployment annotations never copied to a ReplicaSet.
const SKIPPED: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    HISTORY,
    DESIRED,
    MAX,
    "deprecated.deployment.rollback.to",
];

/// Errors of the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Someone else reconciles the Deployment: the engine changes nothing.
    #[error("Deployment {deployment} is reconciled by another controller (ReplicaSet {replica_set} was not created by berth's engine): set rollout.engine = \"cluster\" for this app, or stop the other controller")]
    Foreign {
        /// `namespace/name`.
        deployment: String,
        /// The ReplicaSet berth did not create.
        replica_set: String,
    },
    /// A request failed.
    #[error("{what}: {source}")]
    Request {
        /// What was being done.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

fn request(what: impl Into<String>) -> impl FnOnce(kube::Error) -> EngineError {
    let what = what.into();
    move |source| EngineError::Request { what, source }
}

/// The engine for one cluster.
#[derive(Clone)]
pub struct Engine {
    /// The cluster.
    pub client: kube::Client,
    /// Field manager of its writes.
    pub field_manager: String,
}

/// What one pass read.
struct World {
    d: Deployment,
    template: Value,
    new: Option<ReplicaSet>,
    olds: Vec<ReplicaSet>,
}

fn replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

fn rs_name(rs: &ReplicaSet) -> String {
    rs.metadata.name.clone().unwrap_or_default()
}

fn annotation<'a>(rs: &'a ReplicaSet, key: &str) -> Option<&'a str> {
    rs.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn revision(rs: &ReplicaSet) -> i64 {
    revision_of(&rs.metadata).unwrap_or(0)
}

/// The step math's view of a ReplicaSet.
fn rs_view(rs: &ReplicaSet) -> ReplicaSetView {
    let created = rs
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second());
    ReplicaSetView {
        name: rs_name(rs),
        replicas: replicas(rs),
        available: rs
            .status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0),
        created: (created, rs_name(rs)),
        max_replicas: annotation(rs, MAX).and_then(|m| m.parse().ok()),
    }
}

/// `DeploymentComplete` on the cached status.
fn complete(d: &Deployment) -> bool {
    let want = view(d).replicas;
    d.status.as_ref().is_some_and(|s| {
        s.updated_replicas == Some(want)
            && s.replicas == Some(want)
            && s.available_replicas == Some(want)
            && s.observed_generation >= d.metadata.generation
    })
}

impl Engine {
    fn deployments(&self, ns: &str) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), ns)
    }

    async fn get(&self, ns: &str, name: &str) -> Result<Option<Deployment>, EngineError> {
        self.deployments(ns)
            .get_opt(name)
            .await
            .map_err(request(format!("reading Deployment {ns}/{name}")))
    }

    fn replica_sets(&self, ns: &str) -> Api<ReplicaSet> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Refuses when the Deployment has ReplicaSets the engine did not create.
    ///
    /// # Errors
    /// [`EngineError::Foreign`], or a failed request.
    pub async fn check_ownership(&self, ns: &str, name: &str) -> Result<(), EngineError> {
        match self.get(ns, name).await? {
            Some(d) => self.read(d).await.map(|_| ()),
            None => Ok(()),
        }
    }

    async fn read(&self, d: Deployment) -> Result<World, EngineError> {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let dname = d.metadata.name.clone().unwrap_or_default();
        let list = self
            .replica_sets(&ns)
            .list(&ListParams::default().labels(&selector(&d)))
            .await
            .map_err(request(format!("listing the ReplicaSets of {ns}/{dname}")))?;
        let Owned {
            template, new, old, ..
        } = revisions::owned(&d, list.items);
        if let Some(foreign) = new
            .iter()
            .chain(&old)
            .find(|rs| annotation(rs, ENGINE_ANNOTATION).is_none())
        {
            return Err(EngineError::Foreign {
                deployment: format!("{ns}/{dname}"),
                replica_set: rs_name(foreign),
            });
        }
        Ok(World {
            d,
            template,
            new,
            olds: old,
        })
    }

    /// One `syncDeployment` pass over Deployment `ns/name`. Returns when it must run again
    /// even if nothing changes (the progress deadline).
    ///
    /// # Errors
    /// [`EngineError::Foreign`] (nothing written), or a failed request.
    pub async fn pass(&self, ns: &str, name: &str) -> Result<Option<Timestamp>, EngineError> {
        let Some(d) = self.get(ns, name).await? else {
            return Ok(None);
        };
        let mut w = self.read(d).await?;
        let now = Timestamp::now();
        if w.d.metadata.deletion_timestamp.is_some() {
            let status = self.status_only(&w, now);
            return self.write_status(&w, status).await;
        }
        let v = view(&w.d);
        let paused = w.d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        let scaling = w.new.iter().chain(&w.olds).any(|rs| {
            replicas(rs) > 0
                && annotation(rs, DESIRED)
                    .and_then(|a| a.parse::<i32>().ok())
                    .is_some_and(|n| n != v.replicas)
        });
        let was_complete = complete(&w.d);
        if paused || scaling {
            if self.sync_revision(&mut w).await? {
                return Ok(Some(now));
            }
            self.scale_proportionally(&mut w, &v).await?;
            if paused {
                self.cleanup(&w).await?;
            }
            let status = self.status_only(&w, now);
            return self.write_status(&w, status).await;
        }
        let mut progressing_reason = None;
        // sync_revision is a no-op without a new ReplicaSet.
        if self.sync_revision(&mut w).await? {
            return Ok(Some(now));
        }
        let pass = match v.strategy {
            Strategy::RollingUpdate { .. } => {
                let olds: Vec<ReplicaSetView> = w.olds.iter().map(rs_view).collect();
                let new_name = self.new_name(&w);
                steps::rolling_pass(&v, w.new.as_ref().map(rs_view).as_ref(), &olds, &new_name)
            }
            Strategy::Recreate => {
                let olds: Vec<ReplicaSetView> = w.olds.iter().map(rs_view).collect();
                let running = w
                    .olds
                    .iter()
                    .map(|rs| rs.status.as_ref().map_or(0, |s| s.replicas))
                    .sum::<i32>()
                    > 0;
                steps::recreate_pass(&v, w.new.as_ref().map(rs_view).as_ref(), &olds, running)
            }
        };
        match self.execute(&mut w, &v, &pass).await? {
            Some(reason) => progressing_reason = Some(reason),
            None if w.new.is_some() && conditions::progress_deadline(&w.d).is_some() => {
                let has =
                    w.d.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Progressing"));
                if !has {
                    progressing_reason = Some(FOUND_NEW_RS);
                }
            }
            None => {}
        }
        if pass.is_empty() && was_complete {
            self.cleanup(&w).await?;
        }
        let mut d = w.d.clone();
        if let (Some(reason), Some(new), Some(_)) = (
            progressing_reason,
            &w.new,
            conditions::progress_deadline(&w.d),
        ) {
            let verb = if reason == NEW_RS_CREATED {
                "Created new"
            } else {
                "Found new"
            };
            let status = d.status.get_or_insert_with(DeploymentStatus::default);
            let mut cs = status.conditions.take().unwrap_or_default();
            set_condition(
                &mut cs,
                condition(
                    "Progressing",
                    "True",
                    reason,
                    format!("{verb} replica set {:?}", rs_name(new)),
                    now,
                ),
            );
            status.conditions = Some(cs);
        }
        let all: Vec<&ReplicaSet> = w.olds.iter().chain(&w.new).collect();
        let mut status = conditions::rollout_status(&d, &all, w.new.as_ref(), now);
        let mut cs = status.conditions.take().unwrap_or_default();
        conditions::pause_conditions(&d, &mut cs, now);
        status.conditions = Some(cs);
        self.write_status(&w, status).await
    }

    fn new_name(&self, w: &World) -> String {
        let collisions = w.d.status.as_ref().and_then(|s| s.collision_count);
        format!(
            "{}-{}",
            w.d.metadata.name.as_deref().unwrap_or(""),
            template_hash(&w.template, collisions)
        )
    }

    fn status_only(&self, w: &World, now: Timestamp) -> DeploymentStatus {
        let all: Vec<&ReplicaSet> = w.olds.iter().chain(&w.new).collect();
        let mut status = conditions::calculate_status(&w.d, &all, w.new.as_ref(), now);
        let mut cs = status.conditions.take().unwrap_or_default();
        conditions::pause_conditions(&w.d, &mut cs, now);
        status.conditions = Some(cs);
        status
    }

    /// Creates the new ReplicaSet and scales, as the pass says. Returns the Progressing
    /// reason to set when the new ReplicaSet was created.
    async fn execute(
        &self,
        w: &mut World,
        v: &DeploymentView,
        pass: &Pass,
    ) -> Result<Option<&'static str>, EngineError> {
        let mut reason = None;
        if let Some(size) = pass.create {
            if !self.create(w, v, size).await? {
                return Ok(None); // a hash collision: the next pass uses a new name
            }
            reason = Some(NEW_RS_CREATED);
        }
        for s in &pass.scales {
            let target = w
                .new
                .iter_mut()
                .chain(w.olds.iter_mut())
                .find(|rs| rs_name(rs) == s.name);
            if let Some(rs) = target {
                self.scale(rs, s.to, v).await?;
            }
        }
        Ok(reason)
    }

    /// Creates the new ReplicaSet (`getNewReplicaSet`, create branch). False after a hash
    /// collision, which bumps `status.collisionCount`.
    async fn create(
        &self,
        w: &mut World,
        v: &DeploymentView,
        size: i32,
    ) -> Result<bool, EngineError> {
        let d = &w.d;
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let rs_name = self.new_name(w);
        let hash = rs_name.rsplit('-').next().unwrap_or_default().to_string();
        let max_old = w.olds.iter().map(revision).max().unwrap_or(0);
        let mut template = w.template.clone();
        template["metadata"]["labels"][POD_TEMPLATE_HASH] = json!(hash);
        let mut selector =
            serde_json::to_value(d.spec.as_ref().map(|s| s.selector.clone())).unwrap_or_default();
        selector["matchLabels"][POD_TEMPLATE_HASH] = json!(hash);
        let mut annotations: BTreeMap<String, String> = d
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| !SKIPPED.contains(&k.as_str()))
            .collect();
        annotations.insert(REVISION.into(), (max_old + 1).to_string());
        annotations.insert(DESIRED.into(), v.replicas.to_string());
        annotations.insert(MAX.into(), (v.replicas + steps::max_surge(v)).to_string());
        annotations.insert(ENGINE_ANNOTATION.into(), "agent".into());
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {
                "name": rs_name, "namespace": ns, "labels": template["metadata"]["labels"], "annotations": annotations,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": d.metadata.name,
                    "uid": d.metadata.uid, "controller": true, "blockOwnerDeletion": true}],
            },
            "spec": {"replicas": size, "minReadySeconds": d.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0),
                "selector": selector, "template": template},
        }))
        .map_err(|e| request("building the new ReplicaSet")(kube::Error::SerdeError(e)))?;
        match self
            .replica_sets(&ns)
            .create(
                &PostParams {
                    field_manager: Some(self.field_manager.clone()),
                    ..Default::default()
                },
                &rs,
            )
            .await
        {
            Ok(created) => {
                w.new = Some(created);
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let existing = self
                    .replica_sets(&ns)
                    .get(&rs_name)
                    .await
                    .map_err(request(format!("reading ReplicaSet {rs_name}")))?;
                let ours = existing
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| Some(&o.uid) == d.metadata.uid.as_ref());
                if ours
                    && template_hash(&replica_set_template(&existing), None)
                        == template_hash(&w.template, None)
                {
                    w.new = Some(existing); // a stale read: it is ours already
                    return Ok(true);
                }
                let count = d
                    .status
                    .as_ref()
                    .and_then(|s| s.collision_count)
                    .unwrap_or(0)
                    + 1;
                self.deployments(&ns)
                    .patch_status(
                        d.metadata.name.as_deref().unwrap_or(""),
                        &self.params(),
                        &Patch::Merge(json!({"status": {"collisionCount": count}})),
                    )
                    .await
                    .map_err(request("recording a hash collision"))?;
                Ok(false)
            }
            Err(e) => Err(request(format!("creating ReplicaSet {rs_name}"))(e)),
        }
    }

    fn params(&self) -> PatchParams {
        PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        }
    }

    /// `scaleReplicaSet`: size and the desired/max annotations.
    async fn scale(
        &self,
        rs: &mut ReplicaSet,
        to: i32,
        v: &DeploymentView,
    ) -> Result<(), EngineError> {
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        let patch = json!({
            "metadata": {"annotations": {DESIRED: v.replicas.to_string(), MAX: (v.replicas + steps::max_surge(v)).to_string()}},
            "spec": {"replicas": to},
        });
        *rs = self
            .replica_sets(&ns)
            .patch(&rs_name(rs), &self.params(), &Patch::Merge(&patch))
            .await
            .map_err(request(format!("scaling ReplicaSet {}", rs_name(rs))))?;
        Ok(())
    }

    /// Keeps the new ReplicaSet's revision above every old one (a reused template gets
    /// max + 1 and remembers its old number). True when it wrote: the pass ends there.
    async fn sync_revision(&self, w: &mut World) -> Result<bool, EngineError> {
        let Some(new) = &w.new else { return Ok(false) };
        let max_old = w.olds.iter().map(revision).max().unwrap_or(0);
        let current = revision(new);
        let min_ready =
            w.d.spec
                .as_ref()
                .and_then(|s| s.min_ready_seconds)
                .unwrap_or(0);
        let min_ready_differs = new
            .spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
            != min_ready;
        if current > max_old && !min_ready_differs {
            return Ok(false);
        }
        let mut annotations = serde_json::Map::new();
        if current <= max_old {
            annotations.insert(REVISION.into(), json!((max_old + 1).to_string()));
            if current > 0 {
                let history = annotation(new, HISTORY)
                    .map(|h| format!("{h},{current}"))
                    .unwrap_or_else(|| current.to_string());
                annotations.insert(HISTORY.into(), json!(history));
            }
        }
        let patch = json!({"metadata": {"annotations": annotations}, "spec": {"minReadySeconds": min_ready}});
        let ns = new.metadata.namespace.clone().unwrap_or_default();
        let updated = self
            .replica_sets(&ns)
            .patch(&rs_name(new), &self.params(), &Patch::Merge(&patch))
            .await
            .map_err(request(format!("updating ReplicaSet {}", rs_name(new))))?;
        w.new = Some(updated);
        Ok(true)
    }

    /// Proportional scaling (paused Deployments and scaling events).
    async fn scale_proportionally(
        &self,
        w: &mut World,
        v: &DeploymentView,
    ) -> Result<(), EngineError> {
        let saturated = w.new.as_ref().is_some_and(|rs| {
            replicas(rs) == v.replicas
                && annotation(rs, DESIRED).and_then(|a| a.parse().ok()) == Some(v.replicas)
                && rs
                    .status
                    .as_ref()
                    .and_then(|s| s.available_replicas)
                    .unwrap_or(0)
                    == v.replicas
        });
        let olds: Vec<ReplicaSetView> = w.olds.iter().map(rs_view).collect();
        let status_replicas = w.d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let scales = steps::proportional_scale(
            v,
            w.new.as_ref().map(rs_view).as_ref(),
            &olds,
            saturated,
            status_replicas,
        );
        let pass = Pass {
            create: None,
            scales,
            waiting_for_old_pods: false,
        };
        self.execute(w, v, &pass).await?;
        // Annotations follow the new size even where the size stays.
        let want = v.replicas.to_string();
        for rs in w.new.iter_mut().chain(w.olds.iter_mut()) {
            if replicas(rs) > 0 && annotation(rs, DESIRED) != Some(want.as_str()) {
                let to = replicas(rs);
                self.scale(rs, to, v).await?;
            }
        }
        Ok(())
    }

    /// `cleanupDeployment`: old ReplicaSets beyond revisionHistoryLimit, oldest revision
    /// first, only those already scaled to zero.
    async fn cleanup(&self, w: &World) -> Result<(), EngineError> {
        let Some(limit) =
            w.d.spec
                .as_ref()
                .and_then(|s| s.revision_history_limit)
                .or(Some(10))
                .filter(|l| *l != i32::MAX)
        else {
            return Ok(());
        };
        let mut cleanable: Vec<&ReplicaSet> = w
            .olds
            .iter()
            .filter(|rs| rs.metadata.deletion_timestamp.is_none())
            .collect();
        let diff = cleanable.len() as i64 - i64::from(limit);
        if diff <= 0 {
            return Ok(());
        }
        cleanable.sort_by_key(|rs| {
            (
                revision(rs),
                rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
                rs_name(rs),
            )
        });
        for rs in cleanable.into_iter().take(diff as usize) {
            let status = rs.status.clone().unwrap_or_default();
            if status.replicas != 0
                || replicas(rs) != 0
                || rs.metadata.generation > status.observed_generation
            {
                continue;
            }
            let ns = rs.metadata.namespace.clone().unwrap_or_default();
            match self
                .replica_sets(&ns)
                .delete(&rs_name(rs), &DeleteParams::background())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    return Err(request(format!("deleting old ReplicaSet {}", rs_name(rs)))(
                        e,
                    ))
                }
            }
        }
        Ok(())
    }

    /// Writes the status (and the Deployment's revision annotation) when it changed;
    /// returns when to look again for the progress deadline.
    async fn write_status(
        &self,
        w: &World,
        status: DeploymentStatus,
    ) -> Result<Option<Timestamp>, EngineError> {
        let revision = w
            .new
            .as_ref()
            .map(revision)
            .filter(|r| *r > 0)
            .map(|r| r.to_string());
        let current_revision = revision_of(&w.d.metadata).map(|r| r.to_string());
        let next = conditions::deadline_at(&w.d, &status);
        if w.d.status.as_ref() == Some(&status)
            && (revision.is_none() || revision == current_revision)
        {
            return Ok(next);
        }
        let mut patch = json!({"status": status});
        if let Some(r) = revision {
            patch["metadata"] = json!({"annotations": {REVISION: r}});
        }
        let ns = w.d.metadata.namespace.clone().unwrap_or_default();
        let dname = w.d.metadata.name.clone().unwrap_or_default();
        self.deployments(&ns)
            .patch_status(&dname, &self.params(), &Patch::Merge(&patch))
            .await
            .map_err(request(format!("writing the status of {ns}/{dname}")))?;
        Ok(next)
    }

    /// Runs passes on every change to the Deployment or its ReplicaSets, and when the
    /// progress deadline comes, until `stop` completes (then one last pass, for cleanup).
    ///
    /// # Errors
    /// [`EngineError::Foreign`]: another controller is at work.
    pub async fn drive(
        &self,
        ns: &str,
        name: &str,
        stop: impl Future<Output = ()>,
    ) -> Result<(), EngineError> {
        let Some(d) = self.get(ns, name).await? else {
            return Ok(());
        };
        let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let ds = watcher(self.deployments(ns), by_name)
            .default_backoff()
            .map(|_| ());
        let rss = watcher(
            self.replica_sets(ns),
            watcher::Config::default().labels(&selector(&d)),
        )
        .default_backoff()
        .map(|_| ());
        let events = futures::stream::select(ds, rss);
        futures::pin_mut!(events);
        futures::pin_mut!(stop);
        loop {
            let next = match self.pass(ns, name).await {
                Ok(n) => n,
                Err(e @ EngineError::Foreign { .. }) => return Err(e),
                Err(e) => {
                    tracing::warn!(deployment = %format!("{ns}/{name}"), error = %e, "engine pass failed; retrying");
                    Some(Timestamp::now() + jiff::SignedDuration::from_secs(1))
                }
            };
            let wait = next
                .map(|t| Duration::try_from(t.duration_since(Timestamp::now())).unwrap_or_default())
                .unwrap_or(Duration::from_secs(3600));
            tokio::select! {
                () = &mut stop => break,
                event = events.next() => if event.is_none() { break },
                () = tokio::time::sleep(wait) => {}
            }
            while let Some(Some(())) = events.next().now_or_never() {}
        }
        self.pass(ns, name).await.map(|_| ())
    }
}

/// The daemon's engine for one app: drives every Deployment labelled
/// `berth.dev/app=<app>`, for as long as berth runs. A restarted berth picks up a rollout
/// where the last one stopped, from the state in the cluster.
pub async fn supervise(engine: Engine, app: String, shutdown: Signal) {
    let deployments: Api<Deployment> = Api::all(engine.client.clone());
    let labelled =
        watcher::Config::default().labels(&format!("{}={app}", crate::manifest::LABEL_APP));
    let events = watcher(deployments, labelled).default_backoff();
    futures::pin_mut!(events);
    let mut running: BTreeMap<(String, String), tokio::task::JoinHandle<()>> = BTreeMap::new();
    let mut stop = shutdown.clone();
    loop {
        let event = tokio::select! {
            () = stopped(&mut stop) => break,
            event = events.next() => match event { Some(e) => e, None => break },
        };
        let (d, gone) = match event {
            Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => (d, false),
            Ok(watcher::Event::Delete(d)) => (d, true),
            _ => continue,
        };
        let key = (
            d.metadata.namespace.clone().unwrap_or_default(),
            d.metadata.name.clone().unwrap_or_default(),
        );
        running.retain(|_, task| !task.is_finished());
        if gone {
            if let Some(task) = running.remove(&key) {
                task.abort();
            }
            continue;
        }
        if running.contains_key(&key) {
            continue;
        }
        let (engine, mut stop) = (engine.clone(), shutdown.clone());
        let (ns, name) = key.clone();
        running.insert(
            key,
            tokio::spawn(async move {
                if let Err(e) = engine.drive(&ns, &name, stopped(&mut stop)).await {
                    tracing::error!(deployment = %format!("{ns}/{name}"), error = %e, "berth's rollout engine stopped");
                }
            }),
        );
    }
    for task in running.into_values() {
        let _ = task.await;
    }
}
