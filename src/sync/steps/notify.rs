//! The notify step: the record's events queued for the `[[notify]]` receivers, never
//! waited for (see [`crate::notifications`]).

use crate::history::SyncRecord;
use crate::sync::syncer::Syncer;

/// Tells the receivers what `rec` means to them (a failure, a recovery, …).
pub(in crate::sync) fn notify(syncer: &Syncer, rec: &SyncRecord) {
    syncer.notifications.observe(rec);
}
