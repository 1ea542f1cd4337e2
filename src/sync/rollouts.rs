//! Following the rollouts of the Deployments a sync wrote, concurrently, and the app's
//! failure policy: roll back to the previous revision's template, halt, or continue.

use std::collections::HashMap;

use futures::future::join_all;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject};

use super::{Run, SyncError, Write};
use crate::cluster::apply::{apply_all, observed};
use crate::config::{OnFailure, RolloutEngine};
use crate::history::{
    commit_of_template, FollowedRollout, RollbackRecord, RolloutOutcome, RolloutRecord,
};
use crate::manifest::{Manifest, ObjectKey};
use crate::plan::{Entry, Inventory, Target};
use crate::rollout::engine::{follow_driving, Engine, EngineError};
use crate::rollout::revisions::{self, ReplicaSetInfo, Revisions};
use crate::rollout::rollback;
use crate::rollout::track::Follow;

/// What the rollouts of a sync came to.
#[derive(Default)]
pub(super) struct Rollouts {
    /// Why the app must wait for a new commit, when it must.
    pub held: Option<String>,
    /// Deployments whose template was rolled back (their inventory entry must not match git).
    pub rolled_back: Vec<ObjectKey>,
    /// Deployments whose rollout shutdown cut short: the next sync follows them again.
    pub unfinished: Vec<ObjectKey>,
}

/// The rollout of Deployment `m`, as berth wrote it (`applied`: the API server's answer).
fn follow_of(m: &Manifest, applied: Option<&DynamicObject>) -> Follow {
    let selector = m
        .object
        .get("spec")
        .and_then(|s| s.get("selector"))
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .map(|s| revisions::match_labels(&s))
        .unwrap_or_default();
    Follow {
        selector,
        namespace: m.namespace().unwrap_or("default").to_string(),
        name: m.name().to_string(),
        generation: applied.and_then(|o| o.metadata.generation).unwrap_or(0),
    }
}

/// A Deployment whose spec this sync changed: its generation moved since the last sync
/// recorded it. Labels, annotations or an unchanged re-apply start no rollout, so there is
/// nothing to follow (nor to roll back).
fn starts_rollout(w: &Write, old: &HashMap<&ObjectKey, &Entry>) -> bool {
    let m = &w.target.manifest;
    let Some(applied) = &w.applied else {
        return false;
    };
    let before = old.get(&m.key()).map(|e| e.observed.as_str());
    m.group() == "apps"
        && m.kind() == "Deployment"
        && before != Some(observed(&applied.metadata).as_str())
}

