//! Which events a sync record makes, and which of them are worth a message: a problem is
//! sent once until the outcome changes (or a day later, as a reminder), and `recovered`
//! closes it. The open problem of each app is kept in `state_dir/notifications.json`, so
//! a restart or a one-shot `berth sync` does not send it again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::config::NotifyEvent;
use crate::history::{Outcome, RolloutOutcome, SyncRecord};

/// An unchanged problem is sent again after this long (Alertmanager drops an alert that is
/// not sent again before its `endsAt`).
pub const REMIND_AFTER: Duration = Duration::from_secs(12 * 3600);

/// What a message says, taken from the record (not the record itself: a record can hold
/// thousands of objects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The event.
    pub event: NotifyEvent,
    /// The problem this message ends, when it ends one (`recovered`, or a new problem
    /// replacing another).
    pub resolves: Option<NotifyEvent>,
    /// The app (the set, when `set`).
    pub app: String,
    /// Whether the message is an app set's (`set_held`, or its `recovered`).
    pub set: bool,
    /// The record's id (`berth history show <id>`).
    pub record: String,
    /// The host that synced.
    pub host: Option<String>,
    /// The cluster the app is synced to.
    pub cluster: Option<String>,
    /// When the sync ended.
    pub at: Timestamp,
    /// The sync's outcome.
    pub outcome: Outcome,
    /// The commit: full SHA, subject, author.
    pub commit: Option<(String, String, String)>,
    /// The errors (at most [`MAX_ERRORS`]).
    pub errors: Vec<String>,
    /// The rollouts.
    pub rollouts: Vec<Rollout>,
    /// How many objects the sync changed.
    pub changes: usize,
}

impl Message {
    /// A message of `event` for `app`, on `host`, now, with no sync record (an image
    /// update, a preview made or removed).
    pub fn of(event: NotifyEvent, app: &str, host: &str, outcome: Outcome) -> Message {
        Message {
            event,
            resolves: None,
            app: app.to_string(),
            set: false,
            record: String::new(),
            host: Some(host.to_string()),
            cluster: None,
            at: Timestamp::now(),
            outcome,
            commit: None,
            errors: Vec::new(),
            rollouts: Vec::new(),
            changes: 0,
        }
    }

    /// With the commit `sha` and `subject` (berth's image update and its changes, a preview's
    /// commit and its ref).
    pub fn with_commit(mut self, sha: &str, subject: &str) -> Message {
        self.commit = Some((sha.to_string(), subject.to_string(), "berth".to_string()));
        self
    }
}

/// One Deployment's rollout, in a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rollout {
    /// `namespace/name`.
    pub deployment: String,
    /// `complete`, `failed`, `timed-out`, `interrupted`.
    pub outcome: String,
    /// What its status said last.
    pub message: String,
    /// The revision it rolled out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The revision it was rolled back to, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolled_back_to: Option<i64>,
}

/// Errors carried in one message.
pub const MAX_ERRORS: usize = 20;

/// The problem a record reports, if any.
pub fn problem(r: &SyncRecord) -> Option<NotifyEvent> {
    match r.outcome {
        Outcome::Failed if r.rollouts.iter().any(|x| x.rollback.is_some()) => {
            Some(NotifyEvent::RolledBack)
        }
        Outcome::Failed
            if r.rollouts.iter().any(|x| {
                matches!(
                    x.rollout.outcome,
                    RolloutOutcome::Failed | RolloutOutcome::TimedOut
                )
            }) =>
        {
            Some(NotifyEvent::RolloutFailed)
        }
        Outcome::Failed => Some(NotifyEvent::SyncFailed),
        Outcome::RolledBack => Some(NotifyEvent::RolledBack),
        Outcome::Held => Some(NotifyEvent::Held),
        Outcome::Succeeded | Outcome::NoChange | Outcome::Interrupted => None,
    }
}

/// An app's open problem: what was sent, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Open {
    /// The event sent.
    pub event: NotifyEvent,
    /// Digest of the event, the commit and the errors: an identical failure has the same.
    pub fingerprint: String,
    /// When it was sent.
    pub sent_at: Timestamp,
}

fn fingerprint(event: NotifyEvent, r: &SyncRecord) -> String {
    let head = [
        event.as_str().as_bytes(),
        r.commit.as_ref().map_or("", |c| c.sha.as_str()).as_bytes(),
    ];
    let errors = r
        .errors
        .iter()
        .flat_map(|e| [&[0u8][..], e.message.as_bytes()]);
    crate::digest::hex(&crate::digest::sha256_parts(head.into_iter().chain(errors))[..8])
}

/// The open problems of every app, kept in a file.
pub struct Problems {
    path: PathBuf,
    open: BTreeMap<String, Open>,
}

