//! The record step: the sync's history record appended to the log (and kept within the
//! app's retention), and one log line at the level its outcome deserves.

use crate::history::{Outcome, RecordError, SyncRecord};
use crate::sync::{error::SyncError, syncer::Syncer};

/// Appends `rec` to the history and logs it. A record that cannot be written turns the
/// outcome into `failed` (with the reason among its errors): a sync is never reported as
/// succeeded when nobody can read what it did.
pub(in crate::sync) fn append(syncer: &Syncer, rec: &mut SyncRecord) {
    let agent = &syncer.agent;
    let appended = syncer.history.append(rec).and_then(|()| {
        syncer
            .history
            .retain(&rec.app, agent.history_keep, agent.history_max_age)
    });
    if let Err(e) = appended {
        rec.outcome = Outcome::Failed;
        let e = SyncError::Unrecorded(e);
        rec.errors.push(RecordError {
            message: e.to_string(),
            source: None,
        });
        tracing::error!(app = %rec.app, error = %e, "cannot write the sync history");
    }
    log(rec);
}

/// The id of the app's newest record when `rec` is held and that record says the same
/// (the same commit, the same reason): `rec` repeats it and is not written again.
pub(in crate::sync) fn held_before(syncer: &Syncer, rec: &SyncRecord) -> Option<String> {
    if rec.outcome != Outcome::Held {
        return None;
    }
    let last = syncer.history.newest(&rec.app).ok().flatten()?;
    let same = last.outcome == Outcome::Held && last.commit == rec.commit && last.note == rec.note;
    same.then(|| {
        tracing::debug!(app = %rec.app, record = %last.id, "still held");
        last.id
    })
}

/// The record's log line: failures at ERROR, so that `journalctl -p err` and level-based
/// alerts see them; interrupted and held syncs at WARN.
fn log(rec: &SyncRecord) {
    let commit = rec.commit.as_ref().map(|c| c.short()).unwrap_or("-");
    // A macro: tracing's levels are fixed per call site.
    macro_rules! logged {
        ($level:expr) => {
            tracing::event!(
                $level,
                app = %rec.app,
                commit,
                outcome = rec.outcome.as_str(),
                duration_ms = rec.duration_ms,
                changes = rec.changes(),
                errors = rec.errors.len(),
                trigger = rec.trigger.as_str(),
                "sync {}",
                rec.outcome.as_str()
            )
        };
    }
    match rec.outcome {
        Outcome::Failed => logged!(tracing::Level::ERROR),
        Outcome::Interrupted | Outcome::Held => logged!(tracing::Level::WARN),
        _ => logged!(tracing::Level::INFO),
    }
}
