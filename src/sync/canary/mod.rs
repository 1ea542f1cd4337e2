//! Canary rollouts on the plain Deployment (docs/progressive-delivery.md): a Deployment
//! whose strategy is `canary` (`[app.rollout]`, or its `berth.dev/rollout` annotation)
//! and whose template changed is applied held — paused, its strategy Recreate, so
//! neither Kubernetes' Deployment controller nor berth's engine scales its ReplicaSets
//! while two are active — and [`drive`] moves the pods step by step; at 100 % the
//! Deployment is applied as git has it, and the controller finds its new ReplicaSet full.
//!
//! A held Deployment is in flight: a later sync (a restart of berth) carries it on from
//! the step its ReplicaSets show.

mod blue_green;
mod checks;
mod drive;
mod hold;
mod job;
mod run;
mod sets;

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use serde_json::{json, Value};

use super::context::{Ctx, Journal, Stop};
use super::error::SyncError;
use super::write::{Canary, Write};
use crate::config::{
    AnnotatedRollout, Progressive, RolloutConfig, StepsError, Strategy, ROLLOUT_ANNOTATION,
};
use crate::manifest::Manifest;
use crate::plan::Target;
use crate::rollout::canary::Split;
use crate::rollout::predict::{DeploymentPlan, PlannedStep};
use crate::rollout::revisions;
use crate::rollout::steps::RolloutStep;

pub(super) use drive::drive;

/// `plan` as berth's strategy will run it: each canary step's pods, its pause and
/// checks; blue-green's new version at full size beside the old, its checks, the switch.
pub(super) fn planned(mut plan: DeploymentPlan, strategy: &Progressive) -> DeploymentPlan {
    let step = |weight, split: Split, pause: Option<String>, analysis: &[String]| PlannedStep {
        weight,
        new: split.new,
        old: split.old,
        pause,
        analysis: analysis.to_vec(),
    };
    let replicas = plan.replicas;
    plan.canary = match strategy {
        Progressive::Canary(steps) => (steps.iter())
            .map(|s| {
                let split = Split::at(replicas, s.weight);
                step(s.weight, split, s.pause.map(|p| p.to_string()), &s.analysis)
            })
            .collect(),
        Progressive::BlueGreen(bg) => {
            let beside = Split {
                new: replicas,
                old: replicas,
            };
            let delay = humantime::format_duration(bg.scale_down_delay).to_string();
            vec![
                step(0, beside, None, &bg.analysis),
                step(100, beside, Some(delay), &[]),
                step(100, Split::at(replicas, 100), None, &[]),
            ]
        }
    };
    plan.steps = (plan.canary.iter())
        .map(|s| RolloutStep {
            new: s.new,
            old: s.old,
        })
        .collect();
    plan.strategy = match strategy {
        Progressive::Canary(_) => "canary".into(),
        Progressive::BlueGreen(_) => "blue-green".into(),
    };
    plan
}

/// Marks each Deployment write whose canary runs (its template changed, or its canary is
/// in flight), once the dry run has passed: its apply writes it held. A Deployment the
/// cluster does not hold yet is created as git has it (there is no old version to keep).
///
/// # Errors
/// A `berth.dev/rollout` annotation that is not a strategy, or a live Deployment that
/// cannot be read: nothing is written.
pub(super) async fn prepare(
    ctx: &Ctx<'_>,
    writes: &mut [Write],
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let config = ctx.syncer.config();
    let known: BTreeSet<&str> = config.analyses.iter().map(|a| a.name.as_str()).collect();
    let mut failed = false;
    let services: BTreeSet<(String, String)> = (writes.iter())
        .map(|w| &w.target.manifest)
        .filter(|m| m.group().is_empty() && m.kind() == "Service")
        .map(|m| (m.namespace_or_default().to_string(), m.name().to_string()))
        .collect();
    for w in writes.iter_mut().filter(|w| w.is_deployment()) {
        match held(ctx, w, &known, &services).await {
            Ok(canary) => w.canary = canary,
            Err(e) => {
                journal.fail(e);
                failed = true;
            }
        }
    }
    if failed {
        return Err(Stop::Failed);
    }
    Ok(())
}

/// Write `w`'s canary (or blue-green) when its Deployment's strategy is berth's and its
/// rollout starts or is in flight: the checks it may name (`known`), the Services the
/// commit writes (`services`).
async fn held(
    ctx: &Ctx<'_>,
    w: &Write,
    known: &BTreeSet<&str>,
    services: &BTreeSet<(String, String)>,
) -> Result<Option<Canary>, SyncError> {
    let m = &w.target.manifest;
    let fail = |message: String| SyncError::Canary {
        origin: m.origin.clone(),
        key: m.key().qualified_name(),
        message,
    };
    let plan = progressive_of(m, &ctx.app.rollout, known).map_err(|e| fail(e.to_string()))?;
    let Some(plan) = plan else {
        return Ok(None);
    };
    if let Progressive::BlueGreen(bg) = &plan {
        let refused = blue_green::refused(ctx, m.namespace_or_default(), bg, services).await;
        let refused = refused.map_err(|e| fail(format!("its Services cannot be read: {e}")))?;
        if let Some(why) = refused {
            return Err(fail(why));
        }
    }
    let live = in_flight(ctx, w).await;
    let live = live.map_err(|e| fail(format!("the live Deployment cannot be read: {e}")))?;
    let Some((strategy, moved)) = live else {
        return Ok(None);
    };
    let target = |manifest| Target {
        manifest,
        resolved: w.target.resolved.clone(),
    };
    let recreate = strategy["type"] == "Recreate";
    let claim = (!recreate).then(|| target(paused(m, Some(strategy))));
    let held = target(paused(m, Some(json!({"type": "Recreate"}))));
    Ok(Some(Canary {
        held,
        claim,
        plan,
        moved,
    }))
}

