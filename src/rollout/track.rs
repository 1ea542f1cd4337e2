//! Following rollouts: watch Deployments and their ReplicaSets — no polling — until each
//! status reports complete or failed, or the timeout passes; record every step and report
//! progress like `kubectl rollout status`.
//!
//! A few rollouts in a namespace are each watched alone: the Deployment by name, its
//! ReplicaSets by its selector — a namespace-wide watch would read every app's objects
//! there, and with many apps sharing a namespace that costs the square of the apps. More
//! rollouts in one namespace share one Deployment watch and one ReplicaSet watch (not a
//! pair per Deployment: 300 Deployments would mean 600 watches). ReplicaSet events go to
//! the rollout whose Deployment owns them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use futures::{stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};

use super::phase::{phase, Phase};
use super::revisions::select;
use crate::history::{FollowedRollout, RolloutOutcome, TimelineStep};
use crate::shutdown::{stopped, Signal};

/// Timeline steps kept per rollout (the first and the last ones survive a long rollout).
const MAX_STEPS: usize = 500;
/// A namespace with at most this many rollouts to follow has a pair of watches for each.
const WATCH_EACH_AT_MOST: usize = 4;

/// A rollout to follow: Deployment `namespace/name`, whose spec berth wrote at
/// `generation` (an older status is never judged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Follow {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The generation berth wrote.
    pub generation: i64,
    /// Its ReplicaSets' label selector (see [`match_labels`](super::revisions::match_labels)); empty when not known.
    pub selector: String,
}

/// What one pair of watches covers: a namespace, or one Deployment and its ReplicaSets.
struct Scope {
    namespace: String,
    /// The Deployment's name and its ReplicaSets' selector.
    one: Option<(String, String)>,
}

/// The watches for `follows`: one pair per rollout where a namespace has a few (and their
/// selectors are known), one pair for the namespace otherwise; and each rollout's scope.
fn scopes(follows: &[Follow]) -> (Vec<Scope>, Vec<usize>) {
    let mut by_namespace: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, f) in follows.iter().enumerate() {
        by_namespace.entry(&f.namespace).or_default().push(i);
    }
    let mut scopes = Vec::new();
    let mut scope_of = vec![0; follows.len()];
    for (ns, members) in by_namespace {
        let each = members.len() <= WATCH_EACH_AT_MOST
            && members.iter().all(|&i| !follows[i].selector.is_empty());
        if !each {
            members.iter().for_each(|&i| scope_of[i] = scopes.len());
            scopes.push(Scope {
                namespace: ns.to_owned(),
                one: None,
            });
            continue;
        }
        for i in members {
            scope_of[i] = scopes.len();
            let f = &follows[i];
            scopes.push(Scope {
                namespace: ns.to_owned(),
                one: Some((f.name.clone(), f.selector.clone())),
            });
        }
    }
    (scopes, scope_of)
}

/// What changed, in which namespace.
enum Seen {
    Deployment(Box<Deployment>),
    ReplicaSet(Box<ReplicaSet>),
    ReplicaSetGone(String, String),
    /// A scope's ReplicaSet watch has listed them all: steps mean something now.
    Listed(usize),
    /// [`PROGRESS_EVERY`] passed: a long wait says it is still waiting.
    Tick,
    Nothing,
}

/// How often a rollout that has not moved says where it stands, as `kubectl rollout
/// status` does while it waits.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Follows several rollouts at once; results in the order of `follows`. Progress lines
/// go to `report` with the rollout they belong to.
pub async fn follow_many(
    client: &kube::Client,
    follows: &[Follow],
    timeout: Duration,
    shutdown: &Signal,
    report: &(dyn Fn(&Follow, &str) + Send + Sync),
) -> Vec<FollowedRollout> {
    let started_at = Timestamp::now();
    let (scopes, scope_of) = scopes(follows);
    let mut t = Tracker::new(follows, scope_of);
    if follows.is_empty() {
        return Vec::new();
    }
    let events = stream::select_all(
        scopes
            .iter()
            .enumerate()
            .map(|(i, scope)| watch(client, i, scope).boxed()),
    );
    let ticks = stream::unfold((), |()| async {
        tokio::time::sleep(PROGRESS_EVERY).await;
        Some((Seen::Tick, ()))
    });
    let events = stream::select(events, ticks);
    let mut shutdown = shutdown.clone();
    let outcome = tokio::select! {
        done = tokio::time::timeout(timeout, t.run(events, report)) => done.map_or(RolloutOutcome::TimedOut, |()| RolloutOutcome::Failed),
        () = stopped(&mut shutdown) => RolloutOutcome::Interrupted,
    };
    t.finish(outcome, started_at, timeout)
}

