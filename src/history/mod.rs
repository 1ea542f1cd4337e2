//! The sync history: one [`SyncRecord`] per sync attempt, kept in a JSON Lines log in
//! `state_dir/history/<app>.jsonl`.
//!
//! [`record`] is the schema of one record; it composes the types of the steps that made
//! its parts (the commit from [`source`](crate::source), object actions from
//! [`cluster`](crate::cluster)); [`rollout`] is a followed rollout's outcome and
//! timeline, which [`rollout::track`](crate::rollout::track) fills in. [`log`] appends,
//! reads and trims the log file.

pub mod log;
pub mod record;
pub mod rollout;

pub use crate::cluster::Action;
pub use crate::source::CommitInfo;
pub use log::{HistoryError, HistoryLog, Page, Summary};
pub use record::{
    commit_of_template, new_id, HookRecord, ObjectAction, ObjectHealth, Outcome, RecordError,
    RollbackRecord, RolloutRecord, SyncRecord, Trigger, WaveRecord,
};
pub use rollout::{
    CanaryStepRecord, CheckRecord, FollowedRollout, Measurement, RolloutOutcome, TimelineStep,
    Value,
};

/// An age as `berth history`, `berth status` and the status page say it: `45s`, `12m`,
/// `5h`, `3d`.
pub fn short_age(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;
    use std::io::Write;
    use std::time::Duration;

    use jiff::Timestamp;

    use super::*;
    use crate::manifest::ObjectKey;

    fn record(app: &str, id: &str, outcome: Outcome, at: Timestamp) -> SyncRecord {
        SyncRecord {
            duration_ms: 5,
            outcome,
            objects: vec![ObjectAction {
                key: ObjectKey {
                    group: "apps".into(),
                    kind: "Deployment".into(),
                    namespace: Some("shop".into()),
                    name: "web".into(),
                },
                action: Action::Configured,
                source: Some("web.yaml:1 (document 1)".into()),
                note: None,
            }],
            ..SyncRecord::new(id.into(), app, Trigger::Cli, at, None)
        }
    }

    #[test]
    fn append_and_read_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let log = HistoryLog::new(d.path());
        let now = Timestamp::now();
        log.append(&record("shop", "a", Outcome::Succeeded, now))
            .unwrap();
        log.append(&record("shop", "b", Outcome::Failed, now))
            .unwrap();
        let got = log.read("shop").unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].outcome, Outcome::Failed);
        assert_eq!(got[0].changes(), 1);
        let last_ok = log.last("shop", &[Outcome::Succeeded]).unwrap().unwrap();
        assert_eq!(last_ok.id, "a");
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_later_appends_stay_readable() {
        let d = tempfile::tempdir().unwrap();
        let log = HistoryLog::new(d.path());
        let now = Timestamp::now();
        log.append(&record("shop", "a", Outcome::Succeeded, now))
            .unwrap();
        let path = d.path().join("history/shop.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"id\":\"torn\",\"app\":\"sh").unwrap();
        assert_eq!(log.read("shop").unwrap().len(), 1);
        log.append(&record("shop", "c", Outcome::Succeeded, now))
            .unwrap();
        assert_eq!(ids(&log, "shop"), ["a", "c"]);
    }

    #[test]
    fn a_line_torn_inside_a_multi_byte_character_is_skipped() {
        let d = tempfile::tempdir().unwrap();
        let log = HistoryLog::new(d.path());
        let now = Timestamp::now();
        let path = d.path().join("history/shop.jsonl");
        // A crash in the middle of "🚀" (F0 9F 9A 80): the line is not valid UTF-8.
        let torn = b"{\"id\":\"torn\",\"subject\":\"ship \xF0\x9F";
        let tear = || {
            let mut file = OpenOptions::new().append(true).open(&path).unwrap();
            file.write_all(torn).unwrap();
        };
        log.append(&record("shop", "a", Outcome::Succeeded, now))
            .unwrap();
        tear();
        log.append(&record("shop", "c", Outcome::Succeeded, now))
            .unwrap();
        tear();
        assert_eq!(ids(&log, "shop"), ["a", "c"]);
        assert_eq!(log.read_all().unwrap().len(), 2);
        log.retain("shop", 1, Duration::from_secs(3600)).unwrap();
        assert_eq!(ids(&log, "shop"), ["c"]);
    }

    #[test]
    fn pages_go_newest_first_and_a_huge_line_is_skipped_unread() {
        let d = tempfile::tempdir().unwrap();
        let log = HistoryLog::new(d.path());
        let now = Timestamp::now();
        for id in ["a", "b", "c", "d", "e"] {
            log.append(&record("shop", id, Outcome::Succeeded, now))
                .unwrap();
        }
        let path = d.path().join("history/shop.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&vec![b'x'; log::MAX_RECORD + 10]).unwrap();
        f.write_all(b"\n").unwrap();
        drop(f);
        log.append(&record("shop", "f", Outcome::Failed, now))
            .unwrap();
        let page = log.page("shop", None, 2).unwrap();
        let ids: Vec<&str> = page.records.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["f", "e"]);
        assert!(page.more);
        assert_eq!(page.records[1].changes, 1);
        let next = log.page("shop", Some("e"), 10).unwrap();
        let ids: Vec<&str> = next.records.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["d", "c", "b", "a"]);
        assert!(!next.more);
        // An id the log does not hold gives nothing rather than the newest.
        assert!(log.page("shop", Some("zz"), 10).unwrap().records.is_empty());
        assert_eq!(log.find("shop", "c").unwrap().unwrap().id, "c");
        assert!(log.find("shop", "zz").unwrap().is_none());
        assert!(log.find("nobody", "c").unwrap().is_none());
        assert_eq!(log.newest("shop").unwrap().unwrap().id, "f");
        assert!(log.newest("nobody").unwrap().is_none());
    }

    #[test]
    fn a_record_too_large_to_read_whole_is_shown_from_its_head_not_hidden() {
        let d = tempfile::tempdir().unwrap();
        let log = HistoryLog::new(d.path());
        let now = Timestamp::now();
        log.append(&record("shop", "a", Outcome::Succeeded, now))
            .unwrap();
        // As an older berth wrote it: 200,000 errors, 24 MB in one line.
        let mut huge = record("shop", "b", Outcome::Failed, now);
        huge.errors = (0..200_000)
            .map(|i| RecordError {
                message: format!("x.yaml: document {i}: kind X missing apiVersion, a message of some length to fill the line"),
                source: None,
            })
            .collect();
        log.append(&huge).unwrap();
        let page = log.page("shop", None, 10).unwrap();
        let ids: Vec<&str> = page.records.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["b", "a"]);
        assert_eq!(page.records[0].outcome, Outcome::Failed);
        assert!(page.records[0]
            .note
            .as_deref()
            .unwrap()
            .contains("too large to read whole"));
        let found = log.find("shop", "b").unwrap().unwrap();
        assert_eq!((found.outcome, found.errors.len()), (Outcome::Failed, 0));
        let newest = log.newest("shop").unwrap().unwrap();
        assert_eq!(newest.id, "b");
    }

    #[test]
    fn the_newest_record_is_read_from_the_end_past_a_torn_line() {
        let d = tempfile::tempdir().unwrap();
        let log = HistoryLog::new(d.path());
        let now = Timestamp::now();
        // Over 64 KiB of records: the newest is found in the last chunk, then across
        // chunks when what ends the file is torn.
        for i in 0..400 {
            log.append(&record(
                "shop",
                &format!("r{i:03}"),
                Outcome::Succeeded,
                now,
            ))
            .unwrap();
        }
        assert_eq!(log.newest("shop").unwrap().unwrap().id, "r399");
        let path = d.path().join("history/shop.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&vec![b'{'; 100_000]).unwrap();
        drop(f);
        assert_eq!(log.newest("shop").unwrap().unwrap().id, "r399");
    }

    fn ids(log: &HistoryLog, app: &str) -> Vec<String> {
        log.read(app).unwrap().into_iter().map(|r| r.id).collect()
    }

    #[test]
    fn retention_by_count_and_age() {
        let d = tempfile::tempdir().unwrap();
        let log = HistoryLog::new(d.path());
        let now = Timestamp::now();
        let old = now
            .checked_sub(jiff::SignedDuration::from_hours(48))
            .unwrap();
        log.append(&record("shop", "old", Outcome::Succeeded, old))
            .unwrap();
        for id in ["a", "b", "c"] {
            log.append(&record("shop", id, Outcome::Succeeded, now))
                .unwrap();
        }
        log.retain("shop", 10, Duration::from_secs(24 * 3600))
            .unwrap();
        assert_eq!(log.read("shop").unwrap().len(), 3);
        log.retain("shop", 2, Duration::from_secs(24 * 3600))
            .unwrap();
        assert_eq!(ids(&log, "shop"), ["b", "c"]);
    }

    #[test]
    fn ids_sort_by_time() {
        let a = new_id(Timestamp::from_millisecond(1_700_000_000_000).unwrap());
        let b = new_id(Timestamp::from_millisecond(1_700_000_000_001).unwrap());
        assert!(a < b && a.len() == b.len(), "{a} {b}");
    }

    #[test]
    fn ids_of_the_same_millisecond_differ() {
        let at = Timestamp::from_millisecond(1_700_000_000_000).unwrap();
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| new_id(at)).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| id.len() == 11), "{ids:?}");
    }
}
