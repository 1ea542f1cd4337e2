//! `berth rollback APP DEPLOYMENT [--to-revision N]`: a manual rollback, recorded in the
//! history like a sync (trigger `cli`). The app is then held at its current commit, so
//! berth does not undo the rollback; the next commit to git rolls forward again.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;

use super::rollouts::Restored;
use super::{Report, Run, Stop, SyncError, Syncer};
use crate::cluster::ClusterError;
use crate::config::AppConfig;
use crate::history::{Outcome, RolloutOutcome, RolloutRecord, SyncRecord};
use crate::manifest::{ObjectKey, LABEL_APP};
use crate::plan::Held;
use crate::plan::Target;
use crate::rollout::revisions::{self, Revisions};
use crate::rollout::track;
use crate::source::git;

/// What to roll back.
pub struct RollbackRequest<'a> {
    /// `name` or `namespace/name` of a Deployment the app manages.
    pub deployment: &'a str,
    /// The revision to restore; the previous one when `None`.
    pub to_revision: Option<i64>,
    /// Follow the rollout to its end.
    pub wait: bool,
}

/// A rollback refused before anything was written (no such Deployment or revision):
/// nothing is recorded in the history.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RollbackRefused(String);

/// How a manual rollback ended early.
enum Ended {
    /// Failed part way: recorded.
    Failed,
    /// Refused before anything was written: not recorded.
    Refused(String),
}

impl From<Stop> for Ended {
    fn from(_: Stop) -> Self {
        Ended::Failed
    }
}

impl Syncer {
    /// Rolls a Deployment of `app` back and records it in the history.
    ///
    /// # Errors
    /// The app manages no such Deployment, or it has no such revision.
    pub async fn rollback(
        &self,
        app: &AppConfig,
        request: &RollbackRequest<'_>,
        report: Report<'_>,
    ) -> Result<SyncRecord, RollbackRefused> {
        let clock = std::time::Instant::now();
        let mut run = Run::for_command(self, app, report);
        let ended = match run.lock().await {
            Ok(()) => run.manual_rollback(request).await,
            Err(stop) => Err(stop.into()),
        };
        run.rec.outcome = match ended {
            Ok(outcome) => outcome,
            Err(Ended::Refused(message)) => {
                if let Some(lock) = run.lock.take() {
                    lock.finish();
                }
                return Err(RollbackRefused(message));
            }
            Err(Ended::Failed) => Outcome::Failed,
        };
        Ok(run.end(clock))
    }
}