fn watch(
    client: &kube::Client,
    id: usize,
    scope: &Scope,
) -> impl futures::Stream<Item = Seen> + Send + 'static {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &scope.namespace);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &scope.namespace);
    let namespace = scope.namespace.clone();
    let (by_name, labelled) = match &scope.one {
        Some((name, selector)) => (
            watcher::Config::default().fields(&format!("metadata.name={name}")),
            watcher::Config::default().labels(selector),
        ),
        None => (watcher::Config::default(), watcher::Config::default()),
    };
    let d = watcher(deployments, by_name)
        .default_backoff()
        .map(|e| match e {
            Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => {
                Seen::Deployment(Box::new(d))
            }
            _ => Seen::Nothing,
        });
    let r = watcher(replica_sets, labelled)
        .default_backoff()
        .map(move |e| match e {
            Ok(watcher::Event::Apply(rs) | watcher::Event::InitApply(rs)) => {
                Seen::ReplicaSet(Box::new(rs))
            }
            Ok(watcher::Event::Delete(rs)) => {
                Seen::ReplicaSetGone(namespace.clone(), rs.metadata.name.unwrap_or_default())
            }
            Ok(watcher::Event::InitDone) => Seen::Listed(id),
            _ => Seen::Nothing,
        });
    stream::select(d, r)
}

/// One rollout's view.
struct State {
    follow: Follow,
    /// Its watches' [`Scope`].
    scope: usize,
    deployment: Option<Deployment>,
    replica_sets: BTreeMap<String, ReplicaSet>,
    steps: Vec<TimelineStep>,
    message: String,
    outcome: Option<RolloutOutcome>,
}

struct Tracker {
    states: Vec<State>,
    /// (namespace, name) → index.
    by_name: HashMap<(String, String), usize>,
    /// Deployment UID → index.
    by_uid: HashMap<String, usize>,
    /// The scopes whose ReplicaSets have been listed.
    listed: BTreeSet<usize>,
}

fn owner_uid(rs: &ReplicaSet) -> Option<&str> {
    super::revisions::controller(&rs.metadata).map(|o| o.uid.as_str())
}

impl Tracker {
    fn new(follows: &[Follow], scope_of: Vec<usize>) -> Self {
        let states: Vec<State> = follows
            .iter()
            .zip(scope_of)
            .map(|(f, scope)| State {
                follow: f.clone(),
                scope,
                deployment: None,
                replica_sets: BTreeMap::new(),
                steps: Vec::new(),
                message: String::new(),
                outcome: None,
            })
            .collect();
        let by_name = follows
            .iter()
            .enumerate()
            .map(|(i, f)| ((f.namespace.clone(), f.name.clone()), i))
            .collect();
        Tracker {
            states,
            by_name,
            by_uid: HashMap::new(),
            listed: BTreeSet::new(),
        }
    }

    /// Takes what the watches see until every rollout has an outcome (or they end).
    async fn run(
        &mut self,
        events: impl futures::Stream<Item = Seen>,
        report: &(dyn Fn(&Follow, &str) + Send + Sync),
    ) {
        futures::pin_mut!(events);
        let mut orphans: Vec<ReplicaSet> = Vec::new();
        while let Some(seen) = events.next().await {
            let touched: Vec<usize> = match seen {
                Seen::Deployment(d) => match self.deployment(*d, &mut orphans) {
                    Some(i) => vec![i],
                    None => continue,
                },
                Seen::ReplicaSet(rs) => match self.replica_set(*rs, &mut orphans) {
                    Some(i) => vec![i],
                    None => continue,
                },
                Seen::ReplicaSetGone(ns, name) => {
                    let mut touched = Vec::new();
                    for (i, s) in self.states.iter_mut().enumerate() {
                        if s.follow.namespace == ns && s.replica_sets.remove(&name).is_some() {
                            touched.push(i);
                        }
                    }
                    touched
                }
                Seen::Listed(scope) => {
                    self.listed.insert(scope);
                    (0..self.states.len())
                        .filter(|&i| self.states[i].scope == scope)
                        .collect()
                }
                Seen::Tick => {
                    for s in self.states.iter().filter(|s| s.outcome.is_none()) {
                        if !s.message.is_empty() {
                            report(&s.follow, &format!("still waiting: {}", s.message));
                        }
                    }
                    continue;
                }
                Seen::Nothing => continue,
            };
            for i in touched {
                let s = &mut self.states[i];
                if s.outcome.is_some() || !self.listed.contains(&s.scope) {
                    continue;
                }
                s.update(report);
            }
            if self.states.iter().all(|s| s.outcome.is_some()) {
                return;
            }
        }
    }

