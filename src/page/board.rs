//! What the status page shows of every app now, kept in memory by the agent: the last
//! sync, the sync in flight and its step, a wait on dependencies, the next sync, the
//! objects' health. The app loops write it; the page reads it and is woken by each change
//! ([`Board::changed`]), so that a page open in a browser follows the agent live.

use std::collections::BTreeMap;
use std::sync::Mutex;

use jiff::Timestamp;
use serde::Serialize;
use tokio::sync::watch;

use crate::config::AppConfig;
use crate::history::{CommitInfo, Outcome, SyncRecord, Trigger};
use crate::live::LiveApp;

/// One app as the page shows it (`/api/apps` lists these).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AppState {
    /// The app.
    pub name: String,
    /// Its repository (user-info, a token, replaced by `***`).
    pub repo: String,
    /// Its paths in the repository, `,`-joined (`.`: the whole repository).
    pub path: String,
    /// The cluster it is synced to.
    pub cluster: String,
    /// The app set that generated it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<String>,
    /// The ref it is a preview of.
    #[serde(rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// `idle`, `syncing` or `waiting`.
    pub state: State,
    /// The step of the sync in flight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The sync's last progress line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub activity: Option<String>,
    /// Since when it syncs or waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    /// What it waits on (`waiting on infra: …`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// Why it is suspended (`by ops@host at …`, `in the configuration`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspended: Option<String>,
    /// Why it is held (a failed rollout of its commit), when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// When its next sync is due, unless something triggers it first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_sync: Option<Timestamp>,
    /// Its last recorded sync.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<LastSync>,
    /// Its objects' health, as last read from the cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthSummary>,
    /// Grows with each change of this app ([`Board::changed`] tells the newest).
    pub version: u64,
    /// It is no longer in the configuration: only its history is shown.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
}

/// Where an app's loop is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Between syncs.
    Idle,
    /// A sync runs (or waits for a place among `max_concurrent_syncs`).
    Syncing,
    /// It waits on the apps it depends on.
    Waiting,
    /// `berth suspend` (or `suspend = true`) keeps it from syncing.
    Suspended,
}

/// An app's last sync, as the list shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LastSync {
    /// The record's id (`/apps/NAME/syncs/ID`).
    pub id: String,
    /// How it ended.
    pub outcome: Outcome,
    /// What started it.
    pub trigger: Trigger,
    /// When it started.
    pub started_at: Timestamp,
    /// When it ended.
    pub finished_at: Timestamp,
    /// The commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<CommitInfo>,
    /// Objects created, configured or pruned.
    pub changes: usize,
    /// Errors.
    pub errors: usize,
    /// The first error's message (its first 300 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A remark (a held app, a rollback).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// How many of an app's objects with a notion of readiness are ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthSummary {
    /// Ready.
    pub ready: usize,
    /// With a notion of readiness (Deployments included).
    pub total: usize,
    /// Failed or missing.
    pub failed: usize,
    /// Every object the app manages.
    pub managed: usize,
    /// Ready pods of its Deployments, and how many they ask for.
    pub pods_ready: i32,
    pub pods: i32,
    /// When the cluster was read.
    pub at: Timestamp,
}

impl LastSync {
    /// The list's line of `record`.
    pub fn of(record: &SyncRecord) -> Self {
        LastSync {
            id: record.id.clone(),
            outcome: record.outcome,
            trigger: record.trigger,
            started_at: record.started_at,
            finished_at: record.finished_at,
            commit: record.commit.clone(),
            changes: record.changes(),
            errors: record.errors.len(),
            error: record
                .errors
                .first()
                .map(|e| e.message.chars().take(300).collect()),
            note: record.note.clone(),
        }
    }
}

impl HealthSummary {
    /// The summary of what the cluster said, read at `at`.
    pub fn of(live: &LiveApp, at: Timestamp) -> Self {
        let (ready, total) = live.ready();
        HealthSummary {
            ready,
            total,
            failed: live.failed(),
            managed: live.keys.len(),
            pods_ready: live.deployments.iter().map(|d| d.ready).sum(),
            pods: live.deployments.iter().map(|d| d.replicas).sum(),
            at,
        }
    }
}