impl Problems {
    /// Reads `state_dir/notifications.json` (none, or unreadable: nothing is open).
    pub fn load(state_dir: &Path) -> Self {
        let path = state_dir.join("notifications.json");
        let open = read(&path).unwrap_or_default();
        Problems { path, open }
    }

    /// The messages record `r` makes, given what was sent before; remembers what it sends.
    pub fn messages(&mut self, r: &SyncRecord, now: Timestamp) -> Vec<Message> {
        let mut events = match problem(r) {
            None if r.outcome == Outcome::Interrupted => Vec::new(),
            found => {
                let found = found.map(|event| (event, fingerprint(event, r)));
                self.settle(&r.app, found, now)
            }
        };
        if r.outcome == Outcome::Succeeded && r.changes() > 0 {
            events.push((NotifyEvent::Synced, None));
        }
        events
            .into_iter()
            .map(|(event, resolves)| message(r, event, resolves))
            .collect()
    }

    /// The messages an app set's listing on `host` makes: `set_held` when it keeps its
    /// last apps for `problem` (once, as an app's problem is), `recovered` when it lists
    /// its commit again.
    pub fn set_messages(
        &mut self,
        set: &str,
        problem: Option<&str>,
        host: &str,
        now: Timestamp,
    ) -> Vec<Message> {
        let event = NotifyEvent::SetHeld;
        let found = problem.map(|p| {
            let digest = crate::digest::sha256_parts([event.as_str().as_bytes(), p.as_bytes()]);
            (event, crate::digest::hex(&digest[..8]))
        });
        let events = self.settle(&format!("set:{set}"), found, now);
        let errors: Vec<String> = problem.map(str::to_string).into_iter().collect();
        events
            .into_iter()
            .map(|(event, resolves)| Message {
                event,
                resolves,
                app: set.to_string(),
                set: true,
                record: String::new(),
                host: Some(host.to_string()),
                cluster: None,
                at: now,
                outcome: if event == NotifyEvent::Recovered {
                    Outcome::Succeeded
                } else {
                    Outcome::Held
                },
                commit: None,
                errors: errors.clone(),
                rollouts: Vec::new(),
                changes: 0,
            })
            .collect()
    }

    /// The events `key`'s problem now (`found`: its event and fingerprint) makes, given
    /// what was sent before; remembers what it sends.
    ///
    /// What was sent is read again first: another process (`berth sync` or `berth
    /// rollback` beside `berth run`) may have sent the app's last problem, and a `held`
    /// after its `rolled_back` must say it replaces it. The app's lock, held by the caller,
    /// keeps the app's entry to one writer.
    fn settle(
        &mut self,
        key: &str,
        found: Option<(NotifyEvent, String)>,
        now: Timestamp,
    ) -> Vec<(NotifyEvent, Option<NotifyEvent>)> {
        if let Some(on_disk) = read(&self.path) {
            self.open = on_disk;
        }
        let Some((event, fingerprint)) = found else {
            let closed = self.open.remove(key);
            if closed.is_some() {
                self.save();
            }
            return closed
                .map(|o| (NotifyEvent::Recovered, Some(o.event)))
                .into_iter()
                .collect();
        };
        let open = self.open.get(key);
        let repeat = open.is_some_and(|o| {
            o.fingerprint == fingerprint
                && now.duration_since(o.sent_at).as_secs() < REMIND_AFTER.as_secs() as i64
        });
        if repeat {
            return Vec::new();
        }
        let resolves = open.map(|o| o.event).filter(|e| *e != event);
        let sent = Open {
            event,
            fingerprint,
            sent_at: now,
        };
        self.open.insert(key.to_string(), sent);
        self.save();
        vec![(event, resolves)]
    }

    fn save(&self) {
        let written = serde_json::to_vec(&self.open)
            .map_err(std::io::Error::other)
            .and_then(|bytes| crate::state::write_private(&self.path, &bytes));
        if let Err(e) = written {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot keep the notifications' state: a restart may send an open problem again");
        }
    }
}

