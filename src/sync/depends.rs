//! The dependency gate (`depends_on`): an app syncs a commit only once each app it
//! depends on has synced its own current commit and ended it healthy. Read from the
//! cluster — each dependency's inventory says where it is ready and where it is held — so
//! that with sharding a dependency that another host syncs counts the same; why a
//! dependency failed comes from this host's history when it has the record.
//!
//! A wait writes no record: the caller asks again when a dependency's sync ends (and on
//! its interval), and records once, when the app is released (its sync's record) or gives
//! up on a failed dependency ([`Syncer::held_by`]).

use std::path::{Path, PathBuf};

use super::steps::{notify, record};
use super::syncer::{SyncOptions, Syncer};
use crate::config::AppConfig;
use crate::history::{new_id, Outcome, SyncRecord};

/// Why an app does not sync yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The dependency it waits on.
    pub on: String,
    /// What that dependency is doing: `rollout failed at 3f2a1c0 …`, `3f2a1c0 not synced
    /// yet`.
    pub reason: String,
    /// The dependency failed at its current commit: it will not become ready without a new
    /// commit or a person (the dependent gives up on this commit).
    pub failed: bool,
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "waiting on {}: {}", self.on, self.reason)
    }
}

impl Syncer {
    /// The first dependency of `app` that is not ready at its current commit (from a
    /// fetch the sync of `options` would take, shared with the dependency's own sync);
    /// `None` when every one is.
    pub async fn waiting_on(&self, app: &AppConfig, options: &SyncOptions) -> Option<Waiting> {
        let since = options.fetch_since();
        let config = self.config();
        // Asked together: one round trip, however many dependencies.
        let checks = app
            .depends_on
            .iter()
            .filter_map(|name| config.app(name))
            .map(|dependency| self.ready(dependency, since));
        futures::future::join_all(checks)
            .await
            .into_iter()
            .find_map(Result::err)
    }

    /// Whether `dependency` is ready at its current commit.
    async fn ready(
        &self,
        dependency: &AppConfig,
        since: std::time::Instant,
    ) -> Result<(), Waiting> {
        let waiting = |reason: String, failed: bool| Waiting {
            on: dependency.name.clone(),
            reason,
            failed,
        };
        let checkout = self
            .sources
            .fetch(dependency, since)
            .await
            .map_err(|e| waiting(format!("cannot fetch its commit: {e}"), true))?;
        let (sha, short) = (&checkout.commit.sha, checkout.commit.short());
        let namespace = &self.agent.inventory_namespace;
        let inventory = crate::cluster::inventory::load(
            &self.cluster(dependency).client,
            namespace,
            &dependency.name,
        )
        .await
        .map_err(|e| waiting(format!("cannot read its inventory: {e}"), false))?
        .map(|stored| stored.inventory)
        .unwrap_or_default();
        if let Some(held) = inventory.held_at(sha) {
            return Err(waiting(held.reason.clone(), true));
        }
        if inventory.ready.as_deref() == Some(sha.as_str()) {
            return Ok(());
        }
        let failed_here = self
            .history
            .read(&dependency.name)
            .ok()
            .and_then(|records| records.into_iter().last())
            .filter(|r| r.commit.as_ref().is_some_and(|c| &c.sha == sha))
            .filter(|r| {
                matches!(
                    r.outcome,
                    Outcome::Failed | Outcome::RolledBack | Outcome::Held
                )
            });
        Err(match failed_here {
            Some(r) => {
                let first = r.errors.first().map(|e| format!(": {}", e.message));
                let outcome = r.outcome.as_str();
                waiting(
                    format!("{outcome} at {short}{}", first.unwrap_or_default()),
                    true,
                )
            }
            None => waiting(format!("{short} not synced yet"), false),
        })
    }

    /// The one record of an app that gave up waiting: its dependency failed at its
    /// current commit (held, nothing applied).
    pub fn held_by(&self, app: &AppConfig, options: SyncOptions, waiting: &Waiting) -> SyncRecord {
        let started = jiff::Timestamp::now();
        let mut rec = SyncRecord {
            host: Some(self.host.clone()),
            outcome: Outcome::Held,
            note: Some(waiting.to_string()),
            ..SyncRecord::new(new_id(started), &app.name, options.trigger, started, None)
        };
        record::append(self, &mut rec);
        notify::notify(self, &rec);
        rec
    }
}

/// `state_dir/waiting/<app>`: why the daemon's app waits, for `berth status`.
fn note_path(state_dir: &Path, app: &str) -> PathBuf {
    state_dir.join("waiting").join(app)
}

/// Notes (or, released, forgets) why the app waits.
pub fn note_waiting(state_dir: &Path, app: &str, waiting: Option<&Waiting>) {
    let path = note_path(state_dir, app);
    let written = match waiting {
        Some(w) => crate::state::private_dir(&state_dir.join("waiting"))
            .and_then(|()| crate::state::write_private(&path, w.to_string().as_bytes())),
        None => match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    };
    if let Err(e) = written {
        tracing::warn!(app, path = %path.display(), error = %e, "cannot note why the app waits");
    }
}

/// Why the app waits, as the agent noted it: one line of at most 1 KiB (the file is read
/// no further).
pub fn waiting_note(state_dir: &Path, app: &str) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    crate::state::open_state(&note_path(state_dir, app))
        .ok()?
        .take(1024)
        .read_to_string(&mut text)
        .ok()?;
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_is_read_no_further_than_its_first_line_and_1_kib() {
        let state = tempfile::tempdir().unwrap();
        let waiting = Waiting {
            on: "operator".into(),
            reason: "3f2a1c0 not synced yet".into(),
            failed: false,
        };
        note_waiting(state.path(), "shop", Some(&waiting));
        assert_eq!(
            waiting_note(state.path(), "shop").as_deref(),
            Some("waiting on operator: 3f2a1c0 not synced yet")
        );
        // Written by someone else: a huge line, or a second one, is not taken whole.
        let path = state.path().join("waiting").join("shop");
        std::fs::write(&path, "x".repeat(1 << 20)).unwrap();
        assert_eq!(
            waiting_note(state.path(), "shop").map(|n| n.len()),
            Some(1024)
        );
        std::fs::write(&path, "first\nsecond\n").unwrap();
        assert_eq!(waiting_note(state.path(), "shop").as_deref(), Some("first"));
        note_waiting(state.path(), "shop", None);
        assert_eq!(waiting_note(state.path(), "shop"), None);
    }
}