impl AppState {
    fn new(app: &AppConfig) -> Self {
        AppState {
            repo: crate::source::git::redact_url(&app.origin()),
            path: app.path.join(","),
            cluster: app.cluster.clone().unwrap_or_else(|| "default".into()),
            set: app.set.clone(),
            git_ref: app.preview.clone(),
            ..Self::idle(&app.name)
        }
    }

    /// An app no longer in the configuration whose history is kept: its newest record
    /// `last` says its cluster and its last sync.
    pub fn removed(name: &str, last: Option<&SyncRecord>) -> Self {
        let cluster = last.and_then(|r| r.cluster.clone());
        AppState {
            cluster: cluster.unwrap_or_else(|| "default".into()),
            last: last.map(LastSync::of),
            removed: true,
            ..Self::idle(name)
        }
    }

    /// `name`, idle, with nothing known of it.
    fn idle(name: &str) -> Self {
        AppState {
            name: name.to_string(),
            repo: "-".into(),
            path: "-".into(),
            cluster: "default".into(),
            set: None,
            git_ref: None,
            state: State::Idle,
            step: None,
            activity: None,
            since: None,
            waiting: None,
            suspended: None,
            held: None,
            next_sync: None,
            last: None,
            health: None,
            version: 0,
            removed: false,
        }
    }
}

/// Every app's state, and the newest change's version.
pub struct Board {
    apps: Mutex<BTreeMap<String, AppState>>,
    version: watch::Sender<u64>,
}

impl Default for Board {
    fn default() -> Self {
        Board {
            apps: Mutex::new(BTreeMap::new()),
            version: watch::channel(0).0,
        }
    }
}

impl Board {
    /// The configuration's apps: new ones added (their last sync from `last`), removed
    /// ones dropped, the others' repository and path refreshed.
    pub fn set_apps(&self, apps: &[AppConfig], last: impl Fn(&str) -> Option<SyncRecord>) {
        let Ok(mut all) = self.apps.lock() else {
            return;
        };
        let names: std::collections::HashSet<&str> = apps.iter().map(|a| a.name.as_str()).collect();
        all.retain(|name, _| names.contains(name.as_str()));
        for app in apps {
            let fresh = AppState::new(app);
            let state = all.entry(app.name.clone()).or_insert_with(|| AppState {
                last: last(&app.name).as_ref().map(LastSync::of),
                ..fresh.clone()
            });
            state.repo = fresh.repo;
            state.path = fresh.path;
            state.cluster = fresh.cluster;
            state.set = fresh.set;
            state.git_ref = fresh.git_ref;
        }
        drop(all);
        self.version.send_modify(|v| *v += 1);
    }

    /// Changes one app, if the board has it, and tells the readers.
    fn change(&self, app: &str, f: impl FnOnce(&mut AppState)) {
        let Ok(mut all) = self.apps.lock() else {
            return;
        };
        let Some(state) = all.get_mut(app) else {
            return;
        };
        let before = state.clone();
        f(state);
        if *state == before {
            return;
        }
        let mut version = 0;
        self.version.send_modify(|v| {
            *v += 1;
            version = *v;
        });
        state.version = version;
    }

    /// A sync of `app` starts (or queues for a place).
    pub fn syncing(&self, app: &str) {
        self.change(app, |s| {
            s.state = State::Syncing;
            s.since = Some(Timestamp::now());
            s.step = None;
            s.activity = None;
            s.waiting = None;
            s.suspended = None;
            s.next_sync = None;
        });
    }

    /// The sync of `app` is at `step` and said `line`.
    pub fn progress(&self, app: &str, step: Option<&str>, line: &str) {
        self.change(app, |s| {
            if let Some(step) = step {
                s.step = Some(step.to_string());
            }
            s.activity = Some(line.to_string());
        });
    }