/// Why a Deployment's strategy cannot run.
#[derive(Debug, thiserror::Error)]
enum StrategyError {
    /// Its annotation is not a strategy.
    #[error("annotation {ROLLOUT_ANNOTATION}: {0}")]
    Annotation(serde_json::Error),
    /// Its annotation's strategy cannot run.
    #[error("annotation {ROLLOUT_ANNOTATION}: {0}")]
    Annotated(StepsError),
    /// The app's strategy cannot run (a set's template, checked only here).
    #[error("[app.rollout] {0}")]
    App(StepsError),
}

/// Deployment `m`'s strategy when it is berth's: its annotation's, else the app's; `None`
/// for a rolling one, or a Deployment git pauses.
fn progressive_of(
    m: &Manifest,
    app: &RolloutConfig,
    known: &BTreeSet<&str>,
) -> Result<Option<Progressive>, StrategyError> {
    let annotation = m
        .object
        .get("metadata")
        .and_then(|meta| meta.get("annotations"))
        .and_then(|a| a.get(ROLLOUT_ANNOTATION))
        .and_then(Value::as_str);
    let rollout = match annotation {
        Some(text) => {
            let said: AnnotatedRollout =
                serde_json::from_str(text).map_err(StrategyError::Annotation)?;
            said.over(app)
        }
        None => app.clone(),
    };
    if rollout.strategy == Strategy::Rolling {
        return Ok(None);
    }
    let paused = m.object.get("spec").and_then(|s| s.get("paused"));
    if paused == Some(&Value::Bool(true)) {
        // Git pauses it: nothing rolls out until git says so.
        return Ok(None);
    }
    rollout.progressive(known).map_err(match annotation {
        Some(_) => StrategyError::Annotated,
        None => StrategyError::App,
    })
}

/// Whether the write starts or carries on a canary — the live Deployment's template is
/// not the one the validate step's dry run made, or berth holds it (paused) still — and if
/// so, the live strategy, and whether git moved while it was held (its template not the
/// dry run's).
async fn in_flight(ctx: &Ctx<'_>, w: &Write) -> Result<Option<(Value, bool)>, kube::Error> {
    // The template as the server's dry run made it (defaulted), beside the live one's.
    let (Some(Some(_)), Some(planned)) = (w.existing(), w.planned_deployment()) else {
        return Ok(None);
    };
    let m = &w.target.manifest;
    let ns = m.namespace_or_default();
    let Some(live) = Api::<Deployment>::namespaced(ctx.cluster.client.clone(), ns)
        .get_opt(m.name())
        .await?
    else {
        return Ok(None);
    };
    let hash = |d: &Deployment| revisions::owned(d, Vec::new()).hash;
    let spec = live.spec.as_ref();
    let paused = spec.and_then(|s| s.paused) == Some(true);
    let strategy = serde_json::to_value(spec.and_then(|s| s.strategy.as_ref()));
    let strategy = strategy.map_err(kube::Error::SerdeError)?;
    let changed = hash(&live) != hash(&planned);
    Ok((paused || changed).then_some((strategy, paused && changed)))
}

/// Deployment `m` paused, with `strategy` (when given).
fn paused(m: &Manifest, strategy: Option<Value>) -> Manifest {
    let mut held = m.clone();
    if let Some(spec) = held.object.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("paused".into(), json!(true));
        if let Some(strategy) = strategy {
            spec.insert("strategy".into(), strategy);
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RolloutConfig;

    fn annotated(text: &str) -> Manifest {
        let object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "annotations": {ROLLOUT_ANNOTATION: text}},
            "spec": {"replicas": 3},
        });
        Manifest {
            object: serde_json::from_value(object).unwrap(),
            origin: crate::manifest::Origin::file("deployment.yaml"),
            decrypted: Vec::new(),
        }
    }

    #[test]
    fn a_deployment_carries_its_own_strategy_and_a_wrong_one_says_why() {
        let known = BTreeSet::from(["errors"]);
        let app = RolloutConfig::default();
        let steps = |text: &str| progressive_of(&annotated(text), &app, &known);
        let ran = steps(
            r#"{"strategy": "canary", "steps": [{"weight": 50, "pause": "5s", "analysis": ["errors"]}, {"weight": 100}]}"#,
        );
        let Ok(Some(Progressive::Canary(ran))) = ran else {
            panic!("{ran:?}")
        };
        let weights: Vec<u8> = ran.iter().map(|s| s.weight).collect();
        assert_eq!(weights, [50, 100]);
        let blue_green = steps(
            r#"{"strategy": "blue-green", "preview_service": "web-preview", "active_service": "web", "analysis": ["errors"]}"#,
        );
        let Ok(Some(Progressive::BlueGreen(bg))) = blue_green else {
            panic!("{blue_green:?}")
        };
        assert_eq!(
            (bg.active_service.as_str(), bg.scale_down_delay),
            ("web", app.scale_down_delay)
        );
        assert!(steps(r#"{"strategy": "rolling"}"#).unwrap().is_none());
        let said = |text: &str| steps(text).unwrap_err().to_string();
        assert_eq!(
            said(r#"{"strategy": "canary", "steps": [{"weight": 50}]}"#),
            "annotation berth.dev/rollout: the last step has weight 50: a canary ends at weight = 100"
        );
        assert!(
            said(r#"{"strategy": "linear"}"#)
                .starts_with("annotation berth.dev/rollout: unknown variant `linear`"),
            "{}",
            said(r#"{"strategy": "linear"}"#)
        );
        assert!(said(
            r#"{"strategy": "canary", "steps": [{"weight": 100, "analysis": ["latency"]}]}"#
        )
        .contains("no [[analysis]] named \"latency\""));
    }
}
