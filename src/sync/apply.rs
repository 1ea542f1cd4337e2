//! Validate and apply: the dry run of everything that can be checked before the first
//! write, then the staged apply.

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::wait::{await_condition, conditions};

use super::{Run, Stop, SyncError, Write};
use crate::cluster::apply::{apply_all, conflicts, stage, ApplySettings};
use crate::cluster::Action;
use crate::cluster::ClusterError;
use crate::history::ObjectAction;
use crate::manifest::Manifest;
use crate::plan::Change;
use crate::plan::{self, Target};

/// The outcome of [`Run::validate`].
pub(super) struct Validated {
    /// Stage 0: Namespaces and CRDs.
    pub first: Vec<usize>,
    /// Objects that can only be dry-run once stage 0 is applied.
    pub late: Vec<usize>,
}

/// How long to wait for a CRD of the commit to be Established.
const CRD_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the kinds of Established CRDs may take to show in discovery.
const DISCOVERY_LAG: Duration = Duration::from_secs(10);

impl Run<'_> {
    /// Dry-runs every object that can be checked before the first write. Objects in a
    /// namespace, or of a kind, that this commit creates can only be checked once stage 0
    /// (Namespaces, CRDs) is applied: they come back as `late`.
    pub(super) async fn validate(&mut self, writes: &mut [Write]) -> Result<Validated, Stop> {
        let first: Vec<usize> = (0..writes.len())
            .filter(|&i| stage(&writes[i].target) == 0)
            .collect();
        self.dry_run(writes, &first).await?;
        let new_namespaces: HashSet<String> = first
            .iter()
            .filter(|&&i| {
                writes[i].target.manifest.kind() == "Namespace"
                    && writes[i].existing() == Some(None)
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
        self.check_engine_ownership(writes).await?;
        Ok(Validated { first, late })
    }

    /// Applies what [`Run::validate`] passed, stage by stage; the late objects are
    /// dry-run right after stage 0, before anything else is written.
    pub(super) async fn apply_validated(
        &mut self,
        writes: &mut Vec<Write>,
        validated: Validated,
        deferred: Vec<Manifest>,
    ) -> Result<(), Stop> {
        let Validated { first, mut late } = validated;
        self.mark("apply");
        let count = writes.len() + deferred.len();
        (self.report)(&format!(
            "dry run passed; applying {}",
            crate::plural(count, "object")
        ));
        self.apply(writes, &first).await?;
        self.wait_for_crds(writes, &first).await?;
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

    /// Dry-runs the writes at `indices`. Git wins by default: a write whose fields another
    /// manager took is dry-run again with force, and what it takes back is noted.
    async fn dry_run(&mut self, writes: &mut [Write], indices: &[usize]) -> Result<(), Stop> {
        let take_back = self.settings();
        let settings = ApplySettings {
            force: false,
            ..take_back.clone()
        };
        let targets: Vec<&Target> = indices.iter().map(|&i| &writes[i].target).collect();
        self.rec.requests += targets.len() as u64;
        let results = apply_all(&self.client, &settings, &targets, true).await;
        let (mut failed, mut conflicted) = (false, Vec::new());
        for (&i, result) in indices.iter().zip(results) {
            match result {
                Ok(obj) => writes[i].dry_run = Some(obj),
                Err(e) => match taken_fields(&e).filter(|_| take_back.force) {
                    Some(note) => {
                        writes[i].took_back = Some(note);
                        conflicted.push(i);
                    }
                    None => {
                        failed = true;
                        self.refuse(&mut writes[i], e);
                    }
                },
            }
        }
        if !conflicted.is_empty() {
            let targets: Vec<&Target> = conflicted.iter().map(|&i| &writes[i].target).collect();
            self.rec.requests += targets.len() as u64;
            let results = apply_all(&self.client, &take_back, &targets, true).await;
            for (&i, result) in conflicted.iter().zip(results) {
                match result {
                    Ok(obj) => writes[i].dry_run = Some(obj),
                    Err(e) => {
                        failed = true;
                        self.refuse(&mut writes[i], e);
                    }
                }
            }
        }
        if failed {
            (self.report)(&dry_run_failed(writes));
            return Err(Stop::Failed);
        }
        Ok(())
    }

    /// Records the dry run's refusal of `w` (and says it).
    fn refuse(&mut self, w: &mut Write, e: ClusterError) {
        w.refused = Some(e.to_string());
        self.fail(e);
    }

    async fn apply(&mut self, writes: &mut [Write], indices: &[usize]) -> Result<(), Stop> {
        let (elsewhere, indices): (Vec<usize>, Vec<usize>) =
            indices.iter().partition(|&&i| writes[i].drift_elsewhere());
        for i in elsewhere {
            // What is live is what berth would write: recorded, not written.
            writes[i].applied = writes[i].dry_run.clone();
            self.rec.unchanged += 1;
        }
        let indices = &indices[..];
        let targets: Vec<&Target> = indices.iter().map(|&i| &writes[i].target).collect();
        self.rec.requests += targets.len() as u64;
        let results = apply_all(&self.client, &self.settings(), &targets, false).await;
        let mut failed = false;
        for (&i, result) in indices.iter().zip(results) {
            let w = &mut writes[i];
            let key = w.target.manifest.key();
            let source = Some(w.target.manifest.origin.to_string());
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
                    let drift = match &w.change {
                        Change::Drifted(why) => Some(format!("drift: {why}")),
                        _ => None,
                    };
                    let took_back = w.took_back.as_ref().map(|t| format!("took back {t}"));
                    let note = match (drift, took_back) {
                        (Some(d), Some(t)) => Some(format!("{d}; {t}")),
                        (d, t) => d.or(t),
                    };
                    (action, note)
                }
                Err(e) => {
                    failed = true;
                    self.fail(e);
                    (Action::Failed, None)
                }
            };
            if action == Action::Unchanged {
                self.rec.unchanged += 1;
                continue;
            }
            (self.report)(&format!(
                "{} {}{}",
                key.kubectl(),
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
                self.fail(SyncError::CrdNotEstablished {
                    origin: m.origin.clone(),
                    name: m.name().to_string(),
                    timeout: CRD_TIMEOUT,
                });
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
        // The CRDs were just applied: only a discovery from now on knows their kinds, and
        // the API server's discovery may lag their Established condition a little.
        let deadline = std::time::Instant::now() + DISCOVERY_LAG;
        let (mut kinds, _) = self.discover(Some(std::time::Instant::now())).await?;
        while deferred.iter().any(|m| kinds.resolve(m).is_none())
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(250)).await;
            kinds = self.discover(Some(std::time::Instant::now())).await?.0;
        }
        let mut added = Vec::new();
        for m in deferred {
            match kinds.require(&m) {
                Ok(resolved) => {
                    added.push(writes.len());
                    let digest = plan::digest(&m);
                    let target = Target {
                        manifest: m,
                        resolved,
                    };
                    writes.push(Write::new(target, Change::New, digest));
                }
                Err(e) => self.fail(e),
            }
        }
        if !self.rec.errors.is_empty() {
            return Err(Stop::Failed);
        }
        Ok(added)
    }
}

/// `.spec.replicas from "kubectl-patch"` when `e` is a conflict over fields another
/// field manager owns.
fn taken_fields(e: &ClusterError) -> Option<String> {
    let ClusterError::Object { message, .. } = e else {
        return None;
    };
    let found = conflicts(message);
    let named: Vec<String> = found
        .iter()
        .filter(|(_, fields)| !fields.is_empty())
        .map(|(manager, fields)| format!("{} from {manager:?}", fields.join(", ")))
        .collect();
    (!named.is_empty()).then(|| named.join("; "))
}

/// What a failed dry run says was written: nothing, or — when objects in a namespace the
/// commit creates could only be validated once it existed — exactly those first writes.
fn dry_run_failed(writes: &[Write]) -> String {
    let written: Vec<String> = writes
        .iter()
        .filter(|w| w.applied.is_some())
        .map(|w| w.target.manifest.key().to_string())
        .collect();
    if written.is_empty() {
        return "dry run failed: nothing was written".into();
    }
    format!(
        "dry run failed: nothing was written but {} (applied first: the objects in a namespace the commit creates can be validated only once it exists); the inventory holds {}",
        written.join(", "),
        if written.len() == 1 { "it" } else { "them" }
    )
}
