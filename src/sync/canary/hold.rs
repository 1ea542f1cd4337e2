//! A canary step's hold: its pause (ended early by `berth promote`), its checks, a `berth
//! abort` taken at either, and a new commit that changes the app superseding the canary
//! (the next sync runs the new version's own); where it stands kept for `berth status`.

use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::checks::{self, Probes};
use super::run::{Cut, Run};
use crate::config::{CanaryStep, Pause};
use crate::history::{CheckRecord, Measurement};
use crate::rollout::canary::Split;
use crate::rollout::gate::{self, Asked, LastMeasurement, Standing, Verb};
use crate::shutdown;

/// How often a held step looks for a request of `berth promote` or `berth abort`.
const ASKED_EVERY: Duration = Duration::from_millis(250);

/// How often a held step fetches the app's source, at most and at least (the agent's
/// interval in between).
const FETCH_EVERY: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(60));

impl Run<'_> {
    /// Where the canary stands as step `i` (of `of`, at `weight`) begins.
    pub(super) fn standing_at(&self, i: usize, of: usize, weight: u8, split: Split) -> Standing {
        Standing {
            deployment: self.prefix.clone(),
            version: self.version.clone(),
            step: i + 1,
            of,
            weight,
            new: split.new,
            old: split.old,
            holding: None,
            paused: false,
            checks: Vec::new(),
            since: Timestamp::now(),
        }
    }

    /// Changes where the canary stands by `change`, and keeps it for `berth status`.
    pub(super) fn note(&self, change: impl FnOnce(&mut Option<Standing>)) {
        let mut standing = self.standing.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut standing);
        if let Some(s) = standing.as_ref() {
            gate::keep(&self.ctx.syncer.agent.state_dir, &self.ctx.app.name, s);
        }
    }

    /// The next request of `berth promote` or `berth abort` left for step `i`.
    async fn asked(&self, i: usize) -> Asked {
        loop {
            if let Some(asked) = self.take(i) {
                return asked;
            }
            tokio::time::sleep(ASKED_EVERY).await;
        }
    }

    /// The request left for step `i`, if any.
    fn take(&self, i: usize) -> Option<Asked> {
        let (state_dir, app) = (&self.ctx.syncer.agent.state_dir, &self.ctx.app.name);
        gate::take(state_dir, app, &self.version, i + 1)
    }

    /// Step `i`'s pause, then its checks (none once a shutdown came); `Err` when `berth
    /// abort` asked to abort, or a new commit superseded the canary.
    pub(super) async fn hold(&self, i: usize, step: &CanaryStep) -> Result<Vec<CheckRecord>, Cut> {
        // An abort asked while the step's pods came up.
        if let Some(asked) = self.take(i).filter(|a| a.verb == Verb::Abort) {
            return Err(Cut::Aborted(asked));
        }
        let held = async {
            if let Some(pause) = step.pause {
                self.pause(i, pause).await?;
            }
            if step.analysis.is_empty() || shutdown::is_stopped(self.ctx.shutdown) {
                return Ok(Vec::new());
            }
            self.checks(i, &step.analysis).await
        };
        tokio::select! {
            held = held => held.map_err(Cut::Aborted),
            commit = self.superseded() => Err(Cut::Superseded(commit)),
        }
    }

    /// Resolves once git changes the app past the sync's commit: a new commit whose paths
    /// the render reads differ (a commit elsewhere in the repository changes nothing),
    /// looked for by a fetch as the app's syncs make one.
    async fn superseded(&self) -> String {
        let ctx = self.ctx;
        let every = (ctx.syncer.agent.interval).clamp(FETCH_EVERY.0, FETCH_EVERY.1);
        loop {
            tokio::time::sleep(every).await;
            let Ok(new) = ctx.syncer.sources.fetch(ctx.app, Instant::now()).await else {
                continue;
            };
            if new.commit.sha == self.sha {
                continue;
            }
            let Some(now) = crate::sync::steps::render::inputs_of(ctx, &new) else {
                continue;
            };
            let before = crate::source::git::paths_digest(&new.source, self.sha, &now.paths);
            if before.as_deref() != Some(now.digest.as_str()) {
                return new.commit.short().to_string();
            }
        }
    }

    /// Step `i`'s pause, ended early by `berth promote` (or a shutdown); `Err` when
    /// `berth abort` asked to abort.
    async fn pause(&self, i: usize, pause: Pause) -> Result<(), Asked> {
        let holding = match pause {
            Pause::For(d) => format!("paused for {}", humantime::format_duration(d)),
            Pause::UntilPromoted => "paused until berth promote".into(),
        };
        self.say(&holding);
        self.note(|s| {
            if let Some(s) = s {
                (s.holding, s.paused) = (Some(holding), true);
            }
        });
        let wait = async {
            match pause {
                Pause::For(d) => tokio::time::sleep(d).await,
                Pause::UntilPromoted => std::future::pending().await,
            }
        };
        tokio::select! {
            () = wait => {}
            () = shutdown::asked(self.ctx.shutdown.clone()) => {}
            asked = self.asked(i) => match asked.verb {
                Verb::Promote => self.say(&format!("promoted by {}", asked.by)),
                Verb::Abort => return Err(asked),
            },
        }
        Ok(())
    }

    /// Step `i`'s checks `names`; `Err` when `berth abort` asked to abort.
    async fn checks(&self, i: usize, names: &[String]) -> Result<Vec<CheckRecord>, Asked> {
        let ctx = self.ctx;
        self.note(|s| {
            if let Some(s) = s {
                let holding = format!("analysis {}", names.join(", "));
                (s.holding, s.paused) = (Some(holding), false);
            }
        });
        let config = ctx.syncer.config();
        let seen = |check: &str, m: &Measurement, line: &str| {
            self.say(line);
            self.note(|s| {
                let Some(s) = s else { return };
                s.checks.retain(|c| c.check != check);
                s.checks.push(LastMeasurement {
                    check: check.to_string(),
                    measurement: m.clone(),
                });
            });
        };
        let probes = Probes {
            version: &self.version,
            client: &self.client,
            jobs: self.jobs.clone(),
            job_within: ctx.app.rollout.timeout,
            shutdown: ctx.shutdown,
        };
        let run = checks::run(&config.analyses, names, &probes, &seen);
        tokio::pin!(run);
        loop {
            tokio::select! {
                records = &mut run => return Ok(records),
                asked = self.asked(i) => match asked.verb {
                    Verb::Abort => return Err(asked),
                    Verb::Promote => self.say(&format!(
                        "berth promote ({}) ends a pause; the checks of step {} run still",
                        asked.by,
                        i + 1
                    )),
                },
            }
        }
    }
}