impl Run<'_> {
    /// Follows every Deployment whose spec this sync changed (sharing watches) and applies
    /// the failure policy.
    pub(super) async fn rollouts(&mut self, writes: &[Write], old: &Inventory) -> Rollouts {
        let before = old.by_key();
        let deployments: Vec<&Write> = writes
            .iter()
            .filter(|w| starts_rollout(w, &before))
            .collect();
        if !self.options.wait {
            if !deployments.is_empty() {
                (self.report)(&format!(
                    "not following the rollouts of {} Deployments (--no-wait)",
                    deployments.len()
                ));
            }
            return Rollouts::default();
        }
        let follows: Vec<Follow> = deployments
            .iter()
            .map(|w| follow_of(&w.target.manifest, w.applied.as_ref()))
            .collect();
        let followed = self.follow_and_drive(&follows).await;
        let records = match followed {
            Ok(followed) => {
                join_all(
                    deployments
                        .iter()
                        .zip(followed)
                        .map(|(w, f)| self.record_rollout(w, f)),
                )
                .await
            }
            Err(e) => deployments
                .iter()
                .map(|w| {
                    (
                        self.refused(w.target.manifest.key(), e.to_string()),
                        Some(e.to_string()),
                    )
                })
                .collect(),
        };
        let mut result = Rollouts::default();
        let short = self.rec.short_commit().to_string();
        for (record, error) in records {
            if let Some(e) = error {
                self.fail(SyncError::Rollout(e));
            }
            if record.rollout.outcome == RolloutOutcome::Interrupted {
                result.unfinished.push(record.deployment.clone());
            }
            let failed = matches!(
                record.rollout.outcome,
                RolloutOutcome::Failed | RolloutOutcome::TimedOut
            );
            if failed {
                let key = record.deployment.clone();
                let mut message = format!(
                    "rollout of Deployment {} {}: {}",
                    key.qualified_name(),
                    record.rollout.outcome.as_str(),
                    record.rollout.message
                );
                if let Some(rb) = &record.rollback {
                    message = format!("{message}; {}", rb.message);
                    result.rolled_back.push(key);
                }
                self.fail(SyncError::Rollout(message));
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

    /// The record of one followed rollout; on failure with `on_failure = "rollback"`,
    /// rolls it back and follows that too. Returns the record and an error that is not
    /// the rollout's own.
    async fn record_rollout(
        &self,
        w: &Write,
        followed: FollowedRollout,
    ) -> (RolloutRecord, Option<String>) {
        let m = &w.target.manifest;
        let key = m.key();
        let ns = m.namespace().unwrap_or("default");
        let revisions = current_revisions(&self.syncer.client, ns, m.name()).await;
        let from = w.existing_revision().and_then(|r| revisions.revision(r));
        let mut record = RolloutRecord {
            deployment: key.clone(),
            engine: self.engine_name().into(),
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
        match self.roll_back(w, &revisions, &record).await {
            Ok(rb) => {
                record.rollback = rb;
                (record, None)
            }
            Err(e) => (record, Some(e)),
        }
    }

    /// Restores the template of the revision that ran before this sync; for a rollout
    /// this sync resumed (one a restart cut short: the template was live already), the
    /// revision before it, as `kubectl rollout undo` would.
    async fn roll_back(
        &self,
        w: &Write,
        revisions: &Revisions,
        failed: &RolloutRecord,
    ) -> Result<Option<RollbackRecord>, String> {
        let prefix = w.target.manifest.key().kubectl();
        let report = |line: &str| (self.report)(&format!("{prefix}: {line}"));
        let resumed =
            failed.revision_from.is_some() && failed.revision_from == failed.rollout.revision;
        let Some(target) = failed
            .revision_from
            .and_then(|r| revisions.revision(r))
            .filter(|rs| rs.hash != revisions.hash)
            .or_else(|| resumed.then(|| revisions.previous()).flatten())
        else {
            report("no earlier revision to roll back to: left as it is");
            return Ok(None);
        };
        let Restored {
            applied,
            commit,
            message,
        } = self
            .restore(&w.target, failed.rollout.revision, target)
            .await?;
        report(&message);
        let rollout = self.follow_one(&applied, &w.target.manifest).await?;
        Ok(Some(RollbackRecord {
            to_revision: target.revision,
            commit,
            message,
            rollout,
        }))
    }
}

/// What restoring an earlier revision's template did.
pub(super) struct Restored {
    /// The Deployment as applied.
    pub applied: DynamicObject,
    /// The commit whose sync first rolled that template out, when the history knows it.
    pub commit: Option<String>,
    /// "rolled back Deployment shop/web from revision 3 to 2 (commit abc1234)".
    pub message: String,
}

impl Run<'_> {
    /// Applies the template of revision `to` to `target`'s Deployment, as `kubectl
    /// rollout undo` does: the one rollback, of the failure policy and of `berth rollback`.
    pub(super) async fn restore(
        &self,
        target: &Target,
        from: Option<i64>,
        to: &ReplicaSetInfo,
    ) -> Result<Restored, String> {
        let key = target.manifest.key();
        let restore = Target {
            manifest: rollback::manifest(&target.manifest, to),
            resolved: target.resolved.clone(),
        };
        let applied = apply_all(&self.client, &self.settings(), &[&restore], false)
            .await
            .pop()
            .ok_or("no apply result")?
            .map_err(|e| format!("rollback failed: {e}"))?;
        let records = self.syncer.history.read(&self.app.name).unwrap_or_default();
        let commit = commit_of_template(&records, &key, &to.hash);
        let message =
            rollback::message(&key.qualified_name(), from, to.revision, commit.as_deref());
        Ok(Restored {
            applied,
            commit,
            message,
        })
    }

    /// Follows the rollout of one Deployment just written.
    pub(super) async fn follow_one(
        &self,
        applied: &DynamicObject,
        manifest: &Manifest,
    ) -> Result<FollowedRollout, String> {
        let follow = follow_of(manifest, Some(applied));
        Ok(self
            .follow_and_drive(&[follow])
            .await
            .map_err(|e| e.to_string())?
            .remove(0))
    }

    pub(super) fn engine_name(&self) -> &'static str {
        match self.app.rollout.engine {
            RolloutEngine::Cluster => "cluster",
            RolloutEngine::Agent => "agent",
        }
    }

    fn engine(&self) -> Option<Engine> {
        (self.app.rollout.engine == RolloutEngine::Agent && !self.syncer.engine_supervised).then(
            || Engine {
                client: self.syncer.client.clone(),
                field_manager: self.syncer.agent.field_manager.clone(),
            },
        )
    }

    /// Follows a rollout; with `engine = "agent"` berth's engine drives it meanwhile.
    pub(super) async fn follow_and_drive(
        &self,
        follows: &[Follow],
    ) -> Result<Vec<FollowedRollout>, EngineError> {
        let report = |f: &Follow, line: &str| {
            (self.report)(&format!(
                "deployment.apps/{} -n {}: {line}",
                f.name, f.namespace
            ))
        };
        let engine = self.engine();
        follow_driving(
            &self.syncer.client,
            follows,
            self.app.rollout.timeout,
            self.shutdown,
            engine.as_ref(),
            &report,
        )
        .await
    }

    /// With `engine = "agent"`: refuses, before anything is written, Deployments whose
    /// ReplicaSets another controller made.
    pub(super) async fn check_engine_ownership(
        &mut self,
        writes: &[Write],
    ) -> Result<(), super::Stop> {
        if self.app.rollout.engine != RolloutEngine::Agent {
            return Ok(());
        }
        let engine = Engine {
            client: self.syncer.client.clone(),
            field_manager: self.syncer.agent.field_manager.clone(),
        };
        let mut refused = false;
        for w in writes.iter().filter(|w| {
            w.target.manifest.group() == "apps" && w.target.manifest.kind() == "Deployment"
        }) {
            let m = &w.target.manifest;
            if let Err(e) = engine
                .check_ownership(m.namespace().unwrap_or("default"), m.name())
                .await
            {
                self.fail(SyncError::EngineRefused {
                    origin: m.origin.clone(),
                    source: e,
                });
                refused = true;
            }
        }
        if refused {
            Err(super::Stop::Failed)
        } else {
            Ok(())
        }
    }

    fn refused(&self, key: ObjectKey, message: String) -> RolloutRecord {
        let now = jiff::Timestamp::now();
        RolloutRecord {
            deployment: key,
            engine: self.engine_name().into(),
            revision_from: None,
            replica_set_from: None,
            hash_from: None,
            images_from: Vec::new(),
            hash_to: String::new(),
            images_to: Vec::new(),
            rollout: FollowedRollout {
                outcome: RolloutOutcome::Failed,
                message,
                revision: None,
                replica_set: None,
                started_at: now,
                finished_at: now,
                steps: Vec::new(),
            },
            rollback: None,
        }
    }
}

/// `namespace/name`.
async fn current_revisions(client: &kube::Client, ns: &str, name: &str) -> Revisions {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    match api.get(name).await {
        Ok(d) => revisions::list(client, &d).await.unwrap_or_default(),
        Err(_) => Revisions::default(),
    }
}