    /// A Deployment followed, as seen: its ReplicaSets seen before it (among `orphans`)
    /// are its own now; which rollout it is, when it is one.
    fn deployment(&mut self, d: Deployment, orphans: &mut Vec<ReplicaSet>) -> Option<usize> {
        let key = (
            d.metadata.namespace.clone().unwrap_or_default(),
            d.metadata.name.clone().unwrap_or_default(),
        );
        let &i = self.by_name.get(&key)?;
        if let Some(uid) = &d.metadata.uid {
            self.by_uid.insert(uid.clone(), i);
        }
        self.states[i].deployment = Some(d);
        let (mine, rest): (Vec<_>, Vec<_>) = orphans
            .drain(..)
            .partition(|rs| owner_uid(rs).and_then(|u| self.by_uid.get(u)) == Some(&i));
        *orphans = rest;
        for rs in mine {
            self.states[i]
                .replica_sets
                .insert(rs.metadata.name.clone().unwrap_or_default(), rs);
        }
        Some(i)
    }

    /// A ReplicaSet seen: which rollout's it is; one whose Deployment was not seen yet
    /// waits among `orphans`.
    fn replica_set(&mut self, rs: ReplicaSet, orphans: &mut Vec<ReplicaSet>) -> Option<usize> {
        let Some(i) = owner_uid(&rs).and_then(|u| self.by_uid.get(u)).copied() else {
            orphans.push(rs);
            return None;
        };
        self.states[i]
            .replica_sets
            .insert(rs.metadata.name.clone().unwrap_or_default(), rs);
        Some(i)
    }

    fn finish(
        self,
        unfinished: RolloutOutcome,
        started_at: Timestamp,
        timeout: Duration,
    ) -> Vec<FollowedRollout> {
        self.states
            .into_iter()
            .map(|s| s.finish(unfinished, started_at, timeout))
            .collect()
    }
}

impl State {
    /// Records a step and judges the phase after a change.
    fn update(&mut self, report: &(dyn Fn(&Follow, &str) + Send + Sync)) {
        self.record_step();
        let Some(d) = &self.deployment else { return };
        let (p, message) = phase(d, self.follow.generation);
        if message != self.message {
            report(&self.follow, &message);
            self.message = message;
        }
        self.outcome = match p {
            Phase::Complete => Some(RolloutOutcome::Complete),
            Phase::Failed => Some(RolloutOutcome::Failed),
            Phase::Progressing => None,
        };
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
            desired: Some(d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)),
        };
        let key = |s: &TimelineStep| {
            (
                s.new_replicas,
                s.new_ready,
                s.new_available,
                s.old_replicas,
                s.old_available,
                s.desired,
            )
        };
        if self
            .steps
            .last()
            .is_some_and(|last| key(last) == key(&step))
        {
            return;
        }
        if self.steps.len() >= MAX_STEPS {
            self.steps.remove(1);
        }
        self.steps.push(step);
    }

    fn finish(
        self,
        unfinished: RolloutOutcome,
        started_at: Timestamp,
        timeout: Duration,
    ) -> FollowedRollout {
        let revisions = self
            .deployment
            .as_ref()
            .map(|d| select(d, self.replica_sets.values().cloned().collect()));
        let new = revisions.as_ref().and_then(|r| r.new.as_ref());
        let outcome = self.outcome.unwrap_or(unfinished);
        let message = match (self.outcome, unfinished) {
            (Some(_), _) => self.message,
            (None, RolloutOutcome::TimedOut) => format!(
                "not complete after {}s (rollout.timeout): {}",
                timeout.as_secs(),
                self.message
            ),
            (None, RolloutOutcome::Interrupted) => {
                format!("stopped following at shutdown: {}", self.message)
            }
            (None, _) => format!("the watch ended: {}", self.message),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn follow(ns: &str, name: &str, selector: &str) -> Follow {
        Follow {
            namespace: ns.into(),
            name: name.into(),
            generation: 1,
            selector: selector.into(),
        }
    }

    #[test]
    fn a_few_rollouts_are_watched_alone_many_share_their_namespace() {
        let mut follows = vec![follow("a", "web", "app=web"), follow("a", "api", "app=api")];
        follows.extend((0..5).map(|i| follow("b", &format!("d{i}"), "x=y")));
        follows.push(follow("c", "old", ""));
        let (scopes, scope_of) = scopes(&follows);
        assert_eq!(scopes.len(), 4, "web, api, namespace b, namespace c");
        let one = |i: usize| scopes[scope_of[i]].one.clone();
        assert_eq!(one(0), Some(("web".into(), "app=web".into())));
        assert_eq!(one(1), Some(("api".into(), "app=api".into())));
        assert!((2..7).all(|i| scope_of[i] == scope_of[2] && one(i).is_none()));
        assert_eq!(scopes[scope_of[2]].namespace, "b");
        assert_eq!(one(7), None, "no selector known: the namespace is watched");
        assert_eq!(scopes[scope_of[7]].namespace, "c");
    }
}
