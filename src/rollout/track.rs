//! Following a rollout (engine `cluster`): watch the Deployment and its ReplicaSets — no
//! polling — until the status reports complete or failed, or the timeout passes; record
//! every step and report progress like `kubectl rollout status`.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use tokio::sync::watch as shutdown_watch;

use super::revisions::{select, selector};
use super::status::{phase, Phase};
use crate::history::{FollowedRollout, RolloutOutcome, TimelineStep};

/// Timeline steps kept per rollout (the first and the last ones survive a long rollout).
const MAX_STEPS: usize = 500;

/// What changed.
enum Seen {
    Deployment(Box<Deployment>),
    ReplicaSet(Box<ReplicaSet>),
    ReplicaSetGone(String),
    /// The ReplicaSet watch has listed them all: steps mean something from now on.
    ReplicaSetsListed,
    Nothing,
}

/// Follows the rollout of Deployment `namespace/name` whose spec berth wrote at
/// `generation`. Never judges from an older status. Progress lines go to `report`.
pub async fn follow(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    generation: i64,
    timeout: Duration,
    shutdown: &shutdown_watch::Receiver<bool>,
    report: &(dyn Fn(&str) + Send + Sync),
) -> FollowedRollout {
    let started_at = Timestamp::now();
    let mut state = State {
        deployment: None,
        replica_sets: BTreeMap::new(),
        listed: false,
        steps: Vec::new(),
        message: String::new(),
    };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let outcome = match deployments.get(name).await {
        Err(e) => {
            state.message = format!("cannot read Deployment {namespace}/{name}: {e}");
            RolloutOutcome::Failed
        }
        Ok(d) => {
            let labels = selector(&d);
            state.deployment = Some(d);
            let events = watch_both(client, namespace, name, &labels);
            let mut shutdown = shutdown.clone();
            let watching = state.run(events, generation, report);
            tokio::select! {
                outcome = tokio::time::timeout(timeout, watching) => {
                    outcome.unwrap_or(RolloutOutcome::TimedOut)
                }
                () = crate::agent::stopped(&mut shutdown) => RolloutOutcome::Interrupted,
            }
        }
    };
    state.finish(outcome, started_at, timeout)
}

fn watch_both<'a>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    labels: &str,
) -> impl futures::Stream<Item = Seen> + Send + 'a {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let d = watcher(
        deployments,
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
    .map(|e| match e {
        Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => {
            Seen::Deployment(Box::new(d))
        }
        _ => Seen::Nothing,
    });
    let r = watcher(replica_sets, watcher::Config::default().labels(labels))
        .default_backoff()
        .map(|e| match e {
            Ok(watcher::Event::Apply(rs) | watcher::Event::InitApply(rs)) => {
                Seen::ReplicaSet(Box::new(rs))
            }
            Ok(watcher::Event::Delete(rs)) => {
                Seen::ReplicaSetGone(rs.metadata.name.unwrap_or_default())
            }
            Ok(watcher::Event::InitDone) => Seen::ReplicaSetsListed,
            _ => Seen::Nothing,
        });
    stream::select(d, r)
}

/// The record of a rollout berth did not wait for (`--no-wait`).
pub fn not_followed(revision: i64) -> FollowedRollout {
    let now = Timestamp::now();
    FollowedRollout {
        outcome: RolloutOutcome::Interrupted,
        message: "not followed (--no-wait)".into(),
        revision: Some(revision),
        replica_set: None,
        started_at: now,
        finished_at: now,
        steps: Vec::new(),
    }
}

struct State {
    deployment: Option<Deployment>,
    replica_sets: BTreeMap<String, ReplicaSet>,
    /// The first list of ReplicaSets is complete.
    listed: bool,
    steps: Vec<TimelineStep>,
    message: String,
}

impl State {
    async fn run(
        &mut self,
        events: impl futures::Stream<Item = Seen>,
        generation: i64,
        report: &(dyn Fn(&str) + Send + Sync),
    ) -> RolloutOutcome {
        futures::pin_mut!(events);
        while let Some(seen) = events.next().await {
            match seen {
                Seen::Deployment(d) => self.deployment = Some(*d),
                Seen::ReplicaSet(rs) => {
                    let name = rs.metadata.name.clone().unwrap_or_default();
                    self.replica_sets.insert(name, *rs);
                }
                Seen::ReplicaSetGone(name) => {
                    self.replica_sets.remove(&name);
                }
                Seen::ReplicaSetsListed => self.listed = true,
                Seen::Nothing => continue,
            }
            if !self.listed {
                continue;
            }
            self.record_step();
            let Some(d) = &self.deployment else { continue };
            let (p, message) = phase(d, generation);
            if message != self.message {
                report(&message);
                self.message = message;
            }
            match p {
                Phase::Complete => return RolloutOutcome::Complete,
                Phase::Failed => return RolloutOutcome::Failed,
                Phase::Progressing => {}
            }
        }
        RolloutOutcome::Failed
    }

    /// Appends a step when the sizes or readiness changed.
    fn record_step(&mut self) {
        let Some(d) = &self.deployment else { return };
        let revisions = select(d, self.replica_sets.values().cloned().collect());
        let new = revisions.new.as_ref();
        let step = TimelineStep {
            at: Timestamp::now(),
            new_replicas: new.map_or(0, |rs| rs.replicas),
            new_ready: new.map_or(0, |rs| rs.ready),
            new_available: new.map_or(0, |rs| rs.available),
            old_replicas: revisions.old.iter().map(|rs| rs.replicas).sum(),
            old_available: revisions.old.iter().map(|rs| rs.available).sum(),
        };
        let key = |s: &TimelineStep| {
            (
                s.new_replicas,
                s.new_ready,
                s.new_available,
                s.old_replicas,
                s.old_available,
            )
        };
        let same = self
            .steps
            .last()
            .is_some_and(|last| key(last) == key(&step));
        if !same {
            if self.steps.len() >= MAX_STEPS {
                self.steps.remove(1);
            }
            self.steps.push(step);
        }
    }

    fn finish(
        self,
        outcome: RolloutOutcome,
        started_at: Timestamp,
        timeout: Duration,
    ) -> FollowedRollout {
        let revisions = self
            .deployment
            .as_ref()
            .map(|d| select(d, self.replica_sets.values().cloned().collect()));
        let new = revisions.as_ref().and_then(|r| r.new.as_ref());
        let message = match outcome {
            RolloutOutcome::TimedOut => format!(
                "not complete after {}s (rollout.timeout): {}",
                timeout.as_secs(),
                self.message
            ),
            RolloutOutcome::Interrupted => {
                format!("stopped following at shutdown: {}", self.message)
            }
            _ => self.message,
        };
        FollowedRollout {
            outcome,
            message,
            revision: new.map(|rs| rs.revision),
            replica_set: new.map(|rs| rs.name.clone()),
            started_at,
            finished_at: Timestamp::now(),
            steps: self.steps,
        }
    }
}