impl Run<'_> {
    async fn manual_rollback(&mut self, request: &RollbackRequest<'_>) -> Result<Outcome, Ended> {
        let mut inventory = self.load_inventory().await?;
        let key = self.find_deployment(
            &inventory
                .objects
                .iter()
                .map(|e| e.key.clone())
                .collect::<Vec<_>>(),
            request.deployment,
        )?;
        let tree = |sha: &str| git::tree_at(&self.syncer.agent.state_dir, &self.app.repo, sha);
        let mut checkout = inventory.commit.as_deref().and_then(tree);
        if checkout.is_none() && inventory.commit.is_some() && self.deepen().await {
            checkout = inventory.commit.as_deref().and_then(tree);
        }
        self.rec.commit = checkout.as_ref().map(|c| c.commit.clone());
        let ns = key.namespace.clone().unwrap_or_else(|| "default".into());
        let api: Api<Deployment> = Api::namespaced(self.syncer.client.clone(), &ns);
        let live = api.get(&key.name).await.map_err(|source| {
            self.stop(ClusterError::Request {
                what: format!("cannot read Deployment {}", key.qualified_name()),
                source,
            })
        })?;
        let revisions = revisions::list(&self.syncer.client, &live)
            .await
            .map_err(|source| {
                self.stop(ClusterError::Request {
                    what: format!("cannot list the ReplicaSets of {}", key.qualified_name()),
                    source,
                })
            })?;
        let target = self.pick_revision(&key, &revisions, request.to_revision)?;
        let current = revisions.new.as_ref().map(|rs| rs.revision);
        if target.hash == revisions.hash {
            let note = format!(
                "skipped: the current template already matches revision {}",
                target.revision
            );
            (self.report)(&note);
            self.rec.note = Some(note);
            return Ok(Outcome::NoChange);
        }
        let (kinds, _) = self.discover(None).await?;
        let Some(checkout) = checkout else {
            return Err(Ended::Refused(format!(
                "the commit app {} was last synced to is not in berth's repository cache: run `berth sync {}` first",
                self.app.name, self.app.name
            )));
        };
        let manifests = self.render(&checkout, &kinds)?;
        let Some(manifest) = manifests.into_iter().find(|m| m.key() == key) else {
            return Err(Ended::Refused(format!(
                "Deployment {} is not in the local checkout of app {}: run `berth sync {}` first",
                key.qualified_name(),
                self.app.name,
                self.app.name
            )));
        };
        let resolved = kinds.require(&manifest).map_err(|e| self.stop(e))?;
        let deployment = Target { manifest, resolved };
        let Restored {
            applied, message, ..
        } = self
            .restore(&deployment, current, target)
            .await
            .map_err(|e| self.stop(SyncError::Rollout(e)))?;
        (self.report)(&message);
        let short = inventory
            .commit
            .as_deref()
            .map(|c| &c[..c.len().min(7)])
            .unwrap_or("-")
            .to_string();
        self.rec.note = Some(format!(
            "{message} by berth rollback; berth holds commit {short} so it does not undo this, but the next commit to git rolls forward again: to keep this revision, revert the change in git"
        ));
        let before = inventory.clone();
        inventory.held = Some(Held {
            commit: inventory.commit.clone().unwrap_or_default(),
            reason: format!("{message} by berth rollback"),
        });
        for e in inventory.objects.iter_mut().filter(|e| e.key == key) {
            e.digest = "rolled-back".into();
        }
        if !self.store_inventory(&before, &inventory).await {
            return Err(Ended::Failed);
        }
        let rollout = if request.wait {
            self.follow_one(&applied, &deployment.manifest)
                .await
                .map_err(|e| self.stop(SyncError::Rollout(e)))?
        } else {
            track::not_followed(target.revision)
        };
        let outcome = rollout.outcome;
        self.rec.rollouts.push(RolloutRecord {
            deployment: key,
            engine: self.engine_name().into(),
            revision_from: current,
            replica_set_from: revisions.new.as_ref().map(|rs| rs.name.clone()),
            hash_from: Some(revisions.hash.clone()),
            images_from: revisions
                .new
                .as_ref()
                .map(|rs| rs.images.clone())
                .unwrap_or_default(),
            hash_to: target.hash.clone(),
            images_to: target.images.clone(),
            rollout,
            rollback: None,
        });
        match outcome {
            RolloutOutcome::Complete | RolloutOutcome::Interrupted => Ok(Outcome::RolledBack),
            _ => Err(self
                .stop(SyncError::Rollout(
                    "the rollback's rollout did not complete".into(),
                ))
                .into()),
        }
    }

    fn stop(&mut self, e: impl Into<SyncError>) -> Stop {
        self.fail(e);
        Stop::Failed
    }

    /// The managed Deployment named `name` or `namespace/name`.
    fn find_deployment(&self, managed: &[ObjectKey], name: &str) -> Result<ObjectKey, Ended> {
        let (ns, name) = match name.split_once('/') {
            Some((ns, n)) => (Some(ns), n),
            None => (None, name),
        };
        let found: Vec<&ObjectKey> = managed
            .iter()
            .filter(|k| k.group == "apps" && k.kind == "Deployment" && k.name == name)
            .filter(|k| ns.is_none() || k.namespace.as_deref() == ns)
            .collect();
        match found.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(Ended::Refused(format!("app {} manages no Deployment {name:?} ({LABEL_APP}={}); `berth status {}` lists them", self.app.name, self.app.name, self.app.name))),
            _ => Err(Ended::Refused(format!("several Deployments are named {name:?}: give it as NAMESPACE/NAME"))),
        }
    }

    fn pick_revision<'r>(
        &self,
        key: &ObjectKey,
        revisions: &'r Revisions,
        to: Option<i64>,
    ) -> Result<&'r revisions::ReplicaSetInfo, Ended> {
        let known: Vec<String> = revisions
            .new
            .iter()
            .chain(&revisions.old)
            .map(|rs| rs.revision.to_string())
            .collect();
        let picked = match to {
            Some(n) => revisions.revision(n),
            None => revisions.previous(),
        };
        picked.ok_or_else(|| {
            let what = to.map_or("an earlier revision".to_string(), |n| {
                format!("revision {n}")
            });
            Ended::Refused(format!(
                "Deployment {} has no {what} (revisions: {})",
                key.qualified_name(),
                known.join(", ")
            ))
        })
    }
}