/// The open problems kept in `path`, when it can be read.
fn read(path: &Path) -> Option<BTreeMap<String, Open>> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn message(r: &SyncRecord, event: NotifyEvent, resolves: Option<NotifyEvent>) -> Message {
    Message {
        event,
        resolves,
        app: r.app.clone(),
        set: false,
        record: r.id.clone(),
        host: r.host.clone(),
        cluster: r.cluster.clone(),
        at: r.finished_at,
        outcome: r.outcome,
        commit: r
            .commit
            .as_ref()
            .map(|c| (c.sha.clone(), c.subject.clone(), c.author.clone())),
        errors: r
            .errors
            .iter()
            .take(MAX_ERRORS)
            .map(|e| e.message.clone())
            .collect(),
        rollouts: r
            .rollouts
            .iter()
            .map(|x| Rollout {
                deployment: x.deployment.qualified_name(),
                outcome: x.rollout.outcome.as_str().to_string(),
                message: x.rollout.message.clone(),
                revision: x.rollout.revision,
                rolled_back_to: x.rollback.as_ref().map(|b| b.to_revision),
            })
            .collect(),
        changes: r.changes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{RecordError, Trigger};

    fn record(app: &str, outcome: Outcome, error: Option<&str>) -> SyncRecord {
        let mut r = SyncRecord::new("r1".into(), app, Trigger::Interval, Timestamp::now(), None);
        r.outcome = outcome;
        r.errors = error
            .map(|m| RecordError {
                message: m.into(),
                source: None,
            })
            .into_iter()
            .collect();
        r
    }

    fn events(ms: &[Message]) -> Vec<(NotifyEvent, Option<NotifyEvent>)> {
        ms.iter().map(|m| (m.event, m.resolves)).collect()
    }

    #[test]
    fn a_repeated_failure_is_sent_once_and_recovery_closes_it() {
        use NotifyEvent::*;
        let dir = tempfile::tempdir().unwrap();
        let mut p = Problems::load(dir.path());
        let now = Timestamp::now();
        let failed = record("shop", Outcome::Failed, Some("boom"));
        assert_eq!(events(&p.messages(&failed, now)), [(SyncFailed, None)]);
        assert!(
            p.messages(&failed, now).is_empty(),
            "the same failure: once"
        );
        let other = record("shop", Outcome::Failed, Some("another"));
        assert_eq!(events(&p.messages(&other, now)), [(SyncFailed, None)]);
        let held = record("shop", Outcome::Held, None);
        assert_eq!(events(&p.messages(&held, now)), [(Held, Some(SyncFailed))]);
        let interrupted = record("shop", Outcome::Interrupted, None);
        assert!(p.messages(&interrupted, now).is_empty());

        let restarted = &mut Problems::load(dir.path());
        assert!(
            restarted.messages(&held, now).is_empty(),
            "kept over a restart"
        );
        let later = now + jiff::SignedDuration::from_secs(13 * 3600);
        assert_eq!(
            events(&restarted.messages(&held, later)),
            [(Held, None)],
            "a reminder"
        );
        let ok = record("shop", Outcome::NoChange, None);
        assert_eq!(
            events(&restarted.messages(&ok, later)),
            [(Recovered, Some(Held))]
        );
        assert!(
            restarted.messages(&ok, later).is_empty(),
            "nothing open: nothing to say"
        );
        assert_eq!(
            events(&restarted.messages(&failed, later)),
            [(SyncFailed, None)],
            "failing again after a recovery is news"
        );
    }

    #[test]
    fn a_problem_sent_by_another_process_is_the_one_replaced() {
        use NotifyEvent::*;
        let dir = tempfile::tempdir().unwrap();
        let now = Timestamp::now();
        // `berth run` loaded its state before a one-shot `berth rollback` sent its message.
        let mut daemon = Problems::load(dir.path());
        let mut one_shot = Problems::load(dir.path());
        let rolled_back = record("shop", Outcome::RolledBack, None);
        assert_eq!(
            events(&one_shot.messages(&rolled_back, now)),
            [(RolledBack, None)]
        );
        let held = record("shop", Outcome::Held, None);
        assert_eq!(
            events(&daemon.messages(&held, now)),
            [(Held, Some(RolledBack))]
        );
    }

    #[test]
    fn a_held_set_is_one_message_until_it_lists_again() {
        use NotifyEvent::*;
        let dir = tempfile::tempdir().unwrap();
        let mut p = Problems::load(dir.path());
        let now = Timestamp::now();
        let empty = Some("it generates no app at commit 1a2b3c4 where it generated 6 apps before");
        let sent = p.set_messages("addons", empty, "h/1", now);
        assert_eq!(events(&sent), [(SetHeld, None)]);
        assert!(sent[0].set && sent[0].app == "addons" && sent[0].errors.len() == 1);
        assert!(
            p.set_messages("addons", empty, "h/1", now).is_empty(),
            "once"
        );
        assert!(
            p.messages(&record("addons", Outcome::NoChange, None), now)
                .is_empty(),
            "an app of the set's name is another key"
        );
        assert_eq!(
            events(&p.set_messages("addons", None, "h/1", now)),
            [(Recovered, Some(SetHeld))]
        );
        assert!(p.set_messages("addons", None, "h/1", now).is_empty());
    }

    #[test]
    fn a_record_names_its_problem() {
        let failed = record("a", Outcome::Failed, Some("x"));
        assert_eq!(problem(&failed), Some(NotifyEvent::SyncFailed));
        assert_eq!(
            problem(&record("a", Outcome::RolledBack, None)),
            Some(NotifyEvent::RolledBack)
        );
        assert_eq!(problem(&record("a", Outcome::Succeeded, None)), None);
    }
}
