//! Driving one held Deployment's canary: each step's pods made to stand ([`Sets`]), held
//! through the step's pause and checks; at 100 % the Deployment applied as git has it and
//! followed as a rolling rollout is. A failed check (or new pods never ready) brings the
//! old version back to full size and the new one to 0, and the roll-out step's rollback
//! follows; a shutdown leaves the step where it stands, for the next sync to carry on.
//! Where it stands is kept for `berth status`, and `berth promote` (a pause ended) and
//! `berth abort` are taken at each step's hold ([`gate`]).

use std::sync::Mutex;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;

use super::run::{Cut, Driven, Run};
use super::sets::{request, Sets};
use crate::cluster::apply::apply_all;
use crate::config::{CanaryStep, Progressive};
use crate::history::{CanaryStepRecord, CheckRecord, FollowedRollout, RolloutOutcome};
use crate::rollout::canary::{step_shown, Split};
use crate::rollout::gate;
use crate::shutdown;
use crate::sync::context::Ctx;
use crate::sync::error::SyncError;
use crate::sync::follow::follow_one;
use crate::sync::write::Write;

/// Drives write `w`'s canary (its Deployment applied held, at commit `sha`) to its end.
///
/// # Errors
/// The Deployment or its ReplicaSets cannot be read or written.
pub(in crate::sync) async fn drive(
    ctx: &Ctx<'_>,
    w: &Write,
    sha: &str,
) -> Result<Driven, SyncError> {
    let Some(canary) = &w.canary else {
        unreachable!("drive is given canaries only");
    };
    let m = &w.target.manifest;
    let deployments: Api<Deployment> =
        Api::namespaced(ctx.cluster.client.clone(), m.namespace_or_default());
    let d = deployments.get(m.name()).await;
    let d = d.map_err(request("reading the Deployment"))?;
    let client = ctx.syncer.checks_client().map_err(|e| SyncError::Canary {
        origin: m.origin.clone(),
        key: m.key().qualified_name(),
        message: format!("no HTTP client for its checks: {e}"),
    })?;
    let sets = Sets::of(ctx, &d).await?;
    let run = Run {
        ctx,
        version: sets.new.rsplit('-').next().unwrap_or_default().to_string(),
        sets,
        sha,
        client,
        jobs: Api::namespaced(ctx.writer.clone(), m.namespace_or_default()),
        prefix: m.key().kubectl(),
        started: Timestamp::now(),
        steps: Vec::new(),
        standing: Mutex::new(None),
        switch: None,
    };
    let driven = match &canary.plan {
        Progressive::Canary(steps) => run.all(w, steps, canary.moved).await,
        Progressive::BlueGreen(bg) => run.blue_green(w, bg, canary.moved).await,
    };
    let cut_short =
        (driven.as_ref()).is_ok_and(|d| d.followed.outcome == RolloutOutcome::Interrupted);
    if !cut_short {
        gate::clear(&ctx.syncer.agent.state_dir, &ctx.app.name);
    }
    driven
}

