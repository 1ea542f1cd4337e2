//! The notify step: the record's events queued for the `[[notify]]` receivers, never
//! waited for (see [`crate::notifications`]).

use super::Syncer;
use crate::history::SyncRecord;

/// Tells the receivers what `rec` means to them (a failure, a recovery, …).
pub(super) fn notify(syncer: &Syncer, rec: &SyncRecord) {
    syncer.notifications.observe(rec);
}
