//! Following the rollouts of the Deployments a sync wrote, concurrently, and the app's
//! failure policy: roll back to the previous revision's template, halt, or continue.

use futures::future::join_all;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;

use super::{describe, Run, Write};
use crate::cluster::apply::{apply_all, Target};
use crate::config::OnFailure;
use crate::history::{commit_of_revision, RollbackRecord, RolloutOutcome, RolloutRecord};
use crate::manifest::ObjectKey;
use crate::rollout::revisions::{self, Revisions};
use crate::rollout::{rollback, track};

/// What the rollouts of a sync came to.
#[derive(Default)]
pub(super) struct Rollouts {
    /// Why the app must wait for a new commit, when it must.
    pub held: Option<String>,
    /// Deployments whose template was rolled back (their inventory entry must not match git).
    pub rolled_back: Vec<ObjectKey>,
    /// Shutdown came before a rollout ended.
    pub interrupted: bool,
}

fn is_deployment(w: &Write) -> bool {
    let m = &w.target.manifest;
    m.group() == "apps" && m.kind() == "Deployment" && w.applied.is_some()
}

impl Run<'_> {
    /// Follows every Deployment this sync wrote and applies the failure policy.
    pub(super) async fn rollouts(&mut self, writes: &[Write]) -> Rollouts {
        let follows = writes
            .iter()
            .filter(|w| is_deployment(w))
            .map(|w| self.follow_one(w));
        let records = join_all(follows).await;
        let mut result = Rollouts::default();
        let short = self
            .rec
            .commit
            .as_ref()
            .map(|c| c.short().to_string())
            .unwrap_or_default();
        for (record, error) in records {
            if let Some(e) = error {
                self.fail(e, None);
            }
            let failed = matches!(
                record.rollout.outcome,
                RolloutOutcome::Failed | RolloutOutcome::TimedOut
            );
            if failed {
                let key = record.deployment.clone();
                let mut message = format!(
                    "rollout of Deployment {} {}: {}",
                    key_name(&key),
                    record.rollout.outcome.as_str(),
                    record.rollout.message
                );
                if let Some(rb) = &record.rollback {
                    message = format!("{message}; {}", rb.message);
                    result.rolled_back.push(key);
                }
                self.fail(message, None);
                result.held = match self.app.rollout.on_failure {
                    OnFailure::Rollback => Some(format!(
                        "the rollout of commit {short} failed and was rolled back"
                    )),
                    OnFailure::Halt => Some(format!(
                        "the rollout of commit {short} failed; the app is halted"
                    )),
                    OnFailure::Continue => result.held,
                };
            }
            if record.revision_from != record.rollout.revision
                || record.rollout.steps.len() > 1
                || failed
            {
                self.rec.rollouts.push(record);
            }
        }
        result
    }

    /// Follows one Deployment; on failure with `on_failure = "rollback"`, rolls it back and
    /// follows that too. Returns the record and an error that is not the rollout's own.
    async fn follow_one(&self, w: &Write) -> (RolloutRecord, Option<String>) {
        let m = &w.target.manifest;
        let key = m.key();
        let ns = m.namespace().unwrap_or("default");
        let generation = w
            .applied
            .as_ref()
            .and_then(|o| o.metadata.generation)
            .unwrap_or(0);
        let prefix = describe(&key);
        let report = |line: &str| (self.report)(&format!("{prefix}: {line}"));
        let client = &self.syncer.client;
        let followed = track::follow(
            client,
            ns,
            m.name(),
            generation,
            self.app.rollout.timeout,
            self.shutdown,
            &report,
        )
        .await;
        let revisions = current_revisions(client, ns, m.name()).await;
        let from = w.existing_revision().and_then(|r| revisions.revision(r));
        let mut record = RolloutRecord {
            deployment: key.clone(),
            engine: "cluster".into(),
            revision_from: w.existing_revision(),
            replica_set_from: from.map(|rs| rs.name.clone()),
            hash_from: from.map(|rs| rs.hash.clone()),
            images_from: from.map(|rs| rs.images.clone()).unwrap_or_default(),
            hash_to: revisions.hash.clone(),
            images_to: revisions
                .new
                .as_ref()
                .map(|rs| rs.images.clone())
                .unwrap_or_default(),
            rollout: followed,
            rollback: None,
        };
        let failed = matches!(
            record.rollout.outcome,
            RolloutOutcome::Failed | RolloutOutcome::TimedOut
        );
        if !failed || self.app.rollout.on_failure != OnFailure::Rollback {
            return (record, None);
        }
        match self.roll_back(w, &revisions, &record, &report).await {
            Ok(rb) => {
                record.rollback = rb;
                (record, None)
            }
            Err(e) => (record, Some(e)),
        }
    }

    /// Restores the template of the revision that ran before this sync.
    async fn roll_back(
        &self,
        w: &Write,
        revisions: &Revisions,
        failed: &RolloutRecord,
        report: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<Option<RollbackRecord>, String> {
        let Some(target) = failed
            .revision_from
            .and_then(|r| revisions.revision(r))
            .filter(|rs| rs.hash != revisions.hash)
        else {
            report("no earlier revision to roll back to: left as it is");
            return Ok(None);
        };
        let m = &w.target.manifest;
        let key = m.key();
        let restore = Target {
            manifest: rollback::manifest(m, target),
            resolved: w.target.resolved.clone(),
        };
        let applied = apply_all(&self.syncer.client, &self.settings(), &[&restore], false)
            .await
            .pop()
            .ok_or("no apply result")?
            .map_err(|e| format!("rollback failed: {e}"))?;
        let records = self.syncer.history.read(&self.app.name).unwrap_or_default();
        let commit = commit_of_revision(&records, &key, target.revision);
        let message = rollback::message(
            &key_name(&key),
            failed.rollout.revision,
            target.revision,
            commit.as_deref(),
        );
        report(&message);
        let generation = applied.metadata.generation.unwrap_or(0);
        let ns = m.namespace().unwrap_or("default");
        let rollout = track::follow(
            &self.syncer.client,
            ns,
            m.name(),
            generation,
            self.app.rollout.timeout,
            self.shutdown,
            report,
        )
        .await;
        Ok(Some(RollbackRecord {
            to_revision: target.revision,
            commit,
            message,
            rollout,
        }))
    }
}

/// `namespace/name`.
pub(crate) fn key_name(key: &ObjectKey) -> String {
    match &key.namespace {
        Some(ns) => format!("{ns}/{}", key.name),
        None => key.name.clone(),
    }
}

async fn current_revisions(client: &kube::Client, ns: &str, name: &str) -> Revisions {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    match api.get(name).await {
        Ok(d) => revisions::list(client, &d).await.unwrap_or_default(),
        Err(_) => Revisions::default(),
    }
}