impl Run<'_> {
    /// The canary of `steps` from the step the cluster shows (`moved`: git moved while it
    /// was held) to its end.
    async fn all(
        mut self,
        w: &Write,
        steps: &[CanaryStep],
        moved: bool,
    ) -> Result<Driven, SyncError> {
        if moved && self.sets.running {
            return self.back(w).await;
        }
        let weights: Vec<u8> = steps.iter().map(|s| s.weight).collect();
        let shown = self.sets.new_size().await?;
        let from = step_shown(&weights, self.sets.replicas, shown).unwrap_or(0);
        if from > 0 {
            let of = weights.len();
            self.say(&format!(
                "carrying on the canary at step {} of {of}",
                from + 1
            ));
        }
        for (i, step) in steps.iter().enumerate().skip(from) {
            let split = Split::at(self.sets.replicas, step.weight);
            if let Some(ended) = self.step(i, step, weights.len(), split).await? {
                return Ok(ended);
            }
        }
        self.finish(w).await
    }

    pub(super) fn say(&self, line: &str) {
        self.ctx.say(&format!("{}: {line}", self.prefix));
    }

    /// Step `i` (of `of`): its pods stood at `split`, its pause, its checks. `Some` when the canary ends here
    /// (aborted, or cut short by a shutdown).
    pub(super) async fn step(
        &mut self,
        i: usize,
        step: &CanaryStep,
        of: usize,
        split: Split,
    ) -> Result<Option<Driven>, SyncError> {
        let at = format!("step {} ({} %)", i + 1, step.weight);
        let (n, w, new, old) = (i + 1, step.weight, split.new, split.old);
        self.say(&format!("step {n} of {of}: {w} % ({new} new, {old} old)"));
        self.note(|s| *s = Some(self.standing_at(i, of, step.weight, split)));
        let stood = match self.sets.stand(split).await? {
            Ok(stood) => stood,
            Err(e) => return self.abort(format!("{at}: {e}")).await.map(Some),
        };
        self.note(|s| {
            if let Some(s) = s {
                (s.new, s.old) = (stood.new, stood.old);
            }
        });
        let mut record = CanaryStepRecord {
            step: i,
            weight: step.weight,
            new: stood.new,
            old: stood.old,
            at: Timestamp::now(),
            done_at: None,
            checks: Vec::new(),
        };
        let failed = match self.hold(i, step).await {
            Ok(checks) => {
                record.checks = checks;
                failed_check(&record.checks, &at)
            }
            Err(Cut::Aborted(asked)) => {
                Some(format!("aborted by berth abort ({}) at {at}", asked.by))
            }
            Err(Cut::Superseded(commit)) => {
                self.steps.push(record);
                let message =
                    format!("superseded at {at} by commit {commit}: the next sync runs its canary");
                self.say(&message);
                return Ok(Some(self.ended(RolloutOutcome::Superseded, message)));
            }
        };
        if failed.is_none() && shutdown::is_stopped(self.ctx.shutdown) {
            self.steps.push(record);
            let message = format!("cut short at {at}: the next sync carries it on");
            return Ok(Some(self.ended(RolloutOutcome::Interrupted, message)));
        }
        record.done_at = Some(Timestamp::now());
        self.steps.push(record);
        match failed {
            Some(why) => self.abort(why).await.map(Some),
            None => Ok(None),
        }
    }

    /// Git went back, during a canary, to the version it replaced: that version runs in
    /// full again at once (no steps: it is what ran before), then as git has it.
    pub(super) async fn back(mut self, w: &Write) -> Result<Driven, SyncError> {
        self.say("git went back to the version this canary replaced: it runs in full again");
        if let Err(e) = self.sets.stand(Split::at(self.sets.replicas, 100)).await? {
            return Ok(self.ended(RolloutOutcome::Failed, e.to_string()));
        }
        self.finish(w).await
    }

    /// The old version back, the canary failed for `why`.
    async fn abort(&mut self, why: String) -> Result<Driven, SyncError> {
        let replicas = self.sets.replicas;
        self.say(&format!(
            "{why}: aborting, the old version back at {replicas}"
        ));
        if let Some(switch) = &self.switch {
            // The old version serves again before the new one goes.
            if let Some(old) = &switch.old {
                switch.pin(&switch.active, old).await?;
            }
        }
        let prefix = self.prefix.clone();
        let say = |line: &str| self.ctx.say(&format!("{prefix}: {line}"));
        self.sets.abort(&say).await?;
        Ok(self.ended(RolloutOutcome::Failed, why))
    }

    /// At 100 %: the Deployment as git has it, followed to the end; its controller finds
    /// the new ReplicaSet full.
    pub(super) async fn finish(mut self, w: &Write) -> Result<Driven, SyncError> {
        let m = &w.target.manifest;
        let applied = apply_all(&self.ctx.writer, &self.ctx.settings(), &[&w.target], false).await;
        let Some(applied) = applied.into_iter().next() else {
            unreachable!("apply_all answers each target");
        };
        let applied = applied.map_err(SyncError::Cluster)?;
        let mut followed = follow_one(self.ctx, &applied, m).await?;
        followed.started_at = self.started;
        let mut timeline = std::mem::take(&mut self.sets.timeline);
        timeline.append(&mut followed.steps);
        followed.steps = timeline;
        Ok(Driven {
            followed,
            steps: self.steps,
            applied: Some(applied),
        })
    }

    /// The canary's record when it ends short of 100 %.
    fn ended(&mut self, outcome: RolloutOutcome, message: String) -> Driven {
        Driven {
            followed: FollowedRollout {
                outcome,
                message,
                revision: None,
                replica_set: Some(self.sets.new.clone()),
                started_at: self.started,
                finished_at: Timestamp::now(),
                steps: std::mem::take(&mut self.sets.timeline),
            },
            steps: std::mem::take(&mut self.steps),
            applied: None,
        }
    }
}

/// Why `checks` at step `at` failed (the first failing, with its last failed
/// measurement), if one did.
fn failed_check(checks: &[CheckRecord], at: &str) -> Option<String> {
    checks.iter().find(|c| !c.passed).map(|c| {
        let last = c.measurements.iter().rev().find(|m| !m.passed);
        let why = last.and_then(|m| m.why.clone()).unwrap_or_default();
        format!("analysis {} failed at {at}: {why}", c.name)
    })
}