    /// `app` waits on its dependencies.
    pub fn waiting(&self, app: &str, why: &str) {
        self.change(app, |s| {
            if s.state != State::Waiting {
                s.since = Some(Timestamp::now());
            }
            s.state = State::Waiting;
            s.waiting = Some(why.to_string());
            s.step = None;
            s.activity = None;
        });
    }

    /// `app` is suspended; `why` says by whom.
    pub fn suspended(&self, app: &str, why: &str) {
        self.change(app, |s| {
            s.since = Some(Timestamp::now());
            s.state = State::Suspended;
            s.suspended = Some(why.to_string());
            s.next_sync = None;
            s.step = None;
            s.activity = None;
        });
    }

    /// The sync of `app` ended with `record`; the next is due at `next`.
    pub fn synced(&self, app: &str, record: &SyncRecord, next: Timestamp) {
        self.change(app, |s| {
            s.state = State::Idle;
            s.since = None;
            s.step = None;
            s.activity = None;
            s.waiting = None;
            s.next_sync = Some(next);
            if record.outcome == Outcome::Held {
                // Never written to the history: the last record stays.
                s.held = record.note.clone();
            } else {
                s.held = None;
                s.last = Some(LastSync::of(record));
            }
        });
    }

    /// What the cluster said of `app`'s objects.
    pub fn health(&self, app: &str, live: &LiveApp, at: Timestamp) {
        self.change(app, |s| {
            s.health = Some(HealthSummary::of(live, at));
            if live.held.is_some() {
                s.held.clone_from(&live.held);
            }
        });
    }

    /// A page of the apps `keep` keeps, by name: at most `limit` from the `offset`th, and
    /// how many it keeps in all. Only the page's apps are copied.
    pub fn page(
        &self,
        keep: impl Fn(&AppState) -> bool,
        offset: usize,
        limit: usize,
    ) -> (Vec<AppState>, usize) {
        let Ok(all) = self.apps.lock() else {
            return (Vec::new(), 0);
        };
        let total = all.values().filter(|a| keep(a)).count();
        let kept = all.values().filter(|a| keep(a));
        (kept.skip(offset).take(limit).cloned().collect(), total)
    }

    /// How many apps there are.
    pub fn count(&self) -> usize {
        self.apps.lock().map_or(0, |all| all.len())
    }

    /// The clusters of the apps, each once, sorted.
    pub fn clusters(&self) -> Vec<String> {
        let Ok(all) = self.apps.lock() else {
            return Vec::new();
        };
        let clusters: std::collections::BTreeSet<&str> =
            all.values().map(|a| a.cluster.as_str()).collect();
        clusters.into_iter().map(str::to_string).collect()
    }

    /// The apps among `names` changed since version `seen` (every one of them: `None`).
    pub fn among(&self, names: &[String], seen: Option<u64>) -> Vec<AppState> {
        let Ok(all) = self.apps.lock() else {
            return Vec::new();
        };
        let changed = |s: &&AppState| seen.is_none_or(|seen| s.version > seen);
        (names.iter())
            .filter_map(|n| all.get(n).filter(changed).cloned())
            .collect()
    }

    /// One app.
    pub fn app(&self, name: &str) -> Option<AppState> {
        self.apps.lock().ok()?.get(name).cloned()
    }

    /// Tells each change: the newest version.
    pub fn changed(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// The app whose health was read longest ago (or never), if that is before `before`
    /// or before its last sync ended.
    pub fn stalest_health(&self, before: Timestamp) -> Option<String> {
        let all = self.apps.lock().ok()?;
        all.values()
            .filter(|s| s.state == State::Idle)
            .map(|s| (s.health.as_ref().map(|h| h.at), s))
            .filter(|(at, s)| {
                at.is_none_or(|at| {
                    at < before || s.last.as_ref().is_some_and(|l| at < l.finished_at)
                })
            })
            .min_by_key(|(at, _)| *at)
            .map(|(_, s)| s.name.clone())
    }
}

#[cfg(test)]
mod tests;
